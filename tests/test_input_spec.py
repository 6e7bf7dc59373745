"""The fitted input spec (neuralde_seq.training.input_spec.InputSpec): fitted on the training split only, applied
alike to every split, by the estimators and the runner, saved with checkpoints and results.

Expected values are computed here from their definitions: the statistics with numpy over the observed values, the
time unit as the longest span of the training samples, the controls by `build_control` with the number written out.
"""

import json

import numpy as np
import pytest
import torch

from neuralde_seq import LogSignature, build_control
from neuralde_seq.data import IrregularDataset, from_arrays
from neuralde_seq.data.protocols import japanese_vowels_splits, load_task
from neuralde_seq.models import create_model
from neuralde_seq.sklearn import SequenceClassifier
from neuralde_seq.training import load_checkpoint
from neuralde_seq.training.input_spec import InputSpec
from neuralde_seq.training.run import fit_and_evaluate


def _ragged(n: int, length: int, channels: int, seed: int, spacing: float) -> IrregularDataset:
    """n samples of up to ``length`` irregular times (gaps ~ spacing) with ~20 % of the values missing."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 2, length + 1, (n,), generator=g)
    lengths[0] = length
    times = torch.cumsum(spacing * (0.5 + torch.rand(n, length, generator=g, dtype=torch.float64)), dim=1)
    values = 3.0 + 2.0 * torch.randn(n, length, channels, generator=g, dtype=torch.float64)
    values[torch.rand(n, length, channels, generator=g) < 0.2] = float("nan")
    values[:, 0] = 1.0  # every channel observed at the first point of every sample
    for b in range(n):
        values[b, lengths[b] :] = float("nan")
    labels = torch.arange(n) % 2
    return IrregularDataset(times, values, lengths, labels, ["a", "b"], name="ragged")


def _longest_span(data: IrregularDataset) -> float:
    return max(float(data.times[b, int(data.lengths[b]) - 1] - data.times[b, 0]) for b in range(len(data)))


def test_statistics_and_time_unit_come_from_the_training_split_and_apply_to_every_split():
    train = _ragged(12, 1000, 3, seed=0, spacing=2.0)
    test = _ragged(7, 1000, 3, seed=1, spacing=5.0)  # another scale of time and other values
    spec = InputSpec.fit("ncde", train, control={"time_unit": "auto", "parametrization": "index"}, standardise=True)
    # the statistics over the observed training values only (population std)
    observed = train.values.numpy().reshape(-1, 3)
    observed_mean = [np.nanmean(observed[:, c]) for c in range(3)]
    observed_std = [np.nanstd(observed[:, c]) for c in range(3)]
    np.testing.assert_allclose(spec.channel_mean, observed_mean, rtol=1e-12)
    np.testing.assert_allclose(spec.channel_scale, observed_std, rtol=1e-12)
    assert spec.time_unit == pytest.approx(_longest_span(train), rel=1e-12)
    assert spec.time_unit != pytest.approx(_longest_span(test), rel=1e-3)
    # the test split's control: its values standardised with the training statistics, its times in the training unit
    expected_values = (test.values - torch.tensor(observed_mean)) / torch.tensor(observed_std)
    expected = build_control(
        test.times,
        expected_values,
        test.lengths,
        interpolation="hermite_cubic",
        time_channel=True,
        parametrization="index",
        time_unit=_longest_span(train),
    )
    got = spec.transform(test)
    for name in ("knots", "coeffs", "end_index"):
        torch.testing.assert_close(getattr(got, name), getattr(expected, name), rtol=1e-10, atol=1e-12)


def test_observation_models_read_times_in_the_spec_unit_and_ode_rnn_dynamics_do_not_depend_on_it():
    train = _ragged(6, 400, 2, seed=2, spacing=30.0)
    raw = InputSpec.fit("ode-rnn", train)
    unit = InputSpec.fit("ode-rnn", train, time_unit="auto")
    assert raw.time_unit is None and unit.time_unit == pytest.approx(_longest_span(train), rel=1e-12)
    raw_obs, unit_obs = raw.transform(train), unit.transform(train)
    torch.testing.assert_close(unit_obs.times, raw_obs.times / unit.time_unit, rtol=1e-12, atol=0.0)
    # ODE-RNN measures the gaps in the training span of the times it is given: the same dynamics in any unit
    outputs = []
    for observations in (raw_obs, unit_obs):
        torch.manual_seed(0)
        model = create_model("ode-rnn", observations, 2, hidden=8, width=16).double()
        with torch.no_grad():
            outputs.append(model(observations))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-8, atol=1e-10)


def test_the_spec_round_trips_through_json_and_gives_the_same_input():
    train, test = _ragged(8, 300, 2, seed=3, spacing=1.0), _ragged(5, 300, 2, seed=4, spacing=1.0)
    spec = InputSpec.fit("delta-rde", train, control={"time_unit": 60.0, "step": 8}, standardise=True)
    # the registry's log-signature windows with the given step, the unit the spec's own field
    assert spec.control.interpolation == LogSignature(depth=2, step=8, window_start_values=True)
    assert spec.control.time_unit is None and spec.time_unit == 60.0
    again = InputSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    first, second = spec.transform(test), again.transform(test)
    torch.testing.assert_close(second.coeffs, first.coeffs, rtol=0, atol=0)
    with pytest.raises(ValueError, match="exactly the fields"):
        InputSpec.from_dict({k: v for k, v in spec.to_dict().items() if k != "time_unit"})


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("channel_scale", [float("inf"), 1.0], "channel_scale must hold finite numbers, got inf for channel 0"),
        ("channel_scale", [1.0, -2.0], "channel_scale must be positive .* got -2.0 for channel 1"),
        ("channel_scale", [1.0, 0.0], "channel_scale must be positive"),
        ("channel_mean", [float("nan"), 0.0], "channel_mean must hold finite numbers, got nan for channel 0"),
        ("channel_mean", ["0.5", 0.0], "channel_mean must hold finite numbers, got '0.5'"),
        ("channel_mean", [0.0], "channel_mean has 1 channel.*channel_scale 2"),
        ("channel_mean", "0.0", "channel_mean must be null or a list"),
        ("channel_mean", None, "both be null or both be given"),
        ("reads_static", "false", "reads_static must be true or false, got 'false'"),
        ("time_unit", "auto", "time_unit must be null or a positive finite number"),
        ("time_unit", 0.0, "time_unit must be null or a positive finite number"),
        ("time_unit", -60.0, "time_unit must be null or a positive finite number"),
        ("control", "hermite_cubic", "control must be a mapping"),
        ("model", 3, "model must be a registry name"),
    ],
)
def test_a_saved_spec_with_a_value_fit_never_writes_is_refused_naming_the_field(field, value, message):
    # a hand-edited or damaged spec: each value was read as something else before (an infinite scale zeroed the
    # channel, a negative one flipped it, the string "false" read as True)
    train = _ragged(8, 50, 2, seed=3, spacing=1.0)
    saved = json.loads(json.dumps(InputSpec.fit("ncde", train, time_unit=60.0, standardise=True).to_dict()))
    with pytest.raises(ValueError, match=message):
        InputSpec.from_dict({**saved, field: value})


def test_a_saved_observation_model_spec_with_control_options_is_refused_as_fit_refuses_them():
    train = _ragged(8, 50, 2, seed=3, spacing=1.0)
    saved = json.loads(json.dumps(InputSpec.fit("gru-d", train).to_dict()))
    assert InputSpec.from_dict(saved) == InputSpec.fit("gru-d", train)
    with pytest.raises(ValueError, match="reads raw observations, so control must be empty"):
        InputSpec.from_dict({**saved, "control": {"interpolation": "linear"}})
    with pytest.raises(ValueError, match="reads_static must be false for model 'gru-d'"):
        InputSpec.from_dict({**saved, "reads_static": True})
    with pytest.raises(ValueError, match="fill_step must be absent or null for model 'gru-d'"):
        InputSpec.from_dict({**saved, "fill_step": 1.0})


def _dropped_from_grid(n: int, length: int, seed: int, spacing: float):
    """n series on the grid 0, spacing, 2 spacing, ... with interior points removed (some channels missing at kept
    points too): (the kept points with their times, the same series on their full grid with NaN where removed)."""
    rng = np.random.default_rng(seed)
    grid = spacing * np.arange(length, dtype=np.float64)
    values = 3.0 + 2.0 * rng.normal(size=(n, length, 2))
    values[rng.random(values.shape) < 0.1] = np.nan
    values[:, [0, -1]] = 1.0  # the ends kept and observed, so both forms span the same times
    on_grid = np.full_like(values, np.nan)
    kept_values, kept_times = [], []
    for b in range(n):
        keep = np.sort(
            np.concatenate([[0, length - 1], rng.choice(np.arange(1, length - 1), length // 2, replace=False)])
        )
        kept_values.append(values[b, keep])
        kept_times.append(grid[keep])
        on_grid[b, keep] = values[b, keep]
    return (
        from_arrays(kept_values, times=kept_times, dtype=torch.float64),
        from_arrays(list(on_grid), times=[grid] * n, dtype=torch.float64),
    )


@pytest.mark.parametrize("model", ["delta-rde", "ncde"])  # log-signature windows and a cubic spline
def test_filled_ragged_series_give_the_control_of_their_grid_with_nan(model):
    ragged, full = _dropped_from_grid(10, 41, seed=9, spacing=0.25)
    control = {"parametrization": "index", "time_unit": "auto"}
    spec = InputSpec.fit(model, ragged, control=control, standardise=True, fill_gaps="auto")
    assert spec.fill_step == 0.25  # the median step of the kept points: most neighbours are one grid step apart
    assert spec.time_unit == pytest.approx(10.0, rel=1e-12)  # the span (ends kept): filling does not change it
    got = spec.transform(ragged)
    # the same spec reads the grid unchanged (no gap there is wider than the step) ...
    expected = InputSpec.fit(model, full, control=control, standardise=True).transform(full)
    # ... and the spec fitted on the grid has the same step and unit
    on_grid = InputSpec.fit(model, full, control=control, standardise=True, fill_gaps="auto")
    assert (on_grid.fill_step, on_grid.time_unit) == (spec.fill_step, spec.time_unit)
    for name in ("knots", "coeffs", "end_index"):
        torch.testing.assert_close(getattr(got, name), getattr(expected, name), rtol=1e-12, atol=1e-12, equal_nan=True)
    # without filling the ragged control has one knot per observation: not the grid's
    unfilled = InputSpec.fit(model, ragged, control=control, standardise=True).transform(ragged)
    assert unfilled.coeffs.shape[1] < expected.coeffs.shape[1]
    # a step given as a number is used as it is: half the grid step puts a knot between every two grid points
    finer = InputSpec.fit(model, ragged, control=control, standardise=True, fill_gaps=0.125)
    assert finer.fill_step == 0.125 and finer.transform(ragged).coeffs.shape[1] > expected.coeffs.shape[1]


def test_the_fill_step_round_trips_through_json_and_every_field_is_written():
    ragged, _ = _dropped_from_grid(6, 21, seed=10, spacing=2.0)
    spec = InputSpec.fit("delta-rde", ragged, control={"time_unit": "auto"}, fill_gaps="auto")
    assert spec.fill_step == 2.0 and spec.to_dict()["fill_step"] == 2.0
    again = InputSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    torch.testing.assert_close(again.transform(ragged).coeffs, spec.transform(ragged).coeffs, rtol=0, atol=0)
    # no filling: fill_step written as null and read back as None; a spec without the field is refused
    plain = InputSpec.fit("delta-rde", ragged, control={"time_unit": "auto"})
    assert plain.fill_step is None and plain.to_dict()["fill_step"] is None
    assert InputSpec.from_dict(json.loads(json.dumps(plain.to_dict()))) == plain
    with pytest.raises(ValueError, match="exactly the fields"):
        InputSpec.from_dict({k: v for k, v in plain.to_dict().items() if k != "fill_step"})
    for bad in ("auto", -1.0, True):  # a saved spec holds the resolved step
        with pytest.raises(ValueError, match="fill_step must be None or a positive time step"):
            InputSpec.from_dict({**spec.to_dict(), "fill_step": bad})
    with pytest.raises(ValueError, match="exactly the fields"):
        InputSpec.from_dict({**spec.to_dict(), "fill": 2.0})


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda d: InputSpec.fit("ncde", d, fill_gaps="median"), "fill_gaps must be None, 'auto' or a positive"),
        (lambda d: InputSpec.fit("ncde", d, fill_gaps=0.0), "fill_gaps must be None, 'auto' or a positive"),
        (lambda d: InputSpec.fit("ncde", d, fill_gaps=float("nan")), "fill_gaps must be None, 'auto' or a positive"),
        (lambda d: InputSpec.fit("gru-d", d, fill_gaps="auto"), "fill_gaps='auto': model 'gru-d' reads raw obs"),
        (lambda d: InputSpec.fit("ncde", d, control={"time_unit": 2.0}, time_unit="auto"), "time_unit is given twice"),
        (lambda d: InputSpec.fit("gru-d", d, control={"interpolation": "linear"}), "reads raw observations"),
        (lambda d: InputSpec.fit("ncde", d, time_unit="hours"), "time_unit must be None, a positive number or 'auto'"),
        (lambda d: InputSpec.fit("ncde", d, time_unit=-1.0), "time_unit must be None, a positive number or 'auto'"),
        (lambda d: InputSpec.fit("ncde", d, control={"interpolaton": "linear"}), "interpolaton"),
    ],
)
def test_bad_settings_are_refused_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call(_ragged(4, 20, 2, seed=5, spacing=1.0))


def test_transform_refuses_data_with_other_channels():
    spec = InputSpec.fit("ncde", _ragged(4, 20, 2, seed=6, spacing=1.0), standardise=True)
    with pytest.raises(ValueError, match="3 channel.*fitted on 2"):
        spec.transform(_ragged(4, 20, 3, seed=7, spacing=1.0))


@pytest.mark.parametrize(
    "model, control, fill",
    [
        ("delta-rde", {"parametrization": "index", "time_unit": "auto", "intensity_channel": "auto"}, "auto"),
        ("ncde", {"parametrization": "index", "time_unit": 7.5, "mask_channel": True}, None),
        ("slice-diag", {"parametrization": "index", "recency_channel": True, "time_unit": "auto"}, 0.5),
        ("gru-dt", {"time_unit": "auto"}, None),
        ("gru-d", {}, None),
    ],
)
def test_a_dataset_is_built_on_without_a_second_check_into_what_its_tensors_build(model, control, fill):
    """`transform` of a dataset (checked when it was made) builds its input without checking it again
    (`control_of`, `inputs_of`) from the spec's own options: exactly what `model_inputs` builds from the same
    standardised (and filled) tensors with the spec's keywords, checking them."""
    from neuralde_seq import model_inputs
    from neuralde_seq.data import fill_gaps as fill_gaps_of

    data = _ragged(9, 30, 2, seed=11, spacing=1.5).to(dtype=torch.float32)
    spec = InputSpec.fit(model, data, control=control, standardise=True, fill_gaps=fill)
    times, values, lengths = data.times, spec.values_of(data), data.lengths
    if spec.fill_step is not None:
        times, values, lengths = fill_gaps_of(times, values, lengths, spec.fill_step)
    if spec.control is None:
        expected = model_inputs(model, times if spec.time_unit is None else times / spec.time_unit, values, lengths)
        got = spec.transform(data)
        for name in ("times", "values", "lengths"):
            assert torch.equal(
                torch.nan_to_num(getattr(got, name), 9.0), torch.nan_to_num(getattr(expected, name), 9.0)
            ), name
        return
    expected = model_inputs(model, times, values, lengths, **spec.control_options)
    got = spec.transform(data)
    for name in ("knots", "coeffs", "end_index"):
        assert torch.equal(getattr(got, name), getattr(expected, name)), name


