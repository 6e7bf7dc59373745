"""Log-NCDE: the NCDE's field solved by the log-ODE method on depth-1/2 log-signature windows (NeuralCDE with
form="log-ode", neuralde_seq.models.ncde.LogODEVectorField; docs/log_ncde.md).

- The Lie bracket term [f_i, f_j](z) = J_{f_j} f_i − J_{f_i} f_j, read off the field with one level-2 coefficient
  set to 1, equals central differences of the Jacobian products (float64, 1e-7), for the MLP with every activation
  (its own column derivatives and the generic torch.func.jvp path agree to 1e-12) and a field with weights
  expanded in time.
- The sign: along e_1 by a then e_2 by b, λ_12 = ab/2 and the solve is exp(b A_2) exp(a A_1) z (BCH).
- Linear fields f_i(z) = A_i z with strictly upper triangular 3 × 3 A_i: their Lie algebra is nilpotent of step 2
  (brackets of brackets vanish), so the depth-2 log-signature determines the flow exactly, and the window's
  generator M is nilpotent (M³ = 0), so one rk4 step is exp(M) exactly. The log-ODE solve then equals the product
  of the segments' exact flows exp(Σ_i ΔX^i A_i) to rounding (1e-12), over several windows of several segments; a
  wrong bracket sign, or depth 1, is off by more than 1e-3.
- A nonlinear MLP field on one two-segment window of size ε: the depth-2 error against a fine CDE solve falls like
  ε³ (a wrong sign leaves ε², as depth 1 does).
- Depth 1 with one window per interval equals the NCDE on the linear control with the same weights (1e-10).
- Gradients through the bracket terms: a directional derivative of the loss matches central differences (float64),
  checkpointed gradients equal plain backpropagation (1e-10) and the continuous adjoint is close to both; at
  1,000 windows the checkpointed gradient equals plain backpropagation.
- The Lip(2) penalty against its formula; field_init_scale; the registry entry; bad input.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from neuralde_seq import SolverOptions, build_control, create_model, model_defaults, model_inputs, solve
from neuralde_seq.models.ncde import (
    ACTIVATION_SLOPES,
    ACTIVATIONS,
    BasisCDEVectorField,
    CDEVectorField,
    LogODEVectorField,
    NeuralCDE,
    log_ode_path_channels,
)
from neuralde_seq.solvers import RK4, Adjoint, Auto, Backprop, Checkpoint, Heun2

DTYPE = torch.float64


def random_path(batch: int, points: int, channels: int, seed: int, scale: float = 1.0):
    """Index times, a Gaussian random walk, and lengths that differ (padding must not matter)."""
    g = torch.Generator().manual_seed(seed)
    times = torch.arange(points, dtype=DTYPE).repeat(batch, 1)
    values = scale * torch.randn(batch, points, channels, generator=g, dtype=DTYPE).cumsum(1) / math.sqrt(points)
    lengths = torch.tensor([points - (points // 4) * (b % 3) for b in range(batch)])
    return times, values, lengths


def pair_index(d: int) -> list[tuple[int, int]]:
    """The Lyndon words ij, i < j, in lexicographic order: the order of the level-2 channels."""
    return [(i, j) for i in range(d) for j in range(i + 1, d)]


# ---------------------------------------------------------------------------------------------------
# the bracket term


def finite_difference_bracket(matrix, z, i, j, eps=1e-5):
    """J_{f_j}(z) f_i(z) − J_{f_i}(z) f_j(z) by central differences of the columns f_j, f_i."""
    f = matrix(z)

    def directional(column, tangent):
        return (matrix(z + eps * tangent)[..., column] - matrix(z - eps * tangent)[..., column]) / (2 * eps)

    return directional(j, f[..., i]) - directional(i, f[..., j])


def brackets_and_rate(dynamics, z, d, s=None):
    """Each bracket [f_i, f_j](z) (one level-2 coefficient 1, the rest 0), and the rate for a random log-signature."""
    pairs = pair_index(d)
    out = []
    for k in range(len(pairs)):
        dx = torch.zeros(z.shape[0], d + len(pairs), dtype=DTYPE)
        dx[:, d + k] = 1.0
        out.append(dynamics(z, None, dx, s) if s is not None else dynamics(z, None, dx))
    dx = torch.randn(z.shape[0], d + len(pairs), dtype=DTYPE, generator=torch.Generator().manual_seed(0))
    return out, dx, (dynamics(z, None, dx, s) if s is not None else dynamics(z, None, dx))


@pytest.mark.parametrize("kind", [*ACTIVATIONS, "basis"])
def test_bracket_term_matches_finite_differences(kind):
    """For the MLP with each activation, the field's own column derivatives and the generic torch.func.jvp path
    agree (1e-12) and match central differences (1e-7); a field with weights in a basis of s takes the generic
    path."""
    torch.manual_seed(0)
    hidden, d, batch = 5, 4, 6
    if kind == "basis":
        field = BasisCDEVectorField(hidden, d, 7, 2, "silu", "legendre", (0.0, 1.0), num_bases=3).to(DTYPE)
        s = torch.rand(batch, dtype=DTYPE)
        matrix = lambda z: field.matrix(z, s)  # noqa: E731
    else:
        field = CDEVectorField(hidden, d, 7, 2, kind).to(DTYPE)
        s, matrix = None, field.matrix
    dynamics = LogODEVectorField(field, 2)
    assert dynamics.use_column_derivatives == (kind != "basis")
    z = torch.randn(batch, hidden, dtype=DTYPE)
    brackets, dx, rate = brackets_and_rate(dynamics, z, d, s)
    if kind != "basis":
        dynamics.use_column_derivatives = False
        generic_brackets, _, generic_rate = brackets_and_rate(dynamics, z, d, s)
        for got, expected in zip(brackets + [rate], generic_brackets + [generic_rate]):
            assert torch.allclose(got, expected, rtol=0, atol=1e-12)
    expected_rate = (matrix(z) @ dx[:, :d, None]).squeeze(-1)
    for k, (i, j) in enumerate(pair_index(d)):
        expected = finite_difference_bracket(matrix, z, i, j)
        assert expected.abs().max() > 1e-3  # a bracket worth testing
        assert torch.allclose(brackets[k], expected, rtol=0, atol=1e-7), (i, j)
        expected_rate = expected_rate + dx[:, d + k, None] * expected
    # level 1 is f(z) λ, and the rate is linear in the log-signature
    assert torch.allclose(rate, expected_rate, rtol=0, atol=1e-7)


def test_every_activation_has_its_slope():
    """column_derivative_sum differentiates the activations by ACTIVATION_SLOPES: one per activation."""
    assert set(ACTIVATION_SLOPES) == set(ACTIVATIONS)
    x = torch.linspace(-25, 25, 1001, dtype=DTYPE)
    x = x[x.abs() > 1e-3]  # off ReLU's kink
    for name, activation in ACTIVATIONS.items():
        module = activation()
        numeric = torch.func.jacfwd(module)(x).diagonal()
        assert torch.allclose(ACTIVATION_SLOPES[name](x, module(x)), numeric, rtol=0, atol=1e-12), name


# ---------------------------------------------------------------------------------------------------
# exact for a linear field whose Lie algebra is nilpotent of step 2


class LinearField(nn.Module):
    """f_i(z) = A_i z: ``matrix(z)`` is (B, H, d) with column i = A_i z."""

    def __init__(self, matrices: torch.Tensor):
        super().__init__()
        self.A = nn.Parameter(matrices)  # (d, H, H)
        self.in_channels = matrices.shape[0]

    def matrix(self, z):
        return torch.einsum("ihk,bk->bhi", self.A, z)


def exact_linear_flow(A, path, length, z0):
    """z after the piecewise-linear path through path[:length]: Π_m exp(Σ_i ΔX_m^i A_i) applied in order."""
    z = z0
    for m in range(length - 1):
        step = path[m + 1] - path[m]
        z = torch.linalg.matrix_exp(torch.einsum("i,ihk->hk", step, A)) @ z
    return z


def test_log_ode_is_exact_for_a_step_two_nilpotent_linear_field():
    torch.manual_seed(1)
    d, hidden = 3, 3
    A = torch.randn(d, hidden, hidden, dtype=DTYPE).triu(1)  # strictly upper triangular: [A, [A, A]] = 0
    field = LinearField(A)
    times, values, lengths = random_path(4, 13, d, seed=2, scale=3.0)
    z0 = torch.randn(4, hidden, dtype=DTYPE)
    expected = torch.stack([exact_linear_flow(A, values[b], int(lengths[b]), z0[b]) for b in range(4)])
    control = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=4, time_channel=False)
    assert int(control.end_index.max()) == 3  # three windows of four segments
    with torch.no_grad():
        got = solve(LogODEVectorField(field, 2), control, z0, SolverOptions(RK4()))
        assert torch.allclose(got, expected, rtol=0, atol=1e-12 * float(expected.abs().max()))
        # the test bites: the opposite bracket sign, and depth 1 (no brackets), are far off
        flipped = build_control(
            times, values, lengths, interpolation="logsignature", depth=2, step=4, time_channel=False
        )
        flipped.coeffs[..., d:] *= -1
        wrong = solve(LogODEVectorField(field, 2), flipped, z0, SolverOptions(RK4()))
        assert float((wrong - expected).abs().max()) > 1e-3 * float(expected.abs().max())
        increments = build_control(
            times, values, lengths, interpolation="logsignature", depth=1, step=4, time_channel=False
        )
        depth_one = solve(LogODEVectorField(field, 1), increments, z0, SolverOptions(RK4()))
        assert float((depth_one - expected).abs().max()) > 1e-3 * float(expected.abs().max())


def test_two_segment_window_along_e1_then_e2_gets_half_the_product_of_its_steps():
    """The BCH check of the sign convention: along e_1 by a, then e_2 by b, λ_12 = ab/2 and the flow is
    exp(b A_2) exp(a A_1) = exp(a A_1 + b A_2 + (ab/2)(A_2 A_1 − A_1 A_2)) for A's in the Heisenberg algebra."""
    torch.manual_seed(3)
    A = torch.randn(2, 3, 3, dtype=DTYPE).triu(1)
    a, b = 0.7, -1.3
    values = torch.tensor([[[0.0, 0.0], [a, 0.0], [a, b]]], dtype=DTYPE)
    control = build_control(
        torch.arange(3, dtype=DTYPE)[None], values, interpolation="logsignature", depth=2, step=2, time_channel=False
    )
    assert torch.allclose(control.coeffs[0, 0, 0], torch.tensor([a, b, a * b / 2], dtype=DTYPE), atol=1e-15)
    z0 = torch.randn(1, 3, dtype=DTYPE)
    with torch.no_grad():
        got = solve(LogODEVectorField(LinearField(A), 2), control, z0, SolverOptions(RK4()))
    generator = a * A[0] + b * A[1] + a * b / 2 * (A[1] @ A[0] - A[0] @ A[1])
    flow = torch.linalg.matrix_exp(b * A[1]) @ torch.linalg.matrix_exp(a * A[0])
    assert torch.allclose(torch.linalg.matrix_exp(generator), flow, atol=1e-14)
    assert torch.allclose(got[0], flow @ z0[0], rtol=0, atol=1e-14)


