"""The book's four verdicts on "a beats b" and "a matches b within ±δ", from stored runs as tables.

A comparison pairs model a with model b seed by seed. Where the runs stored their per-item outcomes
(``tables.items_table``), d = right_a - right_b is a (seeds x items) array and

- the 95% interval and p cover both sources of chance, the seeds and the items (``seeds_and_items``);
- the per-item test respects the seeds: each item's mean of d over the seeds, and a sign test
  (``scipy.stats.binomtest``) on the items whose mean is not 0 (one seed: exact McNemar);
- ``mdd``, the smallest difference this row's own test finds 4 times in 5 at 5% false alarms,
  (t_.975 + t_.8) x se, never below the smallest difference the sign test can resolve with the
  items that differ (inf, printed "none": no outcome of the sign test could reach 5%).

The sign test treats the trained networks as given: it covers the items, not other training runs
(the interval covers those, through the seeds' spread).

Where only per-run accuracies (or benchmark rounds) are stored, the interval is the seeds' t-interval
(``method`` "seeds only"), the sign test runs over the paired seeds (3 seeds can never reach 5%, so
such a row cannot hold on 3 seeds, and its mdd is inf below 6), and a difference equal in every seed
gets no interval (``equal``).

A claim is a dict: ``a``, ``b``; ``test`` (per-item outcomes) or ``field`` (seeds only);
``sign`` (+1: a beats b, -1: a is worse); ``kind``: "beats" or "matches"; ``delta`` (a "matches"
claim's margin, by the book's one rule, ``margin``); ``primary``. The verdict:

- "beats": *holds* when the interval lies wholly on the claim's side of 0, the sign test agrees at
  5%, and, for a secondary row, its Holm-adjusted p is below 0.05; *does not hold* by the same
  standard on the other side (both tests are two-sided, so the two verdicts are symmetric);
- "matches": *equivalent within ±δ* by two one-sided tests at 5% (the 90% interval inside ±δ);
  *does not hold* when the 95% interval lies wholly outside ±δ; either one Holm-adjusted for a
  secondary row;
- *cannot tell at this budget* otherwise, and always with one seed (nothing measures the seeds' spread).

``p_row`` is the p a row's verdict rests on (``_row_p``); ``p_holm`` adjusts it over the secondary
rows of one table (primary rows keep their own), ``p_holm_all`` over every row, printed beside it.
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

__all__ = ["HOLDS", "FAILS", "EQUIVALENT", "CANNOT_TELL", "MEASURED", "ALPHA", "seeds_and_items", "paired_difference",
           "sign_test", "outcomes", "margin", "PAPER_AFFNIST", "DELTA", "compare", "judge", "verdict_table", "shown"]

HOLDS, FAILS, EQUIVALENT, CANNOT_TELL = ("holds", "does not hold", "equivalent within ±δ",
                                         "cannot tell at this budget")
# no verdict: a claim measured without the test a verdict needs (the claim ledger's label)
MEASURED = "measured in its chapter"
ALPHA, POWER = 0.05, 0.8


def margin(capsules: float, baseline: float) -> float:
    """The book's one rule for δ, set once for every chapter on 2026-12-07: a tenth of the accuracy
    advantage the source reports for capsules on that kind of test. A smaller difference is
    negligible next to the claim under test; a larger one is a tenth of it or more."""
    return round(abs(capsules - baseline) / 10, 6)


# Sabour et al. (2017), section 5.2, theirs: accuracy on the shifted MNIST test set, then on affNIST
PAPER_AFFNIST = {"capsnet": (0.9923, 0.79), "cnn": (0.9922, 0.66)}
# δ for each kind of test, from the source's own numbers: Su's two-digit head (over 0.90 against
# about 0.40), the paper's affNIST (above) and its Table 1 (0.25% against 0.39% error)
DELTA = {"two digits": margin(0.90, 0.40),
         "affine": margin(PAPER_AFFNIST["capsnet"][1], PAPER_AFFNIST["cnn"][1]),
         "clean": margin(1 - 0.0025, 1 - 0.0039)}


def seeds_and_items(d: np.ndarray) -> Dict[str, float]:
    """Mean of d (seeds x items) and its standard error with Satterthwaite's df, treating both the
    seeds and the items as drawn at random: s_seed^2/k + s_item^2/n - s_res^2/(nk), a two-way
    random-effects layout, never below the larger of its first two terms."""
    d = np.asarray(d, dtype=float)
    if d.ndim != 2 or 0 in d.shape or not np.isfinite(d).all():
        raise ValueError(f"d must be a (seeds, items) array of finite numbers, got shape {d.shape}")
    k, n = d.shape
    seed_mean, item_mean, mean = d.mean(axis=1), d.mean(axis=0), float(d.mean())
    seed = (seed_mean.var(ddof=1) / k if k > 1 else 0.0, k - 1)
    item = (item_mean.var(ddof=1) / n if n > 1 else 0.0, n - 1)
    res = d - seed_mean[:, None] - item_mean[None, :] + mean
    resid = ((res ** 2).sum() / ((n - 1) * (k - 1)) / (n * k) if k > 1 and n > 1 else 0.0, (n - 1) * (k - 1))
    parts = [seed, item, (-resid[0], resid[1])]
    var = sum(v for v, _ in parts)
    if var < max(seed, item)[0]:                  # the residual overshot: keep the larger single term
        parts = [max(seed, item)]
        var = parts[0][0]
    df = var ** 2 / sum(v ** 2 / f for v, f in parts if f > 0 and v) if var > 0 else math.inf
    return {"mean": mean, "se": math.sqrt(var), "df": df, "seeds": k, "items": n}


def paired_difference(a: Sequence[float], b: Sequence[float]) -> Dict[str, float]:
    """Mean of a_i - b_i over paired seeds, its standard error and df (seeds only)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.ndim != 1 or len(d) == 0 or not np.isfinite(d).all():
        raise ValueError(f"a and b must be equal-length sequences of finite numbers, got {a!r} and {b!r}")
    k = len(d)
    se = float(d.std(ddof=1)) / math.sqrt(k) if k > 1 else math.nan
    return {"mean": float(d.mean()), "se": se, "df": k - 1, "seeds": k, "items": None}


