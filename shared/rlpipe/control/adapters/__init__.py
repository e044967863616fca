"""The control plane's doors to the services it uses (Cloud Storage, Pub/Sub, Workflows, the Hub,
Cloud Logging) and what every layer above needs: settings, structured logs, redaction, event
parsing, the callers' identities."""