# ---------------------------------------------------------------------------------------------------
# a nonlinear field: third-order local error


def test_depth_two_local_error_is_third_order_for_an_mlp_field():
    torch.manual_seed(4)
    hidden, d = 4, 2
    ncde = NeuralCDE(d, 2, hidden=hidden, width=16, activation="silu", solver=SolverOptions(RK4(step_size=0.02))).to(
        DTYPE
    )
    z0 = torch.randn(1, hidden, dtype=DTYPE)
    u, v = torch.tensor([1.0, 0.3], dtype=DTYPE), torch.tensor([-0.4, 1.0], dtype=DTYPE)
    errors = {1: [], 2: [], "flipped": []}
    for eps in (0.2, 0.1, 0.05):
        values = torch.stack([torch.zeros(d, dtype=DTYPE), eps * u, eps * (u + v)])[None]
        times = torch.arange(3, dtype=DTYPE)[None]
        linear = build_control(times, values, interpolation="linear", time_channel=False, parametrization="index")
        exact = ncde.hidden_states(linear, z0=z0)  # 100 rk4 steps per segment: error ~ 1e-13 here
        for depth in (1, 2, "flipped"):
            windows = build_control(
                times,
                values,
                interpolation="logsignature",
                depth=2 if depth == "flipped" else depth,
                step=2,
                time_channel=False,
            )
            if depth == "flipped":  # the opposite bracket sign
                windows.coeffs[..., d:] *= -1
            model = NeuralCDE(
                windows.channels,
                2,
                hidden=hidden,
                width=16,
                activation="silu",
                form="log-ode",
                control_depth=1 if depth == 1 else 2,
                solver=SolverOptions(RK4(step_size=0.02)),
            ).to(DTYPE)
            model.load_state_dict(ncde.state_dict())
            errors[depth].append(float((model.hidden_states(windows, z0=z0) - exact).detach().norm()))
    ratios = {depth: [e[k] / e[k + 1] for k in range(2)] for depth, e in errors.items()}
    assert all(7.5 < r < 8.5 for r in ratios[2]), (errors, ratios)  # O(ε³): 8x when ε halves
    assert all(3.5 < r < 4.5 for r in ratios[1] + ratios["flipped"]), (errors, ratios)  # O(ε²): 4x
    assert errors[2][-1] < 0.01 * errors[1][-1]


