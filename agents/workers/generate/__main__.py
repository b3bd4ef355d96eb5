"""``python -m gpudeck.agents.workers.generate``."""

import sys

from gpudeck.agents.workers.generate.cli import main

if __name__ == "__main__":
    sys.exit(main())
