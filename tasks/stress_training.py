"""What the stress tasks of paper 000 (``tasks/copy_memory.py``, ``tasks/adding_problem.py``) share: their
command-line options, the paper's per-length settings, and :func:`train_stress_task`, which trains through
the toolkit's one loop, :func:`neuralde_seq.training.fit`, under the paper's protocol.

The protocol: the synthetic test set is evaluated every ``eval_every`` optimiser steps and at each epoch's
end (``fit(val=test, eval_every=...)``), and training stops at the first evaluation where the task counts
as solved (paper 000 Tab. 2: 100 % accuracy for copy memory, MSE <= 1e-4 for the adding problem;
:class:`~neuralde_seq.training.StopWhen`) or after ``--max-minutes`` (:class:`~neuralde_seq.training.TimeLimit`).
There is no validation split and no model selection: the reported numbers are those of the last
evaluation (the stopping one when solved), as in the paper and Bai et al. 2018. What is learnt is the
task's :class:`~neuralde_seq.training.Objective` (per-step cross-entropy, or MSE on the last output).
Conventions are fit's: Adam, ``torch.manual_seed(seed)`` and the batch order drawn from a generator seeded
with ``seed``, ``penalty_weight`` times ``model.penalty()``, optional gradient clipping, and on a
non-finite loss or gradient, or an exploding loss, no step is taken, the last good state is restored and
:class:`~neuralde_seq.training.TrainingDiverged` is raised.

Checkpoint (``checkpoint_path``): fit's resume checkpoint, written before training and after every
evaluation (model, optimiser, loop position, RNG states, history, the run's settings). ``resume=True``
continues from it, also after a stop by the time limit; settings other than
:data:`RESUMABLE_DIFFERENCES` must be the same. On the CPU with a fixed thread count the resumed run takes
the same steps as an uninterrupted one.
"""

from __future__ import annotations

import argparse
import math
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from neuralde_seq.models import MODEL_NAMES
from neuralde_seq.training import Callback, Objective, StopWhen, TimeLimit, fit
from neuralde_seq.training.spec import TrainingSpec, training_spec

__all__ = [
    "train_stress_task",
    "stress_records",
    "stress_argument_parser",
    "paper_setting",
    "parse_model_options",
    "environment",
    "RESUMABLE_DIFFERENCES",
]

# Settings the script may change between an interrupted run and its resumption.
RESUMABLE_DIFFERENCES = ("max_minutes", "resume", "no_progress", "threads", "epochs")


def stress_argument_parser(
    doc: str, *, length_help: str, n_train: int, lr: float, eval_every: int
) -> argparse.ArgumentParser:
    """The command-line options both stress-task scripts share; each script adds its task's own."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=1000, help=length_help)
    parser.add_argument("--model", default="ckcnn", choices=MODEL_NAMES)
    parser.add_argument(
        "--set",
        dest="model_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model constructor argument (repeatable), e.g. --set hidden=16",
    )
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
    """Versions, thread count and machine, stored with the results."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }


def _metrics_of(record: dict) -> dict:
    """The test metrics of one of fit's evaluation records, without fit's ``val_`` prefix."""
    return {k[4:]: v for k, v in record.items() if k.startswith("val_") and k != "val_seconds"}


def stress_records(history: dict) -> list[dict]:
    """fit's history (one column per quantity) as one record per evaluation, in the stress tasks' terms.

    Each record: ``epoch``, ``step``, ``train_loss`` (mean since the previous evaluation) and the other
    training statistics (``train_<name>``), ``train_seconds`` (training time so far, summed over the
    evaluations, resumed runs included), ``test_seconds``, then the test metrics as ``test_<name>``.
    """
    records, elapsed = [], 0.0
    for i in range(len(history["epoch"])):
        row = {
            name: column[i] if i < len(column) else None for name, column in history.items() if isinstance(column, list)
        }
        elapsed += row.get("seconds_per_epoch") or 0.0
        record = {"epoch": row["epoch"], "step": row["step"]}
        record.update({k: v for k, v in row.items() if k.startswith("train_")})
        record["train_seconds"] = elapsed
        record["test_seconds"] = row.get("val_seconds")
        record.update({f"test_{k}": v for k, v in _metrics_of(row).items()})
        records.append(record)
    return records


