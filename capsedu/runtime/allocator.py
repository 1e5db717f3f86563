"""Keep freed memory inside the process on CPU (glibc), so big tensors don't page-fault.

A CapsNet training step allocates and frees tensors of tens of MB (u_hat alone is
B x 1152 x 10 x 16 floats). glibc serves blocks that large with mmap and returns them
to the kernel on free, so every step maps fresh pages and the kernel zero-fills
each one on first touch. Keeping freed memory tells glibc to serve large blocks
from its heap and not to trim it, the effect one gets from preloading jemalloc or
tcmalloc. ``benchmarks/allocator.py`` times both settings in turn in one process: for a
batch-100 step of the readable CapsNet on a 2-core CPU it measured 1.17x the images/s of
glibc's default (each of 5 rounds between 1.13x and 1.26x; 240,000 page faults per step
down to 6,000; ``benchmarks/results/allocator-cpu-2026-12-01.json``, taken with other
work on the machine). The cost: the process keeps its peak memory.

This changes the whole process, so nothing in capsedu turns it on by itself; ``fit``
leaves glibc alone. Choose it explicitly:

- ``with kept_freed_memory(): ...`` for a block of code (a notebook cell, a test);
  on exit glibc's defaults are back.
- ``keep_freed_memory()`` for a process of one's own (``capsedu train``, the benchmark
  scripts, chapter 8's kernel), and ``release_freed_memory()`` to go back.

glibc has no call that reads these settings, so "back" means glibc's documented
defaults (``mallopt(3)``): blocks of 128 KiB and more are mmapped again and the heap's
free top is trimmed past 128 KiB. One trace stays: glibc stops adapting its mmap
threshold once any of them is set, so blocks between 128 KiB and 32 MiB keep being
mmapped where an untouched process might have moved them to the heap.
"""
import contextlib
import ctypes
import ctypes.util
import sys

__all__ = ["keep_freed_memory", "release_freed_memory", "kept_freed_memory"]

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4  # from glibc's malloc.h
# glibc's defaults (mallopt(3)): 65,536 mmapped blocks at most, trim and pad at 128 KiB.
_DEFAULTS = {_M_MMAP_MAX: 65536, _M_TRIM_THRESHOLD: 128 * 1024, _M_TOP_PAD: 128 * 1024}
_KEEP = {_M_MMAP_MAX: 0,                        # no mmap: large blocks come from the heap
         _M_TRIM_THRESHOLD: 2**31 - 1,          # never give the heap's top back (C int max)
         _M_TOP_PAD: 1 << 26}                   # grow it 64 MB at a time
_kept = False


def _mallopt():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # musl or another libc: leave it alone
        return None


def _apply(settings) -> bool:
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return all([mallopt(param, value) == 1 for param, value in settings.items()])


def keep_freed_memory() -> bool:
    """Keep freed memory in the process from now on; True where it took effect (Linux with glibc)."""
    global _kept
    if not _kept:
        _kept = _apply(_KEEP)
    return _kept


def release_freed_memory() -> bool:
    """Put glibc's default settings back; True where it took effect."""
    global _kept
    ok = _apply(_DEFAULTS)
    _kept = _kept and not ok
    return ok


@contextlib.contextmanager
def kept_freed_memory():
    """Keep freed memory inside the block (yields whether that took effect); glibc's defaults after it.

    Nested in an outer ``keep_freed_memory()``, it leaves the outer setting alone.
    """
    outer = _kept
    took = keep_freed_memory()
    try:
        yield took
    finally:
        if took and not outer:
            release_freed_memory()
