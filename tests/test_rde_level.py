"""The path's level in the log-signature RDE form: ``build_control(interpolation="logsignature",
window_start_values=True)`` (docs/design.md#choices, "RDE form").

A log-signature holds only the path's movement over a window, so a model reading nothing else gives the same
output for the values and the values plus a constant; the option appends the path's value at each window's
start, constant over the window, which the "rde" field reads as x.

- The appended channels equal the path's points at the window starts, computed here independently (numpy's
  linear interpolation through the missing values on the index), with every other part of the control
  unchanged; they move with a constant shift of the values, the log-signature channels do not.
- Models: without the option the output is invariant under a shift (gradient with respect to the shift zero);
  with it, it is not.
- Solving: the exact solver equals fine rk4 and its reference (`solve_exact_reference`) with the option on,
  float64, every rule; a whole classifier's gradients (those of the input projection's columns that read the
  new channels included) equal those through fine rk4.
- Variable lengths: a padded batch gives each sample what it gets alone (control and logits).
- Misuse raises ValueError; the disk cache keys the option.
"""

import fwp_reference as ref
import numpy as np
import pytest
import torch
from test_solvers import FieldDynamics, make_data

from neuralde_seq.controls import build_control, cached_logsignature_control
from neuralde_seq.fields import FastWeightField
from neuralde_seq.models import create_model
from neuralde_seq.solvers import RK4, Backprop, Exact, SolverOptions, solve
from neuralde_seq.solvers.exact_fast_weights import solve_exact_reference

DTYPE = torch.float64
RULES = ("hebb", "oja", "delta", "delta-post")
LOGSIG = dict(interpolation="logsignature", depth=2, step=3)
D_MODEL = 8


def _data():
    """Three samples (lengths 13, 9, 5) on irregular times, two channels with missing values (one missing at a
    sample's first point, so that the interpolation extends backwards), garbage after each sample's end."""
    times, values, lengths = make_data(lengths=(13, 9, 5), seed=21, scale=0.5)
    values[0, 3, 0] = values[0, 4, 0] = float("nan")
    values[1, 0, 1] = float("nan")
    values[1, 6, 0] = float("nan")
    values[2, 2, 1] = float("nan")
    return times, values, lengths


