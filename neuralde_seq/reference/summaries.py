"""Summary features of records: per channel, statistics of its observed points (`summary_features`), read by a
cross-validated logistic regression (`SummaryFeatureClassifier`), on the irregular series themselves (no grid).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ..data.base.datasets import IrregularDataset
from .base import _checked_observations, _read, _ReferenceClassifier

__all__ = ["SUMMARY_STATISTICS", "summary_feature_names", "summary_features", "SummaryFeatureClassifier"]

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
    if isinstance(channels, bool):  # neither a count nor names
        raise TypeError(f"channels must be a positive count or a sequence of names, got {channels!r}")
    if isinstance(channels, (int, np.integer)):
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
    return _summary_features(*_checked_observations(times, values, lengths), horizon)


def _summary_features(times: np.ndarray, values: np.ndarray, lengths: np.ndarray, horizon) -> np.ndarray:
    """`summary_features` of checked observations: float64 times (N, T) and values (N, T, C), int64 lengths (N,)."""
    num, steps, channels = values.shape
    rows = np.arange(num)
    end = times[rows, lengths - 1]  # (N,)
    if horizon is not None:
        try:
            given = np.broadcast_to(np.asarray(horizon, dtype=np.float64), (num,))
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"horizon must be None, a number or ({num},) numbers, one per sample, got {horizon!r}"
            ) from err
        early = ~(given >= end)  # also catches NaN
        if not np.isfinite(given).all() or early.any():
            first_bad = int(np.flatnonzero(early | ~np.isfinite(given))[0])
            raise ValueError(
                f"horizon must be finite and at or after each sample's last time point; sample "
                f"{first_bad} ends at {end[first_bad]!r}, horizon {given[first_bad]!r}"
            )
        end = given

    in_sample = np.arange(steps)[None, :] < lengths[:, None]  # (N, T)
    observed = ~np.isnan(values) & in_sample[..., None]  # (N, T, C)
    count = observed.sum(axis=1)  # (N, C)
    seen = count > 0
    divisor = np.maximum(count, 1)  # avoids 0/0 where unseen; those entries become NaN below

    mean = np.where(observed, values, 0.0).sum(axis=1) / divisor
    # Two passes (deviations from the mean) for accuracy on values far from 0.
    deviation = np.where(observed, values - mean[:, None, :], 0.0)
    std = np.sqrt((deviation**2).sum(axis=1) / divisor)
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
    spread = (time_deviation**2).sum(axis=1)
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
        if isinstance(X, IrregularDataset):  # checked when it was made (a sequence estimator's X: once)
            return _summary_features(t.numpy(), v.numpy(), n.numpy(), None), y
        return summary_features(t, v, n), y

    def _fit(self, X, y, times) -> None:
        """Compute the training features and fit the scaler and the cross-validated logistic regression."""
        from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
        from sklearn.model_selection import StratifiedKFold
        from sklearn.preprocessing import StandardScaler

        cs = self._check_options()
        features, y = self._raw_features(X, times, y, fitting=True)
        codes = self._class_codes(y, features.shape[0])
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
            self.logistic_ = LogisticRegressionCV(
                Cs=cs,
                cv=folds,
                scoring="neg_log_loss",
                max_iter=self.max_iter,
                random_state=self.random_state,
                **_logistic_cv_options(),
            )
            self.logistic_.fit(scaled, codes)
            self.C_ = float(np.ravel(self.logistic_.C_)[0])
        else:
            self.n_folds_ = 0
            self.logistic_ = LogisticRegression(C=1.0, max_iter=self.max_iter, random_state=self.random_state)
            self.logistic_.fit(scaled, codes)
            self.C_ = 1.0

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

    def _codes(self, X, times) -> np.ndarray:
        return np.asarray(self.logistic_.predict(self._scaled(X, times)), dtype=int)


def _logistic_cv_options() -> dict:
    """LogisticRegressionCV's arguments for an L2 penalty without deprecation warnings: scikit-learn >= 1.8
    replaces ``penalty`` by ``l1_ratios`` and changes attribute shapes unless told; earlier versions have
    neither argument (and default to L2)."""
    from sklearn.linear_model import LogisticRegressionCV

    if "use_legacy_attributes" in inspect.signature(LogisticRegressionCV).parameters:
        return {"l1_ratios": (0.0,), "use_legacy_attributes": False}
    return {}
