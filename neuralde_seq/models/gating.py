"""Gating as time warping (Bronstein et al., *Geometric Deep Learning*, chapter "Grids", section on the time
warping invariance of gated RNNs), as a continuous-time RNN driven by an interpolated control.

**The derivation.** A continuous-time RNN dh/dt = R(x, h) − h that reads a signal observed through a time warp
τ(t) (a monotone, differentiable reparametrisation of time) sees z(τ(t)); to produce the equivalently warped
summary h(τ(t)) its rate must, by the chain rule, become dτ/dt · (R(x, h) − h). As dτ/dt is not known upfront, a
model class is invariant to time warping only if it can represent it: a learned gate g ≈ dτ/dt,

    dh/ds = g ⊙ (f − h),  g = σ(W_g [x, h] + b_g),  f = tanh(W_f [x, h] + b_f),

with x = X(s) the control's value; g is per unit (each unit fits its own warping derivative). Discretised with
one Euler step this is the gated update h' = g ⊙ f + (1 − g) ⊙ h (the chapter's Eq. 6.95); with g ≡ 1 it is
the ungated field dh/ds = f − h, which assumes no warping (τ(t) = t).

**Chrono initialisation.** The characteristic forgetting time of unit i is about 1/g_i, and with zero-centred
inputs E[g] ≈ σ(b_g). Dependencies on a range of 1 to T_max steps (or time units) hence call for gate values
in [1/T_max, 1/2]: `chrono_bias` samples log U(1, T_max − 1) (Tallec and Ollivier 2018, *Can recurrent
neural networks warp time?*), the bias of a *forget* gate 1 − g; the update gate g here takes its negative,
b_g = −chrono_bias(...), so that σ(b_g) = 1 / u', u' ~ U(2, T_max), as the LSTM's input gate does in
Tallec and Ollivier (b_i = −b_f). This is the chapter's b_Γ ∼ −log(U(T_l, T_h) − 1) with T_l = 2, T_h = T_max:
gate values 1/u in its target range [1/T_h, 1/T_l].

**Time rescaling.** ``rate_scale`` multiplies the gate: with the control's time rescaled t' = a·t, the model
with ``rate_scale = 1/a`` follows the same trajectory at corresponding times, h'(a·t) = h(t) (the warp
equivariance of the derivation, for τ(t) = a·t; tests/test_gating.py checks it).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..gates import check_t_max, chrono_bias
from ..input_checks import check_num_outputs
from ..solvers import Method, SolverOptions, solver_options
from .gru_ode import _ControlDrivenRNN
from .recurrent import _positive_int

__all__ = ["TimeWarpGatedRNN", "chrono_bias"]


class _WarpGatedDynamics(nn.Module):
    """dh/ds = rate_scale · g ⊙ (f − h), g = σ(W_g [x, h] + b_g), f = tanh(W_f [x, h] + b_f); g ≡ 1 when not
    ``gated`` (no gate parameters)."""

    needs_value = True
    needs_derivative = False

    def __init__(self, in_channels: int, hidden: int, rate_scale: float = 1.0, gated: bool = True):
        super().__init__()
        if gated:
            self.gate_input = nn.Linear(in_channels, hidden)  # W_g's x columns and b_g
            self.gate_recurrent = nn.Linear(hidden, hidden, bias=False)  # W_g's h columns
        self.candidate_input = nn.Linear(in_channels, hidden)  # W_f's x columns and b_f
        self.candidate_recurrent = nn.Linear(hidden, hidden, bias=False)  # W_f's h columns
        self.rate_scale, self.gated = rate_scale, gated

    def forward(self, h, x, dx):
        return self.rate_from_features(h, *self.control_features(x, dx))

    def control_features(self, x, dx):
        return (self.gate_input(x) if self.gated else None), self.candidate_input(x)

    def gate_and_candidate(self, h, gate_projected, candidate_projected):
        """(g, f), each (B, hidden), from the input projections of `control_features` (g = 1 when not gated)."""
        f = torch.tanh(candidate_projected + self.candidate_recurrent(h))
        g = torch.sigmoid(gate_projected + self.gate_recurrent(h)) if self.gated else torch.ones_like(f)
        return g, f

    def rate_from_features(self, h, gate_projected, candidate_projected):
        g, f = self.gate_and_candidate(h, gate_projected, candidate_projected)
        if self.rate_scale != 1.0:
            g = self.rate_scale * g
        return g * (f - h)


class TimeWarpGatedRNN(_ControlDrivenRNN):
    """Gated continuous-time RNN on an interpolated control, the time warping invariant form of the
    Geometric Deep Learning chapter "Grids": dh/ds = g ⊙ (f − h), g = σ(W_g [X(s), h] + b_g) the per-unit
    warp gate (learned dτ/dt), f = tanh(W_f [X(s), h] + b_f); h(t0) = 0, read at each sample's own final knot.

    Arguments:
        in_channels: channels of the control.
        num_classes: number of classes.
        hidden: width of h.
        gated: True (default): the learned warp gate; False: the ungated field dh/ds = rate_scale · (f − h), which
            assumes no warping (the ablation of the derivation; it has no gate parameters).
        chrono_t_max: None (default): PyTorch's default initialisation of every parameter; a number > 2: the
            gate biases are chrono-initialised, b_g = −`chrono_bias`(hidden, chrono_t_max), so that the initial
            gate values σ(b_g) lie in [1/chrono_t_max, 1/2] (forgetting times 2 to chrono_t_max in units of s;
            module docstring).
        rate_scale: a positive number multiplying the gate, dh/ds = rate_scale · g ⊙ (f − h) (default 1). A
            control whose time is rescaled by a (t' = a·t) gives, with ``rate_scale = 1/a``, the same trajectory
            at corresponding times.
        solver: `SolverOptions` or a method object (default `Auto`: rk4, one step per knot, checkpointed
            gradients).

    ``forward(control)`` gives logits (B, num_classes) from h at each sample's own final knot;
    ``forward(control, at_knots=True)`` the logits at every knot; ``hidden_states`` gives h itself.
    The dynamics (``self.dynamics``) holds W_g, b_g as ``gate_input`` (x columns, bias) and ``gate_recurrent``
    (h columns), W_f, b_f as ``candidate_input`` and ``candidate_recurrent``.

    Raises:
        ValueError: ``in_channels``, ``hidden`` or ``num_classes`` not a positive integer, ``chrono_t_max`` not
            None or a finite number > 2, or ``rate_scale`` not a finite positive number.
    """

    model_name = "TimeWarpGatedRNN"

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden: int = 32,
        *,
        gated: bool = True,
        chrono_t_max: float | None = None,
        rate_scale: float = 1.0,
        solver: SolverOptions | Method | None = None,
    ):
        super().__init__()
        _positive_int("in_channels", in_channels)
        _positive_int("hidden", hidden)
        check_num_outputs(num_classes)
        if not isinstance(gated, bool):
            raise TypeError(f"gated must be True or False, got {gated!r}")
        if chrono_t_max is not None:
            if not gated:
                raise ValueError("chrono_t_max initialises the gate's bias, and gated=False has no gate")
            check_t_max("chrono_t_max", chrono_t_max)
        self.dynamics = _WarpGatedDynamics(in_channels, hidden, gated=gated)
        self.rate_scale = rate_scale  # checked by the setter
        self.readout = nn.Linear(hidden, num_classes)
        if chrono_t_max is not None:  # drawn last: every other parameter is initialised as without it
            with torch.no_grad():
                bias = self.dynamics.gate_input.bias
                bias.copy_(-chrono_bias(hidden, chrono_t_max, dtype=bias.dtype, device=bias.device))
        self.solver = solver_options(solver)
        self.in_channels, self.hidden, self.chrono_t_max = in_channels, hidden, chrono_t_max

    @property
    def rate_scale(self) -> float:
        """The factor multiplying the gate (settable: a positive number)."""
        return self.dynamics.rate_scale

    @rate_scale.setter
    def rate_scale(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"rate_scale must be a finite positive number, got {value!r}")
        self.dynamics.rate_scale = float(value)
