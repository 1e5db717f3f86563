"""The fast path agrees with the readable code; the measuring helpers measure what they say."""
import json

import pytest
import torch

from capsedu.core.capsnet import CapsNet
from capsedu.core.heads import CapsuleClassifier
from capsedu.core.routing import ROUTING_MODES, dynamic_routing
from capsedu.runtime.device import resolve_amp
from capsedu.speed import bench
from capsedu.speed.fast import accelerate, fused_routing, readable
from capsedu.speed.naive import NaiveCapsNet


def _u_hat(batch=3, n_in=40, n_out=10, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    # stored as capsedu's layers store it: (B, N_out, N_in, D), handed over transposed
    return (0.5 * torch.randn(batch, n_out, n_in, dim, generator=g)).transpose(1, 2)


def _value_and_grad(router, u_hat, grad_out):
    leaf = u_hat.detach().clone().requires_grad_()
    v = router(leaf)
    (v * grad_out).sum().backward()
    return v.detach(), leaf.grad


@pytest.mark.parametrize("compile, detach_inner", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("mode", ROUTING_MODES)
@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_fused_routing_matches_readable_values_and_gradients(mode, iterations, compile, detach_inner):
    """Core's loop is the reference, detach_inner included (tests/core/test_routing_modes.py checks its gradient)."""
    u_hat = _u_hat()
    grad_out = torch.randn(3, 10, 16, generator=torch.Generator().manual_seed(1))
    k = 1.0 if mode == "hinton" else 0.5
    v0, g0 = _value_and_grad(lambda u: dynamic_routing(u, iterations, mode, squash_k=k, detach_inner=detach_inner),
                             u_hat, grad_out)
    v1, g1 = _value_and_grad(lambda u: fused_routing(u, iterations, mode, squash_k=k, compile=compile,
                                                     detach_inner=detach_inner), u_hat, grad_out)
    torch.testing.assert_close(v1, v0, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(g1, g0, atol=1e-6, rtol=1e-4)


def test_fused_routing_compiles_once_for_any_batch_size():
    for batch in (2, 5, 7):
        u_hat = _u_hat(batch=batch, seed=batch)
        torch.testing.assert_close(fused_routing(u_hat, 3), dynamic_routing(u_hat, 3), atol=1e-6, rtol=1e-5)


def test_fused_routing_checks_its_input_like_the_readable_one():
    with pytest.raises(ValueError, match=r"\(B, N_in, N_out, D\)"):
        fused_routing(torch.zeros(3, 4, 5))
    with pytest.raises(ValueError, match="'em'"):
        fused_routing(_u_hat(), mode="em")
    with pytest.raises(ValueError, match="iterations"):
        fused_routing(_u_hat(), iterations=0)


@pytest.mark.parametrize("make", [CapsNet, CapsuleClassifier])
def test_accelerate_keeps_the_model_output_and_can_be_undone(make):
    torch.manual_seed(0)
    model = make().eval()
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        before = model(x)
        accelerate(model)
        assert all(m.fast_routing is not None for m in model.modules() if hasattr(m, "fast_routing"))
        after = model(x)
        model.apply(readable)
        assert all(m.fast_routing is None for m in model.modules() if hasattr(m, "fast_routing"))
    first = lambda out: out[0] if isinstance(out, tuple) else out
    torch.testing.assert_close(first(after), first(before), atol=1e-5, rtol=1e-4)


def test_accelerate_rejects_models_without_capsule_layers():
    with pytest.raises(ValueError, match="no routed capsule layers"):
        accelerate(torch.nn.Linear(3, 3))
    with pytest.raises(TypeError):
        accelerate("model")
    with pytest.raises(ValueError, match="channels_last"):
        accelerate(CapsNet(), channels_last="yes")


# ------------------------------------------------------------------ measuring helpers
def test_saved_tensor_bytes_counts_each_saved_tensor_once():
    a = torch.randn(100, 50, requires_grad=True)
    b = torch.randn(50, 20, requires_grad=True)
    # a @ b saves a and b; (a @ b).exp() saves its output (100 x 20 floats)
    assert bench.saved_tensor_bytes(lambda: (a @ b).exp()) == 4 * (100 * 50 + 50 * 20 + 100 * 20)
    assert bench.saved_tensor_bytes(lambda: (a @ b).exp(), exclude=[a, b]) == 4 * 100 * 20
    with torch.no_grad():
        assert bench.saved_tensor_bytes(lambda: (a @ b).exp()) == 0


def test_peak_bytes_counts_what_lives_at_once_not_what_was_allocated():
    n = 1 << 20                                     # 4 MiB of float32

    def one_at_a_time():
        for _ in range(3):
            torch.ones(n).sum()                     # each freed before the next

    def all_at_once():
        kept = [torch.ones(n) for _ in range(3)]
        return sum(t.sum() for t in kept)

    assert 4 * n <= bench.peak_bytes(one_at_a_time) < 4 * n + 2**16
    assert 3 * 4 * n <= bench.peak_bytes(all_at_once) < 3 * 4 * n + 2**16


def test_naive_network_keeps_more_for_backward_than_capsedu():
    torch.manual_seed(0)
    x, y = torch.rand(4, 1, 28, 28), torch.randint(0, 10, (4,))
    naive, model = NaiveCapsNet(), CapsNet()
    mb = {name: bench.saved_tensor_bytes(lambda: net(x, y), exclude=list(net.parameters()))
          for name, net in (("naive", naive), ("capsedu", model))}
    # the naive network saves B copies of W (4 x 1152 x 10 x 16 x 8 floats) on top
    assert mb["naive"] - mb["capsedu"] > 4 * 1152 * 10 * 16 * 8 * 4 * 0.9


def test_routing_graph_grows_by_the_coupling_tensors_per_iteration():
    u_hat = _u_hat(batch=2, n_in=30)
    rows = bench.routing_cost(u_hat, [1, 2, 3], lambda u, r: dynamic_routing(u, r), repeats=1)
    assert [r["iterations"] for r in rows] == [1, 2, 3]
    steps = [b["graph_bytes"] - a["graph_bytes"] for a, b in zip(rows, rows[1:])]
    assert steps[0] == steps[1] > 0                      # linear in r
    assert steps[0] < u_hat.numel() * 4                  # u_hat is not saved again per iteration
    assert all(r["forward_ms"] >= 0 and r["backward_ms"] >= 0 for r in rows)


def test_stage_times_cover_the_whole_step():
    torch.manual_seed(0)
    model = CapsNet()
    rows = bench.stage_times(model, torch.rand(2, 1, 28, 28), torch.randint(0, 10, (2,)), repeats=1)
    assert [r["stage"] for r in rows] == ["conv1 + ReLU", "primary capsules", "u_hat = W u", "routing (r = 3)",
                                          "lengths + decoder", "Adam update"]
    assert all(r["forward_ms"] >= 0 and r["backward_ms"] > 0 for r in rows)
    assert all(p.grad is None for p in model.parameters())  # leaves the model as it found it


def test_flop_count_of_a_matrix_product():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert bench.flop_count(lambda: a @ b) == 2 * 8 * 16 * 4


def test_median_seconds_rejects_bad_arguments_and_times_calls():
    with pytest.raises(ValueError):
        bench.median_seconds(lambda: None, repeats=0)
    calls = []
    assert bench.median_seconds(lambda: calls.append(1), repeats=3, warmup=2) >= 0
    assert len(calls) == 5


def test_cli_train_fast_uses_the_fast_path_and_records_its_precision(tmp_path, monkeypatch):
    from capsedu import cli
    from capsedu.speed import fast
    calls = []
    original = fast.votes_and_routing

    def counting(u, *args, **kwargs):  # the fast layers look up fast.votes_and_routing when called
        calls.append(u.shape)
        return original(u, *args, **kwargs)

    monkeypatch.setattr(fast, "votes_and_routing", counting)
    out = tmp_path / "run"
    assert cli.main(["train", "--source", "sample", "--limit", "32", "--epochs", "1", "--batch-size", "32",
                     "--out", str(out), "--device", "cpu", "--no-progress", "--fast"]) == 0
    meta = json.loads((out / "metrics.json").read_text())["meta"]
    assert meta["amp"] == resolve_amp("auto", "cpu")  # the one choice (tests/runtime/test_device.py)
    assert calls and all(shape[1:] == (1152, 8) for shape in calls)  # the fast votes + routing ran every batch


def test_fused_routing_under_a_dispatch_mode_runs_eagerly_without_giving_up_compiling():
    import warnings

    from torch.utils.flop_counter import FlopCounterMode

    from capsedu.speed import routing
    u_hat = _u_hat()
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no "compile failed" warning
        with FlopCounterMode(display=False):
            v = fused_routing(u_hat, 3)
    torch.testing.assert_close(v, dynamic_routing(u_hat, 3), atol=1e-6, rtol=1e-5)
    assert routing._compile_failed is False


def test_the_profile_table_lists_the_slowest_operations_first():
    a = torch.randn(64, 64)
    heads, rows = bench.profile_table(lambda: (a @ a).relu().sum(), rows=2)
    assert len(heads) == 4 and 0 < len(rows) <= 2 and all(len(r) == 4 for r in rows)
    times = [float(r[1]) for r in rows]
    assert times == sorted(times, reverse=True) and all(r[3] >= 1 for r in rows)
