"""The solver and the models built on it, against independent solutions.

- Hebb (a rate that does not depend on W) integrates to W(t0) + ∫ rate ds: compared with Gauss-Legendre
  quadrature of the rate on every knot interval.
- Piecewise-constant controls: Hebb, Delta pre/post and Oja against the closed forms of
  docs/equations.md#closed-forms-on-constant-inputs, window by window.
- rk4's order of convergence, dopri5 against fine rk4.
- The continuous adjoint against backpropagation through the solver (parameters and control).
- Padded batches against samples alone; deeper models and sequence-to-sequence outputs by hand.

Every reference is computed in the test from the modules' weights (tests/fwp_reference.py).
"""

import math

import fwp_reference as ref
import numpy as np
import pytest
import torch
from torch import nn

from neuralde_seq.controls import Control, build_control
from neuralde_seq.fields import FastWeightField
from neuralde_seq.models import create_model
from neuralde_seq.solvers import RK4, Adjoint, Auto, Backprop, Dopri5, Exact, SolverOptions, parse_solver, solve

# Tiny tensors: one thread avoids OpenMP hand-offs that cost milliseconds per call on a busy 2-core box.

DTYPE = torch.float64
FORMS = ("ode", "cde", "rde")
MODEL_RULES = ("hebb", "oja", "delta", "delta-post")
LOGSIG = dict(interpolation="logsignature", depth=2, step=2)
# d_model above the number of control channels: LayerNorm's centred input then never passes near zero
# along a path, where LN(Linear(x)) has features of width ~sqrt(eps) that no quadrature or step resolves.
D_MODEL = 8


class FieldDynamics(nn.Module):
    """A FastWeightField as a dynamics: forward(state, x, dx) = field(state, x, dx)."""

    def __init__(self, field):
        super().__init__()
        self.field = field
        self.needs_value = field.needs_value
        self.needs_derivative = field.needs_derivative

    def forward(self, state, x, dx):
        return self.field(state, x, dx)


def make_data(lengths=(9, 6, 4), channels=2, seed=0, offset=0.7, dtype=DTYPE, T=None, scale=0.8):
    """Irregular observation times shared by the batch (starting at ``offset``), random-walk values and
    garbage after each sample's length (which must be ignored)."""
    g = torch.Generator().manual_seed(seed)
    T = T or max(lengths)
    B = len(lengths)
    gaps = 0.4 + 0.8 * torch.rand(T - 1, generator=g, dtype=torch.float64)
    t = offset + torch.cat([torch.zeros(1, dtype=torch.float64), gaps.cumsum(0)])
    times = t.expand(B, T).clone()
    values = scale * torch.randn(B, T, channels, generator=g, dtype=torch.float64).cumsum(1)
    for b, L in enumerate(lengths):
        values[b, L:] = 37.0  # padding garbage
    return times.to(dtype), values.to(dtype), torch.tensor(lengths)


def control_for(form, times, values, lengths, interpolation="hermite_cubic"):
    if form == "rde":
        return build_control(times, values, lengths, **LOGSIG)
    return build_control(times, values, lengths, interpolation=interpolation)


def alone(form, times, values, lengths, b, interpolation="hermite_cubic"):
    L = int(lengths[b])
    return control_for(form, times[b : b + 1, :L], values[b : b + 1, :L], None, interpolation)


def make_model(rule, form, channels, solver, seed=0, dtype=DTYPE, scale=0.6, **kw):
    torch.manual_seed(seed)
    model = create_model(f"{rule}-{form}", channels, 3, d_model=D_MODEL, n_heads=2, solver=solver, **kw).to(dtype)
    ref.randomize_(model, torch.Generator().manual_seed(seed + 1), scale=scale)
    return model


