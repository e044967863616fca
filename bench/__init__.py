"""rlpipe benchmarks: `make bench` runs them all and writes bench/RESULTS.md (see bench/README.md)."""
