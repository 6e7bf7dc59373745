"""A seeded learning test at length ~1,000: ``delta-cde`` with its default options trains.

Task ("early event"). Each sequence has two channels of small Gaussian noise (std 0.05), about 1,000
irregularly timed observations (each sample its own length, 800-1,200, and its own times) with 20 % of the
values missing (NaN). Once, at a random position among the first 200 observations, a short bump (6
observations, height 3) appears in one channel, upwards or downwards; the class (4, chance 25 %) is which
channel and which sign. Everything after the bump (at least 595 observations, on average about 900) is
noise drawn independently of the class, and so are the times, the lengths and which values are missing:
the last observations, and the control's value and derivative at the end, say nothing about the class. The
model must write the bump into its fast weights when it happens and keep it there through hundreds of steps
of noise (the Delta rule overwrites what a key points at, so it must learn keys and learning rates that
leave the bump's memory alone), and the gradient must reach back over those steps.

Why this is a test of the defaults: the model is built by ``create_model("delta-cde", inputs, 4, d_model=16,
n_heads=4)``, with no ``solver=``: rk4, one step per knot interval, and the default gradient method
(``"checkpoint"``, exact gradients of the discrete solve). The library's trainer
(:func:`~neuralde_seq.training.train_classifier`) is used as a user would: it raises
:class:`~neuralde_seq.training.TrainingDiverged` on any non-finite loss, gradient or parameter. The former
default, the continuous adjoint (``SolverOptions(gradient=Adjoint())``), gives NaN in 436 of the 3,272 gradient
entries of a batch of 32 here (seeds 0, 1 and 2 alike), so the trainer stops at its first optimizer step
with "non-finite gradient"; the last test pins that (about 8 s).

Control: the model's registered control (Hermite cubic with a time channel) from ``model_inputs`` with
``parametrization="index"``: s is the observation index, so each sample keeps its own irregular times (they
enter through the time channel, here in [0, ~12]) and a learning rule's rate is per observation. The default
``parametrization="time"`` needs one time grid shared by all samples, and makes s the time itself, so that the
time unit sets how much a CT-FWP can write per observation. Measured on an earlier version of this task (one
shared irregular grid, d_model 8, 2 heads, 24 optimizer steps): with the default parametrisation and a mean gap
of 0.03 (times up to ~36) delta-cde stayed at chance (loss 1.38; a 6-observation bump lasts 0.18 units of s);
with index parametrisation it reached 100 % validation accuracy with times up to ~12 and 62 % with times up to
~1,200 (a raw time channel that large saturates the tanh of the values, which are read from x).

Measured (this machine, one thread; 128 training, 32 validation and 128 test sequences, batch 32, Adam 3e-2,
5 epochs = 20 optimizer steps, d_model 16, 4 heads; mean training loss of the first and last epoch, test
accuracy of the best-validation weights, chance 25 %):

- seed 0: 1.622 -> 0.081, 98.4 % (75 s of training);  seed 1: 1.471 -> 0.156, 100 %;  seed 2: 1.578 -> 0.031, 100 %
- seed 3: 1.660 -> 0.345, 99.2 %;  seed 5: 1.509 -> 0.094, 100 %
- seed 4: 1.535 -> 1.378, 44.5 %: it sits on the chance plateau for 5 epochs, then learns (epoch 8: loss 0.170,
  test 99.2 %). How long the plateau lasts varies with the seed: at initialisation the noise after the bump
  overwrites the fast weights, so the bump's gradient is tiny until keys and learning rates that keep it emerge.
  With 2 heads (d_model 16) seed 2 stayed on the plateau for all of 6 epochs, hence 4 heads.

The test uses seed 0 and asserts: all 20 optimizer steps taken (finite losses and gradients), a last epoch's
mean training loss below 0.8 (log 4 = 1.386) and below 0.7 x the first epoch's, and a test accuracy of at
least 60 % (chance + 35 points). The whole file ran in 87 s here (load from other jobs about 1.3).
"""

import functools
import math
import time
import warnings

import pytest
import torch

from neuralde_seq import SolverOptions, create_model, model_inputs
from neuralde_seq.solvers import Adjoint, Checkpoint
from neuralde_seq.training import TrainingDiverged, evaluate, train_classifier

N_CLASSES = 4
MIN_LENGTH, MAX_LENGTH = 800, 1200
EVENT_WINDOW = 200  # the bump starts among the first EVENT_WINDOW observations
BUMP_WIDTH, BUMP_HEIGHT = 6, 3.0
NOISE, MISSING, MEAN_GAP = 0.05, 0.2, 0.01
SEED = 0
EPOCHS, BATCH, LR = 5, 32, 3e-2
D_MODEL, N_HEADS = 16, 4
N_TRAIN, N_VAL, N_TEST = 128, 32, 128


