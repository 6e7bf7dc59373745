"""Tests of the random-feature (reservoir) mode (neuralde_seq.random_features): the ridge readout against
scikit-learn, frozen reservoirs, padding invariance and the features written out by hand, a task that needs the
signature's second level, the estimators' scikit-learn conventions and input errors."""

import warnings

import numpy as np
import pytest
import torch
from scipy.special import log_expit, log_softmax
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import Ridge, RidgeClassifierCV, RidgeCV
from sklearn.utils.estimator_checks import check_estimator

from neuralde_seq import create_model, logsignature
from neuralde_seq.random_features import RESERVOIRS, RandomFeatures, RidgeReadout
from neuralde_seq.random_features.readout import _fit_probability_temperature
from neuralde_seq.sklearn import RandomFeatureClassifier, RandomFeatureRegressor

ALPHAS = (1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1e3)


def _standardised(F):
    """Features standardised with their own mean and (population) standard deviation, in numpy."""
    return (F - F.mean(axis=0)) / F.std(axis=0)


def _regression_data(n, p, k, seed):
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(n, p)) * rng.uniform(0.5, 3.0, size=p) + rng.normal(size=p)
    W = rng.normal(size=(p, k))
    Y = F @ W + rng.normal(scale=2.0, size=(n, k))
    return F, Y


# ------------------------------------------------------------------------------------------------ ridge readout


@pytest.mark.parametrize("n, p", [(80, 12), (25, 60)], ids=["samples>features", "samples<features"])
@pytest.mark.parametrize("standardize", [False, True])
def test_ridge_equals_sklearn_ridge_at_a_fixed_alpha(n, p, standardize):
    F, Y = _regression_data(n, p, 3, seed=n)
    readout = RidgeReadout(0.7, standardize=standardize).fit(F, Y)
    reference = Ridge(alpha=0.7, solver="cholesky").fit(_standardised(F) if standardize else F, Y)
    F_new = np.random.default_rng(1).normal(size=(9, p))
    # sklearn reads the standardised features: map ours back to them
    expected = reference.predict((F_new - F.mean(0)) / F.std(0) if standardize else F_new)
    np.testing.assert_allclose(readout.decision_function(F_new).numpy(), expected, rtol=0, atol=1e-8)
    if not standardize:
        np.testing.assert_allclose(readout.coef_.numpy(), reference.coef_.T, rtol=0, atol=1e-8)
        np.testing.assert_allclose(readout.intercept_.numpy(), reference.intercept_, rtol=0, atol=1e-8)
    # a one-column target keeps its (N,) shape
    single = RidgeReadout(0.7, standardize=standardize).fit(F, Y[:, 0])
    assert single.decision_function(F_new).shape == (9,)
    np.testing.assert_allclose(single.decision_function(F_new).numpy(), expected[:, 0], rtol=0, atol=1e-8)


@pytest.mark.parametrize("n, p", [(90, 15), (30, 70)], ids=["samples>features", "samples<features"])
@pytest.mark.parametrize("classes", [2, 4])
def test_ridge_classifier_cv_equals_sklearn(n, p, classes):
    rng = np.random.default_rng(10 * n + classes)
    y = rng.integers(0, classes, size=n) * 3 + 5  # labels that are not 0..K-1
    centres = rng.normal(scale=0.6, size=(classes, p))
    F = centres[(y - 5) // 3] + rng.normal(size=(n, p)) * rng.uniform(0.5, 2.0, size=p)
    F_new = rng.normal(size=(20, p))
    readout = RidgeReadout(ALPHAS, classification=True).fit(torch.as_tensor(F), torch.as_tensor(y))
    reference = RidgeClassifierCV(alphas=ALPHAS).fit(_standardised(F), y)
    assert readout.alpha_ == reference.alpha_
    assert readout.best_score_ == pytest.approx(reference.best_score_, abs=1e-10)
    ours = readout.decision_function(F_new).numpy()
    theirs = reference.decision_function((F_new - F.mean(0)) / F.std(0))
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-8)
    np.testing.assert_array_equal(readout.predict(F_new).numpy(), reference.predict((F_new - F.mean(0)) / F.std(0)))
    np.testing.assert_array_equal(readout.classes_.numpy(), reference.classes_)
    # the grid was searched: the leave-one-out errors differ between penalties
    assert float(readout.cv_errors_.max() - readout.cv_errors_.min()) > 1e-3


@pytest.mark.parametrize("n, p", [(70, 10), (20, 50)], ids=["samples>features", "samples<features"])
def test_ridge_cv_regression_equals_sklearn(n, p):
    F, Y = _regression_data(n, p, 2, seed=p)
    readout = RidgeReadout(ALPHAS).fit(F, Y)
    reference = RidgeCV(alphas=ALPHAS).fit(_standardised(F), Y)
    assert readout.alpha_ == reference.alpha_
    F_new = np.random.default_rng(3).normal(size=(7, p))
    np.testing.assert_allclose(
        readout.predict(F_new).numpy(), reference.predict((F_new - F.mean(0)) / F.std(0)), rtol=0, atol=1e-8
    )


def test_ridge_leave_one_out_error_is_the_refitted_error():
    # the closed form against its definition: refit without each sample and predict it
    F, Y = _regression_data(15, 6, 1, seed=4)
    readout = RidgeReadout((0.5, 5.0), standardize=False).fit(F, Y[:, 0])
    for index, alpha in enumerate((0.5, 5.0)):
        errors = []
        for i in range(len(F)):
            keep = np.arange(len(F)) != i
            model = Ridge(alpha=alpha, solver="cholesky").fit(F[keep], Y[keep, 0])
            errors.append((model.predict(F[i : i + 1])[0] - Y[i, 0]) ** 2)
        assert float(readout.cv_errors_[index]) == pytest.approx(np.mean(errors), rel=1e-9)


