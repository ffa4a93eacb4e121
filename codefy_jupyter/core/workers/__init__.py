"""Worker agents as the control plane sees them: the registry, the handshake's decisions,
enrollment and access, the executor that runs a run on a worker, and the service that ties a
connection to them."""
