"""The training levers of the scikit-learn estimators (issue 33, part 3): augmentation (random crops and drops of
every training batch), seed ensembles, weight decay and ``epochs="auto"`` (a step budget with early stopping), each
against an independent computation, and the estimators with the levers set in cross-validation and grid search
(scikit-learn's check_estimator with every lever set: tests/test_sklearn.py)."""

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.metrics import log_loss
from sklearn.model_selection import GridSearchCV, cross_val_score
from test_sklearn import _ragged  # tests/ is on the path (conftest.py)

from neuralde_seq import MODEL_NAMES, create_model
from neuralde_seq.data import from_arrays, random_crop_and_drop
from neuralde_seq.estimator_training import _step_budget
from neuralde_seq.sklearn import AUTO_MAX_STEPS, SequenceClassifier, SequenceRegressor
from neuralde_seq.training.augmentation import member_seed

SMALL = dict(model_options={"hidden": 8}, lr=0.02, batch_size=8)


# ---------------------------------------------------------------------------------------- ensembles
def test_ensemble_probabilities_are_the_mean_of_members_trained_alone():
    X, y, times = _ragged(24, seed=20)
    settings = dict(SMALL, epochs=3, dtype="float64")
    ensemble = SequenceClassifier("gru-dt", ensemble=3, random_state=5, **settings).fit(X, y, times=times)
    # each member as an estimator of its own, with the runner's member seeds
    members = [
        SequenceClassifier("gru-dt", random_state=member_seed(5, j), **settings).fit(X, y, times=times)
        for j in range(3)
    ]
    alone = np.stack([m.predict_proba(X, times=times) for m in members])
    proba = ensemble.predict_proba(X, times=times)
    np.testing.assert_allclose(proba, alone.mean(axis=0), rtol=0, atol=1e-12)
    assert np.abs(proba - alone[0]).max() > 1e-3  # not one member's answer
    np.testing.assert_array_equal(ensemble.predict(X, times=times), ensemble.classes_[proba.argmax(1)])
    histories = ensemble.history_["ensemble_members"]
    assert [h["train_loss"] for h in histories] == [m.history_["train_loss"] for m in members]
    assert ensemble.history_["train_loss"] == histories[0]["train_loss"] and ensemble.seed_ == 5
    # pickled, the ensemble answers the same
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(ensemble)).predict_proba(X, times=times), proba)


def test_ensemble_of_regressors_predicts_the_mean_of_members_trained_alone():
    X, _, times = _ragged(24, seed=21)
    y = np.stack([[np.nanmean(x[:, 0]) * 100.0 + 7.0, len(x)] for x in X])  # two targets far from unit scale
    settings = dict(SMALL, epochs=3, dtype="float64")
    for targets in (y, y[:, 0]):  # (N, k) and (N,)
        ensemble = SequenceRegressor("gru-dt", ensemble=2, random_state=9, **settings).fit(X, targets, times=times)
        alone = [
            SequenceRegressor("gru-dt", random_state=member_seed(9, j), **settings)
            .fit(X, targets, times=times)
            .predict(X, times=times)
            for j in range(2)
        ]
        predicted = ensemble.predict(X, times=times)
        assert predicted.shape == targets.shape
        np.testing.assert_allclose(predicted, (alone[0] + alone[1]) / 2, rtol=1e-12, atol=1e-9)
        assert np.abs(predicted - alone[0]).max() > 1e-3


