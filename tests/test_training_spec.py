"""One training spec (issue 26, step 3): `TrainingSpec` checks itself, `fit`'s keyword form and spec form are one
call, a config's ``training:`` section reads into one, and the setups around `fit` (the runner, the estimators,
``train_classifier``, the stress tasks) hand `fit` the same spec for the same settings."""

import dataclasses
import math

import pytest
import torch

from neuralde_seq import TrainingSpec, fit
from neuralde_seq.input_checks import UnknownOptionError
from neuralde_seq.training import Callback, Classification, Regression, train_classifier
from neuralde_seq.training.config import ConfigError, fingerprint, parse_config
from neuralde_seq.training.run import run_spec

TIMINGS = ("seconds_per_epoch", "val_seconds")


class _Net(torch.nn.Module):
    """A small classifier with dropout (so the global RNG matters) and a penalty."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.drop = torch.nn.Dropout(0.2)

    def forward(self, x):
        return self.lin(self.drop(x))

    def penalty(self):
        return (self.lin.weight**2).sum()


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0.8).long()


def _run(seed_model=0, **call):
    """fit on fixed data from fixed initial weights: (history without timings, final weights)."""
    torch.manual_seed(seed_model)
    model = _Net()
    history = fit(model, Classification(3), _data(40, 1), _data(17, 2), progress=False, **call)
    return {k: v for k, v in history.items() if k not in TIMINGS}, model.state_dict()


class _SeenSpec(Callback):
    def on_fit_start(self, state):
        self.spec, self.config = state.spec, dict(state.config)


SETTINGS = dict(
    epochs=3,
    lr=0.05,
    batch_size=8,
    seed=5,
    weight_decay=1e-3,
    grad_clip=0.5,
    penalty_weight=0.01,
    schedule="cosine",
    eval_every=3,
    eval_batch_size=7,
    max_steps=13,
)


# ---------------------------------------------------------------------------------------------- checks
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("epochs", 0, "epochs must be a positive integer, got 0"),
        ("batch_size", True, "batch_size must be a positive integer, got True"),
        ("eval_batch_size", 0, "eval_batch_size must be a positive integer, got 0"),
        ("eval_every", 2.5, "eval_every must be a positive integer or None, got 2.5"),
        ("max_steps", -1, "max_steps must be a positive integer or None, got -1"),
        ("threads", 0, "threads must be a positive integer or None"),
        ("lr", True, "lr must be a positive finite number, got True"),
        ("lr", math.inf, "lr must be a positive finite number, got inf"),
        ("weight_decay", "0", "weight_decay must be a finite number >= 0, got '0'"),
        ("penalty_weight", -0.1, "penalty_weight must be a finite number >= 0, got -0.1"),
        ("grad_clip", 0.0, "grad_clip must be a positive number or None, got 0.0"),
        ("schedule", "linear", "schedule must be one of ('constant', 'cosine'), got 'linear'"),
        ("seed", 1.5, "seed must be an integer, got 1.5"),
    ],
)
def test_a_bad_field_is_refused_naming_it_in_the_spec_and_in_fit(field, value, message):
    settings = {"epochs": 2, "lr": 0.1, "batch_size": 8, field: value}
    with pytest.raises(ValueError) as made:
        TrainingSpec(**settings)
    assert str(made.value).startswith(message), str(made.value)
    with pytest.raises(ValueError) as called:
        fit(_Net(), Classification(3), _data(16, 0), progress=False, **settings)
    assert str(called.value) == str(made.value)  # fit's message is the spec's


def test_replace_checks_the_new_value_and_suggests_a_misspelt_field():
    spec = TrainingSpec(epochs=2, lr=0.1, batch_size=8)
    assert spec.replace(lr=0.2) == TrainingSpec(epochs=2, lr=0.2, batch_size=8) and spec.lr == 0.1  # frozen
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        spec.replace(batch_size=0)
    with pytest.raises(UnknownOptionError, match="did you mean 'grad_clip'"):
        spec.replace(gradclip=1.0)


# ---------------------------------------------------------------------------------------------- fit's two forms
def test_keyword_form_and_spec_form_train_identically():
    by_keywords, weights_k = _run(**SETTINGS)
    by_spec, weights_s = _run(spec=TrainingSpec(**SETTINGS))
    assert by_keywords == by_spec
    assert all(torch.equal(weights_k[k], weights_s[k]) for k in weights_k)
    # A run of 13 steps of 5 per epoch, evaluated every 3 steps and at each epoch's end, stopped by max_steps.
    assert by_spec["step"] == [3, 5, 6, 9, 10, 12, 13] and by_spec["stopped_by"] == "max_steps"


@pytest.mark.parametrize(
    "field, other",
    [
        ("seed", 6),
        ("lr", 0.02),
        ("batch_size", 16),
        ("epochs", 2),
        ("weight_decay", 0.1),
        ("grad_clip", 0.05),
        ("penalty_weight", 0.5),
        ("schedule", "constant"),
        ("eval_every", 4),
        ("max_steps", 12),
    ],
)
def test_fit_reads_every_field_from_the_spec(field, other):
    """A spec differing in one field trains differently from the keywords: fit reads that field from the spec."""
    by_keywords, _ = _run(**SETTINGS)
    by_spec, _ = _run(spec=TrainingSpec(**SETTINGS).replace(**{field: other}))
    assert by_spec != by_keywords


def test_fit_records_the_spec_and_its_checkpoint_settings_as_before(tmp_path):
    """The keywords make the spec callbacks see; the resume checkpoint's settings at the defaults are the dict fit
    wrote before TrainingSpec (so recorded runs and their checkpoints stay comparable)."""
    seen = _SeenSpec()
    path = tmp_path / "last.pt"
    fit(
        _Net(),
        Classification(3),
        _data(16, 0),
        epochs=1,
        lr=0.1,
        batch_size=8,
        callbacks=[seen],
        resume_path=path,
        progress=False,
    )
    assert seen.spec == TrainingSpec(epochs=1, lr=0.1, batch_size=8)
    before = {
        "epochs": 1,
        "lr": 0.1,
        "batch_size": 8,
        "seed": 0,
        "weight_decay": 0.0,
        "grad_clip": None,
        "penalty_weight": 0.0,
        "eval_every": None,
        "objective": "Classification",
        "model_class": "_Net",
        "world_size": 1,
    }
    saved = torch.load(path, weights_only=True)["config"]
    assert saved == before == seen.config
    assert [type(saved[k]) for k in before] == [type(v) for v in before.values()]  # 0.0, not 0: same JSON
    # A cosine schedule is recorded (only then: checkpoints written before schedules resume).
    fit(
        _Net(),
        Classification(3),
        _data(16, 0),
        epochs=1,
        lr=0.1,
        batch_size=8,
        schedule="cosine",
        resume_path=path,
        progress=False,
    )
    assert torch.load(path, weights_only=True)["config"] == {**before, "schedule": "cosine"}


def test_a_spec_and_a_field_together_are_refused_naming_the_field():
    spec = TrainingSpec(epochs=1, lr=0.1, batch_size=8)
    x, y = _data(16, 0)
    with pytest.raises(TypeError, match=r"both spec and lr=0\.2.*spec\.replace\(lr=\.\.\.\)"):
        fit(_Net(), Classification(3), (x, y), spec=spec, lr=0.2, progress=False)
    with pytest.raises(TypeError, match="both spec and max_steps=3"):
        train_classifier(_Net(), x, y, x, y, spec, max_steps=3, progress=False)


def test_a_misspelt_or_missing_keyword_is_named():
    x, y = _data(16, 0)
    with pytest.raises(
        UnknownOptionError, match="unknown keyword argument 'epoch' for fit\\(\\); did you mean 'epochs'"
    ):
        fit(_Net(), Classification(3), (x, y), epoch=1, lr=0.1, batch_size=8)
    with pytest.raises(UnknownOptionError, match="did you mean 'callbacks'"):  # fit's own keywords are suggested too
        fit(_Net(), Classification(3), (x, y), epochs=1, lr=0.1, batch_size=8, callback=[])
    with pytest.raises(TypeError, match="missing: epochs, batch_size"):
        fit(_Net(), Classification(3), (x, y), lr=0.1)
    with pytest.raises(TypeError, match="spec must be a TrainingSpec, got dict"):
        fit(_Net(), Classification(3), (x, y), spec={"epochs": 1, "lr": 0.1, "batch_size": 8})


# ---------------------------------------------------------------------------------------------- from a mapping
def test_from_mapping_reads_yaml_values_and_round_trips():
    spec = TrainingSpec(**SETTINGS)
    assert TrainingSpec.from_mapping(dataclasses.asdict(spec)) == spec
    read = TrainingSpec.from_mapping({"epochs": 3, "lr": "1e-3", "batch_size": 8, "weight_decay": 0})
    assert read.lr == 1e-3 and isinstance(read.lr, float) and read.weight_decay == 0.0  # YAML 1.1's "1e-3"


@pytest.mark.parametrize(
    "mapping, error, message",
    [
        (
            {"epoch": 3, "lr": 1e-3, "batch_size": 8},
            UnknownOptionError,
            "unknown key(s) 'epoch' in models[0].training; did you mean 'epochs'? allowed: epochs, lr",
        ),
        (
            {"epochs": 3, "lr": 1e-3, "batch_size": 8, "shedule": "cosine", "gradclip": 1},
            UnknownOptionError,
            "'shedule': did you mean 'schedule'? 'gradclip': did you mean 'grad_clip'?",
        ),
        ({"lr": 1e-3, "batch_size": 8}, ValueError, "models[0].training.epochs is required"),
        ({"epochs": 0, "lr": 1e-3, "batch_size": 8}, ValueError, "models[0].training.epochs must be positive, got 0"),
        (
            {"epochs": 3, "lr": "fast", "batch_size": 8},
            ValueError,
            "models[0].training.lr must be a number, got 'fast'",
        ),
        (
            {"epochs": 3, "lr": 1e-3, "batch_size": 8, "schedule": "step"},
            ValueError,
            "models[0].training.schedule must be one of constant, cosine, got 'step'",
        ),
    ],
)
def test_from_mapping_names_the_key_path_and_suggests_the_closest_key(mapping, error, message):
    with pytest.raises(error) as info:
        TrainingSpec.from_mapping(mapping, "models[0].training")
    assert message in str(info.value), str(info.value)


def _config(top_training, **row):
    return {"name": "t", "task": "japanese-vowels", "training": top_training, "models": [{"model": "ncde", **row}]}


def test_a_config_row_records_every_training_setting_and_its_fingerprint_tells_them_apart():
    """The row's recorded training dict (what run folders are named by) holds every setting, those at their
    defaults too, so that a run's record says what it was made with."""
    row = parse_config(_config({"epochs": 3, "lr": "1e-3", "batch_size": 8})).rows[0]
    at_defaults = {
        "epochs": 3,
        "lr": 1e-3,
        "batch_size": 8,
        "select_on": "accuracy",
        "eval_batch_size": None,
        "patience": None,
        "grad_clip": None,
        "weight_decay": 0.0,
        "penalty_weight": 0.0,
        "schedule": "constant",
        "augment_drop_rate": 0.0,
        "augment_crop": 1.0,
        "ensemble": 1,
    }
    assert row.to_dict()["training"] == at_defaults
    cosine = parse_config(
        _config({"epochs": 3, "lr": 1e-3, "batch_size": 8, "schedule": "cosine", "ensemble": 2})
    ).rows[0]
    assert cosine.to_dict()["training"] == {**at_defaults, "schedule": "cosine", "ensemble": 2}
    assert fingerprint(cosine.to_dict()["training"]) != fingerprint(row.to_dict()["training"])


