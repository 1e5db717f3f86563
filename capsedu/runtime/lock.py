"""One writer per output folder: ``filelock.FileLock`` on ``<folder>.lock``, taken before any work.

A second writer is refused at once with one line (``LockError``); the kernel drops the lock of a
process that died, so a killed run never blocks the next. Re-entrant within a process (one lock
object per path). The empty lock file stays after release: filelock keeps it so that every writer
locks one inode (removing it would let two writers lock two files).
"""
from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock, Timeout

__all__ = ["LockError", "OutputLock"]


class LockError(RuntimeError):
    """Another process is writing the same output."""


class OutputLock:
    """``with OutputLock(path):`` -- this process is the only writer of ``path`` while it runs."""

    def __init__(self, path):
        self.path = Path(os.path.abspath(os.fspath(path)))
        self.lock = FileLock(f"{self.path}.lock", timeout=0, is_singleton=True)

    def acquire(self) -> OutputLock:
        try:
            self.lock.acquire()
        except Timeout:
            raise LockError(f"{self.path} is being written by another process (it holds {self.lock.lock_file}); "
                            "wait for it to finish, or use another --out") from None
        return self

    def release(self) -> None:
        if self.lock.is_locked:
            self.lock.release()

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
