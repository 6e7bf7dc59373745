"""A trained model on top of the summary-feature baseline (``SequenceClassifier(baseline="summary-features")``):
the training offsets are out of fold, prediction adds the fitted baseline's logits, augmented batches carry their
own samples' offsets, and bad settings are refused by name.

The offsets are checked by what out-of-fold means (a sample's own label cannot move its offset), prediction against
the network's logits and the baseline's computed apart, the batches against the offsets they were cut from."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from neuralde_seq.data.base.datasets import IrregularDataset
from neuralde_seq.reference import SummaryFeatureClassifier
from neuralde_seq.sklearn import SequenceClassifier, SequenceRegressor
from neuralde_seq.training.augmentation import AugmentedInputs
from neuralde_seq.training.baseline_offset import LogitOffset, summary_feature_logits
from neuralde_seq.training.objectives import ModelArguments
from neuralde_seq.training.objectives import forward as run_model

nan = float("nan")


def _records(n, seed, classes=2):
    """n ragged records (3 channels, 30 % of values missing, a lab never drawn in some) whose class moves channel
    0's level."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    X, times = [], []
    for k in y:
        length = int(rng.integers(10, 18))
        x = rng.normal(size=(length, 3))
        x[:, 0] += 1.0 * k
        x[rng.random(x.shape) < 0.3] = nan
        x[0, 0] = 0.0
        if rng.random() < 0.3:
            x[:, 2] = nan
        X.append(x)
        times.append(np.cumsum(rng.uniform(0.5, 1.5, length)))
    return X, y, times


def _dataset(X, times):
    longest = max(len(x) for x in X)
    t = np.zeros((len(X), longest))
    v = np.full((len(X), longest, X[0].shape[1]), nan)
    for i, (x, s) in enumerate(zip(X, times)):
        t[i, : len(s)] = s
        t[i, len(s) :] = s[-1] + np.arange(1, longest - len(s) + 1)
        v[i, : len(x)] = x
    return IrregularDataset(torch.tensor(t), torch.tensor(v), torch.tensor([len(x) for x in X]), None, [])


def test_each_offset_comes_from_a_baseline_fitted_without_its_sample():
    from sklearn.model_selection import StratifiedKFold

    X, y, times = _records(40, seed=0)
    data = _dataset(X, times)
    logits, final = summary_feature_logits(data, y, 2, seed=3)
    assert logits.shape == (40, 2) and np.all(logits[:, 0] == 0.0)
    seen = np.zeros(40, dtype=int)
    for fit_index, held_index in StratifiedKFold(5, shuffle=True, random_state=3).split(np.zeros(40), y):
        alone = SummaryFeatureClassifier(random_state=3).fit(data.subset(torch.as_tensor(fit_index)), y[fit_index])
        expected = alone.decision_function(data.subset(torch.as_tensor(held_index)))
        np.testing.assert_allclose(logits[held_index, 1], expected, rtol=1e-10, atol=1e-12)
        seen[held_index] += 1
    assert np.all(seen == 1)  # every sample held out once
    # out of fold is not in sample: the baseline fitted on every sample is more confident on its own samples
    in_sample = final.decision_function(data)
    signs = np.where(y == 1, 1.0, -1.0)
    assert np.mean(signs * in_sample) > np.mean(signs * logits[:, 1])
    np.testing.assert_allclose(
        in_sample, SummaryFeatureClassifier(random_state=3).fit(data, y).decision_function(data), rtol=1e-10
    )


def test_multiclass_offsets_are_the_baselines_logits_in_class_order():
    X, y, times = _records(45, seed=1, classes=3)
    data = _dataset(X, times)
    logits, final = summary_feature_logits(data, y, 3, seed=0)
    assert logits.shape == (45, 3)
    np.testing.assert_allclose(
        final.decision_function(data), final.logistic_.decision_function(final.scaler_.transform(final.features(data)))
    )


def test_prediction_adds_the_fitted_baselines_logits_to_the_networks():
    X, y, times = _records(40, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SequenceClassifier(
            epochs=2, batch_size=8, baseline="summary-features", random_state=0, dtype="float64"
        ).fit(X, y, times=times)
        probabilities = est.predict_proba(X, times=times)
    assert isinstance(est.model_, LogitOffset)
    data = _dataset(X, times)
    network = (est.model_.gate * run_model(est.model_.model, est.input_spec_.transform(data))).detach().numpy()
    assert float(est.model_.gate) != 0.0  # trained away from the baseline alone
    baseline = est.baseline_.decision_function(data)
    expected = torch.softmax(torch.tensor(network) + torch.tensor(np.column_stack([0 * baseline, baseline])), -1)
    np.testing.assert_allclose(probabilities, expected.numpy(), rtol=1e-9, atol=1e-12)
    # without the baseline's part the probabilities are the network's alone: the offset is not a no-op
    assert not np.allclose(probabilities, torch.softmax(torch.tensor(network), -1).numpy(), atol=1e-3)


def test_an_ensemble_of_offset_members_averages_their_probabilities():
    X, y, times = _records(32, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SequenceClassifier(
            epochs=1, batch_size=8, ensemble=2, baseline="summary-features", random_state=0, dtype="float64"
        ).fit(X, y, times=times)
        probabilities = est.predict_proba(X, times=times)
    data = _dataset(X, times)
    baseline = est.baseline_.decision_function(data)
    offset = torch.tensor(np.column_stack([0 * baseline, baseline]))
    inputs = est.input_spec_.transform(data)
    members = [
        torch.softmax(m.gate.detach() * run_model(m.model, inputs).detach() + offset, -1) for m in est.model_.members
    ]
    np.testing.assert_allclose(probabilities, torch.stack(members).mean(0).numpy(), rtol=1e-9, atol=1e-12)


def test_augmented_batches_carry_their_own_samples_offsets():
    X, y, times = _records(20, seed=5)
    data = _dataset(X, times)
    offsets = torch.arange(40, dtype=torch.float64).reshape(20, 2)

    def build(batch):
        assert batch.static is None  # the model's input is built without the offsets
        return batch.values

    inputs = AugmentedInputs(
        data.replace(static=offsets), lambda b: SequenceClassifier._offset_batch(build, b), drop_rate=0.3
    )
    index = torch.tensor([13, 2, 7])
    batch = inputs[index]
    assert isinstance(batch, ModelArguments)
    torch.testing.assert_close(batch.args[1], offsets[index])


def test_bad_baselines_are_refused_by_name():
    X, y, times = _records(12, seed=6)
    with pytest.raises(ValueError, match="baseline must be None or one of 'summary-features', got 'summary'"):
        SequenceClassifier(epochs=1, baseline="summary").fit(X, y, times=times)
    with pytest.raises(ValueError, match="SequenceRegressor takes baseline=None"):
        SequenceRegressor(epochs=1, baseline="summary-features").fit(X, np.arange(12.0), times=times)
    lone = y.copy()
    lone[:] = 0
    lone[3] = 1
    with pytest.raises(ValueError, match="at least 2 samples of every class; the smallest class has 1"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            SequenceClassifier(epochs=1, baseline="summary-features").fit(X, lone, times=times)
