"""``python -m gpudeck.agents.workers.extract``."""

import sys

from gpudeck.agents.workers.extract.cli import main

if __name__ == "__main__":
    sys.exit(main())
