"""CT-FWPs against NCDE, CKCNN, GRU-D, Log-NCDE and linear NCDEs, beside the practitioner's reference methods
(MiniRocket, 1-NN Euclidean and DTW), on the eight UCR/UEA classification datasets bundled with aeon, 30 % of
observations dropped.

The datasets: ACSF1 (1 channel, length 1,460, 10 classes), ArrowHead (1 x 251, 3 classes), BasicMotions (6 x 100,
4 classes), GunPoint (1 x 150, 2 classes), ItalyPowerDemand (1 x 24, 2 classes), JapaneseVowels (12 channels,
variable length 7-29, 9 classes), OSULeaf (1 x 427, 6 classes) and PickupGestureWiimoteZ (1 channel, variable
length 29-361, 10 classes). The rows, each with the registry defaults unless said:

    CT-FWPs:    delta-cde, delta-rde (closed-form steps: the default solver's "auto"), hebb-cde
    recipe:     delta-rde-cosine (time_unit="auto", warm-up + cosine learning rate), delta-rde-long (the same with
                3x the epochs), delta-rde-wide (time_unit="auto", d_model 128): the training recipe's levers, each
                a row
    baselines:  ncde, ckcnn, gru-d, and issue 15's log-ncde, slice-block, slice-diag, slice-dplr
    random features: random-features (a frozen random slice-block reservoir of damped oscillators read out by
                ridge regression: the toolkit's closed-form mode, neuralde_seq.random_features; counted as a
                baseline) and
                random-features-delta-rde (the same with a frozen CT-FWP; counted as a CT-FWP)
    reference:  minirocket, multirocket-hydra, quant, 1nn-euclidean, 1nn-dtw (neuralde_seq.reference; needs aeon:
                pip install "neuralde_seq[reference]")

and, with the delta-rde row, a study of its time channel (two more delta-rde rows: without a time channel, and
with the times divided by the training split's longest span; a table of their validation and test accuracies
and of the variant chosen on validation per seed).

The reference rows read the same dropped, standardised series as the neural rows, linearly interpolated onto
each series' own grid (`neuralde_seq.reference.to_grid`: for these index-timed series the original sampling grid,
variable-length series stretched onto the longest training length), and are fitted in closed form on the
training and validation parts together (the whole TRAIN file, as the UCR/UEA protocol does; they select nothing
on validation data). MiniRocket gets ``random_state`` = the seed; the 1-NN rows are deterministic (the same
number for every seed). The random-feature rows are fitted the same way (on the series themselves, no grid), and
select their ridge penalty by leave-one-out. The table gives, per dataset, the gap of the best toolkit row (neural
or random features) to MiniRocket in points.

Protocol (task ``files`` of :mod:`neuralde_seq.data.protocols`, one config per dataset run by
:func:`neuralde_seq.training.runner.run_benchmark`, so runs are fingerprinted, resumable with ``--resume`` and
smoke runs are marked): the files' own TRAIN/TEST split; 20 % of TRAIN carved out, stratified (split seed 0),
as the validation set; 30 % of every series' time points dropped (TRAIN with drop seed 0 before the split,
TEST with drop seed 1); channels standardised with the training part's statistics. The data are the same for
every training seed: the seeds change initialisation and batch order. Every row of a dataset gets the same
budget (epochs, Adam learning rate, batch size; no early stopping) and is evaluated with its best-validation-
accuracy checkpoint on every TEST case.

Output in ``--out`` (default ``results/aeon_datasets``): ``<Name>/`` the runner's folder of each dataset
(``runs/``, ``results.md``, ``results.json``, curves), and ``results.md`` / ``results.json``: one table,
rows = models, columns = datasets, each cell "mean ± sample std of the test accuracy % (s/epoch)" (reference
rows: "(s run)", the wall time of one run: fit and predictions), the goal per dataset: the best CT-FWP (by mean)
within 2 points of the best baseline (yes/no and the gap CT-FWP − baseline in points), and the gap of the best
toolkit row to MiniRocket (points).
``--update-docs`` writes that table into the marked section of docs/benchmarks.md (refused for smoke runs and for
runs that are not the whole protocol).

The data: aeon (BSD-3) ships the .ts files in ``aeon/datasets/data/<Name>/<Name>_TRAIN.ts`` / ``_TEST.ts``.
The neural rows do not need aeon itself (the reference rows do): the folder is ``--data DIR``, else the data
folder of an installed aeon package (found with ``importlib.util.find_spec``, without importing aeon), else the
script says how to get the files::

    pip download aeon==1.6.0 --no-deps -d /tmp/aeon
    unzip -q /tmp/aeon/aeon-1.6.0-*.whl 'aeon/datasets/data/*' -d /tmp/aeon_data
    python benchmarks/aeon_datasets.py --data /tmp/aeon_data/aeon/datasets/data

Examples::

    python benchmarks/aeon_datasets.py --data DIR --max-steps 1 --seeds 0 --out /tmp/aeon_smoke   # smoke run
    python benchmarks/aeon_datasets.py --data DIR --datasets ArrowHead --models delta-cde,gru-d --epochs 2 --seeds 0
    python benchmarks/aeon_datasets.py --models minirocket,1nn-euclidean,1nn-dtw --out /tmp/aeon_reference   # minutes
    python benchmarks/aeon_datasets.py --data DIR --update-docs --resume                          # the full protocol
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import sys
import time
import traceback
from pathlib import Path

from machine import code_version, cpu_name

from neuralde_seq.files import write_text_atomic

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs" / "benchmarks.md"
MARK_START = "<!-- aeon-datasets:start -->"
MARK_END = "<!-- aeon-datasets:end -->"

DATASETS = (
    "ACSF1",
    "ArrowHead",
    "BasicMotions",
    "GunPoint",
    "ItalyPowerDemand",
    "JapaneseVowels",
    "OSULeaf",
    "PickupGestureWiimoteZ",
)
CT_FWPS = ("delta-cde", "delta-rde", "hebb-cde")
BASELINES = ("ncde", "ckcnn", "gru-d", "log-ncde", "slice-block", "slice-diag", "slice-dplr")
# The training recipe's levers on the cheapest CT-FWP (delta-rde, closed-form steps), each a row (recipe_rows):
# the time channel over the longest span with a warm-up + cosine learning rate, that with 3x the steps, and the time
# channel over the longest span at twice the width (d_model 128, constant learning rate); then, each beside
# delta-rde-cosine (time channel over the longest span, cosine schedule, the dataset's budget) with one lever
# changed: augmentation (every training batch randomly cropped to 80-100 % of its observed points and thinned by
# 20 %), depth (two fast weight layers: no closed form, the auto solver takes rk4), and an ensemble of 3 models
# trained with other seeds (their mean class probabilities; 3x the training cost).
RECIPE = (
    "delta-rde-cosine",
    "delta-rde-long",
    "delta-rde-wide",
    "delta-rde-augment",
    "delta-rde-deep",
    "delta-rde-ensemble",
)
NEURAL = CT_FWPS + RECIPE + BASELINES
# The toolkit's closed-form mode (neuralde_seq.random_features): a frozen random CT-FWP (delta-rde) and linear CDE
# (slice-block damped oscillators, the mode's default) read out by ridge regression; the first counts as a CT-FWP,
# the others as baselines; the last is the mean decision function of 5 default reservoirs drawn with other seeds.
RANDOM_FEATURES = ("random-features-delta-rde", "random-features", "random-features-ensemble", "random-features-tuned")
TOOLKIT = NEURAL + RANDOM_FEATURES
REFERENCES = ("minirocket", "multirocket-hydra", "quant", "1nn-euclidean", "1nn-dtw")  # neuralde_seq.reference
GAP_REFERENCE = "minirocket"  # the best toolkit row's gap to this reference row, per dataset
MODELS = TOOLKIT + REFERENCES
GOAL_POINTS = 2.0  # the best CT-FWP's mean test accuracy at most this many points below the best baseline's

TASK_OPTIONS = dict(validation_fraction=0.2, split_seed=0, drop_rate=0.3, drop_seed=0)

# The training budget of every row of a dataset: Adam, no early stopping, best-validation checkpoint.
# Batch sizes give every dataset 4-5 optimizer steps per epoch (training parts: ACSF1 80, ArrowHead 28,
# BasicMotions 32, GunPoint 40, ItalyPowerDemand 53, JapaneseVowels 216, OSULeaf 160, PickupGestureWiimoteZ 40
# cases; the last batch of an epoch may be smaller), and the epochs 400 steps per run (ArrowHead, BasicMotions:
# 4 steps x 100 epochs; the others 5 x 80); lr as `neuralde-seq compare`. The reference rows take no budget.
# Estimated cost on one idle core (1-epoch timings incl. validation, the first six rows, 3 seeds): ACSF1 2.5 h,
# OSULeaf 50 min, ArrowHead 20 min, BasicMotions 10 min (GunPoint, ItalyPowerDemand, JapaneseVowels and
# PickupGestureWiimoteZ not timed yet).
BUDGETS = {
    "ACSF1": dict(epochs=80, lr=3e-3, batch_size=16),
    "ArrowHead": dict(epochs=100, lr=3e-3, batch_size=8),
    "BasicMotions": dict(epochs=100, lr=3e-3, batch_size=8),
    "GunPoint": dict(epochs=80, lr=3e-3, batch_size=8),
    "ItalyPowerDemand": dict(epochs=80, lr=3e-3, batch_size=12),
    "JapaneseVowels": dict(epochs=80, lr=3e-3, batch_size=48),
    "OSULeaf": dict(epochs=80, lr=3e-3, batch_size=32),
    "PickupGestureWiimoteZ": dict(epochs=80, lr=3e-3, batch_size=8),
}
EVAL_BATCH_SIZE = 64


def rows() -> list[dict]:
    """The rows: registry defaults; delta-rde with the exact solver (closed-form steps per window); the reference
    methods with their defaults (MiniRocket: 10,000 kernels, ridge over alphas 1e-3..1e3)."""
    return [
        {"label": "delta-cde", "model": "delta-cde"},
        {"label": "delta-rde", "model": "delta-rde", "solver": {"method": "exact"}},
        {"label": "hebb-cde", "model": "hebb-cde"},
        {"label": "ncde", "model": "ncde"},
        {"label": "ckcnn", "model": "ckcnn"},
        {"label": "gru-d", "model": "gru-d"},
        # issue 15's anchors, registry defaults: Log-NCDE on depth-2 log-signature windows, linear NCDEs on the
        # linear control with a time channel
        {"label": "log-ncde", "model": "log-ncde"},
        {"label": "slice-block", "model": "slice-block"},
        {"label": "slice-diag", "model": "slice-diag"},
        {"label": "slice-dplr", "model": "slice-dplr"},
        # the practitioner's references (closed form, neuralde_seq.reference): fitted on train + validation
        {"label": "minirocket", "model": "minirocket"},
        {"label": "multirocket-hydra", "model": "multirocket-hydra"},
        {"label": "quant", "model": "quant"},
        {"label": "1nn-euclidean", "model": "1nn-euclidean"},
        {"label": "1nn-dtw", "model": "1nn-dtw"},
        # the toolkit's random-feature mode (closed form, fitted like the references on train + validation)
        {"label": "random-features", "model": "random-features"},
        {"label": "random-features-delta-rde", "model": "random-features-delta-rde"},
        {"label": "random-features-ensemble", "model": "random-features", "options": {"ensemble": 5}},
        {"label": "random-features-tuned", "model": "random-features-tuned"},
    ]


# The time channel study: delta-rde (exact) as in the table (the registry's time channel: the observation index,
# gaps 1-3 after the drop), without a time channel, and with the times divided by the training split's longest
# span (time_unit="auto"). Run with the delta-rde row; cheap (closed-form steps).
TIME_CHANNEL_VARIANTS = {
    "delta-rde": "time channel (default)",
    "delta-rde-no-time": "no time channel",
    "delta-rde-time-auto": "time / longest span",
}


def recipe_rows(budget: dict) -> list[dict]:
    """The recipe study's rows (RECIPE): delta-rde with time_unit="auto" and the cosine schedule, at the dataset's
    budget and at three times its epochs; with time_unit="auto" at twice the registry's width; and the cosine row
    with augmentation, with two layers, and as an ensemble of three."""
    recipe = {"model": "delta-rde", "control": {"time_unit": "auto"}}
    return [
        {"label": "delta-rde-cosine", **recipe, "training": {"schedule": "cosine"}},
        {"label": "delta-rde-long", **recipe, "training": {"schedule": "cosine", "epochs": 3 * budget["epochs"]}},
        {"label": "delta-rde-wide", **recipe, "options": {"d_model": 128}},
        {
            "label": "delta-rde-augment",
            **recipe,
            "training": {"schedule": "cosine", "augment_drop_rate": 0.2, "augment_crop": 0.8},
        },
        {"label": "delta-rde-deep", **recipe, "training": {"schedule": "cosine"}, "options": {"num_layers": 2}},
        {"label": "delta-rde-ensemble", **recipe, "training": {"schedule": "cosine", "ensemble": 3}},
    ]


def time_channel_rows() -> list[dict]:
    """The study's rows beside the table's delta-rde: without a time channel; times over the longest span."""
    return [
        {
            "label": "delta-rde-no-time",
            "model": "delta-rde",
            "solver": {"method": "exact"},
            "control": {"time_channel": False},
        },
        {
            "label": "delta-rde-time-auto",
            "model": "delta-rde",
            "solver": {"method": "exact"},
            "control": {"time_unit": "auto"},
        },
    ]


# ------------------------------------------------------------------------------------------------ data
HOW_TO_GET = (
    "To get the files without installing aeon (BSD-3 licence):\n"
    "    pip download aeon==1.6.0 --no-deps -d /tmp/aeon\n"
    "    unzip -q /tmp/aeon/aeon-1.6.0-*.whl 'aeon/datasets/data/*' -d /tmp/aeon_data\n"
    "then run with --data /tmp/aeon_data/aeon/datasets/data (a folder holding "
    + ", ".join(f"{n}/" for n in DATASETS)
    + ")."
)


class DataNotFound(Exception):
    pass


def _missing(folder: Path, names) -> list[str]:
    """The datasets of ``names`` without a complete TRAIN/TEST pair in ``folder/<Name>``."""
    from neuralde_seq.data.formats.local_files import find_split_files

    missing = []
    for name in names:
        try:
            find_split_files(folder / name, name)
        except (FileNotFoundError, ValueError):
            missing.append(name)
    return missing


def aeon_data_folders() -> list[Path]:
    """``datasets/data`` of an installed aeon package, located without importing aeon."""
    try:
        spec = importlib.util.find_spec("aeon")  # a top-level name: finds the package, imports nothing
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(location) / "datasets" / "data" for location in spec.submodule_search_locations]


def find_data(data: str | None, names) -> Path:
    """The folder holding ``<Name>/<Name>_TRAIN.ts`` etc.: ``--data``, else an installed aeon's data folder."""
    if data is not None:
        root = Path(data).expanduser().resolve()
        if not root.is_dir():
            raise DataNotFound(f"--data {data}: no such folder.\n{HOW_TO_GET}")
        # the unzipped wheel's root is accepted too
        candidates = [root, root / "aeon" / "datasets" / "data"]
        for folder in candidates:
            if not _missing(folder, names):
                return folder
        missing = _missing(root, names)
        raise DataNotFound(
            f"--data {root}: no <Name>/<Name>_TRAIN.ts and _TEST.ts for {', '.join(missing)}.\n{HOW_TO_GET}"
        )
    folders = aeon_data_folders()
    for folder in folders:
        if not _missing(folder, names):
            return folder
    where = (
        f"the installed aeon package's data folder ({', '.join(map(str, folders))}) lacks some of them"
        if folders
        else "aeon is not installed (importlib.util.find_spec('aeon') found nothing)"
    )
    raise DataNotFound(f"the datasets {', '.join(names)} were not found: no --data given, and {where}.\n{HOW_TO_GET}")


