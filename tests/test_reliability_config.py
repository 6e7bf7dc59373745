"""Issue 24, config and CLI: names and labels that could lead outside the output folder, variant labels that would
replace a split, a YAML alias bomb, unreadable recorded runs, and every CLI config error as one line with exit 2."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest
import yaml

from neuralde_seq.cli import main
from neuralde_seq.training.config import ConfigError, apply_overrides, load_config, parse_config, slug

# A tiny config of one closed-form row (1-NN: fitted in a moment, no training).
_REFERENCE_CONFIG = {
    "name": "tiny-reference",
    "task": "japanese-vowels",
    "task_options": {"drop_rate": 0.3},
    "seeds": [0],
    "models": [{"label": "one-nn", "model": "1nn-euclidean"}],
}
# A tiny config of one trained row.
_TRAINED_CONFIG = {
    "name": "tiny",
    "task": "japanese-vowels",
    "seeds": [0],
    "training": {"epochs": 1, "lr": 1e-2, "batch_size": 64},
    "models": [{"label": "GRU-dt", "model": "gru-dt", "options": {"hidden": 8}}],
}


def _config(**changes) -> dict:
    return {**json.loads(json.dumps(_TRAINED_CONFIG)), **changes}


def _write(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


# ------------------------------------------------------------------------- silent 7: the config's name
@pytest.mark.parametrize(
    "name", ["/some/absolute/path", "../../x", "..", ".", "a/b", "a\\b", "c:x", "x\x00y", ".hidden"]
)
def test_config_name_must_be_one_folder_name(name):
    with pytest.raises(ConfigError, match=r"^name .*(holds|starts with a dot)"):
        parse_config(_config(name=name))


def test_bench_default_output_folder_never_leaves_results(tmp_path, monkeypatch, capsys):
    # Run from a folder two levels down: a name '../../escaped' would put the outputs in tmp_path/escaped.
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    config = _write(work / "bench.yaml", _config(name="../../escaped"))
    status = _run_main(["bench", str(config), "--max-steps", "1", "--no-progress"])
    assert status[0] == 2 and "name '../../escaped'" in status[1]
    assert not (tmp_path / "escaped").exists() and not (work / "results").exists()


# ------------------------------------------------------------------------- silent 8: row labels and folders
_NASTY = [
    "..",
    ".",
    "",
    "/",
    "\\",
    "../..",
    "../x",
    "./.",
    "a/../..",
    ".hidden",
    "..\\..",
    "_",
    "-",
    "~",
    "\x00",
    "/etc/passwd",
    "C:\\x",
    "é",
    "...",
]


def test_slug_is_always_one_folder_inside_its_parent(tmp_path):
    rng = random.Random(0)
    alphabet = "./\\_-~ aZ9é:\x00"
    labels = _NASTY + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(3000)]
    for label in labels:
        name = slug(label)
        assert name not in ("", ".", "..") and not name.startswith("."), (label, name)
        assert "/" not in name and "\\" not in name and "\x00" not in name, (label, name)
        assert (tmp_path / name).resolve().parent == tmp_path.resolve(), (label, name)
    # labels of letters, digits, inner dots and dashes keep their folders (recorded runs stay where they are)
    for label in ("GRU-dt", "delta-cde", "ncde_1.5", "CKCNN"):
        assert slug(label) == label


@pytest.mark.parametrize("label", ["..", ".", "/", "../..", "_"])
def test_row_label_without_a_letter_or_digit_is_refused(label):
    rows = [{"label": label, "model": "gru-dt", "options": {"hidden": 8}}]
    with pytest.raises(ConfigError, match=r"models\[0\]\.label .* has no letter or digit"):
        parse_config(_config(models=rows))


def test_row_labels_differing_only_in_case_are_refused():
    # runs/GRU and runs/gru are one folder on macOS and Windows: the second row would overwrite the first's runs
    rows = [{"label": "GRU", "model": "gru-dt"}, {"label": "gru", "model": "gru-dt"}]
    with pytest.raises(ConfigError, match=r"models\[1\]\.label 'gru' is used by another row"):
        parse_config(_config(models=rows))


def test_row_folder_through_a_planted_link_is_refused(tmp_path):
    from neuralde_seq.training.runner import run_benchmark

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (out / "runs").mkdir(parents=True)
    elsewhere.mkdir()
    (out / "runs" / "one-nn").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ValueError, match=r"'one-nn' would lie outside .*runs"):
        run_benchmark(_REFERENCE_CONFIG, out_dir=out, progress=False)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(
    "row, message",
    [
        ({"model": []}, r"models\[0\]\.model must be a model name \(a string\), got \[\]"),
        ({"model": {"a": 1}}, r"models\[0\]\.model must be a model name"),
        ({"model": "gru-dt", "label": ["a"]}, r"models\[0\]\.label must be a string"),
    ],
)
def test_row_model_and_label_of_another_type_are_config_errors(row, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(_config(models=[row]))


# ------------------------------------------------------------------------- silent 10: variant labels
@pytest.mark.parametrize("label", ["train", "val", "test"])
def test_variant_labelled_like_a_split_is_refused(label):
    config = _config(evaluate=[{"label": "half", "subsample": 2}, {"label": label, "drop_rate": 0.5}])
    with pytest.raises(ConfigError, match=rf"evaluate\[1\]\.label '{label}' is reserved"):
        parse_config(config)


def test_duplicate_variant_labels_are_refused():
    config = _config(evaluate=[{"label": "more", "drop_rate": 0.5}, {"label": "more", "subsample": 2}])
    with pytest.raises(ConfigError, match=r"evaluate\[1\]\.label 'more' is already used by another variant"):
        parse_config(config)


def test_fit_and_evaluate_refuses_an_extra_test_set_named_like_a_split(tmp_path):
    from neuralde_seq.data.protocols import load_task
    from neuralde_seq.training.run import fit_and_evaluate

    data = load_task("japanese-vowels", seed=0, progress=False)
    # test samples as many as the training split's: the case where the model trained on the test inputs with the
    # training labels, and nothing failed until the report
    variant = data.splits.test.subset(range(len(data.splits.train)))
    calls = []
    with pytest.raises(ValueError, match=r"tests: the label\(s\) 'train' name a split"):
        calls.append(
            fit_and_evaluate(
                "gru-dt",
                data.splits,
                seed=0,
                options={"hidden": 8},
                progress=False,
                training={"epochs": 1, "lr": 1e-2, "batch_size": 64},
                checkpoint_path=tmp_path / "best.pt",
                tests={"train": variant},
            )
        )
    assert calls == [] and not (tmp_path / "best.pt").exists()  # refused before any training


# ------------------------------------------------------------------------- the hang: a YAML alias bomb
def _alias_bomb(levels: int = 9) -> str:
    """The billion laughs: each level a list of 9 aliases of the level below (9**levels strings)."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for k in range(1, levels):
        lines.append(f"l{k}: &l{k} [{','.join([f'*l{k - 1}'] * 9)}]")
    lines.append(f"description: [{','.join([f'*l{levels - 1}'] * 9)}]")
    return "name: bomb\ntask: japanese-vowels\n" + "\n".join(lines) + "\n"


