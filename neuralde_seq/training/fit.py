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

`fit` itself is the loop; what happens around it are collaborators it calls: the settings (`TrainingSpec`,
made from keywords by `training_spec`), the resume checkpoint (`ResumeCheckpoint`: what it holds, writing it,
continuing from it), the data order and distribution (`_DataOrder`, `_Ranks`), one training step (`_TrainingStep`),
evaluation (`_Evaluation`), divergence (`_LastGood` with the `DivergenceGuard` callback) and progress (the
`ProgressBar` callback).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .callbacks import Callback, Divergence, DivergenceGuard, FitState, ProgressBar
from .checkpoints import ResumeCheckpoint, ResumeMismatch, model_device
from .data_parallel import (
    TrainingLoss,
    broadcast_generator,
    broadcast_stop,
    evaluate_split,
    global_loss,
    sum_over_ranks,
)
from .objectives import Objective
from .process_group import world as _world  # (rank, world size); (0, 1) without a process group
from .schedules import scheduled_lr
from .spec import TrainingSpec, training_spec
from .threads import torch_threads

__all__ = ["fit", "TrainingDiverged", "ResumeMismatch", "TrainingSpec"]


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

    def __init__(
        self,
        message: str,
        *,
        epoch: int,
        step: int,
        reason: str,
        checkpoint_path: str | None,
        checkpoint_epoch: int,
        history: dict,
    ):
        super().__init__(message)
        self.epoch, self.step, self.reason = epoch, step, reason
        self.checkpoint_path, self.checkpoint_epoch, self.history = checkpoint_path, checkpoint_epoch, history


_FIT_KEYWORDS = ("callbacks", "resume_path", "resume", "config", "progress")