# ---------------------------------------------------------------------------------------------- configs
def dataset_config(name: str, data: Path, budget: dict, seeds) -> dict:
    """The benchmark config of one dataset (schema: docs/benchmarks.md)."""
    return {
        "name": f"aeon-{name}",
        "description": f"{name} (aeon's .ts files), 30% of observations dropped: CT-FWPs vs NCDE, CKCNN, GRU-D, "
        "Log-NCDE, linear NCDEs, and the reference methods",
        "task": "files",
        "task_options": {"path": str(data / name), **TASK_OPTIONS},
        "seeds": [int(s) for s in seeds],
        "training": {
            **budget,
            "eval_batch_size": EVAL_BATCH_SIZE,
            "patience": None,
            "grad_clip": None,
            "weight_decay": 0.0,
            "penalty_weight": 0.0,
            "select_on": "accuracy",
        },
        "models": rows() + recipe_rows(budget) + time_channel_rows(),
    }


# ------------------------------------------------------------------------------------------------ table
def _cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    if entry.get("failed"):
        return "failed"
    mean, std, spe = entry["mean"], entry["std"], entry["seconds_per_epoch"]
    text = "-" if mean is None else f"{100 * mean:.2f}" + ("" if std is None else f" ± {100 * std:.2f}")
    if entry.get("reference"):
        if entry.get("wall_seconds") is not None:
            text += f" ({entry['wall_seconds']:.3g} s run)"
    elif spe is not None:
        text += f" ({spe:.2f} s)"
    if entry["diverged_seeds"]:
        text += f" DIVERGED seeds {entry['diverged_seeds']}"
    return text