def hand_pieces(control, b, i, f):
    """(x, dx) of sample b on knot interval i at offsets f, from the polynomial coefficients by hand."""
    a, b1, c, d = control.coeffs[b, i].unbind(0)
    f = f.unsqueeze(-1)
    if control.piecewise_constant:
        return a.expand(f.shape[0], -1), a.expand(f.shape[0], -1)
    return a + b1 * f + c * f**2 + d * f**3, b1 + 2 * c * f + 3 * d * f**2


def hand_final(control):
    """(x(T), x'(T)) of every sample at its own final knot, from the left (the last piece)."""
    xs, dxs = [], []
    for b in range(control.batch_size):
        e = int(control.end_index[b])
        f = (control.knots[e] - control.knots[e - 1]).reshape(1)
        x, dx = hand_pieces(control, b, e - 1, f)
        xs.append(x[0])
        dxs.append(dx[0])
    return torch.stack(xs), torch.stack(dxs)


# ------------------------------------------------------------------------------ Hebb: quadrature
@pytest.mark.parametrize(
    "form,method", [("ode", "hermite_cubic"), ("ode", "natural_cubic"), ("cde", "hermite_cubic"), ("cde", "linear")]
)
def test_hebb_equals_quadrature_of_its_rate(form, method):
    """dW/ds = rate(x(s), x'(s)) does not depend on W: W(T_b) = W(t0) + ∫_{t0}^{T_b} rate ds for every
    sample of a padded batch, the integral by 16-point Gauss-Legendre on four parts of each knot interval.
    ("cde", "linear") has a derivative that jumps at every knot; the padded sample's path is constant after
    its end, so its derivative jumps there too."""
    times, values, lengths = make_data(lengths=(8, 5), seed=1, scale=0.5)
    control = build_control(times, values, lengths, interpolation=method)
    torch.manual_seed(0)
    field = FastWeightField(control.channels, D_MODEL, 2, "hebb", form=form).to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(2), scale=0.6)
    W0 = torch.randn(2, 2, 4, 4, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    with torch.no_grad():
        got = solve(FieldDynamics(field), control, W0, SolverOptions(RK4(step_size=0.01), gradient=Backprop()))

    nodes, weights = (torch.tensor(a, dtype=DTYPE) for a in np.polynomial.legendre.leggauss(16))
    sources = ref.expected_sources("hebb", form)
    for b in range(2):
        total = W0[b].clone()
        for i in range(int(control.end_index[b])):
            width = (control.knots[i + 1] - control.knots[i]) / 4
            f = torch.cat([(m + (nodes + 1) / 2) * width for m in range(4)])
            x, dx = hand_pieces(control, b, i, f)
            rates = ref.field_rate(field, "hebb", sources, None, x, dx)  # (nodes, H, d, d)
            total += torch.einsum("n,nhij->hij", weights.repeat(4) * width / 2, rates)
        torch.testing.assert_close(got[b], total, rtol=0, atol=1e-8)
        assert (total - W0[b]).abs().max() > 0.1  # the integral is not trivially small


# ---------------------------------------------- piecewise-constant: docs/equations.md#closed-forms-on-constant-inputs
def _piecewise_controls():
    times, values, lengths = make_data(lengths=(13, 8), seed=4)
    logsig = build_control(times, values, lengths, **LOGSIG)  # windows [j, j+1): 6 and 4 windows
    g = torch.Generator().manual_seed(5)
    knots = torch.tensor([0.0, 0.5, 2.2, 2.5, 3.75, 4.0], dtype=DTYPE)  # windows of different lengths
    coeffs = torch.zeros(2, 6, 4, 3, dtype=DTYPE)  # one piece per window, and one past the last knot
    coeffs[:, :5, 0] = 1.5 * torch.randn(2, 5, 3, generator=g, dtype=DTYPE)
    coeffs[1, 3:, 0] = 0.0  # sample 1 ends after 3 windows
    coeffs[:, :, 1:] = 9.0  # must be ignored by a piecewise-constant control
    hand = Control(knots, coeffs, torch.tensor([5, 3]), piecewise_constant=True)
    return {"logsig": logsig, "hand": hand}


def _closed_form_solution(rule, field, control, W0):
    out = []
    for b in range(control.batch_size):
        W = W0[b : b + 1]
        for j in range(int(control.end_index[b])):
            u = control.coeffs[b : b + 1, j, 0]
            h = float(control.knots[j + 1] - control.knots[j])
            W = ref.closed_form_step(rule, W, *ref.projections(field, u, u, ("x", "x")), h)
        out.append(W[0])
    return torch.stack(out)


@pytest.mark.parametrize("rule", ["hebb", "delta", "delta-post", "oja"])
@pytest.mark.parametrize("kind", ["logsig", "hand"])
@pytest.mark.parametrize("solver", ["rk4", "dopri5"])
def test_piecewise_constant_closed_forms(rule, kind, solver):
    control = _piecewise_controls()[kind]
    torch.manual_seed(0)
    field = FastWeightField(control.channels, D_MODEL, 2, rule, form="rde").to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(6), scale=0.7)
    W0 = torch.randn(2, 2, 4, 4, generator=torch.Generator().manual_seed(7), dtype=DTYPE)
    options = (
        SolverOptions(RK4(step_size=1 / 128), gradient=Backprop())
        if solver == "rk4"
        else SolverOptions(Dopri5(rtol=1e-11, atol=1e-11), gradient=Backprop())
    )
    with torch.no_grad():
        got = solve(FieldDynamics(field), control, W0, options)
    expected = _closed_form_solution(rule, field, control, W0)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-8)
    assert (expected - W0).abs().max() > 0.1


