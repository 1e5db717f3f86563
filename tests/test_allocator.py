"""keep_freed_memory(): a large block freed and allocated again reuses its pages."""
import ctypes
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from capsedu.allocator import keep_freed_memory

ROOT = Path(__file__).resolve().parents[1]
SIZE = 64 * 2**20  # 64 MB: above glibc's default mmap threshold


def minor_faults_of(fn) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def check_in_this_process():
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    def touch_and_free():
        p = libc.malloc(SIZE)
        ctypes.memset(p, 1, SIZE)  # touch every page
        libc.free(p)

    touch_and_free()
    default_faults = minor_faults_of(touch_and_free)          # glibc mmaps and unmaps it each time
    assert keep_freed_memory() and keep_freed_memory()        # idempotent
    touch_and_free()                                          # grows the heap once
    kept_faults = minor_faults_of(touch_and_free)
    pages = SIZE // 4096
    print(f"minor page faults for a 64 MB block: default {default_faults}, kept {kept_faults} (of {pages} pages)")
    assert default_faults > pages // 2
    assert kept_faults < pages // 10


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")
def test_freed_memory_is_reused_without_page_faults():
    # a fresh process: fit() elsewhere in the test session may have applied the setting already
    code = "import tests.test_allocator as t; t.check_in_this_process()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    print(out.stdout)
    assert out.returncode == 0, out.stderr[-2000:]