def goal(entries: dict[str, dict]) -> dict:
    """Best CT-FWP (by mean test accuracy) within GOAL_POINTS of the best baseline: met, gap in points."""

    def best(names):
        scored = [
            (entries[n]["mean"], n)
            for n in names
            if n in entries and not entries[n].get("failed") and entries[n]["mean"] is not None
        ]
        return max(scored) if scored else None

    fwp, base = best(CT_FWPS + RECIPE + RANDOM_FEATURES[:1]), best(BASELINES + RANDOM_FEATURES[1:])
    if fwp is None or base is None:
        return {
            "met": None,
            "gap": None,
            "best_ct_fwp": fwp and fwp[1],
            "best_baseline": base and base[1],
            "reason": "no CT-FWP row" if fwp is None else "no baseline row",
        }
    gap = 100 * (fwp[0] - base[0])
    return {
        "met": gap >= -GOAL_POINTS,
        "gap": gap,
        "best_ct_fwp": fwp[1],
        "best_baseline": base[1],
        "best_ct_fwp_accuracy": 100 * fwp[0],
        "best_baseline_accuracy": 100 * base[0],
    }


def reference_gap(entries: dict[str, dict]) -> dict:
    """The best toolkit row (CT-FWPs, baselines, random features; by mean test accuracy) minus GAP_REFERENCE, in
    points."""
    scored = [
        (entries[n]["mean"], n)
        for n in TOOLKIT
        if n in entries and not entries[n].get("failed") and entries[n]["mean"] is not None
    ]
    ref = entries.get(GAP_REFERENCE)
    if not scored or ref is None or ref.get("failed") or ref["mean"] is None:
        return {
            "gap": None,
            "best_neural": scored and max(scored)[1] or None,
            "reason": "no toolkit row" if not scored else f"no {GAP_REFERENCE} row",
        }
    best = max(scored)
    return {
        "gap": 100 * (best[0] - ref["mean"]),
        "best_neural": best[1],
        "best_neural_accuracy": 100 * best[0],
        "reference": GAP_REFERENCE,
        "reference_accuracy": 100 * ref["mean"],
    }


