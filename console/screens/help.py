"""HelpScreen: the keys, and what the columns mean."""

from __future__ import annotations

from typing import Optional

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from .. import keymap as km
from ..bindings import bindings

HELP = """\
[b]Jobs[/b]
  ATT        attempt;  TOK/S and TREND: tokens per second, one cell per 15 s
  DONE       items done / total;  RATE items/s;  ETA at the current rate
  FLAGS      quality counters: empty answers, no reasoning, cut at max tokens, errors;
             moved from gpu1 02:10: the node it ran on before a move, and when
  PLAN→NOW   the plan's finish (plan.json) and the projected one;  DRIFT  how far apart
  $/MTOK     dollars per million output tokens;  $/USEFUL  per useful completion
  engines    DONE shows running (r) and queued (q) requests, PROGRESS the KV cache,
             RATE the speculative accept length

[b]Overview[/b]
  the GPUs, the jobs, the newest alerts, and the chart of the job under the cursor
  (at first, the first job with a tokens/s series); a job's charts share one window
  and one time axis.  On a node or GPU row: the node's GPU utilization.

[b]Charts[/b]
  a range ending now: at first the least that holds the job's run (t / T change
  it); the value axis on the left, the time axis under the last chart.  1h is
  the console's own 15 s series; 6h, 24h and 7d are read from the node's history
  (gpudeck history) and kept, shown meanwhile from the 12 hours the node sent
  when the console connected.  ─ in the done chart: the plan (plan.json).

[b]Events[/b]
  every node's timeline merged in time order: jobs that died, were restarted, gave
  up, stalled or finished; GPU health, disks, temperatures, deadlines, and what
  cleared them.  Over it, what happened since this laptop last looked at this
  fleet (also said when the console opens), and what the view lists, counted.
  While the console is open, each new one of those is a notification and a bell
  (gpudeck up --no-bell: no bell).  Notifications come one at a time, on the
  footer's line.

[b]Fleet[/b]
  a node line, then each GPU: memory used/total, utilization and its trend,
  temperature, power, and the job (or the unknown pid) holding it; under it each
  process: GPU memory, CPU%, job and command.  Greyed: the node cannot be reached,
  and what is shown is its last known state.  On a narrow terminal the least
  needed columns go first.
"""


READ_ONLY = "\n  [b]read-only[/b]: started with --read-only: the keys that act on jobs are off and not shown.\n"

# the keymap's parts, in the help's order (console/keymap.py holds them all)
SECTIONS = (("app", "Keys (every screen)"), ("main", "The views"), ("table", "A table"),
            ("scroll", "A log, a describe"), ("describe", "Describe (enter or d on a row)"))
KEYS_WIDTH = 17  # the keys' column
HIDDEN = {"app.quit_ctrl_c"}  # said beside q
EXTRA = {"app.quit": "q F10 ctrl+c"}


def key_rows(read_only: bool, keymap: dict[str, str]) -> list[tuple[str, str, str]]:
    """(section, keys, what) for the keys as the keymap binds them (the user's [keys] included)."""
    out = []
    for scope, title in SECTIONS:
        for k in km.of(scope):
            if k.id in HIDDEN or (read_only and k.acts) or k.id.startswith("sort.") or \
                    (k.id.startswith("describe.") and k.action.startswith("job(")):
                continue
            moved = keymap.get(k.id)
            shown = " ".join(km.shown_key(x.strip()) for x in moved.split(",")) if moved else EXTRA.get(k.id, k.shown)
            out.append((title, shown, k.help))
        if scope == "main":
            letters = "  ".join(f"{km.key_of(k.id, keymap)} {k.label.removeprefix('Sort ')}" for k in km.SORT_KEYS)
            out.append((title, "shift+letter", f"sort by a column; again: the other way round.  {letters}"))
        if scope == "scroll":
            out.append((title, "← →", "scroll a log sideways: long lines are not wrapped"))
        if scope == "describe" and not read_only:
            out.append((title, "ctrl+k r L m A", "a job's keys, as in the views"))
    out += [("The command line (:)", ":jobs :fleet", ":events :alerts :overview: the views"),
            ("The command line (:)", ":logs JOB", "the job's log"),
            ("The command line (:)", ":doctor NODE", "the node checked before a run"),
            ("The command line (:)", ":plans :help :q", "the plans; this help; quit"),
            ("The command line (:)", "tab", "completes (a command, a job, a node); enter runs it, esc closes; "
                                           "letters typed there are text, not keys"),
            ("The command line (:)", "ctrl+p", "the command palette: jump to a node or a job"),
            ("The command line (:)", "[keys]", "moves a key: ~/.config/gpudeck/console.toml (docs/console.md#keys)")]
    return out


def keys_table(read_only: bool, keymap: dict[str, str]) -> Group:
    """Each section's title over its keys, the keys in one column, what they do wrapped beside."""
    parts: list[RenderableType] = []
    grid: Optional[Table] = None
    section = None
    for title, shown, what in key_rows(read_only, keymap):
        if title != section:
            if grid is not None:
                parts += [grid, Text("")]
            parts.append(Text(title, style="bold"))
            grid = Table.grid(padding=(0, 2), expand=True)
            grid.add_column(no_wrap=True, width=KEYS_WIDTH)
            grid.add_column(ratio=1)
            section = title
        assert grid is not None
        grid.add_row(Text("  " + shown), Text(what))
    if grid is not None:
        parts.append(grid)
    return Group(*parts)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [*bindings("dialog"), *bindings("help")]

    def __init__(self, read_only: bool, keymap: Optional[dict[str, str]] = None) -> None:
        super().__init__()
        self.read_only = read_only
        self.keymap = keymap or {}

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            with VerticalScroll():
                if self.read_only:  # first: why the keys that act are not listed
                    yield Static(READ_ONLY.strip("\n") + "\n", id="help-read-only")
                yield Static(keys_table(self.read_only, self.keymap), id="help-keys")
                yield Static("\n" + HELP, id="help-text")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "gpudeck help"

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
