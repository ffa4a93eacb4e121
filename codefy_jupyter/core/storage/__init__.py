"""Files for worker runs (seed: storage): which runs use files (run_needs.py), how a placed run's
files reach its worker (plan.py: mount, same machine, transfer), and the transfer backend's
control-plane side (transfer.py: input hashes, uploads), and the S3 backend's (s3.py: the bucket,
inputs uploaded once, per-run credentials, removal)."""
