"""The features a random-feature map reads, by kind, each kind a registry of small objects (package docstring,
"Features"):

- `STATE_FEATURES`: pooled from the reservoir's states (B, K, H) over each sample's knots ("final", "mean", "times",
  "ppv", "mpv", "max"), each a `StateFeature` with its pooling;
- `PATH_FEATURES`: of the series' own values, beside the reservoir ("values", "levels"), each a `PathFeature` with
  its width and computation;
- `LOGSIGNATURE_FEATURES`: the log-signatures of the path over windows, for ``reservoir="logsignature"`` ("final",
  "times", "windows"), each a `LogSignatureFeature` with its windows.

For a linear CDE on a CPU, "final", "mean", "max", "ppv" and "mpv" also come from the fused kernel
(`neuralde_seq.ops.reservoir_features`), which must give the same numbers as the poolings here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from ..signatures import logsignature

__all__ = [
    "StateFeature",
    "PathFeature",
    "LogSignatureFeature",
    "Pooling",
    "STATE_FEATURES",
    "PATH_FEATURES",
    "LOGSIGNATURE_FEATURES",
    "FEATURES",
    "positive_proportion",
    "positive_mean",
    "level_thresholds",
    "logsignature_feature",
]


def _fractions(end_index: torch.Tensor, num_times: int) -> torch.Tensor:
    """(B, n) knot indices round(j/n · end) for j = 1..n."""
    steps = torch.arange(1, num_times + 1, dtype=torch.float64, device=end_index.device) / num_times
    return torch.round(end_index.to(torch.float64).unsqueeze(1) * steps).long()


def _inside(end_index: torch.Tensor, knots: int, dtype) -> torch.Tensor:
    """(B, K, 1) 1 at each sample's knots 0..end, 0 after."""
    index = torch.arange(knots, device=end_index.device).unsqueeze(0)
    return (index <= end_index.unsqueeze(1)).to(dtype).unsqueeze(-1)


