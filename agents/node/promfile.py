"""The node's figures for Prometheus without opening a port: node_exporter's textfile collector.

With ``--textfile-dir DIR`` (the fleet file's ``textfile_dir`` for a node) the agent writes
``DIR/gpudeck.prom`` after each snapshot, with prometheus_client's own writer
(``write_to_textfile``: a temp file in DIR renamed over the last one, so node_exporter never
reads half a file). The series, all labelled ``node`` (docs/prometheus.md lists them):

- ``gpudeck_job_state{job, state}``: 1, one series per job, ``state`` its state
  (pending, starting, running, stopping, exited, failed, killed, lost);
- ``gpudeck_job_tokens_per_second``, ``gpudeck_job_done``, ``gpudeck_job_total``,
  ``gpudeck_job_eta_seconds``, ``gpudeck_job_restarts_total`` by ``job``;
- ``gpudeck_gpu_memory_used_bytes{gpu, job}``: a GPU's memory by the job its processes belong
  to; what no job holds (other users' processes, the driver's own) under ``job=""``;
- ``gpudeck_s3_pending_uploads{job}``: declared; no sample until a job's progress carries its
  upload backlog into the snapshot;
- a generate job's quality: ``gpudeck_job_quality_ratio{job, problem}`` (the share of its last
  completions), ``gpudeck_job_quality_window{job}`` (how many), ``gpudeck_job_quality_total{job,
  problem}`` (in total) and ``gpudeck_job_useful_ratio{job}``;
- ``gpudeck_alerts_active{kind}``: the node's alerts of each kind;
- ``gpudeck_snapshot_timestamp_seconds``: when the snapshot was taken (to see a stale file).

A figure that is not known (None) has no sample: never a made-up 0.

A directory that is missing or cannot be written is one alert (agents/sense/writes.py: "cannot write
DIR/gpudeck.prom: ..."), logged once; the agent goes on, and tries again at most every
``RETRY_S`` seconds, so a failing directory never costs a tick more than one failed open.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from pathlib import Path
from typing import Iterator, Optional

from prometheus_client import CollectorRegistry, generate_latest, write_to_textfile
from prometheus_client import openmetrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..sense import writes
from ..contract.vocab import AlertKind
from ..contract.wire import JobStatus, Snapshot

log = logging.getLogger("agents")

FILE_NAME = "gpudeck.prom"
RETRY_S = 30.0  # a directory that failed is tried again this long after, not every tick
MIB = 1024 * 1024
# raised by the console alone (it cannot reach the node): never in a node's snapshot
CONSOLE_ONLY = frozenset({AlertKind.UNREACHABLE, AlertKind.AGENT_FAILED})
# generate's quality problems (agents/workers/generate/quality.py; the agent does not import workers)
QUALITY_PROBLEMS = ("cut_at_max_tokens", "empty_answer", "no_answer", "repetition")
# Every name here is a classic one, which any escaping writes the same: "underscores" skips the
# UTF-8 checks of the default (a quarter of the write). prometheus_client before 0.22 has no choice.
_UNDERSCORES = getattr(getattr(openmetrics, "exposition", None), "UNDERSCORES", None)
ESCAPING = ({"escaping": _UNDERSCORES} if _UNDERSCORES is not None
            and "escaping" in inspect.signature(write_to_textfile).parameters else {})


def tokens_per_s(job: JobStatus) -> Optional[float]:
    """The job's tokens/s as the history keeps it: its progress's, else its engine's."""
    if job.progress is not None and job.progress.tokens_per_s is not None:
        return job.progress.tokens_per_s
    if job.engine is not None and job.engine.tokens_per_s is not None:
        return job.engine.tokens_per_s
    return None


