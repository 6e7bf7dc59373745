"""The learning-rate schedule of `fit`: the rate each step uses is the formula's, and a resumed run continues it."""

from __future__ import annotations

import math

import pytest
import torch

from neuralde_seq.training import Regression, fit
from neuralde_seq.training.callbacks import Callback
from neuralde_seq.training.schedules import scheduled_lr


class RecordRates(Callback):
    """The learning rate each optimizer step used (read after the step, before the next one sets its own)."""

    def __init__(self):
        self.rates = []

    def on_batch_end(self, state, loss):
        self.rates.append(state.optimizer.param_groups[0]["lr"])


def _problem(n=40):
    torch.manual_seed(0)
    x = torch.randn(n, 3, dtype=torch.float64)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64)
    return x, y


def test_cosine_rates_follow_the_formula():
    total, lr = 50, 0.01
    warmup = round(0.05 * total)  # 2 or 3 steps: both sides of the warm-up are checked
    expected = [
        lr * (k + 1) / warmup if k < warmup else lr * 0.5 * (1 + math.cos(math.pi * (k - warmup) / (total - warmup)))
        for k in range(total)
    ]
    assert [scheduled_lr(lr, "cosine", k, total) for k in range(total)] == pytest.approx(expected, rel=1e-12)
    assert all(scheduled_lr(lr, "constant", k, total) == lr for k in range(total))
    # the peak is reached at the end of the warm-up and the rate falls monotonically after it
    rates = expected[warmup - 1 :]
    assert rates[0] == pytest.approx(lr) and all(a >= b for a, b in zip(rates, rates[1:]))


def test_fit_steps_with_the_scheduled_rates_and_resume_continues_them(tmp_path):
    x, y = _problem()
    model = torch.nn.Linear(3, 1).double()
    recorder = RecordRates()
    fit(
        model,
        Regression(),
        (x, y),
        epochs=5,
        lr=0.05,
        batch_size=8,
        schedule="cosine",
        callbacks=[recorder],
        progress=False,
    )
    total = 5 * 5
    assert recorder.rates == pytest.approx([scheduled_lr(0.05, "cosine", k, total) for k in range(total)], rel=1e-12)

    # interrupted after 2 of 5 epochs (the run's plan stays 5 epochs), then resumed: the same rates at the same steps
    path = tmp_path / "last.pt"
    first = torch.nn.Linear(3, 1).double()
    part = RecordRates()

    class StopAfterTwoEpochs(Callback):
        def on_evaluation(self, state, record):
            if record["epoch"] == 2:
                state.stop_reason = "time"

    fit(
        first,
        Regression(),
        (x, y),
        epochs=5,
        lr=0.05,
        batch_size=8,
        schedule="cosine",
        resume_path=path,
        callbacks=[part, StopAfterTwoEpochs()],
        progress=False,
    )
    rest = RecordRates()
    fit(
        first,
        Regression(),
        (x, y),
        epochs=5,
        lr=0.05,
        batch_size=8,
        schedule="cosine",
        resume_path=path,
        resume=True,
        callbacks=[rest],
        progress=False,
    )
    assert part.rates + rest.rates == pytest.approx(recorder.rates, rel=1e-12)


def test_unknown_schedule_is_refused():
    x, y = _problem()
    with pytest.raises(ValueError, match="schedule must be one of"):
        fit(
            torch.nn.Linear(3, 1).double(),
            Regression(),
            (x, y),
            epochs=1,
            lr=0.1,
            batch_size=8,
            schedule="linear",
            progress=False,
        )


def test_a_model_that_cannot_train_says_why_before_any_step():
    """Outputs that are not finite at initialisation are refused before the first step (not reported as a
    divergence at step 1 with advice about learning rates), and the weights are left as they were."""
    from neuralde_seq.training import Classification

    class Overflowing(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)

        def forward(self, x):
            return torch.exp(self.linear(x) * 1e3)  # float32: inf (and then NaN losses) at initialisation

    x = torch.ones(8, 3)
    y = torch.tensor([0, 1] * 4)
    model = Overflowing()
    with torch.no_grad():
        model.linear.weight.fill_(1.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="before any training step: Overflowing cannot train on these inputs"):
        fit(model, Classification(), (x, y), epochs=1, lr=0.1, batch_size=8, progress=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_config_rows_take_a_schedule_and_an_explicit_constant_is_the_default_row():
    from neuralde_seq.training.config import ConfigError, fingerprint, parse_config

    base = {
        "name": "x",
        "task": "files",
        "task_options": {"path": "d"},
        "training": {"epochs": 1, "lr": 1e-3, "batch_size": 4},
        "models": [{"model": "gru-d"}],
    }
    cosine = parse_config({**base, "models": [{"model": "gru-d", "training": {"schedule": "cosine"}}]})
    assert cosine.rows[0].training.schedule == "cosine"
    assert cosine.rows[0].to_dict()["training"]["schedule"] == "cosine"
    plain = parse_config(base)
    assert plain.rows[0].training.schedule == "constant"
    # a row without a schedule records the default it runs with
    assert plain.rows[0].to_dict()["training"]["schedule"] == "constant"
    explicit = parse_config({**base, "training": {**base["training"], "schedule": "constant"}})
    assert fingerprint(explicit.rows[0].to_dict()) == fingerprint(plain.rows[0].to_dict())
    assert fingerprint(cosine.rows[0].to_dict()) != fingerprint(plain.rows[0].to_dict())
    with pytest.raises(ConfigError, match=r"models\[0\]\.training\.schedule must be one of constant, cosine"):
        parse_config({**base, "models": [{"model": "gru-d", "training": {"schedule": "onecycle"}}]})
