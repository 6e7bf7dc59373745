"""The scikit-learn estimators' input handling, shared by `neuralde_seq.sklearn` (`SequenceClassifier`,
`SequenceRegressor`) and `neuralde_seq.random_features` (`RandomFeatureClassifier`, `RandomFeatureRegressor`), most of
it through their common base `neuralde_seq.estimator_base`.

Reading X and times once into an `IrregularDataset` (`read_sequences`), the estimator's dtype (`estimator_dtype`),
the checks that predictions get what fit got
(`check_times_like_fit`, `check_channels_like_fit`), labels of one type (`check_label_types`), the seed drawn from
``random_state`` (`estimator_seed`) and torch threads from ``n_jobs`` (`threads_for_jobs`). The estimator modules
import this one (and `neuralde_seq.estimator_base`), so neither imports the other for it (docs/design.md#layers).
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
from sklearn.utils import check_random_state

from .data.base.datasets import IrregularDataset
from .data.formats.arrays import read_dataset
from .input_checks import DTYPES, floating_dtype
from .user_warnings import warn_user

__all__ = [
    "AxesOrderWarning",
    "DTYPES",
    "MIN_STEPS",
    "estimator_dtype",
    "estimator_seed",
    "threads_for_jobs",
    "read_sequences",
    "check_label_types",
    "check_times_like_fit",
    "check_channels_like_fit",
]

MIN_STEPS = 2  # Observations and controls need at least 2 time points per sample


def estimator_dtype(dtype) -> torch.dtype:
    """The torch dtype of an estimator's ``dtype`` parameter: "float32" or "float64", or that torch dtype
    (`floating_dtype`).

    Raises:
        ValueError: any other value.
    """
    return floating_dtype(dtype)


def estimator_seed(random_state) -> int:
    """The seed of one fit: ``random_state`` itself when it is an int (in the range numpy accepts), else drawn from
    it (a numpy RandomState, or None: a fresh one)."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        check_random_state(random_state)  # the range numpy accepts
        return int(random_state)
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


def threads_for_jobs(n_jobs) -> int:
    """torch threads for ``n_jobs`` with joblib's meaning: None is 1 (or the enclosing
    ``joblib.parallel_config(n_jobs=...)``), -1 all cores, -2 all but one, ..."""
    from joblib import effective_n_jobs

    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs == 0):
        raise ValueError(f"n_jobs must be None or a non-zero integer (-1: all cores), got {n_jobs!r}")
    return max(1, int(effective_n_jobs(None if n_jobs is None else int(n_jobs))))


def check_label_types(y) -> None:
    """Refuse labels that mix strings and numbers, as scikit-learn's ``unique_labels`` does: numpy would turn
    them all into strings, so that the integer 1 came back from `predict` as the string '1'."""
    if isinstance(y, np.ndarray) and y.dtype != object:
        if y.dtype.kind == "f" and np.isnan(y).any():
            first = int(np.flatnonzero(np.isnan(y.ravel()))[0])
            raise ValueError(
                f"y holds {int(np.isnan(y).sum())} missing label(s) (NaN), the first at sample {first}: "
                "every sample needs its class; leave the unlabelled samples out of X and y"
            )
        return  # one numpy type for every label
    try:
        labels = np.asarray(y, dtype=object).ravel()
    except (TypeError, ValueError):
        return  # not array-like: column_or_1d names the problem
    missing = [i for i, label in enumerate(labels) if label is None or (isinstance(label, float) and label != label)]
    if missing:  # scikit-learn would say "Unknown label type: unknown" (None) or take NaN for a class
        raise ValueError(
            f"y holds {len(missing)} missing label(s) (None or NaN), the first at sample {missing[0]}: "
            "every sample needs its class; leave the unlabelled samples out of X and y"
        )
    found: dict[str, set] = {}
    for label in labels:
        kind = "string" if isinstance(label, (str, bytes)) else "number" if isinstance(label, numbers.Number) else None
        if kind is not None:
            found.setdefault(kind, set()).add(type(label).__name__)
    if len(found) > 1:
        types = ", ".join(sorted(set().union(*found.values())))
        raise ValueError(
            f"y mixes label types: strings and numbers ({types}); give every label as one type (e.g. "
            "all strings, or all integers), so that predict returns the labels as given"
        )


def check_times_like_fit(estimator, times) -> None:
    """Predictions take times exactly when fit did (``fitted_with_times_``): a model fitted on real times
    would otherwise silently read the observation indices 0, 1, ... as times."""
    with_times = estimator.fitted_with_times_
    name = type(estimator).__name__
    if with_times and times is None:
        raise ValueError(
            f"times is None, but this {name} was fitted with times: give the times of these "
            "sequences too (one (T_i,) array per sample, in the units of fit); without them the "
            "observation indices 0, 1, ... would be read as times"
        )
    if with_times is False and times is not None:
        raise ValueError(
            f"times was given, but this {name} was fitted without times (each sample's observation "
            "indices 0, 1, ...): pass times=None, or fit with times"
        )


