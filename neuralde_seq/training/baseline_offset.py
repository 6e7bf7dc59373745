"""A trained model on top of a baseline: the network's logits are added to a fitted baseline's, so that it learns
what the baseline misses (an offset, as in a generalised linear model, or the second stage of stacking).

On irregular records the per-channel summaries (mean, last, slope, count, ...) that a practitioner's logistic
regression reads carry most of the signal, and a sequence model trained on a few hundred records learns them less
well than the regression fits them (docs/benchmarks.md, "Irregular records"). With the regression's logits as an
offset the network starts from them and spends its capacity on the rest: interactions, shapes, timing.

The training offsets are *out of fold*: each sample's offset comes from a baseline fitted without it, as the offsets
of new samples will. In-sample offsets of a flexible baseline are over-confident and would leave the network a
residual that new data do not have.

Pieces: `summary_feature_logits` (the out-of-fold and the final baseline), `LogitOffset` (the model that adds them).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..data.base.datasets import IrregularDataset
from ..reference import SummaryFeatureClassifier

BASELINES = ("summary-features",)


def baseline_logits(baseline: SummaryFeatureClassifier, data: IrregularDataset, num_classes: int) -> np.ndarray:
    """(N, K) logits of a fitted baseline whose classes are a subset of 0..K-1 (a stratified fold misses none)."""
    decision = baseline.decision_function(data)
    logits = np.zeros((len(data), num_classes))
    classes = baseline.classes_.astype(np.int64)
    if decision.ndim == 1:  # two classes: the log-odds of the second
        logits[:, classes[1]] = decision
    else:
        logits[:, classes] = decision
    return logits


def summary_feature_logits(
    data: IrregularDataset, codes: np.ndarray, num_classes: int, *, folds: int = 5, seed: int = 0
) -> tuple[np.ndarray, SummaryFeatureClassifier]:
    """Out-of-fold logits of `SummaryFeatureClassifier` for every sample, and the baseline fitted on all of them.

    Arguments:
        data: the N training samples (times, values with NaN where missing, lengths).
        codes: (N,) class indices in [0, num_classes).
        num_classes: K.
        folds: the most stratified folds (default 5; fewer when the smallest class has fewer samples; at least 2).
        seed: the folds' shuffle and the baseline's cross-validation seed.

    Returns:
        ((N, K) float64 logits, each from a baseline fitted on the other folds; the baseline fitted on all N, whose
        `decision_function` gives the logits of new samples).

    Raises:
        ValueError: a class with a single sample (no stratified folds exist).
    """
    from sklearn.model_selection import StratifiedKFold

    codes = np.asarray(codes, dtype=np.int64)
    smallest = int(np.bincount(codes, minlength=num_classes).min())
    n_folds = min(int(folds), smallest)
    if n_folds < 2:
        raise ValueError(
            f"baseline='summary-features' fits its baseline out of fold, which needs at least 2 samples "
            f"of every class; the smallest class has {smallest}"
        )
    logits = np.zeros((len(data), num_classes))
    splitter = StratifiedKFold(n_folds, shuffle=True, random_state=seed)
    for fit_index, held_index in splitter.split(np.zeros(len(codes)), codes):
        fold = SummaryFeatureClassifier(random_state=seed).fit(
            data.subset(torch.as_tensor(fit_index)), codes[fit_index]
        )
        logits[held_index] = baseline_logits(fold, data.subset(torch.as_tensor(held_index)), num_classes)
    final = SummaryFeatureClassifier(random_state=seed).fit(data, codes)
    return logits, final


class LogitOffset(nn.Module):
    """A classifier whose logits are added to given per-sample offsets: ``forward(inputs, offset) = offset + gate *
    model(inputs)``, ``gate`` a learnt scalar that starts at 0.

    The gate starting at 0 makes training start from the baseline itself (a freshly initialised network's logits are
    noise of order 1 that the few samples this is for cannot afford; with the gate at 0 the network's first steps
    still get gradients through the gate's own, as in ReZero).

    Arguments:
        model: a classifier returning (B, K) logits.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        parameter = next(model.parameters(), None)
        self.gate = nn.Parameter(
            torch.zeros(
                (),
                dtype=None if parameter is None else parameter.dtype,
                device=None if parameter is None else parameter.device,
            )
        )

    def forward(self, inputs, offset: torch.Tensor) -> torch.Tensor:
        """(B, K) logits.

        Arguments:
            inputs: the model's input for B samples (a `Control`, `Observations`, ...).
            offset: (B, K) the baseline's logits of the same samples.
        """
        logits = self.model(inputs)
        if offset.shape != logits.shape:
            raise ValueError(
                f"offset must be (B, K) = {tuple(logits.shape)} like the model's logits, got {tuple(offset.shape)}"
            )
        return offset.to(logits.dtype) + self.gate * logits