def fit(
    model: torch.nn.Module,
    objective: Objective,
    train: tuple[Any, Any],
    val: tuple[Any, Any] | None = None,
    spec: TrainingSpec | None = None,
    *,
    callbacks: Sequence[Callback] = (),
    resume_path: str | Path | None = None,
    resume: bool = False,
    config: dict | None = None,
    progress: bool | str = True,
    **spec_fields,
) -> dict[str, Any]:
    """Train ``model`` with Adam on ``objective`` as ``spec`` says, and return the history.

    Arguments:
        model: the model; its device is where batches go (inputs must already be there).
        objective: what is learnt (`objectives`).
        train: ``(inputs, targets)``: inputs sliceable by a 1-D LongTensor of sample indices (a `Control`,
            `Observations`, ``ModelArguments``, a tensor), N samples; targets as the objective expects (checked
            before training), or None.
        val: ``(inputs, targets)`` evaluated at every evaluation (metrics ``val_<name>``); None: none.
        spec: the `TrainingSpec` (epochs, lr, batch_size, seed, weight_decay, grad_clip, penalty_weight, schedule,
            eval_every, eval_batch_size, max_steps, threads); None: built from ``spec_fields``.
        callbacks: `Callback` objects, called in order. A `DivergenceGuard` is added unless one is given.
        resume_path: the resume checkpoint (`ResumeCheckpoint`), written after every evaluation, or None.
        resume: continue from ``resume_path`` if it exists: a run interrupted anywhere continues from its
            last evaluation as if never stopped. Its ``config`` must equal this call's (else `ResumeMismatch`).
        config: the run's settings, stored in checkpoints and compared on resume (with the spec's
            `TrainingSpec.checkpoint_settings`, the objective's and model's class names and the world size).
        progress: show progress on stderr (`ProgressBar`: bars on a terminal, else one line per epoch); a string
            is its label.
        **spec_fields: the spec's fields as keywords when ``spec`` is None (``fit(..., epochs=3, lr=1e-3,
            batch_size=32)``; epochs, lr and batch_size required).

    Returns:
        The history dict: per evaluation the lists ``epoch``, ``step``, ``train_loss``,
            ``train_<metric>`` (running training statistics of the objective), ``val_<metric>``,
            ``seconds_per_epoch`` (training seconds since the previous evaluation: per epoch when evaluating once
            per epoch) and ``val_seconds``; and ``epochs_run``, ``steps``, ``stopped_by`` ("epochs",
            "max_steps", "early_stopping", or a callback's reason), ``stopped_early``, ``stopped_at_max_steps``,
            ``smoke``, ``resumed_from_epoch``, plus what callbacks add (``best_epoch``, ``best_val_<metric>``).

    Raises:
        TrainingDiverged: the run diverged (see `DivergenceGuard`); raised after restoring the last good state.
        ResumeMismatch: ``resume`` finds a checkpoint whose ``config`` differs from this call's.
        CheckpointError: ``resume`` finds a file that cannot be read, is no resume checkpoint, or holds weights
            of other shapes than ``model``'s (the message names the file, the parameters and what to do).
        ValueError: a bad setting (`TrainingSpec`'s checks, naming the field), or targets the objective refuses.
        TypeError: ``spec`` and a field both given, or a field misspelt (`training_spec`).
    """
    spec = training_spec(spec, spec_fields, "fit", _FIT_KEYWORDS)
    train, val, params = _checked_inputs(model, objective, train, val, spec)
    n_train = len(train[0])
    with torch_threads(spec.threads):
        ranks = _Ranks(*_world())
        train_targets = train[1].to(model_device(model)) if isinstance(train[1], torch.Tensor) else train[1]
        training_loss = ranks.wrap(TrainingLoss(model, objective, spec.penalty_weight))
        optimizer = torch.optim.Adam(
            parameter_groups(model, params, spec.lr), lr=spec.lr, weight_decay=spec.weight_decay
        )
        callbacks = _with_guard_and_progress(callbacks, progress)
        history: dict[str, Any] = {
            "epoch": [],
            "step": [],
            "train_loss": [],
            "seconds_per_epoch": [],
            "val_seconds": [],
            "resumed_from_epoch": None,
        }
        run_config = {
            **spec.checkpoint_settings(),
            "objective": type(objective).__name__,
            "model_class": type(model).__name__,
            "world_size": ranks.world,
            **dict(config or {}),
        }
        state = FitState(
            model=model,
            optimizer=optimizer,
            objective=objective,
            epochs=spec.epochs,
            steps_per_epoch=-(-n_train // spec.batch_size),
            history=history,
            is_main=ranks.rank == 0,
            config=run_config,
            spec=spec,
        )
        order = _DataOrder(n_train, ranks)
        checkpoint = ResumeCheckpoint(resume_path, is_main=ranks.rank == 0)
        if resume and checkpoint.exists():
            checkpoint.restore(state, order.loop, order.generator, callbacks)  # ResumeMismatch, CheckpointError
        else:
            order.seed(spec.seed)
        last_good = _LastGood(state, order, checkpoint, callbacks, ranks)
        evaluate = _Evaluation(state, val, spec.eval_batch_size or spec.batch_size, ranks, callbacks)
        train_step = _TrainingStep(
            state, training_loss, params, train, train_targets, val, order.generator, callbacks, ranks
        )
        for callback in callbacks:
            callback.on_fit_start(state)
        last_good.keep()
        try:
            while not order.loop["finished"] and state.epoch <= spec.epochs:
                permutation = order.epoch_order()
                for callback in callbacks:
                    callback.on_epoch_start(state)
                model.train()
                position = order.loop["position"]
                while position < n_train:
                    t0 = time.perf_counter()
                    share, weight = ranks.share(permutation[position : position + spec.batch_size])
                    loss, outputs, targets = train_step(share, weight)
                    position += spec.batch_size
                    order.loop["position"] = position
                    evaluate.add_batch(
                        loss, share.numel() if weight > 0 else 0, outputs, targets, time.perf_counter() - t0
                    )
                    for callback in callbacks:
                        callback.on_batch_end(state, loss.item())
                    end_of_epoch = position >= n_train
                    hit_max = spec.max_steps is not None and state.step >= spec.max_steps
                    if end_of_epoch or hit_max or (spec.eval_every is not None and state.step % spec.eval_every == 0):
                        if end_of_epoch:  # the next epoch's order is drawn from the generator as it is now
                            order.end_epoch()
                        evaluate(end_of_epoch)
                        if hit_max and state.stop_reason is None:
                            state.stop_reason = "max_steps"
                        state.epoch += int(end_of_epoch)  # an epoch ends with its last step's evaluation
                        if state.stop_reason is not None or state.epoch > spec.epochs:
                            order.finish(history, state.stop_reason or "epochs")
                        last_good.keep()
                        if order.loop["finished"] or end_of_epoch:
                            break
                if state.epoch > spec.epochs and not order.loop["finished"]:
                    order.finish(history, "epochs")
        except Divergence as error:
            last_good.restore_and_raise(error)  # TrainingDiverged, after the last good state is restored
        _summarise(history, state.step)
        for callback in callbacks:
            callback.on_fit_end(state)
        return history


# ------------------------------------------------------------------------------- fit's collaborators
def _checked_inputs(model, objective: Objective, train, val, spec: TrainingSpec):
    """``(train, val, trainable parameters)``, the targets checked by the objective, before anything is done."""
    if spec.penalty_weight > 0 and not callable(getattr(model, "penalty", None)):
        raise ValueError(f"penalty_weight={spec.penalty_weight} but {type(model).__name__} has no penalty() method")
    train = (train[0], objective.check_targets(train[1], len(train[0]), "train targets"))
    if val is not None:
        val = (val[0], objective.check_targets(val[1], len(val[0]), "val targets"))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    return train, val, params


def parameter_groups(model: torch.nn.Module, params: Sequence[torch.nn.Parameter], lr: float) -> list[dict]:
    """Adam's parameter groups: ``params`` at ``lr``, except those a submodule scales with a
    ``learning_rate_scales()`` method (pairs of a parameter and a factor), which get ``lr`` times their factor.

    Why: Adam moves every entry by about ``lr`` per step whatever its size, so a matrix whose rows mix k entries moves
    k times as far in norm per step as a diagonal one (`LinearCDE.learning_rate_scales`: a dense linear CDE's state
    grew 1.5x per step and its loss jumped to 65 within 16 steps on a long real series).

    Arguments:
        model: the model trained.
        params: its trainable parameters.
        lr: the base learning rate.

    Returns:
        A list of groups (dicts with ``params``, ``lr`` and ``lr_scale``), the unscaled group first, each scale once.
    """
    scales = {}
    for module in model.modules():
        scales_of = getattr(module, "learning_rate_scales", None)
        if callable(scales_of):
            scales.update({id(p): float(factor) for p, factor in scales_of()})
    groups: dict[float, list] = {}
    for p in params:
        groups.setdefault(scales.get(id(p), 1.0), []).append(p)
    order = sorted(groups, key=lambda factor: factor != 1.0)  # stable: the others in the order met
    return [{"params": groups[factor], "lr": lr * factor, "lr_scale": factor} for factor in order]


def _with_guard_and_progress(callbacks: Sequence[Callback], progress: bool | str) -> list[Callback]:
    """The run's callbacks: a `DivergenceGuard` first unless one is given, a `ProgressBar` last if ``progress``."""
    callbacks = list(callbacks)
    if not any(isinstance(c, DivergenceGuard) for c in callbacks):
        callbacks.insert(0, DivergenceGuard())
    if progress:
        callbacks.append(ProgressBar(progress if isinstance(progress, str) else "train"))
    return callbacks


class _Ranks:
    """Distribution: this process's ``rank`` among ``world`` processes (0 of 1 without a process group).

    With several processes the training loss is wrapped in DistributedDataParallel, each process trains on its
    share ``batch[rank::world]`` of every global batch, weighted so that the averaged gradient is the gradient of
    the global batch's mean loss; with one, every method is the plain computation.
    """

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world

    def wrap(self, training_loss: torch.nn.Module) -> torch.nn.Module:
        if self.world == 1:
            return training_loss
        # Wrapping broadcasts rank 0's weights to every rank. device_ids=None: inputs are already on the model's
        # device (DDP would otherwise copy them, rebuilding dataclasses such as Control). find_unused_parameters:
        # some objectives leave parameters out (the ELBO a latent model's classifier).
        return torch.nn.parallel.DistributedDataParallel(training_loss, device_ids=None, find_unused_parameters=True)

    def share(self, index: torch.Tensor) -> tuple[torch.Tensor, float]:
        """This process's samples of the global batch ``index`` (1-D) and the weight of their loss."""
        share, weight = index[self.rank :: self.world], 1.0
        if self.world > 1:
            weight = share.numel() * self.world / index.numel()
            if share.numel() == 0:  # an empty share still joins DDP's gradient averaging
                share, weight = index[:1], 0.0
        return share, weight

    def global_loss(self, total: torch.Tensor, weight: float) -> torch.Tensor:
        """The global batch's loss, as every rank's callbacks see it."""
        return total if self.world == 1 else global_loss(total, weight, self.world)

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


class _DataOrder:
    """The order samples are visited in: every epoch a permutation drawn from one generator, the same on every
    rank, and the loop's position in it (``loop``: ``position``, ``order_state`` the generator's state the epoch's
    order is drawn from, ``finished``), which the resume checkpoint stores."""

    def __init__(self, num_samples: int, ranks: _Ranks):
        self.num_samples, self.ranks = num_samples, ranks
        self.generator = torch.Generator()
        self.loop: dict[str, Any] = {"position": 0, "order_state": None, "finished": False}

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed + self.ranks.rank)  # per-rank randomness (dropout, latent samples); data order is shared
        self.generator.manual_seed(seed)

    def epoch_order(self) -> torch.Tensor:
        """The epoch's permutation of the samples (drawn again, identically, when a run resumes inside it)."""
        if self.loop["order_state"] is None:
            self.loop["order_state"] = self.generator.get_state()
        self.generator.set_state(self.loop["order_state"])
        return torch.randperm(self.num_samples, generator=self.generator)

    def end_epoch(self) -> None:
        if self.ranks.world > 1:
            broadcast_generator(self.generator)
        self.loop["position"], self.loop["order_state"] = 0, self.generator.get_state()

    def finish(self, history: dict, stopped_by: str) -> None:
        self.loop["finished"] = True
        history["stopped_by"] = stopped_by


