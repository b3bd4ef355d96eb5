"""The console's whole keymap, as one table: every key of every screen, its binding id, where
it comes from (k9s, htop, vim, less or gpudeck's own), and what the help says of it.

The screens build their Textual bindings from it (``screens/bindings.py``), the help screen
and docs/console.md list it, and a test checks that no two bindings of one screen take one
key. A user's ``[keys]`` table (``console.toml``, :mod:`console.userconfig`) moves a key by its
binding id, through Textual's ``App.set_keymap``.

No Textual here: the table is data.

Where a key lives (``scope``): ``app`` on every screen; ``main`` the views; ``table`` a
view's table when it has the focus; ``scroll`` a log or a describe's text with the focus;
``describe`` the describe screen; ``dialog`` the help, doctor, plans and error screens (``help`` the help's own);
``confirm`` a question; ``command`` the `:` line while it is open; ``picker`` the column
picker (F6); ``filter`` the `/` bar while it is open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# the keys as Textual names them (a binding's ``key``), as the help and the docs show them
_SHOWN = {"question_mark": "?", "slash": "/", "colon": ":", "escape": "esc", "enter": "enter",
          "pageup": "PgUp", "pagedown": "PgDn", "home": "Home", "end": "End", "up": "↑", "down": "↓",
          "backspace": "backspace", "tab": "tab"}


@dataclass(frozen=True)
class Key:
    id: str  # the binding's id: what a [keys] table names to move it
    keys: str  # Textual key names, comma-separated: "ctrl+k,f9"
    action: str  # the Textual action the key runs
    scope: str  # where it is bound (see the module's docstring)
    label: str  # the footer's word
    help: str  # what the help screen says it does
    origin: str  # where a hand knows it from: k9s, htop, vim, less, gpudeck
    show: bool = False  # in the footer
    acts: bool = False  # acts on a job or a process: off (and not shown) in a read-only console
    priority: bool = False  # before any widget's own use of the key (Textual's priority binding)

    @property
    def key_list(self) -> tuple[str, ...]:
        return tuple(k.strip() for k in self.keys.split(","))

    @property
    def shown(self) -> str:
        """The keys as the help writes them: ``ctrl+k F9``."""
        return " ".join(shown_key(k) for k in self.key_list)


def shown_key(key: str) -> str:
    if key in _SHOWN:
        return _SHOWN[key]
    if key.startswith("f") and key[1:].isdigit():
        return key.upper()
    return key


# the sort keys: shift+letter, one column each (each press flips its order). The letters the
# other keys hold (A ack, D doctor, G last row, L launch, N previous match, S reverse,
# T range back) are never a column's; the column picker (F6) lists the letters.
K9S_SORT = "k9s (shift+letter)"
SORT_KEYS = (
    Key("sort.job", "J", "sort_by('job')", "main", "Sort JOB", "sort by JOB", K9S_SORT),
    Key("sort.node", "O", "sort_by('node')", "main", "Sort NODE", "sort by NODE (k9s: shift-o)", K9S_SORT),
    Key("sort.state", "E", "sort_by('state')", "main", "Sort STATE",
        "sort by STATE, what needs you first (fleet: nodes with a problem; alerts: ALERT)", K9S_SORT),
    Key("sort.tokens", "K", "sort_by('tokens')", "main", "Sort TOK/S", "sort by TOK/S, the fastest first", K9S_SORT),
    Key("sort.rate", "R", "sort_by('rate')", "main", "Sort RATE", "sort by RATE (items/s), the fastest first",
        K9S_SORT),
    Key("sort.progress", "P", "sort_by('progress')", "main", "Sort PROGRESS", "sort by PROGRESS, the share done",
        K9S_SORT),
    Key("sort.eta", "H", "sort_by('eta')", "main", "Sort ETA", "sort by ETA (hours left), the longest first", K9S_SORT),
    Key("sort.cost", "C", "sort_by('cost')", "main", "Sort $/MTOK", "sort by $/MTOK, the dearest first", K9S_SORT),
    Key("sort.memory", "M", "sort_by('memory')", "main", "Sort MEMORY", "sort by GPU MEMORY used (k9s: shift-m)",
        K9S_SORT),
    Key("sort.util", "U", "sort_by('util')", "main", "Sort UTIL", "sort by GPU UTIL", K9S_SORT),
    Key("sort.since", "I", "sort_by('since')", "main", "Sort SINCE", "sort by SINCE, the newest first", K9S_SORT),
)

KEYMAP: tuple[Key, ...] = (
    # ---------------------------------------------------------------- every screen
    Key("app.command", "colon", "command_line", "app", "Command",
        "the command line: :jobs :fleet :events :alerts :logs JOB :doctor NODE :plans :q (tab completes)",
        "k9s, vim (:)",
        show=True),
    Key("app.help", "question_mark,f1", "help", "app", "Help", "this help", "k9s (?), htop (F1)", show=True),
    Key("app.quit", "q,f10", "quit", "app", "Quit", "quit (jobs keep running on their nodes)", "htop (q, F10)",
        show=True),
    Key("app.quit_ctrl_c", "ctrl+c", "interrupt", "app", "Quit", "quit, with exit code 130", "k9s, nvitop",
        priority=True),
    # ---------------------------------------------------------------- the views
    Key("view.overview", "0", "view('overview')", "main", "Overview", "the overview: GPUs, jobs, alerts, a chart",
        "gpudeck"),
    Key("view.fleet", "1", "view('fleet')", "main", "Fleet", "the fleet: nodes, GPUs, processes", "gpudeck"),
    Key("view.jobs", "2", "view('jobs')", "main", "Jobs", "the jobs", "gpudeck"),
    Key("view.logs", "3", "view('logs')", "main", "Logs", "the logs view", "gpudeck"),
    Key("view.alerts", "4", "view('alerts')", "main", "Alerts", "the alerts", "gpudeck"),
    Key("view.events", "e,5", "view('events')", "main", "Events", "the events: the nodes' timeline", "gpudeck"),
    Key("view.describe", "enter,d", "describe", "main", "Describe",
        "describe the selected row (job, GPU, process, node, alert, event): every field whole",
        "k9s (d describe, enter)", show=True),
    Key("view.job_logs", "l", "logs", "main", "Logs", "the selected job's log, in the logs view", "k9s", show=True),
    Key("job.kill", "ctrl+k,f9", "job('kill')", "main", "Kill",
        "kill the selected job (or GPU process of no job): asks first, then the verdict", "k9s (ctrl-k), htop (F9)",
        show=True,
        acts=True),
    Key("job.relaunch", "r", "job('relaunch')", "main", "Relaunch",
        "relaunch: the next attempt; asks first when it runs or its spec changed", "gpudeck", show=True, acts=True),
    Key("job.launch", "L", "job('launch')", "main", "Launch", "launch a job that is not running: asks first",
        "gpudeck", acts=True),
    Key("job.move", "m", "job('move')", "main", "Move", "move the selected job to a free spare node: asks first",
        "gpudeck", acts=True),
    Key("job.ack", "A", "job('ack')", "main", "Ack",
        "acknowledge a job that gave up (gave_up): its alert clears, the heartbeat's plain ping comes back; "
        "starts nothing; asks first", "gpudeck", acts=True),
    Key("process.adopt", "a", "adopt_process", "main", "Adopt",
        "adopt the selected GPU process of no job as a job: asks first", "gpudeck", acts=True),
    Key("node.doctor", "D", "doctor", "main", "Doctor",
        "doctor: the selected row's node checked before a run (also :doctor NODE)", "gpudeck"),
    Key("fleet.plans", "p", "plans", "main", "Plans", "the fleet file's [[plans]] side by side (also :plans)",
        "gpudeck"),
    Key("view.filter", "slash,f3", "filter", "main", "Filter",
        "filter the view (enter keeps it, esc clears it); in the logs view, search", "vim, less, k9s (/), htop (F3)",
        show=True),
    Key("logs.next", "n", "next_match(1)", "main", "Next match", "the next match of the log's search", "vim, less"),
    Key("logs.previous", "N", "next_match(-1)", "main", "Previous match", "the previous match", "vim, less"),
    Key("view.clear", "escape", "clear_filter", "main", "Clear", "clear the view's filter or search", "gpudeck"),
    Key("chart.range", "t", "chart_range(1)", "main", "Range", "the chart's range: 1h, 6h, 24h, 7d", "gpudeck"),
    Key("chart.range_back", "T", "chart_range(-1)", "main", "Range back", "the chart's range, back", "gpudeck"),
    Key("view.sort_by", "f6", "sort_picker", "main", "Sort by",
        "sort by: pick a column (each column has its shift+letter too)", "htop (F6)", show=True),
    Key("view.sort", "s", "sort", "main", "Sort", "sort by the next column", "gpudeck"),
    Key("view.reverse", "S", "reverse", "main", "Reverse", "reverse the sort", "gpudeck"),
    *SORT_KEYS,
    # ---------------------------------------------------------------- a table with the focus
    Key("cursor.down", "down,j", "cursor(1)", "table", "Down", "down a row", "vim, k9s"),
    Key("cursor.up", "up,k", "cursor(-1)", "table", "Up", "up a row", "vim, k9s"),
    Key("cursor.page_down", "pagedown,ctrl+f", "page(1)", "table", "Page down", "a page down", "vim, k9s (ctrl-f)"),
    Key("cursor.page_up", "pageup,ctrl+b", "page(-1)", "table", "Page up", "a page up", "vim, k9s (ctrl-b)"),
    Key("cursor.top", "home,g", "cursor_to(0)", "table", "First", "the first row", "vim, less"),
    Key("cursor.bottom", "end,G", "cursor_to(-1)", "table", "Last", "the last row", "vim, less"),
    # ---------------------------------------------------------------- a log or a describe's text with the focus
    Key("scroll.down", "down,j", "scroll_down", "scroll", "Down", "scroll down a line", "vim, less"),
    Key("scroll.up", "up,k", "scroll_up", "scroll", "Up", "scroll up a line", "vim, less"),
    Key("scroll.top", "home,g", "scroll_home", "scroll", "First", "the first line", "vim, less"),
    Key("scroll.bottom", "end,G", "scroll_end", "scroll", "Last", "the last line (a log: and follow it)", "vim, less"),
    # ---------------------------------------------------------------- the describe screen
    Key("describe.back", "escape,backspace", "back", "describe", "Back", "back to the views", "k9s (esc)", show=True),
    Key("describe.fields", "d", "tab('fields')", "describe", "Describe", "a job: its fields", "k9s (d)", show=True),
    Key("describe.log", "l", "tab('log')", "describe", "Chart+log", "a job: its chart and log", "k9s (l)", show=True),
    Key("describe.kill", "ctrl+k,f9", "job('kill')", "describe", "Kill", "kill the job: asks first",
        "k9s (ctrl-k), htop (F9)",
        show=True, acts=True),
    Key("describe.relaunch", "r", "job('relaunch')", "describe", "Relaunch", "relaunch the job", "gpudeck",
        show=True, acts=True),
    Key("describe.launch", "L", "job('launch')", "describe", "Launch", "launch the job: asks first", "gpudeck",
        acts=True),
    Key("describe.move", "m", "job('move')", "describe", "Move", "move the job to a spare: asks first", "gpudeck",
        acts=True),
    Key("describe.ack", "A", "job('ack')", "describe", "Ack", "acknowledge the job's gave_up: asks first",
        "gpudeck", acts=True),
    Key("describe.range", "t", "chart_range(1)", "describe", "Range", "the chart's range: 1h, 6h, 24h, 7d",
        "gpudeck"),
    Key("describe.range_back", "T", "chart_range(-1)", "describe", "Range back", "the chart's range, back",
        "gpudeck"),
    # ---------------------------------------------------------------- questions and dialogs
    Key("confirm.yes", "y", "answer(True)", "confirm", "Yes", "yes", "gpudeck"),
    Key("confirm.no", "n,escape", "answer(False)", "confirm", "No", "no", "gpudeck"),
    Key("dialog.close", "escape,q", "dismiss", "dialog", "Close", "close it", "k9s (esc), less (q)", show=True),
    Key("dialog.ok", "enter", "dismiss", "dialog", "Close", "close it (an error's dialog, the doctor, the plans)",
        "gpudeck"),
    Key("help.close", "question_mark,f1", "dismiss", "help", "Close", "close the help", "k9s (?), htop (F1)"),
    Key("command.complete", "tab", "complete", "command", "Complete", "complete the command or its job or node",
        "k9s, vim (tab)", priority=True),
    Key("command.close", "escape", "close", "command", "Close", "close the command line", "k9s, vim (esc)"),
    Key("picker.close", "escape,f6", "close", "picker", "Close", "close the column picker", "htop (F6)"),
    Key("filter.close", "escape", "close", "filter", "Close filter", "close the filter, cleared", "gpudeck",
        show=True),
)

BY_ID = {k.id: k for k in KEYMAP}
ACTIONS = {k.action: k for k in reversed(KEYMAP)}  # the first key of an action


def of(scope: str) -> tuple[Key, ...]:
    return tuple(k for k in KEYMAP if k.scope == scope)


# the scopes bound at once on each screen: no key may be in two of their bindings
CONTEXTS = {
    "a view's table": ("app", "main", "table"),
    "the logs view": ("app", "main", "scroll"),
    "the describe screen": ("app", "describe", "scroll"),
    "a question": ("app", "confirm"),
    "a dialog": ("app", "dialog"),
    "the help": ("app", "dialog", "help"),
    "the command line": ("app", "command"),
    "the column picker": ("app", "picker"),
    "the filter bar": ("app", "filter"),
}


# a modal screen's key over the app's is meant (escape or q closes a dialog): its binding is found first
MODAL = ("dialog", "help", "confirm", "command", "picker", "filter")


def collisions(keymap: tuple[Key, ...] = KEYMAP) -> list[str]:
    """Keys two bindings take in one context (none, or the keymap is wrong)."""
    out = []
    for context, scopes in CONTEXTS.items():
        seen: dict[str, Key] = {}
        for k in keymap:
            if k.scope not in scopes:
                continue
            for key in k.key_list:
                other = seen.get(key)
                # a dialog's own key over the app's (its escape or q closes it) is meant: the
                # screen's binding is found first
                if other is not None and not (other.scope == "app" and k.scope in MODAL):
                    out.append(f"{context}: {shown_key(key)} is {other.id} and {k.id}")
                seen[key] = k
    return out


def key_of(binding_id: str, keymap: Optional[dict[str, str]] = None) -> str:
    """The first key of a binding as shown, after the user's keymap: ``ctrl+k``."""
    keys = (keymap or {}).get(binding_id) or BY_ID[binding_id].keys
    return shown_key(keys.split(",")[0].strip())
