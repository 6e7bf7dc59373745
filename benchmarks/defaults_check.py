"""Do the estimators' defaults hold? Every registry model with nothing but `SequenceClassifier`'s defaults, on every
set of the proxy suite and on longer series made of them, over 3 seeds, compared with a stored table (issue 33).
Run it before changing a default.

Each run fits ``SequenceClassifier(model, random_state=seed)`` on the dataset's TRAIN file and scores its TEST file,
with the suite's protocol (benchmarks/aeon_datasets.py): 30 % of every series' points dropped, TRAIN with drop seed
0 and TEST with drop seed 1 (`defaults_sweep.dropped`); the times are the observation indices kept. The data are the
same for every seed: the seeds change the model's initialisation and batch order. Beside the models, the honest
references get rows of their own: ``random-features`` (``RandomFeatureClassifier(random_state=seed)``),
``random-features-tuned`` (the same with ``fine_tune=True``) and ``minirocket`` (neuralde_seq.reference, needs aeon).

The datasets: the suite's eight (aeon_datasets.DATASETS), ``icu-records`` (400 simulated ICU stays to fit on and
1,000 to score, `neuralde_seq.data.sources.icu_records`, each channel measured at its own times) and long series,
named ``<Suite set>x<points>`` (e.g.
``ACSF1x4000``): each series of a split the concatenation of random series of its class, to exactly that many
points (`neuralde_seq.data.transforms.long_series.concatenated`, TRAIN with seed 0, TEST with seed 1), then 30 % of
its points dropped as above. The default long series: LONG_SERIES.

A run records the accuracy, the wall time (fit and scoring), a divergence (`TrainingDiverged` or a non-finite loss
in the history: the message, no accuracy) or another error (its message), the warnings raised, and its settings:
the ``--epochs``, ``--max-steps`` and ``--series`` overrides of quick runs and the ``--set NAME=VALUE`` candidate
defaults (None or absent: the defaults). Runs are compared
only with runs of the same settings, so a quick run is never compared with a full one.

Findings (`compare`), one line each, exit status 1 if any but "new" is found:

- DIVERGED: a run diverged; ERROR: a run raised another error;
- SPREAD: a cell's (model, dataset, settings) accuracies spread (max - min over its seeds) over 10 points;
- DROP: a cell's mean accuracy more than 3 points below the stored table's, over the seeds both have;
- NEW: a cell the stored table lacks (or holds with none of its seeds): reported, not a failure.

Output in ``--out`` (default ``results/defaults_check``): ``results.json`` (every run; written atomically after each
run, so a crash or a stop loses no finished run, and a second call with the same ``--out`` skips the runs it holds
with the same settings: runs that raised an error other than a divergence are run again) and ``results.md`` (rows
= models, columns = datasets, cells "mean ± std % [spread] (s/run)", and the findings). ``--update-stored`` merges
the runs of this call into the stored table (``--stored``, default benchmarks/measured/defaults_check.json).

    python benchmarks/defaults_check.py                                           # everything (days: below)
    python benchmarks/defaults_check.py --models delta-rde,slice-diag --datasets ItalyPowerDemand,GunPoint
    python benchmarks/defaults_check.py --models ncde --datasets ACSF1x4000 --seeds 0 --epochs 2   # a quick look
    python benchmarks/defaults_check.py --models delta-rde --update-stored        # adopt its numbers as the table
    python benchmarks/defaults_check.py --models delta-rde --set ensemble=3       # a candidate default

Cost, measured on one thread of a shared 2-core AMD EPYC (load 2-5; wall times vary 2x with it). Runs with the
defaults (100 epochs, batch 32): on ItalyPowerDemand and GunPoint 1-8 s each for delta-rde and slice-diag,
random-features 1-3 s, minirocket under 1 s (numba's compilation is done before the clock starts); on ArrowHeadx2000
(36 series of 1,400 points after the drop) delta-rde 12-18 s, slice-diag 13-20 s, random-features 21-25 s. From
runs of 1 and 2 epochs of every model on ArrowHeadx2000 (the difference is an epoch), a run there takes from seconds
(the rde models, slice-diag) to 25 min (the *-ode-rfwp and latent-ode models), about 4 h for the 33 models and one
seed. Scaled by the training points, ACSF1x4000 and OSULeafx2000 (100 and 200 series of 2,800 and 1,400 points) take
about 22 h per seed each, ACSF1 8 h, OSULeaf 5 h, the five smaller sets 2 h together: the whole grid (33 models + 2
references x 11 sets x 3 seeds, 1,155 runs) is about 190 h, 8 days of one core. A run of one epoch of each of the 33
models on ACSF1x4000 ended without a divergence or error (0.4-83 s a run). Run it in parts (--models, --datasets).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import inspect
import json
import math
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aeon_datasets import DATASETS, DataNotFound, _mean_std, find_data  # noqa: E402  (the suite and its files)
from defaults_sweep import dropped, round_robin  # noqa: E402  (the suite's drop; quick runs' series)
from machine import code_version, cpu_name  # noqa: E402

from neuralde_seq.cli import _positive_int  # noqa: E402  (the CLI's reading of --epochs and the like)
from neuralde_seq.files import write_text_atomic  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
STORED = REPO / "benchmarks" / "measured" / "defaults_check.json"
LONG_SERIES = ("ACSF1x4000", "OSULeafx2000", "ArrowHeadx2000")
# closed-form rows (neuralde_seq.reference), not registry models; random-features-tuned is the random features
# fine-tuned (neuralde_seq.reservoir_tuning), a trained model that starts where they end
REFERENCES = ("random-features", "random-features-tuned", "minirocket")
DROP_RATE = 0.3
SPLIT_SEEDS = {"TRAIN": 0, "TEST": 1}  # drop seeds (the suite's) and concatenation seeds of the long series
DROP_POINTS = 3.0
SPREAD_POINTS = 10.0
LONG_NAME = re.compile(r"^(?P<base>[A-Za-z0-9]+)x(?P<points>[0-9]+)$")
LONG_SERIES_MODULE = "neuralde_seq.data.transforms.long_series"


# --------------------------------------------------------------------------------------------- comparison
@dataclasses.dataclass(frozen=True)
class Finding:
    """One line of the report: ``kind`` one of "drop", "divergence", "error", "spread" (failures) or "new"."""

    kind: str
    model: str
    dataset: str
    settings: tuple
    message: str

    @property
    def failure(self) -> bool:
        return self.kind != "new"

    def line(self) -> str:
        where = f"{self.model} on {self.dataset}" + (
            f" [{_settings_text(self.settings)}]" if _settings_text(self.settings) else ""
        )
        return f"{_KIND_WORDS[self.kind]:9s} {where}: {self.message}"


_KIND_WORDS = {"drop": "DROP", "divergence": "DIVERGED", "error": "ERROR", "spread": "SPREAD", "new": "NEW"}


def settings_key(settings: dict) -> tuple:
    """A run's settings (overrides of the defaults; None = the default) as a hashable, ordered key. The defaults are
    left out, so that runs recorded before an override option existed keep their key."""
    return tuple(sorted((k, v) for k, v in settings.items() if v is not None))


def _settings_text(key: tuple) -> str:
    return ", ".join(f"{k} {v}" for k, v in key)


def run_key(run: dict) -> tuple:
    """What identifies a run: model, dataset, seed and settings."""
    return run["model"], run["dataset"], run["seed"], settings_key(run["settings"])


def cells(runs: list[dict]) -> dict[tuple, dict[int, dict]]:
    """Runs grouped by (model, dataset, settings key), each cell {seed: run}; a seed given twice is an error (two
    measurements of one run: which one counts would be a silent choice)."""
    grouped: dict[tuple, dict[int, dict]] = {}
    for run in runs:
        model, dataset, seed, key = run_key(run)
        cell = grouped.setdefault((model, dataset, key), {})
        if seed in cell:
            raise ValueError(f"runs: {model} on {dataset} seed {seed} [{_settings_text(key)}] appears twice")
        cell[seed] = run
    return grouped


def _check_runs(runs, name: str) -> None:
    if not isinstance(runs, list):
        raise TypeError(f"{name} must be a list of run dicts, got {type(runs).__name__}")
    needed = ("model", "dataset", "seed", "settings", "accuracy")
    for i, run in enumerate(runs):
        missing = [k for k in needed if not isinstance(run, dict) or k not in run]
        if missing:
            raise ValueError(f"{name}[{i}] lacks {', '.join(missing)} (a run needs {', '.join(needed)})")
        accuracy = run["accuracy"]
        if accuracy is not None and not (isinstance(accuracy, (int, float)) and 0.0 <= accuracy <= 1.0):
            raise ValueError(f"{name}[{i}]: accuracy must be None or a fraction in [0, 1], got {accuracy!r}")


def compare(
    current: list[dict], stored: list[dict], drop: float = DROP_POINTS, spread: float = SPREAD_POINTS
) -> list[Finding]:
    """The findings of ``current`` runs against the ``stored`` table (both lists of run dicts: model, dataset, seed,
    settings, accuracy as a fraction or None, and optionally diverged / error messages).

    Per cell of ``current`` (model, dataset, settings): each diverged run ("divergence") and each run with another
    error ("error"); the spread, max - min of its accuracies over the seeds, when above ``spread`` points ("spread");
    and against the stored cell of the same settings, the drop of the mean accuracy over the seeds both scored, when
    above ``drop`` points ("drop"). A cell the stored table lacks, or whose stored runs share no scored seed with it,
    is "new" (not a drop: there is nothing to drop from). Stored cells of other settings are never compared.

    Arguments:
        current: this call's runs.
        stored: the stored table's runs.
        drop: points of mean accuracy a cell may lose before it is reported (default 3).
        spread: points of max - min accuracy over seeds a cell may span before it is reported (default 10).

    Returns:
        The findings, cell by cell in the order of ``current``.
    """
    _check_runs(current, "current")
    _check_runs(stored, "stored")
    for value, name in ((drop, "drop"), (spread, "spread")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"{name} must be a non-negative number of points, got {value!r}")
    old = cells(stored)
    findings = []
    for (model, dataset, key), runs in cells(current).items():

        def found(kind, message):
            findings.append(Finding(kind, model, dataset, key, message))

        for seed, run in sorted(runs.items()):
            if run.get("diverged"):
                found("divergence", f"seed {seed}: {run['diverged']}")
            elif run.get("error"):
                found("error", f"seed {seed}: {run['error']}")
        scored = {seed: 100 * run["accuracy"] for seed, run in runs.items() if run["accuracy"] is not None}
        if len(scored) >= 2 and max(scored.values()) - min(scored.values()) > spread:
            found(
                "spread",
                f"{max(scored.values()) - min(scored.values()):.1f} points over seeds "
                f"{_seeds(scored)} ({min(scored.values()):.1f}-{max(scored.values()):.1f} %; "
                f"limit {spread:g})",
            )
        before = old.get((model, dataset, key))
        if before is None:
            others = sorted({_settings_text(k) or "defaults" for m, d, k in old if (m, d) == (model, dataset)})
            found("new", "not in the stored table" + (f" (stored only with {'; '.join(others)})" if others else ""))
            continue
        stored_scored = {seed: 100 * run["accuracy"] for seed, run in before.items() if run["accuracy"] is not None}
        common = sorted(set(scored) & set(stored_scored))
        if not common:
            found(
                "new",
                f"no scored seed in common with the stored table (stored seeds {_seeds(stored_scored)}, "
                f"these {_seeds(scored)})",
            )
            continue
        was = sum(stored_scored[s] for s in common) / len(common)
        now = sum(scored[s] for s in common) / len(common)
        if was - now > drop:
            found(
                "drop",
                f"{was:.1f} % -> {now:.1f} % ({now - was:+.1f} points over seeds {_seeds(common)}; limit {drop:g})",
            )
    return findings


def _seeds(seeds) -> str:
    return ",".join(str(s) for s in sorted(seeds)) or "none"


# ------------------------------------------------------------------------------------------------ data
# Irregular records, the toolkit's home ground (issue 34): the icu-records task's stays (data seed 0, its default
# knobs), 400 to fit on and 1,000 to score, read as measured (each stay on its own measurement times).
RECORDS = "icu-records"
RECORDS_STAYS = {"TRAIN": 400, "TEST": 1000}


def parse_dataset(name: str) -> tuple[str, int | None]:
    """(suite set, points of the long series or None) of a dataset name: a suite set, ``<set>x<points>`` or
    ``icu-records`` (simulated, no files)."""
    if name in DATASETS or name == RECORDS:
        return name, None
    match = LONG_NAME.match(name)
    if match and match["base"] in DATASETS and int(match["points"]) >= 2:
        return match["base"], int(match["points"])
    raise ValueError(
        f"--datasets: unknown dataset {name!r}; a suite set ({', '.join(DATASETS)}) or a long series "
        "<set>x<points> with at least 2 points, e.g. ACSF1x4000"
    )


def read_split(folder: Path, name: str, split: str):
    """(X, y, times) of ``split`` ("TRAIN" or "TEST") of dataset ``name``: lengthened if a long series, then dropped."""
    from neuralde_seq.data import read_file

    base, points = parse_dataset(name)
    if base == RECORDS:  # not dropped: the stays' channels are measured at their own times already
        from neuralde_seq.data.sources.icu_records import icu_records_splits

        splits = icu_records_splits(
            num_train=RECORDS_STAYS["TRAIN"], num_val=1, num_test=RECORDS_STAYS["TEST"], data_seed=0
        )
        return (splits.train if split == "TRAIN" else splits.test).to_arrays()
    data = read_file(folder / base / f"{base}_{split}.ts")
    if points is not None:
        from neuralde_seq.data.transforms.long_series import concatenated

        data = concatenated(data, points, seed=SPLIT_SEEDS[split])
    return dropped(data, DROP_RATE, SPLIT_SEEDS[split])


_NOT_SETTABLE = ("model", "random_state", "epochs", "max_steps", "verbose", "n_jobs")


def _setting_option(text: str) -> tuple[str, object]:
    """--set NAME=VALUE: one `SequenceClassifier` parameter; the value read as JSON (3, 0.8, "cosine", null), a bare
    word as a string."""
    from neuralde_seq.input_checks import did_you_mean
    from neuralde_seq.sklearn import SequenceClassifier

    name, sep, value = text.partition("=")
    name = name.strip()
    parameters = [p for p in inspect.signature(SequenceClassifier).parameters if p not in _NOT_SETTABLE]
    if not sep or name not in parameters:
        hint = did_you_mean(name, parameters) if name else None
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NAME=VALUE with NAME one of SequenceClassifier's "
            f"parameters; {hint + ' ' if hint else ''}settable: {', '.join(parameters)}"
        )
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value.strip()
    if isinstance(parsed, (list, dict)):
        raise argparse.ArgumentTypeError(f"--set {name}: a number, a string or null, got {value!r}")
    return name, parsed


def _epochs_option(text: str):
    """--epochs: a positive integer, or "auto" (`SequenceClassifier`'s step budget: a candidate default)."""
    return "auto" if text == "auto" else _positive_int(text)


# ------------------------------------------------------------------------------------------------- runs
def make_estimator(model: str, seed: int, settings: dict):
    """The estimator of a row with its defaults: the registry model's classifier (the ``epochs`` and ``max_steps`` of
    ``settings`` overriding unless None, for quick runs), or a reference row's closed-form estimator."""
    if model in REFERENCES:
        from neuralde_seq.reference import create_reference

        return create_reference(model, seed)
    from neuralde_seq.sklearn import SequenceClassifier

    # every recorded setting but the data's ("series") is an estimator parameter
    overrides = {k: v for k, v in settings.items() if k != "series" and v is not None}
    return SequenceClassifier(model, random_state=seed, **overrides)


def fit_and_score(model: str, seed: int, settings: dict, data: tuple) -> dict:
    """One run: fit on the training split, score the test split; a divergence or an error is recorded, not raised."""
    from neuralde_seq.training.fit import TrainingDiverged

    X, y, times, X_test, y_test, times_test = data
    record = {"accuracy": None, "diverged": None, "error": None, "warnings": []}
    if model in REFERENCES:  # numba's one-off compilation (10-30 s) is not the method's wall time
        from neuralde_seq.reference import warm_up

        warm_up(model, np.shape(X[0])[1] if np.ndim(X[0]) == 2 else 1, seed=seed)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            estimator = make_estimator(model, seed, settings)
            estimator.fit(X, y, times=times)
            history = getattr(estimator, "history_", None)  # the closed-form rows have none
            losses = history.get("train_loss", []) if isinstance(history, dict) else []
            bad = [i + 1 for i, v in enumerate(losses) if not math.isfinite(v)]
            if bad:  # the guard raises on these; kept in case a loss slips past it
                record["diverged"] = f"non-finite training loss in epoch(s) {bad[:5]}"
            else:
                record["accuracy"] = float(estimator.score(X_test, y_test, times=times_test))
        except TrainingDiverged as err:
            record["diverged"] = f"{type(err).__name__}: {err}"[:500]
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as err:  # recorded as a finding: the other runs go on
            record["error"] = f"{type(err).__name__}: {err}"[:500]
    record["seconds"] = time.perf_counter() - start
    record["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:200]}" for w in caught})
    return record


