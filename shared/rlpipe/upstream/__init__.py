"""Upstream watch: new Hugging Face releases become pinned requests."""
