"""The node daemon, ``python -m gpudeck.agents``: how an agent starts, one function per mode
(start.py), its tick loop and ops table over a job backend (agent.py), the consoles it serves
and relays for (consoles.py), one agent per home (lock.py), the node's alerts (alerts.py),
node_exporter's textfile (promfile.py) and `gpudeck doctor` (doctor/, one module per check)."""
