"""The exact solver (neuralde_seq.solvers.exact_fast_weights, the method Exact()) against independent
solutions.

- Solutions: against the torchdiffeq reference (rk4 with a step <= 1/16 of every window, float64), for every
  rule and every field form that has constant inputs on a window: "rde"/"cde" fields on log-signature
  controls and on a hand-made piecewise-constant control with windows of unequal lengths, and "cde" with
  ``dx_only`` on piecewise-linear (linear, rectilinear) controls; variable lengths, final states and the
  states at every knot; several checkpoint segments.
- Gradients: whole models (parameters and the control's coefficients) against backpropagation through the
  reference solver.
- Fast path against its reference, ``solve_exact_reference`` (a loop of ``rule.exact_step`` differentiated by
  autograd): states and gradients in float64 for every rule, on log-signature, hand-made (unequal windows) and
  rectilinear controls, padded batches, final states and states at every knot.
- The backward pass keeps no per-step fast weights: the bytes autograd saves are counted exactly.
- Numerics: the closed forms' safe branches (norm → 0, |e0| beyond sinh's float32 range) against float64.
- torch.compile (post-Delta's step) agrees with eager; refused configurations raise ValueError.
- The default method ``Auto()``: on log-signature windows of a 1,000-point series every rule's RDE model is
  bit-for-bit the Exact() model (outputs and gradients), and within rk4's error of RK4(), an error
  that falls 2⁴-fold per halved step; x'-only CDEs on piecewise-linear controls are exact too; models without a
  closed form (NCDE, CDE forms on cubic controls, two-layer networks, ODE-RNN's gaps) are bit-for-bit rk4 with
  the step size and gradient method given; the exact path's options reach it, and no adjoint is blamed for a
  closed-form solve.
"""

import math
import shutil

import fwp_reference as ref
import pytest
import torch
from test_solvers import FieldDynamics, make_data

from neuralde_seq.controls import Control, build_control
from neuralde_seq.fields import FastWeightField
from neuralde_seq.models import create_model, model_inputs
from neuralde_seq.rules import make_rule, relax_error, relaxation_rate
from neuralde_seq.solvers import (
    RK4,
    Adjoint,
    Auto,
    Backprop,
    Checkpoint,
    Dopri5,
    Exact,
    SolverOptions,
    parse_solver,
    solve,
)
from neuralde_seq.solvers import exact_fast_weights as exact

DTYPE = torch.float64
RULES = ("hebb", "oja", "delta", "delta-post")
D_MODEL = 8
LOGSIG = dict(interpolation="logsignature", depth=2, step=1)


def _controls():
    """A log-signature control (windows of length 1; lengths 12, 8, 4 windows) and a hand-made
    piecewise-constant one with windows of unequal length (sample 1 ends after 3 windows)."""
    times, values, lengths = make_data(lengths=(13, 9, 5), seed=4, scale=0.4)
    logsig = build_control(times, values, lengths, **LOGSIG)
    g = torch.Generator().manual_seed(5)
    knots = torch.tensor([0.0, 0.5, 2.2, 2.5, 3.75, 4.0], dtype=DTYPE)
    coeffs = torch.zeros(2, 6, 4, 3, dtype=DTYPE)
    coeffs[:, :5, 0] = 1.5 * torch.randn(2, 5, 3, generator=g, dtype=DTYPE)
    coeffs[1, 3:, 0] = 0.0
    coeffs[:, :, 1:] = 9.0  # never read for a piecewise-constant control
    hand = Control(knots, coeffs, torch.tensor([5, 3]), piecewise_constant=True)
    return {"logsig": logsig, "hand": hand}


def _reference_options(control):
    # rk4 with at least 16 steps on the shortest window.
    gaps = control.knots[1:] - control.knots[:-1]
    return SolverOptions(RK4(step_size=float(gaps.min()) / 16), gradient=Backprop())


