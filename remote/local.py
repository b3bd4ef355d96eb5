"""The local transport: the agent as a subprocess of the console, over pipes.

The agent's stderr is kept (its last lines), so an agent that cannot start says why: an
unwritable home, a bad argument. With ``$GPUDECK_AGENT_STDERR`` set it is also copied to the
console's stderr as it comes.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sys

from .fleet import Node
from .link import LINE_LIMIT, AgentFailed, AgentLink, agent_argv, describe_end

__all__ = ["LocalTransport", "agent_argv"]

STDERR_LINES = 30


class LocalAgentLink(AgentLink):
    process: asyncio.subprocess.Process
    stderr_tail: collections.deque[str]
    stderr_task: asyncio.Task[None]

    def stderr_lines(self) -> list[str]:
        return list(self.stderr_tail)

    async def explain_end(self) -> str:
        try:
            await asyncio.wait_for(self.process.wait(), 2.0)
            await asyncio.wait_for(asyncio.shield(self.stderr_task), 1.0)
        except asyncio.TimeoutError:
            pass
        code = self.process.returncode
        signal_name = signal.Signals(-code).name if code is not None and code < 0 else None
        return describe_end(self.node.name, code if code is None or code >= 0 else None, signal_name,
                            list(self.stderr_tail))


async def _collect(stream: asyncio.StreamReader, tail: collections.deque[str]) -> None:
    """Drain the agent's stderr (an undrained pipe would block it), keeping its last lines."""
    echo = bool(os.environ.get("GPUDECK_AGENT_STDERR"))
    while True:
        try:
            line = await stream.readline()
        except (ValueError, OSError):  # a line over the limit: drop it, go on
            continue
        if not line:
            return
        text = line.decode(errors="replace").rstrip()
        tail.append(text[:4096])
        if echo:
            print(text, file=sys.stderr)


class LocalTransport:
    async def open(self, node: Node) -> AgentLink:
        python = node.python or sys.executable
        env = dict(os.environ)  # the console's interpreter: the agent runs from the same install
        try:
            proc = await asyncio.create_subprocess_exec(
                *agent_argv(node, python), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, limit=LINE_LIMIT)
        except OSError as exc:  # this machine is there: its agent is what cannot start
            raise AgentFailed(node.name, f"cannot start the agent ({python}): {exc.strerror or exc}") from None
        tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
        stdout = proc.stdout
        stderr_task = asyncio.get_running_loop().create_task(_collect(proc.stderr, tail))

        async def close() -> None:
            if proc.stdin and not proc.stdin.is_closing():
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except asyncio.TimeoutError:
                proc.kill()
                # asyncio's wait() also waits for the pipes' EOF, which a stdout left paused by an
                # overlong line never reads: drain what the dead agent left, every wait bounded
                for step in (stdout.read, proc.wait):
                    try:
                        await asyncio.wait_for(step(), 5.0)
                    except (asyncio.TimeoutError, ValueError, OSError, RuntimeError):
                        pass  # RuntimeError: the link's reader is on it, and sees the EOF itself
            try:
                await asyncio.wait_for(stderr_task, 1.0)
            except asyncio.TimeoutError:
                stderr_task.cancel()

        link = LocalAgentLink(node, proc.stdout, proc.stdin, close)
        link.process, link.stderr_tail, link.stderr_task = proc, tail, stderr_task
        return link
