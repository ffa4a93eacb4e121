"""The control plane's logic, with no tornado and no jupyter_server (the server/ package drives it):
runs/ (the run service and its lifecycle), scheduling/ (pure placement decisions), workers/ (agents
as the control plane sees them), store/ (the SQLite database); config.py (every setting) and
errors.py (the one error root) beside them."""