def _field(rule, form, channels, seed=6, scale=0.7, **options):
    torch.manual_seed(0)
    field = FastWeightField(channels, D_MODEL, 2, rule, form=form, **options).to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(seed), scale=scale)
    return field


# "rde" on both controls; "cde" (keys from x or x' by rule) and Hebb's key/value swap on log-signatures, where
# x = x' = the window's rate.
FIELD_CASES = (
    [(rule, "rde", {}, kind) for rule in RULES for kind in ("logsig", "hand")]
    + [(rule, "cde", {}, "logsig") for rule in RULES]
    + [("hebb", "cde", {"hebb_swap": True}, "logsig")]
)


@pytest.fixture(scope="module")
def controls():
    return _controls()


@pytest.mark.parametrize("rule,form,options,kind", FIELD_CASES)
def test_exact_matches_reference_on_piecewise_constant_controls(controls, kind, rule, form, options):
    """Final states and states at every knot agree with fine rk4 to 1e-6 (padded batch, each sample ending at
    its own knot); segments of 4 windows, so that they are crossed several times."""
    control = controls[kind]
    field = _field(rule, form, control.channels, **options)
    W0 = torch.randn(control.batch_size, 2, 4, 4, generator=torch.Generator().manual_seed(7), dtype=DTYPE)
    with torch.no_grad():
        expected = solve(FieldDynamics(field), control, W0, _reference_options(control), at_knots=True)
        got_knots = solve(field, control, W0, SolverOptions(Exact(chunk_size=4)), at_knots=True)
        got_final = solve(field, control, W0, SolverOptions(Exact(chunk_size=4)))
    torch.testing.assert_close(got_knots, expected, rtol=0, atol=1e-6)
    final = expected[torch.arange(control.batch_size), control.end_index]
    torch.testing.assert_close(got_final, final, rtol=0, atol=1e-6)
    assert (final - W0).abs().max() > 0.1  # the fast weights really moved


@pytest.mark.parametrize("rule,method", [(rule, "rectilinear") for rule in RULES] + [("delta", "linear")])
def test_exact_matches_reference_on_piecewise_linear_controls(rule, method):
    """A "cde" field with dx_only reads only X', which is constant on each piece of a linear or rectilinear
    control (rectilinear: two pieces per observation interval)."""
    times, values, lengths = make_data(lengths=(8, 5), seed=8, scale=0.5)
    control = build_control(times, values, lengths, interpolation=method)
    field = _field(rule, "cde", control.channels, seed=9, dx_only=True)
    W0 = torch.randn(2, 2, 4, 4, generator=torch.Generator().manual_seed(10), dtype=DTYPE)
    with torch.no_grad():
        expected = solve(FieldDynamics(field), control, W0, _reference_options(control), at_knots=True)
        got = solve(field, control, W0, SolverOptions(Exact(chunk_size=5)), at_knots=True)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert (expected[:, -1] - W0).abs().max() > 0.05


@pytest.mark.parametrize("rule", RULES)
def test_exact_gradients_match_reference(controls, rule):
    """A whole classifier (rank-one initial state, readout, head): logits and the gradients of every parameter
    and of the control's coefficients agree with backpropagation through fine rk4 to 1e-5 (relative to each
    gradient's largest entry); outputs at every knot too."""
    control = controls["logsig"]
    coeffs = control.coeffs.clone()
    weights = torch.randn(3, 3, generator=torch.Generator().manual_seed(11), dtype=DTYPE)
    results = {}
    for name, solver in (("reference", _reference_options(control)), ("exact", SolverOptions(Exact(chunk_size=3)))):
        torch.manual_seed(0)
        model = create_model(f"{rule}-rde", control.channels, 3, d_model=D_MODEL, n_heads=2, solver=solver).to(DTYPE)
        ref.randomize_(model, torch.Generator().manual_seed(12), scale=0.5)
        leaf = coeffs.clone().requires_grad_()
        ctrl = Control(control.knots, leaf, control.end_index, True)
        logits = model(ctrl)
        (logits * weights).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()] + [leaf.grad.clone()]
        with torch.no_grad():
            outputs = model.network(ctrl, at_knots=True)
        results[name] = (logits.detach(), grads, outputs)
    (l_ref, g_ref, o_ref), (l_ex, g_ex, o_ex) = results["reference"], results["exact"]
    torch.testing.assert_close(l_ex, l_ref, rtol=0, atol=1e-6)
    torch.testing.assert_close(o_ex, o_ref, rtol=0, atol=1e-6)
    for a, b in zip(g_ex, g_ref):
        scale = b.abs().max().clamp(min=1e-3)
        assert float((a - b).abs().max() / scale) < 1e-5
    assert g_ref[-1].abs().max() > 1e-3  # the control's gradient is not trivially zero


