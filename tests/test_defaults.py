"""Defaults that hold on long, rough series: every registry model, built and trained by the estimator with nothing
but its defaults, starts with logits of order one and trains a few steps without diverging on a 2,000-point series
with spikes, uneven times and 30 % of its points dropped (issue 23: on real long series some defaults started with
losses in the hundreds or diverged within a few steps).

The bounds: a classifier whose logits are O(1) at initialisation has a cross-entropy near ln K; 3 ln K (2.08 for two
classes) allows logits of a few units and fails the 14-265 that a raw-unit time channel or Hebb's unnormalised
read-out gave. During the steps the loss must stay finite and below 10 ln K (the step that diverged in the issue
reached 4.9e6).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from neuralde_seq import MODEL_NAMES
from neuralde_seq.sklearn import SequenceClassifier

LENGTH = 2000
STEPS = 3


def spiky_series(seed: int = 0, n: int = 4, length: int = LENGTH, channels: int = 2):
    """``n`` random walks of ``length`` points with rare spikes of 20-60 times a step's spread, uneven times
    (gaps 0.5-1.5) and 30 % of the values dropped (NaN); alternating labels."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.uniform(0.5, 1.5, size=(n, length)), axis=1)
    values = rng.standard_normal((n, length, channels)).cumsum(1) * 0.1
    spikes = rng.random(values.shape) < 0.01
    values[spikes] += rng.choice([-1.0, 1.0], spikes.sum()) * rng.uniform(20, 60, spikes.sum())
    values[rng.random(values.shape) < 0.3] = np.nan
    labels = np.arange(n) % 2
    return values, labels, times


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_defaults_train_on_a_long_spiky_series(name):
    X, y, times = spiky_series()
    classes = len(np.unique(y))
    # one step per epoch: the history's per-epoch losses are the steps' losses
    clf = SequenceClassifier(name, epochs=STEPS, batch_size=len(X), random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. the adjoint check's or a grid model's notices: not what is tested
        clf.fit(X, y, times=times)
    losses = clf.history_["train_loss"]
    assert len(losses) == STEPS
    assert all(math.isfinite(loss) for loss in losses), f"{name}: non-finite training loss {losses}"
    assert losses[0] <= 3 * math.log(classes), (
        f"{name}: initial loss {losses[0]:.3g} > 3 ln K = {3 * math.log(classes):.3g}: logits far from O(1) at "
        f"initialisation on a {LENGTH}-point series"
    )
    assert max(losses) <= 10 * math.log(classes), f"{name}: the loss grew to {max(losses):.3g} within {STEPS} steps"


def test_ode_rnn_reads_time_in_units_of_the_training_span():
    """The registry's ODE-RNN takes its time unit from the input it is built on (the longest span), so its answer
    does not depend on the units of the times, and its state stays O(1) along a 300-point series: with one fixed unit
    f(h), saturated where h is large, drifted h linearly to norms in the hundreds over raw index gaps."""
    from neuralde_seq import create_model, model_inputs

    gen = torch.Generator().manual_seed(0)
    times = torch.cumsum(torch.rand(4, 300, generator=gen, dtype=torch.float64) * 2.5 + 0.5, dim=1)
    values = torch.randn(4, 300, 2, generator=gen, dtype=torch.float64)
    logits = []
    for unit in (1.0, 10.0):
        inputs = model_inputs("ode-rnn", times * unit, values)
        torch.manual_seed(0)
        model = create_model("ode-rnn", inputs, 3).double()
        assert model.time_unit == pytest.approx(unit * float((times[:, -1] - times[:, 0]).max()))
        logits.append(model(inputs))
        _, after = model.row_states(inputs)
        assert float(after.norm(dim=-1).max()) < 10.0
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=1e-10)
    assert float(logits[0].abs().max()) < 5.0
