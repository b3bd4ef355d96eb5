"""gpudeck's node side: the agent, its samplers, the job supervisor and the built-in workers.

Imports neither textual nor asyncssh: a GPU node needs only psutil, httpx,
prometheus_client and nvidia-ml-py.
"""

__version__ = "0.2.0"
