"""The statistics helper against textbook and hand-computed values."""
import math

import numpy as np
import pytest

from capsedu.reports.stats import (detectable_difference, holm, mcnemar, mcnemar_pooled, paired_difference,
                                   seeds_and_items)


def test_paired_difference_by_hand():
    # chapter 9's gap at s = 1, seed by seed (capsnet - cnn): mean -0.0207, t = -3.19 on 2 df
    out = paired_difference([0.848 - 0.018, 0.85 - 0.033, 0.84 - 0.011], [0.848, 0.85, 0.84])
    d = np.array([-0.018, -0.033, -0.011])
    sd = math.sqrt(((d - d.mean()) ** 2).sum() / 2)
    t = d.mean() / (sd / math.sqrt(3))
    assert out["mean"] == pytest.approx(d.mean()) and out["std"] == pytest.approx(sd)
    assert out["t"] == pytest.approx(t) and t == pytest.approx(-3.185, abs=1e-3)
    assert out["p"] == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t), abs=1e-9)            # df = 2 closed form
    half = 4.302653 * sd / math.sqrt(3)
    assert (out["low"], out["high"]) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-6)
    assert out["low"] < 0 < out["high"]                                                      # the interval spans 0


def test_paired_difference_edge_cases():
    one = paired_difference([0.9], [0.8])
    assert one["mean"] == pytest.approx(0.1) and one["low"] is None and one["p"] is None
    same = paired_difference([0.9, 0.8], [0.8, 0.7])
    assert same["std"] == pytest.approx(0.0, abs=1e-12) and same["low"] == pytest.approx(same["high"])
    with pytest.raises(ValueError, match="pair up"):
        paired_difference([1, 2], [1])
    with pytest.raises(ValueError, match="finite"):
        paired_difference([1, float("nan")], [1, 2])


def test_mcnemar_exact_by_hand():
    a = [True] * 2 + [False] * 8 + [True] * 90          # 2 items only a gets right, 8 only b
    b = [False] * 2 + [True] * 8 + [True] * 90
    out = mcnemar(a, b)
    assert (out["only_a"], out["only_b"], out["n"]) == (2, 8, 100)
    assert out["p"] == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert out["difference"] == pytest.approx(-0.06)
    assert mcnemar([False] * 6, [True] * 6)["p"] == pytest.approx(2 / 64)
    assert mcnemar([True, False], [True, False])["p"] == 1.0                    # no disagreement at all
    assert mcnemar([1, 0, 1], [1, 1, 0])["p"] == 1.0                             # 1 vs 1
    with pytest.raises(ValueError, match="booleans"):
        mcnemar([0.5, 1], [1, 1])


def test_detectable_difference_by_hand():
    z = 1.959964 + 0.841621
    assert detectable_difference(1000, 0.97) == pytest.approx(z * math.sqrt(2 * 0.97 * 0.03 / 1000), rel=1e-5)
    assert detectable_difference(1000, 0.97, discordance=0.02) == pytest.approx(z * math.sqrt(0.02 / 1000), rel=1e-5)
    assert detectable_difference(4000, 0.97) == pytest.approx(detectable_difference(1000, 0.97) / 2)
    with pytest.raises(ValueError, match="positive int"):
        detectable_difference(0, 0.9)


# ---------------------------------------------------------------- verdicts from stored runs
from capsedu.reports.verdicts import (CANNOT_TELL, FAILS, HOLDS, adjust, allows, compare,  # noqa: E402
                                      interval_text, judge, outcomes, rows_for)


def test_judge_reads_the_interval():
    assert judge({"low": 0.1, "high": 0.3}) == HOLDS
    assert judge({"low": -0.3, "high": -0.1}) == FAILS
    assert judge({"low": -0.3, "high": -0.1}, sign=-1) == HOLDS
    assert judge({"low": -0.1, "high": 0.3}) == CANNOT_TELL
    assert judge({"low": None, "high": None}) == CANNOT_TELL