# ---------------------------------------------------------------------------------------- augmentation
def test_augmentation_changes_the_training_batches_and_only_them():
    """The first training batch the model sees is `random_crop_and_drop` of those series, drawn right after `fit`
    seeds torch with the estimator's seed; validation and prediction see the series whole."""
    X, y, times = _ragged(32, seed=22)
    seen = []

    def record(module, args):
        if type(module).__name__ == "GRUDeltaT":
            seen.append((module.training, args[0]))

    clf = SequenceClassifier(
        "gru-dt", **SMALL, epochs=1, validation_fraction=0.25, augment_crop=0.6, augment_drop_rate=0.4, random_state=3
    )
    with torch.nn.modules.module.register_module_forward_pre_hook(record):
        clf.fit(X, y, times=times)
    data = from_arrays(X, times=times)
    train_index = np.setdiff1d(np.arange(32), clf.validation_index_)
    # fit's data order: a permutation of the training split from a generator seeded with the seed
    order = torch.randperm(len(train_index), generator=torch.Generator().manual_seed(3))
    batch = data.subset(train_index[order[:8].numpy()])
    torch.manual_seed(3)
    expected = clf.input_spec_.transform(random_crop_and_drop(batch, drop_rate=0.4, crop=0.6))
    plain = clf.input_spec_.transform(batch)
    training = [inputs for mode, inputs in seen if mode]
    assert len(training) == 3  # 24 training series, batches of 8
    for field in ("times", "values", "lengths"):
        torch.testing.assert_close(
            getattr(training[0], field), getattr(expected, field), rtol=0, atol=0, equal_nan=True
        )
    observed = lambda inputs: int((~torch.isnan(inputs.values)).any(-1).sum())  # noqa: E731
    assert observed(training[0]) < 0.75 * observed(plain)  # the model saw fewer points
    # the validation split is read whole
    evaluated = [inputs for mode, inputs in seen if not mode]
    validation = clf.input_spec_.transform(data.subset(clf.validation_index_))[torch.arange(8)]  # as batched
    torch.testing.assert_close(evaluated[0].values, validation.values, rtol=0, atol=0, equal_nan=True)


def test_no_augmentation_is_the_plain_fit_bit_for_bit():
    X, y, times = _ragged(24, seed=23)
    plain = SequenceClassifier("gru-dt", **SMALL, epochs=3, random_state=1).fit(X, y, times=times)
    off = SequenceClassifier(
        "gru-dt", **SMALL, epochs=3, random_state=1, augment_crop=1, augment_drop_rate=0, ensemble=1
    ).fit(X, y, times=times)
    assert off.history_["train_loss"] == plain.history_["train_loss"]
    for name, weight in plain.model_.state_dict().items():
        assert torch.equal(off.model_.state_dict()[name], weight), name
    np.testing.assert_array_equal(off.predict_proba(X, times=times), plain.predict_proba(X, times=times))
    crop = SequenceClassifier("gru-dt", **SMALL, epochs=3, random_state=1, augment_crop=0.5).fit(X, y, times=times)
    assert crop.history_["train_loss"] != plain.history_["train_loss"]


def test_a_series_the_augmentation_leaves_unreadable_is_named_as_its_doing():
    X, y, times = _ragged(24, seed=24)  # a quarter of the values missing, channel by channel
    settings = dict(
        model_options={"hidden": 4, "width": 8},
        epochs=2,
        batch_size=8,
        random_state=0,
        augment_crop=0.2,
        augment_drop_rate=0.5,
    )
    with pytest.raises(
        ValueError,
        match=r"augment_crop=0\.2, augment_drop_rate=0\.5 left a series of a training "
        r"batch that 'ncde' cannot read: .*no observation in channel.*"
        r"unobserved_fill",
    ):
        SequenceClassifier("ncde", control_options={"unobserved_fill": None}, **settings).fit(X, y, times=times)
    # by default a channel the crop and drops leave unobserved is filled with its training mean
    clf = SequenceClassifier("ncde", **settings).fit(X, y, times=times)
    assert clf.history_["steps"] == 6


# ---------------------------------------------------------------------------------------- weight decay
def test_weight_decay_is_adams_l2_term():
    """Three full-batch steps: the estimator's weights are those of torch's Adam with weight_decay (the decay
    added to the gradient), not AdamW's decoupled decay, and not those without decay."""
    X, y, times = _ragged(16, seed=25)
    settings = dict(model_options={"hidden": 8}, epochs=3, lr=0.05, batch_size=16, dtype="float64", random_state=4)
    decayed = SequenceClassifier("gru-dt", weight_decay=0.5, **settings).fit(X, y, times=times)
    plain = SequenceClassifier("gru-dt", **settings).fit(X, y, times=times)
    inputs = decayed.input_spec_.transform(from_arrays(X, times=times, dtype=torch.float64))
    labels = torch.as_tensor(y)

    def by_hand(optimizer_class):
        torch.manual_seed(4)
        model = create_model("gru-dt", inputs, 3, hidden=8).to(torch.float64)
        if hasattr(model, "set_empirical_mean"):  # as the estimator does
            model.set_empirical_mean(inputs)
        optimizer = optimizer_class(model.parameters(), lr=0.05, weight_decay=0.5)
        for _ in range(3):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(inputs), labels).backward()
            optimizer.step()
        return model.state_dict()

    adam, adamw = by_hand(torch.optim.Adam), by_hand(torch.optim.AdamW)
    weights = decayed.model_.state_dict()
    for name in weights:
        torch.testing.assert_close(weights[name], adam[name], rtol=0, atol=1e-10, msg=name)
    distance = lambda a, b: max(float((a[k] - b[k]).abs().max()) for k in a)  # noqa: E731
    assert distance(weights, adamw) > 1e-3 and distance(weights, plain.model_.state_dict()) > 1e-3


