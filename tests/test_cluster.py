"""Grids on a cluster: ``bench --shard K/N`` (parts of a grid's runs sharing one output folder), ``report OUT``
(the tables from the run folders) and the Ray executor (``--executor ray``: each run a Ray task, a killed task
continued from its last checkpoint).

Every grid here is a smoke run of the tiny JapaneseVowels config of the runner tests (2 rows x 2 seeds, 2 steps);
the Ray kill tests train 15 short epochs, so that a worker can be killed between its first checkpoint and its end.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from neuralde_seq.cli import main
from neuralde_seq.files import OutputFolderBusy, OutputLock
from neuralde_seq.training.config import fingerprint
from neuralde_seq.training.grid import shard_runs
from neuralde_seq.training.run_folders import GRID_FILE
from neuralde_seq.training.runner import IncompleteGrid, report_grid, run_benchmark

RAY_SKIP = 'ray is not installed: pip install "neuralde-seq[ray]"'
TIMING = ("seconds_per_epoch", "train_seconds")  # a row's timing: the only numbers two makings of a run differ in


def _config(**changes):
    cfg = {
        "name": "tiny-grid",
        "task": "japanese-vowels",
        "task_options": {"drop_rate": 0.3},
        "seeds": [0, 1],
        "training": {"epochs": 2, "lr": 1e-2, "batch_size": 64},
        "models": [
            {
                "label": "GRU-dt",
                "model": "gru-dt",
                "options": {"hidden": 8},
                "paper": {"value": 50.0, "std": 2.0, "metric": "accuracy", "source": "made up"},
            },
            {
                "label": "CKCNN",
                "model": "ckcnn",
                "options": {"hidden": 8, "blocks": 1, "kernel_hidden": 8, "omega_0": 10.0, "horizon": 28.0},
            },
        ],
        "evaluate": [{"label": "drop 50%", "drop_rate": 0.5}],
    }
    cfg.update(changes)
    return cfg


def _environment():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    return env


def _run_folders(out):
    """Every run folder under ``out/runs`` as ``row/seed<k>-<fingerprint>``."""
    return sorted(f"{p.parent.name}/{p.name}" for p in (out / "runs").glob("*/*") if p.is_dir())


def _result(out, folder):
    return json.loads((out / "runs" / folder / "result.json").read_text())


def _same_run(a, b):
    """Two results of one run: equal metrics, parameters and learning curves (not their times, paths, or where
    training resumed)."""
    assert a["metrics"] == b["metrics"] and a["params"] == b["params"] and a["fingerprint"] == b["fingerprint"]
    left_out = {"checkpoint_path", "last_checkpoint_path", "resumed_from_epoch"}

    def kept(history):
        return {k: v for k, v in history.items() if k not in left_out and "seconds" not in k}

    assert kept(a["history"]) == kept(b["history"])


def _untimed_rows(results):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in results["rows"]]


def _untimed_table(text):
    """results.md without its last two columns (s/epoch and train s: the runs' wall times)."""
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("|"))
    assert header.split("|")[-3:-1] == [" s/epoch ", " train s "]
    return "\n".join("|".join(line.split("|")[:-3]) if line.startswith("|") else line for line in lines)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """One whole (serial) run of the grid."""
    out = tmp_path_factory.mktemp("whole")
    results = run_benchmark(_config(), out_dir=out, max_steps=2, progress=False)
    return out, results


