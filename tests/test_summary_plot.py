"""summary.png is readable: an axis zoomed to the values, each value written with its std over seeds, a title naming
the task and protocol, reference rows apart (issue 25, "Plots").

The facts are read back from the drawn figure (`plot_summary` returns them), the expected texts computed here from
the per-seed values with the standard library.
"""

from __future__ import annotations

import statistics

import pytest

from neuralde_seq.training.plots import plot_summary
from neuralde_seq.training.report import summarise_row

# Test accuracies per seed, all between 93 % and 96 % as in the report.
SEED_ACCURACIES = {"delta-cde": [0.930, 0.936, 0.941], "ncde": [0.958, 0.962, 0.955], "ckcnn": [0.944, 0.947, 0.949]}
REFERENCE_ACCURACIES = {"MiniRocket": [0.9311, 0.9311, 0.9311], "1-NN": [0.9622, 0.9622, 0.9622]}


def run_result(seed: int, accuracy: float) -> dict:
    """One run as the runner stores it, reduced to what `summarise_row` reads."""
    metrics = {"accuracy": accuracy, "auroc": 0.99, "loss": 0.2}
    return {
        "seed": seed,
        "metrics": {"test": dict(metrics), "val": dict(metrics)},
        "params": 1000,
        "history": {"seconds_per_epoch": [0.1]},
        "timing": {"train_seconds": 1.0},
        "diverged": False,
    }


def summaries_of(accuracies: dict, references: dict | None = None) -> list[dict]:
    references = references or {}
    rows = [({"label": label, "model": label, "paper": None}, values) for label, values in accuracies.items()]
    rows += [
        ({"label": label, "model": "minirocket", "paper": None, "reference": True}, values)
        for label, values in references.items()
    ]
    return [
        summarise_row(row, [run_result(seed, v) for seed, v in enumerate(values)], "accuracy", [])
        for row, values in rows
    ]


def expected_text(values: list[float]) -> str:
    """mean ± sample std (ddof 1, the report's) in %, two decimals, from the standard library."""
    return f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values):.2f}"


def test_the_value_axis_shows_a_three_point_difference(tmp_path):
    drawn = plot_summary(summaries_of(SEED_ACCURACIES), tmp_path / "summary.png", title="compare")
    low, high = drawn.value_limits
    spans = [
        (100 * statistics.mean(v) - 100 * statistics.stdev(v), 100 * statistics.mean(v) + 100 * statistics.stdev(v))
        for v in SEED_ACCURACIES.values()
    ]
    # Every point with its error bar inside the axis, with a margin ...
    assert low < min(a for a, _ in spans) and high > max(b for _, b in spans)
    # ... and the range between the lowest and the highest mean (about 2.3 points) a large part of it:
    # on a 0-100 axis it is 2 %.
    means = [100 * statistics.mean(v) for v in SEED_ACCURACIES.values()]
    assert (max(means) - min(means)) / (high - low) > 0.4
    # An axis that does not start at zero says so.
    assert low > 0 and "not 0" in drawn.value_label and "accuracy" in drawn.value_label
    assert (tmp_path / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_value_is_written_as_mean_and_std_over_seeds(tmp_path):
    drawn = plot_summary(summaries_of(SEED_ACCURACIES), tmp_path / "summary.png")
    assert list(drawn.value_texts) == [expected_text(v) for v in SEED_ACCURACIES.values()]
    assert drawn.row_labels == tuple(SEED_ACCURACIES)
    assert "3 seeds" in drawn.title


def test_one_seed_is_written_without_std_and_named_in_the_title(tmp_path):
    one = {label: values[:1] for label, values in SEED_ACCURACIES.items()}
    drawn = plot_summary(summaries_of(one), tmp_path / "summary.png")
    assert list(drawn.value_texts) == [f"{100 * v[0]:.2f}" for v in one.values()]
    assert "1 seed" in drawn.title


def test_the_title_names_the_task_and_the_protocol(tmp_path):
    from neuralde_seq.training.plots import summary_protocol

    protocol = summary_protocol({"drop_rate": 0.3, "val_fraction": 0.15})
    assert "30 % of time points dropped" == protocol
    drawn = plot_summary(
        summaries_of(SEED_ACCURACIES),
        tmp_path / "summary.png",
        title="compare",
        task="japanese-vowels",
        protocol=protocol,
    )
    assert (
        "compare" in drawn.title and "japanese-vowels" in drawn.title and "30 % of time points dropped" in drawn.title
    )
    assert "test accuracy" in drawn.title and "best-validation" in drawn.title
    assert "1 in 2 time points kept" in summary_protocol({"subsample": 2})


def test_reference_rows_are_drawn_apart_and_last(tmp_path):
    references_first = summaries_of({}, REFERENCE_ACCURACIES) + summaries_of(SEED_ACCURACIES)
    drawn = plot_summary(references_first, tmp_path / "summary.png")
    assert drawn.row_labels == tuple(SEED_ACCURACIES) + tuple(f"{label} (reference)" for label in REFERENCE_ACCURACIES)
    low, high = drawn.value_limits
    assert high - low < 10  # the references (93.1 %, 96.2 %) are inside the zoomed axis too
    assert low < 93.11 and high > 96.22


def test_the_papers_number_is_drawn_and_written_beside_ours(tmp_path):
    summaries = summaries_of({"delta-rde": [0.90, 0.92]})
    summaries[0]["paper"] = {"value": 91.8, "std": 0.4}
    drawn = plot_summary(summaries, tmp_path / "summary.png")
    assert list(drawn.value_texts) == [expected_text([0.90, 0.92]), "91.80 ± 0.40"]
    assert drawn.value_limits[0] < 91.4 and drawn.value_limits[1] > 100 * 0.91 + 100 * statistics.stdev([0.90, 0.92])


def test_no_rows_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="summaries is empty"):
        plot_summary([], tmp_path / "summary.png")
