"""The one solve entry: how a controlled differential equation is solved, and how its gradients are computed.

The equation is ``dy/ds = f(y, X(s), X'(s))`` for s from the control's first knot to each sample's own
final knot, where ``f`` is a *dynamics* module (see `Dynamics`) and X a
`Control`. After its final knot a sample's state is frozen (its rate is
masked to zero), so that every sample in a padded batch gets exactly the answer it gets alone.
`solve` is the one solve entry of the library: the CT-FWPs in every form, NCDE/NRDE and GRU-ODE call it
with their control, and ODE-RNN, ODE-RFWP and the latent models call it through `evolve_over_gaps`.

`solve` checks its inputs, asks the method what solves these dynamics along this control (`Method.resolve`: only
`Auto` picks another) and lets that method solve (`Method.solve`), whose kernels read its own fields:

**Fixed-step methods** (`FixedStep`: `RK4`, `Heun3`, `Heun2`, `Midpoint`, `Euler`)
step through every knot of the control, each knot interval cut into ceil(gap / step_size) equal steps (one
step when ``step_size`` is None); the loop, with the control evaluated for blocks of steps at once, is in
`neuralde_seq.solvers.fixed_step`. One fast weight field whose rule is affine in W (Hebb, Oja, pre-Delta) takes the
same steps as one affine map each, composed (`neuralde_seq.solvers.affine_rk4`; ``RK4(affine_steps=False)``: the
per-step loop).

**Adaptive methods** (`Adaptive`: `Dopri5`, ...) are torchdiffeq's, solving in s with
``rtol``/``atol`` and stepping onto every knot (``jump_t``): the rate of a piecewise-constant control jumps
there, a sample's rate stops at its final knot, and the sensitivity to each polynomial piece of an
interpolated control starts and ends there. Solves through torchdiffeq (adaptive methods, and the adjoint of any
method) are in `neuralde_seq.solvers.torchdiffeq_solves`.

**Gradients** (``SolverOptions.gradient``):

- `Checkpoint` (default): backpropagation through the solver's own steps, exact for the discrete solve (equal
  to `Backprop` to rounding), with memory O(√N) states for N steps: the forward pass keeps only the state at the
  start of every segment of ``Checkpoint.every`` steps (default ⌈√N⌉), and the backward pass recomputes one
  segment at a time and backpropagates through it. A fixed-step segment is one autograd node
  (`CheckpointedSegment`) whose gradient reaches its first state, the dynamics'
  parameters and the control's tensors (as ``adjoint_params`` for the adjoint: other tensors the dynamics captures
  are treated as constants), so nothing of a segment stays alive between the passes. An adaptive solve (through
  ``torch.utils.checkpoint``, non-reentrant) carries its whole step-size state (state, last rate, step size,
  interpolant) across segment boundaries, and a recomputed segment retakes exactly the accepted and rejected steps
  of the forward pass (the same function of the same inputs), so the gradient is the one of the steps actually
  taken, step-size control included, as for `Backprop`. Time: about one extra forward solve.
- `Adjoint`: the continuous adjoint (`torchdiffeq.odeint_adjoint`), the papers' method: memory
  independent of the number of steps, but the backward pass reconstructs the state by integrating the ODE
  backwards in time, which is unstable for contracting fields (learning rules that forget, GRUs, NCDEs): past
  a few hundred steps its gradients can be wrong by orders of magnitude or NaN. ``adjoint_params`` lists
  the dynamics' parameters and any control tensors that require gradients (without that list, gradients
  with respect to the control would silently be missing). Every ``Adjoint.check_every``-th solve (the first one
  included) re-integrates the final state backwards without gradients and warns
  (`AdjointReconstructionWarning`) with the measured relative error of the reconstructed initial
  state when it exceeds `ADJOINT_RECONSTRUCTION_TOLERANCE`.
- `Backprop`: plain backpropagation through the solver's operations (memory O(N)).

`Exact` solves fast weight fields driven by inputs that are constant on every knot interval
(log-signature windows; piecewise-linear controls read through their derivative only) with the closed-form steps of
docs/equations.md#closed-forms-on-constant-inputs: see `neuralde_seq.solvers.exact_fast_weights` (its gradients
recompute checkpointed segments with a hand-written backward). It is selected here, so every model that calls
`solve` takes it through its ``SolverOptions``.

**The default, `Auto`,** is resolved on every solve (`resolve_method`; `Exact.applies` is the one place that decides,
through `neuralde_seq.solvers.exact_fast_weights.exact_applies`): its ``exact`` where the dynamics and the control
admit the closed form (one fast weight layer whose rule has a closed-form step, on log-signature windows, or on a
piecewise-linear control read through x' only), its ``fallback`` (``RK4()``) everywhere else (NCDEs, GRU-ODEs, cubic
controls read through X, deeper fast weight networks, the ODEs between observations of `evolve_over_gaps`). Both
solve the same equation, so the model is the same; the closed form is its exact solution (no step error) and several
times faster. ``RK4()`` forces rk4 steps on every model; ``Exact()`` forces the closed form and refuses what it
cannot solve. `SolverOptions.last_method` says what the latest solve used.

**Limits.** The stepping methods' ``max_steps`` (default 1,000,000) bounds the steps of one solve: a fixed-step grid
is refused before solving, an adaptive solve stops when it has taken that many steps. `solve` refuses a
control or initial state whose dtype or device differs from the dynamics' parameters, and warns
(`NonFiniteSolveWarning`) when a solve from finite inputs ends non-finite, which with finite inputs
(`magnitude_limit`) means steps too wide for the field, typically times in
large units with ``parametrization="time"``.
"""

