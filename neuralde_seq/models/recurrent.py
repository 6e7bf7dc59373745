"""Recurrent baselines: GRU-ODE, GRU-Δt, GRU-D and ODE-RNN, as the NCDE paper compares them.

The NCDE paper (Kidger et al. 2020, appendix on baselines) compares neural CDEs with these four models;
each is implemented here from its own paper, with the NCDE paper's adaptations noted.

**GRU cell.** All four use one GRU cell, in the form of Cho et al. (2014) with the reset gate inside the
recurrent product (as GRU-D's equations and the GRU-ODE paper write it)::

    z = σ(W_z x + U_z h + b_z),  r = σ(W_r x + U_r h + b_r),  g = tanh(W_g x + U_g (r ⊙ h) + b_g),
    h' = z ⊙ h + (1 − z) ⊙ g.

z is the "keep" gate (torch and De Brouwer et al.'s convention); GRU-D's paper writes
h' = (1 − z) ⊙ h + z ⊙ g, the same cell with z renamed 1 − z. (torch.nn.GRUCell differs: it applies r
after U_g h and has a second bias there.)

**Observations.** GRU-Δt, GRU-D and ODE-RNN read :class:`~neuralde_seq.observations.Observations`. An
*observation* is a row of a sample, within its length, where at least one channel is observed; a row
where every channel is missing (a dropped time point, or padding) is not one: the state does not change
there and the time until the next observation keeps running. Hence a sample gets the same answer alone
or padded in a batch, and each sample is read at its own last observation. Δt is the time since the
sample's previous observation (0 at its first), and the mask m (1 where a channel is observed) is always
an input, so a filled-in value is never mistaken for a measurement.

- **GRU-Δt** (the NCDE paper's baseline): a GRU over the observations with input [x̃, m, Δt], x̃ the
  values with a missing channel filled by its last observation (``fill="last"``; before a channel's first
  observation, its empirical mean) or by zero (``fill="zero"``).
- **GRU-D** (Che et al. 2018, *Recurrent Neural Networks for Multivariate Time Series with Missing
  Values*, Eq. 3-5): per channel d, δ^d is the time since d was last observed: δ = 0 at the first
  observation, and at each later one δ_t = Δt + δ_{t−1} if d was missing at the previous observation,
  else Δt. Decays γ_x = exp(−max(0, w_γx ⊙ δ + b_γx)) (diagonal) and γ_h = exp(−max(0, W_γh δ + b_γh))
  (full); input x̂ = m ⊙ x + (1 − m) ⊙ (γ_x ⊙ x_last + (1 − γ_x) ⊙ x_mean) (x_last = x_mean before a
  channel's first observation), hidden ĥ = γ_h ⊙ h, then h' = GRU([x̂, m], ĥ) (the paper's V m terms).
- **ODE-RNN** (Rubanova, Chen & Duvenaud 2019, *Latent ODEs for Irregularly-Sampled Time Series*,
  Alg. 1): h = 0 at the first observation; between observations dh/dt = f(h), f an MLP (tanh, as the
  paper's code); at each observation h ← GRU([x̃, m], h) with missing values zero (``fill="zero"``,
  the paper's data ⊕ mask input; ``fill="last"`` is the alternative). Samples of a batch have different
  gaps, so each gap is integrated in a normalised time τ ∈ [0, 1]: dh/dτ = Δt_b · f(h), one
  solve per row for the whole batch (:func:`~neuralde_seq.solvers.evolve_over_gaps`; the walk over the rows is
  :func:`walk_observations`, shared with ODE-RFWP and the Latent ODEs). With every gap zero it is
  exactly its GRU over the observations; ``row_states`` gives h at every row, also at all-NaN rows
  (query times).
- **GRU-ODE** (De Brouwer et al. 2019, *GRU-ODE-Bayes*, Eq. 3, driven by the interpolated control as in
  the NCDE paper): dh/ds = (1 − z) ⊙ (g − h) = GRU(X(s), h) − h with z, r, g the gates above of
  [X(s), h]; h(t0) = 0, read at each sample's own final knot. Reads a :class:`Control`.

**Empirical mean** (GRU-D's x_mean, and the fill before a channel's first observation with
``fill="last"``): the mean of each channel's observed values. Call ``set_empirical_mean(train_inputs)``
once with the training observations (stored as a buffer, saved with the model). If it was never set,
the mean of the observed values *in the current batch* is used: a sample's answer then depends on the
other samples of its batch, so set it for reproducible evaluation. Channels with no observed value
raise an error; nothing is silently zero-filled.
"""
from __future__ import annotations

import torch
from torch import nn

from ..controls import Control
from ..input_checks import check_input_matches, check_input_type
from ..observations import Observations
from ..solvers import SolverOptions, evolve_over_gaps, solve

__all__ = ["GRUCell", "GRUODE", "GRUDeltaT", "GRUD", "ODERNN", "FILL_POLICIES", "walk_observations",
           "state_after_last_observation", "ode_mlp"]

