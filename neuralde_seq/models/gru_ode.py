"""GRU-ODE (De Brouwer et al. 2019, *GRU-ODE-Bayes*, Eq. 3), driven by the interpolated control as in the
NCDE paper's baselines.

dh/ds = (1 − z) ⊙ (g − h) = GRU(X(s), h) − h with z, r, g the gates of
`GRUCell` on [X(s), h]; h(t0) = 0, read at each sample's own final
knot. Reads a `Control`.
"""

from __future__ import annotations

import torch
from torch import nn

from ..controls import Control
from ..input_checks import check_input_matches, check_input_type, check_num_outputs
from ..solvers import Method, SolverOptions, solve, solver_options
from .recurrent import GRUCell, _positive_int

__all__ = ["GRUODE"]


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


class _ControlDrivenRNN(nn.Module):
    """A hidden state driven by an interpolated control's value, dh/ds = dynamics(h, X(s)), h(t0) = 0, read out
    by a linear layer: what GRU-ODE and the time-warp gated RNN (`gating`) share. Subclasses set ``dynamics``,
    ``readout``, ``solver``, ``in_channels``, ``hidden`` and ``model_name`` (for messages)."""

    model_name = "this model"
    in_channels: int
    hidden: int
    readout: nn.Module

    def hidden_states(self, control: Control, at_knots: bool = False, h0: torch.Tensor | None = None):
        """The hidden state h.

        Arguments:
            control: an interpolated control, batch size B, ``channels == in_channels``.
            at_knots: False (default): h at each sample's own final knot; True: h at every knot.
            h0: (B, hidden) replaces h(t0) = 0; None (default): zeros.

        Returns:
            (B, hidden), or (B, K, hidden) with ``at_knots``.
        """
        check_input_type(self, control, Control)
        if control.piecewise_constant:
            raise ValueError(f"{self.model_name} reads the value of an interpolated control, not log-signature windows")
        if control.channels != self.in_channels:
            raise ValueError(f"control has {control.channels} channels but the model expects {self.in_channels}")
        check_input_matches(self, control)
        h0 = control.coeffs.new_zeros(control.batch_size, self.hidden) if h0 is None else h0
        return solve(self.dynamics, control, h0, self.solver, at_knots=at_knots)

    def forward(self, control: Control, at_knots: bool = False) -> torch.Tensor:
        """Logits from h.

        Arguments:
            control: an interpolated control, batch size B, ``channels == in_channels``.
            at_knots: False (default): at each sample's own final knot; True: at every knot.

        Returns:
            (B, num_classes), or (B, K, num_classes) with ``at_knots``.
        """
        return self.readout(self.hidden_states(control, at_knots=at_knots))


class GRUODE(_ControlDrivenRNN):
    """GRU-ODE classifier on an interpolated control: dh/ds = (1 − z) ⊙ (g − h), gates of [X(s), h].

    Arguments:
        in_channels: channels of the control.
        num_classes: number of classes.
        hidden: width of h.
        chrono_t_max: None (default): PyTorch's initialisation; a number > 2: chrono initialisation of the keep
            gate z for dependencies of up to this many time units (`GRUCell`).
        solver: `SolverOptions` or a method object (default `Auto`: rk4, one step per knot, checkpointed
            gradients).

    ``forward(control)`` gives logits (B, num_classes) from h at each sample's own final knot (the solver
    freezes a sample after it: a direct ODE does not stop by itself on a constant control);
    ``forward(control, at_knots=True)`` the logits at every knot; ``hidden_states`` gives h itself.
    """

    model_name = "GRU-ODE"

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden: int = 32,
        *,
        chrono_t_max: float | None = None,
        solver: SolverOptions | Method | None = None,
    ):
        super().__init__()
        _positive_int("in_channels", in_channels)
        _positive_int("hidden", hidden)
        check_num_outputs(num_classes)
        self.cell = GRUCell(in_channels, hidden, chrono_t_max)
        self.dynamics = _GRUODEDynamics(self.cell)
        self.readout = nn.Linear(hidden, num_classes)
        self.solver = solver_options(solver)
        self.in_channels, self.hidden = in_channels, hidden
