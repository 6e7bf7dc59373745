"""Tests of the scikit-learn estimators (neuralde_seq.sklearn): scikit-learn's own estimator checks, model
selection, label and target mapping, the equivalence with a direct fit, and input errors."""

import pickle
import warnings

import joblib
import numpy as np
import pytest
import sklearn
import torch
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.metrics import log_loss
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.utils.estimator_checks import check_estimator, check_regressors_train

from neuralde_seq import MODEL_NAMES, Classification, create_model, fit, model_inputs
from neuralde_seq.data import fill_gaps, from_arrays, median_step, standardise
from neuralde_seq.models import model_entry
from neuralde_seq.sklearn import RandomFeatureClassifier, SequenceClassifier, SequenceRegressor
from neuralde_seq.training.input_spec import UnobservedChannelWarning
from neuralde_seq.training.objectives import predict as predict_outputs

nan = np.nan
FAST = dict(model_options={"hidden": 8}, epochs=2, lr=0.02, batch_size=16)
# every training lever off its default (tests/test_estimator_levers.py), small enough for scikit-learn's checks:
# two members of at most 12 steps each
LEVERS = dict(
    model_options={"hidden": 8},
    lr=0.02,
    batch_size=16,
    epochs="auto",
    max_steps=12,
    augment_crop=0.7,
    augment_drop_rate=0.2,
    ensemble=2,
    weight_decay=1e-3,
)


