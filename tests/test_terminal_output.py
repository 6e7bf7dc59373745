"""What the toolkit prints fits a terminal (issue 25, "Terminal output", "Compact tables", "Progress"): tables
without all-empty columns and within 80 columns, `neuralde-seq models` one line per model with a description,
`models NAME` with the solver's real values, progress bars only on a terminal and one plain line per epoch
elsewhere, and resume messages that name only what changed.

Expected texts are computed here (the standard library's statistics, a solve's own record of the method it used,
a real pseudo-terminal for the bars), not copied from the code under test.
"""

from __future__ import annotations

import fcntl
import os
import re
import statistics
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest
import torch

import neuralde_seq
from neuralde_seq.cli import main
from neuralde_seq.models import model_entry
from neuralde_seq.solvers import RK4, SolverOptions
from neuralde_seq.training import ProgressBar, ResumeMismatch, report, results, train_classifier
from neuralde_seq.training.report import summarise_row

PACKAGE_ROOT = Path(neuralde_seq.__file__).resolve().parents[1]  # the code under test, for subprocesses
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


# ----------------------------------------------------------------------------------------------- tables
def _table_headers(text: str) -> list[list[str]]:
    """The header cells of every table in ``text`` (a table starts at a line after a blank one, or the first)."""
    headers, previous = [], ""
    for line in text.splitlines():
        if line.startswith("|") and not previous.startswith("|"):
            headers.append([cell.strip() for cell in line.strip("|").split("|")])
        previous = line
    return headers


def test_a_column_empty_in_every_row_is_left_out_and_one_with_a_value_kept():
    rows = [
        {"row": "ncde", "paper": None, "diff": "-", "val": 0.93, "note": ""},
        {"row": "ckcnn", "paper": None, "diff": "-", "val": None, "note": "x"},
    ]
    text = results.format_table(
        rows, ["row", "paper", "diff", "val", "note"], headers=["row", "paper", "ours − paper", "val", "note"]
    )
    (header,) = _table_headers(text)
    assert header == ["row", "val", "note"]  # "paper" (None) and "ours − paper" ("-") are empty in every row
    assert all(line.count("|") == 4 for line in text.splitlines())  # three columns in every line
    # one value is enough to keep a column
    rows[0]["paper"] = 0.95
    assert "paper" in _table_headers(results.format_table(rows, ["row", "paper", "val"]))[0]


def test_a_table_wider_than_max_width_is_split_into_parts_repeating_the_row_names():
    rows = [{"row": f"model number {i}", **{f"c{j}": f"{i}.{j} ± 0.{j}" for j in range(12)}} for i in range(4)]
    columns = ["row"] + [f"c{j}" for j in range(12)]
    text = results.format_table(rows, columns, max_width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    parts = _table_headers(text)
    assert len(parts) > 1 and all(part[0] == "row" for part in parts)
    assert [c for part in parts for c in part[1:]] == columns[1:]  # every column once, in order
    for i in range(4):  # every cell of every row is printed
        assert all(f"{i}.{j} ± 0.{j}" in text for j in range(12))


PAPER = {"metric": "accuracy", "scale": 100, "value": 96.2, "std": 0.5, "source": "a paper"}
VARIANTS = [{"label": label} for label in ("x1/4", "x1/2", "x2", "x4", "smooth 0.5", "piecewise 4")]


def _run(seed: int, accuracy: float, variants=()) -> dict:
    """One run as the runner stores it, reduced to what `summarise_row` reads."""
    metrics = {"accuracy": accuracy, "auroc": 0.99, "loss": 0.2}
    splits = {"test": dict(metrics), "val": dict(metrics), **{v["label"]: dict(metrics) for v in variants}}
    return {
        "seed": seed,
        "metrics": splits,
        "params": 123337,
        "history": {"seconds_per_epoch": [0.25]},
        "timing": {"train_seconds": 61.5},
        "diverged": False,
    }


def test_the_printed_table_of_a_wide_benchmark_fits_80_columns_and_loses_no_number():
    """Eleven rows with long labels and models other than the labels, paper numbers, three seeds and six test
    variants (the warp-robustness configs' shape): 216 characters wide in results.md, split within 80 here."""
    accuracies = {f"Delta-ODE forget chrono {i}": [0.93 + 0.001 * i, 0.95, 0.941] for i in range(11)}
    summaries = [
        summarise_row(
            {"label": label, "model": "delta-post-ode-rfwp", "paper": PAPER},
            [_run(seed, v, VARIANTS) for seed, v in enumerate(values)],
            "accuracy",
            VARIANTS,
        )
        for label, values in accuracies.items()
    ]
    printed = report.terminal_table(summaries, VARIANTS)
    assert max(len(line) for line in printed.splitlines()) <= 80
    for label, values in accuracies.items():
        mean_std = f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values):.2f}"
        assert printed.count(mean_std) >= 2 + len(VARIANTS)  # test, val and every variant (same runs here)
        difference = f"{100 * statistics.mean(values) - PAPER['value']:+.2f}"
        assert difference in printed
        assert sum(line.startswith(f"| {label} ") for line in printed.splitlines()) == len(_table_headers(printed))
    headers = [cell for part in _table_headers(printed) for cell in part]
    assert {"paper", "ours − paper", "test: piecewise 4", "model", "params", "s/epoch"} <= set(headers)
    assert "seeds" not in headers  # every row has three: said once in the caption, not per row
    complete = report.results_table(summaries, VARIANTS)
    assert "seeds" in _table_headers(complete)[0] and "test AUROC" in _table_headers(complete)[0]


