"""The `rlpipe` command line: run operations, the live watch view and the local demo."""
