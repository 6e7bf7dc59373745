"""The affine-map fixed-step solve (neuralde_seq.solvers.affine_rk4) against the per-step Runge-Kutta loop it replaces.

The per-step loop (``RK4(affine_steps=False)``, neuralde_seq.solvers.fixed_step) is the reference: in float64 the
affine path must give its states and its gradients with respect to every parameter and the control's coefficients
(the same Runge-Kutta polynomial evaluated in another order: rounding only), at the length users run (1,000 steps),
with variable lengths, at every knot, for every affine rule with and without a forget gate, and for other tableaus.
`step_maps` is checked on its own against an explicit Runge-Kutta step of a dense affine equation.
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch

from neuralde_seq import create_model, model_inputs
from neuralde_seq.models.fast_weights import FastWeightNetwork
from neuralde_seq.rules import RankOneRate, make_rule
from neuralde_seq.solvers import (
    RK4,
    Auto,
    Backprop,
    Checkpoint,
    Dopri5,
    Euler,
    Heun3,
    Midpoint,
    SolverOptions,
    affine_rk4,
    solve,
)
from neuralde_seq.solvers.affine_rk4 import AffineFixedStepSolve, affine_steps_apply, dense_step_maps, step_maps
from neuralde_seq.solvers.fixed_step import TABLEAUS, FixedStepSolve

DTYPE = torch.float64


def _observations(length: int, batch: int = 3, channels: int = 3, seed: int = 0, lengths=None):
    g = torch.Generator().manual_seed(seed)
    times = torch.linspace(0, 1, length, dtype=DTYPE).repeat(batch, 1)
    values = torch.cumsum(torch.randn(batch, length, channels, generator=g, dtype=DTYPE), 1) / length**0.5
    return times, values, lengths


def _with_method(model, **fields):
    """The model's FastWeightNetwork solver with ``fields`` of its fixed-step method replaced (affine_steps, ...;
    under `Auto`, those of its fallback)."""
    solver = model.network.solver
    method = solver.method
    if isinstance(method, Auto):
        method = dataclasses.replace(method, fallback=dataclasses.replace(method.fallback, **fields))
    else:
        method = dataclasses.replace(method, **fields)
    model.network.solver = dataclasses.replace(solver, method=method)
    return model


def _loss_and_grads(model, control):
    """(output, gradients of a loss on it with respect to every parameter and the control's coefficients)."""
    coeffs = control.coeffs.detach().clone().requires_grad_(True)
    control = dataclasses.replace(control, coeffs=coeffs)
    model.zero_grad(set_to_none=True)
    out = model(control)
    (out.sin() * torch.linspace(-1, 1, out.shape[-1], dtype=DTYPE)).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    grads["control coefficients"] = coeffs.grad.clone()
    return out.detach(), grads


def _assert_same(model, control, rtol=1e-9):
    """The model's output and gradients with the affine path equal the per-step loop's, and the affine path ran."""
    taken = []
    original = AffineFixedStepSolve.run

    def recorded_run(self, *args):
        taken.append(True)
        return original(self, *args)

    _with_method(model, affine_steps=False)
    expected, expected_grads = _loss_and_grads(model, control)
    _with_method(model, affine_steps=True)
    AffineFixedStepSolve.run = recorded_run
    try:
        out, grads = _loss_and_grads(model, control)
    finally:
        AffineFixedStepSolve.run = original
    assert taken, "the affine path was not taken"
    scale = expected.abs().max()
    assert (out - expected).abs().max() <= rtol * scale, (out - expected).abs().max()
    assert expected_grads.keys() == grads.keys()
    for name, g in expected_grads.items():
        assert g.abs().max() > 0, name  # a gradient that is zero on both paths would prove nothing
        error = (grads[name] - g).abs().max() / g.abs().max()
        assert error <= rtol, f"{name}: relative gradient error {error:.2e}"


def test_delta_cde_equals_the_per_step_loop_at_1000_steps():
    """The headline model (pre-Delta CDE on the registry's Hermite control with its time channel, rk4, one step per
    knot, checkpointed gradients) over 1,000 points: values and all gradients to 1e-9 relative in float64."""
    times, values, _ = _observations(1000)
    control = model_inputs("delta-cde", times, values)
    torch.manual_seed(0)
    model = create_model("delta-cde", control, 3, d_model=16, n_heads=2).to(DTYPE)
    assert model.network.solver.gradient == Checkpoint()
    _assert_same(model, control)


def test_variable_lengths_and_every_knot():
    """Samples of different lengths stop at their own end (steps of length 0 are the identity map), and the states
    at every knot (``at_knots=True``) equal the per-step loop's, with values and gradients."""
    times, values, _ = _observations(300, batch=4, seed=1)
    lengths = torch.tensor([300, 217, 64, 2])
    control = model_inputs("delta-cde", times, values, lengths)
    torch.manual_seed(1)
    classifier = create_model("delta-cde", control, 3, d_model=16, n_heads=2).to(DTYPE)
    _assert_same(classifier, control)

    class AtKnots(torch.nn.Module):  # the network's outputs at every knot, as a model for _assert_same
        def __init__(self, network: FastWeightNetwork):
            super().__init__()
            self.network = network

        def forward(self, control):
            return self.network(control, at_knots=True)

    _assert_same(AtKnots(classifier.network), control)


@pytest.mark.parametrize(
    "name,options",
    [
        ("hebb-cde", {}),
        ("oja-cde", {}),
        ("delta-cde", dict(forget_gate=True, chrono_t_max=20.0)),
        ("hebb-cde", dict(forget_gate=True)),
        ("oja-cde", dict(forget_gate=True)),
    ],
)
def test_every_affine_rule_with_and_without_a_forget_gate(name, options):
    """Hebb (nothing decays), Oja (the rate of Wᵀ; its registry default takes two rk4 steps per knot, step_size
    0.5) and the forget gate's −λ W (σ ≠ 1 in the step map) over 400 points."""
    times, values, _ = _observations(400, seed=2)
    control = model_inputs(name, times, values)
    torch.manual_seed(2)
    model = create_model(name, control, 3, d_model=16, n_heads=2, **options).to(DTYPE)
    _assert_same(model, control)


@pytest.mark.parametrize("method", [Euler, Midpoint, Heun3], ids=lambda cls: cls.name)
def test_other_tableaus(method):
    """Any explicit tableau, e.g. midpoint's zero weight on its first stage, with a step size that cuts knot
    intervals into several steps."""
    times, values, _ = _observations(120, seed=3)
    control = model_inputs("delta-cde", times, values)
    torch.manual_seed(3)
    model = create_model("delta-cde", control, 3, d_model=16, n_heads=2, forget_gate=True).to(DTYPE)
    model.network.solver = SolverOptions(method(step_size=0.4))
    _assert_same(model, control)


def test_backprop_gradients_and_a_field_solved_directly():
    """``gradient=Backprop()`` (no checkpointed segments) and a bare FastWeightField given to `solve`."""
    times, values, _ = _observations(150, seed=4)
    control = model_inputs("delta-cde", times, values)
    torch.manual_seed(4)
    model = create_model("delta-cde", control, 3, d_model=16, n_heads=2).to(DTYPE)
    model.network.solver = SolverOptions(RK4(), gradient=Backprop())
    _assert_same(model, control)
    field = model.network.layers[0].field
    W0 = torch.randn(control.batch_size, field.n_heads, field.head_dim, field.head_dim, dtype=DTYPE)
    states = [solve(field, control, W0, SolverOptions(RK4(affine_steps=flag)), at_knots=True) for flag in (True, False)]
    assert (states[0] - states[1]).abs().max() <= 1e-10 * states[1].abs().max()


def _dense_rk_step(tableau, h, M, A, B):
    """One explicit Runge-Kutta step of dM/ds = M A_i + B_i (A_i, B_i dense, per stage), stage by stage."""
    rates = []
    for i, row in enumerate(tableau.a):
        Y = M + h * sum((w * k for w, k in zip(row, rates)), torch.zeros_like(M))
        rates.append(Y @ A[i] + B[i])
    return M + h * sum((w * k for w, k in zip(tableau.b, rates)), torch.zeros_like(M))


@pytest.mark.parametrize("method", ["rk4", "heun3", "midpoint", "euler"])
@pytest.mark.parametrize("decays,forgets", [(True, False), (True, True), (False, False), (False, True)])
def test_step_maps_equal_a_dense_runge_kutta_step(method, decays, forgets):
    """M P + Q equals the Runge-Kutta step of the equation with dense A_i = −λ_i I − δ_i a_i a_iᵀ and
    B_i = w_i b_i a_iᵀ (different widths d_a ≠ d_b, a step of length 0 gives the identity)."""
    tableau, stages = TABLEAUS[method], len(TABLEAUS[method].c)
    g = torch.Generator().manual_seed(5)
    X, d_a, d_b = 6, 5, 3
    rand = lambda *shape: torch.rand(*shape, generator=g, dtype=DTYPE)
    a, b, write = torch.randn(stages, X, d_a, generator=g, dtype=DTYPE), rand(stages, X, d_b), rand(stages, X, 1)
    decay = rand(stages, X, 1) if decays else None
    forget = rand(stages, X, 1) if forgets else None
    h = rand(X, 1)
    h[0] = 0.0
    P, Q = dense_step_maps(*step_maps(tableau, h, a, b, decay, write, forget))
    eye = torch.eye(d_a, dtype=DTYPE)
    A = [
        -(0 if forget is None else forget[i, :, :, None]) * eye
        - (0 if decay is None else decay[i, :, :, None]) * a[i, :, :, None] * a[i, :, None, :]
        for i in range(stages)
    ]
    B = [write[i, :, :, None] * b[i, :, :, None] * a[i, :, None, :] for i in range(stages)]
    M = torch.randn(X, d_b, d_a, generator=g, dtype=DTYPE)
    expected = _dense_rk_step(tableau, h[:, :, None], M, A, B)
    assert torch.allclose(M @ P + Q, expected, rtol=1e-12, atol=1e-13)
    assert torch.equal((M @ P + Q)[0], M[0])


@pytest.mark.parametrize("rule", ["hebb", "oja", "delta"])
@pytest.mark.parametrize("forgets", [False, True])
def test_rank_one_rate_is_the_rules_rate(rule, forgets):
    """`LearningRule.affine_rate` describes the rule's own `rate` (minus λ W with a forget gate)."""
    g = torch.Generator().manual_seed(6)
    d = 5
    k_raw, v_raw = torch.randn(2, 3, d, generator=g, dtype=DTYPE), torch.randn(2, 3, d, generator=g, dtype=DTYPE)
    beta, W = torch.randn(2, 3, 1, generator=g, dtype=DTYPE), torch.randn(2, 3, d, d, generator=g, dtype=DTYPE)
    forget = torch.rand(2, 3, 1, generator=g, dtype=DTYPE) if forgets else None
    rule = make_rule(rule)
    rate = rule.affine_rate(k_raw, v_raw, beta, forget)
    assert isinstance(rate, RankOneRate) and rule.has_affine_rate
    expected = rule.rate(W, k_raw, v_raw, beta) - (0 if forget is None else forget.unsqueeze(-1) * W)
    assert torch.allclose(rate.apply(W), expected, rtol=1e-13, atol=1e-14)


def test_which_solves_take_the_affine_path():
    """One field with an affine rule on a fixed-step method (also "auto" where it resolves to rk4); not post-Delta
    (tanh(v − W k) is not affine in W), Oja with the public code's softmax after the subtraction, two layers, or
    ``affine_steps=False``."""
    times, values, _ = _observations(20)
    control = model_inputs("delta-cde", times, values)
    build = lambda **options: create_model("delta-cde", control, 3, d_model=8, n_heads=2, **options).to(DTYPE)
    rk4 = RK4()
    assert affine_steps_apply(build().network.dynamics, rk4)
    assert not affine_steps_apply(build(rule="delta-post").network.dynamics, rk4)
    assert not affine_steps_apply(build(num_layers=2).network.dynamics, rk4)
    assert not affine_steps_apply(build().network.dynamics, RK4(affine_steps=False))
    assert not affine_steps_apply(build().network.dynamics, Dopri5())
    model = build()
    model.network.layers[0].field.rule = make_rule("oja", softmax_after_subtract=True)
    assert not affine_steps_apply(model.network.dynamics, rk4)
    with pytest.raises(ValueError, match=r"RK4\.affine_steps must be True or False"):
        RK4(affine_steps="yes")
    with pytest.raises(ValueError, match="affine in W"):
        AffineFixedStepSolve(build(rule="delta-post").network.dynamics, control, rk4, DTYPE)


@contextlib.contextmanager
def _host_reads_raise():
    """Tensor.item(), .tolist(), bool(), int(), float() raise inside (each a host sync on a GPU)."""
    names = ("item", "tolist", "__bool__", "__int__", "__float__")
    saved = {name: torch.Tensor.__dict__.get(name) for name in names}

    def refuse(name):
        def read(self, *args, **kwargs):
            raise AssertionError(f"Tensor.{name} read a value on the host inside the step loop")

        return read

    try:
        for name in names:
            setattr(torch.Tensor, name, refuse(name))
        yield
    finally:
        for name, original in saved.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)


