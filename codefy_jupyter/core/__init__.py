"""The control plane's logic, with no tornado and no jupyter_server (the server/ package drives it).
Its rooms, bottom up (tests/unit/test_layout.py holds the order; nothing imports upward):
contract/ (the run contract every room stands on: the lifecycle table, RunSpec and outcomes, the
event-log and worker-side interfaces), with config.py (every setting), errors.py (the one error
root), telemetry.py and devices.py beside it; store/ (the database); scheduling/ (pure placement
decisions); runs/ (the run service), workers/ (agents as the control plane sees them) and storage/
(files of worker runs); experiments/ (sweeps and studies)."""
