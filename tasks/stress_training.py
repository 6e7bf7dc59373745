"""The training loop shared by the stress tasks of paper 000 (``tasks/copy_memory.py``,
``tasks/adding_problem.py``).

:func:`neuralde_seq.training.train_classifier` trains one label per sequence with per-epoch validation;
the stress tasks need other targets (a class at every position, or a real number) and the paper's
protocol: the synthetic test set is evaluated every ``eval_every`` optimiser steps and at each epoch's end,
and training stops at the first evaluation where the task counts as solved (paper 000 Tab. 2: 100 %
accuracy for copy memory, MSE <= 1e-4 for the adding problem). There is no validation split and no model
selection: the reported numbers are those of the last evaluation (the stopping one when solved), as in the
paper and Bai et al. 2018. The conventions follow the trainer's: Adam, the batch order drawn from a
generator seeded with ``seed + 1`` (the model is created after ``torch.manual_seed(seed)`` by the
script), ``penalty_weight`` times ``model.penalty()``, optional gradient clipping, atomic checkpoints
(:func:`~neuralde_seq.training.save_checkpoint`), and on a non-finite loss or gradient no step is taken,
the last good checkpoint is restored and :class:`~neuralde_seq.training.TrainingDiverged` is raised.

Checkpoint (``checkpoint_path``): written before training and after every evaluation. Besides the model
and optimiser it holds, in ``config``, the run's settings (``"run"``) and what resuming needs
(``"progress"``: step, epoch, position in the epoch, the batch-order generator's state at the epoch's
start, torch's global RNG state, elapsed training time, history). ``resume=True`` continues from it; on
the CPU with a fixed thread count the resumed run takes the same steps as an uninterrupted one.
"""
from __future__ import annotations

import argparse
import math
import platform
import time
from pathlib import Path
from typing import Callable

import torch
from tqdm import tqdm

from neuralde_seq.models import MODEL_NAMES
from neuralde_seq.training import TrainingDiverged, load_checkpoint, save_checkpoint

__all__ = ["train_stress_task", "paper_setting", "parse_model_options", "environment", "batched"]

# Settings the script may change between an interrupted run and its resumption.
RESUMABLE_DIFFERENCES = ("max_minutes", "resume", "no_progress", "threads", "epochs")


