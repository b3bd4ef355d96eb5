"""The watcher's parts on their own: the fleet file's new tables and job keys, redaction,
conditions that come up and clear, deadline slips, NVML health reads that never raise."""

from __future__ import annotations

import pytest

from gpudeck.agents.contract.vocab import AlertKind, EventKind, JobState
from gpudeck.agents.contract.jobs import JobSpec, SpecError
from gpudeck.agents.contract.wire import Disk, Host, JobStatus, Progress
from gpudeck.agents.watch.checks import Checks
from gpudeck.agents.watch.conditions import Condition, Conditions
from gpudeck.agents.watch.disks import DiskFilling
from gpudeck.agents.contract.watching import redact
from gpudeck.remote.fleet import FleetError, parse_fleet

SECRET = "https://hooks.slack.com/services/T000/B000/XyZsecret"

FLEET = f'''
[alerts]
gpu_temp_c = 80
stall_s = 1200
idle_gpu_s = 600

[[notify]]
url = "{SECRET}"
format = "slack"

[[notify]]
url_env = "NTFY_URL"
format = "ntfy"
events = ["died", "gave_up"]

[[jobs]]
name = "gen"
command = ["run"]
restart = "on-failure"
max_restarts = 3
restart_backoff_s = 30
restart_on_stall = "30m"
deadline = 2026-12-05T00:00:00Z

[[jobs]]
name = "own"
command = ["run"]
stall_after_s = 60
'''


def test_the_fleet_file_carries_notify_alerts_and_restart_policies():
    fleet = parse_fleet(FLEET, "fleet.toml")
    assert fleet.alerts.gpu_temp_c == 80 and fleet.alerts.disk_free_pct == 5.0
    assert [n.format for n in fleet.notify] == ["slack", "ntfy"] and fleet.notify[1].events == ["died", "gave_up"]
    gen, own = fleet.jobs
    assert (gen.restart, gen.max_restarts, gen.restart_backoff_s, gen.stall_restart_s) == ("on-failure", 3, 30, 1800)
    assert gen.deadline_t == 1796428800.0 and gen.stall_after_s == 1200 and own.stall_after_s == 60
    settings = fleet.watch_settings()
    assert settings.notify[0].url == SECRET and settings.alerts.idle_gpu_s == 600
    assert JobSpec.from_dict(gen.to_dict()) == gen
    assert parse_fleet('[[jobs]]\nname = "a"\ncommand = ["x"]\n').watch_settings() is not None


@pytest.mark.parametrize("text, line, words", [
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\nrestart = "sometimes"\n', 1, "'restart' must be one of never"),
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\nmax_restarts = -1\n', 4, "expected a number from 0 to 1000"),
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\nrestart_on_stall = "soon"\n', 1, "expected a duration"),
    ('[[jobs]]\nname = "a"\ncommand = ["x"]\ndeadline = "friday"\n', 1, "expected a date and time"),
    ('[alerts]\ngpu_temp_c = "hot"\n', 2, "expected a finite number >= 0"),
    ('[alerts]\nnoise_db = 3\n', 2, "has no key 'noise_db'"),
    ('[[notify]]\nformat = "slack"\n', 1, "exactly one of 'url' and 'url_env'"),
    (f'[[notify]]\nurl = "{SECRET}"\nformat = "email"\n', 3, "expected one of json, slack, ntfy"),
    (f'[[notify]]\nurl = "{SECRET}"\nevents = ["everything"]\n', 3, "is not an event"),
    ('[[notify]]\nurl = 42\n', 2, "expected a string, got an integer"),
    (f'[[notify]]\nurl = "{SECRET}"\n[[notify]]\nurl = "{SECRET}"\n', 3, "the same target"),
])
def test_fleet_file_mistakes_say_where_and_never_show_a_url(text, line, words):
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "fleet.toml")
    assert err.value.line == line and words in str(err.value), str(err.value)
    assert "XyZsecret" not in str(err.value) and "hooks.slack" not in str(err.value)


def test_redaction():
    assert redact(SECRET) == "https://hooks…/…"
    assert redact("http://user:pw@10.0.0.1:8080/x?token=1") == "http://user…/…"
    assert redact(None) == "-"
    with pytest.raises(SpecError):
        JobSpec(name="a", command=["x"], restart_backoff_s=-1)


def test_a_condition_is_notified_once_and_resolved_once(tmp_path):
    sent = []
    conds = Conditions(tmp_path, lambda kind, msg, **kw: sent.append((kind, kw["notify"])))
    hot = Condition("temperature:0", EventKind.TEMPERATURE, "GPU 0 at 90 C", AlertKind.GPU_HOT, gpu=0)
    conds.update(100.0, [hot], repeat_s=900)
    conds.update(101.0, [hot], repeat_s=900)
    conds.update(102.0, [], repeat_s=900)
    conds.update(103.0, [hot], repeat_s=900)  # flapping within repeat_s: timeline only
    conds.update(104.0, [], repeat_s=900)
    assert sent == [(EventKind.TEMPERATURE, True), (EventKind.RESOLVED, True), (EventKind.TEMPERATURE, False),
                    (EventKind.RESOLVED, False)]
    again = Conditions(tmp_path, lambda kind, msg, **kw: sent.append((kind, kw["notify"])))  # a new watcher
    again.update(200.0, [hot], repeat_s=900)
    assert sent[-1] == (EventKind.TEMPERATURE, False)
    again.update(2000.0, [], repeat_s=900)
    again.update(2001.0, [hot], repeat_s=900)
    assert sent[-1] == (EventKind.TEMPERATURE, True)


