"""Chapter 11's re-created tutorial network does what the tutorial code does, and the before/after run stores
what the chapter reads."""
import dataclasses

import pytest
import torch

from capsedu.core.capsnet import CapsNet
from capsedu.core.params import count_parameters
from capsedu.experiments import tutorial_vs_fixed as tvf
from capsedu.core.routing import dynamic_routing
from capsedu.methods.tutorial_capsnet import (TutorialCapsNet, tutorial_loss, tutorial_routing, tutorial_squash)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return TutorialCapsNet().eval()


def test_same_parameter_count_as_capsnet(net):
    assert count_parameters(net) == count_parameters(CapsNet())


def test_squash_is_undefined_at_zero_only():
    out = tutorial_squash(torch.tensor([[0.0, 0.0], [3.0, 4.0]]))
    assert torch.isnan(out[0]).all()
    assert torch.allclose(out[1].norm(), torch.tensor(25 / 26))


def test_tutorial_routing_is_dynamic_routing_for_one_example_with_the_softmax_fixed():
    u = torch.randn(3, 20, 4, 5, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(tutorial_routing(u[:1], softmax_dim=2), dynamic_routing(u[:1]), atol=1e-6)
    assert not torch.allclose(tutorial_routing(u, softmax_dim=2)[:1], dynamic_routing(u[:1]), atol=1e-4)  # pitfall 2
    assert not torch.allclose(tutorial_routing(u[:1]), dynamic_routing(u[:1]), atol=1e-4)                # pitfall 1


def test_an_example_depends_on_its_batch_neighbours(net):
    """Pitfall 2: one set of logits for the batch (capsedu's keeps one per example: test_core's
    test_routing_logits_are_per_example)."""
    x = torch.rand(3, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        alone = net.capsules(x[:1])
        together = net.capsules(x)[:1]
    assert (alone - together).abs().max() > 1e-4 * alone.abs().max()


def test_digit_capsules_are_squashed_element_by_element(net):
    """Pitfall 8: each of the 16 numbers is squashed alone, so a capsule may be longer than 1 (long votes:
    W scaled up, since with c = 1/1152 the trained-from-scratch capsules start very short)."""
    import copy
    big = copy.deepcopy(net)
    with torch.no_grad():
        big.W.mul_(30)
        v = big.capsules(torch.rand(2, 1, 28, 28, generator=torch.Generator().manual_seed(2)))
    assert v.shape == (2, 10, 16, 1)
    assert v.abs().max() <= 1 and v.norm(dim=2).max() > 1.5   # a vector squash keeps every length below 1


def test_the_decoder_pick_is_a_softmax_over_the_batch(net):
    """Pitfall 5: with a batch of one, the softmax over dim 0 is 1 everywhere, so the pick is always class 0."""
    for seed in range(3):
        x = torch.rand(1, 1, 28, 28, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            _, _, masked = net(x)
        assert masked.argmax(dim=1).item() == 0


def test_the_margin_loss_is_a_hinge():
    """Pitfall 3: slope 1 for the present class, below the margin, whatever the length."""
    slopes = []
    for length in (0.2, 0.6):
        v = torch.zeros(1, 10, 16, 1)
        v[0, 0, 0, 0] = length
        v.requires_grad_(True)
        tutorial_loss(v, torch.zeros(1, 1, 28, 28), torch.zeros(1, 1, 28, 28), torch.tensor([0])).backward()
        slopes.append(v.grad[0, 0, 0, 0].item())
    assert slopes == pytest.approx([-1.0, -1.0])


def test_end_to_end_and_misses(mnist_sample):
    torch.set_num_threads(1)
    data = mnist_sample
    config = dataclasses.replace(tvf.PRESETS["smoke"], n_test=120)   # > one test batch of 100
    result = tvf.tutorial_vs_fixed(config, device="cpu", data=data, progress=False)
    assert [(r["model"], r["seed"]) for r in result["runs"]] == [("tutorial", 0), ("fixed", 0)]
    for r in result["runs"]:
        assert r["test"] == pytest.approx(1 - len(r["misses"]["test"]) / 120)
        assert len(r["epochs"]) == config.epochs and r["steps"] == 3
    tutorial = result["runs"][0]
    assert 0 <= tutorial["test_changed_by_batching"] <= 120 and tutorial["non_finite_steps"] == []


# ---------------------------------------------------------------- chapter 11's claims on the stored run
from capsedu.experiments.shared.tables import load  # noqa: E402
from capsedu.experiments.shared.verdicts import CANNOT_TELL, HOLDS, MEASURED, verdict_table  # noqa: E402


def _stored():
    return load(tvf.STORED, lambda: pytest.fail("the stored run should be readable"), check=tvf.readable)


def test_the_chapters_claims_on_the_stored_run():
    data = _stored()
    f = tvf.frames(data)
    gap, printed = (row for _, row in verdict_table(tvf.CLAIMS, f["runs"], f["items"]).iterrows())
    means = f["runs"].groupby("model").test.mean()
    assert gap["mean"] == pytest.approx(means["fixed"] - means["tutorial"])
    assert gap["method"] == "seeds and items" and (gap["seeds"], gap["items"]) == (3, 1000)
    # the sign test counts digits by their mean over the seeds, not (seed, digit) pairs
    misses = {(r["model"], r["seed"]): set(r["misses"]["test"]) for r in data["runs"]}
    lean = {i: sum((i in misses["tutorial", s]) - (i in misses["fixed", s]) for s in range(3))
            for i in set().union(*misses.values())}
    assert (gap["items_up"], gap["items_down"]) == (sum(v > 0 for v in lean.values()),
                                                    sum(v < 0 for v in lean.values()))
    assert (gap["verdict"] == HOLDS) == (gap["low"] > 0 and gap["sign_p"] < 0.05)
    # the printed accuracy: one stored number per seed and no per-item outcomes: seeds only
    last = {r["seed"]: r["epochs"][-1]["test_as_reported"] - r["test"]
            for r in data["runs"] if r["model"] == "tutorial"}
    assert printed["mean"] == pytest.approx(sum(last.values()) / len(last))
    assert printed["method"] == "seeds only" and printed["verdict"] == CANNOT_TELL


def test_claim_11_3_is_a_count_without_a_verdict():
    runs = tvf.frames(_stored())["runs"]
    row = tvf.batch_claim(runs)
    changed = [r["test_changed_by_batching"] for r in _stored()["runs"] if r["model"] == "tutorial"]
    assert (row["low"], row["high"], row["seeds"]) == (min(changed), max(changed), len(changed))
    # no control network was reordered: neither a change nor none is a verdict
    none = runs.assign(test_changed_by_batching=0)
    one = none.assign(test_changed_by_batching=(none.seed == none.seed.max()).astype(int))
    assert {tvf.batch_claim(t)["verdict"] for t in (runs, none, one)} == {MEASURED}
    assert (tvf.batch_claim(one)["low"], tvf.batch_claim(one)["high"]) == (0, 1)


def test_a_stored_run_without_one_model_is_not_readable():
    data = _stored()
    tvf.readable(data)
    with pytest.raises(ValueError, match="both models"):
        tvf.readable({**data, "runs": [r for r in data["runs"] if r["model"] == "fixed"]})
    with pytest.raises(KeyError, match="steps"):
        tvf.readable({**data, "runs": [{k: v for k, v in r.items() if k != "steps"} for r in data["runs"]]})
