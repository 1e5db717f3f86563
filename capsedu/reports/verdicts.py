"""From stored runs to a verdict: one comparison of two models, stated with its uncertainty.

``compare`` pairs the two models seed by seed. Where both runs stored the test items they missed, its
95% interval covers the seeds and the test items (``stats.seeds_and_items``: the seed t-interval with
the items' variance added), McNemar's exact test runs per seed and on the discordant items summed
over the seeds (``stats.mcnemar_pooled``), and "detectable" is the smallest difference one seed's
paired test on that test set finds (``stats.detectable_difference`` with the share of items the two
answer differently). Where misses are not stored, the interval is the seed t-interval alone, and the
row says so. ``judge`` turns a comparison into one of the book's three words: a claim *holds* when the
interval lies wholly on its side of zero (and the pooled McNemar test, where there is one, agrees),
*does not hold* when it lies wholly on the other side, and otherwise we *cannot tell at this budget*.
``adjust`` applies Holm's correction to the rows of one table that are not its primary claims: such a
row holds only when its adjusted p is below 0.05. ``allows`` says what a "cannot tell" still allows and
what it rules out, against the source's claimed effect (a claim's optional ``claimed``).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from capsedu.reports.stats import (detectable_difference, holm, mcnemar, mcnemar_pooled, paired_difference,
                                   seeds_and_items)

__all__ = ["by_seed", "outcomes", "compare", "judge", "row_p", "adjust", "allows", "interval_text",
           "detectable_text", "holm_text", "verdict_text", "table_note", "rows_for", "HOLDS", "FAILS",
           "CANNOT_TELL", "ALPHA"]

HOLDS, FAILS, CANNOT_TELL = "holds", "does not hold", "cannot tell at this budget"
ALPHA = 0.05


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
    """Model a minus model b on the seeds both have: the mean difference, its 95% interval and p (over
    seeds and items where every seed stored its misses, ``method`` "seeds and items"; else over seeds
    only); McNemar per seed and pooled; the difference one seed's paired test on ``n_items`` can detect."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError("the two models share no seed: nothing to pair")
    out = paired_difference([a[s] for s in seeds], [b[s] for s in seeds])
    out.update(seeds=seeds, n_items=n_items, equal=len(seeds) > 1 and out["std"] < 1e-12,
               method="seeds only", pooled=None, detectable=None, discordance=None)
    shared = [s for s in seeds if misses_a and misses_b and s in misses_a and s in misses_b]
    right = {s: (outcomes(misses_a[s], n_items), outcomes(misses_b[s], n_items)) for s in shared}
    out["mcnemar"] = [{"seed": s, **mcnemar(*right[s])} for s in shared]
    if shared and shared == seeds:
        diffs = np.stack([ra.astype(int) - rb.astype(int) for ra, rb in right.values()])
        both = seeds_and_items(diffs)
        out.update(method="seeds and items", low=both["low"], high=both["high"], p=both["p"], se=both["se"],
                   df=both["df"], pooled=mcnemar_pooled([(m["only_a"], m["only_b"]) for m in out["mcnemar"]]))
        out["discordance"] = float(np.mean([(m["only_a"] + m["only_b"]) / n_items for m in out["mcnemar"]]))
        acc = float(np.clip(np.mean([a[s] for s in seeds] + [b[s] for s in seeds]), 1e-6, 1 - 1e-6))
        out["detectable"] = detectable_difference(n_items, acc, discordance=max(out["discordance"], 1.0 / n_items))
    elif out["equal"]:            # a zero-width seed interval says nothing about the test items: no interval
        out.update(low=None, high=None, p=None, t=None)
    return out


def row_p(comparison: Optional[Mapping]) -> Optional[float]:
    """The p-value a verdict rests on: the interval's, or the larger of it and the pooled McNemar test's
    where there is one (the verdict needs both)."""
    if not comparison or comparison.get("p") is None:
        return None
    pooled = comparison.get("pooled")
    return max(comparison["p"], pooled["p"]) if pooled else comparison["p"]


def judge(comparison: Mapping, sign: int = +1, p: Optional[float] = None, alpha: float = ALPHA) -> str:
    """The verdict on the claim "a - b has the sign ``sign``": holds, does not hold, or cannot tell.
    ``p``: the row's Holm-adjusted p-value, where it is not a primary claim; it must be below ``alpha``."""
    low, high = comparison.get("low"), comparison.get("high")
    if low is None or high is None:
        return CANNOT_TELL
    lo, hi = sorted((sign * low, sign * high))
    side = HOLDS if lo > 0 else FAILS if hi < 0 else None
    pooled = comparison.get("pooled")
    if pooled is not None and (pooled["p"] >= alpha or (pooled["only_a"] - pooled["only_b"]) * (low + high) <= 0):
        side = None               # the items, counted one by one, do not settle it
    if p is not None and p >= alpha:
        side = None
    return side or CANNOT_TELL


def adjust(rows: List[Dict], alpha: float = ALPHA) -> List[Dict]:
    """Holm's correction over the rows that are not ``primary`` and have a p-value; every row is judged
    again with it (``p_holm``: None for primary rows and rows without p). Returns ``rows``."""
    family = [r for r in rows if not r.get("primary") and row_p(r.get("comparison")) is not None
              and r.get("verdict") != "pending"]
    for r, p in zip(family, holm([row_p(r["comparison"]) for r in family])):
        r["p_holm"] = p
    for r in rows:
        r.setdefault("p_holm", None)
        r["family"] = len(family)
        if r.get("comparison") is not None and r.get("verdict") != "pending":
            r["verdict"] = judge(r["comparison"], r.get("sign", +1), r["p_holm"], alpha)
    return rows