def _ragged(n, seed, classes=3, channels=2, shift=1.5):
    """n ragged sequences (6 to 12 steps, a quarter of the values missing, the first step observed) whose class
    k shifts channel 0 by shift·(k − mean class); labels 0..classes-1 in turn."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    X = []
    for k in y:
        x = rng.normal(size=(int(rng.integers(6, 13)), channels))
        x[:, 0] += shift * (k - (classes - 1) / 2)
        missing = rng.random(x.shape) < 0.25
        missing[0] = False
        x[missing] = nan
        X.append(x)
    times = [np.cumsum(rng.uniform(0.5, 1.5, len(x))) for x in X]
    return X, y, times


# ---------------------------------------------------------------------------------------- scikit-learn checks
# Checks waived, with the reason, and the text of the failure that shows the reason still holds.
WAIVED = {
    "check_n_features_in": (
        "n_features_in_ counts channels: a 2-D X (N, T) is N univariate sequences, so it is 1, not X.shape[1] "
        "(test_2d_X_is_n_univariate_sequences)",
        "",
    ),
    "check_n_features_in_after_fitting": (
        "as check_n_features_in; and another number of time steps at prediction is valid for a sequence model",
        "does not set the `n_features_in_` attribute",
    ),
    "check_classifiers_train": (
        "passes up to its last step, `predict(X.T)` must raise: X.T is 2 valid univariate sequences of 300 steps "
        "(test_classifier_learns_blobs repeats the rest)",
        "number of features in predict is different from the number of features in fit",
    ),
}
REGRESSOR_WAIVED = {
    **{k: v for k, v in WAIVED.items() if k != "check_classifiers_train"},
    "check_regressors_train": (
        "R² > 0.5 needs more than this fast instance's 2 epochs: run with 30 epochs in "
        "test_regressor_passes_check_regressors_train",
        "",
    ),
}


@pytest.mark.parametrize(
    "estimator, waived",
    [
        (SequenceClassifier("gru-dt", **FAST), WAIVED),
        (SequenceRegressor("gru-dt", **FAST), REGRESSOR_WAIVED),
        (SequenceClassifier("gru-dt", **LEVERS), WAIVED),
        (SequenceRegressor("gru-dt", **LEVERS), REGRESSOR_WAIVED),
    ],
    ids=["classifier", "regressor", "classifier-levers", "regressor-levers"],
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
    assert (
        len(ran) > 40
        and {
            "check_estimators_pickle",
            "check_fit_idempotent",
            "check_methods_subset_invariance",
            "check_classifiers_classes" if "check_classifiers_train" in waived else "check_regressor_multioutput",
        }
        <= ran
    )
    # Every waiver is still needed, and for its stated reason.
    for r in results:
        if r["check_name"] in waived:
            assert r["status"] == "xfail", r["check_name"]
            assert waived[r["check_name"]][1] in str(r["exception"]), (r["check_name"], r["exception"])
    # the skipped ones: only the array API check that needs SCIPY_ARRAY_API set
    assert {r["check_name"] for r in results if r["status"] == "skipped"} <= {"check_array_api_input"}


def test_regressor_passes_check_regressors_train():
    regressor = SequenceRegressor("gru-dt", model_options={"hidden": 16}, epochs=30, lr=0.02, batch_size=16)
    check_regressors_train("SequenceRegressor", regressor)
    check_regressors_train("SequenceRegressor", regressor, readonly_memmap=True, X_dtype="float32")


def test_classifier_learns_blobs():
    """check_classifiers_train without its `predict(X.T)` step."""
    X, y = make_blobs(n_samples=300, random_state=0)
    X = (X - X.mean(0)) / X.std(0)
    clf = SequenceClassifier("gru-dt", **FAST, random_state=0)
    with pytest.raises(ValueError, match="y has 299 labels but X holds 300 sequences"):
        clf.fit(X, y[:-1])
    clf.fit(X.tolist(), y.tolist())
    predicted = clf.predict(X)
    assert predicted.shape == (300,) and np.mean(predicted == y) > 0.83
    proba = clf.predict_proba(X)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(1)], predicted)


def test_2d_X_is_n_univariate_sequences():
    X = np.random.default_rng(0).normal(size=(12, 5))
    y = np.arange(12) % 2
    clf = SequenceClassifier("gru-dt", **FAST, random_state=0).fit(X, y)
    assert clf.n_features_in_ == 1
    # the same sequences as a list of (T,) arrays or a (N, T, 1) array give the same predictions
    np.testing.assert_array_equal(clf.predict_proba(X), clf.predict_proba(list(X)))
    np.testing.assert_array_equal(clf.predict_proba(X), clf.predict_proba(X[:, :, None]))
    # sequences of another length are valid input of a sequence model
    assert clf.predict_proba(X[:, :3]).shape == (12, 2)
    with pytest.raises(ValueError, match=r"X has 1 feature\(s\) \(shape=\(12, 1\)\) while a minimum of 2"):
        clf.predict(X[:, :1])


# ---------------------------------------------------------------------------------------- model selection
def test_cross_val_score_on_ragged_sequences_with_nans():
    X, y, _ = _ragged(45, seed=0)
    clf = SequenceClassifier("gru-dt", model_options={"hidden": 16}, epochs=10, lr=0.03, batch_size=8, random_state=0)
    scores = cross_val_score(clf, X, y, cv=3)
    # chance is 1/3; the classes differ by 1.5 standard deviations per observation
    assert scores.mean() >= 0.8, scores


def test_times_reach_fit_and_score_through_metadata_routing():
    """The class is the sampling rate alone: only a model that receives the times at fit and at scoring can
    tell the classes apart."""
    rng = np.random.default_rng(3)
    y = np.arange(40) % 2
    X = [rng.normal(size=int(rng.integers(6, 11))) for _ in y]
    times = [
        np.cumsum(rng.uniform(0.5, 1.0, len(x)) if k == 0 else rng.uniform(2.0, 3.0, len(x))) for x, k in zip(X, y)
    ]
    clf = SequenceClassifier("gru-dt", model_options={"hidden": 8}, epochs=10, lr=0.03, batch_size=8, random_state=0)
    with sklearn.config_context(enable_metadata_routing=True):
        routed = clf.set_fit_request(times=True).set_score_request(times=True)
        with_times = cross_val_score(routed, X, y, cv=2, params={"times": times})
    without_times = cross_val_score(clf, X, y, cv=2)
    assert with_times.mean() >= 0.9, with_times
    assert without_times.mean() <= 0.75, without_times  # chance is 0.5


def test_grid_search_picks_the_learning_rate_that_learns():
    X, y, _ = _ragged(30, seed=1)
    search = GridSearchCV(
        SequenceClassifier("gru-dt", model_options={"hidden": 8}, epochs=8, batch_size=8, random_state=0),
        {"lr": [1e-6, 0.03]},
        cv=2,
    )
    search.fit(X, y)
    assert search.best_params_ == {"lr": 0.03}
    low, high = search.cv_results_["mean_test_score"]
    assert high >= 0.8 and high > low + 0.2, (low, high)
    assert search.best_estimator_.lr == 0.03 and search.best_estimator_.score(X, y) >= 0.8


def test_clone_and_set_params_round_trip():
    options = {"hidden": 8, "width": 16}
    clf = SequenceClassifier("ncde", model_options=options, epochs=1, batch_size=8, random_state=0)
    assert clf.model_options is options  # __init__ stores its arguments unchanged
    params = clf.get_params()
    copy = clone(clf)
    assert copy.get_params() == params and copy.model_options is not options
    X, y, times = _ragged(12, seed=2)
    clf.fit(X, y, times=times)
    assert clf.model_options == {"hidden": 8, "width": 16}  # fit did not add to the dict
    assert not hasattr(clone(clf), "model_")  # a clone is unfitted
    assert clf.set_params(model="gru-dt", model_options={"hidden": 5}, lr=0.01) is clf
    assert clf.get_params()["model"] == "gru-dt" and clf.get_params()["lr"] == 0.01
    clf.fit(X, y, times=times)
    assert type(clf.model_).__name__ == "GRUDeltaT" and clf.model_.hidden == 5


# ---------------------------------------------------------------------------------------- outputs
def test_string_labels_are_mapped_back_and_probabilities_sum_to_one():
    X, codes, times = _ragged(36, seed=4)
    names = np.array(["low", "mid", "high"])[codes]
    clf = SequenceClassifier(
        "gru-dt", model_options={"hidden": 16}, epochs=10, lr=0.03, batch_size=8, random_state=0
    ).fit(X, names, times=times)
    assert clf.classes_.tolist() == ["high", "low", "mid"]
    proba = clf.predict_proba(X, times=times)
    assert proba.shape == (36, 3) and proba.dtype == np.float64
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-12)
    predicted = clf.predict(X, times=times)
    np.testing.assert_array_equal(predicted, clf.classes_[proba.argmax(1)])
    # a wrong mapping between indices and labels would score near chance
    assert np.mean(predicted == names) >= 0.9 and clf.score(X, names, times=times) == np.mean(predicted == names)
    np.testing.assert_allclose(np.exp(clf.predict_log_proba(X, times=times)), proba, rtol=1e-12)
    # pickling keeps the predictions
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(clf)).predict_proba(X, times=times), proba)


def test_regressor_maps_standardised_targets_back():
    X, _, times = _ragged(60, seed=5)
    means = np.array([np.nanmean(x, axis=0) for x in X])
    y = 1000.0 * means[:, 0] + 5000.0  # far from the standardised scale
    reg = SequenceRegressor(
        "gru-dt", model_options={"hidden": 16}, epochs=20, lr=0.02, batch_size=8, random_state=0
    ).fit(X[:45], y[:45], times=times[:45])
    assert abs(reg.target_mean_[0] - y[:45].mean()) < 1e-9
    predicted = reg.predict(X[45:], times=times[45:])
    assert predicted.shape == (15,) and predicted.dtype == np.float64
    assert reg.score(X[45:], y[45:], times=times[45:]) >= 0.8
    # several targets: one output each, in y's shape
    two = np.stack([y, means[:, 1]], axis=1)
    reg2 = clone(reg).fit(X[:45], two[:45], times=times[:45])
    assert reg2.n_outputs_ == 2 and reg2.predict(X[45:], times=times[45:]).shape == (15, 2)


def test_numpy_route_equals_a_direct_fit():
    X, y, times = _ragged(16, seed=6)
    settings = dict(epochs=3, lr=0.01, batch_size=8)
    clf = SequenceClassifier("ncde", model_options={"hidden": 8, "width": 16}, random_state=7, **settings)
    clf.fit(X, y, times=times)
    # the recipe of the module docstring, written out
    (data,) = standardise(from_arrays(X, times=times))
    # the default time_unit "auto": the fit data's longest span, as the float32 data hold it
    span = float((data.times[torch.arange(len(X)), data.lengths - 1] - data.times[:, 0]).max())
    assert span == pytest.approx(max(float(t[-1] - t[0]) for t in times), rel=1e-6)
    # fill_gaps "auto": unobserved points in the gaps, to the fit data's median step (these times are uneven)
    filled = fill_gaps(data.times, data.values, data.lengths, median_step(data.times, data.lengths))
    assert filled[2].sum() > data.lengths.sum()
    inputs = model_inputs("ncde", *filled, parametrization="index", time_unit=span)
    torch.manual_seed(7)
    model = create_model("ncde", inputs, 3, hidden=8, width=16)
    history = fit(model, Classification(3), (inputs, torch.as_tensor(y)), seed=7, progress=False, **settings)
    logits = predict_outputs(model, inputs, 8).double()
    np.testing.assert_allclose(clf.predict_proba(X, times=times), torch.softmax(logits, 1).numpy(), rtol=0, atol=1e-12)
    assert clf.history_["train_loss"] == history["train_loss"]
    np.testing.assert_allclose(clf.channel_mean_, data.meta["standardise"]["mean"])


def test_every_registry_model_fits_ragged_samples_with_their_own_times():
    """Samples with different times need parametrization="index" for the control models (chosen
    automatically); each sample's answer is the same alone as in a batch of longer ones."""
    X, y, times = _ragged(8, seed=8, classes=2)
    for name in MODEL_NAMES:
        clf = SequenceClassifier(name, epochs=1, batch_size=4, random_state=0).fit(X, y, times=times)
        span = max(float(t[-1] - t[0]) for t in times)  # time_unit "auto": the fit data's longest span
        if model_entry(name).inputs == "control":
            assert clf.control_options_.keys() == {"parametrization", "time_unit"}, name
            assert clf.control_options_["parametrization"] == "index"
            assert clf.control_options_["time_unit"] == pytest.approx(span, rel=1e-6), name
        else:
            assert clf.control_options_ == {}, name
        proba = clf.predict_proba(X, times=times)
        np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-12)
        shortest = int(np.argmin([len(x) for x in X]))
        alone = clf.predict_proba([X[shortest]], times=[times[shortest]])
        np.testing.assert_allclose(alone[0], proba[shortest], atol=1e-5, err_msg=name)


