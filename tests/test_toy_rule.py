"""A learning rule defined in this file alone runs in every form (issue 26, step 4).

`LeakyDelta`, dW/ds = σ(β) (v − γ W k) kᵀ, is declared here by its parts (the written vector e = v − γ W k along
a = k; softmax keys, tanh values, σ(β) by the base class) and two capabilities: its rate is affine in W
(``affine_rate``) and it has a closed-form step on constant inputs (``affine_step``): W k relaxes to v/γ at the rate
c γ ‖k‖², and W changes only along kᵀ. Each result is checked against references written here, independently of the
library's rules and solvers:

- the rate against the formula with explicit tensor products (`toy_rate`);
- the ODE, CDE and RDE forms (`FastWeightNetwork` and `create_model` with ``rule=``) solved by the library's rk4
  (per-step loop and composed affine steps) against torchdiffeq's dopri5 of `toy_rate` on each knot interval, with
  tolerances 1e-11, in float64 (the slow net's projections by `fwp_reference`, which reads only the weights);
- the exact solver (sequential, chunked and parallel scans) against the same dopri5 reference and against the
  closed form written here (`toy_closed_form_step`) at 1,000 windows, values and gradients;
- a rule without a closed form (`SaturatingDelta`) is refused by method="exact" with a message naming the rule and
  the capability it lacks, and "auto" takes rk4 for it, which matches its dopri5 reference;
- the registry: `registered_rule` makes the name buildable everywhere and removes it on leaving the block.
"""

from __future__ import annotations

import fwp_reference as ref
import pytest
import torch
from torchdiffeq import odeint

from neuralde_seq import rules
from neuralde_seq.controls import Control, build_control
from neuralde_seq.models import FAST_WEIGHT_MODEL_NAMES, MODEL_NAMES, FastWeightNetwork, create_model
from neuralde_seq.rules import (
    AFFINE_RATE,
    AFFINE_STEP,
    LearningRule,
    RankOneRate,
    RankOneUpdate,
    make_rule,
    register_rule,
    registered_rule,
    rule_names,
)
from neuralde_seq.solvers import RK4, Auto, Exact, SolverOptions, solve

GAMMA = 2.0
TOLERANCE = dict(rtol=1e-11, atol=1e-12)  # torchdiffeq's dopri5 in the references


class LeakyDelta(LearningRule):
    """dW/ds = σ(β) (v − γ W k) kᵀ: a delta rule whose recall is weighted by γ (W k relaxes to v/γ)."""

    name = "leaky-delta"
    title = "leaky Delta"
    cde_sources = ("dx", "x")  # as the Delta rules: keys from x', values from x
    capabilities = frozenset({AFFINE_RATE, AFFINE_STEP})  # no forget-gate form declared

    def __init__(self, gamma: float = GAMMA):
        self.gamma = float(gamma)

    def error(self, M, k, v):
        return v - self.gamma * self.recall(M, k)

    def affine_rate(self, k_raw, v_raw, beta, forget=None):
        c = torch.sigmoid(beta)
        return RankOneRate(self.activate_key(k_raw), torch.tanh(v_raw), self.gamma * c, c, forget=forget)

    def affine_step(self, k_raw, v_raw, beta, h, forget=None):
        if forget is not None:
            return None
        k, v, c = self.activate_key(k_raw), torch.tanh(v_raw), torch.sigmoid(beta)
        norm_sq = (k * k).sum(-1, keepdim=True)
        decay = -torch.expm1(-c * self.gamma * norm_sq * h) / norm_sq
        return RankOneUpdate(k, v, decay, decay / self.gamma)

    def __repr__(self):
        return f"LeakyDelta(gamma={self.gamma})"


class SaturatingDelta(LearningRule):
    """dW/ds = σ(β) (v − tanh(W k)) kᵀ: nonlinear in W, with no closed form declared."""

    name = "saturating-delta"

    def error(self, M, k, v):
        return v if M is None else v - torch.tanh(self.recall(M, k))