# ---------------------------------------------------------------------------------------------------
# depth 1 is the NCDE


def test_depth_one_equals_the_ncde_on_the_linear_control():
    torch.manual_seed(5)
    times, values, lengths = random_path(5, 17, 2, seed=6)
    linear = build_control(times, values, lengths, interpolation="linear", time_channel=True, parametrization="index")
    windows = build_control(times, values, lengths, interpolation="logsignature", depth=1, step=1, time_channel=True)
    ncde = NeuralCDE(3, 4, hidden=6, width=8, activation="silu").to(DTYPE)
    log_ncde = NeuralCDE(3, 4, hidden=6, width=8, activation="silu", form="log-ode", control_depth=1).to(DTYPE)
    log_ncde.load_state_dict(ncde.state_dict())  # the same field, initial map and readout
    assert torch.allclose(log_ncde(windows), ncde(linear), rtol=0, atol=1e-10)
    assert torch.allclose(
        log_ncde.hidden_states(windows, at_knots=True), ncde.hidden_states(linear, at_knots=True), rtol=0, atol=1e-10
    )


# ---------------------------------------------------------------------------------------------------
# gradients


def small_log_ncde(windows, solver, seed=7, **options):
    torch.manual_seed(seed)
    return NeuralCDE(
        windows.channels,
        3,
        hidden=5,
        width=6,
        activation="silu",
        form="log-ode",
        control_depth=2,
        solver=solver,
        **options,
    ).to(DTYPE)


