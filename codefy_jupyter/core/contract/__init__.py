"""The ground floor of core/: the run contract every room stands on. The run lifecycle table
(lifecycle.py), what an executor is handed and answers (execution.py: RunSpec, RunHandle,
ExecutionOutcome, the Executor interface), the event-log interface a run's events go through
(event_log.py) and the worker side the run service is handed (worker_side.py). Nothing here imports
another room of core/."""
