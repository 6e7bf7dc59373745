"""Dataset transforms that change which observations a dataset holds: dropping at random, cropping with dropping
(augmentation), subsampling, and unobserved points filled into gaps (`fill_gaps`). (Per-channel standardisation is
`neuralde_seq.data.transforms.standardisation`.)"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..base.datasets import IrregularDataset

__all__ = [
    "drop_observations",
    "num_dropped",
    "random_crop_and_drop",
    "subsample",
    "check_augmentation",
    "fill_gaps",
    "median_step",
]


def num_dropped(rate: float, length: int, observed: int | None = None) -> int:
    """How many time points `drop_observations` removes from a sample.

    Arguments:
        rate: the fraction of time points to drop, in [0, 1).
        length: L, the sample's number of time points.
        observed: how many of them hold an observation (default None: ``length``).

    Returns:
        ``round(rate * length)`` with halves rounded up (not Python's round-half-to-even), capped so that at
            least 2 observed time points remain; never negative.
    """
    observed = length if observed is None else observed
    wanted = int(math.floor(rate * length + 0.5))
    return max(0, min(wanted, observed - 2))


def drop_observations(dataset: IrregularDataset, rate: float, seed: int) -> IrregularDataset:
    """Remove a fraction ``rate`` of each sample's time points, independently per sample.

    For a sample of length L, ``num_dropped(rate, L)`` time points are drawn uniformly without
    replacement among its observed time points (those with at least one non-NaN channel) and all their
    channels are set to NaN. The time grid, the lengths and the kept values are unchanged, and at least
    2 observed time points remain in every sample. Reproducible: the same ``seed`` gives the same
    points (a ``numpy.random.default_rng(seed)`` stream walked over the samples in order).

    This is the "drop 30/50/70 %" protocol of the CDE papers, with the count rounded per sample since
    lengths vary here.

    Arguments:
        dataset: the `IrregularDataset` to thin out; it is not modified.
        rate: the fraction of each sample's time points to drop, in [0, 1).
        seed: seed of the ``numpy.random.default_rng`` stream that picks the points.

    Returns:
        A new dataset with the dropped points' values NaN; ``meta["transforms"]`` records the call.

    Raises:
        ValueError: ``rate`` is not a number in [0, 1).
    """
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating, np.integer)):
        raise ValueError(f"rate must be a number in [0, 1), got {rate!r}")
    rate = float(rate)
    if not (0.0 <= rate < 1.0):
        raise ValueError(f"rate must lie in [0, 1), got {rate}")
    rng = np.random.default_rng(seed)
    values = dataset.values.clone()
    observed_points = (~torch.isnan(values)).any(dim=2).cpu().numpy()  # (N, T)
    lengths = dataset.lengths.cpu().numpy()
    for i in range(len(dataset)):
        candidates = np.flatnonzero(observed_points[i, : lengths[i]])
        k = num_dropped(rate, int(lengths[i]), candidates.size)
        if k == 0:
            continue
        drop = rng.choice(candidates, size=k, replace=False)
        values[i, torch.as_tensor(drop, device=values.device)] = float("nan")
    meta = dict(dataset.meta)
    meta.setdefault("transforms", [])
    meta["transforms"] = list(meta["transforms"]) + [{"drop_observations": {"rate": rate, "seed": seed}}]
    return dataset.replace(values=values, meta=meta)


def random_crop_and_drop(
    dataset: IrregularDataset, drop_rate: float = 0.0, crop: float = 1.0, *, generator: torch.Generator | None = None
) -> IrregularDataset:
    """Training-time augmentation of irregular series: a random contiguous crop, then random drops.

    Per sample, over its observed time points (those with at least one non-NaN channel, within its length),
    n of them:

    1. crop: a fraction f ~ U(``crop``, 1) is drawn and a window of ``ceil(f · n)`` consecutive observed points
       at a uniformly drawn start is kept;
    2. drop: each kept point is dropped independently with probability ``drop_rate``; if fewer than 2 points
       would remain, the 2 window points with the largest draws are kept (as `drop_observations` keeps 2).

    Points not kept become unobserved (all channels NaN): the time grid, the lengths, the labels and the static
    features are unchanged, so the models read a cropped, thinned series exactly as they read missing data
    (the control interpolates over the gaps and is flat before the first and after the last kept point).
    Samples with fewer than 2 observed points are left as they are. ``drop_rate=0`` and ``crop=1`` return an
    unchanged copy. Random numbers come from ``generator`` (default: torch's global generator of the values'
    device, which `neuralde_seq.training.fit` seeds and saves in its resume checkpoints).

    Arguments:
        dataset: the `IrregularDataset` to augment; it is not modified.
        drop_rate: probability of dropping each kept point, in [0, 1).
        crop: the smallest fraction of a sample's observed points a crop keeps, in (0, 1].
        generator: a ``torch.Generator`` on the values' device, or None.

    Returns:
        A new dataset with the points not kept set to NaN.

    Raises:
        ValueError: ``drop_rate`` not in [0, 1) or ``crop`` not in (0, 1].
    """
    drop_rate, crop = check_augmentation(drop_rate, crop)
    values = dataset.values
    if drop_rate == 0.0 and crop == 1.0:
        return dataset.unobserved(torch.zeros(dataset.times.shape, dtype=torch.bool, device=values.device))
    device = values.device
    n, t = values.shape[:2]
    within = torch.arange(t, device=device) < dataset.lengths.to(device)[:, None]
    observed = (~torch.isnan(values)).any(dim=2) & within  # (N, T)
    count = observed.sum(dim=1)  # n per sample
    rank = torch.cumsum(observed.long(), dim=1) - 1  # the rank of each observed point among its sample's
    u = torch.rand(n, 2, generator=generator, device=device, dtype=torch.float64)
    fraction = crop + (1.0 - crop) * u[:, 0]
    window = torch.clamp(torch.ceil(fraction * count).long(), min=2)
    window = torch.minimum(window, count)
    start = torch.floor(u[:, 1] * (count - window + 1)).long().clamp(min=0)
    start = torch.minimum(start, count - window)
    keep = observed & (rank >= start[:, None]) & (rank < (start + window)[:, None])
    draws = torch.rand(n, t, generator=generator, device=device, dtype=torch.float64)
    kept = keep & (draws >= drop_rate)
    # at least 2 points stay: the 2 window points with the largest draws
    best_two = torch.topk(torch.where(keep, draws, torch.full_like(draws, -1.0)), k=min(2, t), dim=1).indices
    rescue = torch.zeros_like(keep).scatter_(1, best_two, True) & keep
    kept = torch.where((kept.sum(dim=1) < 2)[:, None], kept | rescue, kept)
    kept = torch.where((count < 2)[:, None], observed, kept)
    # dropping points keeps the (checked) observations valid: not checked again at every batch
    return dataset.unobserved(observed & ~kept)


def check_augmentation(drop_rate, crop) -> tuple[float, float]:
    """``(drop_rate, crop)`` as floats, checked: drop_rate in [0, 1), crop in (0, 1] (`random_crop_and_drop`).

    Raises:
        ValueError: naming the argument that is out of range or not a number.
    """
    for name, value in (("drop_rate", drop_rate), ("crop", crop)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float, np.floating, np.integer))
            or not math.isfinite(float(value))
        ):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if not 0.0 <= float(drop_rate) < 1.0:
        raise ValueError(f"drop_rate must lie in [0, 1), got {drop_rate}")
    if not 0.0 < float(crop) <= 1.0:
        raise ValueError(f"crop must lie in (0, 1], got {crop}")
    return float(drop_rate), float(crop)


def subsample(dataset: IrregularDataset, factor: int) -> IrregularDataset:
    """Keep every ``factor``-th time point of each sample: indices 0, factor, 2·factor, ... of its own grid.

    For resolution-change robustness runs (a model trained at one sampling rate and tested at another,
    paper 000 Table 5). Time points are counted on each sample's grid whether or not they hold an
    observation, so a sample of length L keeps ``ceil(L / factor)`` of them, and ``times`` keeps the
    kept points' original times (the gaps between them grow by ``factor``). The padded length becomes
    ``ceil(T / factor)``; padding times are every ``factor``-th point of the old padding grid, so rows stay
    strictly increasing. ``factor=1`` returns an unchanged copy. Static features and labels are unchanged.

    Arguments:
        dataset: the `IrregularDataset` to subsample; it is not modified.
        factor: keep every ``factor``-th time point (a positive integer).

    Returns:
        A new dataset with ``times`` (N, ceil(T / factor)), ``values`` (N, ceil(T / factor), C) and
            ``lengths`` ceil(L_i / factor); ``meta["transforms"]`` records the call.

    Raises:
        ValueError: ``factor`` is not a positive integer.
    """
    if isinstance(factor, bool) or not isinstance(factor, (int, np.integer)) or factor < 1:
        raise ValueError(f"factor must be a positive integer, got {factor!r}")
    factor = int(factor)
    # Position j of the result is position j·factor of the input; it lies within sample i's length L
    # exactly when j < ceil(L / factor), so the padding stays NaN and the lengths follow.
    lengths = (dataset.lengths + factor - 1) // factor
    meta = dict(dataset.meta)
    meta["transforms"] = list(meta.get("transforms", [])) + [{"subsample": {"factor": factor}}]
    return dataset.replace(
        times=dataset.times[:, ::factor].clone(), values=dataset.values[:, ::factor].clone(), lengths=lengths, meta=meta
    )


def fill_gaps(
    times: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor, step: float, max_substeps: int = 16
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Observations with unobserved time points added inside their gaps, so that a path parametrised by observation
    index steps about ``step`` in time per knot.

    A gap g between consecutive observations gets k − 1 evenly spaced points, k = min(⌈g / step⌉, max_substeps),
    whose values are NaN in every channel (unobserved). A linear control interpolates them, so the path is the same
    piecewise-linear path with more knots: where the times are whole multiples of ``step`` with points dropped
    (a regular series with missing steps), the result is the regular grid, from the first observation to the last,
    with NaN at the dropped steps (steps dropped before the first or after the last are not made up). Why: a
    model that steps once per observation sees a gap of three steps as one step, and a statistic over its knots
    (a mean, the random features' "ppv") weighs sparsely observed stretches less; on aeon's ItalyPowerDemand and
    PickupGestureWiimoteZ with 30 % of the points removed, random features lost 9-11 points of accuracy that way
    against the same data on its grid (docs/benchmarks.md).

    Arguments:
        times: (B, T) observation times, strictly increasing within each sample's length.
        values: (B, T, C) observations, NaN where missing.
        lengths: (B,) observations per sample (at least 1).
        step: the time step to fill to, positive (e.g. the training data's median step).
        max_substeps: the most pieces one gap is cut into (default 16), so a sparse series' knots grow at most
            that many times.

    Returns:
        ``(times, values, lengths)`` of the filled samples: (B, T'), (B, T', C), (B,); padding after each sample's
        length continues its times with its last step and holds NaN, as `pad_sequences`' padding.

    Raises:
        ValueError: ``step`` not positive and finite, or ``max_substeps`` not a positive integer.
    """
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step) or step <= 0:
        raise ValueError(f"step must be a positive finite number, got {step!r}")
    if isinstance(max_substeps, bool) or not isinstance(max_substeps, int) or max_substeps < 1:
        raise ValueError(f"max_substeps must be a positive integer, got {max_substeps!r}")
    t = times.to(torch.float64)
    lengths = lengths.to(times.device)
    batch, longest = t.shape
    gaps = t[:, 1:] - t[:, :-1]  # (B, T - 1); gap i lies inside sample b when i < L_b - 1
    inside = torch.arange(longest - 1, device=t.device)[None, :] < (lengths[:, None] - 1)
    # a relative tolerance: gaps that are whole multiples of step in floating point are not cut once more
    pieces = torch.where(
        inside, torch.ceil(gaps / step * (1 - 1e-9)).clamp(min=1, max=max_substeps), torch.zeros_like(gaps)
    ).long()
    ends = torch.cumsum(pieces, dim=1)  # new index of observation i + 1
    new_lengths = (ends[:, -1] if longest > 1 else torch.zeros_like(lengths)) + 1
    width = int(new_lengths.max())
    position = torch.arange(width, device=t.device).expand(batch, width)
    # the gap each new point lies in (the sample's last observation: index L_b - 1), and its offset there
    gap = torch.searchsorted(ends.contiguous(), position.contiguous(), right=True)
    gap = torch.minimum(gap, lengths[:, None] - 1)
    starts = torch.cat([torch.zeros(batch, 1, dtype=ends.dtype, device=t.device), ends], dim=1)  # of observation i
    offset = position - torch.gather(starts, 1, gap)
    in_gap = gap < (lengths[:, None] - 1)
    safe = gap.clamp(max=max(longest - 2, 0))
    gap_width = torch.gather(gaps, 1, safe) if longest > 1 else torch.zeros_like(t[:, :1]).expand(batch, width)
    gap_pieces = torch.gather(pieces, 1, safe).clamp(min=1) if longest > 1 else torch.ones_like(gap)
    filled_t = torch.gather(t, 1, gap) + torch.where(
        in_gap, offset * (gap_width / gap_pieces), torch.zeros_like(gap_width)
    )
    within = position < new_lengths[:, None]
    # padding continues each sample's times with its last step (1 for a sample of one point)
    last = torch.gather(filled_t, 1, (new_lengths - 1)[:, None])
    before = torch.gather(filled_t, 1, (new_lengths - 2).clamp(min=0)[:, None])
    last_step = torch.where(new_lengths[:, None] > 1, last - before, torch.ones_like(last))
    out_t = torch.where(within, filled_t, last + last_step * (position - new_lengths[:, None] + 1))
    observed = within & (offset == 0)
    out_v = torch.full((batch, width) + tuple(values.shape[2:]), float("nan"), dtype=values.dtype, device=values.device)
    source = torch.gather(
        values, 1, gap.view(batch, width, *([1] * (values.dim() - 2))).expand(batch, width, *values.shape[2:])
    )
    out_v[observed] = source[observed]
    return out_t.to(times.dtype), out_v, new_lengths.to(lengths.dtype)