def test_a_projection_that_slips_by_more_than_a_quarter_is_news():
    checks = Checks()
    spec = {"j": JobSpec(name="j", command=["x"], deadline="2030-01-01T00:00:00Z")}

    def job(eta):
        return JobStatus(name="j", kind="command", state=JobState.RUNNING, progress=Progress(done=1, eta_s=eta))
    assert not checks._slips(0.0, [job(1000.0)], spec)
    assert not checks._slips(60.0, [job(1100.0)], spec)  # finish 1160: +16%
    (slip,) = checks._slips(120.0, [job(1200.0)], spec)  # finish 1320: +32% of the 1000 s it had left
    assert slip.event is EventKind.DEADLINE and slip.key == "deadline-slip:j"


def test_the_slip_is_measured_against_the_days_earliest_projection_as_ever():
    """The day's projections are kept as a sliding minimum (a tick no longer scans 1,441 of
    them a job): over two and a half days of projections going up and down, the slips are the
    ones a scan of every projection of the day finds."""
    import random
    from collections import deque

    checks = Checks()
    spec = {"j": JobSpec(name="j", command=["x"], deadline="2030-01-01T00:00:00Z")}
    rng = random.Random(5)
    day: deque = deque()  # every projection of the last day, one a minute: what the scan looked at
    t, eta, slips = 0.0, 50_000.0, 0
    while t < 2.5 * 86400:
        t += rng.uniform(5, 25)
        eta = max(100.0, eta + rng.uniform(-900, 1000))
        finish = t + eta
        while day and t - day[0][0] > 86400:
            day.popleft()
        if not day or t - day[-1][0] >= 60:
            day.append((t, finish))
        t0, f0 = min(day, key=lambda x: x[1])
        want = f0 > t0 and finish - f0 > 0.25 * (f0 - t0)
        got = checks._slips(t, [JobStatus(name="j", kind="command", state=JobState.RUNNING,
                                          progress=Progress(done=1, eta_s=eta))], spec)
        assert bool(got) == want, t
        if got:
            slips += 1
            from gpudeck.agents.watch.checks import _fmt_t
            assert got[0].message.startswith(f"job j: projected finish moved from {_fmt_t(f0)} to {_fmt_t(finish)}")
    assert 0 < slips
    assert len(checks._proj["j"]) < len(day)  # only the projections no later one undercuts


class _Broken:
    """An NVML where every call fails, as on a board without the features."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_FEATURE_ENABLED = 1, 0, 1
    nvmlEventTypeXidCriticalError = 8

    def __getattr__(self, name):
        def fail(*a, **k):
            raise RuntimeError(f"{name}: not supported")
        return fail


def test_nvml_health_reads_never_raise():
    from gpudeck.agents.sense.health import NvmlHealth

    (h,) = NvmlHealth(_Broken(), ["handle"]).read()
    assert (h.xids, h.ecc_uncorrected, h.pages_pending, h.throttle) == ([], None, None, [])


def _host(free: int) -> Host:
    return Host("gpu-a", 1.0, 1, 1, 2, 0.0, 0.0, 0.0, [Disk("/data", free, 1000 * 2**30)])


def test_a_disk_filling_up_is_the_nodes_alert_before_it_is_full():
    rule = DiskFilling()
    t0, got = 1_764_504_000.0, []
    for k in range(20):  # 1 GiB a minute: 100 GiB free lasts under two hours
        got = rule.conditions(t0 + 10 * k, _host(100 * 2**30 - k * 2**30 // 6), 86400.0, 600.0)
    (c,) = got
    assert c.key == "disk_filling:/data" and c.alert is AlertKind.DISK_FILLING and c.event is EventKind.DISK
    assert c.message.startswith("/data: ") and "full in 1h" in c.message
    assert rule.conditions(t0 + 200, _host(110 * 2**30), 86400.0, 600.0) == []  # GiBs deleted: no trend now


def test_a_new_agent_keeps_a_disk_filling_up_until_it_has_measured_again():
    t0 = 1_764_504_000.0
    held = DiskFilling(held=lambda key: key == "disk_filling:/data")  # the last agent left it up
    (c,) = held.conditions(t0, _host(100 * 2**30), 86400.0, 600.0)
    assert "measured again" in c.message and c.key == "disk_filling:/data"
    assert DiskFilling().conditions(t0, _host(100 * 2**30), 86400.0, 600.0) == []  # nothing left up: no news
    later = held.conditions(t0 + 200, _host(100 * 2**30), 86400.0, 600.0)  # measured: it stopped filling
    assert later == []
