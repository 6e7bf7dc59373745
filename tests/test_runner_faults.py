"""Runs that never publish wrong results: resume after a config change, smoke runs, divergence, compare's
settings, checkpoints of another model.

Every test runs the real runner on the embedded JapaneseVowels data with a tiny GRU-Δt (about a second
per run) and checks what is written and returned against what a fresh run with the same settings gives.
"""

import json
from pathlib import Path

import pytest
import torch

from neuralde_seq.cli import COMPARE_CONFIG, build_parser, compare_overrides, main
from neuralde_seq.file_format import OldFormatError
from neuralde_seq.migration import migrate_path
from neuralde_seq.models import model_defaults
from neuralde_seq.solvers import Auto, Dopri5
from neuralde_seq.training import ResumeMismatch, fit, load_checkpoint, save_checkpoint
from neuralde_seq.training.config import apply_overrides, load_config, parse_config
from neuralde_seq.training.objectives import Classification
from neuralde_seq.training.runner import run_benchmark


def _config(**changes):
    config = {
        "name": "faults",
        "task": "japanese-vowels",
        "task_options": {"drop_rate": 0.3},
        "seeds": [0],
        "training": {"epochs": 1, "lr": 3e-3, "batch_size": 64},
        "models": [{"label": "gru", "model": "gru-dt", "options": {"hidden": 4}}],
    }
    config.update(changes)
    return config


def _run(out, config, **kwargs):
    return run_benchmark(config, out_dir=out, progress=False, **kwargs)


def _run_folders(out):
    return sorted(p.name for p in (Path(out) / "runs" / "gru").iterdir())


@pytest.mark.parametrize("override", ["task_options.drop_rate=0.5", "models.0.options.hidden=6", "training.epochs=2"])
def test_resume_after_a_config_change_runs_afresh_and_never_publishes_the_old_run(tmp_path, override, capsys):
    out = tmp_path / "out"
    first = _run(out, _config())
    changed = _run(out, _config(), overrides=[override], resume=True)
    folders = _run_folders(out)
    assert len(folders) == 2, folders  # the old run is left alone, the new settings got their own folder
    assert "not reusing" in capsys.readouterr().err
    fresh = _run(tmp_path / "fresh", _config(), overrides=[override])
    # what the resumed invocation publishes is exactly a fresh run with the new settings, not the old run
    assert changed["rows"][0]["metrics"] == fresh["rows"][0]["metrics"]
    assert changed["rows"][0]["metrics"] != first["rows"][0]["metrics"] or override.startswith("training.epochs")
    result_files = sorted((out / "runs" / "gru").glob("*/result.json"))
    settings = [json.loads(p.read_text())["config"] for p in result_files]
    assert len({json.dumps(s, sort_keys=True) for s in settings}) == 2


def test_resume_with_the_same_config_reuses_the_finished_run(tmp_path):
    out = tmp_path / "out"
    first = _run(out, _config())
    marker = next((out / "runs" / "gru").glob("*/result.json"))
    stamp = marker.stat().st_mtime_ns
    again = _run(out, _config(), resume=True)
    assert marker.stat().st_mtime_ns == stamp  # not retrained, not rewritten
    assert again["rows"][0]["metrics"] == first["rows"][0]["metrics"]
    assert len(_run_folders(out)) == 1


def test_smoke_runs_are_marked_and_never_reused_as_results(tmp_path):
    out = tmp_path / "out"
    smoke = _run(out, _config(), max_steps=1)
    assert smoke["smoke"] is True
    assert "SMOKE RUN" in (out / "results.md").read_text()
    assert json.loads((out / "results.json").read_text())["smoke"] is True
    full = _run(out, _config(), resume=True)
    assert full["smoke"] is False and "SMOKE RUN" not in (out / "results.md").read_text()
    assert len(_run_folders(out)) == 2  # the smoke run's folder was not taken for the full run's result
    run = json.loads(
        next(
            p for p in (out / "runs" / "gru").glob("*/result.json") if not json.loads(p.read_text())["smoke"]
        ).read_text()
    )
    assert run["history"]["steps"] > 1


