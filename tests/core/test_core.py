"""Properties of the capsedu core: squash, losses, routing, layers, models, parameter counts."""
import math

import pytest
import torch

from capsedu.core.capsnet import CapsNet
from capsedu.core.heads import CapsuleClassifier, PoolingClassifier
from capsedu.core.layers import DenseCapsules, PrimaryCapsules, SharedCapsules
from capsedu.core.losses import margin_loss, reconstruction_loss
from capsedu.core.params import count_parameters
from capsedu.figures.parameters import parameter_table
from capsedu.core.routing import ROUTING_MODES, dynamic_routing
from capsedu.core.squashing import NORM_COMPRESSIONS, compress, safe_norm, squash


def loop_routing(u_hat, iterations, mode, k=1.0):
    """Reference: Procedure 1 written with explicit loops over examples and capsules."""
    B, n_in, n_out, D = u_hat.shape
    v_all, hist = torch.zeros(B, n_out, D, dtype=u_hat.dtype), []
    for b in range(B):
        logits = [[0.0] * n_out for _ in range(n_in)]
        for r in range(iterations):
            c = torch.tensor([[math.exp(x) / sum(math.exp(y) for y in row) for x in row] for row in logits],
                             dtype=u_hat.dtype)
            hist.append((b, r, c))
            v = []
            for j in range(n_out):
                s = sum(c[i, j] * u_hat[b, i, j] for i in range(n_in))
                n2 = float((s * s).sum())
                v.append(s * n2 / (k + n2) / math.sqrt(n2))
            for i in range(n_in):
                for j in range(n_out):
                    a = float(u_hat[b, i, j] @ v[j])
                    logits[i][j] = logits[i][j] + a if mode == "hinton" else a
            v_all[b] = torch.stack(v)
    return v_all, hist


# ---------------------------------------------------------------- squash and friends
# squash against its formula (k = 1 and 0.5, |s| from 1e-5 to 1e18, length below 1): test_numerics;
# compress("paper"/"su") is that formula at k = 1 / 0.5: test_compressions_set_the_length_... below
# the printed definitions' size and guards: test_printed_core; the core's size: test_layout
def test_squash_and_safe_norm_are_finite_with_finite_gradient_at_zero():
    s = torch.zeros(3, 8, requires_grad=True)
    v = squash(s)
    (v.sum() + safe_norm(s).sum()).backward()
    assert torch.equal(v, torch.zeros(3, 8))
    assert torch.isfinite(s.grad).all()
    # the naive formula the tutorials use is 0/0 here
    naive = (s**2).sum(-1, keepdim=True) / (1 + (s**2).sum(-1, keepdim=True)) * s / s.norm(dim=-1, keepdim=True)
    assert torch.isnan(naive).all()


@pytest.mark.parametrize("name", sorted(NORM_COMPRESSIONS))
def test_compressions_set_the_length_and_keep_direction(name):
    s = torch.randn(20, 6, dtype=torch.float64) * 3
    out = compress(s, name)
    n = s.norm(dim=-1)
    assert torch.allclose(out.norm(dim=-1), NORM_COMPRESSIONS[name](n), rtol=1e-6)
    assert torch.allclose(torch.nn.functional.cosine_similarity(out, s, dim=-1), torch.ones(20, dtype=torch.float64))
    assert (out.norm(dim=-1) < 1).all()


# ---------------------------------------------------------------- losses
def test_margin_loss_by_hand():
    lengths = torch.tensor([[0.95, 0.5, 0.05], [0.2, 0.0, 0.3]])
    labels = torch.tensor([0, 2])
    # example 0: present 0 (0.95 > 0.9), absent 0.5*(0.4^2) + 0 ; example 1: absent 0.5*0.1^2, present 0.6^2
    expected = ((0.5 * 0.4**2) + (0.5 * 0.1**2 + 0.6**2)) / 2
    assert margin_loss(lengths, labels).item() == pytest.approx(expected)
    one_hot = torch.nn.functional.one_hot(labels, 3).float()
    assert margin_loss(lengths, one_hot).item() == pytest.approx(expected)
    # multi-hot: both digits count
    lengths, both = torch.tensor([[0.5, 0.5, 0.05]]), torch.tensor([[1.0, 1.0, 0.0]])
    assert margin_loss(lengths, both).item() == pytest.approx(2 * 0.4**2)
    assert margin_loss(lengths, both, lam=0.25).item() == pytest.approx(2 * 0.4**2)


def test_reconstruction_loss_is_scaled_sum_per_image():
    rec, img = torch.zeros(2, 1, 28, 28), torch.cat([torch.ones(1, 1, 28, 28), torch.full((1, 1, 28, 28), 0.5)])
    expected = 0.0005 * (784 * 1.0 + 784 * 0.25) / 2
    assert reconstruction_loss(rec, img).item() == pytest.approx(expected)
    assert reconstruction_loss(rec.flatten(1), img).item() == pytest.approx(expected)