def test_ragged_series_with_their_times_are_read_as_their_grid_with_nan():
    """The default fill_gaps="auto": a model fitted on the kept points of series with dropped points, with their
    times, predicts as one fitted on the same series on their grid with NaN (issue 33: without it one data set gave
    two models, benchmarks/ragged_vs_grid.py)."""
    rng = np.random.default_rng(15)
    n, length = 12, 30
    y = np.arange(n) % 2
    grids, kept, kept_times = [], [], []
    for k in y:
        x = np.sin(np.linspace(0, 3 + 2 * k, length))[:, None] + 0.1 * rng.normal(size=(length, 1))
        keep = np.sort(np.concatenate([[0, length - 1], rng.choice(np.arange(1, length - 1), 18, replace=False)]))
        grid = np.full_like(x, nan)
        grid[keep] = x[keep]
        grids.append(grid)
        kept.append(x[keep])
        kept_times.append(keep.astype(float))
    # without the default model's batch augmentation: its random crops and drops draw per stored point, and the
    # two layouts store 20 and 30 points (NaN included), so the draws differ though the inputs are the same
    settings = dict(epochs=2, batch_size=4, dtype="float64", random_state=0, augment_crop=1.0, augment_drop_rate=0.0)
    ragged = SequenceClassifier(**settings).fit(kept, y, times=kept_times)  # the default model, delta-rde
    on_grid = SequenceClassifier(**settings).fit(grids, y)
    assert ragged.model == "delta-rde" and ragged.input_spec_.fill_step == 1.0
    np.testing.assert_allclose(
        ragged.predict_proba(kept, times=kept_times), on_grid.predict_proba(grids), rtol=0, atol=1e-10
    )
    # one knot per observation instead: other inputs, other predictions
    unfilled = SequenceClassifier(fill_gaps=None, **settings).fit(kept, y, times=kept_times)
    assert unfilled.input_spec_.fill_step is None
    assert np.abs(unfilled.predict_proba(kept, times=kept_times) - on_grid.predict_proba(grids)).max() > 1e-4
    # models that read raw observations see the gaps as times: "auto" leaves them unfilled
    observations = SequenceClassifier("gru-dt", model_options={"hidden": 4}, **settings).fit(kept, y, times=kept_times)
    assert observations.input_spec_.fill_step is None


