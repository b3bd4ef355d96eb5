"""The SSH transport's errors: each one an :class:`~remote.link.AgentError` that names the node."""

from __future__ import annotations

from .link import AgentError, AgentFailed


class SshError(AgentError):
    """A node that cannot be reached or used over SSH; ``str()`` names the node."""


class ConnectFailed(SshError):
    """No SSH connection: no route, refused, timed out, name unknown, dropped."""


class AuthFailed(SshError):
    """The server refused every key offered for the user."""


class HostKeyError(SshError):
    """The server's host key could not be trusted."""


class HostKeyUnknown(HostKeyError):
    """No known_hosts file records a key for this host (and the node is not accept-new)."""


class HostKeyChanged(HostKeyError):
    """A known_hosts file records another key for this host. Always refused."""

    def __init__(self, node: str, reason: str, path: str, line: int) -> None:
        self.path, self.line = path, line
        super().__init__(node, reason)


class HostCertificateRefused(HostKeyError):
    """The host presented a certificate that no @cert-authority line makes valid for it:
    an unknown or revoked CA, expired or not yet valid, or principals that do not name it."""


class AgentStartFailed(SshError, AgentFailed):
    """Connected, but the agent did not start or did not say hello: the node is reachable."""
