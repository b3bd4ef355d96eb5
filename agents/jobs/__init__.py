"""The jobs of a node: the seam every other part reaches them through (backend.py: JobBackend,
JobError, JobFacts, GpuReader), the audit log both backends write (audit.py), and the local
backend, which runs them as this host's processes: supervisor.py (JobSupervisor: each tick's rows,
configure, logs) over its layers, each over the one before: store.py (its state, a job's files),
liveness.py (what runs, how it ended, the log cap), launching.py (launch, adopt, the wrapper) and
kills.py (kill and verify, relaunch); and records.py (state.json),
envs.py (a job's python_env), contain.py, killing.py, joblog.py, specdiff.py, owners.py,
planwatch.py, holds.py and fenceread.py. The second backend, a cluster's, is agents/cluster/."""
