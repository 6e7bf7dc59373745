"""Building a control: `build_control` turns observations into the control's channels at their points
(`observed_channels`: time, values, masks, counts, recencies; missing values, never observed channels and the time unit
handled there) and hands them to the options' interpolation (`neuralde_seq.controls.interpolation.Interpolation`).

A batch of observations is ``times`` (B, T), ``values`` (B, T, C) with NaN marking a missing value, and
``lengths`` (B,) (each sample's valid prefix; anything after it is padding and is ignored). From it
`build_control` builds a `Control`: a batch of piecewise-cubic paths on one shared grid of
*knots* in a parameter s, each sample ending at its own final knot and constant after it.

Parametrisation (the ``parametrization`` option):

- ``"time"``: s is the observation time itself. Every sample must be observed on the same time grid
  (values may be NaN, lengths may differ), as in the benchmarks of the papers (Speech Commands,
  PhysioNet, UEA with dropped points). Rows of ``times`` that disagree raise an error.
- ``"index"``: s is the observation index 0, 1, ..., L_b − 1 of each sample, so samples may have
  different times; real time enters only through the time channel (``time_channel=True``).

The units of s matter: the fields of the CT-FWPs (ode and cde forms) and of GRU-ODE change on a scale of about
one unit of s, and a fixed-step solve takes one step per knot interval unless ``step_size`` is given. With
``"time"`` and times in large units (seconds between hourly observations, or times × 1e9) those steps are far
outside rk4's stability region: measured at initialisation, Oja and Delta give non-finite logits from gaps of
3 to 100 (float32) or 10 to 1e5 (float64), GRU-ODE from 10 to 100; NCDE, Hebb and post-Delta did not. Rescale
the times so that gaps are about 1, or use ``"index"`` (every gap 1 whatever the time units).

Log-signature controls (`LogSignature`) are always indexed by window: window j of every sample occupies
s ∈ [j, j + 1) and the control there is the window's log-signature (the rate of the driving path per unit s), so
batching never changes the grid of any sample (`neuralde_seq.controls.logsignature`).

Missing values (the ``missing`` option) are never silently zero-filled: ``"interpolate"`` interpolates
through them (constant before the first and after the last observation), ``"forward_fill"`` carries the
last observation forward (the first observation backward), and ``"zero"`` writes zeros only together
with a mask channel. A channel with no observation at all in a sample raises an error unless
``unobserved_fill`` names the value to use.

Observations given as tensors are checked by `validate_observations` (shapes, lengths, NaN times, increasing times,
and the finite range of values and times in their dtype). `control_of` builds the control of an `Observations` batch,
which was checked when it was made (`Observations.from_tensors`, or from a checked `IrregularDataset` by
`neuralde_seq.training.InputSpec`): not again; only what the options change is (the times divided by the time unit,
`check_rescaled_times`).
"""

from __future__ import annotations

import torch

from ..observations import Observations, _first, check_min_length, check_rescaled_times, validate_observations
from .control import Control
from .interpolation import ObservedChannels
from .options import ControlOptions, parse_control_options

__all__ = ["build_control", "control_of", "observed_channels"]


def build_control(
    times: torch.Tensor,
    values: torch.Tensor,
    lengths: torch.Tensor | None = None,
    options: ControlOptions | None = None,
    **keywords,
) -> Control:
    """Build a control path from irregularly sampled observations.

    ``build_control(times, values, lengths, ControlOptions(interpolation=Linear(), mask_channel=True))``, or the
    same as keywords: ``build_control(times, values, lengths, interpolation=Linear(), mask_channel=True)`` (the
    interpolation as an object or by name, ``interpolation="linear"``; `parse_control_options` reads them).

    Arguments:
        times: (B, T) observation times, strictly increasing within each sample's length.
        values: (B, T, C) observations; NaN marks a missing value.
        lengths: (B,) number of valid observations per sample (default: all T). Entries after a
            sample's length are padding and are ignored.
        options: the `ControlOptions` (default ``ControlOptions()``: Hermite cubic with a time channel,
            parametrised by time).
        **keywords: options as keywords, on top of ``options``: the fields of `ControlOptions`
            (``interpolation``, ``time_channel``, ``mask_channel``, ``intensity_channel``, ``recency_channel``,
            ``count_unit``, ``missing``, ``unobserved_fill``, ``parametrization``, ``time_unit``) and the
            interpolation's own (``depth``, ``step``, ``logsig_backend``, ``logsig_basis``,
            ``window_start_values`` for log-signatures: `LogSignature`).

    Returns:
        A `Control` with ``channels = C + time_channel + C·(mask_channel + intensity_channel + recency_channel)``
            (for log-signatures, ``logsignature_channels(that number, depth, basis)``, the number of
            log-signature terms of that path in that basis, plus C + C·mask_channel with
            ``window_start_values``).

    Raises:
        ValueError: an option `ControlOptions` or `parse_control_options` refuses (named); options that stand for a
            value of the training split (``time_unit="auto"``, ``intensity_channel="auto"``,
            ``unobserved_fill="mean"``: ``InputSpec.fit`` resolves them); observations that `validate_observations`
            refuses; an all-NaN channel without ``unobserved_fill``; coefficients that overflow.
        UnknownOptionError: a keyword no control takes.
    """
    if options is not None and not isinstance(options, ControlOptions):
        raise TypeError(f"options must be a ControlOptions (keywords go as keywords), got {type(options).__name__}")
    if keywords or options is None:
        options = parse_control_options(keywords, base=options)
    options.check_resolved()
    return options.interpolation.build(observed_channels(times, values, lengths, options))


