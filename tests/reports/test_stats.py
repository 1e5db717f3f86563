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