def test_a_config_error_in_training_is_a_config_error_naming_the_row():
    with pytest.raises(ConfigError, match=r"models\[0\]\.training\.patience must be positive, got 0"):
        parse_config(_config({"epochs": 3, "lr": 1e-3, "batch_size": 8}, training={"patience": 0}))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) 'epoch' in models\[0\]\.training; did you mean 'epochs'"):
        parse_config(_config({"lr": 1e-3, "batch_size": 8}, training={"epoch": 3}))


# ---------------------------------------------------------------------------------------------- the setups
ROW = {
    "epochs": 4,
    "lr": 2e-3,
    "batch_size": 16,
    "weight_decay": 1e-4,
    "grad_clip": 1.0,
    "penalty_weight": 0.1,
    "schedule": "cosine",
}


def test_the_runner_and_the_estimators_give_fit_the_same_spec_for_the_same_settings():
    from neuralde_seq.sklearn import SequenceClassifier, SequenceRegressor

    expected = TrainingSpec(**ROW, seed=7)
    row = parse_config(_config(ROW)).rows[0]
    assert run_spec(row.training, seed=7) == expected
    assert run_spec({**ROW, "patience": 3}, seed=7) == expected  # fit_and_evaluate's dict form
    for estimator in (SequenceClassifier, SequenceRegressor):
        est = estimator("ncde", **ROW, random_state=7)
        assert est._training_plan(est._training_settings(), 7, num_train=16) == (expected, None)
    # what the row reads besides the spec is not fit's
    assert run_spec(row.training, seed=7, max_steps=5) == expected.replace(max_steps=5)


