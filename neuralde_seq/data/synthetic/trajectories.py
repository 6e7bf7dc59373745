"""Irregularly sampled trajectories of known dynamical systems, and a semi-Markov observation process.

Systems (state (a, b), both observed as the two channels):

- **damped pendulum**: θ' = ω, ω' = −Ω² sin θ − γ ω. Its energy E = ½ω² + Ω²(1 − cos θ) obeys
  dE/dt = −γ ω² ≤ 0 (conserved for γ = 0). Defaults Ω = 2, γ = 0.2, θ(0) ~ U(−2, 2), ω(0) ~ U(−1, 1).
- **Lotka-Volterra**: x' = αx − βxy, y' = δxy − γy; V = δx − γ ln x + βy − α ln y is conserved.
  Defaults α = 2/3, β = 4/3, δ = γ = 1, x(0), y(0) ~ U(0.5, 1.5).
- **Van der Pol** (semi-Markov task): x' = y, y' = μ(1 − x²)y − x with μ = 1, (x, y)(0) ~ U(−2, 2)².

The true system is integrated by classical RK4 with per-sample steps of at most ``max_step`` (default
1e-2, error far below the noise; the tests check it against the invariants and scipy), vectorised over
the samples. Observations add independent Gaussian noise N(0, noise_std²) to every entry; the clean
values are kept for scoring.

**Interpolation / extrapolation** (`trajectory_task`): each sample has ``points`` times drawn
uniformly on [0, horizon] (sorted; distinct with probability one). Interpolation hides a random
``1 − observed_fraction`` of each sample's points from the model's input; extrapolation hides every point
at t > horizon / 2 (the model sees the first half and predicts the second). The input is an
`Observations` with NaN at the hidden points, so query times sit in the
input as all-NaN rows.

**Semi-Markov** (`semi_markov_task`, in the spirit of paper 002 App. C.3 / Du et al. 2020, without
a physics engine): the Van der Pol oscillator is observed at t_0 = 0 and then after a gap that is a
deterministic function of the current (true) state,

    τ(s) = gap_min + (gap_max − gap_min) / (1 + y²),        defaults gap_min = 0.1, gap_max = 0.6,

so the system is observed often when it moves fast (|y| large) and rarely when it is slow. The task:
from the observations up to t_n predict the next state s_{n+1} (at the known next time) and the gap τ_n.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from ...observations import Observations

__all__ = [
    "SYSTEMS",
    "damped_pendulum",
    "lotka_volterra",
    "van_der_pol",
    "pendulum_energy",
    "lotka_volterra_invariant",
    "integrate",
    "sample_times",
    "TrajectoryTask",
    "trajectory_task",
    "semi_markov_gap",
    "SemiMarkovTask",
    "semi_markov_task",
    "TASK_MODES",
]

TASK_MODES = ("interpolation", "extrapolation")


def damped_pendulum(state: np.ndarray, frequency: float = 2.0, damping: float = 0.2) -> np.ndarray:
    """d(θ, ω)/dt for states (..., 2)."""
    theta, omega = state[..., 0], state[..., 1]
    return np.stack([omega, -(frequency**2) * np.sin(theta) - damping * omega], axis=-1)


def pendulum_energy(state: np.ndarray, frequency: float = 2.0) -> np.ndarray:
    """E = ½ω² + Ω²(1 − cos θ) for states (..., 2)."""
    return 0.5 * state[..., 1] ** 2 + frequency**2 * (1 - np.cos(state[..., 0]))


def lotka_volterra(
    state: np.ndarray, alpha: float = 2 / 3, beta: float = 4 / 3, delta: float = 1.0, gamma: float = 1.0
) -> np.ndarray:
    """d(x, y)/dt for states (..., 2)."""
    x, y = state[..., 0], state[..., 1]
    return np.stack([alpha * x - beta * x * y, delta * x * y - gamma * y], axis=-1)


def lotka_volterra_invariant(
    state: np.ndarray, alpha: float = 2 / 3, beta: float = 4 / 3, delta: float = 1.0, gamma: float = 1.0
) -> np.ndarray:
    """V = δx − γ ln x + βy − α ln y, conserved along every trajectory."""
    x, y = state[..., 0], state[..., 1]
    return delta * x - gamma * np.log(x) + beta * y - alpha * np.log(y)


def van_der_pol(state: np.ndarray, mu: float = 1.0) -> np.ndarray:
    """d(x, y)/dt for states (..., 2)."""
    x, y = state[..., 0], state[..., 1]
    return np.stack([y, mu * (1 - x * x) * y - x], axis=-1)


SYSTEMS = {"pendulum": damped_pendulum, "lotka-volterra": lotka_volterra, "van-der-pol": van_der_pol}


def _initial_states(system: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if system == "pendulum":
        return np.stack([rng.uniform(-2, 2, n), rng.uniform(-1, 1, n)], axis=-1)
    if system == "lotka-volterra":
        return rng.uniform(0.5, 1.5, (n, 2))
    if system == "van-der-pol":
        return rng.uniform(-2, 2, (n, 2))
    raise ValueError(f"system must be one of {tuple(SYSTEMS)}, got {system!r}")


def _rk4_over(field, state: np.ndarray, gap: np.ndarray, max_step: float) -> np.ndarray:
    """state (N, D) after each sample's gap (N,) >= 0, by RK4 with equal per-sample steps <= max_step."""
    steps = max(1, int(math.ceil(float(gap.max(initial=0.0)) / max_step)))
    h = (gap / steps)[:, None]
    for _ in range(steps):
        k1 = field(state)
        k2 = field(state + 0.5 * h * k1)
        k3 = field(state + 0.5 * h * k2)
        k4 = field(state + h * k3)
        state = state + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return state


