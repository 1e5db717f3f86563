"""Chapter 10's routing methods: EM routing, self-attention routing, no routing, and their comparison."""
import json
import math

import pytest
import torch

from capsedu.runtime.stored import read_runs
from capsedu.core.params import count_parameters
from capsedu.methods.attention import (DepthwisePrimaryCapsules, SelfAttentionCapsules, efficient_squash,
    self_attention_routing)
from capsedu.methods.efficient_capsnet import EfficientCapsNet, formula_count
from capsedu.methods.em import STD_EPS, e_step, em_routing, inverse_temperature, m_step
from capsedu.methods.matrix_capsnet import PAPER_CONFIG, ConvMatrixCapsules, MatrixCapsNet


# ---------------------------------------------------------------- EM routing: loop references
def loop_m_step(R, a, V, beta_u, beta_a, lam, eps=1e-6, standardise=True):
    """Procedure 1's M step written out, one number at a time. R (B, N_in, N_out), V (B, N_in, N_out, P)."""
    B, n_in, n_out, P = V.shape
    f64 = dict(dtype=torch.float64)
    mu, var, logit = torch.zeros(B, n_out, P, **f64), torch.zeros(B, n_out, P, **f64), torch.zeros(B, n_out, **f64)
    for b in range(B):
        for j in range(n_out):
            w = [R[b, i, j] * a[b, i] for i in range(n_in)]
            r = sum(w)
            cost = 0.0
            for h in range(P):
                m = sum(w[i] * V[b, i, j, h] for i in range(n_in)) / (r + eps)
                s2 = sum(w[i] * (V[b, i, j, h] - m) ** 2 for i in range(n_in)) / (r + eps) + eps
                mu[b, j, h], var[b, j, h] = m, s2
                cost += (beta_u[j] + 0.5 * math.log(s2)) * r
            logit[b, j] = cost if standardise else lam * (beta_a[j] - cost)
        if not standardise:
            continue
        mean = sum(logit[b, j] for j in range(n_out)) / n_out         # standardise the costs over j
        sd = math.sqrt(sum((logit[b, j] - mean) ** 2 for j in range(n_out)) / n_out + STD_EPS)
        for j in range(n_out):
            logit[b, j] = lam * (beta_a[j] - (logit[b, j] - mean) / sd)
    return mu, var, logit


def loop_e_step(V, mu, var, logit):
    """Procedure 1's E step: R_ij = a_j p_j(V_ij) / sum_k a_k p_k(V_ik)."""
    B, n_in, n_out, P = V.shape
    R = torch.zeros(B, n_in, n_out, dtype=torch.float64)
    a = torch.sigmoid(logit)
    for b in range(B):
        for i in range(n_in):
            p = []
            for j in range(n_out):
                dens = 1.0
                for h in range(P):
                    s2 = var[b, j, h]
                    dens *= math.exp(-(V[b, i, j, h] - mu[b, j, h]) ** 2 / (2 * s2)) / math.sqrt(2 * math.pi * s2)
                p.append(a[b, j] * dens)
            for j in range(n_out):
                R[b, i, j] = p[j] / sum(p)
    return R


@pytest.fixture
def em_case():
    g = torch.Generator().manual_seed(0)
    B, n_in, n_out, P = 2, 5, 3, 4
    V = torch.randn(B, n_in, n_out, P, generator=g, dtype=torch.float64)
    a = torch.rand(B, n_in, generator=g, dtype=torch.float64)
    R = torch.softmax(torch.randn(B, n_in, n_out, generator=g, dtype=torch.float64), dim=2)
    beta_u, beta_a = torch.randn(2, n_out, generator=g, dtype=torch.float64)
    return V, a, R, beta_u, beta_a


