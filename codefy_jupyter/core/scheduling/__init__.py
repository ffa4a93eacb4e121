"""Pure scheduling decisions: per-device FIFOs, slot limits, device sets, card groups, placement on
this server or a worker. No I/O; the run service asks, these answer."""
