"""Gates (docs/equations.md#forget-gate): the CT-FWPs' forget gate dW/ds = rate − λ W, λ = σ(γ), and chrono
initialisation of every gated model's gate biases (CT-FWP learning rate and forget gate, GRU keep gates, the warp gate).

- The closed-form step with a forget gate against the matrix exponential of the (affine, vectorised) ODE, an
  independent solution, for Hebb, Oja and pre-Delta, float64, including λ → 0 and large λh.
- The field's rate: λ = 0 (γ → −∞) gives the ungated rule; the rate is the rule's minus λ W.
- The fast exact solver (hand-written adjoint with the scale term) against its reference (autograd through
  ``exact_step``), values and gradients, at 2,000 windows with variable lengths, and against fine rk4.
- Refusals: post-Delta with a forget gate has no closed form.
- Chrono initialisation: the β (and γ) biases are −log u, u in [1, T_max − 1], KS test against U(1, T_max − 1);
  every other parameter is as without it.
"""

import fwp_reference as ref
import pytest
import torch
from test_solvers import FieldDynamics, make_data

from neuralde_seq.controls import build_control
from neuralde_seq.fields import FastWeightField
from neuralde_seq.models import create_model
from neuralde_seq.rules import make_rule
from neuralde_seq.solvers import RK4, Backprop, Exact, SolverOptions, solve
from neuralde_seq.solvers import exact_fast_weights as exact

DTYPE = torch.float64
AFFINE_RULES = ("hebb", "oja", "delta")


def _ode_solution(rule, W0, k_raw, v_raw, beta, forget, h):
    """W(h) of dW/ds = rule.rate(W) − λ W with constant inputs, from the matrix exponential of the vectorised
    affine ODE d vec(W)/ds = A vec(W) + f (A, f read off the rate by evaluating it at W = 0 and at unit W's)."""
    rule = make_rule(rule)
    d_v, d_k = W0.shape
    n = d_v * d_k

    def rate(W):
        return rule.rate(W[None, None], k_raw[None, None], v_raw[None, None], beta[None, None])[0, 0] - forget * W

    f = rate(torch.zeros_like(W0)).reshape(n)
    A = torch.stack([(rate(torch.eye(n, dtype=DTYPE)[i].reshape(d_v, d_k)).reshape(n) - f) for i in range(n)], 1)
    augmented = torch.zeros(n + 1, n + 1, dtype=DTYPE)
    augmented[:n, :n], augmented[:n, n] = A, f
    solution = torch.linalg.matrix_exp(h * augmented) @ torch.cat([W0.reshape(n), torch.ones(1, dtype=DTYPE)])
    return solution[:n].reshape(d_v, d_k)


@pytest.mark.parametrize("rule", AFFINE_RULES)
@pytest.mark.parametrize("forget,h", [(0.3, 0.7), (1e-9, 2.0), (0.9, 25.0), (0.05, 1e-4)])
def test_exact_step_with_forget_gate_matches_matrix_exponential(rule, forget, h):
    """rule.exact_step(..., forget=λ) equals the matrix-exponential solution of the ODE to 1e-12 (relative)."""
    g = torch.Generator().manual_seed(3)
    d = 4
    W0 = torch.randn(d, d, generator=g, dtype=DTYPE)
    k_raw, v_raw = torch.randn(d, generator=g, dtype=DTYPE), 2 * torch.randn(d, generator=g, dtype=DTYPE)
    beta = torch.tensor([0.8], dtype=DTYPE)
    lam = torch.tensor([forget], dtype=DTYPE)
    got = make_rule(rule).exact_step(W0, k_raw, v_raw, beta, h, lam)
    expected = _ode_solution(rule, W0, k_raw, v_raw, beta, forget, h)
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12 * float(expected.abs().max()))


@pytest.mark.parametrize("rule", ("hebb", "oja", "delta", "delta-post"))
def test_field_rate_is_rule_rate_minus_forget(rule):
    """The gated field's rate is the rule's rate (same k, v, β) minus σ(γ) W; with γ → −∞ it is the rule's."""
    torch.manual_seed(0)
    field = FastWeightField(3, 8, 2, rule, form="ode", forget_gate=True).to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(1))
    x = torch.randn(5, 3, dtype=DTYPE)
    W = torch.randn(5, 2, 4, 4, dtype=DTYPE)
    k_raw, v_raw, beta, lam = field.projections(x, None)
    # γ read independently: the last of each head's slow outputs.
    gamma = field.slow(field.key_features(x, None)).view(5, 2, -1)[..., -1:]
    assert torch.allclose(lam, torch.sigmoid(gamma), rtol=0, atol=0)
    expected = field.rule.rate(W, k_raw, v_raw, beta) - torch.sigmoid(gamma).unsqueeze(-1) * W
    assert torch.allclose(field(W, x, None), expected, rtol=1e-14, atol=1e-14)
    with torch.no_grad():
        field.slow.bias.view(2, -1)[:, -1] = -800.0  # σ(γ) = 0 to double precision
    assert torch.equal(field(W, x, None), field.rule.rate(W, *field.projections(x, None)[:3]))


