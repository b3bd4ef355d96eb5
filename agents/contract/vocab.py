"""The job vocabulary: the states a job goes through, what an engine, an alert, an event or a
restart policy can be. String enums: the JSON on the wire and on disk holds their plain values,
and nothing else spells a state as a string."""

from __future__ import annotations

import enum


class JobState(str, enum.Enum):
    PENDING = "pending"  # declared, never launched on this node
    STARTING = "starting"  # launched; an engine that does not answer yet
    RUNNING = "running"
    STOPPING = "stopping"  # a kill is under way
    EXITED = "exited"  # ended by itself with code 0
    FAILED = "failed"  # ended by itself with a non-zero code
    KILLED = "killed"  # ended by a kill we sent
    CANCELLED = "cancelled"  # a cluster task cancelled while it waited in the queue: it never ran (again)
    LOST = "lost"  # gone with no exit code and no kill: a reboot, an OOM of the wrapper...
    BLOCKED = "blocked"  # never launched: a job it runs `after` failed or gave up (agents/watch/phases.py)
    FENCED = "fenced"  # stopped for good: the job was moved to another node, whose attempt holds the output

    def __str__(self) -> str:
        return self.value

    @property
    def alive(self) -> bool:
        return self in _ALIVE


_ALIVE = frozenset({JobState.STARTING, JobState.RUNNING, JobState.STOPPING})


class ShownState(str, enum.Enum):
    """What the console shows in a job's state column: its :class:`JobState`, or ``ready`` for
    an engine job whose server answers, or ``unknown`` for a job on a node that cannot be read.
    A job never launched (JobState ``pending``) is ``not_started``, and a cluster task that waits
    in Slurm's queue ``queued``: "pending" said both, and a newcomer read it as about to start."""

    NOT_STARTED = "not_started"
    QUEUED = "queued"  # a cluster task Slurm holds in its queue (its JobState is pending)
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    EXITED = "exited"
    FAILED = "failed"
    KILLED = "killed"
    CANCELLED = "cancelled"
    LOST = "lost"
    BLOCKED = "blocked"
    FENCED = "fenced"
    READY = "ready"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, state: JobState) -> "ShownState":
        return cls(state.value)

    @classmethod
    def _missing_(cls, value: object) -> "ShownState | None":
        return cls.NOT_STARTED if value == JobState.PENDING.value else None  # JobState's spelling

    @property
    def text(self) -> str:
        """As the console and `status` write it: ``not started``, ``queued``, ``running`` (a queued
        task's row says "queued by Slurm" among its flags)."""
        return _SHOWN_TEXT.get(self, self.value)

    @property
    def alive(self) -> bool:
        return self in (ShownState.STARTING, ShownState.RUNNING, ShownState.STOPPING, ShownState.READY)


_SHOWN_TEXT = {ShownState.NOT_STARTED: "not started"}


class NodeState(str, enum.Enum):
    """A node as a console sees it: the ``state`` of each node in `status --json`."""

    UP = "up"  # its agent answers
    CONNECTING = "connecting"  # not answered yet
    UNREACHABLE = "unreachable"  # cannot be read: see its error
    # it answers over SSH (or is this machine), and its agent would not serve: it stopped before
    # its hello (a home it refuses, no python), runs another version, or refused the configure;
    # the error is the agent's own reason. Its jobs may still run: never counted as lost
    AGENT_FAILED = "agent_failed"
    # it answers, and some of this fleet file's jobs there belong to another fleet (a copy of
    # the file without the same [fleet] name, or another file's): shown, marked with their owner
    OWNED_ELSEWHERE = "owned_elsewhere"

    def __str__(self) -> str:
        return self.value


class EngineState(str, enum.Enum):
    """An inference server as its /metrics answers: not listening, listening but not serving,
    serving, or answering in a way that says it is broken."""

    LOADING = "loading"  # connection refused: the process loads the model
    STARTING = "starting"  # 503, or health not yet 200
    READY = "ready"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    @property
    def answers(self) -> bool:
        """Past start-up: a job whose engine is LOADING or STARTING shows as starting."""
        return self in (EngineState.READY, EngineState.FAILED)


