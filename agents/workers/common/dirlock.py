"""A worker's hold on its output directory: one live worker per directory."""

from __future__ import annotations

import os


class DirectoryBusy(RuntimeError):
    """Another live process holds the output directory."""


class DirLock:
    """An exclusive ``flock`` on ``DIR/.lock`` for as long as the worker runs: two workers
    writing one output directory (a relaunch while the old process still runs, the
    "8 processes on 4 GPUs" failure) would interleave shards. The kernel drops the lock when
    the process dies, kill -9 included, so a stale lock file never blocks a restart."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, ".lock")
        self._fd: int | None = None

    def acquire(self) -> "DirLock":
        import fcntl
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            finally:
                os.close(fd)
            raise DirectoryBusy(f"{os.path.dirname(self.path)} is in use by another worker (pid {holder}); "
                                f"stop it first or choose another output directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "DirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
