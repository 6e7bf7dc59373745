"""Errors that suggest the fix and warnings a user can act on (issue 25): every unknown name answers with the
closest valid names and the list of valid ones; a repeated warning is said once per model, at the user's line,
with the fix spelled the way the user gave the options."""

import re
import warnings

import numpy as np
import pytest
import torch

from neuralde_seq.models import MODEL_NAMES, create_model, model_defaults, model_inputs
from neuralde_seq.models.ckconv import CKCNN, TimesIgnoredWarning
from neuralde_seq.observations import Observations
from neuralde_seq.sklearn import SequenceClassifier
from neuralde_seq.training.config import ConfigError, parse_config


def _suggested(message: str) -> list[str]:
    """The names inside the message's "did you mean ...?" (empty when it has none)."""
    found = re.search(r"did you mean (.*?)\?", message)
    return re.findall(r"'([^']*)'", found.group(1)) if found else []


def _swap_last_two(name: str) -> str:
    return name[:-2] + name[-1] + name[-2]


# ---------------------------------------------------------------------------------------------- model names
@pytest.mark.parametrize("given", ["delta_cde", "deltacde", "Delta-CDE", "delta-cdee"])
def test_create_model_suggests_the_closest_model_name_and_lists_all(given):
    with pytest.raises(ValueError) as info:
        create_model(given, 3, 4)
    message = str(info.value)
    assert _suggested(message)[0] == "delta-cde", message
    assert all(name in message for name in MODEL_NAMES)


# ---------------------------------------------------------------------------------------------- option names
def test_create_model_names_the_closest_option_and_every_valid_one():
    with pytest.raises(TypeError) as info:  # Python's type for a bad keyword, still
        create_model("delta-cde", 3, 4, d_modle=32)
    message = str(info.value)
    assert isinstance(info.value, ValueError)  # and a bad setting, as the CLI and estimators report them
    assert "'d_modle'" in message and "'delta-cde'" in message
    assert _suggested(message) == ["d_model"], message
    listed = message.split("valid options:")[1]
    assert all(re.search(rf"\b{option}\b", listed) for option in model_defaults("delta-cde"))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_models_every_misspelt_option_is_answered_with_it(name):
    for option in model_defaults(name):
        if len(option) < 4 or option == "solver":
            continue
        wrong = _swap_last_two(option)
        if wrong in model_defaults(name):
            continue
        with pytest.raises(TypeError) as info:
            create_model(name, 3, 4, **{wrong: 1})
        assert option in _suggested(str(info.value)), (name, option, str(info.value))


def test_model_inputs_suggests_the_control_option():
    times = torch.arange(6.0).unsqueeze(0)
    with pytest.raises(TypeError) as info:
        model_inputs("ncde", times, times.unsqueeze(-1), time_chanel=False)
    assert "time_channel" in _suggested(str(info.value)) and "unobserved_fill" in str(info.value)


# ---------------------------------------------------------------------------------------------- config keys
def _config(**changes):
    config = {
        "name": "t",
        "task": "japanese-vowels",
        "training": {"epochs": 1, "lr": 1e-3, "batch_size": 8},
        "models": [{"model": "ncde"}],
    }
    config.update(changes)
    return config


@pytest.mark.parametrize(
    "changes, suggestion, listed",
    [
        (dict(models=[{"model": "ncde", "optoins": {}}]), "options", ["label", "model", "control", "paper"]),
        (dict(training={"epoch": 3, "lr": 1e-3, "batch_size": 8}), "epochs", ["batch_size", "grad_clip", "ensemble"]),
        (dict(models=[{"model": "delta_cde"}]), "delta-cde", ["ncde", "slice-dplr", "minirocket"]),
        # the fast weight models take **layer options: today their options go unchecked into the constructor
        (dict(models=[{"model": "delta-cde", "options": {"d_modle": 32}}]), "d_model", ["n_heads", "d_ff"]),
        (dict(task="japanese_vowels"), "japanese-vowels", ["speech-commands"]),
    ],
)
def test_config_keys_and_names_suggest_the_closest(changes, suggestion, listed):
    with pytest.raises(ConfigError) as info:
        parse_config(_config(**changes))
    message = str(info.value)
    assert suggestion in _suggested(message), message
    assert all(name in message for name in listed), message


