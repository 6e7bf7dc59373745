"""What the reference estimators share: the optional dependency aeon (`INSTALL_HINT`, imported only when a method
needs it), the toolkit's checks of raw observations, X read in the estimators' forms or as an `IrregularDataset`, the
labels' checks, and the classifiers' ``score``.
"""

from __future__ import annotations

import importlib

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets

from ..data.base.datasets import IrregularDataset
from ..observations import validate_observations

__all__ = ["INSTALL_HINT"]

INSTALL_HINT = 'pip install "neuralde_seq[reference]"'


def _require(module: str, what: str):
    """Import ``module`` (an optional dependency) or raise ImportError naming ``what`` and the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{what} needs {module}, which is not installed (or cannot be imported: {err}); "
            f"install the optional reference methods with: {INSTALL_HINT}"
        ) from err


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
    from ..data.formats.arrays import pad_sequences

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
    """Shared part of all reference classifiers: ``fit`` over ``_fit(X, y, times)``, the labels read into
    ``classes_`` (`_class_codes`), ``predict`` over ``_codes(X, times)`` and ``score`` over ``predict``."""

    def fit(self, X, y=None, times=None):
        """Fit on X, y (what ``fit`` does: the class docstring).

        Arguments:
            X: N samples (a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where missing, or
                an `IrregularDataset`).
            y: (N,) class labels (any hashable type), or None with a labelled `IrregularDataset`.
            times: None (observation index) or one (T_i,) array per sample (not with an `IrregularDataset`).

        Returns:
            self.
        """
        self._fit(X, y, times)
        return self

    def _fit(self, X, y, times) -> None:
        raise NotImplementedError

    def _class_codes(self, y, count: int) -> np.ndarray:
        """y checked as one label per sample of X (``count``), its sorted classes kept as ``classes_``; the class
        index of every sample (N,)."""
        y = _labels(y, count)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(f"y holds only 1 class ({self.classes_[0]!r}): a classifier needs at least 2 classes")
        return codes

    def predict(self, X, times=None) -> np.ndarray:
        """The predicted class of every sample of X.

        Arguments:
            X: the samples (a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where
                missing, or an `IrregularDataset`), with the channels of ``fit``.
            times: None or one (T_i,) array per sample (not with an `IrregularDataset`).

        Returns:
            (N,) array of labels from ``classes_``.
        """
        return self.classes_[self._codes(X, times)]

    def _codes(self, X, times) -> np.ndarray:
        """The predicted class index of every sample of X, (N,)."""
        raise NotImplementedError

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