def test_ridge_readout_refuses_bad_input():
    with pytest.raises(ValueError, match="alphas"):
        RidgeReadout((1.0, -1.0))
    with pytest.raises(ValueError, match="alphas"):
        RidgeReadout(())
    with pytest.raises(ValueError, match="shape"):
        RidgeReadout().fit(np.ones(5), np.ones(5))
    with pytest.raises(ValueError, match="NaN"):
        RidgeReadout().fit(np.array([[1.0], [np.nan], [2.0]]), np.ones(3))
    with pytest.raises(ValueError, match="at least 2 classes|only 1 class"):
        RidgeReadout(classification=True).fit(np.random.randn(4, 2), np.zeros(4))
    with pytest.raises(ValueError, match="integer labels"):
        RidgeReadout(classification=True).fit(np.random.randn(4, 2), np.array([0.5, 1, 0, 1]))
    with pytest.raises(RuntimeError, match="not fitted"):
        RidgeReadout().predict(np.ones((2, 2)))
    readout = RidgeReadout().fit(np.random.randn(6, 3), np.random.randn(6))
    with pytest.raises(ValueError, match="columns"):
        readout.predict(np.ones((2, 4)))


# ------------------------------------------------------------------------------------------------ feature maps


def _ragged_batch(lengths, channels=2, seed=0, dtype=torch.float64):
    """A padded batch (times (B, T), values (B, T, C), lengths (B,)) with NaN gaps and padding after each end."""
    generator = torch.Generator().manual_seed(seed)
    T = max(lengths)
    values = torch.randn(len(lengths), T, channels, generator=generator, dtype=dtype).cumsum(dim=1) * 0.3
    values[torch.rand(values.shape, generator=generator) < 0.2] = float("nan")
    values[:, 0] = torch.randn(len(lengths), channels, generator=generator, dtype=dtype)
    times = torch.arange(T, dtype=dtype).repeat(len(lengths), 1)
    for b, length in enumerate(lengths):
        values[b, length:] = float("nan")
    return times, values, torch.tensor(lengths)


def test_reservoir_is_frozen_and_unchanged_by_fit():
    times, values, lengths = _ragged_batch([30, 22, 30, 17, 25, 30], seed=1)
    y = np.array([0, 1, 0, 1, 0, 1])
    X = [values[b, :n].numpy() for b, n in enumerate(lengths.tolist())]
    for reservoir, options in (("ncde", None), ("delta-cde", None), ("slice-dense", None)):
        clf = RandomFeatureClassifier(
            reservoir, features=("final", "mean"), width=16, model_options=options, random_state=3, dtype="float64"
        )
        clf.fit(X, y)
        model = clf.feature_map_.model_
        assert not model.training
        for parameter in model.parameters():
            assert not parameter.requires_grad and parameter.grad is None
        # the reservoir is the registry's draw for this seed, untouched by the readout's fit (slice-dense: but for
        # the time channel's A_0, which the memory option sets)
        torch.manual_seed(3)
        control = clf.feature_map_.inputs(times.to(torch.float64), values, lengths)
        fresh = create_model(
            reservoir,
            control,
            2,
            **({"hidden": 16} if reservoir != "delta-cde" else {"d_model": 16}),
            **({"channel_scales": (1.0,) * control.channels} if reservoir == "slice-dense" else {}),
        )
        fresh = fresh.to(torch.float64)
        for (name, got), (_, want) in zip(model.state_dict().items(), fresh.state_dict().items()):
            if reservoir == "slice-dense" and name == "A":
                got, want = got[1:], want[1:]
            assert torch.equal(got, want), (reservoir, name)
        # predicting and refitting the readout leave the weights as they are; features carry no graph
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.enable_grad():
            clf.predict(X)
            features = clf.feature_map_.transform(clf._data(X, None))
        assert not features.requires_grad
        clf.readout_.fit(features, torch.as_tensor(y))
        for name, tensor in model.state_dict().items():
            assert torch.equal(tensor, before[name]), (reservoir, name)
        assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(
    "reservoir, options",
    [
        ("slice-diag", None),
        ("slice-block", None),
        ("ncde", None),
        ("delta-rde", {"solver": {"method": "exact"}}),
        ("logsignature", {"depth": 2}),
    ],
)
def test_features_in_a_padded_batch_equal_each_sample_alone(reservoir, options):
    lengths = (
        [1500, 1100, 1500, 700] if reservoir in ("slice-diag", "slice-block", "logsignature") else [120, 80, 120, 50]
    )
    times, values, lengths = _ragged_batch(lengths, seed=2)
    features = (
        ("final", "times", "windows", "values")
        if reservoir == "logsignature"
        else ("final", "mean", "times", "ppv", "mpv", "max", "values", "levels")
    )
    feature_map = RandomFeatures(
        reservoir,
        features=features,
        width=None if reservoir == "logsignature" else 24,
        model_options=options,
        seed=5,
        batch_size=3,
    ).fit(times, values, lengths)
    batch = feature_map.transform(times, values, lengths)
    assert batch.dtype == torch.float64 and batch.shape == (4, feature_map.num_features_)
    for b, n in enumerate(lengths.tolist()):
        alone = feature_map.transform(times[b : b + 1, :n], values[b : b + 1, :n], lengths[b : b + 1])
        torch.testing.assert_close(alone[0], batch[b], rtol=1e-10, atol=1e-10)
    # each feature's columns, in the order given
    assert [s.start for s in feature_map.feature_slices_.values()] == sorted(
        s.start for s in feature_map.feature_slices_.values()
    )
    assert sum(s.stop - s.start for s in feature_map.feature_slices_.values()) == feature_map.num_features_


