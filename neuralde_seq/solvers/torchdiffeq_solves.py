"""Solves through torchdiffeq: its adaptive methods, and the continuous adjoint.

`solve` comes here for an adaptive method (`neuralde_seq.solvers.Adaptive`: `Dopri5`, ...) and for the gradient
method `neuralde_seq.solvers.Adjoint` with any method but `Exact` (see `neuralde_seq.solvers.options`):

- `torchdiffeq_problem` states the solve as torchdiffeq sees it: in s with a field frozen after each
  sample's end (`ContinuousField`, adaptive methods), or in the step-counting time u of the fixed-step
  grid (`SteppedField`, for the adjoint of a fixed-step method);
- `solve_adaptive_checkpointed`: the adaptive solve whose whole step-size state crosses the checkpointed
  segments, so recomputation retakes the forward pass's steps;
- `solve_adjoint`: ``torchdiffeq.odeint_adjoint``, with the check of its backward reconstruction
  (`AdjointReconstructionWarning`).

``method`` arguments are the method objects (`neuralde_seq.solvers.FixedStep` or `neuralde_seq.solvers.Adaptive`),
whose fields the solves read.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
import torchdiffeq
from torch.utils.checkpoint import checkpoint

from ..controls import Control
from ..user_warnings import warn_user
from .fixed_step import step_grid

__all__ = [
    "torchdiffeq_problem",
    "solve_adaptive_checkpointed",
    "solve_adjoint",
    "counting_steps",
    "ContinuousField",
    "SteppedField",
    "AdjointReconstructionWarning",
    "ADJOINT_RECONSTRUCTION_TOLERANCE",
]

# Relative error of the initial state reconstructed by a backward solve above which the adjoint check warns.
ADJOINT_RECONSTRUCTION_TOLERANCE = 1e-3


class AdjointReconstructionWarning(RuntimeWarning):
    """The continuous adjoint's backward reconstruction of the state is inaccurate for this solve, so its
    gradients are too: use ``SolverOptions(gradient=Checkpoint())`` (the default)."""


# ---------------------------------------------------------------------------------------------------
# adaptive methods: torchdiffeq's, with their step-size state carried across checkpointed segments


def solve_adaptive_checkpointed(
    func, initial: torch.Tensor, knots: torch.Tensor, method, every: int | None, at_knots: bool
) -> torch.Tensor:
    """torchdiffeq's adaptive solve through every knot, backpropagated segment by segment.

    The solver advances knot by knot (its steps end on every knot anyway, as they are jump times), and its
    complete state (y, the FSAL rate, the times, the proposed step and the interpolant) is the input and output
    of each checkpointed segment of knots, so a recomputed segment takes exactly the steps of the forward pass
    and the gradient flows through the step-size control as it does through ``torchdiffeq.odeint``. This reads
    torchdiffeq's solver state (``rk_state``, ``_advance``; stable since torchdiffeq 0.2.0). ``method``: the
    adaptive method (its name, ``rtol`` and ``atol``); ``every``: knots per segment (None: ⌈√K⌉ of K)."""
    from torchdiffeq._impl.misc import _check_inputs
    from torchdiffeq._impl.odeint import SOLVERS

    _, wrapped, y0, t, rtol, atol, name, solver_options, _, _ = _check_inputs(
        func, initial, knots, method.rtol, method.atol, method.torchdiffeq_name, dict(jump_t=knots), None, SOLVERS
    )
    solver = SOLVERS[name](func=wrapped, y0=y0, rtol=rtol, atol=atol, **solver_options)
    solver._before_integrate(t.to(solver.dtype))
    t = t.to(solver.dtype)
    size = every or max(1, math.ceil(math.sqrt(len(t) - 1)))
    states = [y0]
    with func.counting_steps():
        _advance_in_segments(solver, t, size, states)
    return torch.stack(states, 1) if at_knots else states[-1]


def _advance_in_segments(solver, t, size, states):
    """Advance ``solver`` through the times ``t`` (every knot), ``size`` knots per checkpointed segment, appending
    the states at the knots to ``states``."""
    from torchdiffeq._impl.rk_common import _RungeKuttaState

    for i0 in range(1, len(t), size):
        targets = t[i0 : i0 + size]
        start, jump_index = solver.rk_state, solver.next_jump_index
        n_interp = len(start.interp_coeff)

        def advance(y1, f1, t0, t1, dt, *interp, targets=targets, jump_index=jump_index):
            solver.rk_state = _RungeKuttaState(y1, f1, t0, t1, dt, list(interp))
            solver.next_jump_index = jump_index
            values = [solver._advance(target) for target in targets]
            state = solver.rk_state
            return (state.y1, state.f1, state.t0, state.t1, state.dt, *state.interp_coeff, *values)

        out = checkpoint(
            advance,
            start.y1,
            start.f1,
            start.t0,
            start.t1,
            start.dt,
            *start.interp_coeff,
            use_reentrant=False,
            preserve_rng_state=False,
        )
        solver.rk_state = _RungeKuttaState(*out[:5], list(out[5 : 5 + n_interp]))
        states.extend(out[5 + n_interp :])


# ---------------------------------------------------------------------------------------------------
# the continuous adjoint: torchdiffeq's odeint_adjoint


class SteppedField(torch.nn.Module):
    """dy/du on the step-counting time u of fixed-step methods (for torchdiffeq's adjoint): s(u) is linear on
    each step [n, n + 1].

    The control's piece is looked up from the step, not from s, so a stage one ulp before a knot (as
    ``perturb`` places it) always reads the piece the step lies in.
    """

    def __init__(
        self, dynamics, control: Control, grid: torch.Tensor, piece_of_step: torch.Tensor, end_position: torch.Tensor
    ):
        super().__init__()
        self.dynamics = dynamics
        self.control = control
        self.grid = grid
        self.offset = grid[:-1] - control.knots[piece_of_step].to(grid.dtype)  # step start − piece start
        self.piece_of_step = piece_of_step
        self.end_position = end_position

    def forward(self, u, state):
        u = u.detach()
        step = torch.floor(u).long().clamp(0, self.grid.shape[0] - 2)
        width = self.grid[step + 1] - self.grid[step]
        # perturb moves the first and last stage of a step one ulp of u inwards; in float32 that is up to
        # 1e-3 of a step at u ~ 10^4, so snap those stages back onto the step's ends (the step index
        # already says which side of the knot they belong to).
        tolerance = 4 * torch.finfo(u.dtype).eps * max(1.0, float(u.abs()))
        frac = u - step
        frac = torch.where(
            frac < tolerance, torch.zeros_like(frac), torch.where(frac > 1 - tolerance, torch.ones_like(frac), frac)
        )
        f = self.offset[step] + frac * width
        piece = self.piece_of_step[step]
        x = self.control.evaluate_piece(piece, f) if self.dynamics.needs_value else None
        dx = self.control.derivative_piece(piece, f) if self.dynamics.needs_derivative else None
        active = (u < self.end_position).to(state.dtype)
        if getattr(self.dynamics, "needs_time", False):
            s = (self.control.knots[piece].to(f.dtype) + f).to(state.dtype).expand(state.shape[0])
            rate = self.dynamics(state, x, dx, s)
        else:
            rate = self.dynamics(state, x, dx)
        return rate * (width.to(state.dtype) * active).view(-1, *([1] * (state.dim() - 1)))


class ContinuousField(torch.nn.Module):
    """dy/ds for adaptive methods, frozen after each sample's end; counts its evaluations to enforce the method's
    ``max_steps`` (over the forward solve only: a backward pass's recomputations are not counted)."""

    def __init__(self, dynamics, control: Control, method):
        from torchdiffeq._impl.odeint import SOLVERS

        super().__init__()
        self.dynamics = dynamics
        self.control = control
        self.method = method
        self.per_step = len(SOLVERS[method.torchdiffeq_name].tableau.alpha)  # field evaluations per (FSAL) step
        # Evaluations that are not steps: two choose the first step, and one restarts after each knot (a jump).
        self.extra = 2 + control.knots.shape[0]
        self.evaluations, self.counting = 0, False

    @contextlib.contextmanager
    def counting_steps(self):
        self.evaluations, self.counting = 0, True
        try:
            yield
        finally:
            self.counting = False

    def forward(self, s, state):
        if self.counting:
            self.evaluations += 1
            method = self.method
            if method.max_steps is not None and self.evaluations > method.max_steps * self.per_step + self.extra:
                start, end = float(self.control.knots[0]), float(self.control.end.max())
                raise ValueError(
                    f"the {method.name} solve took more than max_steps={method.max_steps:,} steps (accepted and "
                    f"rejected) and stopped at s = {float(s.detach()):.6g}, between {start:.6g} and {end:.6g}, with "
                    f"rtol={method.rtol:g}, atol={method.atol:g}: the field changes fast on the scale of s. Rescale "
                    "the times to units where observation gaps are about 1 (or build the control with "
                    "parametrization='index'), loosen rtol/atol, use a fixed-step method, or raise "
                    f"{type(method).__name__}(max_steps=...)"
                )
        # s stays attached: backpropagating through adaptive steps differentiates the step sizes, and
        # that only cancels correctly if the field sees the same differentiable time.
        active = (s.detach() < self.control.end).to(state.dtype)
        x = self.control.evaluate(s) if self.dynamics.needs_value else None
        dx = self.control.derivative(s) if self.dynamics.needs_derivative else None
        if getattr(self.dynamics, "needs_time", False):
            rate = self.dynamics(state, x, dx, s.to(state.dtype).expand(state.shape[0]))
        else:
            rate = self.dynamics(state, x, dx)
        return rate * active.view(-1, *([1] * (state.dim() - 1)))


def counting_steps(func):
    """Count the adaptive field's steps within the block (fixed-step grids are checked before solving)."""
    return func.counting_steps() if isinstance(func, ContinuousField) else contextlib.nullcontext()


def torchdiffeq_problem(dynamics, control: Control, initial: torch.Tensor, method, at_knots: bool):
    """(func, t, kwargs) of a torchdiffeq solve of the same problem: in the step-counting time u for
    fixed-step methods (``method.fixed_grid``), in s for adaptive ones; t lists every knot if ``at_knots`` (and for
    adaptive methods in any case, see `solve_adaptive_checkpointed`), else the first and last."""
    func: SteppedField | ContinuousField
    solver_options: dict[str, Any]
    if method.fixed_grid:
        grid, knot_position, piece_of_step = step_grid(control, method.step_size, method.max_steps, method.name)
        func = SteppedField(
            dynamics, control, grid.to(initial.dtype), piece_of_step, knot_position[control.end_index].to(initial.dtype)
        )
        t = knot_position.to(initial.dtype)
        solver_options = dict(step_size=1.0, perturb=True)
        tolerances = {}  # a fixed grid has none (torchdiffeq's defaults, 1e-7 and 1e-9, are passed on, unused)
    else:
        func = ContinuousField(dynamics, control, method)
        t = control.knots[: int(control.end_index.max()) + 1].to(initial.dtype)
        # Every knot is a jump: of the rate for piecewise-constant controls and at samples' ends, and of
        # the sensitivity to each polynomial piece for interpolated ones.
        solver_options = dict(jump_t=t)
        tolerances = dict(rtol=method.rtol, atol=method.atol)
    if not at_knots:
        t = t[[0, -1]]
    return func, t, dict(method=method.torchdiffeq_name, options=solver_options, **tolerances)


def _check_adjoint_reconstruction(func, initial, final, t, kwargs) -> None:
    """Integrate the final state back to the first time, as the adjoint's backward pass does, and warn when the
    initial state is not recovered."""
    with torch.no_grad():
        recovered = torchdiffeq.odeint(func, final.detach(), t.flip(0), **kwargs)[-1]
        scale = torch.maximum(initial.detach().norm(), final.detach().norm()).clamp_min(torch.finfo(final.dtype).tiny)
        error = float((recovered - initial.detach()).norm() / scale)
    if not error <= ADJOINT_RECONSTRUCTION_TOLERANCE:
        # At the user's line (their backward or fit call): Python then shows it once per run, not once per step.
        warn_user(
            f"continuous adjoint: integrating the final state backwards recovers the initial state with a "
            f"relative error of {error:.3g} (> {ADJOINT_RECONSTRUCTION_TOLERANCE:g}), so the adjoint gradients "
            f"of this solve are unreliable; use SolverOptions(gradient=Checkpoint()) (the default), exact "
            f"for the discrete solve with O(sqrt(steps)) memory",
            AdjointReconstructionWarning,
        )


def solve_adjoint(dynamics, control, initial, method, at_knots: bool, *, check: bool) -> torch.Tensor:
    """The continuous adjoint's solve of ``dynamics`` along ``control`` by ``method`` (its ``adjoint_params``: the
    dynamics' parameters and the control's tensors that require grad); ``check``: integrate the final state back
    afterwards and warn if the initial state is not recovered (`AdjointReconstructionWarning`)."""
    func, t, kwargs = torchdiffeq_problem(dynamics, control, initial, method, at_knots)
    params = tuple(p for p in dynamics.parameters() if p.requires_grad)
    params += tuple(c for c in control.tensors() if c.requires_grad)
    with counting_steps(func):
        states = torchdiffeq.odeint_adjoint(func, initial, t, adjoint_params=params, **kwargs)
    if check:
        _check_adjoint_reconstruction(func, initial, states[-1], t, kwargs)
    return states.movedim(0, 1) if at_knots else states[-1]
