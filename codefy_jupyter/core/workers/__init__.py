"""Worker agents as the control plane sees them: the registry, the handshake's decisions, enrollment
and access, a sans-IO session per connection (session.py), the executor that runs a run on a worker
(with its run record, acks and frame translation), and the service that ties a connection to them.
The worker side sees the run service only as the `RunHost` of host.py."""