def test_rows_without_paper_numbers_print_no_paper_columns():
    summaries = [
        summarise_row({"label": name, "model": name, "paper": None}, [_run(0, 0.95)], "accuracy", [])
        for name in ("hebb-cde", "oja-cde", "delta-cde", "ncde", "ckcnn")
    ]
    for text in (report.terminal_table(summaries, []), report.results_table(summaries, [])):
        (header,) = _table_headers(text)
        assert "paper" not in header and "ours − paper" not in header
        assert "model" not in header  # every model is its row's label


def test_compare_prints_one_line_per_epoch_and_run_to_files_and_a_table_within_80_columns(tmp_path):
    """`neuralde-seq` with stdout and stderr sent to files: no bar frames (no carriage returns), one line per epoch
    and one per run, and the results table within 80 columns with no column of dashes."""
    stdout, stderr = tmp_path / "out.txt", tmp_path / "err.txt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(PACKAGE_ROOT)}
    with open(stdout, "w") as out, open(stderr, "w") as err:
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "neuralde_seq.cli",
                "--out",
                str(tmp_path / "r"),
                "--epochs",
                "2",
                "--models",
                "ncde,delta-cde",
            ],
            stdout=out,
            stderr=err,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
    printed, progress = stdout.read_text(encoding="utf-8"), stderr.read_text(encoding="utf-8")
    assert completed.returncode == 0, progress
    assert "\r" not in printed + progress and "\x1b[" not in progress
    for label in ("ncde", "delta-cde"):
        epochs = [line for line in progress.splitlines() if line.startswith(f"{label} seed 0: epoch ")]
        assert [line.split()[4] for line in epochs] == ["1/2", "2/2"]
        assert sum(f"] {label} seed 0: test accuracy" in line for line in progress.splitlines()) == 1
    assert len(progress.splitlines()) == 2 * 2 + 2  # nothing else: no frames, no warnings
    assert max(len(line) for line in printed.splitlines()) <= 80
    (header,) = _table_headers(printed)
    assert header[0] == "row" and "paper" not in header and "ours − paper" not in header
    # --no-progress: the table alone
    with open(stdout, "w") as out, open(stderr, "w") as err:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "neuralde_seq.cli",
                "--out",
                str(tmp_path / "q"),
                "--epochs",
                "1",
                "--models",
                "ncde",
                "--no-progress",
            ],
            stdout=out,
            stderr=err,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=True,
        )
    assert stderr.read_text(encoding="utf-8") == "" and "| ncde " in stdout.read_text(encoding="utf-8")


# ----------------------------------------------------------------------------------------------- models
def test_models_lists_one_line_per_model_with_its_description_within_80_columns(capsys):
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    for name in neuralde_seq.MODEL_NAMES:
        entry = model_entry(name)
        assert entry.description.strip(), f"{name} has no description"
        (line,) = [line for line in lines if line.split()[:1] == [name]]
        assert line.split()[1] == entry.inputs and line.endswith(entry.description)


def test_models_name_prints_the_solvers_actual_values_within_80_columns(capsys):
    # oja-cde's registry solver: rk4 with step 0.5; delta-rde's default "auto", which a solve on its default input
    # resolves to the method it records.
    oja = neuralde_seq.model_defaults("oja-cde")["solver"]
    assert oja.method == neuralde_seq.RK4(step_size=0.5)
    times = torch.linspace(0, 1, 9).unsqueeze(0)
    inputs = neuralde_seq.model_inputs("delta-rde", times, torch.sin(6 * times).unsqueeze(-1))
    model = neuralde_seq.create_model("delta-rde", inputs, 2)
    model(inputs)
    used = model.network.solver.last_method.name  # what the solve did
    assert used in ("exact", "rk4")
    assert main(["models", "oja-cde", "delta-rde", "ckcnn"]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 80
    oja_text, rde_text, ckcnn_text = (" ".join(part.split()) for part in text.split("\n\n"))
    assert "method='rk4'" in oja_text and "step_size=0.5" in oja_text
    assert f"method='auto' (on the input above: '{used}')" in rde_text
    assert "gradient='checkpoint'" in rde_text and "every=None (√N steps per segment)" in rde_text
    assert "exact.chunk_size=None (sized to batch and heads)" in rde_text and "fallback='rk4'" in rde_text
    assert "SolverOptions(" not in text and "solver=None" not in text
    assert "input: control path, build_control(interpolation='logsignature'" in rde_text
    assert "solver: none" in ckcnn_text and model_entry("ckcnn").description in ckcnn_text


def test_models_with_an_unknown_name_exits_2_naming_the_closest(capsys):
    assert main(["models", "delta_cde"]) == 2
    captured = capsys.readouterr()
    assert "'delta-cde'" in captured.err and captured.out == ""


# --------------------------------------------------------------------------------------------- progress
def _data(n: int = 24):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 5, generator=g)
    return x, (x[:, 0] > 0).long()


