"""GRU-Δt and GRU-D: GRUs over the raw observations, with the time since the previous observation as input
(GRU-Δt) or as a decay of the input and the hidden state (GRU-D).

Both read `Observations` with the conventions of
`recurrent` (what an observation is, Δt, the mask input, the empirical mean).

- **GRU-Δt** (the NCDE paper's baseline): a GRU over the observations with input [x̃, m, Δt], x̃ the
  values with a missing channel filled by its last observation (``fill="last"``; before a channel's first
  observation, its empirical mean) or by zero (``fill="zero"``).
- **GRU-D** (Che et al. 2018, *Recurrent Neural Networks for Multivariate Time Series with Missing
  Values*, Eq. 3-5): per channel d, δ^d is the time since d was last observed: δ = 0 at the first
  observation, and at each later one δ_t = Δt + δ_{t−1} if d was missing at the previous observation,
  else Δt. Decays γ_x = exp(−max(0, w_γx ⊙ δ + b_γx)) (diagonal) and γ_h = exp(−max(0, W_γh δ + b_γh))
  (full); input x̂ = m ⊙ x + (1 − m) ⊙ (γ_x ⊙ x_last + (1 − γ_x) ⊙ x_mean) (x_last = x_mean before a
  channel's first observation), hidden ĥ = γ_h ⊙ h, then h' = GRU([x̂, m], ĥ) (the paper's V m terms).
"""

from __future__ import annotations

import torch
from torch import nn

from ..observations import Observations
from .recurrent import FILL_POLICIES, GRUCell, _ObservationModel

__all__ = ["GRUDeltaT", "GRUD"]


class GRUDeltaT(_ObservationModel):
    """GRU-Δt: a GRU over the observations with input [x̃, m, Δt] (module docstring).

    Arguments:
        in_channels: channels C of the observations.
        num_classes: number of classes.
        hidden: width of h.
        fill: "last" (default: last observation, the empirical mean before a channel's first) or "zero".
        chrono_t_max: None (default): PyTorch's initialisation; a number > 2: chrono initialisation of the GRU's
            keep gate z for dependencies of up to this many observations (`GRUCell`).

    ``forward(observations)`` gives logits (B, num_classes) from h after each sample's last observation.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden: int = 32,
        *,
        fill: str = "last",
        chrono_t_max: float | None = None,
    ):
        super().__init__(in_channels, num_classes, hidden)
        if fill not in FILL_POLICIES:
            raise ValueError(f"fill must be one of {FILL_POLICIES}, got {fill!r}")
        self.fill = fill
        self.cell = GRUCell(2 * in_channels + 1, hidden, chrono_t_max)

    def cell_inputs(self, observations: Observations):
        """The GRU's input at every row, and which rows are observations.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T rows.

        Returns:
            ``(inputs, events)``: (B, T, 2C + 1) inputs [x̃, m, Δt] and (B, T) bool, True at rows with an
                observation.
        """
        self._check(observations)
        values = observations.values
        last = self.channel_mean(observations).expand(values.shape[0], -1) if self.fill == "last" else None
        inputs, events = [], []
        for event, m, x, gap in self.rows(observations):
            x_in = self.filled(x, m, last, self.fill)
            inputs.append(torch.cat([x_in, m.to(values.dtype), gap.unsqueeze(-1)], dim=-1))
            events.append(event)
            if last is not None:
                last = torch.where(m, x, last)
        return torch.stack(inputs, 1), torch.stack(events, 1)

    def final_hidden(self, observations: Observations) -> torch.Tensor:
        """h after each sample's last observation.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T rows.

        Returns:
            (B, hidden).
        """
        inputs, events = self.cell_inputs(observations)
        h = inputs.new_zeros(inputs.shape[0], self.hidden)
        for i in range(inputs.shape[1]):
            h = torch.where(events[:, i : i + 1], self.cell(inputs[:, i], h), h)
        return h


class GRUD(_ObservationModel):
    """GRU-D (Che et al. 2018): input and hidden decay with the time since each channel's last observation.

    Arguments:
        in_channels: channels C of the observations.
        num_classes: number of classes.
        hidden: width of h.
        chrono_t_max: None (default): PyTorch's initialisation; a number > 2: chrono initialisation of the GRU's
            keep gate z for dependencies of up to this many observations (`GRUCell`).

    ``forward(observations)`` gives logits (B, num_classes) from h after each sample's last observation;
    ``decays(observations)`` gives δ, γ_x, γ_h and x̂ at every row (for inspection and tests).
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 32, *, chrono_t_max: float | None = None):
        super().__init__(in_channels, num_classes, hidden)
        self.decay_x_weight = nn.Parameter(torch.empty(in_channels))  # diagonal W_γx
        self.decay_x_bias = nn.Parameter(torch.zeros(in_channels))
        self.decay_h = nn.Linear(in_channels, hidden)  # W_γh, b_γh
        nn.init.uniform_(self.decay_x_weight, -1.0 / in_channels**0.5, 1.0 / in_channels**0.5)
        self.cell = GRUCell(2 * in_channels, hidden, chrono_t_max)

    def _walk(self, observations: Observations, h: torch.Tensor | None):
        self._check(observations)
        values = observations.values
        mean = self.channel_mean(observations).expand(values.shape[0], -1)
        last = mean
        delta = torch.zeros_like(mean)
        prev_mask = torch.ones_like(mean, dtype=torch.bool)
        for event, m, x, gap in self.rows(observations):
            # δ_t = Δt + δ_{t−1} if the channel was missing at the previous observation, else Δt (0 at the first).
            d = gap.unsqueeze(-1) + torch.where(prev_mask, torch.zeros_like(delta), delta)
            gamma_x = torch.exp(-torch.relu(self.decay_x_weight * d + self.decay_x_bias))
            gamma_h = torch.exp(-torch.relu(self.decay_h(d)))
            x_hat = torch.where(m, x, gamma_x * last + (1 - gamma_x) * mean)
            if h is not None:
                h_new = self.cell(torch.cat([x_hat, m.to(values.dtype)], dim=-1), gamma_h * h)
                h = torch.where(event.unsqueeze(-1), h_new, h)
            yield event, d, gamma_x, gamma_h, x_hat, h
            e = event.unsqueeze(-1)
            delta = torch.where(e, d, delta)
            prev_mask = torch.where(e, m, prev_mask)
            last = torch.where(m, x, last)

    def decays(self, observations: Observations) -> dict[str, torch.Tensor]:
        """δ, γ_x, γ_h and x̂ at every row (for inspection and tests).

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T rows.

        Returns:
            A dict of tensors at every row: ``event`` (B, T) bool, ``delta`` δ (B, T, C), ``gamma_x`` γ_x
                (B, T, C), ``gamma_h`` γ_h (B, T, hidden), ``x_hat`` x̂ (B, T, C). Entries at rows that are not
                observations are computed but unused.
        """
        parts = list(zip(*[step[:5] for step in self._walk(observations, None)]))
        names = ("event", "delta", "gamma_x", "gamma_h", "x_hat")
        return {name: torch.stack(part, dim=1) for name, part in zip(names, parts)}

    def final_hidden(self, observations: Observations) -> torch.Tensor:
        """h after each sample's last observation.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T rows.

        Returns:
            (B, hidden).
        """
        self._check(observations)  # before reading anything of it
        last = observations.values.new_zeros(observations.batch_size, self.hidden)
        for step in self._walk(observations, last):
            last = step[-1]
        return last
