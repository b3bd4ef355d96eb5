"""The local transport: the agent as a subprocess of the console, over pipes."""

from __future__ import annotations

import asyncio
import os
import sys

from gpudeck.remote.fleet import Node
from gpudeck.remote.link import LINE_LIMIT, AgentLink, agent_argv

__all__ = ["LocalTransport", "agent_argv"]


class LocalTransport:
    async def open(self, node: Node) -> AgentLink:
        python = node.python or sys.executable
        env = dict(os.environ)  # the console's interpreter: the agent runs from the same install
        proc = await asyncio.create_subprocess_exec(
            *agent_argv(node, python), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=None if os.environ.get("GPUDECK_AGENT_STDERR") else asyncio.subprocess.DEVNULL,
            env=env, limit=LINE_LIMIT)

        async def close() -> None:
            if proc.stdin and not proc.stdin.is_closing():
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()

        assert proc.stdout is not None and proc.stdin is not None
        link = AgentLink(node, proc.stdout, proc.stdin, close)
        link.process = proc  # type: ignore[attr-defined]
        return link
