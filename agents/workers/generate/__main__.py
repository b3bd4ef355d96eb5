"""``python -m gpudeck.agents.workers.generate``."""

import sys

from .options import EXIT_USAGE


def _main() -> int:
    try:
        from .cli import main

        return main()
    except ModuleNotFoundError as exc:  # a dependency missing from this python: one line, the fix in it
        from ...contract.needs import worker_import_error

        line = worker_import_error(exc, "generate")
        if line is None:
            raise
        print(line, file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(_main())