# ------------------------------------------------------------------------------------------------ files
def read_runs(path: Path) -> list[dict]:
    """The runs of a results.json or stored table (an absent file: none)."""
    if not path.exists():
        return []
    content = json.loads(path.read_text())
    if not isinstance(content, dict) or not isinstance(content.get("runs"), list):
        raise ValueError(f"{path}: not a defaults_check table (a JSON object with a list 'runs')")
    _check_runs(content["runs"], f"{path} runs")
    return content["runs"]


def write_runs(path: Path, runs: list[dict], **extra) -> None:

    head = json.dumps({"script": "benchmarks/defaults_check.py", **extra})[:-1]
    # one run a line: the stored table's diffs show the runs that changed
    body = ",\n".join(json.dumps(run, sort_keys=True) for run in runs)
    write_text_atomic(path, f'{head}, "runs": [\n{body}\n]}}\n')


def merged(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with the runs of ``new`` added, a run of the same key replaced."""
    keys = {run_key(r) for r in new}
    return [r for r in old if run_key(r) not in keys] + list(new)


def table(runs: list[dict], models: list[str], datasets: list[str]) -> str:
    """Markdown, one table per settings: rows = models, columns = datasets, "mean ± std % [spread] (s/run)"."""
    from neuralde_seq.training.results import format_table

    grouped = cells(runs)
    parts = []
    for key in sorted({k for _, _, k in grouped}, key=_settings_text):
        rows = []
        for model in models:
            row = {"model": model}
            for dataset in datasets:
                cell = grouped.get((model, dataset, key))
                if not cell:
                    continue
                scored = [r["accuracy"] for r in cell.values() if r["accuracy"] is not None]
                seconds = sum(r["seconds"] for r in cell.values()) / len(cell)
                text = _mean_std(scored) + (f" [{100 * (max(scored) - min(scored)):.1f}]" if len(scored) > 1 else "")
                bad = [
                    f"seed {s} {'diverged' if r.get('diverged') else 'error'}"
                    for s, r in sorted(cell.items())
                    if r.get("diverged") or r.get("error")
                ]
                row[dataset] = text + f" ({seconds:.1f} s)" + (" " + ", ".join(bad) if bad else "")
            if len(row) > 1:  # a model without runs of these settings (a reference row beside an --epochs run)
                rows.append(row)
        title = f"Settings: {_settings_text(key) or 'the defaults'}"
        parts.append(f"{title}\n\n" + format_table(rows, ["model", *datasets]))
    return "\n\n".join(parts)


# ------------------------------------------------------------------------------------------------- main
def _list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("an empty list")
    return names


def _models(text: str) -> list[str]:
    from neuralde_seq import MODEL_NAMES
    from neuralde_seq.input_checks import did_you_mean

    names = _list(text)
    for name in names:
        if name not in MODEL_NAMES and name not in REFERENCES:
            hint = did_you_mean(name, (*MODEL_NAMES, *REFERENCES))
            raise argparse.ArgumentTypeError(
                f"unknown model {name!r}; {hint + ' ' if hint else ''}registry models and {', '.join(REFERENCES)}"
            )
    return names


def _datasets(text: str) -> list[str]:
    names = _list(text)
    for name in names:
        try:
            parse_dataset(name)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix("--datasets: ")) from None  # argparse names it
    return names


def _seeds_option(text: str) -> list[int]:
    from neuralde_seq.cli import _parse_seeds

    seeds = list(_parse_seeds(text))
    if len(set(seeds)) != len(seeds):  # a seed twice would be one run measured twice
        raise argparse.ArgumentTypeError(f"a seed given twice in {text!r}")
    return seeds


def main(argv=None) -> int:
    from neuralde_seq import MODEL_NAMES

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument(
        "--models",
        type=_models,
        default=[*MODEL_NAMES, *REFERENCES],
        help=f"comma-separated registry models and {', '.join(REFERENCES)} (default: all)",
    )
    parser.add_argument(
        "--datasets",
        type=_datasets,
        default=[*DATASETS, *LONG_SERIES, RECORDS],
        help="comma-separated suite sets and long series <set>x<points> (default: %(default)s)",
    )
    parser.add_argument("--seeds", type=_seeds_option, default=[0, 1, 2], help="(default: 0,1,2)")
    parser.add_argument(
        "--epochs",
        type=_epochs_option,
        default=None,
        help="this many epochs, or 'auto' (the estimators' step budget), instead of the estimator's "
        "(recorded; never compared with runs of the defaults)",
    )
    parser.add_argument(
        "--max-steps",
        type=_positive_int,
        default=None,
        help="quick runs: stop training after this many steps (recorded like --epochs)",
    )
    parser.add_argument(
        "--series",
        type=_positive_int,
        default=None,
        help="quick runs: this many training series per dataset, taken from each class in turn "
        "(recorded like --epochs; default: the whole TRAIN file)",
    )
    parser.add_argument(
        "--set",
        type=_setting_option,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a candidate default: this SequenceClassifier parameter instead of its default, e.g. "
        "--set ensemble=3 --set schedule=cosine (recorded like --epochs)",
    )
    parser.add_argument("--data", default=None, help="folder of <Name>/<Name>_TRAIN.ts (default: aeon's)")
    parser.add_argument("--out", default="results/defaults_check", help="(default: %(default)s)")
    parser.add_argument("--stored", default=str(STORED), help="the stored table (default: %(default)s)")
    parser.add_argument(
        "--update-stored",
        action="store_true",
        help="merge this call's runs into the stored table (after the comparison is printed)",
    )
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    from neuralde_seq.sklearn import SequenceClassifier

    names = [name for name, _ in args.set]
    if len(set(names)) != len(names):
        parser.error(
            f"--set: a parameter given twice ({', '.join(sorted(n for n in set(names) if names.count(n) > 1))})"
        )
    try:  # the training values checked before any run (the model-specific ones are checked by each run's fit)
        SequenceClassifier(**dict(args.set))._training_settings()
    except (TypeError, ValueError) as err:
        parser.error(f"--set: {err}")

    if args.max_steps is not None and "max_steps" not in inspect.signature(SequenceClassifier).parameters:
        parser.error("--max-steps: this checkout's SequenceClassifier has no max_steps; use --epochs")
    long_names = [n for n in args.datasets if parse_dataset(n)[1] is not None]
    if long_names and importlib.util.find_spec(LONG_SERIES_MODULE) is None:
        parser.error(
            f"--datasets {', '.join(long_names)}: the long series need {LONG_SERIES_MODULE} (concatenated), "
            "which this checkout lacks; give suite sets only"
        )
    try:
        folder = find_data(args.data, sorted({parse_dataset(n)[0] for n in args.datasets} - {RECORDS}))
    except DataNotFound as err:
        print(f"defaults_check.py: {err}", file=sys.stderr)
        return 2
    from neuralde_seq.files import OutputFolderBusy, OutputLock

    try:
        with OutputLock(args.out):  # two calls on one results.json would write over each other's runs
            return check(args, folder)
    except OutputFolderBusy as err:
        print(f"defaults_check.py: {err}", file=sys.stderr)
        return 2


def check(args, folder: Path) -> int:
    """Run what ``args`` asks that ``--out`` lacks, compare with the stored table, report; the exit status."""
    out, stored_path = Path(args.out), Path(args.stored)
    results_path = out / "results.json"
    runs = read_runs(results_path)
    stored = read_runs(stored_path)
    done = {run_key(r) for r in runs if not r.get("error")}  # an error is not a measurement: run again
    extra = {"environment": {"cpu": cpu_name(), "code": code_version()}}

    import torch

    def settings_of(model: str) -> dict:
        # the closed-form references take no training steps: their runs are the same under those overrides
        if model in REFERENCES:
            return {"epochs": None, "max_steps": None, "series": args.series}
        return {"epochs": args.epochs, "max_steps": args.max_steps, "series": args.series, **dict(args.set)}

    todo = [
        (d, m, s)
        for d in args.datasets
        for m in args.models
        for s in args.seeds
        if (m, d, s, settings_key(settings_of(m))) not in done
    ]
    total = len(args.datasets) * len(args.models) * len(args.seeds)
    print(f"{total - len(todo)} of {total} runs done before (in {results_path}), {len(todo)} to run", flush=True)
    from neuralde_seq.terminal import Progress

    data, loaded = None, None
    with Progress(desc="defaults_check", total=len(todo), unit=" runs", enabled=not args.no_progress) as progress:
        for dataset, model, seed in todo:
            if loaded != dataset:
                train, test = read_split(folder, dataset, "TRAIN"), read_split(folder, dataset, "TEST")
                if args.series is not None:
                    take = round_robin(train[1], args.series)
                    train = ([train[0][i] for i in take], train[1][take], [train[2][i] for i in take])
                data, loaded = (*train, *test), dataset
            settings = settings_of(model)
            record = fit_and_score(model, seed, settings, data)
            run = {
                "model": model,
                "dataset": dataset,
                "seed": seed,
                "settings": settings,
                **record,
                "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "code": extra["environment"]["code"],
                "cpu": extra["environment"]["cpu"],
                "torch": torch.__version__,
                "train_series": len(data[1]),
                "test_series": len(data[4]),
            }
            runs = merged(runs, [run])
            write_runs(results_path, runs, **extra)  # after each run: a stop loses nothing finished
            outcome = (
                f"{100 * run['accuracy']:.1f} %"
                if run["accuracy"] is not None
                else f"DIVERGED {run['diverged']}"
                if run["diverged"]
                else f"ERROR {run['error']}"
            )
            print(f"{dataset:22s} {model:20s} seed {seed}  {outcome}  ({run['seconds']:.1f} s)", flush=True)
            progress.update(1)

    wanted = {(m, d, s, settings_key(settings_of(m))) for d in args.datasets for m in args.models for s in args.seeds}
    current = [r for r in runs if run_key(r) in wanted]
    findings = compare(current, stored)
    text = table(current, args.models, args.datasets)
    # the failures last, next to the summary: a long list of new cells does not hide them
    lines = [f.line() for f in findings if not f.failure] + [f.line() for f in findings if f.failure]
    failures = [f for f in findings if f.failure]
    summary = f"{len(failures)} finding(s) against {stored_path} ({len(stored)} stored runs): " + ", ".join(
        f"{sum(f.kind == k for f in findings)} {word.lower()}" for k, word in _KIND_WORDS.items()
    )
    write_text_atomic(
        out / "results.md",
        "# Estimator defaults: test accuracy % over seeds "
        f"{_seeds(args.seeds)}\n\nCells: mean ± sample std [max - min] (mean wall time of a run: fit and scoring). "
        f"Protocol: benchmarks/defaults_check.py.\n\n{text}\n\n## Findings\n\n"
        + "".join(f"    {line}\n" for line in lines)
        + f"\n{summary}\n",
    )
    print(text)
    print("\n".join(lines))
    print(summary)
    print(f"wrote {out / 'results.md'}, {results_path}")
    if args.update_stored:
        write_runs(stored_path, merged(stored, current))
        print(f"stored {len(current)} runs in {stored_path}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
