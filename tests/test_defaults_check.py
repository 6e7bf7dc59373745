"""benchmarks/defaults_check.py reports what it must against its stored table (drops over 3 points, divergences,
spreads over 10 points over seeds, new cells; runs of other settings never compared), and resumes from its
results.json without refitting."""

from __future__ import annotations

import json

import numpy as np
import pytest
from benchmark_scripts import benchmark_script


@pytest.fixture(scope="module")
def script():
    with benchmark_script("defaults_check") as module:
        yield module


DEFAULTS = {"epochs": None, "series": None}


def runs(model, dataset, accuracies, settings=DEFAULTS, **extra):
    """Runs of one cell, seed i with accuracies[i] (None: no accuracy)."""
    return [
        {"model": model, "dataset": dataset, "seed": seed, "settings": dict(settings), "accuracy": accuracy, **extra}
        for seed, accuracy in enumerate(accuracies)
    ]


def found(findings, kind):
    return {(f.model, f.dataset) for f in findings if f.kind == kind}


def test_drops_over_3_points_are_reported_and_smaller_drops_or_rises_are_not(script):
    stored = runs("a", "D", [0.80] * 3) + runs("b", "D", [0.80] * 3) + runs("c", "D", [0.80] * 3)
    current = runs("a", "D", [0.765] * 3) + runs("b", "D", [0.775] * 3) + runs("c", "D", [0.85] * 3)
    findings = script.compare(current, stored)
    assert found(findings, "drop") == {("a", "D")}  # 3.5 points; b lost 2.5, c gained 5
    assert [f.kind for f in findings] == ["drop"]
    assert "80.0 % -> 76.5 % (-3.5 points" in findings[0].line()
    assert findings[0].failure


def test_the_drop_is_over_the_seeds_both_tables_scored(script):
    stored = runs("a", "D", [0.60, 0.60, 0.90])  # mean 70 over seeds 0-2, 60 over seeds 0-1
    current = runs("a", "D", [0.60, 0.60])
    assert script.compare(current, stored) == []


def test_a_divergence_is_reported_with_its_seed_and_message(script):
    stored = runs("a", "D", [0.80] * 3)
    current = runs("a", "D", [0.80, None, 0.80])
    current[1]["diverged"] = "TrainingDiverged: non-finite gradient"
    findings = script.compare(current, stored)
    assert [(f.kind, f.model) for f in findings] == [("divergence", "a")]
    assert "seed 1: TrainingDiverged: non-finite gradient" in findings[0].line()
    # another error is its own finding, not a divergence
    current[1] = {**current[1], "diverged": None, "error": "RuntimeError: out of memory"}
    assert [f.kind for f in script.compare(current, stored)] == ["error"]


def test_a_spread_over_10_points_over_seeds_is_reported(script):
    current = runs("a", "D", [0.70, 0.81, 0.75]) + runs("b", "D", [0.70, 0.79, 0.75])  # 11 and 9 points
    stored = runs("a", "D", [0.70, 0.81, 0.75]) + runs("b", "D", [0.70, 0.79, 0.75])
    findings = script.compare(current, stored)
    assert found(findings, "spread") == {("a", "D")}
    assert [f.kind for f in findings] == ["spread"]
    assert "11.0 points over seeds 0,1,2" in findings[0].line()


def test_a_cell_missing_from_the_stored_table_is_new_not_a_drop(script):
    stored = runs("a", "D", [0.90] * 3)
    current = runs("a", "E", [0.10] * 3) + runs("b", "D", [0.10] * 3)
    findings = script.compare(current, stored)
    assert [(f.kind, f.model, f.dataset) for f in findings] == [("new", "a", "E"), ("new", "b", "D")]
    assert not any(f.failure for f in findings)


def test_runs_of_other_settings_are_not_compared(script):
    stored = runs("a", "D", [0.90] * 3)  # the defaults
    quick = {"epochs": 2, "series": None}
    current = runs("a", "D", [0.10] * 3, settings=quick)
    findings = script.compare(current, stored)
    assert [f.kind for f in findings] == ["new"]
    assert "stored only with defaults" in findings[0].message and "[epochs 2]" in findings[0].line()
    # and the same quick runs against stored quick runs are compared
    assert found(script.compare(current, runs("a", "D", [0.90] * 3, settings=quick)), "drop") == {("a", "D")}
    # an override left at its default (None) is the defaults: runs stored before the option existed compare
    current = runs("a", "D", [0.10] * 3, settings={**DEFAULTS, "max_steps": None})
    assert found(script.compare(current, runs("a", "D", [0.90] * 3, settings={})), "drop") == {("a", "D")}


def test_bad_tables_are_refused_naming_the_problem(script):
    with pytest.raises(ValueError, match=r"current\[0\]: accuracy must be None or a fraction"):
        script.compare(runs("a", "D", [85.0]), [])  # a percentage where a fraction belongs
    with pytest.raises(ValueError, match="seed 0 .*appears twice"):
        script.compare(runs("a", "D", [0.8]) * 2, [])
    with pytest.raises(ValueError, match=r"stored\[0\] lacks accuracy"):
        script.compare([], [{"model": "a", "dataset": "D", "seed": 0, "settings": {}}])
    with pytest.raises(ValueError, match="drop must be a non-negative number"):
        script.compare([], [], drop=-1)


