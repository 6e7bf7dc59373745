"""Natural cubic spline coefficients through missing values, for every sample and channel at once.

`natural_cubic_coefficients` computes what ``torchcde.natural_cubic_coeffs`` computes, in the same
layout, but without torchcde's Python loop over every (sample, channel) when values are missing (about
an hour for PhysioNet 2019). Each scalar series (one channel of one sample) gets its own spline:

- its *knots* are its observed (non-NaN) points, plus every point before its first observation (with
  the first observed value) and every point after its last observation (with the last observed value),
  so the spline is constant before the first and after the last observation;
- through the knots runs the natural cubic spline (second derivative zero at the first and last knot);
- a series with a single observation is constant; a series with no observation at all gets zero
  coefficients (the constant path 0), as in torchcde;
- the coefficients are then given on every interval [t_i, t_{i+1}) of the full grid, expanded around
  t_i, whether or not t_i is a knot of that series.

All series are solved together, by Thomas' algorithm vectorised over every series, with Python loops
only over the time points (and over chunks of many samples, to bound the memory). Each series' system
couples a knot to its neighbouring *knots*, which may be several grid points away: the forward sweep
carries each series' elimination state unchanged through the points that are not its knots, and the
back substitution carries its solution and current cubic the same way, so each series' own (compacted)
system is solved exactly without gathering its knots. Series that are observed at every point share
one matrix: then its elimination is done once, and only the right-hand sides are swept.

At PhysioNet's shape (72 time points, 34 channels, ~88 % missing values) this takes 0.3 to 0.4 ms per
sample on one CPU thread, against about 0.1 s per sample for torchcde's loop (benchmarks/controls.py,
docs/performance.md).

The Hermite cubic, linear and rectilinear interpolations (`neuralde_seq.controls.cubic`,
`neuralde_seq.controls.linear`) go through missing values by linear interpolation (`fill_missing_linear`, the
fill torchcde applies in a Python loop over every (sample, channel); here vectorised, the same values).
"""

from __future__ import annotations

import math

import torch

__all__ = ["natural_cubic_coefficients", "fill_missing_linear"]

# Series (sample x channel) x time points solved together at most. The solve keeps about 20 arrays of
# that many elements (about 640 MiB in float64), so this bounds the working memory for datasets of
# millions of series; larger inputs are solved a chunk of samples at a time.
_ELEMENTS_PER_SOLVE = 2**22
# On a CPU, rows of about this many series (256 KiB in float64) keep the row-by-row sweeps in cache:
# about 1.5x faster than rows of 70,000 series (measured at 72 time points, one thread).
_SERIES_PER_SOLVE_CPU = 2**15


