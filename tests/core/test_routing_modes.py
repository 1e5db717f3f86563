"""routing.py: Su's March update against a loop written from its description, float16 in float32,
and the one routing loop that readable and fast paths share."""
import pytest
import torch

from capsedu.core.routing import ROUTING_MODES, dynamic_routing
from capsedu.core.squashing import squash
from capsedu.speed.fast import fused_routing
from capsedu.training.pretrained import load_capsnet


def march_reference(u_hat, iterations, k):
    """Su's March routing, one example and one output capsule at a time (slow, obvious)."""
    B, n_in, n_out, _ = u_hat.shape
    out = []
    for b in range(B):
        logits = torch.zeros(n_in, n_out)
        for r in range(iterations):
            c = torch.softmax(logits, dim=1)                           # each input over the outputs
            s = torch.stack([sum(c[i, j] * u_hat[b, i, j] for i in range(n_in)) for j in range(n_out)])
            if r == iterations - 1:
                out.append(torch.stack([squash(s[j], k=k) for j in range(n_out)]))
            else:
                direction = [s[j] / s[j].norm() for j in range(n_out)]  # b_ij <- <u_hat, s_j/|s_j|>
                logits = torch.tensor([[float(u_hat[b, i, j] @ direction[j]) for j in range(n_out)]
                                       for i in range(n_in)])
    return torch.stack(out)


@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_su_march_matches_the_loop_reference(iterations):
    torch.manual_seed(0)
    u_hat = torch.randn(2, 7, 3, 4, dtype=torch.float64)
    v = dynamic_routing(u_hat, iterations=iterations, mode="su-march", squash_k=0.5)
    assert torch.allclose(v, march_reference(u_hat, iterations, 0.5), atol=1e-10)


def test_su_march_differs_from_january_after_the_first_iteration():
    torch.manual_seed(1)
    u_hat = torch.randn(2, 20, 5, 8)
    one = {m: dynamic_routing(u_hat, 1, m, squash_k=0.5) for m in ("su", "su-march")}
    three = {m: dynamic_routing(u_hat, 3, m, squash_k=0.5) for m in ("su", "su-march")}
    assert torch.equal(one["su"], one["su-march"])                   # same first iteration
    assert not torch.allclose(three["su"], three["su-march"], atol=1e-4)


def test_float16_routing_of_a_trained_network_matches_float32(mnist_sample):
    """No float32 guard in routing: the shipped network's sums s_j stay four orders of magnitude below 65,504."""
    model, data = load_capsnet("cpu"), mnist_sample
    with torch.no_grad():
        u_hat = model.digits.predictions(model.primary(torch.relu(model.conv1(data.x_test[:100]))))
        v32, history = dynamic_routing(u_hat, 3, return_history=True)
        assert torch.einsum("bij,bijd->bjd", history[-1], u_hat).abs().max() < 10
        for mode in ROUTING_MODES:
            v16 = dynamic_routing(u_hat.half(), 3, mode)
            ref = dynamic_routing(u_hat, 3, mode)
            assert v16.dtype == torch.float16 and (v16.float() - ref).abs().max() < 1e-3, mode
            assert torch.equal(v16.float().norm(dim=-1).argmax(1), ref.norm(dim=-1).argmax(1)), mode
            fast16 = fused_routing(u_hat.half(), 3, mode, compile=False)
            assert torch.equal(fast16, v16), mode


def test_detach_inner_keeps_values_and_changes_gradients():
    torch.manual_seed(3)
    u_hat = torch.randn(2, 12, 4, 5, requires_grad=True)
    full = dynamic_routing(u_hat, 3, "hinton")
    detached = dynamic_routing(u_hat, 3, "hinton", detach_inner=True)
    assert torch.allclose(full, detached)
    g_full, = torch.autograd.grad(full.pow(2).sum(), u_hat)
    g_det, = torch.autograd.grad(detached.pow(2).sum(), u_hat)
    assert torch.isfinite(g_full).all() and not torch.allclose(g_full, g_det)   # routing is in the graph
    # with the inner iterations detached, the gradient is that of the last iteration's weighted sum
    # at fixed coupling coefficients
    _, history = dynamic_routing(u_hat.detach(), 3, "hinton", return_history=True)
    c = history[-1]                                                    # (B, N_in, N_out)
    u = u_hat.detach().clone().requires_grad_(True)
    s = torch.einsum("bij,bijd->bjd", c, u)
    g_ref, = torch.autograd.grad(squash(s).pow(2).sum(), u)
    assert torch.allclose(g_det, g_ref, atol=1e-6)

