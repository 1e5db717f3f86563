"""From stored runs to a verdict: one comparison of two models, stated with its uncertainty.

``compare`` pairs the two models seed by seed (``stats.paired_difference``), adds McNemar's exact
test per seed where both runs stored the test items they missed, and the smallest difference the
test set can resolve (``stats.detectable_difference``). ``judge`` turns it into one of the book's
three words: a claim *holds* when the 95% interval lies wholly on its side of zero, *does not hold*
when it lies wholly on the other side, and otherwise we *cannot tell at this budget*.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from capsedu.reports.stats import detectable_difference, mcnemar, paired_difference

__all__ = ["by_seed", "outcomes", "compare", "judge", "interval_text", "rows_for", "HOLDS", "FAILS", "CANNOT_TELL"]

HOLDS, FAILS, CANNOT_TELL = "holds", "does not hold", "cannot tell at this budget"


def by_seed(runs: Sequence[Mapping], name: str, field: str, key: str = "model") -> Dict[int, object]:
    """{seed: run[field]} for the runs whose ``key`` is ``name`` (and that have ``field``)."""
    return {r["seed"]: r[field] for r in runs if r.get(key) == name and field in r}


def outcomes(missed: Sequence[int], n: int) -> np.ndarray:
    """Right (True) or wrong (False) for each of ``n`` test items, from the indices a run missed."""
    right = np.ones(n, dtype=bool)
    idx = np.asarray(list(missed), dtype=int)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"missed item indices must lie in [0, {n}), got {idx.min()}..{idx.max()}")
    right[idx] = False
    return right


def compare(a: Mapping[int, float], b: Mapping[int, float], n_items: int,
            misses_a: Optional[Mapping[int, Sequence[int]]] = None,
            misses_b: Optional[Mapping[int, Sequence[int]]] = None) -> Dict:
    """Model a minus model b on the seeds both have: the paired difference, its 95% interval and p;
    McNemar per seed where both stored their misses; the difference ``n_items`` test items can detect."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError("the two models share no seed: nothing to pair")
    out = paired_difference([a[s] for s in seeds], [b[s] for s in seeds])
    out["seeds"] = seeds
    mean_acc = float(np.clip(np.mean([a[s] for s in seeds] + [b[s] for s in seeds]), 1e-6, 1 - 1e-6))
    out["detectable"] = detectable_difference(n_items, mean_acc)
    shared = [s for s in seeds if misses_a and misses_b and s in misses_a and s in misses_b]
    out["mcnemar"] = [{"seed": s, **mcnemar(outcomes(misses_a[s], n_items), outcomes(misses_b[s], n_items))}
                      for s in shared]
    return out


def judge(comparison: Mapping, sign: int = +1) -> str:
    """The verdict on the claim "a - b has the sign ``sign``": holds, does not hold, or cannot tell."""
    low, high = comparison.get("low"), comparison.get("high")
    if low is None or high is None:
        return CANNOT_TELL
    low, high = sign * low, sign * high
    lo, hi = min(low, high), max(low, high)
    if lo > 0:
        return HOLDS
    if hi < 0:
        return FAILS
    return CANNOT_TELL


def interval_text(comparison: Mapping, digits: int = 3) -> str:
    """E.g. "+0.560 [+0.365, +0.755], p = 0.006 (3 seeds)"; with McNemar, "; McNemar p 0.01, 0.03, 0.20"."""
    c, f = comparison, f"+.{digits}f"
    text = f"{c['mean']:{f}}"
    if c.get("low") is not None:
        text += f" [{c['low']:{f}}, {c['high']:{f}}], p = {c['p']:.3f}"
    text += f" ({len(c['seeds'])} seed{'s' if len(c['seeds']) != 1 else ''})"
    if c.get("mcnemar"):
        text += "; McNemar p " + ", ".join(f"{m['p']:.2g}" for m in c["mcnemar"])
    return text


def rows_for(claims: List[Mapping], runs: Sequence[Mapping], n_items: int, key: str = "model") -> List[Dict]:
    """One verdict row per claim {"a", "b", "field"; optional "sign", "n" (its test size, else ``n_items``),
    "misses" (the key of the run's stored misses to test item by item)}."""
    rows = []
    for claim in claims:
        a, b = by_seed(runs, claim["a"], claim["field"], key), by_seed(runs, claim["b"], claim["field"], key)
        if not a or not b or not set(a) & set(b):
            rows.append({**claim, "comparison": None, "verdict": CANNOT_TELL})
            continue
        part = claim.get("misses")
        ma = {s: m[part] for s, m in by_seed(runs, claim["a"], "misses", key).items() if part in m} if part else None
        mb = {s: m[part] for s, m in by_seed(runs, claim["b"], "misses", key).items() if part in m} if part else None
        comparison = compare(a, b, claim.get("n", n_items), ma, mb)
        rows.append({**claim, "comparison": comparison, "verdict": judge(comparison, claim.get("sign", +1))})
    return rows
