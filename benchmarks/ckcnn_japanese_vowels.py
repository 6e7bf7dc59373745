"""CKCNN on the embedded JapaneseVowels data, with the protocol of ``neuralde-seq compare`` (cli.run_compare):

drop 30 % of every sample's time points (train seed 0, test seed 1), split the official train set 85/15
stratified (seed 0), standardise with the training part's statistics, train with ``train_classifier``
(Adam, cross-entropy, best-validation checkpoint) and report the test accuracy of that checkpoint.

Usage::

    python benchmarks/ckcnn_japanese_vowels.py --mode grid --hidden 32 --omega-0 10 --epochs 30
    python benchmarks/ckcnn_japanese_vowels.py --mode irregular ...

Writes ``results.json`` and ``results.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuralde_seq.data import load_japanese_vowels, stratified_split  # noqa: E402
from neuralde_seq.data.transforms import drop_observations, standardise  # noqa: E402
from neuralde_seq.models.ckconv import CKCNN  # noqa: E402
from neuralde_seq.observations import Observations  # noqa: E402
from neuralde_seq.training import evaluate, format_table, train_classifier, write_json, write_table  # noqa: E402


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("grid", "irregular"), default="grid")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--kernel-hidden", type=int, default=32)
    parser.add_argument("--omega-0", type=float, default=10.0)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--drop-rate", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results/ckcnn_japanese_vowels"))
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    train_full, test = load_japanese_vowels(dtype=torch.float64)
    train_full = drop_observations(train_full, args.drop_rate, seed=args.seed)
    test = drop_observations(test, args.drop_rate, seed=args.seed + 1)
    train, val = stratified_split(train_full, (0.85, 0.15), seed=args.seed)
    train, val, test = standardise(train, val, test)
    inputs = {
        name: Observations.from_tensors(ds.times.float(), ds.values.float(), ds.lengths)
        for name, ds in (("train", train), ("val", val), ("test", test))
    }

    torch.manual_seed(args.seed)
    options = dict(
        hidden=args.hidden,
        blocks=args.blocks,
        kernel_hidden=args.kernel_hidden,
        omega_0=args.omega_0,
        dropout=args.dropout,
        mode=args.mode,
    )
    model = CKCNN(train.num_channels, train.num_classes, **options)
    params = sum(p.numel() for p in model.parameters())
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        history = train_classifier(
            model,
            inputs["train"],
            train.labels,
            inputs["val"],
            val.labels,
            epochs=args.epochs,
            lr=args.lr,
            batch_size=args.batch_size,
            seed=args.seed,
            checkpoint_path=Path(tmp) / "ckcnn.pt",
            weight_decay=args.weight_decay,
            progress=not args.no_progress,
            eval_batch_size=128,
            desc=f"ckcnn-{args.mode}",
            threads=args.threads,
        )
    wall = time.perf_counter() - t0
    test_metrics = evaluate(model, inputs["test"], test.labels, 128)
    train_seconds = sum(history["seconds_per_epoch"])
    row = {
        "mode": args.mode,
        "hidden": args.hidden,
        "omega_0": args.omega_0,
        "params": params,
        "epochs": args.epochs,
        "best_epoch": history["best_epoch"],
        "val_acc": history["best_val_accuracy"],
        "test_acc": test_metrics["accuracy"],
        "train_s": train_seconds,
        "wall_s": wall,
    }
    results = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "model_options": options,
        "result": row,
        "test": test_metrics,
        "history": history,
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(results, args.out / "results.json")
    table = format_table(
        [row],
        list(row),
        formats={"val_acc": ".4f", "test_acc": ".4f", "train_s": ".1f", "wall_s": ".1f", "omega_0": "g"},
    )
    write_table(
        table,
        args.out / "results.md",
        title="CKCNN on JapaneseVowels (30 % dropped)",
        notes="Protocol of `neuralde-seq compare`; test accuracy of the best-validation checkpoint; "
        "train_s = training passes only, wall_s = training with validation.",
    )
    print(table)
    return results


if __name__ == "__main__":
    main()
