"""Shared pieces of the recurrent baselines: the GRU cell, the base of the models on raw observations, and
the walk over the observations with an ODE between them.

The NCDE paper (Kidger et al. 2020, appendix on baselines) compares neural CDEs with four recurrent models,
each implemented from its own paper, with the NCDE paper's adaptations noted, in its own module:
GRU-ODE in `gru_ode`, GRU-Δt and GRU-D in
`gru_observations`, ODE-RNN in `ode_rnn`. This module
holds what they (and ODE-RFWP, `rfwp`, and the Latent ODEs,
`latent`) share.

**GRU cell.** All four use one GRU cell, in the form of Cho et al. (2014) with the reset gate inside the
recurrent product (as GRU-D's equations and the GRU-ODE paper write it):

    z = σ(W_z x + U_z h + b_z),  r = σ(W_r x + U_r h + b_r),  g = tanh(W_g x + U_g (r ⊙ h) + b_g),
    h' = z ⊙ h + (1 − z) ⊙ g.

z is the "keep" gate (torch and De Brouwer et al.'s convention); GRU-D's paper writes
h' = (1 − z) ⊙ h + z ⊙ g, the same cell with z renamed 1 − z. (torch.nn.GRUCell differs: it applies r
after U_g h and has a second bias there.)

**Observations.** GRU-Δt, GRU-D and ODE-RNN read `Observations`. An
*observation* is a row of a sample, within its length, where at least one channel is observed; a row
where every channel is missing (a dropped time point, or padding) is not one: the state does not change
there and the time until the next observation keeps running. Hence a sample gets the same answer alone
or padded in a batch, and each sample is read at its own last observation. Δt is the time since the
sample's previous observation (0 at its first), and the mask m (1 where a channel is observed) is always
an input, so a filled-in value is never mistaken for a measurement.

**An ODE between observations.** `walk_observations` is the walk over the rows with an ODE between observations
(ODE-RNN, ODE-RFWP and the Latent ODEs' encoders), `ode_mlp` the ODE's f.

**Empirical mean** (GRU-D's x_mean, and the fill before a channel's first observation with
``fill="last"``): the mean of each channel's observed values. Call ``set_empirical_mean(train_inputs)``
once with the training observations (stored as a buffer, saved with the model). If it was never set,
the mean of the observed values *in the current batch* is used: a sample's answer then depends on the
other samples of its batch, so set it for reproducible evaluation. Channels with no observed value
raise an error; nothing is silently zero-filled.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..gates import check_t_max, chrono_bias
from ..input_checks import check_input_matches, check_input_type, check_num_outputs
from ..observations import Observations

__all__ = ["GRUCell", "FILL_POLICIES", "walk_observations", "state_after_last_observation", "ode_mlp"]

FILL_POLICIES = ("last", "zero")


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class GRUCell(nn.Module):
    """h' = z ⊙ h + (1 − z) ⊙ g with the gates of the module docstring (Cho et al. 2014 form).

    Arguments:
        input_size: channels of x.
        hidden_size: width of h.
        chrono_t_max: None (default): PyTorch's initialisation; a number > 2: chrono initialisation, the keep
            gate's bias b_z = `chrono_bias`(hidden_size, chrono_t_max) = log u, u ~ U(1, chrono_t_max − 1), so that
            the update 1 − z ≈ 1/(1 + u) forgets over 2 to chrono_t_max steps (time units for GRU-ODE).
    """

    def __init__(self, input_size: int, hidden_size: int, chrono_t_max: float | None = None):
        super().__init__()
        if chrono_t_max is not None:
            check_t_max("chrono_t_max", chrono_t_max)
        self.input = nn.Linear(input_size, 3 * hidden_size)  # W_z, W_r, W_g and the biases
        self.recurrent_zr = nn.Linear(hidden_size, 2 * hidden_size, bias=False)  # U_z, U_r
        self.recurrent_g = nn.Linear(hidden_size, hidden_size, bias=False)  # U_g
        self.hidden_size, self.chrono_t_max = hidden_size, chrono_t_max
        if chrono_t_max is not None:  # drawn last: every other parameter is initialised as without it
            keep_bias = self.input.bias[:hidden_size]
            with torch.no_grad():
                keep_bias.copy_(chrono_bias(hidden_size, chrono_t_max, dtype=keep_bias.dtype, device=keep_bias.device))

    def gates(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(z, r, g), each (B, hidden)."""
        return self.gates_from_input(self.input(x), h)

    def gates_from_input(self, projected: torch.Tensor, h: torch.Tensor):
        """`gates` from the input's projection ``self.input(x)`` (B, 3·hidden), which solvers compute for
        many steps at once."""
        xz, xr, xg = projected.chunk(3, dim=-1)
        hz, hr = self.recurrent_zr(h).chunk(2, dim=-1)
        z = torch.sigmoid(xz + hz)
        r = torch.sigmoid(xr + hr)
        g = torch.tanh(xg + self.recurrent_g(r * h))
        return z, r, g

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        z, _, g = self.gates(x, h)
        return z * h + (1 - z) * g