def test_divergence_gives_exit_status_1_and_marks_the_run(tmp_path, capsys):
    import yaml

    path = tmp_path / "diverge.yaml"
    # lr 1e6 blows the GRU's loss up within an epoch: either non-finite or exploding
    path.write_text(yaml.safe_dump(_config(training={"epochs": 2, "lr": 1.0e6, "batch_size": 16})))
    status = main(["bench", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    assert status == 1
    assert "diverged" in capsys.readouterr().err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["diverged"] == [{"label": "gru", "seed": 0}]
    assert "DIVERGED" in (tmp_path / "out" / "results.md").read_text()


def test_finite_loss_blow_up_is_divergence_not_a_result():
    class BlowsUp(torch.nn.Module):
        """Logits multiplied by 1e12 after 5 training steps: a finite loss of order 1e12."""

        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)
            self.calls = 0

        def forward(self, x):
            if self.training:
                self.calls += 1
            out = self.linear(x)
            return out * 1e12 if self.calls > 5 else out

    from neuralde_seq.training import TrainingDiverged

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 3, generator=g), (torch.arange(40) % 2)
    model = BlowsUp()
    with pytest.raises(TrainingDiverged, match="exploded"):
        fit(model, Classification(2), (x, y), epochs=10, lr=1e-3, batch_size=8, progress=False)


def test_compare_runs_each_row_with_its_configured_epochs_and_options_apply_to_every_row():
    parser = build_parser()
    config = load_config(COMPARE_CONFIG)
    default = parse_config(apply_overrides(config, compare_overrides(parser.parse_args(["compare"]), config)))
    epochs = {row.label: None if row.training is None else row.training.epochs for row in default.rows}
    # the reference rows are fitted once, without epochs
    assert epochs == {
        "hebb-cde": 25,
        "oja-cde": 25,
        "delta-cde": 25,
        "ncde": 25,
        "ckcnn": 30,
        "minirocket": None,
        "1nn-euclidean": None,
    }
    args = parser.parse_args(["compare", "--epochs", "3", "--lr", "0.01", "--solver", "dopri5", "--drop-rate", "0.5"])
    changed = parse_config(apply_overrides(config, compare_overrides(args, config)))
    trained = [row for row in changed.rows if row.training is not None]
    assert len(trained) == 5 and {row.training.epochs for row in trained} == {3}
    assert {row.training.lr for row in trained} == {0.01}
    assert changed.task_options["drop_rate"] == 0.5
    solvers = {row.label: None if row.solver is None else row.solver.method for row in trained}
    # ncde keeps the default method Auto() (which solves it with rk4: it has no closed form)
    assert solvers == {"hebb-cde": Dopri5(), "oja-cde": Dopri5(), "delta-cde": Dopri5(), "ncde": Auto(), "ckcnn": None}


def test_compare_help_lists_the_rows_and_has_no_markup(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "hebb-cde, oja-cde, delta-cde, ncde, ckcnn, minirocket, 1nn-euclidean" in text and "30% of" in text
    assert ":func:" not in text and ":mod:" not in text and "``" not in text


def test_resume_checkpoint_of_other_settings_is_refused(tmp_path):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 3, generator=g), torch.arange(32) % 2
    options = dict(epochs=1, lr=1e-2, batch_size=8, progress=False, resume_path=tmp_path / "last.pt")
    fit(torch.nn.Linear(3, 2), Classification(2), (x, y), **options)
    with pytest.raises(ResumeMismatch, match="batch_size: 8 there, 16 now"):
        fit(torch.nn.Linear(3, 2), Classification(2), (x, y), **{**options, "batch_size": 16}, resume=True)


def test_checkpoint_of_another_model_shape_is_a_clear_error(tmp_path):
    save_checkpoint(tmp_path / "m.pt", model=torch.nn.Linear(3, 2))
    with pytest.raises(
        ValueError, match=r"written for another model .*weight: \(2, 3\) in the file, \(4, 3\) in the model"
    ):
        load_checkpoint(tmp_path / "m.pt", torch.nn.Linear(3, 4))


def test_shipped_config_with_a_high_drop_rate_names_the_variant_that_cannot_be_built(tmp_path, capsys):
    config = Path(__file__).resolve().parents[1] / "tasks" / "configs" / "japanese_vowels.yaml"
    # unobserved_fill None: refuse a sample that never observes a channel (the default fills it with the mean)
    status = main(
        [
            "bench",
            str(config),
            "--set",
            "task_options.drop_rate=0.7",
            "--models",
            "NCDE",
            "--max-steps",
            "1",
            "--set",
            "models.1.control={unobserved_fill: null}",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert "test variant '1/2 rate'" in err and "no observation" in err and "unobserved_fill" in err
    # an input error of another kind gets its own message, without the advice about missing observations (the
    # control options are checked with the config now, before anything runs: a usage error, exit status 2)
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "bench",
                str(config),
                "--models",
                "NCDE",
                "--max-steps",
                "1",
                "--out",
                str(tmp_path / "depth"),
                "--set",
                "models.1.control={interpolation: logsignature, depth: 3, step: 4}",
                "--no-progress",
            ]
        )
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "depth 3 is not available with backend='torch'" in err
    assert "unobserved_fill" not in err and not (tmp_path / "depth").exists()


