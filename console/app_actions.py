"""What the operator's keys ask of the nodes: a job's kill, relaunch, launch or move (asked
first where it destroys), a stray GPU process killed or adopted, a node's doctor, the plans
compared. Each runs in a worker; its answer or error comes back as a message and is told
(console/actions.py says what each key does, as data).

Part of ``GpuDeckApp`` (console/app.py), which mixes ``Actions`` in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, cast

from textual import work

from ..agents.contract import ops
from ..agents.contract.vocab import ShownState
from ..agents.contract.wire import Snapshot
from ..remote.client import FleetClient
from ..remote.fleet import FleetError
from .actions import (OPERATOR_ERRORS, Confirm, JobOp, JobOutcome, Notice, Refuse, adopt_name, describe_error,
                      failure_notice, job_request, outcome_notice, plan_job_action, plan_process_adopt,
                      plan_process_kill)
from .config import ConsoleConfig
from .messages import (DoctorFailed, DoctorFinished, DoctorRequested, JobActionFailed, JobActionFinished,
                       JobActionRequested, PlansCompared, PlansCompareRequested, ProcessAdoptRequested,
                       ProcessKillRequested)
from .moving import MoveFailed, move_job, spare_for
from .placements import PlacementStore
from .screens.confirm import ConfirmScreen
from .screens.doctor import DoctorScreen
from .screens.plans import PlansScreen
from .state import FleetState

if TYPE_CHECKING:
    from textual.app import App

    _AppPart = App[None]
else:
    _AppPart = object

DOCTOR_TIMEOUT_S = 600.0  # a node's answer to `d`: its checks run in turn, the imports each up to 120 s


class Actions(_AppPart):
    """The app's operator actions."""

    config: ConsoleConfig
    client: FleetClient
    state: FleetState
    placements: PlacementStore
    fleet_name: str
    verdicts: list[tuple[str, str, str]]
    _autostart: set[str]

    if TYPE_CHECKING:  # the other parts of GpuDeckApp
        def schedule_refresh(self) -> None: ...
        def _show_copy(self, node: str, copy: Optional[ops.CopyDiff]) -> None: ...
        def _show_moves(self) -> None: ...
        def notify(self, message: str, *, title: str = "", severity: Any = "information",
                   timeout: Optional[float] = None, markup: bool = True, keep: bool = False) -> None: ...

    # ------------------------------------------------------------ a job's keys

    def on_job_action_requested(self, message: JobActionRequested) -> None:
        """Kill, relaunch or launch a job; destructive ones ask first. A launch or relaunch reads
        the fleet file again first: it runs what the file says now, and a relaunch shows the change."""
        op, job = message.op, message.job
        if op in (JobOp.RELAUNCH, JobOp.LAUNCH) and self.config.connect and not self.config.read_only:
            self.reload_then_plan(op, job)
        else:
            self._plan_job_action(op, job)

    @work(group="actions", exit_on_error=False, name="fleet reload")
    async def reload_then_plan(self, op: JobOp, job: str) -> None:
        try:
            await self.client.reload_fleet()
        except FleetError as exc:
            self.notify(f"the fleet file has a mistake; nothing sent: {exc}", severity="error", timeout=8)
            return
        except OPERATOR_ERRORS as exc:
            self.post_message(JobActionFailed(job, op, describe_error(exc)))
            return
        self.state.set_fleet(self.client.fleet)
        for node in list(self.client.configured):  # the configure of each node said it again
            self._show_copy(node, self.client.copy_of(node))
        self._show_moves()
        self._plan_job_action(op, job, tuple(self.client.spec_changes.get(job, ())))

    def _plan_job_action(self, op: JobOp, job: str, changes: tuple[str, ...] = ()) -> None:
        row = self.state.job_row(job)
        node = row.node if row is not None else None
        refused = self.client.refused.get(node) if node is not None and not self.config.read_only else None
        if refused is not None:  # another fleet owns this file's jobs there: a change needs --take-over
            self.notify(f"{node}: {refused.reason}", severity="warning", timeout=6)
            return
        dest = spare_for(self.client.fleet, job) if op is JobOp.MOVE else None
        plan = plan_job_action(op, job, row, read_only=self.config.read_only, grace_s=self.config.grace_s,
                               changes=changes, dest=dest)
        if isinstance(plan, Refuse):
            self.notify(plan.message, severity="warning", timeout=4)
        elif isinstance(plan, Confirm):
            self._confirm(op, job, plan)
        else:
            self.run_job_action(op, job)

    def _confirm(self, op: JobOp, job: str, plan: Confirm) -> None:
        def answered(confirmed: Optional[bool]) -> None:
            if confirmed:
                self.run_job_action(op, job)
            else:
                self.notify(f"{op} of {job} cancelled", timeout=3)

        self.push_screen(ConfirmScreen(plan.title, plan.question, plan.yes), answered)

    # ------------------------------------------------------------ a GPU process of no job

    def on_process_kill_requested(self, message: ProcessKillRequested) -> None:
        """Kill a GPU process that belongs to no job, after asking."""
        node, pid = message.node, message.pid
        plan = plan_process_kill(node, pid, read_only=self.config.read_only, grace_s=self.config.grace_s)
        if isinstance(plan, Refuse):
            self.notify(plan.message, severity="warning", timeout=4)
            return

        def answered(confirmed: Optional[bool]) -> None:
            if confirmed:
                self.run_process_kill(node, pid)
            else:
                self.notify(f"kill of pid {pid} cancelled", timeout=3)

        self.push_screen(ConfirmScreen(plan.title, plan.question, plan.yes), answered)

    @work(group="actions", exit_on_error=False, name="process kill")
    async def run_process_kill(self, node: str, pid: int) -> None:
        what = f"pid {pid} on {node}"
        if not self.config.connect:
            self.post_message(JobActionFailed(what, JobOp.KILL, "this console is not connected to the fleet"))
            return
        self.notify(f"kill {what}…", timeout=3)
        try:
            verdict = await self.client.request(ops.KillPid(pid=pid, grace_s=self.config.grace_s), node=node)
        except OPERATOR_ERRORS as exc:
            self.post_message(JobActionFailed(what, JobOp.KILL, describe_error(exc)))
            return
        self.post_message(JobActionFinished(what, JobOp.KILL, verdict))

    def on_process_adopt_requested(self, message: ProcessAdoptRequested) -> None:
        """Adopt a GPU process that belongs to no job, after asking; the start the console saw goes
        with the request, so a pid reused since is refused."""
        node, pid = message.node, message.pid
        view = self.state.nodes.get(node)
        seen = next((p for g in (view.snapshot.gpus if view is not None and view.snapshot is not None else [])
                     for p in g.processes if p.pid == pid), None)
        command = seen.command if seen is not None else None
        name = adopt_name(pid, command)
        plan = plan_process_adopt(node, pid, name, command, read_only=self.config.read_only)
        if isinstance(plan, Refuse):
            self.notify(plan.message, severity="warning", timeout=4)
            return
        started = seen.started_at if seen is not None else None

        def answered(confirmed: Optional[bool]) -> None:
            if confirmed:
                self.run_process_adopt(node, pid, name, started)
            else:
                self.notify(f"adopt of pid {pid} cancelled", timeout=3)

        self.push_screen(ConfirmScreen(plan.title, plan.question, plan.yes), answered)

    @work(group="actions", exit_on_error=False, name="process adopt")
    async def run_process_adopt(self, node: str, pid: int, name: str, started_at: Optional[float]) -> None:
        if not self.config.connect:
            self.notify("this console is not connected to the fleet", title=f"adopt pid {pid} failed",
                        severity="error", timeout=20)
            return
        try:
            r = await self.client.request(ops.Adopt(pid=pid, job=name, started_at=started_at), node=node)
        except OPERATOR_ERRORS as exc:
            self.notify(describe_error(exc), title=f"adopt pid {pid} failed", severity="error", timeout=20)
            return
        gpus = f"GPU {', '.join(map(str, r.gpus))}" if r.gpus else "no GPU"
        text = f"pid {r.pid} on {node} is job {r.job} ({gpus})"
        self.verdicts.append((r.job, "adopt", text))
        # the answer to the operator's key: kept on the notice line as a kill's verdict is
        self.notify(text, title=f"adopted pid {pid}", timeout=15, keep=True)
        self.schedule_refresh()

    # ------------------------------------------------------------ sent to the node

    def _node_of(self, job: str) -> Optional[str]:
        """The node of a job the fleet file does not declare (an adopted one), from its row; None
        for a declared job (the client routes it)."""
        if any(j.name == job for j in self.client.fleet.jobs):
            return None
        row = self.state.job_row(job)
        return row.node if row is not None else None

    @work(group="actions", exit_on_error=False, name="job action")
    async def run_job_action(self, job_op: JobOp, job: str, quiet: bool = False) -> None:
        """Send ``job_op`` for ``job`` now, without asking: its request (``job_request``), or
        the requests of a move."""
        if not self.config.connect:
            self.post_message(JobActionFailed(job, job_op, "this console is not connected to the fleet"))
            return
        if not quiet:
            self.notify(f"{job_op} {job}…", timeout=3)
        if job_op is JobOp.MOVE:
            await self._move(job)
            return
        try:
            # each of the requests answers its own type; Op's type parameter is invariant, so the
            # union of requests is told as the op that answers the union of their answers
            req = cast("ops.Op[JobOutcome]", job_request(job_op, job, self.config.grace_s))
            result = await self.client.request(req, node=self._node_of(job))
        except OPERATOR_ERRORS as exc:
            self.post_message(JobActionFailed(job, job_op, describe_error(exc)))
            return
        self.post_message(JobActionFinished(job, job_op, result))

    async def _move(self, job: str) -> None:
        """A move to the first free spare (console/moving.py); the fleet as it runs afterwards."""
        dest = spare_for(self.client.fleet, job)
        if dest is None:
            self.post_message(JobActionFailed(job, JobOp.MOVE, "no spare node is free"))
            return
        try:
            report = await move_job(self.client, job, dest, self.config.grace_s, self.placements)
        except MoveFailed as exc:
            self.post_message(JobActionFailed(job, JobOp.MOVE, "\n".join([*exc.done, str(exc)])))
            return
        except OPERATOR_ERRORS as exc:
            self.post_message(JobActionFailed(job, JobOp.MOVE, describe_error(exc)))
            return
        self.state.set_fleet(self.client.fleet)
        self._show_moves()
        self.post_message(JobActionFinished(job, JobOp.MOVE, report))

    def on_job_action_finished(self, message: JobActionFinished) -> None:
        self._tell(message.job, message.op, outcome_notice(message.op, message.job, message.result))
        self.schedule_refresh()

    def on_job_action_failed(self, message: JobActionFailed) -> None:
        self._tell(message.job, message.op, failure_notice(message.op, message.job, message.error))

    def _tell(self, job: str, op: JobOp, notice: Notice) -> None:
        self.verdicts.append((job, op, notice.text))
        self.notify(notice.text, title=notice.title or "", severity=notice.severity,  # type: ignore[arg-type]
                    timeout=notice.timeout, keep=True)

    def _start_demo_jobs(self, snap: Snapshot) -> None:
        for j in snap.jobs:
            if j.name in self._autostart:
                self._autostart.discard(j.name)
                if not ShownState(j.state).alive:
                    self.run_job_action(JobOp.LAUNCH, j.name, quiet=True)

    # ------------------------------------------------------------ a node's doctor, the plans compared

    def on_doctor_requested(self, message: DoctorRequested) -> None:
        """`d`: the node's checks in a screen at once, filled when the node answers."""
        node = message.node
        screen = DoctorScreen(node)
        self.push_screen(screen)
        if not self.config.connect:
            screen.show_error("this console is not connected to the fleet")
            return
        self.run_worker(self._doctor(node), group=f"doctor:{node}", exclusive=True, exit_on_error=False,
                        name=f"doctor of {node}")

    async def _doctor(self, node: str) -> None:
        from .commands.doctor import doctor_op

        try:
            op = doctor_op(self.client.fleet.node(node))
            report = await self.client.request(op, node=node, timeout=DOCTOR_TIMEOUT_S, connect=False)
        except OPERATOR_ERRORS as exc:
            self.post_message(DoctorFailed(node, describe_error(exc)))
        else:
            self.post_message(DoctorFinished(node, report))

    def _doctor_screen(self, node: str) -> Optional[DoctorScreen]:
        return next((s for s in reversed(self.screen_stack) if isinstance(s, DoctorScreen) and s.node == node
                     and not s.done), None)

    def on_doctor_finished(self, message: DoctorFinished) -> None:
        from .commands.doctor import counts

        screen = self._doctor_screen(message.node)
        if screen is not None:
            screen.show_report(message.report)
            return
        worst = message.report.worst.value  # closed meanwhile: the summary as a notice
        severity = {"ok": "information", "warn": "warning"}.get(worst, "error")
        self.notify(f"{counts(message.report)} (:doctor {message.node} shows the lines)", title=f"doctor of {message.node}",
                    severity=severity, timeout=10)  # type: ignore[arg-type]

    def on_doctor_failed(self, message: DoctorFailed) -> None:
        screen = self._doctor_screen(message.node)
        if screen is not None:
            screen.show_error(message.error)
        else:
            self.notify(message.error, title=f"doctor of {message.node} failed", severity="error", timeout=10,
                        markup=False)

    def on_plans_compare_requested(self, message: PlansCompareRequested) -> None:
        """`p`: the fleet file's [[plans]] side by side, read again now (a plan written since counts)."""
        if not isinstance(self.screen, PlansScreen):
            self.push_screen(PlansScreen(self.fleet_name))
        self._compare_plans()

    @work(thread=True, group="plans", exclusive=True, exit_on_error=False, name="plans compared")
    def _compare_plans(self) -> None:
        """A thread: the plan.json files are read here, and the fleet file (plain files, no asyncssh)."""
        from .commands.plan import Comparison, compare_plans
        from ..remote.fleet import load_fleet

        fleet = self.config.fleet
        try:
            plans = load_fleet(fleet.path).plans if fleet.path is not None else fleet.plans
        except FleetError as exc:
            self.post_message(PlansCompared(Comparison(len(fleet.plans), error=f"the fleet file has a mistake: {exc}")))
            return
        self.post_message(PlansCompared(compare_plans(plans, fleet.path)))

    def on_plans_compared(self, message: PlansCompared) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, PlansScreen):
                screen.show(message.comparison)
