"""The icu-records table (issue 34): the estimators beside the practitioner's summary-feature reference and
MiniRocket, in AUROC, on simulated ICU stays with a known ground truth, at the default knobs and at other settings.

Each run draws the task's stays with ``data_seed = seed`` (`neuralde_seq.data.sources.icu_records.icu_records_splits`:
the training and validation stays, here fitted on together, and the test stays), fits one row's estimator on them
with ``random_state = seed`` and scores the test stays' AUROC from ``predict_proba``. The seeds change the stays and
the model's initialisation alike. Every row sees the same stays: the estimators with ``epochs="auto"`` carve their
own validation split out of them, the references fit on all of them. The oracle row is the AUROC of the simulator's
latent risk score itself, the ceiling any model can reach on those test stays.

Rows (`ROWS`): the scikit-learn estimators by their constructor call (the control models with the running counts
of observations, ``intensity_channel=True``, except the row that shows them without), the references
(``summary-features``: `SummaryFeatureClassifier`; ``summary-products``: the same features with the products of every
pair of channel means, `SummaryWithProducts`, the first interactions a practitioner adds by hand; ``minirocket``:
MiniRocket on the stays linearly interpolated onto a grid, neuralde_seq.reference, needs aeon). Knob settings
(`SETTINGS`): ``default`` (the task's defaults: 2,000 training, 500 validation and 1,000 test stays), ``400-stays`` (the
defaults with 400 + 100 stays to fit on), ``signal-missing`` (each channel, the outcome's too, missing for a whole stay
with probability 0.4) and ``uninformative-sampling`` (the measurement rate independent of the severity and absent from
the outcome). Stays measured at a single time (a few with ``signal-missing``'s knobs, none with the others) are left out
of every row and of the oracle, and counted in each run's ``left_out``: the estimators refuse a series of one time
point.

Output: ``--out`` (default benchmarks/measured/records.json) holds every run (written after each one, so a second
call skips the runs it holds) and is printed as a table: rows x settings, cells "mean ± std [min-max] (s/fit)" of the
test AUROC over the seeds.

    python benchmarks/records.py                                   # every row, setting and seed (about 3 h, 1 core)
    python benchmarks/records.py --settings default --rows summary-features,random-features
    python benchmarks/records.py --table                           # print the stored table
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuralde_seq.data.sources.icu_records import icu_records_splits  # noqa: E402
from neuralde_seq.data.synthetic.records import RecordsSpec, simulate_records  # noqa: E402
from neuralde_seq.estimator_inputs import MIN_STEPS  # noqa: E402
from neuralde_seq.reference import as_arrays  # noqa: E402

SIZES = {"num_train": 2000, "num_val": 500, "num_test": 1000}
SETTINGS = {
    "default": {},
    "400-stays": {"num_train": 400, "num_val": 100},
    "signal-missing": {"channel_missing": 0.4, "missing_signal_channels": True},
    "uninformative-sampling": {"informative_sampling": 0.0, "sampling_weight": 0.0},
}
INTENSITY = {"intensity_channel": True}


class SummaryWithProducts:
    """A stronger practitioner's reference: the summary features (`SummaryFeatureClassifier.features`: per channel
    mean, std, min, max, first, last, slope, count, time since last; a never-observed channel's value statistics at
    their training mean) with the products of every pair of channel means beside them, standardised, and a
    cross-validated logistic regression: the first interaction terms one adds by hand."""

    def fit(self, X, y, times=None):
        from sklearn.linear_model import LogisticRegressionCV
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        from neuralde_seq.reference import SummaryFeatureClassifier

        self.summary_ = SummaryFeatureClassifier().fit(X, y, times=times)
        self.model_ = make_pipeline(
            StandardScaler(), LogisticRegressionCV(Cs=10, max_iter=3000, scoring="neg_log_loss")
        )
        self.model_.fit(self._features(X, times), y)
        return self

    def _features(self, X, times):
        from neuralde_seq.reference import SUMMARY_STATISTICS

        features = self.summary_.features(X, times)
        means = features[:, SUMMARY_STATISTICS.index("mean") :: len(SUMMARY_STATISTICS)]
        pairs = [means[:, i] * means[:, j] for i in range(means.shape[1]) for j in range(i + 1, means.shape[1])]
        return np.column_stack([features, *pairs])

    def predict_proba(self, X, times=None):
        return self.model_.predict_proba(self._features(X, times))


def _rows() -> dict:
    """Row key -> (label: the estimator's constructor call, a function of the seed giving the unfitted estimator)."""
    from neuralde_seq.random_features import RandomFeatureClassifier
    from neuralde_seq.reference import MiniRocketClassifier, SummaryFeatureClassifier
    from neuralde_seq.sklearn import SequenceClassifier

    counts = {"intensity_channel": True}  # each channel's running count of observations, raw (not the default)
    with_counts = "control_options={'intensity_channel': True}"
    return {
        "default": (
            f"SequenceClassifier({with_counts})",
            lambda seed: SequenceClassifier(control_options=counts, random_state=seed),
        ),
        "auto": (
            f"SequenceClassifier(epochs='auto', {with_counts})",
            lambda seed: SequenceClassifier(epochs="auto", control_options=counts, random_state=seed),
        ),
        "auto-no-intensity": (
            "SequenceClassifier(epochs='auto')",
            lambda seed: SequenceClassifier(epochs="auto", random_state=seed),
        ),
        "auto-ensemble": (
            f"SequenceClassifier(epochs='auto', ensemble=3, {with_counts})",
            lambda seed: SequenceClassifier(epochs="auto", ensemble=3, control_options=counts, random_state=seed),
        ),
        "auto-baseline": (
            f"SequenceClassifier(epochs='auto', baseline='summary-features', {with_counts})",
            lambda seed: SequenceClassifier(
                epochs="auto", baseline="summary-features", control_options=counts, random_state=seed
            ),
        ),
        "auto-baseline-ensemble": (
            f"SequenceClassifier(epochs='auto', ensemble=3, baseline='summary-features', {with_counts})",
            lambda seed: SequenceClassifier(
                epochs="auto", ensemble=3, baseline="summary-features", control_options=counts, random_state=seed
            ),
        ),
        "delta-cde": (
            f"SequenceClassifier('delta-cde', epochs='auto', {with_counts})",
            lambda seed: SequenceClassifier("delta-cde", epochs="auto", control_options=counts, random_state=seed),
        ),
        "gru-d": (
            "SequenceClassifier('gru-d', epochs='auto')",
            lambda seed: SequenceClassifier("gru-d", epochs="auto", random_state=seed),
        ),
        "ode-rnn": (
            "SequenceClassifier('ode-rnn', epochs='auto')",
            lambda seed: SequenceClassifier("ode-rnn", epochs="auto", random_state=seed),
        ),
        "random-features": ("RandomFeatureClassifier()", lambda seed: RandomFeatureClassifier(random_state=seed)),
        "summary-features": ("summary-features (SummaryFeatureClassifier())", lambda seed: SummaryFeatureClassifier()),
        "summary-products": (
            "summary features and products of channel means (logistic regression)",
            lambda seed: SummaryWithProducts(),
        ),
        "minirocket": ("minirocket (MiniRocketClassifier())", lambda seed: MiniRocketClassifier(random_state=seed)),
    }


ROW_NAMES = [
    "default",
    "auto",
    "auto-no-intensity",
    "auto-ensemble",
    "auto-baseline",
    "auto-baseline-ensemble",
    "delta-cde",
    "gru-d",
    "ode-rnn",
    "random-features",
    "summary-features",
    "summary-products",
    "minirocket",
]
ORACLE = "oracle"


def stays(setting: str, seed: int):
    """(X, times, y) to fit on (training and validation stays), (X, times, y) of the test stays, and the test stays'
    latent risk scores, for one knob setting and seed."""
    options = {**SIZES, **SETTINGS[setting], "data_seed": seed}
    splits = icu_records_splits(**options)
    fit_x, fit_t, fit_y = [], [], []
    for part in (splits.train, splits.val):
        x, t = as_arrays(part)
        fit_x += x
        fit_t += t
        fit_y += part.labels.tolist()
    test_x, test_t = as_arrays(splits.test)
    test_y = splits.test.labels.numpy()
    # Stays measured at one time only (a few with signal-missing's knobs) are left out of every row: the estimators
    # refuse a series of one time point (MIN_STEPS), so the rows would otherwise score different stays.
    keep = [i for i, t in enumerate(fit_t) if len(t) >= MIN_STEPS]
    kept = [i for i, t in enumerate(test_t) if len(t) >= MIN_STEPS]
    return ([fit_x[i] for i in keep], [fit_t[i] for i in keep], np.array(fit_y)[keep]), (
        [test_x[i] for i in kept],
        [test_t[i] for i in kept],
        test_y[kept],
    )


def short_stays(setting: str, seed: int) -> tuple[int, int]:
    """How many stays (to fit on, to score) `stays` leaves out for having one measurement time."""
    options = {**SIZES, **SETTINGS[setting], "data_seed": seed}
    splits = icu_records_splits(**options)
    fit = sum(int((part.lengths < MIN_STEPS).sum()) for part in (splits.train, splits.val))
    return fit, int((splits.test.lengths < MIN_STEPS).sum())


def oracle_auroc(setting: str, seed: int) -> float:
    """The AUROC of the simulator's latent risk score on the test stays of ``stays(setting, seed)`` (drawn again
    from the same generator, in the same order)."""
    from sklearn.metrics import roc_auc_score

    options = {**SIZES, **SETTINGS[setting]}
    knobs = {k: v for k, v in options.items() if not k.startswith("num_")}
    generator = np.random.default_rng(seed)
    spec = RecordsSpec(**knobs)
    for count in (options["num_train"], options["num_val"]):
        simulate_records(count, spec, generator=generator)
    test = simulate_records(options["num_test"], spec, generator=generator)
    kept = (test.dataset.lengths >= MIN_STEPS).numpy()
    labels = test.dataset.labels.numpy()[kept]
    if not np.array_equal(labels, stays(setting, seed)[1][2]):
        raise RuntimeError("the oracle's test stays are not those of icu_records_splits: the two draw differently")
    return float(roc_auc_score(labels, test.risk[kept]))


def run(row: str, setting: str, seed: int) -> dict:
    from sklearn.metrics import roc_auc_score

    (fit_x, fit_t, fit_y), (test_x, test_t, test_y) = stays(setting, seed)
    estimator = _rows()[row][1](seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        estimator.fit(fit_x, fit_y, times=fit_t)
        fit_seconds = time.perf_counter() - start
        if hasattr(estimator, "predict_proba"):
            scores = estimator.predict_proba(test_x, times=test_t)[:, 1]
        else:  # MiniRocket's ridge classifier: its decision function ranks the stays as well
            scores = estimator.decision_function(test_x, times=test_t)
    said = sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught})
    history = getattr(estimator, "history_", None) or {}
    return {
        "row": row,
        "setting": setting,
        "seed": seed,
        "auroc": float(roc_auc_score(test_y, scores)),
        "stays": [len(fit_y), len(test_y)],
        "left_out": list(short_stays(setting, seed)),
        "fit_seconds": fit_seconds,
        "epochs_run": len(history.get("train_loss", [])) or None,
        "stopped_by": history.get("stopped_by"),
        "warnings": said,
    }