def integrate(field, initial: np.ndarray, times: np.ndarray, max_step: float = 1e-2) -> np.ndarray:
    """States at each sample's own times.

    Arguments:
        field: d(state)/dt as a function of states (N, D).
        initial: (N, D) states at t = 0.
        times: (N, T) non-decreasing times >= 0.
        max_step: largest RK4 step.

    Returns:
        (N, T, D) states.
    """
    initial, times = np.asarray(initial, dtype=np.float64), np.asarray(times, dtype=np.float64)
    if times.ndim != 2 or initial.ndim != 2 or times.shape[0] != initial.shape[0]:
        raise ValueError(f"initial must be (N, D) and times (N, T), got {initial.shape} and {times.shape}")
    if (times[:, 0] < 0).any() or (np.diff(times, axis=1) < 0).any():
        raise ValueError("times must be >= 0 and non-decreasing per sample")
    state, previous, out = initial, np.zeros(times.shape[0]), []
    for j in range(times.shape[1]):
        state = _rk4_over(field, state, times[:, j] - previous, max_step)
        previous = times[:, j]
        out.append(state)
    return np.stack(out, axis=1)


def sample_times(n: int, points: int, horizon: float, rng: np.random.Generator) -> np.ndarray:
    """(n, points) sorted times, uniform on [0, horizon], independently per sample."""
    return np.sort(rng.uniform(0.0, horizon, (n, points)), axis=1)


@dataclasses.dataclass
class TrajectoryTask:
    """An interpolation or extrapolation task (module docstring). All tensors float64.

    Attributes:
        inputs: Observations (N, T, C): the noisy values the model reads, NaN at the hidden points.
        target: Observations (N, T, C): the noisy values at every point (what a model is trained on).
        clean: (N, T, C) the true states (what the test scores).
        query: (N, T) bool, the hidden points, where predictions are scored.
        initial: (N, C) true states at t = 0.
        system: the system's name, "pendulum" or "lotka-volterra".
        mode: "interpolation" or "extrapolation".
    """

    inputs: Observations
    target: Observations
    clean: torch.Tensor
    query: torch.Tensor
    initial: torch.Tensor
    system: str
    mode: str

    def __getitem__(self, index) -> TrajectoryTask:
        return TrajectoryTask(
            self.inputs[index],
            self.target[index],
            self.clean[index],
            self.query[index],
            self.initial[index],
            self.system,
            self.mode,
        )

    def __len__(self) -> int:
        return self.clean.shape[0]


