"""The control plane: the adapters that talk to GCS, Workflows, Pub/Sub and the Hub, and the stage logic built on them."""
