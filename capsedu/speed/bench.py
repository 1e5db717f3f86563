"""Measuring where a CapsNet spends its time (chapter 8 and ``benchmarks/``).

Everything returns plain numbers (seconds, bytes) so that the book and the
benchmark scripts print or store them; nothing here asserts a speed.
Timings are medians of several calls after a warm-up call, synchronised on CUDA.
"""
from __future__ import annotations

import contextlib
import copy
import itertools
import math
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from capsedu.core.losses import margin_loss, reconstruction_loss
from capsedu.core.squashing import safe_norm
from capsedu.runtime.device import adam, amp_dtype, autocast, resolve_amp, resolve_device

__all__ = ["estimate_fit_seconds", "about", "median_seconds", "interleaved", "medians", "train_step",
           "backward_seconds", "stage_times", "profile_table", "saved_tensor_bytes", "peak_bytes",
           "routing_cost", "flop_count", "primary_conv_step"]


def _seconds(fn: Callable[[], object], device) -> float:
    """Wall time of one call of ``fn()``, synchronised on CUDA."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    t = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter() - t


def median_seconds(fn: Callable[[], object], repeats: int = 3, warmup: int = 1, device="cpu") -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed calls."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        fn()
    return statistics.median(_seconds(fn, device) for _ in range(repeats))


def interleaved(fns: Dict[str, Callable], rounds: int = 3, calls: int = 1, device="cpu") -> Dict[str, List[float]]:
    """Seconds per call of each function, measured in turn for ``rounds`` rounds, so that a
    change in machine load affects every contender alike. Every function is called once first."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(median_seconds(fn, repeats=calls, warmup=0, device=device))
    return times


def medians(times: Dict[str, List[float]]) -> Dict[str, float]:
    """The median of each contender's times, e.g. of ``interleaved``'s rounds."""
    return {name: statistics.median(v) for name, v in times.items()}


def _losses(x, y, lengths, rec):
    return margin_loss(lengths, y) + reconstruction_loss(rec, x)


def train_step(model, x, y, amp: str = "off", lr: float = 1e-3, fused: bool = False,
               loss: str = "capsnet") -> Callable[[], None]:
    """One training step of a CapsNet-like model (forward, margin + reconstruction loss,
    backward, Adam), as a function of no arguments; ``loss="margin"``: the margin loss of the
    scores ``model(x)`` alone. ``fused``: Adam as ``fit`` makes it (``capsedu.runtime.device.adam``);
    else torch's default, as the tutorial code has it."""
    opt = adam(model.parameters(), lr, x.device) if fused else torch.optim.Adam(model.parameters(), lr=lr)

    def step():
        with autocast(amp, x.device):
            if loss == "margin":
                value = margin_loss(model(x), y)
            else:
                _, lengths, rec = model(x, y)
                value = _losses(x, y, lengths, rec)
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
    return step


def estimate_fit_seconds(model, data, epochs: int, batch_size: int = 128, device="auto", amp="auto",
                         loss: str = "capsnet", n_train: Optional[int] = None,
                         test_images: Optional[int] = None) -> float:
    """Seconds that ``fit(model, data, epochs=epochs, batch_size=batch_size)`` should take on this device: one
    training step of a copy of ``model`` timed here (after a warm-up step, which absorbs any compilation),
    times the run's steps, plus a test pass per epoch at a third of a step per image. ``loss``: "capsnet"
    (``model(x, y)`` -> capsules, lengths, reconstructions) or "margin" (``model(x)`` -> scores);
    ``n_train``: the first N training images only; ``test_images``: per epoch (default: all of them)."""
    if loss not in ("capsnet", "margin"):
        raise ValueError(f"loss must be 'capsnet' or 'margin', got {loss!r}")
    device = resolve_device(device)
    net = copy.deepcopy(model).to(device)
    x, y = data.x_train[:batch_size].to(device), data.y_train[:batch_size].to(device)
    step = train_step(net, x, y, amp=resolve_amp(amp, device), fused=True, loss=loss)
    step_s = median_seconds(step, repeats=2, device=device)
    per_image = step_s / len(x)
    n = len(data.x_train[:n_train])
    tested = len(data.x_test) if test_images is None else test_images
    return epochs * (math.ceil(n / batch_size) * step_s + tested * per_image / 3)


