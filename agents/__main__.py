import sys

from agents.agent import main

sys.exit(main())
