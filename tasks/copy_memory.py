"""Copy-memory stress task (paper 000, Sec. 5, Tab. 2; data App. C; settings Tab. 8, App. E.4).

Data: :func:`neuralde_seq.data.copy_memory` — 10 symbols from {1..8}, T − 1 blanks (0), 11 markers (9);
the target is 0 at the first T + 10 positions and the 10 symbols at the last 10. One input channel (the
digit's value), 10 classes at every position, cross-entropy averaged over all positions (as Bai et al.
2018). 10,000 training and 1,000 test sequences by default (Bai et al.'s counts; paper 000 does not give
them), drawn from one generator seeded with ``--seed``, training set first.

Model: any registered model that gives an output at every time step, i.e. has ``features(inputs)``
(B, L, hidden) and a linear ``head`` (``ckcnn``, ``ccnn``); the per-step logits are ``head(features)``.
For ``ckcnn`` the defaults are the paper's: 2 blocks, 10 hidden channels, kernel network width 32, no
dropout, no mask channel (the data are complete), horizon L − 1, and ω0 and the epoch limit per length
(App. E.4: T = 100, 200, 1000, 3000, 6000 → ω0 19.20, 34.71, 68.69, 43.65, 69.97 and 50, 50, 100, 200, 300
epochs; another T takes the values of the nearest of those lengths, and says so). ``--set KEY=VALUE``
overrides any constructor argument of the model. Adam, lr 5e-4, batch 32 (paper).

Metrics on every test sequence: accuracy on the 10 recalled positions (chance 1/8) and over all positions,
the number of wrong outputs, and the mean cross-entropy over all positions and over the recalled ones.
Beside them: the cross-entropy of the "memoryless" solution (blanks everywhere right, recalled symbols
guessed uniformly), 10 · ln 8 / L over all positions and ln 8 on the recalled ones, the plateau such
runs sit on before they learn to recall. Solved (paper Tab. 2) = 100 % accuracy: training stops at the
first evaluation where the recall accuracy and the accuracy over all positions reach ``--target``
(default 1.0, every test output right). Training goes through :func:`neuralde_seq.training.fit` with
:class:`CopyMemoryObjective` (a :class:`~neuralde_seq.training.PerStepClassification`); the test set is
evaluated every ``--eval-every`` steps and at each epoch's end; see tasks/stress_training.py for the
protocol, checkpoints, ``--resume`` (also after ``--max-minutes``) and divergence handling.

Usage (from the repository root)::

    python tasks/copy_memory.py                          # T = 1000, CKCNN, paper settings
    python tasks/copy_memory.py --length 100             # T = 100 (ω0 19.20, at most 50 epochs)
    python tasks/copy_memory.py --length 100 --model ccnn --set kernel_size=120 --set norm=layer

Writes ``results.json`` (settings, every evaluation, environment), ``results.md`` and ``checkpoint.pt``
under ``--out`` (default ``results/copy_memory_T<length>_<model>``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuralde_seq.data import copy_memory  # noqa: E402
from neuralde_seq.models import create_model  # noqa: E402
from neuralde_seq.training import PerStepClassification, TrainingDiverged, format_table, write_json, write_table  # noqa: E402
from neuralde_seq.training.input_spec import InputSpec  # noqa: E402
from neuralde_seq.training.spec import TrainingSpec  # noqa: E402
from tasks.stress_training import (  # noqa: E402
    paper_setting,
    parse_model_options,
    stress_argument_parser,
    stress_records,
    train_stress_task,
)

MEMORY, NUM_SYMBOLS = 10, 8
NUM_CLASSES = NUM_SYMBOLS + 2
PAPER_OMEGA_0 = {100: 19.20, 200: 34.71, 1000: 68.69, 3000: 43.65, 6000: 69.97}
PAPER_EPOCHS = {100: 50, 200: 50, 1000: 100, 3000: 200, 6000: 300}


class CopyMemoryObjective(PerStepClassification):
    """Per-step cross-entropy over all positions (Bai et al. 2018) of the logits ``head(features(inputs))``,
    (B, L, classes) against (N, L) targets, with the copy-memory test metrics.

    Metrics over every test sequence: ``recall_acc`` (the last ``memory`` positions), ``all_acc``, the
    number of wrong outputs ``recall_errors`` / ``all_errors``, the mean cross-entropy ``loss`` over all
    positions and ``recall_loss`` over the recalled ones.

    Arguments:
        num_classes: classes at every position (blank, symbols, marker). memory: recalled positions.
    """

    metric_names = ("recall_acc", "all_acc", "recall_errors", "all_errors", "loss", "recall_loss")
    maximize = {
        "recall_acc": True,
        "all_acc": True,
        "recall_errors": False,
        "all_errors": False,
        "loss": False,
        "recall_loss": False,
    }
    default_select_on = "recall_acc"

    def __init__(self, num_classes: int = NUM_CLASSES, memory: int = MEMORY):
        super().__init__(num_classes=num_classes)
        self.memory = memory

    def forward(self, model: torch.nn.Module, inputs) -> torch.Tensor:
        # The classifiers' forward pools over time; the task needs the head at every step.
        return model.head(model.features(inputs))

    def metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict:
        targets = self._align(outputs, targets)
        losses = F.cross_entropy(outputs.float().transpose(1, 2), targets, reduction="none")  # (N, L)
        wrong = outputs.argmax(-1) != targets
        wrong_recall = int(wrong[:, -self.memory :].sum())
        n_recall, n_all = targets.shape[0] * self.memory, targets.numel()
        return {
            "recall_acc": 1 - wrong_recall / n_recall,
            "all_acc": 1 - int(wrong.sum()) / n_all,
            "recall_errors": wrong_recall,
            "all_errors": int(wrong.sum()),
            "loss": float(losses.double().mean()),
            "recall_loss": float(losses[:, -self.memory :].double().mean()),
        }


def main(argv: list[str] | None = None) -> dict:
    parser = stress_argument_parser(
        __doc__, length_help="T: T − 1 blanks; sequence length T + 20", n_train=10000, lr=5e-4, eval_every=200
    )
    parser.add_argument(
        "--target",
        type=float,
        default=1.0,
        help="solved when the recall accuracy and the accuracy over all positions reach this",
    )
    args = parser.parse_args(argv)
    if args.length < 1:
        parser.error("--length must be at least 1")
    if not 0 < args.target <= 1:
        parser.error("--target must lie in (0, 1]")
    try:
        overrides = parse_model_options(args.model_options)
    except ValueError as error:
        parser.error(str(error))
    torch.set_num_threads(args.threads)
    out = args.out or Path(f"results/copy_memory_T{args.length}_{args.model}")

    generator = torch.Generator().manual_seed(args.seed)
    train = copy_memory(args.n_train, args.length, memory=MEMORY, num_symbols=NUM_SYMBOLS, generator=generator)
    test = copy_memory(args.n_test, args.length, memory=MEMORY, num_symbols=NUM_SYMBOLS, generator=generator)
    # What turns the sequences into the model's input, fitted on the training set (times as generated: 0, 1, ...,
    # T - 1) and saved in the run's config (and so in its checkpoint).
    input_spec = InputSpec.fit(args.model, train)
    train_inputs, test_inputs = input_spec.transform(train), input_spec.transform(test)
    seq_len = train.values.shape[1]

    notes = []
    epochs = args.epochs
    if epochs is None:
        epochs, source = paper_setting(PAPER_EPOCHS, args.length)
        notes.append(f"epochs {epochs}: the paper's limit for T = {source}")
    model_options = {}
    if args.model == "ckcnn":
        omega_0 = args.omega_0
        if omega_0 is None:
            omega_0, source = paper_setting(PAPER_OMEGA_0, args.length)
            notes.append(f"ω0 {omega_0}: the paper's value for T = {source}")
        model_options = dict(
            hidden=10,
            blocks=2,
            kernel_hidden=32,
            omega_0=omega_0,
            dropout=0.0,
            mode="grid",
            mask_channel=False,
            horizon=float(seq_len - 1),
        )
    elif args.omega_0 is not None:
        parser.error("--omega-0 is a CKCNN option; use --set for other models")
    model_options.update(overrides)
    torch.manual_seed(args.seed)
    model = create_model(args.model, train_inputs, NUM_CLASSES, **model_options)
    if not (callable(getattr(model, "features", None)) and isinstance(getattr(model, "head", None), torch.nn.Linear)):
        parser.error(
            f"model {args.model!r} gives no output at every time step (features + head): copy memory "
            "needs one; use ckcnn or ccnn"
        )
    params = sum(p.numel() for p in model.parameters())
    memoryless_loss = MEMORY * math.log(NUM_SYMBOLS) / seq_len
    print(
        f"copy memory: T={args.length} (sequence length {seq_len}), {args.n_train} train / {args.n_test} test, "
        f"{args.model} {params} parameters, options {model_options}, lr {args.lr}, batch {args.batch_size}, "
        f"at most {epochs} epochs, {torch.get_num_threads()} thread(s)" + "".join(f"; {n}" for n in notes)
    )
    print(
        f"memoryless solution: cross-entropy {memoryless_loss:.5f} over all positions, ln 8 = "
        f"{math.log(NUM_SYMBOLS):.4f} on the recalled ones, recall accuracy 0.125"
    )

    run_config = {
        "task": "copy memory",
        "length": args.length,
        "model": args.model,
        "model_options": model_options,
        "input_spec": input_spec.to_dict(),
        "n_train": args.n_train,
        "n_test": args.n_test,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "epochs": epochs,
        "grad_clip": args.grad_clip,
        "penalty_weight": args.penalty_weight,
        "seed": args.seed,
        "eval_every": args.eval_every,
        "target": args.target,
        "max_minutes": args.max_minutes,
        "threads": args.threads,
    }

    def describe(m: dict) -> str:
        return (
            f"test loss {m['loss']:.5f} (memoryless {memoryless_loss:.5f}), recall acc {m['recall_acc']:.4f}, "
            f"all acc {m['all_acc']:.6f}, errors {m['recall_errors']}/{m['all_errors']} (recall/all)"
        )

    command = " ".join(["python", "tasks/copy_memory.py", *(sys.argv[1:] if argv is None else argv)])
    results = {
        "task": "copy memory",
        "sequence_length": seq_len,
        "config": run_config,
        "params": params,
        "notes": notes,
        "command": command,
        "memoryless_loss": memoryless_loss,
        "memoryless_recall_loss": math.log(NUM_SYMBOLS),
    }
    # torch's threads are the script's (--threads), set above
    spec = TrainingSpec(
        epochs=epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        eval_every=args.eval_every,
        grad_clip=args.grad_clip,
        penalty_weight=args.penalty_weight,
        eval_batch_size=4 * args.batch_size,
        threads=None,
    )
    try:
        run = train_stress_task(
            model,
            CopyMemoryObjective(),
            (train_inputs, train.targets),
            (test_inputs, test.targets),
            spec,
            solved=lambda m: min(m["recall_acc"], m["all_acc"]) >= args.target,
            describe=describe,
            checkpoint_path=out / "checkpoint.pt",
            run_config=run_config,
            resume=args.resume,
            max_minutes=args.max_minutes,
            progress=not args.no_progress,
        )
    except TrainingDiverged as error:
        results.update(diverged=str(error), history=stress_records(error.history))
        write_json(results, out / "results.json")
        print(error, file=sys.stderr)
        raise SystemExit(1) from None
    results.update(solved=run["solved_at"] is not None, **run)
    final = run["final"]
    write_json(results, out / "results.json")
    rows = [
        {
            "T": args.length,
            "model": args.model,
            "params": params,
            "epochs": final["epoch"],
            "steps": final["step"],
            "minutes": final["train_seconds"] / 60,
            "recall_acc": final["test_recall_acc"],
            "all_acc": final["test_all_acc"],
            "errors": f"{final['test_recall_errors']} / {final['test_all_errors']}",
            "loss": final["test_loss"],
            "memoryless": memoryless_loss,
            "solved": "yes" if run["solved_at"] else "no",
        }
    ]
    table = format_table(
        rows,
        list(rows[0]),
        headers=[
            "T",
            "model",
            "params",
            "epochs",
            "steps",
            "train min",
            "test recall acc",
            "test acc (all)",
            "errors (recall / all)",
            "test CE",
            "memoryless CE",
            "100 %",
        ],
        formats={"minutes": ".1f", "recall_acc": ".4f", "all_acc": ".6f", "loss": ".3g", "memoryless": ".3g"},
    )
    write_table(
        table,
        out / "results.md",
        title=f"Copy memory, T = {args.length}",
        notes=f"`{command}`\n\n{args.n_train} train / {args.n_test} test sequences of length {seq_len}; "
        f"model options {model_options}; Adam lr {args.lr}, batch {args.batch_size}, seed {args.seed}, "
        f"{torch.get_num_threads()} thread(s); stopped by: {run['stopped_by']}. Recall acc = accuracy "
        f"on the 10 recalled positions of every test sequence; errors = wrong outputs among the "
        f"{args.n_test * MEMORY} recalled and {args.n_test * seq_len} outputs in all; CE = mean "
        "cross-entropy over all positions.",
    )
    print(table)
    return results


if __name__ == "__main__":
    main()