def test_validation_split_early_stopping_and_best_weights():
    """Labels that are noise: the validation loss soon stops improving, training stops after ``patience``
    epochs without improvement, and the weights of the best epoch are restored."""
    rng = np.random.default_rng(9)
    X = [rng.normal(size=(int(rng.integers(6, 13)), 2)) for _ in range(32)]
    y = rng.integers(0, 2, 32)
    clf = SequenceClassifier(
        "gru-dt",
        model_options={"hidden": 16},
        epochs=60,
        lr=0.05,
        batch_size=8,
        validation_fraction=0.25,
        patience=3,
        random_state=0,
    ).fit(X, y)
    history, held_out = clf.history_, clf.validation_index_
    assert history["stopped_by"] == "early_stopping" and history["epochs_run"] == history["best_epoch"] + 3
    assert len(held_out) == 8 and (np.abs(np.bincount(y[held_out]) - np.bincount(y) / 4) <= 0.5).all()  # stratified
    val_loss = log_loss(y[held_out], clf.predict_proba([X[i] for i in held_out]), labels=[0, 1])
    assert val_loss == pytest.approx(history["best_val_loss"], abs=1e-5)
    assert abs(history["val_loss"][-1] - history["best_val_loss"]) > 1e-3  # the last epoch's weights differ
    # a class too small to stratify: the split warns, naming it, and training goes on
    y_small = np.array(["a", "b"] * 15 + ["rare", "b"])
    with pytest.warns(UserWarning, match="'rare' \\(1 sample\\)"):
        SequenceClassifier("gru-dt", **FAST, validation_fraction=0.25, random_state=0).fit(X, y_small)