def _gap_cell(g: dict) -> str:
    if g["gap"] is None:
        return f"n/a ({g['reason']})"
    return f"{g['gap']:+.2f} ({g['best_neural']} {g['best_neural_accuracy']:.2f} vs {g['reference_accuracy']:.2f})"


def _goal_cell(g: dict) -> str:
    if g["met"] is None:
        return f"n/a ({g['reason']})"
    return (
        f"{'yes' if g['met'] else 'no'} ({g['gap']:+.2f}: {g['best_ct_fwp']} {g['best_ct_fwp_accuracy']:.2f} "
        f"vs {g['best_baseline']} {g['best_baseline_accuracy']:.2f})"
    )


def combined_table(datasets: dict[str, dict], labels) -> str:
    from neuralde_seq.training.results import format_table

    names = list(datasets)
    table_rows = []
    for label in labels:
        kind = (
            "CT-FWP"
            if label in CT_FWPS
            else "CT-FWP, recipe"
            if label in RECIPE
            else "reference"
            if label in REFERENCES
            else "random features"
            if label in RANDOM_FEATURES
            else None
        )
        row = {"model": label + (f" ({kind})" if kind else "")}
        for name in names:
            row[name] = _cell(datasets[name]["rows"].get(label))
        table_rows.append(row)
    table_rows.append(
        {
            "model": f"**goal** (best CT-FWP ≥ best baseline − {GOAL_POINTS:g})",
            **{name: _goal_cell(datasets[name]["goal"]) for name in names},
        }
    )
    table_rows.append(
        {
            "model": f"**gap to {GAP_REFERENCE}** (best toolkit row − {GAP_REFERENCE}, points)",
            **{name: _gap_cell(datasets[name]["reference_gap"]) for name in names},
        }
    )
    headers = ["model"] + [f"{n} (n_test {datasets[n]['data'].get('num_test', '?')})" for n in names]
    return format_table(table_rows, ["model", *names], headers=headers)


