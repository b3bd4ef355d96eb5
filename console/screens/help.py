"""HelpScreen: the keys, and what the columns mean."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """\
[b]Keys[/b]
  0 1 2 3 4   overview, fleet, jobs, logs, alerts (or click the tabs)
  e  (or 5)   events: the nodes' timeline, newest at the bottom
  ctrl+p      command palette: jump to a node or job by name, run any key's action
  ↑ ↓ PgUp PgDn Home End    move in a table
  g  G        the first and the last row of a table
  enter       details and the log of the selected job
  l           the selected job's log, in the logs view
  t  T        the chart's range: 1h, 6h, 24h, 7d (T: back); overview and details
  ← →         scroll a log sideways: long lines are not wrapped
{job_keys}  /           filter the view (enter keeps it, escape clears it);
              in the logs view: search (n / N: next / previous match)
  s  S        sort by the next key; S reverses it.  The sorted column is marked:
              ▲ ascending (A to Z, least first), ▼ descending (the fastest first)
  d           doctor: the selected row's node checked before a run (python, torch,
              driver, models, disk, S3, clock, limits): ok, warn or fail, and the fix
  p           plans: the fleet file's [[plans]] side by side (as gpudeck plan compare):
              days, dollars, $/M tokens, $/useful, bytes; the cheaper and the faster
  ?           this help;  q or ctrl+c  quit (jobs keep running on their nodes)
{read_only}
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


JOB_KEYS = """\
  k           kill the selected job: asks first, then shows the agent's verdict
              (how much GPU memory came back, or which pid still holds it)
  r           relaunch: same spec, next attempt; a running job is killed first
  L           launch a job that is not running (shift-l): asks first
  a           adopt the selected GPU process of no job as a job (asks first):
              then k kills it with verification, r relaunches its command
  m           move the selected job to the first free spare node (spare = true):
              asks first; kill and verify (or fence an unreachable node), then
              launch there, resuming from the job's output.  A job with
              on_node_lost = "move" is moved so by the console itself once its node
              has been unreachable for \\[alerts] node_lost_s (as gpudeck watch fleet
              does; gpudeck up --no-auto-move: not by this console)
"""
READ_ONLY = "\n  [b]read-only[/b]: started with --read-only: the keys that act on jobs are off and not shown.\n"


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, read_only: bool) -> None:
        super().__init__()
        self.read_only = read_only

    def compose(self) -> ComposeResult:
        text = HELP.format(job_keys="" if self.read_only else JOB_KEYS, read_only=READ_ONLY if self.read_only else "")
        with Vertical(id="dialog"):
            with VerticalScroll():
                yield Static(text, id="help-text")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "gpudeck help"

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