def trajectory_task(
    system: str,
    mode: str,
    n: int,
    points: int = 30,
    horizon: float = 10.0,
    noise_std: float = 0.05,
    observed_fraction: float = 0.5,
    seed: int = 0,
) -> TrajectoryTask:
    """Noisy irregular trajectories of ``system`` for ``mode``; see the module docstring.

    Arguments:
        system: "pendulum" (the damped pendulum) or "lotka-volterra".
        mode: "interpolation" (a random ``1 − observed_fraction`` of each sample's points hidden) or
            "extrapolation" (every point at t > horizon / 2 hidden).
        n: N, the number of samples.
        points: T, observation times per sample, drawn uniformly on [0, horizon] (default 30).
        horizon: the end of the time window (default 10.0).
        noise_std: standard deviation of the Gaussian noise added to every entry (>= 0; default 0.05).
        observed_fraction: interpolation only: the fraction of each sample's points the model sees, in
            (0, 1) (default 0.5; each sample keeps round(observed_fraction · points) points, its first
            among them).
        seed: seed of the numpy generator that draws initial states, times, noise and hidden points
            (default 0).

    Returns:
        A `TrajectoryTask` of N samples of T points and C = 2 channels, float64.

    Raises:
        ValueError: an unknown system or mode, ``observed_fraction`` outside (0, 1) or a negative
            ``noise_std``.
    """
    if system not in ("pendulum", "lotka-volterra"):
        raise ValueError(f"system must be 'pendulum' or 'lotka-volterra', got {system!r}")
    if mode not in TASK_MODES:
        raise ValueError(f"mode must be one of {TASK_MODES}, got {mode!r}")
    if not (0 < observed_fraction < 1):
        raise ValueError(f"observed_fraction must be in (0, 1), got {observed_fraction!r}")
    if not (noise_std >= 0):
        raise ValueError(f"noise_std must be >= 0, got {noise_std!r}")
    rng = np.random.default_rng(seed)
    initial = _initial_states(system, n, rng)
    times = sample_times(n, points, horizon, rng)
    clean = integrate(SYSTEMS[system], initial, times)
    noisy = clean + noise_std * rng.standard_normal(clean.shape)
    if mode == "interpolation":
        # each sample keeps a random subset of round(fraction · points) points, at least its first
        keep = max(1, round(observed_fraction * points))
        order = np.argsort(rng.uniform(size=(n, points - 1)), axis=1)[:, : keep - 1] + 1
        observed = np.zeros((n, points), dtype=bool)
        observed[np.arange(n)[:, None], order] = True
        observed[:, 0] = True
    else:
        observed = times <= horizon / 2
        observed[:, 0] = True
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    t = as_tensor(times)
    hidden_values = np.where(observed[..., None], noisy, np.nan)
    return TrajectoryTask(
        Observations.from_tensors(t, as_tensor(hidden_values)),
        Observations.from_tensors(t, as_tensor(noisy)),
        as_tensor(clean),
        torch.as_tensor(~observed),
        as_tensor(initial),
        system,
        mode,
    )


def semi_markov_gap(state: np.ndarray, gap_min: float = 0.1, gap_max: float = 0.6) -> np.ndarray:
    """τ(s) = gap_min + (gap_max − gap_min) / (1 + y²) for states (..., 2) = (x, y)."""
    return gap_min + (gap_max - gap_min) / (1 + state[..., 1] ** 2)


@dataclasses.dataclass
class SemiMarkovTask:
    """Observations of the semi-Markov Van der Pol process (module docstring). All tensors float64.

    Attributes:
        inputs: Observations (N, T, 2): the noisy states at their observation times.
        clean: (N, T, 2) the true states.
        gaps: (N, T) τ_n = t_{n+1} − t_n, the gap after each observation (the last one's next observation
            is simulated too, so every gap is known).
    """

    inputs: Observations
    clean: torch.Tensor
    gaps: torch.Tensor

    def __getitem__(self, index) -> SemiMarkovTask:
        return SemiMarkovTask(self.inputs[index], self.clean[index], self.gaps[index])

    def __len__(self) -> int:
        return self.clean.shape[0]


def semi_markov_task(
    n: int,
    points: int = 30,
    noise_std: float = 0.05,
    gap_min: float = 0.1,
    gap_max: float = 0.6,
    seed: int = 0,
    max_step: float = 1e-2,
) -> SemiMarkovTask:
    """``points`` observations per sample of the Van der Pol oscillator, each gap τ(s_n) set by the true state.

    Arguments:
        n: N, the number of samples.
        points: T, observations per sample (default 30).
        noise_std: standard deviation of the Gaussian noise added to every observed entry (default 0.05).
        gap_min: the shortest gap, τ at |y| → ∞ (default 0.1).
        gap_max: the longest gap, τ at y = 0 (default 0.6; needs 0 < gap_min <= gap_max).
        seed: seed of the numpy generator that draws initial states and noise (default 0).
        max_step: the largest RK4 step of the true system's integration (default 1e-2).

    Returns:
        A `SemiMarkovTask` of N samples of T points and 2 channels, float64.

    Raises:
        ValueError: unless 0 < gap_min <= gap_max.
    """
    if not (0 < gap_min <= gap_max):
        raise ValueError(f"need 0 < gap_min <= gap_max, got {gap_min}, {gap_max}")
    rng = np.random.default_rng(seed)
    state = _initial_states("van-der-pol", n, rng)
    states, times, gaps, t = [], [], [], np.zeros(n)
    for _ in range(points):
        gap = semi_markov_gap(state, gap_min, gap_max)
        states.append(state)
        times.append(t)
        gaps.append(gap)
        state = _rk4_over(van_der_pol, state, gap, max_step)
        t = t + gap
    clean = np.stack(states, 1)
    noisy = clean + noise_std * rng.standard_normal(clean.shape)
    as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    return SemiMarkovTask(
        Observations.from_tensors(as_tensor(np.stack(times, 1)), as_tensor(noisy)),
        as_tensor(clean),
        as_tensor(np.stack(gaps, 1)),
    )
