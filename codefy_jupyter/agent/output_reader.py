"""The helper process that reads one port of a run's recorded outputs on a worker: it loads the
port's file on the CPU with a memory map and prints the answer wire/output_reads.py computes, as
`[status, body]` JSON on stdout. A process of its own because the agent never imports torch; one
per read, so a damaged file or a huge value ends with its own read.

`python -m codefy_jupyter.agent.output_reader <outputs folder> <run id> <kind> <query JSON>`
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..wire.output_reads import Answer, answer, read_index

# Test hook: make each read this many seconds slow (the agent's 504 is tested with it).
DELAY_ENV = "CODEFY_TEST_OUTPUT_READ_DELAY_S"


def answer_from_folder(folder: Path, run_id: str, kind: str, query: dict[str, Any]) -> Answer:
    """The control plane's answer (core/runs/recorded.py), over the files instead of memory."""
    from ..engine.recorded import load_port, summarize

    index = read_index(folder)
    return answer(run_id, kind, query, index,
                  (lambda n, p: summarize(load_port(folder, index, n, p))) if index is not None else None)


def main(argv: list[str] | None = None) -> int:
    folder, run_id, kind, query = (argv if argv is not None else sys.argv[1:])[:4]
    delay = float(os.environ.get(DELAY_ENV) or 0)
    if delay > 0:
        time.sleep(delay)
    status, body = answer_from_folder(Path(folder), run_id, kind, json.loads(query))
    sys.stdout.write(json.dumps([status, body], allow_nan=False))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