from __future__ import annotations

from typing import Protocol

import torch

from ..controls import Control
from ..input_checks import check_matches_module
from .methods import warn_not_finite
from .options import solver_options

__all__ = ["Dynamics", "solve", "evolve_over_gaps"]


class Dynamics(Protocol):
    """What `solve` integrates: an ``nn.Module`` with

    - ``forward(state, x, dx) -> rate``: ``state`` (B, ...) the current state, ``x`` (B, C) the control's
      value X(s) and ``dx`` (B, C) its derivative X'(s) (either may be None when not needed); returns
      dstate/ds with the shape of ``state``;
    - ``needs_value`` and ``needs_derivative``: booleans saying which of x and dx it reads;
    - optionally, a split of ``forward`` into the part that depends on the input only and the rest, which
      fixed-step solves use to do the first part for many steps at once:
      ``control_features(x, dx) -> tuple`` (x, dx of shape (N, C), N any number of points; returns tensors
      with N leading, or None entries) and ``rate_from_features(state, *features) -> rate`` (features with B
      leading), such that ``rate_from_features(state, *control_features(x, dx)) == forward(state, x, dx)``;
    - optionally, ``needs_time = True`` for a field that depends on s itself (weights expanded in a basis of s,
      `neuralde_seq.basis`): every solver then passes s as a last argument, ``forward(state, x, dx, s)`` and
      ``control_features(x, dx, s)``, s of shape (B,) (or (N,), one per point); the exact solver refuses it.
    """

    needs_value: bool
    needs_derivative: bool

    def __call__(self, state: torch.Tensor, x: torch.Tensor | None, dx: torch.Tensor | None) -> torch.Tensor: ...


def solve(dynamics, control: Control, initial: torch.Tensor, options=None, *, at_knots: bool = False) -> torch.Tensor:
    """Solve ``dy/ds = dynamics(y, X(s), X'(s))`` from the first knot to each sample's final knot.

    Arguments:
        dynamics: an ``nn.Module`` following `Dynamics`.
        control: the control X, batch size B.
        initial: (B, ...) the state at the first knot.
        options: `SolverOptions`, or a method object alone (`solver_options`; default: `Auto`, the closed form
            where `resolve_method` finds it applies, else rk4 with one step per knot interval, and checkpointed
            gradients).
        at_knots: False returns each sample's state at its own final knot; True returns the states at
            every knot of the control up to the batch's last final knot (constant after a sample's end).

    Returns:
        (B, ...) final states, or (B, K, ...) states at the K knots if ``at_knots``.

    Raises:
        TypeError: ``control`` is not a Control, or (for every method but an explicit `Exact`, which checks its
            own inputs) the control, ``initial`` and the dynamics' parameters differ in dtype or device.
        ValueError: ``initial`` is not a (B, ...) tensor, or the solve needs more than the method's
            ``max_steps`` steps.
    """
    options = solver_options(options, argument="options")
    if not isinstance(control, Control):
        raise TypeError(f"control must be a neuralde_seq Control (see build_control), got {type(control).__name__}")
    if not isinstance(initial, torch.Tensor) or initial.dim() < 1 or initial.shape[0] != control.batch_size:
        shape = tuple(initial.shape) if isinstance(initial, torch.Tensor) else type(initial).__name__
        raise ValueError(f"initial must be a tensor (B={control.batch_size}, ...), got {shape}")
    method = options.method
    if not method.checks_own_inputs:
        # One dtype and device for the dynamics, the control and the state (a mismatch would otherwise fail deep
        # inside the dynamics with a matrix-product error).
        check_matches_module(dynamics, control.coeffs, "the control", "the dynamics module")
        check_matches_module(dynamics, initial, "the initial state", "the dynamics module")
        if initial.is_floating_point() and initial.dtype != control.coeffs.dtype:
            raise TypeError(
                f"the initial state is {initial.dtype} but the control is {control.coeffs.dtype}: convert "
                f"one of them (initial.to({control.coeffs.dtype}) or control.to({initial.dtype}))"
            )
    chosen = method.resolve(dynamics, control)
    object.__setattr__(options, "_last_method", chosen)
    states = chosen.solve(dynamics, control, initial, options, at_knots)
    if chosen.warns_not_finite and not bool(torch.isfinite(states).all()) and bool(torch.isfinite(initial).all()):
        warn_not_finite(control, chosen)
    return states


