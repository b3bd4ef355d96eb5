import sys

from .node.start import main

sys.exit(main())