def test_batch_size_bounds_the_states_formed_at_once_and_leaves_the_thresholds_as_they_are(monkeypatch):
    # the "ppv" thresholds read the states of up to 16 series: they were formed all at once whatever batch_size was
    # (4 series of 100,000 points asked for 2.5 GB)
    times, values, lengths = _ragged_batch(
        [200, 150, 200, 90, 180, 200, 120, 200, 160, 200, 140, 200, 110, 200, 130, 200, 170, 200, 100, 200], seed=7
    )
    formed = []
    states = RandomFeatures._states
    monkeypatch.setattr(
        RandomFeatures, "_states", lambda self, control: formed.append(control.batch_size) or states(self, control)
    )
    maps = {}
    for batch_size in (2, 32):
        formed.clear()
        maps[batch_size] = RandomFeatures(
            "ncde", features=("ppv", "mean"), width=12, num_biases=3, seed=4, batch_size=batch_size
        ).fit(times, values, lengths)
        features = maps[batch_size].transform(times, values, lengths)
        assert max(formed) <= batch_size and (batch_size == 32 or len(formed) > 10)
        maps[batch_size] = (maps[batch_size], features)
    # (the solver batches other series beside each one: the same states to rounding)
    torch.testing.assert_close(maps[2][0].biases_, maps[32][0].biases_, rtol=0, atol=1e-12)
    torch.testing.assert_close(maps[2][1], maps[32][1], rtol=0, atol=1e-12)


def test_a_series_whose_states_cannot_fit_is_refused_up_front_with_the_numbers(monkeypatch):
    import neuralde_seq.random_features.features as module

    times, values, lengths = _ragged_batch([5000, 4000], seed=8)
    monkeypatch.setattr(module, "_free_memory", lambda device: 2**18)  # a device with 0.25 MiB free
    need = 5000 * 12 * 8 / 2**20  # one series' states: knots × units × 8 bytes (float64)
    with pytest.raises(
        MemoryError,
        match=rf"one series of 5,000 knots × 12 units need {need:.1f} MiB at once, and "
        r"cpu has 0\.2 MiB free; use fewer units \(width\)",
    ):
        RandomFeatures("ncde", features=("ppv", "mean"), width=12, seed=4).fit(times, values, lengths)


