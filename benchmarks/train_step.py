"""Images/s of one CapsNet training step: the naive tutorial-style network, capsedu's
readable network, and capsedu's fast path (fused routing, the primary convolution as matrix
products on the CPU, bf16 where the hardware does it).

Every contender does forward, margin + reconstruction loss, backward and an Adam step on
the same batch of real digits. They are timed interleaved in one process, so that machine
load affects all alike, beside what bounds the fast step: the primary-capsule convolution
alone (its three passes: forward, input and weight gradients; oneDNN's and the fast path's),
one matrix product of the forward pass's FLOPs, the machine's matrix speed, and the fast step
with the votes and routing taken out (``fast_no_routing``: what the rest of the step costs,
the floor that no routing can go below), and the fast step with core's votes and the
compiled routing loop (``fast_core_routing``: the fast path before
``capsedu.speed.routing``). Prints one JSON object, with the CPU's model and flags.

    python benchmarks/train_step.py [--batch 100] [--rounds 5] [--steps 2] [--device cpu]
"""
import argparse
import json
import sys

import torch

from capsedu.core.capsnet import CapsNet
from capsedu.core.squashing import squash
from capsedu.data.mnist import load_dataset
from capsedu.runtime.allocator import keep_freed_memory
from capsedu.runtime.device import amp_dtype, resolve_amp, resolve_device
from capsedu.runtime.results import provenance
from capsedu.speed import bench
from capsedu.speed.fast import accelerate
from capsedu.speed.naive import NaiveCapsNet


class NoRouting(torch.nn.Module):
    """Stands in for the votes and routing at almost no cost: one small product of the
    primary capsules' mean, squashed into 10 digit capsules."""

    def __init__(self, in_dim=8, out_capsules=10, out_dim=16):
        super().__init__()
        self.linear, self.shape = torch.nn.Linear(in_dim, out_capsules * out_dim), (out_capsules, out_dim)

    def forward(self, u, return_history=False):
        return squash(self.linear(u.mean(1)).unflatten(-1, self.shape))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported")
    p.add_argument("--steps", type=int, default=2, help="timed calls of each kind per round")
    p.add_argument("--device", default="cpu")
    p.add_argument("--default-allocator", action="store_true",
                   help="on CPU, leave glibc as it is (else capsedu.runtime.allocator.keep_freed_memory for this process)")
    a = p.parse_args(argv)
    device = resolve_device(a.device)
    allocator = "glibc default" if a.default_allocator or device.type != "cpu" else (
        "keep_freed_memory" if keep_freed_memory() else "default (keep_freed_memory unavailable)")
    amp = resolve_amp("auto", device)
    torch.manual_seed(0)
    data = load_dataset("mnist", source="sample", device=device, verbose=False)
    x, y = data.x_train[:a.batch], data.y_train[:a.batch]

    # capsedu's steps use Adam as fit does (fused); the tutorial code keeps torch's default.
    fns = {
        "naive": bench.train_step(NaiveCapsNet().to(device), x, y),
        "readable": bench.train_step(CapsNet().to(device), x, y, fused=True),
        "fast_fp32": bench.train_step(accelerate(CapsNet().to(device)), x, y, fused=True),
        "conv_fp32": bench.primary_conv_step(a.batch, device),
    }
    if amp != "off":
        fns["fast"] = bench.train_step(accelerate(CapsNet().to(device)), x, y, amp=amp, fused=True)
        fns["fast_core_routing"] = bench.train_step(accelerate(CapsNet().to(device), fuse_votes=False),
                                                    x, y, amp=amp, fused=True)
        fns["fast_onednn_conv"] = bench.train_step(accelerate(CapsNet().to(device), gemm_conv=False),
                                                   x, y, amp=amp, fused=True)
        floor = accelerate(CapsNet().to(device))
        floor.digits = NoRouting().to(device)
        fns["fast_no_routing"] = bench.train_step(floor, x, y, amp=amp, fused=True)
        fns["naive_amp"] = bench.train_step(NaiveCapsNet().to(device), x, y, amp=amp)
        fns["conv_amp"] = bench.primary_conv_step(a.batch, device, amp=amp)
        fns["conv_gemm_amp"] = bench.primary_conv_step(a.batch, device, amp=amp, gemm=True)
        fns["matmul_amp"] = bench.matmul_like_conv(a.batch, device, amp_dtype(amp))
    # FLOPs of the fast steps are those of the readable one (same arithmetic); counting
    # them would run the fused routing eagerly (torch.compile does not run under the counter).
    routed = ("fast", "fast_fp32", "fast_onednn_conv", "fast_core_routing")
    flops = {k: bench.flop_count(f) for k, f in fns.items() if k not in routed and k != "conv_gemm_amp"}
    for k in routed:
        if k in fns:
            flops[k] = flops["readable"]
    if "conv_gemm_amp" in fns:
        flops["conv_gemm_amp"] = flops["conv_amp"]
    times = bench.interleaved(fns, rounds=a.rounds, calls=a.steps, device=device)
    sec = bench.medians(times)
    gflops = {k: flops[k] / sec[k] / 1e9 for k in fns}
    fast = "fast" if amp != "off" else "fast_fp32"
    result = {
        "benchmark": "train_step",
        **provenance("python benchmarks/train_step.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                     str(device)),
        "device": str(device),
        "allocator": allocator, "amp_of_fast_path": amp,
        "batch": a.batch, "rounds": a.rounds, "steps_per_round": a.steps,
        "cpu": bench.cpu_flags(),
        "images_per_s": {k: a.batch / sec[k] for k in fns if not k.startswith(("conv", "matmul"))},
        "speedup_vs_naive": {k: sec["naive"] / sec[k] for k in fns if not k.startswith(("conv", "matmul"))},
        "step_gflop": flops["readable"] / 1e9,
        "gflops_per_s": gflops,
        # a step's GFLOP/s as a fraction of the convolution's, in the same precision
        "readable_vs_conv_fp32": gflops["readable"] / gflops["conv_fp32"],
        "fast_fp32_vs_conv_fp32": gflops["fast_fp32"] / gflops["conv_fp32"],
        "fast_vs_conv_same_precision": gflops[fast] / gflops["conv_amp" if amp != "off" else "conv_fp32"],
        "fast_vs_naive_fp32": sec["naive"] / sec[fast],
        # the targets of chapter 8's bottom line: the three conv passes against three matrix
        # products of the forward pass's FLOPs, and the whole fast step against those passes
        **({"conv_passes_vs_matmul": sec["conv_gemm_amp"] / (3 * sec["matmul_amp"]),
            "onednn_conv_passes_vs_matmul": sec["conv_amp"] / (3 * sec["matmul_amp"]),
            "fast_step_vs_conv_passes": sec["fast"] / sec["conv_gemm_amp"],
            # the same two ratios with the votes and routing free: the ceiling of this design
            "no_routing_vs_conv_passes": sec["fast_no_routing"] / sec["conv_gemm_amp"],
            "no_routing_vs_naive": sec["naive"] / sec["fast_no_routing"],
            "seconds": {k: sec[k] for k in ("fast", "fast_no_routing", "fast_onednn_conv",
                                            "fast_core_routing", "conv_amp",
                                            "conv_gemm_amp", "matmul_amp")}} if amp != "off" else {}),
        "seconds_per_call_all_rounds": times,
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
