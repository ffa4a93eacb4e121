"""Runs: the run service (submit, schedule, execute, cancel, delete), one record per run
(run_records.py), the request schema, how a run ends (endings.py) and what a restart does with runs
left active (recovery.py), the in-process executor and the event log. The lifecycle table and the
execution contract they follow stand on core's ground floor (core/contract/)."""
