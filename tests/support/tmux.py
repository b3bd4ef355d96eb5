"""The real program in a real terminal: a tmux server of the test's own, keys sent, the
screen read back with capture-pane."""

from __future__ import annotations

import re
import secrets
import subprocess

from support.wait import wait_for


class Tmux:
    def __init__(self, socket: str, session: str = "demo") -> None:
        # A server of this test's own: one named for the process alone is shared by the tests
        # one pytest worker runs in a row, and a kill-server that is still finishing leaves the
        # next test's new-session talking to a server on its way out.
        self.socket, self.session = f"{socket}-{secrets.token_hex(4)}", session

    def __call__(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True)
        if done.returncode:
            raise AssertionError(f"tmux {args[0] if args else ''} exited {done.returncode}: "
                                 f"{done.stderr.strip() or done.stdout.strip() or '(no output)'}")
        return done.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", self.session)

    def wait(self, cond, what: str, timeout: float = 60.0):
        """Poll the screen until ``cond(screen)`` is truthy; fail with the screen shown."""
        return wait_for(lambda: cond(self.screen()), timeout=timeout, interval=0.3, what=what,
                        detail=lambda: f"--- screen:\n{self.screen()}")

    def press_until(self, key: str, cond, what: str, tries: int = 6, each: float = 10.0):
        """Press ``key`` until ``cond(screen)`` holds: a key sent while the app moves its focus
        (a view switching on a busy machine) can be lost, and pressing it again is harmless
        as long as ``cond`` is false."""
        for _ in range(tries - 1):
            self.keys(key)
            try:
                return wait_for(lambda: cond(self.screen()), timeout=each, interval=0.3, what=what)
            except AssertionError:
                continue
        self.keys(key)
        return self.wait(cond, what, timeout=each)

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", self.session, *keys)



def select(tmux: Tmux, job: str) -> None:
    """Move the jobs table's cursor from its first row to ``job``'s row."""
    lines = tmux.screen().splitlines()
    head = next(i for i, ln in enumerate(lines) if re.match(r"JOB\W", ln))  # JOB, or JOB▲ when sorted by it
    row = next(i for i, ln in enumerate(lines) if ln.startswith(job + " ")) - head - 1
    tmux.keys("Home")
    for _ in range(row):
        tmux.keys("Down")