def _summary_entry(summary: dict) -> dict:
    test = summary["metrics"]["test"]["accuracy"]
    return {
        "model": summary["model"],
        "mean": test["mean"],
        "std": test["std"],
        "values": test["values"],
        "seeds": summary["seeds"],
        "seconds_per_epoch": summary["seconds_per_epoch"]["mean"],
        "val_mean": summary["metrics"]["val"]["accuracy"]["mean"],
        "params": summary["params"],
        "diverged_seeds": summary["diverged_seeds"],
        "failed": None,
        "reference": summary.get("reference", False),
        "fit_seconds": (summary.get("train_seconds") or {}).get("mean"),
    }


# --------------------------------------------------------------------------------------------- running
def _run_results(out: Path, config: dict, label: str, seeds, max_steps) -> list[dict]:
    """The result.json of this config's runs of row ``label`` (the runner's fingerprinted folders), by seed.

    A folder matches when its recorded settings equal this config's (row, task options, seed, max_steps);
    where several do (the same settings on other data), the newest is taken.
    """
    from neuralde_seq.training.config import parse_config, slug
    from neuralde_seq.training.results import to_jsonable

    row = next(r for r in parse_config(config).rows if r.label == label)
    wanted = json.loads(json.dumps(to_jsonable({"row": row.to_dict(), "task_options": config["task_options"]})))
    found = []
    for seed in seeds:
        matches = []
        for path in (out / "runs" / slug(label)).glob(f"seed{seed}-*/result.json"):
            result = json.loads(path.read_text())
            settings = result["config"]
            if (
                settings["row"] == wanted["row"]
                and settings["task_options"] == wanted["task_options"]
                and settings["seed"] == seed
                and settings["max_steps"] == max_steps
            ):
                matches.append((path.stat().st_mtime, result))
        if matches:
            found.append(max(matches, key=lambda m: m[0])[1])
    return found


def run_dataset(name: str, data: Path, budget: dict, args, labels) -> dict:
    """Run every row of one dataset (each row on its own, so that one failing row leaves the others), then
    write the runner's report of the rows that ran (reusing their runs by fingerprint)."""
    from neuralde_seq.training.runner import run_benchmark

    config = dataset_config(name, data, budget, args.seeds)
    out = Path(args.out) / name
    common = dict(out_dir=out, seeds=args.seeds, max_steps=args.max_steps, device=args.device, threads=args.threads)
    entries, ok = {}, []
    for label in labels:
        try:
            run_benchmark(config, models=[label], resume=args.resume, progress=not args.no_progress, **common)
            ok.append(label)
        except KeyboardInterrupt:
            raise
        except Exception as err:  # a row that cannot run: reported, the other rows go on
            traceback.print_exc()
            entries[label] = {"model": label, "failed": f"{type(err).__name__}: {err}"}
            print(f"[{name} {label}] FAILED: {type(err).__name__}: {err}", file=sys.stderr)
    info = {}
    if ok:
        # Every run of these rows is finished now: this call only reads them back and writes the runner's
        # report of the dataset (results.md, results.json, curves) in <out>/<Name>.
        results = run_benchmark(config, models=ok, resume=True, progress=False, **common)
        for summary in results["rows"]:
            entries[summary["label"]] = _summary_entry(summary)
        for label in ok:
            runs = _run_results(out, config, label, args.seeds, args.max_steps)
            entries[label]["run_seconds"] = sum(r["timing"]["total_seconds"] for r in runs)
            # one run's wall time, fit and every prediction (for a 1-NN row the distances are in the predictions)
            entries[label]["wall_seconds"] = entries[label]["run_seconds"] / len(runs) if runs else None
            entries[label]["fit"] = _fit_diagnostics(runs)
            info = info or (runs[0]["data"] if runs else {})
    study = time_channel_study(config, out, args, common) if "delta-rde" in ok else None
    return {
        "budget": budget,
        "task_options": config["task_options"],
        "data": info,
        "rows": {label: entries[label] for label in labels},
        "goal": goal(entries),
        "reference_gap": reference_gap(entries),
        "time_channel": study,
    }


def time_channel_study(config: dict, out: Path, args, common: dict) -> dict | None:
    """Run the study's rows (:func:`time_channel_rows`) and collect, per variant and seed, the validation and
    test accuracies; and per seed the variant with the best validation accuracy (ties: the first listed, the
    default) with its test accuracy: the time channel chosen on validation, as a user would choose it."""
    from neuralde_seq.training.runner import run_benchmark

    for row in time_channel_rows():
        try:
            run_benchmark(config, models=[row["label"]], resume=args.resume, progress=not args.no_progress, **common)
        except KeyboardInterrupt:
            raise
        except Exception as err:  # reported; the table stands without the study
            traceback.print_exc()
            print(f"[{config['name']} {row['label']}] FAILED: {type(err).__name__}: {err}", file=sys.stderr)
            return None
    per_seed = {}
    for label in TIME_CHANNEL_VARIANTS:
        runs = {r["config"]["seed"]: r for r in _run_results(out, config, label, args.seeds, args.max_steps)}
        per_seed[label] = {
            seed: {"val": runs[seed]["metrics"]["val"]["accuracy"], "test": runs[seed]["metrics"]["test"]["accuracy"]}
            for seed in runs
        }
    seeds = [s for s in args.seeds if all(s in per_seed[label] for label in TIME_CHANNEL_VARIANTS)]
    chosen = {}
    for seed in seeds:
        label = max(TIME_CHANNEL_VARIANTS, key=lambda v: (per_seed[v][seed]["val"], v == "delta-rde"))
        chosen[seed] = {"variant": label, **per_seed[label][seed]}
    return {"per_seed": per_seed, "chosen": chosen, "seeds": seeds}


