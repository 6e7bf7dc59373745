"""The ``neuralde-seq`` command.

``neuralde-seq`` with no arguments runs ``compare``: the three CT-FWP CDE models (Hebb, Oja, Delta)
trained and tested on the embedded JapaneseVowels data with 30 % of each sample's observations
dropped. Protocol:

1. load the official UEA train (270) / test (370) split shipped in the package;
2. drop ``--drop-rate`` of every sample's time points (``drop_observations``), in both train and
   test (seeds ``--seed`` and ``--seed + 1``);
3. split the official train set 85/15 stratified into train/validation (seed ``--seed``);
4. standardise every channel with the statistics of the new training part;
5. for each model: build its inputs with ``model_inputs(name, ...)`` (once per split), create it with
   ``create_model``, train with ``train_classifier`` (best validation checkpoint), evaluate on test.

Steps 1-4 are the ``japanese-vowels`` task of :mod:`neuralde_seq.tasks` and step 5 is
:func:`neuralde_seq.training.runner.fit_and_evaluate`, the very code ``neuralde-seq bench`` runs.

Outputs under ``--out`` (default ``results/compare``): ``results.json``, ``results.md`` and
``checkpoints/<model>.pt`` (plus ``<model>.last.pt``, the resume checkpoint).

``neuralde-seq bench CONFIG`` runs a benchmark config instead (see ``neuralde-seq bench --help`` and
docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path
from typing import Sequence

# Defaults of `neuralde-seq compare`, kept in one place (tuned so the whole run takes < 10 min on 2 CPU
# cores). `model_options` maps a model name to keyword arguments of `create_model` (fast weight models
# not listed get `fast_weight_options`); `training_options` maps a model name to the training settings
# it changes (epochs, lr, penalty_weight), unless given on the command line.
_FAST_WEIGHT_OPTIONS = {"d_model": 32, "n_heads": 4, "d_ff": 64}
DEFAULT_COMPARE_CONFIG: dict = {
    "models": ("hebb-cde", "oja-cde", "delta-cde", "ncde", "ckcnn"),
    "epochs": 25,
    "lr": 3e-3,
    "batch_size": 32,
    "eval_batch_size": 128,
    "seed": 0,
    "drop_rate": 0.3,
    "val_fraction": 0.15,
    "weight_decay": 0.0,
    "grad_clip": None,
    "patience": None,
    # Small models suit the 270 training utterances and keep the whole job within minutes on 2 cores.
    "fast_weight_options": _FAST_WEIGHT_OPTIONS,
    # CKCNN: the kernel's relative positions are scaled so that the longest JapaneseVowels utterance
    # (29 points on the index grid) spans the kernel network's input range; ω0 as for short sequences.
    "model_options": {"ckcnn": {"hidden": 32, "omega_0": 10.0, "horizon": 28.0}},
    "training_options": {"ckcnn": {"epochs": 30}},
}

_DTYPES = {"float32": "float32", "float64": "float64"}


def _parse_models(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("--models needs at least one model name")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neuralde-seq",
        description="Continuous-time sequence models on irregularly sampled time series. "
        "Without a subcommand, runs `compare`.",
    )
    sub = parser.add_subparsers(dest="command")
    cfg = DEFAULT_COMPARE_CONFIG
    cmp = sub.add_parser(
        "compare",
        help="train and test Hebb/Oja/Delta CT-FWP CDEs on JapaneseVowels with dropped observations",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmp.add_argument("--models", type=_parse_models, default=tuple(cfg["models"]),
                     help=f"comma-separated model names (default: {','.join(cfg['models'])})")
    cmp.add_argument("--epochs", type=int, default=cfg["epochs"], help="training epochs (default: %(default)s)")
    cmp.add_argument("--drop-rate", type=float, default=cfg["drop_rate"],
                     help="fraction of each sample's time points dropped, in [0, 1) (default: %(default)s)")
    cmp.add_argument("--seed", type=int, default=cfg["seed"],
                     help="seed of the drop, the split, model initialisation and batch order (default: %(default)s)")
    cmp.add_argument("--out", type=Path, default=Path("results/compare"),
                     help="output folder (default: %(default)s)")
    cmp.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: %(default)s)")
    cmp.add_argument("--dtype", choices=sorted(_DTYPES), default="float32",
                     help="floating point type of data and models (default: %(default)s)")
    cmp.add_argument("--lr", type=float, default=cfg["lr"], help="learning rate (default: %(default)s)")
    cmp.add_argument("--batch-size", type=int, default=cfg["batch_size"], help="batch size (default: %(default)s)")
    cmp.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    cmp.add_argument("--solver", default=None,
                     help="solver method of the fast weight models, e.g. rk4 (their default), dopri5 or exact "
                          "(closed-form steps; log-signature models: hebb-rde, oja-rde, delta-rde, delta-post-rde)")
    cmp.add_argument("--threads", type=int, default=1,
                     help="CPU threads for torch (default: %(default)s: these small models run fastest on one, "
                          "and a busy machine does not slow them down by thread contention)")
    bench = sub.add_parser(
        "bench",
        help="run a benchmark config (tasks/configs/*.yaml): models x seeds, ours vs paper",
        description="Train every model row of a YAML benchmark config with every seed (early stopping on "
                    "validation, best-validation checkpoint), evaluate on every test sample and write per-run "
                    "JSON/CSV, an aggregated results.md/results.json (mean ± std over seeds beside the paper's "
                    "number) and curves.png/summary.png. Config schema: docs/benchmarks.md.",
    )
    bench.add_argument("config", type=Path, help="YAML config file")
    bench.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config entry, e.g. --set training.epochs=1 --set task_options.drop_rate=0.5 "
                            "(values parsed as YAML; repeatable)")
    bench.add_argument("--models", type=_parse_models, default=None,
                       help="comma-separated row labels or model names to run (default: every row)")
    bench.add_argument("--seeds", type=_parse_seeds, default=None, help="comma-separated seeds (default: the config's)")
    bench.add_argument("--out", type=Path, default=None, help="output folder (default: results/<config name>)")
    bench.add_argument("--resume", action="store_true",
                       help="skip finished runs and resume interrupted ones from their last checkpoint")
    bench.add_argument("--max-steps", type=int, default=None,
                       help="stop every run after N optimizer steps (smoke test of a config)")
    bench.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: %(default)s)")
    bench.add_argument("--dtype", choices=sorted(_DTYPES), default="float32",
                       help="floating point type of data and models (default: %(default)s)")
    bench.add_argument("--threads", type=int, default=1, help="CPU threads for torch (default: %(default)s)")
    bench.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    return parser


def _parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds):
        raise argparse.ArgumentTypeError(f"--seeds needs non-negative integers, got {text!r}")
    return seeds


def run_bench(args: argparse.Namespace) -> dict:
    """``neuralde-seq bench``: :func:`neuralde_seq.training.runner.run_benchmark` with the parsed arguments."""
    from .training.runner import load_config, run_benchmark

    out = args.out
    if out is None:
        name = load_config(args.config).get("name")
        out = Path("results") / str(name or args.config.stem)
    return run_benchmark(args.config, out_dir=out, overrides=args.overrides, models=args.models, seeds=args.seeds,
                         max_steps=args.max_steps, resume=args.resume, progress=not args.no_progress,
                         device=args.device, dtype=args.dtype, threads=args.threads)


def run_compare(
    models: Sequence[str] | None = None,
    *,
    epochs: int | None = None,
    drop_rate: float | None = None,
    seed: int | None = None,
    out: str | Path = "results/compare",
    device: str = "cpu",
    dtype: str = "float32",
    lr: float | None = None,
    batch_size: int | None = None,
    progress: bool = True,
    config: dict | None = None,
    threads: int | None = None,
    solver: str | None = None,
) -> dict:
    """Run the comparison (see the module docstring). Returns the results dict also written to JSON.

    Arguments left as None take their value from ``DEFAULT_COMPARE_CONFIG`` (merged with ``config``).
    ``solver`` (a :class:`~neuralde_seq.solvers.SolverOptions` method name) applies to the fast weight models.
    """
    import torch

    from .models import FAST_WEIGHT_MODEL_NAMES, MODEL_NAMES, control_options
    from .tasks import load_task
    from .training import format_table, write_json, write_table
    from .training.runner import fit_and_evaluate

    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        torch.set_num_threads(threads)
    cfg = {**DEFAULT_COMPARE_CONFIG, **dict(config or {})}
    explicit = set()  # training settings given explicitly apply to every model
    for key, value in (("models", models), ("epochs", epochs), ("drop_rate", drop_rate), ("seed", seed),
                       ("lr", lr), ("batch_size", batch_size)):
        if value is not None:
            cfg[key] = value
            explicit.add(key)
    cfg["models"] = tuple(cfg["models"])
    unknown = [m for m in cfg["models"] if m not in MODEL_NAMES]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; known models: {', '.join(MODEL_NAMES)}")
    if not 0.0 <= float(cfg["drop_rate"]) < 1.0:
        raise ValueError(f"drop_rate must lie in [0, 1), got {cfg['drop_rate']}")
    torch_device = torch.device(device)
    torch_dtype = getattr(torch, _DTYPES[dtype])
    out = Path(out)
    ckpt_dir = out / "checkpoints"
    seed_ = int(cfg["seed"])

    # ---- data: the japanese-vowels task protocol (neuralde_seq.tasks), shared with `neuralde-seq bench` ----
    data = load_task("japanese-vowels", seed=seed_, dtype=torch_dtype, drop_rate=cfg["drop_rate"],
                     val_fraction=cfg["val_fraction"])
    train, val, test = data.splits
    splits = type(data.splits)(*(ds.to(device=torch_device) for ds in data.splits))
    data_info = {
        "dataset": "JapaneseVowels (UEA, embedded)",
        "num_train": len(train), "num_val": len(val), "num_test": len(test),
        "channels": train.num_channels, "classes": train.num_classes,
    }

    rows, per_model = [], {}
    for name in cfg["models"]:
        opts = dict(control_options(name))
        default_options = cfg["fast_weight_options"] if name in FAST_WEIGHT_MODEL_NAMES else {}
        model_kwargs = dict(cfg["model_options"].get(name, default_options))
        training = {"epochs": cfg["epochs"], "lr": cfg["lr"], "penalty_weight": 0.0,
                    **{k: v for k, v in cfg["training_options"].get(name, {}).items() if k not in explicit}}
        ckpt = ckpt_dir / f"{name}.pt"
        fit = fit_and_evaluate(
            name, splits, seed=seed_, options=model_kwargs, checkpoint_path=ckpt, progress=progress, desc=name,
            solver={"method": solver} if solver is not None and name in FAST_WEIGHT_MODEL_NAMES else None,
            training={**training, "batch_size": int(cfg["batch_size"]), "eval_batch_size": int(cfg["eval_batch_size"]),
                      "weight_decay": float(cfg["weight_decay"]), "grad_clip": cfg["grad_clip"],
                      "patience": cfg["patience"], "select_on": "accuracy"},
        )
        history, test_metrics, val_metrics = fit["history"], fit["metrics"]["test"], fit["metrics"]["val"]
        spe = history["seconds_per_epoch"]
        row = {
            "model": name,
            "test_acc": test_metrics["accuracy"],
            "val_acc": val_metrics["accuracy"],
            "params": fit["params"],
            "s_per_epoch": sum(spe) / len(spe) if spe else None,
        }
        rows.append(row)
        per_model[name] = {
            **row,
            "test_loss": test_metrics["loss"], "val_loss": val_metrics["loss"],
            "best_epoch": history["best_epoch"], "epochs_run": history["epochs_run"],
            "train_seconds_total": fit["train_seconds"], "diverged": fit["diverged"], "control_options": opts,
            "model_options": model_kwargs, "training": training, "checkpoint": str(ckpt), "history": history,
        }

    table = format_table(
        rows, ["model", "test_acc", "val_acc", "params", "s_per_epoch"],
        headers=["model", "test acc", "val acc", "params", "s/epoch"],
        formats={"test_acc": ".4f", "val_acc": ".4f", "params": "d", "s_per_epoch": ".2f"},
    )
    results = {
        "command": "compare",
        "config": {**cfg, "device": str(torch_device), "dtype": dtype, "solver": solver},
        "data": data_info,
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "threads": torch.get_num_threads()},
        "models": per_model,
        "table": rows,
    }
    write_json(results, out / "results.json")
    notes = (
        f"JapaneseVowels, {cfg['drop_rate']:.0%} of each sample's observations dropped; "
        f"train/val/test = {len(train)}/{len(val)}/{len(test)}; {cfg['epochs']} epochs, lr {cfg['lr']}, "
        f"batch size {cfg['batch_size']}, seed {seed_}, device {torch_device}, {dtype}. "
        "Test and val accuracy of the best-validation checkpoint; s/epoch = training pass only."
    )
    diverged_names = [n for n, r in per_model.items() if r["diverged"]]
    if diverged_names:
        notes += f"\nDiverged (last good checkpoint reported): {', '.join(diverged_names)}."
    write_table(table, out / "results.md", title="neuralde-seq compare", notes=notes)
    print(table)
    print(f"\nwrote {out / 'results.json'} and {out / 'results.md'}")
    return results


def task_main(default_config: str | Path | None, argv: Sequence[str] | None = None, *,
              description: str | None = None) -> int:
    """Entry point of the ``tasks/<task>.py`` scripts: ``neuralde-seq bench`` with a default config.

    ``--config PATH`` picks the config (default ``default_config``); every other argument is passed to
    ``neuralde-seq bench`` (``--set``, ``--models``, ``--seeds``, ``--out``, ``--resume``, ...).
    """
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Other arguments are those of `neuralde-seq bench` (see its --help).")
    parser.add_argument("--config", type=Path, default=None if default_config is None else Path(default_config),
                        help="benchmark config (default: %(default)s)")
    args, rest = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if args.config is None:
        parser.error("give a config with --config (see tasks/configs/README.md for the available ones)")
    if not args.config.exists():
        parser.error(f"config file {args.config} does not exist (see tasks/configs/ for the available configs)")
    return main(["bench", str(args.config), *rest])


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["compare", *argv]
    args = parser.parse_args(argv)
    if args.command == "compare":
        from .models import MODEL_NAMES

        unknown = [m for m in args.models if m not in MODEL_NAMES]
        if unknown:
            parser.error(f"unknown model(s) {', '.join(unknown)}; known models: {', '.join(MODEL_NAMES)}")
        if not 0.0 <= args.drop_rate < 1.0:
            parser.error(f"--drop-rate must lie in [0, 1), got {args.drop_rate}")
        if args.solver is not None:
            from .solvers import SolverOptions

            try:
                SolverOptions(method=args.solver)
            except ValueError as error:
                parser.error(f"--solver: {error}")
        run_compare(
            args.models, epochs=args.epochs, drop_rate=args.drop_rate, seed=args.seed, out=args.out,
            device=args.device, dtype=args.dtype, lr=args.lr, batch_size=args.batch_size,
            progress=not args.no_progress, threads=args.threads, solver=args.solver,
        )
        return 0
    if args.command == "bench":
        from .training.runner import ConfigError

        if args.max_steps is not None and args.max_steps < 1:
            parser.error(f"--max-steps must be a positive integer, got {args.max_steps}")
        if not args.config.exists():
            parser.error(f"config file {args.config} does not exist")
        try:
            run_bench(args)
        except ConfigError as err:
            parser.error(f"{args.config}: {err}")
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
