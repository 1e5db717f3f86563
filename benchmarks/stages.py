"""Where a CapsNet training step spends its time, and how routing scales.

- ``stages``: forward and backward ms of conv1, primary capsules, u_hat, routing,
  lengths + decoder, and the Adam update, each timed on its own (readable and fast path,
  whose votes and routing are one stage, and the fast path with core's votes and the
  compiled routing loop);
- ``u_hat_read_ms``: one pass over the votes u_hat in the fast path's precision (memory speed);
- ``routing``: forward ms, backward ms and autograd-graph MB against the number of
  routing iterations r, for the readable loop, the fused one, and the fused one with
  gradients stopped through all but the last iteration;
- ``graph_mb``: memory autograd keeps for backward in one forward pass, naive vs capsedu;
- ``batch``: images/s of a training step against the batch size.

Prints one JSON object.

    python benchmarks/stages.py [--batch 32] [--iterations 1,2,3,5,8] [--batches 8,16,32,64] [--device cpu]
"""
import argparse
import json
import sys

import torch

from capsedu.core.capsnet import CapsNet
from capsedu.core.routing import dynamic_routing
from capsedu.data.mnist import load_dataset
from capsedu.runtime.allocator import keep_freed_memory
from capsedu.runtime.device import amp_dtype, resolve_amp, resolve_device
from capsedu.runtime.results import provenance
from capsedu.speed import bench
from capsedu.speed.fast import accelerate, fused_routing
from capsedu.speed.naive import NaiveCapsNet

ROUTERS = {
    "readable": lambda u, r: dynamic_routing(u, r),
    "fused": lambda u, r: fused_routing(u, r),
    "fused_detach_inner": lambda u, r: fused_routing(u, r, detach_inner=True),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--iterations", default="1,2,3,5,8")
    p.add_argument("--batches", default="8,16,32,64")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    device = resolve_device(a.device)
    if device.type == "cpu":
        keep_freed_memory()
    amp = resolve_amp("auto", device)
    torch.manual_seed(0)
    data = load_dataset("mnist", source="sample", device=device, verbose=False)
    x, y = data.x_train[:a.batch], data.y_train[:a.batch]
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
    naive = NaiveCapsNet().to(device)
    graph_mb = {"naive": bench.saved_tensor_bytes(lambda: naive(x, y), exclude=list(naive.parameters())) / 2**20,
                "readable": bench.saved_tensor_bytes(lambda: readable(x, y), exclude=list(readable.parameters())) / 2**20}
    batch = []
    for b in (int(s) for s in a.batches.split(",")):
        xb, yb = data.x_train[:b], data.y_train[:b]
        sec = bench.median_seconds(bench.train_step(readable, xb, yb), a.repeats, device=device)
        batch.append({"batch": b, "seconds_per_step": sec, "images_per_s": b / sec})
    print(json.dumps({
        "benchmark": "stages",
        **provenance("python benchmarks/stages.py " + " ".join(argv if argv is not None else sys.argv[1:]), str(device)),
        "device": str(device), "batch": a.batch,
        "u_hat_mb": u_hat.numel() * u_hat.element_size() / 2**20,
        "u_hat_read_ms": {str(u_low.dtype): read_ms},
        "stages": stages, "routing": routing, "graph_mb": graph_mb, "batch_scaling": batch}, indent=2))


if __name__ == "__main__":
    main()
