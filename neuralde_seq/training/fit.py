"""The one training loop of the toolkit: `fit`.

Every training path (``neuralde-seq compare`` and ``bench``, the stress tasks, the trajectory tasks, the
scikit-learn estimators) calls `fit` with an `Objective`
(what is learnt) and callbacks (`neuralde_seq.training.callbacks`: checkpoints, early stopping,
progress, divergence).

Distributed data parallel: when ``torch.distributed`` is initialised with more than one process, every
process draws the same batch order, takes its share ``batch[rank::world]`` of each global batch and the
model is wrapped in `torch.nn.parallel.DistributedDataParallel`; each share's loss is weighted so
that the averaged gradient equals the gradient of the mean loss over the global batch (a process whose
share is empty, in a last batch smaller than the number of processes, runs one sample with weight 0);
exact for a loss that is a mean over samples, approximate for a mean over steps or observed values.
Training statistics and evaluation outputs are gathered over the processes (an objective with its own
``evaluate`` is evaluated on rank 0); callbacks see the global batch's loss, rank 0 decides when to stop,
and only rank 0 writes files. `distributed` starts such process groups.
"""
from __future__ import annotations

import math
import numbers
import time
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.distributed as dist

from .callbacks import Callback, Divergence, DivergenceGuard, FitState, ProgressBar
from .checkpoints import atomic_save, load_model_state, model_device, read_checkpoint, restore_rng_states, rng_states
from .data_parallel import (TrainingLoss, broadcast_generator, broadcast_stop, evaluate_split, global_loss,
                            sum_over_ranks)
from .objectives import Objective
from .process_group import world as _world  # (rank, world size); (0, 1) without a process group
from .results import changed_settings
from .schedules import SCHEDULES, scheduled_lr
from .threads import DEFAULT_THREADS, check_threads, torch_threads

__all__ = ["fit", "TrainingDiverged", "ResumeMismatch"]


class TrainingDiverged(RuntimeError):
    """A run stopped because its loss, gradients or parameters became non-finite or its loss exploded.

    Before it is raised, the model (and optimizer) hold the last good state (the last evaluation's, or the
    initial weights).

    Arguments:
        message: the error message (what happened, what was restored, what to try).
        epoch: the epoch (1-based) where it happened; kept as the attribute ``epoch``.
        step: the training step (1-based, counted over the whole run) where it happened; attribute ``step``.
        reason: what diverged (e.g. "non-finite gradient"); attribute ``reason``.
        checkpoint_path: the file of the restored state (the resume checkpoint, or a callback's such as
            `BestCheckpoint`), or None; attribute ``checkpoint_path``.
        checkpoint_epoch: epoch of the restored state, 0 = before training; attribute ``checkpoint_epoch``.
        history: the run's history so far (``stopped_by`` "diverged"); attribute ``history``.
    """

    def __init__(self, message: str, *, epoch: int, step: int, reason: str, checkpoint_path: str | None,
                 checkpoint_epoch: int, history: dict):
        super().__init__(message)
        self.epoch, self.step, self.reason = epoch, step, reason
        self.checkpoint_path, self.checkpoint_epoch, self.history = checkpoint_path, checkpoint_epoch, history


class ResumeMismatch(ValueError):
    """A resume checkpoint was written by a run with other settings; its message lists the differences."""


# What `fit`'s resume checkpoint holds (`snapshot` below); a file without them is not one.
_RESUME_KEYS = ("model_state", "optimizer_state", "epoch", "step", "history", "loop", "rng", "config", "callbacks")