def test_alias_bomb_config_is_refused_fast(tmp_path):
    # bounded, not too tight: every shipped config reads as plain YAML does
    root = Path(__file__).resolve().parents[1]
    for shipped in [
        *sorted((root / "tasks" / "configs").glob("*.yaml")),
        root / "neuralde_seq" / "configs" / "compare.yaml",
    ]:
        assert load_config(shipped) == yaml.safe_load(shipped.read_text()), shipped
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())
    assert len(path.read_bytes()) < 1000  # a few hundred bytes, 9**9 strings expanded
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb\.yaml: the YAML expands to more than"):
        load_config(path)
    assert time.perf_counter() - start < 1.0


def test_alias_bomb_in_an_override_is_refused_fast():
    bomb = _alias_bomb().split("\n", 2)[2].replace("\n", ", ")  # the anchors as one flow mapping
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"override 'description=.*expands to more than"):
        apply_overrides(_config(), ["description={" + bomb + "}"])
    assert time.perf_counter() - start < 1.0


def test_recursive_alias_and_oversized_configs_are_refused(tmp_path):
    (tmp_path / "loop.yaml").write_text("name: loop\ntask: &t [a, *t]\n")
    with pytest.raises(ConfigError, match=r"loop\.yaml: a YAML alias refers to a node that contains it"):
        load_config(tmp_path / "loop.yaml")
    (tmp_path / "big.yaml").write_text("name: big\n" + "# padding\n" * 110_000)  # 1.1 MB
    with pytest.raises(ConfigError, match=r"big\.yaml: more than 1,048,576 bytes"):
        load_config(tmp_path / "big.yaml")


def test_shared_structures_never_go_through_str_or_repr_unbounded():
    # A dict built in Python shares its lists like a YAML alias does (9**7 strings when expanded): a description
    # must be a string, and a bad value's repr in a message stays short.
    level = ["lol"] * 9
    for _ in range(6):
        level = [level] * 9
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="description must be a string, got list") as info:
        parse_config(_config(description=level))
    assert len(str(info.value)) < 500
    with pytest.raises(ConfigError, match="name must be a non-empty string") as info:
        parse_config(_config(name=level))
    assert len(str(info.value)) < 500
    assert time.perf_counter() - start < 1.0


# ------------------------------------------------------------------------- the CLI: one line, exit 2
def _run_main(argv) -> tuple[int, str]:
    """``main(argv)``'s exit status (returned or by SystemExit) and stderr; an escaping exception as status
    'raised' with its traceback."""
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            status = main(argv)
    except SystemExit as stop:
        status = stop.code
    except Exception:  # noqa: BLE001 (what the test reports: an error that escaped the CLI)
        return "raised", err.getvalue() + traceback.format_exc()
    return status, err.getvalue()


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    _write(folder / "good.yaml", _config())
    (folder / "broken.yaml").write_text("name: [1\n")
    (folder / "list.yaml").write_text("- a\n- b\n")
    (folder / "nul.yaml").write_bytes(b"name: x\x00\n")
    (folder / "latin1.yaml").write_bytes("name: caf\u00e9\n".encode("latin-1"))
    (folder / "a-folder.yaml").mkdir()
    return folder


