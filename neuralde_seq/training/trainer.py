"""Training and evaluation of sequence classifiers.

The trainer is agnostic of what a "control" is: anything that can be sliced by a 1-D ``LongTensor`` of
sample indices (``control[index]``) and whose slices the model accepts. That is a
``neuralde_seq.controls`` control object, but a plain tensor of shape (N, ...) works too. The control
must already be on the model's device; labels are moved there by the trainer.

Checkpoints are dictionaries saved with ``torch.save`` holding ``model_state``, ``optimizer_state``,
``epoch``, ``metrics`` and ``config``; they are written atomically (temporary file, then rename), so
the file on disk is always a complete, good checkpoint.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .metrics import accuracy

__all__ = [
    "TrainingDiverged",
    "predict",
    "evaluate",
    "save_checkpoint",
    "load_checkpoint",
    "train_classifier",
]


class TrainingDiverged(RuntimeError):
    """Raised when a training loss, a gradient or a parameter becomes NaN or infinite.

    Before it is raised, the model (and optimizer) have been restored from the last good checkpoint,
    which is left unchanged on disk. Attributes: ``epoch`` and ``step`` (1-based, step counts optimizer
    steps over the whole run) where it happened, ``reason``, ``checkpoint_path``, ``checkpoint_epoch``
    (epoch of the restored checkpoint, 0 = the weights before training) and ``history`` (the epochs
    completed so far, as returned by :func:`train_classifier`).
    """

    def __init__(self, message: str, *, epoch: int, step: int, reason: str, checkpoint_path: str,
                 checkpoint_epoch: int, history: dict):
        super().__init__(message)
        self.epoch = epoch
        self.step = step
        self.reason = reason
        self.checkpoint_path = checkpoint_path
        self.checkpoint_epoch = checkpoint_epoch
        self.history = history


def _model_device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def _check_batch_size(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def _check_labels(control, labels: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor of class indices")
    if labels.dtype != torch.long:
        raise ValueError(f"{name} must have dtype torch.long, got {labels.dtype}")
    if labels.numel() == 0:
        raise ValueError(f"{name} is empty")
    try:
        n_control = len(control)
    except TypeError:
        n_control = None
    if n_control is not None and n_control != labels.shape[0]:
        raise ValueError(f"{name} has {labels.shape[0]} entries but the control holds {n_control} samples")
    return labels


@torch.no_grad()
def predict(model: torch.nn.Module, control, batch_size: int, num_samples: int | None = None) -> torch.Tensor:
    """Logits for every sample of ``control``, in order, as one (N, K) tensor on the model's device.

    Batches are taken in order and the last one may be smaller: no sample is ever dropped. ``num_samples``
    defaults to ``len(control)``. The model is put in eval mode and its previous mode restored.
    """
    _check_batch_size(batch_size)
    n = len(control) if num_samples is None else int(num_samples)
    was_training = model.training
    model.eval()
    try:
        outs = []
        for start in range(0, n, batch_size):
            idx = torch.arange(start, min(start + batch_size, n))
            outs.append(model(control[idx]))
    finally:
        model.train(was_training)
    logits = torch.cat(outs, dim=0)
    if logits.shape[0] != n:
        raise RuntimeError(f"the model returned {logits.shape[0]} rows for {n} samples")
    return logits


def evaluate(model: torch.nn.Module, control, labels: torch.Tensor, batch_size: int) -> dict[str, float]:
    """Accuracy and mean cross-entropy over *all* samples of ``control``.

    Returns ``{"accuracy": float, "loss": float, "num_samples": int}``.
    """
    _check_labels(control, labels, "labels")
    logits = predict(model, control, batch_size, num_samples=labels.shape[0])
    y = labels.to(logits.device)
    loss = F.cross_entropy(logits.float(), y, reduction="mean").item()
    return {"accuracy": accuracy(logits, y), "loss": loss, "num_samples": int(y.shape[0])}


def save_checkpoint(path: str | os.PathLike, *, model: torch.nn.Module, optimizer=None, epoch: int = 0,
                    metrics: dict | None = None, config: dict | None = None) -> Path:
    """Save a checkpoint atomically (write ``<path>.tmp``, then rename over ``path``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model_state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "optimizer_state": optimizer.state_dict() if optimizer is not None else None,
        "epoch": int(epoch),
        "metrics": dict(metrics or {}),
        "config": dict(config or {}),
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | os.PathLike, model: torch.nn.Module | None = None, optimizer=None,
                    map_location=None) -> dict:
    """Load a checkpoint; if given, restore ``model`` (and ``optimizer``) from it. Returns the dict.

    ``map_location`` defaults to the model's device (CPU without a model).
    """
    if map_location is None:
        map_location = _model_device(model) if model is not None else "cpu"
    ckpt = torch.load(Path(path), map_location=map_location, weights_only=True)
    if model is not None:
        model.load_state_dict(ckpt["model_state"])
    if optimizer is not None and ckpt.get("optimizer_state") is not None:
        optimizer.load_state_dict(ckpt["optimizer_state"])
    return ckpt


