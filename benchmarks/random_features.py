"""Random-feature (reservoir) mode on aeon's bundled UCR datasets: which reservoir, which features, which width.

Every row is `neuralde_seq.sklearn.RandomFeatureClassifier` (a frozen random model's features, a ridge readout with
its penalty chosen by leave-one-out error): one forward pass over the series, no training of the reservoir. A row
(reservoir, width, options) is fitted once with the union of its features; each feature set's accuracy is then the
readout refitted on that set's columns (`RandomFeatures.feature_slices_`): the same numbers as a classifier built
with that set alone (same seed: the same reservoir draw and thresholds), at the cost of one forward pass per row.

Protocol (the benchmark protocol of benchmarks/aeon_datasets.py and the reference numbers of issue 23): the files'
own TRAIN/TEST split, the whole TRAIN file for fitting (the readout needs no validation split: it chooses its penalty
by leave-one-out error), 30 % of every series' time points dropped (TRAIN with drop seed 0, TEST with drop seed 1,
`neuralde_seq.data.protocols.local_files_splits`), channels standardised with the training statistics (by the
estimator), times the observation indices. One torch thread.

Output (``--out``, default ``results/random_features``): ``results.json`` (every cell: accuracy, seconds for the
forward passes over TRAIN and TEST, seconds for the readout, number of features, chosen penalty; every reference run)
and ``results.md``: rows = reservoir / width / features, columns = datasets, each cell "test accuracy % (seconds)",
where the seconds are the row's whole fit and prediction (forward passes with all of the row's features, plus this
set's readout); the best cell per dataset in bold; the reference methods (``--references``, default MiniRocket) fitted
and scored on the same series in the same run; and the wall-time table: the default row's seconds against
MiniRocket's per dataset and their ratio, each timed after a warm-up fit that takes numba's one-off compilation
(MiniRocket's, and the fused reservoir kernel's, `neuralde_seq.ops.reservoir_features`), which is reported apart.

Examples::

    python benchmarks/random_features.py                 # the defaults beside MiniRocket, the suite, 3 seeds (~1 min)
    python benchmarks/random_features.py --rows all --seeds 0 --references ''      # the whole grid
    python benchmarks/random_features.py --references minirocket,multirocket-hydra,quant
    python benchmarks/random_features.py --datasets GunPoint --rows slice-diag-1024,logsig-3 --out /tmp/rf
    python benchmarks/random_features.py --rows oscillators-3072-fast33 --feature-sets ppv,ppv+mpv
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from machine import code_version, cpu_name

from neuralde_seq.files import write_text_atomic

DATASETS = ("ACSF1", "OSULeaf", "ArrowHead", "GunPoint")
# The proxy suite: every classification set aeon bundles (docs/benchmarks.md, "The proxy suite").
SUITE = (
    "ACSF1",
    "ArrowHead",
    "BasicMotions",
    "GunPoint",
    "ItalyPowerDemand",
    "JapaneseVowels",
    "OSULeaf",
    "PickupGestureWiimoteZ",
)
# The defaults' and the references' fit and prediction are run this many times, their median time reported: a
# 0.1 s run on a shared machine varies by a third from one run to the next.
REPEATS = 3
# Practitioners' references timed beside the rows (neuralde_seq.reference registry names).
REFERENCES = ("minirocket", "multirocket-hydra", "quant")
MODEL_FEATURES = ("final", "mean", "times", "ppv", "mpv", "max", "values", "levels")
LOGSIG_FEATURES = ("final", "times", "windows", "values")
FEATURE_SETS = (
    "final",
    "mean",
    "times",
    "final+mean+times",
    "ppv",
    "ppv+mean",
    "ppv+mean+times",
    "mean+values",
    "ppv+values",
    "ppv+mean+values",
    "final+mean+times+ppv+values",
    "mpv",
    "ppv+mpv",
    "ppv+max",
    "ppv+mpv+max",
    "levels",
    "ppv+mpv+levels",
)
LOGSIG_SETS = ("final", "times", "windows", "final+windows", "times+windows", "final+values", "final+windows+values")

EXACT = {"solver": {"method": "exact"}}
# label -> RandomFeatureClassifier options (besides features). "defaults" is the estimator with every default,
# fitted and scored end to end (its seconds: fit + predict).
ROWS = {
    "defaults": {},
    "slice-diag-256": dict(reservoir="slice-diag", width=256),
    "slice-diag-1024": dict(reservoir="slice-diag", width=1024),
    "slice-diag-4096": dict(reservoir="slice-diag", width=4096),
    "slice-diag-1024-nomemory": dict(reservoir="slice-diag", width=1024, timescales=None),
    "slice-diag-1024-ppv3": dict(reservoir="slice-diag", width=1024, num_biases=3),
    "slice-block-256": dict(reservoir="slice-block", width=256, memory="decay"),
    "slice-block-1024": dict(reservoir="slice-block", width=1024, memory="decay"),
    # oscillators spread over all periods only (the defaults before fast units: fast_share 0)
    "oscillators-256": dict(reservoir="slice-block", width=256, memory="oscillation", fast_share=0.0),
    "oscillators-1024": dict(reservoir="slice-block", width=1024, memory="oscillation", fast_share=0.0),
    "oscillators-2048": dict(reservoir="slice-block", width=2048, memory="oscillation", fast_share=0.0),
    # a share of fast, nearly memoryless oscillators taken from 1,024 units, or added to 1,024 (1,280, 1,536: the
    # defaults)
    "oscillators-1024-fast25": dict(reservoir="slice-block", width=1024, memory="oscillation", fast_share=0.25),
    "oscillators-1024-fast37": dict(reservoir="slice-block", width=1024, memory="oscillation", fast_share=0.375),
    "oscillators-1280-fast20": dict(reservoir="slice-block", width=1280, memory="oscillation", fast_share=0.2),
    "oscillators-1536-fast33": dict(reservoir="slice-block", width=1536, memory="oscillation", fast_share=1 / 3),
    # issue 35's levers on the defaults: two thresholds per unit, twice and four times the width
    "oscillators-1536-fast33-biases2": dict(
        reservoir="slice-block", width=1536, memory="oscillation", fast_share=1 / 3, num_biases=2
    ),
    "oscillators-3072-fast33": dict(reservoir="slice-block", width=3072, memory="oscillation", fast_share=1 / 3),
    "oscillators-6144-fast33": dict(reservoir="slice-block", width=6144, memory="oscillation", fast_share=1 / 3),
    "slice-dense-128": dict(reservoir="slice-dense", width=128),
    "slice-dplr-1024": dict(reservoir="slice-dplr", width=1024),
    "delta-rde-64": dict(reservoir="delta-rde", width=64, model_options=EXACT),
    "delta-rde-128": dict(reservoir="delta-rde", width=128, model_options=EXACT),
    "delta-rde-128-x4": dict(reservoir="delta-rde", width=128, model_options=EXACT, input_scale=4.0),
    "delta-cde-64": dict(reservoir="delta-cde", width=64),
    "ncde-128": dict(reservoir="ncde", width=128),
    "ncde-128-x4": dict(reservoir="ncde", width=128, input_scale=4.0),
    "logsig-2": dict(reservoir="logsignature", model_options={"depth": 2}),
    "logsig-3": dict(reservoir="logsignature", model_options={"depth": 3}),
    "logsig-4": dict(reservoir="logsignature", model_options={"depth": 4}),
    "logsig-3-16": dict(reservoir="logsignature", model_options={"depth": 3}, num_times=16),
}


def find_data(data: str | None) -> Path:
    """``--data``, else the ``datasets/data`` folder of an installed aeon (found without importing aeon)."""
    if data is not None:
        return Path(data).expanduser().resolve()
    spec = importlib.util.find_spec("aeon")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "aeon is not installed: pass --data FOLDER holding <Name>/<Name>_TRAIN.ts and _TEST.ts "
            "(pip download aeon==1.6.0 --no-deps; unzip its aeon/datasets/data)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data"


def load(folder: Path, name: str, drop_rate: float):
    """(X_train, y_train, t_train), (X_test, y_test, t_test) as numpy, the benchmark protocol's dropped points."""
    from neuralde_seq.data.protocols import local_files_splits

    train, val, test = local_files_splits(
        path=folder / name, drop_rate=drop_rate, drop_seed=0, validation_fraction=0.2, split_seed=0, dtype=torch.float64
    )
    # The whole TRAIN file in file order (the drop was made on it before the split).
    parts = [train.to_arrays(), val.to_arrays()]
    order = np.argsort(train.meta["indices"] + val.meta["indices"])
    X = [x for part in parts for x in part[0]]
    y = np.concatenate([part[1] for part in parts])
    t = [s for part in parts for s in part[2]]
    return ([X[i] for i in order], y[order], [t[i] for i in order]), test.to_arrays()


