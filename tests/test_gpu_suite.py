"""benchmarks/gpu_suite.py at its smoke sizes on the CPU, as CI runs it (issue 27): the script that the scarce GPU
time will run must not rot. A subprocess runs the command a user runs; the files it writes are checked against what
the rows must say (every planned row present and measured, each ratio its time over CKCNN's at the same shape, the
medians of the timed steps), and a tiny time limit must stop it early with the rows it skipped recorded."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "benchmarks", "gpu_suite.py")
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import gpu_suite  # noqa: E402


def _run(out, *extra, timeout=120):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    start = time.time()
    done = subprocess.run(
        [sys.executable, SCRIPT, "--smoke", "--device", "cpu", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    with open(os.path.join(out, "results.json")) as f:
        return json.load(f), time.time() - start, done.stdout


def test_smoke_run_writes_every_row_with_consistent_ratios(tmp_path):
    # the headline rows: the coverage rows of the other registry models take the same code path (and the
    # registry's own tests build and train every model), at twice this test's time
    document, _, stdout = _run(tmp_path, "--headline-only")
    assert {"results.json", "results.md", "pytest.log"} <= set(os.listdir(tmp_path))
    planned = [row.label for row in gpu_suite.planned_rows(coverage=False)]
    rows = document["rows"]
    assert [r["label"] for r in rows] == planned
    assert document["finished"] and document["settings"]["smoke"] and document["settings"]["dtype"] == "float32"
    assert document["settings"]["torch"] and "neuralde_seq" in document["settings"]["code"]
    # no CUDA here: the CUDA tests ran and skipped (with CUDA: they passed)
    counts = document["pytest"]["counts"]
    assert document["pytest"]["status"] == "passed" and counts.get("failed", 0) == 0 and counts.get("errors", 0) == 0
    assert counts.get("skipped", 0) + counts.get("passed", 0) >= 40
    reference = {r["shape"]: r["seconds"] for r in rows if r["model"] == "ckcnn" and r["variant"] == "default"}
    assert set(reference) == {"T1000", "eigenworms"}
    for r in rows:
        assert r["status"] == "measured", (r["label"], r.get("reason"), r.get("error"))
        assert len(r["steps"]) == document["settings"]["repeats"] and all(s > 0 for s in r["steps"])
        assert r["seconds"] == pytest.approx(statistics.median(r["steps"]), rel=1e-12)
        assert r["ratio_to_ckcnn"] == pytest.approx(r["seconds"] / reference[r["shape"]], rel=1e-12)
        anchor = gpu_suite.ANCHORS.get((r["model"], r["shape"]))
        assert r["anchor_s"] == (anchor and anchor[0])
        assert r["ratio_to_anchor"] == (anchor and pytest.approx(r["seconds"] / anchor[0], rel=1e-12))
        assert r["peak_mib"] is None  # no device memory counter on the CPU
        assert r["pieces"] >= 1 and r["parameters"] > 0
    # the exact path and rk4 really are different solves, and the scans and gradient variants are what they say
    solvers = {r["label"]: r.get("solver", "") for r in rows}
    assert solvers["delta-rde exact @T1000"].startswith("exact")
    assert solvers["delta-rde rk4 @T1000"].startswith("rk4")
    assert solvers["ncde gradient=backprop @T1000"].endswith("gradient=backprop")
    assert solvers["ncde default @T1000"].endswith("gradient=checkpoint")
    # the per-step loop compiled where "auto" says so (on CUDA), eager with compile=off; the composed affine steps
    # have no compile choice in force
    assert solvers["ncde default @T1000"] == "rk4 compile=auto, gradient=checkpoint"
    assert solvers["ncde compile=off @T1000"] == "rk4 compile=False, gradient=checkpoint"
    assert solvers["log-ncde heun2 compile=off @eigenworms"] == "heun2 compile=False, gradient=checkpoint"
    assert {r["model"] for r in rows if r["anchor_s"]} == {"log-ncde", "slice-block", "ncde"}
    # the random-feature transform against MiniRocket's: what the ratio and throughputs are made of
    features = document["random_features"]
    assert features["status"] == "measured", features
    points = features["series"] * features["points"]
    assert features["points_per_s"] == pytest.approx(points / features["seconds"], rel=1e-12)
    assert features["minirocket_points_per_s"] == pytest.approx(points / features["minirocket_seconds"], rel=1e-12)
    assert features["ratio_to_minirocket"] == pytest.approx(
        features["minirocket_seconds"] / features["seconds"], rel=1e-12
    )
    assert features["features"] > 0
    table = (tmp_path / "results.md").read_text()
    for r in rows:
        anchor = "- | - |" if r["anchor_s"] is None else f"{r['anchor_s']:.4g} | {r['ratio_to_anchor']:.3g} |"
        assert (
            f"| {r['model']} | {r['shape']} | {r['variant']} | {r['seconds']:.4g} | {r['ratio_to_ckcnn']:.3g} | "
            f"{anchor}" in table
        )
    assert "log-ncde @eigenworms: 2.352 s (Log-NCDE, the authors' JAX code" in table
    assert "skipped" in (tmp_path / "pytest.log").read_text() or "passed" in (tmp_path / "pytest.log").read_text()
    assert stdout.count("measured") >= len(planned)  # progress lines


def test_a_tiny_time_limit_stops_early_and_records_the_skipped_rows(tmp_path):
    limit = 6.0
    document, wall, _ = _run(tmp_path, "--time-limit-s", str(limit), "--no-pytest")
    rows = document["rows"]
    assert document["finished"] and len(rows) == len(gpu_suite.planned_rows())
    assert document["pytest"]["status"] == "skipped"
    skipped = [r for r in rows if r["status"] != "measured"]
    assert skipped, "every row fitted into a few seconds: the limit did not bite"
    assert all(r["status"] in ("skipped", "error") for r in skipped)
    assert all("time limit" in (r.get("reason") or r.get("error") or "") for r in skipped)
    assert all(r["seconds"] is None for r in skipped)
    # The clock starts with the script. A step inside C code (CKCNN's first) ends before the alarm is handled, so a
    # loaded machine overruns by that step; the whole suite takes about 50 s here, so the limit bit well before.
    assert document["elapsed_s"] <= limit + 5.0 and wall <= limit + 10.0


def test_the_rows_time_every_registry_model_at_both_shapes():
    """Every model of the registry at 1,000 points and at EigenWorms' shape (issue 38): the headline rows first,
    then one row with the registry's defaults for each model they leave out at a shape, none twice."""
    from neuralde_seq import MODEL_NAMES

    rows, headline = gpu_suite.planned_rows(), gpu_suite.planned_rows(coverage=False)
    assert {(row.model, row.shape) for row in rows} == {
        (name, shape) for name in MODEL_NAMES for shape in gpu_suite.SHAPES
    }
    assert rows[: len(headline)] == headline
    coverage = rows[len(headline) :]
    assert all(row.variant == "default" and not (row.options or row.control) and row.solver is None for row in coverage)
    timed = {(row.model, row.shape) for row in headline}
    assert all((row.model, row.shape) not in timed for row in coverage)
    assert len({row.label for row in rows}) == len(rows)
    assert {(model, shape) for model, shape in gpu_suite.ANCHORS} <= timed
    # each compiled neural-field row has its eager twin (compile=off), the same otherwise
    from neuralde_seq.solvers import FixedStep, SolverOptions

    eager = [row for row in rows if row.variant.endswith("compile=off")]
    assert {row.model for row in eager} >= {"ncde", "log-ncde", "gru-ode", "delta-post-cde"}
    for row in eager:
        twin = next(
            other
            for other in rows
            if (other.model, other.shape) == (row.model, row.shape)
            and other.variant == (row.variant.removesuffix(" compile=off") or "default")
        )
        method = row.solver.method if isinstance(row.solver, SolverOptions) else row.solver
        assert isinstance(method, FixedStep) and method.compile is False
        assert (row.control, row.options) == (twin.control, twin.options)


