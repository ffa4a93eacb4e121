"""Where an S3-backend run's files live in the bucket (seed: storage, S3). Both ends compute keys
here, so the agent's upload and the control plane's artifact row, retention and delete agree.

    inputs/<sha256>              an input, uploaded once by the control plane, shared by every run
    runs/<run id>/checkpoint/... what the run wrote under its folder's `checkpoints/` (TrainingLoop)
    runs/<run id>/output/...     everything else the run wrote (a SaveModel's file, ...)

Retention and delete remove a run's prefix except `output/` (a file-writing node's result outlives
the run, as on the other backends), and except `checkpoint/` of a run that ended interrupted (its
resume point).
"""

from __future__ import annotations

INPUTS = "inputs/"
CHECKPOINT = "checkpoint/"
OUTPUT = "output/"
# The run folder's checkpoint directory (engine/nodes/training.py writes there).
CHECKPOINTS_DIR = "checkpoints/"


def run_prefix(run_id: str) -> str:
    return f"runs/{run_id}/"


def input_key(sha256: str) -> str:
    return INPUTS + sha256


def object_key(prefix: str, relative: str) -> str:
    """The key of the file at `relative` (a safe relative path) in the run's folder."""
    if relative.startswith(CHECKPOINTS_DIR):
        return prefix + CHECKPOINT + relative[len(CHECKPOINTS_DIR):]
    return prefix + OUTPUT + relative


def kept(prefix: str, key: str, *, interrupted: bool) -> bool:
    """Whether retention and delete leave `key` of the run at `prefix` in place."""
    rest = key[len(prefix):] if key.startswith(prefix) else ""
    return rest.startswith(OUTPUT) or (interrupted and rest.startswith(CHECKPOINT))
