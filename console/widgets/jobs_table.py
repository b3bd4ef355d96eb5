"""JobsTable: one line per job, with its throughput trend, progress and ETA."""

from __future__ import annotations

from functools import partial
from typing import Optional, Sequence

from rich.cells import cell_len
from rich.style import Style

from ...agents.contract.jobs import JobKind
from ...agents.contract.units import human_bytes
from ...agents.contract.vocab import ShownState
from ..cost import NO_PRICE, money_fit
from ..formatting import human_duration
from ..rows import JobRow
from . import cells
from .live_table import Cell, Column, LiveTable

PROGRESS_BAR = 8
NAME_MOST = 32  # the JOB column widens to the longest name up to this
SPARK = 12
STATE_STYLE = {ShownState.RUNNING: "ok", ShownState.READY: "ok", ShownState.STARTING: "warn",
               ShownState.STOPPING: "warn", ShownState.FAILED: "bad", ShownState.LOST: "bad", ShownState.BLOCKED: "bad",
               ShownState.KILLED: "muted", ShownState.CANCELLED: "muted", ShownState.FENCED: "muted",
               ShownState.EXITED: "muted", ShownState.NOT_STARTED: "muted", ShownState.QUEUED: "muted",
               ShownState.UNKNOWN: "muted"}


class JobsTable(LiveTable[JobRow]):
    """Jobs: state, tokens/s and its trend, done/total, rate, ETA, the plan against the
    projection, dollars per M tokens and per useful completion, the S3 backlog and the last
    upload's age, the servers resting, and quality flags. An engine
    shows running/queued requests, KV-cache use and accept length instead."""

    # On a narrow screen the plan and cost columns go first, then the bars and trends the
    # figures beside them say in numbers; the job's node, GPUs and attempt stay longest: at
    # 80 columns JOB NODE STATE GPUS ATT TOK/S DONE ETA FLAGS (and the sorted column, always).
    COLUMNS = (
        Column("JOB", 14),
        Column("NODE", 8, drop=5),  # before GPUS: at 80 columns a long name leaves a job its GPUs
        Column("KIND", 6, drop=7),
        Column("STATE", 10),  # wider where a row needs it ("not started": show)
        Column("GPUS", 4, drop=4),
        Column("ATT", 3, "right", drop=6),  # the attempt: 1 for the first launch
        Column("TOK/S", 7, "right"),
        Column("TREND", SPARK, drop=8),
        Column("DONE", 13, "right"),
        Column("PROGRESS", PROGRESS_BAR, drop=10),
        Column("RATE", 6, "right", drop=9),
        Column("ETA", 7, "right"),
        Column("PLAN→NOW", 15, "right", drop=12),  # plan.json's wall time, and the one it heads for now
        Column("DRIFT", 6, "right", drop=11),  # (a drift past its limit is a flag too)
        Column("$/MTOK", 6, "right", drop=13),  # a generation job: dollars per million output tokens ...
        Column("$/USEFUL", 8, "right", drop=14),  # ... and per useful completion
        Column("S3 WAIT", 12, "right", drop=16),  # files and bytes waiting to go to S3 ...
        Column("UPLOADED", 10, "right", drop=17),  # ... and how long ago the last one went
        Column("SERVERS", 11, "right", drop=15),  # a generation job's servers resting or failing, of all
        Column("FLAGS", 0, least=5),
    )

    def render_cells(self, j: JobRow) -> Sequence[Cell]:
        st = self.style
        failed = j.state == ShownState.FAILED and j.exit_code is not None
        state_text = f"{j.state.text} {j.exit_code}" if failed else j.state.text
        state = ((state_text, st(STATE_STYLE.get(j.state, "muted"))),)
        gpus = partial(cells.gpu_list, j.gpus)  # 0,1 / 0-7 / ×8: as the column's width allows
        spark = ((cells.sparkline(j.spark[-SPARK:]), st("spark")),)
        if j.startup is not None and j.done is None:  # an engine loading, a stage copying: how far
            done = j.startup
            progress: Cell = cells.bar(j.startup_frac, PROGRESS_BAR, st("bar"), st("bar-empty"))
            rate = "-"
        elif j.engine_state is not None and j.done is None:
            done = f"r{_n(j.running)} q{_n(j.queued)}"
            progress = cells.bar(j.kv_usage, PROGRESS_BAR, st("warn") if (j.kv_usage or 0) > 0.9 else st("bar"),
                                 st("bar-empty"))
            rate = f"acc{j.accept_length:.1f}" if j.accept_length is not None else "-"
        else:
            done = "-" if j.done is None else (
                f"{cells.count(j.done)}/{cells.count(j.total)}" if j.total is not None else cells.count(j.done))
            progress = cells.bar(j.fraction, PROGRESS_BAR, st("bar"), st("bar-empty"))
            rate = cells.rate(j.rate_per_s)
        # a move first (where it ran before: the first thing to know of a job found on another
        # node), muted (news, not a problem), then the flags; the details say both in full
        flags: list[tuple[str, Optional[Style]]] = [(j.moved, st("muted"))] if j.moved else []
        flags += [(f, st("warn")) for f in j.flags]
        if j.ready:  # news, not a problem
            flags.append((j.ready, st("muted")))
        # whole flags, the next one cut between words, then +N: never a word cut in two (describe: all)
        flag_cell = partial(cells.phrases_fit, flags) if flags else ((("-", st("muted")),))
        return (j.name, j.node, j.kind.short, state, gpus, str(j.attempt),
                cells.rate(j.tokens_per_s), spark, done, progress, rate, human_duration(j.eta_s),
                *self._plan_cells(j), *self._cost_cells(j), *self._health_cells(j), flag_cell)

    def _plan_cells(self, j: JobRow) -> tuple[Cell, Cell]:
        if j.planned_s is None:
            return "-", "-"
        plan = f"{human_duration(j.planned_s)}→{human_duration(j.projected_s)}"
        if j.drift_pct is None:
            return plan, "-"
        return plan, ((f"{j.drift_pct:+d}%", self.style("warn") if j.plan_off else None),)

    def _cost_cells(self, j: JobRow) -> tuple[Cell, Cell]:
        if j.kind != JobKind.GENERATE:
            return "-", "-"
        if not j.priced:
            return NO_PRICE, NO_PRICE
        # the meaningful digits kept: $0.000041 in 8 cells reads $41/M, never $0.0000…
        return partial(money_fit, j.cost_per_m_tokens), partial(money_fit, j.cost_per_useful)

    def _health_cells(self, j: JobRow) -> tuple[Cell, Cell, Cell]:
        if j.uploads_pending is None:
            wait: Cell = "-"
            age: Cell = "-"
        else:
            waiting = f"{j.uploads_pending} {human_bytes(j.uploads_bytes)}" if j.uploads_bytes else str(j.uploads_pending)
            wait = ((waiting, self.style("warn") if j.uploads_pending else None),)
            age = f"{human_duration(j.last_upload_s)} ago" if j.last_upload_s is not None else "never"
        if j.servers_total is None:
            servers: Cell = "-"
        else:
            servers = ((f"{j.servers_down}/{j.servers_total} resting",
                        self.style("warn") if j.servers_down else self.style("muted")),)
        return wait, age, servers

    def show(self, rows: Sequence[JobRow]) -> None:
        """The rows; the JOB column as wide as the longest name (up to ``NAME_MOST``): a name is whole."""
        longest = max((cell_len(r.name) for r in rows), default=0)
        self.widen("JOB", max(self.COLUMNS[0].width, min(NAME_MOST, longest)))
        # and STATE as its longest state ("not started", "failed 137"): a state is whole
        states = max((cell_len(r.state.text) + (len(f" {r.exit_code}") if r.state == ShownState.FAILED and
                                                  r.exit_code is not None else 0) for r in rows), default=0)
        self.widen("STATE", max(self.COLUMNS[3].width, states))
        super().show(rows)

    def row_style(self, row: JobRow) -> Optional[Style]:
        return self.style("dim") if row.stale else None


def _n(v: Optional[int]) -> str:
    return "-" if v is None else str(v)
