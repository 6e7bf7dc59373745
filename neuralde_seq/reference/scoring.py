"""Fitting and scoring the registered methods on the toolkit's datasets: `fit_reference` (after a `warm_up` that
keeps numba's one-off compilation out of the fit's wall time), `evaluate_reference`, their `SeedEnsemble`, and
`reference_scores`, the whole comparison in one call.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..data.base.datasets import IrregularDataset
from .registry import reference_method

__all__ = [
    "DEFAULT_REFERENCE_METHODS",
    "as_arrays",
    "evaluate_reference",
    "warm_up",
    "ReferenceFit",
    "fit_reference",
    "SeedEnsemble",
    "reference_scores",
]

DEFAULT_REFERENCE_METHODS = ("minirocket", "1nn-euclidean", "1nn-dtw")


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
            raise ValueError(
                f"dataset {ds.name or '(unnamed)'} has no labels: a reference method is fitted on labelled data"
            )
        x, t = as_arrays(ds)
        X += x
        times += t
        labels.append(ds.labels.detach().cpu().numpy())
    return X, times, np.concatenate(labels)


def _predict_with_scores(estimator, X, times, scores: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Predicted labels and, with ``scores``, class scores for AUROC: (N, K) probabilities (binary: (N,)).

    With ``scores``, the predictions are read from the scores, as scikit-learn's classifiers (and this package's)
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
    from ..training.metrics import accuracy, auroc

    if dataset.labels is None:
        raise ValueError("evaluate_reference scores a classifier: dataset must have class labels (labels is None)")
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
    return {
        "accuracy": accuracy(predictions, labels),
        "auroc": area,
        "loss": None,
        "num_samples": int(predictions.shape[0]),
        "seconds": seconds,
    }


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


def fit_reference(
    name: str,
    train: IrregularDataset | Sequence[IrregularDataset],
    *,
    seed: int | None = 0,
    options: Mapping | None = None,
):
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
    from ..training.augmentation import member_seed

    reference = reference_method(name)
    reference.check_available()
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
        # (members after the first exist only with a seed: checked above)
        estimator = reference.create(seed if member == 0 or seed is None else member_seed(seed, member), **options)
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
        return np.mean(
            [np.asarray(m.decision_function(X, times=times), dtype=np.float64) for m in self.members], axis=0
        )

    def predict(self, X, times=None) -> np.ndarray:
        decision = self.decision_function(X, times=times)
        index = (decision > 0).astype(int) if decision.ndim == 1 else decision.argmax(axis=1)
        return self.classes_[index]

    def get_params(self, deep: bool = False) -> dict:
        return {**self.members[0].get_params(deep=False), "ensemble": len(self.members)}


def reference_scores(
    train: IrregularDataset | Sequence[IrregularDataset],
    test: IrregularDataset,
    references: Sequence[str] = DEFAULT_REFERENCE_METHODS,
    seed: int | None = 0,
    options: Mapping[str, Mapping] | None = None,
) -> dict:
    """Fit each reference method on ``train`` and score it on ``test``: the numbers a practitioner would see.

    The series are read as the neural models read them (the same dropped points, the same standardisation:
    pass the splits of `neuralde_seq.data.protocols.load_task`) and put on a grid by linear interpolation
    (`to_grid`, the package docstring). The benchmark runner's reference rows call this same code (fitted on
    the training and validation splits together).

    Arguments:
        train: a labelled `IrregularDataset`, or a sequence of them fitted on together (e.g. ``(train, val)``).
        test: a labelled `IrregularDataset` with the same channels and class indices.
        references: names of `REFERENCE_METHODS` (default ``("minirocket", "1nn-euclidean", "1nn-dtw")``).
        seed: the seed of the randomised methods (MiniRocket's ``random_state``).
        options: per method name, constructor arguments of its estimator (e.g.
            ``{"minirocket": {"n_kernels": 1000}}``).

    Returns:
        ``{name: {"accuracy", "auroc", "num_train", "num_test", "fit_seconds", "predict_seconds",
            "seconds"}}``: test accuracy in [0, 1], AUROC (None where undefined), the sample counts, and the wall
            times of fitting (grid, transform and classifier), of predicting the test set, and their sum.

    Raises:
        ImportError: a method needs aeon and aeon is not installed (before anything is fitted).
        ValueError: an unknown reference method, or options for one not in ``references``.
    """
    if isinstance(references, str):
        references = (references,)
    options = dict(options or {})
    stray = [m for m in options if m not in references]
    if stray:
        raise ValueError(f"options for {', '.join(stray)}, which are not in references {list(references)}")
    for name in references:  # every problem before the first (possibly long) fit
        reference_method(name).check_available()
    out = {}
    for name in references:
        estimator, fit_seconds, compile_seconds = fit_reference(name, train, seed=seed, options=options.get(name))
        result = evaluate_reference(estimator, test)
        num_train = len(train) if isinstance(train, IrregularDataset) else sum(len(ds) for ds in train)
        out[name] = {
            "accuracy": result["accuracy"],
            "auroc": result["auroc"],
            "num_train": num_train,
            "num_test": result["num_samples"],
            "fit_seconds": fit_seconds,
            "compile_seconds": compile_seconds,
            "predict_seconds": result["seconds"],
            "seconds": fit_seconds + result["seconds"],
        }
    return out
