"""Not a package anyone imports. It tells static tools (editors, type checkers, structure
drawers) that agents/, console/ and remote/ are siblings in one package, as they are once
installed (gpudeck.agents, gpudeck.console, gpudeck.remote): so `from ..agents.contract import
wire` in console/ resolves from the checkout itself, without an install to follow."""
