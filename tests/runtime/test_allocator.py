"""capsedu.runtime.allocator: kept freed memory reuses its pages, and nothing changes glibc unless asked.

Each check runs in a fresh process, so that what one test does to glibc cannot hide
what another measures.
"""
import ctypes
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4096
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")


def faults_per_cycle(size: int) -> int:
    """Minor page faults of the second of two malloc / touch every page / free cycles."""
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def cycle():
        p = libc.malloc(size)
        ctypes.memset(p, 1, size)
        libc.free(p)

    cycle()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cycle()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def check_keep_and_release():
    from capsedu.runtime.allocator import keep_freed_memory, kept_freed_memory, release_freed_memory
    size, pages = 64 * 2**20, 64 * 2**20 // PAGE
    default = faults_per_cycle(size)                     # glibc mmaps and unmaps it each time
    assert keep_freed_memory() and keep_freed_memory()   # idempotent
    kept = faults_per_cycle(size)                        # the heap grows once, then is reused
    assert release_freed_memory()
    released = faults_per_cycle(4 * size)                # above anything the heap kept
    with kept_freed_memory() as took:
        inside = faults_per_cycle(size)
    after = faults_per_cycle(4 * size)
    print(f"faults per 64 MB cycle: default {default}, kept {kept}, in the block {inside} (of {pages} pages); "
          f"per 256 MB cycle: released {released}, after the block {after} (of {4 * pages})")
    assert default > pages // 2 and kept < pages // 10
    assert took and inside < pages // 10
    assert released > 2 * pages and after > 2 * pages


def check_fit_leaves_glibc_alone():
    import torch

    from capsedu.core.capsnet import CapsNet
    from capsedu.training.loop import fit
    size, pages = 256 * 2**20, 256 * 2**20 // PAGE
    fresh = faults_per_cycle(size)
    g = torch.Generator().manual_seed(0)
    data = type("D", (), dict(x_train=torch.rand(64, 1, 28, 28, generator=g), y_train=torch.arange(64) % 10,
                              x_test=torch.rand(16, 1, 28, 28, generator=g), y_test=torch.arange(16) % 10))
    torch.manual_seed(0)
    fit(CapsNet(), data, epochs=1, batch_size=32, device="cpu", amp="off", progress=False)  # the paper's net
    after = faults_per_cycle(size)
    print(f"faults per 256 MB malloc/free cycle: fresh process {fresh}, after fit {after} (of {pages} pages)")
    assert fresh > pages // 2                            # mmapped: every page faults afresh
    assert after > pages // 2                            # still so: fit kept nothing


def run_fresh(check: str):
    out = subprocess.run([sys.executable, "-c", f"import tests.runtime.test_allocator as t; t.{check}()"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    print(out.stdout)
    assert out.returncode == 0, out.stderr[-2000:]


def test_kept_memory_is_reused_and_released():
    run_fresh("check_keep_and_release")


def test_fit_leaves_the_process_allocator_as_it_found_it():
    run_fresh("check_fit_leaves_glibc_alone")
