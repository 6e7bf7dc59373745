"""ODE-RNN: a GRU at each observation, an ODE between them.

Rubanova, Chen & Duvenaud 2019, *Latent ODEs for Irregularly-Sampled Time Series*, Alg. 1: h = 0 at the
first observation; between observations dh/dt = f(h), f an MLP (tanh, as the paper's code); at each
observation h ← GRU([x̃, m], h) with missing values zero (``fill="zero"``, the paper's data ⊕ mask input;
``fill="last"`` is the alternative). Samples of a batch have different gaps, so each gap is integrated in a
normalised time τ ∈ [0, 1]: dh/dτ = Δt_b · f(h), one solve per row for the whole batch
(`evolve_over_gaps`; the walk over the rows is
`walk_observations`, shared with ODE-RFWP and the Latent ODEs). With
every gap zero it is exactly its GRU over the observations; ``row_states`` gives h at every row, also at
all-NaN rows (query times).

It reads `Observations` with the conventions of
`recurrent` (what an observation is, Δt, the mask input, the empirical mean).
"""

from __future__ import annotations

import math

import torch

from ..observations import Observations
from ..solvers import Method, SolverOptions, evolve_over_gaps, solver_options
from .recurrent import (
    FILL_POLICIES,
    GRUCell,
    _ObservationModel,
    _positive_int,
    ode_mlp,
    state_after_last_observation,
    walk_observations,
)

__all__ = ["ODERNN"]


class ODERNN(_ObservationModel):
    """ODE-RNN (Rubanova et al. 2019): dh/dt = f(h) between observations, a GRU update at each.

    Arguments:
        in_channels: channels C of the observations.
        num_classes: number of classes.
        hidden: width of h (default 32).
        width: width of the hidden layers of f's MLP (default 64).
        depth: number of tanh hidden layers of f's MLP (default 1; ``depth=0``: f(h) = A h + b, linear).
        solver: `SolverOptions` or a method object (default `Auto`: rk4, one step per gap): a fixed-step method's
            ``step_size`` is the step in the normalised gap time τ ∈ [0, 1] (None: one step per gap), an adaptive
            method's rtol/atol control its error over the whole batch; gradients `Checkpoint` by default.
        fill: "zero" (default, the paper's input: data with zeros where missing, plus the mask) or
            "last".
        chrono_t_max: None (default): PyTorch's initialisation; a number > 2: chrono initialisation of the GRU's
            keep gate z for dependencies of up to this many observations (`GRUCell`).
        time_unit: the unit of time of the ODE (default 1.0): gaps are divided by it. The registry sets it to the
            training data's longest span (so a sample spans about 1, as Rubanova et al.'s code normalises times):
            f(h) saturates where h is large, so over raw index gaps h drifted linearly to norms of 400 along a
            250-point series and started training at losses of 15-67 (benchmarks/defaults_sweep.py).

    ``forward(observations)`` gives logits (B, num_classes) from h after each sample's last observation.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden: int = 32,
        width: int = 64,
        depth: int = 1,
        *,
        solver: SolverOptions | Method | None = None,
        fill: str = "zero",
        chrono_t_max: float | None = None,
        time_unit: float = 1.0,
    ):
        super().__init__(in_channels, num_classes, hidden)
        _positive_int("width", width)
        _positive_int("depth", depth, minimum=0)
        if fill not in FILL_POLICIES:
            raise ValueError(f"fill must be one of {FILL_POLICIES}, got {fill!r}")
        if (
            isinstance(time_unit, bool)
            or not isinstance(time_unit, (int, float))
            or not (math.isfinite(time_unit) and time_unit > 0)
        ):
            raise ValueError(f"time_unit must be a positive finite number, got {time_unit!r}")
        self.time_unit = float(time_unit)
        self.fill = fill
        self.f = ode_mlp(hidden, width, depth)
        self.cell = GRUCell(2 * in_channels, hidden, chrono_t_max)
        self.solver = solver_options(solver)

    def evolve(self, h: torch.Tensor, gap: torch.Tensor) -> torch.Tensor:
        """h after each sample's gap under dh/dt = f(h) (`evolve_over_gaps`); a zero gap leaves h exactly
        unchanged.

        Arguments:
            h: (B, hidden) states at the start of each sample's gap.
            gap: (B,) each sample's gap Δt >= 0.

        Returns:
            (B, hidden) states after the gaps.
        """
        return evolve_over_gaps(self.f, h, gap / self.time_unit, self.solver)

    def _walk(self, observations: Observations):
        self._check(observations)
        values = observations.values
        state: tuple[torch.Tensor, ...] = (values.new_zeros(observations.batch_size, self.hidden),)
        if self.fill == "last":
            state += (self.channel_mean(observations).expand(values.shape[0], -1),)

        def evolve(state, gap):
            return (self.evolve(state[0], gap),) + state[1:]

        def update(x, m, state):
            x_in = self.filled(x, m, state[1] if self.fill == "last" else None, self.fill)
            h = self.cell(torch.cat([x_in, m.to(values.dtype)], dim=-1), state[0])
            return (h,) + ((torch.where(m, x, state[1]),) if self.fill == "last" else ())

        return walk_observations(observations, state, evolve, update)

    def row_states(self, observations: Observations) -> tuple[torch.Tensor, torch.Tensor]:
        """h at every row: evolved to the row's time before reading it, and after reading it (see
        `walk_observations`).

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T rows.

        Returns:
            ``(before, after)``, each (B, T, hidden).
        """
        before, after = zip(*[(b[0], a[0]) for b, a in self._walk(observations)])
        return torch.stack(before, 1), torch.stack(after, 1)

    def final_hidden(self, observations: Observations) -> torch.Tensor:
        """h just after each sample's own last observation.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T rows.

        Returns:
            (B, hidden).
        """
        return state_after_last_observation(observations, self._walk(observations))[0]