def test_delta_post_large_error_closed_form():
    """Post-delta far from its target (|x_v − W k| over 20, tanh saturated): the closed form
    asinh(sinh(e0) e^{−c‖k‖²h}) still matches the solver window by window."""
    control = _piecewise_controls()["hand"]
    torch.manual_seed(0)
    field = FastWeightField(control.channels, D_MODEL, 2, "delta-post", form="rde").to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(8), scale=0.7)
    W0 = 30 * torch.randn(2, 2, 4, 4, generator=torch.Generator().manual_seed(9), dtype=DTYPE)
    u0 = control.coeffs[:, 0, 0]
    k_raw, v_raw, _ = ref.projections(field, u0, u0, ("x", "x"))
    e0 = v_raw - torch.einsum("bhij,bhj->bhi", W0, torch.softmax(k_raw, -1))
    assert e0.abs().max() > 20
    with torch.no_grad():
        got = solve(FieldDynamics(field), control, W0, SolverOptions(RK4(step_size=1 / 128), gradient=Backprop()))
    torch.testing.assert_close(got, _closed_form_solution("delta-post", field, control, W0), rtol=1e-10, atol=1e-8)


# ------------------------------------------------------------------------------- convergence
def _smooth_setup(rule="delta", form="cde", interpolation="natural_cubic"):
    g = torch.Generator().manual_seed(10)
    T = 6
    times = torch.arange(T, dtype=DTYPE).expand(2, T)  # unit knot gaps: h, h/2, h/4 are exact halvings
    values = 0.5 * torch.randn(2, T, 2, generator=g, dtype=DTYPE).cumsum(1)
    control = build_control(times, values, torch.tensor([6, 5]), interpolation=interpolation)
    torch.manual_seed(0)
    field = FastWeightField(control.channels, D_MODEL, 2, rule, form=form).to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(11), scale=0.5)
    W0 = torch.randn(2, 2, 4, 4, generator=torch.Generator().manual_seed(12), dtype=DTYPE)
    return FieldDynamics(field), control, W0