def test_random_state_threads_and_global_rng():
    X, y, _ = _ragged(12, seed=10)
    seen = []
    torch.set_num_threads(2)
    try:
        state = torch.get_rng_state()
        a = SequenceClassifier("gru-dt", **FAST, random_state=3, n_jobs=1).fit(X, y)
        assert torch.get_num_threads() == 2  # n_jobs applied during fit only
        assert torch.equal(torch.get_rng_state(), state)  # torch's global random state left as it was
        # n_jobs=None is joblib's: 1 thread, or the enclosing parallel_config's n_jobs
        record = SequenceClassifier("gru-dt", **FAST, random_state=3)
        hook = lambda module, args: seen.append(torch.get_num_threads())  # noqa: E731
        with torch.nn.modules.module.register_module_forward_pre_hook(hook):
            record.fit(X, y)
            alone = set(seen)
            seen.clear()
            with joblib.parallel_config(n_jobs=3):
                record.fit(X, y)
        assert alone == {1} and set(seen) == {3}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    b = SequenceClassifier("gru-dt", **FAST, random_state=3).fit(X, y)
    c = SequenceClassifier("gru-dt", **FAST, random_state=4).fit(X, y)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert not np.allclose(a.predict_proba(X), c.predict_proba(X))
    with pytest.raises(ValueError, match="n_jobs must be None or a non-zero integer"):
        SequenceClassifier("gru-dt", **FAST, n_jobs=0).fit(X, y)


def test_float64():
    X, y, _ = _ragged(12, seed=11)
    clf = SequenceClassifier("gru-dt", **FAST, dtype="float64", random_state=0).fit(X, y)
    assert next(clf.model_.parameters()).dtype == torch.float64
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64'"):
        SequenceClassifier("gru-dt", **FAST, dtype="float16").fit(X, y)