class _TrainingStep:
    """One training step on a share of a batch: the loss (the first batch's outputs and every target's range
    checked before it is read), the callbacks' checks, the backward pass, clipping, the scheduled learning rate and
    the optimizer's step. ``__call__(share, weight)`` returns (the objective's loss, its outputs, the targets)."""

    def __init__(
        self, state: FitState, training_loss, params, train, train_targets, val, generator, callbacks, ranks: _Ranks
    ):
        self.state, self.training_loss, self.params, self.callbacks, self.ranks = (
            state,
            training_loss,
            params,
            callbacks,
            ranks,
        )
        self.train_inputs, self.train_targets, self.val, self.generator = train[0], train_targets, val, generator
        self.first_batch = not state.history["epoch"]
        self.outputs_checked = False

    def check_first_outputs(self, outputs, batch_targets) -> None:
        # Every label of both splits against the model's output width, before the first loss and step (a class
        # index out of range would otherwise surface as the loss's indexing error).
        objective = self.state.objective
        objective.check_outputs(outputs, batch_targets)
        objective.check_target_range(outputs, self.train_targets, "train targets")
        if self.val is not None:
            objective.check_target_range(outputs, self.val[1], "val targets")
        self.outputs_checked = True

    def __call__(self, share: torch.Tensor, weight: float):
        state, spec = self.state, self.state.spec
        inputs = self.train_inputs[share]
        targets = None if self.train_targets is None else self.train_targets[share.to(_device(self.train_targets))]
        context = {
            "epoch": state.epoch,
            "step": state.step,
            "steps_per_epoch": state.steps_per_epoch,
            "generator": self.generator,
        }
        if self.first_batch:  # the outputs and every target's range, before the loss reads them
            context["check_outputs"] = lambda outputs, batch_targets=targets: self.check_first_outputs(
                outputs, batch_targets
            )
        loss, outputs, total = self.training_loss(inputs, targets, context)
        if self.first_batch:
            self._check_first_loss(total, outputs, targets)
        seen = self.ranks.global_loss(total, weight)
        for callback in self.callbacks:
            callback.on_batch_loss(state, seen)
        state.optimizer.zero_grad(set_to_none=True)
        (total * weight if self.ranks.world > 1 else total).backward()
        gradients = [p.grad for p in self.params if p.grad is not None]
        for callback in self.callbacks:
            callback.on_after_backward(state, gradients)
        if spec.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, spec.grad_clip)
        if spec.schedule != "constant":  # from the step count: a resumed run continues the schedule
            for group in state.optimizer.param_groups:
                group["lr"] = group.get("lr_scale", 1.0) * scheduled_lr(
                    spec.lr, spec.schedule, state.step, spec.epochs * state.steps_per_epoch
                )
        state.optimizer.step()
        state.step += 1
        return loss, outputs, targets

    def _check_first_loss(self, total, outputs, targets) -> None:
        if not bool(torch.isfinite(total.detach()).all()):
            # Not a divergence: no step was taken, so no learning rate or clipping can help.
            raise ValueError(
                f"the loss on the first training batch is {float(total.detach()):g} before any training "
                f"step: {type(self.state.model).__name__} cannot train on these inputs (its outputs at initialisation "
                "are not finite). Usual causes: times in large units in a time channel (time_unit='auto' "
                "divides them by the longest span), a solver step too wide for the field (a smaller "
                "step_size), or values far from unit scale (standardise them)"
            )
        if outputs is not None:
            if not self.outputs_checked:  # an objective whose training_loss does not call check_outputs
                self.check_first_outputs(outputs, targets)
            self.first_batch = False


