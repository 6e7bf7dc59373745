"""Reports of benchmark runs: aggregation over seeds, the results table, learning curves and plots.

Standard deviations over seeds are *sample* standard deviations (ddof = 1, Bessel's correction): the
papers' "mean and standard deviation over 5 runs" come from Kidger et al.'s results code
(``torch.Tensor.std``, unbiased by default), which paper 002's starred numbers are taken from. With a
single seed the std is reported as missing.
"""

from __future__ import annotations

import csv
import math
import platform
import subprocess
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from ..file_format import FORMAT_KEY, FORMAT_VERSION
from ..files import atomic_file
from .config import DEFAULT_SCALE
from .results import TERMINAL_WIDTH, format_table, write_json, write_table

__all__ = [
    "STD_DDOF",
    "aggregate",
    "environment",
    "write_curves",
    "summarise_row",
    "results_table",
    "terminal_table",
    "write_report",
]

STD_DDOF = 1
"""Delta degrees of freedom of the std over seeds (sample std, as the papers' results code)."""


# ------------------------------------------------------------------------------------------ aggregation
def aggregate(values: Sequence[float | None], ddof: int = STD_DDOF) -> dict:
    """``{"values", "n", "mean", "std"}`` of the non-missing values; std with ``ddof`` (None if n <= ddof).

    Missing values (None, e.g. an undefined AUROC) are counted in ``missing`` and excluded.
    """
    present = [float(v) for v in values if v is not None]
    n = len(present)
    mean = sum(present) / n if n else None
    std = math.sqrt(sum((v - mean) ** 2 for v in present) / (n - ddof)) if mean is not None and n > ddof else None
    return {"values": list(values), "n": n, "missing": len(values) - n, "mean": mean, "std": std}


def environment(device: torch.device, dtype: torch.dtype) -> dict:
    import numpy
    import sklearn

    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                cwd=Path(__file__).resolve().parent,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "sklearn": sklearn.__version__,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "dtype": str(dtype).replace("torch.", ""),
        "git_commit": commit,
    }


