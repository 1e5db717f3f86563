"""How sure a comparison is: paired differences over seeds, McNemar on the same test items, detectable sizes.

The distributions come from scipy and statsmodels; only the book's seeds-and-items interval is written
here. The book's comparisons of two models (chapters 3 and 7 to 11) are reported with these numbers:

- ``paired_difference(a, b)``: seed i of model a against seed i of model b; the mean difference
  with its 95% Student-t interval and the paired t-test's two-sided p-value.
- ``mcnemar(a_correct, b_correct)``: the exact McNemar test on one test set.
- ``seeds_and_items(differences)``: the same mean difference with a 95% interval that covers both
  sources of chance, the seeds and the test items (every seed is tested on the same items).
- ``mcnemar_pooled(counts)``: McNemar's exact test on the discordant items summed over the seeds.
- ``holm(p)``: Holm's step-down adjustment of several p-values (the family-wise error stays at 5%).
- ``detectable_difference(n, accuracy, discordance=...)``: the smallest accuracy difference one paired
  test of ``n`` shared items finds with the usual 5% false-alarm rate and 80% power.
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.multitest import multipletests

__all__ = ["paired_difference", "seeds_and_items", "mcnemar", "mcnemar_pooled", "holm", "detectable_difference"]


def paired_difference(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Dict[str, Optional[float]]:
    """mean(a_i - b_i) over paired seeds, its ``confidence`` t-interval and the paired t-test's p-value.

    With one pair there is no spread: the interval and p are None. Equal differences (std 0) give a
    zero-width interval and p = 0 if the mean is not 0, else p = 1.
    """
    if len(a) != len(b):
        raise ValueError(f"a and b must pair up seed by seed, got {len(a)} and {len(b)} values")
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.ndim != 1 or len(d) == 0 or not np.isfinite(d).all():
        raise ValueError(f"a and b must be non-empty sequences of finite numbers, got {a!r} and {b!r}")
    n, mean = len(d), float(d.mean())
    out = {"n": n, "mean": mean, "std": None, "low": None, "high": None, "t": None, "p": None,
           "differences": [float(v) for v in d]}
    if n < 2:
        return out
    std = float(d.std(ddof=1))
    se, t = std / math.sqrt(n), stats.t(n - 1)
    half = float(t.ppf(0.5 + confidence / 2.0)) * se
    out.update(std=std, low=mean - half, high=mean + half)
    if std == 0.0:
        return {**out, "t": math.copysign(math.inf, mean) if mean else 0.0, "p": 0.0 if mean else 1.0}
    return {**out, "t": mean / se, "p": float(2.0 * t.sf(abs(mean) / se))}


def _exact_mcnemar_p(only_a: int, only_b: int) -> float:
    """McNemar's exact p: only the discordant items count, each going either way with probability 1/2."""
    return float(sm_mcnemar([[0, only_a], [only_b, 0]], exact=True).pvalue)


def mcnemar(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> Dict[str, float]:
    """Exact two-sided McNemar test of two models on the same test items (True = item answered right).

    ``only_a``: items a gets right and b wrong; ``only_b`` the reverse.
    """
    a, b = np.asarray(a_correct), np.asarray(b_correct)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"a_correct and b_correct must be equal-length 1-D outcomes, got shapes {a.shape}, {b.shape}")
    if not (np.isin(a, (0, 1)).all() and np.isin(b, (0, 1)).all()):
        raise ValueError("outcomes must be booleans (or 0/1): whether each test item was answered right")
    a, b = a.astype(bool), b.astype(bool)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    return {"n": len(a), "only_a": only_a, "only_b": only_b, "difference": (only_a - only_b) / len(a),
            "p": _exact_mcnemar_p(only_a, only_b)}


def mcnemar_pooled(counts: Sequence[Tuple[int, int]]) -> Dict[str, float]:
    """McNemar's exact test on the discordant items of several seeds added up: ``counts`` holds each seed's
    (only_a, only_b). It treats every (seed, item) disagreement as a separate coin toss; the seeds share
    their test items, so an item that one model misses in every seed counts once per seed, and the test
    is too sure where that happens. The verdicts use it only as a second condition beside the interval."""
    only_a, only_b = sum(int(c[0]) for c in counts), sum(int(c[1]) for c in counts)
    return {"seeds": len(counts), "only_a": only_a, "only_b": only_b, "p": _exact_mcnemar_p(only_a, only_b)}


