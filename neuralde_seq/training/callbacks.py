"""Callbacks of `fit`: what happens around the loop's steps and evaluations.

A callback overrides any of the hooks below; each gets the `FitState` (model, optimizer, epoch,
step, history, ...). A callback that must survive a resume returns its bookkeeping from ``state_dict``.

- `BestCheckpoint` keeps the weights of the best evaluation (on disk or in memory) and restores
  them at the end;
- `EarlyStopping` stops after ``patience`` evaluations without improvement;
- `StopWhen` stops when a condition on the metrics holds (a task counted as solved);
- `TimeLimit` stops at the first evaluation after a wall-time budget;
- `DivergenceGuard` (always active; pass one to change its settings) stops a run whose loss,
  gradients or parameters become non-finite, or whose training loss explodes relative to the first
  evaluation's, before a step is taken with them;
- `ProgressBar` shows the epochs and batches (tqdm bars in a terminal, one line per epoch otherwise).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import torch
from tqdm import tqdm

from ..solvers import SolverOptions
from ..terminal import is_terminal
from .checkpoints import load_checkpoint, save_checkpoint

__all__ = [
    "Callback",
    "FitState",
    "BestCheckpoint",
    "EarlyStopping",
    "StopWhen",
    "TimeLimit",
    "DivergenceGuard",
    "ProgressBar",
    "Divergence",
    "is_terminal",
]


@dataclasses.dataclass
class FitState:
    """What callbacks see of a running `fit`.

    Attributes:
        model: the model being trained (possibly wrapped for data-parallel training: its ``module``).
        optimizer: the Adam optimizer.
        objective: the `Objective` being trained on.
        epochs: the number of epochs of the run.
        steps_per_epoch: training steps (batches) per epoch.
        history: the records so far (see `fit`).
        epoch: the epoch in progress, 1-based.
        step: training steps taken so far.
        stop_reason: None, or the reason to stop; set it to stop at the next chance.
        is_main: rank 0 of a distributed run, or the only process: the one that writes files.
        config: the run's settings (stored in checkpoints).
        spec: the run's `neuralde_seq.training.spec.TrainingSpec` (learning rate, batch size, ...), or None.
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    objective: Any
    epochs: int
    steps_per_epoch: int
    history: dict
    epoch: int = 1
    step: int = 0
    stop_reason: str | None = None
    is_main: bool = True
    config: dict = dataclasses.field(default_factory=dict)
    spec: Any = None


