"""Which transport carries a node's agent: the one module that knows them all.

A node without a host (the node named ``local`` by default) runs its agent as a subprocess
of the console (:mod:`remote.local`); every other node over SSH (:mod:`remote.ssh`).
asyncssh is imported only when a fleet has a node of the second kind.
"""

from __future__ import annotations

from typing import Optional

from .fleet import Node
from .link import Transport

KIND_LOCAL = "local"  # the kinds of transport: keys of the transports a FleetClient holds
KIND_SSH = "ssh"


def transport_kind(node: Node) -> str:
    return KIND_LOCAL if node.local else KIND_SSH


def new_transport(kind: str) -> Transport:
    """A transport of ``kind`` with its default settings."""
    if kind == KIND_LOCAL:
        from .local import LocalTransport
        return LocalTransport()
    if kind == KIND_SSH:
        from .ssh import SshTransport  # asyncssh only when a fleet has remote nodes
        return SshTransport()
    raise ValueError(f"no transport of kind {kind!r}; expected {KIND_LOCAL!r} or {KIND_SSH!r}")


def transport_for(node: Node, held: Optional[dict[str, Transport]] = None) -> Transport:
    """The transport for ``node``: the one of its kind in ``held`` (a FleetClient's, keyed by
    kind, as tests and benchmarks pass them), else a new one, which is added to ``held``."""
    kind = transport_kind(node)
    if held is None:
        return new_transport(kind)
    if kind not in held:
        held[kind] = new_transport(kind)
    return held[kind]