def test_pooled_features_are_the_written_out_statistics_of_the_states():
    times, values, lengths = _ragged_batch([40, 26, 33], seed=3)
    feature_map = RandomFeatures(
        "slice-diag", features=("mean", "final", "times", "ppv", "values"), width=8, num_times=3, num_biases=2, seed=0
    ).fit(times, values, lengths)
    features = feature_map.transform(times, values, lengths)
    control = feature_map.inputs(times, values, lengths)
    states = feature_map.states(control)
    slices = feature_map.feature_slices_
    for b, n in enumerate(lengths.tolist()):
        own = states[b, :n]  # the sample's knots 0..n-1 (end index n-1)
        mean = sum(own[k] for k in range(n)) / n
        torch.testing.assert_close(features[b, slices["mean"]], mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(features[b, slices["final"]], own[n - 1], rtol=0, atol=0)
        expected_times = torch.cat([own[int(round(j / 3 * (n - 1)))] for j in (1, 2, 3)])
        torch.testing.assert_close(features[b, slices["times"]], expected_times, rtol=0, atol=0)
        proportions = torch.cat([(own > bias).sum(dim=0).double() / n for bias in feature_map.biases_])
        torch.testing.assert_close(features[b, slices["ppv"]], proportions, rtol=0, atol=1e-15)
        # the series' own (rescaled, interpolated) values at the fractions and their mean
        series = values[b, :n].numpy() / feature_map.value_scales_.numpy()
        filled = np.stack(
            [np.interp(np.arange(n), np.flatnonzero(~np.isnan(c)), c[~np.isnan(c)]) for c in series.T], axis=1
        )
        expected_values = np.concatenate(
            [filled[int(round(j / 3 * (n - 1)))] for j in (1, 2, 3)] + [filled.mean(axis=0)]
        )
        np.testing.assert_allclose(features[b, slices["values"]].numpy(), expected_values, rtol=1e-12, atol=1e-12)
    # the thresholds lie within each unit's range of states, at the quantiles drawn in [0.25, 0.75]
    pooled = states.reshape(-1, states.shape[-1])
    assert bool(((feature_map.biases_ >= pooled.min(0).values) & (feature_map.biases_ <= pooled.max(0).values)).all())


def test_mpv_and_max_are_the_written_out_statistics_of_the_states_in_numpy():
    times, values, lengths = _ragged_batch([40, 26, 33], seed=6)
    feature_map = RandomFeatures("slice-block", features=("ppv", "mpv", "max"), width=16, num_biases=3, seed=1).fit(
        times, values, lengths
    )
    features = feature_map.transform(times, values, lengths).numpy()
    states = feature_map.states(feature_map.inputs(times, values, lengths)).numpy()
    biases = feature_map.biases_.numpy()
    slices = feature_map.feature_slices_
    for b, n in enumerate(lengths.tolist()):
        expected_mpv, expected_max = [], []
        for bias in biases:
            for unit in range(states.shape[-1]):
                above = [
                    float(states[b, k, unit]) - float(bias[unit]) for k in range(n) if states[b, k, unit] > bias[unit]
                ]
                expected_mpv.append(sum(above) / len(above) if above else 0.0)
        for unit in range(states.shape[-1]):
            expected_max.append(max(float(states[b, k, unit]) for k in range(n)))
        np.testing.assert_allclose(features[b, slices["mpv"]], expected_mpv, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(features[b, slices["max"]], expected_max, rtol=1e-12, atol=1e-14)
    # the samples' knots only: a shorter sample's max is not the padded batch's
    assert slices["mpv"].stop - slices["mpv"].start == 3 * states.shape[-1]


def test_levels_are_the_written_out_distribution_of_the_series_levels_in_numpy():
    times, values, lengths = _ragged_batch([40, 26, 33, 12], seed=7)
    L, n = 5, 3
    feature_map = RandomFeatures(
        "slice-block", features=("ppv", "levels"), width=8, num_levels=L, num_times=n, seed=0
    ).fit(times, values, lengths)
    features = feature_map.transform(times, values, lengths).numpy()
    block = features[:, feature_map.feature_slices_["levels"]]
    C = values.shape[2]
    assert block.shape == (4, C * L * (n + 2))
    # the series' own values, rescaled, missing ones linearly interpolated (the knots are the index times here)
    filled = []
    for b, size in enumerate(lengths.tolist()):
        series = values[b, :size].numpy() / feature_map.value_scales_.numpy()
        filled.append(
            np.stack(
                [np.interp(np.arange(size), np.flatnonzero(~np.isnan(c)), c[~np.isnan(c)]) for c in series.T], axis=1
            )
        )
    pooled = np.concatenate(filled)
    for c in range(C):
        thresholds = np.quantile(pooled[:, c], (np.arange(L) + 0.5) / L)
        np.testing.assert_allclose(feature_map.levels_[c].numpy(), thresholds, rtol=1e-12)
        for b, own in enumerate(filled):
            size = len(own)
            expected = []
            for threshold in thresholds:
                above = [v - threshold for v in own[:, c] if v > threshold]
                expected.append(len(above) / size)
            for threshold in thresholds:
                above = [v - threshold for v in own[:, c] if v > threshold]
                expected.append(sum(above) / len(above) if above else 0.0)
            bounds = [-1] + [int(round(j / n * (size - 1))) for j in range(1, n + 1)]
            for j in range(n):
                part = own[bounds[j] + 1 : bounds[j + 1] + 1, c]
                for threshold in thresholds:
                    expected.append(float(np.sum(part > threshold)) / max(len(part), 1))
            # each channel's block: proportions (L), mean excesses (L), then each part's proportions (L each)
            got = block[b, c * L * (n + 2) : (c + 1) * L * (n + 2)]
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_logsignature_features_are_the_log_signatures_of_the_rescaled_path():
    times, values, lengths = _ragged_batch([50, 37], channels=2, seed=4)
    feature_map = RandomFeatures(
        "logsignature", features=("final", "windows"), num_times=2, model_options={"depth": 2}
    ).fit(times, values, lengths)
    features = feature_map.transform(times, values, lengths)
    for b, n in enumerate(lengths.tolist()):
        series = values[b, :n].numpy() / feature_map.value_scales_.numpy()
        filled = np.stack(
            [np.interp(np.arange(n), np.flatnonzero(~np.isnan(c)), c[~np.isnan(c)]) for c in series.T], axis=1
        )
        path = torch.as_tensor(np.concatenate([np.arange(n)[:, None] / feature_map.time_scale_, filled], axis=1))
        middle = int(round((n - 1) / 2))
        expected = torch.cat(
            [logsignature(path, 2), logsignature(path[: middle + 1], 2), logsignature(path[middle:], 2)]
        )
        torch.testing.assert_close(features[b], expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reservoir", ["slice-block", "logsignature", "ncde"])
def test_the_maps_input_spec_standardises_exactly_as_values_standardised_by_hand(reservoir):
    """With standardise=True the map's input spec standardises each channel with its observed training values' mean
    and population std; its features are bitwise those of the map reading values standardised by hand (in float64,
    then cast, as the estimators did before the spec), and a checked dataset reads as its tensors."""
    from neuralde_seq.data import IrregularDataset

    times, values, lengths = _ragged_batch([14, 9, 12, 14, 6], channels=3, seed=5, dtype=torch.float64)
    values = 40.0 + 7.0 * values
    data = IrregularDataset(times.float(), values, lengths, None, [])  # float64 values beside float32 times
    observed = values.numpy().copy()
    observed[np.arange(14)[None, :] >= lengths.numpy()[:, None]] = np.nan
    options = dict(width=None if reservoir == "logsignature" else 16, seed=2)
    spec_map = RandomFeatures(reservoir, standardise=True, **options).fit(data)
    mean, std = spec_map.input_spec_.channel_mean, spec_map.input_spec_.channel_scale
    np.testing.assert_allclose(mean, np.nanmean(observed, axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(std, np.nanstd(observed, axis=(0, 1)), rtol=1e-12)
    by_hand = ((values - torch.tensor(mean, dtype=torch.float64)) / torch.tensor(std, dtype=torch.float64)).float()
    plain = RandomFeatures(reservoir, **options)
    expected = plain.fit_transform(times.float(), by_hand, lengths)
    assert torch.equal(spec_map.transform(data), expected)
    assert plain.input_spec_.fill_step == spec_map.input_spec_.fill_step == 1.0  # the median step of the grid
    assert spec_map.input_spec_.time_unit == spec_map.time_scale_ / spec_map.input_scale


def test_memory_sets_each_units_forgetting_per_time_step():
    times, values, lengths = _ragged_batch([60, 45], seed=5)
    feature_map = RandomFeatures("slice-diag", features=("final",), width=32, timescales=(2.0, 50.0), seed=1).fit(
        times * 3.0, values, lengths
    )  # times in units of 3: the step is 3
    tau = feature_map.timescales_
    assert float(tau.min()) >= 2.0 and float(tau.max()) <= 50.0
    step = 3.0 / feature_map.time_scale_  # one knot of the rescaled time channel
    per_step = 1.0 + step * feature_map.model_.A[0].double()  # the time channel's part of the Euler step
    torch.testing.assert_close(per_step, torch.exp(-1.0 / tau), rtol=1e-5, atol=1e-6)


def test_oscillator_pairs_follow_the_written_out_damped_rotation():
    times, values, lengths = _ragged_batch([60, 45, 52], channels=1, seed=6)
    feature_map = RandomFeatures(
        "slice-block", features=("final",), width=40, timescales=(2.0, 50.0), memory="oscillation", seed=2
    ).fit(times * 3.0, values, lengths)  # step 3
    model = feature_map.model_
    assert model.block_size == 2
    assert feature_map.fast_share == 1 / 3  # the oscillators' "auto"
    fast = 7  # round(20 pairs / 3): the first pairs, checked in test_fast_oscillators_...
    period, tau = feature_map.periods_[2 * fast :: 2], feature_map.timescales_[2 * fast :: 2]
    assert float(period.min()) >= 4.0 and float(period.max()) <= 50.0  # periods in [2 tau_min, tau_max]
    omega, rho = 2 * torch.pi / period, torch.exp(-1.0 / tau)
    eigenvalue = rho * torch.exp(1j * omega)
    # the Euler step over a gap of g median steps, I + g(ρR(ω) − I), does not expand: g = 3 where some ρ allows
    # it (periods of 12 steps and more), else g = 2
    gap = torch.where(period >= 12.0, 3.0, 2.0).double()
    assert bool(((1 + gap * (eigenvalue - 1)).abs() <= 1 + 1e-9).all())
    # and ρ is the largest such radius, or the unit's own decay (half to twice its period, at least tau_min)
    radii = torch.linspace(0, 1, 200001, dtype=torch.float64).unsqueeze(1)
    grown = (1 + gap * (radii * torch.exp(1j * omega) - 1)).abs() > 1 + 1e-12
    bound = torch.where(grown, -1.0, radii).max(dim=0).values  # by search, not by the closed form
    longest = torch.exp(-1.0 / torch.clamp(2 * period, min=2.0))
    shortest = torch.exp(-1.0 / torch.clamp(period / 2, min=2.0))
    assert bool((rho <= torch.minimum(longest, bound) + 1e-5).all())
    assert bool((rho >= torch.minimum(shortest, bound) - 1e-5).all())
    # a constant series on the regular grid: z_k = λ z_(k−1) + β per pair, λ = ρ e^(iω), in closed form
    K = 400
    grid = torch.arange(K, dtype=torch.float64).unsqueeze(0) * 3.0
    flat = torch.full((1, K, 1), 0.7, dtype=torch.float64)
    states = feature_map.states(feature_map.inputs(grid, flat, torch.tensor([K])))[0].double()  # (K, H)
    states = states[:, 2 * fast :]
    step = 3.0 / feature_map.time_scale_
    h0 = (
        model.initial.weight.double()
        @ torch.tensor([0.0, 0.7 / float(feature_map.value_scales_[0])], dtype=torch.float64)
        + model.initial.bias.double()
    )[2 * fast :]
    beta = step * model.B.weight[2 * fast :, 0].double()
    to_complex = lambda h: torch.complex(h[..., 0::2], h[..., 1::2])
    k = torch.arange(K, dtype=torch.float64).unsqueeze(1)
    power = eigenvalue.unsqueeze(0) ** k
    expected = power * to_complex(h0) + to_complex(beta) * (1 - power) / (1 - eigenvalue)
    torch.testing.assert_close(to_complex(states), expected, rtol=1e-9, atol=1e-9)


def _largest_non_expanding_radius(omega, gap):
    """The largest ρ in [0, 1] with |1 + gap(ρe^{iω} − 1)| <= 1 per entry, by a search over a fine grid."""
    radii = torch.linspace(0, 1, 200001, dtype=torch.float64).unsqueeze(1)
    grown = (1 + gap * (radii * torch.exp(1j * omega) - 1)).abs() > 1 + 1e-12
    return torch.where(grown, -1.0, radii).max(dim=0).values


def test_fast_oscillators_are_a_share_of_nearly_memoryless_pairs_and_keep_the_others_draw():
    times, values, lengths = _ragged_batch([60, 45, 52], channels=1, seed=6)
    options = dict(features=("final",), width=64, timescales=(2.0, 50.0), seed=3)
    plain = RandomFeatures("slice-block", fast_share=0.0, **options).fit(times, values, lengths)
    mixed = RandomFeatures("slice-block", fast_share=0.25, **options).fit(times, values, lengths)
    fast = 8  # round(0.25 * 32 pairs)
    # the slow pairs are the draw without fast ones, exactly
    torch.testing.assert_close(mixed.periods_[2 * fast :], plain.periods_[2 * fast :], rtol=0, atol=0)
    torch.testing.assert_close(mixed.timescales_[2 * fast :], plain.timescales_[2 * fast :], rtol=0, atol=0)
    torch.testing.assert_close(mixed.model_.A[0][fast:], plain.model_.A[0][fast:], rtol=0, atol=0)
    # the fast ones: periods in [2 tau_min, 6 tau_min] knots, radius 0.3 per knot or the non-expanding bound
    period, tau = mixed.periods_[: 2 * fast : 2], mixed.timescales_[: 2 * fast : 2]
    assert float(period.min()) >= 4.0 and float(period.max()) <= 12.0
    assert not torch.equal(period, plain.periods_[: 2 * fast : 2])
    omega = 2 * torch.pi / period
    rho = torch.exp(-1.0 / tau)
    expected = torch.minimum(torch.full_like(rho, 0.3), _largest_non_expanding_radius(omega, 2.0))
    torch.testing.assert_close(rho, expected, rtol=0, atol=2e-5)
    # and A_0's blocks are (ρR(ω) − I)/Δt (Δt: the median step of the rescaled times, 1/time_scale_ here)
    block = mixed.model_.A[0][:fast].double() / mixed.time_scale_ + torch.eye(2, dtype=torch.float64)
    torch.testing.assert_close(block[:, 0, 0], rho * torch.cos(omega), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(block[:, 1, 0], rho * torch.sin(omega), rtol=1e-5, atol=1e-6)
    # the defaults: 1,536 oscillator units, a third of the pairs fast; none for low-pass units
    default = RandomFeatures("slice-block", features=("final",)).fit(times, values, lengths)
    assert default.state_width_ == 1536 and default.fast_share == 1 / 3
    assert int((default.periods_[::2] <= 12.0).sum()) >= 256  # 256 fast pairs, and slow ones drawn that short
    assert RandomFeatures("slice-diag").fast_share == 0.0


def test_oscillators_stay_bounded_on_long_irregular_series():
    # 1,500 knots with gaps of 1-4 steps: the states stay of the order of the path
    generator = torch.Generator().manual_seed(0)
    gaps = torch.randint(1, 5, (2, 1500), generator=generator).double()
    times = gaps.cumsum(dim=1)
    values = torch.sin(times / 7.0).unsqueeze(-1) + 0.3 * torch.randn(
        2, 1500, 1, generator=generator, dtype=torch.float64
    )
    feature_map = RandomFeatures("slice-block", features=("final", "ppv"), width=256, seed=0).fit(times, values)
    assert feature_map.memory == "oscillation"  # slice-block's "auto"
    states = feature_map.states(feature_map.inputs(times, values))
    assert float(states.abs().max()) < 100.0
    ppv = feature_map.transform(times, values)[:, feature_map.feature_slices_["ppv"]]
    assert float(ppv.std()) > 0.1  # the thresholds split the states


# ------------------------------------------------------------------------------------------------ learning


def _area_task(n, length=80, seed=0):
    """2-channel random walks labelled by the sign of their Lévy area; the area's sign is independent of the
    endpoints (the conditional law of Brownian Lévy area given the endpoint is symmetric), so a readout of the
    final values is at chance."""
    rng = np.random.default_rng(seed)
    X = np.cumsum(rng.normal(size=(n, length, 2)), axis=1) / np.sqrt(length)
    X = X - X[:, :1]
    increments = np.diff(X, axis=1)
    area = 0.5 * np.sum(X[:, :-1, 0] * increments[:, :, 1] - X[:, :-1, 1] * increments[:, :, 0], axis=1)
    return X, (area > 0).astype(int)


def test_a_random_linear_cde_solves_a_task_of_the_signatures_second_level():
    X, y = _area_task(400, seed=0)
    X_test, y_test = _area_task(300, seed=1)
    clf = RandomFeatureClassifier("slice-diag", features=("final",), width=256, random_state=0).fit(X, y)
    accuracy = clf.score(X_test, y_test)
    raw = RidgeReadout(classification=True).fit(X[:, -1], y)
    raw_accuracy = float((raw.predict(X_test[:, -1]).numpy() == y_test).mean())
    assert accuracy >= 0.85, accuracy
    assert raw_accuracy <= 0.65 and accuracy >= raw_accuracy + 0.25, (accuracy, raw_accuracy)


def test_regressor_learns_a_path_functional():
    rng = np.random.default_rng(0)
    X = [rng.normal(size=(int(rng.integers(30, 50)), 1)).cumsum(axis=0) * 0.3 for _ in range(150)]
    y = np.array([x[:, 0].mean() for x in X])  # the mean level: linear in the states' "values"
    regressor = RandomFeatureRegressor("slice-diag", features=("mean", "values"), width=64, random_state=0)
    regressor.fit(X[:100], y[:100])
    assert regressor.score(X[100:], y[100:]) > 0.95
    assert regressor.predict(X[100:]).shape == (50,)
    two = RandomFeatureRegressor("slice-diag", features=("values",), random_state=0).fit(X[:100], np.c_[y, -y][:100])
    assert two.predict(X[100:]).shape == (50, 2) and two.n_outputs_ == 2


# ------------------------------------------------------------------------------------------------ estimators

WAIVED = {
    "check_n_features_in": (
        "n_features_in_ counts channels: a 2-D X (N, T) is N univariate sequences, so it is 1, not X.shape[1]",
        "",
    ),
    "check_n_features_in_after_fitting": (
        "as check_n_features_in; and another number of time steps at prediction is valid for a sequence model",
        "does not set the `n_features_in_` attribute",
    ),
    "check_classifiers_train": (
        "`predict(X.T)` must raise, but X.T is 2 valid univariate sequences of 300 steps",
        "number of features in predict is different from the number of features in fit",
    ),
}


@pytest.mark.parametrize(
    "estimator, waived",
    [
        (RandomFeatureClassifier("slice-diag", width=16), WAIVED),
        (RandomFeatureClassifier("slice-diag", width=16, fine_tune={"epochs": 1, "validation_fraction": 0.3}), WAIVED),
        # the states at every step: check_regressors_train's target is linear in one step's value
        (
            RandomFeatureRegressor("slice-diag", width=16, features=("times", "values"), num_times=9),
            {k: v for k, v in WAIVED.items() if k != "check_classifiers_train"},
        ),
    ],
    ids=["classifier", "classifier-fine-tuned", "regressor"],
)
def test_scikit_learn_estimator_checks(estimator, waived):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(
            estimator, on_fail=None, on_skip=None, expected_failed_checks={k: v[0] for k, v in waived.items()}
        )
    failed = [f"{r['check_name']}: {r['exception']}" for r in results if r["status"] == "failed"]
    assert not failed, "\n".join(failed)
    ran = {r["check_name"] for r in results if r["status"] == "passed"}
    assert len(ran) > 40
    assert {"check_estimators_pickle", "check_fit_idempotent", "check_methods_subset_invariance"} <= ran
    for r in results:
        if r["check_name"] in waived:
            assert r["status"] == "xfail", r["check_name"]
            assert waived[r["check_name"]][1] in str(r["exception"]), (r["check_name"], r["exception"])


def test_a_pickled_estimator_names_the_package_not_the_room_its_classes_live_in():
    """Pickles name a class by its module: the fitted classes carry the package's path, which stays importable when
    the package's rooms move (a pickle naming neuralde_seq.random_features.estimators would break with the room)."""
    import pickle
    import re

    rng = np.random.default_rng(3)
    X, y = rng.standard_normal((8, 12, 2)), np.array(["a", "b"] * 4)
    clf = RandomFeatureClassifier(width=8, random_state=0).fit(X, y)
    blob = pickle.dumps(clf)
    paths = set(re.findall(rb"neuralde_seq\.random_features[\w.]*", blob))
    assert paths == {b"neuralde_seq.random_features"}  # the estimator, its feature map and its readout
    np.testing.assert_array_equal(pickle.loads(blob).decision_function(X), clf.decision_function(X))


def test_every_reservoir_reads_ragged_series_with_their_own_times_and_string_labels():
    rng = np.random.default_rng(0)
    X = [rng.normal(size=(int(rng.integers(8, 20)), 2)) for _ in range(24)]
    y = np.array(["up" if x[:, 0].sum() > 0 else "down" for x in X])
    times = [np.cumsum(rng.uniform(0.5, 2.0, len(x))) * 100 for x in X]  # raw units: the reservoir rescales them
    order = np.arange(24)[::-1]
    for reservoir in RESERVOIRS:
        options = {"solver": {"method": "exact"}} if reservoir in ("delta-rde", "hebb-rde") else None
        clf = RandomFeatureClassifier(
            reservoir,
            features=("final", "values") if reservoir == "logsignature" else ("final", "mean", "ppv"),
            model_options=options,
            random_state=0,
            batch_size=5,
        )
        clf.fit(X, y, times=times)
        decision = clf.decision_function(X, times=times)
        assert np.isfinite(decision).all() and decision.shape == (24,), reservoir
        # the readout fits its training series (features that tell them apart; the majority class is 54 %), labels
        # mapped back
        assert clf.score(X, y, times=times) >= 0.75, reservoir
        assert set(clf.predict(X, times=times)) <= {"up", "down"}
        # a series' output does not depend on the others in its batch
        reordered = clf.decision_function([X[i] for i in order], times=[times[i] for i in order])
        np.testing.assert_allclose(reordered, decision[order], rtol=1e-4, atol=1e-4, err_msg=reservoir)


def test_random_state_float64_and_global_rng_untouched():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(20, 15, 1))
    y = np.arange(20) % 2
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    a = RandomFeatureClassifier("ncde", random_state=7, dtype="float64").fit(X, y)
    assert torch.equal(torch.random.get_rng_state(), state)
    b = RandomFeatureClassifier("ncde", random_state=7, dtype="float64").fit(X, y)
    c = RandomFeatureClassifier("ncde", random_state=8, dtype="float64").fit(X, y)
    assert a.feature_map_.model_.readout.weight.dtype == torch.float64
    np.testing.assert_array_equal(a.random_features(X), b.random_features(X))
    assert not np.array_equal(a.random_features(X), c.random_features(X))


def test_bad_parameters_raise_naming_them():
    X = np.random.default_rng(0).normal(size=(10, 12))
    y = np.arange(10) % 2
    cases = [
        (dict(reservoir="gru-d"), "reservoir must be one of"),
        (dict(features=("final", "nonsense")), "features"),
        (dict(features="final"), "features must be a non-empty sequence"),
        (dict(reservoir="logsignature", features=("ppv",)), "features of reservoir 'logsignature'"),
        (dict(width=0), "width must be a positive integer"),
        (dict(num_times=0), "num_times"),
        (dict(input_scale=-1.0), "input_scale"),
        (dict(fast_share=1.0), "fast_share must be"),
        (dict(reservoir="slice-diag", fast_share=0.1), "fast_share makes a share"),
        (dict(reservoir="ncde", timescales=(2.0, 10.0)), "timescales applies to the linear CDE"),
        (dict(timescales=(5.0, 2.0)), "timescales must be"),
        (dict(timescales=(2.0, 5.0), control_options={"time_channel": False}), "time channel"),
        (dict(memory="spiral"), "memory must be"),
        (dict(reservoir="slice-diag", memory="oscillation"), "memory='oscillation' pairs units"),
        (dict(reservoir="slice-block", memory="oscillation", model_options={"block_size": 4}), "block_size"),
        (dict(reservoir="slice-block", memory="oscillation", timescales=None), "memory='oscillation' spreads"),
        (dict(reservoir="slice-block", memory="oscillation", control_options={"time_channel": False}), "time channel"),
        (dict(alphas=(0.0,)), "alphas"),
        (dict(control_options={"time_unit": 10.0}), "time_unit does not apply"),
        (dict(model_options=[1]), "model_options must be a dict"),
        (dict(reservoir="logsignature", model_options={"hidden": 3}), "model_options of reservoir 'logsignature'"),
        (dict(dtype="float16"), "dtype"),
    ]
    for params, message in cases:
        with pytest.raises((ValueError, TypeError), match=message):
            RandomFeatureClassifier(**params).fit(X, y)
    with pytest.raises(ValueError, match="channel"):
        RandomFeatureClassifier(width=8).fit(X, y).predict(np.random.default_rng(1).normal(size=(3, 12, 2)))


def test_overflowing_states_raise_a_clear_error():
    X = np.random.default_rng(0).normal(size=(8, 200, 1)).cumsum(axis=1)
    y = np.arange(8) % 2
    with pytest.raises(ValueError, match="input_scale"):
        RandomFeatureClassifier(
            "slice-dense",
            width=16,
            input_scale=1e4,
            timescales=None,
            model_options={"init_scale": 50.0},
            features=("final",),
        ).fit(X, y)


# ------------------------------------------------------------------------------------------------ probabilities


def _noisy_levels(n, num_classes, seed, length=20):
    """Univariate random walks labelled by the quantile bin of their final value, a fifth of the labels redrawn at
    random: a task the readout learns but whose leave-one-out decisions do not separate."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, length, 1)).cumsum(axis=1)
    edges = np.quantile(X[:, -1, 0], np.arange(1, num_classes) / num_classes)
    y = np.digitize(X[:, -1, 0], edges)
    redrawn = rng.random(n) < 0.2
    y[redrawn] = rng.integers(0, num_classes, int(redrawn.sum()))
    return X, y


def _leave_one_out_log_loss(decision, codes, temperature):
    """Mean log-loss of softmax(decision / T), written out: σ(d / T) for the second class with one column."""
    if decision.ndim == 1:
        log_p = np.where(codes == 1, log_expit(decision / temperature), log_expit(-decision / temperature))
        return float(-log_p.mean())
    return float(-log_softmax(decision / temperature, axis=1)[np.arange(len(codes)), codes].mean())


@pytest.mark.parametrize("num_classes", [2, 4])
def test_classifier_probabilities_sum_to_one_and_their_argmax_is_predict(num_classes):
    X, y = _noisy_levels(70, num_classes, seed=num_classes)
    labels = np.array(["low", "mid", "high", "top"])[y]  # classes_ sorted as strings, not as the levels
    clf = RandomFeatureClassifier("slice-diag", width=32, random_state=0)
    with pytest.raises(NotFittedError):
        clf.predict_proba(X)
    clf.fit(X[:50], labels[:50])
    probabilities = clf.predict_proba(X[50:])
    assert probabilities.shape == (20, num_classes) and probabilities.dtype == np.float64
    assert bool(((probabilities >= 0) & (probabilities <= 1)).all())
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(clf.classes_[probabilities.argmax(axis=1)], clf.predict(X[50:]))
    # the formula, columns following classes_: σ(d / T) for classes_[1], softmax(D / T) of the one-vs-all columns
    decision, temperature = clf.decision_function(X[50:]), clf.probability_temperature_
    if num_classes == 2:
        np.testing.assert_allclose(probabilities[:, 1], 1 / (1 + np.exp(-decision / temperature)), rtol=1e-12)
    else:
        weights = np.exp((decision - decision.max(axis=1, keepdims=True)) / temperature)
        np.testing.assert_allclose(probabilities, weights / weights.sum(axis=1, keepdims=True), rtol=1e-12)
    # not the feature map's "ppv" temperature, which stays 0 without fine-tuning
    assert clf.feature_map_.temperature_ == 0.0 and 0 < temperature != 1.0


@pytest.mark.parametrize("task", ["three classes", "regression"])
@pytest.mark.parametrize("standardize", [False, True])
@pytest.mark.parametrize("n, p", [(15, 6), (15, 40)], ids=["samples>features", "samples<features"])
def test_ridge_leave_one_out_decisions_are_the_refits_without_each_sample(n, p, standardize, task):
    rng = np.random.default_rng(p + 100 * standardize)
    F = rng.normal(size=(n, p)) * rng.uniform(0.5, 3.0, size=p) + rng.normal(size=p)
    if task == "regression":
        targets, classification = F @ rng.normal(size=p) + rng.normal(size=n), False
    else:
        targets, classification = np.arange(n) % 3 * 2 + 1, True  # 5 of each of the labels 1, 3, 5
    readout = RidgeReadout(0.8, classification=classification, standardize=standardize).fit(F, targets)
    leave_one_out = readout.leave_one_out_decision_function()
    assert leave_one_out.dtype == torch.float64
    assert leave_one_out.shape == readout.decision_function(F).shape  # (N,) or (N, 3), as decision_function
    # the standardisation stays that of all N samples (as RidgeCV's): refit on features standardised once
    basis = _standardised(F) if standardize else F
    for i in range(n):
        keep = np.arange(n) != i
        refit = RidgeReadout(0.8, classification=classification, standardize=False).fit(basis[keep], targets[keep])
        np.testing.assert_allclose(
            leave_one_out[i].numpy(), refit.decision_function(basis[i : i + 1])[0].numpy(), rtol=0, atol=1e-8
        )
    # and they are not the in-sample decisions
    assert float((leave_one_out - readout.decision_function(F)).abs().max()) > 1e-3


@pytest.mark.parametrize("num_classes", [2, 3])
def test_probability_temperature_minimises_the_leave_one_out_log_loss(num_classes):
    X, y = _noisy_levels(60, num_classes, seed=10 + num_classes)
    clf = RandomFeatureClassifier("slice-diag", width=32, random_state=1).fit(X, y)
    decision = clf.readout_.leave_one_out_decision_function().numpy()
    codes = np.searchsorted(clf.classes_, y)
    fitted = _leave_one_out_log_loss(decision, codes, clf.probability_temperature_)
    grid = np.geomspace(1e-3, 1e3, 6001)
    losses = np.array([_leave_one_out_log_loss(decision, codes, t) for t in grid])
    best = int(np.argmin(losses))
    assert 0 < best < len(grid) - 1  # an interior minimum: the comparison means something
    assert losses[best] >= fitted - 1e-12, (grid[best], clf.probability_temperature_)
    assert clf.probability_temperature_ == pytest.approx(grid[best], rel=3e-3)
    # the in-sample decisions would call for a colder (more confident) temperature
    in_sample = clf.decision_function(X)
    assert min(_leave_one_out_log_loss(in_sample, codes, t) for t in grid) < fitted


def test_probability_temperature_stays_in_its_range_where_the_log_loss_has_no_minimum():
    codes = torch.tensor([0, 0, 1, 1])
    # separated: the log-loss falls as T goes to 0; T stops where the largest decision's logit is 30
    assert _fit_probability_temperature(
        torch.tensor([-2.0, -1.0, 1.0, 2.0], dtype=torch.float64), codes
    ) == pytest.approx(2.0 / 30)
    # inverted: it falls as T grows; T stops at 1,000 times the largest decision (probabilities near uniform)
    assert _fit_probability_temperature(
        torch.tensor([2.0, 1.0, -1.0, -2.0], dtype=torch.float64), codes
    ) == pytest.approx(2000.0)
    # no information at all: any T gives the same probabilities
    assert _fit_probability_temperature(torch.zeros(4, 3, dtype=torch.float64), torch.tensor([0, 1, 2, 0])) == 1.0


@pytest.mark.parametrize("num_classes", [2, 3])
def test_predict_log_proba_is_the_log_of_predict_proba(num_classes):
    X, y = _noisy_levels(50, num_classes, seed=20 + num_classes)
    clf = RandomFeatureClassifier("slice-diag", width=32, random_state=2).fit(X[:35], y[:35])
    probabilities, log_probabilities = clf.predict_proba(X[35:]), clf.predict_log_proba(X[35:])
    assert log_probabilities.shape == probabilities.shape
    not_tiny = probabilities > 1e-10
    np.testing.assert_allclose(log_probabilities[not_tiny], np.log(probabilities[not_tiny]), rtol=0, atol=1e-12)
    # computed stably: at a temperature that underflows the probabilities, the logs stay finite and normalised
    clf.probability_temperature_ = 1e-5
    assert (clf.predict_proba(X[35:]) == 0).any()
    log_probabilities = clf.predict_log_proba(X[35:])
    assert np.isfinite(log_probabilities).all()
    np.testing.assert_allclose(np.logaddexp.reduce(log_probabilities, axis=1), 0.0, rtol=0, atol=1e-12)