class _LogEvaluations(Callback):
    """One line per evaluation (the scripts' log): the step, the training loss and ``describe(metrics)``."""

    def __init__(self, describe: Callable[[dict], str]):
        self.describe = describe

    def on_evaluation(self, state, record):
        if not state.is_main:
            return
        minutes = sum(s or 0.0 for s in state.history["seconds_per_epoch"]) / 60
        loss = record.get("train_loss")
        tqdm.write(
            f"epoch {record['epoch']} step {record['step']}: train loss "
            f"{'-' if loss is None else format(loss, '.5g')}, {self.describe(_metrics_of(record))} "
            f"({minutes:.1f} min training)"
        )


def train_stress_task(
    model: torch.nn.Module,
    objective: Objective,
    train: tuple[Any, torch.Tensor],
    test: tuple[Any, torch.Tensor],
    spec: TrainingSpec | None = None,
    *,
    solved: Callable[[dict], bool],
    describe: Callable[[dict], str],
    checkpoint_path: str | Path,
    run_config: dict,
    resume: bool = False,
    max_minutes: float | None = None,
    progress: bool = True,
    **spec_fields,
) -> dict:
    """Train ``model`` with :func:`~neuralde_seq.training.fit` until the task is solved, ``epochs`` end or
    ``max_minutes`` pass (module docstring).

    Arguments:
        model: the model, created after ``torch.manual_seed(seed)``.
        objective: the task's objective (its ``metrics`` give the test metrics).
        train, test: ``(inputs, targets)``: inputs sliceable by a LongTensor of sample indices
            (Observations or a control), N samples; targets (N, ...) as ``objective`` expects.
        solved: ``solved(metrics)`` → whether the task counts as solved; ``metrics`` are the objective's
            test metrics by name (no prefix).
        describe: ``describe(metrics)`` → one line for the log.
        spec: fit's :class:`~neuralde_seq.training.spec.TrainingSpec` (its ``eval_every``: optimiser steps between
            test evaluations, required; its ``threads`` None where the calling script sets torch's threads), or
            None: built from ``spec_fields`` (epochs, batch_size, lr, seed, eval_every, grad_clip, penalty_weight,
            eval_batch_size, ...; threads None unless given).
        checkpoint_path: fit's resume checkpoint. run_config: the run's settings, stored and compared on
            resume except :data:`RESUMABLE_DIFFERENCES`. resume: continue from the checkpoint (it must exist).
        max_minutes: wall-time limit of this call (stop at the first evaluation after it), or None.
        progress: tqdm bars.

    Returns a dict: ``history`` (one record per evaluation, :func:`stress_records`), ``final`` (the last
    record), ``solved_at`` (the first solved record or None), ``steps``, ``stopped_by`` ("solved",
    "epochs" or "time") and ``environment``.

    Raises :class:`~neuralde_seq.training.TrainingDiverged` (fit's, ``history`` in fit's columns; see
    :func:`stress_records`) when the run diverges, and :class:`FileNotFoundError` when ``resume`` finds no
    checkpoint.
    """
    if spec is None:  # the calling script set torch's threads (--threads)
        spec_fields = {"threads": None, **spec_fields}
    spec = training_spec(spec, spec_fields, "train_stress_task")
    if spec.eval_every is None:
        raise ValueError("train_stress_task evaluates the test set every eval_every steps: give eval_every")
    checkpoint_path = Path(checkpoint_path)
    if resume and not checkpoint_path.exists():
        raise FileNotFoundError(f"resume: no checkpoint at {checkpoint_path}")
    callbacks: list[Callback] = [
        StopWhen(lambda record: solved(_metrics_of(record)), reason="solved"),
        _LogEvaluations(describe),
    ]
    # Last: fit restores callbacks' states by position, and --max-minutes may differ on resumption.
    if max_minutes is not None:
        callbacks.append(TimeLimit(max_minutes))
    history = fit(
        model,
        objective,
        train,
        val=test,
        spec=spec,
        callbacks=callbacks,
        resume_path=checkpoint_path,
        resume=resume,
        config={k: v for k, v in run_config.items() if k not in RESUMABLE_DIFFERENCES},
        progress=progress,
    )
    records = stress_records(history)
    # StopWhen keeps the first solved evaluation (kept across a resume in the saved history); find its record.
    solved_step = history.get("solved_at", {}).get("step")
    solved_at = next((r for r in records if r["step"] == solved_step), None) if solved_step is not None else None
    return {
        "history": records,
        "final": records[-1] if records else None,
        "solved_at": solved_at,
        "steps": history["steps"],
        "stopped_by": history["stopped_by"],
        "environment": environment(),
    }
