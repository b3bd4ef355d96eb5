"""What the node reads, each reading returned as a contract type: its GPUs (NVML, gpu.py),
their health (health.py), the host (host.py), the jobs' engines (engines.py) and progress
(progress.py, with rates.py), an engine's loading (loading.py), and which of the agent's
writes failed (writes.py). Nothing here acts on a job."""