def _resolution(m: int, alpha: float = ALPHA) -> Optional[int]:
    """The smallest excess of one side over the other among m non-tied items that a two-sided
    sign test can call at ``alpha``; None if even m to 0 cannot (m < 6 at 5%)."""
    top = np.arange(math.ceil(m / 2), m + 1)
    called = top[2 * stats.binom.sf(top - 1, m, 0.5) < alpha]   # binomtest's two-sided p at 1/2
    return int(2 * called[0] - m) if m and called.size else None


def sign_test(d: np.ndarray) -> Dict[str, float]:
    """Per item, the mean of d over the seeds; the sign test on the items whose mean is not 0."""
    per_item = np.asarray(d, dtype=float).mean(axis=0)
    up, down = int((per_item > 0).sum()), int((per_item < 0).sum())
    p = float(stats.binomtest(up, up + down).pvalue) if up + down else 1.0
    return {"items_up": up, "items_down": down, "sign_p": p, "resolution": _resolution(up + down)}


def outcomes(items: pd.DataFrame, name: str, test: str, key: str = "model") -> pd.DataFrame:
    """Seeds x items of ``right`` (1/0) for one model on one test set."""
    rows = items[(items[key] == name) & (items["test"] == test)]
    return rows.pivot(index="seed", columns="item", values="right").sort_index()