# ------------------------------------------------------------------------------------------------- shards
def test_shard_runs_are_disjoint_balanced_and_cover_the_grid():
    runs = [(seed, row) for seed in range(3) for row in "abcde"]
    for n in (1, 2, 4, 7, 20):
        parts = [shard_runs(runs, (k, n)) for k in range(1, n + 1)]
        assert sorted(r for part in parts for r in part) == sorted(runs)  # disjoint, and every run once
        assert {len(part) for part in parts} <= {len(runs) // n, -(-len(runs) // n)}
        assert parts == [shard_runs(list(runs), (k, n)) for k in range(1, n + 1)]  # the same on every call


def test_three_shards_in_parallel_make_the_whole_grid_and_report_writes_its_tables(whole, tmp_path):
    """Three shard processes at once on one folder (a job array on a shared file system): together they make the
    whole run's folders with the same results, and `report` writes the whole run's tables (the runs' times
    aside); on the whole run's own folder, `report` rewrites its tables byte for byte."""
    whole_out, whole_results = whole
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(_config()))
    out = tmp_path / "shared"
    command = [
        sys.executable,
        "-m",
        "neuralde_seq",
        "bench",
        str(config),
        "--out",
        str(out),
        "--max-steps",
        "2",
        "--no-progress",
    ]
    shards = [
        subprocess.Popen(
            command + ["--shard", f"{k}/3"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_environment(),
            cwd=tmp_path,
        )
        for k in (1, 2, 3)
    ]
    outcomes = [(p.wait(timeout=180), p.stdout.read(), p.stderr.read()) for p in shards]
    for p in shards:
        p.stdout.close()
        p.stderr.close()
    assert all(status == 0 for status, _, _ in outcomes), outcomes
    assert not (out / "results.json").exists()  # a shard writes no tables
    assert "neuralde-seq report" in outcomes[0][1]
    folders = _run_folders(out)
    assert folders == _run_folders(whole_out) and len(folders) == 4
    for folder in folders:
        _same_run(_result(out, folder), _result(whole_out, folder))
    assert not [p for p in out.rglob(".*")]  # no lock or temporary file left behind

    assert main(["report", str(out)]) == 0
    reported = json.loads((out / "results.json").read_text())
    assert _untimed_rows(reported) == _untimed_rows(whole_results)
    assert reported["config"] == whole_results["config"] and reported["missing"] == [] == whole_results["missing"]
    assert _untimed_table((out / "results.md").read_text()) == _untimed_table((whole_out / "results.md").read_text())
    for png in ("curves.png", "summary.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    before = {name: (whole_out / name).read_bytes() for name in ("results.json", "results.md")}
    assert report_grid(whole_out)["rows"] == whole_results["rows"]
    assert {name: (whole_out / name).read_bytes() for name in before} == before


@pytest.mark.parametrize("value", ["0/3", "4/3", "3", "1/0", "-1/3", "1.5/3", "a/b", "1/2/3"])
def test_bad_shard_values_are_refused_naming_the_option(tmp_path, capsys, value):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(_config()))
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", str(config), "--out", str(tmp_path / "out"), f"--shard={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --shard" in err and "K/N" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_bad_shard_and_executor_arguments_are_refused_by_run_benchmark(tmp_path):
    out = tmp_path / "out"
    for shard in [(0, 3), (4, 3), (1, 0), (True, 2), (1.0, 2), (1, 2, 3), "1/3"]:
        with pytest.raises(ValueError, match="shard"):
            run_benchmark(_config(), out_dir=out, shard=shard, max_steps=2, progress=False)
    with pytest.raises(ValueError, match="executor must be one of serial, ray"):
        run_benchmark(_config(), out_dir=out, executor="dask", progress=False)
    with pytest.raises(ValueError, match="address is the Ray cluster"):
        run_benchmark(_config(), out_dir=out, address="auto", progress=False)
    with pytest.raises(ValueError, match="retries must be a non-negative integer"):
        run_benchmark(_config(), out_dir=out, executor="ray", retries=-1, progress=False)
    assert not out.exists()


def test_shards_share_the_folder_a_whole_run_and_a_run_in_the_making_are_refused(whole, tmp_path):
    whole_out, _ = whole
    out = tmp_path / "out"
    running_shard = OutputLock(out, shared=True)  # another shard of the grid, still running
    with running_shard:
        result = run_benchmark(_config(), out_dir=out, shard=(2, 3), max_steps=2, progress=False)
        assert result["rows"] is None and [r["folder"] for r in result["runs"]] == [
            f"runs/{folder}" for folder in _run_folders(out)
        ]
        with pytest.raises(OutputFolderBusy, match="in use by the shards of a grid"):
            run_benchmark(_config(), out_dir=out, max_steps=2, progress=False)
        assert (out / ".neuralde-seq.lock").exists()  # the shard that left did not remove the others' lock
    assert not (out / ".neuralde-seq.lock").exists()  # the last one to leave did

    with OutputLock(out):  # a whole run into the folder: no shard may start
        with pytest.raises(OutputFolderBusy, match=f"in use by process {os.getpid()}"):
            run_benchmark(_config(), out_dir=out, shard=(1, 3), max_steps=2, progress=False)

    # A run held by another process (overlapping shards of two different N) is refused, naming its lock.
    record = json.loads((out / GRID_FILE).read_text())
    first = shard_runs(record["runs"], (1, 3))[0]
    (folder,) = [f for f in _run_folders(whole_out) if f.startswith(f"{first['label']}/seed{first['seed']}-")]
    row, run = folder.split("/")
    with OutputLock(out / "runs" / row, name=f".{run}.lock"):
        with pytest.raises(OutputFolderBusy, match=f"lock file {out / 'runs' / row / ('.' + run + '.lock')}"):
            run_benchmark(_config(), out_dir=out, shard=(1, 3), max_steps=2, progress=False)


# ------------------------------------------------------------------------------------------------- report
def _plant_changed_run(source, row_dir, key, value):
    """A copy of the run folder ``source``'s result in ``row_dir`` with one setting (the path ``key`` in its config)
    changed, under the folder name its new fingerprint gives it."""
    result = json.loads((source / "result.json").read_text())
    settings = result["config"]
    for part in key[:-1]:
        settings = settings[part]
    settings[key[-1]] = value
    result["fingerprint"] = fingerprint(result["config"])
    folder = row_dir / f"seed{result['seed']}-{result['fingerprint']}"
    folder.mkdir()
    (folder / "result.json").write_text(json.dumps(result))
    return folder


def test_report_names_missing_runs_and_never_takes_another_grids_folder(whole, tmp_path, capsys):
    """Shard 3 of 3 has not run: `report` names its run and refuses; --partial writes the tables marked
    INCOMPLETE. A folder of that run made with other settings or set aside is not taken for it; the run's own
    folder is; and two folders of the run made from different data are an error naming both."""
    whole_out, whole_results = whole
    out = tmp_path / "out"
    for k in (1, 2):
        run_benchmark(_config(), out_dir=out, shard=(k, 3), max_steps=2, progress=False)
    record = json.loads((out / GRID_FILE).read_text())
    ((seed, label),) = [(r["seed"], r["label"]) for r in shard_runs(record["runs"], (3, 3))]
    with pytest.raises(
        IncompleteGrid, match=f"1 of the 4 runs of grid 'tiny-grid' have no result: {label} seed {seed}"
    ) as info:
        report_grid(out)
    assert [(m["label"], m["seed"]) for m in info.value.missing] == [(label, seed)]
    assert not (out / "results.json").exists()
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{label} seed {seed}" in err and "--partial" in err and len(err.strip().splitlines()) == 1

    partial = report_grid(out, partial=True)
    assert partial["missing"] == [{"label": label, "seed": seed}]
    assert json.loads((out / "results.json").read_text())["missing"] == partial["missing"]
    assert (out / "results.md").read_text().startswith("# INCOMPLETE (1 of 4 runs missing)")
    assert f"{label} seed {seed}." in (out / "results.md").read_text()
    row = next(r for r in partial["rows"] if r["label"] == label)
    assert row["seeds"] == [1 - seed]

    # The missing run's folder, as the whole run made it, put in under other names.
    (folder,) = [
        f for f in _run_folders(whole_out) if f.split("/")[1].startswith(f"seed{seed}-") and f.startswith(f"{label}/")
    ]
    source = whole_out / "runs" / folder
    shutil.copytree(source, out / "runs" / label / f"stale-{Path(folder).name}")  # set aside by --resume
    _plant_changed_run(source, out / "runs" / label, ("row", "training", "lr"), 0.5)  # another grid's run
    with pytest.raises(IncompleteGrid, match=f"{label} seed {seed}"):
        report_grid(out)

    shutil.copytree(source, out / "runs" / folder)  # the run itself: the grid is complete
    assert _untimed_rows(report_grid(out)) == _untimed_rows(whole_results)

    twin_dir = _plant_changed_run(source, out / "runs" / label, ("data",), "0" * 16)  # the run, from other data
    with pytest.raises(ValueError, match=f"{twin_dir.name}.*both hold this run.*different data"):
        report_grid(out)


def test_report_without_a_grid_names_the_file(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path / GRID_FILE}: no such file" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------- Ray
def test_executor_ray_without_ray_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    with pytest.raises(ModuleNotFoundError, match='pip install "neuralde-seq\\[ray\\]"'):
        run_benchmark(_config(), out_dir=tmp_path / "out", executor="ray", progress=False)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(_config()))
    assert main(["bench", str(config), "--out", str(tmp_path / "out"), "--executor", "ray"]) == 2
    assert 'pip install "neuralde-seq[ray]"' in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def _killable_config():
    return {
        "name": "killable",
        "task": "japanese-vowels",
        "task_options": {"drop_rate": 0.3},
        "seeds": [0, 1],
        "training": {"epochs": 15, "lr": 1e-2, "batch_size": 32},
        "models": [{"label": "gru", "model": "gru-dt", "options": {"hidden": 8}}],
    }


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray", reason=RAY_SKIP)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def serial_killable(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial")
    return out, run_benchmark(_killable_config(), out_dir=out, progress=False)


