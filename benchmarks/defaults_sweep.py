"""Every registry model, with nothing but the estimator's defaults, for a few training steps on each dataset of the
proxy suite (aeon's bundled classification sets, 30 % of each series' points dropped): does any start far from
O(1) logits or diverge? (Issue 23: "no registry model diverges with defaults on any suite dataset".)

Per dataset ``--series`` training series (taken from each class in turn, in the file's order) with 30 % of their
points dropped (seed 0) go through ``SequenceClassifier(name, epochs=--epochs,
batch_size=--batch, random_state=0)``; the table gives each run's first and last training loss (per epoch), ln K
for reference, and the wall time, or the error it raised. A run is flagged when a loss is not finite, when the first
loss exceeds 3 ln K (logits far from O(1) at initialisation) or when a loss exceeds 10 ln K.

    python benchmarks/defaults_sweep.py --out results/defaults_sweep            # every model, every dataset
    python benchmarks/defaults_sweep.py --datasets ACSF1 --models ncde,gru-d    # a part
    python benchmarks/defaults_sweep.py --length 2000 --datasets JapaneseVowels  # long real series (issue 33)

``--length L`` first makes every training series L points long by continuing it with series of its class
(`neuralde_seq.data.concatenated`, seed 0; the last piece cut to reach L), then drops 30 % of the points.

Writes ``results.json`` and ``results.md`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aeon_datasets import DATASETS, find_data  # noqa: E402  (the suite's datasets and where the files are)

from neuralde_seq.files import write_text_atomic


def dropped(dataset, rate: float, seed: int):
    """(X, y, times) of ``dataset`` with ``rate`` of each series' points removed (not NaN-filled: gone)."""
    X, y, times = dataset.to_arrays()
    rng = np.random.default_rng(seed)
    Xd, td = [], []
    for x, t in zip(X, times):
        keep = np.sort(rng.choice(len(x), len(x) - int(round(rate * len(x))), replace=False))
        Xd.append(x[keep])
        td.append(t[keep])
    return Xd, np.asarray(y), td


def on_grid(dataset, rate: float, seed: int):
    """(X, y) of the series `dropped` gives put back on their full grid (the observation index), NaN at the points
    it removed: the same data in the form of a regular series with missing steps."""
    full, _, _ = dataset.to_arrays()
    X, y, times = dropped(dataset, rate, seed)
    grids = []
    for x, t, f in zip(X, times, full):
        grid = np.full_like(f, np.nan)
        grid[np.round(t).astype(int)] = x
        grids.append(grid)
    return grids, y


def round_robin(labels: np.ndarray, count: int) -> np.ndarray:
    """Indices of ``count`` samples taken from each class in turn (each class's in file order)."""
    queues = [list(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    take = []
    while len(take) < min(count, len(labels)):
        for queue in queues:
            if queue and len(take) < count:
                take.append(queue.pop(0))
    return np.asarray(take)


def main(argv=None) -> int:
    from neuralde_seq import MODEL_NAMES
    from neuralde_seq.data import concatenated, read_file
    from neuralde_seq.sklearn import SequenceClassifier

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="folder of <Name>/<Name>_TRAIN.ts (default: aeon's)")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--models", default=",".join(MODEL_NAMES))
    parser.add_argument("--series", type=int, default=24, help="training series per dataset (default 24)")
    parser.add_argument("--batch", type=int, default=8, help="batch size (default 8: 3 steps per epoch)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument(
        "--length",
        type=int,
        default=None,
        help="make every series this long from series of its class (default: as in the file)",
    )
    parser.add_argument("--out", default="results/defaults_sweep")
    args = parser.parse_args(argv)
    names = [n for n in args.datasets.split(",") if n]
    models = [m for m in args.models.split(",") if m]
    folder = find_data(args.data, names)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        data = read_file(folder / name / f"{name}_TRAIN.ts")
        # the series taken first, so that --length continues each with series of its class among them
        data = data.subset(round_robin(data.labels.numpy(), args.series))
        if args.length is not None:
            data = concatenated(data, args.length, seed=0)
        X, y, times = dropped(data, 0.3, 0)
        classes = len(np.unique(y))
        for model in models:
            start = time.perf_counter()
            row = {"dataset": name, "model": model, "classes": classes, "ln_k": math.log(classes)}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    clf = SequenceClassifier(model, epochs=args.epochs, batch_size=args.batch, random_state=0)
                    clf.fit(X, y, times=times)
                losses = clf.history_["train_loss"]
                row.update(
                    first=losses[0],
                    last=losses[-1],
                    error=None,
                    flag=(not all(math.isfinite(v) for v in losses))
                    or losses[0] > 3 * math.log(classes)
                    or max(losses) > 10 * math.log(classes),
                )
            except Exception as err:  # reported, not hidden: a row of the table
                row.update(first=None, last=None, error=f"{type(err).__name__}: {str(err)[:200]}", flag=True)
            row["seconds"] = time.perf_counter() - start
            rows.append(row)
            print(
                f"{name:22s} {model:20s} "
                + (f"loss {row['first']:.3f} -> {row['last']:.3f}" if row["error"] is None else row["error"])
                + f"  ({row['seconds']:.1f} s)"
                + ("  FLAGGED" if row["flag"] else ""),
                flush=True,
            )
    write_text_atomic(out / "results.json", json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))
    lines = ["| dataset | model | ln K | first loss | last loss | s | flagged |", "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        first = "-" if r["first"] is None else f"{r['first']:.3f}"
        last = r["error"] if r["error"] else f"{r['last']:.3f}"
        lines.append(
            f"| {r['dataset']} | {r['model']} | {r['ln_k']:.2f} | {first} | {last} | {r['seconds']:.1f} | "
            f"{'yes' if r['flag'] else ''} |"
        )
    flagged = [r for r in rows if r["flag"]]
    lines += [
        "",
        f"{len(flagged)} of {len(rows)} runs flagged"
        + (": " + ", ".join(f"{r['dataset']}/{r['model']}" for r in flagged) if flagged else "."),
    ]
    write_text_atomic(out / "results.md", "\n".join(lines) + "\n")
    print(lines[-1])
    return 1 if flagged else 0


if __name__ == "__main__":
    raise SystemExit(main())