def control_of(observations: Observations, options: ControlOptions) -> Control:
    """The control of observations checked when they were made, as `build_control` builds it from the same tensors.

    Arguments:
        observations: an `Observations` batch (from `Observations.from_tensors`, or taken from a checked
            `IrregularDataset`): its times, values and lengths are not checked again.
        options: the `ControlOptions` (resolved).

    Returns:
        The `Control` (`build_control`).

    Raises:
        ValueError: unresolved options; a sample with fewer than 2 points; times the time unit takes beyond the
            finite range or makes equal (`check_rescaled_times`); what the options refuse of the observations (an
            all-NaN channel without ``unobserved_fill``, samples on different time grids with the time grid as
            knots).
    """
    if not isinstance(options, ControlOptions):
        raise TypeError(f"options must be a ControlOptions, got {type(options).__name__}")
    options.check_resolved()
    times, values = observations.times, observations.values
    lengths = observations.lengths.to(values.device).long()
    check_min_length(lengths, 2)
    time_unit = _resolved_time_unit(options)
    if time_unit is not None:  # in float64: large raw times keep their resolution (as observed_channels)
        times = (times.double() / time_unit).to(values.dtype)
        check_rescaled_times(times, lengths, time_unit)
    else:
        times = times.to(values.dtype)
    valid = torch.arange(values.shape[1], device=values.device).unsqueeze(0) < lengths.unsqueeze(1)
    return options.interpolation.build(_channels_at_points(times, values, lengths, valid, options))


def _resolved_time_unit(options: ControlOptions) -> float | None:
    """The time unit of options its callers checked (`ControlOptions.check_resolved` refuses "auto")."""
    time_unit = options.time_unit
    assert not isinstance(time_unit, str), "time_unit='auto' is resolved before a control is built"
    return time_unit


def observed_channels(times, values, lengths, options: ControlOptions) -> ObservedChannels:
    """The observations validated and turned into a control's channels at their points.

    Arguments:
        times: (B, T) observation times.
        values: (B, T, C) observations, NaN where missing.
        lengths: (B,) valid observations per sample, or None (all T).
        options: the control's options (resolved): the channels, the missing values' policy, the fill of never
            observed channels, the time unit; the knots are the observation indices 0, 1, ... with
            ``parametrization="index"`` or an interpolation by windows, else the shared time grid, which every
            sample must be observed on.

    Returns:
        `ObservedChannels` with C' = C + time_channel + C·(mask_channel + intensity_channel + recency_channel),
        trimmed to the longest sample.

    Raises:
        ValueError: observations `validate_observations` refuses; a channel with no observation in a sample
            without ``unobserved_fill``; ``unobserved_fill`` with other than C values; samples on different time grids
            with the time grid as knots.
    """
    time_unit = _resolved_time_unit(options)
    if time_unit is not None and isinstance(times, torch.Tensor):
        times = times.double() / time_unit  # in float64: large raw times keep their resolution
    times, values, lengths, valid = validate_observations(times, values, lengths)
    return _channels_at_points(times, values, lengths, valid, options)


def _channels_at_points(times, values, lengths, valid, options: ControlOptions) -> ObservedChannels:
    """`observed_channels` of checked observations: ``times`` (B, T) in the values' dtype (and time unit), ``values``
    (B, T, C), ``lengths`` (B,) long, ``valid`` (B, T) within each sample's length."""
    # Columns after the longest sample are padding of every sample: they must not become knots.
    longest = int(lengths.max())
    times, values, valid = times[:, :longest], values[:, :longest], valid[:, :longest]
    observed = ~torch.isnan(values) & valid.unsqueeze(-1)
    values = _fill_unobserved(values, observed, valid, options.unobserved_fill)
    by_index = options.interpolation.windows or options.parametrization == "index"
    knots = (
        torch.arange(longest, dtype=values.dtype, device=values.device)
        if by_index
        else _shared_time_grid(times, lengths, valid)
    )
    path, names = _channels(times, values, observed, valid, options)
    return ObservedChannels(path, knots, lengths, names)


