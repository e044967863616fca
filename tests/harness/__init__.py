"""Real servers for tests: fake-gcs-server, functions-framework processes, an Executions recorder."""
