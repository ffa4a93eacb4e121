"""Control-plane logic (no tornado, no jupyter_server): devices, and later the store, run service,
scheduling, events, workers."""