FILL_POLICIES = ("last", "zero")


def _positive_int(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_classes(num_classes):
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")


class GRUCell(nn.Module):
    """h' = z ⊙ h + (1 − z) ⊙ g with the gates of the module docstring (Cho et al. 2014 form).

    Arguments:
        input_size: channels of x.
        hidden_size: width of h.
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input = nn.Linear(input_size, 3 * hidden_size)  # W_z, W_r, W_g and the biases
        self.recurrent_zr = nn.Linear(hidden_size, 2 * hidden_size, bias=False)  # U_z, U_r
        self.recurrent_g = nn.Linear(hidden_size, hidden_size, bias=False)  # U_g
        self.hidden_size = hidden_size

    def gates(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(z, r, g), each (B, hidden)."""
        return self.gates_from_input(self.input(x), h)

    def gates_from_input(self, projected: torch.Tensor, h: torch.Tensor):
        """:meth:`gates` from the input's projection ``self.input(x)`` (B, 3·hidden), which solvers compute for
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
# GRU-ODE: a direct ODE on the control

class _GRUODEDynamics(nn.Module):
    needs_value = True
    needs_derivative = False

    def __init__(self, cell: GRUCell):
        super().__init__()
        self.cell = cell

    def forward(self, h, x, dx):
        return self.rate_from_features(h, *self.control_features(x, dx))

    def control_features(self, x, dx):
        return (self.cell.input(x),)

    def rate_from_features(self, h, projected):
        z, _, g = self.cell.gates_from_input(projected, h)
        return (1 - z) * (g - h)


class GRUODE(nn.Module):
    """GRU-ODE classifier on an interpolated control: dh/ds = (1 − z) ⊙ (g − h), gates of [X(s), h].

    Arguments:
        in_channels: channels of the control.
        num_classes: number of classes.
        hidden: width of h.
        solver: :class:`~neuralde_seq.solvers.SolverOptions` (default rk4, one step per knot, checkpointed gradients).

    ``forward(control)`` gives logits (B, num_classes) from h at each sample's own final knot (the solver
    freezes a sample after it: a direct ODE does not stop by itself on a constant control);
    ``forward(control, at_knots=True)`` the logits at every knot; ``hidden_states`` gives h itself.
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 32, *, solver: SolverOptions | None = None):
        super().__init__()
        _positive_int("in_channels", in_channels)
        _positive_int("hidden", hidden)
        _check_classes(num_classes)
        self.cell = GRUCell(in_channels, hidden)
        self.dynamics = _GRUODEDynamics(self.cell)
        self.readout = nn.Linear(hidden, num_classes)
        self.solver = solver or SolverOptions()
        self.in_channels, self.hidden = in_channels, hidden

    def hidden_states(self, control: Control, at_knots: bool = False, h0: torch.Tensor | None = None):
        """h at each sample's own final knot, (B, hidden), or at every knot, (B, K, hidden); ``h0`` replaces
        h(t0) = 0."""
        check_input_type(self, control, Control)
        if control.piecewise_constant:
            raise ValueError("GRU-ODE reads the value of an interpolated control, not log-signature windows")
        if control.channels != self.in_channels:
            raise ValueError(f"control has {control.channels} channels but the model expects {self.in_channels}")
        check_input_matches(self, control)
        h0 = control.coeffs.new_zeros(control.batch_size, self.hidden) if h0 is None else h0
        return solve(self.dynamics, control, h0, self.solver, at_knots=at_knots)

    def forward(self, control: Control, at_knots: bool = False) -> torch.Tensor:
        return self.readout(self.hidden_states(control, at_knots=at_knots))


# ---------------------------------------------------------------------------------------------------
# models on raw observations

class _ObservationModel(nn.Module):
    """Input checks, the empirical mean and the walk over the observations, shared by the RNNs."""

    def __init__(self, in_channels: int, num_classes: int, hidden: int):
        super().__init__()
        _positive_int("in_channels", in_channels)
        _positive_int("hidden", hidden)
        _check_classes(num_classes)
        self.in_channels, self.hidden = in_channels, hidden
        # NaN = not set (a persistent buffer, so checkpoints round-trip whether or not it was set).
        self.register_buffer("empirical_mean", torch.full((in_channels,), float("nan")))
        self.readout = nn.Linear(hidden, num_classes)

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
            raise ValueError(f"channel(s) {bad} have no observed value, so their empirical mean is undefined; call "
                             "set_empirical_mean with data that observes every channel")
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
            raise ValueError(f"observations have {observations.channels} channels but the model expects "
                             f"{self.in_channels}")
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

    def forward(self, observations: Observations) -> torch.Tensor:
        return self.readout(self.final_hidden(observations))


