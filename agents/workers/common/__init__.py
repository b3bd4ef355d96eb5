"""What the worker programs share: the done-set (doneset.py), the output directory's lock
(dirlock.py; files replaced atomically are the contract's, agents/contract/atomic.py), shard names and the durable close of a shard
(shards.py), S3 sync (s3sync/), the pre-launch audit gate (audit_gate.py), the progress
document and its quality keys (progress.py), the chat shapes of records (chat.py), and which
records a ``--part I/N`` takes (parts.py).

Nothing here imports a worker program; the programs import from here.
"""
