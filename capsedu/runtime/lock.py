"""One writer per output (no torch): ``train``'s ``--out`` folder.

- ``OutputLock(path)``: an exclusive ``fcntl.flock`` on ``<path>.lock``, which holds the holder's
  pid, host and start time. Taken before any work; a second writer is refused at once with one
  line naming the holder. Re-entrant within a process (the command line and the experiment it
  runs both take it). Released (and the file removed) on ``release``; a lock file whose holder died
  (the kernel dropped its flock) is taken over with a note on stderr.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys
from pathlib import Path
from typing import Dict

__all__ = ["LockError", "OutputLock"]

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the lock file still names the writer
    fcntl = None

_HELD: Dict[str, OutputLock] = {}


class LockError(RuntimeError):
    """Another process is writing the same output."""


def _holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"pid {info['pid']} on {info['host']} since {info['started']}"
    except (ValueError, KeyError, TypeError):
        return "another process"


class OutputLock:
    """``with OutputLock(path):`` -- this process is the only writer of ``path`` while it runs."""

    def __init__(self, path):
        self.path = Path(os.path.abspath(os.fspath(path)))
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.fd, self.count = None, 0

    def acquire(self) -> OutputLock:
        held = _HELD.get(str(self.path))
        if held is not None and held is not self:
            held.count += 1
            self.fd, self.count = "shared", 1
            return self
        if self.fd is not None:
            self.count += 1
            return self
        for _ in range(10):  # retry if the file was removed between open and flock
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                text = os.pread(fd, 4096, 0).decode(errors="replace")
                os.close(fd)
                raise LockError(f"{self.path} is being written by {_holder(text)} (lock {self.lock_path}); "
                                "wait for it to finish, or use another --out") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        else:
            raise LockError(f"cannot lock {self.lock_path}")
        old = os.pread(fd, 4096, 0).decode(errors="replace").strip()
        if old:
            print(f"capsedu: took over the lock {self.lock_path} of {_holder(old)}, which is no longer running",
                  file=sys.stderr)
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self.fd, self.count = fd, 1
        _HELD[str(self.path)] = self
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        self.count -= 1
        if self.fd == "shared":
            self.fd = None
            held = _HELD.get(str(self.path))
            if held is not None:
                held.release()
            return
        if self.count > 0:
            return
        _HELD.pop(str(self.path), None)
        try:
            os.remove(self.lock_path)  # while still holding it: a waiting writer re-checks the inode
        except OSError:
            pass
        os.close(self.fd)  # closing drops the flock
        self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
