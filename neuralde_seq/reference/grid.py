"""Irregular series on a regular grid (`to_grid`; the package docstring, "From irregular series to a grid"), and
the part of the grid-based reference estimators that puts their input on the grid fixed at ``fit``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from ..data.transforms.sampling import median_step
from .base import _checked_observations, _read, _ReferenceClassifier

__all__ = ["to_grid"]

_SPANS = ("sample", "common")

# A grid at the median step has at most this many points per observation of the longest series (sparse, bursty
# sampling would otherwise make grids of millions of points).
_MAX_POINTS_PER_OBSERVATION = 16


def _longest_in_steps(times: torch.Tensor, lengths: torch.Tensor) -> int:
    """The default grid length: the longest training series measured in the training data's median time step
    (its span over that step, plus one), so that a series given as its kept points with their times gets the grid
    of the same series given on its grid with NaN at the dropped points (for a regular series: its length). Counting
    observations instead put ACSF1's 1,460-point series, 30 % of the points removed, on 1,022 points, and MiniRocket
    scored 46 % where it scores 77 % on the grid; at most 16 points per observation of the longest series."""
    step = median_step(times, lengths)
    last = times[torch.arange(times.shape[0]), lengths - 1]
    spans = (last - times[:, 0]).to(torch.float64) / step
    most = int(lengths.max())
    return max(most, min(int(round(float(spans.max()))) + 1, _MAX_POINTS_PER_OBSERVATION * most))


def to_grid(
    times,
    values,
    lengths=None,
    *,
    length: int | None = None,
    span="sample",
    fill_value: float | Sequence[float] | np.ndarray = 0.0,
) -> np.ndarray:
    """Irregular series on a regular grid, by linear interpolation per channel (the package docstring, "From
    irregular series to a grid").

    Arguments:
        times: (N, T) array or tensor, strictly increasing within each sample's length.
        values: (N, T, C) array or tensor, NaN where a value is missing (dropped or never observed);
            entries after a sample's length are ignored.
        lengths: (N,) integers in [1, T], the time points of each sample; None: all T.
        length: L, the number of grid points (>= 1); None: the longest sample, ``max(lengths)``.
        span: the grid's extent: ``"sample"`` (default) each sample's own first to last time point,
            ``times[i, 0]`` to ``times[i, lengths[i] - 1]``; ``"common"`` one grid for all samples, from the
            earliest first time to the latest last time of these samples; or a pair ``(start, end)``
            (start <= end) giving that common grid explicitly (as the estimators do at prediction, with the
            training data's span). A one-point sample under ``"sample"`` has all L grid points at its one time.
        fill_value: a number, or (C,) numbers, for the channels never observed in a sample (default 0.0, the
            training mean of standardised data).

    Returns:
        (N, C, L) float64 numpy array (aeon's layout): channel c of sample i interpolated linearly in time
            through its observed points (``numpy.interp``), constant before its first and after its last
            observation, ``fill_value[c]`` where the channel has no observation in the sample.

    Raises:
        ValueError: naming the argument: badly shaped inputs, lengths out of range, times not strictly
            increasing or not finite within a sample, infinite values, a bad ``length``, ``span`` or
            ``fill_value``.
    """
    t_np, v_np, lengths_np = _checked_observations(times, values, lengths)
    num, _, channels = v_np.shape
    if length is None:
        length = int(lengths_np.max())
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
        raise ValueError(f"length must be a positive integer or None, got {length!r}")
    length = int(length)
    fill = np.asarray(fill_value, dtype=np.float64)
    if fill.ndim == 0:
        fill = np.full(channels, float(fill))
    if fill.shape != (channels,) or not np.isfinite(fill).all():
        raise ValueError(
            f"fill_value must be a finite number or ({channels},) finite numbers, one per channel, got {fill_value!r}"
        )
    first = t_np[:, 0]
    last = t_np[np.arange(num), lengths_np - 1]
    common = None
    if isinstance(span, str):
        if span not in _SPANS:
            raise ValueError(f"span must be 'sample', 'common' or a (start, end) pair, got {span!r}")
        if span == "common":
            common = (float(first.min()), float(last.max()))
    else:
        try:
            start, end = (float(s) for s in span)
        except (TypeError, ValueError) as err:
            raise ValueError(f"span must be 'sample', 'common' or a (start, end) pair, got {span!r}") from err
        if not (np.isfinite(start) and np.isfinite(end) and start <= end):
            raise ValueError(f"span (start, end) must be finite with start <= end, got {span!r}")
        common = (start, end)
    common_grid = None if common is None else np.linspace(common[0], common[1], length)
    out = np.empty((num, channels, length), dtype=np.float64)
    for i in range(num):
        size = int(lengths_np[i])
        sample_times = t_np[i, :size]
        # np.linspace returns both end points exactly: with index times and L = T, the grid is the times.
        grid = common_grid if common_grid is not None else np.linspace(first[i], last[i], length)
        for c in range(channels):
            column = v_np[i, :size, c]
            seen = ~np.isnan(column)
            if seen.any():
                # np.interp: linear between observations, the first / last observed value outside them
                out[i, c] = np.interp(grid, sample_times[seen], column[seen])
            else:
                out[i, c] = fill[c]
    return out


class _Grid:
    """Shared part of the grid-based reference estimators: the irregular input put on a grid fixed at ``fit``."""

    _min_length = 1
    # the estimator's parameters (its subclass's __init__), and what fit sets
    grid_length: int | None
    span: str
    span_: tuple[float, float] | str

    def _check_grid_options(self) -> None:
        if self.grid_length is not None and (
            isinstance(self.grid_length, bool)
            or not isinstance(self.grid_length, (int, np.integer))
            or self.grid_length < 1
        ):
            raise ValueError(f"grid_length must be a positive integer or None, got {self.grid_length!r}")
        if self.span not in _SPANS:
            raise ValueError(f"span must be 'sample' or 'common', got {self.span!r}")

    def _training_grid(self, t: torch.Tensor, v: torch.Tensor, n: torch.Tensor) -> np.ndarray:
        """The training grid (N, C, L); sets grid_length_, span_, channel_mean_, n_channels_."""
        self._check_grid_options()
        values = v.numpy()
        valid = np.arange(values.shape[1])[None, :] < n.numpy()[:, None]
        observed = ~np.isnan(values) & valid[..., None]
        counts = observed.sum(axis=(0, 1))
        sums = np.where(observed, values, 0.0).sum(axis=(0, 1))
        # The training mean of each channel fills the channels a sample never observes (0 if never observed).
        self.channel_mean_ = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
        self.n_channels_ = values.shape[2]
        self.grid_length_ = (
            int(self.grid_length) if self.grid_length is not None else max(_longest_in_steps(t, n), self._min_length)
        )
        if self.span == "common":
            last = t.numpy()[np.arange(len(n)), n.numpy() - 1]
            self.span_ = (float(t[:, 0].min()), float(last.max()))
        else:
            self.span_ = "sample"
        return to_grid(t, v, n, length=self.grid_length_, span=self.span_, fill_value=self.channel_mean_)

    def _grid(self, X, times) -> np.ndarray:
        check_is_fitted(self, "grid_length_")
        (t, v, n), _ = _read(X, times, fitting=False)
        if v.shape[2] != self.n_channels_:
            raise ValueError(f"X has {v.shape[2]} channel(s), but the estimator was fitted on {self.n_channels_}")
        return to_grid(t, v, n, length=self.grid_length_, span=self.span_, fill_value=self.channel_mean_)


class _GridClassifier(_Grid, _ReferenceClassifier):
    """Shared part of the grid-based reference classifiers."""

    def _fit_grid(self, X, y, times) -> tuple[np.ndarray, np.ndarray]:
        """The training grid (N, C, L) and the class codes (N,); sets classes_ and the grid's attributes."""
        self._check_grid_options()
        (t, v, n), y = _read(X, times, y, fitting=True)
        codes = self._class_codes(y, v.shape[0])
        return self._training_grid(t, v, n), codes

    def _codes(self, X, times) -> np.ndarray:
        return self._predict_codes(self._grid(X, times))
