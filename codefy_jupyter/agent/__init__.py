"""The worker agent (`codefy agent start`): dials out to a control plane over /codefy/ws/worker and
runs each assigned run in a subprocess of its own.

The agent process never imports torch or `codefy_jupyter.server` (its WebSocket client is tornado's,
installed with jupyter-server anyway): it speaks the protocol of `codefy_jupyter.wire.protocol`
and keeps each run's frames in `spool.RunSpool` until the control plane acknowledges them. Only the
run subprocess (`child.py`, forked from the warm process `warm.py` or spawned) imports torch.

Modules: connection (the socket's life), delivery (spools, replay, acks), runner + launch (one
process per run), warm (the fork server), child (the run process), isolation (pure decisions),
frames (pure translations), identity (devices, catalog, machine id), tls, credentials (enrollment,
the stored worker token), pipe (agent <-> run process messages), spool (a run's frames on disk),
retention (the finished runs' folders it keeps), catalog (the node packs a run process would see).
Its command line, `codefy agent start/stop`, is `cli/agent.py`.
"""