def _is_real(value) -> bool:
    """A real number that is not a bool (numpy scalars included)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _positive_int(value, name: str, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer{' or None' if allow_none else ''}, got {value!r}")
    return value


def fit(
    model: torch.nn.Module,
    objective: Objective,
    train: tuple[Any, Any],
    *,
    val: tuple[Any, Any] | None = None,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int = 0,
    weight_decay: float = 0.0,
    grad_clip: float | None = None,
    penalty_weight: float = 0.0,
    schedule: str = "constant",
    eval_every: int | None = None,
    eval_batch_size: int | None = None,
    max_steps: int | None = None,
    callbacks: Sequence[Callback] = (),
    resume_path: str | Path | None = None,
    resume: bool = False,
    config: dict | None = None,
    progress: bool | str = True,
    threads: int | None = DEFAULT_THREADS,
) -> dict[str, Any]:
    """Train ``model`` with Adam on ``objective`` and return the history.

    Arguments:
        model: the model; its device is where batches go (inputs must already be there).
        objective: what is learnt (`objectives`).
        train: ``(inputs, targets)``: inputs sliceable by a 1-D LongTensor of sample indices (a
            `Control`, `Observations`, ``ModelArguments``, a
            tensor), N samples; targets as the objective expects (checked before training), or None.
        val: ``(inputs, targets)`` evaluated at every evaluation (metrics ``val_<name>``); None: none.
        epochs: passes over the training data.
        lr: Adam's learning rate.
        batch_size: samples per training step (global over processes); the last batch may be smaller.
        seed: seeds torch's global RNG (+ rank) at the start and the data-order generator (default 0).
        weight_decay: Adam's weight decay (default 0).
        grad_clip: max gradient norm, or None (default: no clipping).
        penalty_weight: weight of ``model.penalty()`` in the loss (default 0).
        schedule: the learning rate over the run's ``epochs`` (`scheduled_lr`): "constant" (default) or "cosine"
            (linear warm-up over the first 5 % of the steps, then a half cosine towards 0).
        eval_every: evaluate every this many training steps as well as at the end of every epoch
            (None: at the end of every epoch only).
        eval_batch_size: batch size of evaluation (default ``batch_size``).
        max_steps: stop after this many training steps (a smoke run: ``history["smoke"]`` is True).
        callbacks: `Callback` objects, called in order. A
            `DivergenceGuard` is added unless one is given.
        resume_path: the resume checkpoint, written after every evaluation (model, optimizer, loop state,
            RNG states, callbacks' states, ``config``), or None.
        resume: continue from ``resume_path`` if it exists: a run interrupted anywhere continues from its
            last evaluation as if never stopped. Its ``config`` must equal this call's (else
            `ResumeMismatch`).
        config: the run's settings, stored in checkpoints and compared on resume.
        progress: show progress on stderr (`ProgressBar`: bars on a terminal, else one line per epoch); a string
            is its label.
        threads: torch's CPU threads while training, the previous number restored afterwards (default 1:
            the safe choice for these small models, `threads`); None: torch's setting.

    Returns:
        The history dict: per evaluation the lists ``epoch``, ``step``, ``train_loss``,
            ``train_<metric>`` (running training statistics of the objective), ``val_<metric>``,
            ``seconds_per_epoch`` (training seconds since the previous evaluation: per epoch when evaluating once
            per epoch) and ``val_seconds``; and ``epochs_run``, ``steps``, ``stopped_by`` ("epochs",
            "max_steps", "early_stopping", or a callback's reason), ``stopped_early``, ``stopped_at_max_steps``,
            ``smoke``, ``resumed_from_epoch``, plus what callbacks add (``best_epoch``, ``best_val_<metric>``).

    Raises:
        TrainingDiverged: the run diverged (see `DivergenceGuard`); raised after restoring the last good
            state.
        ResumeMismatch: ``resume`` finds a checkpoint whose ``config`` differs from this call's.
        CheckpointError: ``resume`` finds a file that cannot be read, is no resume checkpoint, or holds weights
            of other shapes than ``model``'s (the message names the file, the parameters and what to do).
        ValueError: a bad setting (non-positive epochs, batch size or learning rate, ...), or targets the
            objective refuses.
    """
    _positive_int(epochs, "epochs")
    _positive_int(batch_size, "batch_size")
    eval_batch_size = _positive_int(eval_batch_size if eval_batch_size is not None else batch_size, "eval_batch_size")
    _positive_int(eval_every, "eval_every", allow_none=True)
    _positive_int(max_steps, "max_steps", allow_none=True)
    check_threads(threads)
    # Real numbers only: a bool is not a rate (True was a learning rate of 1), a string met a comparison's TypeError.
    if not (_is_real(lr) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    if not (_is_real(weight_decay) and weight_decay >= 0 and math.isfinite(weight_decay)):
        raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay!r}")
    if not (_is_real(penalty_weight) and penalty_weight >= 0 and math.isfinite(penalty_weight)):
        raise ValueError(f"penalty_weight must be a finite number >= 0, got {penalty_weight!r}")
    if penalty_weight > 0 and not callable(getattr(model, "penalty", None)):
        raise ValueError(f"penalty_weight={penalty_weight} but {type(model).__name__} has no penalty() method")
    if grad_clip is not None and not (_is_real(grad_clip) and grad_clip > 0 and math.isfinite(grad_clip)):
        raise ValueError(f"grad_clip must be a positive number or None, got {grad_clip!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    train_inputs, train_targets = train
    n_train = len(train_inputs)
    train_targets = objective.check_targets(train_targets, n_train, "train targets")
    if val is not None:
        val = (val[0], objective.check_targets(val[1], len(val[0]), "val targets"))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")

    with torch_threads(threads):
        rank, world = _world()
        device = model_device(model)
        if isinstance(train_targets, torch.Tensor):
            train_targets = train_targets.to(device)
        training_loss = TrainingLoss(model, objective, penalty_weight)
        if world > 1:
            # Wrapping broadcasts rank 0's weights to every rank. device_ids=None: inputs are already on the
            # model's device (DDP would otherwise copy them, rebuilding dataclasses such as Control).
            # find_unused_parameters: some objectives leave parameters out (the ELBO a latent model's classifier).
            training_loss = torch.nn.parallel.DistributedDataParallel(training_loss, device_ids=None,
                                                                      find_unused_parameters=True)
        optimizer = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
        run_config = {"epochs": epochs, "lr": float(lr), "batch_size": batch_size, "seed": int(seed),
                      "weight_decay": float(weight_decay), "grad_clip": grad_clip, "penalty_weight": float(penalty_weight),
                      **({} if schedule == "constant" else {"schedule": schedule}),  # older checkpoints resume
                      "eval_every": eval_every, "objective": type(objective).__name__, "model_class": type(model).__name__,
                      "world_size": world, **dict(config or {})}
        callbacks = list(callbacks)
        if not any(isinstance(c, DivergenceGuard) for c in callbacks):
            callbacks.insert(0, DivergenceGuard())
        if progress:
            callbacks.append(ProgressBar(progress if isinstance(progress, str) else "train"))
        steps_per_epoch = -(-n_train // batch_size)
        history: dict[str, Any] = {"epoch": [], "step": [], "train_loss": [], "seconds_per_epoch": [], "val_seconds": [],
                                   "resumed_from_epoch": None}
        state = FitState(model=model, optimizer=optimizer, objective=objective, epochs=epochs,
                         steps_per_epoch=steps_per_epoch, history=history, is_main=rank == 0, config=run_config)
        generator = torch.Generator()
        loop = {"position": 0, "order_state": None, "finished": False}
        resume_path = None if resume_path is None else Path(resume_path)

        if resume and resume_path is not None and resume_path.exists():
            # weights_only: no code in the file can run; a damaged, foreign or crafted file is a CheckpointError
            # naming it and what to do.
            saved = read_checkpoint(resume_path, map_location="cpu", required=_RESUME_KEYS)
            differing = sorted(k for k in set(saved["config"]) | set(run_config)
                               if k != "epochs" and saved["config"].get(k) != run_config.get(k))
            if differing:
                raise ResumeMismatch(
                    f"cannot resume from {resume_path}: it was written with other settings ("
                    + "; ".join(changed_settings({k: saved["config"].get(k) for k in differing},
                                                 {k: run_config.get(k) for k in differing}, then="there"))
                    + "). Use the same settings, or delete the checkpoint to start afresh.")
            load_model_state(model, saved["model_state"], resume_path)  # shapes checked: names the parameters
            optimizer.load_state_dict(saved["optimizer_state"])
            history.update(saved["history"])
            loop.update(saved["loop"])
            state.epoch, state.step = loop.pop("current_epoch"), saved["step"]
            states = saved["callbacks"]
            for key, callback in _callback_keys(callbacks):
                if key in states:
                    callback.load_state_dict(states[key])
            restore_rng_states(generator, saved["rng"])
            history["resumed_from_epoch"] = history["epoch"][-1] if history["epoch"] else 0
            # A run cut short by a smaller `epochs`, or stopped by its wall-time limit (TimeLimit), continues.
            if loop["finished"] and (history.get("stopped_by") == "time" or (
                    saved["config"]["epochs"] < epochs and history.get("stopped_by") == "epochs")):
                loop["finished"] = False
                history.pop("stopped_by")
        else:
            torch.manual_seed(seed + rank)  # per-rank randomness (dropout, latent samples); data order is shared
            generator.manual_seed(seed)

        def snapshot() -> dict:
            return {"model_state": {k: v.detach().clone() for k, v in model.state_dict().items()},
                    "optimizer_state": optimizer.state_dict(),
                    # "epoch": the last evaluated epoch (0 before training); the loop holds the one in progress.
                    "epoch": history["epoch"][-1] if history["epoch"] else 0, "step": state.step,
                    "history": history, "loop": {**loop, "current_epoch": state.epoch}, "rng": rng_states(generator), "config": run_config,
                    "callbacks": {key: c.state_dict() for key, c in _callback_keys(callbacks)}}

        last_good = {"state": None, "epoch": history["epoch"][-1] if history["epoch"] else 0}

        def keep_good() -> None:
            good = snapshot()
            last_good["state"] = {"model_state": good["model_state"],
                                  "optimizer_state": {"state": {k: {n: t.clone() if isinstance(t, torch.Tensor) else t
                                                                     for n, t in v.items()}
                                                                 for k, v in good["optimizer_state"]["state"].items()},
                                                      "param_groups": good["optimizer_state"]["param_groups"]}}
            if resume_path is not None and rank == 0:
                atomic_save(good, resume_path)
            if world > 1:
                dist.barrier()

        for callback in callbacks:
            callback.on_fit_start(state)
        keep_good()

        train_sums: dict[str, list[float]] = {}
        train_seconds = 0.0

        def evaluate_now(end_of_epoch: bool) -> dict:
            nonlocal train_sums, train_seconds
            if world > 1:  # training statistics summed over the processes
                train_sums = sum_over_ranks(train_sums, world, device)
            record = {"epoch": state.epoch, "step": state.step, "end_of_epoch": end_of_epoch}
            for name, (total, count) in train_sums.items():
                record[f"train_{name}"] = total / count if count else None
            record["seconds_per_epoch"] = train_seconds
            t0 = time.perf_counter()
            if val is not None:
                metrics = evaluate_split(model, objective, val, eval_batch_size, world, rank)
                record.update({f"val_{k}": v for k, v in metrics.items() if k != "num_samples"})
            record["val_seconds"] = time.perf_counter() - t0
            rows_before = len(history["epoch"])
            for key, value in record.items():
                if key == "end_of_epoch":
                    continue
                column = history.setdefault(key, [])
                column.extend([None] * (rows_before - len(column)))  # a metric that appears later: None before
                column.append(value)
            history["epochs_run"], history["steps"] = state.epoch, state.step
            for callback in callbacks:
                callback.on_evaluation(state, record)
            if world > 1:
                broadcast_stop(state)
            train_sums, train_seconds = {}, 0.0
            return record

        def diverge(error: Divergence):
            optimizer.zero_grad(set_to_none=True)
            model.load_state_dict(last_good["state"]["model_state"])
            optimizer.load_state_dict(last_good["state"]["optimizer_state"])
            restored_epoch, restored_path = last_good["epoch"], None if resume_path is None else str(resume_path)
            for callback in callbacks:
                replaced = callback.on_diverged(state)
                if replaced is not None:
                    restored_epoch, restored_path = replaced
            where = f" from {restored_path}" if restored_path is not None else ""
            message = (f"training diverged at epoch {state.epoch}, training step {state.step + 1}: {error.reason}. "
                       f"Restored the last good weights (epoch {restored_epoch}){where}. "
                       f"{error.advice or 'Try a lower learning rate, gradient clipping (grad_clip) or a tighter solver tolerance.'}")
            history["stopped_by"] = "diverged"
            history["diverged"] = message
            raise TrainingDiverged(message, epoch=state.epoch, step=state.step + 1, reason=error.reason,
                                   checkpoint_path=restored_path, checkpoint_epoch=restored_epoch,
                                   history=history) from None

        first_batch = not history["epoch"]
        outputs_checked = False

        def check_first_outputs(outputs, batch_targets):
            # Every label of both splits against the model's output width, before the first loss and step (a
            # class index out of range would otherwise surface as the loss's indexing error).
            nonlocal outputs_checked
            objective.check_outputs(outputs, batch_targets)
            objective.check_target_range(outputs, train_targets, "train targets")
            if val is not None:
                objective.check_target_range(outputs, val[1], "val targets")
            outputs_checked = True

        try:
            while not loop["finished"] and state.epoch <= epochs:
                if loop["order_state"] is None:
                    loop["order_state"] = generator.get_state()
                generator.set_state(loop["order_state"])
                order = torch.randperm(n_train, generator=generator)
                for callback in callbacks:
                    callback.on_epoch_start(state)
                model.train()
                position = loop["position"]
                while position < n_train:
                    t0 = time.perf_counter()
                    index = order[position:position + batch_size]
                    share, weight = index[rank::world], 1.0
                    if world > 1:
                        weight = share.numel() * world / index.numel()
                        if share.numel() == 0:  # an empty share still joins DDP's gradient averaging
                            share, weight = index[:1], 0.0
                    inputs = train_inputs[share]
                    targets = None if train_targets is None else train_targets[share.to(_device(train_targets))]
                    context = {"epoch": state.epoch, "step": state.step, "steps_per_epoch": steps_per_epoch,
                               "generator": generator}
                    if first_batch:  # the outputs and every target's range, before the loss reads them
                        context["check_outputs"] = lambda outputs, batch_targets=targets: check_first_outputs(
                            outputs, batch_targets)
                    loss, outputs, total = training_loss(inputs, targets, context)
                    if first_batch and not bool(torch.isfinite(total.detach()).all()):
                        # Not a divergence: no step was taken, so no learning rate or clipping can help.
                        raise ValueError(
                            f"the loss on the first training batch is {float(total.detach()):g} before any training "
                            f"step: {type(model).__name__} cannot train on these inputs (its outputs at initialisation "
                            "are not finite). Usual causes: times in large units in a time channel (time_unit='auto' "
                            "divides them by the longest span), a solver step too wide for the field (a smaller "
                            "step_size), or values far from unit scale (standardise them)")
                    if first_batch and outputs is not None:
                        if not outputs_checked:  # an objective whose training_loss does not call check_outputs
                            check_first_outputs(outputs, targets)
                        first_batch = False
                    seen = total if world == 1 else global_loss(total, weight, world)
                    for callback in callbacks:
                        callback.on_batch_loss(state, seen)
                    optimizer.zero_grad(set_to_none=True)
                    (total * weight if world > 1 else total).backward()
                    gradients = [p.grad for p in params if p.grad is not None]
                    for callback in callbacks:
                        callback.on_after_backward(state, gradients)
                    if grad_clip is not None:
                        torch.nn.utils.clip_grad_norm_(params, grad_clip)
                    if schedule != "constant":  # from the step count: a resumed run continues the schedule
                        for group in optimizer.param_groups:
                            group["lr"] = scheduled_lr(lr, schedule, state.step, epochs * steps_per_epoch)
                    optimizer.step()
                    state.step += 1
                    position += batch_size
                    loop["position"] = position
                    train_seconds += time.perf_counter() - t0
                    size = share.numel() if weight > 0 else 0
                    sums = train_sums.setdefault("loss", [0.0, 0])
                    sums[0] += loss.item() * size
                    sums[1] += size
                    if outputs is not None and size:
                        for name, (value, count) in objective.train_statistics(outputs, targets).items():
                            entry = train_sums.setdefault(name, [0.0, 0])
                            entry[0] += value
                            entry[1] += count
                    for callback in callbacks:
                        callback.on_batch_end(state, loss.item())
                    end_of_epoch = position >= n_train
                    hit_max = max_steps is not None and state.step >= max_steps
                    if end_of_epoch or hit_max or (eval_every is not None and state.step % eval_every == 0):
                        if end_of_epoch:  # the next epoch's order is drawn from the generator as it is now
                            if world > 1:
                                broadcast_generator(generator)
                            loop["position"], loop["order_state"] = 0, generator.get_state()
                        evaluate_now(end_of_epoch)
                        if hit_max and state.stop_reason is None:
                            state.stop_reason = "max_steps"
                        if end_of_epoch:
                            state.epoch += 1
                        if state.stop_reason is not None or state.epoch > epochs:
                            loop["finished"] = True
                            history["stopped_by"] = state.stop_reason or "epochs"
                        keep_good()
                        last_good["epoch"] = history["epoch"][-1]
                        if loop["finished"] or end_of_epoch:
                            break
                if state.epoch > epochs and not loop["finished"]:
                    loop["finished"] = True
                    history["stopped_by"] = "epochs"
        except Divergence as error:
            for callback in callbacks:
                if isinstance(callback, ProgressBar):
                    callback.on_fit_end(state)
            diverge(error)
        history.setdefault("stopped_by", "epochs")
        history["epochs_run"] = history["epoch"][-1] if history["epoch"] else 0
        history["steps"] = state.step
        history["stopped_early"] = history["stopped_by"] == "early_stopping"
        history["stopped_at_max_steps"] = history["stopped_by"] == "max_steps"
        history["smoke"] = history["stopped_at_max_steps"]
        for callback in callbacks:
            callback.on_fit_end(state)
        return history


def _callback_keys(callbacks):
    """(key, callback) pairs: the class name and its occurrence, so a resumed call with callbacks in another
    order (or without some) gives each saved state to the callback it belongs to."""
    seen: dict[str, int] = {}
    for callback in callbacks:
        name = type(callback).__name__
        seen[name] = seen.get(name, 0) + 1
        yield f"{name}#{seen[name]}", callback


def _device(tensor) -> torch.device:
    return tensor.device if isinstance(tensor, torch.Tensor) else torch.device("cpu")