def _expected_window_starts(times, values, lengths, step):
    """The path's value and mask channels (values interpolated linearly on the index through NaN, constant beyond
    the first and last observation; observed masks) at points 0, step, 2·step, ... < L − 1 of each sample, zero
    after its windows. Not the time channel: its level is the position in the series."""
    B = times.shape[0]
    n_max = max((int(L) - 1 + step - 1) // step for L in lengths)
    C = values.shape[-1]
    expected = np.zeros((B, n_max, 2 * C))
    for b in range(B):
        L = int(lengths[b])
        index = np.arange(L)
        path = []
        masks = []
        for c in range(C):
            column = values[b, :L, c].numpy()
            seen = ~np.isnan(column)
            path.append(np.interp(index, index[seen], column[seen]))
            masks.append(seen.astype(float))
        path = np.stack(path + masks, axis=-1)  # (L, 2C)
        for j, start in enumerate(range(0, L - 1, step)):
            expected[b, j] = path[start]
    return torch.from_numpy(expected)


def test_appended_channels_are_the_path_at_window_starts():
    times, values, lengths = _data()
    options = dict(LOGSIG, time_channel=True, mask_channel=True, intensity_channel=True)
    plain = build_control(times, values, lengths, **options)
    control = build_control(times, values, lengths, **options, window_start_values=True)
    D = plain.channels
    assert control.channels == D + 4  # neither time nor the observation counts: positions, unbounded
    assert control.channels_info == plain.channels_info + ("start_x0", "start_x1", "start_mask0", "start_mask1")
    # Everything the log-signature control had is unchanged; the control stays piecewise constant.
    torch.testing.assert_close(control.coeffs[..., :D], plain.coeffs, rtol=0, atol=0)
    torch.testing.assert_close(control.knots, plain.knots, rtol=0, atol=0)
    assert torch.equal(control.end_index, plain.end_index) and control.piecewise_constant
    torch.testing.assert_close(control.initial_value, plain.initial_value, rtol=0, atol=0)
    assert (control.coeffs[:, :, 1:] == 0).all()
    expected = _expected_window_starts(times, values, lengths, LOGSIG["step"])
    n = expected.shape[1]
    torch.testing.assert_close(control.coeffs[:, :n, 0, D:], expected, rtol=0, atol=1e-12)
    assert (control.coeffs[:, n:, 0, D:] == 0).all()  # the piece past the last knot
    # The first window's start is the path's first point (what the NRDE starts from), less time and counts.
    torch.testing.assert_close(control.coeffs[:, 0, 0, D:], control.initial_value[:, 1:5], rtol=0, atol=0)
    # What the model reads on each window: (B, C) at any s inside window j.
    for j in range(n):
        inside = torch.full((3,), j + 0.5, dtype=DTYPE)
        active = j < control.end_index
        torch.testing.assert_close(control.evaluate(inside)[active, D:], expected[active, j], rtol=0, atol=1e-12)


def test_a_constant_shift_moves_only_the_appended_channels():
    times, values, lengths = _data()
    control = build_control(times, values, lengths, **LOGSIG, window_start_values=True)
    shifted = build_control(times, values + 5.0, lengths, **LOGSIG, window_start_values=True)
    D = control.channels - 2
    torch.testing.assert_close(shifted.coeffs[..., :D], control.coeffs[..., :D], rtol=0, atol=1e-12)
    active = torch.arange(control.knots.numel()).unsqueeze(0) < control.end_index.unsqueeze(1)
    difference = shifted.coeffs[:, :, 0, D:] - control.coeffs[:, :, 0, D:]
    torch.testing.assert_close(
        difference[active], torch.tensor([5.0, 5.0], dtype=DTYPE).expand(int(active.sum()), 2), rtol=0, atol=1e-12
    )


def _shift_gradient(name, window_start_values, solver):
    """The model's logits on the values and d(sum of weighted logits)/d(shift) at shift 0, float64."""
    times, values, lengths = _data()
    shift = torch.zeros((), dtype=DTYPE, requires_grad=True)
    control = build_control(times, values + shift, lengths, **LOGSIG, window_start_values=window_start_values)
    shifted = build_control(times, values + 3.0, lengths, **LOGSIG, window_start_values=window_start_values)
    torch.manual_seed(0)
    model = create_model(name, control, 3, d_model=D_MODEL, n_heads=2, solver=solver).to(DTYPE)
    ref.randomize_(model, torch.Generator().manual_seed(22), scale=0.5)
    logits = model(control)
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(23), dtype=DTYPE)
    (gradient,) = torch.autograd.grad((logits * weights).sum(), shift)
    with torch.no_grad():
        moved = (model(shifted) - logits).abs().max()
    return float(moved), float(gradient)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("method", [Exact(), RK4()], ids=["exact", "rk4"])
def test_output_sees_the_level_only_with_the_option(rule, method):
    solver = SolverOptions(method)
    moved, gradient = _shift_gradient(f"{rule}-rde", False, solver)
    assert moved < 1e-10 and abs(gradient) < 1e-10  # the documented invariance of the log-signature alone
    moved, gradient = _shift_gradient(f"{rule}-rde", True, solver)
    assert moved > 1e-3 and abs(gradient) > 1e-4


def _reference_options():
    return SolverOptions(RK4(step_size=1 / 32), gradient=Backprop())  # windows have length 1


@pytest.mark.parametrize("rule", RULES)
def test_exact_matches_fine_rk4_and_its_reference(rule):
    times, values, lengths = _data()
    control = build_control(times, values, lengths, **LOGSIG, window_start_values=True)
    torch.manual_seed(0)
    field = FastWeightField(control.channels, D_MODEL, 2, rule, form="rde").to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(24), scale=0.7)
    W0 = torch.randn(3, 2, 4, 4, generator=torch.Generator().manual_seed(25), dtype=DTYPE)
    with torch.no_grad():
        fine = solve(FieldDynamics(field), control, W0, _reference_options(), at_knots=True)
        exact = solve(field, control, W0, SolverOptions(Exact(chunk_size=2)), at_knots=True)
        reference = solve_exact_reference(field, control, W0, at_knots=True)
    torch.testing.assert_close(exact, fine, rtol=0, atol=1e-6)
    torch.testing.assert_close(exact, reference, rtol=0, atol=1e-12)
    assert (fine[:, -1] - W0).abs().max() > 0.1  # the fast weights really moved


