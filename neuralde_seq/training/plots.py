"""Plots of benchmark results with matplotlib (Agg backend: no display needed).

- `plot_curves`: learning curves, one colour per model row: training loss and the validation
  metric per epoch, a thin line per seed and a thick line for the mean over the seeds that reached that
  epoch.
- `plot_summary`: the headline test metric per row, ours (mean ± std over seeds) beside the paper's
  number (± its std), at the paper's scale.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from ..files import atomic_file

__all__ = ["plot_curves", "plot_summary"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


_VAL_KEYS = {"accuracy": ("val_accuracy", "validation accuracy"), "auroc": ("val_auroc", "validation AUROC"),
             "loss": ("val_loss", "validation loss")}


def plot_curves(histories: Mapping[str, Sequence[Mapping]], path: str | os.PathLike, *, title: str = "") -> Path:
    """Training loss and validation metric per epoch for each row.

    Arguments:
        histories: row label -> list of histories (as `train_classifier`
            returns, one per seed). The validation metric shown is each history's ``select_on``.
        path: PNG file to write.
    """
    plt = _pyplot()
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    val_names = set()
    for i, (label, runs) in enumerate(histories.items()):
        colour = colours[i % len(colours)]
        for ax, which in ((ax_loss, "train_loss"), (ax_val, None)):
            curves = []
            for h in runs:
                key = which or _VAL_KEYS[h.get("select_on", "accuracy")][0]
                if which is None:
                    val_names.add(_VAL_KEYS[h.get("select_on", "accuracy")][1])
                ys = [float("nan") if v is None else v for v in h.get(key, [])]
                if ys:
                    ax.plot(range(1, len(ys) + 1), ys, color=colour, alpha=0.3, linewidth=0.8, marker="o", markersize=2)
                    curves.append(ys)
            if curves:
                longest = max(len(c) for c in curves)
                mean = []
                for e in range(longest):
                    vals = [c[e] for c in curves if e < len(c)]
                    mean.append(sum(vals) / len(vals))
                ax.plot(range(1, longest + 1), mean, color=colour, linewidth=2, marker="o", markersize=3,
                        label=f"{label} ({len(curves)} seed{'s' if len(curves) != 1 else ''})")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("training loss")
    ax_loss.set_yscale("log")
    ax_val.set_xlabel("epoch")
    ax_val.set_ylabel(" / ".join(sorted(val_names)) or "validation metric")
    ax_val.legend(fontsize=8)
    for ax in (ax_loss, ax_val):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    return _save(plt, fig, path)


def _save(plt, fig, path) -> Path:
    """Lay out, write as PNG (parent folders created) and close ``fig``."""
    fig.tight_layout()
    path = Path(path)
    try:
        with atomic_file(path, "wb") as handle:  # a unique temporary file, then os.replace
            fig.savefig(handle, dpi=120, format="png")
    finally:
        plt.close(fig)
    return path


def plot_summary(summaries: Sequence[Mapping], path: str | os.PathLike, *, title: str = "") -> Path:
    """Ours (mean ± std over seeds) vs the paper's number (± std) for each row, at the paper's scale.

    Arguments:
        summaries: the ``rows`` of the runner's ``results.json`` (each with ``label``, ``metric``, ``scale``,
            ``metrics["test"][metric]`` holding ``mean``/``std``, and ``paper`` or None).
        path: PNG file to write.
    """
    plt = _pyplot()
    n = len(summaries)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * n + 2), 4.2))
    any_paper = any(s.get("paper") for s in summaries)
    width = 0.38 if any_paper else 0.6
    offset = width / 2 if any_paper else 0.0  # without paper numbers, one centred bar per row
    for i, s in enumerate(summaries):
        stats = s["metrics"]["test"][s["metric"]]
        scale = s["scale"]
        if stats["mean"] is not None:
            ax.bar(i - offset, stats["mean"] * scale, width,
                   yerr=None if stats["std"] is None else stats["std"] * scale, capsize=4, color="tab:blue",
                   label="ours" if i == 0 else None)
        paper = s.get("paper")
        if paper:
            ax.bar(i + width / 2, paper["value"], width, yerr=paper.get("std"), capsize=4, color="tab:gray",
                   label="paper" if not any(p.get("paper") for p in summaries[:i]) else None)
    ax.set_xticks(range(n))
    ax.set_xticklabels([s["label"] for s in summaries], rotation=20, ha="right")
    metrics = {(s["metric"], s["scale"]) for s in summaries}
    ax.set_ylabel(", ".join(f"test {m}" + ("" if sc == 1 else " %" if sc == 100 else f" ×{sc:g}")
                            for m, sc in sorted(metrics)))
    ax.grid(axis="y", alpha=0.3)
    if any_paper:
        ax.legend(loc="lower right")
    if title:
        ax.set_title(title)
    return _save(plt, fig, path)