# ---------------------------------------------------------------------------------------- errors
def test_bad_input_raises_clear_errors():
    X, y, times = _ragged(10, seed=12)
    clf = SequenceClassifier("gru-dt", **FAST, random_state=0)
    with pytest.raises(ValueError, match="4 dimensions"):
        clf.fit(np.ones((10, 3, 2, 2)), y)
    with pytest.raises(ValueError, match="Reshape your data"):
        clf.fit(np.ones(10), y)
    with pytest.raises(ValueError, match=r"X\[2\] has no observed value"):
        clf.fit(X[:2] + [np.full((5, 2), nan)] + X[3:], y)
    with pytest.raises(ValueError, match=r"X\[4\] has 3 channel\(s\) but X\[0\] has 2"):
        clf.fit(X[:4] + [np.ones((5, 3))] + X[5:], y)
    with pytest.raises(ValueError, match=r"X\[1\] holds an infinite value"):
        clf.fit(X[:1] + [np.full((5, 2), np.inf)] + X[2:], y)
    with pytest.raises(ValueError, match=r"X\[3\] has 1 time step\(s\).*at least 2"):
        clf.fit(X[:3] + [np.ones((1, 2))] + X[4:], y)
    with pytest.raises(ValueError, match=r"times\[0\] must have shape"):
        clf.fit(X, y, times=[t[:-1] for t in times])
    with pytest.raises(ValueError, match=r"times\[5\] must be strictly increasing"):
        clf.fit(X, y, times=times[:5] + [times[5][::-1]] + times[6:])
    with pytest.raises(ValueError, match="y has 9 labels but X holds 10 sequences"):
        clf.fit(X, y[:-1])
    with pytest.raises(ValueError, match="only 1 class"):
        clf.fit(X, np.zeros(10))
    with pytest.raises(ValueError, match="requires y to be passed"):
        clf.fit(X, None)
    with pytest.raises(ValueError, match="Unknown label type"):
        clf.fit(X, np.linspace(0, 1, 10))
    with pytest.raises(TypeError, match="sparse"):
        clf.fit(__import__("scipy").sparse.csr_matrix(np.ones((10, 4))), y)
    clf.fit(X, y)
    with pytest.raises(
        ValueError,
        match=r"X has 3 channel\(s\) per time step, but SequenceClassifier was fitted "
        r"with 2",
    ):
        clf.predict([np.ones((4, 3))])
    with pytest.raises(ValueError, match="Input y contains NaN"):
        SequenceRegressor("gru-dt", **FAST).fit(X, np.full(10, nan))
    # issue 36: a missing label gave numpy's comparison error or scikit-learn's "Unknown label type: unknown"
    for missing in (
        np.array(list(y[:3]) + [None] + list(y[4:]), dtype=object),
        list(y[:3]) + [None] + list(y[4:]),
        np.where(np.arange(10) == 3, nan, y.astype(float)),
    ):
        with pytest.raises(ValueError, match=r"y holds 1 missing label\(s\) \((None or )?NaN\), the first at sample 3"):
            clf.fit(X, missing)
    with pytest.raises(ValueError, match=r"y holds 1 missing label"):
        RandomFeatureClassifier().fit(X, list(y[:3]) + [None] + list(y[4:]))
    # issue 36: a validation split that leaves no training sample gave scikit-learn's "train set will be empty"
    for estimator, target in (
        (SequenceClassifier("gru-dt", **FAST, validation_fraction=0.9), y[:4]),
        (SequenceRegressor("gru-dt", **FAST, validation_fraction=0.9), np.arange(4.0)),
    ):
        with pytest.raises(
            ValueError,
            match=r"validation_fraction=0.9 of 4 samples leaves 0 to train on and 4 to "
            r"validate: each part needs at least 1 sample",
        ):
            estimator.fit(X[:4], target)


def test_bad_parameters_raise_naming_them():
    X, y, _ = _ragged(10, seed=13)
    with pytest.raises(ValueError, match="model must be one of the registry's models"):
        SequenceClassifier("no-such-model").fit(X, y)
    with pytest.raises(ValueError, match="patience=3 needs a validation split"):
        SequenceClassifier("gru-dt", **FAST, patience=3).fit(X, y)
    with pytest.raises(ValueError, match="validation_fraction must be None or a number in"):
        SequenceClassifier("gru-dt", **FAST, validation_fraction=1.5).fit(X, y)
    with pytest.raises(TypeError, match="model_options must be a dict"):
        SequenceClassifier("gru-dt", model_options=[("hidden", 4)]).fit(X, y)
    with pytest.raises(ValueError, match="epochs must be a positive integer"):
        SequenceClassifier("gru-dt", model_options={"hidden": 4}, epochs=0).fit(X, y)
    with pytest.raises(ValueError, match="fill_gaps must be None, 'auto' or a positive time step, got -1.0"):
        SequenceClassifier("ncde", fill_gaps=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="fill_gaps=0.5: model 'gru-dt' reads raw observations"):
        SequenceClassifier("gru-dt", **FAST, fill_gaps=0.5).fit(X, y)