def loss_of(model, control):
    logits = model(control)
    return (logits * torch.linspace(-1, 1, logits.numel(), dtype=DTYPE).view_as(logits)).sum()


def flat_gradient(model, control):
    loss = loss_of(model, control)
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()))])


def test_parameter_gradients_match_finite_differences():
    times, values, lengths = random_path(3, 21, 2, seed=8, scale=2.0)
    windows = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=4, time_channel=True)
    model = small_log_ncde(windows, SolverOptions(gradient=Backprop()))
    gradient = flat_gradient(model, windows)
    parameters = list(model.parameters())
    g = torch.Generator().manual_seed(9)
    for _ in range(2):
        direction = [torch.randn(p.shape, generator=g, dtype=DTYPE) for p in parameters]
        eps = 1e-6

        def shifted(sign):
            with torch.no_grad():
                for p, v in zip(parameters, direction):
                    p.add_(sign * eps * v)
                value = float(loss_of(model, windows))
                for p, v in zip(parameters, direction):
                    p.sub_(sign * eps * v)
            return value

        numeric = (shifted(1) - shifted(-1)) / (2 * eps)
        analytic = float(gradient @ torch.cat([v.flatten() for v in direction]))
        assert analytic == pytest.approx(numeric, rel=1e-7, abs=1e-9)
    # the field's own gradient (through the brackets) is a real part of it
    field_size = sum(p.numel() for p in model.field.parameters())
    assert float(gradient[:field_size].abs().max()) > 1e-4


