"""The one base of what an operator must read: what went wrong, where, and the fix.

``str()`` is ``where: what; fix``. Fleet file mistakes (``where`` is ``file:line``), a node
that cannot be reached (``where`` is ``node NAME``), a name the fleet does not have: each is an
:class:`OperatorError`, so a command prints one line and a screen shows one notice for any of
them, and no message travels as a ``KeyError``'s quoted repr."""

from __future__ import annotations


class OperatorError(Exception):
    def __init__(self, what: str, where: str = "", fix: str = "") -> None:
        self.what, self.where, self.fix = what, where, fix
        super().__init__(self.text())

    def text(self) -> str:
        return (f"{self.where}: " if self.where else "") + self.what + (f"; {self.fix}" if self.fix else "")

    def __str__(self) -> str:
        return self.text()


class UnknownName(OperatorError):
    """A job or node the fleet file does not declare; ``fix`` lists those it does."""


class Refusal(ValueError):
    """A request a node refuses because of what it was asked (a partition that does not exist,
    more GPUs than any node has): the fleet file's mistake, not the node's failure. The console
    exits 2 for it, as for a mistake in the fleet file itself."""


class KindedRefusal(ValueError):
    """A node's refusal with a ``kind`` (the reply's ``refusal``), which a command gives an exit
    code of its own (console/commands/common.py)."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)

    @property
    def usage(self) -> bool:
        return False


class AdoptRefused(KindedRefusal):
    """A node's refusal of an ``adopt``, with its ``kind`` (one of :data:`ADOPT_REFUSALS`)."""

    def __init__(self, kind: str, message: str) -> None:
        assert kind in ADOPT_REFUSALS, kind
        super().__init__(kind, message)

    @property
    def usage(self) -> bool:
        """The command's mistake (no such process, a name the node holds): exit 2."""
        return self.kind in ("no_such_pid", "name_taken")


HOLDS_NODE = "holds_node"


class HoldsTheNode(KindedRefusal):
    """An adopt or a kill refused because the process's kill would take the node down: it is
    init, a gpudeck agent or an ancestor of one, or its tree or group holds an agent, an sshd
    session or another job's process (agents/jobs/holds.py). Nothing was adopted or signalled."""

    def __init__(self, message: str) -> None:
        super().__init__(HOLDS_NODE, message)


# the kinds of an adopt's refusal; `no_such_pid` and `name_taken` are the command's mistake (exit 2)
ADOPT_REFUSALS = ("no_such_pid", "name_taken", "not_yours", "pid_reused", "owned", HOLDS_NODE)