def run_defaults(train, test, seed: int) -> dict:
    """`RandomFeatureClassifier` with its defaults, fit and score timed end to end after `warm_up` (the fused
    kernel's compilation, or its load from numba's cache, timed apart)."""
    from neuralde_seq.reference import warm_up
    from neuralde_seq.sklearn import RandomFeatureClassifier

    (X, y, t), (X_test, y_test, t_test) = train, test
    start = time.perf_counter()
    warm_up("random-features", X[0].shape[1], seed=seed)
    warm = time.perf_counter() - start
    times_taken = []
    for _ in range(REPEATS):  # the same fit each time (seeded); the median time of the repeats
        start = time.perf_counter()
        clf = RandomFeatureClassifier(random_state=seed).fit(X, y, times=t)
        accuracy = clf.score(X_test, y_test, times=t_test)
        times_taken.append(time.perf_counter() - start)
    seconds = float(np.median(times_taken))
    cell = {
        "accuracy": accuracy * 100,
        "alpha": clf.alpha_,
        "features": clf.n_random_features_,
        "readout_seconds": 0.0,
        "names": "+".join(clf.feature_map_.features),
    }
    return {"forward_seconds": seconds, "warm_up_seconds": warm, "cells": {"auto": cell}}


def run_reference(name: str, train, test, seed: int) -> dict:
    """A reference method of `neuralde_seq.reference` fitted on TRAIN and scored on TEST, timed end to end after
    `warm_up` (numba's one-off compilation, timed apart)."""
    from neuralde_seq.reference import create_reference, warm_up

    (X, y, t), (X_test, y_test, t_test) = train, test
    start = time.perf_counter()
    warm_up(name, X[0].shape[1], seed=seed)
    warm = time.perf_counter() - start
    times_taken = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        accuracy = create_reference(name, seed).fit(X, y, times=t).score(X_test, y_test, times=t_test)
        times_taken.append(time.perf_counter() - start)
    return {"accuracy": accuracy * 100, "seconds": float(np.median(times_taken)), "warm_up_seconds": warm}