def test_gradient_methods_agree():
    times, values, lengths = random_path(3, 21, 2, seed=10, scale=2.0)
    windows = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=4, time_channel=True)
    gradients = {}
    for method, gradient in (("backprop", Backprop()), ("checkpoint", Checkpoint(every=3)), ("adjoint", Adjoint())):
        model = small_log_ncde(windows, SolverOptions(Auto(fallback=RK4(step_size=0.25)), gradient=gradient))
        gradients[method] = flat_gradient(model, windows)
    reference = gradients["backprop"]
    scale = float(reference.abs().max())
    assert torch.allclose(gradients["checkpoint"], reference, rtol=0, atol=1e-10 * scale)
    # the continuous adjoint differentiates the ODE, not its rk4 steps: equal up to the discretisation error
    assert torch.allclose(gradients["adjoint"], reference, rtol=0, atol=1e-5 * scale)


def test_a_thousand_windows_checkpoint_equals_backprop():
    """At 1,000 windows (Heun's method, the authors' solver, two field evaluations per window)."""
    times, values, lengths = random_path(2, 2001, 2, seed=11, scale=3.0)
    windows = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=2, time_channel=True)
    assert int(windows.end_index.max()) == 1000
    gradients = {}
    for method, gradient in (("backprop", Backprop()), ("checkpoint", Checkpoint())):
        model = small_log_ncde(windows, SolverOptions(Heun2(), gradient=gradient))
        gradients[method] = flat_gradient(model, windows)
    reference = gradients["backprop"]
    assert bool(torch.isfinite(reference).all()) and float(reference.abs().max()) > 0
    assert torch.allclose(gradients["checkpoint"], reference, rtol=0, atol=1e-10 * float(reference.abs().max()))


# ---------------------------------------------------------------------------------------------------
# the penalty, the initialisation, the registry


def lip2_formula(field) -> float:
    """Σ_layers mean_r ‖W_r‖₂ + ‖b‖₂ over the field's linear layers, written out in Python floats."""
    total = 0.0
    for layer in field.net:
        if isinstance(layer, nn.Linear):
            rows = layer.weight.detach().tolist()
            total += sum(math.sqrt(sum(w * w for w in row)) for row in rows) / len(rows)
            total += math.sqrt(sum(b * b for b in layer.bias.detach().tolist()))
    return total


def test_penalty_is_the_lip2_bound_of_the_field():
    model = NeuralCDE(6, 2, hidden=4, width=5, depth=3, form="log-ode", control_depth=2).to(DTYPE)
    assert sum(isinstance(m, nn.Linear) for m in model.field.net) == 4
    assert float(model.penalty().detach()) == pytest.approx(lip2_formula(model.field), rel=1e-13)
    model.penalty().backward()  # differentiable in the field's parameters only
    assert model.field.net[0].weight.grad is not None and model.initial.weight.grad is None
    for other in (NeuralCDE(6, 2, hidden=4, form="rde", initial_channels=3), NeuralCDE(3, 2, hidden=4)):
        assert float(other.penalty().detach()) == pytest.approx(lip2_formula(other.field), rel=1e-6)  # every form
    with pytest.raises(ValueError, match="basis"):
        NeuralCDE(3, 2, basis="legendre", num_bases=2, basis_time_range=(0.0, 1.0)).penalty()


def test_field_init_scale_multiplies_the_fields_initial_weights():
    torch.manual_seed(12)
    plain = NeuralCDE(6, 2, hidden=4, form="log-ode", control_depth=2)
    torch.manual_seed(12)
    scaled = NeuralCDE(6, 2, hidden=4, form="log-ode", control_depth=2, field_init_scale=1e-3)
    for p, q in zip(plain.field.parameters(), scaled.field.parameters()):
        assert torch.equal(q, p * 1e-3)
    assert torch.equal(plain.initial.weight, scaled.initial.weight)  # only the field
    for bad in (0, -1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="field_init_scale"):
            NeuralCDE(3, 2, field_init_scale=bad)