class AlertKind(str, enum.Enum):
    """What an alert is about. The node raises most; the console adds the ones only it can see."""

    SHARED_GPU = "shared_gpu"  # two jobs on one GPU
    UNOWNED_GPU_PROCESS = "unowned_gpu_process"  # GPU memory no job owns
    JOB_DIED = "job_died"
    STALLED = "stalled"  # alive, no progress
    DISK_FULL = "disk_full"
    ENGINE_FAILED = "engine_failed"
    NO_SUCH_GPU = "no_such_gpu"  # a job declares a GPU index the node does not have
    DISK_FILLING = "disk_filling"  # the node's trend: full within [alerts] disk_fill_s (a day)
    UNREACHABLE = "unreachable"  # the console cannot read the node
    AGENT_FAILED = "agent_failed"  # the console reaches the node, and its agent would not serve (NodeState)
    # raised by the watcher (agents/watch/): GPU health, thresholds, deadlines, restarts
    GPU_XID = "gpu_xid"  # an XID error reported by the driver
    GPU_ECC = "gpu_ecc"  # volatile uncorrected ECC errors
    GPU_PAGES = "gpu_pages"  # retired pages or row remapping pending (a reset is due)
    GPU_THROTTLE = "gpu_throttle"  # thermal, power-brake or hardware slowdown
    GPU_IDLE = "gpu_idle"  # a running job's GPU at 0% use for idle_gpu_s
    GPU_HOT = "gpu_hot"  # at or above gpu_temp_c
    DEADLINE = "deadline"  # the projected finish passes the job's deadline, or slipped
    PLAN_DRIFT = "plan_drift"  # the projected wall time is more than [alerts] plan_drift_pct over the job's plan.json
    GAVE_UP = "gave_up"  # the restart policy stopped restarting the job
    S3_BACKLOG = "s3_backlog"  # a job's oldest pending upload is older than [alerts] s3_backlog_s
    SERVERS_RESTING = "servers_resting"  # more than servers_resting_pct of a job's servers down for servers_resting_s
    IDLE_PAID = "idle_paid"  # priced GPUs idle (no job, or 0% use) for idle_paid_s: the dollars an hour
    # a generate job's last completions over an [alerts] *_pct threshold (agents/watch/checks.py)
    QUALITY_CUT = "quality_cut"  # cut at max_tokens: cut_pct
    QUALITY_EMPTY = "quality_empty"  # nothing came back: empty_pct
    QUALITY_NO_ANSWER = "quality_no_answer"  # reasoning and no answer: no_answer_pct
    QUALITY_REPETITION = "quality_repetition"  # the text's tail loops: repetition_pct

    def __str__(self) -> str:
        return self.value

    @property
    def severe(self) -> bool:
        return self in (AlertKind.SHARED_GPU, AlertKind.JOB_DIED, AlertKind.UNREACHABLE, AlertKind.AGENT_FAILED,
                        AlertKind.DISK_FULL, AlertKind.GPU_XID, AlertKind.GPU_ECC, AlertKind.GAVE_UP)


class RestartPolicy(str, enum.Enum):
    """A job's ``restart`` in the fleet file: what the watcher does when the job ends by itself."""

    NEVER = "never"
    ON_FAILURE = "on-failure"  # ended with a non-zero code, or lost
    ALWAYS = "always"  # ended any way but by an operator's kill

    def __str__(self) -> str:
        return self.value

    def wants(self, state: "JobState") -> bool:
        """Whether a job that ended in ``state`` is to be started again."""
        if self is RestartPolicy.ALWAYS:
            return state in (JobState.EXITED, JobState.FAILED, JobState.LOST)
        if self is RestartPolicy.ON_FAILURE:
            return state in (JobState.FAILED, JobState.LOST)
        return False