def _long_control(windows, lengths_fraction=(1.0, 0.6, 0.3)):
    lengths = tuple(max(3, int(windows * f)) + 1 for f in lengths_fraction)
    times, values, lengths = make_data(lengths=lengths, channels=2, seed=9, scale=0.3)
    return build_control(times, values, lengths, interpolation="logsignature", depth=2, step=1)


@pytest.mark.parametrize("rule", AFFINE_RULES)
def test_fast_exact_solver_with_forget_gate_matches_reference_at_2000_windows(rule):
    """solve_exact (hand-written adjoint with the scale term, checkpointed segments) equals the reference loop of
    exact_step differentiated by autograd: states and gradients on every parameter and on the control, float64,
    2,000 windows, three samples ending at different windows."""
    control = _long_control(2000)
    control.coeffs.requires_grad_(True)
    torch.manual_seed(0)
    field = FastWeightField(control.channels, 8, 2, rule, form="rde", forget_gate=True).to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(2), scale=0.4)
    with torch.no_grad():  # forgetting times of a few to a few hundred windows
        field.slow.bias.view(2, -1)[:, -1] = torch.tensor([-1.0, -5.0], dtype=DTYPE)
    W0 = 0.3 * torch.randn(3, 2, 4, 4, generator=torch.Generator().manual_seed(4), dtype=DTYPE)
    fast = exact.solve_exact(field, control, W0, Exact(chunk_size=64), at_knots=True)
    slow = exact.solve_exact_reference(field, control, W0, at_knots=True)
    assert torch.allclose(fast, slow, rtol=1e-10, atol=1e-12)
    weights = torch.randn(fast.shape, generator=torch.Generator().manual_seed(5), dtype=DTYPE)
    wrt = [control.coeffs] + [p for name, p in field.named_parameters() if not name.startswith("query")]
    grads_fast = torch.autograd.grad((fast * weights).sum(), wrt)
    grads_slow = torch.autograd.grad((slow * weights).sum(), wrt)
    for got, expected in zip(grads_fast, grads_slow):
        assert torch.allclose(got, expected, rtol=1e-8, atol=1e-10 * float(expected.abs().max()))
    # The gate forgets: the final states differ from the ungated rule's.
    with torch.no_grad():
        field.slow.bias.view(2, -1)[:, -1] = -800.0
        ungated = exact.solve_exact_reference(field, control, W0)
    assert (ungated - slow[torch.arange(3), control.end_index]).abs().max() > 1e-2


@pytest.mark.parametrize("rule", AFFINE_RULES)
def test_exact_with_forget_gate_matches_fine_rk4(rule):
    """The exact solver with a forget gate agrees with rk4 at a step of 1/16 window on the same field (1e-7)."""
    control = _long_control(12)
    torch.manual_seed(0)
    field = FastWeightField(control.channels, 8, 2, rule, form="rde", forget_gate=True).to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(7), scale=0.7)
    W0 = torch.zeros(3, 2, 4, 4, dtype=DTYPE)
    got = solve(field, control, W0, SolverOptions(Exact()))
    expected = solve(FieldDynamics(field), control, W0, SolverOptions(RK4(step_size=1 / 16), gradient=Backprop()))
    assert torch.allclose(got, expected, rtol=0, atol=1e-7)


def test_post_delta_with_forget_gate_has_no_exact_solver():
    """Refused with a message naming the forget gate; rk4 still solves it."""
    with pytest.raises(ValueError, match="forget gate"):
        create_model("delta-post-rde", 3, 2, forget_gate=True, solver=SolverOptions(Exact()))
    field = FastWeightField(3, 8, 2, "delta-post", form="ode", forget_gate=True)
    with pytest.raises(NotImplementedError, match="forget gate"):
        field.rule.exact_step(
            torch.zeros(1, 4, 4), torch.zeros(1, 4), torch.zeros(1, 4), torch.zeros(1, 1), 1.0, torch.ones(1, 1)
        )


