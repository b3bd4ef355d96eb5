"""One module per extra command. Each defines ``register(sub)``, which adds an argparse
sub-parser with ``set_defaults(run=fn)``; ``fn(args)`` returns an exit code, or is a
coroutine function returning one. Import heavy modules inside ``fn``, never at the top."""