def _fill_unobserved(values, observed, valid, unobserved_fill):
    """``values`` with every channel a sample never observes set to ``unobserved_fill`` (within its length), or an
    error naming the first such channel when it is None."""
    empty = ~observed.any(dim=1)  # (B, C)
    if not empty.any():
        return values
    if unobserved_fill is None:
        b, c = torch.nonzero(empty)[0].tolist()
        every = empty.all(0)
        where = (
            f"channel {c} has no observation in any sample"
            if every[c]
            else f"sample {b} has no observation in channel {c}"
        )
        raise ValueError(f"all-NaN channel: {where}; pass unobserved_fill=<value> to fill such channels")
    fill = torch.as_tensor(unobserved_fill, dtype=values.dtype, device=values.device)
    if fill.dim() == 1 and fill.shape[0] != values.shape[-1]:
        raise ValueError(
            f"unobserved_fill has {fill.shape[0]} values, one per channel, but the observations have "
            f"{values.shape[-1]} channels"
        )
    return torch.where(empty.unsqueeze(1) & valid.unsqueeze(-1), fill.expand_as(values), values)


def _shared_time_grid(times, lengths, valid):
    """(T,) the one time grid of every sample (``parametrization="time"``): the longest sample's times."""
    reference = times[int(torch.argmax(lengths))]
    agree = (times == reference.unsqueeze(0)) | ~valid
    if not agree.all():
        b = _first(~agree.all(1), 1)[0]
        raise ValueError(
            f"parametrization='time' needs every sample observed on one time grid, but sample {b} "
            "has different times; use parametrization='index' (time then enters as a channel) or "
            "put the samples on a common grid with NaN for missing values"
        )
    return reference


def _channels(times, values, observed, valid, options: ControlOptions):
    """(B, T, C') the control's channels at the points, and their names (`ObservedChannels`)."""
    channel_parts, names = [], []
    if options.time_channel:
        channel_parts.append(times.unsqueeze(-1))
        names.append("time")
    filled = values.masked_fill(~valid.unsqueeze(-1), float("nan"))
    if options.missing == "zero":
        filled = torch.where(observed, filled, torch.zeros_like(filled))
    elif options.missing == "forward_fill":
        filled = _fill_forward(filled)
    channel_parts.append(filled)
    names += [f"x{c}" for c in range(values.shape[-1])]
    if options.mask_channel:
        channel_parts.append(observed.to(values.dtype))
        names += [f"mask{c}" for c in range(values.shape[-1])]
    if options.intensity_channel:
        counts = observed.to(values.dtype).cumsum(dim=1)
        channel_parts.append(counts if options.count_unit is None else counts / options.count_unit)
        names += [f"count{c}" for c in range(values.shape[-1])]
    if options.recency_channel:
        channel_parts.append(_time_since_observed(times, observed))
        names += [f"recency{c}" for c in range(values.shape[-1])]
    return torch.cat(channel_parts, dim=-1), tuple(names)


def _time_since_observed(times: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
    """(B, T, C) the time at each point since the channel's last observation at or before it; the time since the
    sample's first point where the channel has none yet. Padding points (past a sample's length) are never observed,
    so they only carry the values on, which no builder reads."""
    position = torch.arange(times.shape[1], device=times.device).view(1, -1, 1).expand_as(observed)
    last = torch.where(observed, position, torch.zeros_like(position)).cummax(dim=1).values  # 0 before the first
    last_time = torch.gather(times.unsqueeze(-1).expand(*observed.shape), 1, last)
    return (times.unsqueeze(-1) - last_time).to(times.dtype)


def _fill_forward(x: torch.Tensor) -> torch.Tensor:
    """Forward fill NaNs along dim -2, then fill leading NaNs with the first observation."""
    observed = ~torch.isnan(x)
    length = x.shape[-2]
    position = torch.arange(length, device=x.device).view(1, length, 1).expand_as(x)
    last_seen = torch.where(observed, position, torch.zeros_like(position)).cummax(dim=-2).values
    first_seen = torch.where(observed, position, torch.full_like(position, length)).min(dim=-2, keepdim=True).values
    source = torch.where(observed.cumsum(-2) > 0, last_seen, first_seen.clamp(max=length - 1).expand_as(x))
    return torch.gather(x, -2, source)
