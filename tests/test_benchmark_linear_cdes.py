"""benchmarks/linear_cdes.py compares like with like: its parallel and sequential rows of one linear NCDE train the
same model on the same control (a wrong setup, e.g. other weights, another control or another penalty in one of
the two rows, gives other losses), and its per-step memory reading sees what a step allocates."""

from __future__ import annotations

import json

import pytest
import torch
from benchmark_scripts import benchmark_script


@pytest.fixture(scope="module")
def script():
    with benchmark_script("linear_cdes") as module:
        yield module


def test_parallel_and_sequential_rows_follow_one_training_trajectory(script, tmp_path):
    structures = ("block", "diag", "dense", "dplr")
    rows = [f"slice-{s} {scan}" for s in structures for scan in ("parallel", "sequential")]
    out = tmp_path / "rows.json"
    # 61 points: five windows of 12 steps; float64, so that only the scans' rounding separates the two rows
    script.main(
        [
            "--length",
            "61",
            "--batch",
            "4",
            "--repeats",
            "2",
            "--dtype",
            "float64",
            "--no-progress",
            "--rows",
            *rows,
            "--json",
            str(out),
        ]
    )
    results = {r["label"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == set(rows)
    for structure in structures:
        parallel, sequential = results[f"slice-{structure} parallel"], results[f"slice-{structure} sequential"]
        assert parallel["pieces"] == sequential["pieces"] == 5
        # the untimed step and both timed ones: the same losses, so the same weights after every Adam step
        assert len(parallel["losses"]) == len(sequential["losses"]) == 3
        torch.testing.assert_close(
            torch.tensor(parallel["losses"], dtype=torch.float64),
            torch.tensor(sequential["losses"], dtype=torch.float64),
            rtol=1e-12,
            atol=0,
        )
        # Adam's step moves the loss: equal losses are not three copies of one untrained number
        assert len(set(parallel["losses"])) == 3


def test_step_memory_sees_a_step_that_allocates_and_frees_200_mib(script):
    memory = script.StepMemory()
    if not memory.available:
        pytest.skip("the peak resident memory cannot be reset here (/proc/self/clear_refs, Linux only)")
    before = memory.before()
    block = torch.ones(50 * 2**20, dtype=torch.float32)  # 200 MiB, every page written
    del block
    peak = memory.after(before) / 2**20
    assert 195 < peak < 260, peak
    # and a step that allocates nothing new reads (almost) nothing
    before = memory.before()
    torch.zeros(16).sum()
    assert memory.after(before) / 2**20 < 20
