"""Inputs for irregular records (issue 34, part 3): observational intensity and recency channels, a channel a
sample never observes filled and said once per fit, and one ``control_options`` for every registry model.

The channels are checked against their definitions written out as loops over the points (not against the
vectorised code); the estimators' fills against fills given by hand; an ignored option against a fit without it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.model_selection import GridSearchCV

from neuralde_seq.controls import build_control
from neuralde_seq.random_features import RandomFeatureClassifier
from neuralde_seq.sklearn import SequenceClassifier
from neuralde_seq.training.input_spec import InputSpec, UnobservedChannelWarning
from neuralde_seq.user_warnings import IgnoredOptionWarning

nan = float("nan")


def _records(n=6, channels=3, seed=0, longest=40):
    """A padded batch of ragged records on irregular times: each value observed with probability 0.3, sample 1
    never observing channel 2 (float64)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(longest // 2, longest + 1, size=n)
    lengths[0] = longest
    times = np.zeros((n, longest))
    values = np.full((n, longest, channels), nan)
    for b, length in enumerate(lengths):
        times[b, :length] = np.cumsum(rng.exponential(1.0, size=length))
        times[b, length:] = times[b, length - 1] + np.arange(1, longest - length + 1)  # padding, ignored
        observed = rng.random((length, channels)) < 0.3
        observed[0, 0] = True  # every time point of a record observes something... at least the first one
        values[b, :length][observed] = rng.normal(size=int(observed.sum()))
    values[1, :, 2] = nan
    return torch.tensor(times), torch.tensor(values), torch.tensor(lengths)


def _at_points(control, first_channel, channels):
    """(B, T, channels) the control's channels at its knots (the constant coefficient of each piece)."""
    return control.coeffs[:, :, 0, first_channel : first_channel + channels]


def test_intensity_channels_are_the_cumulative_counts_of_observations_written_out():
    times, values, lengths = _records()
    control = build_control(
        times,
        values,
        lengths,
        interpolation="linear",
        parametrization="index",
        intensity_channel=True,
        unobserved_fill=0.0,
    )
    B, T, C = values.shape
    counts = _at_points(control, 1 + C, C)
    for b in range(B):
        for c in range(C):
            running = 0
            for i in range(int(lengths[b])):
                running += 0 if np.isnan(float(values[b, i, c])) else 1
                assert float(counts[b, i, c]) == running, (b, i, c)
    assert control.channels == 1 + 2 * C


def test_recency_channels_are_the_time_since_each_channels_last_observation_written_out():
    times, values, lengths = _records(seed=1)
    control = build_control(
        times,
        values,
        lengths,
        interpolation="linear",
        parametrization="index",
        recency_channel=True,
        intensity_channel=True,
        unobserved_fill=0.0,
        time_unit=2.0,
    )
    B, T, C = values.shape
    recency = _at_points(control, 1 + 2 * C, C)
    for b in range(B):
        for c in range(C):
            last = None
            for i in range(int(lengths[b])):
                if not np.isnan(float(values[b, i, c])):
                    last = float(times[b, i])
                since = float(times[b, i]) - (last if last is not None else float(times[b, 0]))
                assert float(recency[b, i, c]) == pytest.approx(since / 2.0, abs=1e-12), (b, i, c)
    # a channel the sample never observes: the time since the record's start, throughout
    np.testing.assert_allclose(
        recency[1, : int(lengths[1]), 2].numpy(), ((times[1, : int(lengths[1])] - times[1, 0]) / 2.0).numpy()
    )


def test_a_fill_per_channel_is_written_where_a_sample_never_observes_the_channel():
    times, values, lengths = _records(seed=2)
    control = build_control(
        times, values, lengths, interpolation="linear", parametrization="index", unobserved_fill=[5.0, 6.0, -7.0]
    )
    path = _at_points(control, 1, 3)
    assert (path[1, : int(lengths[1]), 2] == -7.0).all()
    assert not (path[0] == -7.0).any()
    with pytest.raises(ValueError, match="unobserved_fill has 2 values, one per channel, but the observations have 3"):
        build_control(times, values, lengths, unobserved_fill=[1.0, 2.0])
    with pytest.raises(ValueError, match="unobserved_fill must be None, a finite number or a sequence"):
        build_control(times, values, lengths, unobserved_fill=[1.0, nan, 2.0])


class _Data:
    def __init__(self, times, values, lengths):
        self.times, self.values, self.lengths = times, values, lengths


def test_mean_fill_is_the_training_mean_of_each_channel_and_said_once_naming_the_channels():
    times, values, lengths = _records(n=8, seed=3)
    values[4, :, 0] = nan
    train = _Data(times, values, lengths)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = InputSpec.fit("ncde", train, control={"parametrization": "index"})
    said = [w for w in caught if issubclass(w.category, UnobservedChannelWarning)]
    assert len(said) == 1
    assert "channel 0 in 1; channel 2 in 1 of 8 training samples never observed" in str(said[0].message)
    expected = [
        np.nanmean(np.concatenate([values[b, : int(lengths[b]), c].numpy() for b in range(8)])) for c in range(3)
    ]
    np.testing.assert_allclose(spec.control.unobserved_fill, expected, rtol=1e-12)
    control = spec.transform(train)
    assert torch.allclose(control.coeffs[4, : int(lengths[4]), 0, 1], torch.tensor(expected[0], dtype=torch.float64))
    # the spec as JSON and back gives the same control
    again = InputSpec.from_dict(spec.to_dict()).transform(train)
    assert torch.equal(again.coeffs, control.coeffs)
    values[:, :, 1] = nan  # no training sample observes channel 1: there is no mean
    with pytest.raises(ValueError, match=r"unobserved_fill='mean': channel\(s\) \[1\] have no observed value"):
        InputSpec.fit("ncde", train, control={"parametrization": "index"})


def _ragged(n, seed):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    X, times = [], []
    for k in y:
        length = int(rng.integers(8, 15))
        x = rng.normal(size=(length, 3))
        x[:, 0] += 1.5 * k
        x[rng.random(x.shape) < 0.3] = nan
        x[0, 0] = 0.0
        if rng.random() < 0.3:
            x[:, 2] = nan  # a lab never drawn in this record
        X.append(x)
        times.append(np.cumsum(rng.uniform(0.5, 1.5, length)))
    return X, y, times


SHARED = {"intensity_channel": True, "recency_channel": True, "unobserved_fill": "mean"}
MODELS = ["delta-rde", "ncde", "gru-d", "ode-rnn"]


def test_one_control_options_for_a_grid_search_over_model_names():
    X, y, times = _ragged(24, seed=5)
    search = GridSearchCV(
        SequenceClassifier(epochs=1, batch_size=8, random_state=0, control_options=SHARED),
        {"model": MODELS},
        cv=2,
        scoring="roc_auc",
        error_score="raise",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search.fit(X, y)
    scores = search.cv_results_["mean_test_score"]
    assert len(scores) == len(MODELS) and np.isfinite(scores).all()


@pytest.mark.parametrize("model", ["gru-d", "ode-rnn"])
def test_an_observation_model_sets_the_path_options_aside_said_once_and_reads_the_time_unit(model):
    X, y, times = _ragged(16, seed=6)
    settings = dict(epochs=2, batch_size=8, random_state=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shared = SequenceClassifier(model, control_options={**SHARED, "time_unit": 3.0}, **settings).fit(
            X, y, times=times
        )
    ignored = [w for w in caught if issubclass(w.category, IgnoredOptionWarning)]
    assert len(ignored) == 1 and str(sorted(SHARED)) in str(ignored[0].message)
    plain = SequenceClassifier(model, control_options={"time_unit": 3.0}, **settings).fit(X, y, times=times)
    np.testing.assert_array_equal(shared.predict_proba(X, times=times), plain.predict_proba(X, times=times))
    other_unit = SequenceClassifier(model, **settings).fit(X, y, times=times)
    assert shared.input_spec_.time_unit == 3.0 and other_unit.input_spec_.time_unit != 3.0


def test_a_control_model_reads_the_intensity_and_recency_channels():
    X, y, times = _ragged(16, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnobservedChannelWarning)
        clf = SequenceClassifier("ncde", epochs=1, random_state=0, control_options=SHARED).fit(X, y, times=times)
        plain = SequenceClassifier("ncde", epochs=1, random_state=0).fit(X, y, times=times)
    C = 3
    inputs = clf.input_spec_.transform(clf._dataset(X, times, torch.float32))
    assert (
        inputs.channels == 1 + 3 * C
        and plain.input_spec_.transform(plain._dataset(X, times, torch.float32)).channels == 1 + C
    )


def test_random_features_fill_a_never_observed_channel_with_the_training_mean_said_once_per_fit():
    X, y, times = _ragged(30, seed=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = RandomFeatureClassifier(random_state=0).fit(X, y, times=times)
    said = [w for w in caught if issubclass(w.category, UnobservedChannelWarning)]
    missing = sum(bool(np.isnan(x[:, 2]).all()) for x in X)
    assert len(said) == 1 and f"channel 2 in {missing} of 30 training samples" in str(said[0].message)
    by_hand = RandomFeatureClassifier(random_state=0, control_options={"unobserved_fill": 0.0}).fit(X, y, times=times)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnobservedChannelWarning)
        np.testing.assert_array_equal(clf.predict_proba(X, times=times), by_hand.predict_proba(X, times=times))
    with pytest.raises(ValueError, match="no observation in channel 2"):
        RandomFeatureClassifier(random_state=0, control_options={"unobserved_fill": None}).fit(X, y, times=times)


def test_intensity_auto_counts_observations_where_channels_are_measured_apart_in_units_of_a_typical_count():
    X, y, times = _ragged(16, seed=9)
    complete = [np.nan_to_num(x, nan=0.25) for x in X]
    dropped_whole = [x.copy() for x in complete]
    for x in dropped_whole:
        x[1::3] = nan  # every third time point dropped in all channels: a dropped point, not a pattern
    settings = dict(epochs=1, random_state=0, control_options={"intensity_channel": "auto"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnobservedChannelWarning)
        gaps = SequenceClassifier("ncde", **settings).fit(X, y, times=times)
        dropped = SequenceClassifier("ncde", **settings).fit(dropped_whole, y, times=times)
    full = SequenceClassifier("ncde", **settings).fit(complete, y, times=times)
    assert gaps.control_options_["intensity_channel"] is True
    assert (
        dropped.control_options_["intensity_channel"] is False and full.control_options_["intensity_channel"] is False
    )
    # the counts in units of the median count of a channel in a training series, written out
    counts = [int((~np.isnan(x[:, c])).sum()) for x in X for c in range(3)]
    unit = float(np.median([k for k in counts if k > 0]))
    assert gaps.input_spec_.control.count_unit == pytest.approx(unit)
    data = gaps._dataset(X, times, torch.float32)
    inputs = gaps.input_spec_.transform(data)
    assert inputs.channels == 1 + 2 * 3
    raw = SequenceClassifier("ncde", epochs=1, random_state=0, control_options={"intensity_channel": True}).fit(
        X, y, times=times
    )
    assert raw.input_spec_.control.count_unit is None  # True as given: the raw counts (the papers' OI setting)
    raw_inputs = raw.input_spec_.transform(data)
    torch.testing.assert_close(inputs.coeffs[..., 4:], raw_inputs.coeffs[..., 4:] / unit)
    # complete series: the path and the fitted model are those of intensity_channel=False given by hand
    off = SequenceClassifier("ncde", epochs=1, random_state=0, control_options={"intensity_channel": False}).fit(
        complete, y, times=times
    )
    np.testing.assert_array_equal(full.predict_proba(complete, times=times), off.predict_proba(complete, times=times))
    with pytest.raises(ValueError, match="intensity_channel must be True, False or 'auto'"):
        SequenceClassifier("ncde", control_options={"intensity_channel": "yes"}, epochs=1).fit(X, y, times=times)
    with pytest.raises(ValueError, match="count_unit must be None or a positive finite number"):
        build_control(torch.arange(4.0)[None], torch.ones(1, 4, 1), count_unit=0.0, intensity_channel=True)