def _chosen_meets_goal(d: dict) -> bool:
    """The delta-rde variant chosen on validation (mean test accuracy over seeds) within GOAL_POINTS of the best
    baseline."""
    study, g = d.get("time_channel"), d["goal"]
    if not study or not study["seeds"] or g.get("best_baseline_accuracy") is None:
        return False
    chosen = [study["chosen"][s]["test"] for s in study["seeds"]]
    return 100 * sum(chosen) / len(chosen) >= g["best_baseline_accuracy"] - GOAL_POINTS


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    mean = sum(values) / len(values)
    if len(values) < 2:
        return f"{100 * mean:.2f}"
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return f"{100 * mean:.2f} ± {100 * std:.2f}"


def time_channel_table(datasets: dict[str, dict]) -> str | None:
    """Rows = datasets; per variant "test mean ± std (val mean)"; the variant chosen on validation per seed;
    the best baseline of the main table."""
    from neuralde_seq.training.results import format_table

    table_rows = []
    for name, d in datasets.items():
        study = d.get("time_channel")
        if not study or not study["seeds"]:
            continue
        row = {"dataset": name}
        for label, title in TIME_CHANNEL_VARIANTS.items():
            runs = [study["per_seed"][label][s] for s in study["seeds"]]
            val = sum(r["val"] for r in runs) / len(runs)
            row[title] = f"{_mean_std([r['test'] for r in runs])} (val {100 * val:.1f})"
        chosen = [study["chosen"][s] for s in study["seeds"]]
        names = ", ".join(TIME_CHANNEL_VARIANTS[c["variant"]].split(" (")[0] for c in chosen)
        row["chosen on validation"] = f"{_mean_std([c['test'] for c in chosen])} ({names})"
        g = d["goal"]
        row["best baseline"] = (
            "-" if g.get("best_baseline") is None else f"{g['best_baseline']} {g['best_baseline_accuracy']:.2f}"
        )
        table_rows.append(row)
    if not table_rows:
        return None
    columns = ["dataset", *TIME_CHANNEL_VARIANTS.values(), "chosen on validation", "best baseline"]
    return format_table(table_rows, columns)


def _fit_diagnostics(runs: list[dict]) -> dict:
    """How far training got, per row (means over the seeds): the running training accuracy of the last
    epoch, and the best-validation epoch (late = still improving when the budget ended: underfitted; early with
    a high training accuracy = overfitted)."""
    last = [r["history"]["train_accuracy"][-1] for r in runs if r["history"].get("train_accuracy")]
    best = [r["history"]["best_epoch"] for r in runs if r["history"].get("best_epoch") is not None]
    return {
        "train_accuracy_last": sum(last) / len(last) if last else None,
        "best_epoch": sum(best) / len(best) if best else None,
        "epochs_run": max((r["history"]["epochs_run"] for r in runs), default=None),
    }


def diagnostics_table(datasets: dict[str, dict], labels) -> str:
    """Rows = models, columns = datasets: "last-epoch training accuracy % / mean best epoch of E"."""
    from neuralde_seq.training.results import format_table

    names = list(datasets)
    table_rows = []
    for label in labels:
        if label in REFERENCES:  # fitted in closed form: no epochs
            continue
        row = {"model": label}
        for name in names:
            fit = (datasets[name]["rows"].get(label) or {}).get("fit")
            if not fit or fit["train_accuracy_last"] is None:
                row[name] = "-"
            else:
                row[name] = (
                    f"{100 * fit['train_accuracy_last']:.0f} / {fit['best_epoch']:.0f} of "
                    f"{datasets[name]['budget']['epochs']}"
                )
        table_rows.append(row)
    return format_table(table_rows, ["model", *names], headers=["model"] + names)


def _complete(args) -> list[str]:
    """What keeps this invocation from being the whole protocol (empty: it is)."""
    problems = []
    if args.max_steps is not None:
        problems.append(f"a smoke run (--max-steps {args.max_steps})")
    if set(args.datasets) != set(DATASETS):
        problems.append(f"datasets {', '.join(args.datasets)} (not all of {', '.join(DATASETS)})")
    if set(args.models) != set(MODELS):
        problems.append(f"models {', '.join(args.models)} (not all of them)")
    if len(args.seeds) < 3:
        problems.append(f"{len(args.seeds)} seed(s) (at least 3)")
    if args.epochs is not None and any(args.epochs < BUDGETS[n]["epochs"] for n in args.datasets):
        problems.append(
            f"--epochs {args.epochs}, below the budget of "
            + ", ".join(f"{n} ({BUDGETS[n]['epochs']})" for n in args.datasets if args.epochs < BUDGETS[n]["epochs"])
        )
    return problems


def _budgets(results: dict) -> str:
    return "; ".join(
        f"{n}: {d['budget']['epochs']} epochs, lr {d['budget']['lr']:g}, batch {d['budget']['batch_size']}"
        for n, d in results["datasets"].items()
    )