class _Evaluation:
    """Training statistics since the last evaluation, and the evaluation that makes them and the validation
    metrics one history row: ``add_batch`` after every step, ``__call__(end_of_epoch)`` at an evaluation (it calls
    the callbacks' ``on_evaluation`` and, with several processes, takes rank 0's decision to stop)."""

    def __init__(self, state: FitState, val, batch_size: int, ranks: _Ranks, callbacks):
        self.state, self.val, self.batch_size, self.ranks, self.callbacks = state, val, batch_size, ranks, callbacks
        self.device = model_device(state.model)
        self.sums: dict[str, list[float]] = {}
        self.seconds = 0.0

    def add_batch(self, loss: torch.Tensor, size: int, outputs, targets, seconds: float) -> None:
        """A step's loss over ``size`` samples of this process (0 for a stand-in share) and its statistics."""
        self.seconds += seconds
        sums = self.sums.setdefault("loss", [0.0, 0])
        sums[0] += loss.item() * size
        sums[1] += size
        if outputs is not None and size:
            for name, (value, count) in self.state.objective.train_statistics(outputs, targets).items():
                entry = self.sums.setdefault(name, [0.0, 0])
                entry[0] += value
                entry[1] += count

    def __call__(self, end_of_epoch: bool) -> dict:
        state, history, ranks = self.state, self.state.history, self.ranks
        if ranks.world > 1:  # training statistics summed over the processes
            self.sums = sum_over_ranks(self.sums, ranks.world, self.device)
        record: dict[str, Any] = {"epoch": state.epoch, "step": state.step, "end_of_epoch": end_of_epoch}
        for name, (total, count) in self.sums.items():
            record[f"train_{name}"] = total / count if count else None
        record["seconds_per_epoch"] = self.seconds
        t0 = time.perf_counter()
        if self.val is not None:
            metrics = evaluate_split(state.model, state.objective, self.val, self.batch_size, ranks.world, ranks.rank)
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
        for callback in self.callbacks:
            callback.on_evaluation(state, record)
        if ranks.world > 1:
            broadcast_stop(state)
        self.sums, self.seconds = {}, 0.0
        return record


