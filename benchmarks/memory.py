"""Peak memory of one CapsNet training step: the readable network against the fast path.

For each contender, one warm-up step (Adam's state, any compilation), then one measured
step (forward, margin + reconstruction loss, backward, fused Adam) from no gradients:
- ``peak_mb``: the most tensor bytes the step holds at once beyond the weights, Adam's
  state and the batch (``capsedu.speed.bench.peak_bytes``: on the CPU the running sum of the
  allocations ``torch.profiler`` records, on CUDA the allocator's peak). It includes the
  gradients, ``param_mb``, alike for every contender; ``activation_mb`` is the rest.
- ``votes_and_routing``: the same for the digit capsule layer alone, on unit-length
  random primary capsules (its input's gradient not counted).
- ``graph_mb``: the tensors autograd saves for backward in the forward pass
  (``bench.saved_tensor_bytes``), what stays from the forward until its backward.

The profiler is used on the CPU because torch keeps no peak of CPU tensors, and the
saved-tensor hooks miss what lives briefly (the votes while routing runs, their gradient).
Contenders: ``readable`` (capsedu.core), ``fast`` (``accelerate``: votes and routing as one
function, ``capsedu.speed.routing``), ``fast_onednn_conv`` (the same with oneDNN's primary
convolution, as on CUDA), ``fast_core_routing`` (``accelerate(fuse_votes=False)``:
core's votes and its compiled routing loop, the fast path before), each in float32 and in
the device's recommended precision. Prints one JSON object.

    python benchmarks/memory.py [--batch 128] [--device cpu]
"""
import argparse
import json
import sys

import torch

from capsedu.core.capsnet import CapsNet
from capsedu.data.mnist import load_dataset
from capsedu.runtime.device import resolve_amp, resolve_device
from capsedu.runtime.results import provenance
from capsedu.speed import bench
from capsedu.speed.fast import accelerate

MODELS = {"readable": lambda: CapsNet(),
          "fast": lambda: accelerate(CapsNet()),
          "fast_onednn_conv": lambda: accelerate(CapsNet(), gemm_conv=False),
          "fast_core_routing": lambda: accelerate(CapsNet(), fuse_votes=False)}


def measure(make, x, y, amp, device):
    torch.manual_seed(0)
    model = make().to(device)
    step = bench.train_step(model, x, y, amp=amp, fused=True)
    step()                                    # Adam's state, compilation
    model.zero_grad(set_to_none=True)         # the measured step starts with no gradients
    peak = bench.peak_bytes(step, device)
    with bench.autocast(amp, device):
        graph = bench.saved_tensor_bytes(lambda: model(x, y), exclude=[x, *model.parameters()])
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"peak_mb": peak / 2**20, "param_mb": params / 2**20,
            "activation_mb": (peak - params) / 2**20, "graph_mb": graph / 2**20}


def votes_and_routing(make, u, amp, device):
    """Peak and graph of the digit layer alone (votes and routing, forward and backward)."""
    torch.manual_seed(0)
    layer = make().digits.to(device)
    leaf = u.detach().requires_grad_()

    def forward():
        with bench.autocast(amp, device):
            return layer(leaf)

    def step():
        forward().float().square().sum().backward()
    step()
    layer.zero_grad(set_to_none=True)
    peak = bench.peak_bytes(step, device) - leaf.numel() * leaf.element_size()  # its gradient
    graph = bench.saved_tensor_bytes(forward, exclude=[leaf, *layer.parameters()])
    params = sum(p.numel() * p.element_size() for p in layer.parameters())
    return {"peak_mb": peak / 2**20, "activation_mb": (peak - params) / 2**20, "graph_mb": graph / 2**20}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    device = resolve_device(a.device)
    amp = resolve_amp("auto", device)
    data = load_dataset("mnist", source="sample", device=device, verbose=False)
    x, y = data.x_train[:a.batch], data.y_train[:a.batch]
    rows = {}
    for precision in dict.fromkeys(("off", amp)):
        for name in MODELS:
            rows[f"{name} ({'fp32' if precision == 'off' else precision})"] = measure(
                MODELS[name], x, y, precision, device)
    u = torch.nn.functional.normalize(torch.randn(a.batch, 1152, 8, device=device), dim=-1)
    layers = {f"{name} ({'fp32' if precision == 'off' else precision})": votes_and_routing(
        MODELS[name], u, precision, device) for precision in dict.fromkeys(("off", amp))
        for name in ("readable", "fast", "fast_core_routing")}
    u_hat = a.batch * 1152 * 10 * 16   # the votes' numbers, the unit the routing's memory is counted in
    result = {
        "benchmark": "memory",
        **provenance("python benchmarks/memory.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                     str(device)),
        "device": str(device), "batch": a.batch, "amp_of_fast_path": amp,
        "method": "cuda allocator peak" if device.type == "cuda" else
                  "torch.profiler profile_memory: running sum of allocations and frees",
        "cpu": bench.cpu_flags(), "u_hat_mb_fp32": 4 * u_hat / 2**20,
        "steps": rows, "votes_and_routing": layers,
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