def families(snap: Snapshot) -> list[Metric]:
    """Every metric family of one snapshot."""
    node = snap.node
    jl = ["node", "job"]
    state = GaugeMetricFamily("gpudeck_job_state", "1 for the job's current state (one series per job)",
                              labels=["node", "job", "state"])
    tps = GaugeMetricFamily("gpudeck_job_tokens_per_second", "output tokens per second of a live job "
                            "(its progress, else its engine's /metrics)", labels=jl)
    done = GaugeMetricFamily("gpudeck_job_done", "items the job has done", labels=jl)
    total = GaugeMetricFamily("gpudeck_job_total", "items the job has to do", labels=jl)
    eta = GaugeMetricFamily("gpudeck_job_eta_seconds", "seconds until a live job is done at its current rate",
                            labels=jl)
    restarts = CounterMetricFamily("gpudeck_job_restarts", "restarts the watcher's restart policy counted "
                                   "(a restart without progress counts 2; an operator's launch starts over)",
                                   labels=jl)
    s3 = GaugeMetricFamily("gpudeck_s3_pending_uploads", "files of the job waiting to go up to S3", labels=jl)
    ql = ["node", "job", "problem"]
    q_ratio = GaugeMetricFamily("gpudeck_job_quality_ratio", "the share (0..1) of a generate job's last completions "
                                "(its window, up to 1,000) with each quality problem", labels=ql)
    q_window = GaugeMetricFamily("gpudeck_job_quality_window", "completions in a generate job's quality window",
                                 labels=jl)
    q_total = CounterMetricFamily("gpudeck_job_quality", "a generate job's completions with each quality problem, "
                                  "in total (across its attempts)", labels=ql)
    useful = GaugeMetricFamily("gpudeck_job_useful_ratio", "the share (0..1) of a generate job's records that are "
                               "useful (neither cut, nor ended by the server, nor without an answer)", labels=jl)
    for j in snap.jobs:
        state.add_metric([node, j.name, j.state.value], 1)
        rate = tokens_per_s(j)
        if rate is not None:
            tps.add_metric([node, j.name], rate)
        p = j.progress
        if p is not None:
            done.add_metric([node, j.name], p.done)
            if p.total is not None:
                total.add_metric([node, j.name], p.total)
            if p.eta_s is not None:
                eta.add_metric([node, j.name], p.eta_s)
            w = p.window
            if w is not None:
                q_window.add_metric([node, j.name], w.n)
                for problem in QUALITY_PROBLEMS:
                    share = w.share(problem)
                    if share is not None:
                        q_ratio.add_metric([node, j.name, problem], share)
                    if problem in p.quality:
                        q_total.add_metric([node, j.name, problem], p.quality[problem])
            if p.useful is not None and p.useful_of:
                useful.add_metric([node, j.name], min(1.0, p.useful / p.useful_of))
        if j.restart is not None:  # the watcher counts a job with a spec; an orphan's restarts are not known
            restarts.add_metric([node, j.name], j.restarts)
    mem = _gpu_memory(snap)
    alerts, stamp = _alerts(snap), _stamp(snap)
    return [state, tps, done, total, eta, restarts, mem, s3, q_ratio, q_window, q_total, useful, alerts, stamp]


def _gpu_memory(snap: Snapshot) -> Metric:
    """Each GPU's memory by the job its processes belong to, and what no job holds."""
    node = snap.node
    mem = GaugeMetricFamily("gpudeck_gpu_memory_used_bytes", "GPU memory in use by the job its processes "
                            "belong to; job=\"\": held by no job (other processes, the driver)",
                            labels=["node", "gpu", "job"])
    for g in snap.gpus:
        by_job: dict[str, float] = {}
        for proc in g.processes:
            if proc.job:
                by_job[proc.job] = by_job.get(proc.job, 0.0) + proc.used_mib
        for name, mib in sorted(by_job.items()):
            mem.add_metric([node, str(g.index), name], mib * MIB)
        mem.add_metric([node, str(g.index), ""], max(0.0, g.mem_used_mib - sum(by_job.values())) * MIB)
    return mem


def _alerts(snap: Snapshot) -> Metric:
    alerts = GaugeMetricFamily("gpudeck_alerts_active", "the node's alerts of each kind", labels=["node", "kind"])
    counts = {k: 0 for k in AlertKind if k not in CONSOLE_ONLY}
    for a in snap.alerts:
        counts[a.kind] = counts.get(a.kind, 0) + 1
    for kind, n in counts.items():
        alerts.add_metric([snap.node, kind.value], n)
    return alerts


def _stamp(snap: Snapshot) -> Metric:
    stamp = GaugeMetricFamily("gpudeck_snapshot_timestamp_seconds", "when the agent took the snapshot (unix time)",
                              labels=["node"])
    stamp.add_metric([snap.node], snap.t)
    return stamp


class _SnapshotCollector:
    """A prometheus_client collector over the snapshot being written."""

    def __init__(self) -> None:
        self.snap: Optional[Snapshot] = None

    def collect(self) -> Iterator[Metric]:
        if self.snap is not None:
            yield from families(self.snap)


def generate_text(snap: Snapshot) -> str:
    """The textfile of one snapshot, as ``TextfileWriter`` writes it."""
    collector = _SnapshotCollector()
    collector.snap = snap
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry, **ESCAPING).decode()


class TextfileWriter:
    """Writes ``gpudeck.prom`` in a directory after each snapshot; a no-op without one."""

    def __init__(self, directory: Optional[str]) -> None:
        self.path = Path(os.path.expanduser(directory)) / FILE_NAME if directory else None
        self._collector = _SnapshotCollector()
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self._collector)
        self._lock = threading.Lock()  # a status request's snapshot (a thread) and the tick's
        self._retry_at = 0.0  # monotonic: a failing directory waits until then
        self._seq = -1  # the last snapshot written: an older one never replaces it
        self._bug_logged = False

    def write(self, snap: Snapshot) -> None:
        """Write ``snap``; never raises, and never blocks on another write under way."""
        if self.path is None or time.monotonic() < self._retry_at or snap.seq <= self._seq:
            return
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._collector.snap = snap
            write_to_textfile(str(self.path), self._registry, **ESCAPING)
        except OSError as exc:  # missing, not writable, full: an alert until a write succeeds
            self._retry_at = time.monotonic() + RETRY_S
            writes.failed(self.path, exc)
        except Exception:  # noqa: BLE001 -- a bug of ours: logged once, never the tick
            self._retry_at = time.monotonic() + RETRY_S
            if not self._bug_logged:
                log.exception("cannot write %s; trying again every %.0f s", self.path, RETRY_S)
                self._bug_logged = True
        else:
            self._seq, self._retry_at = snap.seq, 0.0
            writes.ok(self.path)
        finally:
            self._collector.snap = None
            self._lock.release()
