"""`python -m codefy_jupyter.cli`: the `codefy` command."""

import sys

from .main import main

sys.exit(main())
