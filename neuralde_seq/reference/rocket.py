"""The convolution and interval references on the grid, through aeon: MiniRocket with a ridge classifier or
regression (`MiniRocketClassifier`, `MiniRocketRegressor`), MultiRocket-Hydra (`MultiRocketHydraClassifier`) and
QUANT (`QuantClassifier`). aeon is imported only when one of them is fitted.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .base import _read, _require
from .grid import _Grid, _GridClassifier

__all__ = [
    "MiniRocketClassifier",
    "MiniRocketRegressor",
    "MultiRocketHydraClassifier",
    "QuantClassifier",
    "MINIROCKET_MIN_LENGTH",
    "MINIROCKET_KERNEL_SET",
]

MINIROCKET_MIN_LENGTH = 9  # MiniRocket's kernels have length 9: aeon refuses shorter series
MINIROCKET_KERNEL_SET = 84  # its kernels: the 84 choices of 3 of 9 weights, so n_kernels goes in multiples of 84


class _MiniRocketFeatures:
    """Shared part of the MiniRocket references: aeon's transform fitted on the training grid, its features scaled
    by ``StandardScaler(with_mean=False)`` (the ridge's ``normalize=True`` of the paper's recipe), and the alphas."""

    _min_length = MINIROCKET_MIN_LENGTH
    grid_length_: int  # set by fit (the grid estimators')

    def __init__(
        self,
        n_kernels: int = 10_000,
        max_dilations_per_kernel: int = 32,
        alphas=None,
        random_state: int | None = None,
        n_jobs: int = 1,
        grid_length: int | None = None,
        span: str = "sample",
    ):
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
                extra = (
                    f" (MiniRocket's kernels come in sets of {MINIROCKET_KERNEL_SET}: fewer would be taken as "
                    f"{MINIROCKET_KERNEL_SET} without a word)"
                    if name == "n_kernels"
                    else ""
                )
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}{extra}")
        if self.grid_length_ < MINIROCKET_MIN_LENGTH:
            raise ValueError(
                f"grid_length must be at least {MINIROCKET_MIN_LENGTH} for MiniRocket (its kernels "
                f"have length 9), got {self.grid_length_}"
            )
        self.transform_ = MiniRocket(
            n_kernels=self.n_kernels,
            max_dilations_per_kernel=self.max_dilations_per_kernel,
            n_jobs=self.n_jobs,
            random_state=self.random_state,
        )
        self.scaler_ = StandardScaler(with_mean=False)
        return self.scaler_.fit_transform(self.transform_.fit_transform(grid))

    def _features(self, grid: np.ndarray) -> np.ndarray:
        return self.scaler_.transform(self.transform_.transform(grid))


class MiniRocketClassifier(_MiniRocketFeatures, _GridClassifier):
    """MiniRocket features and a ridge classifier on irregular series (``minirocket`` in the registry).

    ``fit``: the series on a grid (`to_grid`; the package docstring), aeon's ``MiniRocket`` transform fitted on
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

    def _fit(self, X, y, times) -> None:
        """Fit MiniRocket and the ridge classifier on X, y."""
        _require("aeon", "the minirocket reference method")
        from sklearn.linear_model import RidgeClassifierCV

        grid, codes = self._fit_grid(X, y, times)
        self.ridge_ = RidgeClassifierCV(alphas=self._alphas()).fit(self._fit_features(grid), codes)

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

    def fit(self, X, y, times=None) -> MiniRocketRegressor:
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

    def _fit(self, X, y, times) -> None:
        """Put X on the grid and fit the aeon classifier on it."""
        _require("aeon", f"the {self._what} reference method")
        grid, codes = self._fit_grid(X, y, times)
        if self.grid_length_ < self._min_length:
            raise ValueError(
                f"grid_length must be at least {self._min_length} for {self._what}, got {self.grid_length_}"
            )
        self.classifier_ = self._aeon_classifier().fit(grid, codes)

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

    def __init__(
        self,
        n_kernels: int = 8,
        n_groups: int = 64,
        random_state: int | None = None,
        n_jobs: int = 1,
        grid_length: int | None = None,
        span: str = "sample",
    ):
        self.n_kernels = n_kernels
        self.n_groups = n_groups
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.grid_length = grid_length
        self.span = span

    def _aeon_classifier(self):
        from aeon.classification.convolution_based import MultiRocketHydraClassifier as Aeon

        self._check_positive_ints(("n_kernels", "n_groups", "n_jobs"))
        return Aeon(
            n_kernels=self.n_kernels, n_groups=self.n_groups, n_jobs=self.n_jobs, random_state=self.random_state
        )


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

    def __init__(
        self,
        interval_depth: int = 6,
        quantile_divisor: int = 4,
        random_state: int | None = None,
        grid_length: int | None = None,
        span: str = "sample",
    ):
        self.interval_depth = interval_depth
        self.quantile_divisor = quantile_divisor
        self.random_state = random_state
        self.grid_length = grid_length
        self.span = span

    def _aeon_classifier(self):
        from aeon.classification.interval_based import QUANTClassifier

        self._check_positive_ints(("interval_depth", "quantile_divisor"))
        return QUANTClassifier(
            interval_depth=self.interval_depth, quantile_divisor=self.quantile_divisor, random_state=self.random_state
        )
