"""Where a CapsNet training step spends its time, and how routing scales. One JSON object:
- ``stages``: forward and backward ms of each stage, timed on its own (``bench.stage_times``),
  readable, fast, and fast with core's votes and the compiled routing loop;
- ``u_hat_read_ms``: one pass over the votes u_hat in the fast path's precision (memory speed);
- ``routing``: forward ms, backward ms and graph bytes against the routing iterations r: the
  readable loop, the fused one, and the fused one with inner gradients stopped;
- ``batch_scaling``: images/s of a training step against the batch size.
On a CPU, freed memory is kept (``keep_freed_memory``).

    python benchmarks/stages.py [--batch 32] [--iterations 1,2,3,5,8] [--batches 8,16,32,64] [--device cpu]
"""
import torch
from common import digits, options, report

from capsedu.core.capsnet import CapsNet
from capsedu.core.routing import dynamic_routing
from capsedu.runtime.allocator import keep_freed_memory
from capsedu.runtime.device import amp_dtype, resolve_amp, resolve_device
from capsedu.speed import bench
from capsedu.speed.fast import accelerate, fused_routing

ROUTERS = {
    "readable": lambda u, r: dynamic_routing(u, r),
    "fused": lambda u, r: fused_routing(u, r),
    "fused_detach_inner": lambda u, r: fused_routing(u, r, detach_inner=True),
}


def main(argv=None):
    a = options(__doc__, batch=32, iterations="1,2,3,5,8", batches="8,16,32,64", repeats=3,
                device="cpu").parse_args(argv)
    device = resolve_device(a.device)
    if device.type == "cpu":
        keep_freed_memory()
    amp = resolve_amp("auto", device)
    torch.manual_seed(0)
    x, y = digits(a.batch, device)
    readable = CapsNet().to(device)
    fast = accelerate(CapsNet().to(device))
    before = accelerate(CapsNet().to(device), fuse_votes=False)   # core's votes, compiled routing loop
    stages = {"readable": bench.stage_times(readable, x, y, repeats=a.repeats),
              f"fast ({amp})": bench.stage_times(fast, x, y, amp=amp, repeats=a.repeats),
              f"fast, core votes + compiled loop ({amp})": bench.stage_times(before, x, y, amp=amp,
                                                                            repeats=a.repeats)}
    with torch.no_grad():
        u_hat = readable.digits.predictions(readable.primary(torch.relu(readable.conv1(x))))
    # one read of u_hat in the fast path's precision: the unit of routing's memory traffic
    u_low = u_hat.to(amp_dtype(amp))
    read_ms = 1e3 * bench.median_seconds(lambda: u_low.sum(), max(a.repeats, 5), device=device)
    rs = [int(r) for r in a.iterations.split(",")]
    routing = {name: bench.routing_cost(u_hat, rs, router, repeats=a.repeats) for name, router in ROUTERS.items()}
    batch = []
    for b in (int(s) for s in a.batches.split(",")):
        sec = bench.median_seconds(bench.train_step(readable, *digits(b, device)), a.repeats, device=device)
        batch.append({"batch": b, "seconds_per_step": sec, "images_per_s": b / sec})
    report("stages", argv, device, batch=a.batch, u_hat_mb=u_hat.numel() * u_hat.element_size() / 2**20,
           u_hat_read_ms={str(u_low.dtype): read_ms}, stages=stages, routing=routing, batch_scaling=batch)


if __name__ == "__main__":
    main()