@pytest.mark.parametrize("rule,method", [("delta", "natural_cubic"), ("oja", "hermite_cubic")])
def test_rk4_fourth_order(rule, method):
    dynamics, control, W0 = _smooth_setup(rule=rule, interpolation=method)
    with torch.no_grad():
        reference = solve(dynamics, control, W0, SolverOptions(RK4(step_size=1 / 256), gradient=Backprop()))
        errors = [
            (solve(dynamics, control, W0, SolverOptions(RK4(step_size=h), gradient=Backprop())) - reference)
            .abs()
            .max()
            .item()
            for h in (1 / 16, 1 / 32, 1 / 64)
        ]
    orders = [math.log2(errors[i] / errors[i + 1]) for i in range(2)]
    print(f"\nrk4 {rule} {method}: errors {errors}, observed orders {orders}")
    assert errors[-1] > 1e-11  # still well above the reference's error and round-off
    for order in orders:
        assert 3.5 < order < 4.5, (errors, orders)


@pytest.mark.parametrize("form", FORMS)
def test_dopri5_agrees_with_fine_rk4(form):
    if form == "rde":
        times, values, lengths = make_data(lengths=(9, 6), seed=13)
        control = build_control(times, values, lengths, **LOGSIG)
        torch.manual_seed(0)
        field = FastWeightField(control.channels, D_MODEL, 2, "delta-post", form="rde").to(DTYPE)
        ref.randomize_(field, torch.Generator().manual_seed(11), scale=0.7)
        dynamics = FieldDynamics(field)
        W0 = torch.randn(2, 2, 4, 4, generator=torch.Generator().manual_seed(12), dtype=DTYPE)
    else:
        dynamics, control, W0 = _smooth_setup(rule="delta-post", form=form, interpolation="hermite_cubic")
    with torch.no_grad():
        fine = solve(dynamics, control, W0, SolverOptions(RK4(step_size=1 / 128), gradient=Backprop()))
        adaptive = solve(dynamics, control, W0, SolverOptions(Dopri5(rtol=1e-11, atol=1e-11), gradient=Backprop()))
    assert (fine - W0).abs().max() > 0.1
    torch.testing.assert_close(adaptive, fine, rtol=0, atol=1e-8)


