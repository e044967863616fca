"""Level-triggered repair across ledgers, executions and workloads."""
