"""The four verdicts: intervals over seeds and items, the sign test's resolution, TOST and Holm."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from capsedu.experiments.shared.verdicts import (CANNOT_TELL, EQUIVALENT, FAILS, HOLDS, seeds_and_items,
                                                 shown, sign_test, verdict_table)


def _items(outcomes):
    """{model: (seeds, items) 0/1 array} -> an items table as tables.items_table makes it."""
    parts = [pd.DataFrame({"model": m, "seed": np.repeat(np.arange(r.shape[0]), r.shape[1]), "test": "t",
                           "item": np.tile(np.arange(r.shape[1]), r.shape[0]), "right": r.ravel()})
             for m, r in outcomes.items()]
    return pd.concat(parts, ignore_index=True)


def _draw(rng, seeds, items, acc_a, acc_b, seed_sd=0.0):
    """Per seed a shift of a's accuracy (seed_sd), per item a difficulty: a and b answer independently."""
    shift = rng.normal(0, seed_sd, (seeds, 1))
    easy = rng.uniform(-0.1, 0.1, (1, items))
    a = rng.random((seeds, items)) < np.clip(acc_a + shift + easy, 0, 1)
    b = rng.random((seeds, items)) < np.clip(acc_b + easy, 0, 1)
    return a.astype(int), b.astype(int)


def _runs(d):
    """Six seeds of two models, a's accuracy above b's 0.8 by ``d``."""
    return pd.DataFrame({"model": ["a"] * 6 + ["b"] * 6, "seed": list(range(6)) * 2, "acc": [0.8 + x for x in d] + [0.8] * 6})


UP = [.01, .03, .002, .02, .025, .004]            # t = 3.2 on 5 df: p about 0.02; 6 of 6 up: 0.03


def test_one_seed_reduces_to_the_items_and_constant_items_to_the_seeds():
    rng = np.random.default_rng(0)
    d = rng.integers(-1, 2, (1, 400)).astype(float)
    assert seeds_and_items(d)["se"] == pytest.approx(d.std(ddof=1) / math.sqrt(400))
    per_seed = rng.normal(0, 0.05, (5, 1))
    d = np.repeat(per_seed, 300, axis=1)
    assert seeds_and_items(d)["se"] == pytest.approx(per_seed.std(ddof=1) / math.sqrt(5))


def test_the_sign_test_cannot_resolve_fewer_than_six_items():
    assert sign_test(np.array([[1, 1, 1, 1, 1, 0]]))["resolution"] is None
    assert sign_test(np.array([[1, 1, 1, 1, 1, 1, 0]]))["resolution"] == 6
    rows = verdict_table([dict(a="a", b="b", test="t")], items=_items(
        {"a": np.ones((1, 100), int), "b": np.r_[np.zeros(5), np.ones(95)][None].astype(int)}))
    assert math.isinf(rows.mdd[0]) and rows.verdict[0] == CANNOT_TELL
    one_seed = verdict_table([dict(a="a", b="b", test="t")], items=_items(
        {"a": np.ones((1, 100), int), "b": np.r_[np.zeros(50), np.ones(50)][None].astype(int)}))
    assert one_seed.low[0] > 0 and one_seed.verdict[0] == CANNOT_TELL      # the items alone never decide


def test_the_interval_covers_about_95_percent_when_seeds_vary():
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(400):
        a, b = _draw(rng, 5, 200, 0.8, 0.8, seed_sd=0.03)
        r = seeds_and_items(a - b)
        covered += abs(r["mean"]) <= stats.t(r["df"]).ppf(0.975) * r["se"]
    assert 0.91 <= covered / 400 <= 0.99


def test_a_clear_gain_holds_its_reverse_does_not_and_a_tiny_one_is_equivalent():
    rng = np.random.default_rng(2)
    a, b = _draw(rng, 5, 1000, 0.9, 0.6)
    items = _items({"a": a, "b": b, "c": np.where(rng.random(a.shape) < 0.01, 1 - a, a)})
    rows = verdict_table([dict(a="a", b="b", test="t", primary=True), dict(a="a", b="b", test="t", sign=-1),
                          dict(a="a", b="c", test="t", kind="matches", delta=0.02),
                          dict(a="a", b="b", test="t", kind="matches", delta=0.02)], items=items)
    assert rows.verdict.tolist() == [HOLDS, FAILS, EQUIVALENT, FAILS]
    assert math.isnan(rows.p_holm[0]) and (rows.p_holm_all >= rows.p.where(rows.kind == "beats", 0)).all()
    table = shown(rows)
    assert table["Holm p"][0] == "primary" and table["seeds × items"][0] == "5 × 1,000"
    assert table["verdict"].tolist() == rows.verdict.tolist()


