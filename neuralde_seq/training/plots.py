"""Plots of benchmark results with matplotlib (Agg backend: no display needed).

- `plot_curves`: learning curves, one colour per model row: training loss and the validation
  metric per epoch, a thin line per seed and a thick line for the mean over the seeds that reached that
  epoch.
- `plot_summary`: the headline test metric per row, ours (mean ± std over seeds, the value written beside
  each point) beside the paper's number (± its std), at the paper's scale, on an axis zoomed to the values so
  that a 93 % vs 96 % difference is visible; reference rows drawn apart. `summary_protocol` writes the
  task options as the title's protocol text.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..files import atomic_file

__all__ = ["plot_curves", "plot_summary", "summary_protocol", "SummaryPlot"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


_VAL_KEYS = {
    "accuracy": ("val_accuracy", "validation accuracy"),
    "auroc": ("val_auroc", "validation AUROC"),
    "loss": ("val_loss", "validation loss"),
}


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
                ax.plot(
                    range(1, longest + 1),
                    mean,
                    color=colour,
                    linewidth=2,
                    marker="o",
                    markersize=3,
                    label=f"{label} ({len(curves)} seed{'s' if len(curves) != 1 else ''})",
                )
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


def summary_protocol(task_options: Mapping | None) -> str:
    """The task options as the summary plot's protocol text, e.g. ``30 % of time points dropped``.

    Arguments:
        task_options: a config's ``task_options`` (``drop_rate``, ``subsample`` and any other option; None or
            empty for the task's defaults).
    """
    parts = []
    for key, value in (task_options or {}).items():
        if key == "drop_rate":
            if value:
                parts.append(f"{float(value) * 100:g} % of time points dropped")
        elif key == "subsample":
            if value and value != 1:
                parts.append(f"1 in {value} time points kept")
        elif key != "val_fraction":  # the validation split is no part of what is reported
            parts.append(f"{key} {value}")
    return ", ".join(parts) or "all time points"


@dataclasses.dataclass(frozen=True)
class SummaryPlot:
    """What `plot_summary` drew, read back from the figure (checkable without looking at pixels).

    Attributes:
        path: the PNG written.
        title: the figure's title (its lines joined by newlines).
        value_limits: (low, high) of the value axis, at the rows' scale (e.g. accuracy in %).
        value_label: the value axis's label.
        row_labels: the rows' labels, top to bottom, closed-form rows marked with their kind (`row_label`).
        value_texts: the text written beside each drawn value, in drawing order (ours, then the paper's number
            where a row has one), e.g. ``94.59 ± 0.81``.
    """

    path: Path
    title: str
    value_limits: tuple[float, float]
    value_label: str
    row_labels: tuple[str, ...]
    value_texts: tuple[str, ...]


def _value_text(mean: float, std: float | None, digits: int) -> str:
    return f"{mean:.{digits}f}" + ("" if std is None else f" ± {std:.{digits}f}")


def _metric_axis_name(metric: str, scale: float) -> str:
    name = "accuracy" if metric == "accuracy" else "AUROC" if metric == "auroc" else metric
    return name + ("" if scale == 1 else " %" if scale == 100 else f" ×{scale:g}")


def _seeds_text(summaries: Sequence[Mapping]) -> str:
    counts = sorted({len(s["seeds"]) for s in summaries if s.get("seeds") is not None})
    if not counts:
        return ""
    if counts == [1]:
        return "1 seed"
    if len(counts) == 1:
        return f"mean ± sample std over {counts[0]} seeds"
    return f"mean ± sample std over {counts[0]}-{counts[-1]} seeds"


def row_label(summary: Mapping) -> str:
    """A row's label on the summary plot: a closed-form row marked with its kind as results.md marks it,
    "(reference)" for a practitioner's method and "(random features)" for the toolkit's own closed-form mode."""
    kind = summary.get("closed_form_kind") or ("reference" if summary.get("reference") else None)
    return summary["label"] + (f" ({kind})" if kind else "")


def plot_summary(
    summaries: Sequence[Mapping], path: str | os.PathLike, *, title: str = "", task: str = "", protocol: str = ""
) -> SummaryPlot:
    """Ours (mean ± std over seeds) vs the paper's number (± std) for each row, at the paper's scale.

    One horizontal line per row, top to bottom in the given order with the reference rows (closed-form methods,
    ``reference`` True) last, below a dashed line and drawn as hollow squares. Each value is a point with its std
    as an error bar and its value written above it. The value axis spans the values (mean ± std, the paper's
    numbers too) with a margin, not 0-100, so that differences of a few points are visible; its label says where
    it starts.

    Arguments:
        summaries: the ``rows`` of the runner's ``results.json`` (each with ``label``, ``metric``, ``scale``,
            ``metrics["test"][metric]`` holding ``mean``/``std`` (fractions, before ``scale``), and ``paper``
            (``value``/``std`` at the scale) or None; optional ``seeds`` (list) and ``reference`` (bool)).
        path: PNG file to write.
        title: first part of the title (the config's name).
        task: the task's name, e.g. ``japanese-vowels``.
        protocol: what was done to the data, e.g. `summary_protocol`'s ``30 % of time points dropped``.

    Returns:
        A `SummaryPlot`: the path and the title, axis limits and labels read back from the drawn figure.
    """
    if not summaries:
        raise ValueError("summaries is empty: plot_summary needs at least one row to draw")
    plt = _pyplot()
    ordered = [s for s in summaries if not s.get("reference")] + [s for s in summaries if s.get("reference")]
    metrics = sorted({(s["metric"], s["scale"]) for s in ordered})
    top = max(sc for _, sc in metrics)  # metrics are fractions in [0, 1] before scaling
    digits = 2 if top >= 100 else 4

    # The value range: every drawn point with its error bar, padded by 15 % of the span (at least 1 % of the
    # scale), clipped to the metric's range [0, scale].
    ends = []
    for s in ordered:
        stats = s["metrics"]["test"][s["metric"]]
        if stats["mean"] is not None:
            mean, std = stats["mean"] * s["scale"], (stats["std"] or 0.0) * s["scale"]
            ends += [mean - std, mean + std]
        if s.get("paper"):
            ends += [
                s["paper"]["value"] - (s["paper"].get("std") or 0.0),
                s["paper"]["value"] + (s["paper"].get("std") or 0.0),
            ]
    if ends:
        pad = max(0.15 * (max(ends) - min(ends)), 0.01 * top)
        low, high = max(0.0, min(ends) - pad), min(float(top), max(ends) + pad)
    else:
        low, high = 0.0, float(top)

    n = len(ordered)
    fig, ax = plt.subplots(figsize=(8.0, 1.6 + 0.55 * n))
    any_paper = any(s.get("paper") for s in ordered)
    legend_done = set()

    def draw(y, value, std, text, style, label):
        ax.errorbar(value, y, xerr=std, capsize=4, label=None if label in legend_done else label, **style)
        legend_done.add(label)
        # Centred above the point, or aligned inwards near an end of the axis so that the text stays inside.
        where = (value - low) / (high - low) if high > low else 0.5
        ha = "right" if where > 0.85 else "left" if where < 0.15 else "center"
        ax.annotate(
            text,
            (value, y),
            xytext={"right": (4, 6), "left": (-4, 6), "center": (0, 6)}[ha],
            textcoords="offset points",
            ha=ha,
            va="bottom",
            fontsize=8,
        )

    for y, s in enumerate(ordered):
        stats = s["metrics"]["test"][s["metric"]]
        scale = s["scale"]
        reference = bool(s.get("reference"))
        shift = -0.15 if s.get("paper") else 0.0
        if stats["mean"] is not None:
            std = None if stats["std"] is None else stats["std"] * scale
            style = (
                dict(fmt="s", color="tab:orange", markerfacecolor="white", markersize=7)
                if reference
                else dict(fmt="o", color="tab:blue", markersize=7)
            )
            draw(
                y + shift,
                stats["mean"] * scale,
                std,
                _value_text(stats["mean"] * scale, std, digits),
                style,
                "reference (closed form)" if reference else "ours",
            )
        else:
            ax.annotate("no result", (low, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
        paper = s.get("paper")
        if paper:
            draw(
                y + 0.3,
                paper["value"],
                paper.get("std"),
                _value_text(paper["value"], paper.get("std"), digits),
                dict(fmt="D", color="tab:gray", markersize=6),
                "paper",
            )
    references = [i for i, s in enumerate(ordered) if s.get("reference")]
    if references and references[0] > 0:
        ax.axhline(references[0] - 0.5, color="black", linestyle="--", linewidth=0.8)
    ax.set_yticks(range(n))
    ax.set_yticklabels([row_label(s) for s in ordered])
    ax.set_ylim(n - 0.5, -0.5 - (0.3 if n == 1 else 0.0))  # first row on top; room for the value text
    ax.set_xlim(low, high)
    axis_name = ", ".join(f"test {_metric_axis_name(m, sc)}" for m, sc in metrics)
    if low > 0:
        axis_name += f" (axis starts at {low:.{max(0, digits - 2)}f}, not 0)"
    ax.set_xlabel(axis_name)
    ax.grid(axis="x", alpha=0.3)
    if any_paper or references:
        ax.legend(loc="best", fontsize=8)
    # The config's name, then the task (unless the name is the task's) and the protocol.
    task_part = "" if task and title.endswith(task) else task
    heading = ": ".join(part for part in (title, ", ".join(p for p in (task_part, protocol) if p)) if part)
    detail = ", ".join(
        part
        for part in (
            f"test {_metric_axis_name(*metrics[0])}" if len(metrics) == 1 else "",
            "best-validation checkpoint",
            _seeds_text(ordered),
        )
        if part
    )
    full_title = "\n".join(line for line in (heading, detail) if line)
    ax.set_title(full_title, fontsize=10)
    low, high = ax.get_xlim()
    drawn = SummaryPlot(
        path=Path(path),
        title=ax.get_title(),
        value_limits=(float(low), float(high)),
        value_label=ax.get_xlabel(),
        row_labels=tuple(t.get_text() for t in ax.get_yticklabels()),
        value_texts=tuple(t.get_text() for t in ax.texts),
    )
    _save(plt, fig, path)
    return drawn
