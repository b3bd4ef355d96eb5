"""``python -m gpudeck.agents.staging PLAN -- COMMAND...``: the staging step (run.py)."""

import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
