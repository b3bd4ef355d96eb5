import sys

from gpudeck.console.cli import main

sys.exit(main())
