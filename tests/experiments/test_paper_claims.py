"""Chapter 9's claims as data, judged on small synthetic stored folders: ``frames`` reads the
matched epochs (robustness) or the last one (ablation), and ``verdict_table`` gives the numbers
and verdict words the chapter asserts."""
import pytest

import capsedu.runtime.results
from capsedu.data.mnist import n_test_digits
from capsedu.experiments import ablation, multimnist, robustness
from capsedu.experiments.shared.verdicts import CANNOT_TELL, EQUIVALENT, FAILS, HOLDS, verdict_table
from capsedu.runtime.stored import run_stem, write_stored

N = 400   # test digits of the synthetic runs


def store(folder, settings, records, key):
    folder.mkdir()
    for r in records:
        write_stored({"settings": settings, "run": r}, folder / f"{run_stem(r['seed'], r[key])}.json")


@pytest.fixture
def stored(tmp_path, monkeypatch):
    """Read the stored runs from ``tmp_path`` (``results.stored_or_preview``, as the chapter does)."""
    monkeypatch.setattr(capsedu.runtime.results, "results_dir", lambda: tmp_path)

    def read(name):
        data, why = capsedu.runtime.results.stored_or_preview(name)
        assert why is None, why
        return data
    return read


def _epoch(k, val, affine_misses):
    misses = {"val": [], "clean": [], "affine@0": [], "affine@1": affine_misses}
    return {"epoch": k, "val": val, "clean": 1.0, "affine@0": 1.0, "affine@1": 1 - len(affine_misses) / N,
            "misses": misses, "wrong": [[i, 0] for i in affine_misses]}


def robustness_records(seeds=(0, 1, 2)):
    """CapsNet misses 10 affine digits at its matched epoch 2, both CNNs 50 (the same ones, and
    CapsNet's ten among them). cnn-ce stopped there, its best validation accuracy 0.9 the target;
    epoch 1 (below it) and epoch 3 (after it) would say the opposite."""
    cnn, all_ = list(range(50)), list(range(N))
    misses = {"capsnet": (all_, cnn[:10], cnn), "cnn": ([], cnn, cnn[:10]), "cnn-ce": ([], cnn)}
    return [{"model": m, "seed": s, "loss": robustness.MODEL_LOSS[m], "params": 1, "seconds": 1.0,
             "epochs": [_epoch(k, val, missed) for k, val, missed in zip((1, 2, 3), (0.5, 0.9, 0.95), each)]}
            for s in seeds for m, each in misses.items()]


ROB_SETTINGS = {"models": list(robustness.MODELS), "seeds": [0, 1, 2], "max_epochs": 3, "patience": 1,
                "n_test": N, "n_val": 10, "strengths": [0.0, 1.0], "source": "sample"}


def test_robustness_frames_read_the_matched_epoch_and_the_claims_verdicts(tmp_path, stored):
    store(tmp_path / robustness.STORED, ROB_SETTINGS, robustness_records(), "model")
    f = robustness.frames(stored(robustness.STORED))
    assert len(f["runs"]) == 9 and set(f["runs"].epoch) == {2} and len(f["epochs"]) == 24
    right = f["items"][f["items"].test == "affine@1"].groupby(["model", "seed"]).right.mean()
    assert right.to_dict() == pytest.approx(f["runs"].set_index(["model", "seed"])["affine@1"].to_dict())
    v = verdict_table(robustness.CLAIMS, f["runs"], f["items"]).set_index("id")
    assert v.loc["9.1", ["mean", "items_up", "items_down"]].tolist() == pytest.approx([0.1, 40, 0])
    assert v.at["9.1", "low"] > 0 and v.loc[["9.1", "9.2"], "verdict"].tolist() == [HOLDS, HOLDS]
    assert v.at["9.7", "high"] < -robustness.DELTA and v.at["9.7", "verdict"] == FAILS
    assert v.at["9.8", "mean"] == 0 and v.at["9.8", "verdict"] == CANNOT_TELL   # equal in every digit
    assert v.at["9.2", "primary"] and v.at["9.1", "p_holm"] >= v.at["9.1", "p"]


def test_a_seed_without_every_model_is_left_out(tmp_path, stored):
    records = [r for r in robustness_records() if (r["model"], r["seed"]) != ("cnn-ce", 2)]
    store(tmp_path / robustness.STORED, ROB_SETTINGS, records, "model")
    f = robustness.frames(stored(robustness.STORED))
    assert set(f["runs"].seed) == set(f["items"].seed) == {0, 1} and len(f["epochs"]) == 22


