"""Images/s of one CapsNet training step (forward, margin + reconstruction loss, backward,
Adam, on one batch of real digits): the naive tutorial-style network, capsedu's readable one and
its fast path, timed interleaved in one process so that machine load affects all alike, beside
what bounds the fast step: the primary convolution alone (forward, input and weight gradients;
oneDNN's and the fast path's), one matrix product of its forward FLOPs, the fast step without
votes and routing (``fast_no_routing``: the floor no routing goes below) and with core's votes
and the compiled loop (``fast_core_routing``). One JSON object, with the CPU's model and flags.

    python benchmarks/train_step.py [--batch 100] [--rounds 5] [--steps 2] [--device cpu]

--rounds: interleaved rounds, the median reported; --steps: timed calls of each kind per round.
On a CPU, freed memory is kept (``keep_freed_memory``); "allocator" in the JSON says so.
"""
import torch
from common import cpu_flags, digits, options, report

from capsedu.core.capsnet import CapsNet
from capsedu.core.squashing import squash
from capsedu.runtime.allocator import keep_freed_memory
from capsedu.runtime.device import amp_dtype, resolve_amp, resolve_device
from capsedu.speed import bench
from capsedu.speed.fast import accelerate
from capsedu.speed.naive import NaiveCapsNet


class NoRouting(torch.nn.Module):
    """Stands in for the votes and routing at almost no cost: one small product of the
    primary capsules' mean, squashed into 10 digit capsules."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 10 * 16)

    def forward(self, u, return_history=False):
        return squash(self.linear(u.mean(1)).unflatten(-1, (10, 16)))


def matmul_like_conv(batch, device, dtype):
    """One matrix product with the FLOPs of the primary convolution's forward pass,
    (batch*36 x 20,736) @ (20,736 x 256): the speed this machine multiplies matrices at."""
    a = torch.randn(batch * 36, 256 * 81, device=device, dtype=dtype)
    b = torch.randn(256 * 81, 256, device=device, dtype=dtype)
    return lambda: a @ b


def main(argv=None):
    a = options(__doc__, batch=100, rounds=5, steps=2, device="cpu").parse_args(argv)
    device = resolve_device(a.device)
    allocator = "glibc default" if device.type != "cpu" else (
        "keep_freed_memory" if keep_freed_memory() else "default (keep_freed_memory unavailable)")
    amp = resolve_amp("auto", device)
    torch.manual_seed(0)
    x, y = digits(a.batch, device)

    def step(model, amp="off", fused=True):  # capsedu's steps use Adam as fit does (fused)
        return bench.train_step(model.to(device), x, y, amp=amp, fused=fused)

    def fast(routing=None, **options):
        model = accelerate(CapsNet().to(device), **options)
        if routing is not None:
            model.digits = routing.to(device)
        return model
    # the tutorial code keeps torch's default Adam
    fns = {"naive": step(NaiveCapsNet(), fused=False), "readable": step(CapsNet()), "fast_fp32": step(fast()),
           "conv_fp32": bench.primary_conv_step(a.batch, device)}
    if amp != "off":
        fns.update(fast=step(fast(), amp), fast_core_routing=step(fast(fuse_votes=False), amp),
                   fast_onednn_conv=step(fast(gemm_conv=False), amp), fast_no_routing=step(fast(NoRouting()), amp),
                   naive_amp=step(NaiveCapsNet(), amp, fused=False),
                   conv_amp=bench.primary_conv_step(a.batch, device, amp=amp),
                   conv_gemm_amp=bench.primary_conv_step(a.batch, device, amp=amp, gemm=True),
                   matmul_amp=matmul_like_conv(a.batch, device, amp_dtype(amp)))
    # FLOPs of the fast steps are those of the readable one (same arithmetic); counting
    # them would run the fused routing eagerly (torch.compile does not run under the counter).
    same = {"fast": "readable", "fast_fp32": "readable", "fast_onednn_conv": "readable",
            "fast_core_routing": "readable", "conv_gemm_amp": "conv_amp"}
    flops = {k: bench.flop_count(f) for k, f in fns.items() if k not in same}
    flops.update({k: flops[v] for k, v in same.items() if k in fns})
    times = bench.interleaved(fns, rounds=a.rounds, calls=a.steps, device=device)
    sec = bench.medians(times)
    steps = [k for k in fns if not k.startswith(("conv", "matmul"))]
    return report(
        "train_step", argv, device, allocator=allocator, amp_of_fast_path=amp, batch=a.batch, rounds=a.rounds,
        steps_per_round=a.steps, cpu=cpu_flags(), images_per_s={k: a.batch / sec[k] for k in steps},
        step_gflop=flops["readable"] / 1e9, gflops_per_s={k: flops[k] / sec[k] / 1e9 for k in fns},
        # the targets of chapter 8's bottom line: the three conv passes against three matrix
        # products of the forward pass's FLOPs, and the whole fast step against those passes
        **({"conv_passes_vs_matmul": sec["conv_gemm_amp"] / (3 * sec["matmul_amp"]),
            "onednn_conv_passes_vs_matmul": sec["conv_amp"] / (3 * sec["matmul_amp"]),
            "fast_step_vs_conv_passes": sec["fast"] / sec["conv_gemm_amp"],
            # the same two ratios with the votes and routing free: the ceiling of this design
            "no_routing_vs_conv_passes": sec["fast_no_routing"] / sec["conv_gemm_amp"],
            "no_routing_vs_naive": sec["naive"] / sec["fast_no_routing"]} if amp != "off" else {}),
        seconds=sec, seconds_per_call_all_rounds=times)


if __name__ == "__main__":
    main()
