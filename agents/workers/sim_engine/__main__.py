"""``python -m gpudeck.agents.workers.sim_engine``."""

import sys

from gpudeck.agents.workers.sim_engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
