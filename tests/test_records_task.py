"""The simulated ICU stays (`neuralde_seq.data.synthetic.records`) and their task ``icu-records``: the ground truth is
recoverable where the knobs say it should be, each knob does what its documentation says, and the task loads through
the registry."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

from neuralde_seq.data.base.registry import TASKS
from neuralde_seq.data.protocols import load_task
from neuralde_seq.data.sources.icu_records import icu_records_splits
from neuralde_seq.data.synthetic.records import RECORDS_CHANNELS, RECORDS_SIGNAL_CHANNELS, RecordsSpec, simulate_records

CHANNEL = {channel.name: c for c, channel in enumerate(RECORDS_CHANNELS)}
ONLY = {
    part: {f"{other}_weight": float(other == part) for other in ("level", "trend", "interaction", "sampling")}
    for part in ("level", "trend", "interaction", "sampling")
}


def arrays(records):
    data = records.dataset
    return data.times.double().numpy(), data.values.double().numpy(), data.labels.numpy()


def channel_means(values, name):
    """The mean of channel ``name`` over each stay's measurements (NaN for a stay that never measured it)."""
    column = values[:, :, CHANNEL[name]]
    seen = ~np.isnan(column)
    total = np.where(seen, column, 0.0).sum(axis=1)
    return np.where(seen.any(axis=1), total / np.maximum(seen.sum(axis=1), 1), np.nan)


def channel_slopes(times, values, name):
    """The least-squares slope of channel ``name`` over each stay's measurements."""
    slopes = []
    for t, v in zip(times, values[:, :, CHANNEL[name]]):
        seen = ~np.isnan(v)
        slopes.append(np.polyfit(t[seen], v[seen], 1)[0])
    return np.array(slopes)


def observation_counts(values):
    return (~np.isnan(values)).sum(axis=(1, 2))