def test_a_channel_a_sample_never_observes_is_filled_with_its_training_mean_and_said_once_per_fit():
    X, y, _ = _ragged(10, seed=14)
    X[6][:, 1] = nan
    X[3][:, 1] = nan
    settings = dict(model_options={"hidden": 4, "width": 8}, epochs=1, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = SequenceClassifier("ncde", **settings).fit(X, y)
    said = [w for w in caught if issubclass(w.category, UnobservedChannelWarning)]
    assert len(said) == 1 and "channel 1 in 2 of 10 training samples never observed" in str(said[0].message)
    assert said[0].filename == __file__  # attributed to the user's call
    assert clf.input_spec_.control.unobserved_fill == (0.0, 0.0)  # the standardised training mean
    # the same as filling by hand with the channel's training mean (0 once standardised)
    by_hand = SequenceClassifier("ncde", control_options={"unobserved_fill": 0.0}, **settings).fit(X, y)
    np.testing.assert_array_equal(clf.predict_proba(X), by_hand.predict_proba(X))
    # None refuses such data, naming the sample and channel
    with pytest.raises(ValueError, match=r"sample 3 has no observation in channel 1"):
        SequenceClassifier("ncde", control_options={"unobserved_fill": None}, **settings).fit(X, y)
    with pytest.raises(
        ValueError,
        match=r"unobserved_fill must be None, a finite number or a sequence of finite "
        r"numbers, one per channel, or 'mean'",
    ):
        SequenceClassifier("ncde", control_options={"unobserved_fill": "median"}, **settings).fit(X, y)


def test_time_unit_auto_is_the_fit_data_span_and_kept_for_prediction():
    X, y, times = _ragged(16, seed=8)
    span = max(float(t[-1] - t[0]) for t in times)
    settings = dict(model_options={"hidden": 8, "width": 16}, epochs=2, lr=0.01, batch_size=8, random_state=3)
    auto = SequenceClassifier("ncde", control_options={"time_unit": "auto"}, **settings).fit(X, y, times=times)
    explicit = SequenceClassifier("ncde", control_options={"time_unit": span}, **settings).fit(X, y, times=times)
    assert auto.control_options_["time_unit"] == pytest.approx(span, rel=1e-6)
    # prediction on other data reuses the fit's unit (not the new data's span)
    half = [x[: len(x) // 2 + 1] for x in X], [t[: len(t) // 2 + 1] for t in times]
    np.testing.assert_allclose(
        auto.predict_proba(half[0], times=half[1]), explicit.predict_proba(half[0], times=half[1]), rtol=0, atol=1e-6
    )


# ---------------------------------------------------------------------------------------- one trip down
def _spy_on(monkeypatch, function) -> list:
    """Every call of ``function``, wherever the package binds it: each module of the package that imported it by name
    gets a spy that records the call and runs it (a module's own attribute, so lazy imports inside functions reach
    the spy too)."""
    import sys

    calls = []

    def spy(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)

    for name, module in list(sys.modules.items()):
        if name.startswith("neuralde_seq") and getattr(module, function.__name__, None) is function:
            monkeypatch.setattr(module, function.__name__, spy)
    return calls


@pytest.mark.parametrize(
    "make",
    [
        # a validation split, augmentation at every batch, an ensemble and the summary baseline: every path X takes
        lambda: SequenceClassifier(
            "delta-rde",
            **{**LEVERS, "model_options": {"d_model": 8, "n_heads": 2}, "validation_fraction": 0.25},
            baseline="summary-features",
            random_state=0,
        ),
        lambda: SequenceClassifier("gru-dt", **FAST, random_state=0),
        lambda: SequenceRegressor("ncde", **FAST, fill_gaps=None, random_state=0),
        lambda: RandomFeatureClassifier(width=16, fine_tune={"epochs": 1}, random_state=0),
        lambda: RandomFeatureClassifier("logsignature", random_state=0),
    ],
)
def test_fit_and_every_prediction_read_and_check_x_exactly_once(make, monkeypatch):
    """Issue 37, one trip down: X is read once into a dataset and its observations are checked once
    (`validate_observations`), in fit and in each prediction; the input spec, the splits, the augmented batches and
    the controls build on the checked dataset without checking it again."""
    from neuralde_seq import observations

    X, y, times = _ragged(24, seed=3)
    estimator = make()
    if isinstance(estimator, SequenceRegressor):
        y = y.astype(float)
    calls = _spy_on(monkeypatch, observations.validate_observations)
    estimator.fit(X, y, times=times)
    assert len(calls) == 1
    predictions = [estimator.predict, estimator.score] + [
        getattr(estimator, name)
        for name in ("predict_proba", "decision_function", "random_features")
        if hasattr(estimator, name)
    ]
    for predict in predictions:
        calls.clear()
        predict(X, y, times=times) if predict == estimator.score else predict(X, times=times)
        assert len(calls) == 1, predict.__name__