def _checkpoint_epoch(path):
    """The last epoch a resume checkpoint holds (0: written before the first epoch ended)."""
    import torch

    return torch.load(path, weights_only=True)["epoch"]


class _KillAfterFirstCheckpoint(threading.Thread):
    """Kills (SIGKILL) the worker process of the first run seen with a resume checkpoint of a finished epoch and no
    result yet: the process named by the run's lock file."""

    def __init__(self, out):
        super().__init__(daemon=True)
        self.out, self.killed, self.stop = out, None, threading.Event()

    def run(self):
        while not self.stop.is_set() and self.killed is None:
            for lock in (self.out / "runs").glob("*/.seed*.lock"):
                run_dir = lock.parent / lock.name[1 : -len(".lock")]
                try:
                    fields = dict(part.split("=", 1) for part in lock.read_text().split() if "=" in part)
                except FileNotFoundError:  # released meanwhile
                    continue
                if (
                    not fields.get("pid", "").isdigit()
                    or not (run_dir / "last.pt").exists()
                    or (run_dir / "result.json").exists()
                    or _checkpoint_epoch(run_dir / "last.pt") < 1
                ):
                    continue
                pid = int(fields["pid"])
                assert pid != os.getpid()  # a Ray worker, never this process
                os.kill(pid, signal.SIGKILL)
                self.killed = run_dir
                return
            time.sleep(0.005)