def compare(claim: Mapping, runs: Optional[pd.DataFrame] = None, items: Optional[pd.DataFrame] = None,
            key: str = "model") -> Dict:
    """The numbers behind one claim: mean a - b, 95% interval, p, the sign test, mdd, TOST."""
    a, b, delta = claim["a"], claim["b"], claim.get("delta")
    if claim.get("kind", "beats") not in ("beats", "matches") or (claim.get("kind") == "matches" and not delta):
        raise ValueError(f"a claim's kind is 'beats' or 'matches' (which needs a delta > 0), got {dict(claim)!r}")
    if claim.get("test") is not None:
        ra, rb = outcomes(items, a, claim["test"], key), outcomes(items, b, claim["test"], key)
        seeds = ra.index.intersection(rb.index)
        d = ra.loc[seeds].to_numpy(float) - rb.loc[seeds].to_numpy(float)
        out = {**seeds_and_items(d), **sign_test(d), "method": "seeds and items", "equal": False}
    else:
        va = runs[runs[key] == a].set_index("seed")[claim["field"]]
        vb = runs[runs[key] == b].set_index("seed")[claim["field"]]
        seeds = va.index.intersection(vb.index).sort_values()
        out = {**paired_difference(va[seeds], vb[seeds]), "method": "seeds only"}
        out["equal"] = len(seeds) > 1 and out["se"] == 0
        # the sign test over the paired seeds (or rounds): 3 seeds can never reach 5% with it
        out.update(sign_test((va[seeds] - vb[seeds]).to_numpy(float)[None, :]))
    if len(seeds) == 0:
        raise ValueError(f"{a!r} and {b!r} share no seed: nothing to pair")
    mean, se, df = out["mean"], out["se"], out["df"]
    usable = df > 0 and se > 0 and not math.isnan(se)
    t = stats.t(df) if usable else None
    half = t.ppf(1 - ALPHA / 2) * se if usable else math.nan
    out.update(a=a, b=b, low=mean - half, high=mean + half,
               p=float(2 * t.sf(abs(mean) / se)) if usable else (1.0 if se == 0 and not mean else math.nan),
               mdd=(t.ppf(1 - ALPHA / 2) + t.ppf(POWER)) * se if usable else math.nan)
    # never below what the sign test can resolve, over the items or over the paired seeds
    if not out["resolution"]:
        out["mdd"] = math.inf
    elif out["method"] == "seeds and items":
        floor = out["resolution"] / (out["seeds"] * out["items"])
        out["mdd"] = max(out["mdd"], floor) if usable else floor
    if claim.get("kind") == "matches" and usable:    # two one-sided tests: the 90% interval inside ±delta
        out["tost_p"] = float(max(t.sf((mean + delta) / se), t.cdf((mean - delta) / se)))
        out["beyond_p"] = float(min(1.0, 2 * t.sf((abs(mean) - delta) / se)))  # |a - b| > delta
    return out


def _given(row: Mapping, name: str):
    value = row.get(name)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _outside(row: Mapping) -> bool:
    """A "matches" row's 95% interval lies wholly outside ±δ."""
    return row["high"] < -row["delta"] or row["low"] > row["delta"]


def judge(row: Mapping, p_adjusted: Optional[float] = None) -> str:
    """One of the four verdicts for a row of ``compare`` plus its claim (see the module's docstring)."""
    sign, low, high = row.get("sign", 1), row["low"], row["high"]
    if math.isnan(low) or row.get("seeds", 2) < 2:     # one seed: its interval knows nothing of seeds
        return CANNOT_TELL
    ok = p_adjusted is None or p_adjusted < ALPHA
    if row.get("kind", "beats") == "matches":
        if _outside(row):
            return FAILS if ok else CANNOT_TELL
        return EQUIVALENT if ok and (_given(row, "tost_p") or 1.0) < ALPHA else CANNOT_TELL
    lo, hi = sorted((sign * low, sign * high))
    sign_p = _given(row, "sign_p")
    per_item = sign_p is None or (sign_p < ALPHA and (row["items_up"] - row["items_down"]) * row["mean"] > 0)
    return (HOLDS if lo > 0 else FAILS) if ok and per_item and (lo > 0 or hi < 0) else CANNOT_TELL


