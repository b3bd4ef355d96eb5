"""JobDetails: everything known about one job, labelled, for the details screen."""

from __future__ import annotations

import shlex
import time
from typing import Optional

from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ...agents.contract.vocab import EngineState
from ...agents.contract.jobs import JobKind
from ...agents.contract.documents import drift_text
from ...agents.contract.units import human_bytes
from ...agents.contract.wire import JobPlan
from ..cost import dollars
from ..formatting import human_duration
from ..rows import JobDetail
from . import cells
from .jobs_table import STATE_STYLE

BAR = 30
MAX_SERVERS = 12  # server lines shown; the rest counted


class JobDetails(Widget):
    COMPONENT_CLASSES = {"job-details--label", "job-details--ok", "job-details--warn", "job-details--bad",
                         "job-details--muted", "job-details--bar", "job-details--bar-empty", "job-details--spark"}

    detail: reactive[Optional[JobDetail]] = reactive(None, layout=True)
    """The job to show; None when it is not in the fleet's snapshots (yet)."""

    def __init__(self, job: str, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.job = job

    def render(self) -> Table | Text:
        d = self.detail
        st = self.get_component_rich_style
        if d is None:
            return Text(f"{self.job}: no snapshot of its node yet", st("job-details--muted"))
        j = d.row
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style=st("job-details--label"), no_wrap=True)
        grid.add_column()
        grid.add_row("job", self._head(d))
        grid.add_row("GPUs", ", ".join(map(str, j.gpus)) or "none")
        grid.add_row("tokens/s", self._tokens(d))
        if j.done is not None:
            prog = Text(f"{j.done:,}" + (f" / {j.total:,}  " if j.total is not None else "  "))
            if j.fraction is not None:
                prog.append_text(cells.as_text(cells.bar(j.fraction, BAR, st("job-details--bar"),
                                                         st("job-details--bar-empty"))))
                prog.append(f" {100 * j.fraction:.1f}%")
            grid.add_row("done", prog)
            grid.add_row("rate", f"{cells.rate(j.rate_per_s)} items/s   ETA {human_duration(j.eta_s)}")
        if d.plan is not None:
            grid.add_row("plan", self._plan(d, d.plan))
        if j.kind == JobKind.GENERATE and j.alive and j.priced:  # unpriced: "—" in the table says it
            grid.add_row("cost", self._cost(d))
        if d.spend is not None and d.spend.spent is not None:  # its attempts, on every node it ran on
            grid.add_row("spend", self._spend(d))
        if d.quality or d.progress_error or d.window is not None:
            grid.add_row("quality", self._quality(d))
        if j.engine_state is not None:
            grid.add_row("engine", self._engine(d))
        if d.uploads is not None:
            grid.add_row("uploads", self._uploads(d))
        if d.servers:
            grid.add_row("servers", self._servers(d))
        when = Text(f"started {cells.clock_time(d.started_at)}")
        if d.ended_at:
            when.append(f"  ended {cells.clock_time(d.ended_at)}")
        grid.add_row("when", when)
        if j.flags:
            grid.add_row("flags", Text(" ".join(j.flags), st("job-details--warn")))
        if j.moved:
            grid.add_row("moved", Text(j.moved.removeprefix("moved "), st("job-details--muted")))
        if d.error:
            grid.add_row("error", Text(d.error, st("job-details--bad")))
        if d.last_kill is not None:
            k = d.last_kill
            kill = Text("ok  " if k.ok else "INCOMPLETE  ", st("job-details--ok" if k.ok else "job-details--bad"))
            kill.append(k.message)
            kill.append(f"  at {cells.clock_time(k.at)}", st("job-details--muted"))
            grid.add_row("last kill", kill)
        if d.argv:  # what the node really ran for this attempt
            grid.add_row("command", Text(shlex.join(d.argv), overflow="ellipsis", no_wrap=True))
        elif d.command:
            grid.add_row("command", Text(d.command, overflow="ellipsis", no_wrap=True))
        return grid

    def _spend(self, d: JobDetail) -> Text:
        s, st = d.spend, self.get_component_rich_style
        assert s is not None and s.spent is not None
        nodes = sorted({a.node for a in s.attempts})
        spend = Text(f"{dollars(s.spent)} over {len(s.attempts)} attempt(s)"
                     + (f" on {', '.join(nodes)}" if len(nodes) > 1 else ""))
        if s.burned:
            spend.append(f"  {dollars(s.burned)} burned (killed, failed, lost)", st("job-details--warn"))
        return spend

    def _head(self, d: JobDetail) -> Text:
        """The job's line: its state, kind, node, attempt, pid and exit code."""
        j, st = d.row, self.get_component_rich_style
        state_style = {"ok": "job-details--ok", "warn": "job-details--warn", "bad": "job-details--bad"}.get(
            STATE_STYLE.get(j.state, "muted"), "job-details--muted")
        head = Text()
        head.append(j.state.text, st(state_style))
        head.append(f"  {j.kind} on {j.node}  ·  attempt {j.attempt}")
        if j.pid is not None:
            head.append(f"  ·  pid {j.pid}" + (f" ({len(d.pids)} processes)" if len(d.pids) > 1 else ""))
        if j.exit_code is not None:
            head.append(f"  ·  exit code {j.exit_code}")
        if j.stale:
            head.append("  ·  node unreachable: last known state", st("job-details--bad"))
        return head

    def _tokens(self, d: JobDetail) -> Text:
        """tokens/s now (or the last figure of a job not running, marked), and its sparkline."""
        j, st = d.row, self.get_component_rich_style
        tps = Text(f"{cells.rate(j.tokens_per_s)}  ")
        if j.tokens_per_s is None and d.last_tokens_per_s is not None:  # not running: its last figure, marked
            tps = Text(f"last {cells.rate(d.last_tokens_per_s)} at {cells.clock_time(d.last_rate_at)}  ",
                       st("job-details--muted"))
        tps.append(cells.sparkline(d.spark[-60:]), st("job-details--spark"))
        tps.append(f"  last {human_duration(len(d.spark[-60:]) * d.bucket_s)}", st("job-details--muted"))
        return tps

    def _quality(self, d: JobDetail) -> Text:
        st = self.get_component_rich_style
        q = Text(" · ".join(f"{k} {v}" for k, v in d.quality) or "clean")
        w = d.window
        if w is not None and w.n:  # the last completions, as the watcher's quality alerts judge them
            q.append(f"  ·  last {w.n:,}: " + " ".join(f"{k} {100 * w.counts.get(k, 0) / w.n:.0f}%"
                                                       for k in sorted(w.counts)), st("job-details--muted"))
        if d.progress_error:
            q.append(f"  progress file: {d.progress_error}", st("job-details--bad"))
        return q

    def _engine(self, d: JobDetail) -> Text:
        j, st = d.row, self.get_component_rich_style
        assert j.engine_state is not None
        eng = Text()
        eng.append(j.engine_state.value,
                   st("job-details--ok" if j.engine_state == EngineState.READY else "job-details--warn"))
        eng.append(f"  running {_n(j.running)}  queued {_n(j.queued)}")
        eng.append(f"  KV {100 * j.kv_usage:.0f}%" if j.kv_usage is not None else "  KV -")
        eng.append(f"  accept length {j.accept_length:.2f}" if j.accept_length is not None
                   else "  accept length - (no speculative decoding)")
        eng.append(f"  {d.engine_url}", st("job-details--muted"))
        if d.engine_error:
            eng.append(f"  {d.engine_error}", st("job-details--bad"))
        return eng


    def _plan(self, d: JobDetail, p: JobPlan) -> Text:
        st = self.get_component_rich_style
        off = st("job-details--warn") if d.row.plan_off else ""  # past the fleet's plan_drift_pct
        text = Text(drift_text(p.planned_wall_s, p.projected_wall_s), off)
        text.append(f"  {p.path}", st("job-details--muted"))
        if p.error:
            text.append(f"  {p.error}", st("job-details--bad"))
        return text

    def _uploads(self, d: JobDetail) -> Text:
        """What waits to go to S3 and since when, the last upload, the last error."""
        st, u, now = self.get_component_rich_style, d.uploads, d.at or time.time()
        assert u is not None
        size = f" ({human_bytes(u.pending_bytes)})" if u.pending_bytes else ""
        text = Text(f"{u.pending} waiting{size}", st("job-details--warn") if u.pending else "")
        if u.pending and u.oldest_pending_at is not None:
            text.append(f", the oldest for {human_duration(max(0.0, now - u.oldest_pending_at))}",
                        st("job-details--warn"))
        ago = d.row.last_upload_s  # the jobs table's UPLOADED, worked out once in the state
        text.append(f"  ·  {u.uploaded} uploaded  ·  last "
                    + (f"{human_duration(ago)} ago" if ago is not None else "never"))
        if u.failures:
            text.append(f"  ·  {u.failures} failed attempts", st("job-details--warn"))
        if u.last_error:
            text.append(f"  {u.last_error}", st("job-details--bad"))
        if u.stored_bytes is not None:  # what the prefix holds: the run's listing at its start, plus its uploads
            text.append(f"  ·  stored {human_bytes(u.stored_bytes)} in {u.stored_objects or 0:,} objects")
            if d.s3_price_per_gb_month is not None:
                text.append(f", {dollars(u.stored_bytes / 1e9 * d.s3_price_per_gb_month)}/month")
        return text

    def _servers(self, d: JobDetail) -> Text:
        """One line a server: its state, its answers and failures, and for one that is down,
        since when and its last error."""
        st, now = self.get_component_rich_style, d.at or time.time()
        style = {"ok": "job-details--ok", "probing": "job-details--warn"}
        down = d.row.servers_down or 0  # the row's count (Progress.servers_down)
        text = Text(f"{down} of {len(d.servers)} resting or failing" if down else f"all {len(d.servers)} answering",
                    st("job-details--warn" if down else "job-details--muted"))
        shown = sorted(d.servers, key=lambda s: not s.down)[:MAX_SERVERS]  # the ones down first
        for s in shown:
            text.append(f"\n{s.url}  ")
            text.append(s.state, st(style.get(s.state, "job-details--bad")))
            text.append(f"  {s.ok:,} ok  {s.failed:,} failed  {s.outstanding} in flight", st("job-details--muted"))
            if s.down and s.down_since is not None:
                text.append(f"  down for {human_duration(max(0.0, now - s.down_since))}", st("job-details--bad"))
            if s.down and s.last_error:
                text.append(f"  {s.last_error}", st("job-details--bad"))
        if len(d.servers) > len(shown):
            text.append(f"\n… and {len(d.servers) - len(shown)} more", st("job-details--muted"))
        return text

    def _cost(self, d: JobDetail) -> Text:
        j = d.row
        useful = f" ({100 * d.useful:.0f}% of its records useful)" if d.useful is not None else ""
        return Text(f"{dollars(j.cost_per_m_tokens)} per M output tokens   "
                    f"{dollars(j.cost_per_useful)} per useful completion{useful}")


def _n(v: Optional[int]) -> str:
    return "-" if v is None else str(v)
