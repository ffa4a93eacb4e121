"""Exit codes shared by every `codefy` subcommand (their argument types are the client's,
`client/flags.py`, which `%codefy run` shares)."""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool a closed pipe ended