@pytest.mark.parametrize("standardise", [True, False])
def test_m_step_matches_loop_reference(em_case, standardise):
    V, a, R, beta_u, beta_a = em_case
    u = V.transpose(1, 2).contiguous()                               # the (B, N_out, N_in, P) order m_step uses
    # eps = 0: the two then compute the same numbers (with eps they differ by O(eps) in var)
    mu, var, logit = m_step(R.transpose(1, 2), a, u, beta_u, beta_a, 0.7, eps=0.0, standardise=standardise)
    ref = loop_m_step(R, a, V, beta_u, beta_a, 0.7, eps=0.0, standardise=standardise)
    for got, want in zip((mu, var, logit), ref):
        torch.testing.assert_close(got, want.to(got.dtype), rtol=1e-6, atol=1e-8)


def test_e_step_matches_loop_reference(em_case):
    V, a, R, beta_u, beta_a = em_case
    mu, var, logit = loop_m_step(R, a, V, beta_u, beta_a, 0.7)
    R_new = e_step(V.transpose(1, 2).contiguous(), mu.double(), var.double(), logit.double())
    torch.testing.assert_close(R_new.transpose(1, 2), loop_e_step(V, mu, var, logit).double(), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(R_new.sum(dim=1), torch.ones(2, 5, dtype=torch.float64))   # over outputs j


def test_em_routing_shapes_history_and_gradients_even_for_identical_votes():
    torch.manual_seed(0)
    V = torch.randn(3, 7, 4, 16, requires_grad=True)
    a = torch.rand(3, 7, requires_grad=True)
    beta_u, beta_a = torch.zeros(4, requires_grad=True), torch.zeros(4, requires_grad=True)
    poses, act, history = em_routing(V, a, beta_u, beta_a, iterations=3, return_history=True)
    assert poses.shape == (3, 4, 16) and act.shape == (3, 4) and len(history) == 3
    assert ((act > 0) & (act < 1)).all()
    torch.testing.assert_close(history[0], torch.full((3, 7, 4), 0.25))  # R starts uniform
    torch.testing.assert_close(torch.stack(history).sum(dim=3), torch.ones(3, 3, 7))
    (poses.sum() + act.sum()).backward()
    for t in (V, a, beta_u, beta_a):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    V = torch.ones(2, 6, 3, 16, requires_grad=True)                  # zero variance: the eps keeps log finite
    poses, act = em_routing(V, torch.ones(2, 6), torch.zeros(3), torch.zeros(3))
    act.sum().backward()
    assert torch.isfinite(act).all() and torch.isfinite(V.grad).all()


def test_inverse_temperature_rises():
    lams = [inverse_temperature(t, 1.0) for t in (1, 2, 3)]
    assert lams == sorted(lams) and lams[0] == pytest.approx(0.05)
    assert inverse_temperature(1) < inverse_temperature(3) <= 10.0


@pytest.mark.parametrize("call, match", [
    (lambda: DepthwisePrimaryCapsules(100, 9, 8), "multiple of capsule_dim"),
    (lambda: SelfAttentionCapsules()(torch.rand(2, 10, 8)), r"\(batch, 16, 8\)"),
    (lambda: self_attention_routing(torch.rand(2, 3, 4)), "u_hat must"),
    (lambda: em_routing(torch.randn(2, 3, 4), torch.rand(2, 3), torch.zeros(4), torch.zeros(4)), "votes must"),
    (lambda: em_routing(torch.randn(2, 3, 4, 16), torch.rand(2, 4), torch.zeros(4), torch.zeros(4)),
     "activations must"),
    (lambda: em_routing(torch.randn(2, 3, 4, 16), torch.rand(2, 3), torch.zeros(5), torch.zeros(4)), "beta_u"),
    (lambda: em_routing(torch.randn(2, 3, 4, 16), torch.rand(2, 3), torch.zeros(4), torch.zeros(4), 0),
     "iterations"),
])
def test_em_and_attention_routing_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- matrix capsules
def test_matrix_capsnet_shapes_and_counts():
    torch.manual_seed(0)
    model = MatrixCapsNet()
    c = model.config
    scores = model(torch.rand(2, 1, 28, 28))
    assert scores.shape == (2, 10) and ((scores > 0) & (scores < 1)).all()
    (C, K, _), = c.conv_caps
    expected = (25 * c.A + c.A) + (c.A * c.B * 17 + c.B * 17) + (K * K * c.B * C * 16 + 2 * C) \
        + (C * 10 * 16 + 2 * 10)
    assert count_parameters(model) == expected
    # the paper's A = B = C = D = 32 recipe with 5 classes (smallNORB): "about 310K" in the paper
    assert 300_000 < count_parameters(MatrixCapsNet(PAPER_CONFIG, num_classes=5)) < 320_000
    with pytest.raises(ValueError, match=r"\(batch, 1, 28, 28\)"):
        model(torch.rand(2, 1, 32, 32))


def test_conv_caps_votes_follow_the_windows():
    torch.manual_seed(0)
    layer = ConvMatrixCapsules(in_types=2, out_types=3, kernel=3, stride=2)
    poses, a = torch.randn(1, 5, 5, 2, 16), torch.rand(1, 5, 5, 2)
    V, acts, (H, W) = layer.votes(poses, a)
    assert (H, W) == (2, 2) and V.shape == (4, 18, 3, 16) and acts.shape == (4, 18)
    # window at output (1, 0) starts at input row 2, column 0; input index = (ky*3 + kx)*T + t
    ky, kx, t = 1, 2, 1
    i = (ky * 3 + kx) * 2 + t
    M = poses[0, 2 + ky, 0 + kx, t].view(4, 4)
    torch.testing.assert_close(V[2, i, 0].view(4, 4), M @ layer.weight[i, 0])
    assert acts[2, i] == a[0, 2 + ky, kx, t]


# ---------------------------------------------------------------- self-attention routing
def test_efficient_squash_and_self_attention_match_their_formulas():
    s = torch.tensor([[3.0, 4.0], [0.0, 0.0]], requires_grad=True)
    v = efficient_squash(s)
    assert v[0].norm().item() == pytest.approx(1 - math.exp(-5.0), rel=1e-5) and v[1].abs().sum() == 0
    v.sum().backward()
    assert torch.isfinite(s.grad).all()                              # finite at zero
    torch.manual_seed(0)
    u_hat = torch.randn(2, 6, 4, 8)
    bias = 0.1 * torch.randn(6, 4)
    v, c = self_attention_routing(u_hat, bias, return_coupling=True)
    # Mazzia et al.: A_ij = sum_k <u_j|i, u_j|k> / sqrt(D), with the N_in x N_in matrix built
    pair = torch.einsum("bijd,bkjd->bjik", u_hat, u_hat)            # (B, N_out, N_in, N_in)
    A = pair.sum(-1).transpose(1, 2) / math.sqrt(8)                  # (B, N_in, N_out)
    torch.testing.assert_close(c, torch.softmax(A, dim=2) + bias)
    torch.testing.assert_close((c - bias).sum(dim=2), torch.ones(2, 6))  # each input spreads one unit
    s = torch.einsum("bij,bijd->bjd", c, u_hat)
    torch.testing.assert_close(v, efficient_squash(s))


def test_efficient_capsnet_has_161824_parameters():
    model, x = EfficientCapsNet(), torch.rand(3, 1, 28, 28)
    assert count_parameters(model) == formula_count() == 161_824  # the authors' count for their MNIST model
    assert model.primary.conv.groups == 128                          # depthwise
    scores = model(x)
    assert scores.shape == (3, 10) and ((scores >= 0) & (scores < 1)).all()
    v, c = model.capsules(x, return_coupling=True)
    assert v.shape == (3, 10, 16) and c.shape == (3, 16, 10)
    scores.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(ValueError, match="28, 28"):
        model(torch.rand(1, 1, 40, 40))


# no routing (one iteration, uniform coupling): test_core's uniform start, test_two_digits' controls
# ---------------------------------------------------------------- the comparison
TINY = dict(seeds=(0,), epochs=1, batch_size=8, n_train=16, n_test=16, cost_repeats=1)


@pytest.fixture(scope="module")
def compared(mnist_sample, tmp_path_factory):
    from capsedu.experiments.compare_routing.run import CompareConfig, compare_routing
    out = tmp_path_factory.mktemp("cmp") / "cmp"
    result = compare_routing(CompareConfig(**TINY), out=out, data=mnist_sample, progress=False, return_models=True)
    return result, out


def test_compare_routing_end_to_end(compared):
    from capsedu.methods.catalogue import METHODS
    result, out = compared
    stored = read_runs(out)
    assert [r["method"] for r in stored["runs"]] == list(METHODS) and stored["runs"] == result["runs"]
    assert {"command", "date", "hardware", "torch", "settings", "seconds"} <= set(stored)
    params = {r["method"]: r["params"] for r in result["runs"]}
    assert params["attention"] == 161_824 and params["dynamic"] == params["none"]
    for row in result["runs"]:
        assert 0 <= row["test"] <= 1 and 0 <= row["affine"] <= 1
        assert row["routing_fwd_bwd_ms"] > 0 and min(row["epoch_seconds"]) > 0
    assert set(result["models"]) == set(METHODS)


def test_em_spread_is_em_at_dynamic_routing_s_size():
    import capsedu.experiments.compare_routing.run as cr
    torch.manual_seed(0)
    dynamic, em, fair = (cr.make_model(name) for name in ("dynamic", "em", "em-spread"))
    assert (count_parameters(dynamic), count_parameters(em), count_parameters(fair)) == (279_488, 15_852, 287_084)
    assert 0.5 <= count_parameters(fair) / count_parameters(dynamic) <= 2
    assert fair.config == cr.EM_SPREAD_CONFIG and cr.LOSS["em-spread"] == "spread" and "em" not in cr.LOSS
    # its trunk is dynamic routing's conv stack; its capsule grid 8x8 -> 3x3, routed by EM
    assert [p.shape for p in fair.conv1.parameters()] == [p.shape for p in dynamic.features.parameters()]
    poses, a = fair.grid(torch.rand(2, 1, 28, 28))
    assert poses.shape == (2, 3, 3, 8, 16) and a.shape == (2, 3, 3, 8)
    scores = fair(torch.rand(2, 1, 28, 28))
    assert scores.shape == (2, 10) and ((scores > 0) & (scores < 1)).all()
    # the costs, standardised over 10 classes, put the true class at most 10 / 3 below all others (one
    # at -3, nine at +1/3: mean 0, std 1), so the logit gap is at most d = lambda_3 * 10 / 3 and the
    # activation gap at most max_z sigmoid(z + d) - sigmoid(z) = tanh(d / 4): "em" cannot reach the
    # spread loss's final margin 0.9 (nor the margin loss's 0.9 / 0.1), "em-spread" can
    costs = torch.tensor([-3.0] + [1 / 3] * 9, dtype=torch.float64)
    assert costs.mean().abs() < 1e-9 and costs.pow(2).mean().item() == pytest.approx(1.0)
    z = torch.linspace(-10, 10, 20001, dtype=torch.float64)
    for config, reachable in ((em.config, False), (fair.config, True)):
        d = inverse_temperature(3, config.final_lambda) * (costs[1:].min() - costs[0]).item()
        best = (torch.sigmoid(z + d) - torch.sigmoid(z)).max().item()
        assert best == pytest.approx(math.tanh(d / 4), abs=1e-6) and (best > 0.9) == reachable
    for bad in ({"stem": "vgg"}, {"stem": "su", "A": 127}):
        with pytest.raises(ValueError, match="stem"):
            MatrixCapsNet(**bad)


def test_em_spread_trains_with_the_spread_loss(mnist_sample, monkeypatch):
    from capsedu.experiments.compare_routing.run import CompareConfig, compare_routing
    from capsedu.training import loop
    margins = []
    real = loop.spread_loss
    monkeypatch.setattr(loop, "spread_loss", lambda a, t, m: margins.append(m) or real(a, t, m))
    result = compare_routing(CompareConfig(**{**TINY, "methods": ("em-spread",)}), data=mnist_sample, progress=False)
    assert result["runs"][0]["loss"] == "spread" and len(margins) == 2      # 16 digits, batches of 8
    assert margins[0] == pytest.approx(0.2) and margins[1] == pytest.approx(0.2 + 0.7 / 2)


def test_misses_agree_with_accuracies_and_models(compared, mnist_sample):
    import capsedu.experiments.compare_routing.run as cr
    result, out = compared
    sets = cr.test_sets(mnist_sample, cr.CompareConfig(**TINY), "cpu")
    for run in read_runs(out)["runs"]:
        for name, (x, y) in sets.items():
            misses = run["misses"][name]
            assert misses == sorted(set(misses)) and all(0 <= i < len(y) for i in misses)
            assert 1 - len(misses) / len(y) == pytest.approx(run[name], abs=1e-6)
            model = result["models"][run["method"]].eval()
            with torch.no_grad():
                wrong = (model(x).argmax(dim=1) != y).nonzero().flatten().tolist()
            assert wrong == misses, (run["method"], name)
    # a method added to the list changes no other method's training: each (method, seed) seeds itself
    alone = cr.compare_routing(cr.CompareConfig(**{**TINY, "methods": ("none",)}), data=mnist_sample,
                               progress=False)["runs"][0]
    with_all = next(r for r in result["runs"] if r["method"] == "none")
    assert [e["loss"] for e in alone["epochs"]] == [e["loss"] for e in with_all["epochs"]]
    assert alone["misses"] == with_all["misses"]


def test_compare_config_rejects_bad_settings():  # its presets: test_every_experiment_has_every_preset
    from capsedu.experiments.compare_routing.run import CompareConfig
    for bad, match in ((dict(methods=("em", "capsnet")), "methods"), (dict(seeds=()), "seeds"),
                       (dict(epochs=0), "epochs"), (dict(affine_strength=2.0), "affine_strength"),
                       (dict(n_train=0), "n_train"), (dict(source="web"), "source"), (dict(shift=9), "shift")):
        with pytest.raises(ValueError, match=match):
            CompareConfig(**bad)


# ---------------------------------------------------------------- the widget and its twin
def test_coupling_widget_and_twin(compared, mnist_sample):
    from capsedu.figures.coupling import coupling_explorer, coupling_maps, coupling_twin
    from cli_helpers import decode_png
    models = compared[0]["models"]
    images, labels = mnist_sample.x_test[:2], mnist_sample.y_test[:2]
    maps = coupling_maps(models, images[0])
    assert maps["dynamic"]["c"].shape == (64, 10) and maps["attention"]["c"].shape == (16, 10)
    for name in ("dynamic", "attention"):  # every input spreads one unit over the classes
        assert abs(maps[name]["c"].sum(axis=1) - 1).max() < 1e-4
    assert abs(maps["em"]["c"].sum(axis=1) - 1).max() < 1e-4
    twin = coupling_twin(models, images, labels)
    html = twin.html()
    assert len(twin.frames) == 2 and 'data-twin="coupling"' in html and "<select" in html
    live = coupling_explorer(models, images, labels)
    live.menu.value = 1
    assert (decode_png(live.children[1].value) == decode_png(twin.frames[(1,)])).mean() > 0.99
    with pytest.raises(ValueError, match="missing"):
        coupling_twin({"em": models["em"]}, images)


def test_compare_routing_cli_prints_the_json(tmp_path, capsys, monkeypatch):
    import capsedu.experiments.compare_routing.run as cr
    from capsedu.cli import main
    seen = {}

    def fake(config, out=None, **kwargs):
        seen.update(config=config, out=out, **kwargs)
        return {"settings": {"epochs": config.epochs}, "runs": []}
    monkeypatch.setattr(cr, "compare_routing", fake)
    monkeypatch.setattr(cr, "estimate_seconds", lambda *a, **k: {"em": 1.0})
    assert main(["compare-routing", "--preset", "smoke", "--out", str(tmp_path), "--seeds", "3", "4",
                 "--epochs", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["settings"]["epochs"] == 2 and seen["config"].seeds == (3, 4)
    assert seen["out"] == tmp_path and seen["preset"] == "smoke"
    assert main(["compare-routing", "--preset", "smoke", "--seeds", "1", "1"]) == 1
    assert "distinct" in capsys.readouterr().err
