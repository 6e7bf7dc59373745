"""What the scikit-learn estimators of sequences share, whichever way they learn: `SequenceEstimatorBase`, with the
classifier's and the regressor's parts (`SequenceClassifierMixin`, `SequenceRegressorMixin`).

Both families build on it: the trained models of `neuralde_seq.sklearn` (`SequenceClassifier`, `SequenceRegressor`)
and the closed-form random features of `neuralde_seq.random_features` (`RandomFeatureClassifier`,
`RandomFeatureRegressor`). It holds their tags, reading X and times once in the estimator's dtype (`read_sequences`:
one dataset, its observations checked once),
the check that y is given, the labels' and targets' checks, the checks that predictions get what fit got (times
exactly when fit had them, the channels of fit), the seed of ``random_state``, the threads of ``n_jobs``, ``fit``
and ``score``. A family supplies ``_fit(X, y, times)`` and says what its predictions read: the attribute that fit
sets (``_fitted_attribute``), the dtype (`SequenceEstimatorBase._prediction_dtype`) and the fill of unobserved
channels (`SequenceEstimatorBase._unobserved_fill`).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.metrics import accuracy_score, r2_score
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, column_or_1d

from .data.base.datasets import IrregularDataset
from .estimator_inputs import (
    check_channels_like_fit,
    check_label_types,
    check_times_like_fit,
    estimator_seed,
    read_sequences,
    threads_for_jobs,
)
from .training.input_spec import warn_unobserved
from .training.threads import torch_threads

__all__ = ["SequenceEstimatorBase", "SequenceClassifierMixin", "SequenceRegressorMixin"]


class SequenceEstimatorBase(BaseEstimator):
    """The part every estimator of sequences shares (module docstring). Subclasses have the parameters
    ``random_state`` and ``n_jobs``, implement ``_fit(X, y, times)``, and set ``_fitted_attribute``."""

    _fitted_attribute = ""  # set by fit: predictions before it raise NotFittedError

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN marks a missing value
        tags.input_tags.three_d_array = True
        return tags

    def fit(self, X, y, times=None):
        """Fit on X, y (what ``fit`` does: the class docstring).

        Arguments:
            X: N sequences: a list of (T_i, C) or (T_i,) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where
                missing.
            y: a classifier's (N,) labels of one type, at least 2 distinct; a regressor's (N,) or (N, k) finite
                targets.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array), strictly increasing.

        Returns:
            self, fitted.

        Raises:
            ValueError: bad X, y or parameters; the message names the problem.
        """
        self._fit(X, y, times)
        return self

    def _fit(self, X, y, times):
        raise NotImplementedError

    def _dataset(self, X, times, dtype: torch.dtype) -> IrregularDataset:
        """X (and times) as an unlabelled dataset in ``dtype``; every sample with at least 2 time steps
        (`read_sequences`)."""
        return read_sequences(X, times, dtype, type(self).__name__)

    def _require_y(self, y) -> None:
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")

    def _seed(self) -> int:
        """The seed of this fit: ``random_state`` itself when it is an int, else drawn from it (`estimator_seed`)."""
        return estimator_seed(self.random_state)

    def _threads(self):
        """A context in which torch uses the threads of ``n_jobs`` (`threads_for_jobs`), restored on exit."""
        return torch_threads(threads_for_jobs(self.n_jobs))

    # ------------------------------------------------------------------ prediction
    def _prediction_dtype(self) -> torch.dtype:
        """The dtype X is read in at prediction."""
        raise NotImplementedError

    def _unobserved_fill(self):
        """The fitted fill of a channel a sample never observes (None: such a sample is refused)."""
        raise NotImplementedError

    def _prediction_data(self, X, times, *, warn: bool = True) -> IrregularDataset:
        """X (and times) to predict on, checked against fit: fitted, times given exactly when fit had them, the
        channels of fit; with ``warn``, an `UnobservedChannelWarning` for channels some samples never observe.

        Raises:
            sklearn.exceptions.NotFittedError: before `fit`.
            ValueError: times given or missing unlike at fit, other channels than at fit, or what `read_sequences`
                refuses.
        """
        check_is_fitted(self, self._fitted_attribute)
        check_times_like_fit(self, times)
        data = self._dataset(X, times, self._prediction_dtype())
        check_channels_like_fit(self, X, data.num_channels)
        if warn:
            fill = self._unobserved_fill()
            if fill is not None:
                warn_unobserved(data, "samples", fill)
        return data


class SequenceClassifierMixin(ClassifierMixin):
    """The classifiers' part: labels read into classes and codes, and accuracy as ``score``."""

    def _class_codes(self, y, num_samples: int) -> tuple[np.ndarray, np.ndarray]:
        """y checked as labels of ``num_samples`` sequences: (the sorted classes (K,), each label's class index
        (N,)).

        Raises:
            ValueError: labels of mixed types or missing, not one per sequence, fewer than 2 classes.
        """
        check_label_types(y)
        labels = column_or_1d(y, warn=True)
        check_classification_targets(labels)
        if labels.shape[0] != num_samples:
            raise ValueError(f"y has {labels.shape[0]} labels but X holds {num_samples} sequences")
        try:
            classes, codes = np.unique(labels, return_inverse=True)
        except TypeError:
            raise ValueError("y mixes label types that cannot be sorted (e.g. strings and numbers)") from None
        if len(classes) < 2:
            raise ValueError(f"y holds only 1 class ({classes[0]!r}): a classifier needs at least 2 classes")
        return classes, codes.reshape(-1)

    def score(self, X, y, times=None):
        """Accuracy of `predict` against y.

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            y: (N,) true labels.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array), as at `fit`.

        Returns:
            The fraction of sequences whose predicted label equals y, a float.
        """
        return float(accuracy_score(y, self.predict(X, times)))


class SequenceRegressorMixin(RegressorMixin):
    """The regressors' part: (N,) or (N, k) real targets, and R² as ``score``."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _real_targets(self, y, num_samples: int) -> np.ndarray:
        """y checked as the real targets of ``num_samples`` sequences: a (N,) or (N, k) float64 array.

        Raises:
            ValueError: targets not finite, of another shape, or not one per sequence.
        """
        values = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
        if values.ndim not in (1, 2):
            raise ValueError(f"y must have shape (N,) or (N, k), got {values.shape}")
        if values.shape[0] != num_samples:
            raise ValueError(f"y has {values.shape[0]} targets but X holds {num_samples} sequences")
        return values

    def score(self, X, y, times=None):
        """The coefficient of determination R² of `predict` against y.

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            y: (N,) or (N, k) true targets.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array), as at `fit`.

        Returns:
            R² (averaged over columns for (N, k) targets), a float.
        """
        return float(r2_score(y, self.predict(X, times)))