def make_early_event_task(n: int, generator: torch.Generator):
    """(times, values, lengths, labels, starts) of the early-event task (module docstring).

    times (n, MAX_LENGTH) strictly increasing per sample with gaps in [0.5, 1.5) × MEAN_GAP; values
    (n, MAX_LENGTH, 2) with NaN where missing; lengths (n,) in [MIN_LENGTH, MAX_LENGTH]; labels (n,) in
    0..3 (channel = label % 2, sign + for labels 0-1, − for 2-3); starts (n,) the bump's first index.
    """
    times = torch.cumsum(0.5 + torch.rand(n, MAX_LENGTH, generator=generator), dim=1) * MEAN_GAP
    times = times - times[:, :1]
    values = NOISE * torch.randn(n, MAX_LENGTH, 2, generator=generator)
    lengths = torch.randint(MIN_LENGTH, MAX_LENGTH + 1, (n,), generator=generator)
    labels = torch.randint(N_CLASSES, (n,), generator=generator)
    starts = torch.randint(EVENT_WINDOW, (n,), generator=generator)
    bump = BUMP_HEIGHT * torch.sin(math.pi * (torch.arange(BUMP_WIDTH) + 0.5) / BUMP_WIDTH)
    rows = starts[:, None] + torch.arange(BUMP_WIDTH)
    sign = 1.0 - 2.0 * (labels >= 2).float()
    values[torch.arange(n)[:, None], rows, (labels % 2)[:, None]] += sign[:, None] * bump
    values[torch.rand(n, MAX_LENGTH, 2, generator=generator) < MISSING] = float("nan")
    return times, values, lengths, labels, starts


def test_early_event_task_contract():
    """The generator's own contract: lengths, missing values, and the class only in the early bump."""
    times, values, lengths, labels, starts = make_early_event_task(256, torch.Generator().manual_seed(0))
    assert (torch.diff(times, dim=1) > 0).all()
    assert int(lengths.min()) >= MIN_LENGTH and int(lengths.max()) <= MAX_LENGTH
    assert len(torch.unique(lengths)) > 100
    assert 0.15 < float(torch.isnan(values).float().mean()) < 0.25
    assert set(labels.tolist()) == set(range(N_CLASSES))
    assert (starts < EVENT_WINDOW).all()
    # After the bump, only noise: the class cannot be read from the rest of the sequence or its end.
    tail = values[:, EVENT_WINDOW + BUMP_WIDTH :]
    assert float(tail.nan_to_num().abs().max()) < 0.5
    # The bump: the largest observed excursion is in the class's channel, with the class's sign.
    filled = values.nan_to_num()
    flat = filled.abs().flatten(1).argmax(1)
    channel, position = flat % 2, flat // 2
    assert torch.equal(channel, labels % 2)
    assert ((position >= starts) & (position < starts + BUMP_WIDTH)).all()
    peak = filled.flatten(1).gather(1, flat[:, None]).squeeze(1)
    assert torch.equal(peak > 0, labels < 2)


@functools.cache
def early_event_data(seed: int):
    """The three splits' model inputs and labels: ([train, val, test] inputs, [train, val, test] labels)."""
    g = torch.Generator().manual_seed(seed)
    splits = [make_early_event_task(n, g) for n in (N_TRAIN, N_VAL, N_TEST)]
    inputs = [model_inputs("delta-cde", t, v, n, parametrization="index") for t, v, n, _, _ in splits]
    return inputs, [split[3] for split in splits]


def train_on_early_events(
    seed: int,
    tmp_path,
    epochs: int = EPOCHS,
    d_model: int = D_MODEL,
    n_heads: int = N_HEADS,
    lr: float = LR,
    **model_options,
):
    """Train delta-cde (default options unless ``model_options`` says otherwise) on the task with the library's
    trainer; returns (history, test accuracy, seconds)."""
    inputs, labels = early_event_data(seed)
    torch.manual_seed(seed)
    model = create_model("delta-cde", inputs[0], N_CLASSES, d_model=d_model, n_heads=n_heads, **model_options)
    start = time.perf_counter()
    history = train_classifier(
        model,
        inputs[0],
        labels[0],
        inputs[1],
        labels[1],
        epochs=epochs,
        lr=lr,
        batch_size=BATCH,
        seed=seed,
        checkpoint_path=tmp_path / "best.pt",
        progress=False,
    )
    accuracy = evaluate(model, inputs[2], labels[2], batch_size=N_TEST)["accuracy"]
    return history, accuracy, time.perf_counter() - start


def test_delta_cde_learns_an_early_event_at_length_1000(tmp_path):
    inputs, _ = early_event_data(SEED)
    assert create_model("delta-cde", inputs[0], N_CLASSES).network.solver.gradient == Checkpoint()
    history, accuracy, seconds = train_on_early_events(SEED, tmp_path)
    losses = history["train_loss"]
    print(
        f"seed {SEED}: train loss {losses[0]:.3f} -> {losses[-1]:.3f}, test accuracy {accuracy:.3f} ({seconds:.0f} s)"
    )
    # Every optimizer step was taken: no non-finite loss or gradient (the trainer would have raised).
    assert history["epochs_run"] == EPOCHS
    assert history["steps"] == EPOCHS * math.ceil(N_TRAIN / BATCH)
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < 0.8 and losses[-1] < 0.7 * losses[0], f"training loss did not fall: {losses}"
    assert accuracy >= 0.60, f"test accuracy {accuracy:.3f} (chance 0.25)"


def test_the_former_default_the_continuous_adjoint_stops_at_the_first_step(tmp_path):
    """Why the default is not the continuous adjoint: on the same data and model, its backward pass (which
    integrates the contracting Delta-rule field backwards over ~1,000 steps) returns NaN gradients, so the
    trainer stops at its first optimizer step. If the adjoint is ever made stable at this length, this test
    has done its job: delete it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the adjoint's own reconstruction warning says the same
        with pytest.raises(TrainingDiverged) as stopped:
            train_on_early_events(SEED, tmp_path, solver=SolverOptions(gradient=Adjoint()))
    assert stopped.value.step == 1 and stopped.value.reason.startswith("non-finite gradient")
