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

Outputs under ``--out`` (default ``results/compare``): ``results.json``, ``results.md`` and
``checkpoints/<model>.pt``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
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
    cmp.add_argument("--threads", type=int, default=1,
                     help="CPU threads for torch (default: %(default)s: these small models run fastest on one, "
                          "and a busy machine does not slow them down by thread contention)")
    return parser


def _count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


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
) -> dict:
    """Run the comparison (see the module docstring). Returns the results dict also written to JSON.

    Arguments left as None take their value from ``DEFAULT_COMPARE_CONFIG`` (merged with ``config``).
    """
    import torch

    from .data import drop_observations, load_japanese_vowels, standardise, stratified_split
    from .models import FAST_WEIGHT_MODEL_NAMES, MODEL_NAMES, control_options, create_model, model_inputs
    from .training import TrainingDiverged, evaluate, format_table, train_classifier, write_json, write_table

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

    # ---- data ----
    train_full, test = load_japanese_vowels(dtype=torch.float64)
    train_full = drop_observations(train_full, cfg["drop_rate"], seed=seed_)
    test = drop_observations(test, cfg["drop_rate"], seed=seed_ + 1)
    train, val = stratified_split(train_full, (1.0 - cfg["val_fraction"], cfg["val_fraction"]), seed=seed_)
    train, val, test = standardise(train, val, test)
    splits = {name: ds.to(device=torch_device, dtype=torch_dtype)
              for name, ds in (("train", train), ("val", val), ("test", test))}
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
        controls = {split: model_inputs(name, ds.times, ds.values, ds.lengths) for split, ds in splits.items()}
        torch.manual_seed(seed_)
        model = create_model(name, controls["train"], num_classes=train.num_classes, **model_kwargs)
        model = model.to(device=torch_device, dtype=torch_dtype)
        if hasattr(model, "set_empirical_mean"):  # GRU-D, GRU-Δt: the training set's mean of each channel
            model.set_empirical_mean(controls["train"])
        n_params = _count_parameters(model)
        ckpt = ckpt_dir / f"{name}.pt"
        diverged = None
        t0 = time.perf_counter()
        try:
            history = train_classifier(
                model, controls["train"], splits["train"].labels, controls["val"], splits["val"].labels,
                epochs=int(training["epochs"]), lr=float(training["lr"]), batch_size=int(cfg["batch_size"]), seed=seed_,
                penalty_weight=float(training["penalty_weight"]),
                checkpoint_path=ckpt, weight_decay=float(cfg["weight_decay"]), grad_clip=cfg["grad_clip"],
                progress=progress, patience=cfg["patience"], eval_batch_size=int(cfg["eval_batch_size"]),
                config={"model": name, "control_options": opts, "model_options": model_kwargs, "training": training},
                desc=name,
            )
        except TrainingDiverged as err:
            print(f"[{name}] {err}", file=sys.stderr)
            diverged = str(err)
            history = err.history
        train_seconds = time.perf_counter() - t0
        # The model now holds the best-validation (or last good) weights.
        test_metrics = evaluate(model, controls["test"], splits["test"].labels, int(cfg["eval_batch_size"]))
        val_metrics = evaluate(model, controls["val"], splits["val"].labels, int(cfg["eval_batch_size"]))
        spe = history["seconds_per_epoch"]
        row = {
            "model": name,
            "test_acc": test_metrics["accuracy"],
            "val_acc": val_metrics["accuracy"],
            "params": n_params,
            "s_per_epoch": sum(spe) / len(spe) if spe else None,
        }
        rows.append(row)
        per_model[name] = {
            **row,
            "test_loss": test_metrics["loss"], "val_loss": val_metrics["loss"],
            "best_epoch": history["best_epoch"], "epochs_run": history["epochs_run"],
            "train_seconds_total": train_seconds, "diverged": diverged, "control_options": opts, "model_options": model_kwargs, "training": training,
            "checkpoint": str(ckpt), "history": history,
        }

    table = format_table(
        rows, ["model", "test_acc", "val_acc", "params", "s_per_epoch"],
        headers=["model", "test acc", "val acc", "params", "s/epoch"],
        formats={"test_acc": ".4f", "val_acc": ".4f", "params": "d", "s_per_epoch": ".2f"},
    )
    results = {
        "command": "compare",
        "config": {**cfg, "device": str(torch_device), "dtype": dtype},
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
        run_compare(
            args.models, epochs=args.epochs, drop_rate=args.drop_rate, seed=args.seed, out=args.out,
            device=args.device, dtype=args.dtype, lr=args.lr, batch_size=args.batch_size,
            progress=not args.no_progress, threads=args.threads,
        )
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