# ------------------------------------------------------------------------------- references written out here
def _softmax(z):
    e = torch.exp(z - z.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def _activations(k_raw, v_raw, beta):
    """k, v, c with c of shape (B, H, 1) (`fwp_reference.projections` gives β as (B, H))."""
    beta = beta if beta.dim() == k_raw.dim() else beta.unsqueeze(-1)
    return _softmax(k_raw), torch.tanh(v_raw), 1.0 / (1.0 + torch.exp(-beta))


def toy_rate(W, k_raw, v_raw, beta, gamma=GAMMA):
    """σ(β) (v − γ W k) kᵀ per batch and head; W (B, H, d, d) or None (zeros)."""
    k, v, c = _activations(k_raw, v_raw, beta)
    recalled = 0 if W is None else torch.einsum("bhij,bhj->bhi", W, k)
    return torch.einsum("bhi,bhj->bhij", c * (v - gamma * recalled), k)


def saturating_rate(W, k_raw, v_raw, beta):
    k, v, c = _activations(k_raw, v_raw, beta)
    recalled = torch.zeros_like(v) if W is None else torch.tanh(torch.einsum("bhij,bhj->bhi", W, k))
    return torch.einsum("bhi,bhj->bhij", c * (v - recalled), k)


def toy_closed_form_step(W, k_raw, v_raw, beta, h, gamma=GAMMA):
    """W(t + h) on constant inputs: u = W k obeys du/ds = c‖k‖² (v − γ u), so u(h) = v/γ + (u(0) − v/γ) e^{−cγ‖k‖²h},
    and W moves along kᵀ only: W + (u(h) − u(0)) kᵀ / ‖k‖²."""
    k, v, c = _activations(k_raw, v_raw, beta)
    norm_sq = (k * k).sum(-1, keepdim=True)
    u0 = torch.einsum("bhij,bhj->bhi", W, k)
    target = v / gamma
    uh = target + (u0 - target) * torch.exp(-c * gamma * norm_sq * h.view(-1, 1, 1))
    return W + torch.einsum("bhi,bhj->bhij", uh - u0, k) / norm_sq.unsqueeze(-1)


def _piece_inputs(control, piece, offset):
    batch = control.batch_size
    index = torch.full((batch,), piece, dtype=torch.long)
    f = torch.full((batch,), float(offset), dtype=control.coeffs.dtype)
    return control.evaluate_piece(index, f), control.derivative_piece(index, f)


def reference_states(field, control, sources, rate=toy_rate):
    """W at every knot from the rank-one write at the first knot, by dopri5 on each knot interval (the inputs there
    read from that interval's polynomial, so no stage reads the neighbouring one); the projections by
    `fwp_reference` from the field's weights."""
    x0, dx0 = _piece_inputs(control, 0, 0.0)
    W = rate(None, *ref.projections(field, x0, dx0, sources))
    states = [W]
    knots = control.knots
    for j in range(int(control.end_index.max())):
        h = float(knots[j + 1] - knots[j])
        f = lambda s, W_, j=j: rate(W_, *ref.projections(field, *_piece_inputs(control, j, float(s.detach())), sources))
        W = odeint(f, W, torch.tensor([0.0, h], dtype=W.dtype), method="dopri5", **TOLERANCE)[-1]
        states.append(W)
    return torch.stack(states, 1)


def _random_series(batch=2, points=13, channels=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    times = torch.linspace(0, 6, points, dtype=torch.float64).expand(batch, points).contiguous()
    values = torch.cumsum(0.6 * torch.randn(batch, points, channels, generator=g, dtype=torch.float64), 1)
    return times, values


def _control(form):
    times, values = _random_series()
    if form == "rde":  # log-signature windows of 2 intervals with the window's starting point (as the registry)
        return build_control(times, values, interpolation="logsignature", depth=2, step=2, window_start_values=True)
    return build_control(times, values, interpolation="hermite_cubic")


def _network(form, control, rule="leaky-delta", builder="network", solver=None):
    torch.manual_seed(1)
    options = SolverOptions() if solver is None else SolverOptions(solver)
    if builder == "create_model":
        model = create_model("delta-cde", control, 3, rule=rule, form=form, d_model=8, n_heads=2, solver=options)
        network = model.network
    else:
        network = FastWeightNetwork(control.channels, rule=rule, form=form, d_model=8, n_heads=2, solver=options)
    network = network.double()
    ref.randomize_(network, torch.Generator().manual_seed(2), scale=0.5)
    return network


def _sources(form):
    return ("x", "x") if form in ("ode", "rde") else ("dx", "x")  # the toy's declared cde_sources


def _library_states(network, control):
    field = network.layers[0].field
    x0, dx0 = control.evaluate(control.knots[0]), control.derivative(control.knots[0])
    initial = (
        network.layers[0]
        .initial(x0 if field.needs_value else None, dx0 if field.needs_derivative else None, None)
        .unsqueeze(1)
    )
    return solve(network.dynamics, control, initial, network.solver, at_knots=True)[:, :, 0]


# ------------------------------------------------------------------------------------------------------- tests
def test_rate_is_assembled_from_the_declared_parts():
    """The base class's rate, rate_features/rate_from_features and discrete_step give σ(β)(v − γ W k)kᵀ."""
    g = torch.Generator().manual_seed(0)
    W, k_raw, v_raw = (torch.randn(3, 2, *shape, generator=g, dtype=torch.float64) for shape in ((4, 4), (4,), (4,)))
    beta = torch.randn(3, 2, 1, generator=g, dtype=torch.float64)
    rule = LeakyDelta()
    expected = toy_rate(W, k_raw, v_raw, beta)
    torch.testing.assert_close(rule.rate(W, k_raw, v_raw, beta), expected, rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(
        rule.rate_from_features(W, *rule.rate_features(k_raw, v_raw, beta)), expected, rtol=1e-14, atol=1e-15
    )
    torch.testing.assert_close(
        rule.rate(None, k_raw, v_raw, beta), toy_rate(None, k_raw, v_raw, beta), rtol=1e-14, atol=1e-15
    )
    torch.testing.assert_close(rule.discrete_step(W, k_raw, v_raw, beta), W + expected, rtol=1e-14, atol=1e-15)
    # the declared capabilities describe the same rule: the affine rate and the closed-form step
    torch.testing.assert_close(rule.affine_rate(k_raw, v_raw, beta).apply(W), expected, rtol=1e-13, atol=1e-14)
    h = torch.full((3,), 0.7, dtype=torch.float64)
    torch.testing.assert_close(
        rule.exact_step(W, k_raw, v_raw, beta, 0.7),
        toy_closed_form_step(W, k_raw, v_raw, beta, h),
        rtol=1e-13,
        atol=1e-14,
    )
    assert rule.has_affine_rate and rule.exact_step_kind() == "affine" and rule.exact_step_kind(True) is None


@pytest.mark.parametrize(
    "form,builder,affine_steps",
    [
        ("ode", "network", False),
        ("cde", "network", False),
        ("cde", "network", True),
        ("rde", "network", False),
        ("cde", "create_model", True),
    ],
)
def test_every_form_matches_dopri5_of_the_written_out_rate(form, builder, affine_steps):
    """The toy rule in ODE, CDE and RDE form, solved by the library's rk4 (1,200 steps of 0.005; per-step loop, or
    composed affine maps from ``affine_rate``), equals dopri5 of `toy_rate` at every knot (rk4's error: 1.7e-7 at
    steps of 0.02, 7e-10 at 0.005)."""
    control = _control(form)
    with registered_rule("leaky-delta", LeakyDelta):
        network = _network(form, control, builder=builder, solver=RK4(step_size=0.005, affine_steps=affine_steps))
    field = network.layers[0].field
    assert isinstance(field.rule, LeakyDelta) and (field.key_source, field.value_source) == _sources(form)
    got = _library_states(network, control)
    with torch.no_grad():
        expected = reference_states(field, control, _sources(form))
    assert expected.abs().max() > 0.1  # the weights moved
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-9)
    # the same solve with another γ is far off: the comparison sees the rule
    with torch.no_grad():
        other = reference_states(field, control, _sources(form), rate=lambda *a: toy_rate(*a, gamma=1.8))
    assert (other - expected).abs().max() > 1e-3


@pytest.mark.parametrize("scan", ["sequential", "chunked", "parallel"])
def test_exact_solver_matches_dopri5_on_log_signature_windows(scan):
    """Exact() (and Auto(), which picks it from the declared capability) on log-signature windows equals
    the dopri5 reference of the written-out rate, for every scan of the affine steps."""
    control = _control("rde")
    method = Exact(
        recurrence="chunked" if scan == "chunked" else "sequential",
        scan="parallel" if scan == "parallel" else "sequential",
        block_size=2 if scan == "chunked" else None,
    )
    network = _network("rde", control, rule=LeakyDelta(), solver=method)
    assert _network("rde", control, rule=LeakyDelta()).resolve_method(control) == Exact()
    got = _library_states(network, control)
    with torch.no_grad():
        expected = reference_states(network.layers[0].field, control, ("x", "x"))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


def _windows_control(windows=1000, batch=3, channels=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    coeffs = torch.zeros(batch, windows + 1, 4, channels, dtype=torch.float64)
    coeffs[:, :windows, 0] = 0.5 * torch.randn(batch, windows, channels, generator=g, dtype=torch.float64)
    knots = torch.cat(
        [
            torch.zeros(1, dtype=torch.float64),
            torch.cumsum(0.2 + torch.rand(windows, generator=g, dtype=torch.float64), 0),
        ]
    )
    end_index = torch.tensor([windows, windows - 137, windows - 500][:batch])  # variable lengths
    return Control(knots, coeffs, end_index, piecewise_constant=True)


@pytest.mark.parametrize("scan", ["sequential", "chunked", "parallel"])
def test_exact_solver_matches_the_written_out_closed_form_at_1000_windows(scan):
    """The exact solver's fast paths (hand-written adjoint, chunked WY form, parallel scan) on 1,000 windows with
    variable lengths: final states and gradients on every parameter and on the control equal a loop of
    `toy_closed_form_step` differentiated by autograd."""
    control = _windows_control()
    network = _network(
        "rde",
        control,
        rule=LeakyDelta(),
        solver=Exact(
            chunk_size=64,
            recurrence="chunked" if scan == "chunked" else "sequential",
            scan="parallel" if scan == "parallel" else "sequential",
        ),
    )
    field = network.layers[0].field
    coeffs = control.coeffs.clone().requires_grad_()
    control = Control(control.knots, coeffs, control.end_index, piecewise_constant=True)
    g = torch.Generator().manual_seed(5)
    W0 = 0.3 * torch.randn(3, 2, 4, 4, generator=g, dtype=torch.float64)
    probe = torch.randn(3, 2, 4, 4, generator=g, dtype=torch.float64)

    used = [p for name, p in field.named_parameters() if not name.startswith("query_proj")]  # W never reads q
    got = solve(field, control, W0, network.solver)
    grads = torch.autograd.grad((got * probe).sum(), [coeffs, *used])

    W = W0
    for j in range(int(control.end_index.max())):
        x = coeffs[:, j, 0]
        h = (control.knots[j + 1] - control.knots[j]) * (j < control.end_index).to(torch.float64)
        W = toy_closed_form_step(W, *ref.projections(field, x, x, ("x", "x")), h)
    expected_grads = torch.autograd.grad((W * probe).sum(), [coeffs, *used])
    assert W.abs().max() > 0.1
    torch.testing.assert_close(got, W, rtol=1e-10, atol=1e-11)
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_a_rule_without_a_closed_form_is_refused_by_exact_and_solved_by_rk4():
    """SaturatingDelta declares no closed form: method="exact" refuses it naming the rule and the missing
    capability, its exact_step raises, and "auto" solves it by rk4, which matches dopri5 of its written-out rate."""
    control = _control("rde")
    with pytest.raises(ValueError, match=r"SaturatingDelta\(\) has no closed-form step.*'affine_step'.*RK4\(\)"):
        _network("rde", control, rule=SaturatingDelta(), solver=Exact())
    with pytest.raises(NotImplementedError, match="stepwise_step"):
        SaturatingDelta().exact_step(torch.zeros(1, 2, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 1), 1.0)
    network = _network("rde", control, rule=SaturatingDelta(), solver=Auto(fallback=RK4(step_size=0.005)))
    assert network.resolve_method(control) == RK4(step_size=0.005)
    with torch.no_grad():
        expected = reference_states(network.layers[0].field, control, ("x", "x"), rate=saturating_rate)
    torch.testing.assert_close(_library_states(network, control), expected, rtol=0, atol=2e-9)


def test_registered_rule_is_buildable_by_name_and_removed_after_the_block():
    built_in = rule_names()
    with registered_rule("leaky-delta", LeakyDelta, title="leaky Delta") as name:
        assert name in rule_names() and name in rules.RULE_NAMES
        rule = make_rule(name, gamma=3.0)
        assert isinstance(rule, LeakyDelta) and rule.gamma == 3.0
        with pytest.raises(ValueError, match="already registered"):
            register_rule(name, LeakyDelta)
        with pytest.raises(ValueError, match="did you mean 'leaky-delta'"):
            make_rule("leaky_delta")
        model = create_model("hebb-ode", 3, 2, rule=name, d_model=8, n_heads=2)
        assert isinstance(model.network.layers[0].field.rule, LeakyDelta)
    assert rule_names() == built_in and "leaky-delta" not in rules.RULE_NAMES
    with pytest.raises(ValueError, match="unknown rule 'leaky-delta'"):
        make_rule("leaky-delta")
    with pytest.raises(RuntimeError):  # removed even when the block raises
        with registered_rule("leaky-delta", LeakyDelta):
            raise RuntimeError
    assert "leaky-delta" not in rule_names()
    # the model registry holds the built-in rules' models only
    assert FAST_WEIGHT_MODEL_NAMES == tuple(f"{r}-{f}" for r in built_in for f in ("ode", "cde", "rde"))
    assert not any(n.startswith("leaky") for n in MODEL_NAMES)


def test_a_rule_written_as_rate_alone_still_runs():
    """A subclass that overrides `rate` only (the contract before the parts) keeps working in a field, and has no
    closed form (method="auto" takes rk4)."""

    class RateOnly(LearningRule):
        def rate(self, W, k_raw, v_raw, beta):
            return toy_rate(W, k_raw, v_raw, beta)

    g = torch.Generator().manual_seed(3)
    W, k_raw, v_raw = (torch.randn(2, 2, *shape, generator=g, dtype=torch.float64) for shape in ((3, 3), (3,), (3,)))
    beta = torch.randn(2, 2, 1, generator=g, dtype=torch.float64)
    rule = RateOnly()
    torch.testing.assert_close(
        rule.rate_from_features(W, *rule.rate_features(k_raw, v_raw, beta)),
        toy_rate(W, k_raw, v_raw, beta),
        rtol=1e-14,
        atol=1e-15,
    )
    control = _control("rde")
    network = _network("rde", control, rule=rule)
    assert network.resolve_method(control) == RK4() and torch.isfinite(network(control)).all()
