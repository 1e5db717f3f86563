"""Peak memory of one CapsNet training step: the readable network against the fast path.

For each contender one warm-up step (Adam's state, any compilation), then one measured step
(forward, margin + reconstruction loss, backward, fused Adam) from no gradients:
- ``peak_mb``: the most tensor bytes held at once beyond the weights, Adam's state and the batch
  (``bench.peak_bytes``: on the CPU the running sum of torch.profiler's allocations, since torch
  keeps no CPU peak and saved-tensor hooks miss what lives briefly; on CUDA the allocator's peak),
  the gradients (``param_mb``) included; ``activation_mb`` is the rest;
- ``graph_mb``: the tensors autograd saves for backward (``bench.saved_tensor_bytes``);
- ``votes_and_routing``: the same for the digit capsule layer alone, on unit-length random
  primary capsules (its input's gradient not counted).
Contenders, in float32 and the device's precision: ``readable``, ``fast`` (``accelerate``),
``fast_onednn_conv`` (oneDNN's primary convolution, as on CUDA) and
``fast_core_routing`` (``accelerate(fuse_votes=False)``: core's votes, compiled routing loop).

    python benchmarks/memory.py [--batch 128] [--device cpu]
"""
import torch
from common import cpu_flags, digits, options, report

from capsedu.core.capsnet import CapsNet
from capsedu.runtime.device import autocast, resolve_amp, resolve_device
from capsedu.speed import bench
from capsedu.speed.fast import accelerate

MODELS = {"readable": lambda: CapsNet(),
          "fast": lambda: accelerate(CapsNet()),
          "fast_onednn_conv": lambda: accelerate(CapsNet(), gemm_conv=False),
          "fast_core_routing": lambda: accelerate(CapsNet(), fuse_votes=False)}


def mib(n_bytes):
    return n_bytes / 2**20


def measure(make, x, y, amp, device):
    torch.manual_seed(0)
    model = make().to(device)
    step = bench.train_step(model, x, y, amp=amp, fused=True)
    step()                                    # Adam's state, compilation
    model.zero_grad(set_to_none=True)         # the measured step starts with no gradients
    peak = bench.peak_bytes(step, device)
    with autocast(amp, device):
        graph = bench.saved_tensor_bytes(lambda: model(x, y), exclude=[x, *model.parameters()])
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"peak_mb": mib(peak), "param_mb": mib(params), "activation_mb": mib(peak - params),
            "graph_mb": mib(graph)}


def votes_and_routing(make, u, amp, device):
    """Peak and graph of the digit layer alone (votes and routing, forward and backward)."""
    torch.manual_seed(0)
    layer = make().digits.to(device)
    leaf = u.detach().requires_grad_()

    def forward():
        with autocast(amp, device):
            return layer(leaf)
    def step():
        forward().float().square().sum().backward()
    step()
    layer.zero_grad(set_to_none=True)
    peak = bench.peak_bytes(step, device) - leaf.numel() * leaf.element_size()  # its gradient
    graph = bench.saved_tensor_bytes(forward, exclude=[leaf, *layer.parameters()])
    params = sum(p.numel() * p.element_size() for p in layer.parameters())
    return {"peak_mb": mib(peak), "activation_mb": mib(peak - params), "graph_mb": mib(graph)}


def main(argv=None):
    a = options(__doc__, batch=128, device="cpu").parse_args(argv)
    device = resolve_device(a.device)
    amp = resolve_amp("auto", device)
    x, y = digits(a.batch, device)
    precisions = {"fp32" if p == "off" else p: p for p in ("off", amp)}
    steps = {f"{name} ({label})": measure(make, x, y, precision, device)
             for label, precision in precisions.items() for name, make in MODELS.items()}
    u = torch.nn.functional.normalize(torch.randn(a.batch, 1152, 8, device=device), dim=-1)
    layers = {f"{name} ({label})": votes_and_routing(MODELS[name], u, precision, device)
              for label, precision in precisions.items() for name in ("readable", "fast", "fast_core_routing")}
    return report("memory", argv, device, batch=a.batch, amp_of_fast_path=amp,
                  method="cuda allocator peak" if device.type == "cuda" else
                         "torch.profiler profile_memory: running sum of allocations and frees",
                  cpu=cpu_flags(), u_hat_mb_fp32=mib(4 * a.batch * 1152 * 10 * 16),  # the votes, fp32
                  steps=steps, votes_and_routing=layers)


if __name__ == "__main__":
    main()
