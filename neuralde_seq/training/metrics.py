"""Classification metrics: accuracy, and AUROC through scikit-learn."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["accuracy", "auroc"]


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def accuracy(predictions, labels) -> float:
    """Fraction of correct predictions.

    Arguments:
        predictions: (N,) predicted class indices, or (N, K) scores/logits (argmax is taken); a tensor or
            array-like.
        labels: (N,) true class indices.

    Returns:
        The accuracy in [0, 1], a float.

    Raises:
        ValueError: the sample counts differ, or there is no sample.
    """
    pred = _to_numpy(predictions)
    y = _to_numpy(labels).reshape(-1)
    if pred.ndim == 2:
        pred = pred.argmax(axis=1)
    pred = pred.reshape(-1)
    if pred.shape != y.shape:
        raise ValueError(f"predictions give {pred.shape[0]} samples, labels {y.shape[0]}")
    if y.size == 0:
        raise ValueError("accuracy of zero samples is undefined")
    return float((pred == y).mean())


def auroc(labels, scores, *, multi_class: str = "ovr", average: str = "macro") -> float:
    """Area under the ROC curve (``sklearn.metrics.roc_auc_score``).

    Arguments:
        labels: (N,) true class indices.
        scores: binary: (N,) scores of the positive class, or (N, 2) logits/probabilities (the second
            column is used). Multi-class: (N, K) probabilities (rows summing to one, as scikit-learn
            requires; pass ``softmax(logits)``).
        multi_class: scikit-learn's multi-class scheme (default "ovr": one-vs-rest).
        average: how the per-class AUROCs are averaged (default "macro").

    Returns:
        The AUROC, a float.

    Raises:
        ValueError: the sample counts differ, or only one class is present in ``labels``.
    """
    from sklearn.metrics import roc_auc_score

    y = _to_numpy(labels).reshape(-1)
    s = _to_numpy(scores).astype(np.float64)
    if s.shape[0] != y.shape[0]:
        raise ValueError(f"scores give {s.shape[0]} samples, labels {y.shape[0]}")
    if np.unique(y).size < 2:
        raise ValueError("AUROC needs both classes in labels; only one is present")
    if s.ndim == 2 and s.shape[1] == 2:
        s = s[:, 1]
    if s.ndim == 1:
        return float(roc_auc_score(y, s))
    return float(roc_auc_score(y, s, multi_class=multi_class, average=average, labels=np.arange(s.shape[1])))
