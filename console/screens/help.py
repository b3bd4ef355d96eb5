"""HelpScreen: the keys, and what the columns mean."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """\
[b]Keys[/b]
  1 2 3 4     fleet, jobs, logs, alerts views (or click the tabs)
  ↑ ↓ PgUp PgDn Home End    move in a table
  enter       details and the log of the selected job
  k           kill the selected job: asks first, then shows the agent's verdict
              (how much GPU memory came back, or which pid still holds it)
  r           relaunch: same spec, next attempt; a running job is killed first
  l           launch a job that is not running
  /           filter the view (enter keeps the filter, escape clears it)
  s           sort the view by the next key
  ?           this help;  q  quit (jobs keep running on their nodes)
{read_only}
[b]Jobs[/b]
  #          attempt;  TOK/S and TREND: tokens per second, one cell per 15 s
  DONE       items done / total;  RATE items/s;  ETA at the current rate
  FLAGS      quality counters: empty answers, missing reasoning, cut at max tokens, errors
  engines    DONE shows running (r) and queued (q) requests, PROGRESS the KV cache,
             RATE the speculative accept length

[b]Fleet[/b]
  a node line, then each GPU: memory used/total, utilization, temperature, power,
  and the job (or the unknown pid) holding it.  Greyed: the node cannot be reached,
  and what is shown is its last known state.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, read_only: bool) -> None:
        super().__init__()
        self.read_only = read_only

    def compose(self) -> ComposeResult:
        note = ("\n  [b]read-only[/b]: started with --read-only, so k, r and l are off.\n"
                if self.read_only else "")
        with Vertical(id="dialog"):
            with VerticalScroll():
                yield Static(HELP.format(read_only=note), id="help-text")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "gpudeck help"

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
