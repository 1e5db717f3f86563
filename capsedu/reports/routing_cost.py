"""Chapter 10's routing-cost benchmark (``benchmarks/routing_cost.py``), as the page reads it.

- ``newest()``: the newest stored benchmark (with its "file"), or None.
- ``provenance_text``, ``table_html``: its command, machine and load; per method the median and
  range of its rounds, and its equal-work rounds (both routings on one u_hat).
- ``equal_ratios``: per number of input capsules, median dynamic / median attention.
- ``cost_comparison``: the paired difference the cost verdict rests on: the equal-work rounds at
  Efficient-CapsNet's size where they were timed, else the two networks' rounds.
"""
from __future__ import annotations

import json
from typing import Dict, List, Optional

import numpy as np

from capsedu.figures.tables import render_table
from capsedu.reports.stats import paired_difference
from capsedu.runtime import results

__all__ = ["newest", "provenance_text", "table_html", "input_capsules", "equal_ratios", "cost_comparison",
           "compared"]


def newest() -> Optional[Dict]:
    files = [json.loads(p.read_text()) | {"file": p.name} for p in results.benchmarks_dir().glob("routing_cost-*.json")]
    return max(files, key=lambda r: r["date"]) if files else None


def provenance_text(c: Dict) -> str:
    (before, *_), (after, *_) = c["load_average_before_after"]
    return (f"benchmark: {c['command']}\n  {c['date']}, {c['hardware']}, torch {c['torch']}; batch "
            f"{c['batch']}, {c['rounds']} rounds, timed on {c['threads_timed']} thread; "
            f"load average (1 min) {before:.2f} before, {after:.2f} after; {c['seconds_total']:.0f} s")


def input_capsules(c: Optional[Dict]) -> Dict[str, int]:
    """Each network's number of input capsules, as the equal-work rounds used them ({} before those)."""
    return ((c or {}).get("equal_work") or {}).get("input_capsules", {})


def equal_ratios(c: Optional[Dict]) -> Dict[int, float]:
    """N_in -> median dynamic / median attention on the same u_hat ({} before those rounds were timed)."""
    ms = ((c or {}).get("equal_work") or {}).get("ms", {})
    return {int(n): float(np.median(t["dynamic"]) / np.median(t["attention"])) for n, t in ms.items()}


def table_html(c: Dict) -> str:
    spread = lambda v: f"{np.median(v):.2f} ({min(v):.2f} to {max(v):.2f})"  # noqa: E731
    html = render_table(["method", "params", "routing fwd ms: median (range over rounds)", "fwd + bwd ms"],
                        [[n, f"{m['params']:,}", spread(m["routing_fwd_ms"]), spread(m["routing_fwd_bwd_ms"])]
                         for n, m in c["methods"].items()], html=True)
    if c.get("equal_work"):
        ms = c["equal_work"]["ms"]
        html += "<p>Equal work: both routings on the same u_hat, forward + backward</p>" + render_table(
            ["input capsules", "dynamic (3 iterations) ms", "self-attention ms", "ratio of medians"],
            [[n, spread(ms[str(n)]["dynamic"]), spread(ms[str(n)]["attention"]), f"{r:.1f}"]
             for n, r in sorted(equal_ratios(c).items())], html=True)
    return html


def compared(c: Dict) -> str:
    """What the cost verdict's rounds timed, in words."""
    n = input_capsules(c).get("attention")
    return f"both on one u_hat of {n} input capsules" if n else "the two networks"


def cost_comparison(c: Dict) -> Dict:
    """``paired_difference`` of dynamic − attention, ms, round by round (see the module's docstring)."""
    n = input_capsules(c).get("attention")
    pair: List[List[float]] = ([c["equal_work"]["ms"][str(n)][m] for m in ("dynamic", "attention")] if n
                               else [c["methods"][m]["routing_fwd_bwd_ms"] for m in ("dynamic", "attention")])
    return paired_difference(*pair)