def test_registry_entry_reads_depth_two_windows_with_the_papers_field():
    times, values, lengths = random_path(4, 30, 3, seed=13)
    inputs = model_inputs("log-ncde", times.float(), values.float(), lengths)
    assert inputs.piecewise_constant and inputs.channels == 4 + 6  # time + 3 channels: 4 increments, 6 areas
    model = create_model("log-ncde", inputs, 3)
    defaults = model_defaults("log-ncde")
    assert model.form == "log-ode" and model.control_depth == 2 and model.path_channels == 4
    assert model.initial_channels == 4 and defaults["activation"] == "silu" and defaults["field_init_scale"] == 1e-3
    logits = model(inputs)
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 0])) + 1e-3 * model.penalty()
    loss.backward()
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in model.parameters())
    # each sample gets the answer it gets alone, whatever the padding
    alone = model(inputs[2])
    assert torch.allclose(alone, logits[2:3], atol=1e-6)
    # depth 1 windows give a depth-1 model
    depth_one = model_inputs("log-ncde", times.float(), values.float(), lengths, depth=1)
    assert create_model("log-ncde", depth_one, 3).control_depth == 1


# ---------------------------------------------------------------------------------------------------
# bad input


def test_bad_input_is_refused_with_a_clear_error():
    times, values, lengths = random_path(2, 12, 2, seed=14)
    depth_two = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=3)
    model = NeuralCDE(depth_two.channels, 2, form="log-ode", control_depth=2).to(DTYPE)
    # depth 3: brackets of brackets
    depth_three = build_control(
        times, values, lengths, interpolation="logsignature", depth=3, step=3, logsig_backend="pysiglib"
    )
    with pytest.raises(ValueError, match="depth-3 .*brackets of brackets"):
        model(depth_three)
    with pytest.raises(ValueError, match="brackets of brackets"):
        NeuralCDE.log_ode_options(depth_three)
    with pytest.raises(ValueError, match="control_depth=3.*brackets of brackets"):
        NeuralCDE(depth_three.channels, 2, form="log-ode", control_depth=3)
    with pytest.raises(ValueError, match="control_depth=3.*brackets of brackets"):
        LogODEVectorField(CDEVectorField(4, 3), 3)
    # an interpolated control
    interpolated = build_control(times, values, lengths, interpolation="hermite_cubic")
    with pytest.raises(ValueError, match="log-ode.*interpolated control.*form='cde'"):
        model(interpolated)
    with pytest.raises(ValueError, match="interpolated control"):
        NeuralCDE.log_ode_options(interpolated)
    # windows with start values, the expand basis, another path
    with pytest.raises(ValueError, match="window_start_values=False"):
        model(
            build_control(
                times, values, lengths, interpolation="logsignature", depth=2, step=3, window_start_values=True
            )
        )
    expand = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=3, logsig_basis="expand")
    with pytest.raises(ValueError, match="expand"):
        model(expand)
    other_path = build_control(times, values[..., :1], lengths, interpolation="logsignature", depth=2, step=3)
    with pytest.raises(ValueError, match="2-channel path.*3-channel path"):
        model(other_path)
    # 3 channels are a 3-channel path at depth 1 or a 2-channel path at depth 2: the depth is never guessed
    depth_one = build_control(times, values, lengths, interpolation="logsignature", depth=1, step=3)
    ambiguous = NeuralCDE(3, 2, form="log-ode", control_depth=2).to(DTYPE)  # a 2-channel path, depth 2
    with pytest.raises(ValueError, match="depth-1 .*3-channel path.*depth-2 .*2-channel path"):
        ambiguous(depth_one)
    with pytest.raises(ValueError, match="needs control_depth"):
        NeuralCDE(6, 2, form="log-ode")
    with pytest.raises(ValueError, match="control_depth is read by form='log-ode' only"):
        NeuralCDE(6, 2, form="rde", initial_channels=3, control_depth=2)
    with pytest.raises(ValueError, match="d \\+ d\\(d−1\\)/2"):
        NeuralCDE(5, 2, form="log-ode", control_depth=2)
    with pytest.raises(ValueError, match="form must be"):
        NeuralCDE(6, 2, form="logode")
    with pytest.raises(ValueError, match="dx has 4 channels"):
        LogODEVectorField(CDEVectorField(4, 3), 2)(torch.zeros(2, 4), None, torch.zeros(2, 4))
    assert log_ode_path_channels(10, 2) == 4 and log_ode_path_channels(10, 1) == 10
