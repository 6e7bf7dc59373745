"""Where the time goes on records (issue 34): a few hundred ICU-like stays of a few hundred mostly empty time points
(the icu-records task, `neuralde_seq.data.sources.icu_records`), each cost measured side by side in one run and
printed as a ratio to the summary-feature reference's fit.

Measured, on ``--stays`` training stays (default 400; each about 110 measurement times, 4 % of the (time, channel)
cells observed, padded to the longest stay):

- ``summary-features fit``: `SummaryFeatureClassifier` (the practitioner's first try);
- ``random features fit``: `RandomFeatureClassifier()`;
- ``fill_gaps (batched)`` and ``fill_gaps (sample by sample)``: the unobserved points the estimators fill into the
  gaps (`neuralde_seq.data.fill_gaps` against its reference `fill_gaps_reference`);
- ``inputs of <model>``: the fitted `InputSpec`'s ``transform`` of the training stays (gap filling, then the control:
  interpolation through the NaN cells, counts, log-signature windows);
- ``epoch of <model>``: one epoch of `SequenceClassifier(model)` (the difference of fits of 3 and 1 epochs, halved,
  so the input construction and the model's creation cancel).

Each number is the median of ``--repeats`` runs (default 3). Output: a table on stdout and ``--out`` (default
benchmarks/measured/records_timing.json).

    python benchmarks/records_timing.py
    python benchmarks/records_timing.py --stays 200 --models delta-rde
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from neuralde_seq.data.sources.icu_records import icu_records_splits  # noqa: E402
from neuralde_seq.data.transforms.sampling import fill_gaps, fill_gaps_reference, median_step  # noqa: E402
from neuralde_seq.files import write_text_atomic  # noqa: E402
from neuralde_seq.random_features import RandomFeatureClassifier  # noqa: E402
from neuralde_seq.reference import SummaryFeatureClassifier, as_arrays  # noqa: E402
from neuralde_seq.sklearn import SequenceClassifier  # noqa: E402


def _median_seconds(work, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(stays: int, models: list[str], repeats: int) -> dict:
    train = icu_records_splits(num_train=stays, num_val=1, num_test=1).train
    X, times = as_arrays(train)
    y = train.labels.numpy()
    seconds = {}
    seconds["summary-features fit"] = _median_seconds(
        lambda: SummaryFeatureClassifier().fit(X, y, times=times), repeats
    )
    seconds["random features fit"] = _median_seconds(
        lambda: RandomFeatureClassifier(random_state=0).fit(X, y, times=times), repeats
    )
    step = median_step(train.times, train.lengths)
    seconds["fill_gaps (batched)"] = _median_seconds(
        lambda: fill_gaps(train.times, train.values, train.lengths, step), repeats
    )
    seconds["fill_gaps (sample by sample)"] = _median_seconds(
        lambda: fill_gaps_reference(train.times, train.values, train.lengths, step), repeats
    )
    for model in models:
        spec = SequenceClassifier(model, epochs=1, random_state=0).fit(X, y, times=times).input_spec_
        seconds[f"inputs of {model}"] = _median_seconds(lambda: spec.transform(train), repeats)

        def fit(epochs):
            return lambda: SequenceClassifier(model, epochs=epochs, random_state=0).fit(X, y, times=times)

        seconds[f"epoch of {model}"] = max(
            0.0, (_median_seconds(fit(3), repeats) - _median_seconds(fit(1), repeats)) / 2
        )
    lengths = train.lengths.double()
    observed = (~torch.isnan(train.values)).double().mean().item()
    return {
        "stays": stays,
        "mean_length": float(lengths.mean()),
        "longest": int(lengths.max()),
        "observed_cells": observed,
        "fill_step": step,
        "repeats": repeats,
        "seconds": seconds,
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }


def table(result: dict) -> str:
    base = result["seconds"]["summary-features fit"]
    lines = [
        f"{result['stays']} stays, mean {result['mean_length']:.0f} time points (longest {result['longest']}), "
        f"{100 * result['observed_cells']:.1f} % of padded cells observed; median of {result['repeats']} runs",
        "",
        "| what | seconds | x summary-features fit |",
        "|---|---:|---:|",
    ]
    for name, value in result["seconds"].items():
        lines.append(f"| {name} | {value:.3f} | {value / base:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stays", type=int, default=400)
    parser.add_argument("--models", default="delta-rde,delta-cde,gru-d")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "measured" / "records_timing.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the estimators' default (n_jobs=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fill of the channels a stay never measures, said once per fit
        result = measure(args.stays, [m for m in args.models.split(",") if m], args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(result, indent=1))
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