@pytest.mark.parametrize("rule", RULES)
def test_gradients_exact_against_fine_rk4(rule):
    """A whole classifier on the control with the option: logits and every parameter's gradient agree between
    the exact solver and backpropagation through fine rk4; the input projection's columns that read the window
    start values get a gradient."""
    times, values, lengths = _data()
    control = build_control(times, values, lengths, **LOGSIG, window_start_values=True)
    D = control.channels - 3
    weights = torch.randn(3, 3, generator=torch.Generator().manual_seed(26), dtype=DTYPE)
    results = {}
    for name, solver in (("rk4", _reference_options()), ("exact", SolverOptions(Exact(chunk_size=2)))):
        torch.manual_seed(0)
        model = create_model(f"{rule}-rde", control, 3, d_model=D_MODEL, n_heads=2, solver=solver).to(DTYPE)
        ref.randomize_(model, torch.Generator().manual_seed(27), scale=0.5)
        logits = model(control)
        (logits * weights).sum().backward()
        results[name] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    torch.testing.assert_close(results["exact"][0], results["rk4"][0], rtol=0, atol=1e-6)
    for n, grad in results["rk4"][1].items():
        scale = grad.abs().max().clamp(min=1e-12)
        torch.testing.assert_close(results["exact"][1][n] / scale, grad / scale, rtol=0, atol=1e-5, msg=n)
    start_columns = results["exact"][1]["network.layers.0.field.input_proj.weight"][:, D:]
    assert torch.isfinite(start_columns).all() and start_columns.abs().max() > 1e-3


@pytest.mark.parametrize("method", [Exact(), RK4()], ids=["exact", "rk4"])
def test_padded_batch_gives_each_sample_its_answer_alone(method):
    times, values, lengths = _data()
    batch = build_control(times, values, lengths, **LOGSIG, window_start_values=True)
    torch.manual_seed(0)
    model = create_model("delta-post-rde", batch, 3, d_model=D_MODEL, n_heads=2, solver=SolverOptions(method)).to(DTYPE)
    ref.randomize_(model, torch.Generator().manual_seed(28), scale=0.5)
    with torch.no_grad():
        together = model(batch)
        for b, L in enumerate(lengths.tolist()):
            alone = build_control(times[b : b + 1, :L], values[b : b + 1, :L], None, **LOGSIG, window_start_values=True)
            K = alone.knots.numel()
            torch.testing.assert_close(batch.coeffs[b : b + 1, :K], alone.coeffs, rtol=0, atol=1e-12)
            torch.testing.assert_close(together[b : b + 1], model(alone), rtol=0, atol=1e-10)


def test_misuse_raises():
    times, values, lengths = _data()
    with pytest.raises(ValueError, match="window_start_values.*log-signature"):
        build_control(times, values, lengths, interpolation="hermite_cubic", window_start_values=True)
    with pytest.raises(ValueError, match="window_start_values must be True or False"):
        build_control(times, values, lengths, **LOGSIG, window_start_values="yes")
    plain = build_control(times, values, lengths, **LOGSIG)
    with_starts = build_control(times, values, lengths, **LOGSIG, window_start_values=True)
    model = create_model("delta-rde", plain, 3, d_model=D_MODEL, n_heads=2).to(DTYPE)
    with pytest.raises(ValueError, match="channels"):  # a model built for the other control
        model(with_starts)


def test_disk_cache_keys_the_option(tmp_path):
    times, values, lengths = _data()
    plain = cached_logsignature_control(tmp_path, times, values, lengths, **LOGSIG)
    first = cached_logsignature_control(tmp_path, times, values, lengths, **LOGSIG, window_start_values=True)
    again = cached_logsignature_control(tmp_path, times, values, lengths, **LOGSIG, window_start_values=True)
    assert len(list(tmp_path.glob("*.pt"))) == 2
    assert plain.channels + 2 == first.channels == again.channels
    assert again.channels_info == first.channels_info
    torch.testing.assert_close(again.coeffs, first.coeffs, rtol=0, atol=0)
