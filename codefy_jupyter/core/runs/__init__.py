"""Runs: the run service (submit, schedule, execute, cancel, delete, recover), the request schema,
the lifecycle table every state change goes through, the executors and the event log."""
