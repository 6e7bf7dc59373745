"""Gating as time warping (neuralde_seq.models.gating): the gated field reduces to the ungated one when the gate is
1, a uniform time rescale of the control is undone by scaling the gate, chrono biases follow log U(1, T − 1), and
the registered model trains."""

from __future__ import annotations

import math

import pytest
import scipy.stats
import torch
from torch import nn

from neuralde_seq.controls import build_control
from neuralde_seq.models import MODEL_NAMES, TimeWarpGatedRNN, chrono_bias, create_model, model_inputs
from neuralde_seq.solvers import RK4, SolverOptions, solve

DTYPE = torch.float64


def _control(times, seed=0, channels=2, batch=3):
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(batch, times.shape[-1], channels, generator=generator, dtype=DTYPE)
    return build_control(times.to(DTYPE).expand(batch, -1), values, time_channel=False)


def _model(channels=2, hidden=5, seed=0, **options):
    torch.manual_seed(seed)
    return TimeWarpGatedRNN(channels, 2, hidden, **options).to(DTYPE)


class _Ungated(nn.Module):
    """dh/ds = tanh(W_f [x, h] + b_f) − h, written out from the weights alone."""

    needs_value = True
    needs_derivative = False

    def __init__(self, W_x, b, W_h):
        super().__init__()
        self.W_x, self.b, self.W_h = nn.Parameter(W_x), nn.Parameter(b), nn.Parameter(W_h)

    def forward(self, h, x, dx):
        return torch.tanh(x @ self.W_x.T + self.b + h @ self.W_h.T) - h


def _force_gate_open(model):
    with torch.no_grad():
        model.dynamics.gate_input.weight.zero_()
        model.dynamics.gate_recurrent.weight.zero_()
        model.dynamics.gate_input.bias.fill_(1e3)  # σ(1000) == 1.0 exactly in float64


def test_gate_one_is_the_ungated_cell():
    model = _model()
    control = _control(torch.tensor([0.0, 0.3, 0.7, 1.5, 2.0]))
    dynamics = model.dynamics
    ungated = _Ungated(
        dynamics.candidate_input.weight.detach().clone(),
        dynamics.candidate_input.bias.detach().clone(),
        dynamics.candidate_recurrent.weight.detach().clone(),
    )
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(3, 5, generator=gen, dtype=DTYPE)
    x = torch.randn(3, 2, generator=gen, dtype=DTYPE)
    options = SolverOptions(RK4(step_size=0.05))
    h0 = torch.randn(3, 5, generator=gen, dtype=DTYPE)

    # with the learned gate, the rate and the solve differ from the ungated ones (the comparison has power)
    assert (dynamics(h, x, None) - ungated(h, x, None)).abs().max() > 1e-2
    assert (solve(dynamics, control, h0, options) - solve(ungated, control, h0, options)).abs().max() > 1e-3

    _force_gate_open(model)
    g, _ = dynamics.gate_and_candidate(h, *dynamics.control_features(x, None))
    assert torch.equal(g, torch.ones_like(g))
    assert torch.equal(dynamics(h, x, None), ungated(h, x, None))  # exactly f − h
    gated = solve(dynamics, control, h0, options, at_knots=True)
    reference = solve(ungated, control, h0, options, at_knots=True)
    torch.testing.assert_close(gated, reference, rtol=0, atol=1e-14)
    # and through the model's own entry, with the same solver options
    model.solver = options
    torch.testing.assert_close(model.hidden_states(control, h0=h0), reference[:, -1], rtol=0, atol=1e-14)


def test_gated_false_is_the_ungated_cell():
    """TimeWarpGatedRNN(gated=False) solves dh/ds = f − h (the written-out reference, same weights), has no gate
    parameters, and refuses chrono_t_max."""
    model = _model(gated=False)
    assert not any(name.startswith("dynamics.gate") for name, _ in model.named_parameters())
    control = _control(torch.tensor([0.0, 0.3, 0.7, 1.5, 2.0]))
    ungated = _Ungated(
        model.dynamics.candidate_input.weight.detach().clone(),
        model.dynamics.candidate_input.bias.detach().clone(),
        model.dynamics.candidate_recurrent.weight.detach().clone(),
    )
    model.solver = options = SolverOptions(RK4(step_size=0.05))
    h0 = torch.randn(3, 5, generator=torch.Generator().manual_seed(2), dtype=DTYPE)
    torch.testing.assert_close(
        model.hidden_states(control, h0=h0), solve(ungated, control, h0, options), rtol=0, atol=1e-14
    )
    with pytest.raises(ValueError, match="gated=False has no gate"):
        TimeWarpGatedRNN(2, 2, 5, gated=False, chrono_t_max=10.0)
    with pytest.raises(TypeError, match="gated"):
        TimeWarpGatedRNN(2, 2, 5, gated="no")