def ablation_records():
    """r1+recon misses 40 more shifted digits than r3+recon in every seed, and one affine digit
    (another per seed); r3-detach differs from r3 on one digit each way per seed; every other
    variant misses the same ten."""
    base = list(range(10))
    extra = {"r1+recon": base + list(range(100, 140))}
    out = []
    for s in (0, 1, 2):
        extra["r3-detach"] = sorted(set(base) - {s} | {200 + s})
        for name in ablation.VARIANTS:
            clean = extra.get(name, base)
            out.append({"variant": name, "seed": s, "params": 1, "seconds": 1.0, "epochs": [{"epoch": 1}],
                        "clean_error": 100 * len(clean) / N, "affine_acc": 1.0,
                        "misses": {"clean": clean, "affine": [s] if name == "r1+recon" else []}})
    return out


def test_ablation_frames_and_the_claims_verdicts(tmp_path, stored):
    settings = {"variants": list(ablation.VARIANTS), "seeds": [0, 1, 2], "epochs": 1, "n_test": N,
                "affine_strength": 1.0, "source": "sample"}
    store(tmp_path / ablation.STORED, settings, ablation_records(), "variant")
    f = ablation.frames(stored(ablation.STORED))
    assert all((df["model"] == df["variant"]).all() for df in f.values())
    errors = 100 * (1 - f["items"][f["items"].test == "clean"].groupby(["variant", "seed"]).right.mean())
    assert errors.to_dict() == pytest.approx(f["runs"].set_index(["variant", "seed"]).clean_error.to_dict())
    v = verdict_table(ablation.CLAIMS, f["runs"], f["items"]).set_index("id")
    assert v.at["9.3", "mean"] == pytest.approx(40 / N) and v.at["9.3", "verdict"] == HOLDS
    assert v.at["9.9", "low"] > ablation.CLEAN_DELTA and v.at["9.9", "verdict"] == FAILS
    assert v.at["9.5", "mean"] == pytest.approx(1 / N) and v.at["9.5", "verdict"] == EQUIVALENT
    # equal on average, but the clean δ (verdicts.DELTA) is finer than 3 x 1,000 digits resolve
    assert v.at["9.10", "mean"] == 0 and v.at["9.10", "verdict"] == CANNOT_TELL
    assert (v.at["9.10", "items_up"], v.at["9.10", "items_down"]) == (3, 3)


def test_the_claims_name_what_their_experiment_stores():
    tests = {robustness: {f"affine@{s:g}" for s in robustness.RobustnessConfig.strengths} | {"clean"},
             ablation: {"clean", "affine"}}
    names = {robustness: set(robustness.MODELS), ablation: set(ablation.VARIANTS)}
    ids = [c["id"] for m in tests for c in m.CLAIMS]
    assert len(ids) == len(set(ids)) and multimnist.CLAIMS == []
    for module, sets in tests.items():
        assert sum(bool(c.get("primary")) for c in module.CLAIMS) == 1
        for c in module.CLAIMS:
            assert {c["a"], c["b"]} <= names[module] and c["test"] in sets
            assert (c.get("kind") == "matches") == (c.get("delta") is not None)
    # a tenth of the paper's affNIST gap, CapsNet over its CNN
    assert robustness.DELTA == ablation.AFFINE_DELTA == pytest.approx((0.79 - 0.66) / 10)


def test_a_run_that_does_not_say_its_test_size_is_refused():
    assert n_test_digits({"n_test": None, "source": "sample"}) == 1000
    assert n_test_digits({"n_test": 300, "source": "auto"}) == 300
    with pytest.raises(ValueError, match="does not say how many test digits"):
        n_test_digits({"n_test": None, "source": "auto"})


def test_multimnist_frames_of_the_stored_run():
    data, why = capsedu.runtime.results.stored_or_preview(multimnist.STORED)
    if data is None:
        pytest.skip(why)
    f = multimnist.frames(data)
    assert len(f["runs"]) == len(data["runs"]) and f["items"].empty
    last = f["epochs"].sort_values("epoch").groupby("seed").top2.last()
    assert last.to_dict() == f["runs"].set_index("seed").top2.to_dict()
