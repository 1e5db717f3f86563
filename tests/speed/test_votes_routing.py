"""votes_and_routing: core's votes and routing, values and gradients, with a hand-written
backward that keeps û out of the graph."""
import pytest
import torch

from capsedu.core.capsnet import CapsNet
from capsedu.core.layers import DenseCapsules, SharedCapsules
from capsedu.core.routing import ROUTING_MODES, dynamic_routing
from capsedu.speed import bench
from capsedu.speed.fast import FastDenseCapsules, accelerate, readable
from capsedu.speed.routing import votes_and_routing

KINDS = {"dense": lambda n_in, e, j, d: torch.randn(n_in, j, d, e),
         "shared": lambda n_in, e, j, d: torch.randn(j, d, e)}


def _inputs(kind, dtype, batch=3, n_in=12, e=4, j=5, d=6, seed=0):
    torch.manual_seed(seed)
    u = torch.randn(batch, n_in, e, dtype=dtype)
    W = (0.5 * KINDS[kind](n_in, e, j, d)).to(dtype)
    return u, W


def _core(u, W, iterations, mode, k):
    spec = "ijde,bie->bijd" if W.dim() == 4 else "jde,bie->bijd"
    return dynamic_routing(torch.einsum(spec, W, u), iterations, mode, squash_k=k)


def _value_and_grads(fn, u, W, grad_out):
    u, W = u.detach().requires_grad_(), W.detach().requires_grad_()
    v = fn(u, W)
    gu, gW = torch.autograd.grad((v.float() * grad_out).sum(), (u, W))
    return v.detach(), gu, gW


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ROUTING_MODES)
@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_gradcheck_in_float64(kind, mode, iterations):
    u, W = _inputs(kind, torch.float64, batch=2, n_in=5, e=3, j=3, d=4)
    u.requires_grad_(), W.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: votes_and_routing(a, b, iterations, mode, 0.5), (u, W))


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ROUTING_MODES)
@pytest.mark.parametrize("k", [1.0, 0.5])
def test_values_and_gradients_equal_core_to_rounding(dtype, tol, kind, mode, k):
    u, W = _inputs(kind, dtype)
    grad_out = torch.randn(3, 5, 6, dtype=dtype)
    ref = _value_and_grads(lambda a, b: _core(a, b, 3, mode, k), u, W, grad_out)
    got = _value_and_grads(lambda a, b: votes_and_routing(a, b, 3, mode, k), u, W, grad_out)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype
        torch.testing.assert_close(g, r, atol=tol * r.abs().max(), rtol=tol)


@pytest.mark.parametrize("amp", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ROUTING_MODES)
def test_under_autocast_within_low_precision_rounding(amp, mode):
    # the paper's sizes at a small batch, where rounding accumulates as in training
    u, W = _inputs("dense", torch.float32, batch=4, n_in=1152, e=8, j=10, d=16)
    u, W = torch.nn.functional.normalize(u, dim=-1), 0.02 * W
    grad_out = torch.randn(4, 10, 16)
    exact = _value_and_grads(lambda a, b: _core(a, b, 3, mode, 1.0), u.double(), W.double(),
                             grad_out.double())
    runs = {}
    for name, fn in (("core", _core), ("fast", votes_and_routing)):
        with torch.autocast("cpu", dtype=amp):
            runs[name] = _value_and_grads(lambda a, b: fn(a, b, 3, mode, 1.0), u, W, grad_out)
    eps = torch.finfo(amp).eps
    for (f, c, x) in zip(runs["fast"], runs["core"], exact):
        assert f.dtype == c.dtype
        # as close to core as core is to the exact result, give or take a few roundings
        scale = x.abs().max().double()
        err_fast = (f.double() - x).abs().max() / scale
        err_core = (c.double() - x).abs().max() / scale
        assert err_fast <= 2 * err_core + 4 * eps, (err_fast, err_core)
        assert err_fast < 16 * eps


def test_the_graph_keeps_neither_the_votes_nor_per_iteration_copies():
    u, W = _inputs("dense", torch.float32, batch=8, n_in=288, e=8, j=10, d=16)
    u.requires_grad_(), W.requires_grad_()
    votes = 8 * 288 * 10 * 16 * 4
    core = bench.saved_tensor_bytes(lambda: _core(u, W, 3, "hinton", 1.0), exclude=[u, W])
    fast = bench.saved_tensor_bytes(lambda: votes_and_routing(u, W, 3, "hinton", 1.0))
    # core keeps û; the fast one u and W (laid out as it reads them), 2 couplings
    # (1/16 of û each) and the s
    assert core > votes > 4 * (fast - u.nbytes - W.nbytes)


def test_rejects_what_core_rejects():
    u, W = _inputs("dense", torch.float32)
    with pytest.raises(ValueError, match="'em'"):
        votes_and_routing(u, W, 3, "em")
    with pytest.raises(ValueError, match="iterations"):
        votes_and_routing(u, W, 0)


@pytest.mark.parametrize("layer", [DenseCapsules(in_capsules=12, in_dim=4, out_capsules=5, out_dim=6),
                                   SharedCapsules(in_dim=4, out_capsules=5, out_dim=6)])
def test_accelerate_swaps_the_layer_and_readable_puts_core_back(layer):
    u = torch.randn(3, 12, 4)
    before = layer(u)
    core_type = type(layer)
    accelerate(layer, compile_routing=False)
    assert type(layer) is not core_type and isinstance(layer, core_type)
    torch.testing.assert_close(layer(u), before, atol=1e-6, rtol=1e-5)
    v, history = layer(u, return_history=True)        # the history: core's loop
    assert len(history) == layer.iterations
    layer.apply(readable)
    assert type(layer) is core_type


def test_accelerate_with_detach_inner_keeps_core_votes():
    model = accelerate(CapsNet(), compile_routing=False, detach_inner=True)
    assert type(model.digits) is not FastDenseCapsules
    assert type(accelerate(CapsNet(), compile_routing=False).digits) is FastDenseCapsules


def test_a_failed_compilation_warns_once_and_runs_eagerly_from_then_on(monkeypatch):
    import warnings

    from capsedu.speed import routing

    def no_compiler(fn, **options):
        def run(*args):
            raise RuntimeError("no C++ compiler")
        return run

    monkeypatch.setattr(torch, "compile", no_compiler)
    monkeypatch.setattr(routing, "_compile_failed", False)
    double = routing.compiled_or_eager(lambda x: 2 * x)
    with pytest.warns(RuntimeWarning, match="torch.compile failed .*no C.. compiler"):
        assert double(torch.ones(2)).tolist() == [2, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # the warning comes once
        assert routing.compiled_or_eager(lambda x: x + 1)(torch.ones(1)).item() == 2
    assert routing._compile_failed


def test_accelerate_stores_the_weight_so_that_neither_it_nor_its_gradient_is_copied():
    from capsedu.speed.routing import _inside
    W = accelerate(CapsNet(), compile_routing=False).digits.weight
    u = torch.randn(2, W.shape[0], W.shape[-1], requires_grad=True)
    assert _inside(u, W)[1].data_ptr() == W.data_ptr()          # the layout is a view
    (gW,) = torch.autograd.grad(votes_and_routing(u, W).sum(), W)
    assert gW.stride() == W.stride()                           # AccumulateGrad keeps it