def run_row(options: dict, sets, train, test, seed: int) -> dict:
    """One forward pass with the union of the row's features, then one readout per feature set."""
    from neuralde_seq.random_features import RidgeReadout
    from neuralde_seq.sklearn import RandomFeatureClassifier

    if not options:
        return run_defaults(train, test, seed)
    named = {feature for name in sets for feature in name.split("+")}  # what the row's feature sets read
    union = [f for f in (LOGSIG_FEATURES if options["reservoir"] == "logsignature" else MODEL_FEATURES) if f in named]
    clf = RandomFeatureClassifier(**options, features=union, random_state=seed, n_jobs=1)
    (X, y, t), (X_test, y_test, t_test) = train, test
    start = time.perf_counter()
    F_train = clf.fit_random_features(X, y, times=t)
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    F_test = clf.random_features(X_test, times=t_test)
    test_seconds = time.perf_counter() - start
    codes = np.searchsorted(clf.classes_, y)
    test_codes = np.searchsorted(clf.classes_, y_test)
    cells = {}
    for name in sets:
        columns = np.concatenate(
            [
                np.arange(clf.feature_map_.feature_slices_[f].start, clf.feature_map_.feature_slices_[f].stop)
                for f in name.split("+")
            ]
        )
        start = time.perf_counter()
        readout = RidgeReadout(clf.alphas, classification=True).fit(F_train[:, columns], codes)
        predicted = readout.predict(F_test[:, columns]).numpy()
        readout_seconds = time.perf_counter() - start
        cells[name] = {
            "accuracy": float(np.mean(predicted == test_codes) * 100),
            "alpha": readout.alpha_,
            "features": int(len(columns)),
            "readout_seconds": readout_seconds,
        }
    return {"forward_seconds": fit_seconds + test_seconds, "cells": cells}


