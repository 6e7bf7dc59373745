"""Gradients at length: the default gradient method equals plain backpropagation through the solver.

The default, ``SolverOptions(gradient=Checkpoint())``, must give exactly the gradient of the discrete solve
(what ``Backprop()`` computes) for every model that calls the solver, at the lengths this field works with
(T = 1000 steps here), with fixed-step and adaptive methods. The continuous adjoint is the one that fails
there (benchmarks/gradients.py measures how badly); a test of the adjoint's warning is at the end.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from neuralde_seq import SolverOptions, create_model, model_inputs
from neuralde_seq.controls import build_control
from neuralde_seq.solvers import (
    RK4,
    Adjoint,
    AdjointReconstructionWarning,
    Backprop,
    Checkpoint,
    Dopri5,
    Exact,
    evolve_over_gaps,
    parse_solver,
)

DTYPE = torch.float64
LENGTH = 1000
FWP = [f"{rule}-{form}" for rule in ("hebb", "oja", "delta", "delta-post") for form in ("cde", "ode", "rde")]
OTHERS = ["ncde", "nrde", "gru-ode", "ode-rnn", "delta-ode-rfwp"]
SMALL = dict(d_model=8, n_heads=2)
SIZES = {
    "ncde": dict(hidden=8, width=8),
    "nrde": dict(hidden=8, width=8),
    "gru-ode": dict(hidden=8),
    "ode-rnn": dict(hidden=8, width=8),
    "delta-ode-rfwp": dict(hidden=8, heads=2, width=8),
}


def random_walk(batch: int, length: int, channels: int, seed: int):
    """Irregular times and a Gaussian random walk, the second sample shorter (padding must not matter)."""
    g = torch.Generator().manual_seed(seed)
    times = torch.cumsum(0.5 + torch.rand(batch, length, generator=g, dtype=DTYPE), dim=1)
    values = torch.cumsum(torch.randn(batch, length, channels, generator=g, dtype=DTYPE), dim=1) / length**0.5
    lengths = torch.tensor([length - (length // 10) * b for b in range(batch)])
    return times, values, lengths


def inputs_for(name: str):
    # Log-signature windows of 4 points: 4 × LENGTH points give LENGTH windows (steps).
    points = 4 * LENGTH if name.endswith("rde") else LENGTH
    times, values, lengths = random_walk(2, points, 2, seed=0)
    overrides = dict(parametrization="index") if not name.endswith("rfwp") and name != "ode-rnn" else {}
    if name == "nrde":
        overrides.update(step=4)
    return model_inputs(name, times, values, lengths, **overrides)


def gradients(name: str, inputs, solver: SolverOptions) -> torch.Tensor:
    torch.manual_seed(1)
    sizes = SIZES.get(name, SMALL)
    model = create_model(name, inputs, 3, solver=solver, **sizes).to(DTYPE)
    logits = model(inputs)
    weights = torch.linspace(-1, 1, logits.numel(), dtype=DTYPE).view_as(logits)
    grads = torch.autograd.grad(
        (logits * weights).sum(), [p for p in model.parameters() if p.requires_grad], allow_unused=True
    )
    return torch.cat([torch.zeros(0, dtype=DTYPE) if g is None else g.flatten() for g in grads])


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


# Every model with rk4; with dopri5 one rule per form (the checkpointed adaptive solve is one code path whatever the
# rule's rate: the Hebb and Oja fields differ from Delta's in their rate only, which rk4 covers) and every other model.
ADAPTIVE = ["delta-cde", "delta-ode", "delta-rde", "delta-post-cde"] + OTHERS
CASES = [pytest.param(name, RK4(), id=f"{name}-rk4") for name in FWP + OTHERS] + [
    pytest.param(name, Dopri5(rtol=1e-3, atol=1e-5), id=f"{name}-dopri5") for name in ADAPTIVE
]


@pytest.mark.parametrize("name, method", CASES)
def test_default_gradient_equals_backprop_at_length_1000(name, method):
    inputs = inputs_for(name)
    default = gradients(name, inputs, SolverOptions(method))
    backprop = gradients(name, inputs, SolverOptions(method, gradient=Backprop()))
    assert backprop.norm() > 0
    assert relative_error(default, backprop) <= 1e-6


def _delta_cde(length: int, solver: SolverOptions, seed: int = 0):
    times, values, lengths = random_walk(3, length, 2, seed=seed)
    control = build_control(times, values, lengths, parametrization="index")
    torch.manual_seed(3)
    model = create_model("delta-cde", control, 3, solver=solver, **SMALL).to(DTYPE)
    return model, control


def _parameter_gradients(model, output) -> torch.Tensor:
    weights = torch.linspace(-1, 1, output.numel(), dtype=DTYPE).view_as(output)
    grads = torch.autograd.grad((output * weights).sum(), list(model.parameters()), allow_unused=True)
    return torch.cat(
        [torch.zeros(p.numel(), dtype=DTYPE) if g is None else g.flatten() for g, p in zip(grads, model.parameters())]
    )


@pytest.mark.parametrize("method", [RK4(), Dopri5(rtol=1e-5, atol=1e-7)], ids=["rk4", "dopri5"])
@pytest.mark.parametrize("every", [1, 7, None, 10_000])
def test_segment_size_changes_nothing(method, every):
    """Any segmentation of the checkpointed solve gives backprop's outputs and gradients (a segment that
    recomputed other steps, or dropped the step-size state at a boundary, would not)."""
    length = 120
    backprop_model, control = _delta_cde(length, SolverOptions(method, gradient=Backprop()))
    reference = backprop_model.network(control, at_knots=True)
    expected = _parameter_gradients(backprop_model, reference)
    model, _ = _delta_cde(length, SolverOptions(method, gradient=Checkpoint(every=every)))
    outputs = model.network(control, at_knots=True)
    torch.testing.assert_close(outputs, reference, rtol=1e-13, atol=1e-13)
    assert relative_error(_parameter_gradients(model, outputs), expected) <= 1e-12


def test_checkpointed_gradient_reaches_the_control():
    """Control coefficients captured by the checkpointed segments still receive their gradient."""
    model, control = _delta_cde(200, SolverOptions(gradient=Backprop()))
    grads = []
    for solver in (SolverOptions(gradient=Backprop()), SolverOptions()):
        model.network.solver = solver
        coeffs = control.coeffs.clone().requires_grad_(True)
        ctrl = type(control)(control.knots, coeffs, control.end_index)
        (g,) = torch.autograd.grad(model(ctrl).sum(), [coeffs])
        grads.append(g)
    assert grads[0].norm() > 0
    assert relative_error(grads[1], grads[0]) <= 1e-12


def test_adjoint_check_warns_where_the_adjoint_is_wrong():
    """At T = 1000 the continuous adjoint's gradient of delta-cde is far from the true one, and the check says
    so; on a short sequence, where it is right, the check is silent."""
    model, control = _delta_cde(1000, SolverOptions(gradient=Adjoint()))
    with pytest.warns(AdjointReconstructionWarning, match="relative error") as caught:
        adjoint = _parameter_gradients(model, model(control))
    # said at the user's line (here, this file), not inside the backward pass: once per run, not once per step
    assert {w.filename for w in caught if w.category is AdjointReconstructionWarning} == {__file__}
    model.network.solver = SolverOptions(gradient=Backprop())
    exact = _parameter_gradients(model, model(control))
    assert not relative_error(adjoint, exact) < 1e-2  # the adjoint is wrong here (or NaN)

    model, control = _delta_cde(20, SolverOptions(gradient=Adjoint()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AdjointReconstructionWarning)
        adjoint = _parameter_gradients(model, model(control))
    model.network.solver = SolverOptions(gradient=Backprop())
    assert relative_error(adjoint, _parameter_gradients(model, model(control))) < 1e-4


def test_adjoint_check_runs_every_nth_solve():
    model, control = _delta_cde(100, SolverOptions(gradient=Adjoint(check_every=2)))
    caught = []
    for _ in range(4):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            model(control).sum().backward()
        caught.append(any(issubclass(w.category, AdjointReconstructionWarning) for w in record))
    assert caught == [True, False, True, False]


def test_gradient_options():
    assert SolverOptions().gradient == Checkpoint()
    assert parse_solver({"gradient": "adjoint"}).gradient == Adjoint()
    assert parse_solver({"gradient": "backprop"}).gradient == Backprop()
    with pytest.raises(TypeError, match="SolverOptions.gradient must be a Gradient object"):
        SolverOptions(gradient="checkpoint")
    with pytest.raises(ValueError, match="gradient must be one of"):
        parse_solver({"gradient": "reverse"})
    with pytest.raises(ValueError, match="Checkpoint.every"):
        Checkpoint(every=0)
    with pytest.raises(ValueError, match="Adjoint.check_every"):
        Adjoint(check_every=-1)
    with pytest.raises(ValueError, match="multistep"):
        parse_solver("explicit_adams")


def test_no_gradient_recording_gives_the_same_solution():
    """Under no_grad every gradient method runs the same steps (evaluation costs nothing extra)."""
    model, control = _delta_cde(300, SolverOptions())
    with torch.no_grad():
        plain = model(control)
    for solver in (SolverOptions(gradient=Adjoint()), SolverOptions(gradient=Backprop())):
        model.network.solver = solver
        with torch.no_grad():
            torch.testing.assert_close(model(control), plain, rtol=0, atol=0)


@pytest.mark.parametrize("method", [RK4(step_size=1 / 64), Dopri5(rtol=1e-12, atol=1e-12)], ids=["rk4", "dopri5"])
def test_evolve_over_gaps_linear_closed_form(method):
    """dh/dt = A h over per-sample gaps (one negative, one zero) equals expm(A Δt) h."""
    torch.manual_seed(0)
    f = torch.nn.Linear(3, 3, bias=False).to(DTYPE)
    h = torch.randn(3, 3, dtype=DTYPE)
    gap = torch.tensor([0.7, -0.4, 0.0], dtype=DTYPE)
    out = evolve_over_gaps(f, h, gap, SolverOptions(method))
    expected = torch.stack([torch.linalg.matrix_exp(f.weight * g) @ hb for g, hb in zip(gap, h)])
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-9)
    assert torch.equal(out[2], h[2])
    with pytest.raises(ValueError, match="no closed form"):
        evolve_over_gaps(f, h, gap, SolverOptions(Exact()))