@pytest.mark.parametrize("model", ["ncde", "gru-dt"])
def test_a_time_unit_that_takes_the_times_beyond_the_finite_range_is_refused_naming_it(model):
    data = _ragged(4, 20, 2, seed=12, spacing=1.0).to(dtype=torch.float32)
    data = data.replace(times=data.times + 1e6)  # within float32's range as given ...
    spec = InputSpec.fit(model, data, time_unit=1e-4)  # ... and not once divided by the unit
    with pytest.raises(
        ValueError,
        match=r"times has an entry of magnitude 1e\+10 .* divided by "
        r"time_unit=0\.0001: give a larger time_unit",
    ):
        spec.transform(data)


def test_the_estimator_predicts_through_its_fitted_spec():
    data = _ragged(16, 60, 2, seed=8, spacing=1.0)
    X = [data.values[b, : int(data.lengths[b])].numpy() for b in range(len(data))]
    times = [data.times[b, : int(data.lengths[b])].numpy() for b in range(len(data))]
    y = data.labels.numpy()
    clf = SequenceClassifier(
        "ncde", model_options={"hidden": 8, "width": 16}, epochs=1, batch_size=8, dtype="float64", random_state=0
    ).fit(X, y, times=times)
    spec = clf.input_spec_
    assert spec.time_unit == pytest.approx(_longest_span(data), rel=1e-12)
    assert spec.control.parametrization == "index"
    with torch.no_grad():
        logits = clf.model_(spec.transform(data))
    np.testing.assert_allclose(clf.predict_proba(X, times=times), torch.softmax(logits, -1).numpy(), rtol=1e-10)


