"""Stress-task generators (neuralde_seq.data.synthetic): the copy-memory layout and the adding problem's
marks and targets as paper 000 App. C defines them, seeds, the length option, bad arguments, and a
learning check (CKCNN beats the adding problem's trivial predictor)."""

import math

import pytest
import torch
import torch.nn.functional as F

from neuralde_seq.data import ADDING_TRIVIAL_MSE, adding_problem, copy_memory
from neuralde_seq.models import create_model, model_inputs

# ---- copy memory --------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 2, 37])
def test_copy_memory_layout_and_targets(length):
    n, memory, symbols = 50, 10, 8
    data = copy_memory(n, length, seed=3)
    total = length + 2 * memory
    assert data.values.shape == (n, total, 1) and data.values.dtype == torch.float32
    assert data.targets.shape == (n, total) and data.targets.dtype == torch.long
    assert torch.equal(data.times, torch.arange(total, dtype=torch.float32).expand(n, total))
    digits = data.values[..., 0]
    assert torch.equal(digits, digits.round())
    digits = digits.long()
    first = digits[:, :memory]
    assert ((first >= 1) & (first <= symbols)).all()
    # T − 1 blanks, then memory + 1 markers (9): the first marker sits at position memory + T − 1.
    assert (digits[:, memory : memory + length - 1] == 0).all()
    assert (digits[:, memory + length - 1 :] == symbols + 1).all()
    assert digits.shape[1] - (memory + length - 1) == memory + 1
    # Targets: 0 (blank class) at the first T + memory positions, the first symbols in order at the last memory.
    assert (data.targets[:, : length + memory] == 0).all()
    assert torch.equal(data.targets[:, -memory:], first)


def test_copy_memory_symbols_uniform_over_one_to_eight():
    data = copy_memory(4000, 3, seed=0)
    symbols = data.values[:, :10, 0].long().flatten()
    counts = torch.bincount(symbols, minlength=10)
    assert counts[0] == 0 and counts[9] == 0
    expected = symbols.numel() / 8  # 5000 per symbol; binomial sd ≈ 66
    assert ((counts[1:9].double() - expected).abs() < 5 * math.sqrt(expected)).all()


def test_copy_memory_options_memory_and_symbols():
    data = copy_memory(30, 5, memory=3, num_symbols=4, seed=1)
    digits = data.values[..., 0].long()
    assert digits.shape == (30, 5 + 6)
    assert ((digits[:, :3] >= 1) & (digits[:, :3] <= 4)).all()
    assert (digits[:, 3:7] == 0).all() and (digits[:, 7:] == 5).all()
    assert torch.equal(data.targets[:, -3:], digits[:, :3]) and (data.targets[:, :-3] == 0).all()


# ---- adding problem -----------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [2, 3, 11, 100])
def test_adding_problem_marks_one_per_half_and_target_is_their_sum(length):
    n = 400
    data = adding_problem(n, length, seed=5)
    assert data.values.shape == (n, length, 2) and data.targets.shape == (n,)
    assert torch.equal(data.times, torch.arange(length, dtype=torch.float32).expand(n, length))
    numbers, marks = data.values[..., 0], data.values[..., 1]
    assert ((numbers >= 0) & (numbers < 1)).all()
    assert ((marks == 0) | (marks == 1)).all()
    assert (marks.sum(1) == 2).all()
    half = length // 2
    assert (marks[:, :half].sum(1) == 1).all() and (marks[:, half:].sum(1) == 1).all()
    expected = (numbers.double() * marks.double()).sum(1)  # sum of the marked values, in float64
    torch.testing.assert_close(data.targets.double(), expected, rtol=0, atol=1e-6)


def test_adding_problem_mark_positions_cover_each_half_uniformly():
    n, length = 20000, 10
    marks = adding_problem(n, length, seed=0).values[..., 1]
    counts = marks.sum(0)  # each half has 5 positions: n / 5 = 4000 marks expected at each, sd ≈ 57
    assert ((counts - n / 5).abs() < 5 * math.sqrt(n / 5)).all()


def test_adding_problem_anywhere_marks_two_distinct_positions_anywhere():
    n, length = 20000, 10
    data = adding_problem(n, length, markers="anywhere", seed=0)
    marks = data.values[..., 1]
    assert (marks.sum(1) == 2).all()  # two distinct positions (equal ones would sum to 1)
    counts = marks.sum(0)  # 2n / T = 4000 expected at every position
    assert ((counts - 2 * n / length).abs() < 5 * math.sqrt(2 * n / length)).all()
    same_half = (marks[:, :5].sum(1) != 1).float().mean()  # P(same half) = 2 · C(5,2) / C(10,2) = 4/9
    assert abs(same_half - 4 / 9) < 0.02
    torch.testing.assert_close(data.targets.double(), (data.values[..., 0].double() * marks).sum(1), rtol=0, atol=1e-6)