class _LastGood:
    """Divergence: the state training falls back to (the last evaluation's weights and optimizer state, the
    initial ones before any), kept in memory and written to the resume checkpoint at every evaluation."""

    def __init__(self, state: FitState, order: _DataOrder, checkpoint: ResumeCheckpoint, callbacks, ranks: _Ranks):
        self.state, self.order, self.checkpoint, self.callbacks, self.ranks = state, order, checkpoint, callbacks, ranks
        self.weights: dict | None = None
        self.epoch = 0

    def keep(self) -> None:
        good = self.checkpoint.snapshot(self.state, self.order.loop, self.order.generator, self.callbacks)
        optimizer_state = good["optimizer_state"]
        self.weights = {
            "model_state": good["model_state"],
            "optimizer_state": {
                "state": {
                    k: {n: t.clone() if isinstance(t, torch.Tensor) else t for n, t in v.items()}
                    for k, v in optimizer_state["state"].items()
                },
                "param_groups": optimizer_state["param_groups"],
            },
        }
        self.epoch = good["epoch"]
        self.checkpoint.save(good)
        self.ranks.barrier()

    def restore_and_raise(self, error: Divergence):
        """Restore the last good state, let the callbacks restore theirs, and raise `TrainingDiverged`."""
        state, history = self.state, self.state.history
        for callback in self.callbacks:
            if isinstance(callback, ProgressBar):
                callback.on_fit_end(state)
        state.optimizer.zero_grad(set_to_none=True)
        assert self.weights is not None  # kept before the first step
        state.model.load_state_dict(self.weights["model_state"])
        state.optimizer.load_state_dict(self.weights["optimizer_state"])
        restored_epoch, restored_path = self.epoch, None if self.checkpoint.path is None else str(self.checkpoint.path)
        for callback in self.callbacks:
            replaced = callback.on_diverged(state)
            if replaced is not None:
                restored_epoch, restored_path = replaced
        where = f" from {restored_path}" if restored_path is not None else ""
        advice = error.advice or (
            "Try a lower learning rate, gradient clipping (grad_clip) or a tighter solver tolerance."
        )
        message = (
            f"training diverged at epoch {state.epoch}, training step {state.step + 1}: {error.reason}. "
            f"Restored the last good weights (epoch {restored_epoch}){where}. "
            f"{advice}"
        )
        history["stopped_by"] = "diverged"
        history["diverged"] = message
        raise TrainingDiverged(
            message,
            epoch=state.epoch,
            step=state.step + 1,
            reason=error.reason,
            checkpoint_path=restored_path,
            checkpoint_epoch=restored_epoch,
            history=history,
        ) from None


def _summarise(history: dict, steps: int) -> None:
    """The run's summary entries of the history (how far it got, why it stopped)."""
    history.setdefault("stopped_by", "epochs")
    history["epochs_run"] = history["epoch"][-1] if history["epoch"] else 0
    history["steps"] = steps
    history["stopped_early"] = history["stopped_by"] == "early_stopping"
    history["stopped_at_max_steps"] = history["stopped_by"] == "max_steps"
    history["smoke"] = history["stopped_at_max_steps"]


def _device(tensor) -> torch.device:
    return tensor.device if isinstance(tensor, torch.Tensor) else torch.device("cpu")
