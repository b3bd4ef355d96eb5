"""gpudeck's node side: the agent, its samplers, the job supervisor and the built-in workers.

Imports neither textual nor asyncssh: a GPU node needs only psutil, httpx,
prometheus_client and nvidia-ml-py.
"""

from .contract import VERSION as __version__  # noqa: F401 -- the one version, in the contract

__all__ = ["__version__"]