def _take(states: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """states (B, K, H) at per-sample knots index (B, n): (B, n·H)."""
    gathered = torch.gather(states, 1, index.unsqueeze(-1).expand(-1, -1, states.shape[-1]))
    return gathered.flatten(1)


def positive_proportion(
    states: torch.Tensor,
    inside: torch.Tensor,
    biases: torch.Tensor,
    spreads: torch.Tensor | None = None,
    temperature: float = 0.0,
) -> torch.Tensor:
    """The "ppv" feature: for each threshold, the proportion of a sample's knots at which each unit exceeds it; with
    ``temperature`` > 0 its smooth stand-in, the mean over the knots of σ((h − b) / (temperature · spread)), which
    tends to the exact proportion as the temperature goes to 0 (tests/test_reservoir_tuning.py) and has gradients
    in the states and thresholds.

    Arguments:
        states: (B, K, H) states at the knots.
        inside: (B, K, 1) 1 at each sample's knots, 0 after its end.
        biases: (num_biases, H) thresholds.
        spreads: (H,) each unit's spread, the unit of its transition width (needed with temperature > 0).
        temperature: 0 (default): the exact step 1[h > b]; > 0: the sigmoid's width in units of ``spreads``.

    Returns:
        (B, num_biases·H) proportions in [0, 1], the thresholds' blocks in order.
    """
    if temperature > 0 and spreads is None:
        raise ValueError("positive_proportion: a temperature > 0 needs spreads (each unit's unit of width)")
    count = inside.sum(dim=1)
    parts = []
    for bias in biases:
        if temperature > 0 and spreads is not None:
            above = torch.sigmoid((states - bias) / (temperature * spreads))
        else:
            above = (states > bias).to(states.dtype)
        parts.append((above * inside).sum(dim=1) / count)
    return torch.cat(parts, dim=1)


def positive_mean(states: torch.Tensor, inside: torch.Tensor, biases: torch.Tensor) -> torch.Tensor:
    """The "mpv" feature (MultiRocket's mean of positive values): for each threshold, the mean of h − b over a
    sample's knots at which h exceeds b, 0 where it never does.

    Arguments:
        states: (B, K, H) states at the knots.
        inside: (B, K, 1) 1 at each sample's knots, 0 after its end.
        biases: (num_biases, H) thresholds.

    Returns:
        (B, num_biases·H) means, the thresholds' blocks in order.
    """
    parts = []
    for bias in biases:
        excess = (states - bias).clamp(min=0) * inside
        above = ((states > bias).to(states.dtype) * inside).sum(dim=1)
        parts.append(excess.sum(dim=1) / above.clamp(min=1))
    return torch.cat(parts, dim=1)


# ------------------------------------------------------------------------------------------------ pooled states


class Pooling(NamedTuple):
    """What a `StateFeature` pools a batch's states with."""

    end_index: torch.Tensor  # (B,) each sample's final knot
    inside: torch.Tensor  # (B, K, 1) 1 at each sample's knots 0..end, 0 after (the states' dtype)
    count: torch.Tensor  # type: ignore[assignment]  # (B, 1) each sample's knots (a field hiding tuple.count)
    num_times: int  # n, the fractions read by "times"
    biases: torch.Tensor | None  # (num_biases, H) the "ppv" and "mpv" thresholds
    spreads: torch.Tensor | None  # (H,) the units' spreads, the smooth "ppv"'s unit of width
    temperature: float  # 0: the exact "ppv"; > 0: its smooth stand-in (`positive_proportion`)


@dataclasses.dataclass(frozen=True)
class StateFeature:
    """A feature pooled from a reservoir's states.

    Attributes:
        name: its name in ``features``.
        pool: ``pool(states (B, K, H), pooling: Pooling) -> (B, width)``.
        thresholds: whether it reads the per-unit thresholds (``biases_``, drawn at fit).
    """

    name: str
    pool: Callable[[torch.Tensor, Pooling], torch.Tensor]
    thresholds: bool = False


def _final(states: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """h at the sample's final knot, (B, H)."""
    return states[torch.arange(states.shape[0], device=states.device), pooling.end_index]


def _mean(states: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """The mean of h over the sample's knots, (B, H)."""
    return (states * pooling.inside).sum(dim=1) / pooling.count


def _at_fractions(states: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """h at the fractions 1/n, ..., 1 of the sample's knots, (B, n·H)."""
    return _take(states, _fractions(pooling.end_index, pooling.num_times))


def _max(states: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """The largest h over the sample's knots, (B, H)."""
    return states.masked_fill(pooling.inside == 0, -torch.inf).amax(dim=1)


def _thresholds(pooling: Pooling) -> torch.Tensor:
    if pooling.biases is None:
        raise ValueError("the 'ppv' and 'mpv' features read thresholds (RandomFeatures.fit draws them): biases is None")
    return pooling.biases


def _proportion_above(states: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    return positive_proportion(states, pooling.inside, _thresholds(pooling), pooling.spreads, pooling.temperature)


def _mean_above(states: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    return positive_mean(states, pooling.inside, _thresholds(pooling))


STATE_FEATURES: dict[str, StateFeature] = {
    feature.name: feature
    for feature in (
        StateFeature("final", _final),
        StateFeature("mean", _mean),
        StateFeature("times", _at_fractions),
        StateFeature("ppv", _proportion_above, thresholds=True),
        StateFeature("mpv", _mean_above, thresholds=True),
        StateFeature("max", _max),
    )
}
"""The features pooled from a reservoir's states, by name."""


# ------------------------------------------------------------------------------------------------ the path itself


@dataclasses.dataclass(frozen=True)
class PathFeature:
    """A feature of the series' own values (rescaled, missing ones linearly interpolated), which does not depend on
    the reservoir (computed beside it; a log-signature map reads them too).

    Attributes:
        name: its name in ``features``.
        width: ``width(channels, num_times, num_levels) -> columns``.
        compute: ``compute(points (B, K, C), end (B,), num_times, levels (C, num_levels) or None) -> (B, width)``.
    """

    name: str
    width: Callable[[int, int, int], int]
    compute: Callable[[torch.Tensor, torch.Tensor, int, torch.Tensor | None], torch.Tensor]


def _values(points: torch.Tensor, end: torch.Tensor, num_times: int, levels: torch.Tensor | None) -> torch.Tensor:
    """The values at the fractions 1/n, ..., 1 of the knots, and their mean over the knots, (B, (n + 1)·C)."""
    inside = _inside(end, points.shape[1], points.dtype)
    mean = (points * inside).sum(dim=1) / inside.sum(dim=1)
    return torch.cat([_take(points, _fractions(end, num_times)), mean], dim=1)


def level_thresholds(points: torch.Tensor, end: torch.Tensor, num_levels: int) -> torch.Tensor:
    """The "levels" thresholds: each channel's quantiles at (k + 1/2) / num_levels of its training values at the
    knots.

    Arguments:
        points: (B, K, C) the training series' values at their knots.
        end: (B,) each series' final knot.
        num_levels: L, thresholds per channel.

    Returns:
        (C, L) float64 tensor on the CPU.
    """
    inside = _inside(end, points.shape[1], torch.bool).squeeze(-1)
    probabilities = (torch.arange(num_levels, dtype=torch.float64) + 0.5) / num_levels
    pooled = points[inside].detach().cpu().to(torch.float64).numpy()  # (M, C)
    return torch.from_numpy(np.quantile(pooled, probabilities.numpy(), axis=0).T.copy())


def _levels(points: torch.Tensor, end: torch.Tensor, num_times: int, levels: torch.Tensor | None) -> torch.Tensor:
    """The "levels" feature (package docstring) of points (B, K, C) at knots 0..end: per channel, the proportion of
    knots above each of the thresholds ``levels`` (C, L), the mean excess there, and the proportion over each of the
    n = ``num_times`` parts, (B, C·L·(n + 2)).

    Each sample's values are sorted once per part, so that the count above a threshold is a binary search and
    the sum above it a difference of running sums (O(K log K + L log K), not O(K·L), per sample and channel);
    the running sums in float64."""
    if levels is None:
        raise ValueError("the 'levels' feature reads thresholds (RandomFeatures.fit sets them): levels is None")
    B, K, C = points.shape
    thresholds = levels.to(device=points.device, dtype=points.dtype)  # (C, L)
    L = thresholds.shape[1]
    knots = torch.arange(K, device=points.device)
    inside = knots.unsqueeze(0) <= end.unsqueeze(1)  # (B, K)
    # part j of a sample: its knots after the fraction (j - 1)/n and up to j/n (the first from knot 0)
    bounds = _fractions(end, num_times)  # (B, n)
    part = (knots.view(1, K, 1) > bounds.unsqueeze(1)[:, :, :-1]).sum(dim=-1)  # (B, K)
    query = thresholds.unsqueeze(0).expand(B, C, L).contiguous()

    def above(mask: torch.Tensor, sums: bool):
        """(count above each threshold, knots in the mask) and, with sums, the sum of the excess above it."""
        values = points.transpose(1, 2).masked_fill(~mask.unsqueeze(1), -torch.inf)  # (B, C, K)
        ordered = values.sort(dim=-1).values
        total = mask.sum(dim=1).view(B, 1, 1).to(torch.float64)
        count = K - torch.searchsorted(ordered, query, right=True).to(torch.float64)  # values > threshold
        if not sums:
            return count, total
        running = torch.cat(
            [
                torch.zeros(B, C, 1, dtype=torch.float64, device=points.device),
                ordered.to(torch.float64).nan_to_num(neginf=0.0).cumsum(dim=-1),
            ],
            dim=-1,
        )
        first = (K - count).long()  # the first sorted position above the threshold
        excess = running[..., -1:] - running.gather(-1, first) - query.to(torch.float64) * count
        return count, total, excess

    count, total, excess = above(inside, True)
    parts = [count / total, excess / count.clamp(min=1)]
    for j in range(num_times):
        part_count, part_total = above(inside & (part == j), False)
        parts.append(part_count / part_total.clamp(min=1))
    # (B, C, L) blocks -> per channel: proportions, mean excesses, then each part's proportions
    return torch.stack(parts, dim=2).reshape(B, C * (num_times + 2) * L).to(points.dtype)


PATH_FEATURES: dict[str, PathFeature] = {
    feature.name: feature
    for feature in (
        PathFeature("values", lambda channels, num_times, num_levels: (num_times + 1) * channels, _values),
        PathFeature("levels", lambda channels, num_times, num_levels: channels * num_levels * (num_times + 2), _levels),
    )
}
"""The features of the series' own values, by name."""


# ------------------------------------------------------------------------------------------------ log-signatures


@dataclasses.dataclass(frozen=True)
class LogSignatureFeature:
    """Log-signatures of the piecewise-linear (time, values) path over windows of each sample's knots.

    Attributes:
        name: its name in ``features``.
        windows: ``windows(end (B,), num_times) -> (starts, stops)``, each (B, windows) knot indices.
    """

    name: str
    windows: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]


def _whole(end: torch.Tensor, num_times: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One window: the whole path."""
    return torch.zeros_like(end).unsqueeze(1), end.unsqueeze(1)


def _from_start(end: torch.Tensor, num_times: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The path from its start to each fraction 1/n, ..., 1."""
    stops = _fractions(end, num_times)
    return torch.zeros_like(stops), stops


def _consecutive(end: torch.Tensor, num_times: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The n consecutive windows between the fractions."""
    stops = _fractions(end, num_times)
    return torch.cat([torch.zeros_like(stops[:, :1]), stops[:, :-1]], dim=1), stops


LOGSIGNATURE_FEATURES: dict[str, LogSignatureFeature] = {
    feature.name: feature
    for feature in (
        LogSignatureFeature("final", _whole),
        LogSignatureFeature("times", _from_start),
        LogSignatureFeature("windows", _consecutive),
    )
}
"""The features of ``reservoir="logsignature"``, by name."""

# Every feature name, in the order the docs list them.
FEATURES = tuple(dict.fromkeys([*STATE_FEATURES, *PATH_FEATURES, *LOGSIGNATURE_FEATURES]))


def logsignature_feature(
    points: torch.Tensor, end: torch.Tensor, feature: str, num_times: int, depth: int, backend: str
) -> torch.Tensor:
    """Log-signatures of the piecewise-linear (time, values) path over each sample's windows of ``feature``.

    Arguments:
        points: (B, K, 1 + C) the path's points at the knots.
        end: (B,) each sample's final knot.
        feature: a key of `LOGSIGNATURE_FEATURES`.
        num_times: n, the fractions of "times" and "windows".
        depth: the log-signatures' depth.
        backend: `logsignature`'s backend.

    Returns:
        (B, windows·D) float64.
    """
    starts, stops = LOGSIGNATURE_FEATURES[feature].windows(end, num_times)
    results = []
    for w in range(stops.shape[1]):
        start, stop = starts[:, w], stops[:, w]
        span = int((stop - start).max()) + 1
        # each window's points, padded by repeating its last one (a constant stretch adds nothing)
        index = torch.minimum(start.unsqueeze(1) + torch.arange(span, device=end.device), stop.unsqueeze(1))
        window = torch.gather(points, 1, index.unsqueeze(-1).expand(-1, -1, points.shape[-1]))
        results.append(logsignature(window.to(torch.float64), depth, backend=backend))
    return torch.cat(results, dim=1)
