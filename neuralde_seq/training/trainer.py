"""Sequence classification on `fit`: the common case in one call.

`train_classifier` is `fit` with the
`Classification` objective, a best-validation checkpoint, a
resume checkpoint and optional early stopping; `evaluate` and `predict` score a trained
classifier on every sample of a split.

Inputs ("controls") are anything sliceable by a 1-D ``LongTensor`` of sample indices whose slices the
model accepts: a `Control`, `Observations`, a tensor, or
`ModelArguments` for models with several inputs. They must
already be on the model's device; labels are moved there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .callbacks import BestCheckpoint, Callback, EarlyStopping
from .checkpoints import default_last_checkpoint_path
from .fit import fit
from .objectives import Classification
from .objectives import predict as _predict
from .spec import TrainingSpec, training_spec
from .threads import DEFAULT_THREADS, torch_threads

__all__ = ["SELECT_ON", "predict", "evaluate", "train_classifier"]

SELECT_ON = ("accuracy", "auroc", "loss")
"""Validation metrics `train_classifier` can select the best checkpoint (and stop early) on."""


# train_classifier's own keywords (suggested beside the spec's fields for a misspelt keyword).
_KEYWORDS = (
    "checkpoint_path",
    "progress",
    "patience",
    "config",
    "desc",
    "select_on",
    "last_checkpoint_path",
    "resume",
    "callbacks",
    "num_classes",
)


def predict(
    model: torch.nn.Module,
    control,
    batch_size: int = 128,
    num_samples: int | None = None,
    *,
    threads: int | None = DEFAULT_THREADS,
) -> torch.Tensor:
    """Logits for every sample of ``control``, in order, as one (N, K) tensor on the model's device.

    Arguments:
        model: a classifier returning (B, K) logits.
        control: the inputs of N samples, sliceable by index (a Control, Observations, tensor or ModelArguments)
            and on the model's device.
        batch_size: samples per forward pass (default 128); batches are taken in order and the last one may be
            smaller: no sample is ever dropped.
        num_samples: how many samples to score (default ``len(control)``).
        threads: torch's CPU threads while scoring (default 1; None: torch's setting), as in `fit`; the previous
            setting is restored afterwards.

    Returns:
        The (N, K) logits, on the model's device.

    Raises:
        ValueError: the model returns non-finite logits (their metrics would be silently wrong).
    """
    with torch_threads(threads):
        return _predict(model, control, batch_size, num_samples=num_samples)


def evaluate(
    model: torch.nn.Module,
    control,
    labels: torch.Tensor,
    batch_size: int = 128,
    *,
    threads: int | None = DEFAULT_THREADS,
) -> dict[str, Any]:
    """Accuracy, mean cross-entropy and AUROC over *all* samples of ``control``.

    Arguments:
        model: a classifier returning (B, K) logits.
        control: the inputs of N samples (as `predict`).
        labels: (N,) long class indices, checked (no negative or out-of-range index).
        batch_size: samples per forward pass (default 128).
        threads: torch's CPU threads while scoring (default 1; None: torch's setting), as in `fit`.

    Returns:
        ``{"accuracy": float, "loss": float, "auroc": float | None, "num_samples": int}``. AUROC of the
            softmax probabilities (binary for 2 classes, one-vs-rest macro average for more) is None where it is
            undefined: when ``labels`` miss a class.
    """
    objective = Classification()
    labels = objective.check_targets(labels, len(control), "labels")
    with torch_threads(threads):
        return objective.evaluate(model, control, labels, batch_size)


def train_classifier(
    model: torch.nn.Module,
    train_control,
    train_labels: torch.Tensor,
    val_control,
    val_labels: torch.Tensor,
    spec: TrainingSpec | None = None,
    *,
    checkpoint_path: str | os.PathLike | None = None,
    progress: bool = True,
    patience: int | None = None,
    config: dict | None = None,
    desc: str | None = None,
    select_on: str = "accuracy",
    last_checkpoint_path: str | os.PathLike | None = None,
    resume: bool = False,
    callbacks: Sequence[Callback] = (),
    num_classes: int | None = None,
    **spec_fields,
) -> dict[str, Any]:
    """Train a classifier with Adam and cross-entropy, keeping the best-validation weights.

    Each epoch visits every training sample once in an order drawn from a generator seeded with ``seed``;
    after each epoch the model is evaluated on every validation sample, and when ``select_on`` (one of
    `SELECT_ON`; accuracy and AUROC ties go to the lower loss) improves, the weights are written to
    ``checkpoint_path`` (None: kept in memory). At the end the best weights are loaded back.

    Resuming: a resume checkpoint (``last_checkpoint_path``, default ``<checkpoint>.last.pt``) is written
    after every epoch; ``resume=True`` continues from it exactly (see `fit`).

    Arguments:
        model: a classifier returning (B, K) logits.
        train_control: the inputs of the N training samples (a Control, Observations, tensor or
            ModelArguments, on the model's device).
        train_labels: (N,) long class indices of the training samples.
        val_control: the inputs of the M validation samples (as ``train_control``).
        val_labels: (M,) long class indices of the validation samples.
        spec: how to train (`TrainingSpec`: epochs, lr, batch_size, seed, weight_decay, grad_clip, penalty_weight,
            schedule, eval_batch_size, max_steps, threads, ...); None: built from ``spec_fields``.
        checkpoint_path: file of the best-validation checkpoint (None: kept in memory).
        progress: show progress on stderr (default True; `ProgressBar`: bars on a terminal, else one line per
            epoch).
        patience: stop after this many epochs without improvement of ``select_on``, or None (default: never).
        config: extra settings stored in the checkpoints (and compared on resume).
        desc: the progress bars' label (default "train").
        select_on: the validation metric the best checkpoint (and early stopping) is chosen on, one of
            `SELECT_ON` (default "accuracy").
        last_checkpoint_path: file of the resume checkpoint written after every epoch (default
            ``<checkpoint>.last.pt``; needs ``checkpoint_path``).
        resume: continue from the resume checkpoint if it exists (needs ``checkpoint_path``).
        callbacks: further `Callback` objects.
        num_classes: if given, labels are range-checked before training (otherwise against the logits' width
            at the first batch).
        **spec_fields: the spec's fields as keywords when ``spec`` is None (``epochs=25, lr=3e-3, batch_size=32,
            seed=0, ...``), as in `fit`.

    Returns:
        `fit`'s history: per epoch ``train_loss``, ``train_accuracy``,
            ``val_accuracy``, ``val_loss``, ``val_auroc``, ``seconds_per_epoch``, ``val_seconds``; and
            ``best_epoch``, ``best_val_accuracy``, ``best_val_loss``, ``best_val_auroc``, ``epochs_run``, ``steps``,
            ``stopped_by``, ``stopped_early``, ``stopped_at_max_steps``, ``smoke``, ``resumed_from_epoch``,
            ``checkpoint_path``, ``last_checkpoint_path``.

    Raises:
        TrainingDiverged: on divergence (non-finite loss, gradient or parameter, or an exploding loss), after
            the last good state is restored.
        ValueError: an unknown ``select_on``, ``select_on="auroc"`` with fewer than two validation classes
            (or an undefined validation AUROC), ``resume`` without ``checkpoint_path``, or
            ``last_checkpoint_path`` equal to ``checkpoint_path``.
    """
    spec = training_spec(spec, spec_fields, "train_classifier", _KEYWORDS)
    if select_on not in SELECT_ON:
        raise ValueError(f"select_on must be one of {SELECT_ON}, got {select_on!r}")
    objective = Classification(num_classes)
    val_labels = objective.check_targets(val_labels, len(val_control), "val_labels")
    if select_on == "auroc" and torch.unique(val_labels).numel() < 2:
        raise ValueError("select_on='auroc' needs at least two classes among val_labels")
    last_path = None
    if checkpoint_path is not None:
        checkpoint_path = Path(checkpoint_path)
        last_path = (
            Path(last_checkpoint_path)
            if last_checkpoint_path is not None
            else default_last_checkpoint_path(checkpoint_path)
        )
        if last_path == checkpoint_path:
            raise ValueError("last_checkpoint_path must differ from checkpoint_path")
    elif resume:
        raise ValueError("resume=True needs a checkpoint_path")
    best = BestCheckpoint(checkpoint_path, monitor=select_on)
    chosen = [best] + ([EarlyStopping(patience, monitor=select_on)] if patience is not None else []) + list(callbacks)
    history = fit(
        model,
        objective,
        (train_control, train_labels),
        (val_control, val_labels),
        spec,
        callbacks=chosen,
        resume_path=last_path,
        resume=resume,
        config={"select_on": select_on, "patience": patience, **dict(config or {})},
        progress=(desc or "train") if progress else False,
    )
    if select_on == "auroc" and any(v is None for v in history.get("val_auroc", [])):
        raise ValueError(
            "select_on='auroc' but the validation AUROC is undefined: the multi-class validation "
            "labels miss a class; select on accuracy or loss instead"
        )
    history["checkpoint_path"] = None if checkpoint_path is None else str(checkpoint_path)
    history["last_checkpoint_path"] = None if last_path is None else str(last_path)
    return history
