"""Who owns a node's jobs, as the console and the node both say it (agents/jobs/owners.py keeps
the owners): an owner is a fleet's ``[fleet] name``, or ``host:/abs/path`` for a fleet file
without one; a name holds no ':' (remote/fleet.py's FLEET_NAME), so the two never mix."""

from __future__ import annotations

from .vocab import NodeState

# a reply's refusal kind (exit 7), the same token as the node's state in `status --json`
OWNED_ELSEWHERE = NodeState.OWNED_ELSEWHERE.value


def owner_text(owner: str) -> str:
    """An owner as a person reads it: ``fleet 'lab'`` for a named fleet, ``fleet file
    host:/path`` for one without a name."""
    if not owner:
        return "no fleet file"
    return f"fleet file {owner}" if ":" in owner else f"fleet {owner!r}"