def _f(x: float, digits: int = 3) -> str:
    return f"{x:+.{digits}f}"


def allows(row: Mapping, digits: int = 3) -> str:
    """For a "cannot tell" row with an interval: the range of effects (in the claim's direction) it still
    allows, and where the source's ``claimed`` effect (a number, or (number, whose)) stands against it;
    why an interval clear of zero still cannot tell; "" otherwise."""
    c = row.get("comparison")
    if row.get("verdict") != CANNOT_TELL or not c or c.get("low") is None:
        return ""
    sign = row.get("sign", +1)
    lo, hi = sorted((sign * c["low"], sign * c["high"]))
    text = f"the interval allows {_f(lo, digits)} to {_f(hi, digits)}"
    if lo > 0 or hi < 0:          # clear of zero, yet no verdict: the correction or the items said no
        pooled = c.get("pooled")
        text += (" (clear of zero, but the pooled McNemar test is not)" if pooled and pooled["p"] >= ALPHA
                 else f" (clear of zero, but not after Holm's correction over {row.get('family', 0)} rows)")
    claimed = row.get("claimed")
    if claimed is not None:
        value, whose = claimed if isinstance(claimed, tuple) else (claimed, "the claimed")
        value *= sign
        said = f"{whose} {value:+.2g}"
        if lo <= value <= hi:
            text += f"; it still allows {said}"
        elif (value > hi) == (value > 0):       # the claimed effect is larger than the interval allows
            share = hi / value if value > 0 else lo / value
            text += f"; it rules out {said}" + (f", though not {share:.0%} of it" if share >= 0.5 else "")
        else:                                   # the claimed effect is smaller than all the interval allows
            text += f", all beyond {said}"
    return text


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def interval_text(comparison: Mapping, digits: int = 3) -> str:
    """E.g. "+0.013 [+0.004, +0.022], p = 0.004 (3 seeds × 1,000 items); pooled McNemar 45 vs 32, p = 0.020";
    a difference equal in every seed: "+0.004 in every seed ..."; seeds only: "... (3 seeds; seeds only:
    no per-item outcomes stored)"."""
    c = comparison
    k = len(c["seeds"])
    seeds = f"{k} seed{'s' if k != 1 else ''}"
    text = _f(c["mean"], digits) + (" in every seed" if c.get("equal") else "")
    items = c.get("method") == "seeds and items"
    if c.get("low") is not None:
        over = "; over the items" if c.get("equal") else ""
        text += f"{over} [{_f(c['low'], digits)}, {_f(c['high'], digits)}], {p_text(c['p'])}"
    if items:
        text += f" ({seeds} × {c['n_items']:,} items)"
        pooled = c["pooled"]
        text += f"; pooled McNemar {pooled['only_a']} vs {pooled['only_b']}, {p_text(pooled['p'])}"
    elif k > 1:
        text += f" ({seeds}; {'no interval: ' if c.get('low') is None else 'seeds only: '}no per-item outcomes stored)"
        if c.get("mcnemar"):
            text += "; McNemar p " + ", ".join(f"{m['p']:.2g}" for m in c["mcnemar"])
    else:
        text += f" ({seeds}: no interval)"
    return text


def detectable_text(comparison: Optional[Mapping]) -> str:
    """The paired detectable difference, or why there is none."""
    if not comparison:
        return ""
    return f"{comparison['detectable']:.3f}" if comparison.get("detectable") is not None else "- (no per-item outcomes)"


def holm_text(row: Mapping) -> str:
    """The row's column of the multiplicity correction: "primary", the Holm-adjusted p, or "-"."""
    if row.get("primary"):
        return "primary"
    p = row.get("p_holm")
    return "-" if p is None else "< 0.001" if p < 0.001 else f"{p:.3f}"


def verdict_text(row: Mapping, digits: int = 3) -> str:
    """The verdict word, and for a "cannot tell" what the interval still allows and rules out."""
    more = allows(row, digits)
    return row["verdict"] + (f": {more}" if more else "")


def table_note(rows: Sequence[Mapping], primaries: str = "") -> str:
    """HTML: how the table was judged: intervals, the Holm family, McNemar, "detectable"."""
    family = max((r.get("family", 0) for r in rows), default=0)
    seeds_only = any(r.get("comparison") and r["comparison"].get("method") == "seeds only" for r in rows)
    return ("<p><small>Each interval is 95% and covers both the seeds and the test items (seeds only where a row "
            "says so: no per-item outcomes were stored for it"
            + (", so its interval is too narrow by the items' share" if seeds_only else "")
            + "). " + (f"Primary claims ({primaries}) are tested at 5% each; the other {family} rows"
                       if primaries and family else f"All {family} rows" if family else
                       f"The primary claim ({primaries}) is tested at 5%; no other row has a p-value to adjust")
            + (" carry Holm-adjusted p-values" if family else "") + ", and a "
            "verdict other than \"cannot tell\" needs the adjusted p below 0.05 and, where per-item outcomes "
            "are stored, McNemar's test on the discordant items pooled over the seeds as well. \"Detectable\" "
            "is the smallest difference that one seed's paired test on these test items finds 4 times in 5 "
            "(5% false alarms), from the share of items the two models answer differently.</small></p>")


def rows_for(claims: List[Mapping], runs: Sequence[Mapping], n_items: int, key: str = "model",
             correct: bool = True) -> List[Dict]:
    """One verdict row per claim {"a", "b", "field"; optional "sign", "n" (its test size, else ``n_items``),
    "misses" (the key of the run's stored misses to test item by item), "primary", "claimed"}; with
    ``correct``, the rows are one table and ``adjust`` applies Holm's correction to its non-primary rows."""
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
    return adjust(rows) if correct else rows