def test_holm_takes_a_secondary_row_below_its_own_interval_not_a_primary_one():
    runs = _runs(UP)
    claims = [dict(a="a", b="b", field="acc", primary=True)] + [dict(a="a", b="b", field="acc")] * 5
    rows = verdict_table(claims, runs=runs)
    assert (rows.low > 0).all() and 0.01 < rows.p[0] < 0.05
    assert rows.verdict.tolist() == [HOLDS] + [CANNOT_TELL] * 5
    assert rows.p_holm_all[0] == pytest.approx(min(1, 6 * rows.p_row[0])) and math.isnan(rows.p_holm[0])
    assert rows.p_row[0] == pytest.approx(1 / 32)                      # the sign test's, over the seeds
    five = verdict_table(claims[:1], runs=runs[runs.seed < 5]).iloc[0]  # 5 of 5 up: p 1/16, no verdict
    assert five.low > 0 and five.p < 0.05 and five.verdict == CANNOT_TELL
    assert math.isinf(five.mdd) and 0 < rows.mdd[0] < math.inf       # the sign test's floor, seeds only


def test_does_not_hold_needs_what_holds_needs_on_the_other_side():
    runs = _runs(UP)
    worse = dict(a="a", b="b", field="acc", sign=-1)                # "a is worse": the other side
    assert verdict_table([{**worse, "primary": True}], runs=runs).verdict[0] == FAILS
    assert verdict_table([worse] * 6, runs=runs).verdict.tolist() == [CANNOT_TELL] * 6   # Holm
    five = verdict_table([{**worse, "primary": True}], runs=runs[runs.seed < 5]).iloc[0]
    assert five.high > 0 and five.low > 0 and five.verdict == CANNOT_TELL   # the sign test: 1/16


def test_a_matches_row_fails_only_when_its_own_p_survives_holm():
    runs = _runs([.07, .08, .065, .075, .06, .07])            # mean 0.07, wholly above delta 0.06 at 95%
    claim = dict(a="a", b="b", field="acc", kind="matches", delta=0.06)
    alone = verdict_table([{**claim, "primary": True}], runs=runs).iloc[0]
    assert alone.low > 0.06 and alone.verdict == FAILS and 0.01 < alone.p_row == alone.beyond_p < 0.05
    assert verdict_table([claim] * 2, runs=runs).verdict.tolist() == [FAILS] * 2      # Holm: 2p < 0.05
    assert verdict_table([claim] * 5, runs=runs).verdict.tolist() == [CANNOT_TELL] * 5


def test_seeds_only_rows_and_bad_claims():
    runs = pd.DataFrame({"model": ["a"] * 3 + ["b"] * 3, "seed": [0, 1, 2] * 2, "acc": [.9, .9, .9, .8, .8, .8]})
    row = verdict_table([dict(a="a", b="b", field="acc")], runs=runs).iloc[0]
    assert row.method == "seeds only" and row.equal and row.verdict == CANNOT_TELL
    with pytest.raises(ValueError, match="delta"):
        verdict_table([dict(a="a", b="b", field="acc", kind="matches")], runs=runs)


def test_a_claim_on_a_model_the_run_lacks_is_left_out_and_p_is_the_verdicts():
    rng = np.random.default_rng(3)
    a, b = _draw(rng, 3, 400, 0.9, 0.6)
    claims = [dict(id="x", a="a", b="b", test="t"), dict(id="y", a="a", b="c", test="t")]
    table = verdict_table(claims, items=_items({"a": a, "b": b}))
    assert list(table["id"]) == ["x"]
    row = table.iloc[0]
    assert row["p_row"] == max(row["p"], row["sign_p"])
    assert shown(table)["p"].iloc[0] == "< 0.001"
    assert verdict_table(claims[1:], items=_items({"a": a})).empty


def test_every_matches_claim_takes_its_delta_from_the_one_rule():
    from capsedu.experiments import ablation, robustness, two_digits
    from capsedu.experiments.compare_routing import claims as routing
    from capsedu.experiments.shared.verdicts import DELTA
    claims = two_digits.CLAIMS + robustness.CLAIMS + ablation.CLAIMS + routing.CLAIMS
    deltas = {c["delta"] for c in claims if c.get("kind") == "matches"}
    assert deltas and deltas <= set(DELTA.values())
    assert DELTA["affine"] == pytest.approx(0.013) and DELTA["clean"] == pytest.approx(0.00014)
    from capsedu.experiments.shared.verdicts import PAPER_AFFNIST    # one source of the paper's numbers
    assert all(robustness.PAPER_AFFNIST[m] == PAPER_AFFNIST[m] for m in PAPER_AFFNIST)
    assert DELTA["affine"] == pytest.approx((PAPER_AFFNIST["capsnet"][1] - PAPER_AFFNIST["cnn"][1]) / 10)