# ---------------------------------------------------------------------------------------- epochs="auto"
def test_step_budget_spends_the_documented_steps():
    # the documented cases: 100 and 10,000 series less the 15 % held out, batch 32, the default budget
    assert AUTO_MAX_STEPS == 2000
    assert _step_budget(85, 32, 2000, None) == ({"epochs": 666, "eval_every": None, "max_steps": None}, 134)
    assert _step_budget(8500, 32, 2000, None) == ({"epochs": 7, "eval_every": 40, "max_steps": None}, 10)
    # an epoch longer than the budget: one epoch, cut at the budget
    assert _step_budget(10_000, 4, 2000, 3) == ({"epochs": 1, "eval_every": 40, "max_steps": 2000}, 3)
    for n, batch in ((7, 8), (85, 32), (1000, 16), (8500, 32), (10_000, 4)):
        fields, _ = _step_budget(n, batch, 500, None)
        steps_per_epoch = -(-n // batch)
        assert min(fields["epochs"] * steps_per_epoch, fields["max_steps"] or np.inf) <= 500  # within the budget
        assert fields["epochs"] * steps_per_epoch > 500 - steps_per_epoch  # and not an epoch short of it


def test_epochs_auto_stops_within_the_budget_on_the_best_validation_weights():
    """Labels that are noise: the validation score soon stops improving; training stops early, within the step
    budget, with the best evaluation's weights restored."""
    rng = np.random.default_rng(26)
    X = [rng.normal(size=(int(rng.integers(6, 13)), 2)) for _ in range(40)]
    y = rng.integers(0, 2, 40)
    clf = SequenceClassifier(
        "gru-dt", model_options={"hidden": 16}, epochs="auto", max_steps=400, lr=0.05, batch_size=8, random_state=0
    ).fit(X, y)
    history, held_out = clf.history_, clf.validation_index_
    assert len(held_out) == 6  # the 15 % split epochs="auto" makes without validation_fraction
    assert clf.training_spec_.epochs == 400 // 5 and clf.training_spec_.eval_every is None  # 34 series: 5 steps
    assert clf.patience_ == 16  # a fifth of the budget: 80 steps, 16 epochs of 5
    assert history["stopped_by"] == "early_stopping" and history["steps"] < 400
    assert history["epochs_run"] == history["best_epoch"] + clf.patience_
    val_loss = log_loss(y[held_out], clf.predict_proba([X[i] for i in held_out]), labels=[0, 1])
    assert val_loss == pytest.approx(history["best_val_loss"], abs=1e-5)
    assert abs(history["val_loss"][-1] - history["best_val_loss"]) > 1e-3  # the last weights were not kept
    # no patience left to run out: the whole budget, to the step, and max_steps caps integer epochs
    full = SequenceClassifier("gru-dt", **SMALL, epochs="auto", max_steps=30, patience=1000, random_state=0).fit(X, y)
    assert full.history_["steps"] == 30 and full.history_["stopped_by"] == "epochs"
    capped = SequenceClassifier("gru-dt", **SMALL, epochs=50, max_steps=7, random_state=0).fit(X, y)
    assert capped.history_["steps"] == 7 and capped.history_["stopped_by"] == "max_steps"


def test_bad_lever_parameters_raise_naming_them():
    X, y, _ = _ragged(10, seed=27)
    cases = [
        ({"augment_crop": 0.0}, r"augment_crop must lie in \(0, 1\], got 0"),
        ({"augment_crop": "half"}, "augment_crop must be a finite number, got 'half'"),
        ({"augment_drop_rate": 1.0}, r"augment_drop_rate must lie in \[0, 1\), got 1.0"),
        ({"ensemble": 0}, "ensemble must be a positive integer, got 0"),
        ({"ensemble": 1.5}, "ensemble must be a positive integer, got 1.5"),
        ({"epochs": "Auto"}, "epochs must be a positive integer or 'auto', got 'Auto'"),
        ({"epochs": "auto", "max_steps": 0}, "max_steps must be a positive integer or None, got 0"),
        ({"weight_decay": -1.0}, "weight_decay must be a finite number >= 0, got -1.0"),
        ({"epochs": "auto", "patience": 0}, "patience must be a positive integer or None, got 0"),
    ]
    for params, message in cases:
        with pytest.raises(ValueError, match=message):
            SequenceClassifier("gru-dt", **SMALL, **params).fit(X, y)
    with pytest.raises(ValueError, match="patience=3 needs a validation split.*or epochs='auto'"):
        SequenceRegressor("gru-dt", **SMALL, patience=3).fit(X, y.astype(float))


# ---------------------------------------------------------------------------------------- scikit-learn
def test_levers_in_cross_validation_and_grid_search():
    X, y, times = _ragged(45, seed=28)
    clf = SequenceClassifier(
        "gru-dt",
        model_options={"hidden": 16},
        lr=0.03,
        batch_size=8,
        random_state=0,
        epochs="auto",
        max_steps=60,
        augment_crop=0.8,
        augment_drop_rate=0.1,
        ensemble=2,
    )
    scores = cross_val_score(clf, X, y, cv=3)
    assert scores.mean() >= 0.75, scores  # chance is 1/3
    copy = clone(clf)
    assert copy.get_params() == clf.get_params() and not hasattr(copy, "model_")
    search = GridSearchCV(
        clone(clf).set_params(max_steps=20), {"ensemble": [1, 2], "augment_drop_rate": [0.0, 0.3]}, cv=2
    ).fit(X, y)
    assert len(search.cv_results_["params"]) == 4 and np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_estimator_.ensemble == search.best_params_["ensemble"]
    assert type(search.best_estimator_.model_).__name__ == (
        "EnsembleClassifier" if search.best_params_["ensemble"] == 2 else "GRUDeltaT"
    )


# ---------------------------------------------------------------------------------------- schedule
@pytest.mark.parametrize("model", ["delta-rde", "hebb-rde"])
def test_the_auto_schedule_is_the_models_registered_one(model):
    from neuralde_seq.models import training_defaults

    X, y, times = _ragged(16, seed=23)
    settings = dict(
        model_options={"d_model": 8, "n_heads": 2}, lr=0.02, batch_size=8, epochs=3, random_state=4, dtype="float64"
    )
    registered = training_defaults(model)["schedule"]
    assert registered == ("cosine" if model == "delta-rde" else "constant")  # docs/benchmarks.md, the halves
    auto = SequenceClassifier(model, **settings).fit(X, y, times=times)
    assert auto.get_params()["schedule"] == "auto"
    fits = {
        name: SequenceClassifier(model, schedule=name, **settings).fit(X, y, times=times)
        for name in ("constant", "cosine")
    }
    # the same steps as the registered schedule's run, bit for bit, and not the other's
    other = "constant" if registered == "cosine" else "cosine"
    assert auto.history_["train_loss"] == fits[registered].history_["train_loss"]
    assert auto.history_["train_loss"] != fits[other].history_["train_loss"]


def test_a_registered_schedule_must_be_one_the_training_knows():
    from neuralde_seq.models import TRAINING_DEFAULTS, ModelEntry, model_entry, register_model, training_defaults
    from neuralde_seq.training.schedules import SCHEDULES

    assert all(training_defaults(name)["schedule"] in SCHEDULES for name in MODEL_NAMES)
    assert set(TRAINING_DEFAULTS) <= set(SequenceClassifier().get_params())  # each one an estimator parameter
    entry = model_entry("gru-dt")
    for training, words in (({"schedule": "linear"}, "schedule must be"), ({"lr": 0.1}, "unknown setting 'lr'")):
        with pytest.raises(ValueError, match=words):
            register_model(
                "gru-dt-bad-training", ModelEntry(entry.constructor, entry.defaults, entry.inputs, training=training)
            )
    with pytest.raises(ValueError, match="unknown model"):  # refused before it entered the registry
        model_entry("gru-dt-bad-training")