# ---------------------------------------------------------------------------------------------------
# autonomous ODEs between observations


class _GapDynamics(torch.nn.Module):
    """dh/dτ = Δt_b · f(h): the gap enters as the derivative of a linear control X(τ) = Δt_b τ, τ ∈ [0, 1]."""

    needs_value = False
    needs_derivative = True

    def __init__(self, f: torch.nn.Module):
        super().__init__()
        self.f = f

    def forward(self, h, x, dx):
        return dx * self.f(h)


def evolve_over_gaps(f: torch.nn.Module, h: torch.Tensor, gap: torch.Tensor, options=None) -> torch.Tensor:
    """Evolve each sample's state over its own time gap under the autonomous ODE dh/dt = f(h).

    The one implementation of "evolve between observations" (ODE-RNN, ODE-RFWP, the Latent ODE's encoder
    and decoder). Samples of a batch have different gaps, so the solve runs in a normalised time
    τ ∈ [0, 1] with the gap as a per-sample scale of the field, dh/dτ = Δt_b · f(h), through `solve`
    (a linear control with slope Δt_b), so every method and gradient method of `SolverOptions` applies.
    With a fixed-step method every sample takes the same steps in τ, so its answer never depends on the rest
    of the batch (an adaptive method's error control spans the batch). A negative gap integrates backwards in
    time.

    Arguments:
        f: the vector field, an ``nn.Module`` mapping (B, H) to (B, H).
        h: (B, H) states.
        gap: (B,) time gaps Δt_b (0 leaves a sample exactly where it is).
        options: `SolverOptions` or a method object; a fixed-step method's ``step_size`` is the step in τ (None:
            one step per gap). This ODE has no closed form: the default `Auto` solves it with its fallback (rk4),
            and `Exact` is refused.

    Returns:
        (B, H) states after the gaps; h itself (the same tensor) when every gap is zero.
    """
    options = solver_options(options, argument="options")
    if not isinstance(h, torch.Tensor) or not isinstance(gap, torch.Tensor) or h.dim() != 2 or gap.shape != h.shape[:1]:
        raise ValueError(
            f"h must be (B, H) and gap (B,), got h {tuple(getattr(h, 'shape', ()))} and gap "
            f"{tuple(getattr(gap, 'shape', ()))}"
        )
    if not options.method.applies(_GapDynamics(f)):
        raise ValueError(
            f"{options.method!r} solves fast weight fields on inputs constant over each knot interval; "
            "the ODE between observations, dh/dt = f(h) with f a network, has no closed form: use RK4() "
            "or Dopri5()"
        )
    if not bool((gap != 0).any()):
        return h
    gap = gap.to(h.dtype)
    coeffs = h.new_zeros(h.shape[0], 2, 4, 1)
    coeffs[:, 0, 1, 0] = gap  # X(τ) = Δt τ on [0, 1] ...
    coeffs[:, 1, 0, 0] = gap  # ... and constant after it
    knots = torch.tensor([0.0, 1.0], dtype=h.dtype, device=h.device)
    control = Control(knots, coeffs, torch.ones(h.shape[0], dtype=torch.long, device=h.device))
    return solve(_GapDynamics(f), control, h, options)
