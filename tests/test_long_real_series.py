"""Every linear NCDE of the registry trains with the estimator's defaults on a long real series (issue 33: "never
diverging"). tests/test_defaults.py's spiky random walk does not stand for real rough series; this one is made of
aeon's JapaneseVowels (12 channels of real speech, 7-29 points per utterance), each series continued by others of
its class to 2,000 points (`concatenated`), 30 % of its points dropped.

Why these bounds: a classifier whose logits are O(1) has a cross-entropy near ln K, and every epoch's mean loss must
stay below 3 ln K (6.6 for the 9 classes). Before the linear CDEs' learning-rate scales (`LinearCDE.
learning_rate_scales`), Adam's steps grew slice-dense's states 1.5x per step here and its loss reached 60 in the
seventh epoch (a finite blow-up; `TrainingDiverged` would be raised at 1,000 times the first loss).

The NCDE and NRDE start with logits of order one here (first epoch's loss below 3 ln K): before their control was
scaled by its roughness (`neuralde_seq.models.ncde.roughness_scales`) the 12 channels' summed quadratic variation
(4,200 over 2,000 knots) drove the hidden state to norms near 200 and their first losses to 24-41.

Log-NCDE is not here: its field starts near zero (weights / 1000, as its authors'); the sweep of every registry model
(benchmarks/defaults_sweep.py --length 2000) covers it.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from neuralde_seq.data import concatenated, drop_observations, read_file
from neuralde_seq.sklearn import SequenceClassifier

LINEAR_NCDES = ("slice-diag", "slice-block", "slice-dense", "slice-dplr")
LENGTH, SERIES, BATCH, EPOCHS = 2000, 16, 8, 10  # 2 steps per epoch: 20 optimiser steps
NONLINEAR_EPOCHS = 2  # 4 steps: the NCDE's rk4 solve over 2,000 knots costs ~3 s a step on one thread


def aeon_file(name: str) -> Path:
    """aeon's bundled TRAIN file of ``name``, found without importing aeon; the test skips without aeon."""
    spec = importlib.util.find_spec("aeon")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(
            'aeon is not installed (its bundled data sets are the real series): pip install "neuralde_seq[reference]"'
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / name / f"{name}_TRAIN.ts"
    if not path.is_file():
        pytest.skip(f"aeon's data folder has no {path.name}")
    return path


@pytest.fixture(scope="module")
def long_japanese_vowels():
    data = read_file(aeon_file("JapaneseVowels"))
    labels = data.labels.numpy()
    # SERIES series taken from each class in turn: every class is in the batch
    queues = [list(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    take = [queue[k] for k in range(SERIES) for queue in queues if k < len(queue)][:SERIES]
    long = drop_observations(concatenated(data.subset(take), LENGTH, seed=0), 0.3, seed=0)
    return long.to_arrays()


@pytest.mark.parametrize("name", LINEAR_NCDES)
def test_linear_ncdes_train_on_a_long_real_series(name, long_japanese_vowels):
    X, y, times = long_japanese_vowels
    assert len(X) == SERIES and all(x.shape[0] == LENGTH for x in X)
    bound = 3 * math.log(len(np.unique(y)))
    clf = SequenceClassifier(name, epochs=EPOCHS, batch_size=BATCH, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # notices of the estimator are not what is tested
        clf.fit(X, y, times=times)  # raises TrainingDiverged on a non-finite or exploded loss
    losses = clf.history_["train_loss"]
    assert len(losses) == EPOCHS and clf.history_["steps"] == EPOCHS * SERIES // BATCH
    assert all(math.isfinite(loss) for loss in losses), f"{name}: non-finite training loss {losses}"
    assert max(losses) < bound, f"{name}: an epoch's loss {max(losses):.3g} > 3 ln K = {bound:.3g}: {losses}"
    assert losses[-1] < losses[0], f"{name}: no progress in {EPOCHS * SERIES // BATCH} steps: {losses}"
    # logits spread by more than 50 after 20 small steps from O(1) are a blow-up of the states, not learning
    # (before the scales: hundreds), even where the epochs' mean losses happen to stay small
    assert float(clf.predict_log_proba(X, times=times).min()) > -50.0


@pytest.mark.parametrize("name", ("ncde", "nrde"))
def test_neural_cde_and_rde_start_near_ln_k_on_a_long_real_series(name, long_japanese_vowels):
    X, y, times = long_japanese_vowels
    bound = 3 * math.log(len(np.unique(y)))
    clf = SequenceClassifier(name, epochs=NONLINEAR_EPOCHS, batch_size=BATCH, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # notices of the estimator are not what is tested
        clf.fit(X, y, times=times)
    losses = clf.history_["train_loss"]
    assert len(losses) == NONLINEAR_EPOCHS
    assert all(math.isfinite(loss) for loss in losses), f"{name}: non-finite training loss {losses}"
    # the unscaled control gave 24-41 here in the first epoch (ln K = 2.2)
    assert losses[0] < bound, f"{name}: first loss {losses[0]:.3g} > 3 ln K = {bound:.3g}: logits far from O(1)"
    assert max(losses) < bound, f"{name}: an epoch's loss {max(losses):.3g} > 3 ln K = {bound:.3g}: {losses}"
