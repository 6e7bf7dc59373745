"""The random-feature estimators as a user calls them, on aeon's bundled sets (issue 33; docs/benchmarks.md, "Trained
models against random features"):

- ``--part fine-tuning``: `RandomFeatureClassifier(random_state=s)` against the same with ``fine_tune=True``
  (neuralde_seq.reservoir_tuning), and which map the validation split chose;
- ``--part margin``: fine-tuning's selection margin (`FineTuning.margin`): one fine-tuning run with margin 0 per set
  and seed, the paired statistic t of its selection and both maps' test accuracy, and the mean accuracy each margin
  in MARGINS would keep (``--form grid``, the default: the suite's protocol, the grid with NaN);
- ``--part gaps``: the same series given as their kept points with their times, and as their grid with NaN at the
  dropped steps, to `RandomFeatureClassifier(random_state=s, fill_gaps=...)` (``--fill-gaps none`` shows what the
  observation knots alone cost; the default "auto" makes the two equal);
- ``--part regression``: test RMSE on aeon's regression sets (Covid3Month, CardanoSentiment) of the training mean,
  MiniRocketRegressor (`neuralde_seq.reference`: aeon's transform and a ridge, as aeon's own),
  `RandomFeatureRegressor()` (with and without fine-tuning) and `SequenceRegressor()`, each randomised one with every
  seed.

Classification data: each dataset's TRAIN and TEST files with 30 % of every series' points removed (TRAIN drop seed
0, TEST drop seed 1, `defaults_sweep.dropped`): the kept points and their times, ragged. Regression data: the files
as they are. Prints a table per part and writes ``<out>/<part>.json``.

    python benchmarks/random_features_estimators.py --part fine-tuning --seeds 0,1,2
    python benchmarks/random_features_estimators.py --part margin --datasets ACSF1,BasicMotions,ItalyPowerDemand,OSULeaf
    python benchmarks/random_features_estimators.py --part gaps --fill-gaps none --seeds 0,1
    python benchmarks/random_features_estimators.py --part regression
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aeon_datasets import DATASETS, find_data  # noqa: E402
from defaults_sweep import dropped, on_grid  # noqa: E402

REGRESSION = ("Covid3Month", "CardanoSentiment")


def _split(name: str, folder: Path):
    from neuralde_seq.data import read_file

    train = read_file(folder / name / f"{name}_TRAIN.ts")
    test = read_file(folder / name / f"{name}_TEST.ts")
    return train, test


def fine_tuning(name, folder, seeds, rows):
    from neuralde_seq.sklearn import RandomFeatureClassifier

    train, test = _split(name, folder)
    (Xtr, ytr, ttr), (Xte, yte, tte) = dropped(train, 0.3, 0), dropped(test, 0.3, 1)
    for seed in seeds:
        start = time.perf_counter()
        plain = RandomFeatureClassifier(random_state=seed).fit(Xtr, ytr, times=ttr)
        plain_seconds = time.perf_counter() - start
        start = time.perf_counter()
        tuned = RandomFeatureClassifier(random_state=seed, fine_tune=True).fit(Xtr, ytr, times=ttr)
        tuned_seconds = time.perf_counter() - start
        report = tuned.fine_tuning_
        rows.append(
            {
                "dataset": name,
                "seed": seed,
                "random_features": plain.score(Xte, yte, times=tte),
                "fine_tuned": tuned.score(Xte, yte, times=tte),
                "chosen": report["chosen"],
                "validation_start": report["start"],
                "validation_best": report["best"],
                "best_epoch": report["best_epoch"],
                "seconds": [plain_seconds, tuned_seconds],
            }
        )
        print(
            f"{name} seed {seed}: random features {rows[-1]['random_features']:.4f} ({plain_seconds:.1f} s), "
            f"fine-tuned {rows[-1]['fine_tuned']:.4f} ({tuned_seconds:.1f} s), chose {report['chosen']}",
            flush=True,
        )


MARGINS = (0.0, 0.5, 1.0, 2.0)


def margin(name, folder, seeds, rows, form):
    """Fine-tuning with ``margin=0`` (kept wherever the best epoch lowers the validation error at all), recording
    the paired statistic of the selection and both maps' test accuracy, so that the choice of every margin in
    MARGINS can be read off one run (a larger margin keeps the start on a subset of these runs)."""
    from neuralde_seq.sklearn import RandomFeatureClassifier

    train, test = _split(name, folder)
    if form == "grid":  # the suite's protocol: the grid with NaN at the dropped steps
        (Xtr, ytr), (Xte, yte) = on_grid(train, 0.3, 0), on_grid(test, 0.3, 1)
        ttr = tte = None
    else:
        (Xtr, ytr, ttr), (Xte, yte, tte) = dropped(train, 0.3, 0), dropped(test, 0.3, 1)
    for seed in seeds:
        plain = RandomFeatureClassifier(random_state=seed).fit(Xtr, ytr, times=ttr)
        tuned = RandomFeatureClassifier(random_state=seed, fine_tune={"margin": 0.0}).fit(Xtr, ytr, times=ttr)
        report = tuned.fine_tuning_
        paired = report["paired"]
        row = {
            "dataset": name,
            "seed": seed,
            "form": form,
            "random_features": plain.score(Xte, yte, times=tte),
            "fine_tuned": tuned.score(Xte, yte, times=tte),
            "chosen_at_0": report["chosen"],
            "paired": paired,
            "validation_size": report["validation_size"],
            "validation_start": report["start"],
            "validation_best": report["best"],
            "best_epoch": report["best_epoch"],
        }
        t = paired["improvement"] / paired["standard_error"] if paired and paired["standard_error"] > 0 else None
        row["t"] = t
        rows.append(row)
        print(
            f"{name} seed {seed}: random features {row['random_features']:.4f}, fine-tuned "
            f"{row['fine_tuned']:.4f} (chosen at margin 0: {report['chosen']}, t = "
            f"{'-' if t is None else f'{t:.2f}'}, {report['validation_size']} validation series)",
            flush=True,
        )


def margin_table(rows) -> str:
    """Mean test accuracy % per dataset of the map each margin keeps (the start unless the run's t exceeds it)."""
    from neuralde_seq.training.results import format_table

    names = list(dict.fromkeys(r["dataset"] for r in rows))
    table = []
    for m in MARGINS:
        line = {"margin": f"{m:g}"}
        for name in names:
            runs = [r for r in rows if r["dataset"] == name]
            kept = [
                r["fine_tuned"]
                if r["chosen_at_0"] == "fine-tuned" and r["t"] is not None and r["t"] > m
                else r["random_features"]
                for r in runs
            ]
            line[name] = f"{100 * np.mean(kept):.1f}"
        table.append(line)
    start = {"margin": "start (random features)"}
    for name in names:
        start[name] = f"{100 * np.mean([r['random_features'] for r in rows if r['dataset'] == name]):.1f}"
    return format_table([start, *table], ["margin", *names])


def gaps(name, folder, seeds, rows, fill):
    from neuralde_seq.sklearn import RandomFeatureClassifier

    train, test = _split(name, folder)
    (Xtr, ytr, ttr), (Xte, yte, tte) = dropped(train, 0.3, 0), dropped(test, 0.3, 1)
    (Gtr, _), (Gte, _) = on_grid(train, 0.3, 0), on_grid(test, 0.3, 1)
    for seed in seeds:
        kept = RandomFeatureClassifier(random_state=seed, fill_gaps=fill).fit(Xtr, ytr, times=ttr)
        grid = RandomFeatureClassifier(random_state=seed, fill_gaps=fill).fit(Gtr, ytr)
        rows.append(
            {
                "dataset": name,
                "seed": seed,
                "fill_gaps": fill,
                "kept_with_times": kept.score(Xte, yte, times=tte),
                "grid_with_nan": grid.score(Gte, yte),
            }
        )
        print(
            f"{name} seed {seed}: kept points + times {rows[-1]['kept_with_times']:.4f}, grid with NaN "
            f"{rows[-1]['grid_with_nan']:.4f}",
            flush=True,
        )


def regression(name, seeds, rows):
    """Test RMSE of each regressor on one of aeon's regression sets, the randomised ones with each seed, and the
    mean over the seeds per model (printed; rows with ``seed`` None)."""
    from aeon.datasets import load_regression

    from neuralde_seq.reference import MiniRocketRegressor
    from neuralde_seq.sklearn import RandomFeatureRegressor, SequenceRegressor

    Xtr, ytr = load_regression(name, split="train")
    Xte, yte = load_regression(name, split="test")
    # aeon's (N, C, T) as the estimators' (N, T, C)
    Xtr3, Xte3 = np.transpose(Xtr, (0, 2, 1)), np.transpose(Xte, (0, 2, 1))
    models = {
        "training mean": None,
        "MiniRocketRegressor (reference)": lambda seed: MiniRocketRegressor(random_state=seed),
        "RandomFeatureRegressor()": lambda seed: RandomFeatureRegressor(random_state=seed),
        "RandomFeatureRegressor(fine_tune=True)": lambda seed: RandomFeatureRegressor(
            random_state=seed, fine_tune=True
        ),
        "SequenceRegressor()": lambda seed: SequenceRegressor(random_state=seed),
    }
    for label, make in models.items():
        errors = []
        for seed in [None] if make is None else seeds:
            start = time.perf_counter()
            predictions = np.full(len(yte), ytr.mean()) if make is None else make(seed).fit(Xtr3, ytr).predict(Xte3)
            rmse = float(np.sqrt(np.mean((predictions - yte) ** 2)))
            errors.append(rmse)
            rows.append(
                {"dataset": name, "model": label, "seed": seed, "rmse": rmse, "seconds": time.perf_counter() - start}
            )
        print(
            f"{name} {label}: RMSE {np.mean(errors):.4f} ± {np.std(errors):.4f} over {len(errors)} seed(s) "
            f"({rows[-1]['seconds']:.1f} s a fit)",
            flush=True,
        )


def main(argv=None) -> int:
    from neuralde_seq.cli import _parse_seeds
    from neuralde_seq.files import write_text_atomic
    from neuralde_seq.input_checks import did_you_mean

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("fine-tuning", "margin", "gaps", "regression"), required=True)
    parser.add_argument(
        "--datasets", default=None, help="comma-separated (default: the suite's eight, or the regression sets)"
    )
    parser.add_argument("--seeds", type=_parse_seeds, default="0,1,2")
    parser.add_argument("--fill-gaps", default="auto", help="--part gaps: 'auto' (default) or 'none'")
    parser.add_argument(
        "--form",
        choices=("grid", "kept"),
        default="grid",
        help="--part margin: the suite's grid with NaN (default) or the kept points with times",
    )
    parser.add_argument("--data", default=None, help="folder of <Name>/<Name>_TRAIN.ts (default: aeon's)")
    parser.add_argument("--out", default="results/random_features_estimators")
    args = parser.parse_args(argv)
    seeds = list(args.seeds)
    known = REGRESSION if args.part == "regression" else DATASETS
    names = [n for n in (args.datasets or ",".join(known)).split(",") if n]
    for name in names:
        if name not in known:
            hint = did_you_mean(name, known)
            parser.error(
                f"--datasets: {name!r} is not one of {', '.join(known)} (--part {args.part})"
                + (f"; {hint}" if hint else "")
            )
    if args.fill_gaps not in ("auto", "none"):
        parser.error(f"--fill-gaps must be 'auto' or 'none', got {args.fill_gaps!r}")
    fill = None if args.fill_gaps == "none" else "auto"
    rows: list[dict] = []
    warnings.simplefilter("ignore")  # the estimators' advice on these known sets; the numbers are the point here
    folder = None if args.part == "regression" else find_data(args.data, names)
    for name in names:
        if args.part == "fine-tuning":
            fine_tuning(name, folder, seeds, rows)
        elif args.part == "margin":
            margin(name, folder, seeds, rows, args.form)
        elif args.part == "gaps":
            gaps(name, folder, seeds, rows, fill)
        else:
            regression(name, seeds, rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / f"{args.part}.json", json.dumps(rows, indent=1))
    if args.part == "margin":
        print(margin_table(rows))
    print(f"wrote {out / (args.part + '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
