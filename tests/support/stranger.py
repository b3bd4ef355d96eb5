"""A process gpudeck did not start, holding simulated GPU memory (agents/simgpu.py): what
`gpudeck adopt` and the console's `a` adopt."""

from __future__ import annotations

import textwrap

# says what it was started with, holds 2 GiB of simulated GPU 1 of the agent home argv[1], and sleeps;
# run as: python stranger.py HOME WORKDIR
STRANGER = textwrap.dedent('''
    import json, os, sys, time
    from pathlib import Path
    from gpudeck.agents.simgpu import claim
    Path(sys.argv[2], f"seen-{os.getpid()}.json").write_text(json.dumps(
        {"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}))
    claim(Path(sys.argv[1]), 1, 2048)
    time.sleep(600)
''')
