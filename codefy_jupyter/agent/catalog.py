"""The agent's catalog helper: a short subprocess that discovers the node packs the way a run process
does and prints the node catalog and the environment fingerprint as one JSON line.

The agent itself never imports torch or the node packs (seed: node catalog and fingerprint), so it
asks this helper once at start: `python -m codefy_jupyter.agent.catalog`.
"""

from __future__ import annotations

import json
import sys


def gather() -> dict:
    from ..wire.fingerprint import environment_document
    from ..engine import default_registry

    catalog = default_registry().catalog()
    return {"catalog_hash": catalog["hash"], "node_types": catalog["types"],
            "fingerprint": environment_document(catalog)}


def main() -> None:
    json.dump(gather(), sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