def test_the_runner_saves_its_spec_with_the_checkpoint(tmp_path):
    splits = load_task("japanese-vowels", seed=0, drop_rate=0.3).splits
    train, val, test = splits
    small = type(splits)(train.subset(torch.arange(30)), val.subset(torch.arange(20)), test.subset(torch.arange(20)))
    fit = fit_and_evaluate(
        "ncde",
        small,
        seed=0,
        options={"hidden": 8, "width": 16},
        control={"time_unit": "auto"},
        checkpoint_path=tmp_path / "b.pt",
        progress=False,
        training={"epochs": 1, "lr": 1e-2, "batch_size": 16},
    )
    assert fit["input_spec"]["time_unit"] == pytest.approx(_longest_span(small.train), rel=1e-6)
    saved = torch.load(tmp_path / "b.pt", weights_only=False)["config"]["input_spec"]
    assert saved == fit["input_spec"]
    # the saved spec reads the raw data (the protocol's standardisation is recorded in it): on the raw splits it
    # rebuilds the test inputs the run scored, and the checkpoint's model gets the reported accuracy
    spec = InputSpec.from_dict(saved)
    assert spec.channel_mean == tuple(train.meta["standardise"]["mean"])
    raw = japanese_vowels_splits(seed=0, drop_rate=0.3)  # float64, as the task reads them
    raw_train, raw_test = (part.subset(torch.arange(n)) for part, n in ((raw.train, 30), (raw.test, 20)))
    raw_train, raw_test = (part.replace(times=part.times.float()) for part in (raw_train, raw_test))
    model = create_model("ncde", spec.transform(raw_train), 9, hidden=8, width=16)
    load_checkpoint(tmp_path / "b.pt", model)
    model.eval()
    with torch.no_grad():
        predictions = model(spec.transform(raw_test)).argmax(-1)
    accuracy = float((predictions == small.test.labels).double().mean())
    assert fit["metrics"]["test"]["accuracy"] == pytest.approx(accuracy, abs=1e-12)


