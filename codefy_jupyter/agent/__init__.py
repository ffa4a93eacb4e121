"""The worker agent (`codefy agent start`): dials out to a control plane over /codefy/ws/worker and
runs each assigned run in a subprocess of its own.

The agent process never imports torch, tornado or `codefy_jupyter.server`: it speaks the protocol
of `codefy_jupyter.core.worker_protocol` and keeps each run's frames in `spool.RunSpool` until the
control plane acknowledges them. Only the run subprocess (`child.py`) imports the engine's torch nodes.
"""