def _all_finite(tensors) -> bool:
    flags = [torch.isfinite(t).all() for t in tensors]
    return bool(torch.stack(flags).all()) if flags else True


def train_classifier(
    model: torch.nn.Module,
    train_control,
    train_labels: torch.Tensor,
    val_control,
    val_labels: torch.Tensor,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    checkpoint_path: str | os.PathLike,
    weight_decay: float = 0.0,
    penalty_weight: float = 0.0,
    grad_clip: float | None = None,
    progress: bool = True,
    patience: int | None = None,
    eval_batch_size: int | None = None,
    config: dict | None = None,
    desc: str | None = None,
) -> dict[str, Any]:
    """Train a classifier with Adam and cross-entropy, keeping the best-validation weights.

    Each epoch visits every training sample once in an order drawn from a ``torch.Generator`` seeded
    with ``seed`` (the last batch may be smaller); the global torch RNG is also seeded with ``seed`` at
    the start, for models that sample (dropout, latent models). After each epoch the model is evaluated
    on every validation sample; when validation accuracy improves (ties broken by lower validation loss)
    a checkpoint is written to ``checkpoint_path``. A checkpoint of the initial weights (epoch 0) is
    written before training, so a good checkpoint always exists. At the end the best checkpoint is
    loaded back into the model (and optimizer).

    ``penalty_weight``: weight of the model's own regulariser ``model.penalty()`` (e.g. the kernel L2
    penalty of CKConv and CCNN) added to the training loss; 0 disables it.
    ``grad_clip``: max gradient norm (``clip_grad_norm_``), or None. ``patience``: stop after this many
    epochs without improvement, or None. ``eval_batch_size`` defaults to ``batch_size``. ``config`` is
    extra information stored in the checkpoint next to the training settings.

    Divergence: if a training loss, a gradient (before clipping) or a parameter after an epoch is not
    finite, no optimizer step is taken with it, the last good checkpoint is restored into the model and
    optimizer (the file is not touched) and :class:`TrainingDiverged` is raised.

    Returns the history: ``train_loss``, ``train_acc``, ``val_acc``, ``val_loss``, ``seconds_per_epoch``
    (wall time of each epoch's training pass, validation excluded), ``val_seconds`` (per list entry: one
    per epoch run), and ``best_epoch``, ``best_val_acc``, ``best_val_loss``, ``epochs_run``,
    ``stopped_early``, ``checkpoint_path``.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    _check_batch_size(batch_size)
    eval_batch_size = _check_batch_size(eval_batch_size if eval_batch_size is not None else batch_size)
    if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1):
        raise ValueError(f"patience must be a positive integer or None, got {patience!r}")
    if not (penalty_weight >= 0 and math.isfinite(penalty_weight)):
        raise ValueError(f"penalty_weight must be a finite number >= 0, got {penalty_weight!r}")
    if penalty_weight > 0 and not callable(getattr(model, "penalty", None)):
        raise ValueError(f"penalty_weight={penalty_weight} but {type(model).__name__} has no penalty() method")
    if grad_clip is not None and not (grad_clip > 0):
        raise ValueError(f"grad_clip must be positive or None, got {grad_clip!r}")
    _check_labels(train_control, train_labels, "train_labels")
    _check_labels(val_control, val_labels, "val_labels")

    checkpoint_path = Path(checkpoint_path)
    device = _model_device(model)
    train_labels = train_labels.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    optimizer = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    run_config = {
        "epochs": epochs, "lr": float(lr), "batch_size": batch_size, "eval_batch_size": eval_batch_size,
        "seed": int(seed), "weight_decay": float(weight_decay),
        "grad_clip": None if grad_clip is None else float(grad_clip), "patience": patience,
        "model_class": type(model).__name__, **dict(config or {}),
    }

    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    n_train = train_labels.shape[0]

    history: dict[str, Any] = {
        "train_loss": [], "train_acc": [], "val_acc": [], "val_loss": [], "seconds_per_epoch": [],
        "val_seconds": [], "best_epoch": 0, "best_val_acc": None, "best_val_loss": None, "epochs_run": 0,
        "stopped_early": False, "checkpoint_path": str(checkpoint_path),
    }
    save_checkpoint(checkpoint_path, model=model, optimizer=optimizer, epoch=0, metrics={}, config=run_config)
    good_epoch = 0
    best = (-math.inf, math.inf)  # (val acc, -) compared as acc higher, then loss lower
    since_best = 0
    step = 0

    def diverge(epoch: int, reason: str):
        optimizer.zero_grad(set_to_none=True)
        load_checkpoint(checkpoint_path, model, optimizer)
        msg = (
            f"training diverged at epoch {epoch}, optimizer step {step + 1}: {reason}. "
            f"Restored the last good checkpoint (epoch {good_epoch}) from {checkpoint_path}. "
            "Try a lower learning rate, gradient clipping (grad_clip) or a tighter solver tolerance."
        )
        raise TrainingDiverged(msg, epoch=epoch, step=step + 1, reason=reason,
                               checkpoint_path=str(checkpoint_path), checkpoint_epoch=good_epoch,
                               history=history)

    epoch_bar = tqdm(range(1, epochs + 1), desc=desc or "train", unit="epoch", disable=not progress,
                     dynamic_ncols=True)
    for epoch in epoch_bar:
        model.train()
        t0 = time.perf_counter()
        order = torch.randperm(n_train, generator=generator)
        total_loss, total_correct = 0.0, 0
        batch_bar = tqdm(range(0, n_train, batch_size), desc=f"epoch {epoch}", unit="batch", leave=False,
                         disable=not progress, dynamic_ncols=True)
        for start in batch_bar:
            idx = order[start:start + batch_size]
            y = train_labels[idx.to(device)]
            logits = model(train_control[idx])
            loss = F.cross_entropy(logits, y)
            if penalty_weight > 0:
                loss = loss + penalty_weight * model.penalty()
            if not torch.isfinite(loss):
                batch_bar.close()
                diverge(epoch, f"non-finite training loss ({loss.item()})")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grads = [p.grad for p in params if p.grad is not None]
            if not _all_finite(grads):
                batch_bar.close()
                diverge(epoch, f"non-finite gradient (loss was {loss.item():.6g})")
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            optimizer.step()
            step += 1
            total_loss += loss.item() * idx.numel()
            total_correct += int((logits.detach().argmax(dim=1) == y).sum())
            batch_bar.set_postfix(loss=f"{loss.item():.4f}")
        batch_bar.close()
        train_seconds = time.perf_counter() - t0
        if not _all_finite([p.detach() for p in params]):
            diverge(epoch, "non-finite parameter after the epoch's optimizer steps")

        t1 = time.perf_counter()
        val = evaluate(model, val_control, val_labels, eval_batch_size)
        val_seconds = time.perf_counter() - t1

        history["train_loss"].append(total_loss / n_train)
        history["train_acc"].append(total_correct / n_train)
        history["val_acc"].append(val["accuracy"])
        history["val_loss"].append(val["loss"])
        history["seconds_per_epoch"].append(train_seconds)
        history["val_seconds"].append(val_seconds)
        history["epochs_run"] = epoch

        val_loss_key = val["loss"] if math.isfinite(val["loss"]) else math.inf
        improved = val["accuracy"] > best[0] or (val["accuracy"] == best[0] and val_loss_key < best[1])
        if improved:
            best = (val["accuracy"], val_loss_key)
            since_best = 0
            good_epoch = epoch
            history["best_epoch"] = epoch
            history["best_val_acc"] = val["accuracy"]
            history["best_val_loss"] = val["loss"]
            metrics = {
                "train_loss": history["train_loss"][-1], "train_acc": history["train_acc"][-1],
                "val_acc": val["accuracy"], "val_loss": val["loss"],
            }
            save_checkpoint(checkpoint_path, model=model, optimizer=optimizer, epoch=epoch, metrics=metrics,
                            config=run_config)
        else:
            since_best += 1
        epoch_bar.set_postfix(loss=f"{history['train_loss'][-1]:.4f}", acc=f"{history['train_acc'][-1]:.3f}",
                              val_acc=f"{val['accuracy']:.3f}", best=f"{best[0]:.3f}")
        if patience is not None and since_best >= patience:
            history["stopped_early"] = True
            break
    epoch_bar.close()

    load_checkpoint(checkpoint_path, model, optimizer)
    return history
