"""The extraction's options and exit codes (no numpy, no torch: the command line and the
agent import them cheaply)."""

from __future__ import annotations

from ...contract.kinds import ExtractOptions as _ExtractOptions

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_DISK, EXIT_AUDIT, EXIT_STOPPED = 0, 1, 2, 3, 4, 143


# the options are the kind's: agents/contract/kinds.py, the one source of flags and fleet keys
ExtractOptions = _ExtractOptions