def test_adding_trivial_predictor_mse_is_one_sixth():
    targets = adding_problem(200000, 4, seed=2).targets.double()
    assert abs(ADDING_TRIVIAL_MSE - 1 / 6) < 1e-15
    # Sum of two independent U[0,1): mean 1, variance 1/6; standard error of the MSE ≈ 0.0004 here.
    assert abs(targets.mean() - 1) < 0.003
    assert abs((targets - 1).square().mean() - 1 / 6) < 0.002


# ---- seeds, lengths, arguments -----------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda **k: copy_memory(20, 15, **k), lambda **k: adding_problem(20, 15, **k)])
def test_seed_and_generator_reproducible(make):
    a, b, c = make(seed=7), make(seed=7), make(seed=8)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert not torch.equal(a.values, c.values)
    # One generator drawn twice: two different sets, the same two for the same seed.
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    first, second = make(generator=g1), make(generator=g1)
    assert torch.equal(first.values, a.values)  # a fresh generator seeded 7 = seed=7
    assert not torch.equal(first.values, second.values)
    assert torch.equal(make(generator=g2).values, first.values)
    assert torch.equal(make(generator=g2).values, second.values)
    # Without seed or generator: torch's global generator, reproducible through torch.manual_seed.
    torch.manual_seed(11)
    x = make()
    torch.manual_seed(11)
    assert torch.equal(make().values, x.values)


@pytest.mark.parametrize("length", [1, 100, 1000])
def test_copy_memory_length_option(length):
    data = copy_memory(3, length, seed=0)
    assert data.values.shape[1] == data.targets.shape[1] == length + 20
    # The first marker (9) is exactly `length` steps after the last symbol.
    first_marker = int((data.values[0, :, 0] == 9).nonzero()[0])
    assert first_marker - 9 == length


@pytest.mark.parametrize("length", [2, 100, 6000])
def test_adding_length_option(length):
    data = adding_problem(3, length, seed=0)
    assert data.values.shape == (3, length, 2) and data.times.shape == (3, length)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: copy_memory(0, 10), "num_samples"),
        (lambda: copy_memory(5, 0), "length"),
        (lambda: copy_memory(5, 2.5), "length"),
        (lambda: copy_memory(5, True), "length"),
        (lambda: copy_memory(5, 10, memory=0), "memory"),
        (lambda: copy_memory(5, 10, num_symbols=0), "num_symbols"),
        (lambda: copy_memory(5, 10, seed=1, generator=torch.Generator()), "seed or generator"),
        (lambda: copy_memory(5, 10, seed=1.5), "seed"),
        (lambda: adding_problem(5, 1), "length"),
        (lambda: adding_problem(-1, 10), "num_samples"),
        (lambda: adding_problem(5, 10, markers="first"), "markers"),
        (lambda: adding_problem(5, 10, generator=3), "generator"),
    ],
)
def test_bad_arguments_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---- learning ------------------------------------------------------------------------------------------


def test_ckcnn_beats_trivial_adding_predictor():
    """CKCNN at T = 20 after 400 Adam steps (about 4 s on one thread). Measured test MSE 0.0015-0.006 over
    model seeds 0-3 against the trivial 1/6. The same training reading the middle time step instead of the
    last (a wrong readout) ends at 0.097: it cannot see the second mark."""
    length = 20
    train, test = adding_problem(8192, length, seed=0), adding_problem(1000, length, seed=5)
    train_inputs = model_inputs("ckcnn", train.times, train.values)
    test_inputs = model_inputs("ckcnn", test.times, test.values)
    torch.manual_seed(0)
    model = create_model(
        "ckcnn", train_inputs, 1, hidden=16, omega_0=14.55, mask_channel=False, horizon=float(length - 1)
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    order = torch.Generator().manual_seed(1)
    for _ in range(400):
        index = torch.randint(0, 8192, (32,), generator=order)
        loss = F.mse_loss(model(train_inputs[index])[:, 0], train.targets[index])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        mse = F.mse_loss(model(test_inputs)[:, 0], test.targets).item()
    trivial = (test.targets - 1).square().mean().item()
    assert abs(trivial - ADDING_TRIVIAL_MSE) < 0.03
    assert mse < ADDING_TRIVIAL_MSE / 5, f"test MSE {mse:.4f} vs trivial {trivial:.4f}"