def test_compare_and_bench_train_through_the_one_loop(tmp_path, monkeypatch):
    import yaml

    import neuralde_seq.training.trainer as trainer

    calls = []
    real_fit = trainer.fit

    def spy(model, objective, *args, **kwargs):
        calls.append(type(objective).__name__)
        return real_fit(model, objective, *args, **kwargs)

    monkeypatch.setattr(trainer, "fit", spy)
    assert (
        main(["compare", "--models", "ncde", "--epochs", "1", "--out", str(tmp_path / "compare"), "--no-progress"]) == 0
    )
    assert calls == ["Classification"]
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(_config(seeds=[0, 1])))
    assert main(["bench", str(path), "--out", str(tmp_path / "bench"), "--no-progress"]) == 0
    assert calls == ["Classification"] * 3  # one fit per row and seed
    for result in (tmp_path / "bench" / "runs").glob("*/*/result.json"):
        assert json.loads(result.read_text())["history"]["stopped_by"] == "epochs"  # fit's history


def test_compare_adds_a_row_for_any_registry_model_asked_for(tmp_path):
    from neuralde_seq.cli import compare_config

    config = parse_config(compare_config(["gru-dt", "delta-post-cde", "ncde"]))
    rows = {row.label: row for row in config.rows}
    assert rows["gru-dt"].options == {} and rows["gru-dt"].training.epochs == 25
    assert rows["delta-post-cde"].options == {"d_model": 32, "n_heads": 4, "d_ff": 64}
    assert [row.label for row in config.rows].count("ncde") == 1
    with pytest.raises(SystemExit):
        main(["compare", "--models", "nosuchmodel", "--out", str(tmp_path), "--no-progress"])
    # closed-form rows (a reference, the random-feature mode) are added too, and the training options of
    # `compare --epochs` skip them (a closed-form row has nothing to train: a training key there is an error)
    raw = compare_config(["minirocket", "random-features"])
    args = build_parser().parse_args(["compare", "--epochs", "3"])
    config = parse_config(apply_overrides(raw, compare_overrides(args, raw)))
    rows = {row.label: row for row in config.rows}
    assert rows["minirocket"].reference and rows["minirocket"].training is None
    assert rows["random-features"].reference and rows["random-features"].training is None
    assert rows["ncde"].training.epochs == 3


def test_time_unit_auto_is_the_training_split_span_for_every_split(tmp_path):
    from neuralde_seq.data.protocols import load_task
    from neuralde_seq.observations import observation_span

    config = _config(
        models=[
            {"label": "gru", "model": "ncde", "options": {"hidden": 4, "width": 8}, "control": {"time_unit": "auto"}}
        ]
    )
    auto = _run(tmp_path / "auto", config)
    train = load_task("japanese-vowels", seed=0, drop_rate=0.3, progress=False).splits[0]
    span = observation_span(train.times, train.lengths)
    assert span > 1  # JapaneseVowels' index times: the unit really rescales
    explicit = _run(tmp_path / "explicit", _config(models=[{**config["models"][0], "control": {"time_unit": span}}]))
    assert auto["rows"][0]["metrics"] == explicit["rows"][0]["metrics"]
    with pytest.raises(ValueError, match="resolved from the training split"):
        from neuralde_seq import build_control

        build_control(train.times, train.values, train.lengths, time_unit="auto")


def test_a_finished_run_made_under_other_registry_defaults_is_not_reused(tmp_path, monkeypatch, capsys):
    import dataclasses

    import neuralde_seq.models as models

    out = tmp_path / "out"
    config = _config(models=[{"label": "gru", "model": "gru-dt"}])  # no options: the registry's hidden size
    first = _run(out, config)
    (result_path,) = (out / "runs" / "gru").glob("*/result.json")
    assert json.loads(result_path.read_text())["model_defaults"]["hidden"] == models.model_defaults("gru-dt")["hidden"]
    entry = models.model_entry("gru-dt")
    monkeypatch.setitem(
        models._REGISTRY, "gru-dt", dataclasses.replace(entry, defaults={**entry.defaults, "hidden": 6})
    )
    again = _run(out, config, resume=True)
    err = capsys.readouterr().err
    assert "made with other registry defaults of 'gru-dt' (hidden)" in err
    # the same folder name (the row as written did not change) now holds a run of the new model
    assert again["rows"][0]["params"] != first["rows"][0]["params"]
    assert json.loads(result_path.read_text())["model_defaults"]["hidden"] == 6
    stale = [p.name for p in (out / "runs" / "gru").iterdir() if p.name.startswith("stale-")]
    assert stale == [f"stale-{result_path.parent.name}"]
    # and with the defaults as they are now, the new run is reused as before
    stamp = result_path.stat().st_mtime_ns
    _run(out, config, resume=True)
    assert result_path.stat().st_mtime_ns == stamp