_CURVE_COLUMNS = ("epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "val_auroc", "seconds")


def write_curves(history: Mapping, path: Path) -> None:
    with atomic_file(path, "w", newline="") as f:  # a unique temporary file, then os.replace
        writer = csv.writer(f)
        writer.writerow(_CURVE_COLUMNS)
        for i in range(len(history["train_loss"])):
            auroc = history.get("val_auroc", [None] * (i + 1))[i]
            writer.writerow(
                [
                    i + 1,
                    repr(history["train_loss"][i]),
                    repr(history["train_accuracy"][i]),
                    repr(history["val_loss"][i]),
                    repr(history["val_accuracy"][i]),
                    "" if auroc is None else repr(auroc),
                    repr(history["seconds_per_epoch"][i]),
                ]
            )


def _format_mean_std(stats: dict, scale: float, digits: int) -> str:
    if stats["mean"] is None:
        return "-"
    text = f"{stats['mean'] * scale:.{digits}f}"
    if stats["std"] is not None:
        text += f" ± {stats['std'] * scale:.{digits}f}"
    return text


def _digits(scale: float) -> int:
    return 2 if scale >= 100 else 4


def summarise_row(row: dict, results: list[dict], task_metric: str, variants: list[dict]) -> dict:
    paper = row["paper"]
    metric = paper["metric"] if paper else task_metric
    scale = paper["scale"] if paper else DEFAULT_SCALE[metric]
    splits = ["test", "val"] + [v["label"] for v in variants]
    stats = {
        split: {m: aggregate([r["metrics"][split][m] for r in results]) for m in ("accuracy", "auroc", "loss")}
        for split in splits
    }
    spe = [
        sum(r["history"]["seconds_per_epoch"]) / len(r["history"]["seconds_per_epoch"])
        for r in results
        if r["history"]["seconds_per_epoch"]
    ]
    # wall time of training (a reference row: of fitting), per run
    train_seconds = [r.get("timing", {}).get("train_seconds") for r in results]
    # a closed-form row's one-off compilation before its fit (None elsewhere, and in runs recorded before it was)
    compile_seconds = [r.get("timing", {}).get("compile_seconds") for r in results]
    ours = stats["test"][metric]
    diff = None
    if paper and ours["mean"] is not None:
        diff = ours["mean"] * scale - paper["value"]
    return {
        "label": row["label"],
        "model": row["model"],
        "seeds": [r["seed"] for r in results],
        "metric": metric,
        "scale": scale,
        "metrics": stats,
        "paper": paper,
        "difference": diff,
        "params": results[0]["params"] if results else None,
        "seconds_per_epoch": aggregate(spe),
        "train_seconds": aggregate(train_seconds),
        "compile_seconds": aggregate(compile_seconds),
        "reference": bool(row.get("reference")),
        "closed_form_kind": _closed_form_kind(row["model"]) if row.get("reference") else None,
        "diverged_seeds": [r["seed"] for r in results if r["diverged"]],
    }


def _closed_form_kind(name: str) -> str:
    """What a closed-form row is: "reference" (a practitioner's method) or "random features" (the toolkit's)."""
    from ..reference import REFERENCE_METHODS

    method = REFERENCE_METHODS.get(name)
    return method.kind if method is not None else "reference"


def _metric_name(metric: str, scale: float) -> str:
    name = "accuracy" if metric == "accuracy" else "AUROC"
    if scale == 1:
        return name
    return f"{name} %" if scale == 100 and metric == "accuracy" else f"{name} ×{scale:g}"


def _model_cell(summary: dict) -> str:
    """The model column's cell: the registry model where it is not the row's label, and a closed-form row's kind."""
    parts = [summary["model"]] if summary["model"].lower() != summary["label"].lower() else []
    if summary.get("reference"):
        parts.append(f"({_closed_form_kind(summary['model'])})")
    return " ".join(parts)


def _paper_cell(paper: dict | None, digits: int) -> str:
    if not paper:
        return "-"
    return f"{paper['value']:.{digits}f}" + (f" ± {paper['std']:.{digits}f}" if paper["std"] is not None else "")


def _table(summaries: list[dict], variants: list[dict], *, compact: bool) -> tuple[list[dict], list[str], list[str]]:
    """The rows, column keys and headers of the results table; ``compact``: the terminal's (no other metric, no
    seeds or model columns that repeat what the rows or the caption say)."""
    kinds = {(s["metric"], s["scale"]) for s in summaries}
    uniform = len(kinds) == 1
    name = _metric_name(*next(iter(kinds))) if uniform else None
    other_names = {
        _metric_name(o, DEFAULT_SCALE[o])
        for o in ("auroc" if s["metric"] == "accuracy" else "accuracy" for s in summaries)
    }
    rows = []
    for s in summaries:
        metric, scale = s["metric"], s["scale"]
        digits = _digits(scale)
        other = "auroc" if metric == "accuracy" else "accuracy"
        other_scale = DEFAULT_SCALE[other]
        other_value = _format_mean_std(s["metrics"]["test"][other], other_scale, _digits(other_scale))
        row = {
            "label": s["label"],
            "model": _model_cell(s),
            "seeds": len(s["seeds"]),
            "metric": _metric_name(metric, scale),
            "ours": _format_mean_std(s["metrics"]["test"][metric], scale, digits),
            "paper": _paper_cell(s["paper"], digits),
            "diff": "-" if s["difference"] is None else f"{s['difference']:+.{digits}f}",
            # named in the header where every row has the same other metric; in the cell otherwise
            "other": other_value
            if len(other_names) == 1 or other_value == "-"
            else f"{_metric_name(other, other_scale)} {other_value}",
            "val": _format_mean_std(s["metrics"]["val"][metric], scale, digits),
        }
        for v in variants:
            row[f"variant:{v['label']}"] = _format_mean_std(s["metrics"][v["label"]][metric], scale, digits)
        row["params"] = s["params"]
        row["spe"] = s["seconds_per_epoch"]["mean"]
        row["train_s"] = s.get("train_seconds", {}).get("mean")
        compiled = [v for v in (s.get("compile_seconds") or {}).get("values", []) if v is not None]
        row["compile_s"] = max(compiled) if compiled else None  # one-off: the first run's, not a mean over seeds
        rows.append(row)
    same_seeds = len({len(s["seeds"]) for s in summaries}) <= 1
    columns = (
        ["label", "model"]
        + ([] if compact and same_seeds else ["seeds"])
        + ([] if uniform else ["metric"])
        + ["ours", "paper", "diff"]
        + ([] if compact else ["other"])
        + ["val"]
        + [f"variant:{v['label']}" for v in variants]
        + ["params", "spe", "train_s", "compile_s"]
    )
    titles = {
        "label": "row",
        "model": "model",
        "seeds": "seeds",
        "metric": "metric",
        "ours": f"test {name}" if uniform else "ours (test)",
        "paper": "paper",
        "diff": "ours − paper",
        "other": f"test {next(iter(other_names))}" if len(other_names) == 1 else "other test metric",
        "val": f"val {name}" if uniform else "ours (val)",
        "params": "params",
        "spe": "s/epoch",
        "train_s": "train s",
        "compile_s": "compile s",
    }
    titles.update({f"variant:{v['label']}": f"test: {v['label']}" for v in variants})
    return rows, columns, [titles[c] for c in columns]


_FORMATS = {"params": "d", "spe": ".2f", "train_s": ".3g", "compile_s": ".3g"}
_RIGHT = ("ours", "paper", "diff", "other", "val")  # numbers written as text (mean ± std)


def _right(variants: list[dict]) -> tuple[str, ...]:
    return _RIGHT + tuple(f"variant:{v['label']}" for v in variants)


def results_table(summaries: list[dict], variants: list[dict]) -> str:
    """The complete results table of ``results.md``: one row per summary (`summarise_row`), the test metric
    beside the paper's, the other test metric, validation, every variant, size and time; columns empty in every
    row (e.g. "paper" where no row has a paper number) left out.

    Arguments:
        summaries: one `summarise_row` dict per row.
        variants: the config's ``evaluate`` entries (dicts with a ``label``).

    Returns:
        The Markdown table.
    """
    rows, columns, headers = _table(summaries, variants, compact=False)
    return format_table(rows, columns, headers=headers, formats=_FORMATS, right=_right(variants))


def terminal_table(summaries: list[dict], variants: list[dict], width: int = TERMINAL_WIDTH) -> str:
    """The results table as printed: `results_table` without the other test metric, and without the seeds
    column where every row has as many seeds (the caption says them), split into tables of at most ``width``
    characters per line (each repeating the row names) where it is wider.

    Arguments:
        summaries: one `summarise_row` dict per row.
        variants: the config's ``evaluate`` entries (dicts with a ``label``).
        width: the most characters per line (default `TERMINAL_WIDTH`, 80).

    Returns:
        The Markdown table or tables.
    """
    rows, columns, headers = _table(summaries, variants, compact=True)
    return format_table(rows, columns, headers=headers, formats=_FORMATS, max_width=width, right=_right(variants))


def _seeds_caption(summaries: list[dict]) -> str:
    seeds = sorted({seed for s in summaries for seed in s["seeds"]})
    if not seeds:
        return "no runs"
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"mean ± std over seeds {', '.join(map(str, seeds))}"


def _warp_text(warp: Mapping) -> str:
    """A time warp's settings as text, e.g. ``smooth, strength 0.5, modes 3, seed 0, per sample``."""
    options = [f"{key} {value}" for key, value in warp.items() if key not in ("kind", "per_sample")]
    if "per_sample" in warp:
        options.append("per sample" if warp["per_sample"] else "one warp for every sample")
    return ", ".join([str(warp["kind"])] + options)


def write_report(
    cfg: dict,
    per_row: Mapping[str, list[dict]],
    *,
    task_metric: str,
    task_description: str,
    out_dir: Path,
    environment_info: dict,
    max_steps: int | None,
    missing: Sequence[Mapping] = (),
) -> dict:
    """Aggregate the runs of every row over seeds and write ``results.json``, ``results.md``,
    ``curves.png`` (when a row was trained: reference rows have no curves) and ``summary.png`` in ``out_dir``;
    returns the results dict.

    A smoke run (``max_steps`` set) is labelled as such in every file and its numbers are not results:
    ``results.json`` holds ``"smoke": true`` and the table's title says so. Runs of one row must be all
    smoke runs or all full runs. Runs of the grid without a result (``missing``: ``{"label", "seed"}`` each,
    `neuralde_seq.training.runner.report_grid` with ``partial``) are listed in ``results.json`` (``missing``), and
    the title of results.md and the plots says INCOMPLETE, with a note naming them.
    """
    from .plots import plot_curves, plot_summary, summary_protocol

    variants = cfg["evaluate"]
    rows = cfg["models"]
    for row in rows:
        kinds = {bool(r.get("smoke")) for r in per_row[row["label"]]}
        if len(kinds) > 1:
            raise RuntimeError(
                f"row {row['label']!r} mixes smoke runs and full runs; they are never aggregated together"
            )
    summaries = [
        summarise_row(row, sorted(per_row[row["label"]], key=lambda r: r["seed"]), task_metric, variants)
        for row in rows
    ]
    smoke = max_steps is not None
    missing = [{"label": m["label"], "seed": m["seed"]} for m in missing]
    results = {
        FORMAT_KEY: FORMAT_VERSION,
        "name": cfg["name"],
        "description": cfg["description"],
        "task": cfg["task"],
        "config": cfg,
        "std_ddof": STD_DDOF,
        "smoke": smoke,
        "max_steps": max_steps,
        "environment": environment_info,
        "rows": summaries,
        "missing": missing,
    }
    write_json(results, out_dir / "results.json")
    table = results_table(summaries, variants)
    notes = []
    total = len(missing) + sum(len(per_row[row["label"]]) for row in rows)
    incomplete = f"INCOMPLETE ({len(missing)} of {total} runs missing) — " if missing else ""
    if missing:
        notes.append(
            f"INCOMPLETE: {len(missing)} of the grid's {total} runs have no result, and the rows they belong "
            "to hold fewer seeds: " + ", ".join(f"{m['label']} seed {m['seed']}" for m in missing) + "."
        )
    if smoke:
        notes.append(
            f"SMOKE RUN: every run stopped after {max_steps} training steps. These numbers test that the "
            "config runs; they are not results."
        )
    notes += [
        f"Task {cfg['task']} ({task_description}); task options {cfg['task_options'] or '{}'}; "
        f"seeds {cfg['seeds']}; device {environment_info['device']}, {environment_info['dtype']}.",
        "test: the test metric of each run's best-validation checkpoint, mean ± sample std (ddof = 1) over seeds, "
        "at the paper's scale (val: the same on the validation split); ours − paper: difference of the means; "
        "s/epoch: training pass only; columns empty in every row are left out.",
    ]
    references = [s for s in summaries if s["reference"]]
    if references:
        notes.append(
            'Closed-form rows (model marked "(reference)": a practitioner\'s method of neuralde_seq.reference '
            'on the same dropped series, linearly interpolated onto a grid; "(random features)": the '
            "toolkit's frozen random models of neuralde_seq.random_features read out by ridge regression, on "
            "the series themselves) are fitted once, without epochs, on "
            "the training and validation splits together unless a row says fit_on: train (then its val column "
            "is scored); train s: the wall time of the fit (of training, for the other rows), per run; "
            "compile s: the warm-up before a closed-form row's first fit in the process (the longest over "
            "its runs), not in train s "
            "(numba's one-off compilation of its kernels: tens of seconds in a fresh environment, a load "
            "from numba's disk cache after)."
        )
    if variants:
        notes.append(
            "test: <variant>: the test set with other drop rate / sampling rate (absolute), models "
            "trained with the task options above."
        )
    warps = [f"{v['label']}: {_warp_text(v['time_warp'])}" for v in variants if v.get("time_warp")]
    if warps:
        notes.append(
            "Time warps of the test set's observation times (values unchanged; "
            "neuralde_seq.data.transforms.time_warps): " + "; ".join(warps) + "."
        )
    diverged = [f"{s['label']} (seeds {s['diverged_seeds']})" for s in summaries if s["diverged_seeds"]]
    if diverged:
        notes.append("DIVERGED, last good checkpoint reported: " + ", ".join(diverged) + ".")
    sources = sorted({s["paper"]["source"] for s in summaries if s["paper"] and s["paper"]["source"]})
    if sources:
        notes.append("Paper numbers: " + "; ".join(sources) + ".")
    title = (
        incomplete
        + ("SMOKE RUN (not results) — " if smoke else "")
        + cfg["name"]
        + (f": {cfg['description']}" if cfg["description"] else "")
    )
    write_table(table, out_dir / "results.md", title=title, notes="\n\n".join(notes))
    trained = [r for r in rows if not r.get("reference")]  # reference rows have no learning curves
    if trained:
        plot_curves(
            {
                r["label"]: [res["history"] for res in sorted(per_row[r["label"]], key=lambda x: x["seed"])]
                for r in trained
            },
            out_dir / "curves.png",
            title=incomplete + ("SMOKE RUN — " if smoke else "") + cfg["name"],
        )
    plot_summary(
        summaries,
        out_dir / "summary.png",
        title=incomplete + ("SMOKE RUN — " if smoke else "") + cfg["name"],
        task=cfg["task"],
        protocol=summary_protocol(cfg["task_options"]),
    )
    # The table is the answer: printed even without progress bars, within the terminal's 80 columns (the complete
    # table is results.md's).
    caption = textwrap.fill(f"{cfg['name']}: {_seeds_caption(summaries)}", TERMINAL_WIDTH)
    print(
        incomplete.replace(" — ", "\n")
        + ("SMOKE RUN (not results)\n" if smoke else "")
        + caption
        + "\n\n"
        + terminal_table(summaries, variants)
    )
    return results


def say_written(out_dir: Path, results: Mapping) -> None:
    """Print the files `write_report` wrote for ``results`` into ``out_dir`` (once they are in place)."""
    trained = any(not row.get("reference") for row in results["rows"])
    written = ["results.json", "results.md (the full table)"] + (["curves.png"] if trained else []) + ["summary.png"]
    print(f"\nwrote to {out_dir}:\n  " + ", ".join(written))