def test_step_loop_reads_nothing_on_the_host():
    """The segments (step maps, composition, its adjoint, the recomputation) read no tensor value on the host:
    after the set-up of the solve (which reads the grid once), a whole forward and backward pass runs with host
    reads raising. The instrument itself catches a read."""
    with _host_reads_raise(), pytest.raises(AssertionError, match="host"):
        torch.ones(2).sum().item()
    times, values, _ = _observations(50, batch=3)
    control = model_inputs("delta-cde", times, values, torch.tensor([50, 31, 7]))
    torch.manual_seed(7)
    model = create_model("delta-cde", control, 3, d_model=8, n_heads=2, forget_gate=True).to(DTYPE)
    dynamics = model.network.dynamics
    W0 = torch.zeros(control.batch_size, 1, 2, 4, 4, dtype=DTYPE)
    solver = AffineFixedStepSolve(dynamics, control, RK4(), DTYPE)  # set-up: reads the grid
    with _host_reads_raise():
        final = solver.solve(W0, False, 8, checkpointed=True)
        (final**2).sum().backward()
    grads = [p.grad for p in dynamics.parameters() if p.grad is not None]
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)
    assert isinstance(solver, FixedStepSolve) and affine_rk4.PADDED_STAGES >= len(TABLEAUS["rk4"].c)