def test_train_classifier_keyword_form_gives_fit_that_spec():
    x, y = _data(32, 3)
    seen = _SeenSpec()
    train_classifier(_Net(), x, y, x, y, **ROW, seed=7, callbacks=[seen], progress=False)
    assert seen.spec == TrainingSpec(**ROW, seed=7)
    assert seen.config["select_on"] == "accuracy" and seen.config["patience"] is None  # train_classifier's own


def test_the_stress_task_trains_its_spec_as_its_keywords():
    from tasks.stress_training import train_stress_task

    class _Regressor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 1)

        def forward(self, x):
            return self.lin(x)

    x = torch.randn(24, 3, generator=torch.Generator().manual_seed(0))
    data = (x, x[:, :1] * 2.0)

    def run(tmp, spec=None, **fields):
        torch.manual_seed(0)
        out = train_stress_task(
            _Regressor(),
            Regression(),
            data,
            data,
            spec,
            solved=lambda m: False,
            describe=lambda m: "",
            checkpoint_path=tmp,
            run_config={},
            progress=False,
            **fields,
        )
        return [{k: v for k, v in r.items() if "seconds" not in k} for r in out["history"]]

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        by_keywords = run(Path(folder) / "a.pt", epochs=2, lr=0.05, batch_size=8, seed=1, eval_every=2)
        by_spec = run(
            Path(folder) / "b.pt", TrainingSpec(epochs=2, lr=0.05, batch_size=8, seed=1, eval_every=2, threads=None)
        )
    assert by_keywords == by_spec and [r["step"] for r in by_spec] == [2, 3, 4, 6]
    with pytest.raises(ValueError, match="give eval_every"):
        train_stress_task(
            _Regressor(),
            Regression(),
            data,
            data,
            TrainingSpec(epochs=1, lr=0.1, batch_size=8),
            solved=lambda m: False,
            describe=lambda m: "",
            checkpoint_path="x.pt",
            run_config={},
        )