# bad labels (one too many among them): test_api_errors' test_bad_labels_in_losses_evaluate_and_forward


# ---------------------------------------------------------------- routing
@pytest.mark.parametrize("mode", ROUTING_MODES)
def test_coupling_coefficients_sum_to_one_and_start_uniform(mode):
    u_hat = torch.randn(4, 30, 5, 8)
    v, history = dynamic_routing(u_hat, iterations=3, mode=mode, return_history=True)
    assert len(history) == 3 and v.shape == (4, 5, 8)
    for c in history:
        assert c.shape == (4, 30, 5) and (c >= 0).all() and torch.allclose(c.sum(dim=2), torch.ones(4, 30))
    assert torch.allclose(history[0], torch.full((4, 30, 5), 1 / 5))
    assert not torch.allclose(history[1], history[0])


@pytest.mark.parametrize("mode", ["hinton", "su"])
@pytest.mark.parametrize("k", [1.0, 0.5])
def test_vectorised_routing_equals_loop_reference(mode, k):
    torch.manual_seed(1)
    u_hat = torch.randn(2, 6, 3, 4, dtype=torch.float64) * 0.7
    v, history = dynamic_routing(u_hat, iterations=4, mode=mode, return_history=True, squash_k=k)
    v_ref, hist_ref = loop_routing(u_hat, 4, mode, k)
    assert torch.allclose(v, v_ref, atol=1e-10)
    for b, r, c in hist_ref:
        assert torch.allclose(history[r][b], c, atol=1e-10)


def test_routing_logits_are_per_example():
    u_hat = torch.randn(3, 10, 4, 8)
    v_batch = dynamic_routing(u_hat)
    v_single = torch.cat([dynamic_routing(u_hat[b:b + 1]) for b in range(3)])
    assert torch.allclose(v_batch, v_single, atol=1e-6)


def test_hinton_goes_one_hot_while_su_settles():
    torch.manual_seed(0)
    u_hat = 0.5 * torch.randn(1, 40, 3, 8, dtype=torch.float64)
    _, h_hinton = dynamic_routing(u_hat, iterations=60, mode="hinton", return_history=True)
    _, h_su = dynamic_routing(u_hat, iterations=60, mode="su", return_history=True)
    max_hinton = h_hinton[-1].max(dim=2).values.mean().item()
    max_su = h_su[-1].max(dim=2).values.mean().item()
    su_change = (h_su[-1] - h_su[-2]).abs().max().item()
    print(f"mean max c after 60 iterations: hinton {max_hinton:.4f}, su {max_su:.4f}; su last change {su_change:.2e}")
    assert max_hinton > 0.99          # every lower capsule has picked a single parent
    assert max_su < 0.9               # Su's coefficients stay spread ...
    assert su_change < 1e-6           # ... at a fixed point


# gradients flow through every iteration (not those of frozen final c): test_routing_modes' detach_inner test
@pytest.mark.parametrize("args, match", [
    ((torch.randn(2, 3, 4),), r"torch.Size\(\[2, 3, 4\]\)"),
    ((torch.randn(2, 3, 4, 5), 0), ", 0, 'hinton'"),
    ((torch.randn(2, 3, 4, 5), -1), ", -1, 'hinton'"),
    ((torch.randn(2, 3, 4, 5), 3, "em"), "'em'"),
    ((torch.zeros(1, 2, 3, 4, dtype=torch.long),), "float u_hat"),
    (("votes",), "'votes'"),
])
def test_routing_rejects_bad_input_in_one_line(args, match):
    with pytest.raises(ValueError, match=match):
        dynamic_routing(*args)


# ---------------------------------------------------------------- layers
def test_primary_capsules_group_channels_into_capsules():
    layer = PrimaryCapsules(in_channels=4, capsule_types=3, capsule_dim=2, kernel_size=3, stride=2)
    x = torch.randn(2, 4, 9, 9)
    raw = layer.conv(x)                                   # (2, 6, 4, 4)
    caps = layer(x)                                       # (2, 3*4*4, 2)
    assert caps.shape == (2, 48, 2)
    t, h, w = 2, 1, 3                                     # capsule type 2 at grid cell (1, 3)
    expected = squash(raw[:, [t * 2, t * 2 + 1], h, w])
    assert torch.allclose(caps[:, t * 16 + h * 4 + w], expected, atol=1e-6)


