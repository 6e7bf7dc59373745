"""Reference classifiers: what a practitioner tries first, beside the toolkit's neural models.

A table that compares only neural models hides how far they trail the methods a practitioner reaches for
first. This module puts those methods on the toolkit's data, reading exactly the series the neural rows read
(the same dropped observations, the same standardisation), so that every comparison can show them:

- ``minirocket``: the MiniRocket transform (aeon's ``MiniRocket``, 10,000 kernels, ``random_state=seed``)
  followed by ``StandardScaler(with_mean=False)`` and ``RidgeClassifierCV(alphas=np.logspace(-3, 3, 10))``
  on the features: aeon's own ``MiniRocketClassifier`` recipe (`MiniRocketClassifier`);
- ``1nn-euclidean``: one nearest neighbour in Euclidean distance (numpy, here; `NearestNeighbourClassifier`);
- ``1nn-dtw``: one nearest neighbour in dynamic time warping distance (aeon's ``dtw_pairwise_distance``:
  squared pointwise differences summed over channels, i.e. dependent multichannel DTW, full window);
- ``summary-features``: per channel, over its observed points only, the mean, standard deviation, min, max,
  first and last values, least-squares slope against time, observation count and time since the last
  observation (`summary_features`), standardised and read by ``LogisticRegressionCV`` (L2 penalty chosen by
  stratified cross-validation; `SummaryFeatureClassifier`): the practitioner's first try on records (few,
  irregular observations per channel, as in clinical data), as MiniRocket is on series. It reads the
  irregular series themselves, without the grid below.

**From irregular series to a grid** (`to_grid`). The grid methods need equal-length arrays (N, C, L), so the
irregular series (times (N, T), values (N, T, C) with NaN where missing or dropped, lengths (N,)) are put on
a regular grid the way a user would:

1. the grid of sample i is, by default (``span="sample"``), ``L`` equally spaced times from its own first to
   its own last time point, ``times[i, 0]`` to ``times[i, lengths[i] - 1]`` (points whose values were all
   dropped keep their times, so the span is the series' original span). ``L`` is the longest training series in
   the training data's median time step, its span over that step plus one (``grid_length=None``; the number of
   points of a regular series, also when it is given as its kept points with their times). Why this grid: every bundled UCR/UEA series has the observation index as its times,
   so for equal-length data this grid *is* the original sampling grid: kept observations are reproduced
   exactly and only the dropped points are filled in, which is "interpolating the dropped series back onto
   the grid". For variable-length data (JapaneseVowels, PickupGestureWiimoteZ) every series is stretched
   onto L points (uniform scaling, the usual way to make such series equal-length). ``span="common"`` instead
   puts every series on one grid spanning the training data's earliest first time to its latest last time,
   for data whose absolute times matter (a shorter series is then held constant after its end);
2. each channel is interpolated linearly in time through its own observed points (``numpy.interp``), and
   held constant before its first and after its last observation (constant extrapolation);
3. a channel never observed in a sample is filled with ``fill_value``: in the estimators, the mean of the
   channel's observed values in the data they were fitted on (the training mean; 0 for standardised data,
   which is what the benchmark runner's tasks give).

Nothing is dropped: every sample and channel of the input is on the grid, and a bad input raises
``ValueError`` naming the argument.

**The estimators** follow scikit-learn's conventions (``get_params``, ``clone``, ``score``) and the toolkit's
estimators' input forms (`neuralde_seq.sklearn`): ``fit(X, y, times=None)``, ``predict(X, times=None)``,
where X is a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array with NaN marking missing values,
or an `IrregularDataset` (whose ``labels`` are then the default ``y``). The grid length, span and fill values
are fixed at ``fit`` and reused at prediction.

**The registry** (`REFERENCE_METHODS`, name -> `ReferenceMethod`) lets the benchmark runner use any such
closed-form method as a config row (``{"label": "minirocket", "model": "minirocket"}``): a method is an
estimator class with ``fit(X, y, times=None)`` / ``predict(X, times=None)``, its fixed options and the name of
its seed argument. Another method is registered with one line, e.g.
``register_reference_method(ReferenceMethod("reservoir", "neuralde_seq.random_features:RandomFeatureClassifier",
description="..."))``.

**For Python users**, `reference_scores` ``(train, test, methods, seed)`` fits each method on ``train`` and
returns its test accuracy and wall times.

aeon is an optional dependency (``pip install "neuralde_seq[reference]"``); importing this module does not
import it, ``1nn-euclidean`` and ``summary-features`` do not need it, and ``minirocket`` and ``1nn-dtw``
without it raise ``ImportError`` saying how to install it.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import time
import warnings
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from .data.base.datasets import IrregularDataset
from .data.transforms.sampling import median_step
from .observations import validate_observations
from .input_checks import did_you_mean, unknown_name_message

__all__ = ["to_grid", "MiniRocketClassifier", "MultiRocketHydraClassifier", "QuantClassifier",
           "MiniRocketRegressor", "NearestNeighbourClassifier", "SummaryFeatureClassifier",
           "summary_features", "summary_feature_names", "SUMMARY_STATISTICS", "ReferenceMethod", "REFERENCE_METHODS",
           "register_reference_method", "reference_method", "create_reference", "reference_scores",
           "fit_reference", "ReferenceFit", "evaluate_reference", "as_arrays", "warm_up", "SeedEnsemble", "DEFAULT_REFERENCE_METHODS",
           "INSTALL_HINT"]

INSTALL_HINT = 'pip install "neuralde_seq[reference]"'
DEFAULT_REFERENCE_METHODS = ("minirocket", "1nn-euclidean", "1nn-dtw")
METHOD_KINDS = ("reference", "random features")  # ReferenceMethod.kind
_SPANS = ("sample", "common")
MINIROCKET_MIN_LENGTH = 9  # MiniRocket's kernels have length 9: aeon refuses shorter series
MINIROCKET_KERNEL_SET = 84  # its kernels: the 84 choices of 3 of 9 weights, so n_kernels goes in multiples of 84


def _require(module: str, what: str):
    """Import ``module`` (an optional dependency) or raise ImportError naming ``what`` and the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"{what} needs {module}, which is not installed (or cannot be imported: {err}); "
                          f"install the optional reference methods with: {INSTALL_HINT}") from err


