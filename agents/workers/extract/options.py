"""The extraction's options and exit codes (no numpy, no torch: the command line and the
agent import them cheaply)."""

from __future__ import annotations

from ...contract import exits
from ...contract.kinds import ExtractOptions as _ExtractOptions

# the codes are the contract's (agents/contract/exits.py): the audit's refusal is EXIT_DATA
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_DISK = exits.EXIT_OK, exits.EXIT_FAIL, exits.EXIT_USAGE, exits.EXIT_DISK
EXIT_AUDIT, EXIT_STOPPED = exits.EXIT_DATA, exits.EXIT_TERMINATED


# the options are the kind's: agents/contract/kinds.py, the one source of flags and fleet keys
ExtractOptions = _ExtractOptions
