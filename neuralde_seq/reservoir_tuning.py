"""Fine-tuning a fitted random-feature model: the reservoir learns, the readout stays a closed-form ridge.

A `RandomFeatures` map read out by a `RidgeReadout` (the toolkit's random-feature mode) is a good start on few,
long series, and gradient training from scratch is not (docs/benchmarks.md). Fine-tuning starts from that fitted
model and trains the reservoir end to end:

- **The network** (`ReservoirNetwork`): the fitted map's reservoir (a linear CDE of damped oscillators, a CT-FWP,
  an NCDE) with its parameters trainable (a CT-FWP's rule rates and projections, a linear CDE's A_i and B), its
  "ppv" thresholds trainable, and the features standardised with the readout's fixed training mean and scale.
  The proportion of knots at which a unit exceeds its threshold has no gradient; its smooth stand-in, the mean of
  σ((h − b) / (τ · s)) with s the unit's interquartile spread (`positive_proportion`), tends to it as the
  temperature τ goes to 0.
- **The objective** (`RidgeLeaveOneOut`): the mean squared leave-one-out error of a ridge readout (the fitted
  penalty α) fitted in closed form on each training batch's features; the readout's weights are never trained by
  gradient. Training a linear head by gradient together with the reservoir was tried first: on tens of training
  series the ridge head already fits them (training loss near 0 at the start), the gradients carry no signal and
  the steps move the reservoir at random (ArrowHead: validation 75 → 38 %). The leave-one-out error of the
  closed-form head is what the random features are judged by, and it keeps a gradient when the training series
  are separated.
- **Selection against the start** (`fine_tune`): ``validation_fraction`` of the series is held out (stratified
  for classes); the untrained map (exact "ppv", temperature 0) and the map after each epoch are scored there by a
  ridge readout fitted on the training part's features (accuracy, ties to the lower squared error of the decision
  values against the ±1 targets; squared error alone for regression). The best epoch's map is kept only when its
  squared error is lower than the start's by more than ``margin`` standard errors of the paired per-series
  differences (default 0), and by more than rounding (a millionth of the start's), and its accuracy no lower
  (`improves`), so fine-tuning cannot make the model worse than
  the random features on the validation split; the estimator then refits the ridge readout on all of its training
  series.

Cost: each epoch is a forward and backward pass of the reservoir over the training part plus a forward pass over
all the series (the selection), about 4-5 times the random-feature fit per epoch (benchmarks/ in
docs/benchmarks.md, "Fine-tuned random features").
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from .input_checks import unknown_name_message
from .training.callbacks import BestCheckpoint
from .training.fit import TrainingDiverged, fit
from .training.objectives import ModelArguments, Objective, predict
from .training.spec import TrainingSpec

__all__ = [
    "FineTuning",
    "ReservoirNetwork",
    "RidgeLeaveOneOut",
    "ridge_leave_one_out_error",
    "fine_tune",
    "improves",
    "paired_improvement",
    "MIN_RELATIVE_IMPROVEMENT",
]

# At least this many series in each training batch: a leave-one-out error needs a few to hold one out from.
_MIN_BATCH = 4


@dataclasses.dataclass(frozen=True)
class FineTuning:
    """How a fitted random-feature model is fine-tuned (module docstring).

    Arguments:
        epochs: passes over the training part (default 10).
        lr: Adam's learning rate (default 3e-3).
        batch_size: series per step (default 32); the batches of an epoch are made equal in size (none smaller
            than 4: the leave-one-out error needs a few series per batch).
        temperature: τ of the smooth "ppv", in units of each unit's interquartile spread (default 0.05: at 0.5 the
            stand-in's features lost half the validation accuracy of the exact ones on ArrowHead, at 0.02-0.05 none).
        validation_fraction: the share of the series held out to choose between the start and the epochs (default
            0.2).
        margin: how many standard errors of the per-series differences (paired, on the validation split) the
            fine-tuned map must lower the validation squared error by to be kept (default 0.0: any decrease). A
            margin of 1 was tried on halves of the proxy suite and did not hold on the half it was not chosen on
            (docs/benchmarks.md, "Fine-tuning's selection margin"): on 8-40 validation series the paired statistic
            does not tell the maps that lose on TEST (t = 3.0 and 3.25 there) from those that gain.
    """

    epochs: int = 10
    lr: float = 3e-3
    batch_size: int = 32
    temperature: float = 0.05
    validation_fraction: float = 0.2
    margin: float = 0.0

    def __post_init__(self):
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"fine_tune {name} must be a positive integer, got {value!r}")
        for name in ("lr", "temperature"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, numbers.Real)
                or not (math.isfinite(value) and value > 0)
            ):
                raise ValueError(f"fine_tune {name} must be a positive finite number, got {value!r}")
        m = self.margin
        if isinstance(m, bool) or not isinstance(m, numbers.Real) or not (math.isfinite(m) and m >= 0):
            raise ValueError(f"fine_tune margin must be a non-negative finite number, got {m!r}")
        f = self.validation_fraction
        if isinstance(f, bool) or not isinstance(f, numbers.Real) or not 0.0 < float(f) < 1.0:
            raise ValueError(f"fine_tune validation_fraction must be a number in (0, 1), got {f!r}")

    @classmethod
    def read(cls, value: Any) -> FineTuning | None:
        """A fine-tuning setting as estimators and config rows give it.

        Arguments:
            value: None or False (no fine-tuning), True (the defaults), a `FineTuning`, or a dict of its fields.

        Returns:
            The `FineTuning`, or None.

        Raises:
            ValueError: an unknown field (with the closest name) or a bad value, naming it.
            TypeError: another kind of value.
        """
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            names = [f.name for f in dataclasses.fields(cls)]
            for key in value:
                if key not in names:
                    raise ValueError("fine_tune: " + unknown_name_message("field", str(key), names, listing="fields"))
            return cls(**dict(value))
        raise TypeError(
            f"fine_tune must be None, True, a dict of FineTuning fields or a FineTuning, got {type(value).__name__}"
        )


def ridge_leave_one_out_error(features: torch.Tensor, targets: torch.Tensor, alpha: float) -> torch.Tensor:
    """The mean squared leave-one-out error of ridge regression with an unpenalised intercept, differentiable in the
    features (float64).

    With Z the features centred over the batch, Y_c the targets centred, the hat matrix of ridge with penalty α and
    an intercept is H = 1/n + Z (ZᵀZ + αI)⁻¹ Zᵀ = 1/n + G (G + αI)⁻¹ with G = ZZᵀ, and sample i's leave-one-out
    residual is r_i / (1 − H_ii), r = Y_c − (H − 1/n) Y_c (`RidgeReadout`'s cross-validation at one α, with the
    features used as given).

    Arguments:
        features: (n, P) features, n >= 3.
        targets: (n, k) targets.
        alpha: the penalty, positive.

    Returns:
        () the mean over samples and targets of the squared leave-one-out residuals.
    """
    n = features.shape[0]
    if n < 3:
        raise ValueError(f"the leave-one-out error needs at least 3 samples, got {n}")
    Z = features.to(torch.float64)
    Z = Z - Z.mean(dim=0)
    Y = targets.to(torch.float64)
    Yc = Y - Y.mean(dim=0)
    G = Z @ Z.T
    identity = torch.eye(n, dtype=G.dtype, device=G.device)
    hat = torch.linalg.solve(G + alpha * identity, G)  # (G + αI)⁻¹ G = G (G + αI)⁻¹: both are functions of G
    residual = (Yc - hat @ Yc) / (1.0 - torch.diagonal(hat) - 1.0 / n).unsqueeze(1)
    return residual.square().mean()


class ReservoirNetwork(nn.Module):
    """A fitted `RandomFeatures` map as a trainable module: ``forward(control, path_part)`` gives the standardised
    features (module docstring).

    Arguments:
        feature_map: a fitted `RandomFeatures` whose reservoir is a model (not ``"logsignature"``); copied, the
            original is left as it was.
        feature_mean: (F,) the readout's feature means (`RidgeReadout`'s ``feature_mean_``), kept fixed.
        feature_scale: (F,) the readout's feature scales (`RidgeReadout`'s ``feature_scale_``), kept fixed.
        temperature: τ of the smooth "ppv" (0: the exact, step-wise feature, without gradient in the thresholds).
    """

    def __init__(self, feature_map, feature_mean: torch.Tensor, feature_scale: torch.Tensor, temperature: float):
        super().__init__()
        if getattr(feature_map, "model_", None) is None:
            raise ValueError(
                f"reservoir {feature_map.reservoir!r} has no parameters to fine-tune (the path's "
                "log-signatures): fine_tune needs a model reservoir"
            )
        self.feature_map = copy.copy(feature_map)
        self.reservoir = copy.deepcopy(feature_map.model_)
        for parameter in self.reservoir.parameters():
            parameter.requires_grad_(True)
        self.reservoir.train()
        biases = feature_map.biases_
        self.biases = None if biases is None else nn.Parameter(biases.detach().clone())
        self.register_buffer("feature_mean", feature_mean.detach().to(torch.float64).clone())
        self.register_buffer("feature_scale", feature_scale.detach().to(torch.float64).clone())
        self.temperature = float(temperature)

    def forward(self, control, path_part: torch.Tensor | None = None) -> torch.Tensor:
        """Standardised features.

        Arguments:
            control: the fitted map's input (`RandomFeatures.inputs`), batch size B.
            path_part: (B, width) the path features ("values", "levels": `RandomFeatures.model_arguments`), or an
                empty (B, 0) tensor / None without them.

        Returns:
            (B, F) float64 standardised features.
        """
        states = self.feature_map.states_of(self.reservoir, control)
        path_part = None if path_part is None or path_part.shape[1] == 0 else path_part
        features = self.feature_map.pooled(
            states, control.end_index, path_part, biases=self.biases, temperature=self.temperature
        )
        return (features - self.feature_mean) / self.feature_scale

    def tuned_map(self):
        """The fitted map with the trained reservoir and thresholds, frozen, reading the smooth "ppv" at this
        network's temperature.

        Returns:
            A new `RandomFeatures`.
        """
        tuned = copy.copy(self.feature_map)
        model = copy.deepcopy(self.reservoir)
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        tuned.model_ = model.eval()
        tuned.biases_ = None if self.biases is None else self.biases.detach().clone()
        tuned.temperature_ = self.temperature
        return tuned


class RidgeLeaveOneOut(Objective):
    """Train by the leave-one-out error of a closed-form ridge readout on each batch (`ridge_leave_one_out_error`);
    evaluate a split by a ridge readout fitted on the training part's features.

    Arguments:
        alpha: the penalty of the training loss.
        reference: (inputs, targets) of the training part, whose features fit the evaluation's readout.
        classification: targets are ±1 one-vs-all columns (`one_vs_all`): evaluation reports accuracy too.
        alphas: the penalties the evaluation's readout chooses from by leave-one-out.
        batch_size: series per forward pass at evaluation.
        readout_type: the closed-form readout, called as ``readout_type(alphas, standardize=False)`` (`RidgeReadout`,
            given by the caller: `neuralde_seq.random_features` imports this module).
    """

    def __init__(self, alpha: float, reference: tuple, *, classification: bool, alphas, batch_size: int, readout_type):
        self.alpha = float(alpha)
        self.readout_type = readout_type
        self.reference = reference
        self.classification = bool(classification)
        self.alphas = alphas
        self.batch_size = int(batch_size)
        self.metric_names = ("loss", "accuracy") if classification else ("loss",)
        self.maximize = {"loss": False, "accuracy": True} if classification else {"loss": False}
        self.default_select_on = "accuracy" if classification else "loss"

    def check_targets(self, targets, num_samples: int, name: str = "targets"):
        """Targets must be a (N, k) float tensor."""
        if not isinstance(targets, torch.Tensor) or targets.dim() != 2 or targets.shape[0] != num_samples:
            raise ValueError(f"{name} must be a ({num_samples}, k) tensor of readout targets")
        return targets

    def loss(self, outputs, targets) -> torch.Tensor:
        """`ridge_leave_one_out_error` of the batch's features."""
        return ridge_leave_one_out_error(outputs, targets, self.alpha)

    def evaluate(self, model, inputs, targets, batch_size: int, index=None) -> dict:
        """A ridge readout fitted on the reference's features, scored on ``inputs``: ``loss`` the mean squared
        error of its decision values against ``targets``, ``accuracy`` (classification) the share whose largest
        decision value is the target's +1 column."""
        decisions, truth = self._decisions(model, inputs, targets, index)
        metrics = {"loss": float((decisions - truth).square().mean()), "num_samples": int(truth.shape[0])}
        if self.classification:
            if truth.shape[1] == 1:  # two classes: one column, +1 for the second
                correct = (decisions[:, 0] > 0) == (truth[:, 0] > 0)
            else:
                correct = decisions.argmax(dim=1) == truth.argmax(dim=1)
            metrics["accuracy"] = float(correct.to(torch.float64).mean())
        return metrics

    def series_errors(self, model, inputs, targets) -> torch.Tensor:
        """(n,) each series' squared error of the decision values of `evaluate`'s readout (the mean over the
        target columns): ``evaluate``'s ``loss`` is their mean."""
        decisions, truth = self._decisions(model, inputs, targets, None)
        return (decisions - truth).square().mean(dim=1)

    def _decisions(self, model, inputs, targets, index):
        """(decision values, targets), both (n, k): a ridge readout fitted on the reference's features."""
        train_inputs, train_targets = self.reference
        train_features = predict(model, train_inputs, self.batch_size)
        features = predict(model, inputs, self.batch_size, index=index)
        chosen = targets if index is None else targets[index]
        readout = self.readout_type(self.alphas, standardize=False).fit(train_features, train_targets)
        decisions = readout.decision_function(features).reshape(chosen.shape[0], -1)
        return decisions, chosen.to(decisions)