def _row_p(row: Mapping) -> float:
    """The p a row's verdict rests on: for "matches", the test that |a - b| > δ when the interval lies
    outside ±δ, else TOST's; for "beats", the larger of the interval's and the sign test's (a "beats"
    verdict needs both)."""
    if row.get("kind", "beats") == "matches":
        return _given(row, "beyond_p" if _outside(row) else "tost_p") or math.nan
    return max(row["p"], _given(row, "sign_p") or 0.0)


def _holm(p: pd.Series) -> pd.Series:
    ok = p.notna()
    out = pd.Series(math.nan, index=p.index)
    if ok.any():
        out[ok] = multipletests(p[ok], method="holm")[1]
    return out


def verdict_table(claims: Iterable[Mapping], runs: Optional[pd.DataFrame] = None,
                  items: Optional[pd.DataFrame] = None, key: str = "model") -> pd.DataFrame:
    """One row per claim whose two models the tables hold (a run in progress holds fewer): its
    fields, the numbers of ``compare``, ``p_row``, ``p_holm`` (secondary rows), ``p_holm_all``
    (every row) and ``verdict``. One call is one Holm family."""
    have = {*runs.get(key, ())} if runs is not None else set()
    have |= {*items.get(key, ())} if items is not None else set()
    rows = pd.DataFrame([{"sign": 1, "kind": "beats", "primary": False, "delta": None, **c,
                          **compare(c, runs, items, key)} for c in claims if {c["a"], c["b"]} <= have])
    if rows.empty:
        return pd.DataFrame(columns=["id", "a", "b", "p_row", "verdict"])
    rows["p_row"] = p = rows.apply(_row_p, axis=1)
    rows["p_holm_all"] = _holm(p)
    rows["p_holm"] = _holm(p.where(~rows["primary"].astype(bool)))
    rows["verdict"] = [judge(r, None if r["primary"] else r["p_holm"]) for _, r in rows.iterrows()]
    return rows


def shown(rows: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """``verdict_table``'s rows as a reader sees them: a - b with its 95% interval, the p the verdict
    rests on, the per-item sign test (items a got right more often over the seeds vs b), the row's
    mdd, δ, both Holm columns and the verdict; the claim's own columns are the caller's."""
    num = (lambda x: "-" if pd.isna(x) else "none" if math.isinf(x) else f"{x:.{digits}f}")
    pval = (lambda p: "-" if pd.isna(p) else "< 0.001" if p < 0.001 else f"{p:.3f}")
    interval = rows.apply(lambda r: f"{r['mean']:+.{digits}f}" + (
        " (every seed)" if r.get("equal") else "" if pd.isna(r["low"])
        else f" [{r['low']:+.{digits}f}, {r['high']:+.{digits}f}]"), axis=1)
    items = rows.apply(lambda r: "-" if pd.isna(r.get("sign_p", math.nan))
                       else f"{r['items_up']:.0f} vs {r['items_down']:.0f}, p {pval(r['sign_p'])}", axis=1)
    return pd.DataFrame({"a − b [95%]": interval, "seeds × items": rows.apply(
        lambda r: f"{r['seeds']} × {int(r['items']):,}" if r["method"] == "seeds and items" else f"{r['seeds']} (seeds only)",
        axis=1), "p": rows.p_row.map(pval), "items a vs b (sign test, p unadjusted)": items, "mdd": rows.mdd.map(num),
        "δ": rows.delta.map(lambda x: "-" if pd.isna(x) else f"{x:.2g}"), "Holm p": rows.p_holm.map(pval).where(~rows.primary.astype(bool), "primary"),
        "Holm p (all rows)": rows.p_holm_all.map(pval), "verdict": rows.verdict}, index=rows.index)