def test_a_fit_to_a_non_terminal_stream_writes_one_line_per_epoch_and_no_bar_frames(capsys):
    x, y = _data()
    torch.manual_seed(0)
    history = train_classifier(
        torch.nn.Linear(5, 2), x, y, x, y, epochs=3, lr=0.05, batch_size=5, seed=0, desc="probe run"
    )
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b[" not in err
    lines = err.splitlines()
    assert [line.split(":")[0] for line in lines] == ["probe run"] * 3
    for epoch, line in enumerate(lines, 1):
        assert f"epoch {epoch}/3" in line
        assert f"val_accuracy {history['val_accuracy'][epoch - 1]:.4g}" in line
    # a run stopped within its first epoch (max_steps) writes that epoch's line once
    train_classifier(
        torch.nn.Linear(5, 2), x, y, x, y, epochs=3, lr=0.05, batch_size=5, seed=0, max_steps=2, desc="probe run"
    )
    (line,) = capsys.readouterr().err.splitlines()
    assert "epoch 1/3" in line and "step 2" in line


def test_bars_on_a_terminal_fit_80_columns_with_their_metrics_uncut():
    """A real pseudo-terminal 80 columns wide: every frame fits, and the epoch bar's metrics are whole."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    chunks = []
    reader = threading.Thread(target=lambda: [chunks.append(c) for c in iter(lambda: _read(master), b"")])
    reader.start()
    terminal = os.fdopen(slave, "w", encoding="utf-8", buffering=1)
    try:
        x, y = _data(40)
        bar = ProgressBar("a row label far longer than any bar has room for seed 12", stream=terminal)
        assert bar.interactive is False  # decided when the run starts, from the stream
        train_classifier(
            torch.nn.Linear(5, 2), x, y, x, y, epochs=3, lr=0.05, batch_size=5, seed=0, progress=False, callbacks=[bar]
        )
        assert bar.interactive
    finally:
        terminal.close()
        reader.join(timeout=10)
        os.close(master)
    frames = [ANSI.sub("", f) for f in re.split(r"[\r\n]", b"".join(chunks).decode("utf-8", "replace"))]
    frames = [f for f in frames if f.strip()]
    assert frames and max(len(f) for f in frames) <= 80
    finals = [f for f in frames if "3/3" in f and "val acc" in f]
    assert finals and re.search(r"loss \d\S*, val acc \d\S*$", finals[-1].rstrip())


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:  # the other end closed
        return b""


# ---------------------------------------------------------------------------------------------- resume
def test_a_refused_resume_names_only_the_settings_that_differ(tmp_path):
    x, y = _data()
    defaults = {"hidden": 32, "width": 64, "depth": 2, "solver": SolverOptions(method=RK4()).to_dict()}
    kwargs = dict(epochs=1, lr=0.05, batch_size=5, seed=0, progress=False, checkpoint_path=tmp_path / "best.pt")
    train_classifier(torch.nn.Linear(5, 2), x, y, x, y, config={"model_defaults": defaults}, **kwargs)
    changed = {**defaults, "hidden": 6, "solver": SolverOptions(method=RK4(step_size=0.5)).to_dict()}
    with pytest.raises(ResumeMismatch) as caught:
        train_classifier(
            torch.nn.Linear(5, 2),
            x,
            y,
            x,
            y,
            config={"model_defaults": changed},
            resume=True,
            **{**kwargs, "epochs": 2},
        )
    message = str(caught.value)
    assert "model_defaults.hidden: 32 there, 6 now" in message
    assert "model_defaults.solver.method.step_size: None there, 0.5 now" in message
    assert "width" not in message and "depth" not in message  # unchanged settings are not repeated
    assert results.changed_settings({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}, "d": 4}) == [
        "a.c: 2 then, 3 now",
        "d: absent then, 4 now",
    ]