_BAD_ARGS = [
    (["bench"], "config"),
    (["bench", "{d}/nothere.yaml"], "nothere.yaml does not exist"),
    (["bench", "{d}/a-folder.yaml"], "a-folder.yaml: cannot be read"),
    (["bench", "{d}/broken.yaml"], "broken.yaml: not valid YAML: .*line 2"),
    (["bench", "{d}/list.yaml"], "list.yaml: the config must be a YAML mapping, got list"),
    (["bench", "{d}/nul.yaml"], "nul.yaml: not valid YAML: character #x0000"),
    (["bench", "{d}/latin1.yaml"], "latin1.yaml: not UTF-8"),
    (["bench", "{d}/good.yaml", "--set", "foo"], "override 'foo' must have the form key.path=value"),
    (["bench", "{d}/good.yaml", "--set", "=3"], "override '=3' has an empty key"),
    (["bench", "{d}/good.yaml", "--set", "training.epochs=[1"], "override 'training.epochs=\\[1': not valid YAML"),
    (["bench", "{d}/good.yaml", "--set", "training.epochs=abc"], "training.epochs must be an integer"),
    (["bench", "{d}/good.yaml", "--set", "seeds.5=1"], "seeds.5 is not an index"),
    (["bench", "{d}/good.yaml", "--set", "solver.step_size=small"], "step_size"),
    (["bench", "{d}/good.yaml", "--set", "name=../x"], "name '../x' holds '/'"),
    (["bench", "{d}/good.yaml", "--models", "nosuch"], "nosuch match no row"),
    (["bench", "{d}/good.yaml", "--models", ","], "--models needs at least one name"),
    (["bench", "{d}/good.yaml", "--seeds", "a"], "--seeds must be comma-separated integers"),
    (["bench", "{d}/good.yaml", "--seeds", "-1"], "--seeds needs non-negative integers"),
    (["bench", "{d}/good.yaml", "--max-steps", "0"], "expected a positive integer"),
    (["bench", "{d}/good.yaml", "--dtype", "float16"], "invalid choice: 'float16'"),
    (["bench", "{d}/good.yaml", "--device", "nodev"], "'nodev' is not a torch device"),
    (["bench", "{d}/good.yaml", "--resume", "--fresh"], "not allowed with argument --resume"),
    (["compare", "--drop-rate", "1.5"], "--drop-rate must lie in"),
    (["compare", "--drop-rate", "x"], "invalid float value"),
    (["compare", "--models", "nosuch"], "nosuch match no row"),
    (["compare", "--lr", "-1"], "training.lr must be positive"),
    (["compare", "--epochs", "0"], "expected a positive integer"),
    (["compare", "--solver", "nosuch"], "method must be one of"),
    (["nosuchcommand"], "invalid choice"),
]


@pytest.mark.parametrize("argv, message", _BAD_ARGS, ids=[" ".join(a).replace("{d}/", "") for a, _ in _BAD_ARGS])
def test_cli_config_errors_are_one_line_and_exit_2(bad_files, tmp_path, argv, message):
    argv = [a.format(d=bad_files) for a in argv]
    if argv[0] in ("bench", "compare"):
        argv += ["--out", str(tmp_path / "out"), "--no-progress"]
    status, err = _run_main(argv)
    assert "Traceback" not in err, err
    assert status == 2, (status, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("neuralde-seq") and ": error: " in lines[0], err
    import re

    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_cli_process_exits_2_without_a_traceback(bad_files):
    for argv in (["bench", str(bad_files / "broken.yaml")], ["bench", str(bad_files / "good.yaml"), "--device", "x"]):
        done = subprocess.run(
            [sys.executable, "-m", "neuralde_seq.cli", *argv],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# ------------------------------------------------------------------------- a truncated result.json on --resume
def test_truncated_result_on_resume_names_the_file_and_what_to_do(tmp_path):
    config, out = _write(tmp_path / "reference.yaml", _REFERENCE_CONFIG), tmp_path / "out"
    argv = ["bench", str(config), "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    (result,) = (out / "runs" / "one-nn").glob("seed0-*/result.json")
    text = result.read_text()
    result.write_text(text[: len(text) // 2])  # as a crash mid-write leaves it
    status, err = _run_main(argv + ["--resume"])
    assert status == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(result) in err and "delete it" in err and "--fresh" in err
    # --fresh makes the run afresh: a whole result again, the same metrics as the first time
    assert main(argv + ["--fresh"]) == 0
    assert json.loads(result.read_text())["metrics"] == json.loads(text)["metrics"]
    # a file that is JSON but not a run's result is named too
    result.write_text("[]")
    status, err = _run_main(argv + ["--resume"])
    assert status == 2 and str(result) in err and "not a finished run's result" in err