def binomial_close(fraction, p, n):
    return abs(fraction - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-12


@pytest.fixture(scope="module")
def default_records():
    return simulate_records(2000, seed=0)


# ------------------------------------------------------------------------------------ the ground truth
def test_an_oracle_on_the_true_risk_score_reaches_0_95_auroc_with_the_defaults(default_records):
    times, values, labels = arrays(default_records)
    assert 0.2 < labels.mean() < 0.6
    oracle = roc_auc_score(labels, default_records.risk)
    assert oracle >= 0.95
    # a moderately hard problem: no single summary of the records comes close to the oracle
    summaries = [observation_counts(values)]
    summaries += [channel_means(values, c.name) for c in RECORDS_CHANNELS]
    summaries += [channel_slopes(times, values, name) for name in ("heart_rate", "systolic_bp", "resp_rate")]
    best = 0.0
    for summary in summaries:
        kept = ~np.isnan(summary)  # stays that miss a channel have no mean of it
        auc = roc_auc_score(labels[kept], summary[kept])
        best = max(best, auc, 1 - auc)
    assert 0.6 < best < oracle - 0.1


def test_the_risk_score_is_the_documented_sum_and_the_label_its_logistic_draw(default_records):
    spec = RecordsSpec()
    expected = spec.risk_offset + default_records.parts @ np.ones(4)
    np.testing.assert_allclose(default_records.risk, expected)
    np.testing.assert_allclose(default_records.parts.std(axis=0), 1.0, atol=0.1)  # standardised parts
    # with sharpness 1 the labels are calibrated against sigmoid(risk): a wrong sharpness would miss the count
    records = simulate_records(3000, RecordsSpec(sharpness=1.0), seed=1)
    probability = 1 / (1 + np.exp(-records.risk))
    labels = records.dataset.labels.numpy()
    assert abs(labels.sum() - probability.sum()) <= 4 * math.sqrt((probability * (1 - probability)).sum())
    # a tiny sharpness makes the label a fair coin: the oracle is near chance
    flat = simulate_records(2000, RecordsSpec(sharpness=0.01), seed=2)
    assert abs(roc_auc_score(flat.dataset.labels.numpy(), flat.risk) - 0.5) < 0.06


# ------------------------------------------------------------------------------------ each knob
def test_sicker_stays_are_measured_more_often_only_with_informative_sampling():
    informative = simulate_records(1000, RecordsSpec(informative_sampling=0.5, sampling_spread=0.2), seed=3)
    rho = spearmanr(informative.severity, observation_counts(informative.dataset.values.numpy()))[0]
    assert rho > 0.5
    flat = simulate_records(1000, RecordsSpec(informative_sampling=0.0, sampling_spread=0.2), seed=3)
    assert abs(spearmanr(flat.severity, observation_counts(flat.dataset.values.numpy()))[0]) < 0.1


def test_with_the_sampling_weight_alone_the_count_of_measurements_predicts_the_label():
    records = simulate_records(2000, RecordsSpec(**ONLY["sampling"], risk_offset=0.0), seed=4)
    _, values, labels = arrays(records)
    assert roc_auc_score(labels, observation_counts(values)) > 0.85
    assert abs(roc_auc_score(labels, channel_means(values, "heart_rate")) - 0.5) < 0.15  # only through severity


def test_with_the_trend_weight_alone_the_slope_predicts_the_label_and_the_mean_does_not():
    records = simulate_records(2000, RecordsSpec(**ONLY["trend"], severity_coupling=0.0, risk_offset=0.0), seed=5)
    times, values, labels = arrays(records)
    # systolic pressure falls in worse stays: the negative slope ranks them
    assert roc_auc_score(labels, -channel_slopes(times, values, "systolic_bp")) > 0.85
    assert abs(roc_auc_score(labels, channel_means(values, "systolic_bp")) - 0.5) < 0.05
    assert abs(roc_auc_score(labels, -channel_slopes(times, values, "heart_rate")) - 0.5) < 0.05


def test_with_the_level_weight_alone_heart_rate_s_mean_predicts_the_label():
    records = simulate_records(2000, RecordsSpec(**ONLY["level"], severity_coupling=0.0, risk_offset=0.0), seed=6)
    times, values, labels = arrays(records)
    assert roc_auc_score(labels, channel_means(values, "heart_rate")) > 0.9
    assert abs(roc_auc_score(labels, channel_means(values, "resp_rate")) - 0.5) < 0.05


def test_with_the_interaction_weight_alone_only_the_product_predicts_the_label():
    records = simulate_records(2000, RecordsSpec(**ONLY["interaction"], severity_coupling=0.0, risk_offset=0.0), seed=7)
    _, values, labels = arrays(records)
    resp = channel_means(values, "resp_rate")
    lactate = np.log(channel_means(values, "lactate"))
    product = (resp - resp.mean()) / resp.std() * (lactate - lactate.mean()) / lactate.std()
    assert roc_auc_score(labels, product) > 0.75
    assert abs(roc_auc_score(labels, resp) - 0.5) < 0.05
    assert abs(roc_auc_score(labels, lactate) - 0.5) < 0.05


@pytest.mark.parametrize("signal_too", [False, True])
def test_channels_go_missing_for_whole_stays_with_the_given_probability(signal_too):
    p, n = 0.3, 2000
    records = simulate_records(n, RecordsSpec(channel_missing=p, missing_signal_channels=signal_too), seed=8)
    never = np.isnan(records.dataset.values.numpy()).all(axis=1)  # (N, C): channel never measured in the stay
    np.testing.assert_array_equal(never, records.missing)
    for c, channel in enumerate(RECORDS_CHANNELS):
        if channel.name in RECORDS_SIGNAL_CHANNELS and not signal_too:
            assert not never[:, c].any(), channel.name
        else:
            assert binomial_close(never[:, c].mean(), p, n), (channel.name, never[:, c].mean())
    complete = simulate_records(300, RecordsSpec(channel_missing=0.0), seed=8)
    assert not np.isnan(complete.dataset.values.numpy()).all(axis=1).any()


def test_vitals_are_measured_more_often_than_labs_at_their_own_rates(default_records):
    values = default_records.dataset.values.numpy()
    counts = (~np.isnan(values)).sum(axis=1)  # (N, C)
    present = ~default_records.missing
    median = {c.name: np.median(counts[present[:, i], i]) for i, c in enumerate(RECORDS_CHANNELS)}
    vitals = [c.name for c in RECORDS_CHANNELS if c.kind == "vital"]
    labs = [c.name for c in RECORDS_CHANNELS if c.kind == "lab"]
    assert min(median[v] for v in vitals) > 2 * max(median[lab] for lab in labs)
    # each at its own rate: 48 h with gaps of 1-2 h is about 32 heart rates, 12-24 h about 2.7 creatinines
    assert 25 <= median["heart_rate"] <= 40 and 1 <= median["creatinine"] <= 4
    assert median["heart_rate"] > median["resp_rate"] > median["temperature"]
    lengths = default_records.dataset.lengths.numpy()
    assert lengths.min() < 0.8 * np.median(lengths) < lengths.max() * 0.8  # a varying number of observations


def test_the_stay_length_bounds_the_times_which_are_charted_to_the_minute():
    short = simulate_records(200, RecordsSpec(stay_hours=12.0), seed=9)
    long = simulate_records(200, RecordsSpec(stay_hours=48.0), seed=9)
    for records, hours in ((short, 12.0), (long, 48.0)):
        data = records.dataset
        inside = torch.arange(data.times.shape[1])[None, :] < data.lengths[:, None]
        times = data.times.double()[inside].numpy()
        assert times.min() >= 0 and times.max() < hours
        np.testing.assert_allclose(times * 60, np.round(times * 60), atol=1e-3)
    assert short.dataset.lengths.double().mean() < 0.4 * long.dataset.lengths.double().mean()


def test_the_union_grid_has_one_time_per_row_and_a_value_wherever_a_row_is(default_records):
    data = default_records.dataset
    for i in range(50):
        n = int(data.lengths[i])
        t = data.times[i, :n].double()
        assert (t[1:] > t[:-1]).all()
        assert (~torch.isnan(data.values[i, :n])).any(dim=1).all()  # every grid time has a measurement
        assert torch.isnan(data.values[i, n:]).all()


def test_the_same_seed_gives_the_same_stays_and_another_seed_others():
    a, b, c = (simulate_records(100, seed=s) for s in (11, 11, 12))
    for x, y in (
        (a.dataset.times, b.dataset.times),
        (a.dataset.values, b.dataset.values),
        (a.dataset.labels, b.dataset.labels),
    ):
        assert torch.equal(
            x.nan_to_num(-1.0) if x.is_floating_point() else x, y.nan_to_num(-1.0) if y.is_floating_point() else y
        )
    np.testing.assert_array_equal(a.risk, b.risk)
    assert not np.array_equal(a.risk, c.risk)
    assert a.dataset.times.shape != c.dataset.times.shape or not torch.equal(a.dataset.times, c.dataset.times)


# ------------------------------------------------------------------------------------ the task
def test_the_task_loads_through_the_registry_with_the_right_sizes_and_nan_where_unobserved():
    task = TASKS["icu-records"]
    assert task.metric == "auroc" and not task.data_depend_on_seed
    assert {"num_train", "stay_hours", "channel_missing", "sharpness", "data_seed"} <= set(task.option_names())
    data = load_task("icu-records", num_train=60, num_val=20, num_test=30, channel_missing=0.5, progress=False)
    raw = icu_records_splits(num_train=60, num_val=20, num_test=30, channel_missing=0.5)
    for split, raw_split, size in zip(data.splits, raw, (60, 20, 30)):
        assert len(split) == size and split.num_channels == len(RECORDS_CHANNELS) and split.num_classes == 2
        assert torch.equal(torch.isnan(split.values), torch.isnan(raw_split.values))  # standardised, NaN kept
        assert torch.isnan(split.values).any()
        assert (split.times[:, 1:] > split.times[:, :-1]).all()
        assert split.meta["channels"][0] == "heart_rate"
    assert not torch.equal(raw.train.times[:20], raw.val.times[:20])  # the parts are drawn one after another
    again = icu_records_splits(num_train=60, num_val=20, num_test=30, channel_missing=0.5)
    assert torch.equal(again.test.labels, raw.test.labels)
    other = icu_records_splits(num_train=60, num_val=20, num_test=30, channel_missing=0.5, data_seed=1)
    assert not torch.equal(other.test.values.nan_to_num(0.0), raw.test.values.nan_to_num(0.0))


@pytest.mark.parametrize(
    "option, value",
    [
        ("num_train", 0),
        ("num_test", 2.5),
        ("data_seed", -1),
        ("stay_hours", 0.0),
        ("severity_coupling", 1.5),
        ("informative_sampling", -0.1),
        ("sampling_spread", 2.0),
        ("channel_missing", 1.0),
        ("trend_size", -1.0),
        ("noise", float("nan")),
        ("sharpness", 0.0),
        ("level_weight", "high"),
        ("missing_signal_channels", "yes"),
    ],
)
def test_bad_options_raise_a_value_error_naming_the_option(option, value):
    with pytest.raises(ValueError, match=option):
        icu_records_splits(**{"num_train": 5, "num_val": 5, "num_test": 5, option: value})
    with pytest.raises(ValueError, match=option):
        load_task("icu-records", progress=False, **{"num_train": 5, "num_val": 5, "num_test": 5, option: value})


def test_unknown_options_and_bad_arguments_of_the_simulator_are_refused():
    with pytest.raises(ValueError, match="unknown option"):
        load_task("icu-records", num_stays=10)
    with pytest.raises(ValueError, match="num_stays"):
        simulate_records(0)
    with pytest.raises(ValueError, match="either seed or generator"):
        simulate_records(5, seed=1, generator=np.random.default_rng(1))
    with pytest.raises(ValueError, match="spec"):
        simulate_records(5, {"stay_hours": 48})