def load(path: Path) -> list[dict]:
    return json.loads(path.read_text())["runs"] if path.exists() else []


def save(path: Path, runs: list[dict]) -> None:
    from neuralde_seq.files import write_text_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps({"sizes": SIZES, "settings": SETTINGS, "runs": runs}, indent=1))


def table(runs: list[dict]) -> str:
    settings = [s for s in SETTINGS if any(r["setting"] == s for r in runs)]
    rows = [ORACLE] + [r for r in ROW_NAMES if any(x["row"] == r for x in runs)]
    labels = {ORACLE: "oracle (the latent risk score)", **{key: label for key, (label, _) in _rows().items()}}
    lines = ["| row | " + " | ".join(settings) + " |", "|---|" + "---:|" * len(settings)]
    for row in rows:
        cells = []
        for setting in settings:
            got = [r for r in runs if r["row"] == row and r["setting"] == setting and r.get("auroc") is not None]
            if not got:
                cells.append("")
                continue
            values = np.array([r["auroc"] for r in got])
            seconds = np.mean([r["fit_seconds"] for r in got if r.get("fit_seconds") is not None] or [math.nan])
            spread = f" [{values.min():.3f}-{values.max():.3f}]" if len(values) > 1 else ""
            time_part = "" if math.isnan(seconds) else f" ({seconds:.0f} s)"
            std = f" ± {values.std(ddof=1):.3f}" if len(values) > 1 else ""
            cells.append(f"{values.mean():.3f}{std}{spread}{time_part} n={len(values)}")
        lines.append(f"| {labels[row]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROW_NAMES), help="comma-separated row keys (default: all)")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated knob settings")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "measured" / "records.json")
    parser.add_argument("--table", action="store_true", help="print the stored table and stop")
    args = parser.parse_args(argv)
    runs = load(args.out)
    if args.table:
        print(table(runs))
        return 0
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROW_NAMES]
    settings = [s for s in args.settings.split(",") if s]
    unknown += [s for s in settings if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown rows or settings {unknown}; rows: {ROW_NAMES}; settings: {list(SETTINGS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    from tqdm import tqdm

    todo = [(s, seed, r) for s in settings for r in rows for seed in seeds]  # a row's seeds together
    for setting, seed, row in tqdm(todo, desc="records"):
        if not any(x["row"] == ORACLE and x["setting"] == setting and x["seed"] == seed for x in runs):
            runs.append(
                {
                    "row": ORACLE,
                    "setting": setting,
                    "seed": seed,
                    "auroc": oracle_auroc(setting, seed),
                    "fit_seconds": None,
                }
            )
        if any(
            x["row"] == row and x["setting"] == setting and x["seed"] == seed and x.get("auroc") is not None
            for x in runs
        ):
            continue
        runs = [x for x in runs if not (x["row"] == row and x["setting"] == setting and x["seed"] == seed)]
        try:
            result = run(row, setting, seed)
        except Exception as error:  # recorded, not hidden: the table shows the cell empty and the JSON the message
            result = {"row": row, "setting": setting, "seed": seed, "auroc": None, "error": repr(error)[:500]}
        runs.append(result)
        save(args.out, runs)
        tqdm.write(f"{setting} seed {seed} {row}: {result.get('auroc')} ({result.get('fit_seconds', 0):.0f} s)")
    save(args.out, runs)
    print(table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
