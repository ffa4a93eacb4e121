"""Test-only fault hooks of the study coordinator: with CODEFY_TEST_CRASH_AFTER_SUBMIT=N in the
environment, the process exits at once (os._exit) after the N-th child's submit returned and before
`attempt_submitted` is written: the window the stamp exists for. With CODEFY_TEST_CRASH_BEFORE_SUBMIT=N
it exits after the N-th `attempt_submitting` is durable and before that child is submitted (no run
carries the stamp: the attempt is lost). The crash tests set them; nothing else should."""

from __future__ import annotations

import os

CRASH_AFTER_SUBMIT_ENV = "CODEFY_TEST_CRASH_AFTER_SUBMIT"
CRASH_BEFORE_SUBMIT_ENV = "CODEFY_TEST_CRASH_BEFORE_SUBMIT"


def crash_hook(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value and value.isdigit() else None