# ------------------------------------------------------------------------------------ adjoint
def _gradients(model, control, weights):
    """Gradients of sum(weights · logits) w.r.t. every parameter and the control's coefficients."""
    model.zero_grad()
    coeffs = control.coeffs.detach().clone().requires_grad_(True)
    control = Control(control.knots, coeffs, control.end_index, control.piecewise_constant)
    (model(control) * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    grads["control.coeffs"] = coeffs.grad.clone()
    for name, g in grads.items():
        assert g.abs().max() > 0, f"no gradient reaches {name}"
    return grads


def _relative_error(a, b):
    return ((a - b).norm() / b.norm()).item()


def _worst(grads, reference):
    errors = {name: _relative_error(g, reference[name]) for name, g in grads.items()}
    name = max(errors, key=errors.get)
    return name, errors[name]


def _adjoint_setup(rule, form):
    times, values, lengths = make_data(lengths=(7, 5), seed=20)
    control = control_for(form, times, values, lengths)
    weights = torch.randn(2, 3, generator=torch.Generator().manual_seed(21), dtype=DTYPE)

    def grads(method, adjoint):
        solver = SolverOptions(method, gradient=Adjoint() if adjoint else Backprop())
        model = make_model(rule, form, control.channels, solver, scale=0.5)  # same seed: same parameters
        return _gradients(model, control, weights)

    return grads


@pytest.mark.parametrize("rule", MODEL_RULES)
@pytest.mark.parametrize("form", FORMS)
def test_adjoint_matches_backprop(rule, form):
    """Fixed-step rk4 (steps of 1/16): the continuous adjoint, solved backwards on the same grid, agrees with
    backpropagation through the solver for every parameter and for the control's coefficients."""
    grads = _adjoint_setup(rule, form)
    method = RK4(step_size=1 / 16)
    direct, adjoint = grads(method, False), grads(method, True)
    name, err = _worst(adjoint, direct)
    print(f"\n{rule}-{form}: rk4 h=1/16 adjoint vs backprop, worst relative error {err:.2e} ({name})")
    assert err <= 1e-4


@pytest.mark.parametrize("rule,form", [("hebb", "ode"), ("oja", "cde"), ("delta-post", "rde")])
def test_dopri5_adjoint_matches_exact_gradient(rule, form):
    """dopri5 (rtol = atol = 1e-10) with the adjoint against backprop through fine rk4 (h = 1/64), whose
    gradient is exact up to O(h^4)."""
    grads = _adjoint_setup(rule, form)
    exact = grads(RK4(step_size=1 / 64), False)
    adjoint = grads(Dopri5(rtol=1e-10, atol=1e-10), True)
    name, err = _worst(adjoint, exact)
    print(f"\n{rule}-{form}: dopri5 adjoint vs exact, worst relative error {err:.2e} ({name})")
    assert err <= 1e-4


@pytest.mark.parametrize("rule,form", [("hebb", "ode"), ("delta", "cde"), ("delta-post", "rde")])
def test_dopri5_backprop_matches_exact_gradient(rule, form):
    """Backprop() with dopri5 must give the gradient to the solver's accuracy too.

    Two things break it for interpolated controls: the vector field reads the control at s.detach(), so the
    dependence of the adaptive step sizes on the parameters (which torchdiffeq differentiates) no longer
    cancels; and the knots, where the sensitivities to the control's coefficients jump, are not steps."""
    grads = _adjoint_setup(rule, form)
    exact = grads(RK4(step_size=1 / 64), False)
    direct = grads(Dopri5(rtol=1e-10, atol=1e-10), False)
    name, err = _worst(direct, exact)
    print(f"\n{rule}-{form}: dopri5 backprop vs exact, worst relative error {err:.2e} ({name})")
    assert err <= 1e-4, (name, err)


def test_adjoint_rk4_error_shrinks_with_step():
    """The continuous adjoint of fixed-step rk4 differs from exact backprop by O(h^4)."""
    grads = _adjoint_setup("delta", "cde")
    errors = []
    for h in (1 / 8, 1 / 32):
        errors.append(_worst(grads(RK4(step_size=h), True), grads(RK4(step_size=h), False))[1])
    print(f"\nrk4 adjoint vs backprop, worst relative error at h=1/8, 1/32: {errors}")
    assert errors[1] < errors[0] / 64  # better than third order over two halvings (4th: / 256)
    assert errors[1] > 1e-12  # the two really are different computations


# ------------------------------------------------------------------------------ variable length
SOLVERS = {
    "rk4": SolverOptions(RK4(step_size=0.3), gradient=Backprop()),  # 0.3 divides no knot gap
    "rk4-per-knot": SolverOptions(RK4(step_size=None), gradient=Backprop()),
    # Samples of a batch share adaptive steps, so alone and batched agree to the tolerance, not exactly.
    "dopri5": SolverOptions(Dopri5(rtol=1e-10, atol=1e-10), gradient=Backprop()),
}


@pytest.mark.parametrize("rule", MODEL_RULES)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("solver", list(SOLVERS))
def test_padded_batch_equals_alone(rule, form, solver):
    times, values, lengths = make_data(lengths=(9, 6, 4), seed=30)
    control = control_for(form, times, values, lengths)
    model = make_model(rule, form, control.channels, SOLVERS[solver])
    with torch.no_grad():
        batch = model(control)
        for b in range(3):
            single = model(alone(form, times, values, lengths, b))
            torch.testing.assert_close(batch[b], single[0], rtol=0, atol=1e-6)
        assert (batch[0] - batch[1]).abs().max() > 1e-3


@pytest.mark.parametrize("form", FORMS)
def test_padded_batch_equals_alone_float32(form):
    times, values, lengths = make_data(lengths=(9, 6, 4), seed=31, dtype=torch.float32)
    control = control_for(form, times, values, lengths)
    model = make_model("delta-post", form, control.channels, SOLVERS["rk4"], dtype=torch.float32)
    with torch.no_grad():
        batch = model(control)
        assert batch.dtype == torch.float32
        for b in range(3):
            single = model(alone(form, times, values, lengths, b))
            torch.testing.assert_close(batch[b], single[0], rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------- deeper model
DEEP_CASES = [("delta", "cde"), ("oja", "cde"), ("hebb", "ode"), ("delta-post", "rde")]


@pytest.mark.parametrize("rule,form", DEEP_CASES)
def test_two_layer_model_by_hand(rule, form):
    """num_layers=2: layer 2's rate is its own (ODE-form) field driven by layer 1's readout; the initial
    states, the solve and the final readout chain all follow Eq. 33-35 computed by hand."""
    times, values, lengths = make_data(lengths=(8, 5), seed=40)
    control = control_for(form, times, values, lengths)
    model = make_model(
        rule, form, control.channels, SolverOptions(RK4(step_size=0.25), gradient=Backprop()), num_layers=2
    )
    net = model.network
    l1, l2 = net.layers
    s1, s2 = ref.expected_sources(rule, form), ("x", "x")
    assert (l2.field.key_source, l2.field.value_source) == s2 and l2.field.in_channels == l1.d_model
    g = torch.Generator().manual_seed(41)
    B, H, d = 2, l1.field.n_heads, l1.field.head_dim

    with torch.no_grad():
        # 1. the coupled rate at a random state
        state = torch.randn(B, 2, H, d, d, generator=g, dtype=DTYPE)
        x = torch.randn(B, control.channels, generator=g, dtype=DTYPE)
        dx = torch.randn(B, control.channels, generator=g, dtype=DTYPE)
        rates = net.dynamics(state, x if l1.field.needs_value else None, dx if l1.field.needs_derivative else None)
        y1 = ref.layer_readout(l1, rule, s1, state[:, 0], x, dx)
        torch.testing.assert_close(
            rates[:, 0], ref.field_rate(l1.field, rule, s1, state[:, 0], x, dx), rtol=0, atol=1e-12
        )
        torch.testing.assert_close(
            rates[:, 1], ref.field_rate(l2.field, rule, s2, state[:, 1], y1, None), rtol=0, atol=1e-12
        )

        # 2. rank-one initial states: layer 2 writes from layer 1's readout of its own initial state
        x0 = torch.stack([hand_pieces(control, b, 0, torch.zeros(1, dtype=DTYPE))[0][0] for b in range(B)])
        dx0 = torch.stack([hand_pieces(control, b, 0, torch.zeros(1, dtype=DTYPE))[1][0] for b in range(B)])
        W1 = ref.field_rate(l1.field, rule, s1, None, x0, dx0)
        W2 = ref.field_rate(l2.field, rule, s2, None, ref.layer_readout(l1, rule, s1, W1, x0, dx0), None)
        initial = torch.stack([W1, W2], dim=1)

        # 3. the model's output is the readout chain at each sample's own T
        final = solve(net.dynamics, control, initial, net.solver)
        xT, dxT = hand_final(control)
        out = ref.layer_readout(l2, rule, s2, final[:, 1], ref.layer_readout(l1, rule, s1, final[:, 0], xT, dxT), None)
        # the classifier's final LayerNorm (Hebb's rule only: its fast weights grow with the length), then its head
        if rule == "hebb":
            out = ref.layer_norm(out, model.output_norm)
        else:
            assert isinstance(model.output_norm, torch.nn.Identity)
        logits = ref.linear(out, model.head.weight, model.head.bias)
        torch.testing.assert_close(model(control), logits, rtol=0, atol=1e-10)
        assert (final[:, 1] - initial[:, 1]).abs().max() > 1e-2  # layer 2 really evolves


@pytest.mark.parametrize("rule,form", DEEP_CASES)
@pytest.mark.parametrize("solver", ["rk4", "dopri5"])
def test_two_layer_padded_batch_equals_alone(rule, form, solver):
    times, values, lengths = make_data(lengths=(9, 6, 4), seed=42)
    control = control_for(form, times, values, lengths)
    model = make_model(rule, form, control.channels, SOLVERS[solver], num_layers=2)
    with torch.no_grad():
        batch = model(control)
        for b in range(3):
            torch.testing.assert_close(batch[b], model(alone(form, times, values, lengths, b))[0], rtol=0, atol=1e-6)


# ------------------------------------------------------------------------- sequence to sequence
@pytest.mark.parametrize("rule,form", [("delta", "cde"), ("oja", "ode"), ("delta-post", "rde"), ("hebb", "cde")])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_outputs_at_knots(rule, form, num_layers):
    """at_knots=True: the output at a sample's last knot (and at every later knot) is its final output,
    and (causality) the output at knot i is the output of the sample cut off at knot i."""
    times, values, lengths = make_data(lengths=(9, 7), seed=50)
    control = control_for(form, times, values, lengths)
    model = make_model(
        rule, form, control.channels, SolverOptions(RK4(step_size=0.25), gradient=Backprop()), num_layers=num_layers
    )
    net = model.network
    with torch.no_grad():
        seq = net(control, at_knots=True)
        final = net(control)
        assert seq.shape == (2, control.knots.shape[0], net.d_model)
        for b in range(2):
            e = int(control.end_index[b])
            for i in range(e, seq.shape[1]):
                torch.testing.assert_close(seq[b, i], final[b], rtol=0, atol=1e-10)
            # causality: knot i of the interpolated path is observation i; of log-signatures, point 2i
            for i in range(1, e):
                points = i + 1 if form != "rde" else LOGSIG["step"] * i + 1
                cut = control_for(form, times[b : b + 1, :points], values[b : b + 1, :points], None)
                torch.testing.assert_close(seq[b, i], net(cut)[0], rtol=0, atol=1e-10)


# ------------------------------------------------------------------------------ the default method
def test_default_method_is_auto_and_its_options():
    """The default is Auto() (tests/test_exact.py checks what it solves); the exact path's options are accepted
    with it (by its exact part) and refused with a step method; last_method says what a solve used; an explicit
    rk4 solve of an RDE field is the rk4 answer, not the closed form's."""
    assert SolverOptions().method == Auto() and SolverOptions().last_method is None
    assert parse_solver({"chunk_size": 8, "compile": True}).method.exact == Exact(chunk_size=8, compile=True)
    for method, name in (("rk4", "RK4"), ("dopri5", "Dopri5")):
        with pytest.raises(ValueError, match=f"chunk_size is an option of Exact, not of {name}"):
            parse_solver({"method": method, "chunk_size": 8})
    with pytest.raises(ValueError, match="'auto'"):
        parse_solver("closed-form")
    control = _piecewise_controls()["hand"]
    torch.manual_seed(0)
    field = FastWeightField(control.channels, D_MODEL, 2, "delta", form="rde").to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(6), scale=0.7)
    W0 = torch.randn(2, 2, 4, 4, generator=torch.Generator().manual_seed(7), dtype=DTYPE)
    auto, rk4 = SolverOptions(), SolverOptions(RK4())
    with torch.no_grad():
        default, forced = solve(field, control, W0, auto), solve(field, control, W0, rk4)
    assert (auto.last_method, rk4.last_method) == (Exact(), RK4())
    expected = _closed_form_solution("delta", field, control, W0)
    torch.testing.assert_close(default, expected, rtol=0, atol=1e-12)
    assert (forced - expected).abs().max() > 1e-6  # one rk4 step per window: rk4's error, not the closed form