# ---------------------------------------------------------------------------------------------- estimators
def _samples(n=16, steps=12, channels=2, seed=0):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(steps, channels)) for _ in range(n)]
    return X, np.arange(n) % 2


@pytest.mark.parametrize(
    "parameters, suggestion",
    [
        (dict(model="delta_cde"), "delta-cde"),
        (dict(model="delta-cde", model_options={"d_modle": 32}), "d_model"),
        (dict(model="delta-cde", control_options={"time_chanel": False}), "time_channel"),
    ],
)
def test_estimator_parameters_suggest_the_closest(parameters, suggestion):
    X, y = _samples()
    with pytest.raises(ValueError) as info:
        SequenceClassifier(epochs=1, **parameters).fit(X, y)
    message = str(info.value)
    assert suggestion in _suggested(message), message
    for name, value in parameters.items():
        if isinstance(value, dict):
            assert message.startswith(name), message  # in the estimator's terms


def test_predict_one_sample_says_a_2d_array_is_n_univariate_series():
    X, y = _samples()
    clf = SequenceClassifier("gru-d", model_options={"hidden": 4}, epochs=1, random_state=0).fit(X, y)
    with pytest.raises(ValueError) as info:
        clf.predict(X[0])
    message = str(info.value)
    assert "univariate" in message and "[X[0]]" in message, message
    assert clf.predict([X[0]]).shape == (1,)  # the fix the message gives works


def test_predict_one_sample_with_its_times_says_to_give_lists_of_one():
    """The same mistake with times: ``predict(X[0], times=t[0])`` fails on the 1-D times first, so that message
    carries the fix too."""
    X, y = _samples()
    rng = np.random.default_rng(3)
    times = [np.sort(rng.uniform(0, 5, len(x))) for x in X]
    clf = SequenceClassifier("gru-d", model_options={"hidden": 4}, epochs=1, random_state=0).fit(X, y, times=times)
    with pytest.raises(ValueError) as info:
        clf.predict(X[0], times=times[0])
    message = str(info.value)
    assert "X=[x]" in message and "times=[t]" in message, message
    assert clf.predict([X[0]], times=[times[0]]).shape == (1,)  # the fix the message gives works


