"""A run's life in the ledger: intake, the record's store and its compare-and-swap, retry rounds,
promotion, the quality gate, what the buckets hold for a stage, its files, data pins, publishing,
metrics and the run's page."""