def markdown(results: dict, datasets) -> str:
    """rows = row label / features, columns = datasets: "accuracy % (seconds)", mean over seeds; best in bold."""
    keys = []
    for label, row in results["rows"].items():
        for name in row["sets"]:
            keys.append((label, name))
    table = {}
    for label, name in keys:
        for dataset in datasets:
            runs = results["rows"][label]["runs"].get(dataset, [])
            if not runs:
                continue
            accuracy = float(np.mean([r["cells"][name]["accuracy"] for r in runs]))
            seconds = float(np.mean([r["forward_seconds"] + r["cells"][name]["readout_seconds"] for r in runs]))
            table[label, name, dataset] = (accuracy, seconds, runs[0]["cells"][name]["features"])
    best = {d: max((v[0] for (l, n, dd), v in table.items() if dd == d), default=None) for d in datasets}
    lines = [
        "| row | features | # features | " + " | ".join(datasets) + " | mean |",
        "| --- | --- | ---: | " + " | ".join("---:" for _ in datasets) + " | ---: |",
    ]
    for label, name in keys:
        cells, accuracies, count = [], [], ""
        for dataset in datasets:
            if (label, name, dataset) not in table:
                cells.append("")
                continue
            accuracy, seconds, count = table[label, name, dataset]
            text = f"{accuracy:.1f} ({seconds:.1f} s)"
            cells.append(f"**{text}**" if accuracy == best[dataset] else text)
            accuracies.append(accuracy)
        mean = f"{np.mean(accuracies):.1f}" if len(accuracies) == len(datasets) else ""
        lines.append(f"| {label} | {name} | {count} | " + " | ".join(cells) + f" | {mean} |")
    for name, by_dataset in results["references"].items():
        cells, accuracies = [], []
        for dataset in datasets:
            runs = by_dataset.get(dataset, [])
            if not runs:
                cells.append("")
                continue
            accuracy = float(np.mean([r["accuracy"] for r in runs]))
            accuracies.append(accuracy)
            cells.append(f"{accuracy:.1f} ({np.mean([r['seconds'] for r in runs]):.1f} s)")
        mean = f"{np.mean(accuracies):.1f}" if len(accuracies) == len(datasets) else ""
        lines.append(f"| {name} (reference) | | | " + " | ".join(cells) + f" | {mean} |")
    return "\n".join(lines)


