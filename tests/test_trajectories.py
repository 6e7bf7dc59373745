"""Trajectory and semi-Markov generators against the known systems.

- Lotka-Volterra conserves V = δx − γ ln x + βy − α ln y along the generated (noise-free) trajectories;
- the undamped pendulum conserves its energy, the damped one loses exactly ∫ γ ω² dt;
- the integrator agrees with scipy's DOP853 at tight tolerances;
- the semi-Markov gaps are τ(s) of the true state at each observation, and the next state is the flow of
  the true system over that gap;
- the task splits hide what they say (interpolation: a random subset; extrapolation: t > horizon / 2).
"""

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from neuralde_seq.data.synthetic.trajectories import (
    damped_pendulum,
    integrate,
    lotka_volterra,
    lotka_volterra_invariant,
    pendulum_energy,
    semi_markov_gap,
    semi_markov_task,
    trajectory_task,
    van_der_pol,
)


def test_lotka_volterra_conserves_its_invariant():
    task = trajectory_task("lotka-volterra", "interpolation", 16, points=30, noise_std=0.0, seed=1)
    clean = task.clean.numpy()
    V = lotka_volterra_invariant(clean)
    V0 = lotka_volterra_invariant(task.initial.numpy())
    assert np.abs(V - V0[:, None]).max() < 1e-8  # RK4 with step 1e-2: measured ~1e-10
    assert np.ptp(clean[..., 0], axis=1).min() > 0.05  # and the populations do oscillate
    # noise-free targets equal the clean states; with noise they differ by about noise_std
    assert torch.equal(task.target.values, task.clean)
    noisy = trajectory_task("lotka-volterra", "interpolation", 64, noise_std=0.05, seed=1)
    assert abs(float((noisy.target.values - noisy.clean).std()) - 0.05) < 0.005


def test_pendulum_energy_is_conserved_without_damping_and_lost_as_integral_of_damping():
    rng = np.random.default_rng(0)
    initial = np.stack([rng.uniform(-2, 2, 8), rng.uniform(-1, 1, 8)], -1)
    grid = np.tile(np.linspace(0.0, 5.0, 2001), (8, 1))[:, 1:]
    free = integrate(lambda s: damped_pendulum(s, damping=0.0), initial, grid)
    assert np.abs(pendulum_energy(free) - pendulum_energy(initial)[:, None]).max() < 1e-8
    gamma = 0.2
    damped = integrate(lambda s: damped_pendulum(s, damping=gamma), initial, grid)
    energy = pendulum_energy(damped)
    assert (np.diff(energy, axis=1) <= 1e-12).all()  # never increases
    # E(T) − E(0) = −γ ∫ ω² dt (trapezoid on the fine grid, step 2.5e-3)
    omega = np.concatenate([initial[:, None, 1], damped[..., 1]], axis=1)
    lost = gamma * np.trapezoid(omega**2, dx=5.0 / 2000, axis=1)
    assert np.abs(energy[:, -1] - pendulum_energy(initial) + lost).max() < 1e-5


@pytest.mark.parametrize("field", [lotka_volterra, van_der_pol, damped_pendulum])
def test_integrator_matches_scipy(field):
    rng = np.random.default_rng(3)
    initial = rng.uniform(0.5, 1.5, (3, 2))
    times = np.sort(rng.uniform(0, 6, (3, 7)), axis=1)
    ours = integrate(field, initial, times)
    for b in range(3):
        ref = solve_ivp(
            lambda t, s: field(s),
            (0, times[b, -1]),
            initial[b],
            method="DOP853",
            t_eval=times[b],
            rtol=1e-12,
            atol=1e-12,
        )
        assert np.abs(ours[b] - ref.y.T).max() < 1e-7


def test_semi_markov_gaps_follow_the_state_rule():
    task = semi_markov_task(12, points=20, noise_std=0.05, gap_min=0.1, gap_max=0.6, seed=4)
    clean, gaps, times = task.clean.numpy(), task.gaps.numpy(), task.inputs.times.numpy()
    expected = 0.1 + 0.5 / (1 + clean[..., 1] ** 2)
    assert np.allclose(gaps, expected, atol=1e-15, rtol=0)
    assert np.allclose(gaps, semi_markov_gap(clean), atol=1e-15, rtol=0)
    assert np.allclose(np.diff(times, axis=1), gaps[:, :-1], atol=1e-12, rtol=0)
    assert times[:, 0].tolist() == [0.0] * 12
    assert gaps.min() >= 0.1 and gaps.max() <= 0.6 and np.ptp(gaps) > 0.2  # the gaps do vary with the state
    # each next state is the Van der Pol flow over the gap from the previous one
    for b in range(2):
        for n in range(3):
            ref = solve_ivp(
                lambda t, s: van_der_pol(s), (0, gaps[b, n]), clean[b, n], method="DOP853", rtol=1e-12, atol=1e-12
            )
            assert np.abs(ref.y[:, -1] - clean[b, n + 1]).max() < 1e-8
    assert 0.03 < float((task.inputs.values - task.clean).std()) < 0.07


def test_task_splits_hide_what_they_say():
    interp = trajectory_task("pendulum", "interpolation", 10, points=20, observed_fraction=0.5, seed=2)
    seen = ~torch.isnan(interp.inputs.values[..., 0])
    assert torch.equal(seen, ~interp.query)
    assert seen.sum(1).tolist() == [10] * 10 and seen[:, 0].all()
    assert torch.equal(interp.inputs.values[seen], interp.target.values[seen])
    extrap = trajectory_task("pendulum", "extrapolation", 10, points=20, horizon=10.0, seed=2)
    times = extrap.inputs.times
    assert torch.equal(extrap.query[:, 1:], times[:, 1:] > 5.0)
    assert (torch.diff(times, dim=1) > 0).all()
    with pytest.raises(ValueError, match="mode"):
        trajectory_task("pendulum", "forecast", 4)
    with pytest.raises(ValueError, match="system"):
        trajectory_task("lorenz", "interpolation", 4)


def test_a_fraction_that_rounds_to_no_point_keeps_only_the_first():
    # round(0.01 · 30) = 0: the documented floor is each sample's first point (a slice [:, :-1] kept 29 of 30)
    task = trajectory_task("pendulum", "interpolation", 6, points=30, observed_fraction=0.01, seed=0)
    seen = ~torch.isnan(task.inputs.values[..., 0])
    assert seen.sum(1).tolist() == [1] * 6 and seen[:, 0].all()
    task = trajectory_task("pendulum", "interpolation", 6, points=30, observed_fraction=0.1, seed=0)
    assert (~torch.isnan(task.inputs.values[..., 0])).sum(1).tolist() == [3] * 6
