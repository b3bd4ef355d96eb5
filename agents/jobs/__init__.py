"""The jobs of a node: the seam every other part reaches them through (backend.py), and the
local backend that runs them as this host's processes."""