def test_outcomes_and_compare_with_misses():
    assert outcomes([0, 3], 5).tolist() == [False, True, True, False, True]
    with pytest.raises(ValueError, match="lie in"):
        outcomes([5], 5)
    a, b = {0: 0.9, 1: 0.8, 2: 0.85}, {0: 0.7, 1: 0.75, 2: 0.6}
    c = compare(a, b, 20, misses_a={0: [1, 2]}, misses_b={0: [1, 2, 3, 4, 5, 6]})
    assert c["seeds"] == [0, 1, 2] and c["mean"] == pytest.approx(0.5 / 3)
    assert [m["seed"] for m in c["mcnemar"]] == [0] and c["mcnemar"][0]["only_a"] == 4
    assert c["mcnemar"][0]["p"] == pytest.approx(2 / 16)
    # misses for one seed of three: the interval stays the seeds' one, and says so
    assert c["method"] == "seeds only" and c["detectable"] is None and c["pooled"] is None
    assert interval_text(c).startswith("+0.167 [") and "seeds only" in interval_text(c)
    assert "McNemar p 0.12" in interval_text(c)


def test_rows_for_pairs_runs_by_seed_and_says_when_it_cannot():
    runs = [{"model": m, "seed": s, "acc": v} for m, vs in (("caps", (0.9, 0.92, 0.91)), ("pool", (0.5, 0.55, 0.52)))
            for s, v in enumerate(vs)]
    rows = rows_for([{"a": "caps", "b": "pool", "field": "acc"}, {"a": "caps", "b": "absent", "field": "acc"}],
                    runs, 1000)
    assert rows[0]["verdict"] == HOLDS and rows[0]["comparison"]["detectable"] is None   # no misses stored
    assert rows[1]["verdict"] == CANNOT_TELL and rows[1]["comparison"] is None
    assert rows[0]["p_holm"] == pytest.approx(rows[0]["comparison"]["p"]) and rows[0]["family"] == 1


# ---------------------------------------------------------------- seeds and items, pooled McNemar, Holm

def _anova_variance(d):
    """The variance of the grand mean of a (seeds, items) table from the two-way ANOVA mean squares:
    (MS_seeds + MS_items - MS_residual) / (k n), written from the sums of squares."""
    k, n = d.shape
    grand = d.mean()
    ss_seed = n * ((d.mean(axis=1) - grand) ** 2).sum()
    ss_item = k * ((d.mean(axis=0) - grand) ** 2).sum()
    ss_res = ((d - grand) ** 2).sum() - ss_seed - ss_item
    return (ss_seed / (k - 1) + ss_item / (n - 1) - ss_res / ((k - 1) * (n - 1))) / (k * n)


def test_seeds_and_items_is_the_two_way_variance_of_the_mean():
    rng = np.random.default_rng(3)
    d = (rng.random((3, 400)) < 0.06).astype(int) - (rng.random((3, 400)) < 0.03) + (rng.random(400) < 0.05)
    out = seeds_and_items(d)
    assert out["mean"] == pytest.approx(d.mean())
    assert out["se"] ** 2 == pytest.approx(max(_anova_variance(d), out["seed_term"], out["item_term"]))
    # never narrower in standard error than the seeds alone or the items alone
    assert out["se"] ** 2 >= d.mean(axis=1).var(ddof=1) / 3 - 1e-15
    assert out["se"] ** 2 >= d.mean(axis=0).var(ddof=1) / 400


def test_seeds_and_items_covers_the_true_difference_in_simulation():
    # seeds and items both random (a two-way layout with a seed effect as large as the item effect):
    # the 95% interval should cover the true difference (0 here) about 95% of the time
    rng, k, n, hits, reps = np.random.default_rng(7), 3, 300, 0, 400
    for _ in range(reps):
        d = rng.normal(0, 0.1, n)[None, :] + rng.normal(0, 0.1 * math.sqrt(k / n), k)[:, None] \
            + rng.normal(0, 0.1, (k, n))
        out = seeds_and_items(d)
        hits += out["low"] <= 0 <= out["high"]
    assert 0.90 <= hits / reps <= 0.99


def test_a_difference_equal_in_every_seed():
    same = np.array([[1, 0, 0, -1, 1, 0, 0, 0, 1, 0]] * 3)       # every seed: +0.2, from the same items
    out = seeds_and_items(same)
    assert out["seed_term"] == pytest.approx(0.0, abs=1e-20) and out["low"] < out["high"]
    assert out["df"] == pytest.approx(9) and 0 < out["p"] < 1                      # the items' spread alone
    a = {s: 0.9 for s in range(3)}
    b = {s: 0.8 for s in range(3)}
    seeds_only = compare(a, b, 10)
    assert seeds_only["equal"] and seeds_only["low"] is None and judge(seeds_only) == CANNOT_TELL
    assert interval_text(seeds_only) == "+0.100 in every seed (3 seeds; no interval: no per-item outcomes stored)"
    miss_a, miss_b = {s: [0] for s in range(3)}, {s: [1] for s in range(3)}   # the same item each seed
    c = compare({s: 0.9 for s in range(3)}, {s: 0.9 for s in range(3)}, 10, miss_a, miss_b)
    assert c["equal"] and interval_text(c).startswith("+0.000 in every seed; over the items [")
    assert judge(c) == CANNOT_TELL


