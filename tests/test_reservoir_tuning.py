"""Tests of fine-tuned random features (neuralde_seq.reservoir_tuning): the differentiable leave-one-out error
against the closed-form readout's and its definition, the smooth "ppv" against the exact one as the temperature
goes to 0, the untrained network against the random-feature model's predictions (float64), the selection against
the start, gradients reaching a CT-FWP reservoir's rule, and the estimators' conventions with the new parameter
(scikit-learn's estimator checks with fine-tuning: tests/test_random_features.py)."""

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge
from sklearn.model_selection import cross_val_score

from neuralde_seq.random_features import RidgeReadout, positive_proportion
from neuralde_seq.reservoir_tuning import (
    FineTuning,
    ReservoirNetwork,
    RidgeLeaveOneOut,
    improves,
    paired_improvement,
    ridge_leave_one_out_error,
)
from neuralde_seq.sklearn import RandomFeatureClassifier, RandomFeatureRegressor


def _series(n, length, seed, classes=2):
    """Noisy sines whose class sets the frequency; ragged lengths, some values missing."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for i in range(n):
        label = i % classes
        t = np.arange(length - rng.integers(0, 5))
        x = np.sin(t * (0.2 + 0.15 * label) + rng.uniform(0, 6)) + 0.3 * rng.normal(size=t.size)
        x[rng.random(t.size) < 0.1] = np.nan
        x[0] = 0.0
        X.append(x[:, None])
        y.append(label)
    return X, np.array(y)


# ------------------------------------------------------------------------------------------- leave-one-out error


@pytest.mark.parametrize("n, p", [(12, 30), (40, 5)], ids=["samples<features", "samples>features"])
def test_leave_one_out_error_equals_the_readouts_cross_validation(n, p):
    rng = np.random.default_rng(n)
    Z = torch.tensor(rng.normal(size=(n, p)))
    Y = torch.tensor(rng.normal(size=(n, 3)))
    readout = RidgeReadout(0.7, standardize=False).fit(Z, Y)
    assert float(ridge_leave_one_out_error(Z, Y, 0.7)) == pytest.approx(float(readout.cv_errors_[0]), rel=1e-10)


def test_leave_one_out_error_is_the_refitted_error_and_has_exact_gradients():
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(9, 4))
    Y = rng.normal(size=(9, 2))
    errors = []
    for i in range(9):  # its definition: refit without sample i, predict it
        keep = np.arange(9) != i
        errors.append((Ridge(alpha=0.3, solver="cholesky").fit(Z[keep], Y[keep]).predict(Z[i : i + 1])[0] - Y[i]) ** 2)
    value = ridge_leave_one_out_error(torch.tensor(Z), torch.tensor(Y), 0.3)
    assert float(value) == pytest.approx(np.mean(errors), rel=1e-9)
    features = torch.tensor(Z, requires_grad=True)
    assert torch.autograd.gradcheck(lambda F: ridge_leave_one_out_error(F, torch.tensor(Y), 0.3), (features,))
    with pytest.raises(ValueError, match="at least 3 samples"):
        ridge_leave_one_out_error(features[:2], torch.tensor(Y[:2]), 0.3)


# ------------------------------------------------------------------------------------------- smooth "ppv"


def test_smooth_proportion_tends_to_the_exact_one_as_the_temperature_goes_to_zero():
    generator = torch.Generator().manual_seed(0)
    states = torch.randn(3, 50, 6, generator=generator, dtype=torch.float64)
    inside = torch.ones(3, 50, 1, dtype=torch.float64)
    inside[1, 35:] = 0  # a shorter sample
    biases = torch.randn(2, 6, generator=generator, dtype=torch.float64) * 0.5
    spreads = torch.rand(6, generator=generator, dtype=torch.float64) + 0.5
    exact = positive_proportion(states, inside, biases)
    # written out: the share of each sample's knots above each threshold
    written = np.zeros((3, 12))
    for b in range(3):
        knots = 35 if b == 1 else 50
        for k in range(2):
            written[b, k * 6 : (k + 1) * 6] = (states[b, :knots].numpy() > biases[k].numpy()).mean(axis=0)
    np.testing.assert_allclose(exact.numpy(), written, rtol=0, atol=1e-15)
    errors = [
        float((positive_proportion(states, inside, biases, spreads, t) - exact).abs().max())
        for t in (1.0, 0.1, 0.01, 1e-3, 1e-5)
    ]
    assert all(later < earlier for earlier, later in zip(errors, errors[1:])), errors
    assert errors[0] > 0.05 and errors[-1] < 1e-6


# ------------------------------------------------------------------------------------------- the untrained network


@pytest.mark.parametrize(
    "reservoir, options, length",
    [
        ("slice-block", {"width": 32}, 60),
        ("delta-rde", {"width": 16}, 60),
        ("slice-diag", {"width": 24, "features": ("ppv", "mean", "values")}, 60),
        ("slice-block", {"width": 32}, 1500),
        ("delta-rde", {"width": 16}, 1500),
    ],  # the lengths users run too
    ids=["oscillators", "ct-fwp", "decay-with-values", "oscillators-1500", "ct-fwp-1500"],
)
def test_untrained_network_gives_the_random_feature_models_decisions(reservoir, options, length):
    X, y = _series(30, length, seed=1, classes=3)
    model = RandomFeatureClassifier(reservoir, random_state=0, dtype="float64", **options).fit(X, y)
    feature_map, readout = model.feature_map_, model.readout_
    arguments = feature_map.model_arguments(model._data(X, None))
    expected = model.decision_function(X)
    # the surrogate at its limit: temperature 0 (the exact step) and a vanishing one
    for temperature in (0.0, 1e-12):
        network = ReservoirNetwork(feature_map, readout.feature_mean_, readout.feature_scale_, temperature)
        with torch.no_grad():
            Z = network(*arguments.args)
        decisions = (Z @ readout._weights + readout._target_mean).numpy()
        np.testing.assert_allclose(decisions, expected, rtol=1e-10, atol=1e-10)
    # the network's parameters are copies: the fitted map is left frozen
    assert all(not p.requires_grad for p in feature_map.model_.parameters())
    assert all(p.requires_grad for p in network.reservoir.parameters())


def test_leave_one_out_gradients_reach_every_parameter_of_a_ct_fwp_reservoir():
    X, y = _series(16, 40, seed=2)
    model = RandomFeatureClassifier("delta-rde", width=16, random_state=0, dtype="float64").fit(X, y)
    feature_map, readout = model.feature_map_, model.readout_
    arguments = feature_map.model_arguments(model._data(X, None))
    network = ReservoirNetwork(feature_map, readout.feature_mean_, readout.feature_scale_, 0.05)
    Z = network(*arguments.args)
    targets = torch.where(torch.as_tensor(y)[:, None] == 1, 1.0, -1.0).to(torch.float64)
    ridge_leave_one_out_error(Z, targets, readout.alpha_).backward()
    learning = {name for name, p in network.named_parameters() if p.grad is not None and bool(p.grad.abs().sum() > 0)}
    # the thresholds, the input projection and the slow net's keys, values and learning rates (the rule's rates)
    # learn; what reads the fast weights out (queries, output projection, feed-forward, head) is not the reservoir's
    # state and gets none
    prefix = "reservoir.network.layers.0."
    assert learning == {"biases"} | {
        prefix + f"field.{n}.{w}" for n in ("input_proj", "input_norm", "slow") for w in ("weight", "bias")
    }


# ------------------------------------------------------------------------------------------- selection


def _fitted(X, y, **options):
    return RandomFeatureClassifier("slice-block", width=32, random_state=0, dtype="float64", **options).fit(X, y)


def test_fine_tuned_model_is_kept_only_when_it_beats_the_start_on_validation():
    X, y = _series(40, 50, seed=3)
    # "ppv" alone: a step of 1e-12 moves no proportion (a step function of the thresholds), so the second setting is
    # an exact tie; "mpv" (a default feature) is continuous in them and would move by about the step
    plain = _fitted(X, y, features=("ppv",))
    # trained, and a step too small to move at a temperature where the stand-in is the exact feature: a tie
    chosen = []
    for settings in ({"epochs": 3, "lr": 0.02}, {"epochs": 1, "lr": 1e-12, "temperature": 1e-9}):
        tuned = _fitted(X, y, features=("ppv",), fine_tune=settings)
        report = tuned.fine_tuning_
        chosen.append(report["chosen"])
        start, best = report["start"], report["best"]
        assert report["train_size"] + report["validation_size"] == 40
        margin = FineTuning.read(settings).margin * (report["paired"]["standard_error"] if best else 0.0)
        better = best is not None and best["loss"] < start["loss"] - margin and best["accuracy"] >= start["accuracy"]
        assert report["chosen"] == ("fine-tuned" if better else "start")
        if report["chosen"] == "start":
            # the start is the random-feature model itself
            np.testing.assert_array_equal(tuned.decision_function(X), plain.decision_function(X))
        else:
            assert tuned.feature_map_.temperature_ == FineTuning.read(settings).temperature
            assert not np.allclose(tuned.decision_function(X), plain.decision_function(X))
            # the readout is refitted on every series' features of the chosen map
            refit = RidgeReadout(tuned.alphas, classification=True).fit(
                tuned.random_features(X), torch.as_tensor(np.searchsorted(tuned.classes_, y))
            )
            np.testing.assert_allclose(
                tuned.decision_function(X),
                refit.decision_function(tuned.random_features(X)).numpy(),
                rtol=1e-9,
                atol=1e-9,
            )
    assert chosen == ["fine-tuned", "start"]  # both branches are exercised


def test_a_step_too_small_to_learn_keeps_the_start_with_mpv():
    # "mpv" (a default feature) is continuous in the thresholds: a step of 1e-12 moved the validation error by
    # rounding (0.0857183022376 → 0.0857183022370), and that counted as an improvement at margin 0
    X, y = _series(40, 50, seed=3)
    plain = _fitted(X, y, features=("ppv", "mpv"))
    tuned = _fitted(X, y, features=("ppv", "mpv"), fine_tune={"epochs": 1, "lr": 1e-12, "temperature": 1e-9})
    assert tuned.fine_tuning_["chosen"] == "start"
    np.testing.assert_array_equal(tuned.decision_function(X), plain.decision_function(X))


def test_the_fine_tuned_map_improves_only_where_both_validation_scores_agree():
    start = {"accuracy": 0.8, "loss": 0.30}
    assert improves({"accuracy": 0.8, "loss": 0.29}, start, classification=True)
    assert improves({"accuracy": 0.9, "loss": 0.20}, start, classification=True)
    assert not improves({"accuracy": 0.9, "loss": 0.31}, start, classification=True)  # more right, less sure: noise
    assert not improves({"accuracy": 0.7, "loss": 0.10}, start, classification=True)
    assert not improves({"accuracy": 0.8, "loss": 0.30}, start, classification=True)  # a tie keeps the start
    assert improves({"loss": 0.29}, {"loss": 0.30}, classification=False)
    assert not improves({"loss": 0.30}, {"loss": 0.30}, classification=False)
    # a decrease at the level of rounding is a tie, whatever the margin (0 by default)
    assert not improves({"accuracy": 0.8, "loss": 0.30 * (1 - 1e-9)}, start, classification=True)
    assert not improves({"loss": 0.30 * (1 - 1e-9)}, {"loss": 0.30}, classification=False)
    assert improves({"loss": 0.30 * (1 - 1e-5)}, {"loss": 0.30}, classification=False)
    # a decrease of 0.01 is kept against a standard error of 0.009 at margin 1, not at margin 2
    assert improves({"loss": 0.29}, {"loss": 0.30}, False, standard_error=0.009, margin=1.0)
    assert not improves({"loss": 0.29}, {"loss": 0.30}, False, standard_error=0.009, margin=2.0)
    assert not improves({"accuracy": 0.9, "loss": 0.29}, start, True, standard_error=0.011, margin=1.0)


def test_paired_improvement_is_the_mean_difference_and_its_standard_error():
    rng = np.random.default_rng(7)
    start_errors, best_errors = rng.random(23), rng.random(23)
    paired = paired_improvement(torch.as_tensor(start_errors), torch.as_tensor(best_errors))
    difference = start_errors - best_errors
    assert paired["improvement"] == pytest.approx(difference.mean(), rel=1e-12)
    # written out: the sample standard deviation (n - 1) over the square root of n
    se = np.sqrt(((difference - difference.mean()) ** 2).sum() / 22) / np.sqrt(23)
    assert paired["standard_error"] == pytest.approx(se, rel=1e-12)


def test_the_reported_paired_statistic_is_that_of_the_validation_errors():
    X, y = _series(40, 50, seed=3)
    tuned = _fitted(X, y, fine_tune={"epochs": 3, "lr": 0.02, "margin": 0.0})
    report = tuned.fine_tuning_
    # the per-series errors average to the validation losses the selection compared
    assert report["paired"]["improvement"] == pytest.approx(
        report["start"]["loss"] - report["best"]["loss"], rel=1e-9, abs=1e-12
    )


def test_selection_compares_the_validation_score_of_a_readout_fitted_on_the_training_part():
    X, y = _series(24, 40, seed=4)
    model = _fitted(X, y)
    feature_map, readout = model.feature_map_, model.readout_
    # the control and the path's own features ("levels", a default feature)
    inputs = feature_map.model_arguments(model._data(X, None))
    targets = torch.where(torch.as_tensor(y)[:, None] == 1, 1.0, -1.0).to(torch.float64)
    network = ReservoirNetwork(feature_map, readout.feature_mean_, readout.feature_scale_, 0.0)
    train, val = torch.arange(16), torch.arange(16, 24)
    objective = RidgeLeaveOneOut(
        readout.alpha_,
        (inputs[train], targets[train]),
        classification=True,
        alphas=readout.alphas,
        batch_size=8,
        readout_type=RidgeReadout,
    )
    metrics = objective.evaluate(network, inputs[val], targets[val], 8)
    # written out: ridge on the training part's standardised features, scored on the validation part
    with torch.no_grad():
        Z = network(*inputs.args)
    ridge = RidgeReadout(readout.alphas, standardize=False).fit(Z[train], targets[train])
    decisions = ridge.decision_function(Z[val])[:, 0]
    assert metrics["loss"] == pytest.approx(float((decisions - targets[val, 0]).square().mean()), rel=1e-12)
    assert metrics["accuracy"] == pytest.approx(float(((decisions > 0) == (targets[val, 0] > 0)).double().mean()))


def test_regressor_fine_tunes_and_reports_the_selection():
    X, _ = _series(30, 40, seed=5)
    y = np.array([np.nanmean(x[-10:]) for x in X])
    model = RandomFeatureRegressor("slice-block", width=32, random_state=0, fine_tune={"epochs": 2}).fit(X, y)
    report = model.fine_tuning_
    assert "accuracy" not in report["start"]
    if report["chosen"] == "fine-tuned":
        assert report["best"]["loss"] < report["start"]["loss"]
    else:
        assert report["best"] is None or report["best"]["loss"] >= report["start"]["loss"]
    assert model.predict(X).shape == (30,)


# ------------------------------------------------------------------------------------------- parameters


def test_fine_tuning_settings_are_checked_naming_the_field():
    assert FineTuning.read(None) is None and FineTuning.read(False) is None
    assert FineTuning.read(True) == FineTuning()
    assert FineTuning.read({"epochs": 3}).epochs == 3
    with pytest.raises(ValueError, match="epoch.*did you mean 'epochs'"):
        FineTuning.read({"epoch": 3})
    for field, value in (
        ("epochs", 0),
        ("lr", -1.0),
        ("temperature", float("nan")),
        ("validation_fraction", 1.0),
        ("batch_size", True),
        ("margin", -0.5),
        ("margin", float("inf")),
    ):
        with pytest.raises(ValueError, match=f"fine_tune {field}"):
            FineTuning.read({field: value})
    with pytest.raises(TypeError, match="fine_tune must be"):
        FineTuning.read("yes")
    X, y = _series(12, 30, seed=6)
    with pytest.raises(ValueError, match="fine_tune epochs"):
        RandomFeatureClassifier(width=8, fine_tune={"epochs": -1}).fit(X, y)
    with pytest.raises(ValueError, match="no parameters to fine-tune"):
        RandomFeatureClassifier("logsignature", fine_tune=True).fit(X, y)
    with pytest.raises(ValueError, match="at least 4 training and 2 validation"):
        RandomFeatureClassifier(width=8, fine_tune={"validation_fraction": 0.05}).fit(X[:6], y[:6])


def test_fine_tuning_estimator_cross_validates():
    from sklearn.base import clone
    from sklearn.model_selection import StratifiedKFold

    X, y = _series(30, 40, seed=7)
    estimator = RandomFeatureClassifier(width=16, random_state=0, fine_tune={"epochs": 1, "lr": 0.05})
    assert clone(estimator).get_params()["fine_tune"] == {"epochs": 1, "lr": 0.05}
    scores = cross_val_score(estimator, X, y, cv=StratifiedKFold(3))
    # the same folds by hand: each fit fine-tunes with the settings given
    by_hand = []
    for train, test in StratifiedKFold(3).split(np.zeros(len(y)), y):
        fitted = clone(estimator).fit([X[i] for i in train], y[train])
        assert fitted.fine_tuning_["history"]["epochs_run"] == 1
        by_hand.append(fitted.score([X[i] for i in test], y[test]))
    np.testing.assert_array_equal(scores, by_hand)
