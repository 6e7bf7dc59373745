"""Writes, locks and checkpoints (issue 24): files are written through unique temporary files and never
through a symlink, one benchmark at a time writes into an output folder, and a checkpoint that cannot be used
is named with what to do (never with the advice to load it unsafely).

The runs use the embedded JapaneseVowels data with a tiny GRU-Δt and a few training steps.
"""

import io
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
import yaml

import neuralde_seq
from neuralde_seq.cli import main
from neuralde_seq.files import write_bytes_atomic
from neuralde_seq.training import fit, load_checkpoint, save_checkpoint
from neuralde_seq.training.objectives import Classification
from neuralde_seq.training.report import write_curves
from neuralde_seq.training.results import write_json, write_table
from neuralde_seq.training.runner import run_benchmark

PACKAGE_ROOT = Path(neuralde_seq.__file__).resolve().parents[1]  # the checkout the tests import
VICTIM_TEXT = "precious: must not be overwritten\n"
UNSAFE_ADVICE = "weights_only=False"


def _config(**changes):
    config = {
        "name": "files",
        "task": "japanese-vowels",
        "task_options": {"drop_rate": 0.3},
        "seeds": [0],
        "training": {"epochs": 1, "lr": 3e-3, "batch_size": 64},
        "models": [{"label": "gru", "model": "gru-dt", "options": {"hidden": 4}}],
    }
    config.update(changes)
    return config


def _environment():
    return {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT), "OMP_NUM_THREADS": "1"}


