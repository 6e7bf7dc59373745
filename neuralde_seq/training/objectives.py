"""What a model is trained to do: the loss of a batch and the metrics of a whole split.

`fit` is one loop for every task; an `Objective` supplies what
differs between tasks:

| objective | model output | targets | metrics |
| --- | --- | --- | --- |
| `Classification` | (B, K) logits | (N,) long class indices in [0, K) | accuracy, loss, auroc |
| `PerStepClassification` | (B, T, K) logits | (N, T) long, ``ignore_index`` where unscored | accuracy, loss |
| `Regression` | (B, ...) | (N, ...) float, the output's shape | mse, mae, loss |
| `ELBO` | a latent model (``model.loss``, ``model.elbo``) | None or observations to reconstruct | elbo, loss |

Targets are checked up front (`Objective.check_targets`): dtype, shape, range, no NaN. A class index
such as -100 is never silently ignored: per-step targets ignore only an ``ignore_index`` given explicitly.
A task with its own loss subclasses `Objective` and overrides `training_loss`
(and `evaluate` where its metrics need more than the outputs).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from .metrics import accuracy, auroc

__all__ = [
    "Objective",
    "Classification",
    "PerStepClassification",
    "Regression",
    "ELBO",
    "ModelArguments",
    "forward",
    "predict",
]


class ModelArguments:
    """Several inputs of one model, sliced together: a batch ``args[index]`` is passed as ``model(*batch.args)``.

    E.g. ``ModelArguments(control, static)`` for a model whose forward is ``forward(control, static)``.

    Arguments:
        *args: the inputs, each with N samples along its first dimension (a control, or a (N, S) tensor).
    """

    def __init__(self, *args):
        if not args:
            raise ValueError("ModelArguments needs at least one argument")
        sizes = [len(a) for a in args]
        if len(set(sizes)) != 1:
            raise ValueError(f"ModelArguments' arguments hold different numbers of samples: {sizes}")
        self.args = tuple(args)

    def __len__(self) -> int:
        return len(self.args[0])

    def __getitem__(self, index) -> ModelArguments:
        return ModelArguments(*(a[index] for a in self.args))

    def to(self, *args, **kwargs) -> ModelArguments:
        """Every input's ``.to(*args, **kwargs)`` (device and/or dtype, as ``torch.Tensor.to``).

        Returns:
            A new `ModelArguments` of the moved inputs.
        """
        return ModelArguments(*(a.to(*args, **kwargs) for a in self.args))


def forward(model: torch.nn.Module, inputs):
    """``model(*inputs.args)`` for `ModelArguments`, else ``model(inputs)``.

    Arguments:
        model: the model.
        inputs: a batch of inputs: `ModelArguments`, or one input (a `Control`, `Observations`, tensor).

    Returns:
        The model's outputs.
    """
    if isinstance(inputs, ModelArguments):
        return model(*inputs.args)
    return model(inputs)


def _check_batch_size(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def batches(num_samples: int, batch_size: int):
    """1-D index tensors covering 0..num_samples-1 in order; the last may be smaller (nothing dropped)."""
    for start in range(0, num_samples, batch_size):
        yield torch.arange(start, min(start + batch_size, num_samples))


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    inputs,
    batch_size: int,
    objective: Objective | None = None,
    num_samples: int | None = None,
    index: torch.Tensor | None = None,
):
    """The model's outputs for every sample of ``inputs`` in order (or for the samples at ``index``).

    Batches are taken in order and the last one may be smaller: no sample is dropped. The outputs of the
    batches are joined by ``objective.collate`` (concatenation by default). The model is put in eval mode
    and its previous mode restored.

    Arguments:
        model: the model.
        inputs: the inputs of N samples, sliceable by a 1-D index tensor (a `Control`, `Observations`,
            tensor or `ModelArguments`), on the model's device.
        batch_size: samples per forward pass.
        objective: the `Objective` whose ``forward`` and ``collate`` are used (default: the base one).
        num_samples: how many samples to score from the start (default ``len(inputs)``); ignored with ``index``.
        index: 1-D long tensor of the samples to score, in that order (default: ``num_samples`` from 0).

    Returns:
        The joined outputs, e.g. (N, K) logits for a classifier.

    Raises:
        ValueError: non-finite outputs (their metrics would be silently wrong), or a bad ``batch_size``.
        RuntimeError: the model returned another number of rows than samples.
    """
    _check_batch_size(batch_size)
    objective = objective or Objective()
    if index is None:
        index = torch.arange(len(inputs) if num_samples is None else int(num_samples))
    was_training = model.training
    model.eval()
    try:
        outputs = [objective.forward(model, inputs[index[batch]]) for batch in batches(index.numel(), batch_size)]
    finally:
        model.train(was_training)
    joined = objective.collate(outputs)
    if isinstance(joined, torch.Tensor) and joined.shape[0] != index.numel():
        raise RuntimeError(f"the model returned {joined.shape[0]} rows for {index.numel()} samples")
    if isinstance(joined, torch.Tensor) and joined.is_floating_point() and not bool(torch.isfinite(joined).all()):
        # Metrics of NaN outputs would be silently wrong (argmax of NaN is a class like any other).
        bad = (~torch.isfinite(joined)).flatten(1).any(dim=1)
        raise ValueError(
            f"the model returned non-finite outputs for {int(bad.sum())} of {index.numel()} samples "
            f"(first: sample {int(index[torch.nonzero(bad)[0]])}); look for a NonFiniteSolveWarning "
            "above, inputs far outside the training data's scale, or time units with very wide gaps"
        )
    return joined


class Objective:
    """Base objective: outputs = ``model(inputs)``; subclasses define the loss and the metrics.

    Attributes:
        metric_names: the metrics `evaluate` returns (besides ``num_samples``).
        maximize: per metric, whether larger is better (used to select checkpoints and stop early).
        default_select_on: the metric checkpoints are selected on unless told otherwise.
    """

    metric_names: tuple[str, ...] = ("loss",)
    maximize: dict[str, bool] = {"loss": False}
    default_select_on = "loss"
    # Per-batch training statistics accumulated over an epoch (e.g. accuracy); "loss" is always kept.
    train_metric_names: tuple[str, ...] = ()

    def check_targets(self, targets, num_samples: int, name: str = "targets"):
        """Validate ``targets`` for ``num_samples`` inputs.

        Arguments:
            targets: the targets of a split (N along the first dimension), or None.
            num_samples: N, the number of inputs they belong to.
            name: the targets' name in error messages.

        Returns:
            The targets (possibly converted).

        Raises:
            ValueError: (in subclasses) targets of the wrong dtype, shape or range, naming ``name``.
        """
        return targets

    def forward(self, model: torch.nn.Module, inputs):
        """The model's outputs for a batch of inputs (`forward`: ``model(*inputs.args)`` for
        `ModelArguments`, else ``model(inputs)``).

        Arguments:
            model: the model.
            inputs: a batch of inputs.

        Returns:
            The model's outputs.
        """
        return forward(model, inputs)

    def loss(self, outputs, targets) -> torch.Tensor:
        """The mean loss of a batch; subclasses define it.

        Arguments:
            outputs: the model's outputs for the batch.
            targets: the batch's targets.

        Returns:
            A scalar tensor.
        """
        raise NotImplementedError(f"{type(self).__name__} defines no loss")

    def training_loss(self, model: torch.nn.Module, inputs, targets, context: dict) -> tuple[torch.Tensor, Any]:
        """The loss of a training batch, and the outputs its training statistics are computed from.

        Arguments:
            model: the model (in training mode).
            inputs: the batch's inputs.
            targets: the batch's targets, or None.
            context: ``epoch``, ``step`` (training steps so far), ``steps_per_epoch`` and ``generator`` (the
                data-order generator, for objectives that draw at random); on `fit`'s first batch also
                ``check_outputs``, a function of the outputs called before the loss reads them (it checks them and
                every target's range: a class index out of range is named before the loss indexes with it).

        Returns:
            ``(mean loss of the batch, outputs for the training statistics or None)``.
        """
        outputs = self.forward(model, inputs)
        check_outputs = context.get("check_outputs")
        if check_outputs is not None:
            check_outputs(outputs)
        return self.loss(outputs, targets), outputs

    def train_statistics(self, outputs, targets) -> dict[str, tuple[float, int]]:
        """Per training metric, (sum, count) over the batch; averaged over the epoch.

        Arguments:
            outputs: the model's outputs for the batch (detached before use).
            targets: the batch's targets.

        Returns:
            A dict from metric name to ``(sum, count)`` (default: empty).
        """
        return {}

    def collate(self, outputs: list):
        """Join the outputs of consecutive batches.

        Arguments:
            outputs: the batches' outputs, in order.

        Returns:
            The outputs of all samples (default: concatenated along the first dimension).
        """
        return torch.cat(outputs, dim=0)

    def metrics(self, outputs, targets) -> dict[str, Any]:
        """The metrics of a whole split.

        Arguments:
            outputs: the collated outputs of every sample of the split.
            targets: the split's targets, on the outputs' device.

        Returns:
            A dict from metric name (`metric_names`) to value (default: ``{"loss": ...}``).
        """
        return {"loss": float(self.loss(outputs, targets))}

    def evaluate(
        self, model: torch.nn.Module, inputs, targets, batch_size: int, index: torch.Tensor | None = None
    ) -> dict[str, Any]:
        """Metrics over every sample of ``inputs`` (or those at ``index``).

        Arguments:
            model: the model (put in eval mode, its mode restored afterwards).
            inputs: the split's inputs, sliceable by a 1-D index tensor.
            targets: the split's targets (N along the first dimension), or None.
            batch_size: samples per forward pass.
            index: 1-D long tensor of the samples to evaluate, or None (default: all).

        Returns:
            `metrics` plus ``num_samples``, the number of samples evaluated.
        """
        outputs = predict(model, inputs, batch_size, self, index=index)
        chosen = targets if index is None or targets is None else targets[index.to(_device_of(targets))]
        n = len(inputs) if index is None else index.numel()
        return {
            **self.metrics(outputs, None if chosen is None else chosen.to(_device_of(outputs))),
            "num_samples": int(n),
        }

    def check_outputs(self, outputs, targets) -> None:
        """Checked on the first training batch, before any step: outputs and targets fit together.

        Arguments:
            outputs: the model's outputs for the first batch.
            targets: the first batch's targets.

        Raises:
            ValueError: (in subclasses) outputs of a shape the targets do not fit.
        """

    def check_target_range(self, outputs, targets, name: str) -> None:
        """Checked on the first training batch for every target of a split: e.g. class indices within the
        output width (a label out of range must not surface as an indexing error after training steps).

        Arguments:
            outputs: the model's outputs for the first batch (their width).
            targets: every target of the split.
            name: the split's targets in error messages (e.g. "val targets").

        Raises:
            ValueError: (in subclasses) a target out of range, naming ``name``.
        """


def _device_of(x) -> torch.device:
    return x.device if isinstance(x, torch.Tensor) else torch.device("cpu")


def _check_tensor(targets, name: str) -> torch.Tensor:
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(targets).__name__}")
    if targets.numel() == 0:
        raise ValueError(f"{name} is empty")
    return targets


def _check_num_classes(num_classes) -> None:
    if num_classes is not None and (
        isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2
    ):
        raise ValueError(f"num_classes must be an integer >= 2 or None, got {num_classes!r}")


def _check_class_indices(
    targets: torch.Tensor, name: str, num_classes: int | None, ignore_index: int | None = None
) -> None:
    if targets.dtype != torch.long:
        raise ValueError(f"{name} must hold class indices as torch.long, got {targets.dtype}")
    scored = targets if ignore_index is None else targets[targets != ignore_index]
    if scored.numel() == 0:
        raise ValueError(f"{name}: every entry equals ignore_index={ignore_index}; nothing to score")
    low, high = int(scored.min()), int(scored.max())
    if low < 0:
        raise ValueError(
            f"{name} holds the negative class index {low}: class indices lie in [0, num_classes)"
            + (
                ""
                if ignore_index is not None
                else "; positions to leave out are not ignored silently: "
                "give them as ignore_index to a per-step objective"
            )
        )
    if num_classes is not None and high >= num_classes:
        raise ValueError(
            f"{name} holds the class index {high}, out of range for {num_classes} classes "
            f"(indices lie in [0, {num_classes}))"
        )


class Classification(Objective):
    """One class per sequence: cross-entropy of (B, K) logits against (N,) long class indices.

    Arguments:
        num_classes: K, if known; targets are then range-checked before training (otherwise against the
            model's output width at the first batch).
        label_smoothing: as ``torch.nn.functional.cross_entropy``.
    """

    metric_names = ("accuracy", "loss", "auroc")
    maximize = {"accuracy": True, "loss": False, "auroc": True}
    default_select_on = "accuracy"
    train_metric_names = ("accuracy",)

    def __init__(self, num_classes: int | None = None, label_smoothing: float = 0.0):
        _check_num_classes(num_classes)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must lie in [0, 1), got {label_smoothing!r}")
        self.num_classes = num_classes
        self.label_smoothing = float(label_smoothing)

    def check_targets(self, targets, num_samples: int, name: str = "labels"):
        """(N,) long class indices in [0, num_classes) (when known); see `Objective.check_targets`."""
        targets = _check_tensor(targets, name)
        if targets.dim() != 1:
            raise ValueError(f"{name} must be a 1-D tensor of class indices, got shape {tuple(targets.shape)}")
        if targets.shape[0] != num_samples:
            raise ValueError(f"{name} has {targets.shape[0]} entries but the inputs hold {num_samples} samples")
        _check_class_indices(targets, name, self.num_classes)
        return targets

    def check_outputs(self, outputs, targets) -> None:
        """(B, K) logits with K >= 2; see `Objective.check_outputs`."""
        if not isinstance(outputs, torch.Tensor) or outputs.dim() != 2:
            raise ValueError(
                f"Classification expects (B, K) logits from the model, got "
                f"{tuple(outputs.shape) if isinstance(outputs, torch.Tensor) else type(outputs).__name__}"
            )
        if outputs.shape[1] < 2:
            raise ValueError(
                f"Classification needs logits of at least 2 classes, the model returns {outputs.shape[1]} "
                "output(s) per sample (for a real target use the Regression objective)"
            )

    def check_target_range(self, outputs, targets, name):
        """Every class index below the logits' width K; see `Objective.check_target_range`."""
        _check_class_indices(targets, name, outputs.shape[-1])

    def loss(self, outputs, targets):
        """Mean cross-entropy (with ``label_smoothing``) of (B, K) logits against (B,) class indices."""
        return F.cross_entropy(outputs, targets, label_smoothing=self.label_smoothing)

    def train_statistics(self, outputs, targets):
        """``{"accuracy": (correct, count)}`` of the batch."""
        return {"accuracy": (float((outputs.detach().argmax(dim=1) == targets).sum()), int(targets.numel()))}

    def metrics(self, outputs, targets):
        """``accuracy``, ``loss`` (mean cross-entropy) and ``auroc`` (None where undefined) of (N, K) logits."""
        return {
            "accuracy": accuracy(outputs, targets),
            "loss": F.cross_entropy(outputs.float(), targets, label_smoothing=self.label_smoothing).item(),
            "auroc": _auroc_or_none(outputs, targets),
        }


def _auroc_or_none(logits: torch.Tensor, labels: torch.Tensor) -> float | None:
    """AUROC of the softmax probabilities; None where undefined (a class absent from ``labels``)."""
    num_classes = logits.shape[1]
    present = torch.unique(labels).numel()
    if present < 2 or (num_classes > 2 and present < num_classes):
        return None
    return auroc(labels, torch.softmax(logits.detach().double(), dim=1))


class PerStepClassification(Objective):
    """A class at every step: cross-entropy of (B, T, K) logits against (N, T) long targets.

    Arguments:
        num_classes: K, if known (range check before training).
        ignore_index: a target value marking unscored steps (e.g. padding); None (default): every step is
            scored and a negative target is an error. Models reading `Observations` may
            return fewer steps than the targets hold (a batch is cut to its longest sample): the steps beyond
            the output must then all be ``ignore_index``.
    """

    metric_names = ("accuracy", "loss")
    maximize = {"accuracy": True, "loss": False}
    default_select_on = "accuracy"
    train_metric_names = ("accuracy",)

    def __init__(self, num_classes: int | None = None, ignore_index: int | None = None):
        _check_num_classes(num_classes)
        self.num_classes = num_classes
        self.ignore_index = ignore_index

    def check_targets(self, targets, num_samples: int, name: str = "targets"):
        """(N, T) long class indices (or ``ignore_index``); see `Objective.check_targets`."""
        targets = _check_tensor(targets, name)
        if targets.dim() != 2 or targets.shape[0] != num_samples:
            raise ValueError(f"{name} must have shape (N={num_samples}, T), got {tuple(targets.shape)}")
        _check_class_indices(targets, name, self.num_classes, self.ignore_index)
        return targets

    def _align(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if outputs.dim() != 3:
            raise ValueError(f"PerStepClassification expects (B, T, K) logits, got shape {tuple(outputs.shape)}")
        steps = outputs.shape[1]
        if targets.shape[1] > steps:
            beyond = targets[:, steps:]
            if self.ignore_index is None or bool((beyond != self.ignore_index).any()):
                raise ValueError(
                    f"targets hold {targets.shape[1]} steps but the model returned {steps}; the steps "
                    "beyond the output must be ignore_index"
                )
            targets = targets[:, :steps]
        elif targets.shape[1] < steps:
            raise ValueError(f"the model returned {steps} steps for targets of {targets.shape[1]}")
        return targets

    def check_outputs(self, outputs, targets) -> None:
        """(B, T', K) logits whose steps fit the targets; see `Objective.check_outputs`."""
        self._align(outputs, targets)  # shapes; the class range of every target is check_target_range's

    def check_target_range(self, outputs, targets, name):
        """Every scored class index below the logits' width K; see `Objective.check_target_range`."""
        _check_class_indices(targets, name, outputs.shape[-1], self.ignore_index)

    def loss(self, outputs, targets):
        """Mean cross-entropy over the scored steps of (B, T, K) logits against (B, T) targets."""
        targets = self._align(outputs, targets)
        return F.cross_entropy(
            outputs.flatten(0, 1),
            targets.flatten(),
            ignore_index=-100 if self.ignore_index is None else self.ignore_index,
        )

    def _scored(self, targets):
        return torch.ones_like(targets, dtype=torch.bool) if self.ignore_index is None else targets != self.ignore_index

    def train_statistics(self, outputs, targets):
        """``{"accuracy": (correct, scored)}`` over the batch's scored steps."""
        targets = self._align(outputs, targets)
        scored = self._scored(targets)
        correct = (outputs.detach().argmax(-1) == targets) & scored
        return {"accuracy": (float(correct.sum()), int(scored.sum()))}

    def collate(self, outputs: list):
        """Concatenate the batches' (B, T_b, K) logits, zero-padding the step axis to the longest."""
        # Batches of Observations are cut to their longest sample: pad the step axis back with zeros (the
        # targets there are ignore_index, checked by _align).
        steps = max(o.shape[1] for o in outputs)
        return torch.cat([F.pad(o, (0, 0, 0, steps - o.shape[1])) for o in outputs], dim=0)

    def metrics(self, outputs, targets):
        """``accuracy`` and ``loss`` over the scored steps of the split."""
        targets = self._align(outputs, targets)
        scored = self._scored(targets)
        correct = ((outputs.argmax(-1) == targets) & scored).sum()
        return {"accuracy": float(correct) / int(scored.sum()), "loss": float(self.loss(outputs.float(), targets))}


class Regression(Objective):
    """Real targets: mean squared or absolute error between outputs and targets of the same shape.

    A model output of shape (B, 1) is compared with (N,) targets as (B,).

    Arguments:
        loss: "mse" (default) or "mae", the training loss. Both are reported as metrics.
    """

    metric_names = ("loss", "mse", "mae")
    maximize = {"loss": False, "mse": False, "mae": False}
    default_select_on = "loss"

    def __init__(self, loss: str = "mse"):
        if loss not in ("mse", "mae"):
            raise ValueError(f"loss must be 'mse' or 'mae', got {loss!r}")
        self.kind = loss

    def check_targets(self, targets, num_samples: int, name: str = "targets"):
        """Finite floating point (N, ...) targets; see `Objective.check_targets`."""
        targets = _check_tensor(targets, name)
        if not targets.is_floating_point():
            raise ValueError(f"{name} must be a floating point tensor for regression, got {targets.dtype}")
        if targets.shape[0] != num_samples:
            raise ValueError(f"{name} has {targets.shape[0]} entries but the inputs hold {num_samples} samples")
        if not torch.isfinite(targets).all():
            raise ValueError(
                f"{name} holds NaN or infinite values; regression targets must be finite "
                "(drop or impute those samples first)"
            )
        return targets

    @staticmethod
    def _match(outputs, targets):
        if outputs.dim() == targets.dim() + 1 and outputs.shape[-1] == 1:
            outputs = outputs.squeeze(-1)
        if outputs.shape != targets.shape:
            raise ValueError(
                f"the model's outputs have shape {tuple(outputs.shape)} but the targets {tuple(targets.shape)}"
            )
        return outputs

    def check_outputs(self, outputs, targets) -> None:
        """Outputs of the targets' shape ((B, 1) matches (B,)); see `Objective.check_outputs`."""
        self._match(outputs, targets)

    def loss(self, outputs, targets):
        """Mean squared (``loss="mse"``) or absolute (``"mae"``) error."""
        outputs = self._match(outputs, targets)
        return F.mse_loss(outputs, targets) if self.kind == "mse" else F.l1_loss(outputs, targets)

    def metrics(self, outputs, targets):
        """``loss``, ``mse`` and ``mae`` of the split, computed in float64."""
        outputs = self._match(outputs, targets).double()
        targets = targets.double()
        mse, mae = float(F.mse_loss(outputs, targets)), float(F.l1_loss(outputs, targets))
        return {"loss": mse if self.kind == "mse" else mae, "mse": mse, "mae": mae}


class ELBO(Objective):
    """Variational training of a latent model (`LatentODE`): minimise the negative
    ELBO per observed value (``model.loss``), with the KL weight raised linearly from 0 to 1 over the
    first ``kl_warmup_steps`` training steps.

    Targets: None (reconstruct the inputs) or `Observations` to predict, sliced with
    the inputs. Metrics: ``elbo`` per observed value over the split (larger is better) and ``loss`` = −elbo.

    Arguments:
        kl_warmup_steps: training steps over which the KL weight rises linearly from 0 to 1 (an integer
            >= 0; default 0: no warm-up, weight 1 throughout).
    """

    metric_names = ("elbo", "loss")
    maximize = {"elbo": True, "loss": False}
    default_select_on = "elbo"

    def __init__(self, kl_warmup_steps: int = 0):
        if isinstance(kl_warmup_steps, bool) or not isinstance(kl_warmup_steps, int) or kl_warmup_steps < 0:
            raise ValueError(f"kl_warmup_steps must be an integer >= 0, got {kl_warmup_steps!r}")
        self.kl_warmup_steps = kl_warmup_steps

    def kl_weight(self, step: int) -> float:
        """The KL weight β at a training step.

        Arguments:
            step: training steps taken so far.

        Returns:
            ``min(1, step / kl_warmup_steps)``, or 1 without warm-up.
        """
        return 1.0 if self.kl_warmup_steps == 0 else min(1.0, step / self.kl_warmup_steps)

    def check_targets(self, targets, num_samples: int, name: str = "targets"):
        """None, or observations to reconstruct with one sample per input; see `Objective.check_targets`."""
        if targets is not None and len(targets) != num_samples:
            raise ValueError(f"{name} holds {len(targets)} samples but the inputs {num_samples}")
        return targets

    def training_loss(self, model, inputs, targets, context):
        """``(model.loss(inputs, targets, kl_weight=β), None)`` with β = `kl_weight` of the context's step."""
        return model.loss(inputs, targets, kl_weight=self.kl_weight(context["step"])), None

    @torch.no_grad()
    def evaluate(self, model, inputs, targets, batch_size, index=None):
        """``elbo`` per observed value over the split (larger is better), ``loss`` = −elbo and ``num_samples``."""
        index = torch.arange(len(inputs)) if index is None else index
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        try:
            for batch in batches(index.numel(), batch_size):
                chosen = index[batch]
                parts = model.elbo(inputs[chosen], None if targets is None else targets[chosen])
                total += float(parts["elbo"].sum())
                count += int(parts["count"].sum())
        finally:
            model.train(was_training)
        elbo = total / count if count else math.nan
        return {"elbo": elbo, "loss": -elbo, "num_samples": int(index.numel())}