def _assert_equal_grids(out, serial_out, serial_results, results):
    assert _run_folders(out) == _run_folders(serial_out)
    for folder in _run_folders(out):
        _same_run(_result(out, folder), _result(serial_out, folder))
    assert _untimed_rows(results) == _untimed_rows(serial_results)


def test_ray_runs_equal_the_serial_run_and_a_killed_task_continues_from_its_checkpoint(
    ray_instance, serial_killable, tmp_path, capsys
):
    serial_out, serial_results = serial_killable
    out = tmp_path / "ray"
    killer = _KillAfterFirstCheckpoint(out)
    killer.start()
    results = run_benchmark(_killable_config(), out_dir=out, executor="ray", progress=False)
    killer.stop.set()
    killer.join()
    assert killer.killed is not None
    assert "its worker died" in capsys.readouterr().err
    resumed = json.loads((killer.killed / "result.json").read_text())["history"]["resumed_from_epoch"]
    assert 1 <= resumed <= 15  # continued from its last checkpoint, not made afresh
    _assert_equal_grids(out, serial_out, serial_results, results)
    assert json.loads((out / "results.json").read_text())["rows"] == results["rows"]


def test_a_ray_task_killed_without_retries_is_named_and_continued_by_resume(ray_instance, serial_killable, tmp_path):
    from neuralde_seq.training.ray_executor import RunsFailed

    serial_out, serial_results = serial_killable
    out = tmp_path / "ray"
    killer = _KillAfterFirstCheckpoint(out)
    killer.start()
    with pytest.raises(RunsFailed) as info:
        run_benchmark(_killable_config(), out_dir=out, executor="ray", retries=0, progress=False)
    killer.stop.set()
    killer.join()
    label, seed = killer.killed.parent.name, int(killer.killed.name[4:].split("-")[0])
    assert info.value.runs == [(label, seed)] and "--resume" in str(info.value)
    assert not (killer.killed / "result.json").exists() and (killer.killed / "last.pt").exists()
    assert not (out / "results.json").exists()
    lock = killer.killed.parent / f".{killer.killed.name}.lock"
    assert lock.exists()  # left by the killed worker (the kernel released its lock)

    results = run_benchmark(_killable_config(), out_dir=out, executor="ray", resume=True, progress=False)
    assert not lock.exists()  # taken over by the task that continued the run, and removed when it was done
    assert json.loads((killer.killed / "result.json").read_text())["history"]["resumed_from_epoch"] >= 1
    _assert_equal_grids(out, serial_out, serial_results, results)