# ---------------------------------------------------------------------------------------------- the CLI
def test_compare_models_suggests_the_name_and_what_is_accepted(tmp_path, capsys):
    from neuralde_seq.cli import main

    with pytest.raises(SystemExit) as info:
        main(["compare", "--models", "deltacde", "--out", str(tmp_path), "--no-progress"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "delta-cde" in _suggested(err), err
    assert "any other registry model name" in err and "minirocket" in err and "random-features" in err, err


def test_bench_models_suggests_the_row(tmp_path, capsys):
    from neuralde_seq.cli import COMPARE_CONFIG, main

    with pytest.raises(SystemExit) as info:
        main(["bench", str(COMPARE_CONFIG), "--models", "NCDE", "--out", str(tmp_path), "--no-progress"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert _suggested(err) == ["ncde"], err


def test_compare_models_help_says_it_replaces_the_default_rows():
    from neuralde_seq.cli import build_parser, compare_config
    from neuralde_seq.training.grid import _select_rows

    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["compare"].format_help().split())
    assert "adds a row" not in help_text and "instead of all seven" in help_text
    assert len(parse_config(compare_config(None)).rows) == 7  # the number the help names
    # what the help says: with --models gru-d only gru-d runs
    rows = parse_config(compare_config(["gru-d"])).rows
    assert [r.label for r in _select_rows(rows, ["gru-d"])] == ["gru-d"]


def test_reference_method_suggests_the_closest():
    from neuralde_seq.reference import REFERENCE_METHODS, reference_method

    with pytest.raises(ValueError) as info:
        reference_method("minirocet")
    assert _suggested(str(info.value)) == ["minirocket"]
    assert all(name in str(info.value) for name in REFERENCE_METHODS)


# ---------------------------------------------------------------------------------------------- warnings
def _times_ignored(record):
    return [w for w in record if issubclass(w.category, TimesIgnoredWarning)]


def test_times_ignored_said_once_over_a_multi_batch_fit_at_the_users_line_as_model_options():
    rng = np.random.default_rng(1)
    X, y = _samples(n=24)
    times = [np.sort(rng.uniform(0, 10, size=12)) for _ in X]
    clf = SequenceClassifier(
        "ckcnn", model_options={"mode": "grid", "hidden": 4, "blocks": 1}, epochs=2, batch_size=4, random_state=0
    )
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")  # Python's own de-duplication must not hide a repeat
        clf.fit(X, y, times=times)  # 6 batches x 2 epochs
        clf.predict(X, times=times)
    said = _times_ignored(record)
    assert len(said) == 1, [str(w.message) for w in said]
    assert said[0].filename == __file__
    message = str(said[0].message)
    assert "model_options={" in message and "'mode': 'irregular'" in message and "'hidden': 4" in message, message


def test_times_ignored_for_a_model_built_directly_names_the_constructor_argument():
    model = CKCNN(1, 2, hidden=4, blocks=1, mode="grid")
    times = torch.sort(torch.rand(3, 10, generator=torch.Generator().manual_seed(0)), 1).values
    observations = Observations.from_tensors(times, torch.randn(3, 10, 1))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            model(observations)
    said = _times_ignored(record)
    assert len(said) == 1 and said[0].filename == __file__
    assert "mode='irregular'" in str(said[0].message) and "model_options" not in str(said[0].message)


def test_times_ignored_for_a_config_row_names_the_rows_options():
    from neuralde_seq.user_warnings import options_spelled_as  # what the benchmark runner builds its models under

    with options_spelled_as("config", {"hidden": 4, "mode": "grid"}, row="ck-grid"):
        model = create_model("ckcnn", 1, 2, hidden=4, blocks=1, mode="grid")
    times = torch.sort(torch.rand(2, 8, generator=torch.Generator().manual_seed(0)), 1).values
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model(Observations.from_tensors(times, torch.randn(2, 8, 1)))
    message = str(_times_ignored(record)[0].message)
    assert "'ck-grid'" in message and "options: {hidden: 4, mode: irregular}" in message, message


def test_a_channels_first_array_is_named_with_the_transpose_once_per_call():
    """aeon's and sktime's (N, C, T) arrays read without error as (N, T, C): a 3-D X with fewer time steps than
    channels is warned about at the user's line, with the transpose that fixes it; a (N, T, C) array is not."""
    from neuralde_seq.estimator_inputs import AxesOrderWarning

    rng = np.random.default_rng(0)
    channels_first = rng.standard_normal((12, 3, 40))  # 12 sequences, 3 channels, 40 steps, as aeon gives them
    y = np.arange(12) % 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = SequenceClassifier("gru-d", model_options={"hidden": 4}, epochs=1, random_state=0)
        clf.fit(channels_first, y)
    axes = [w for w in caught if w.category is AxesOrderWarning]
    assert len(axes) == 1 and axes[0].filename == __file__, [str(w.message) for w in caught]
    assert "transpose(0, 2, 1)" in str(axes[0].message) and "(12, 40, 3)" in str(axes[0].message)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SequenceClassifier("gru-d", model_options={"hidden": 4}, epochs=1, random_state=0).fit(
            channels_first.transpose(0, 2, 1), y
        )
    assert not [w for w in caught if w.category is AxesOrderWarning]


def test_a_channels_first_univariate_array_fails_with_the_transpose_in_the_message():
    """aeon's univariate (N, 1, T) arrays read as one time step of T channels: too short for any model, and the
    error (not only the warning before it) names the transpose."""
    X = np.random.default_rng(1).standard_normal((10, 1, 30))
    with pytest.raises(ValueError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SequenceClassifier("gru-d", epochs=1).fit(X, np.arange(10) % 2)
    assert "1 time step" in str(info.value) and "X.transpose(0, 2, 1)" in str(info.value), str(info.value)