def check_channels_like_fit(estimator, X, channels: int) -> None:
    """X at prediction must have the channels of fit. A 2-D array is read as N univariate sequences (N, T): one
    (T, C) sequence given alone (``X[0]`` of a list of such) is the likeliest cause, so the message says so."""
    fitted = estimator.n_features_in_
    if channels == fitted:
        return
    name = type(estimator).__name__
    message = f"X has {channels} channel(s) per time step, but {name} was fitted with {fitted} (n_features_in_)"
    shape = None if isinstance(X, (list, tuple)) else getattr(X, "shape", None)
    if shape is not None and len(shape) == 2 and fitted > 1:
        rows, columns = (int(k) for k in shape)
        message += (
            f": a 2-D array is read as N univariate sequences (N, T), here {rows} sequences of {columns} "
            f"time steps. For one sequence of shape (T, C) give a list of one, e.g. [X[0]] rather than X[0] "
            f"(or x[None] for a 3-D (1, T, C) array)"
        )
    raise ValueError(message)


class AxesOrderWarning(UserWarning):
    """A 3-D X with fewer time steps than channels: likely an (N, C, T) array from aeon or sktime, which the
    estimators would read as (N, T, C)."""


def _warn_if_channels_first(shape) -> None:
    """aeon's and sktime's arrays are (N, C, T); ours are (N, T, C). Both read without error, so a channels-first
    array would train a model on T channels of C steps: say so when the time axis is the shorter one."""
    if len(shape) == 3 and 0 < shape[1] < shape[2]:
        n, t, c = (int(k) for k in shape)
        warn_user(
            f"X of shape {(n, t, c)} is read as (N, T, C): {n} sequences of {t} time steps with {c} channels. "
            f"Arrays from aeon or sktime are (N, C, T); if yours is one, give X.transpose(0, 2, 1) (a "
            f"{(n, c, t)} array)",
            AxesOrderWarning,
        )


def read_sequences(X, times, dtype: torch.dtype, name: str) -> IrregularDataset:
    """X (and times) read once into an unlabelled dataset, which checks them once; every sample with at least
    `MIN_STEPS` time steps.

    Arguments:
        X: N sequences: a list of (T_i, C) or (T_i,) arrays, a 3-D (N, T, C) or a 2-D (N, T) array (N univariate
            sequences), NaN where missing.
        times: None (observation indices) or one (T_i,) array per sample (a list or a 2-D (N, T) array).
        dtype: the estimator's torch dtype: the times are cast to it and checked there, the values must fit it.
        name: the dataset's name (the estimator's class name).

    Returns:
        An `IrregularDataset` with times (N, T) in ``dtype``, values (N, T, C) as ``dtype`` holds them but stored
        in float64 (the standardisation is computed in float64), lengths (N,) (`read_dataset`).

    Raises:
        ValueError: complex values, a 2-D X with fewer than `MIN_STEPS` columns, a sample shorter than
            `MIN_STEPS`, a value beyond ``dtype``'s largest number, times that the cast to ``dtype`` merges, or
            what `read_dataset` and the dataset's check (`validate_observations`) refuse.
    """
    shape = None if isinstance(X, (list, tuple)) else getattr(X, "shape", None)
    if shape is not None and np.iscomplexobj(X):
        raise ValueError("Complex data not supported: X holds complex numbers; give real values")
    if shape is not None and len(shape) == 2 and shape[0] > 0 and shape[1] < MIN_STEPS:
        shape = tuple(int(k) for k in shape)
        raise ValueError(
            f"X has {shape[1]} feature(s) (shape={shape}) while a minimum of {MIN_STEPS} is "
            f"required: a 2-D X is read as N univariate sequences of X.shape[1] time steps, "
            f"and the models need at least {MIN_STEPS} time steps per sequence; for one "
            f"sequence of shape (T, C) give a list of one, e.g. [X[0]] rather than X[0]"
        )
    if shape is not None:
        _warn_if_channels_first(tuple(shape))
    # Values kept in float64: the models' finite range in ``dtype`` is judged after the estimator's own
    # standardisation (`standardised`), so raw values of 1e12 are accepted in float32.
    return read_dataset(
        X,
        times,
        dtype=dtype,
        values_dtype=torch.float64,
        min_length=MIN_STEPS,
        names=("X", "times", "lengths"),
        fix="dtype='float64'",
        name=name,
    )