def natural_cubic_coefficients(
    x: torch.Tensor, t: torch.Tensor | None = None, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """Coefficients of the natural cubic spline through the non-NaN values of every channel of ``x``.

    Equal (up to rounding) to ``torchcde.natural_cubic_coeffs(x, t)`` when ``lengths`` is None, and
    computed for all samples and channels at once (see the module docstring for what happens before the
    first and after the last observation of a channel, and for channels with one or no observation).

    Arguments:
        x: (..., length, channels) floating point values, where ... is any number of batch dimensions and
            length >= 2; NaN marks a missing value.
        t: (length,) strictly increasing, finite times of the observations, with ``x``'s dtype and device.
            Default: 0, 1, ..., length - 1.
        lengths: optional (...) integer tensor (the batch shape of ``x``): the number of valid time points
            of each sample, 2 <= lengths <= length. Each sample's spline is built on its own first
            ``lengths`` points only, as if it were alone and that long: entries of ``x`` from there on are
            ignored (they may hold anything) and the sample's coefficients on the intervals
            ``lengths - 1, ..., length - 2`` are zero. Default: every sample has all ``length`` points.

    Returns:
        (..., length - 1, 4 * channels) tensor, ``x``'s dtype and device, torchcde's layout: the
            concatenation along the last dimension of a, b, two_c, three_d, each (..., length - 1, channels).
            On [t_i, t_{i+1}) channel c of a sample is a + b f + (two_c / 2) f² + (three_d / 3) f³ with
            f = s - t_i and the coefficients taken at interval i, channel c. Differentiable with respect to
            ``x`` (and ``t``) by autograd.
    """
    x, t, lengths = _validate(x, t, lengths)
    *batch_shape, length, channels = x.shape
    samples = math.prod(batch_shape)
    x = x.reshape(samples, length, channels)
    lengths = lengths.reshape(samples)

    out = x.new_empty(samples, length - 1, 4, channels)
    per_solve = _samples_per_solve(length, channels, x.device)
    for start in range(0, samples, per_solve):
        block = x[start : start + per_solve]
        n = block.shape[0]
        # Series layout (time, sample x channel): each step of the sweeps reads one contiguous row.
        series = block.permute(1, 0, 2).reshape(length, n * channels)
        series_lengths = lengths[start : start + n].repeat_interleave(channels)
        pieces = _series_coefficients(series, t, series_lengths)  # (length - 1, 4, n * channels)
        # Into torchcde's layout: a, b, two_c, three_d of all channels side by side per interval.
        out[start : start + n] = pieces.view(length - 1, 4, n, channels).permute(2, 0, 1, 3)
    return out.view(*batch_shape, length - 1, 4 * channels)


def _samples_per_solve(length: int, channels: int, device: torch.device) -> int:
    """How many samples to solve together: at most _ELEMENTS_PER_SOLVE (series x time points), which
    bounds the memory, and on a CPU at most _SERIES_PER_SOLVE_CPU series, so that the rows of the sweeps
    stay in cache."""
    channels = max(channels, 1)
    samples = _ELEMENTS_PER_SOLVE // (length * channels)
    if device.type == "cpu":
        samples = min(samples, _SERIES_PER_SOLVE_CPU // channels)
    return max(1, samples)


def _validate(x, t, lengths):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating point tensor, got dtype {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., length, channels), got {tuple(x.shape)}")
    length = x.shape[-2]
    if length < 2:
        raise ValueError(f"x must have at least 2 time points (dimension -2), got shape {tuple(x.shape)}")
    if t is None:
        t = torch.arange(length, dtype=x.dtype, device=x.device)
    else:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"t must be a torch tensor or None, got {type(t).__name__}")
        if t.dim() != 1 or t.shape[0] != length:
            raise ValueError(
                f"t must have shape (length,) = ({length},) to match x of shape {tuple(x.shape)}, got {tuple(t.shape)}"
            )
        if t.dtype != x.dtype or t.device != x.device:
            raise ValueError(f"t must have x's dtype and device ({x.dtype}, {x.device}), got ({t.dtype}, {t.device})")
        if not torch.isfinite(t).all():
            raise ValueError("t must be finite (no NaN or infinite times)")
        if not (t[1:] > t[:-1]).all():
            i = int(torch.nonzero(t[1:] <= t[:-1])[0])
            raise ValueError(f"t must be strictly increasing, but t[{i}]={t[i].item()} >= t[{i + 1}]={t[i + 1].item()}")
    batch_shape = x.shape[:-2]
    if lengths is None:
        lengths = torch.full(batch_shape, length, dtype=torch.long, device=x.device)
    else:
        lengths = torch.as_tensor(lengths, device=x.device)
        if lengths.dtype == torch.bool or lengths.is_floating_point() or lengths.is_complex():
            raise TypeError(f"lengths must be an integer tensor, got dtype {lengths.dtype}")
        if lengths.shape != batch_shape:
            raise ValueError(
                f"lengths must have the batch shape of x, {tuple(batch_shape)}, got {tuple(lengths.shape)}"
            )
        lengths = lengths.long()
        if lengths.numel() and (int(lengths.min()) < 2 or int(lengths.max()) > length):
            raise ValueError(
                f"lengths must lie in [2, {length}] (a spline needs 2 points; x has {length}), got "
                f"values from {int(lengths.min())} to {int(lengths.max())}"
            )
    return x, t, lengths


def _series_coefficients(values: torch.Tensor, t: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(length, N) series (NaN = missing), t (length,), lengths (N,) -> (length - 1, 4, N): a, b, two_c,
    three_d per interval of the full grid (zero on intervals at and after a series' end)."""
    position = torch.arange(values.shape[0], device=values.device).unsqueeze(1)
    valid = position < lengths
    observed = ~torch.isnan(values) & valid
    if bool(torch.equal(observed, valid)):
        return _complete_series_coefficients(values, t, lengths, valid)
    return _incomplete_series_coefficients(values, t, lengths, observed)


def _complete_series_coefficients(values, t, lengths, valid) -> torch.Tensor:
    """`_series_coefficients` when every series is observed at each of its points.

    Then every point is a knot and, up to each series' own last row, all series share one matrix, so
    its elimination (a recursion in the times only) is done once, and only the right-hand sides are
    swept over the series: about 5 operations per time point instead of about 70.
    """
    length, n = values.shape
    values = torch.where(valid, values, 0)  # the padding after a series' end may hold NaN
    gap = 1 / (t[1:] - t[:-1])  # (length - 1,) reciprocal gaps
    secant = (values[1:] - values[:-1]) * gap.unsqueeze(1)
    scaled_rise = 3 * secant * gap.unsqueeze(1)
    # Row i: gap[i-1] m[i-1] + 2 (gap[i-1] + gap[i]) m[i] + gap[i] m[i+1] = scaled_rise[i-1] + scaled_rise[i].
    # Rows 0..i-1 do not depend on where a series ends, so the eliminated upper entries are shared.
    gaps = gap.unbind(0)
    pivots, uppers = [2 * gaps[0]], [0.5 * torch.ones_like(gaps[0])]
    for i in range(1, length - 1):
        pivots.append(2 * (gaps[i - 1] + gaps[i]) - gaps[i - 1] * uppers[-1])
        uppers.append(gaps[i] / pivots[-1])
    rhs_rows = scaled_rise.unbind(0)
    eliminated = [rhs_rows[0] / pivots[0]]
    for i in range(1, length - 1):
        eliminated.append((rhs_rows[i - 1] + rhs_rows[i] - gaps[i - 1] * eliminated[-1]) / pivots[i])
    # Each series' last row, gap[e-1] m[e-1] + 2 gap[e-1] m[e] = scaled_rise[e-1] (e = its end), eliminated.
    end = lengths - 1
    last = (end - 1).unsqueeze(0)
    rhs_end, previous_end = scaled_rise.gather(0, last)[0], torch.stack(eliminated).gather(0, last)[0]
    gap_end, upper_end = gap[end - 1], torch.stack(uppers)[end - 1]
    slope = (rhs_end - gap_end * previous_end) / (gap_end * (2 - upper_end))
    # Back substitution; rows at and after a series' end keep its end slope.
    varying = not bool((lengths == length).all())
    backwards = [slope]
    for i in range(length - 2, -1, -1):
        slope = eliminated[i] - uppers[i] * slope
        if varying:
            slope = torch.where(i >= end, backwards[-1], slope)
        backwards.append(slope)
    slopes = torch.stack(backwards[::-1])
    two_c = (6 * secant - 4 * slopes[:-1] - 2 * slopes[1:]) * gap.unsqueeze(1)
    three_d = (3 * (slopes[:-1] + slopes[1:]) - 6 * secant) * (gap * gap).unsqueeze(1)
    pieces = torch.stack([values[:-1], slopes[:-1], two_c, three_d], dim=1)
    if varying:
        inside = torch.arange(length - 1, device=values.device).unsqueeze(1) < end
        pieces = torch.where(inside.unsqueeze(1), pieces, 0)
    return pieces


def _incomplete_series_coefficients(values, t, lengths, observed) -> torch.Tensor:
    """`_series_coefficients` with missing values: each series through its own knots.

    Everything runs row by row (one time point of all N series at a time): rows stay in cache, whereas
    whole (length, N) temporaries cost a fresh allocation and a pass through memory each.
    """
    length, n = values.shape
    seen = observed.any(0)
    end = lengths - 1
    # First / last observation (argmax returns the first maximal entry); a never observed series gets
    # first = last = its end, so that every one of its points is a knot, with value 0.
    first = torch.where(seen, observed.byte().argmax(0), end)
    last = torch.where(seen, length - 1 - observed.flip(0).byte().argmax(0), end)
    first_value = torch.where(seen, values.gather(0, first.unsqueeze(0)).squeeze(0), 0)
    last_value = torch.where(seen, values.gather(0, last.unsqueeze(0)).squeeze(0), 0)
    times = t.unbind(0)

    # Forward elimination. Knot j's row of the tridiagonal system in the knots' first derivatives m
    # (continuity of the second derivative; natural ends) is
    #   r_{j-1} m_{j-1} + 2 (r_{j-1} + r_j) m_j + r_j m_{j+1} = s_{j-1} + s_j,
    # with r the reciprocal gap to the next knot and s = 3 rise r², zero past either end. Its r_j and s_j
    # are only known at the next knot, so row j is eliminated on reaching knot j + 1. The state, carried
    # unchanged through points that are not knots, belongs to the latest knot j: its time and value,
    # r_{j-1}, s_{j-1}, and the eliminated upper entry and right-hand side of row j - 1.
    zero = values.new_zeros(n)
    knot_time = times[0].expand(n)
    knot_value = first_value  # point 0 is always a knot: at or before the first observation
    gap_before, scaled_rise_before = zero, zero
    upper_before, rhs_before = zero, zero
    knot_rows, saved = [], []
    for i in range(1, length):
        observed_row = observed[i]
        knot = observed_row | (((i <= first) | (i >= last)) & (i <= end))
        value = torch.where(observed_row, values[i], torch.where(i <= first, first_value, last_value))
        gap = 1 / (times[i] - knot_time)
        rise = value - knot_value
        scaled_rise = 3 * rise * gap * gap
        pivot = 2 * (gap_before + gap) - gap_before * upper_before
        upper = gap / pivot
        rhs = (scaled_rise_before + scaled_rise - gap_before * rhs_before) / pivot
        # Row j's solution needs these at the back substitution, and piece j (knot j to knot i) its
        # start, value, reciprocal gap and rise.
        knot_rows.append(knot)
        saved.append((upper, rhs, knot_time, knot_value, gap, rise))
        knot_time = torch.where(knot, times[i], knot_time)
        knot_value = torch.where(knot, value, knot_value)
        gap_before = torch.where(knot, gap, gap_before)
        scaled_rise_before = torch.where(knot, scaled_rise, scaled_rise_before)
        upper_before = torch.where(knot, upper, upper_before)
        rhs_before = torch.where(knot, rhs, rhs_before)
    # The last knot's row, r_{K-2} m_{K-2} + 2 r_{K-2} m_{K-1} = s_{K-2}, eliminated (every series has at
    # least two knots, its first and last point, so r_{K-2} > 0).
    slope = (scaled_rise_before - gap_before * rhs_before) / (gap_before * (2 - upper_before))

    # Back substitution, from the last point down. The carried piece is the cubic of the latest knot at
    # or before the current point (value, derivative, 2c, 3d at its knot); interval i is that cubic
    # re-expanded around t_i. Past a series' end the carried piece is still zero, so are its intervals.
    piece_time, piece_a, piece_b, piece_c, piece_d = zero, zero, zero, zero, zero
    columns = []
    for i in range(length - 1, -1, -1):
        if i < length - 1:
            offset = times[i] - piece_time
            # In reverse (three_d, two_c, b, a): the list is reversed once at the end.
            columns += [
                piece_d,
                piece_c + 2 * offset * piece_d,
                piece_b + offset * (piece_c + offset * piece_d),
                piece_a + offset * (piece_b + offset * (piece_c / 2 + offset * piece_d / 3)),
            ]
        if i == 0:
            break
        knot = knot_rows[i - 1]
        upper, rhs, start_time, start_value, gap, rise = saved[i - 1]
        start_slope = rhs - upper * slope
        secant = rise * gap
        two_c = (6 * secant - 4 * start_slope - 2 * slope) * gap
        three_d = (3 * (start_slope + slope) - 6 * secant) * gap * gap
        piece_time = torch.where(knot, start_time, piece_time)
        piece_a = torch.where(knot, start_value, piece_a)
        piece_b = torch.where(knot, start_slope, piece_b)
        piece_c = torch.where(knot, two_c, piece_c)
        piece_d = torch.where(knot, three_d, piece_d)
        slope = torch.where(knot, start_slope, slope)
    return torch.stack(columns[::-1]).view(length - 1, 4, n)


def fill_missing_linear(path: torch.Tensor, knots: torch.Tensor) -> torch.Tensor:
    """Missing values filled by linear interpolation in the knots, for every sample and channel at once.

    The values ``torchcde.linear_interpolation_coeffs`` gives (torchcde loops over each (sample, channel)
    with missing values in Python: about a second per few hundred samples): between two observations the
    straight line through them, before the first and after the last observation that observation's value,
    and 0 everywhere for a series with no observation.

    Arguments:
        path: (N, L, C) points, NaN where missing.
        knots: (L,) strictly increasing parameter values of the points.

    Returns:
        (N, L, C) points without NaN; ``path`` itself when nothing is missing.
    """
    observed = ~torch.isnan(path)
    if bool(observed.all()):
        return path
    length = path.shape[-2]
    position = torch.arange(length, device=path.device).view(1, length, 1)
    # the observation at or before each point, and the one at or after it (-1 / length: none)
    before = torch.where(observed, position, -1).cummax(dim=-2).values
    after = torch.where(observed, position, length).flip(-2).cummin(dim=-2).values.flip(-2)
    has_before, has_after = before >= 0, after < length
    before, after = before.clamp(min=0), after.clamp(max=length - 1)
    value_before, value_after = path.gather(-2, before), path.gather(-2, after)
    time_before, time_after = knots[before], knots[after]
    # a safe denominator where no line is drawn, so that no inf or NaN enters a gradient through torch.where
    span = torch.where(after > before, time_after - time_before, torch.ones_like(time_after))
    ratio = torch.where(after > before, (knots.view(1, length, 1) - time_before) / span, torch.zeros_like(span))
    line = value_before + ratio * (value_after - value_before)
    filled = torch.where(has_before & has_after, line, torch.where(has_before, value_before, value_after))
    filled = torch.where(observed, path, filled)
    never_observed = ~observed.any(dim=-2, keepdim=True)
    return torch.where(never_observed, torch.zeros_like(filled), filled)