@pytest.mark.parametrize("a", [0.25, 4.0])
def test_uniform_time_rescale_is_undone_by_scaling_the_gate(a):
    """h' solved on X'(t') = X(t'/a) with gate g/a equals h at corresponding knots t' = a·t."""
    times = torch.tensor([0.0, 0.4, 1.0, 1.3, 2.2, 3.0])
    control = _control(times, seed=3)
    warped = _control(a * times, seed=3)  # same values at the rescaled times
    model = _model(seed=2)
    model.solver = SolverOptions(RK4(step_size=0.01))
    h = model.hidden_states(control, at_knots=True)

    warped_model = _model(seed=2, rate_scale=1 / a)
    # fine steps, with step sizes scaled by a: the very same discrete solve
    warped_model.solver = SolverOptions(RK4(step_size=0.01 * a))
    torch.testing.assert_close(warped_model.hidden_states(warped, at_knots=True), h, rtol=0, atol=1e-6)
    # fine steps of the same size in both: the same continuous trajectory, to the accuracy of rk4
    warped_model.solver = SolverOptions(RK4(step_size=0.01))
    torch.testing.assert_close(warped_model.hidden_states(warped, at_knots=True), h, rtol=0, atol=1e-6)

    # without scaling the gate the warped trajectory is another one (the test has power)
    unscaled = _model(seed=2)
    unscaled.solver = SolverOptions(RK4(step_size=0.01 * a))
    assert (unscaled.hidden_states(warped, at_knots=True) - h).abs().max() > 1e-2