def paired_improvement(start_errors: torch.Tensor, best_errors: torch.Tensor) -> dict:
    """The mean decrease of the per-series squared errors from the start to the fine-tuned map, and its standard
    error (the sample standard deviation of the paired differences over √n).

    Arguments:
        start_errors: (n,) the start's per-series errors (`RidgeLeaveOneOut.series_errors`), n >= 2.
        best_errors: (n,) the fine-tuned map's, on the same series.

    Returns:
        {"improvement": float, "standard_error": float}.
    """
    difference = (start_errors - best_errors).to(torch.float64)
    n = difference.shape[0]
    return {
        "improvement": float(difference.mean()),
        "standard_error": float(difference.std(unbiased=True) / math.sqrt(n)) if n > 1 else math.inf,
    }


def _balanced_batch_size(count: int, batch_size: int) -> int:
    """The batch size that splits ``count`` series into ⌈count / batch_size⌉ batches of nearly equal size."""
    batches = max(1, math.ceil(count / batch_size))
    return math.ceil(count / batches)


# A decrease of the validation squared error below this fraction of the start's is rounding, not learning: "mpv" is
# continuous in the thresholds, so a step of 1e-12 moved it by about that much and was kept at margin 0.
MIN_RELATIVE_IMPROVEMENT = 1e-6