def test_mcnemar_pooled_by_hand():
    # seeds (3, 0), (2, 1), (4, 0): 9 against 1 discordant items, p = 2 (1 + 10) / 2^10
    out = mcnemar_pooled([(3, 0), (2, 1), (4, 0)])
    assert (out["only_a"], out["only_b"], out["seeds"]) == (9, 1, 3)
    assert out["p"] == pytest.approx(22 / 1024)
    def p(only_a, only_b):
        return mcnemar_pooled([(only_a, only_b)])["p"]
    assert p(0, 0) == 1.0 and p(5, 5) == 1.0
    exact = 2 * sum(math.comb(3800, i) for i in range(1801)) / 2 ** 3800       # in integers, then one division
    assert p(2000, 1800) == pytest.approx(exact, rel=1e-9) and exact == pytest.approx(0.00124, abs=1e-5)
    assert p(3000, 2000) < 1e-40


def test_holm_textbook_example():
    # Holm (1979)-style worked example: p = 0.01, 0.04, 0.03, 0.005 -> 0.03, 0.06, 0.06, 0.02
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([]) == []
    assert holm([0.02]) == [0.02]


def test_holm_decides_the_secondary_rows_only():
    c = {"low": 0.01, "high": 0.05, "p": 0.03, "mean": 0.03}
    rows = adjust([{"comparison": dict(c), "verdict": HOLDS, "primary": True},
                   {"comparison": dict(c), "verdict": HOLDS}, {"comparison": dict(c), "verdict": HOLDS}])
    assert [r["verdict"] for r in rows] == [HOLDS, CANNOT_TELL, CANNOT_TELL]   # 2 x 0.03 = 0.06: not below 0.05
    assert [r["p_holm"] for r in rows] == [None, pytest.approx(0.06), pytest.approx(0.06)]
    assert [r["verdict"] for r in adjust([{"comparison": dict(c), "verdict": HOLDS}])] == [HOLDS]


def test_the_pooled_mcnemar_must_agree_for_a_verdict():
    c = {"low": 0.01, "high": 0.05, "p": 0.01, "mean": 0.03, "pooled": {"only_a": 12, "only_b": 8, "p": 0.5}}
    assert judge(c) == CANNOT_TELL
    c["pooled"] = {"only_a": 30, "only_b": 8, "p": 0.0005}
    assert judge(c) == HOLDS and judge(c, sign=-1) == FAILS


def test_cannot_tell_says_what_it_rules_out():
    row = {"verdict": CANNOT_TELL, "comparison": {"low": -0.039, "high": 0.011}, "claimed": (0.13, "the paper's")}
    assert allows(row) == "the interval allows -0.039 to +0.011; it rules out the paper's +0.13"
    row["claimed"] = (0.01, "the paper's")
    assert allows(row) == "the interval allows -0.039 to +0.011; it still allows the paper's +0.01"
    row = {"verdict": CANNOT_TELL, "comparison": {"low": -0.165, "high": 0.141}, "claimed": 0.17}
    assert allows(row).endswith("it rules out the claimed +0.17, though not 83% of it")
    row = {"verdict": CANNOT_TELL, "comparison": {"low": 0.3, "high": 0.7}, "claimed": (0.25, "Su's"), "family": 8}
    assert allows(row) == ("the interval allows +0.300 to +0.700 (clear of zero, but not after Holm's correction "
                           "over 8 rows), all beyond Su's +0.25")
    assert allows({"verdict": HOLDS, "comparison": {"low": 0.1, "high": 0.2}}) == ""


def test_paired_detectable_is_smaller_than_for_two_sets():
    # 3 seeds x 200 items, the two models disagree on 4% of the items: the paired formula, not 2 p (1 - p)
    miss_a = {s: list(range(10)) for s in range(3)}
    miss_b = {s: list(range(2, 20)) for s in range(3)}
    c = compare({s: 0.95 for s in range(3)}, {s: 0.91 for s in range(3)}, 200, miss_a, miss_b)
    assert c["discordance"] == pytest.approx(12 / 200)
    assert c["detectable"] == pytest.approx(detectable_difference(200, 0.93, discordance=0.06))
    assert c["detectable"] < detectable_difference(200, 0.93)