def _victim(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    return victim


def _write_config(tmp_path, config) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _tiny_fit_data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(32, 3, generator=g), torch.arange(32) % 2


# --------------------------------------------------------------------------------------------- safe writes
# Each writer of run outputs, with how to read back what it wrote.
WRITERS = {
    "checkpoint": (
        lambda path: save_checkpoint(path, model=torch.nn.Linear(3, 2), epoch=4),
        lambda path: load_checkpoint(path)["epoch"] == 4,
    ),
    "result.json": (
        lambda path: write_json({"accuracy": 0.5}, path),
        lambda path: json.loads(path.read_text()) == {"accuracy": 0.5},
    ),
    "results.md": (
        lambda path: write_table("| a |", path, title="T"),
        lambda path: path.read_text() == "# T\n\n| a |\n",
    ),
    "curves.csv": (
        lambda path: write_curves(
            {
                "train_loss": [1.0],
                "train_accuracy": [0.5],
                "val_loss": [2.0],
                "val_accuracy": [0.25],
                "seconds_per_epoch": [0.1],
            },
            path,
        ),
        lambda path: path.read_text().splitlines()[1] == "1,1.0,0.5,2.0,0.25,,0.1",
    ),
}


@pytest.mark.parametrize("writer", WRITERS)
def test_writes_never_go_through_a_symlink_at_the_temporary_name_or_at_the_target(tmp_path, writer):
    write, read_back = WRITERS[writer]
    victims = {name: tmp_path / name for name in ("victim-of-tmp", "victim-of-target")}
    for victim in victims.values():
        victim.write_text(VICTIM_TEXT)
    target = tmp_path / "run" / "file"
    target.parent.mkdir()
    # A link planted at the fixed temporary name of earlier versions, and a target that is itself a link.
    os.symlink(victims["victim-of-tmp"], target.with_name(target.name + ".tmp"))
    os.symlink(victims["victim-of-target"], target)
    write(target)
    assert {name: v.read_text() for name, v in victims.items()} == dict.fromkeys(victims, VICTIM_TEXT)
    assert not target.is_symlink() and read_back(target)  # the link at the target is replaced by the file


def test_plots_are_written_atomically_and_not_through_a_symlink(tmp_path):
    from neuralde_seq.training.plots import plot_summary

    victim = _victim(tmp_path)
    target = tmp_path / "summary.png"
    os.symlink(victim, target)
    summary = {
        "label": "gru",
        "metric": "accuracy",
        "scale": 100,
        "paper": None,
        "metrics": {"test": {"accuracy": {"mean": 0.5, "std": 0.1}}},
    }
    plot_summary([summary], target)
    assert victim.read_text() == VICTIM_TEXT
    assert not target.is_symlink() and target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.png", "victim.txt"]  # no temporary left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, model=torch.nn.Linear(3, 2), epoch=1)
    with pytest.raises((pickle.PicklingError, AttributeError)):  # a lambda cannot be pickled (local: AttributeError)
        save_checkpoint(path, model=torch.nn.Linear(3, 2), epoch=2, metrics={"unsaveable": lambda: None})
    assert load_checkpoint(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_a_write_that_fails_for_lack_of_space_names_the_file(tmp_path):
    # a file size limit fails the write itself as a full disk does (EFBIG, like ENOSPC, names no file of its own)
    target = tmp_path / "results.json"
    script = textwrap.dedent(f"""
        import resource, signal
        from neuralde_seq.training.results import write_json
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
        try:
            write_json({{"big": "x" * 100_000}}, {str(target)!r})
        except OSError as error:
            print("errno", error.errno, "filename", error.filename, "message", error)
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=_environment(), timeout=120
    )
    assert f"filename {target} message" in out.stdout and str(target) in out.stdout.split("message", 1)[1], out
    assert not target.exists() and list(tmp_path.iterdir()) == []  # nothing half-written, no temporary left


def test_files_published_together_appear_together_or_not_at_all(tmp_path):
    from neuralde_seq.files import published_together

    old = {"results.json": '{"old": 1}\n', "results.md": "old table\n"}
    for name, text in old.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(OSError, match="no space"):
        with published_together():
            write_json({"new": 2}, tmp_path / "results.json")
            write_table("| new |", tmp_path / "results.md", title="T")
            raise OSError(28, "no space left on device (writing the plots)")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == old  # the old answer, no temporaries
    # a folder where a file goes fails at publishing: refused before any file is renamed
    (tmp_path / "summary.png").mkdir()
    with pytest.raises(IsADirectoryError, match="nothing was published"):
        with published_together():
            write_json({"new": 2}, tmp_path / "results.json")
            write_bytes_atomic(tmp_path / "summary.png", b"png")
    assert {p.name: p.read_text() for p in tmp_path.iterdir() if p.is_file()} == old
    with published_together():
        write_json({"new": 2}, tmp_path / "results.json")
        assert json.loads((tmp_path / "results.json").read_text()) == {"old": 1}  # not yet
        write_json({"new": 3}, tmp_path / "results.json")  # written twice: published once, with the last
        write_table("| new |", tmp_path / "results.md", title="T")
    assert json.loads((tmp_path / "results.json").read_text()) == {"new": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "results.md", "summary.png"]


def test_a_bench_whose_plot_fails_leaves_the_previous_results_files_as_they_were(tmp_path, monkeypatch):
    import neuralde_seq.training.plots as plots

    out = tmp_path / "out"
    run_benchmark(_config(), out_dir=out, max_steps=2, progress=False)
    before = {name: (out / name).read_bytes() for name in ("results.json", "results.md", "curves.png", "summary.png")}

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plots, "plot_summary", full_disk)
    with pytest.raises(OSError, match="No space left"):
        run_benchmark(_config(seeds=[1]), out_dir=out, max_steps=2, progress=False)
    assert {name: (out / name).read_bytes() for name in before} == before  # not the new results.json beside them
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_temporary_files_left_by_a_killed_run_are_removed_when_the_folder_is_next_locked(tmp_path, capsys):
    out = tmp_path / "out"
    run_benchmark(_config(), out_dir=out, max_steps=2, progress=False)
    run_dir = next((out / "runs").glob("*/seed0-*"))
    left = [out / ".results.json.k3v9x_2q.tmp", run_dir / ".last.pt.a1b2c3d4.tmp"]
    kept = [out / "notes.tmp", run_dir / ".last.pt.tmp", run_dir / "my.results.json.abcdefgh.tmp"]
    for path in left + kept:
        path.write_bytes(b"partial")
    run_benchmark(_config(), out_dir=out, max_steps=2, progress=True, resume=True)
    assert [p.exists() for p in left] == [False, False] and all(p.exists() for p in kept)
    err = capsys.readouterr().err
    assert "removed 1 temporary file(s) left in" in err and ".last.pt.a1b2c3d4.tmp" in err


def test_a_fifo_at_the_lock_path_is_named_and_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / ".neuralde-seq.lock")
    code = main(
        ["bench", str(_write_config(tmp_path, _config())), "--out", str(out), "--max-steps", "1", "--no-progress"]
    )
    err = capsys.readouterr().err
    assert code == 2 and f"lock file {out / '.neuralde-seq.lock'} is a FIFO, not a regular file: remove it" in err


def test_new_files_get_the_permissions_of_any_new_file(tmp_path):
    # A unique temporary file is created private (0600); the result must not stay so.
    mask = os.umask(0o022)
    os.umask(mask)
    plain = tmp_path / "plain"
    plain.write_text("x")
    path = write_json({"a": 1}, tmp_path / "result.json")
    assert path.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777 == 0o666 & ~mask


def test_writers_of_one_checkpoint_in_parallel_never_collide(tmp_path):
    path = tmp_path / "best.pt"
    errors = []

    def writer(epoch):
        try:
            for _ in range(15):
                save_checkpoint(path, model=torch.nn.Linear(40, 40), epoch=epoch)
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(epoch,)) for epoch in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert load_checkpoint(path)["epoch"] in (1, 2, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["best.pt"]


# ------------------------------------------------------------------------------------------ output lock
_HOLD_LOCK = textwrap.dedent("""
    import os, sys, time
    from neuralde_seq.files import OutputLock
    lock = OutputLock(sys.argv[1])
    lock.acquire()
    print("held", flush=True)
    if sys.argv[2] == "die":
        os._exit(0)  # ends without releasing: the lock file stays behind
    time.sleep(60)
""")


def _hold_lock(folder, how="hold"):
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(folder), how], stdout=subprocess.PIPE, text=True, env=_environment()
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_bench_on_a_folder_another_process_writes_into_is_refused_naming_folder_and_pid(tmp_path, capsys):
    out = tmp_path / "out"
    holder = _hold_lock(out)
    try:
        config = tmp_path / "tiny.yaml"
        config.write_text(yaml.safe_dump(_config()))
        status = main(["bench", str(config), "--max-steps", "2", "--out", str(out), "--no-progress"])
        err = capsys.readouterr().err
        assert status == 2
        assert str(out) in err and f"process {holder.pid}" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert not (out / "runs").exists()  # nothing was written into the folder
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait()
    # Its holder gone, the folder is free again, and the lock file goes with the run that took it.
    results = run_benchmark(_config(), out_dir=out, progress=False, max_steps=2)
    assert results["rows"][0]["label"] == "gru"
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []


def test_a_lock_left_by_a_process_that_ended_is_taken_over_with_a_message(tmp_path, capsys):
    out = tmp_path / "out"
    dead = _hold_lock(out, "die")
    dead.wait()
    left = [p for p in out.iterdir() if p.name.startswith(".")]
    assert len(left) == 1 and f"pid={dead.pid}" in left[0].read_text()
    results = run_benchmark(_config(), out_dir=out, progress=False, max_steps=2)
    assert results["rows"][0]["label"] == "gru"
    err = capsys.readouterr().err
    assert "taking over the lock" in err and f"pid={dead.pid}" in err
    assert not left[0].exists()  # the run that took it over removed it when done


def test_two_bench_processes_on_one_out_both_finish_or_one_refuses_cleanly(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(_config()))
    for attempt in range(3):  # each attempt a new interleaving of the two processes
        out = tmp_path / f"out{attempt}"
        command = [
            sys.executable,
            "-m",
            "neuralde_seq",
            "bench",
            str(config),
            "--max-steps",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ]
        processes = [
            subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_environment(), cwd=tmp_path
            )
            for _ in range(2)
        ]
        outcomes = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in processes]
        for p in processes:
            p.stdout.close()
            p.stderr.close()
        finished = [o for o in outcomes if o[0] == 0]
        assert finished, outcomes
        for (status, _, err), process in zip(outcomes, processes):
            assert status in (0, 2), err
            assert "Traceback" not in err, err
            if status == 2:  # refused: one line naming the folder and the other process
                other = next(p.pid for p in processes if p is not process)
                assert str(out) in err and f"process {other}" in err, err
        results = json.loads((out / "results.json").read_text())
        assert results["rows"][0]["label"] == "gru" and results["smoke"] is True
        run_dir = next((out / "runs" / "gru").iterdir())
        assert load_checkpoint(run_dir / "best.pt")["model_state"]
        assert not [p for p in run_dir.iterdir() if p.suffix == ".tmp"]


# ------------------------------------------------------------------------------ checkpoints that fail to load
class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo crafted",))


def _torch_bytes(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _good_checkpoint_bytes(tmp_path):
    save_checkpoint(tmp_path / "good.pt", model=torch.nn.Linear(3, 2))
    return (tmp_path / "good.pt").read_bytes()


BAD_FILES = {
    "garbage": lambda tmp: b"this is not a checkpoint at all\n" * 4,
    "empty": lambda tmp: b"",
    "truncated": lambda tmp: _good_checkpoint_bytes(tmp)[:300],
    "disallowed global": lambda tmp: _torch_bytes({"model_state": {}, "x": _RunsCode()}),
    "plain pickle": lambda tmp: pickle.dumps({"model_state": {}}),
    "a tensor, not a dict": lambda tmp: _torch_bytes(torch.ones(3)),
    "a dict of something else": lambda tmp: _torch_bytes({"weights": torch.ones(3)}),
}


def _assert_helpful(error, path):
    message = str(error)
    assert str(path) in message
    assert "delete it" in message and "without resuming" in message
    assert UNSAFE_ADVICE not in message and "weights_only" not in message
    cause = error.__cause__ or error.__context__
    assert cause is None or UNSAFE_ADVICE not in str(cause)  # not in the traceback either


@pytest.mark.parametrize("kind", BAD_FILES)
def test_a_checkpoint_that_cannot_be_used_is_named_with_what_to_do(tmp_path, kind):
    path = tmp_path / "best.pt"
    path.write_bytes(BAD_FILES[kind](tmp_path))
    with pytest.raises(ValueError) as caught:
        load_checkpoint(path, torch.nn.Linear(3, 2))
    _assert_helpful(caught.value, path)


@pytest.mark.parametrize("kind", ["garbage", "truncated", "disallowed global", "a dict of something else"])
def test_fit_resume_from_a_checkpoint_that_cannot_be_used_is_named_with_what_to_do(tmp_path, kind):
    path = tmp_path / "last.pt"
    path.write_bytes(BAD_FILES[kind](tmp_path))
    with pytest.raises(ValueError) as caught:
        fit(
            torch.nn.Linear(3, 2),
            Classification(2),
            _tiny_fit_data(),
            epochs=1,
            lr=1e-2,
            batch_size=8,
            progress=False,
            resume_path=path,
            resume=True,
        )
    _assert_helpful(caught.value, path)
    assert path.read_bytes() == BAD_FILES[kind](tmp_path)  # left for the user to look at


def test_bench_resume_with_a_damaged_last_checkpoint_exits_2_naming_it(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(_config()))
    out = tmp_path / "out"
    arguments = ["bench", str(config), "--max-steps", "2", "--out", str(out), "--no-progress"]
    assert main(arguments) == 0
    run_dir = next((out / "runs" / "gru").iterdir())
    (run_dir / "result.json").unlink()  # an interrupted run: resumed from last.pt
    (run_dir / "last.pt").write_bytes(b"\x80\x02crafted or damaged")
    capsys.readouterr()
    assert main([*arguments, "--resume"]) == 2
    err = capsys.readouterr().err
    assert str(run_dir / "last.pt") in err and UNSAFE_ADVICE not in err and "Traceback" not in err


def test_fit_resume_with_a_checkpoint_of_another_shape_names_file_and_parameters(tmp_path):
    path = tmp_path / "last.pt"
    options = dict(epochs=1, lr=1e-2, batch_size=8, progress=False, resume_path=path)
    x, y = _tiny_fit_data()
    fit(torch.nn.Linear(3, 2), Classification(2), (x, y), **options)
    model = torch.nn.Linear(3, 4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as caught:
        fit(model, Classification(4), (x, y), **options, resume=True)
    message = str(caught.value)
    assert str(path) in message
    assert "weight: (2, 3) in the file, (4, 3) in the model" in message
    assert "bias: (2,) in the file, (4,) in the model" in message
    assert "delete it" in message
    assert all(torch.equal(model.state_dict()[k], before[k]) for k in before)  # nothing half-loaded


# Where a file is opened for writing other than through neuralde_seq.files, and why that is safe.
RAW_WRITES_ALLOWED = {
    "neuralde_seq/files.py": "the safe writers themselves",
    "neuralde_seq/data/io/extraction.py": "members written into a fresh private folder that is renamed into place",
    "neuralde_seq/data/io/download.py": "the partial download, opened with O_NOFOLLOW under the file's lock",
}
RAW_WRITE = re.compile(
    r"\.write_text\(|\.write_bytes\(|\bopen\([^)\n]*[\"'](?:w|wb|a|ab|x|xb|w\+|r\+)[\"']|"
    r"\bjson\.dump\(|\bnp\.save[z]?\(|\btorch\.save\(\w+, (?!handle\))"
)


def test_every_writer_in_the_repository_writes_through_the_safe_writers():
    # benchmarks wrote their results.json / results.md in place (through a planted link, half a file on a crash)
    offenders = []
    for folder in ("neuralde_seq", "benchmarks", "tasks", "notebooks"):
        for path in sorted((PACKAGE_ROOT / folder).rglob("*.py")):
            name = path.relative_to(PACKAGE_ROOT).as_posix()
            if name in RAW_WRITES_ALLOWED:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if RAW_WRITE.search(code) and "/proc/" not in code:
                    offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, "raw writes (use neuralde_seq.files.write_text_atomic / atomic_file):\n" + "\n".join(
        offenders
    )
