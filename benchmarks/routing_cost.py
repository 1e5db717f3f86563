"""The routing step's cost alone, for each of chapter 10's methods, measured on a quiet machine.

The stored comparison (``results/compare_routing``) times each network's routing once, right after
its training, while other trainings shared the machine. This script times the same step
(``compare_routing.run.routing_cost``: forward, and forward + backward, on one batch of the
comparison's size, one CPU thread) on fresh networks (the work depends on the shapes, not the
weights), in interleaved rounds with the methods' order rotated, so that load drifting over the
run falls on every method alike and the rounds pair up: chapter 10 compares two methods round by
round. The networks do not route the same work (dynamic routing's has 64 input capsules,
Efficient-CapsNet 16), so "equal_work" also times the two routings on one random u_hat of each
of those sizes: chapter 10's verdict on the cost compares them there.

    python benchmarks/routing_cost.py [--rounds 20] [--repeats 3] [--batch 32] [--device cpu]

--rounds: at least 2 (an interval needs two); --repeats: timings inside one round, the fastest
counts; --batch: the comparison's; --methods: default all of ``capsedu.methods.catalogue.METHODS``.
"""
import sys
import time

import torch
from common import options, report

from capsedu.core.params import count_parameters
from capsedu.core.routing import dynamic_routing
from capsedu.data.mnist import load_dataset
from capsedu.experiments.compare_routing.run import PRESETS, make_model, routing_cost
from capsedu.methods.attention import self_attention_routing
from capsedu.methods.catalogue import METHODS
from capsedu.runtime.device import one_thread, resolve_device
from capsedu.speed.bench import interleaved

FIELDS = ("routing_fwd_ms", "routing_fwd_bwd_ms")


def measure(methods, x, rounds, repeats, device):
    """{method: {"params", "routing_fwd_ms": [one per round], "routing_fwd_bwd_ms": [...]}}, each
    step timed on the batch of images ``x``."""
    models = {}
    for name in methods:
        torch.manual_seed(0)
        models[name] = make_model(name).to(device).eval()  # eval: batch norm's statistics stay put
    out = {name: {"params": count_parameters(m), **{f: [] for f in FIELDS}} for name, m in models.items()}
    for r in range(rounds):
        order = methods[r % len(methods):] + methods[:r % len(methods)]   # rotated: no method always first
        for name in order:
            cost = routing_cost(name, models[name], x, repeats)
            for f in FIELDS:
                out[name][f].append(cost[f])
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {out[n]['routing_fwd_bwd_ms'][-1]:.2f} ms"
                                                      for n in methods), file=sys.stderr, flush=True)
    return out


def equal_work(x, rounds, repeats, device):
    """{"input_capsules": {method: N_in}, "ms": {str(N_in): {"dynamic": [ms, one per round],
    "attention": [...]}}}: 3 iterations of dynamic routing and one self-attention step, forward +
    backward, on the same u_hat (batch, N_in, 10, 16), at each network's own number of input
    capsules; one CPU thread, as ``routing_cost``."""
    with torch.no_grad():
        sizes = {"dynamic": make_model("dynamic").features(x[:1]).flatten(2).shape[-1],
                 "attention": make_model("attention").primary_capsules(x[:1]).shape[1]}
    out = {}
    with one_thread(device):
        for n in sorted(set(sizes.values())):
            u = torch.randn(len(x), n, 10, 16, device=device, requires_grad=True)
            steps = {"dynamic": lambda: dynamic_routing(u, 3).sum().backward(),
                     "attention": lambda: self_attention_routing(u).sum().backward()}
            times = interleaved(steps, rounds=rounds, calls=repeats, device=device)
            out[str(n)] = {name: [1e3 * t for t in ts] for name, ts in times.items()}
    return {"input_capsules": sizes, "ms": out}


def main(argv=None):
    p = options(__doc__, rounds=20, repeats=3, batch=PRESETS["long"].batch_size, device="cpu")
    p.add_argument("--methods", nargs="+", choices=tuple(METHODS), default=list(METHODS))
    a = p.parse_args(argv)
    if a.rounds < 2 or a.repeats < 1 or a.batch < 1:
        p.error("--rounds must be at least 2 (an interval needs two), --repeats and --batch at least 1")
    device = resolve_device(a.device)
    t0 = time.perf_counter()
    x = load_dataset("mnist", source="sample", device=device, verbose=False).x_test[:a.batch]
    methods = measure(list(a.methods), x, a.rounds, a.repeats, device)
    equal = equal_work(x, a.rounds, a.repeats, device)
    return report("routing_cost", argv, device, batch=a.batch, rounds=a.rounds, repeats=a.repeats,
                  threads_timed=1 if device.type == "cpu" else None,
                  seconds_total=round(time.perf_counter() - t0, 1), methods=methods, equal_work=equal)


if __name__ == "__main__":
    main()