def fill_gaps_reference(
    times: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor, step: float, max_substeps: int = 16
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`fill_gaps` written sample by sample: the plain reference its batched form is tested against (same
    arguments and result; ``step`` and ``max_substeps`` unchecked)."""
    rows_t, rows_v = [], []
    for b in range(times.shape[0]):
        n = int(lengths[b])
        t = times[b, :n].to(torch.float64)
        gaps = t[1:] - t[:-1]
        pieces = torch.ceil(gaps / step * (1 - 1e-9)).clamp(min=1, max=max_substeps).long()
        start = torch.repeat_interleave(t[:-1], pieces)
        first = torch.repeat_interleave(torch.cumsum(pieces, 0) - pieces, pieces)
        offset = torch.arange(int(pieces.sum()), device=t.device) - first
        filled_t = torch.cat([start + offset * torch.repeat_interleave(gaps / pieces, pieces), t[-1:]])
        observed = torch.cat([offset == 0, torch.ones(1, dtype=torch.bool, device=t.device)])
        filled_v = torch.full(
            (filled_t.shape[0],) + tuple(values.shape[2:]), float("nan"), dtype=values.dtype, device=values.device
        )
        filled_v[observed] = values[b, :n]
        rows_t.append(filled_t)
        rows_v.append(filled_v)
    new_lengths = torch.tensor([r.shape[0] for r in rows_t], dtype=torch.long, device=lengths.device)
    width = int(new_lengths.max())
    out_t = torch.empty(len(rows_t), width, dtype=torch.float64, device=times.device)
    out_v = torch.full(
        (len(rows_v), width) + tuple(values.shape[2:]), float("nan"), dtype=values.dtype, device=values.device
    )
    for b, (t, v) in enumerate(zip(rows_t, rows_v)):
        last_step = float(t[-1] - t[-2]) if t.shape[0] > 1 else 1.0
        out_t[b, : t.shape[0]] = t
        out_t[b, t.shape[0] :] = t[-1] + last_step * torch.arange(
            1, width - t.shape[0] + 1, dtype=torch.float64, device=t.device
        )
        out_v[b, : v.shape[0]] = v
    return out_t.to(times.dtype), out_v, new_lengths


def median_step(times: torch.Tensor, lengths: torch.Tensor) -> float:
    """The median time step between consecutive observations of every sample (within its length): `fill_gaps`'
    step by default.

    Arguments:
        times: (B, T) observation times; lengths: (B,) observations per sample.

    Returns:
        The median positive step (1.0 when no sample has two observations).
    """
    inside = torch.arange(times.shape[1] - 1, device=times.device).unsqueeze(0) < (lengths.unsqueeze(1) - 1)
    steps = (times[:, 1:] - times[:, :-1]).to(torch.float64)[inside]
    steps = steps[steps > 0]
    return float(steps.median()) if steps.numel() else 1.0