# ---------------------------------------------------------------------------------------------------
# the base of the models on raw observations (GRU-Δt, GRU-D, ODE-RNN, ODE-RFWP)


class _ObservationModel(nn.Module):
    """Input checks, the empirical mean and the walk over the observations, shared by the RNNs."""

    empirical_mean: torch.Tensor  # a buffer

    def __init__(self, in_channels: int, num_classes: int, hidden: int):
        super().__init__()
        _positive_int("in_channels", in_channels)
        _positive_int("hidden", hidden)
        check_num_outputs(num_classes)
        self.in_channels, self.hidden = in_channels, hidden
        # NaN = not set (a persistent buffer, so checkpoints round-trip whether or not it was set).
        self.register_buffer("empirical_mean", torch.full((in_channels,), float("nan")))
        self.readout: nn.Linear | None = nn.Linear(hidden, num_classes)  # None in encoders

    @torch.no_grad()
    def set_empirical_mean(self, observations: Observations) -> torch.Tensor:
        """Store the mean of each channel's observed values in ``observations`` (the training data)."""
        self._check(observations)
        mean = self._observed_mean(observations)
        self.empirical_mean = mean.to(self.empirical_mean.device, self.empirical_mean.dtype)
        return self.empirical_mean

    def _observed_mean(self, observations: Observations) -> torch.Tensor:
        mask = observations.mask
        count = mask.sum(dim=(0, 1))
        if (count == 0).any():
            bad = torch.nonzero(count == 0).flatten().tolist()
            raise ValueError(
                f"channel(s) {bad} have no observed value, so their empirical mean is undefined; call "
                "set_empirical_mean with data that observes every channel"
            )
        values = torch.where(mask, observations.values, torch.zeros_like(observations.values))
        return values.sum(dim=(0, 1)) / count.to(values.dtype)

    def channel_mean(self, observations: Observations) -> torch.Tensor:
        """(C,) the stored empirical mean, or the current batch's if none was set (module docstring)."""
        if not torch.isnan(self.empirical_mean).any():
            return self.empirical_mean.to(observations.values.dtype)
        return self._observed_mean(observations)

    def _check(self, observations: Observations) -> None:
        check_input_type(self, observations, Observations)
        if observations.channels != self.in_channels:
            raise ValueError(
                f"observations have {observations.channels} channels but the model expects {self.in_channels}"
            )
        check_input_matches(self, observations)

    @staticmethod
    def rows(observations: Observations):
        """Walk the rows: yields (event (B,) bool, mask (B, C) bool, x (B, C) with 0 where unobserved,
        gap (B,)): gap is the time since the sample's previous observation at an observation after its
        first, and 0 otherwise."""
        mask = observations.mask
        event = mask.any(-1)
        times = observations.times.to(observations.values.dtype)
        times = torch.where(observations.valid, times, torch.zeros_like(times))  # padding times may be NaN
        values = torch.where(mask, observations.values, torch.zeros_like(observations.values))
        previous = torch.zeros_like(times[:, 0])
        started = torch.zeros_like(event[:, 0])
        for i in range(times.shape[1]):
            gap = torch.where(event[:, i] & started, times[:, i] - previous, torch.zeros_like(previous))
            yield event[:, i], mask[:, i], values[:, i], gap
            previous = torch.where(event[:, i], times[:, i], previous)
            started = started | event[:, i]

    def filled(self, x, m, last, fill):
        """The cell's value input: x where observed, else the last observation or zero."""
        if fill == "last":
            return torch.where(m, x, last)
        return x  # zero where unobserved (rows() zeroes them); the mask input says which

    def final_hidden(self, observations: Observations) -> torch.Tensor:
        """(B, hidden) the state that the readout reads (each model's own)."""
        raise NotImplementedError

    def forward(self, observations: Observations) -> torch.Tensor:
        if self.readout is None:
            raise ValueError(f"this {type(self).__name__} has no readout (it serves as an encoder): use final_hidden")
        return self.readout(self.final_hidden(observations))