def stress_argument_parser(doc: str, *, length_help: str, n_train: int, lr: float,
                           eval_every: int) -> argparse.ArgumentParser:
    """The command-line options both stress-task scripts share; each script adds its task's own."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=1000, help=length_help)
    parser.add_argument("--model", default="ckcnn", choices=MODEL_NAMES)
    parser.add_argument("--set", dest="model_options", action="append", default=[], metavar="KEY=VALUE",
                        help="model constructor argument (repeatable), e.g. --set hidden=16")
    parser.add_argument("--omega-0", type=float, default=None, help="CKCNN ω0 (default: the paper's for this T)")
    parser.add_argument("--epochs", type=int, default=None, help="default: the paper's limit for this T")
    parser.add_argument("--n-train", type=int, default=n_train)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--grad-clip", type=float, default=None)
    parser.add_argument("--penalty-weight", type=float, default=0.0, help="weight of model.penalty() (kernel L2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=eval_every, help="optimiser steps between test evaluations")
    parser.add_argument("--max-minutes", type=float, default=None, help="stop at the first evaluation after this")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def paper_setting(table: dict[int, float], length: int) -> tuple[float, int]:
    """The paper's value for ``length``, or for the paper length nearest to it on a log scale.

    Returns (value, the paper length it was taken from).
    """
    nearest = min(table, key=lambda paper_length: abs(math.log(paper_length / length)))
    return table[nearest], nearest


def parse_model_options(items: list[str]) -> dict:
    """``["hidden=16", "conv=fft"]`` → ``{"hidden": 16, "conv": "fft"}`` (values parsed as YAML scalars)."""
    import yaml

    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"model options are KEY=VALUE, got {item!r}")
        options[key.strip()] = yaml.safe_load(value)
    return options


def environment() -> dict:
    return {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "machine": platform.machine()}


def batched(inputs, batch_size: int):
    """Yield (index, inputs[index]) over every sample in order; the last batch may be smaller."""
    n = len(inputs)
    for start in range(0, n, batch_size):
        index = torch.arange(start, min(start + batch_size, n))
        yield index, inputs[index]


def _finite(tensors) -> bool:
    flags = [torch.isfinite(t).all() for t in tensors]
    return bool(torch.stack(flags).all()) if flags else True


def train_stress_task(model: torch.nn.Module, *, forward: Callable, loss_fn: Callable, evaluate: Callable,
                      solved: Callable[[dict], bool], describe: Callable[[dict], str], train_inputs,
                      train_targets: torch.Tensor, epochs: int, batch_size: int, lr: float, seed: int,
                      eval_every: int, checkpoint_path: str | Path, run_config: dict, resume: bool = False,
                      max_minutes: float | None = None, grad_clip: float | None = None,
                      penalty_weight: float = 0.0, progress: bool = True) -> dict:
    """Train ``model`` with Adam until the task is solved, ``epochs`` end or ``max_minutes`` pass.

    Arguments:
        model: the model, created after ``torch.manual_seed(seed)``.
        forward: ``forward(model, inputs_batch)`` → outputs the loss reads.
        loss_fn: ``loss_fn(outputs, targets_batch)`` → scalar training loss (mean over the batch).
        evaluate: ``evaluate(model)`` → dict of test metrics (floats/ints) over every test sample; called
            in eval mode under ``torch.no_grad``.
        solved: ``solved(metrics)`` → whether the task counts as solved.
        describe: ``describe(metrics)`` → one line for the log.
        train_inputs: sliceable by a LongTensor of sample indices (Observations or Control), N samples.
        train_targets: (N, ...) targets, sliced the same way.
        epochs, batch_size, lr, seed, eval_every: see the module docstring.
        checkpoint_path: where the checkpoint lives. run_config: the run's settings (stored; compared on
            resume). resume: continue from the checkpoint. max_minutes: wall-time limit of this call.
        grad_clip: max gradient norm, or None. penalty_weight: weight of ``model.penalty()``.

    Returns a dict: ``history`` (one record per evaluation: epoch, step, train_loss since the last
    evaluation, train_seconds, then the test metrics prefixed ``test_``), ``final`` (the last record),
    ``solved_at`` (the first solved record or None), ``steps``, ``stopped_by`` ("solved", "epochs" or
    "time").
    """
    for name, value in (("epochs", epochs), ("batch_size", batch_size), ("eval_every", eval_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    if penalty_weight > 0 and not callable(getattr(model, "penalty", None)):
        raise ValueError(f"penalty_weight={penalty_weight} but {type(model).__name__} has no penalty() method")
    if len(train_inputs) != train_targets.shape[0]:
        raise ValueError(f"train_inputs holds {len(train_inputs)} samples but train_targets {train_targets.shape[0]}")
    checkpoint_path = Path(checkpoint_path)
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.Adam(params, lr=lr)
    n_train = train_targets.shape[0]
    order_generator = torch.Generator().manual_seed(seed + 1)

    state = {"step": 0, "epoch": 1, "position": 0, "order_state": order_generator.get_state(),
             "rng_state": torch.get_rng_state(), "train_seconds": 0.0, "history": [], "solved_at": None}
    if resume:
        if not checkpoint_path.exists():
            raise FileNotFoundError(f"resume: no checkpoint at {checkpoint_path}")
        checkpoint = load_checkpoint(checkpoint_path, model, optimiser)
        saved = checkpoint["config"]["run"]
        differing = sorted(k for k in set(saved) | set(run_config)
                           if k not in RESUMABLE_DIFFERENCES and saved.get(k) != run_config.get(k))
        if differing:
            raise ValueError(f"resume: the checkpoint {checkpoint_path} was written with other settings: "
                             + ", ".join(f"{k} {saved.get(k)!r} there, {run_config.get(k)!r} now" for k in differing))
        state.update(checkpoint["config"]["progress"])
        torch.set_rng_state(state["rng_state"])

    def save(metrics: dict) -> None:
        state["rng_state"] = torch.get_rng_state()
        save_checkpoint(checkpoint_path, model=model, optimizer=optimiser, epoch=state["epoch"], metrics=metrics,
                        config={"run": run_config, "progress": dict(state)})

    if not resume:
        save({})

    def diverge(reason: str):
        optimiser.zero_grad(set_to_none=True)
        restored = load_checkpoint(checkpoint_path, model, optimiser)
        message = (f"training diverged at epoch {state['epoch']}, optimiser step {state['step'] + 1}: {reason}. "
                   f"Restored the last good checkpoint (step {restored['config']['progress']['step']}) from "
                   f"{checkpoint_path}. Try a lower learning rate or gradient clipping (--grad-clip).")
        raise TrainingDiverged(message, epoch=state["epoch"], step=state["step"] + 1, reason=reason,
                               checkpoint_path=str(checkpoint_path), checkpoint_epoch=restored["epoch"],
                               history={"records": state["history"]})

    def run_evaluation(epoch: int, loss_sum: float, loss_batches: int) -> dict:
        model.eval()
        with torch.no_grad():
            metrics = evaluate(model)
        model.train()
        record = {"epoch": epoch, "step": state["step"],
                  "train_loss": loss_sum / loss_batches if loss_batches else None,
                  "train_seconds": state["train_seconds"], **{f"test_{k}": v for k, v in metrics.items()}}
        state["history"].append(record)
        tqdm.write(f"epoch {epoch} step {state['step']}: train loss "
                   f"{'-' if record['train_loss'] is None else format(record['train_loss'], '.5g')}, "
                   f"{describe(metrics)} ({state['train_seconds'] / 60:.1f} min training)")
        if state["solved_at"] is None and solved(metrics):
            state["solved_at"] = record
        return metrics

    wall_start = time.perf_counter()
    # A solved run stays solved; a run that used up its epochs continues if resumed with more of them.
    stopped_by = "solved" if state["solved_at"] is not None else None
    model.train()
    while stopped_by is None and state["epoch"] <= epochs:
        epoch = state["epoch"]
        order_generator.set_state(state["order_state"])
        order = torch.randperm(n_train, generator=order_generator)
        bar = tqdm(range(state["position"], n_train, batch_size), desc=f"epoch {epoch}", disable=not progress,
                   leave=False, dynamic_ncols=True)
        loss_sum, loss_batches = 0.0, 0
        for start in bar:
            t0 = time.perf_counter()
            index = order[start:start + batch_size]
            loss = loss_fn(forward(model, train_inputs[index]), train_targets[index])
            total = loss + penalty_weight * model.penalty() if penalty_weight > 0 else loss
            if not torch.isfinite(total):
                bar.close()
                diverge(f"non-finite training loss ({total.item()})")
            optimiser.zero_grad(set_to_none=True)
            total.backward()
            if not _finite([p.grad for p in params if p.grad is not None]):
                bar.close()
                diverge(f"non-finite gradient (loss was {total.item():.6g})")
            if grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            optimiser.step()
            state["train_seconds"] += time.perf_counter() - t0
            state["step"] += 1
            state["position"] = start + batch_size
            loss_sum += loss.item()
            loss_batches += 1
            bar.set_postfix(loss=f"{loss.item():.4g}")
            end_of_epoch = state["position"] >= n_train
            if end_of_epoch:  # the next epoch's order is drawn from the generator as it is now
                state["epoch"], state["position"] = epoch + 1, 0
                state["order_state"] = order_generator.get_state()
            if state["step"] % eval_every == 0 or end_of_epoch:
                if not _finite([p.detach() for p in params]):
                    bar.close()
                    diverge("non-finite parameter")
                metrics = run_evaluation(epoch, loss_sum, loss_batches)
                loss_sum, loss_batches = 0.0, 0
                if state["solved_at"] is not None:
                    stopped_by = "solved"
                elif max_minutes is not None and time.perf_counter() - wall_start > 60 * max_minutes:
                    stopped_by = "time"
                save(metrics)
            if stopped_by is not None:
                break
        bar.close()
    if stopped_by is None:  # resumed a run whose epochs were already all done
        stopped_by = "epochs"
    history = state["history"]
    return {"history": history, "final": history[-1] if history else None, "solved_at": state["solved_at"],
            "steps": state["step"], "stopped_by": stopped_by, "environment": environment()}