def _saved_bytes(function):
    """Bytes of the distinct tensors autograd saves for the backward pass while ``function`` runs."""
    seen = {}

    def pack(tensor):
        seen[(tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))] = (
            tensor.numel() * tensor.element_size()
        )
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = function()
    return out, sum(seen.values())


@pytest.mark.parametrize("rule", RULES)
def test_backward_pass_saves_only_segment_starts(rule):
    """The forward pass saves exactly: the fast weights at each segment's start, the control's rates and the
    window lengths (O(T·C)), and the field's parameters; nothing per step of size d². A solver that
    backpropagated through its steps would save at least T·B·H·d² numbers. The gradients still equal those of
    autograd through the rule's exact step, applied window by window."""
    B, H, d, C, T, chunk = 2, 2, 16, 3, 200, 20
    g = torch.Generator().manual_seed(13)
    coeffs = torch.zeros(B, T + 1, 4, C, dtype=DTYPE)
    coeffs[:, :T, 0] = torch.randn(B, T, C, generator=g, dtype=DTYPE)
    control = Control(torch.arange(T + 1, dtype=DTYPE), coeffs, torch.tensor([T, T - 37]), piecewise_constant=True)
    torch.manual_seed(0)
    field = FastWeightField(C, H * d, H, rule, form="rde").to(DTYPE)
    W0 = (0.1 * torch.randn(B, H, d, d, generator=g, dtype=DTYPE)).requires_grad_()
    W, saved = _saved_bytes(lambda: solve(field, control, W0, SolverOptions(Exact(chunk_size=chunk))))
    itemsize = 8
    segment_starts = B * (T // chunk) * H * d * d
    expected = itemsize * (segment_starts + B * T * C + B * T) + sum(p.numel() * itemsize for p in field.parameters())
    assert saved == expected
    assert saved < 0.1 * T * B * H * d * d * itemsize

    weights = torch.randn(W.shape, generator=g, dtype=DTYPE)
    used = [W0, *(p for name, p in field.named_parameters() if not name.startswith("query"))]  # no query in a solve
    grads = torch.autograd.grad((W * weights).sum(), used)
    Wr = exact.solve_exact_reference(field, control, W0)
    torch.testing.assert_close(W, Wr, rtol=0, atol=1e-12)
    expected_grads = torch.autograd.grad((Wr * weights).sum(), used)
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def _reference_case(controls, kind, rule):
    """(field, control) for the fast-vs-reference test: an "rde" field on the log-signature or hand-made
    piecewise-constant control, or an x'-only "cde" field on a rectilinear control (inputs x' per piece)."""
    if kind == "rectilinear":
        times, values, lengths = make_data(lengths=(8, 5), seed=8, scale=0.5)
        control = build_control(times, values, lengths, interpolation="rectilinear")
        return _field(rule, "cde", control.channels, dx_only=True), control
    return _field(rule, "rde", controls[kind].channels), controls[kind]


@pytest.mark.parametrize("at_knots", [True, False])
@pytest.mark.parametrize("kind", ["logsig", "hand", "rectilinear"])
@pytest.mark.parametrize("rule", RULES)
def test_exact_matches_its_reference(controls, rule, kind, at_knots):
    """solve_exact against solve_exact_reference: states to 1e-12, and the gradients of a random functional of
    them w.r.t. W0, the control's coefficients and the field's parameters to 1e-9 relative. With at_knots the
    hand-written adjoint receives a gradient on every state, not only the final one. Padded batches: every
    sample stops at its own end. Segments of 3 windows."""
    field, control = _reference_case(controls, kind, rule)
    g = torch.Generator().manual_seed(15)
    W0 = (0.5 * torch.randn(control.batch_size, 2, 4, 4, generator=g, dtype=DTYPE)).requires_grad_()
    coeffs = control.coeffs.clone().requires_grad_()
    ctrl = Control(control.knots, coeffs, control.end_index, control.piecewise_constant)
    used = [W0, coeffs, *(p for name, p in field.named_parameters() if not name.startswith("query"))]
    got = solve(field, ctrl, W0, SolverOptions(Exact(chunk_size=3)), at_knots=at_knots)
    expected = exact.solve_exact_reference(field, ctrl, W0, at_knots=at_knots)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    weights = torch.randn(got.shape, generator=g, dtype=DTYPE)
    grads = torch.autograd.grad((got * weights).sum(), used)
    expected_grads = torch.autograd.grad((expected * weights).sum(), used)
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    assert expected_grads[1].abs().max() > 1e-3  # the control's gradient is not trivially zero
    if at_knots:  # samples that end early stay put
        short = int(control.end_index.argmin())
        end = int(control.end_index[short])
        assert end < got.shape[1] - 1
        torch.testing.assert_close(
            got[short, end:], got[short, end : end + 1].expand_as(got[short, end:]), rtol=0, atol=1e-12
        )


def test_relaxation_rate_small_norms():
    """(1 − e^{−c n h})/n in float32 against float64 math, from n = 0 (limit c·h) to large n; gradients finite."""
    n = torch.tensor([0.0, 1e-30, 1e-8, 1e-4, 1e-2, 0.5, 3.0, 80.0], requires_grad=True)
    c, h = torch.tensor(0.7), 1.3
    got = relaxation_rate(c, n, h)
    exact_values = [c.item() * h if v == 0 else -math.expm1(-c.item() * v * h) / v for v in n.tolist()]
    torch.testing.assert_close(got, torch.tensor(exact_values), rtol=2e-6, atol=0)
    got.sum().backward()
    assert torch.isfinite(n.grad).all()
    # d/dn at n -> 0 is −(c h)²/2
    assert abs(n.grad[0].item() + (0.7 * 1.3) ** 2 / 2) < 1e-6


def test_relax_error_beyond_sinh_range():
    """asinh(sinh(e0) e^{ℓ}) in float32 for |e0| up to 500 (sinh overflows float32 above 89) against float64 for
    |e0| < 700, and its gradient against the float64 closed form ∂e_h/∂e0 = cosh(e0) r / sqrt(1 + sinh²(e0) r²)."""
    e0 = torch.tensor([-500.0, -88.0, -25.0, -20.5, -3.0, 0.0, 1e-3, 19.5, 21.0, 60.0, 95.0, 500.0])
    log_decay = torch.tensor([-0.3, -1.0, -30.0, -0.01, -2.0, -0.5, -0.5, -0.7, -45.0, -0.2, -1e-4, -600.0])
    x = e0.clone().requires_grad_()
    got = relax_error(x, log_decay)
    got.sum().backward()
    e64, l64 = e0.double(), log_decay.double()
    # float64 evaluation in log form (valid for all these |e0|): the same value, computed independently.
    y = torch.sinh(e64) * torch.exp(l64)
    expected = torch.asinh(y)
    # cosh(e0) r / sqrt(1 + y²) written as coth|e0| / sqrt(1 + y⁻²), which does not overflow (r at e0 = 0).
    nonzero = torch.where(e64 == 0, torch.ones_like(e64), e64)
    derivative = torch.where(
        e64 == 0,
        torch.exp(l64),
        1 / torch.tanh(nonzero.abs()) / torch.sqrt(1 + 1 / (torch.sinh(nonzero) * torch.exp(l64)) ** 2),
    )
    torch.testing.assert_close(got.double(), expected, rtol=2e-6, atol=1e-30)
    torch.testing.assert_close(x.grad.double(), derivative, rtol=1e-4, atol=1e-30)


def test_compiled_matches_eager():
    """SolverOptions(compile=True) runs the post-Delta step through torch.compile and gives the same states
    (forward only: compiling the backward graph too would double this test's tens of seconds)."""
    control = _controls()["hand"]
    field = _field("delta-post", "rde", control.channels)
    W0 = 3 * torch.randn(2, 2, 4, 4, generator=torch.Generator().manual_seed(14), dtype=DTYPE)
    with torch.no_grad():
        eager = solve(field, control, W0, SolverOptions(Exact(chunk_size=2)), at_knots=True)
        compiled = solve(field, control, W0, SolverOptions(Exact(chunk_size=2, compile=True)), at_knots=True)
    torch.testing.assert_close(compiled, eager, rtol=1e-12, atol=1e-12)
    assert (eager[:, -1] - W0).abs().max() > 0.1


def test_compile_without_compiler_is_refused(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(exact, "_COMPILED", {})
    with pytest.raises(RuntimeError, match="C compiler"):
        solve(
            _field("delta-post", "rde", 3),
            _controls()["hand"],
            torch.zeros(2, 2, 4, 4, dtype=DTYPE),
            SolverOptions(Exact(compile=True)),
        )


def test_refused_configurations(controls):
    control = controls["logsig"]
    with pytest.raises(ValueError, match="num_layers"):
        create_model(
            "delta-rde", control.channels, 3, d_model=D_MODEL, n_heads=2, num_layers=2, solver=SolverOptions(Exact())
        )
    with pytest.raises(ValueError, match="closed-form"):
        solve(
            FastWeightField(control.channels, D_MODEL, 2, make_rule("oja", softmax_after_subtract=True), form="rde"),
            control,
            torch.zeros(3, 2, 4, 4),
            SolverOptions(Exact()),
        )
    times, values, lengths = make_data(lengths=(6, 5), seed=1)
    cubic = build_control(times, values, lengths, interpolation="hermite_cubic")
    with pytest.raises(ValueError, match="constant on every knot interval"):
        solve(
            FastWeightField(cubic.channels, D_MODEL, 2, "delta", form="cde"),
            cubic,
            torch.zeros(2, 2, 4, 4),
            SolverOptions(Exact()),
        )
    with pytest.raises(ValueError, match="compile"):  # only post-Delta's step is compiled
        solve(
            _field("oja", "rde", 3),
            _controls()["hand"],
            torch.zeros(2, 2, 4, 4, dtype=DTYPE),
            SolverOptions(Exact(compile=True)),
        )
    with pytest.raises(ValueError, match="chunk_size"):
        SolverOptions(Exact(chunk_size=0))
    with pytest.raises(TypeError, match="unexpected keyword argument 'compile'"):
        Dopri5(compile=True)
    with pytest.raises(
        ValueError, match="compile is an option of Euler, Midpoint, Heun2, Heun3, RK4, Exact, not of Dopri5"
    ):
        parse_solver({"method": "dopri5", "compile": True})


# ------------------------------------------------------------------ Auto() (the default)
# A ~1,000-point series as users give it: the registry's RDE control (log-signature windows of 4 points with the
# window's start value: 250 windows), a padded batch.
AUTO_POINTS = 1000


@pytest.fixture(scope="module")
def long_series():
    g = torch.Generator().manual_seed(21)
    times = torch.cumsum(0.5 + torch.rand(2, AUTO_POINTS, generator=g, dtype=DTYPE), dim=1)
    values = 3 * torch.randn(2, AUTO_POINTS, 2, generator=g, dtype=DTYPE).cumsum(1) / AUTO_POINTS**0.5
    return times, values, torch.tensor([AUTO_POINTS, AUTO_POINTS - 137])


def _auto_model(name, inputs, solver, **options):
    torch.manual_seed(0)
    model = create_model(name, inputs, 3, solver=solver, **{**dict(d_model=D_MODEL, n_heads=2), **options}).to(DTYPE)
    ref.randomize_(model, torch.Generator().manual_seed(22), scale=0.5)
    return model


def _outputs_and_gradients(model, inputs, with_gradients=True):
    """The model's outputs and the gradients of a fixed functional of them w.r.t. every parameter."""
    if not with_gradients:
        with torch.no_grad():
            return model(inputs), None
    out = model(inputs)
    weights = torch.linspace(-1, 1, out.numel(), dtype=DTYPE).view_as(out)
    grads = torch.autograd.grad((out * weights).sum(), list(model.parameters()), allow_unused=True)
    return out.detach(), [torch.zeros_like(p) if g is None else g for g, p in zip(grads, model.parameters())]


@pytest.mark.parametrize("rule", RULES)
def test_auto_is_the_exact_path_on_log_signature_windows(long_series, rule):
    """The default solver of an RDE-form CT-FWP (no solver options at all) on a 1,000-point series is the
    closed form: outputs and every parameter's gradient are bit-for-bit those of Exact()."""
    control = model_inputs(f"{rule}-rde", *long_series)
    auto = _auto_model(f"{rule}-rde", control, None)
    assert auto.network.solver.method == Auto()
    assert auto.resolve_method(control) == Exact()
    got, got_grads = _outputs_and_gradients(auto, control)
    assert auto.network.solver.last_method == Exact()
    expected, expected_grads = _outputs_and_gradients(_auto_model(f"{rule}-rde", control, Exact()), control)
    assert torch.equal(got, expected)
    for a, b in zip(got_grads, expected_grads):
        assert torch.equal(a, b)
    assert sum(float(g.abs().max()) for g in got_grads) > 1e-3


@pytest.mark.parametrize("rule", RULES)
def test_auto_is_within_rk4_error_of_forced_rk4(long_series, rule):
    """RK4() (the documented switch) forces rk4 steps on the same model: the outputs differ from the
    default's by rk4's error, which falls by 2⁴ per halving of the step (4th order: the default is the exact
    solution rk4 converges to). Hebb's rate does not depend on W, so it is constant on a window and rk4 is
    exact there: both agree to rounding. Gradients agree to rk4's accuracy too."""
    control = model_inputs(f"{rule}-rde", *long_series)
    auto, auto_grads = _outputs_and_gradients(_auto_model(f"{rule}-rde", control, None), control)
    window = float((control.knots[1:] - control.knots[:-1]).min())
    steps = (window / 2, window / 4)
    errors = []
    for h in steps:
        forced = _auto_model(f"{rule}-rde", control, SolverOptions(RK4(step_size=h)))
        assert forced.resolve_method(control) == RK4(step_size=h)
        rk4, rk4_grads = _outputs_and_gradients(forced, control, with_gradients=h == steps[-1])
        errors.append(float((rk4 - auto).abs().max()))
    scale = float(auto.abs().max())
    print(f"\n{rule}-rde: |auto - rk4| at h = window/2, window/4: {errors} (outputs up to {scale:.3g})")
    if rule == "hebb":
        assert max(errors) <= 1e-12 * scale
    else:
        assert errors[0] <= 1e-5 * scale  # small ...
        assert errors[1] > 1e-11 * scale  # ... but rk4's, not rounding: forced rk4 is not the exact path
        order = math.log2(errors[0] / errors[1])
        assert 3.5 < order < 4.5, (errors, order)
    for a, b in zip(rk4_grads, auto_grads):
        assert float((a - b).abs().max()) <= 1e-5 * max(float(b.abs().max()), 1e-3)


def _series_inputs(name, long_series, points=300, **control):
    """The first ``points`` observations of the series (the second sample 40 shorter) as ``name`` reads them;
    interpolated controls on the index grid (the samples' times differ)."""
    times, values, lengths = long_series
    if name != "ode-rnn":
        control = {"parametrization": "index", **control}
    return model_inputs(
        name, times[:, :points], values[:, :points], lengths.clamp(max=points) - torch.tensor([0, 40]), **control
    )


# Models and inputs without a closed form: rk4 under "auto", with the step_size and gradient options given.
SMALL_FWP = dict(d_model=D_MODEL, n_heads=2)
NO_CLOSED_FORM = {
    "ncde": lambda s: ("ncde", _series_inputs("ncde", s), dict(hidden=8, width=8)),
    "delta-cde on a cubic control": lambda s: ("delta-cde", _series_inputs("delta-cde", s), SMALL_FWP),
    "x'-only delta-cde on a cubic control": lambda s: (
        "delta-cde",
        _series_inputs("delta-cde", s),
        dict(SMALL_FWP, dx_only=True),
    ),
    "two-layer delta-rde": lambda s: (
        "delta-rde",
        _series_inputs("delta-rde", s, points=1000),
        dict(SMALL_FWP, num_layers=2),
    ),
    # time_unit 1: gaps of about one unit, where one rk4 step per gap and two differ measurably
    "ode-rnn (evolve_over_gaps)": lambda s: (
        "ode-rnn",
        _series_inputs("ode-rnn", s, points=200),
        dict(hidden=8, width=8, time_unit=1.0),
    ),
}


@pytest.mark.parametrize("case", list(NO_CLOSED_FORM))
@pytest.mark.parametrize("gradient", [Checkpoint(), Adjoint(check_every=0)], ids=["checkpoint", "adjoint"])
def test_auto_is_rk4_without_a_closed_form(long_series, case, gradient):
    """Where the dynamics or the control admit no closed form, "auto" is exactly rk4 with the options given
    (the step size and gradient method reach the rk4 solve: a different step gives a different answer)."""
    name, inputs, options = NO_CLOSED_FORM[case](long_series)

    def run(solver, with_gradients=True):
        torch.manual_seed(0)
        model = create_model(name, inputs, 3, solver=solver, **options).to(DTYPE)
        ref.randomize_(model, torch.Generator().manual_seed(23), scale=0.3)
        return (model, *_outputs_and_gradients(model, inputs, with_gradients))

    auto_model, auto, auto_grads = run(SolverOptions(Auto(fallback=RK4(step_size=0.5)), gradient=gradient))
    _, rk4, rk4_grads = run(SolverOptions(RK4(step_size=0.5), gradient=gradient))
    assert torch.equal(auto, rk4)
    for a, b in zip(auto_grads, rk4_grads):
        assert torch.equal(a, b)
    solver = getattr(auto_model, "solver", None) or auto_model.network.solver
    assert solver.last_method == RK4(step_size=0.5)
    assert solver.uses_adjoint == isinstance(gradient, Adjoint)
    if hasattr(auto_model, "resolve_method"):
        assert auto_model.resolve_method(inputs) == RK4(step_size=0.5)
    per_knot = run(SolverOptions(RK4(step_size=None)), with_gradients=False)[1]
    assert float((per_knot - auto).abs().max()) > 1e-9  # the step size mattered


@pytest.mark.parametrize("method", ["linear", "rectilinear"])
def test_auto_is_exact_for_x_prime_only_fields_on_piecewise_linear_controls(long_series, method):
    """A "cde" field with dx_only reads only X', constant on every piece of a linear or rectilinear control:
    "auto" takes the closed form there (bit-for-bit Exact()), whereas on a cubic control it takes rk4
    (previous test)."""
    control = _series_inputs("delta-cde", long_series, interpolation=method)
    auto = _auto_model("delta-cde", control, None, dx_only=True)
    assert auto.resolve_method(control) == Exact()
    got, got_grads = _outputs_and_gradients(auto, control)
    expected, expected_grads = _outputs_and_gradients(_auto_model("delta-cde", control, Exact(), dx_only=True), control)
    assert torch.equal(got, expected)
    for a, b in zip(got_grads, expected_grads):
        assert torch.equal(a, b)
    # the standard CDE form reads X, which moves on every piece: no closed form
    assert _auto_model("delta-cde", control, None).resolve_method(control) == RK4()


def test_auto_options_of_each_path(controls):
    """chunk_size and compile are options of the closed form, accepted with "auto" (where it takes the closed
    form they are applied: compile=True reaches the exact path, which compiles post-Delta only and says so for
    Oja) and refused with a step method; gradient="adjoint" with "auto" on an exact-capable model gives the
    closed form's own gradients (no adjoint is used, and gradient_advice does not blame one); the ODE between
    observations has no closed form: "exact" is refused there, "auto" solves it with rk4."""
    from neuralde_seq.solvers import evolve_over_gaps
    from neuralde_seq.training.callbacks import gradient_advice

    control = controls["logsig"]
    W0 = torch.zeros(control.batch_size, 2, 4, 4, dtype=DTYPE)
    chunked = solve(_field("delta", "rde", control.channels), control, W0, Auto(exact=Exact(chunk_size=2)))
    torch.testing.assert_close(
        chunked,
        solve(_field("delta", "rde", control.channels), control, W0, SolverOptions(Exact(chunk_size=2))),
        rtol=0,
        atol=0,
    )
    with pytest.raises(ValueError, match="compile"):
        solve(_field("oja", "rde", control.channels), control, W0, SolverOptions(Auto(exact=Exact(compile=True))))
    with pytest.raises(ValueError, match="chunk_size is an option of Exact, not of RK4"):
        parse_solver({"method": "rk4", "chunk_size": 4})

    model = _auto_model("delta-rde", control, {"gradient": "adjoint", "check_every": 0})
    exact_model = _auto_model("delta-rde", control, Exact())
    got, got_grads = _outputs_and_gradients(model, control)
    expected, expected_grads = _outputs_and_gradients(exact_model, control)
    assert torch.equal(got, expected) and all(torch.equal(a, b) for a, b in zip(got_grads, expected_grads))
    assert not model.network.solver.uses_adjoint
    assert "adjoint" not in gradient_advice(model)
    forced = _auto_model("delta-rde", control, {"method": "rk4", "gradient": "adjoint", "check_every": 0})
    _outputs_and_gradients(forced, control)
    assert forced.network.solver.uses_adjoint and "continuous adjoint" in gradient_advice(forced)

    f = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh()).to(DTYPE)
    h = torch.randn(2, 3, generator=torch.Generator().manual_seed(24), dtype=DTYPE)
    gap = torch.tensor([0.7, 1.3], dtype=DTYPE)
    with pytest.raises(ValueError, match="no closed form"):
        evolve_over_gaps(f, h, gap, SolverOptions(Exact()))
    options = SolverOptions(Auto(fallback=RK4(step_size=0.25)))
    with torch.no_grad():
        assert torch.equal(
            evolve_over_gaps(f, h, gap, options), evolve_over_gaps(f, h, gap, SolverOptions(RK4(step_size=0.25)))
        )
    assert options.last_method == RK4(step_size=0.25)
