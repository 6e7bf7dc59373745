"""Tests of control paths (neuralde_seq.controls), log-signature windows (neuralde_seq.signatures), and the
checks of bad input, in build_control and in the models that read controls.

Everything numerical is in float64; expected values are computed independently in the tests (straight lines,
backward differences, Python loops, Chen's identity), never with the library's own helpers.
"""

import math

import pytest
import torch

from neuralde_seq import Control, build_control, control_options, create_model
from neuralde_seq.signatures import logsignature, logsignature_channels, logsignature_windows

F64 = torch.float64
INTERPOLATED = ("natural_cubic", "hermite_cubic", "linear", "rectilinear")
ALL_METHODS = INTERPOLATED + ("logsignature",)
TOL = dict(rtol=1e-10, atol=1e-10)


def _windows(method, **logsignature_options):
    """The log-signature options, for the log-signature windows only (each interpolation takes its own options)."""
    return logsignature_options if method == "logsignature" else {}


def _batch(lengths=(8, 5, 3), channels=2, seed=0, pad=1e6):
    """A padded batch on one shared irregular time grid; padding values are huge so that any leak shows."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    times = torch.cumsum(0.2 + torch.rand(T, generator=g, dtype=F64), 0).expand(len(lengths), T).clone()
    values = torch.randn(len(lengths), T, channels, generator=g, dtype=F64)
    for b, L in enumerate(lengths):
        values[b, L:] = pad
    return times, values, torch.tensor(lengths)


def _s(value):
    return torch.tensor(float(value), dtype=F64)


def _observation_knot(method, i):
    """Index in ``control.knots`` of observation i (rectilinear has a corner knot between observations)."""
    return 2 * i if method == "rectilinear" else i


# ---------------------------------------------------------------------------------------------------
# interpolation


@pytest.mark.parametrize("method", INTERPOLATED)
def test_passes_through_observations(method):
    times, values, lengths = _batch()
    control = build_control(times, values, lengths, interpolation=method)
    assert control.channels == 1 + values.shape[-1]
    assert control.coeffs.dtype == F64
    for b, L in enumerate(lengths.tolist()):
        assert int(control.end_index[b]) == _observation_knot(method, L - 1)
        for i in range(L):
            s = control.knots[_observation_knot(method, i)]
            expected = torch.cat([times[b, i : i + 1], values[b, i]])
            for side in ("left", "right"):
                torch.testing.assert_close(control.evaluate(s, side=side)[b], expected, **TOL)
        torch.testing.assert_close(control.final_value()[b], torch.cat([times[b, L - 1 : L], values[b, L - 1]]), **TOL)


def test_linear_is_linear_between_knots():
    times, values, lengths = _batch()
    control = build_control(times, values, lengths, interpolation="linear")
    for b, L in enumerate(lengths.tolist()):
        for i in range(L - 1):
            t0, t1 = times[b, i].item(), times[b, i + 1].item()
            slope = (values[b, i + 1] - values[b, i]) / (t1 - t0)
            for theta in (0.1, 0.5, 0.9):
                s = _s(t0 + theta * (t1 - t0))
                torch.testing.assert_close(control.evaluate(s)[b, 1:], values[b, i] + theta * (t1 - t0) * slope, **TOL)
                torch.testing.assert_close(control.derivative(s)[b, 1:], slope, **TOL)
                torch.testing.assert_close(control.derivative(s)[b, 0], torch.tensor(1.0, dtype=F64), **TOL)


def test_hermite_derivative_at_knots_is_the_backward_difference():
    times, values, lengths = _batch()
    control = build_control(times, values, lengths, interpolation="hermite_cubic", time_channel=False)
    for b, L in enumerate(lengths.tolist()):
        for i in range(1, L):
            backward = (values[b, i] - values[b, i - 1]) / (times[b, i] - times[b, i - 1])
            s = control.knots[i]
            # From the left (end of the piece before), and from the right (start of the next piece): C¹.
            torch.testing.assert_close(control.derivative(s, side="left")[b], backward, **TOL)
            if i < L - 1:
                torch.testing.assert_close(control.derivative(s, side="right")[b], backward, **TOL)
        # torchcde's convention at the first knot: x_{-1} is extrapolated, i.e. the first forward difference.
        forward = (values[b, 1] - values[b, 0]) / (times[b, 1] - times[b, 0])
        torch.testing.assert_close(control.derivative(control.knots[0])[b], forward, **TOL)


def _second_derivative(control, b, piece, at_end):
    """X'' of sample b on a piece, from the documented coefficients a + b f + c f² + d f³."""
    c, d = control.coeffs[b, piece, 2], control.coeffs[b, piece, 3]
    f = (control.knots[piece + 1] - control.knots[piece]) if at_end else 0.0
    return 2 * c + 6 * d * f


def test_natural_cubic_is_c2_with_natural_ends():
    times, values, lengths = _batch(lengths=(9, 6, 4, 3))
    control = build_control(times, values, lengths, interpolation="natural_cubic", time_channel=False)
    for b, L in enumerate(lengths.tolist()):
        pieces = L - 1
        for i in range(1, pieces):  # interior knots
            s = control.knots[i]
            torch.testing.assert_close(control.evaluate(s, side="left")[b], control.evaluate(s, side="right")[b], **TOL)
            torch.testing.assert_close(
                control.derivative(s, side="left")[b], control.derivative(s, side="right")[b], **TOL
            )
            torch.testing.assert_close(
                _second_derivative(control, b, i - 1, True),
                _second_derivative(control, b, i, False),
                rtol=1e-9,
                atol=1e-9,
            )
        zero = torch.zeros(values.shape[-1], dtype=F64)
        torch.testing.assert_close(_second_derivative(control, b, 0, False), zero, rtol=0, atol=1e-9)
        # The natural end condition holds at each sample's OWN end, not at the batch's.
        torch.testing.assert_close(_second_derivative(control, b, pieces - 1, True), zero, rtol=0, atol=1e-9)


def test_natural_cubic_matches_an_independent_spline_solve():
    """Natural cubic spline by a dense linear solve of the textbook moment equations."""
    times, values, lengths = _batch(lengths=(7,), channels=1)
    control = build_control(times, values, lengths, interpolation="natural_cubic", time_channel=False)
    t, y = times[0], values[0, :, 0]
    n = t.shape[0]
    h = t[1:] - t[:-1]
    A = torch.zeros(n, n, dtype=F64)
    r = torch.zeros(n, dtype=F64)
    A[0, 0] = A[-1, -1] = 1.0
    for i in range(1, n - 1):
        A[i, i - 1], A[i, i], A[i, i + 1] = h[i - 1], 2 * (h[i - 1] + h[i]), h[i]
        r[i] = 6 * ((y[i + 1] - y[i]) / h[i] - (y[i] - y[i - 1]) / h[i - 1])
    M = torch.linalg.solve(A, r)  # second derivatives at the knots
    for i in range(n - 1):
        for theta in (0.25, 0.6):
            x = t[i] + theta * h[i]
            a, bb = t[i + 1] - x, x - t[i]
            expected = (
                (M[i] * a**3 + M[i + 1] * bb**3) / (6 * h[i])
                + (y[i] / h[i] - M[i] * h[i] / 6) * a
                + (y[i + 1] / h[i] - M[i + 1] * h[i] / 6) * bb
            )
            torch.testing.assert_close(control.evaluate(x)[0, 0], expected, **TOL)


def test_rectilinear_moves_time_first_then_values():
    times, values, lengths = _batch()
    control = build_control(times, values, lengths, interpolation="rectilinear")
    for b, L in enumerate(lengths.tolist()):
        for i in range(L - 1):
            t0, t1 = times[b, i].item(), times[b, i + 1].item()
            mid = _s(0.5 * (t0 + t1))
            # At the midpoint of the observation interval time has arrived, the values have not moved.
            torch.testing.assert_close(
                control.evaluate(mid)[b], torch.cat([times[b, i + 1 : i + 2], values[b, i]]), **TOL
            )
            # First half: only time moves.
            quarter = control.evaluate(_s(t0 + 0.25 * (t1 - t0)))[b]
            torch.testing.assert_close(quarter, torch.cat([_s(0.5 * (t0 + t1)).view(1), values[b, i]]), **TOL)
            d = control.derivative(_s(t0 + 0.25 * (t1 - t0)))[b]
            assert d[0] > 0 and torch.all(d[1:] == 0)
            # Second half: only the values move.
            three_quarters = control.evaluate(_s(t0 + 0.75 * (t1 - t0)))[b]
            torch.testing.assert_close(
                three_quarters, torch.cat([times[b, i + 1 : i + 2], 0.5 * (values[b, i] + values[b, i + 1])]), **TOL
            )
            assert control.derivative(_s(t0 + 0.75 * (t1 - t0)))[b, 0] == 0


@pytest.mark.parametrize("method", ALL_METHODS)
def test_constant_after_each_samples_end(method):
    times, values, lengths = _batch()
    control = build_control(times, values, lengths, interpolation=method, **_windows(method, depth=2, step=2))
    final = control.final_value()
    last = control.knots[-1].item()
    for b in range(len(lengths)):
        end = control.end[b].item()
        if end == last:
            continue  # the longest sample; see test_constant_beyond_the_last_knot
        for s in torch.linspace(end, last, 7, dtype=F64)[1:]:
            value, slope = control.evaluate(s)[b], control.derivative(s)[b]
            if method == "logsignature":
                # The control of an RDE is the window's log-signature rate: nothing happens after the end.
                torch.testing.assert_close(value, torch.zeros_like(value), rtol=0, atol=0)
            else:
                torch.testing.assert_close(value, final[b], **TOL)
            torch.testing.assert_close(slope, torch.zeros_like(slope), rtol=0, atol=0)
        # At the end knot itself the "right" side is already the constant piece.
        torch.testing.assert_close(
            control.derivative(control.end[b], side="right")[b],
            torch.zeros(control.channels, dtype=F64),
            rtol=0,
            atol=0,
        )


@pytest.mark.parametrize("method", ALL_METHODS)
def test_constant_beyond_the_last_knot(method):
    """Control's docstring: "After its final knot every path is constant" — also past the batch's last knot.

    Without this, a sample's control alone (whose last knot is its end) and the same sample in a padded batch
    (constant after its end) disagree for s after the end.
    """
    times, values, lengths = _batch(lengths=(6,))
    control = build_control(times, values, lengths, interpolation=method, **_windows(method, depth=2, step=2))
    end = control.knots[-1]
    final = control.final_value()
    # At the final knot, the piece to its right is the constant one (as for the shorter samples of a batch).
    torch.testing.assert_close(control.derivative(end, side="right"), torch.zeros_like(final), rtol=0, atol=0)
    for s in (end + 0.5, end + 3.0):
        value, slope = control.evaluate(s), control.derivative(s)
        expected = torch.zeros_like(value) if method == "logsignature" else final
        torch.testing.assert_close(value, expected, **TOL)
        torch.testing.assert_close(slope, torch.zeros_like(slope), rtol=0, atol=0)


def _assert_same_path(batched, b, alone, grid, end=None):
    """Same value and derivative at each s of ``grid``; at ``end`` (the sample's final knot) from the left only:
    to the right of it the batched control is constant, see test_constant_beyond_the_last_knot."""
    for s in grid:
        for side in ("left",) if (end is not None and s == end) else ("left", "right"):
            torch.testing.assert_close(batched.evaluate(s, side=side)[b], alone.evaluate(s, side=side)[0], **TOL)
            torch.testing.assert_close(batched.derivative(s, side=side)[b], alone.derivative(s, side=side)[0], **TOL)


@pytest.mark.parametrize("method", ALL_METHODS)
def test_padded_batch_equals_each_sample_alone(method):
    times, values, lengths = _batch(lengths=(9, 6, 4, 2))
    values[0, 3, 1] = values[1, 2, 0] = float("nan")  # missing values, interpolated through
    options = dict(interpolation=method, **_windows(method, depth=2, step=3), mask_channel=True, intensity_channel=True)
    batched = build_control(times, values, lengths, **options)
    for b, L in enumerate(lengths.tolist()):
        alone = build_control(times[b : b + 1, :L], values[b : b + 1, :L], **options)
        end = int(alone.end_index[0])
        assert int(batched.end_index[b]) == end
        torch.testing.assert_close(batched.knots[: end + 1], alone.knots, rtol=0, atol=0)
        torch.testing.assert_close(batched.coeffs[b, : end + 1], alone.coeffs[0], **TOL)
        # Points inside every piece and on every knot, up to the sample's end.
        inner = [
            (alone.knots[i] + frac * (alone.knots[i + 1] - alone.knots[i]))
            for i in range(end)
            for frac in (0.0, 0.3, 0.7)
        ] + [alone.knots[end]]
        _assert_same_path(batched, b, alone, inner, end=alone.knots[end])
        torch.testing.assert_close(batched.final_value()[b], alone.final_value()[0], **TOL)
        torch.testing.assert_close(batched.final_derivative()[b], alone.final_derivative()[0], **TOL)
        # Selecting the sample from the batch gives the same control as building it alone.
        picked = batched[b]
        assert isinstance(picked, Control) and picked.batch_size == 1
        torch.testing.assert_close(picked.knots, alone.knots, rtol=0, atol=0)
        torch.testing.assert_close(picked.coeffs, alone.coeffs, **TOL)
        assert picked.end_index.tolist() == alone.end_index.tolist()
        assert picked.piecewise_constant == alone.piecewise_constant == (method == "logsignature")


@pytest.mark.parametrize("pad_time", [0.0, float("nan")])
@pytest.mark.parametrize("method", INTERPOLATED)
def test_padding_after_the_longest_sample_is_ignored(method, pad_time):
    """A batch cut from a larger padded dataset: every sample is shorter than T, padding times are 0 or NaN.

    The knots must stay strictly increasing (Control's contract) and each path must equal the sample alone.
    """
    times, values, lengths = _batch(lengths=(9, 5, 3))
    times, values = times.clone(), values.clone()
    lengths = torch.tensor([5, 3, 2])
    for b, L in enumerate(lengths.tolist()):
        times[b, L:] = pad_time
        values[b, L:] = float("nan")
    batched = build_control(times, values, lengths, interpolation=method)
    assert not torch.isnan(batched.knots).any()
    assert torch.all(batched.knots[1:] > batched.knots[:-1]), f"knots not strictly increasing: {batched.knots}"
    for b, L in enumerate(lengths.tolist()):
        alone = build_control(times[b : b + 1, :L], values[b : b + 1, :L], interpolation=method)
        end = int(alone.end_index[0])
        grid = [
            (alone.knots[i] + frac * (alone.knots[i + 1] - alone.knots[i])) for i in range(end) for frac in (0.25, 0.75)
        ]
        _assert_same_path(batched, b, alone, grid)


def test_model_output_does_not_depend_on_trailing_padding():
    """The same samples with and without extra padding columns give the same logits."""
    times, values, lengths = _batch(lengths=(5, 3))
    times, values = times.clone(), values.clone()
    values[1, 3:] = float("nan")
    torch.manual_seed(0)
    model = create_model("delta-cde", 3, 3, d_model=8, n_heads=2).double()
    with torch.no_grad():
        reference = model(build_control(times, values, lengths))
        wide_times = torch.cat([times, torch.zeros(2, 3, dtype=F64)], 1)
        wide_values = torch.cat([values, torch.full((2, 3, 2), float("nan"), dtype=F64)], 1)
        padded = model(build_control(wide_times, wide_values, lengths))
    torch.testing.assert_close(padded, reference, rtol=1e-8, atol=1e-8)


def test_dtype_follows_the_input_and_to_casts():
    times, values, lengths = _batch()
    control = build_control(times.float(), values.float(), lengths)
    assert control.coeffs.dtype == torch.float32 and control.knots.dtype == torch.float32
    moved = control.to(F64)
    assert moved.coeffs.dtype == F64 and moved.knots.dtype == F64 and moved.end_index.dtype == torch.long


# ---------------------------------------------------------------------------------------------------
# missing values and extra channels


def _missing_batch():
    times, values, lengths = _batch(lengths=(8, 6), channels=2)
    values = values.clone()
    values[0, 2, 0] = values[0, 3, 0] = float("nan")  # interior gap
    values[0, 0, 1] = float("nan")  # leading gap
    values[1, 4:6, 1] = float("nan")  # trailing gap (up to the sample's end)
    values[1, 1, 0] = float("nan")
    return times, values, lengths


def _observed_rows(values, lengths, b, c):
    L = int(lengths[b])
    return [i for i in range(L) if not math.isnan(values[b, i, c].item())]


def test_interpolate_goes_straight_through_missing_values():
    times, values, lengths = _missing_batch()
    control = build_control(times, values, lengths, interpolation="linear", missing="interpolate")
    for b, L in enumerate(lengths.tolist()):
        for c in range(values.shape[-1]):
            seen = _observed_rows(values, lengths, b, c)
            for i in range(L):
                s = control.knots[i]
                got = control.evaluate(s)[b, 1 + c].item()
                before = [j for j in seen if j <= i]
                after = [j for j in seen if j >= i]
                if not before:  # constant before the first observation
                    expected = values[b, after[0], c].item()
                elif not after:  # and after the last
                    expected = values[b, before[-1], c].item()
                else:
                    j0, j1 = before[-1], after[0]
                    if j0 == j1:
                        expected = values[b, j0, c].item()
                    else:
                        t0, t1, t = times[b, j0].item(), times[b, j1].item(), times[b, i].item()
                        expected = values[b, j0, c].item() + (t - t0) / (t1 - t0) * (
                            values[b, j1, c].item() - values[b, j0, c].item()
                        )
                assert got == pytest.approx(expected, rel=1e-12, abs=1e-12), (b, c, i)


@pytest.mark.parametrize("method", ("natural_cubic", "hermite_cubic"))
def test_interpolate_cubics_pass_through_the_observed_points(method):
    times, values, lengths = _missing_batch()
    control = build_control(times, values, lengths, interpolation=method, missing="interpolate")
    assert not torch.isnan(control.coeffs).any()
    for b in range(2):
        for c in range(2):
            for i in _observed_rows(values, lengths, b, c):
                assert control.evaluate(control.knots[i])[b, 1 + c].item() == pytest.approx(
                    values[b, i, c].item(), abs=1e-10
                )


@pytest.mark.parametrize("method", INTERPOLATED)
def test_forward_fill_carries_the_last_observation(method):
    times, values, lengths = _missing_batch()
    control = build_control(times, values, lengths, interpolation=method, missing="forward_fill")
    for b, L in enumerate(lengths.tolist()):
        for c in range(2):
            seen = _observed_rows(values, lengths, b, c)
            for i in range(L):
                before = [j for j in seen if j <= i]
                source = before[-1] if before else seen[0]  # leading gap: the first observation, backwards
                got = control.evaluate(control.knots[_observation_knot(method, i)])[b, 1 + c].item()
                assert got == pytest.approx(values[b, source, c].item(), abs=1e-12), (b, c, i)


def test_zero_fill_needs_the_mask_channel():
    times, values, lengths = _missing_batch()
    with pytest.raises(ValueError, match="mask_channel"):
        build_control(times, values, lengths, missing="zero")
    control = build_control(times, values, lengths, interpolation="linear", missing="zero", mask_channel=True)
    for b, L in enumerate(lengths.tolist()):
        for i in range(L):
            x = control.evaluate(control.knots[i])[b]
            for c in range(2):
                missing = math.isnan(values[b, i, c].item())
                assert x[1 + c].item() == (0.0 if missing else pytest.approx(values[b, i, c].item(), abs=1e-12))


def test_mask_intensity_and_time_channels():
    times, values, lengths = _missing_batch()
    C = values.shape[-1]
    control = build_control(
        times, values, lengths, interpolation="linear", time_channel=True, mask_channel=True, intensity_channel=True
    )
    assert control.channels == 1 + 3 * C
    assert control.channels_info == ("time", "x0", "x1", "mask0", "mask1", "count0", "count1")
    for b, L in enumerate(lengths.tolist()):
        counts = [0] * C
        for i in range(L):
            x = control.evaluate(control.knots[i], side="left" if i == L - 1 else "right")[b]
            assert x[0].item() == pytest.approx(times[b, i].item(), abs=1e-12)
            for c in range(C):
                observed = not math.isnan(values[b, i, c].item())
                counts[c] += observed
                assert x[1 + C + c].item() == (1.0 if observed else 0.0), ("mask", b, i, c)
                assert x[1 + 2 * C + c].item() == pytest.approx(counts[c], abs=1e-12), ("count", b, i, c)


def test_channels_can_be_switched_off():
    times, values, lengths = _batch()
    control = build_control(times, values, lengths, interpolation="linear", time_channel=False)
    assert control.channels == values.shape[-1]
    torch.testing.assert_close(control.evaluate(control.knots[1])[0], values[0, 1], **TOL)


def test_index_parametrization_allows_different_times():
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([6, 4])
    times = torch.cumsum(0.1 + torch.rand(2, 6, generator=g, dtype=F64), 1)  # each sample its own times
    values = torch.randn(2, 6, 2, generator=g, dtype=F64)
    times[1, 4:] = float("nan")  # NaN times in the padding are fine
    with pytest.raises(ValueError, match="parametrization"):
        build_control(times, values, lengths, interpolation="linear", parametrization="time")
    for method in ("natural_cubic", "hermite_cubic", "linear"):
        control = build_control(times, values, lengths, interpolation=method, parametrization="index")
        torch.testing.assert_close(control.knots, torch.arange(6, dtype=F64), rtol=0, atol=0)
        for b, L in enumerate(lengths.tolist()):
            for i in range(L):
                x = control.evaluate(_s(i), side="left" if i == L - 1 else "right")[b]
                torch.testing.assert_close(x, torch.cat([times[b, i : i + 1], values[b, i]]), **TOL)
    linear = build_control(times, values, lengths, interpolation="linear", parametrization="index")
    # Halfway in index is halfway in every channel, time included.
    torch.testing.assert_close(linear.evaluate(_s(1.5))[1, 0], 0.5 * (times[1, 1] + times[1, 2]), **TOL)


def test_unobserved_fill_fills_a_channel_without_observations():
    times, values, lengths = _batch(lengths=(5, 4))
    values = values.clone()
    values[1, :, 1] = float("nan")
    control = build_control(times, values, lengths, interpolation="linear", unobserved_fill=-2.5)
    for i in range(4):
        assert control.evaluate(control.knots[i])[1, 2].item() == -2.5
    torch.testing.assert_close(control.evaluate(control.knots[2])[0, 1:], values[0, 2], **TOL)


# ---------------------------------------------------------------------------------------------------
# log-signatures


def _chen_logsignature_depth2(points):
    """Depth-2 log-signature of the piecewise-linear path through ``points`` (list of lists) by Chen's identity.

    The signature of one straight segment Δ is (1, Δ, Δ⊗Δ/2); concatenation multiplies signatures
    (S₂ ← S₂ + S₁⊗Δ + Δ⊗Δ/2), and the level-2 log-signature is S₂ − S₁⊗S₁/2, whose coefficient on the
    Lyndon word (i, j), i < j, is its (i, j) entry.
    """
    C = len(points[0])
    S1 = [0.0] * C
    S2 = [[0.0] * C for _ in range(C)]
    for p, q in zip(points[:-1], points[1:]):
        delta = [qi - pi for pi, qi in zip(p, q)]
        for i in range(C):
            for j in range(C):
                S2[i][j] += S1[i] * delta[j] + 0.5 * delta[i] * delta[j]
        S1 = [a + d for a, d in zip(S1, delta)]
    areas = [S2[i][j] - 0.5 * S1[i] * S1[j] for i in range(C) for j in range(i + 1, C)]
    return S1 + areas


def _levy_area_by_quadrature(points, i, j, n=4000):
    """½ ∫ (X^i − X^i_0) dX^j − (X^j − X^j_0) dX^i on a fine midpoint discretisation of the path."""
    total = 0.0
    x0 = points[0]
    for p, q in zip(points[:-1], points[1:]):
        for k in range(n):
            u = (k + 0.5) / n
            xi, xj = p[i] + u * (q[i] - p[i]) - x0[i], p[j] + u * (q[j] - p[j]) - x0[j]
            total += 0.5 * (xi * (q[j] - p[j]) - xj * (q[i] - p[i])) / n
    return total


def test_logsignature_of_a_path_against_chen_and_quadrature():
    g = torch.Generator().manual_seed(5)
    path = torch.randn(6, 3, generator=g, dtype=F64)
    got = logsignature(path, 2)
    assert got.shape == (logsignature_channels(3, 2),) == (6,)
    expected = torch.tensor(_chen_logsignature_depth2(path.tolist()), dtype=F64)
    torch.testing.assert_close(got, expected, **TOL)
    pairs = [(0, 1), (0, 2), (1, 2)]
    for slot, (i, j) in enumerate(pairs):
        assert got[3 + slot].item() == pytest.approx(_levy_area_by_quadrature(path.tolist(), i, j, 200), abs=1e-9)
    torch.testing.assert_close(logsignature(path, 1), path[-1] - path[0], **TOL)
    # A unit square traversed counter-clockwise sweeps area +1 in the (0, 1) plane.
    square = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(logsignature(square, 2), torch.tensor([0.0, 0.0, 1.0], dtype=F64), **TOL)
    # Batch dimensions, and a single point.
    batch = torch.randn(4, 2, 5, 3, generator=g, dtype=F64)
    assert logsignature(batch, 2).shape == (4, 2, 6)
    assert torch.all(logsignature(path[:1], 2) == 0)


def _window_bounds(L, step):
    starts = list(range(0, L - 1, step))
    return [(a, min(a + step, L - 1)) for a in starts]


@pytest.mark.parametrize("depth", [1, 2])
def test_logsignature_control_windows(depth):
    times, values, lengths = _batch(lengths=(10, 7, 2), channels=2)
    step = 4
    control = build_control(times, values, lengths, interpolation="logsignature", depth=depth, step=step)
    assert control.piecewise_constant
    assert control.channels == logsignature_channels(3, depth) == (3 if depth == 1 else 6)
    n_windows = [len(_window_bounds(L, step)) for L in lengths.tolist()]
    assert n_windows == [3, 2, 1]  # ceil((L − 1) / step): 9 intervals → 4 + 4 + 1
    assert control.end_index.tolist() == n_windows
    torch.testing.assert_close(control.knots, torch.arange(max(n_windows) + 1, dtype=F64), rtol=0, atol=0)
    for b, L in enumerate(lengths.tolist()):
        points = torch.cat([times[b, :L, None], values[b, :L]], -1)
        for w, (a, z) in enumerate(_window_bounds(L, step)):
            if depth == 1:
                expected = points[z] - points[a]
            else:
                expected = torch.tensor(_chen_logsignature_depth2(points[a : z + 1].tolist()), dtype=F64)
            for s in (w, w + 0.5, w + 0.999):  # constant on [w, w + 1)
                torch.testing.assert_close(control.evaluate(_s(s))[b], expected, **TOL)
                torch.testing.assert_close(control.derivative(_s(s))[b], expected, **TOL)
        # The final window of the first sample is short (one interval).
    torch.testing.assert_close(
        control.evaluate(_s(2.5))[0, :3],
        torch.cat([times[0, 9:10] - times[0, 8:9], values[0, 9] - values[0, 8]]),
        **TOL,
    )
    # Depth 1: the windows' increments add up to the whole path's increment.
    if depth == 1:
        for b, L in enumerate(lengths.tolist()):
            total = control.coeffs[b, :, 0].sum(0)
            torch.testing.assert_close(
                total, torch.cat([times[b, L - 1 : L] - times[b, :1], values[b, L - 1] - values[b, 0]]), **TOL
            )


def test_logsignature_windows_of_padded_batch_equal_each_sample_alone():
    g = torch.Generator().manual_seed(7)
    lengths = torch.tensor([11, 8, 5, 3])
    points = torch.randn(4, 11, 3, generator=g, dtype=F64)
    for b, L in enumerate(lengths.tolist()):
        points[b, L:] = 1e6  # padding must not leak
    for step in (1, 3, 4):
        batched, windows = logsignature_windows(points, lengths, 2, step)
        for b, L in enumerate(lengths.tolist()):
            alone, n = logsignature_windows(points[b : b + 1, :L], torch.tensor([L]), 2, step)
            assert int(windows[b]) == int(n[0]) == math.ceil((L - 1) / step)
            torch.testing.assert_close(batched[b, : int(n[0])], alone[0], **TOL)
            assert torch.all(batched[b, int(n[0]) :] == 0)


def test_logsignature_control_interpolates_missing_values_first():
    times, values, lengths = _batch(lengths=(9,), channels=2)
    holed = values.clone()
    holed[0, 3, 0] = float("nan")
    filled = values.clone()
    filled[0, 3, 0] = values[0, 2, 0] + (values[0, 4, 0] - values[0, 2, 0]) * 0.5  # halfway in the index
    got = build_control(times, holed, lengths, interpolation="logsignature", time_channel=False, step=2)
    # Interpolation for log-signatures runs on the index (the windows' own grid), so the filled point is halfway.
    want = build_control(times, filled, lengths, interpolation="logsignature", time_channel=False, step=2)
    torch.testing.assert_close(got.coeffs, want.coeffs, **TOL)


@pytest.mark.parametrize("depth", [1, 2])
def test_logsignature_gradcheck(depth):
    g = torch.Generator().manual_seed(11)
    path = torch.randn(2, 5, 3, generator=g, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p: logsignature(p, depth), (path,))
    lengths = torch.tensor([5, 3])
    assert torch.autograd.gradcheck(lambda p: logsignature_windows(p, lengths, depth, 2)[0], (path,))


# ---------------------------------------------------------------------------------------------------
# bad input


def _good():
    times, values, lengths = _batch(lengths=(5, 4))
    return times.clone(), values.clone(), lengths.clone()


def test_rejects_non_increasing_times():
    times, values, lengths = _good()
    times[0, 2] = times[0, 1]
    with pytest.raises(ValueError, match="increasing"):
        build_control(times, values, lengths)
    times, values, lengths = _good()
    times[1, 3] = times[1, 0] - 1.0
    with pytest.raises(ValueError, match="increasing"):
        build_control(times, values, lengths)


def test_rejects_nan_times():
    times, values, lengths = _good()
    times[1, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        build_control(times, values, lengths)


def test_rejects_infinite_values_and_times():
    times, values, lengths = _good()
    values[0, 2, 1] = float("inf")
    with pytest.raises(ValueError, match="infinite"):
        build_control(times, values, lengths)
    times, values, lengths = _good()
    times[0, 4] = float("inf")
    with pytest.raises(ValueError, match="infinite"):
        build_control(times, values, lengths)


def test_rejects_mismatched_shapes():
    times, values, lengths = _good()
    with pytest.raises(ValueError, match="shape"):
        build_control(times[:, :4], values, lengths.clamp(max=4))
    with pytest.raises(ValueError, match="shape"):
        build_control(times[:1], values, lengths)
    with pytest.raises(ValueError, match=r"values must have shape \(batch, length, channels\)"):
        build_control(times, values[..., 0], lengths)
    with pytest.raises(ValueError, match=r"times must have shape \(batch, length\)"):
        build_control(times[0], values, lengths)
    with pytest.raises(TypeError, match="tensor"):
        build_control(times.tolist(), values, lengths)


def test_rejects_bad_lengths():
    times, values, lengths = _good()
    with pytest.raises(ValueError, match="lengths must have shape"):
        build_control(times, values, lengths[:1])
    with pytest.raises(ValueError, match="lengths must have shape"):
        build_control(times, values, lengths.view(2, 1))
    with pytest.raises(TypeError, match="lengths"):
        build_control(times, values, lengths.double())
    with pytest.raises(ValueError, match="exceed"):
        build_control(times, values, torch.tensor([5, 6]))


def test_rejects_empty_and_too_short_sequences():
    with pytest.raises(ValueError, match="empty"):
        build_control(torch.zeros(2, 0, dtype=F64), torch.zeros(2, 0, 3, dtype=F64))
    times, values, lengths = _good()
    with pytest.raises(ValueError, match="empty"):
        build_control(times, values, torch.tensor([5, 0]))
    with pytest.raises(ValueError, match="at least 2"):
        build_control(times, values, torch.tensor([1, 4]))
    with pytest.raises(ValueError, match="at least 2"):
        build_control(times[:, :1], values[:, :1])
    with pytest.raises(ValueError, match="empty batch"):
        build_control(times[:0], values[:0])
    with pytest.raises(ValueError, match="channels"):
        build_control(times, values[..., :0], lengths)


def test_rejects_all_nan_channel():
    times, values, lengths = _good()
    values[1, :4, 0] = float("nan")  # sample 1 never observes channel 0 (its padding is ignored)
    with pytest.raises(ValueError, match=r"all-NaN channel: sample 1 has no observation in channel 0"):
        build_control(times, values, lengths)
    times, values, lengths = _good()
    values[:, :, 1] = float("nan")
    with pytest.raises(ValueError, match=r"all-NaN channel: channel 1 has no observation in any sample"):
        build_control(times, values, lengths)
    with pytest.raises(ValueError, match="all-NaN"):
        build_control(times, values, lengths, interpolation="logsignature")


def test_rejects_unknown_options():
    times, values, lengths = _good()
    with pytest.raises(ValueError, match="interpolation must be one of"):
        build_control(times, values, lengths, interpolation="cubic")
    with pytest.raises(ValueError, match="missing must be one of"):
        build_control(times, values, lengths, missing="drop")
    with pytest.raises(ValueError, match="parametrization"):
        build_control(times, values, lengths, parametrization="seconds")
    with pytest.raises(ValueError, match="time_channel"):
        build_control(times, values, lengths, interpolation="rectilinear", time_channel=False)


@pytest.mark.parametrize("step", [0, -1, 1.5, "4"])
def test_rejects_bad_step(step):
    times, values, lengths = _good()
    with pytest.raises(ValueError, match="step"):
        build_control(times, values, lengths, interpolation="logsignature", step=step)


@pytest.mark.parametrize("depth", [0, 3, "2"])
def test_rejects_bad_depth(depth):
    times, values, lengths = _good()
    with pytest.raises(ValueError, match="depth"):
        build_control(times, values, lengths, interpolation="logsignature", depth=depth)
    with pytest.raises(ValueError, match="depth"):
        logsignature(values, depth)


def test_evaluate_rejects_badly_shaped_s():
    times, values, lengths = _good()
    control = build_control(times, values, lengths)
    with pytest.raises(ValueError, match="s must be a scalar"):
        control.evaluate(torch.zeros(3, dtype=F64))
    # One parameter value per sample works.
    per_sample = control.evaluate(control.end, side="left")
    torch.testing.assert_close(per_sample, control.final_value(), rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------
# model-side checks


def test_model_rejects_a_control_with_the_wrong_number_of_channels():
    times, values, lengths = _good()
    control = build_control(times, values, lengths, **control_options("delta-cde"))
    model = create_model("delta-cde", control.channels + 1, 3, d_model=8, n_heads=2).double()
    with pytest.raises(
        ValueError, match=f"control has {control.channels} channels but the model expects {control.channels + 1}"
    ):
        model(control)


def test_rde_model_rejects_an_interpolated_control_and_vice_versa():
    times, values, lengths = _good()
    interpolated = build_control(times, values, lengths, interpolation="hermite_cubic")
    rde = create_model("delta-rde", interpolated.channels, 3, d_model=8, n_heads=2).double()
    with pytest.raises(ValueError, match="log-signature"):
        rde(interpolated)
    windows = build_control(times, values, lengths, interpolation="logsignature", depth=1)
    cde = create_model("hebb-cde", windows.channels, 3, d_model=8, n_heads=2).double()
    with pytest.raises(ValueError, match="interpolated control"):
        cde(windows)
    with pytest.raises(TypeError, match="Control"):
        cde((times, values))


def test_static_initial_state_needs_static_features():
    times, values, lengths = _good()
    control = build_control(times, values, lengths)
    torch.manual_seed(0)
    model = create_model(
        "delta-cde", control.channels, 3, d_model=8, n_heads=2, initial_state="static", static_channels=4
    ).double()
    with pytest.raises(ValueError, match="static"):
        model(control)
    with torch.no_grad():
        logits = model(control, torch.randn(2, 4, dtype=F64))
    assert logits.shape == (2, 3) and torch.isfinite(logits).all()
    with pytest.raises(ValueError, match="static_channels"):
        create_model("delta-cde", control.channels, 3, d_model=8, n_heads=2, initial_state="static")


@pytest.mark.parametrize("parametrization", ["time", "index"])
def test_time_unit_rescales_the_time_channel_and_the_solver_parameter(parametrization):
    # Hourly observations stamped in seconds, read in hours: the same control as times given in hours.
    g = torch.Generator().manual_seed(0)
    hours = torch.cumsum(torch.rand(3, 12, generator=g, dtype=torch.float64) + 0.5, dim=1)
    values = torch.randn(3, 12, 2, generator=g, dtype=torch.float64)
    in_hours = (
        build_control(hours, values, parametrization=parametrization)
        if parametrization == "index"
        else build_control(hours[:1].expand(3, 12), values, parametrization=parametrization)
    )
    times_s = (hours if parametrization == "index" else hours[:1].expand(3, 12)) * 3600.0
    from_seconds = build_control(times_s, values, parametrization=parametrization, time_unit=3600.0)
    for a, b in zip(in_hours.tensors(), from_seconds.tensors()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # the time channel (channel 0) reads hours: its final value is the last time in hours
    torch.testing.assert_close(from_seconds.final_value()[:, 0], in_hours.final_value()[:, 0])
    with pytest.raises(ValueError, match="time_unit must be a positive finite number"):
        build_control(times_s, values, time_unit=0.0)


def test_method_names_the_solvers_method_only_not_the_interpolation():
    """``method`` was build_control's name for the interpolation; it names the solver's method only, and a control
    option ``method`` is refused as unknown (whatever it would have built), never read as the interpolation."""
    from neuralde_seq.input_checks import UnknownOptionError
    from neuralde_seq.models import model_inputs

    times, values, lengths = _good()
    with pytest.raises(UnknownOptionError, match="unknown control option 'method'"):
        build_control(times, values, lengths, method="linear")
    with pytest.raises(UnknownOptionError, match="unknown control option 'method' for model 'ncde'"):
        model_inputs("ncde", times, values, lengths, method="linear")