def test_dense_capsule_predictions_equal_per_pair_matmul():
    layer = DenseCapsules(in_capsules=5, in_dim=3, out_capsules=4, out_dim=6)
    u = torch.randn(2, 5, 3)
    u_hat = layer.predictions(u)
    assert u_hat.shape == (2, 5, 4, 6)
    for i in range(5):
        for j in range(4):
            assert torch.allclose(u_hat[:, i, j], u[:, i] @ layer.weight[i, j].T, atol=1e-6)


@pytest.mark.parametrize("n_in", [64, 176, 7])
def test_shared_capsules_take_any_number_of_inputs(n_in):
    layer = SharedCapsules(in_dim=128, out_capsules=10, out_dim=16)
    u = torch.randn(2, n_in, 128)
    assert layer(u).shape == (2, 10, 16)
    u_hat = layer.predictions(u)
    assert torch.allclose(u_hat[:, 3, 7], u[:, 3] @ layer.weight[7].T, atol=1e-5)
    assert count_parameters(layer) == 10 * 16 * 128


# ---------------------------------------------------------------- models and parameter counts
def test_paper_and_su_parameter_counts():
    model = CapsNet()
    assert count_parameters(model) == 8_215_568
    assert count_parameters(model) - count_parameters(model.decoder) == 6_804_224
    rows = parameter_table(model)
    assert all(r["agree"] for r in rows) and sum(r["derived"] for r in rows) == 8_215_568
    pool, caps = count_parameters(PoolingClassifier()), count_parameters(CapsuleClassifier())
    assert (pool, caps) == (276_810, 279_488)
    assert all(r["agree"] for r in parameter_table(CapsuleClassifier()))


@pytest.mark.parametrize("overrides, n_primary", [
    ({}, 1152),
    ({"image_size": 36}, 32 * 10 * 10),  # chapter 9's padded canvases (MultiMNIST 36, affNIST 40)
    ({"image_size": 40, "conv_channels": 16, "decoder_hidden": (8,)}, 32 * 12 * 12),
    ({"image_size": (28, 40), "in_channels": 3, "num_classes": 5, "digit_dim": 8, "primary_types": 8}, 8 * 6 * 12),
    ({"conv_channels": 64, "primary_dim": 4, "iterations": 1, "routing": "su", "squash_k": 0.5}, 1152),
])
def test_capsnet_shapes_for_several_configs(overrides, n_primary):
    model = CapsNet(**overrides)
    c = model.config
    assert c.num_primary == n_primary
    x = torch.rand(3, c.in_channels, *c.image_size)
    digit, lengths, rec = model(x)
    assert digit.shape == (3, c.num_classes, c.digit_dim) and lengths.shape == (3, c.num_classes)
    assert rec.shape == x.shape and ((rec > 0) & (rec < 1)).all()


def test_decoder_masked_by_label_when_given_by_longest_capsule_otherwise():
    torch.manual_seed(0)
    model = CapsNet().eval()
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        digit, lengths, rec_pred = model(x)
        labels = (lengths.argmax(1) + 1) % 10            # deliberately not the prediction
        _, _, rec_label = model(x, labels)
        eye = torch.eye(10)
        assert torch.allclose(rec_pred, model.decoder(digit, eye[lengths.argmax(1)]))
        assert torch.allclose(rec_label, model.decoder(digit, eye[labels]))
        assert not torch.allclose(rec_label, rec_pred)


def test_capsnet_runs_under_bf16_autocast():
    torch.manual_seed(0)
    model = CapsNet()
    x = torch.rand(2, 1, 28, 28)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        digit, lengths, rec = model(x, torch.tensor([1, 2]))
        loss = margin_loss(lengths, torch.tensor([1, 2])) + reconstruction_loss(rec, x)
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())
    with torch.no_grad():
        ref = model(x)[1]
    assert torch.allclose(lengths.float(), ref, atol=0.02)


def test_routing_works_under_torch_compile():
    torch._dynamo.reset()  # variants compiled by earlier tests count toward dynamo's recompile limit
    u_hat = torch.randn(2, 12, 3, 4)
    compiled = torch.compile(dynamic_routing, backend="aot_eager", fullgraph=True)
    for mode in ("hinton", "su"):
        assert torch.allclose(compiled(u_hat, 3, mode), dynamic_routing(u_hat, 3, mode), atol=1e-6)


def test_capsnet_overfits_32_digits(mnist_sample):
    x, y = mnist_sample.x_train[:32], mnist_sample.y_train[:32]
    torch.manual_seed(0)
    model = CapsNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses, accs = [], []
    for _ in range(20):
        _, lengths, rec = model(x, y)
        loss = margin_loss(lengths, y) + reconstruction_loss(rec, x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        accs.append((lengths.argmax(1) == y).float().mean().item())
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, accuracy {accs[0]:.2f} -> {accs[-1]:.2f}")
    assert losses[-1] < 0.3 * losses[0]
    assert accs[-1] >= 0.9 and accs[0] < 0.5