def improves(best: dict, start: dict, classification: bool, standard_error: float = 0.0, margin: float = 0.0) -> bool:
    """Whether the fine-tuned map's validation metrics beat the start's: a squared error lower by more than
    ``margin`` standard errors of the paired per-series differences (`paired_improvement`), and by more than
    `MIN_RELATIVE_IMPROVEMENT` of the start's, and, for classes, an accuracy at least as high. Both must agree: on
    8-54 validation series an accuracy that rises by one series while the squared error rises too was noise
    (PickupGestureWiimoteZ, seed 0: validation 0.6 → 0.7, TEST 66 → 64 %)."""
    decrease = start["loss"] - best["loss"]
    if not (decrease > margin * standard_error and decrease > MIN_RELATIVE_IMPROVEMENT * abs(start["loss"])):
        return False
    return not classification or best["accuracy"] >= start["accuracy"]


def fine_tune(
    feature_map,
    readout,
    inputs: ModelArguments,
    targets: torch.Tensor,
    settings: FineTuning,
    *,
    classification: bool,
    strata: np.ndarray | None,
    seed: int,
    progress: bool | str = False,
):
    """Fine-tune a fitted random-feature map, and choose between it and the start on a validation split (module
    docstring).

    Arguments:
        feature_map: the fitted `RandomFeatures` (fitted on all the series).
        readout: its fitted `RidgeReadout` (its ``alpha_``, ``alphas`` and feature standardisation are used).
        inputs: ``ModelArguments(control, path_part)`` of all N series (``path_part`` (N, V), V = 0 without
            path features).
        targets: (N, k) the readout's targets (±1 one-vs-all columns, or standardised real targets).
        settings: the `FineTuning`.
        classification: whether the targets are classes (accuracy decides, stratified split).
        strata: (N,) class codes to stratify the split on, or None (a random split).
        seed: the split's and the training's seed.
        progress: as `fit`'s.

    Returns:
        ``(feature_map, report)``: the fine-tuned map (a new `RandomFeatures`) where it `improves` on the start on
        the validation split, else the given one; ``report`` a dict: ``chosen`` ("fine-tuned" or
        "start"), ``start`` and ``best`` (the validation metrics), ``paired`` (`paired_improvement` of the best
        epoch's per-series errors over the start's, or None without a best epoch), ``best_epoch``, ``diverged`` (the
        message, or None), ``history`` (`fit`'s), ``train_size``, ``validation_size``, ``stratified`` (False where a
        class was too small to stratify the split on and it was drawn at random).

    Raises:
        ValueError: fewer than 2 validation or 4 training series.
    """
    from sklearn.model_selection import train_test_split

    n = len(inputs)
    index = np.arange(n)
    stratify = strata
    if strata is not None:
        _, counts = np.unique(strata, return_counts=True)
        held = int(math.ceil(settings.validation_fraction * n))
        if counts.min() < 2 or held < len(counts) or n - held < len(counts):
            stratify = None  # a class too small to stratify: a random split (stated in the report)
    train_index, val_index = train_test_split(
        index, test_size=settings.validation_fraction, random_state=seed, stratify=stratify
    )
    train_index, val_index = np.sort(train_index), np.sort(val_index)
    if len(val_index) < 2 or len(train_index) < _MIN_BATCH:
        raise ValueError(
            f"fine_tune needs at least {_MIN_BATCH} training and 2 validation series, got "
            f"{len(train_index)} and {len(val_index)} of {n} (validation_fraction "
            f"{settings.validation_fraction})"
        )
    device = targets.device
    train_index_t, val_index_t = torch.as_tensor(train_index, device=device), torch.as_tensor(val_index, device=device)
    train = (inputs[train_index_t], targets[train_index_t])
    val = (inputs[val_index_t], targets[val_index_t])
    network = ReservoirNetwork(feature_map, readout.feature_mean_, readout.feature_scale_, settings.temperature)
    network = network.to(device)
    objective = RidgeLeaveOneOut(
        readout.alpha_,
        train,
        classification=classification,
        alphas=readout.alphas,
        batch_size=settings.batch_size,
        readout_type=type(readout),
    )
    network.temperature = 0.0  # the start: the exact features of the random-feature model
    start = objective.evaluate(network, *val, settings.batch_size)
    with torch.no_grad():
        start_errors = objective.series_errors(network, *val)
    network.temperature = settings.temperature
    batch_size = _balanced_batch_size(len(train_index), settings.batch_size)
    spec = TrainingSpec(
        epochs=settings.epochs, lr=settings.lr, batch_size=batch_size, seed=seed, eval_batch_size=settings.batch_size
    )
    best = BestCheckpoint(None)
    diverged = None
    try:
        history = fit(network, objective, train, val, spec, callbacks=[best], progress=progress)
    except TrainingDiverged as error:  # the best weights are back in the network; the start may still win
        history, diverged = error.history, str(error)
    report: dict[str, Any] = {
        "start": start,
        "best_epoch": int(history.get("best_epoch", 0)),
        "diverged": diverged,
        "history": history,
        "train_size": int(len(train_index)),
        "validation_size": int(len(val_index)),
        "stratified": stratify is not None,
    }
    best_metrics = {name: history.get(f"best_val_{name}") for name in objective.metric_names}
    if report["best_epoch"] > 0 and all(v is not None for v in best_metrics.values()):
        report["best"] = best_metrics
        with torch.no_grad():  # the network holds the best epoch's weights (BestCheckpoint loads them back)
            report["paired"] = paired_improvement(start_errors, objective.series_errors(network, *val))
        if improves(best_metrics, start, classification, report["paired"]["standard_error"], settings.margin):
            report["chosen"] = "fine-tuned"
            return network.tuned_map(), report
    else:
        report["best"], report["paired"] = None, None
    report["chosen"] = "start"
    return feature_map, report
