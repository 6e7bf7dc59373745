"""Adding-problem stress task (paper 000, Sec. 5, Tab. 2; data App. C; settings Tab. 8, App. E.4).

Data: :func:`neuralde_seq.data.adding_problem` — two channels of length T: values uniform in [0, 1) and a
0/1 marker channel with exactly two marks (one in each half by default, ``--markers anywhere`` for Bai et
al.'s variant); the target is the sum of the two marked values, read from the model's output at the last
time step. Loss and metric: mean squared error. Always predicting 1 has expected MSE 1/6 ≈ 0.167 (paper:
"approx. 0.17"); both that value and the trivial predictor's MSE on the actual test set are printed beside
the model's. 50,000 training and 1,000 test sequences by default (Bai et al. 2018's counts; paper 000 does
not give them), drawn from one generator seeded with ``--seed``, training set first.

Model: any registered model (``--model``), built with one output: its logits (B, 1) are the prediction.
Models that read a control path (NCDE, the fast weight models) get it from
:func:`neuralde_seq.models.model_inputs`. For ``ckcnn`` the defaults are the paper's: 2 blocks, 25 hidden
channels (70,587 parameters; paper 70.59K), kernel network width 32, no dropout, no mask channel,
horizon T − 1, and ω0 and the epoch limit per length (App. E.4: T = 100, 200, 1000, 3000, 6000 → ω0 14.55,
18.19, 2.03, 2.23, 4.3 and 20, 20, 30, 50, 50 epochs; another T takes the values of the nearest of those
lengths, and says so). ``--set KEY=VALUE`` overrides any constructor argument. Adam, lr 1e-3, batch 32
(paper).

Solved (paper Tab. 2): test MSE <= 1e-4 (``--target-mse``); training stops at the first evaluation that
reaches it. Training goes through :func:`neuralde_seq.training.fit` with :class:`FinalOutputRegression`
(a :class:`~neuralde_seq.training.Regression`); the test set is evaluated every ``--eval-every`` steps and
at each epoch's end; see tasks/stress_training.py for the protocol, checkpoints, ``--resume`` (also after
``--max-minutes``) and divergence handling.

Usage (from the repository root)::

    python tasks/adding_problem.py --length 100              # CKCNN, paper settings for T = 100
    python tasks/adding_problem.py --length 100 --model gru-d --set hidden=64

Writes ``results.json``, ``results.md`` and ``checkpoint.pt`` under ``--out`` (default
``results/adding_problem_T<length>_<model>``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuralde_seq.data import ADDING_TRIVIAL_MSE, adding_problem  # noqa: E402
from neuralde_seq.data.synthetic import ADDING_MARKERS  # noqa: E402
from neuralde_seq.models import create_model  # noqa: E402
from neuralde_seq.training import Regression, TrainingDiverged, format_table, write_json, write_table  # noqa: E402
from neuralde_seq.training.input_spec import InputSpec  # noqa: E402
from neuralde_seq.training.spec import TrainingSpec  # noqa: E402
from tasks.stress_training import (  # noqa: E402
    paper_setting,
    parse_model_options,
    stress_argument_parser,
    stress_records,
    train_stress_task,
)

PAPER_OMEGA_0 = {100: 14.55, 200: 18.19, 1000: 2.03, 3000: 2.23, 6000: 4.3}
PAPER_EPOCHS = {100: 20, 200: 20, 1000: 30, 3000: 50, 6000: 50}


class FinalOutputRegression(Regression):
    """Regression (MSE by default) of the model's output 0, (B,), against the (N,) targets: the model's only
    output, or output 0 of a 2-output head built for models that insist on >= 2 classes (see ``main``).

    Metrics over every test sequence: ``mse`` (the paper's), ``mae`` and ``loss`` (= mse).
    """

    def forward(self, model: torch.nn.Module, inputs) -> torch.Tensor:
        return model(inputs)[:, 0]


def main(argv: list[str] | None = None) -> dict:
    parser = stress_argument_parser(
        __doc__, length_help="T, the sequence length", n_train=50000, lr=1e-3, eval_every=500
    )
    parser.add_argument("--markers", choices=ADDING_MARKERS, default="halves")
    parser.add_argument("--target-mse", type=float, default=1e-4, help="solved when the test MSE is at most this")
    args = parser.parse_args(argv)
    if args.length < 2:
        parser.error("--length must be at least 2")
    if not args.target_mse > 0:
        parser.error("--target-mse must be positive")
    try:
        overrides = parse_model_options(args.model_options)
    except ValueError as error:
        parser.error(str(error))
    torch.set_num_threads(args.threads)
    out = args.out or Path(f"results/adding_problem_T{args.length}_{args.model}")

    generator = torch.Generator().manual_seed(args.seed)
    train = adding_problem(args.n_train, args.length, markers=args.markers, generator=generator)
    test = adding_problem(args.n_test, args.length, markers=args.markers, generator=generator)
    # What turns the sequences into the model's input, fitted on the training set (times as generated: 0, 1, ...,
    # T - 1) and saved in the run's config (and so in its checkpoint).
    input_spec = InputSpec.fit(args.model, train)
    train_inputs, test_inputs = input_spec.transform(train), input_spec.transform(test)

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
            hidden=25,
            blocks=2,
            kernel_hidden=32,
            omega_0=omega_0,
            dropout=0.0,
            mode="grid",
            mask_channel=False,
            horizon=float(args.length - 1),
        )
    elif args.omega_0 is not None:
        parser.error("--omega-0 is a CKCNN option; use --set for other models")
    model_options.update(overrides)
    torch.manual_seed(args.seed)
    try:
        model, num_outputs = create_model(args.model, train_inputs, 1, **model_options), 1
    except ValueError as error:
        if "num_classes" not in str(error):
            raise
        # Classifiers that insist on >= 2 classes: a 2-output head whose output 0 is the prediction (the
        # other output gets no gradient and is never read).
        torch.manual_seed(args.seed)
        model, num_outputs = create_model(args.model, train_inputs, 2, **model_options), 2
        notes.append(f"{args.model} needs >= 2 outputs: built with 2, output 0 is the prediction")
    params = sum(p.numel() for p in model.parameters())
    trivial_test = float((test.targets.double() - 1).square().mean())
    print(
        f"adding problem: T={args.length}, markers {args.markers}, {args.n_train} train / {args.n_test} test, "
        f"{args.model} {params} parameters, options {model_options}, lr {args.lr}, batch {args.batch_size}, "
        f"at most {epochs} epochs, {torch.get_num_threads()} thread(s)" + "".join(f"; {n}" for n in notes)
    )
    print(f"trivial predictor (always 1): test MSE {trivial_test:.4f} (expected 1/6 = {ADDING_TRIVIAL_MSE:.4f})")

    run_config = {
        "task": "adding problem",
        "length": args.length,
        "markers": args.markers,
        "model": args.model,
        "model_options": model_options,
        "input_spec": input_spec.to_dict(),
        "num_outputs": num_outputs,
        "n_train": args.n_train,
        "n_test": args.n_test,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "epochs": epochs,
        "grad_clip": args.grad_clip,
        "penalty_weight": args.penalty_weight,
        "seed": args.seed,
        "eval_every": args.eval_every,
        "target_mse": args.target_mse,
        "max_minutes": args.max_minutes,
        "threads": args.threads,
    }

    def describe(m: dict) -> str:
        return f"test MSE {m['mse']:.3g} (trivial {trivial_test:.4f}, expected 1/6 = {ADDING_TRIVIAL_MSE:.4f})"

    command = " ".join(["python", "tasks/adding_problem.py", *(sys.argv[1:] if argv is None else argv)])
    results = {
        "task": "adding problem",
        "sequence_length": args.length,
        "config": run_config,
        "params": params,
        "notes": notes,
        "command": command,
        "trivial_mse_test": trivial_test,
        "trivial_mse_expected": ADDING_TRIVIAL_MSE,
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
            FinalOutputRegression("mse"),
            (train_inputs, train.targets),
            (test_inputs, test.targets),
            spec,
            solved=lambda m: m["mse"] <= args.target_mse,
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
    best_mse = min(r["test_mse"] for r in run["history"])
    write_json(results, out / "results.json")
    rows = [
        {
            "T": args.length,
            "model": args.model,
            "params": params,
            "epochs": final["epoch"],
            "steps": final["step"],
            "minutes": final["train_seconds"] / 60,
            "mse": final["test_mse"],
            "best": best_mse,
            "trivial": trivial_test,
            "expected": ADDING_TRIVIAL_MSE,
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
            "test MSE",
            "lowest test MSE seen",
            "trivial MSE (test)",
            "trivial MSE (1/6)",
            f"MSE <= {args.target_mse:g}",
        ],
        formats={"minutes": ".1f", "mse": ".3g", "best": ".3g", "trivial": ".4f", "expected": ".4f"},
    )
    write_table(
        table,
        out / "results.md",
        title=f"Adding problem, T = {args.length}",
        notes=f"`{command}`\n\n{args.n_train} train / {args.n_test} test sequences, markers {args.markers}; "
        f"model options {model_options}; Adam lr {args.lr}, batch {args.batch_size}, seed {args.seed}, "
        f"{torch.get_num_threads()} thread(s); stopped by: {run['stopped_by']}. Test MSE at the last "
        "evaluation; trivial = always predicting 1.",
    )
    print(table)
    return results


if __name__ == "__main__":
    main()