def test_pytest_summary_counts():
    out = "....\n== 3 failed, 51 passed, 6 skipped, 3 xfailed, 1 warning, 2 errors in 12.3s ==\n"
    assert gpu_suite.pytest_counts(out) == dict(failed=3, passed=51, skipped=6, xfailed=3, warnings=1, errors=2)
    assert gpu_suite.pytest_counts("61 skipped in 0.73s") == dict(skipped=61)
    assert gpu_suite.pytest_counts("collected nothing") == {}


def _fails(out, *extra):
    """The script's exit status and stderr for arguments it must refuse (issue 36)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    done = subprocess.run(
        [sys.executable, SCRIPT, "--smoke", "--device", "cpu", "--no-pytest", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    return done.returncode, done.stderr


def test_writes_replace_planted_links_instead_of_following_them(tmp_path):
    # issue 36: results.json.tmp and pytest.log written through links planted at their names overwrote the targets
    out = tmp_path / "out"
    out.mkdir()
    victims = {}
    for name in ("results.json.tmp", "results.md.tmp", "pytest.log"):
        victim = tmp_path / f"victim-{name}"
        victim.write_text("keep me")
        os.symlink(victim, out / name)
        victims[name] = victim
    _run(out, "--rows", "ckcnn default @T1000")
    assert all(v.read_text() == "keep me" for v in victims.values())
    log = (out / "pytest.log").read_text()
    assert not os.path.islink(out / "pytest.log") and ("skipped" in log or "passed" in log)
    assert not os.path.islink(out / "results.json")


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--rows", "ckcnnn"), "--rows ckcnnn selects no row; the rows: ckcnn default @T1000"),
        (("--device", "gpu"), "argument --device: 'gpu' is not a torch device"),
        (("--time-limit-s", "nan"), "argument --time-limit-s: must be a finite positive number of seconds, got 'nan'"),
        (("--time-limit-s", "inf"), "must be a finite positive number of seconds, got 'inf'"),
        (("--time-limit-s", "0"), "must be a finite positive number of seconds, got '0'"),
    ],
)
def test_bad_arguments_are_refused_by_argparse_naming_them(tmp_path, extra, message):
    status, stderr = _fails(tmp_path, *extra)
    assert status == 2 and message in stderr and "Traceback" not in stderr, stderr[-1500:]
    assert not (tmp_path / "results.json").exists()  # refused before anything ran


def test_an_out_folder_under_a_file_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    status, stderr = _fails(blocker / "out")
    assert status == 2 and f"cannot be a folder: {blocker} is a file" in stderr and "Traceback" not in stderr