def test_dataset_names_are_suite_sets_or_long_series(script):
    assert script.parse_dataset("GunPoint") == ("GunPoint", None)
    assert script.parse_dataset("ACSF1x4000") == ("ACSF1", 4000)
    for bad in ("Gunpoint", "GunPointx", "Nonex2000", "GunPointx1"):
        with pytest.raises(ValueError, match="--datasets: unknown dataset"):
            script.parse_dataset(bad)


@pytest.fixture
def italy(script):
    """The folder of aeon's bundled ItalyPowerDemand files (24 points a series, 67 TRAIN and 1029 TEST series)."""
    try:
        return script.find_data(None, ["ItalyPowerDemand"])
    except script.DataNotFound:
        pytest.skip("aeon's ItalyPowerDemand files are not installed")


def test_long_series_are_lengthened_then_dropped(script, italy):
    pytest.importorskip("neuralde_seq.data.transforms.long_series")
    X, y, times = script.read_split(italy, "ItalyPowerDemandx60", "TRAIN")
    _, y_file, times_file = script.read_split(italy, "ItalyPowerDemand", "TRAIN")
    assert [len(x) for x in X] == [42] * 67  # 60 points, then 30 % of them (18) dropped
    assert list(y) == list(y_file)  # series i keeps its class
    assert all((np.diff(t) > 0).all() for t in times)
    assert min(t[-1] for t in times) > max(t[-1] for t in times_file)  # beyond the file's series


def test_the_script_records_resumes_without_refitting_and_reports_a_drop(script, italy, tmp_path, capsys):
    out, stored = tmp_path / "out", tmp_path / "stored.json"
    argv = [
        "--models",
        "delta-rde",
        "--datasets",
        "ItalyPowerDemand",
        "--seeds",
        "0",
        "--epochs",
        "2",
        "--series",
        "12",
        "--out",
        str(out),
        "--stored",
        str(stored),
        "--no-progress",
    ]
    assert script.main(argv) == 0  # only a new cell: nothing stored yet
    assert "NEW       delta-rde on ItalyPowerDemand [epochs 2, series 12]" in capsys.readouterr().out
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert (run["model"], run["dataset"], run["seed"]) == ("delta-rde", "ItalyPowerDemand", 0)
    assert run["settings"] == {"epochs": 2, "max_steps": None, "series": 12} and run["train_series"] == 12
    assert run["test_series"] == 1029 and 0.0 <= run["accuracy"] <= 1.0 and run["diverged"] is None

    # A marked accuracy in results.json and a stored table 10 points above it: a second call must keep the mark (a
    # refit would write the real accuracy back) and report the drop.
    run["accuracy"] = 0.5
    script.write_runs(out / "results.json", [run])
    other = {**run, "model": "slice-diag", "accuracy": 0.9}
    script.write_runs(stored, [{**run, "accuracy": 0.6}, other])
    assert script.main(argv + ["--update-stored"]) == 1
    printed = capsys.readouterr().out
    assert "1 of 1 runs done before" in printed and "0 to run" in printed
    assert "DROP      delta-rde on ItalyPowerDemand [epochs 2, series 12]: 60.0 % -> 50.0 % (-10.0 points" in printed
    assert json.loads((out / "results.json").read_text())["runs"] == [run]
    # --update-stored replaced the stored run of this cell and kept the other
    assert json.loads(stored.read_text())["runs"] == [other, run]


def test_a_candidate_default_is_an_estimator_parameter_recorded_in_the_settings(script, italy, tmp_path, capsys):
    assert script._setting_option("ensemble=3") == ("ensemble", 3)
    assert script._setting_option("augment_crop=0.8") == ("augment_crop", 0.8)
    assert script._setting_option("schedule=cosine") == ("schedule", "cosine")
    assert script._setting_option("patience=null") == ("patience", None)
    for bad, words in (
        ("ensembl=3", "did you mean 'ensemble'"),
        ("ensemble", "not NAME=VALUE"),
        ("random_state=1", "not NAME=VALUE"),
        ("ensemble=[1, 2]", "a number, a string or null"),
    ):
        with pytest.raises(Exception, match=words):
            script._setting_option(bad)
    out = tmp_path / "out"
    argv = [
        "--models",
        "hebb-rde",
        "--datasets",
        "ItalyPowerDemand",
        "--seeds",
        "0",
        "--epochs",
        "2",
        "--series",
        "12",
        "--out",
        str(out),
        "--stored",
        str(tmp_path / "stored.json"),
        "--no-progress",
    ]
    assert script.main(argv + ["--set", "schedule=cosine"]) == 0
    assert script.main(argv) == 0  # the defaults: a run of its own, not the candidate's
    first, second = json.loads((out / "results.json").read_text())["runs"]
    assert first["settings"] == {"epochs": 2, "max_steps": None, "series": 12, "schedule": "cosine"}
    assert second["settings"] == {"epochs": 2, "max_steps": None, "series": 12}
    printed = capsys.readouterr().out
    assert "[epochs 2, schedule cosine, series 12]" in printed
    # make_estimator hands the candidate to the estimator
    estimator = script.make_estimator("hebb-rde", 0, first["settings"])
    assert estimator.get_params()["schedule"] == "cosine" and estimator.get_params()["epochs"] == 2
    with pytest.raises(SystemExit):
        script.main(argv + ["--set", "ensemble=2", "--set", "ensemble=3"])
    # a bad value is refused before any run, naming the parameter
    for bad in ("augment_crop=0", "schedule=linear", "lr=-1"):
        with pytest.raises(SystemExit):
            script.main(argv + ["--set", bad])
        assert bad.split("=")[0] in capsys.readouterr().err
