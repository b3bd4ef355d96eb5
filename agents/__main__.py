import sys

from gpudeck.agents.agent import main

sys.exit(main())
