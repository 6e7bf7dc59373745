"""Tests of the summary-feature reference method (neuralde_seq.reference.summary_features and
SummaryFeatureClassifier).

Every expected feature is computed here independently, channel by channel with numpy on the observed points
written out by hand (np.mean, np.std, np.polyfit, ...), never with the module's vectorised masks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.base import clone

from neuralde_seq.data import IrregularDataset
from neuralde_seq.reference import (
    REFERENCE_METHODS,
    SUMMARY_STATISTICS,
    SummaryFeatureClassifier,
    create_reference,
    reference_scores,
    summary_feature_names,
    summary_features,
)

NAN = np.nan
STATS = len(SUMMARY_STATISTICS)


def _column(features: np.ndarray, channel: int, statistic: str) -> np.ndarray:
    return features[:, channel * STATS + SUMMARY_STATISTICS.index(statistic)]


def _record():
    """Two samples, three channels, irregular times. Sample 0 (length 6): channel 0 observed at 4 of its 6 times,
    channel 1 once (t = 2.5), channel 2 never. Sample 1 (length 4, padded to 6 with values that must be ignored):
    channel 0 twice, channel 1 three times, channel 2 once."""
    times = np.array([[0.0, 0.4, 1.1, 2.5, 3.0, 4.2], [1.0, 1.5, 3.5, 6.0, 7.0, 8.0]])
    values = np.array(
        [
            [[2.0, NAN, NAN], [NAN, NAN, NAN], [-1.0, NAN, NAN], [3.5, 7.0, NAN], [0.5, NAN, NAN], [NAN, NAN, NAN]],
            [
                [NAN, 1.0, NAN],
                [4.0, 2.0, NAN],
                [NAN, 0.0, 9.0],
                [6.0, NAN, NAN],
                [100.0, 100.0, 100.0],
                [100.0, 100.0, 100.0],
            ],
        ]
    )
    return times, values, np.array([6, 4])


def _expected(t_obs, x_obs, end, start):
    """The 9 statistics of one channel, by hand: NaN value statistics and the whole span when unobserved."""
    t_obs, x_obs = np.asarray(t_obs, dtype=float), np.asarray(x_obs, dtype=float)
    if x_obs.size == 0:
        return [NAN] * 7 + [0.0, end - start]
    slope = np.polyfit(t_obs, x_obs, 1)[0] if x_obs.size >= 2 else 0.0
    return [
        np.mean(x_obs),
        np.std(x_obs),
        np.min(x_obs),
        np.max(x_obs),
        x_obs[0],
        x_obs[-1],
        slope,
        float(x_obs.size),
        end - t_obs[-1],
    ]


def test_summary_features_equal_numpy_statistics_of_each_channels_observed_points():
    times, values, lengths = _record()
    features = summary_features(times, values, lengths)
    assert features.shape == (2, 3 * STATS) and features.dtype == np.float64
    expected = np.array(
        [
            # sample 0 ends at 4.2 and starts at 0.0
            _expected([0.0, 1.1, 2.5, 3.0], [2.0, -1.0, 3.5, 0.5], 4.2, 0.0)
            + _expected([2.5], [7.0], 4.2, 0.0)
            + _expected([], [], 4.2, 0.0),
            # sample 1 ends at its 4th time, 6.0 (the padding at 7.0 and 8.0 is not part of it)
            _expected([1.5, 6.0], [4.0, 6.0], 6.0, 1.0)
            + _expected([1.0, 1.5, 3.5], [1.0, 2.0, 0.0], 6.0, 1.0)
            + _expected([3.5], [9.0], 6.0, 1.0),
        ]
    )
    np.testing.assert_allclose(features, expected, rtol=1e-12, atol=1e-12, equal_nan=True)
    # spelled out for the cases the brief singles out
    assert np.isnan(features[0, 2 * STATS : 2 * STATS + 7]).all()  # never observed: value statistics missing
    assert _column(features, 2, "count")[0] == 0 and _column(features, 2, "time_since_last")[0] == pytest.approx(4.2)
    assert _column(features, 1, "std")[0] == 0 and _column(features, 1, "slope")[0] == 0  # observed once
    assert _column(features, 0, "std")[0] == pytest.approx(np.std([2.0, -1.0, 3.5, 0.5], ddof=0))  # population
    # the same from tensors and with a horizon after the end: only time_since_last moves
    later = summary_features(
        torch.from_numpy(times), torch.from_numpy(values), torch.from_numpy(lengths), horizon=[5.0, 10.0]
    )
    np.testing.assert_allclose(_column(later, 0, "time_since_last"), [5.0 - 3.0, 10.0 - 6.0], rtol=1e-12)
    np.testing.assert_allclose(_column(later, 2, "time_since_last"), [5.0 - 0.0, 10.0 - 3.5], rtol=1e-12)
    moved = [c * STATS + SUMMARY_STATISTICS.index("time_since_last") for c in range(3)]
    keep = np.setdiff1d(np.arange(3 * STATS), moved)
    np.testing.assert_array_equal(later[:, keep], features[:, keep])


def test_feature_names_follow_the_column_order():
    names = summary_feature_names(2)
    assert len(names) == 2 * STATS and names[:2] == ["ch0_mean", "ch0_std"]
    assert names[STATS - 1] == "ch0_time_since_last" and names[STATS] == "ch1_mean"
    assert summary_feature_names(["hr", "sbp"])[STATS + 6] == "sbp_slope"


def test_times_default_to_the_observation_index():
    rng = np.random.default_rng(3)
    X = [rng.standard_normal((n, 2)) for n in (5, 8, 6, 7)]
    X[1][2:, 0] = NAN  # channel 0 of sample 1 last seen at index 1 of 0..7
    y = ["a", "b", "a", "b"]
    index_times = [np.arange(len(x), dtype=float) for x in X]
    est = SummaryFeatureClassifier(cv=2, random_state=0).fit(X, y)
    by_default = est.features(X)
    np.testing.assert_array_equal(by_default, est.features(X, times=index_times))
    # and the times are really read: stretched times halve the slopes and double the times since the last point
    stretched = est.features(X, times=[2 * t for t in index_times])
    np.testing.assert_allclose(_column(stretched, 0, "slope"), _column(by_default, 0, "slope") / 2, rtol=1e-12)
    np.testing.assert_allclose(_column(stretched, 0, "time_since_last")[1], 2 * (7 - 1))  # last seen at index 1
    np.testing.assert_allclose(_column(by_default, 0, "slope")[0], np.polyfit(np.arange(5), X[0][:, 0], 1)[0])


def _slope_problem(n: int, seed: int, classes=("down", "up")):
    """Irregular records whose class is the sign of channel 0's trend (with noise, 20 % of values dropped); channel
    1 is noise. With three classes, "flat" has no trend."""
    rng = np.random.default_rng(seed)
    X, times, y = [], [], []
    trends = {"down": -0.6, "flat": 0.0, "up": 0.6}
    for _ in range(n):
        label = classes[rng.integers(len(classes))]
        size = int(rng.integers(6, 16))
        t = np.sort(rng.uniform(0.0, 10.0, size))
        x = np.stack([trends[label] * t + rng.normal(2.0, 0.7, size), rng.normal(0.0, 1.0, size)], axis=1)
        x[rng.random(x.shape) < 0.2] = NAN
        x[0, 0] = rng.normal()  # every record observes something
        X.append(x)
        times.append(t)
        y.append(label)
    return X, times, np.array(y)


def test_the_classifier_learns_the_sign_of_a_channels_slope():
    X, times, y = _slope_problem(120, seed=0)
    est = SummaryFeatureClassifier(random_state=0).fit(X[:80], y[:80], times=times[:80])
    assert est.score(X[80:], y[80:], times=times[80:]) >= 0.9
    assert est.n_folds_ == 5 and est.C_ in np.logspace(-3, 3, 7)
    assert est.n_features_in_ == est.n_channels_ == 2 and len(est.feature_names_) == 2 * STATS
    # binary scores: positive means classes_[1]
    decision = est.decision_function(X[80:], times=times[80:])
    assert decision.shape == (40,)
    assert (est.classes_[(decision > 0).astype(int)] == est.predict(X[80:], times=times[80:])).all()
    # the seed fixes the folds, hence the fit
    again = SummaryFeatureClassifier(random_state=0).fit(X[:80], y[:80], times=times[:80])
    np.testing.assert_array_equal(again.decision_function(X[80:], times=times[80:]), decision)


def test_probabilities_sum_to_one_and_map_back_to_string_labels():
    X, times, y = _slope_problem(90, seed=1, classes=("down", "flat", "up"))
    est = SummaryFeatureClassifier(random_state=0).fit(X[:60], y[:60], times=times[:60])
    assert est.classes_.tolist() == ["down", "flat", "up"]
    proba = est.predict_proba(X[60:], times=times[60:])
    assert proba.shape == (30, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    predicted = est.predict(X[60:], times=times[60:])
    assert predicted.tolist() == est.classes_[proba.argmax(axis=1)].tolist()
    assert est.decision_function(X[60:], times=times[60:]).argmax(axis=1).tolist() == proba.argmax(axis=1).tolist()
    assert est.score(X[60:], y[60:], times=times[60:]) >= 0.8


def test_a_channel_never_observed_gets_the_training_mean_of_its_features():
    rng = np.random.default_rng(5)
    train = [np.column_stack([rng.normal(size=6), rng.normal(loc=10.0, size=6)]) for _ in range(8)]
    for x in train[:3]:
        x[:, 1] = NAN  # unobserved in some training records: they must not pull the mean towards 0
    y = ["a", "b"] * 4
    est = SummaryFeatureClassifier(cv=2, random_state=0).fit(train, y)
    raw = summary_features(np.tile(np.arange(6.0), (8, 1)), np.stack(train))
    np.testing.assert_allclose(est.feature_mean_, np.nanmean(raw, axis=0), rtol=1e-12)
    assert _column(est.feature_mean_[None], 1, "mean")[0] > 9  # about 10, not 5/8 of it

    query = [np.column_stack([rng.normal(size=4), np.full(4, NAN)])]
    features = est.features(query)
    value_columns = [STATS + k for k in range(7)]
    np.testing.assert_array_equal(features[0, value_columns], est.feature_mean_[value_columns])
    assert _column(features, 1, "count")[0] == 0 and _column(features, 1, "time_since_last")[0] == 3.0
    assert not np.isnan(features).any() and est.predict(query).shape == (1,)


def test_tiny_classes_use_fewer_folds_or_none():
    X, times, y = _slope_problem(30, seed=2)
    y = y.copy()
    y[:3] = "rare"
    y[3:] = np.where(y[3:] == "rare", "up", y[3:])
    assert SummaryFeatureClassifier(random_state=0).fit(X, y, times=times).n_folds_ == 3
    y[1:3] = "down"  # one "rare" record: no stratified split exists
    est = SummaryFeatureClassifier(random_state=0).fit(X, y, times=times)
    assert est.n_folds_ == 0 and est.C_ == 1.0
    np.testing.assert_allclose(est.predict_proba(X, times=times).sum(axis=1), 1.0, atol=1e-12)


def test_registry_builds_it_and_sklearn_clones_it():
    method = REFERENCE_METHODS["summary-features"]
    assert method.kind == "reference" and method.requires == ()
    est = create_reference("summary-features", 7, cv=3)
    assert isinstance(est, SummaryFeatureClassifier)
    assert est.get_params() == {"Cs": None, "cv": 3, "max_iter": 1000, "random_state": 7}
    copy = clone(est)
    assert copy is not est and copy.get_params() == est.get_params()
    with pytest.raises(ValueError, match="unknown option"):
        create_reference("summary-features", 0, alphas=[1.0])


def test_reference_scores_run_it_on_irregular_datasets():
    X, times, y = _slope_problem(60, seed=4)
    length = max(len(x) for x in X)
    t = np.stack([np.concatenate([s, s[-1] + 1.0 + np.arange(length - len(s))]) for s in times])
    v = np.stack([np.concatenate([x, np.full((length - len(x), 2), NAN)]) for x in X])
    codes = (y == "up").astype(np.int64)
    data = [
        IrregularDataset(
            torch.from_numpy(t[part]),
            torch.from_numpy(v[part]),
            torch.tensor([len(X[i]) for i in range(60)])[part],
            torch.from_numpy(codes[part]),
            ["down", "up"],
        )
        for part in (slice(0, 40), slice(40, 60))
    ]
    # the dataset's own times and labels are read: the same fit as the list form
    listed = SummaryFeatureClassifier(random_state=0).fit(X[:40], y[:40], times=times[:40])
    from_dataset = SummaryFeatureClassifier(random_state=0).fit(data[0])
    np.testing.assert_allclose(from_dataset.features(data[1]), listed.features(X[40:], times=times[40:]), rtol=1e-12)
    result = reference_scores(data[0], data[1], references=["summary-features"], seed=0)["summary-features"]
    assert result["accuracy"] >= 0.9 and result["auroc"] is not None and result["num_test"] == 20


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda est, X, y: est.fit(X, y, times=[np.arange(4.0)] * len(X)), r"times\[0\] must have shape"),
        (lambda est, X, y: est.fit(X, y[:-1]), "y must hold one label per sample"),
        (lambda est, X, y: est.fit(X, ["a"] * len(X)), "only 1 class"),
        (lambda est, X, y: est.set_params(Cs=[0.0, 1.0]).fit(X, y), "Cs must be"),
        (lambda est, X, y: est.set_params(cv=1).fit(X, y), "cv must be an integer >= 2"),
        (lambda est, X, y: est.fit(X, y).predict([x[:, :1] for x in X]), "1 channel"),
        (lambda est, X, y: summary_features(np.arange(3.0)[None], np.ones((1, 3, 1)), horizon=1.0), "horizon must be"),
        (lambda est, X, y: summary_features(np.array([[0.0, 2.0, 1.0]]), np.ones((1, 3, 1))), "strictly increasing"),
    ],
)
def test_bad_inputs_name_the_argument(call, message):
    X = [np.arange(10.0).reshape(5, 2) + k for k in range(6)]
    y = np.array(["a", "b"] * 3)
    with pytest.raises(ValueError, match=message):
        call(SummaryFeatureClassifier(cv=2), X, y)