def about(seconds: float) -> str:
    """A duration for people: "about 40 s", "about 3 min", "about 1.5 h"."""
    if seconds < 90:
        return f"about {max(1, round(seconds, -1 if seconds >= 15 else 0)):.0f} s"
    if seconds < 5400:
        return f"about {round(seconds / 60):.0f} min"
    return f"about {seconds / 3600:.1f} h"


def _stages(model, y):
    """The CapsNet forward pass cut into stages: (name, function) pairs, each function
    taking the previous stage's output. Uses the model's own layers."""
    def head(v):
        return safe_norm(v, dim=-1), model.decoder(v, F.one_hot(y, model.config.num_classes))
    from capsedu.speed.fast import FAST_LAYERS
    r = model.digits.iterations
    digits = ([(f"u_hat = W u + routing (r = {r}), one function", model.digits)]
              if type(model.digits) in FAST_LAYERS.values() else   # the fast path's votes_and_routing
              [("u_hat = W u", model.digits.predictions), (f"routing (r = {r})", model.digits.route)])
    return [("conv1 + ReLU", lambda x: F.relu(model.conv1(x))), ("primary capsules", model.primary),
            *digits, ("lengths + decoder", head)]


def backward_seconds(make_loss: Callable[[], torch.Tensor], repeats: int = 3, warmup: int = 1,
                     device="cpu") -> float:
    """Median wall time of ``make_loss().backward()``, timing the backward pass only."""
    times = [_seconds(make_loss().backward, device) for _ in range(warmup + repeats)]
    return statistics.median(times[warmup:])


def stage_times(model, x, y, amp: str = "off", repeats: int = 3) -> List[Dict]:
    """Forward and backward milliseconds of each stage of a CapsNet training step, each
    stage timed on its own (its input a detached copy of the real one), plus the Adam update."""
    stages, rows = _stages(model, y), []
    with torch.no_grad(), autocast(amp, x.device):
        inputs = [x]
        for _, fn in stages[:-1]:
            inputs.append(fn(inputs[-1]))
    for k, ((name, fn), inp) in enumerate(zip(stages, inputs)):
        leaf = inp.detach().requires_grad_(inp is not x)
        # a dense, fixed gradient laid out as the output, as in a step (oneDNN's bf16
        # backward of conv1 took twice as long for a channels-first one)
        out_grad = 1e-3 * torch.randn_like(inputs[k + 1], dtype=torch.float32) if k + 1 < len(inputs) else None

        def forward(fn=fn, leaf=leaf):
            with autocast(amp, x.device):
                return fn(leaf)

        def make_loss(forward=forward, out_grad=out_grad):
            model.zero_grad(set_to_none=True)
            out = forward()
            if isinstance(out, tuple):   # the head: the real losses
                return _losses(x, y, *out)
            return (out.float() * out_grad).sum()   # elsewhere: a fixed linear function of the output

        rows.append({"stage": name, "forward_ms": 1e3 * median_seconds(forward, repeats, device=x.device),
                     "backward_ms": 1e3 * backward_seconds(make_loss, repeats, device=x.device)})
    opt = adam(model.parameters(), 1e-3, x.device)   # as fit makes it
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    rows.append({"stage": "Adam update", "forward_ms": 0.0,
                 "backward_ms": 1e3 * median_seconds(opt.step, repeats, device=x.device)})
    model.zero_grad(set_to_none=True)
    return rows


@contextlib.contextmanager
def _quiet_stderr():
    """Silence C-level stderr: the profiler's tracing library logs start/stop lines (and,
    without a GPU, a GPU-count error) straight to file descriptor 2."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2: nothing to silence
        yield
        return
    with open(os.devnull, "wb") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profile_table(step: Callable[[], None], device="cpu", rows: int = 12):
    """The operations of one call of ``step`` that took the most self time, as (heads, rows)
    for ``capsedu.figures.tables.render_table``: torch.profiler's numbers, fewer columns."""
    from torch.profiler import ProfilerActivity, profile
    step()  # warm-up, outside the profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.device(device).type == "cuda" else [])
    with _quiet_stderr(), profile(activities=activities) as prof:
        step()
    from torch.autograd.profiler_util import FunctionEventAvg
    gpu_key = "self_device_time_total" if hasattr(FunctionEventAvg, "self_device_time_total") else "self_cuda_time_total"
    key = gpu_key if torch.device(device).type == "cuda" else "self_cpu_time_total"
    events = prof.key_averages()
    total = sum(getattr(e, key) for e in events) or 1.0
    top = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:rows]
    where = "GPU" if key == gpu_key else "CPU"
    return (["operation", f"self {where} ms", "share of all self time", "calls"],
            [[e.key, f"{getattr(e, key) / 1e3:.2f}", f"{getattr(e, key) / total:.1%}", e.count] for e in top])