# ------------------------------------------------------------------------------------------------ the grid
def _float64_tensor(x, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to(device="cpu", dtype=torch.float64)
    try:
        return torch.as_tensor(np.asarray(x, dtype=np.float64))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a numeric array or tensor: {err}") from err


def _checked_observations(times, values, lengths) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """times (N, T), values (N, T, C) and lengths (N,) (None: all T) checked as the toolkit checks observations,
    returned as float64, float64 and int64 numpy arrays; ValueError naming the argument otherwise."""
    t = _float64_tensor(times, "times")
    v = _float64_tensor(values, "values")
    n = None if lengths is None else _float64_tensor(lengths, "lengths")
    if n is not None:
        if n.dim() != 1 or not torch.equal(n, n.round()):
            raise ValueError(f"lengths must be (N,) integers, got {tuple(n.shape)} {n.tolist()[:5]}")
        n = n.long()
    # The toolkit's one set of observation checks (shapes, lengths in range, finite increasing times).
    t, v, n, _ = validate_observations(t, v, n, min_length=1)
    if torch.isinf(v).any():
        raise ValueError("values hold infinite entries; NaN marks a missing value, infinities are not allowed")
    return t.numpy(), v.numpy(), n.numpy()


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


def to_grid(times, values, lengths=None, *, length: int | None = None, span="sample",
            fill_value: float | Sequence[float] = 0.0) -> np.ndarray:
    """Irregular series on a regular grid, by linear interpolation per channel (see the module docstring).

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
        raise ValueError(f"fill_value must be a finite number or ({channels},) finite numbers, one per channel, "
                         f"got {fill_value!r}")
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


# ------------------------------------------------------------------------------------------ the estimators
def _read(X, times, y=None, *, fitting: bool):
    """X (and times, y) as float64 (times, values, lengths) tensors and labels (or None).

    X is an `IrregularDataset` (times must then be None; its labels as given, `IrregularDataset.given_labels`,
    are the default y: a dataset of labels 3 and 1 predicts 3 and 1, not the indices 1 and 0) or the estimators'
    array forms (`neuralde_seq.data.pad_sequences`)."""
    if isinstance(X, IrregularDataset):
        if times is not None:
            raise ValueError("times must be None when X is an IrregularDataset (the dataset holds its times)")
        if y is None and fitting:
            if X.labels is None:
                raise ValueError("y is None and the IrregularDataset X has no labels: give y")
            y = X.given_labels()
        return (X.times.detach().cpu().double(), X.values.detach().cpu().double(), X.lengths.detach().cpu()), y
    from .data.formats.arrays import pad_sequences

    return pad_sequences(X, times, dtype=torch.float64), y


def _labels(y, count: int) -> np.ndarray:
    if y is None:
        raise ValueError("y is required: the class of every sample of X")
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != count:
        raise ValueError(f"y must hold one label per sample of X ({count}), got shape {y.shape}")
    check_classification_targets(y)
    return y


class _ReferenceClassifier(ClassifierMixin, BaseEstimator):
    """Shared part of all reference estimators: ``score`` over ``predict(X, times)``."""

    def score(self, X, y=None, times=None, sample_weight=None) -> float:
        """Mean accuracy on X and y (y None: the labels of an `IrregularDataset` X).

        Arguments:
            X: the samples, as for `predict`.
            y: (N,) true labels, or None with a labelled `IrregularDataset`.
            times: None or one (T_i,) array per sample.
            sample_weight: None or (N,) weights (scikit-learn's ``accuracy_score``).
        """
        from sklearn.metrics import accuracy_score

        if y is None and isinstance(X, IrregularDataset) and X.labels is not None:
            y = X.labels.detach().cpu().numpy()
        y = _labels(y, len(X))
        return float(accuracy_score(y, self.predict(X, times), sample_weight=sample_weight))


class _Grid:
    """Shared part of the grid-based reference estimators: the irregular input put on a grid fixed at ``fit``."""

    _min_length = 1

    def _check_grid_options(self) -> None:
        if self.grid_length is not None and (isinstance(self.grid_length, bool) or not isinstance(
                self.grid_length, (int, np.integer)) or self.grid_length < 1):
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
        self.grid_length_ = int(self.grid_length) if self.grid_length is not None else max(
            _longest_in_steps(t, n), self._min_length)
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
        y = _labels(y, v.shape[0])
        self.classes_, codes = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(f"y holds only 1 class ({self.classes_[0]!r}): a classifier needs at least 2 classes")
        return self._training_grid(t, v, n), codes

    def predict(self, X, times=None) -> np.ndarray:
        """The predicted class of every sample of X.

        Arguments:
            X: the samples (a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where
                missing, or an `IrregularDataset`), with the channels of ``fit``.
            times: None or one (T_i,) array per sample (not with an `IrregularDataset`).

        Returns:
            (N,) array of labels from ``classes_``.
        """
        return self.classes_[self._predict_codes(self._grid(X, times))]


class _MiniRocketFeatures:
    """Shared part of the MiniRocket references: aeon's transform fitted on the training grid, its features scaled
    by ``StandardScaler(with_mean=False)`` (the ridge's ``normalize=True`` of the paper's recipe), and the alphas."""

    _min_length = MINIROCKET_MIN_LENGTH

    def __init__(self, n_kernels: int = 10_000, max_dilations_per_kernel: int = 32, alphas=None,
                 random_state: int | None = None, n_jobs: int = 1, grid_length: int | None = None,
                 span: str = "sample"):
        self.n_kernels = n_kernels
        self.max_dilations_per_kernel = max_dilations_per_kernel
        self.alphas = alphas
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.grid_length = grid_length
        self.span = span

    def _alphas(self) -> np.ndarray:
        return np.logspace(-3, 3, 10) if self.alphas is None else np.asarray(self.alphas, dtype=np.float64)

    def _fit_features(self, grid: np.ndarray) -> np.ndarray:
        """Fit the transform and the scaler on the training grid (N, C, L); its scaled features."""
        from aeon.transformations.collection.convolution_based import MiniRocket
        from sklearn.preprocessing import StandardScaler

        for name, least in (("n_kernels", MINIROCKET_KERNEL_SET), ("max_dilations_per_kernel", 1), ("n_jobs", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                extra = (f" (MiniRocket's kernels come in sets of {MINIROCKET_KERNEL_SET}: fewer would be taken as "
                         f"{MINIROCKET_KERNEL_SET} without a word)" if name == "n_kernels" else "")
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}{extra}")
        if self.grid_length_ < MINIROCKET_MIN_LENGTH:
            raise ValueError(f"grid_length must be at least {MINIROCKET_MIN_LENGTH} for MiniRocket (its kernels "
                             f"have length 9), got {self.grid_length_}")
        self.transform_ = MiniRocket(n_kernels=self.n_kernels, max_dilations_per_kernel=self.max_dilations_per_kernel,
                                     n_jobs=self.n_jobs, random_state=self.random_state)
        self.scaler_ = StandardScaler(with_mean=False)
        return self.scaler_.fit_transform(self.transform_.fit_transform(grid))

    def _features(self, grid: np.ndarray) -> np.ndarray:
        return self.scaler_.transform(self.transform_.transform(grid))


class MiniRocketClassifier(_MiniRocketFeatures, _GridClassifier):
    """MiniRocket features and a ridge classifier on irregular series (``minirocket`` in the registry).

    ``fit``: the series on a grid (`to_grid`; the module docstring), aeon's ``MiniRocket`` transform fitted on
    them, the features scaled by ``StandardScaler(with_mean=False)`` and ``RidgeClassifierCV(alphas)`` fitted
    on them (its alpha chosen by its efficient leave-one-out cross-validation): the recipe of aeon's
    ``MiniRocketClassifier`` and of the MiniRocket paper (Dempster et al., 2021), whose ``normalize=True``
    ridge the scaler replaces. Needs aeon (``pip install "neuralde_seq[reference]"``).

    Arguments:
        n_kernels: the number of convolution kernels (aeon's ``n_kernels``, default 10,000; MiniRocket
            rounds it to a multiple of 84).
        max_dilations_per_kernel: aeon's ``max_dilations_per_kernel`` (default 32).
        alphas: the ridge penalties tried, or None (default): ``np.logspace(-3, 3, 10)``.
        random_state: the seed of MiniRocket's random choices (None: a fresh one each fit).
        n_jobs: aeon's ``n_jobs`` (threads of the transform; default 1).
        grid_length: the number of grid points L, or None (default): the longest training series in median time
            steps (`_longest_in_steps`), and at least 9 (MiniRocket's kernel length: shorter series are
            interpolated onto 9 points).
        span: ``"sample"`` (default: each series' own span) or ``"common"`` (one grid over the training data's
            time span), as `to_grid`.

    Attributes (after ``fit``): ``classes_``, ``grid_length_``, ``span_``, ``channel_mean_`` (the fill of
    unobserved channels), ``n_channels_``, ``transform_`` (the fitted MiniRocket), ``scaler_``, ``ridge_``
    (with the chosen ``alpha_``).
    """

    def fit(self, X, y=None, times=None) -> "MiniRocketClassifier":
        """Fit MiniRocket and the ridge classifier on X, y.

        Arguments:
            X: N samples (a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where missing, or
                an `IrregularDataset`).
            y: (N,) class labels (any hashable type), or None with a labelled `IrregularDataset`.
            times: None (observation index) or one (T_i,) array per sample (not with an `IrregularDataset`).

        Returns:
            self.
        """
        _require("aeon", "the minirocket reference method")
        from sklearn.linear_model import RidgeClassifierCV

        grid, codes = self._fit_grid(X, y, times)
        self.ridge_ = RidgeClassifierCV(alphas=self._alphas()).fit(self._fit_features(grid), codes)
        return self

    def decision_function(self, X, times=None) -> np.ndarray:
        """The ridge classifier's scores: (N,) for two classes (positive: ``classes_[1]``), else (N, K).

        Arguments:
            X: the samples, as for `predict`.
            times: None or one (T_i,) array per sample.
        """
        return self._scores(self._grid(X, times))

    def _scores(self, grid: np.ndarray) -> np.ndarray:
        return self.ridge_.decision_function(self._features(grid))

    def _predict_codes(self, grid: np.ndarray) -> np.ndarray:
        return np.asarray(self.ridge_.predict(self._features(grid)))


class MiniRocketRegressor(_MiniRocketFeatures, _Grid, RegressorMixin, BaseEstimator):
    """MiniRocket features and a ridge regression on irregular series put on a grid (aeon's
    ``MiniRocketRegressor`` recipe: the transform, ``StandardScaler(with_mean=False)``, ``RidgeCV(alphas)``), the
    practitioner's reference for regression. Needs aeon. Its arguments (``n_kernels``, ``max_dilations_per_kernel``,
    ``alphas``, ``random_state``, ``n_jobs``, ``grid_length``, ``span``) are those of `MiniRocketClassifier`.

    Attributes (after ``fit``): ``grid_length_``, ``span_``, ``channel_mean_``, ``n_channels_``, ``transform_``,
    ``scaler_``, ``ridge_`` (``RidgeCV``, with the chosen ``alpha_``).
    """

    def fit(self, X, y, times=None) -> "MiniRocketRegressor":
        """Fit MiniRocket and the ridge regression on X, y.

        Arguments:
            X: N samples (a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where missing, or
                an `IrregularDataset`).
            y: (N,) or (N, K) finite real targets.
            times: None (observation index) or one (T_i,) array per sample (not with an `IrregularDataset`).

        Returns:
            self.
        """
        _require("aeon", "the minirocket regression reference")
        from sklearn.linear_model import RidgeCV

        (t, v, n), _ = _read(X, times, None, fitting=False)
        targets = np.asarray(y, dtype=np.float64)
        if targets.ndim not in (1, 2) or targets.shape[0] != v.shape[0] or not np.isfinite(targets).all():
            raise ValueError(f"y must hold {v.shape[0]} finite targets, (N,) or (N, K), got shape {targets.shape}")
        grid = self._training_grid(t, v, n)
        self.ridge_ = RidgeCV(alphas=self._alphas()).fit(self._fit_features(grid), targets)
        return self

    def predict(self, X, times=None) -> np.ndarray:
        """(N,) or (N, K) predictions.

        Arguments:
            X: the samples, with the channels of ``fit``.
            times: None or one (T_i,) array per sample.
        """
        return self.ridge_.predict(self._features(self._grid(X, times)))


class _AeonGridClassifier(_GridClassifier):
    """Shared part of the references that are aeon classifiers as they are, on the grid (`to_grid`): ``fit`` puts
    the series on the grid and fits ``_aeon_classifier()`` on it with the class codes; ``predict_proba`` is
    aeon's."""

    _what = ""  # the method's name in messages

    def _aeon_classifier(self):
        raise NotImplementedError

    def _check_positive_ints(self, names) -> None:
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def fit(self, X, y=None, times=None):
        """Put X on the grid and fit the aeon classifier on it.

        Arguments:
            X: N samples (a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where missing, or
                an `IrregularDataset`).
            y: (N,) class labels (any hashable type), or None with a labelled `IrregularDataset`.
            times: None (observation index) or one (T_i,) array per sample (not with an `IrregularDataset`).

        Returns:
            self.
        """
        _require("aeon", f"the {self._what} reference method")
        grid, codes = self._fit_grid(X, y, times)
        if self.grid_length_ < self._min_length:
            raise ValueError(f"grid_length must be at least {self._min_length} for {self._what}, got "
                             f"{self.grid_length_}")
        self.classifier_ = self._aeon_classifier().fit(grid, codes)
        return self

    def predict_proba(self, X, times=None) -> np.ndarray:
        """(N, K) class probabilities, columns in the order of ``classes_``.

        Arguments:
            X: the samples, as for `predict`.
            times: None or one (T_i,) array per sample.
        """
        check_is_fitted(self, "classifier_")
        return np.asarray(self.classifier_.predict_proba(self._grid(X, times)), dtype=np.float64)

    def _predict_codes(self, grid: np.ndarray) -> np.ndarray:
        return np.asarray(self.classifier_.predict(grid)).astype(np.int64)


class MultiRocketHydraClassifier(_AeonGridClassifier):
    """MultiRocket and Hydra features with a ridge classifier (aeon's ``MultiRocketHydraClassifier``) on irregular
    series put on a grid (``multirocket-hydra`` in the registry).

    Hydra's competing dilated kernels (counts of the best-matching kernel per group) beside MultiRocket's four
    pooling operators on MiniRocket's kernels, over the series and its first difference: about a point above
    MiniRocket on the UCR archive (Dempster, Schmidt & Webb 2023). Needs aeon.

    Arguments:
        n_kernels: Hydra's kernels per group (aeon's default 8).
        n_groups: Hydra's groups (aeon's default 64).
        random_state: the seed of the random kernels (None: a fresh one each fit).
        n_jobs: aeon's threads (default 1).
        grid_length: grid points L, or None (default): the longest training series in median time steps, at
            least 9 (the kernels' length), as `MiniRocketClassifier`.
        span: ``"sample"`` (default) or ``"common"``, as `to_grid`.

    Attributes (after ``fit``): ``classes_``, ``grid_length_``, ``span_``, ``channel_mean_``, ``n_channels_``,
    ``classifier_`` (the fitted aeon classifier, on class indices).
    """

    _min_length = MINIROCKET_MIN_LENGTH
    _what = "multirocket-hydra"

    def __init__(self, n_kernels: int = 8, n_groups: int = 64, random_state: int | None = None, n_jobs: int = 1,
                 grid_length: int | None = None, span: str = "sample"):
        self.n_kernels = n_kernels
        self.n_groups = n_groups
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.grid_length = grid_length
        self.span = span

    def _aeon_classifier(self):
        from aeon.classification.convolution_based import MultiRocketHydraClassifier as Aeon

        self._check_positive_ints(("n_kernels", "n_groups", "n_jobs"))
        return Aeon(n_kernels=self.n_kernels, n_groups=self.n_groups, n_jobs=self.n_jobs,
                    random_state=self.random_state)


class QuantClassifier(_AeonGridClassifier):
    """QUANT: quantiles over dyadic intervals of the series, its first and second differences and its Fourier
    transform, read by extremely randomised trees (aeon's ``QUANTClassifier``; Dempster, Schmidt & Webb 2024), on
    irregular series put on a grid (``quant`` in the registry). Needs aeon.

    Arguments:
        interval_depth: depth of the dyadic intervals (aeon's default 6).
        quantile_divisor: an interval of length m gives 1 + (m - 1) // quantile_divisor quantiles (default 4).
        random_state: the trees' seed (None: a fresh one each fit).
        grid_length: grid points L, or None (default): the longest training series in median time steps.
        span: ``"sample"`` (default) or ``"common"``, as `to_grid`.

    Attributes (after ``fit``): as `MultiRocketHydraClassifier`.
    """

    _what = "quant"

    def __init__(self, interval_depth: int = 6, quantile_divisor: int = 4, random_state: int | None = None,
                 grid_length: int | None = None, span: str = "sample"):
        self.interval_depth = interval_depth
        self.quantile_divisor = quantile_divisor
        self.random_state = random_state
        self.grid_length = grid_length
        self.span = span

    def _aeon_classifier(self):
        from aeon.classification.interval_based import QUANTClassifier

        self._check_positive_ints(("interval_depth", "quantile_divisor"))
        return QUANTClassifier(interval_depth=self.interval_depth, quantile_divisor=self.quantile_divisor,
                               random_state=self.random_state)


class NearestNeighbourClassifier(_GridClassifier):
    """One-nearest-neighbour classifier on irregular series (``1nn-euclidean`` and ``1nn-dtw`` in the registry).

    The series go on a grid (`to_grid`; the module docstring), and every sample gets the class of the training
    sample closest to it:

    - ``distance="euclidean"``: the sum over channels and grid points of squared differences (its square root,
      the Euclidean distance, orders neighbours the same way), computed here with numpy in float64;
    - ``distance="dtw"``: aeon's ``dtw_pairwise_distance``: dynamic time warping with squared pointwise
      differences summed over the channels at each pair of time points (dependent multichannel DTW), within a
      Sakoe-Chiba band of ``window`` (a fraction of the length; None: no band). Needs aeon.

    Ties: among training samples at exactly the same smallest distance, the one that comes first in the
    training data is taken (``numpy.argmin``).

    Arguments:
        distance: ``"euclidean"`` (default) or ``"dtw"``.
        window: for DTW, the Sakoe-Chiba band as a fraction of the series length in [0, 1], or None (default:
            full warping); must be None for the Euclidean distance.
        n_jobs: aeon's threads for the DTW distances (default 1).
        grid_length: the number of grid points L, or None (default): the longest training series in median time
            steps (`_longest_in_steps`).
        span: ``"sample"`` (default) or ``"common"``, as `to_grid`.

    Attributes (after ``fit``): ``classes_``, ``grid_length_``, ``span_``, ``channel_mean_``, ``n_channels_``,
    ``train_grid_`` (N_train, C, L) and ``train_codes_`` (N_train,) class indices.
    """

    _DISTANCES = ("euclidean", "dtw")
    _CHUNK = 2 ** 24  # float64 entries of one block of pairwise differences (128 MB)

    def __init__(self, distance: str = "euclidean", window: float | None = None, n_jobs: int = 1,
                 grid_length: int | None = None, span: str = "sample"):
        self.distance = distance
        self.window = window
        self.n_jobs = n_jobs
        self.grid_length = grid_length
        self.span = span

    def _check_distance(self) -> None:
        if self.distance not in self._DISTANCES:
            raise ValueError(f"distance must be one of {', '.join(self._DISTANCES)}, got {self.distance!r}")
        if self.window is not None:
            if self.distance != "dtw":
                raise ValueError(f"window applies to the dtw distance only; got window={self.window!r} with "
                                 f"distance={self.distance!r}")
            if isinstance(self.window, bool) or not isinstance(self.window, (int, float)) or \
                    not 0 <= self.window <= 1:
                raise ValueError(f"window must be a fraction in [0, 1] or None, got {self.window!r}")
        if self.distance == "dtw":
            _require("aeon", "the 1nn-dtw reference method")

    def fit(self, X, y=None, times=None) -> "NearestNeighbourClassifier":
        """Store the training series on their grid.

        Arguments:
            X: N samples (a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where missing, or
                an `IrregularDataset`).
            y: (N,) class labels (any hashable type), or None with a labelled `IrregularDataset`.
            times: None (observation index) or one (T_i,) array per sample (not with an `IrregularDataset`).

        Returns:
            self.
        """
        self._check_distance()
        self.train_grid_, self.train_codes_ = self._fit_grid(X, y, times)
        return self

    def distances(self, X, times=None) -> np.ndarray:
        """The distance of every sample of X to every training sample, as used to pick the neighbour.

        Arguments:
            X: the samples, as for `predict`.
            times: None or one (T_i,) array per sample.

        Returns:
            (N, N_train) float64: squared Euclidean distances, or aeon's DTW distances.
        """
        return self._distances(self._grid(X, times))

    def _distances(self, grid: np.ndarray) -> np.ndarray:
        train = self.train_grid_
        if self.distance == "dtw":
            from aeon.distances import dtw_pairwise_distance

            with warnings.catch_warnings():  # aeon's compiled DTW warns of an internal uint64 index cast
                warnings.filterwarnings("ignore", message="unsafe cast from uint64 to int64")
                return np.asarray(dtw_pairwise_distance(grid, train, window=self.window, n_jobs=self.n_jobs),
                                  dtype=np.float64)
        flat_train = train.reshape(train.shape[0], -1)
        flat = grid.reshape(grid.shape[0], -1)
        out = np.empty((flat.shape[0], flat_train.shape[0]), dtype=np.float64)
        # Differences, not |a|^2 + |b|^2 - 2ab: no cancellation, so equal series are at distance exactly 0.
        rows = max(1, self._CHUNK // max(1, flat_train.size))
        for start in range(0, flat.shape[0], rows):
            block = flat[start:start + rows, None, :] - flat_train[None, :, :]
            out[start:start + rows] = np.einsum("ijk,ijk->ij", block, block)
        return out

    def _predict_codes(self, grid: np.ndarray) -> np.ndarray:
        return self.train_codes_[np.argmin(self._distances(grid), axis=1)]

    def predict_proba(self, X, times=None) -> np.ndarray:
        """(N, K) class probabilities: 1 for the nearest neighbour's class, 0 elsewhere.

        Arguments:
            X: the samples, as for `predict`.
            times: None or one (T_i,) array per sample.
        """
        codes = self._predict_codes(self._grid(X, times))
        return np.eye(len(self.classes_))[codes]


# ---------------------------------------------------------------------------------------- summary features
SUMMARY_STATISTICS = ("mean", "std", "min", "max", "first", "last", "slope", "count", "time_since_last")
"""The per-channel statistics of `summary_features`, in their order within each channel's block of columns."""


def summary_feature_names(channels: int | Sequence[str]) -> list[str]:
    """The names of `summary_features`' columns, in order: ``"ch0_mean", "ch0_std", ..., "ch0_time_since_last",
    "ch1_mean", ...`` (channel-major, the statistics in the order of `SUMMARY_STATISTICS`).

    Arguments:
        channels: the channel count C (names ``ch0``, ``ch1``, ...), or C channel names.

    Returns:
        A list of ``C * 9`` strings ``f"{channel}_{statistic}"``.
    """
    if isinstance(channels, (int, np.integer)) and not isinstance(channels, bool):
        if channels < 1:
            raise ValueError(f"channels must be a positive count or a sequence of names, got {channels!r}")
        channels = [f"ch{c}" for c in range(int(channels))]
    elif isinstance(channels, str):
        raise ValueError(f"channels must be a positive count or a sequence of names, got the string {channels!r}")
    return [f"{channel}_{statistic}" for channel in channels for statistic in SUMMARY_STATISTICS]


def summary_features(times, values, lengths=None, *, horizon=None) -> np.ndarray:
    """Per sample and channel, summary statistics of the channel's observed (non-NaN) values: the features of the
    ``summary-features`` reference method (`SummaryFeatureClassifier`), computed on the irregular series
    themselves (no grid, no interpolation).

    For channel c of sample i, over its observed points (times ``t_k``, values ``x_k``, k = 1..n, within the
    sample's length), the 9 columns are, in this order (`SUMMARY_STATISTICS`):

    1. ``mean``: the mean of the ``x_k``;
    2. ``std``: their population standard deviation (``ddof=0``: divided by n; 0 for one observation);
    3. ``min``, 4. ``max``;
    5. ``first``, 6. ``last``: the values at the earliest and latest observed time;
    7. ``slope``: the least-squares slope of x against t, ``sum((t_k - mean t)(x_k - mean x)) / sum((t_k -
       mean t)^2)`` (``numpy.polyfit(t, x, 1)[0]``); 0 for one observation, or for a zero time spread;
    8. ``count``: n, the number of observations (0: the channel was never observed in the sample);
    9. ``time_since_last``: ``end - t_n``, the time from the channel's last observation to the end of the
       record, ``end`` being the sample's last time point ``times[i, lengths[i] - 1]`` (or ``horizon``); for a
       channel never observed, ``end - times[i, 0]``, the record's whole span (count 0 tells it apart).

    A channel never observed in a sample (count 0) has no value statistics: columns 1-7 are NaN there (not
    0: `SummaryFeatureClassifier` fills them with the training mean of the column).

    Arguments:
        times: (N, T) array or tensor, strictly increasing within each sample's length.
        values: (N, T, C) array or tensor, NaN where a value is missing; entries after a sample's length are
            ignored.
        lengths: (N,) integers in [1, T], the time points of each sample; None: all T.
        horizon: None (default: each sample's own last time point), a number, or (N,) numbers: the time
            ``time_since_last`` is measured to, at or after every sample's last time point (e.g. the time a
            prediction is made).

    Returns:
        (N, C * 9) float64 numpy array, channel-major: columns ``9 c .. 9 c + 8`` are channel c's statistics in
            the order above (names: `summary_feature_names`).

    Raises:
        ValueError: naming the argument: badly shaped inputs, lengths out of range, times not strictly
            increasing or not finite within a sample, infinite values, a ``horizon`` of the wrong shape, not
            finite or before a sample's last time point.
    """
    times, values, lengths = _checked_observations(times, values, lengths)
    num, steps, channels = values.shape
    rows = np.arange(num)
    end = times[rows, lengths - 1]  # (N,)
    if horizon is not None:
        try:
            given = np.broadcast_to(np.asarray(horizon, dtype=np.float64), (num,))
        except (TypeError, ValueError) as err:
            raise ValueError(f"horizon must be None, a number or ({num},) numbers, one per sample, got "
                             f"{horizon!r}") from err
        early = ~(given >= end)  # also catches NaN
        if not np.isfinite(given).all() or early.any():
            first_bad = int(np.flatnonzero(early | ~np.isfinite(given))[0])
            raise ValueError(f"horizon must be finite and at or after each sample's last time point; sample "
                             f"{first_bad} ends at {end[first_bad]!r}, horizon {given[first_bad]!r}")
        end = given

    in_sample = np.arange(steps)[None, :] < lengths[:, None]  # (N, T)
    observed = ~np.isnan(values) & in_sample[..., None]  # (N, T, C)
    count = observed.sum(axis=1)  # (N, C)
    seen = count > 0
    divisor = np.maximum(count, 1)  # avoids 0/0 where unseen; those entries become NaN below

    mean = np.where(observed, values, 0.0).sum(axis=1) / divisor
    # Two passes (deviations from the mean) for accuracy on values far from 0.
    deviation = np.where(observed, values - mean[:, None, :], 0.0)
    std = np.sqrt((deviation ** 2).sum(axis=1) / divisor)
    minimum = np.where(observed, values, np.inf).min(axis=1)
    maximum = np.where(observed, values, -np.inf).max(axis=1)

    step_index = np.arange(steps)[None, :, None]
    first_index = np.where(observed, step_index, steps - 1).min(axis=1)  # (N, C); any valid index where unseen
    last_index = np.where(observed, step_index, 0).max(axis=1)
    first = np.take_along_axis(values, first_index[:, None, :], axis=1)[:, 0, :]
    last = np.take_along_axis(values, last_index[:, None, :], axis=1)[:, 0, :]

    # Slope on times centred per channel: exact for large absolute times (e.g. unix seconds).
    channel_times = np.broadcast_to(times[:, :, None], values.shape)
    mean_time = np.where(observed, channel_times, 0.0).sum(axis=1) / divisor
    time_deviation = np.where(observed, channel_times - mean_time[:, None, :], 0.0)
    spread = (time_deviation ** 2).sum(axis=1)
    covariance = (time_deviation * deviation).sum(axis=1)
    has_slope = (count >= 2) & (spread > 0)
    slope = np.where(has_slope, covariance / np.where(has_slope, spread, 1.0), 0.0)

    last_time = np.take_along_axis(times, last_index, axis=1)  # (N, C)
    since_last = end[:, None] - np.where(seen, last_time, times[:, :1])

    value_statistics = [np.where(seen, s, np.nan) for s in (mean, std, minimum, maximum, first, last, slope)]
    features = np.stack([*value_statistics, count.astype(np.float64), since_last], axis=2)  # (N, C, 9)
    return features.reshape(num, channels * len(SUMMARY_STATISTICS))


class SummaryFeatureClassifier(_ReferenceClassifier):
    """Summary features and cross-validated logistic regression (``summary-features`` in the registry).

    The practitioner's first try on records (clinical and sensor time series with few, irregular
    observations), as MiniRocket is on series. ``fit``:

    1. per sample and channel, the 9 statistics of `summary_features` over the channel's observed points (mean,
       population standard deviation, min, max, first, last, least-squares slope against time, count and time
       since the last observation to the end of the record), on the irregular series themselves (no grid);
    2. the value statistics of a channel a sample never observes (NaN) filled with the column's mean over the
       training samples that observe it (``feature_mean_``; 0 for a channel no training sample observes): never
       silently 0, and its count 0 is in the features as the flag;
    3. every column standardised (``StandardScaler``);
    4. ``LogisticRegressionCV`` (L2 penalty, lbfgs, multinomial for more than 2 classes) with its inverse
       penalty C chosen among ``Cs`` by the cross-validated log loss over stratified, shuffled folds
       (``StratifiedKFold(n_folds, shuffle=True, random_state=random_state)``), then refitted on all of the
       training data at the chosen C.

    Small classes: the number of folds is ``min(cv, the smallest class's training count)``, so that every fold
    holds every class; when a class has a single training sample no stratified split exists, and a
    ``LogisticRegression`` at ``C=1`` (scikit-learn's default) is fitted without cross-validation
    (``n_folds_ = 0``).

    Arguments:
        Cs: the inverse penalties C tried, or None (default): ``np.logspace(-3, 3, 7)``.
        cv: the most cross-validation folds (default 5; at least 2).
        max_iter: lbfgs's iteration limit per fit (default 1000).
        random_state: the seed of the folds' shuffle (None: a fresh one each fit).

    Attributes (after ``fit``): ``classes_``, ``n_features_in_`` and ``n_channels_`` (channels C),
    ``feature_names_`` (the C * 9 column names, `summary_feature_names`), ``feature_mean_`` (C * 9,) the fill
    of missing features, ``scaler_``, ``logistic_`` (the fitted scikit-learn model, on class indices), ``C_``
    (the chosen C) and ``n_folds_`` (the folds used; 0 without cross-validation).
    """

    def __init__(self, Cs=None, cv: int = 5, max_iter: int = 1000, random_state: int | None = None):
        self.Cs = Cs
        self.cv = cv
        self.max_iter = max_iter
        self.random_state = random_state

    def _check_options(self) -> np.ndarray:
        """The Cs to try, after checking the options."""
        for name in ("cv", "max_iter"):
            value = getattr(self, name)
            least = 2 if name == "cv" else 1
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if self.Cs is None:
            return np.logspace(-3, 3, 7)
        try:
            cs = np.asarray(self.Cs, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"Cs must be None or positive numbers, got {self.Cs!r}") from err
        if cs.ndim != 1 or cs.size == 0 or not (np.isfinite(cs).all() and (cs > 0).all()):
            raise ValueError(f"Cs must be None or a non-empty list of positive finite numbers, got {self.Cs!r}")
        return cs

    def _raw_features(self, X, times, y=None, *, fitting: bool):
        """The features of X with NaN where a channel is unobserved, and y (`_read`'s checks)."""
        (t, v, n), y = _read(X, times, y, fitting=fitting)
        if not fitting and v.shape[2] != self.n_channels_:
            raise ValueError(f"X has {v.shape[2]} channel(s), but the estimator was fitted on {self.n_channels_}")
        return summary_features(t, v, n), y

    def fit(self, X, y=None, times=None) -> "SummaryFeatureClassifier":
        """Compute the training features and fit the scaler and the cross-validated logistic regression.

        Arguments:
            X: N samples (a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where missing, or
                an `IrregularDataset`).
            y: (N,) class labels (any hashable type), or None with a labelled `IrregularDataset`.
            times: None (observation index) or one (T_i,) array per sample (not with an `IrregularDataset`).

        Returns:
            self.
        """
        from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
        from sklearn.model_selection import StratifiedKFold
        from sklearn.preprocessing import StandardScaler

        cs = self._check_options()
        features, y = self._raw_features(X, times, y, fitting=True)
        y = _labels(y, features.shape[0])
        self.classes_, codes = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(f"y holds only 1 class ({self.classes_[0]!r}): a classifier needs at least 2 classes")
        self.n_channels_ = self.n_features_in_ = features.shape[1] // len(SUMMARY_STATISTICS)
        self.feature_names_ = summary_feature_names(self.n_channels_)
        missing = np.isnan(features)
        known = (~missing).sum(axis=0)
        # The mean over the samples that observe the channel; 0 where none does (the column is then constant).
        self.feature_mean_ = np.where(missing, 0.0, features).sum(axis=0) / np.maximum(known, 1)
        imputed = np.where(missing, self.feature_mean_, features)
        self.scaler_ = StandardScaler()
        scaled = self.scaler_.fit_transform(imputed)

        self.n_folds_ = min(int(self.cv), int(np.bincount(codes).min()))
        if self.n_folds_ >= 2:
            folds = StratifiedKFold(self.n_folds_, shuffle=True, random_state=self.random_state)
            self.logistic_ = LogisticRegressionCV(Cs=cs, cv=folds, scoring="neg_log_loss", max_iter=self.max_iter,
                                                  random_state=self.random_state, **_logistic_cv_options())
            self.logistic_.fit(scaled, codes)
            self.C_ = float(np.ravel(self.logistic_.C_)[0])
        else:
            self.n_folds_ = 0
            self.logistic_ = LogisticRegression(C=1.0, max_iter=self.max_iter, random_state=self.random_state)
            self.logistic_.fit(scaled, codes)
            self.C_ = 1.0
        return self

    def features(self, X, times=None) -> np.ndarray:
        """The features the classifier reads, before scaling: `summary_features` with the never-observed channels'
        value statistics filled with ``feature_mean_``.

        Arguments:
            X: the samples, as for `predict`.
            times: None or one (T_i,) array per sample.

        Returns:
            (N, C * 9) float64, columns named by ``feature_names_``.
        """
        check_is_fitted(self, "classes_")
        features, _ = self._raw_features(X, times, fitting=False)
        return np.where(np.isnan(features), self.feature_mean_, features)

    def _scaled(self, X, times) -> np.ndarray:
        return self.scaler_.transform(self.features(X, times))

    def decision_function(self, X, times=None) -> np.ndarray:
        """The logistic regression's scores: (N,) log-odds for two classes (positive: ``classes_[1]``), else
        (N, K).

        Arguments:
            X: the samples, as for `predict`.
            times: None or one (T_i,) array per sample.
        """
        return self.logistic_.decision_function(self._scaled(X, times))

    def predict_proba(self, X, times=None) -> np.ndarray:
        """(N, K) class probabilities, columns in the order of ``classes_``.

        Arguments:
            X: the samples, as for `predict`.
            times: None or one (T_i,) array per sample.
        """
        return self.logistic_.predict_proba(self._scaled(X, times))

    def predict(self, X, times=None) -> np.ndarray:
        """The predicted class of every sample of X.

        Arguments:
            X: the samples (a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where
                missing, or an `IrregularDataset`), with the channels of ``fit``.
            times: None or one (T_i,) array per sample (not with an `IrregularDataset`).

        Returns:
            (N,) array of labels from ``classes_``.
        """
        return self.classes_[np.asarray(self.logistic_.predict(self._scaled(X, times)), dtype=int)]


def _logistic_cv_options() -> dict:
    """LogisticRegressionCV's arguments for an L2 penalty without deprecation warnings: scikit-learn >= 1.8
    replaces ``penalty`` by ``l1_ratios`` and changes attribute shapes unless told; earlier versions have
    neither argument (and default to L2)."""
    from sklearn.linear_model import LogisticRegressionCV

    if "use_legacy_attributes" in inspect.signature(LogisticRegressionCV).parameters:
        return {"l1_ratios": (0.0,), "use_legacy_attributes": False}
    return {}


# ---------------------------------------------------------------------------------------------- registry
@dataclasses.dataclass(frozen=True)
class ReferenceMethod:
    """A closed-form (non-gradient) classifier usable as a row of the benchmark runner and in `reference_scores`.

    Attributes:
        name: the registry name (a config row's ``model``).
        estimator: the estimator class, or ``"module:Class"`` imported when first used. Its instances have
            ``fit(X, y, times=None)`` and ``predict(X, times=None)`` with X a list of (T_i, C) arrays (NaN where
            missing) and times a list of (T_i,) arrays, as the toolkit's scikit-learn estimators.
        options: fixed constructor arguments (e.g. ``{"distance": "dtw"}``); a config row cannot change them.
        seed_parameter: the constructor argument that receives the run's seed, or None (a deterministic method).
        requires: the optional modules it needs (checked before anything runs; ImportError with the install
            command when missing).
        description: one line for tables and listings.
        kind: what tables call it: "reference" (default: a practitioner's method, the honest reference) or
            "random features" (the toolkit's own closed-form mode, `neuralde_seq.random_features`).
    """

    name: str
    estimator: type | str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    seed_parameter: str | None = "random_state"
    requires: tuple[str, ...] = ()
    description: str = ""
    kind: str = "reference"

    def estimator_class(self) -> type:
        """The estimator class (imported from ``"module:Class"`` where given so)."""
        if isinstance(self.estimator, str):
            module, _, attribute = self.estimator.partition(":")
            return getattr(importlib.import_module(module), attribute)
        return self.estimator

    def option_names(self) -> tuple[str, ...]:
        """The constructor arguments a config row may set (not the fixed options nor the seed's)."""
        parameters = inspect.signature(self.estimator_class().__init__).parameters
        return tuple(p for p in parameters if p != "self" and p not in self.options and p != self.seed_parameter
                     and parameters[p].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD))

    def defaults(self) -> dict:
        """The constructor's defaults with the fixed options (recorded in results, checked on resume)."""
        parameters = inspect.signature(self.estimator_class().__init__).parameters
        out = {p: v.default for p, v in parameters.items()
               if p not in ("self", self.seed_parameter) and v.default is not inspect.Parameter.empty}
        return {**out, **dict(self.options)}

    def check_available(self) -> None:
        """Raise ImportError naming the install command if a required optional module is missing."""
        for module in self.requires:
            _require(module, f"the {self.name} reference method")

    def create(self, seed: int | None = None, **options):
        """A new unfitted estimator with the fixed options, ``options`` and the seed.

        Arguments:
            seed: the seed (given to ``seed_parameter``; ignored by a deterministic method).
            **options: constructor arguments among `option_names`.
        """
        self.check_available()
        allowed = self.option_names()
        unknown = [k for k in options if k not in allowed]
        if unknown:
            hint = did_you_mean(str(unknown[0]), allowed)
            raise ValueError(f"unknown option(s) {', '.join(map(repr, unknown))} of reference method {self.name!r}; "
                             f"{hint + ' ' if hint else ''}allowed: {', '.join(allowed)}")
        kwargs = {**dict(self.options), **options}
        if self.seed_parameter is not None:
            kwargs[self.seed_parameter] = seed
        return self.estimator_class()(**kwargs)


REFERENCE_METHODS: dict[str, ReferenceMethod] = {}
"""The closed-form methods by name (`register_reference_method` adds one)."""


def register_reference_method(method: ReferenceMethod, *, replace: bool = False) -> ReferenceMethod:
    """Add ``method`` to `REFERENCE_METHODS` (so that config rows and `reference_scores` can name it).

    Arguments:
        method: the `ReferenceMethod`.
        replace: allow replacing a method of the same name (default False: an error).

    Returns:
        ``method``.

    Raises:
        ValueError: the name is taken (by a reference method, unless ``replace``, or by a registry model).
    """
    from .models import MODEL_NAMES

    if method.name in MODEL_NAMES:
        raise ValueError(f"reference method name {method.name!r} is a model of the registry (MODEL_NAMES)")
    if method.name in REFERENCE_METHODS and not replace:
        raise ValueError(f"a reference method named {method.name!r} is already registered")
    if method.kind not in METHOD_KINDS:
        raise ValueError(f"kind must be one of {METHOD_KINDS}, got {method.kind!r}")
    REFERENCE_METHODS[method.name] = method
    return method


def reference_method(name: str) -> ReferenceMethod:
    """The registered method ``name``.

    Arguments:
        name: a key of `REFERENCE_METHODS`.

    Raises:
        ValueError: an unknown name (the known ones are listed).
    """
    if name not in REFERENCE_METHODS:
        raise ValueError(unknown_name_message("reference method", name, REFERENCE_METHODS, listing="known"))
    return REFERENCE_METHODS[name]


def create_reference(name: str, seed: int | None = None, **options):
    """A new unfitted estimator of reference method ``name`` (`ReferenceMethod.create`).

    Arguments:
        name: a key of `REFERENCE_METHODS`.
        seed: the seed of a randomised method (MiniRocket's ``random_state``).
        **options: constructor arguments of the method's estimator.
    """
    return reference_method(name).create(seed, **options)


register_reference_method(ReferenceMethod(
    "minirocket", MiniRocketClassifier, requires=("aeon",),
    description="MiniRocket (aeon) + RidgeClassifierCV on the series interpolated onto a grid"))
register_reference_method(ReferenceMethod(
    "multirocket-hydra", MultiRocketHydraClassifier, requires=("aeon",),
    description="MultiRocket + Hydra (aeon) + ridge on the series interpolated onto a grid"))
register_reference_method(ReferenceMethod(
    "quant", QuantClassifier, requires=("aeon",),
    description="QUANT (aeon): interval quantiles + extra trees, on the series interpolated onto a grid"))
register_reference_method(ReferenceMethod(
    "1nn-euclidean", NearestNeighbourClassifier, {"distance": "euclidean"}, seed_parameter=None,
    description="1-nearest neighbour, Euclidean distance, on the series interpolated onto a grid"))
register_reference_method(ReferenceMethod(
    "1nn-dtw", NearestNeighbourClassifier, {"distance": "dtw"}, seed_parameter=None, requires=("aeon",),
    description="1-nearest neighbour, DTW distance (aeon, full window), on the series interpolated onto a grid"))
register_reference_method(ReferenceMethod(
    "summary-features", SummaryFeatureClassifier,
    description="per-channel summary statistics of the observed points (mean, std, min, max, first, last, slope, "
                "count, time since last) + LogisticRegressionCV"))
# The toolkit's own closed-form mode (not a reference): a frozen random model read out by ridge regression, on the
# irregular series themselves (no grid).
register_reference_method(ReferenceMethod(
    "random-features", "neuralde_seq.random_features:RandomFeatureClassifier", kind="random features",
    description="frozen random slice-block reservoir of damped oscillators (the defaults), its features read out by "
                "closed-form ridge"))
register_reference_method(ReferenceMethod(
    "random-features-delta-rde", "neuralde_seq.random_features:RandomFeatureClassifier", {"reservoir": "delta-rde"},
    kind="random features",
    description="frozen random delta-rde (CT-FWP) reservoir, its features read out by closed-form ridge"))
# The same reservoir trained (neuralde_seq.reservoir_tuning): a trained model that starts where random features end.
register_reference_method(ReferenceMethod(
    "random-features-tuned", "neuralde_seq.random_features:RandomFeatureClassifier", {"fine_tune": True},
    kind="random features",
    description="the random-features reservoir and thresholds fine-tuned by the ridge readout's leave-one-out error, "
                "kept where it beats the untrained start on a held-out fifth of the training series"))


# ------------------------------------------------------------------------------------------- scoring
def as_arrays(dataset: IrregularDataset) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A dataset in the estimators' list form: X (one (T_i, C) float64 array per sample, NaN where missing)
    and times (one (T_i,) array per sample), each sample cut at its length.

    Arguments:
        dataset: an `IrregularDataset`.
    """
    times = dataset.times.detach().cpu().double().numpy()
    values = dataset.values.detach().cpu().double().numpy()
    lengths = dataset.lengths.detach().cpu().numpy()
    return ([values[i, :n] for i, n in enumerate(lengths)], [times[i, :n] for i, n in enumerate(lengths)])


def _joined(datasets: Sequence[IrregularDataset]) -> tuple[list, list, np.ndarray]:
    """Several labelled datasets as one set of samples in the list form, in order, with their labels."""
    X, times, labels = [], [], []
    for ds in datasets:
        if ds.labels is None:
            raise ValueError(f"dataset {ds.name or '(unnamed)'} has no labels: a reference method is fitted on "
                             "labelled data")
        x, t = as_arrays(ds)
        X += x
        times += t
        labels.append(ds.labels.detach().cpu().numpy())
    return X, times, np.concatenate(labels)


def _predict_with_scores(estimator, X, times, scores: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Predicted labels and, with ``scores``, class scores for AUROC: (N, K) probabilities (binary: (N,)).

    With ``scores``, the predictions are read from the scores, as scikit-learn's classifiers (and this module's)
    predict: ``classes_[argmax]`` of ``predict_proba`` or of a (N, K) ``decision_function``, ``classes_[score > 0]``
    of a binary (N,) one; the series are then put through the method once, not twice. Without scores, or for
    an estimator offering neither, ``predict``.
    """
    if scores and hasattr(estimator, "predict_proba"):
        proba = np.asarray(estimator.predict_proba(X, times=times), dtype=np.float64)
        return np.asarray(estimator.classes_)[proba.argmax(axis=1)], proba
    if scores and hasattr(estimator, "decision_function"):
        decision = np.asarray(estimator.decision_function(X, times=times), dtype=np.float64)
        classes = np.asarray(estimator.classes_)
        if decision.ndim == 1:
            return classes[(decision > 0).astype(int)], decision
        # softmax: rows summing to one, as scikit-learn's multi-class AUROC requires (the argmax is unchanged)
        proba = np.exp(decision - decision.max(axis=1, keepdims=True))
        proba /= proba.sum(axis=1, keepdims=True)
        return classes[decision.argmax(axis=1)], proba
    return np.asarray(estimator.predict(X, times=times)), None


def evaluate_reference(estimator, dataset: IrregularDataset, *, scores: bool = True) -> dict:
    """Accuracy (and AUROC where the estimator gives scores) of a fitted reference estimator on every sample.

    Arguments:
        estimator: a fitted estimator of a `ReferenceMethod`, fitted on class indices as labels.
        dataset: a labelled `IrregularDataset`.
        scores: also compute the AUROC, from ``predict_proba`` or else the softmax of ``decision_function``
            (the predictions are then those scores' argmax, as the estimators' own ``predict``); False: only
            ``predict``.

    Returns:
        ``{"accuracy", "auroc", "loss", "num_samples", "seconds"}``: loss is None (no likelihood); auroc None
            without scores or with one class in the labels; seconds the wall time of the prediction.
    """
    from .training.metrics import accuracy, auroc

    X, times = as_arrays(dataset)
    labels = dataset.labels.detach().cpu().numpy()
    t0 = time.perf_counter()
    predictions, class_scores = _predict_with_scores(estimator, X, times, scores)
    seconds = time.perf_counter() - t0
    if predictions.shape != labels.shape:
        raise RuntimeError(f"the estimator predicted {predictions.shape} for {labels.shape[0]} samples")
    area = None
    if class_scores is not None and np.unique(labels).size > 1:
        if class_scores.ndim == 2 and class_scores.shape[1] != dataset.num_classes:
            # classes absent from the fitted data have no column: give them probability 0
            full = np.zeros((class_scores.shape[0], dataset.num_classes))
            full[:, np.asarray(estimator.classes_, dtype=int)] = class_scores
            class_scores = full
        area = auroc(labels, class_scores)
    return {"accuracy": accuracy(predictions, labels), "auroc": area, "loss": None,
            "num_samples": int(predictions.shape[0]), "seconds": seconds}


_WARM: set = set()


def warm_up(name: str, channels: int, *, seed: int | None = 0, options: Mapping | None = None) -> float:
    """Fit and apply method ``name`` once on 4 random series (16 points, ``channels`` channels), once per process,
    method and univariate/multichannel kind, so that numba's one-off compilation of aeon's kernels (10-60 s in a
    fresh environment; loading them from numba's disk cache later) is not counted in the wall time of the first
    real fit. Its own wall time is returned, to be reported beside the fit's (`fit_reference`).

    Arguments:
        name: a key of `REFERENCE_METHODS`.
        channels: the channel count of the data to come (univariate and multichannel series compile apart).
        seed: the seed given to the method.
        options: the constructor arguments the real fit will use.

    Returns:
        The seconds the warm-up took: 0.0 where this process had warmed the method up already.
    """
    key = (name, channels > 1, repr(sorted(dict(options or {}).items())))
    if key in _WARM:
        return 0.0
    _WARM.add(key)
    series = np.random.default_rng(0).standard_normal((4, 16, channels))
    t0 = time.perf_counter()
    try:
        estimator = reference_method(name).create(seed, **dict(options or {}))
        estimator.fit(series, np.array([0, 1, 0, 1]))
        _predict_with_scores(estimator, series, None, True)
    except Exception:  # noqa: BLE001 - only a warm-up: the real fit reports any real problem itself
        pass
    return time.perf_counter() - t0


class ReferenceFit(NamedTuple):
    """What `fit_reference` gives: the fitted ``estimator``, ``seconds`` (the wall time of its fit) and
    ``compile_seconds`` (of the warm-up before it, `warm_up`: the one-off compilation of numba kernels, 0.0 where
    this process had done it already), reported apart so that neither hides the other."""

    estimator: Any
    seconds: float
    compile_seconds: float


def fit_reference(name: str, train: IrregularDataset | Sequence[IrregularDataset], *, seed: int | None = 0,
                  options: Mapping | None = None):
    """Fit reference method ``name`` on ``train`` (one dataset, or several fitted on together).

    Arguments:
        name: a key of `REFERENCE_METHODS`.
        train: a labelled `IrregularDataset`, or a sequence of them (e.g. ``(train, val)``) with the same
            channels and class indices.
        seed: the seed of a randomised method.
        options: constructor arguments of the method's estimator, and ``ensemble``: K > 1 fits K estimators with
            seeds ``seed``, ``seed + 1000``, ... (`neuralde_seq.training.augmentation.member_seed`) and returns
            their `SeedEnsemble` (mean decision function).

    Returns:
        A `ReferenceFit` ``(estimator, seconds, compile_seconds)``: the fitted estimator, the wall time of ``fit``
            (grid included; all members' fits for an ensemble) and that of the warm-up before it (`warm_up`).
    """
    from .training.augmentation import member_seed

    method = reference_method(name)
    method.check_available()
    datasets = [train] if isinstance(train, IrregularDataset) else list(train)
    if not datasets:
        raise ValueError("train holds no dataset")
    options = dict(options or {})
    ensemble = options.pop("ensemble", 1)
    if isinstance(ensemble, bool) or not isinstance(ensemble, int) or ensemble < 1:
        raise ValueError(f"ensemble must be a positive integer, got {ensemble!r}")
    if ensemble > 1 and seed is None:
        raise ValueError("ensemble > 1 needs an integer seed (its members' seeds follow from it)")
    X, times, labels = _joined(datasets)
    compile_seconds = warm_up(name, datasets[0].num_channels, seed=seed, options=options)
    members, seconds = [], 0.0
    for member in range(ensemble):
        estimator = method.create(seed if member == 0 else member_seed(seed, member), **options)
        if ensemble > 1 and not hasattr(estimator, "decision_function"):
            raise ValueError(f"ensemble={ensemble}: reference method {name!r} has no decision_function to average")
        t0 = time.perf_counter()
        estimator.fit(X, labels, times=times)
        seconds += time.perf_counter() - t0
        members.append(estimator)
    return ReferenceFit(members[0] if ensemble == 1 else SeedEnsemble(members), seconds, compile_seconds)


class SeedEnsemble:
    """Fitted estimators of one method that differ only in their seed: their mean decision function.

    Made by `fit_reference` with ``options={"ensemble": K}`` (members' seeds as the runner's neural ensembles,
    `neuralde_seq.training.augmentation.member_seed`).

    Arguments:
        members: fitted estimators with ``decision_function(X, times=...)`` and the same ``classes_``.
    """

    def __init__(self, members):
        self.members = list(members)
        self.classes_ = np.asarray(self.members[0].classes_)
        if any(not np.array_equal(np.asarray(m.classes_), self.classes_) for m in self.members):
            raise ValueError("the members were fitted on different classes")

    def decision_function(self, X, times=None) -> np.ndarray:
        """The members' decision functions' mean: (N, K), or (N,) for two classes."""
        return np.mean([np.asarray(m.decision_function(X, times=times), dtype=np.float64) for m in self.members],
                       axis=0)

    def predict(self, X, times=None) -> np.ndarray:
        decision = self.decision_function(X, times=times)
        index = (decision > 0).astype(int) if decision.ndim == 1 else decision.argmax(axis=1)
        return self.classes_[index]

    def get_params(self, deep: bool = False) -> dict:
        return {**self.members[0].get_params(deep=False), "ensemble": len(self.members)}


def reference_scores(train: IrregularDataset | Sequence[IrregularDataset], test: IrregularDataset,
                     methods: Sequence[str] = DEFAULT_REFERENCE_METHODS, seed: int | None = 0,
                     options: Mapping[str, Mapping] | None = None) -> dict:
    """Fit each reference method on ``train`` and score it on ``test``: the numbers a practitioner would see.

    The series are read as the neural models read them (the same dropped points, the same standardisation:
    pass the splits of `neuralde_seq.data.protocols.load_task`) and put on a grid by linear interpolation
    (`to_grid`, the module docstring). The benchmark runner's reference rows call this same code (fitted on
    the training and validation splits together).

    Arguments:
        train: a labelled `IrregularDataset`, or a sequence of them fitted on together (e.g. ``(train, val)``).
        test: a labelled `IrregularDataset` with the same channels and class indices.
        methods: names of `REFERENCE_METHODS` (default ``("minirocket", "1nn-euclidean", "1nn-dtw")``).
        seed: the seed of the randomised methods (MiniRocket's ``random_state``).
        options: per method name, constructor arguments of its estimator (e.g.
            ``{"minirocket": {"n_kernels": 1000}}``).

    Returns:
        ``{method: {"accuracy", "auroc", "num_train", "num_test", "fit_seconds", "predict_seconds",
            "seconds"}}``: test accuracy in [0, 1], AUROC (None where undefined), the sample counts, and the wall
            times of fitting (grid, transform and classifier), of predicting the test set, and their sum.

    Raises:
        ImportError: a method needs aeon and aeon is not installed (before anything is fitted).
        ValueError: an unknown method, or options for a method not in ``methods``.
    """
    if isinstance(methods, str):
        methods = (methods,)
    options = dict(options or {})
    stray = [m for m in options if m not in methods]
    if stray:
        raise ValueError(f"options for {', '.join(stray)}, which are not in methods {list(methods)}")
    for name in methods:  # every problem before the first (possibly long) fit
        reference_method(name).check_available()
    out = {}
    for name in methods:
        estimator, fit_seconds, compile_seconds = fit_reference(name, train, seed=seed, options=options.get(name))
        result = evaluate_reference(estimator, test)
        num_train = len(train) if isinstance(train, IrregularDataset) else sum(len(ds) for ds in train)
        out[name] = {"accuracy": result["accuracy"], "auroc": result["auroc"], "num_train": num_train,
                     "num_test": result["num_samples"], "fit_seconds": fit_seconds, "compile_seconds": compile_seconds,
                     "predict_seconds": result["seconds"], "seconds": fit_seconds + result["seconds"]}
    return out