def docs_section(results: dict, table: str) -> str:
    env = results["environment"]
    budgets = _budgets(results)
    met = [n for n, d in results["datasets"].items() if d["goal"]["met"]]
    lines = [
        f"Measured with `{results['command']}` (table written {results['date']}; the runs took "
        f"{results['run_minutes']:.0f} min of wall time in all, training and evaluation; {env['cpu']}, "
        f"{env['threads']} thread(s), torch {env['torch']}, {env['device']}).",
        "",
        f"Budget per dataset (every row the same): {budgets}; eval batch {EVAL_BATCH_SIZE}; seeds "
        f"{results['seeds']}. Cells: test accuracy %, mean ± sample std over the seeds, and in brackets the mean "
        "wall time of one training epoch (on a shared machine: compare within a column).",
        "",
        table,
        "",
        "How far training got (mean over the seeds): the training accuracy of the last epoch % / the "
        "best-validation epoch. A best epoch near the end means the row was still improving when the budget "
        "ran out (underfitted at this budget); a high training accuracy with an early best epoch, overfitting.",
        "",
        results["diagnostics"],
        "",
        f"Goal (best CT-FWP within {GOAL_POINTS:g} points of the best baseline) met on {len(met)} of "
        f"{len(results['datasets'])} datasets" + (f": {', '.join(met)}." if met else "."),
    ]
    gaps = [d["reference_gap"]["gap"] for d in results["datasets"].values() if d["reference_gap"]["gap"] is not None]
    if gaps:
        lines += [
            "",
            f"Reference rows ({', '.join(REFERENCES)}; neuralde_seq.reference): the same dropped series, "
            "linearly interpolated onto each series' own grid, fitted in closed form on the training and "
            "validation parts together; in brackets the wall time of one run (fit and predictions). The best "
            f"toolkit row minus {GAP_REFERENCE}: {sum(gaps) / len(gaps):+.1f} points on average over "
            f"{len(gaps)} datasets (from {min(gaps):+.1f} to {max(gaps):+.1f}).",
        ]
    if results.get("time_channel_table"):
        lines += [
            "",
            "The time channel of delta-rde (exact solver), the same protocol and budget: test accuracy % "
            "mean ± std over the seeds (and the mean validation accuracy) with the registry's time channel "
            "(the observation index), without one, and with the times divided by the training split's "
            'longest span (`time_unit="auto"`); and, per seed, the variant with the best validation '
            "accuracy, as a user choosing by validation would get it.",
            "",
            results["time_channel_table"],
        ]
        met_chosen = [n for n, d in results["datasets"].items() if _chosen_meets_goal(d)]
        studied = [n for n, d in results["datasets"].items() if d.get("time_channel") and d["time_channel"]["seeds"]]
        lines += [
            "",
            f"With delta-rde's time channel chosen on validation, the goal is met on {len(met_chosen)} of "
            f"{len(studied)} datasets" + (f": {', '.join(met_chosen)}." if met_chosen else "."),
        ]
    failed = [
        f"{label} on {n} ({e['failed']})"
        for n, d in results["datasets"].items()
        for label, e in d["rows"].items()
        if e.get("failed")
    ]
    if failed:
        lines += ["", "Failed rows: " + "; ".join(failed) + "."]
    return "\n".join(lines)


def update_docs(section: str, path: Path = DOCS) -> None:
    text = path.read_text()
    pattern = re.compile(re.escape(MARK_START) + r".*?" + re.escape(MARK_END), re.DOTALL)
    if not pattern.search(text):
        raise RuntimeError(f"{path} has no section between {MARK_START} and {MARK_END}")
    write_text_atomic(path, pattern.sub(lambda _: f"{MARK_START}\n{section}\n{MARK_END}", text, count=1))


