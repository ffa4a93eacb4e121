"""Runs: the run service (submit, schedule, execute, cancel, delete), one record per run
(records.py), the request schema, the lifecycle table every state change goes through, how a run
ends (endings.py) and what a restart does with runs left active (recovery.py), the executors and
the event log."""