def saved_tensor_bytes(fn: Callable[[], torch.Tensor], exclude: Sequence[torch.Tensor] = ()) -> int:
    """Bytes of the distinct tensors autograd saves for the backward pass while ``fn()`` runs
    (the memory the graph holds on to, whatever the device), not counting ``exclude``
    (e.g. the input, which exists anyway)."""
    skip = {(t.untyped_storage().data_ptr(), t.device) for t in exclude}
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        key = (storage.data_ptr(), t.device)
        if key not in skip:
            seen[key] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def peak_bytes(fn: Callable[[], object], device="cpu") -> int:
    """The most bytes of tensors ``fn()`` holds at once beyond what existed before: CUDA's allocator
    peak; on the CPU, the running sum of torch.profiler's allocations and frees in time order. Unlike
    ``saved_tensor_bytes`` it counts what lives briefly (outputs, the backward's gradients)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch._C._profiler import _EventType
    with _quiet_stderr(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                 profile_memory=True) as prof:
        fn()
    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size))
        stack.extend(node.children)
    return max(itertools.accumulate((size for _, size in sorted(events)), initial=0))


def routing_cost(u_hat: torch.Tensor, iterations: Sequence[int], router: Callable, repeats: int = 3) -> List[Dict]:
    """Forward ms, backward ms and autograd-graph bytes of ``router(u_hat, r)`` for each r."""
    leaf = u_hat.detach().requires_grad_()
    grad = torch.randn(u_hat.shape[0], u_hat.shape[2], u_hat.shape[3], device=u_hat.device)
    rows = []
    for r in iterations:
        def forward(r=r):
            return router(leaf, r)

        def make_loss(forward=forward):
            leaf.grad = None
            return (forward().float() * grad).sum()

        rows.append({"iterations": r, "forward_ms": 1e3 * median_seconds(forward, repeats, device=leaf.device),
                     "backward_ms": 1e3 * backward_seconds(make_loss, repeats, device=leaf.device),
                     "graph_bytes": saved_tensor_bytes(forward, exclude=[leaf])})
    return rows


def flop_count(fn: Callable[[], object]) -> int:
    """Floating-point operations of one call of ``fn`` (``torch.utils.flop_counter``;
    convolutions and matrix products, which are nearly all of a CapsNet's work)."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def primary_conv_step(batch: int, device="cpu", amp: str = "off", gemm: bool = False) -> Callable[[], None]:
    """Forward + backward of the primary-capsule convolution alone (256 -> 256 channels,
    9x9, stride 2, on 20x20 maps): the reference for how fast this machine convolves.
    ``gemm=True``: as the fast path runs it on the CPU (``capsedu.speed.gemm_conv``)."""
    from capsedu.speed.gemm_conv import GemmConv2d
    # The fast path stores weights and features channels-last (accelerate): do the same.
    layout = torch.channels_last if gemm else torch.contiguous_format
    conv = (GemmConv2d if gemm else torch.nn.Conv2d)(256, 256, 9, 2).to(device, memory_format=layout)
    # Under autocast the step's conv1 already hands over low-precision features: do the same.
    feats = torch.rand(batch, 256, 20, 20, device=device, dtype=amp_dtype(amp)).to(memory_format=layout)
    feats.requires_grad_()
    grad = torch.randn(batch, 256, 6, 6, device=device)  # a real gradient, not sum()'s broadcast ones

    def run():
        with autocast(amp, device):
            out = conv(feats)
        out.backward(grad.to(out.dtype))
    return run