class GRUDeltaT(_ObservationModel):
    """GRU-Δt: a GRU over the observations with input [x̃, m, Δt] (module docstring).

    Arguments:
        in_channels: channels C of the observations.
        num_classes: number of classes.
        hidden: width of h.
        fill: "last" (default: last observation, the empirical mean before a channel's first) or "zero".

    ``forward(observations)`` gives logits (B, num_classes) from h after each sample's last observation.
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 32, *, fill: str = "last"):
        super().__init__(in_channels, num_classes, hidden)
        if fill not in FILL_POLICIES:
            raise ValueError(f"fill must be one of {FILL_POLICIES}, got {fill!r}")
        self.fill = fill
        self.cell = GRUCell(2 * in_channels + 1, hidden)

    def cell_inputs(self, observations: Observations):
        """The GRU's input at every row, (B, T, 2C + 1), and the rows that are observations (B, T)."""
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

    ``forward(observations)`` gives logits (B, num_classes) from h after each sample's last observation;
    ``decays(observations)`` gives δ, γ_x, γ_h and x̂ at every row (for inspection and tests).
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 32):
        super().__init__(in_channels, num_classes, hidden)
        self.decay_x_weight = nn.Parameter(torch.empty(in_channels))  # diagonal W_γx
        self.decay_x_bias = nn.Parameter(torch.zeros(in_channels))
        self.decay_h = nn.Linear(in_channels, hidden)  # W_γh, b_γh
        nn.init.uniform_(self.decay_x_weight, -1.0 / in_channels ** 0.5, 1.0 / in_channels ** 0.5)
        self.cell = GRUCell(2 * in_channels, hidden)

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
        """At every row (B, T, ·): ``delta`` δ, ``gamma_x`` γ_x, ``gamma_h`` γ_h, ``x_hat`` x̂, ``event``.
        Entries at rows that are not observations are computed but unused."""
        parts = list(zip(*[step[:5] for step in self._walk(observations, None)]))
        names = ("event", "delta", "gamma_x", "gamma_h", "x_hat")
        return {name: torch.stack(part, dim=1) for name, part in zip(names, parts)}

    def final_hidden(self, observations: Observations) -> torch.Tensor:
        self._check(observations)  # before reading anything of it
        h = observations.values.new_zeros(observations.batch_size, self.hidden)
        for *_, h in self._walk(observations, h):
            pass
        return h


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
    """The state just after each sample's own last observation, from a :func:`walk_observations` walk (a
    sample is read there, not at the end of its padding or of trailing rows with nothing observed)."""
    event = observations.mask.any(-1)
    final = None
    for i, (_, state) in enumerate(walk):
        if final is None:
            final = state
        else:
            final = tuple(torch.where(event[:, i].view(-1, *([1] * (s.dim() - 1))), s, f)
                          for s, f in zip(state, final))
    return final


class ODERNN(_ObservationModel):
    """ODE-RNN (Rubanova et al. 2019): dh/dt = f(h) between observations, a GRU update at each.

    Arguments:
        in_channels: channels C of the observations.
        num_classes: number of classes.
        hidden: width of h.
        width, depth: f's MLP (``depth`` tanh layers of ``width``; ``depth=0``: f(h) = A h + b, linear).
        solver: :class:`~neuralde_seq.solvers.SolverOptions`: method (rk4, dopri5, ...), ``step_size``
            as the step in the normalised gap time τ ∈ [0, 1] (None: one step per gap), rtol/atol for
            adaptive methods (their error control then spans the batch), gradient (default "checkpoint").
        fill: "zero" (default, the paper's input: data with zeros where missing, plus the mask) or
            "last".

    ``forward(observations)`` gives logits (B, num_classes) from h after each sample's last observation.
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 32, width: int = 64, depth: int = 1, *,
                 solver: SolverOptions | None = None, fill: str = "zero"):
        super().__init__(in_channels, num_classes, hidden)
        _positive_int("width", width)
        _positive_int("depth", depth, minimum=0)
        if fill not in FILL_POLICIES:
            raise ValueError(f"fill must be one of {FILL_POLICIES}, got {fill!r}")
        self.fill = fill
        self.f = ode_mlp(hidden, width, depth)
        self.cell = GRUCell(2 * in_channels, hidden)
        self.solver = solver or SolverOptions()

    def evolve(self, h: torch.Tensor, gap: torch.Tensor) -> torch.Tensor:
        """h after each sample's gap (B,) under dh/dt = f(h) (:func:`evolve_over_gaps`); a zero gap leaves h
        exactly unchanged."""
        return evolve_over_gaps(self.f, h, gap, self.solver)

    def _walk(self, observations: Observations):
        self._check(observations)
        values = observations.values
        state = (values.new_zeros(observations.batch_size, self.hidden),)
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
        """h at every row, (B, T, hidden) twice: evolved to the row's time before reading it, and after
        reading it (see :func:`walk_observations`)."""
        before, after = zip(*[(b[0], a[0]) for b, a in self._walk(observations)])
        return torch.stack(before, 1), torch.stack(after, 1)

    def final_hidden(self, observations: Observations) -> torch.Tensor:
        """h just after each sample's own last observation, (B, hidden)."""
        return state_after_last_observation(observations, self._walk(observations))[0]
