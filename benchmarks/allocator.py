"""What ``capsedu.runtime.allocator.keep_freed_memory`` does to a CPU training step: one process,
the readable CapsNet's training step timed with glibc's default settings and with freed
memory kept, in turn for several rounds (so that machine load affects both alike), and
the minor page faults of each. Prints one JSON object.

    python benchmarks/allocator.py [--batch 100] [--rounds 5] [--steps 2]

--rounds: rounds of both settings, medians reported; --steps: timed steps per setting and round.
"""
import resource
import statistics
import time

import torch
from common import digits, options, report

from capsedu.core.capsnet import CapsNet
from capsedu.runtime.allocator import keep_freed_memory, release_freed_memory
from capsedu.speed import bench

SETTINGS = {"glibc default": release_freed_memory, "keep_freed_memory": keep_freed_memory}


def timed(step, calls):
    """Seconds per call and minor page faults per call over ``calls`` calls."""
    faults, t = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    for _ in range(calls):
        step()
    return ((time.perf_counter() - t) / calls,
            (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / calls)


def main(argv=None):
    a = options(__doc__, batch=100, rounds=5, steps=2).parse_args(argv)
    torch.manual_seed(0)
    step = bench.train_step(CapsNet(), *digits(a.batch))
    seconds, faults = {name: [] for name in SETTINGS}, {name: [] for name in SETTINGS}
    for _ in range(a.rounds):
        for name, apply in SETTINGS.items():
            if not apply():
                raise SystemExit("glibc's mallopt is unavailable here (not Linux with glibc): nothing to compare")
            step()                                       # settle the new setting (the heap grows once)
            s, f = timed(step, a.steps)
            seconds[name].append(s)
            faults[name].append(f)
    release_freed_memory()
    med = bench.medians(seconds)
    return report("allocator", argv, "cpu", batch=a.batch, rounds=a.rounds, steps_per_round=a.steps, amp="off",
                  model="CapsNet (readable)", images_per_s={name: a.batch / s for name, s in med.items()},
                  speedup_keep_vs_default=med["glibc default"] / med["keep_freed_memory"],
                  minor_faults_per_step=bench.medians(faults), seconds_per_step_all_rounds=seconds)


if __name__ == "__main__":
    main()