class Divergence(Exception):
    """Raised by a callback to declare the run diverged; `fit` restores the last good state."""

    def __init__(self, reason: str, advice: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.advice = advice


class Callback:
    """Base class: every hook does nothing. Each hook gets the `FitState` ``state`` of the run."""

    def on_fit_start(self, state: FitState) -> None:
        """Called once before the first training step (also when resuming).

        Arguments:
            state: the run's `FitState`.
        """

    def on_epoch_start(self, state: FitState) -> None:
        """Called at the start of every epoch.

        Arguments:
            state: the run's `FitState`; ``state.epoch`` is the epoch starting.
        """

    def on_batch_loss(self, state: FitState, loss: torch.Tensor) -> None:
        """Called with each batch's training loss before the backward pass.

        Arguments:
            state: the run's `FitState`.
            loss: the batch's training loss (penalty included; over all processes in a distributed run), a
                scalar tensor.
        """

    def on_after_backward(self, state: FitState, gradients: list[torch.Tensor]) -> None:
        """Called after the backward pass, before clipping and the optimizer step.

        Arguments:
            state: the run's `FitState`.
            gradients: the gradients of the parameters that have one.
        """

    def on_batch_end(self, state: FitState, loss: float) -> None:
        """Called after each training step.

        Arguments:
            state: the run's `FitState`.
            loss: the batch's loss (the objective's, without the penalty), a float.
        """

    def on_evaluation(self, state: FitState, record: dict) -> None:
        """Called after every evaluation.

        Arguments:
            state: the run's `FitState`; set ``state.stop_reason`` to stop.
            record: the evaluation's record: ``epoch``, ``step``, ``end_of_epoch``, ``train_<metric>``,
                ``val_<metric>``, ``seconds_per_epoch``, ``val_seconds``.
        """

    def on_fit_end(self, state: FitState) -> None:
        """Called once after the last training step.

        Arguments:
            state: the run's `FitState`.
        """

    def on_diverged(self, state: FitState) -> tuple[int, str | None] | None:
        """Called after a divergence restored the last good state.

        Arguments:
            state: the run's `FitState`.

        Returns:
            None, or, for a callback that restores other weights instead, ``(their epoch, their file or
                None)``.
        """

    def state_dict(self) -> dict:
        """The callback's bookkeeping, stored in resume checkpoints (default: empty).

        Returns:
            A dict that `load_state_dict` accepts.
        """
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore the bookkeeping of `state_dict` when a run resumes.

        Arguments:
            state: the dict `state_dict` returned.
        """


def _improves(value, best, maximize: bool) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if best is None:
        return True
    return value > best if maximize else value < best


def _selection_key(record: dict, monitor: str, maximize: bool, prefix: str) -> tuple | None:
    """The monitored metric as a tuple compared lexicographically, larger = better; ties in a metric other
    than the loss go to the lower loss."""
    value = record.get(f"{prefix}{monitor}")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    key: tuple[Any, ...] = (value if maximize else -value,)
    loss = record.get(f"{prefix}loss")
    if monitor != "loss" and loss is not None:
        key += (-(loss if math.isfinite(loss) else math.inf),)
    return key


class BestCheckpoint(Callback):
    """Keep the weights of the best evaluation and load them back at the end of the run.

    Arguments:
        path: checkpoint file (written atomically by the main process), or None to keep the best weights in
            memory. The initial weights are saved before training (epoch 0), so a checkpoint always exists.
        monitor: metric name of the objective (default its ``default_select_on``), read from the evaluation
            records as ``<split>_<monitor>`` (``split``: "val" by default).
        split: whose metric is monitored; "train" selects on the training metrics.
        config: stored in the checkpoint.
    """

    def __init__(
        self, path: str | Path | None = None, monitor: str | None = None, split: str = "val", config: dict | None = None
    ):
        self.path = None if path is None else Path(path)
        self.monitor = monitor
        self.split = split
        self.config = dict(config or {})
        self.best_key: tuple | None = None
        self.best_epoch = 0
        self._memory: dict | None = None

    def _save(self, state: FitState, metrics: dict) -> None:
        if self.path is None:
            self._memory = copy.deepcopy(state.model.state_dict())
        elif state.is_main:
            save_checkpoint(
                self.path,
                model=state.model,
                optimizer=state.optimizer,
                epoch=state.epoch if metrics else 0,
                metrics=metrics,
                config={**state.config, **self.config},
            )

    def on_fit_start(self, state):
        """Resolve ``monitor`` and save the initial weights (epoch 0) unless resuming with a best checkpoint."""
        if self.monitor is None:
            self.monitor = state.objective.default_select_on
        if self.monitor not in state.objective.maximize:
            raise ValueError(
                f"BestCheckpoint monitor {self.monitor!r} is not a metric of "
                f"{type(state.objective).__name__} ({', '.join(state.objective.maximize)})"
            )
        if self.best_key is None and (self.path is None or not self.path.exists() or state.step == 0):
            self._save(state, {})
        state.history.setdefault("best_epoch", 0)

    def on_evaluation(self, state, record):
        """Save the weights, and record ``best_epoch``, ``best_step`` and ``best_<split>_<metric>`` in the history,
        when the monitored metric improves."""
        key = _selection_key(record, self.monitor, state.objective.maximize[self.monitor], f"{self.split}_")
        if key is not None and (self.best_key is None or key > self.best_key):
            self.best_key = key
            self.best_epoch = record["epoch"]
            state.history["best_epoch"] = record["epoch"]
            state.history["best_step"] = record["step"]
            for name, value in record.items():
                if name.startswith(f"{self.split}_"):
                    state.history[f"best_{name}"] = value
            self._save(state, {k: v for k, v in record.items() if isinstance(v, (int, float, type(None)))})

    def restore(self, model: torch.nn.Module, optimizer=None) -> None:
        """Load the best weights into ``model`` (and ``optimizer``, from a checkpoint file).

        Arguments:
            model: the (unwrapped) model.
            optimizer: an optimizer to restore too, or None (default); not restored from memory.
        """
        if self.path is None:
            if self._memory is not None:
                model.load_state_dict(self._memory)
        else:
            load_checkpoint(self.path, model, optimizer)

    def on_fit_end(self, state):
        """Load the best weights back into the model (and optimizer)."""
        self.restore(getattr(state.model, "module", state.model), state.optimizer)

    def on_diverged(self, state):
        """Load the best weights back, as a finished run does; returns ``(best epoch, checkpoint file or None)``."""
        # A diverged run reports its best weights, as a finished one does.
        self.restore(getattr(state.model, "module", state.model), state.optimizer)
        return self.best_epoch, None if self.path is None else str(self.path)

    def state_dict(self):
        """The best key, epoch and monitored metric, for resuming."""
        return {
            "best_key": None if self.best_key is None else list(self.best_key),
            "best_epoch": self.best_epoch,
            "monitor": self.monitor,
        }

    def load_state_dict(self, state):
        """Restore the best key and epoch of `state_dict`."""
        self.best_key = None if state["best_key"] is None else tuple(state["best_key"])
        self.best_epoch = state["best_epoch"]


class EarlyStopping(Callback):
    """Stop after ``patience`` evaluations in a row without improvement of ``<split>_<monitor>``.

    Arguments:
        patience: evaluations in a row without improvement before stopping (a positive integer).
        monitor: metric name of the objective (default None: its ``default_select_on``); ties in a metric
            other than the loss go to the lower loss.
        split: whose metric is monitored: "val" (default) or "train".
    """

    def __init__(self, patience: int, monitor: str | None = None, split: str = "val"):
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience must be a positive integer, got {patience!r}")
        self.patience, self.monitor, self.split = patience, monitor, split
        self.best_key: tuple | None = None
        self.since_best = 0

    def on_fit_start(self, state):
        """Resolve ``monitor`` (default: the objective's ``default_select_on``)."""
        if self.monitor is None:
            self.monitor = state.objective.default_select_on

    def on_evaluation(self, state, record):
        """Count evaluations without improvement; set the stop reason "early_stopping" after ``patience`` of them."""
        key = _selection_key(record, self.monitor, state.objective.maximize[self.monitor], f"{self.split}_")
        if key is not None and (self.best_key is None or key > self.best_key):
            self.best_key, self.since_best = key, 0
        else:
            self.since_best += 1
        if self.since_best >= self.patience:
            state.stop_reason = "early_stopping"

    def state_dict(self):
        """The best key and the count since the best, for resuming."""
        return {"best_key": None if self.best_key is None else list(self.best_key), "since_best": self.since_best}

    def load_state_dict(self, state):
        """Restore the best key and count of `state_dict`."""
        self.best_key = None if state["best_key"] is None else tuple(state["best_key"])
        self.since_best = state["since_best"]


class StopWhen(Callback):
    """Stop at the first evaluation where ``condition(record)`` holds (e.g. a task counted as solved); the
    record is kept in ``history[reason + "_at"]``.

    Arguments:
        condition: a function of the evaluation record (a dict of metrics) returning True to stop.
        reason: the stop reason recorded in the history's ``stopped_by`` (default "solved").
    """

    def __init__(self, condition: Callable[[dict], bool], reason: str = "solved"):
        self.condition, self.reason = condition, reason

    def on_evaluation(self, state, record):
        """Stop with ``reason`` (and keep the record) when ``condition(record)`` holds."""
        if self.condition(record):
            state.history.setdefault(f"{self.reason}_at", dict(record))
            state.stop_reason = self.reason


class TimeLimit(Callback):
    """Stop at the first evaluation after ``minutes`` of wall time in this call (stop reason "time").

    Arguments:
        minutes: the wall-time budget, a positive number of minutes.
    """

    def __init__(self, minutes: float):
        if not minutes > 0:
            raise ValueError(f"minutes must be positive, got {minutes!r}")
        self.seconds = 60.0 * minutes
        self.start = None

    def on_fit_start(self, state):
        """Start the clock."""
        self.start = time.perf_counter()

    def on_evaluation(self, state, record):
        """Set the stop reason "time" once the budget is spent."""
        if state.stop_reason is None and time.perf_counter() - self.start > self.seconds:
            state.stop_reason = "time"


_GENERIC_ADVICE = "Try a lower learning rate, gradient clipping (grad_clip) or a tighter solver tolerance."


def gradient_advice(model: torch.nn.Module) -> str:
    """What to try after a non-finite gradient: the continuous adjoint is the likely cause where it is used."""
    users = sorted(
        {
            type(module).__name__
            for module in model.modules()
            if isinstance(solver := getattr(module, "solver", None), SolverOptions) and solver.uses_adjoint
        }
    )
    if not users:
        return _GENERIC_ADVICE
    return (
        f"Likely cause: {', '.join(users)} uses the continuous adjoint (SolverOptions(gradient=Adjoint()), "
        "gradient: adjoint in a config), whose backward pass re-integrates the state backwards in time; for "
        "contracting fields over long sequences that is unstable and its gradients are wrong or non-finite, "
        "whatever the learning rate. Use the default SolverOptions(gradient=Checkpoint()), exact for the "
        "discrete solve with O(sqrt(steps)) memory (or Backprop())."
    )


def _all_finite(tensors) -> bool:
    flags = [torch.isfinite(t).all() for t in tensors]
    return bool(torch.stack(flags).all()) if flags else True


class DivergenceGuard(Callback):
    """Declare the run diverged, before any training step is taken with bad numbers, when

    - a training loss is NaN or infinite;
    - a gradient is NaN or infinite (checked before clipping, which cannot make it finite: NaN stays NaN
      and an infinite norm turns every entry into 0 or NaN);
    - a parameter is not finite at an evaluation;
    - the mean training loss since the last evaluation exceeds the loss of the very first batch (before
      any step: the scale of an untrained model) by more than ``explosion_factor`` times max(|first|, 1)
      (a finite blow-up such as a loss of 1e23 is as wrong a result as a NaN). None disables this check.

    Arguments:
        explosion_factor: the factor of the last check (default 1e3), a positive number, or None to disable
            that check.
    """

    def __init__(self, explosion_factor: float | None = 1e3):
        if explosion_factor is not None and not explosion_factor > 0:
            raise ValueError(f"explosion_factor must be positive or None, got {explosion_factor!r}")
        self.explosion_factor = explosion_factor
        self.first_loss: float | None = None

    def on_batch_loss(self, state, loss):
        """Raise `Divergence` on a non-finite loss; remember the first batch's loss."""
        if not torch.isfinite(loss):
            raise Divergence(f"non-finite training loss ({loss.item()})")
        if self.first_loss is None:
            self.first_loss = loss.item()

    def on_after_backward(self, state, gradients):
        """Raise `Divergence` on a non-finite gradient."""
        if not _all_finite(gradients):
            raise Divergence("non-finite gradient", gradient_advice(state.model))

    def on_evaluation(self, state, record):
        """Raise `Divergence` on a non-finite parameter or an exploded mean training loss."""
        if not _all_finite([p.detach() for p in state.model.parameters()]):
            raise Divergence("non-finite parameter after the training steps")
        loss = record.get("train_loss")
        if loss is None or self.explosion_factor is None:
            return
        if self.first_loss is not None and loss > self.first_loss + self.explosion_factor * max(
            abs(self.first_loss), 1.0
        ):
            raise Divergence(
                f"the training loss exploded: mean {loss:.4g} since the last evaluation against "
                f"{self.first_loss:.4g} on the first batch (more than explosion_factor="
                f"{self.explosion_factor:g} times larger)"
            )

    def state_dict(self):
        """The first batch's loss, for resuming."""
        return {"first_loss": self.first_loss}

    def load_state_dict(self, state):
        """Restore the first batch's loss of `state_dict`."""
        self.first_loss = state["first_loss"]


_SHORT_METRICS = {"accuracy": "acc", "auroc": "auroc", "loss": "loss"}


def _number(value, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def short_label(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in "…" where it was cut (a bar's label within its line)."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


class ProgressBar(Callback):
    """Progress of a run on stderr: tqdm bars where stderr is a terminal, one plain line per epoch otherwise.

    In a terminal: a bar over the epochs showing the last evaluation's training loss and validation metric, and
    a bar over the current epoch's batches that disappears when the epoch ends; both fit 80 columns. Sent to a
    file or a pipe (stderr not a terminal), bars would become thousands of ``\\r`` frames, so each finished epoch
    writes one line instead, e.g. ``delta-cde seed 0: epoch 3/25  train_loss 0.4123  val_accuracy 0.9342  (1.2
    s)`` (a run stopped within an epoch, by ``max_steps``, writes that epoch's line when it ends).

    Arguments:
        desc: the label of the bar and of every line (default "train").
        metric: the validation metric shown (default None: the objective's ``default_select_on``).
        stream: where to write (default None: ``sys.stderr`` when the run starts).
    """

    LABEL_WIDTH = 22  # a bar's label is cut to this, so that counts, times and metrics fit 80 columns

    def __init__(self, desc: str = "train", metric: str | None = None, stream=None):
        self.desc = desc
        self.metric = metric
        self.stream = stream
        self._out: TextIO | None = None  # the stream of the run in progress
        self.epochs = self.batches = None
        self.interactive = False
        self._pending = None  # the latest evaluation not yet written as a line
        self._clock: float | None = None

    def _record_text(self, record: dict, bar: bool) -> str:
        """The training loss and the validation metric of ``record``, short in a bar, named in full in a line."""
        metric = self.metric or "loss"
        if bar:
            shown = [f"loss {_number(record.get('train_loss'), 3)}"]
            if f"val_{metric}" in record:
                shown.append(f"val {_SHORT_METRICS.get(metric, metric)} {_number(record[f'val_{metric}'], 3)}")
            return ", ".join(shown)
        shown = [f"train_loss {_number(record.get('train_loss'))}"]
        if f"val_{metric}" in record:
            shown.append(f"val_{metric} {_number(record[f'val_{metric}'])}")
        return "  ".join(shown)

    def on_fit_start(self, state):
        """Open the epoch bar in a terminal (main process only); otherwise start the clock of the epoch lines."""
        if self.metric is None:
            self.metric = state.objective.default_select_on
        stream = self._out = self.stream if self.stream is not None else sys.stderr
        self.interactive = is_terminal(stream)
        self._clock = time.perf_counter()
        if self.interactive:
            # No percentage and no rate: the count says as much, and the metrics stay within 80 columns.
            self.epochs = tqdm(
                total=state.epochs,
                initial=state.epoch - 1,
                unit="epoch",
                dynamic_ncols=True,
                desc=short_label(self.desc, self.LABEL_WIDTH),
                disable=not state.is_main,
                file=stream,
                bar_format="{desc}: {n_fmt}/{total_fmt} |{bar}| {elapsed}<{remaining}{postfix}",
            )

    def on_epoch_start(self, state):
        """Open a new bar over the epoch's batches (in a terminal)."""
        if not self.interactive:
            return
        if self.batches is not None:
            self.batches.close()
        self.batches = tqdm(
            total=state.steps_per_epoch,
            desc=f"epoch {state.epoch}",
            unit="batch",
            leave=False,
            dynamic_ncols=True,
            disable=not state.is_main,
            file=self._out,
            bar_format="{desc}: {n_fmt}/{total_fmt} |{bar}| {elapsed}<{remaining}{postfix}",
        )

    def on_batch_end(self, state, loss):
        """Advance the batch bar and show the batch's loss (in a terminal)."""
        if self.batches is not None:
            self.batches.update(1)
            self.batches.set_postfix_str(f"loss {loss:.3g}", refresh=False)

    def _write_line(self, state, record: dict) -> None:
        assert self._out is not None and self._clock is not None  # set by on_fit_start
        now = time.perf_counter()
        seconds, self._clock = now - self._clock, now
        partial = "" if record.get("end_of_epoch", True) else f" (stopped at step {record['step']})"
        self._out.write(
            f"{self.desc}: epoch {record['epoch']}/{state.epochs}{partial}  "
            f"{self._record_text(record, bar=False)}  ({seconds:.1f} s)\n"
        )
        self._out.flush()

    def on_evaluation(self, state, record):
        """Show the evaluation's metrics on the epoch bar, or write the epoch's line (at the epoch's end)."""
        if self.interactive:
            self.epochs.set_postfix_str(self._record_text(record, bar=True), refresh=False)
            self.epochs.n = record["epoch"] - 1 + (1 if record.get("end_of_epoch") else 0)
            self.epochs.refresh()
            return
        if not state.is_main:
            return
        if record.get("end_of_epoch"):
            self._pending = None
            self._write_line(state, record)
        else:  # an evaluation within the epoch (eval_every): written only if the run ends before the epoch does
            self._pending = dict(record)

    def on_fit_end(self, state):
        """Close the bars, or write the line of an epoch the run stopped within."""
        for bar in (self.batches, self.epochs):
            if bar is not None:
                bar.close()
        self.batches = self.epochs = None
        if self._pending is not None and state.is_main:
            self._write_line(state, self._pending)
            self._pending = None
