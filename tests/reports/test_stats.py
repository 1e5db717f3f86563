"""The statistics helper against textbook and hand-computed values."""
import math

import numpy as np
import pytest

from capsedu.reports.stats import detectable_difference, mcnemar, paired_difference, t_cdf, t_quantile


@pytest.mark.parametrize("q, df, expected", [   # Student-t tables (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2)
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 10, 2.228), (0.975, 30, 2.042),
    (0.95, 5, 2.015), (0.995, 3, 5.841),
])
def test_t_quantiles_match_the_table(q, df, expected):
    assert t_quantile(q, df) == pytest.approx(expected, abs=5e-4)
    assert t_quantile(1 - q, df) == pytest.approx(-expected, abs=5e-4)


def test_t_cdf_closed_forms():
    for t in (-5.0, -1.3, 0.0, 0.4, 2.0, 9.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)          # Cauchy
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)  # df = 2
    assert t_cdf(1.96, 1e6) == pytest.approx(NormalCdf(1.96), abs=1e-5)                    # df -> inf: normal


def NormalCdf(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


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
from capsedu.reports.verdicts import (CANNOT_TELL, FAILS, HOLDS, compare, interval_text, judge,  # noqa: E402
                                                 outcomes, rows_for)


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
    assert interval_text(c).startswith("+0.167 [") and "McNemar p 0.12" in interval_text(c)


def test_rows_for_pairs_runs_by_seed_and_says_when_it_cannot():
    runs = [{"model": m, "seed": s, "acc": v} for m, vs in (("caps", (0.9, 0.92, 0.91)), ("pool", (0.5, 0.55, 0.52)))
            for s, v in enumerate(vs)]
    rows = rows_for([{"a": "caps", "b": "pool", "field": "acc"}, {"a": "caps", "b": "absent", "field": "acc"}],
                    runs, 1000)
    assert rows[0]["verdict"] == HOLDS and rows[0]["comparison"]["detectable"] > 0
    assert rows[1]["verdict"] == CANNOT_TELL and rows[1]["comparison"] is None