# ------------------------------------------------------------------------------------------------- main
def _names(text: str, known, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"{what}: unknown {unknown or 'empty list'}; known: {', '.join(known)}")
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument(
        "--data",
        default=None,
        help="folder holding "
        + ", ".join(f"{n}/" for n in DATASETS)
        + " (default: the data folder of an installed aeon package)",
    )
    parser.add_argument(
        "--datasets",
        type=lambda t: _names(t, DATASETS, "--datasets"),
        default=list(DATASETS),
        help="comma-separated (default: %(default)s)",
    )
    parser.add_argument(
        "--models",
        type=lambda t: _names(t, MODELS, "--models"),
        default=list(MODELS),
        help="comma-separated rows (default: all of them)",
    )
    parser.add_argument(
        "--seeds",
        type=lambda t: [int(s) for s in t.split(",") if s.strip()],
        default=[0, 1, 2],
        help="comma-separated training seeds (default: 0,1,2)",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="epochs of every row of every dataset (default: the budget per dataset: "
        + ", ".join(f"{n} {b['epochs']}" for n, b in BUDGETS.items())
        + ")",
    )
    parser.add_argument("--out", default="results/aeon_datasets", help="output folder (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    parser.add_argument("--device", default="cpu", help="torch device (default: %(default)s)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse finished runs and continue interrupted ones with the same fingerprint",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="smoke run: stop every run after N optimizer steps (marked SMOKE RUN, not results)",
    )
    parser.add_argument(
        "--update-docs",
        action="store_true",
        help=f"write the table into {DOCS.relative_to(REPO)} between {MARK_START} and {MARK_END} "
        "(only for the whole protocol, not for smoke runs)",
    )
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        parser.error("--epochs must be a positive integer")
    if args.max_steps is not None and args.max_steps < 1:
        parser.error("--max-steps must be a positive integer")
    if not args.seeds or any(s < 0 for s in args.seeds):
        parser.error("--seeds needs non-negative integers")
    if args.update_docs:
        problems = _complete(args)
        if problems:  # refused before anything runs: the docs only get numbers of the whole protocol
            parser.error("--update-docs writes only the whole protocol's numbers; this run is " + "; ".join(problems))

    try:
        data = find_data(args.data, args.datasets)
    except DataNotFound as err:
        print(f"aeon_datasets.py: {err}", file=sys.stderr)
        return 2

    import torch

    started = time.perf_counter()
    labels = [m for m in MODELS if m in args.models]
    results = {
        "smoke": args.max_steps is not None,
        "max_steps": args.max_steps,
        "seeds": args.seeds,
        "command": "python benchmarks/aeon_datasets.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": time.strftime("%Y-%m-%d"),
        "data_folder": str(data),
        "task_options": TASK_OPTIONS,
        "ct_fwps": list(CT_FWPS),
        "baselines": list(BASELINES),
        "references": list(REFERENCES),
        "gap_reference": GAP_REFERENCE,
        "goal_points": GOAL_POINTS,
        "environment": {
            "cpu": cpu_name(),
            "threads": args.threads,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": args.device,
            "code": code_version(),
            "load_average_start": os.getloadavg()[0],
        },
        "datasets": {},
    }
    for name in args.datasets:
        budget = dict(BUDGETS[name])
        if args.epochs is not None:
            budget["epochs"] = args.epochs
        print(f"== {name}: {budget} ==", file=sys.stderr)
        results["datasets"][name] = run_dataset(name, data, budget, args, labels)
    results["wall_minutes"] = (time.perf_counter() - started) / 60  # this invocation (little when resumed)
    results["run_minutes"] = (
        sum(e.get("run_seconds", 0.0) for d in results["datasets"].values() for e in d["rows"].values()) / 60
    )
    results["environment"]["load_average_end"] = os.getloadavg()[0]

    table = combined_table(results["datasets"], labels)
    results["table"] = table
    results["diagnostics"] = diagnostics_table(results["datasets"], labels)
    results["time_channel_table"] = time_channel_table(results["datasets"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from neuralde_seq.training.results import write_json

    write_json(results, out / "results.json")
    title = (
        "SMOKE RUN (not results) — " if results["smoke"] else ""
    ) + f"CT-FWPs vs baselines and reference methods on aeon's {', '.join(args.datasets)} (30 % dropped)"
    notes = [
        f"SMOKE RUN: every run stopped after {args.max_steps} optimizer step(s). These numbers test that the "
        "script runs; they are not results."
        if results["smoke"]
        else "",
        "Cells: test accuracy % of each run's best-validation checkpoint, mean ± sample std (ddof 1) over seeds "
        f"{args.seeds}; in brackets the mean wall time of one training epoch (s).",
        f"Budget per dataset, the same for every row: {_budgets(results)}; no early stopping; data "
        f"{data}, task options {TASK_OPTIONS}.",
        f"Goal: the best CT-FWP ({', '.join(CT_FWPS + RECIPE + RANDOM_FEATURES[:1])}) by mean within {GOAL_POINTS:g} "
        f"points of the best baseline ({', '.join(BASELINES + RANDOM_FEATURES[1:])}); the gap is CT-FWP − baseline in "
        "points.",
        f"Reference rows ({', '.join(REFERENCES)}): closed-form methods of neuralde_seq.reference on the same dropped "
        "series linearly interpolated onto each series' own grid, fitted on the training and validation parts "
        f"together; in brackets the wall time of one run (fit and predictions, s); the random-feature rows "
        f"({', '.join(RANDOM_FEATURES)}) likewise, on the series themselves. Gap to {GAP_REFERENCE}: the best toolkit "
        f"row's mean minus {GAP_REFERENCE}'s, in points.",
        f"Command: `{results['command']}`; this invocation {results['wall_minutes']:.1f} min, the runs "
        f"{results['run_minutes']:.1f} min (as recorded when made); {results['environment']['cpu']}, "
        f"{args.threads} thread(s), torch {torch.__version__}.",
    ]
    md = (
        f"# {title}\n\n{table}\n\n"
        + "\n\n".join(n for n in notes if n)
        + (
            f"\n\nTraining accuracy of the last epoch % / best-validation epoch (means over the seeds):\n\n"
            f"{results['diagnostics']}\n"
            if any(label in NEURAL for label in labels)
            else "\n"
        )
        + (
            f"\nThe time channel of delta-rde (exact): test accuracy % mean ± std over the seeds (mean validation "
            f"accuracy); per seed the variant with the best validation accuracy:\n\n{results['time_channel_table']}\n"
            if results["time_channel_table"]
            else ""
        )
    )
    write_text_atomic(out / "results.md", md)
    print(("SMOKE RUN (not results)\n" if results["smoke"] else "") + table)
    print(f"\nwrote {out / 'results.md'}, {out / 'results.json'}")
    bad = [
        f"{label} on {n}"
        for n, d in results["datasets"].items()
        for label, e in d["rows"].items()
        if e.get("failed") or e.get("diverged_seeds")
    ]
    if args.update_docs:
        if results["smoke"]:  # cannot happen (refused above); kept as the last guard
            raise RuntimeError("a smoke run never updates the docs")
        update_docs(docs_section(results, table))
        print(f"updated {DOCS}")
    if bad:
        print("failed or diverged: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