def timing(results: dict, datasets) -> str:
    """The default row's wall time against MiniRocket's, per dataset: seconds for fit and prediction (mean over
    seeds, measured one after the other in this run) and their ratio; the one-off compilations apart."""
    row = results["rows"].get("defaults")
    reference = results["references"].get("minirocket")
    if row is None or reference is None:
        return ""
    lines = [
        "| dataset | random features (defaults) s | minirocket s | ratio | compilation: random features s, "
        "minirocket s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]  # seconds: median of REPEATS, mean over seeds
    for dataset in datasets:
        ours, theirs = row["runs"].get(dataset, []), reference.get(dataset, [])
        if not ours or not theirs:
            continue
        a = float(np.mean([r["forward_seconds"] for r in ours]))
        b = float(np.mean([r["seconds"] for r in theirs]))
        warm = f"{max(r['warm_up_seconds'] for r in ours):.2f}, {max(r['warm_up_seconds'] for r in theirs):.2f}"
        lines.append(f"| {dataset} | {a:.2f} | {b:.2f} | {a / b:.2f} | {warm} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", help="folder holding <Name>/<Name>_TRAIN.ts (default: installed aeon's data)")
    parser.add_argument("--datasets", default=",".join(SUITE), help="comma-separated aeon sets (default: the suite)")
    parser.add_argument(
        "--references",
        default="minirocket",
        help=f"reference methods timed beside the rows, among {', '.join(REFERENCES)} (default "
        "minirocket; '' for none)",
    )
    parser.add_argument(
        "--rows",
        default="defaults",
        help=f"comma-separated labels among {', '.join(ROWS)}, or 'all' (default: defaults)",
    )
    parser.add_argument(
        "--feature-sets",
        default=None,
        help="comma-separated feature sets for model rows (default: all of FEATURE_SETS)",
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated reservoir seeds (default 0,1,2)")
    parser.add_argument("--drop-rate", type=float, default=0.3)
    parser.add_argument("--out", default="results/random_features")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    datasets = [d for d in args.datasets.split(",") if d]
    labels = list(ROWS) if args.rows == "all" else [r for r in args.rows.split(",") if r]
    unknown = [r for r in labels if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    model_sets = tuple(args.feature_sets.split(",")) if args.feature_sets else FEATURE_SETS
    seeds = [int(s) for s in args.seeds.split(",")]
    folder = find_data(args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    references = [r for r in args.references.split(",") if r]
    unknown = [r for r in references if r not in REFERENCES]
    if unknown:
        parser.error(f"unknown references {unknown}; known: {', '.join(REFERENCES)}")
    results = {
        "machine": {
            "cpu": cpu_name(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "code": code_version(),
            "threads": 1,
        },
        "protocol": {"drop_rate": args.drop_rate, "drop_seeds": {"train": 0, "test": 1}, "seeds": seeds},
        "rows": {},
        "references": {name: {} for name in references},
    }
    for label in labels:
        options = ROWS[label]
        sets = ["auto"] if not options else LOGSIG_SETS if options["reservoir"] == "logsignature" else model_sets
        results["rows"][label] = {"options": options, "sets": list(sets), "runs": {}}
    for dataset in datasets:
        train, test = load(folder, dataset, args.drop_rate)
        for label in labels:
            row = results["rows"][label]
            for seed in seeds:
                run = run_row(row["options"], row["sets"], train, test, seed)
                row["runs"].setdefault(dataset, []).append(run)
                best = max(row["sets"], key=lambda n: run["cells"][n]["accuracy"])
                print(
                    f"{dataset:10s} {label:26s} seed {seed}: forward {run['forward_seconds']:6.1f} s, best "
                    f"{best} {run['cells'][best]['accuracy']:.1f} %  "
                    + " ".join(f"{n}={c['accuracy']:.0f}" for n, c in run["cells"].items()),
                    flush=True,
                )
            write_text_atomic(out / "results.json", json.dumps(results, indent=1))
        for name in references:
            for seed in seeds:
                run = run_reference(name, train, test, seed)
                results["references"][name].setdefault(dataset, []).append(run)
                print(
                    f"{dataset:10s} {name:26s} seed {seed}: {run['seconds']:6.2f} s (warm-up "
                    f"{run['warm_up_seconds']:.1f} s), {run['accuracy']:.1f} %",
                    flush=True,
                )
            write_text_atomic(out / "results.json", json.dumps(results, indent=1))
    table = markdown(results, datasets)
    times = timing(results, datasets)
    if times:
        table += (
            "\n\nWall time of fit and prediction, one thread, the runs of this invocation one after the other "
            "(compilations, numba's first call in the process, apart):\n\n" + times
        )
    header = (
        f"Random-feature mode, test accuracy % (seconds: forward passes over TRAIN and TEST plus the readout, "
        f"one thread, {results['machine']['cpu']}); {int(args.drop_rate * 100)} % of points dropped, "
        f"mean over seeds {seeds}.\n\n"
    )
    write_text_atomic(out / "results.md", header + table + "\n")
    print(header + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