def test_chrono_bias_follows_log_uniform():
    t_max = 50.0
    samples = chrono_bias(20_000, t_max, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    assert samples.dtype == DTYPE and samples.shape == (20_000,)
    assert samples.min() >= 0 and samples.max() <= math.log(t_max - 1)

    def cdf(b):
        return ((torch.as_tensor(b).exp() - 1) / (t_max - 2)).clamp(0, 1).numpy()

    assert scipy.stats.kstest(samples.numpy(), cdf).pvalue > 0.01
    # a wrong distribution on the same range is rejected: the test has power
    wrong = torch.empty(20_000, dtype=DTYPE).uniform_(
        0, math.log(t_max - 1), generator=torch.Generator().manual_seed(0)
    )
    assert scipy.stats.kstest(wrong.numpy(), cdf).pvalue < 1e-6
    # and b itself, not exp(b), is what is returned
    assert scipy.stats.kstest(samples.exp().numpy(), cdf).pvalue < 1e-6


def test_chrono_bias_reproducible_with_generator():
    first = chrono_bias((3, 4), 10, generator=torch.Generator().manual_seed(5))
    second = chrono_bias((3, 4), 10, generator=torch.Generator().manual_seed(5))
    assert first.shape == (3, 4) and torch.equal(first, second)


def _separable_problem():
    generator = torch.Generator().manual_seed(0)
    times = torch.linspace(0, 1, 8).repeat(8, 1)
    labels = torch.arange(8) % 3
    values = (labels.float() - 1)[:, None, None] + 0.1 * torch.randn(8, 8, 2, generator=generator)
    return times, values, labels


def test_registered_model_trains():
    assert "warp-gated-ode" in MODEL_NAMES
    times, values, labels = _separable_problem()
    control = model_inputs("warp-gated-ode", times, values)
    torch.manual_seed(0)
    model = create_model("warp-gated-ode", control, 3)
    assert isinstance(model, TimeWarpGatedRNN) and model.hidden == 32
    assert model(control).shape == (8, 3) and model(control, at_knots=True).shape == (8, 8, 3)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(6):
        optimiser.zero_grad()
        loss = nn.functional.cross_entropy(model(control), labels)
        loss.backward()
        assert model.dynamics.gate_input.bias.grad.abs().sum() > 0  # the gate learns
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses


def test_chrono_initialised_gate():
    t_max = 100
    torch.manual_seed(0)
    times, values, _ = _separable_problem()
    control = model_inputs("warp-gated-ode", times, values)
    model = create_model("warp-gated-ode", control, 3, chrono_t_max=t_max, hidden=64)
    bias = model.dynamics.gate_input.bias.detach()
    # b_g = −log u, u ~ U(1, t_max − 1): initial gate values σ(b_g) in [1/t_max, 1/2]
    assert bias.max() <= 0 and bias.min() >= -math.log(t_max - 1)
    gate = torch.sigmoid(bias)
    assert gate.min() >= 1 / t_max - 1e-7 and gate.max() <= 0.5
    assert bias.min() < -math.log(t_max - 1) + 1.5  # spread over the range, not default-initialised
    torch.manual_seed(0)
    default = create_model("warp-gated-ode", control, 3, hidden=64).dynamics.gate_input.bias.detach()
    bound = 1 / math.sqrt(control.channels)  # PyTorch's default: U(−1/√fan_in, 1/√fan_in)
    assert default.abs().max() <= bound and default.max() > 0
    # the rest of the model is initialised as without chrono (only b_g changes)
    torch.manual_seed(0)
    reference = create_model("warp-gated-ode", control, 3, hidden=64).state_dict()
    torch.manual_seed(0)
    chrono = create_model("warp-gated-ode", control, 3, hidden=64, chrono_t_max=t_max).state_dict()
    assert [k for k in reference if not torch.equal(reference[k], chrono[k])] == ["dynamics.gate_input.bias"]


@pytest.mark.parametrize("t_max", [2, 1.5, 0, -3, float("inf"), float("nan"), "10", True])
def test_chrono_bias_refuses_bad_t_max(t_max):
    with pytest.raises(ValueError, match="t_max"):
        chrono_bias(4, t_max)


def test_bad_arguments():
    with pytest.raises(ValueError, match="dtype"):
        chrono_bias(4, 10, dtype=torch.int64)
    with pytest.raises(ValueError, match="chrono_t_max"):
        TimeWarpGatedRNN(2, 3, chrono_t_max=2)
    with pytest.raises(ValueError, match="chrono_t_max"):
        TimeWarpGatedRNN(2, 3, chrono_t_max=float("nan"))
    for bad in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="rate_scale"):
            TimeWarpGatedRNN(2, 3, rate_scale=bad)
    with pytest.raises(ValueError, match="hidden"):
        TimeWarpGatedRNN(2, 3, hidden=0)
    with pytest.raises(ValueError, match="in_channels"):
        TimeWarpGatedRNN(0, 3)
    model = TimeWarpGatedRNN(2, 3)
    with pytest.raises(ValueError, match="rate_scale"):
        model.rate_scale = -1.0
    model.rate_scale = 2
    assert model.dynamics.rate_scale == 2.0
    times, values, _ = _separable_problem()
    control = model_inputs("warp-gated-ode", times, values)  # 3 channels (time channel first)
    with pytest.raises(ValueError, match="channels"):
        model(control)


def test_time_rescale_at_the_lengths_users_run():
    """2,000 irregular knots, one rk4 step per knot (the default solver): rescaling time by a and the gate by 1/a
    gives the very same discrete solve, so nothing accumulates with length."""
    generator = torch.Generator().manual_seed(5)
    times = torch.cumsum(torch.rand(2000, generator=generator, dtype=DTYPE) + 0.05, 0)
    control = _control(times, seed=7, batch=2)
    model = _model(seed=4)
    h = model.hidden_states(control, at_knots=True)
    assert h.abs().max() > 0.1  # a trajectory that moves
    for a in (0.25, 4.0):
        warped_model = _model(seed=4, rate_scale=1 / a)
        warped = warped_model.hidden_states(_control(a * times, seed=7, batch=2), at_knots=True)
        torch.testing.assert_close(warped, h, rtol=0, atol=1e-10)
