import sys

from gpudeck.agents.start import main

sys.exit(main())
