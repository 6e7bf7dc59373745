"""The format-version boundary: files an older neuralde_seq wrote are refused by every reader, naming
``neuralde-seq migrate``, and after the migration they are read as if this version had written them.

The fixtures (tests/format_fixtures/format1, made by tests/format_fixtures/make_format1.py at commit 539f159, the last
writer of format 1) hold a finished grid (a trained NCDE with an explicit solver, a GRU-Δt and a summary-features
row), the same grid stopped after the NCDE's second resume checkpoint, and a cached log-signature control.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch

from neuralde_seq.cli import main
from neuralde_seq.file_format import FORMAT_VERSION, OldFormatError
from neuralde_seq.training.checkpoints import read_checkpoint
from neuralde_seq.training.runner import run_benchmark

FIXTURES = Path(__file__).parent / "format_fixtures" / "format1"
TIMING = ("resumed_from_epoch",)  # and every "..._seconds": what two makings of one run differ in


@pytest.fixture
def old(tmp_path):
    shutil.copytree(FIXTURES, tmp_path / "old")
    return tmp_path / "old"


def _config(folder):
    return json.loads((folder / "config.json").read_text())


def _run_folder(grid, row):
    (folder,) = (grid / "runs" / row).glob("seed0-*")
    return folder


def _untimed(history):
    return {
        key: value
        for key, value in history.items()
        if key not in TIMING and "seconds" not in key and not key.endswith("_path")
    }


def test_every_reader_refuses_older_files_naming_the_migration(old):
    from neuralde_seq import load_run

    ncde = _run_folder(old / "grid", "NCDE")
    with pytest.raises(OldFormatError, match=r"format version 1 .*neuralde-seq migrate"):
        read_checkpoint(ncde / "best.pt")
    with pytest.raises(OldFormatError, match="neuralde-seq migrate"):
        load_run(ncde)
    before = (old / "grid" / "grid.json").read_bytes()
    with pytest.raises(OldFormatError, match="grid record .*neuralde-seq migrate"):
        run_benchmark(_config(old), out_dir=old / "grid", resume=True, progress=False)
    assert (old / "grid" / "grid.json").read_bytes() == before  # refused before anything was written over


def test_a_migrated_grid_is_reused_and_its_interrupted_run_resumes_bitwise(old, capsys):
    assert main(["migrate", str(old)]) == 0
    said = capsys.readouterr().out
    assert "renamed run folder" in said and "migrated tensor cache" in said
    grid, interrupted = old / "grid", old / "interrupted"
    stored = {
        row: json.loads((_run_folder(grid, row) / "result.json").read_text()) for row in ("NCDE", "GRU-dt", "summary")
    }
    assert all(result["format_version"] == FORMAT_VERSION for result in stored.values())
    stamps = {row: (_run_folder(grid, row) / "result.json").stat().st_mtime_ns for row in stored}

    # The finished grid: every run reused as recorded (found under its new fingerprint, none made afresh).
    results = run_benchmark(_config(old), out_dir=grid, resume=True, progress=False)
    assert {row: (_run_folder(grid, row) / "result.json").stat().st_mtime_ns for row in stored} == stamps
    assert [row["label"] for row in results["rows"]] == ["NCDE", "GRU-dt", "summary"]
    for row in results["rows"]:
        assert row["metrics"]["test"]["accuracy"]["values"] == [stored[row["label"]]["metrics"]["test"]["accuracy"]]

    # The interrupted grid: the NCDE continues from its migrated resume checkpoint and ends where the old version's
    # uninterrupted run ended, bit for bit (weights, metrics, learning curve).
    run_benchmark(_config(old), out_dir=interrupted, resume=True, progress=False)
    resumed = json.loads((_run_folder(interrupted, "NCDE") / "result.json").read_text())
    assert resumed["history"]["resumed_from_epoch"] >= 1
    assert resumed["fingerprint"] == stored["NCDE"]["fingerprint"]
    # the migrated record's checkpoint paths follow its folder's new name
    recorded = stored["NCDE"]["history"]["last_checkpoint_path"]
    assert Path(recorded).parent.name == _run_folder(grid, "NCDE").name
    assert resumed["metrics"] == stored["NCDE"]["metrics"]
    assert _untimed(resumed["history"]) == _untimed(stored["NCDE"]["history"])
    for name in ("best.pt", "last.pt"):
        a = read_checkpoint(_run_folder(grid, "NCDE") / name)["model_state"]
        b = read_checkpoint(_run_folder(interrupted, "NCDE") / name)["model_state"]
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_migrated_cache_is_read_bit_for_bit_without_building(old, monkeypatch):
    from neuralde_seq.controls import build_control, cached_logsignature_control, logsignature_cache

    inputs = torch.load(old / "cache_inputs.pt", weights_only=True)
    fresh = build_control(inputs["times"], inputs["values"], interpolation="logsignature", depth=2, step=5)
    assert main(["migrate", str(old / "cache")]) == 0

    def refuse(*args, **kwargs):
        raise AssertionError("the migrated cache file was not found: the control was built again")

    monkeypatch.setattr(logsignature_cache, "build_control", refuse)
    cached = cached_logsignature_control(
        old / "cache",
        inputs["times"],
        inputs["values"],
        interpolation="logsignature",
        depth=2,
        step=5,
        key_parts=("format1",),
    )
    for field in ("knots", "coeffs", "end_index", "initial_value"):
        assert torch.equal(getattr(cached, field), getattr(fresh, field)), field
    assert len(list((old / "cache").iterdir())) == 1  # renamed, not copied


def test_migrating_twice_changes_nothing_and_a_newer_file_is_left_alone(old, capsys):
    assert main(["migrate", str(old)]) == 0
    files = {p: p.read_bytes() for p in old.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["migrate", str(old)]) == 0
    assert "every file is already in the current format" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in old.rglob("*") if p.is_file()} == files

    result = next((old / "grid" / "runs" / "NCDE").glob("*/result.json"))
    result.write_text(json.dumps({**json.loads(result.read_text()), "format_version": FORMAT_VERSION + 1}))
    assert main(["migrate", str(result)]) == 0
    assert "newer than this neuralde_seq" in capsys.readouterr().out
    with pytest.raises(OldFormatError, match="newer than this neuralde_seq reads"):
        run_benchmark(_config(old), out_dir=old / "grid", resume=True, progress=False)