class EventKind(str, enum.Enum):
    """What a line of the node's timeline (``<home>/events.jsonl``) or a notification is about."""

    DIED = "died"
    RESTARTED = "restarted"
    GAVE_UP = "gave_up"
    STALLED = "stalled"
    FINISHED = "finished"
    GPU_HEALTH = "gpu_health"
    DISK = "disk"
    TEMPERATURE = "temperature"
    DEADLINE = "deadline"
    PLAN_DRIFT = "plan_drift"
    S3_BACKLOG = "s3_backlog"
    SERVERS_RESTING = "servers_resting"
    IDLE_PAID = "idle_paid"
    IDLE_ACTION = "idle_action"  # the node's idle_action ran: its exit and output (agents/watch/idle.py)
    BLOCKED = "blocked"  # a job's `after` can no longer be met: a job it runs after failed or gave up
    QUALITY = "quality"  # a generate job's completions are junk past an [alerts] *_pct threshold
    NODE_UNREACHABLE = "node_unreachable"  # sent by a console, never by the node itself
    WATCHER_RESTARTED = "watcher_restarted"  # the watcher came back after dying (down from, to, who restarted it)
    ACKNOWLEDGED = "acknowledged"  # an operator acknowledged a job's gave_up (`gpudeck ack JOB`)
    NOTE = "note"  # an operator's note (`gpudeck note "text"`): notified only when it asks to be
    RESOLVED = "resolved"  # a condition above that has cleared
    # the timeline only, never notified
    STATE = "state"  # a job changed state
    ACTION = "action"  # a launch, kill, relaunch (the audit log's actions)
    ALERT = "alert"  # any other alert that came up
    NOTIFIED = "notified"  # a notification was delivered
    NOTIFY_FAILED = "notify_failed"  # a delivery attempt failed (it is retried)
    WATCH = "watch"  # the watcher started, stopped, took over

    def __str__(self) -> str:
        return self.value


NOTIFY_EVENTS = (EventKind.DIED, EventKind.RESTARTED, EventKind.GAVE_UP, EventKind.STALLED, EventKind.FINISHED,
                 EventKind.GPU_HEALTH, EventKind.DISK, EventKind.TEMPERATURE, EventKind.DEADLINE,
                 EventKind.PLAN_DRIFT, EventKind.S3_BACKLOG, EventKind.SERVERS_RESTING, EventKind.IDLE_PAID,
                 EventKind.IDLE_ACTION,
                 EventKind.BLOCKED, EventKind.QUALITY, EventKind.NODE_UNREACHABLE, EventKind.WATCHER_RESTARTED, EventKind.ACKNOWLEDGED,
                 EventKind.NOTE, EventKind.RESOLVED)


class AuditAction(str, enum.Enum):
    """An action on a job, as a line of the audit log (``<home>/audit.log``) names it, and the
    timeline's ``action`` events after it. The spellings are on disk and in events: they stay.
    (An op's name is another word: the ``kill_pid`` op's lines are ``kill-pid``.)"""

    CONFIGURE = "configure"  # the node was told its jobs (a fleet file's, or an op's)
    LAUNCH = "launch"
    RELAUNCH = "relaunch"
    ENDED = "ended"  # it ended by itself
    KILL_START = "kill-start"  # a kill sent its first signal
    KILL = "kill"  # a kill's verdict
    KILL_RESUME = "kill-resume"  # a new agent finishes a kill an old one began
    KILL_PID_START = "kill-pid-start"
    KILL_PID = "kill-pid"  # a kill of a process no job owns, and its verdict
    ADOPT = "adopt"  # a job's processes found alive by a new agent
    ADOPT_ENDED = "adopt-ended"  # ... or found ended
    ADOPT_PID = "adopt-pid"  # a running process taken in as a job
    ADOPT_REFUSED = "adopt-refused"  # refused: it holds the node (agents/jobs/holds.py)
    KILL_REFUSED = "kill-refused"
    KILL_PID_REFUSED = "kill-pid-refused"
    RESTART = "restart"  # the watcher restarted it by its policy
    RESTART_GAVE_UP = "restart-gave-up"
    ACK = "ack"  # an operator acknowledged a job that gave up

    def __str__(self) -> str:
        return self.value


class NotifyFormat(str, enum.Enum):
    """The body a ``[[notify]]`` target gets."""

    JSON = "json"  # the event as a JSON object
    SLACK = "slack"  # {"text": ...} for a Slack (or Mattermost, Discord /slack) incoming webhook
    NTFY = "ntfy"  # plain text with Title, Priority and Tags headers (ntfy.sh)

    def __str__(self) -> str:
        return self.value


class Verdict(str, enum.Enum):
    """What one check of `gpudeck doctor` found (agents/node/doctor.py): in order of gravity."""

    OK = "ok"
    WARN = "warn"  # the run can start; something will cost time or bite later (a slow import, low limits)
    FAIL = "fail"  # the run would fail, or lose work (no model, no room, no S3 access)

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        return _VERDICT_RANK[self]


_VERDICT_RANK = {Verdict.OK: 0, Verdict.WARN: 1, Verdict.FAIL: 2}