@pytest.mark.parametrize("forget_gate", [False, True])
def test_chrono_initialisation_of_ctfwp_gates(forget_gate):
    """Chrono biases of β (and γ) for every head: −log u with u ~ U(1, T_max − 1) (KS test on 4,096 draws);
    every other parameter is exactly what it is without chrono."""
    from scipy import stats

    t_max = 500.0
    H, d = 64, 4
    torch.manual_seed(11)
    plain = FastWeightField(3, H * d, H, "delta", form="ode", forget_gate=forget_gate)
    torch.manual_seed(11)
    chrono = FastWeightField(3, H * d, H, "delta", form="ode", forget_gate=forget_gate, chrono_t_max=t_max)
    gates = 2 if forget_gate else 1
    per_head = plain.slow.out_features // H
    gate_index = torch.zeros(per_head, dtype=torch.bool)
    gate_index[2 * d : 2 * d + gates] = True
    biases = chrono.slow.bias.view(H, per_head)
    for (name, a), b in zip(plain.named_parameters(), chrono.parameters()):
        if name == "slow.bias":
            assert torch.equal(a.view(H, per_head)[:, ~gate_index], b.view(H, per_head)[:, ~gate_index])
        else:
            assert torch.equal(a, b), name
    u = torch.exp(-biases[:, gate_index].detach().double()).flatten()
    assert float(u.min()) >= 1.0 and float(u.max()) <= t_max - 1
    # A default-initialised bias is far from this distribution: the test has power.
    assert stats.kstest(u.numpy(), stats.uniform(loc=1.0, scale=t_max - 2).cdf).pvalue > 1e-3
    gate_values = torch.sigmoid(biases[:, gate_index].detach())
    assert float(gate_values.min()) >= 1 / t_max - 1e-7 and float(gate_values.max()) <= 0.5 + 1e-7
    with pytest.raises(ValueError, match="chrono_t_max"):
        FastWeightField(3, 8, 2, "delta", chrono_t_max=2.0)
    with pytest.raises(TypeError, match="forget_gate"):
        FastWeightField(3, 8, 2, "delta", forget_gate=1)


# Each gated model's gate bias and the sign that turns it into the rate of forgetting (or writing): σ(sign·b).
GATE_BIASES = {
    "gru-ode": (lambda m: m.cell.input.bias[: m.hidden], -1),  # keep gate z: forgets at 1 − z = σ(−b)
    "gru-dt": (lambda m: m.cell.input.bias[: m.cell.hidden_size], -1),
    "gru-d": (lambda m: m.cell.input.bias[: m.cell.hidden_size], -1),
    "ode-rnn": (lambda m: m.cell.input.bias[: m.cell.hidden_size], -1),
    "delta-ode-rfwp": (lambda m: m.cell.slow.bias.view(m.cell.heads, -1)[:, -1], 1),
    "warp-gated-ode": (lambda m: m.dynamics.gate_input.bias, 1),
    "delta-ode": (lambda m: m.network.layers[0].field.slow.bias.view(m.network.layers[0].field.n_heads, -1)[:, -1], 1),
}


@pytest.mark.parametrize("name", sorted(GATE_BIASES))
def test_every_gated_model_takes_chrono_t_max(name):
    """create_model(name, ..., chrono_t_max=T) sets exactly the gate biases, to rates σ(sign·b) = 1/(1 + u) in
    [1/T, 1/2], and leaves every other parameter of the gates' module as without it (some models draw further modules
    after the module holding the gates, so only that module is compared there)."""
    t_max = 200.0
    bias_of, sign = GATE_BIASES[name]
    torch.manual_seed(3)
    plain = create_model(name, 3, 4)
    torch.manual_seed(3)
    chrono = create_model(name, 3, 4, chrono_t_max=t_max)
    scope = {"delta-ode": "network.layers.0.field.", "delta-ode-rfwp": "cell.", "gru-ode": "cell."}.get(name, "")
    changed = [
        n
        for (n, a), b in zip(plain.named_parameters(), chrono.parameters())
        if n.startswith(scope) and not torch.equal(a, b)
    ]
    assert len(changed) == 1
    gate = bias_of(chrono).detach()
    rate = torch.sigmoid(sign * gate)
    assert float(rate.min()) >= 1 / t_max - 1e-7 and float(rate.max()) <= 0.5 + 1e-7
    assert not torch.equal(bias_of(plain).detach(), gate)
    # the only changed tensor is the one holding the gate biases, and only those entries changed
    difference = dict(chrono.named_parameters())[changed[0]] - dict(plain.named_parameters())[changed[0]]
    assert int((difference != 0).sum()) == gate.numel()