# ---------------------------------------------------------------------------------------------------
# an ODE between observations (ODE-RNN, ODE-RFWP, the Latent ODEs' encoders)


def ode_mlp(hidden: int, width: int, depth: int, activation: type[nn.Module] = nn.Tanh) -> nn.Module:
    """f of ODE-RNN: Linear(hidden → width), act, (depth − 1) × [Linear(width → width), act],
    Linear(width → hidden); ``depth=0`` gives the affine map Linear(hidden → hidden)."""
    if depth == 0:
        return nn.Linear(hidden, hidden)
    layers: list[nn.Module] = [nn.Linear(hidden, width), activation()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), activation()]
    layers.append(nn.Linear(width, hidden))
    return nn.Sequential(*layers)


def walk_observations(observations: Observations, state: tuple[torch.Tensor, ...], evolve, update):
    """Walk a batch row by row: an ODE between rows, a discrete update at every observation (ODE-RNN,
    ODE-RFWP and the Latent ODE's encoders).

    At row i each sample's state is first evolved over the time since its previous valid row (0 before its
    first observation and after its length, where the state does not move), then, if the row is an
    observation (at least one channel observed), updated with the row. Rows where every channel is missing
    are thus points where the state is read without being changed, so query times can be interleaved with
    the observations as all-NaN rows. By the flow property of the ODE, evolving through such a row equals
    evolving over the whole gap (to solver accuracy), and each sample only ever sees its own times.

    Arguments:
        observations: the batch.
        state: a tuple of (B, ...) tensors, the state before the first row.
        evolve: ``evolve(state, gap) -> state``, gap (B,) (zero for samples that must not move).
        update: ``update(x, m, state) -> state`` with x (B, C) the row's values (0 where missing) and m
            (B, C) bool its mask; its result is kept only for samples observed in the row.

    Yields:
        per row, ``(before, after)``: the state evolved to the row's time, and after reading the row.
    """
    mask = observations.mask
    event = mask.any(-1)
    valid = observations.valid
    times = observations.times.to(observations.values.dtype)
    times = torch.where(valid, times, torch.zeros_like(times))  # padding times may be NaN
    values = torch.where(mask, observations.values, torch.zeros_like(observations.values))
    previous = times[:, 0]
    started = torch.zeros_like(event[:, 0])
    for i in range(times.shape[1]):
        moving = valid[:, i] & started
        gap = torch.where(moving, times[:, i] - previous, torch.zeros_like(previous))
        before = evolve(state, gap)
        new = update(values[:, i], mask[:, i], before)
        after = tuple(torch.where(event[:, i].view(-1, *([1] * (b.dim() - 1))), n, b) for n, b in zip(new, before))
        yield before, after
        state = after
        started = started | event[:, i]
        previous = torch.where(started & valid[:, i], times[:, i], previous)


def state_after_last_observation(observations: Observations, walk) -> tuple[torch.Tensor, ...]:
    """The state just after each sample's own last observation, from a `walk_observations` walk (a
    sample is read there, not at the end of its padding or of trailing rows with nothing observed)."""
    event = observations.mask.any(-1)
    final = None
    for i, (_, state) in enumerate(walk):
        if final is None:
            final = state
        else:
            final = tuple(torch.where(event[:, i].view(-1, *([1] * (s.dim() - 1))), s, f) for s, f in zip(state, final))
    assert final is not None  # validated observations have at least one time step
    return final
