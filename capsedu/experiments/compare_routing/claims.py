"""What chapter 10 judges, as data, and the tables it judges them on (the claim ledger's contract).

- ``STORED``, ``CLAIMS``, ``frames(data)``: the accuracy claims, judged per test digit on the stored
  run ``results/compare_routing`` (or the live preview): ``verdict_table(CLAIMS, f["runs"], f["items"],
  key="method")``. Their wording is on the page, not here.
- ``COST_CLAIMS``, ``cost_frames()``: the routing-cost claim, judged on the rounds of the newest
  routing-cost benchmark (``benchmarks/routing_cost.py``), each round a pair, as seeds are.
"""
from __future__ import annotations

import json
from typing import Dict, Mapping, Optional

import pandas as pd

from capsedu.data.mnist import load_dataset
from capsedu.experiments.shared import verdicts
from capsedu.experiments.shared.tables import epochs_table, items_table, runs_table
from capsedu.runtime import results

__all__ = ["STORED", "KEY", "DELTA", "CLAIMS", "COST_CLAIMS", "readable", "frames", "newest_benchmark", "cost_frames"]

STORED = "compare_routing"
KEY = "method"           # the runs' name column (the other experiments': "model")
# A "matches" claim's margin: the book's one rule (verdicts.margin) for each test set's kind
DELTA = {"test": verdicts.DELTA["clean"], "affine": verdicts.DELTA["affine"]}
# No primaries: 10.1, 10.3 and 10.5 were named primary on 2026-12-03, then recast as "matches" on
# 2026-12-07 after their results were read, so every row is Holm-adjusted.
CLAIMS = [
    dict(id="10.1", a="dynamic", b="none", test="test", kind="matches", delta=DELTA["test"], primary=False),
    dict(id="10.2", a="dynamic", b="none", test="affine", kind="matches", delta=DELTA["affine"], primary=False),
    dict(id="10.3", a="attention", b="dynamic", test="test", kind="matches", delta=DELTA["test"], primary=False),
    dict(id="10.5", a="em-spread", b="dynamic", test="test", kind="matches", delta=DELTA["test"], primary=False),
    dict(id="10.6", a="em-spread", b="dynamic", test="affine", kind="matches", delta=DELTA["affine"], primary=False),
]
# dynamic - attention, ms of one routing step (forward + backward) on the same u_hat: > 0 is cheaper
COST_CLAIMS = [dict(id="10.4", a="dynamic", b="attention", field="ms", kind="beats", primary=False)]


def readable(data: Mapping) -> None:
    """Raise (ValueError) unless every method the claims compare has a run with its misses stored."""
    have = {r["method"] for r in data["runs"] if r.get("misses")}
    missing = sorted({c[k] for c in CLAIMS for k in ("a", "b")} - have)
    if missing:
        raise ValueError(f"no run with per-digit misses for {', '.join(missing)}")


def frames(data: Mapping) -> Dict[str, pd.DataFrame]:
    """"runs", "epochs" and "items" (one row per method, seed, test set and test digit) of ``data``."""
    n_test = data["settings"]["n_test"] or len(load_dataset("mnist", data["settings"]["source"],
                                                             verbose=False).y_test)
    return {"runs": runs_table(data), "epochs": epochs_table(data), "items": items_table(data, n_test)}


def newest_benchmark() -> Dict:
    """The newest stored routing-cost benchmark, with its file name under "file"."""
    files = sorted(results.benchmarks_dir().glob("routing_cost-*.json"))
    if not files:
        raise FileNotFoundError(f"no routing_cost-*.json in {results.benchmarks_dir()}")
    found = [{**json.loads(p.read_text()), "file": p.name} for p in files]
    return max(found, key=lambda b: b["date"])


def cost_frames(benchmark: Optional[Mapping] = None) -> Dict[str, pd.DataFrame]:
    """The benchmark's rounds (ms): "networks", one row per (method, round) of each network's own
    routing step; "equal", one row per (input capsules, method, round) of dynamic routing and
    self-attention on one u_hat; "runs", the equal-work rounds at the attention network's input
    count, ``seed`` the round, so ``COST_CLAIMS`` pairs the two methods round by round."""
    b = benchmark or newest_benchmark()
    networks = pd.DataFrame([{"method": m, "round": i, "fwd_ms": f, "fwd_bwd_ms": fb}
                             for m, t in b["methods"].items()
                             for i, (f, fb) in enumerate(zip(t["routing_fwd_ms"], t["routing_fwd_bwd_ms"]))])
    equal = pd.DataFrame([{"inputs": int(n), "method": m, "round": i, "ms": ms}
                          for n, by in b["equal_work"]["ms"].items() for m, t in by.items()
                          for i, ms in enumerate(t)])
    n_att = b["equal_work"]["input_capsules"]["attention"]
    runs = equal[equal.inputs == n_att].rename(columns={"round": "seed"})
    return {"networks": networks, "equal": equal, "runs": runs}