def test_a_config_row_refuses_the_former_control_name_and_gives_observation_models_a_time_unit():
    from neuralde_seq.training.config import ConfigError, validate_config

    def config(*rows):
        return {
            "name": "c",
            "task": "japanese-vowels",
            "seeds": [0],
            "training": {"epochs": 1, "lr": 1e-3, "batch_size": 8},
            "models": list(rows),
        }

    with pytest.raises(ConfigError, match=r"models\[0\]\.control: unknown control option 'method'"):
        validate_config(config({"model": "ncde", "control": {"method": "linear"}}))
    parsed = validate_config(config({"model": "ncde", "control": {"interpolation": "linear"}}))
    assert parsed["models"][0]["control"] == {"interpolation": "linear"}  # the row as written
    parsed = validate_config(config({"model": "ode-rnn", "control": {"time_unit": "auto"}}))
    assert parsed["models"][0]["control"] == {"time_unit": "auto"}
    with pytest.raises(ConfigError, match="control options other than time_unit do not apply"):
        validate_config(config({"model": "gru-d", "control": {"interpolation": "linear"}}))
    with pytest.raises(ConfigError, match=r"models\[0\]\.control: step must be a positive integer"):
        validate_config(config({"model": "delta-rde", "control": {"step": 0}}))  # values checked too, before any run


def test_resuming_a_run_with_another_input_spec_is_refused(tmp_path):
    from neuralde_seq.training import ResumeMismatch

    splits = load_task("japanese-vowels", seed=0, drop_rate=0.3).splits
    train, val, test = splits
    small = type(splits)(train.subset(torch.arange(30)), val.subset(torch.arange(20)), test.subset(torch.arange(20)))

    def run(time_unit, resume):
        return fit_and_evaluate(
            "ncde",
            small,
            seed=0,
            options={"hidden": 4, "width": 8},
            control={"time_unit": time_unit},
            checkpoint_path=tmp_path / "b.pt",
            last_checkpoint_path=tmp_path / "last.pt",
            resume=resume,
            progress=False,
            training={"epochs": 1, "lr": 1e-2, "batch_size": 16},
        )

    run("auto", False)
    run("auto", True)  # the same spec: resumed
    with pytest.raises(ResumeMismatch, match="input_spec"):
        run(1.0, True)