def test_a_finished_run_made_under_other_control_defaults_is_not_reused(tmp_path, monkeypatch, capsys):
    import dataclasses

    import neuralde_seq.models as models

    out = tmp_path / "out"
    config = _config(
        models=[{"label": "rde", "model": "delta-rde", "options": {"d_model": 8, "n_heads": 2, "d_ff": 8}}]
    )
    _run(out, config)
    (result_path,) = (out / "runs" / "rde").glob("*/result.json")
    recorded = json.loads(result_path.read_text())
    assert recorded["control_defaults"] == models.control_options("delta-rde")
    assert recorded["control_defaults"]["window_start_values"] is True
    # a run written before control defaults were recorded (format 1) was made when the RDE read log-signatures
    # only: the migration records the defaults it was made under
    del recorded["control_defaults"], recorded["format_version"]
    result_path.write_text(json.dumps(recorded))
    assert migrate_path(out)
    _run(out, config, resume=True)
    assert "made with other registry defaults of 'delta-rde' (control window_start_values)" in capsys.readouterr().err
    assert json.loads(result_path.read_text())["control_defaults"]["window_start_values"] is True
    # a registry control default that changes between two runs makes the finished run stale too
    entry = models.model_entry("delta-rde")
    monkeypatch.setitem(models._REGISTRY, "delta-rde", dataclasses.replace(entry, control={**entry.control, "step": 2}))
    _run(out, config, resume=True)
    assert "(control step)" in capsys.readouterr().err
    assert json.loads(result_path.read_text())["control_defaults"]["step"] == 2
    # the same defaults again: reused
    stamp = result_path.stat().st_mtime_ns
    _run(out, config, resume=True)
    assert result_path.stat().st_mtime_ns == stamp and "not reusing" not in capsys.readouterr().err


def test_a_migrated_run_without_recorded_control_defaults_is_reused_where_they_did_not_change(tmp_path, capsys):
    out = tmp_path / "out"
    _run(out, _config())
    (result_path,) = (out / "runs" / "gru").glob("*/result.json")
    recorded = json.loads(result_path.read_text())
    del recorded["control_defaults"], recorded["model_defaults"], recorded["format_version"]  # a format-1 record
    result_path.write_text(json.dumps(recorded))
    with pytest.raises(OldFormatError, match="neuralde-seq migrate"):
        _run(out, _config(), resume=True)
    assert migrate_path(out)
    stamp = result_path.stat().st_mtime_ns
    _run(out, _config(), resume=True)
    assert result_path.stat().st_mtime_ns == stamp and "not reusing" not in capsys.readouterr().err


def test_an_interrupted_run_made_under_other_registry_defaults_is_set_aside_not_continued(tmp_path, capsys):
    """An interrupted run (a resume checkpoint, no result.json) has the same fingerprint after the registry's
    defaults change (the fingerprint hashes the row as written), but it is another model: continuing it failed with
    torch's raw state-dict error when a default added a layer. It is moved aside and made afresh, as a finished run
    made under other defaults is."""
    out = tmp_path / "out"
    _run(out, _config())
    (run_dir,) = [p for p in (out / "runs" / "gru").iterdir()]
    (run_dir / "result.json").unlink()  # interrupted: only the checkpoints remain
    saved = torch.load(run_dir / "last.pt", weights_only=True)
    assert saved["config"]["model_defaults"]["hidden"] == model_defaults("gru-dt")["hidden"]
    saved["config"]["model_defaults"]["hidden"] = 999  # as if made under another registry default
    saved["model_state"] = {"not_a_parameter_of_today": torch.zeros(1)}  # another model: cannot be loaded
    torch.save(saved, run_dir / "last.pt")
    _run(out, _config(), resume=True)
    assert "not continuing" in capsys.readouterr().err
    folders = _run_folders(out)
    assert folders == sorted([run_dir.name, f"stale-{run_dir.name}"])
    assert (run_dir / "result.json").exists()
