"""Model staging: a job's ``stage = [{ from = "...", to = "..." }]`` copied to fast local
storage (``/dev/shm``, a local NVMe) before the job's own command starts.

The copy runs as the first step of the job itself (``python -m gpudeck.agents.staging PLAN --
ARGV``, :mod:`.run`), in its process group and cgroup: it survives the agent like the job, a
kill stops it like the job, and when it is done it ``exec``\\ s the job's command, whose pid
stays the job's. The supervisor checks the plan before it starts anything (:func:`.plan.check`):
a stage that does not fit is refused at launch, naming both figures.

What is durable before what, so that a kill at any moment leaves nothing wrong:

- A file is copied to a partial name beside its final one (``.NAME.<stamp>.partial``, the stamp
  a hash of the source's size and mtime, or S3 ETag), flushed, given the source's mtime, then
  renamed over the final name. A half file is never under the final name.
- A partial of the same stamp is resumed from its length (a local file or an S3 object of the
  same ETag read from that offset); a partial of another stamp is removed: the source changed.
- A file is in place when its size and mtime are the source's (local), or its size is and the
  node's record says it came from an object of the same ETag (S3). A copy in place is not
  copied again; a copy gone (``/dev/shm`` after a reboot) is copied again.
- The node's record of the copy (``<home>/staged/<key>.json``, :mod:`.record`) is written after
  its files are in place and before the job's command starts; ``gpudeck doctor`` lists the
  records, ``gpudeck unstage`` removes the copies they name. A kill never removes a copy.
- One lock per destination (``<home>/staged/<key>.lock``, flock): a second job staging to the
  same place waits (``staging: waiting for ...``), then finds the copy in place.
"""

from .plan import StagePlan, StageRefused, check, plan_stage

__all__ = ["StagePlan", "StageRefused", "check", "plan_stage"]