def seeds_and_items(differences, confidence: float = 0.95) -> Dict[str, float]:
    """The mean of ``differences`` (seeds x items: 1, 0 or -1, a's outcome minus b's on each shared test item)
    with a ``confidence`` interval that treats both the seeds and the test items as drawn at random.

    With k seeds and n items, the variance of the mean is s_seed^2 / k + s_item^2 / n - s_res^2 / (n k):
    the spread of the k per-seed means, of the n per-item means, less the seed-by-item residual that
    each of the two already counts once (a two-way random-effects layout). It is never taken below the
    larger of the first two terms, so it is at least as wide as the seeds alone or the items alone.
    Degrees of freedom: Satterthwaite's for that sum (in simulations it covers 92-96% of the time).
    """
    d = np.asarray(differences, dtype=float)
    if d.ndim != 2 or 0 in d.shape or not np.isfinite(d).all():
        raise ValueError(f"differences must be a (seeds, items) array of finite numbers, got shape {d.shape}")
    k, n = d.shape
    per_seed, per_item, mean = d.mean(axis=1), d.mean(axis=0), float(d.mean())
    seed_term = float(per_seed.var(ddof=1)) / k if k > 1 else 0.0
    item_term = float(per_item.var(ddof=1)) / n if n > 1 else 0.0
    res = d - per_seed[:, None] - per_item[None, :] + mean
    res_term = float((res ** 2).sum()) / ((n - 1) * (k - 1)) / (n * k) if k > 1 and n > 1 else 0.0
    parts = [(seed_term, k - 1), (item_term, n - 1), (-res_term, (n - 1) * (k - 1))]
    var = seed_term + item_term - res_term
    floor = max((seed_term, k - 1), (item_term, n - 1))
    if var < floor[0]:                            # the residual estimate overshot: keep the larger single term
        var, parts = floor[0], [floor]
    out = {"mean": mean, "seeds": k, "items": n, "seed_term": seed_term, "item_term": item_term,
           "residual_term": res_term, "se": math.sqrt(var)}
    if var == 0.0:                                # no item answered differently by the two: no difference at all
        return {**out, "df": None, "low": mean, "high": mean, "t": 0.0, "p": 1.0}
    df = var ** 2 / sum(c ** 2 / f for c, f in parts if f > 0 and c != 0.0)
    t = stats.t(df)
    half = float(t.ppf(0.5 + confidence / 2.0)) * out["se"]
    return {**out, "df": df, "low": mean - half, "high": mean + half, "t": mean / out["se"],
            "p": float(2.0 * t.sf(abs(mean) / out["se"]))}


def holm(p_values: Sequence[float]) -> List[float]:
    """Holm's step-down adjustment (statsmodels' ``multipletests``): a claim whose adjusted p is below
    0.05 survives a test of all m at a family-wise error rate of 5%."""
    p = [float(v) for v in p_values]
    return [float(v) for v in multipletests(p, method="holm")[1]] if p else []


def detectable_difference(n: int, accuracy: float, alpha: float = 0.05, power: float = 0.8,
                          discordance: Optional[float] = None) -> float:
    """The smallest accuracy gap a two-sided test at level ``alpha`` finds with probability ``power``.

    The book's verdict tables use the second form: all models are tested on the same items. Two
    independent test sets of ``n`` items at ``accuracy``: (z_{1-alpha/2} + z_power) sqrt(2 p (1 - p) / n).
    One shared test set where a fraction ``discordance`` of the items is answered differently by the
    two models (McNemar's normal approximation): (z_{1-alpha/2} + z_power) sqrt(discordance / n).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int (test items), got {n!r}")
    for value, name in ((accuracy, "accuracy"), (alpha, "alpha"), (power, "power")):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0) + NormalDist().inv_cdf(power)
    if discordance is None:
        return z * math.sqrt(2.0 * accuracy * (1.0 - accuracy) / n)
    if not 0.0 < discordance <= 1.0:
        raise ValueError(f"discordance must lie in (0, 1], got {discordance!r}")
    return z * math.sqrt(discordance / n)
