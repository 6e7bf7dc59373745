"""Training and evaluation of sequence classifiers.

The trainer is agnostic of what a "control" is: anything that can be sliced by a 1-D ``LongTensor`` of
sample indices (``control[index]``) and whose slices the model accepts. That is a
``neuralde_seq.controls`` control object, but a plain tensor of shape (N, ...) works too; a model that
takes several inputs (e.g. a control and static features) gets them as :class:`ModelArguments`. The
control must already be on the model's device; labels are moved there by the trainer.

Checkpoints are dictionaries saved with ``torch.save`` holding ``model_state``, ``optimizer_state``,
``epoch``, ``metrics`` and ``config``; they are written atomically (temporary file, then rename), so
the file on disk is always a complete, good checkpoint. Besides the best-validation checkpoint,
:func:`train_classifier` writes a *last* checkpoint at the end of every epoch with everything needed to
resume the run exactly (see :func:`train_classifier`).
"""

from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..solvers import SolverOptions
from .metrics import accuracy, auroc

__all__ = [
    "ModelArguments",
    "SELECT_ON",
    "TrainingDiverged",
    "predict",
    "evaluate",
    "save_checkpoint",
    "load_checkpoint",
    "default_last_checkpoint_path",
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


SELECT_ON = ("accuracy", "auroc", "loss")
"""Validation metrics :func:`train_classifier` can select the best checkpoint (and stop early) on."""


class ModelArguments:
    """Several inputs of one model, sliced together: a batch ``args[index]`` is passed as ``model(*batch.args)``.

    E.g. ``ModelArguments(control, static)`` for a model whose forward is ``forward(control, static)``.
    Every argument must have the same number of samples (its ``len``) and support ``arg[index]``.

    Arguments:
        *args: the inputs, each with N samples along its first dimension (a control, or a (N, S) tensor).
    """

    def __init__(self, *args):
        if not args:
            raise ValueError("ModelArguments needs at least one argument")
        sizes = {len(a) for a in args}
        if len(sizes) != 1:
            raise ValueError(f"ModelArguments' arguments hold different numbers of samples: {[len(a) for a in args]}")
        self.args = tuple(args)

    def __len__(self) -> int:
        return len(self.args[0])

    def __getitem__(self, index) -> "ModelArguments":
        return ModelArguments(*(a[index] for a in self.args))

    def to(self, *args, **kwargs) -> "ModelArguments":
        return ModelArguments(*(a.to(*args, **kwargs) for a in self.args))


def _forward(model: torch.nn.Module, batch) -> torch.Tensor:
    if isinstance(batch, ModelArguments):
        return model(*batch.args)
    return model(batch)


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
            outs.append(_forward(model, control[idx]))
    finally:
        model.train(was_training)
    logits = torch.cat(outs, dim=0)
    if logits.shape[0] != n:
        raise RuntimeError(f"the model returned {logits.shape[0]} rows for {n} samples")
    return logits


def evaluate(model: torch.nn.Module, control, labels: torch.Tensor, batch_size: int) -> dict[str, Any]:
    """Accuracy, mean cross-entropy and AUROC over *all* samples of ``control``.

    Returns ``{"accuracy": float, "loss": float, "auroc": float | None, "num_samples": int}``. AUROC
    (:func:`~neuralde_seq.training.metrics.auroc` of the softmax probabilities: binary for 2 classes,
    one-vs-rest macro average for more) is None where it is undefined: when ``labels`` miss a class
    (binary: only one class present; multi-class: any of the model's classes absent).
    """
    _check_labels(control, labels, "labels")
    logits = predict(model, control, batch_size, num_samples=labels.shape[0])
    y = labels.to(logits.device)
    loss = F.cross_entropy(logits.float(), y, reduction="mean").item()
    return {"accuracy": accuracy(logits, y), "loss": loss, "auroc": _auroc_or_none(logits, y),
            "num_samples": int(y.shape[0])}


def _auroc_or_none(logits: torch.Tensor, labels: torch.Tensor) -> float | None:
    num_classes = logits.shape[1]
    present = torch.unique(labels).numel()
    if present < 2 or (num_classes > 2 and present < num_classes):
        return None
    probs = torch.softmax(logits.detach().double(), dim=1)
    return auroc(labels, probs)


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


_GENERIC_ADVICE = "Try a lower learning rate, gradient clipping (grad_clip) or a tighter solver tolerance."


def _gradient_advice(model: torch.nn.Module) -> str:
    """What to try after a non-finite gradient: the continuous adjoint is the likely cause where it is used."""
    users = sorted({type(module).__name__ for module in model.modules()
                    if isinstance(getattr(module, "solver", None), SolverOptions)
                    and module.solver.gradient_method == "adjoint" and module.solver.method != "exact"})
    if not users:
        return _GENERIC_ADVICE
    return (f"Likely cause: {', '.join(users)} uses the continuous adjoint (SolverOptions(adjoint=True) or "
            "gradient='adjoint'), whose backward pass re-integrates the state backwards in time; for contracting "
            "fields over long sequences that is unstable and its gradients are wrong or non-finite, whatever the "
            "learning rate. Use the default SolverOptions(gradient='checkpoint'), exact for the discrete solve with "
            "O(sqrt(steps)) memory (or adjoint=False).")


def _all_finite(tensors) -> bool:
    flags = [torch.isfinite(t).all() for t in tensors]
    return bool(torch.stack(flags).all()) if flags else True


# Training settings a resumed run must share with the run that wrote its last checkpoint: changing any
# of them would silently make the resumed run a different experiment.
_RESUME_KEYS = ("lr", "batch_size", "seed", "weight_decay", "grad_clip", "penalty_weight", "select_on", "model_class")


def default_last_checkpoint_path(checkpoint_path: str | os.PathLike) -> Path:
    """Where :func:`train_classifier` writes the last checkpoint by default: ``run.pt`` -> ``run.last.pt``."""
    path = Path(checkpoint_path)
    return path.with_name(f"{path.stem}.last{path.suffix}")


def _rng_states(generator: torch.Generator) -> dict:
    """Every random state a training run draws from: the data-order generator and the global RNGs."""
    np_state = np.random.get_state()
    states = {
        "generator": generator.get_state(),
        "torch": torch.get_rng_state(),
        # numpy's state tuple holds an ndarray, which torch.load(weights_only=True) refuses: store a tensor.
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _restore_rng_states(generator: torch.Generator, states: dict) -> None:
    generator.set_state(states["generator"])
    torch.set_rng_state(states["torch"])
    np_state = states["numpy"]
    np.random.set_state((np_state["name"], np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["cached_gaussian"]))
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _selection_key(select_on: str, val: dict) -> tuple:
    """Validation score as a tuple compared lexicographically, larger = better."""
    loss = val["loss"] if math.isfinite(val["loss"]) else math.inf
    if select_on == "loss":
        return (-loss,)
    return (val[select_on], -loss)  # ties broken by the lower validation loss


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
    select_on: str = "accuracy",
    max_steps: int | None = None,
    last_checkpoint_path: str | os.PathLike | None = None,
    resume: bool = False,
    on_epoch_end: Callable[[int, dict], None] | None = None,
) -> dict[str, Any]:
    """Train a classifier with Adam and cross-entropy, keeping the best-validation weights.

    Each epoch visits every training sample once in an order drawn from a ``torch.Generator`` seeded
    with ``seed`` (the last batch may be smaller); the global torch RNG is also seeded with ``seed`` at
    the start, for models that sample (dropout, latent models). After each epoch the model is evaluated
    on every validation sample; when the validation metric ``select_on`` improves, a checkpoint is
    written to ``checkpoint_path``. A checkpoint of the initial weights (epoch 0) is written before
    training, so a good checkpoint always exists. At the end the best checkpoint is loaded back into the
    model (and optimizer).

    ``select_on``: one of :data:`SELECT_ON`: "accuracy" (ties broken by lower validation loss), "auroc"
    (validation AUROC, see :func:`evaluate`; ties broken by loss) or "loss" (lower is better). It also
    drives ``patience``.
    ``penalty_weight``: weight of the model's own regulariser ``model.penalty()`` (e.g. the kernel L2
    penalty of CKConv and CCNN) added to the training loss; 0 disables it.
    ``grad_clip``: max gradient norm (``clip_grad_norm_``), or None. ``patience``: stop after this many
    epochs without improvement, or None. ``eval_batch_size`` defaults to ``batch_size``. ``config`` is
    extra information stored in the checkpoint next to the training settings.
    ``max_steps``: stop after this many optimizer steps in all (smoke runs); the epoch in progress is
    cut short, then validated and recorded as usual. None: no limit.

    Resuming: at the end of every epoch a *last* checkpoint is written atomically to
    ``last_checkpoint_path`` (default :func:`default_last_checkpoint_path`), holding the model, the
    optimizer, the epoch, the optimizer step count, the history, the best-so-far bookkeeping, the
    data-order generator's state and the global RNG states (torch, CUDA where used, numpy, Python). With
    ``resume=True`` and that file present, training continues after its epoch as if never interrupted:
    on a deterministic device the final weights and metrics equal those of an uninterrupted run. A run
    killed in the middle of an epoch restarts from its last completed epoch. A run that had finished by
    early stopping or ``max_steps`` is not trained further; ``epochs`` may be larger than before (a run
    cut short by a smaller ``epochs`` continues). The settings in ``_RESUME_KEYS`` must match the
    checkpoint's, or ``ValueError`` is raised. Without the file, ``resume=True`` starts afresh.
    ``on_epoch_end(epoch, history)`` is called after each epoch's checkpoints are written.

    Divergence: if a training loss, a gradient (before clipping, which cannot make a non-finite gradient
    finite) or a parameter after an epoch is not finite, no optimizer step is taken with it, the last good
    checkpoint is restored into the model and optimizer (the file is not touched) and
    :class:`TrainingDiverged` is raised. Its message names the likely cause of a non-finite gradient when the
    model solves with the continuous adjoint.

    Returns the history: ``train_loss``, ``train_acc``, ``val_acc``, ``val_loss``, ``val_auroc`` (None
    entries where undefined), ``seconds_per_epoch`` (wall time of each epoch's training pass,
    validation excluded), ``val_seconds`` (per list entry: one per epoch run), and ``best_epoch``,
    ``best_val_acc``, ``best_val_loss``, ``best_val_auroc``, ``select_on``, ``epochs_run``, ``steps``,
    ``stopped_early``, ``stopped_at_max_steps``, ``resumed_from_epoch`` (None unless resumed),
    ``checkpoint_path``, ``last_checkpoint_path``.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    _check_batch_size(batch_size)
    eval_batch_size = _check_batch_size(eval_batch_size if eval_batch_size is not None else batch_size)
    if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1):
        raise ValueError(f"patience must be a positive integer or None, got {patience!r}")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"max_steps must be a positive integer or None, got {max_steps!r}")
    if select_on not in SELECT_ON:
        raise ValueError(f"select_on must be one of {SELECT_ON}, got {select_on!r}")
    if not (penalty_weight >= 0 and math.isfinite(penalty_weight)):
        raise ValueError(f"penalty_weight must be a finite number >= 0, got {penalty_weight!r}")
    if penalty_weight > 0 and not callable(getattr(model, "penalty", None)):
        raise ValueError(f"penalty_weight={penalty_weight} but {type(model).__name__} has no penalty() method")
    if grad_clip is not None and not (grad_clip > 0):
        raise ValueError(f"grad_clip must be positive or None, got {grad_clip!r}")
    _check_labels(train_control, train_labels, "train_labels")
    _check_labels(val_control, val_labels, "val_labels")
    if select_on == "auroc" and torch.unique(val_labels).numel() < 2:
        raise ValueError("select_on='auroc' needs at least two classes among val_labels")

    checkpoint_path = Path(checkpoint_path)
    last_path = Path(last_checkpoint_path) if last_checkpoint_path is not None else \
        default_last_checkpoint_path(checkpoint_path)
    if last_path == checkpoint_path:
        raise ValueError("last_checkpoint_path must differ from checkpoint_path")
    device = _model_device(model)
    train_labels = train_labels.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    optimizer = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    run_config = {
        "epochs": epochs, "lr": float(lr), "batch_size": batch_size, "eval_batch_size": eval_batch_size,
        "seed": int(seed), "weight_decay": float(weight_decay), "penalty_weight": float(penalty_weight),
        "grad_clip": None if grad_clip is None else float(grad_clip), "patience": patience,
        "select_on": select_on, "max_steps": max_steps, "model_class": type(model).__name__, **dict(config or {}),
    }
    generator = torch.Generator()
    n_train = train_labels.shape[0]

    if resume and last_path.exists():
        state = torch.load(last_path, map_location="cpu", weights_only=True)
        mismatched = {k: (state["config"].get(k), run_config[k]) for k in _RESUME_KEYS
                      if state["config"].get(k) != run_config[k]}
        if mismatched:
            details = ", ".join(f"{k}: checkpoint {a!r}, now {b!r}" for k, (a, b) in mismatched.items())
            raise ValueError(f"cannot resume from {last_path}: its training settings differ ({details}); "
                             "use the same settings or delete the checkpoint to start afresh")
        if not checkpoint_path.exists():
            raise FileNotFoundError(f"cannot resume from {last_path}: the best checkpoint {checkpoint_path} "
                                    "it refers to is missing; delete the last checkpoint to start afresh")
        model.load_state_dict(state["model_state"])
        optimizer.load_state_dict(state["optimizer_state"])
        history = state["history"]
        best_key = tuple(state["best_key"])
        since_best, good_epoch, step = state["since_best"], state["good_epoch"], state["step"]
        start_epoch, finished = state["epoch"], state["finished"]
        history["resumed_from_epoch"] = start_epoch
        _restore_rng_states(generator, state["rng"])
    else:
        torch.manual_seed(seed)
        generator.manual_seed(seed)
        history: dict[str, Any] = {
            "train_loss": [], "train_acc": [], "val_acc": [], "val_loss": [], "val_auroc": [],
            "seconds_per_epoch": [], "val_seconds": [], "best_epoch": 0, "best_val_acc": None,
            "best_val_loss": None, "best_val_auroc": None, "select_on": select_on, "epochs_run": 0, "steps": 0,
            "stopped_early": False, "stopped_at_max_steps": False, "resumed_from_epoch": None,
        }
        save_checkpoint(checkpoint_path, model=model, optimizer=optimizer, epoch=0, metrics={}, config=run_config)
        best_key = None
        since_best, good_epoch, step, start_epoch, finished = 0, 0, 0, 0, False
    history["checkpoint_path"] = str(checkpoint_path)
    history["last_checkpoint_path"] = str(last_path)

    def diverge(epoch: int, reason: str, advice: str = _GENERIC_ADVICE):
        optimizer.zero_grad(set_to_none=True)
        load_checkpoint(checkpoint_path, model, optimizer)
        msg = (
            f"training diverged at epoch {epoch}, optimizer step {step + 1}: {reason}. "
            f"Restored the last good checkpoint (epoch {good_epoch}) from {checkpoint_path}. {advice}"
        )
        raise TrainingDiverged(msg, epoch=epoch, step=step + 1, reason=reason,
                               checkpoint_path=str(checkpoint_path), checkpoint_epoch=good_epoch,
                               history=history)

    epochs_to_run = [] if finished else range(start_epoch + 1, epochs + 1)
    epoch_bar = tqdm(epochs_to_run, desc=desc or "train", unit="epoch", disable=not progress,
                     dynamic_ncols=True, initial=start_epoch, total=max(epochs, start_epoch))
    for epoch in epoch_bar:
        model.train()
        t0 = time.perf_counter()
        order = torch.randperm(n_train, generator=generator)
        total_loss, total_correct, seen = 0.0, 0, 0
        step_limit_reached = False
        batch_bar = tqdm(range(0, n_train, batch_size), desc=f"epoch {epoch}", unit="batch", leave=False,
                         disable=not progress, dynamic_ncols=True)
        for start in batch_bar:
            idx = order[start:start + batch_size]
            y = train_labels[idx.to(device)]
            logits = _forward(model, train_control[idx])
            loss = F.cross_entropy(logits, y)
            if penalty_weight > 0:
                loss = loss + penalty_weight * model.penalty()
            if not torch.isfinite(loss):
                batch_bar.close()
                diverge(epoch, f"non-finite training loss ({loss.item()})")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grads = [p.grad for p in params if p.grad is not None]
            # Checked before clipping: clipping cannot rescue a non-finite gradient (NaN stays NaN, and an
            # infinite norm scales every entry by 0, turning inf into NaN and the rest into a zero step).
            if not _all_finite(grads):
                batch_bar.close()
                diverge(epoch, f"non-finite gradient (loss was {loss.item():.6g})", _gradient_advice(model))
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            optimizer.step()
            step += 1
            total_loss += loss.item() * idx.numel()
            total_correct += int((logits.detach().argmax(dim=1) == y).sum())
            seen += idx.numel()
            batch_bar.set_postfix(loss=f"{loss.item():.4f}")
            if max_steps is not None and step >= max_steps:
                step_limit_reached = True
                break
        batch_bar.close()
        train_seconds = time.perf_counter() - t0
        if not _all_finite([p.detach() for p in params]):
            diverge(epoch, "non-finite parameter after the epoch's optimizer steps")

        t1 = time.perf_counter()
        val = evaluate(model, val_control, val_labels, eval_batch_size)
        val_seconds = time.perf_counter() - t1
        if select_on == "auroc" and val["auroc"] is None:
            raise ValueError("select_on='auroc' but the validation AUROC is undefined: the multi-class "
                             "validation labels miss a class; select on accuracy or loss instead")

        # Mean over the samples seen this epoch (all of them unless max_steps cut it short).
        history["train_loss"].append(total_loss / seen)
        history["train_acc"].append(total_correct / seen)
        history["val_acc"].append(val["accuracy"])
        history["val_loss"].append(val["loss"])
        history["val_auroc"].append(val["auroc"])
        history["seconds_per_epoch"].append(train_seconds)
        history["val_seconds"].append(val_seconds)
        history["epochs_run"] = epoch
        history["steps"] = step

        key = _selection_key(select_on, val)
        if best_key is None or key > best_key:
            best_key = key
            since_best = 0
            good_epoch = epoch
            history["best_epoch"] = epoch
            history["best_val_acc"] = val["accuracy"]
            history["best_val_loss"] = val["loss"]
            history["best_val_auroc"] = val["auroc"]
            metrics = {
                "train_loss": history["train_loss"][-1], "train_acc": history["train_acc"][-1],
                "val_acc": val["accuracy"], "val_loss": val["loss"], "val_auroc": val["auroc"],
            }
            save_checkpoint(checkpoint_path, model=model, optimizer=optimizer, epoch=epoch, metrics=metrics,
                            config=run_config)
        else:
            since_best += 1
        if step_limit_reached:
            history["stopped_at_max_steps"] = True
            finished = True
        if patience is not None and since_best >= patience:
            history["stopped_early"] = True
            finished = True
        _save_last_checkpoint(last_path, model=model, optimizer=optimizer, epoch=epoch, step=step,
                              history=history, best_key=best_key, since_best=since_best, good_epoch=good_epoch,
                              finished=finished, rng=_rng_states(generator), config=run_config)
        epoch_bar.set_postfix(loss=f"{history['train_loss'][-1]:.4f}", acc=f"{history['train_acc'][-1]:.3f}",
                              val_acc=f"{val['accuracy']:.3f}", best_epoch=good_epoch)
        if on_epoch_end is not None:
            on_epoch_end(epoch, history)
        if finished:
            break
    epoch_bar.close()

    load_checkpoint(checkpoint_path, model, optimizer)
    return history


def _save_last_checkpoint(path: Path, *, model, optimizer, epoch: int, step: int, history: dict, best_key: tuple,
                          since_best: int, good_epoch: int, finished: bool, rng: dict, config: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model_state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "optimizer_state": optimizer.state_dict(),
        "epoch": int(epoch), "step": int(step), "history": history, "best_key": list(best_key),
        "since_best": int(since_best), "good_epoch": int(good_epoch), "finished": bool(finished),
        "rng": rng, "config": dict(config),
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
