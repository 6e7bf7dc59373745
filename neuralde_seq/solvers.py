"""How a controlled differential equation is solved: torchdiffeq, with the adjoint by default.

The equation is ``dy/ds = f(y, X(s), X'(s))`` for s from the control's first knot to each sample's own
final knot, where ``f`` is a *dynamics* module (see :class:`Dynamics`) and X a
:class:`~neuralde_seq.controls.Control`. After its final knot a sample's state is frozen (its rate is
masked to zero), so that every sample in a padded batch gets exactly the answer it gets alone.

Fixed-step methods (``rk4``, ``midpoint``, ``euler``, ...) step through every knot of the control. Each
knot interval [k_i, k_{i+1}] is cut into ceil((k_{i+1} − k_i) / step_size) equal steps (one step when
``step_size`` is None: the paper's "step 1 on the index grid"). The solve runs in a step-counting time u,
whose integer values are these grid points (``s`` is piecewise linear in u), with torchdiffeq's
``perturb`` option so that no stage is ever evaluated exactly on a knot, where piecewise-constant
controls jump and where samples end. Steps thus line up with knots for every sample, and a sample's grid
never depends on what else is in the batch.

Adaptive methods (``dopri5``, ...) solve in s with ``rtol``/``atol``, and step onto every knot
(``jump_t``): the rate of a piecewise-constant control jumps there, a sample's rate stops at its final
knot, and the sensitivity to each polynomial piece of an interpolated control starts and ends there.

Gradients: ``adjoint=True`` (default) uses :func:`torchdiffeq.odeint_adjoint`, with ``adjoint_params``
listing the dynamics' parameters and any control tensors that require gradients (without that list the
gradients with respect to the control would silently be missing). The adjoint solve uses the same method
and options. ``adjoint=False`` backpropagates through the solver's operations instead.

``method="exact"`` solves fast weight fields driven by inputs that are constant on every knot interval
(log-signature windows; piecewise-linear controls read through their derivative only) with the closed-form
steps of shared/DESIGN.md §5: see :mod:`neuralde_seq.exact`. It is selected here, so every model that calls
:func:`solve` takes it through its ``SolverOptions``.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Protocol

import torch
import torchdiffeq

from .controls import Control

__all__ = ["SolverOptions", "Dynamics", "solve", "FIXED_STEP_METHODS", "ADAPTIVE_METHODS", "EXACT_METHOD"]

FIXED_STEP_METHODS = ("euler", "midpoint", "rk4", "heun3", "explicit_adams", "implicit_adams")
ADAPTIVE_METHODS = ("dopri5", "dopri8", "bosh3", "fehlberg2", "adaptive_heun")
EXACT_METHOD = "exact"


@dataclasses.dataclass
class SolverOptions:
    """Options of :func:`solve`.

    Attributes:
        method: a torchdiffeq method name, fixed-step (:data:`FIXED_STEP_METHODS`) or adaptive
            (:data:`ADAPTIVE_METHODS`), or "exact" (closed-form steps for inputs constant on every knot
            interval, :mod:`neuralde_seq.exact`). Default "rk4", as in the papers.
        step_size: largest step of a fixed-step method, in units of the control's parameter s; None
            takes one step per knot interval.
        rtol, atol: tolerances of adaptive methods (torchdiffeq's defaults, which the papers use).
        adjoint: backpropagate with the continuous adjoint (memory independent of the number of steps).
            Not used by "exact", whose gradients recompute checkpointed segments (see :mod:`neuralde_seq.exact`).
        chunk_size: "exact" only: knot intervals per checkpointed segment (None: sized by
            :func:`neuralde_seq.exact.default_chunk_size`, e.g. 64 windows for every rule at batch 32, 16 heads
            of width 8). Memory of the backward pass grows with it, time hardly.
        compile: "exact" only: run post-Delta's exact step through ``torch.compile`` (refused for the other
            rules; needs a C compiler on CPU; the first call compiles, which takes tens of seconds).
    """

    method: str = "rk4"
    step_size: float | None = None
    rtol: float = 1e-7
    atol: float = 1e-9
    adjoint: bool = True
    chunk_size: int | None = None
    compile: bool = False

    def __post_init__(self):
        methods = FIXED_STEP_METHODS + ADAPTIVE_METHODS + (EXACT_METHOD,)
        if self.method not in methods:
            raise ValueError(f"method must be one of {methods}, got {self.method!r}")
        if self.chunk_size is not None and not (isinstance(self.chunk_size, int) and self.chunk_size >= 1):
            raise ValueError(f"chunk_size must be a positive integer or None, got {self.chunk_size!r}")
        if self.method != EXACT_METHOD and (self.chunk_size is not None or self.compile):
            raise ValueError(f"chunk_size and compile are options of method='exact', not of {self.method!r}")
        if self.step_size is not None and not (self.step_size > 0 and math.isfinite(self.step_size)):
            raise ValueError(f"step_size must be a positive number or None, got {self.step_size!r}")
        if not (self.rtol > 0 and self.atol > 0):
            raise ValueError(f"rtol and atol must be positive, got rtol={self.rtol}, atol={self.atol}")


class Dynamics(Protocol):
    """What :func:`solve` integrates: an ``nn.Module`` with

    - ``forward(state, x, dx) -> rate``: ``state`` (B, ...) the current state, ``x`` (B, C) the control's
      value X(s) and ``dx`` (B, C) its derivative X'(s) (either may be None when not needed); returns
      dstate/ds with the shape of ``state``;
    - ``needs_value`` and ``needs_derivative``: booleans saying which of x and dx it reads.
    """

    needs_value: bool
    needs_derivative: bool

    def __call__(self, state: torch.Tensor, x: torch.Tensor | None, dx: torch.Tensor | None) -> torch.Tensor:
        ...


def subdivide(knots: torch.Tensor, step_size: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed-step grid through every knot.

    Returns:
        (grid, counts): grid (M + 1,) points in s; counts (K − 1,) long, the number of steps in each knot
        interval (their cumulative sums are the knots' positions in the grid).
    """
    gaps = knots[1:] - knots[:-1]
    if step_size is None:
        return knots, torch.ones_like(gaps, dtype=torch.long)
    # A relative slack keeps an interval that is a whole multiple of step_size from gaining a step through
    # rounding.
    counts = torch.ceil(gaps / step_size * (1 - 1e-9)).clamp(min=1).long()
    first_step = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)  # of each step's interval
    index_in_interval = torch.arange(int(counts.sum()), device=knots.device) - first_step
    fraction = index_in_interval.to(knots.dtype) / torch.repeat_interleave(counts, counts).to(knots.dtype)
    grid = torch.repeat_interleave(knots[:-1], counts) + fraction * torch.repeat_interleave(gaps, counts)
    grid = torch.cat([grid, knots[-1:]])
    return grid, counts


class _SteppedField(torch.nn.Module):
    """dy/du on the step-counting time u of fixed-step methods: s(u) is linear on each step [n, n + 1].

    The control's piece is looked up from the step, not from s, so a stage one ulp before a knot (as
    ``perturb`` places it) always reads the piece the step lies in.
    """

    def __init__(self, dynamics, control: Control, grid: torch.Tensor, piece_of_step: torch.Tensor,
                 end_position: torch.Tensor):
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
        frac = torch.where(frac < tolerance, torch.zeros_like(frac),
                           torch.where(frac > 1 - tolerance, torch.ones_like(frac), frac))
        f = self.offset[step] + frac * width
        piece = self.piece_of_step[step]
        x = self.control.evaluate_piece(piece, f) if self.dynamics.needs_value else None
        dx = self.control.derivative_piece(piece, f) if self.dynamics.needs_derivative else None
        active = (u < self.end_position).to(state.dtype)
        rate = self.dynamics(state, x, dx)
        return rate * (width.to(state.dtype) * active).view(-1, *([1] * (state.dim() - 1)))


class _ContinuousField(torch.nn.Module):
    """dy/ds for adaptive methods, frozen after each sample's end."""

    def __init__(self, dynamics, control: Control):
        super().__init__()
        self.dynamics = dynamics
        self.control = control

    def forward(self, s, state):
        # s stays attached: backpropagating through adaptive steps differentiates the step sizes, and
        # that only cancels correctly if the field sees the same differentiable time.
        active = (s.detach() < self.control.end).to(state.dtype)
        x = self.control.evaluate(s) if self.dynamics.needs_value else None
        dx = self.control.derivative(s) if self.dynamics.needs_derivative else None
        rate = self.dynamics(state, x, dx)
        return rate * active.view(-1, *([1] * (state.dim() - 1)))


def solve(dynamics, control: Control, initial: torch.Tensor, options: SolverOptions | None = None, *,
          at_knots: bool = False) -> torch.Tensor:
    """Solve ``dy/ds = dynamics(y, X(s), X'(s))`` from the first knot to each sample's final knot.

    Arguments:
        dynamics: an ``nn.Module`` following :class:`Dynamics`.
        control: the control X, batch size B.
        initial: (B, ...) the state at the first knot.
        options: :class:`SolverOptions` (default: rk4, one step per knot interval, adjoint).
        at_knots: False returns each sample's state at its own final knot; True returns the states at
            every knot of the control (constant after a sample's end).

    Returns:
        (B, ...) final states, or (B, K, ...) states at the K knots if ``at_knots``.
    """
    options = options or SolverOptions()
    if initial.shape[0] != control.batch_size:
        raise ValueError(f"initial has batch size {initial.shape[0]} but the control has {control.batch_size}")
    if options.method == EXACT_METHOD:
        from .exact import solve_exact

        return solve_exact(dynamics, control, initial, options, at_knots=at_knots)
    last = int(control.end_index.max())
    if options.method in FIXED_STEP_METHODS:
        grid, counts = subdivide(control.knots[: last + 1], options.step_size)
        knot_position = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        piece_of_step = torch.repeat_interleave(torch.arange(counts.shape[0], device=counts.device), counts)
        func = _SteppedField(dynamics, control, grid.to(initial.dtype), piece_of_step,
                             knot_position[control.end_index].to(initial.dtype))
        if at_knots:
            t = knot_position.to(initial.dtype)
        else:
            t = torch.tensor([0.0, float(grid.shape[0] - 1)], dtype=initial.dtype, device=initial.device)
        solver_options = dict(step_size=1.0, perturb=True)
    else:
        func = _ContinuousField(dynamics, control)
        knots = control.knots[: last + 1].to(initial.dtype)
        t = knots if at_knots else knots[[0, -1]]
        # Every knot is a jump: of the rate for piecewise-constant controls and at samples' ends, and of
        # the sensitivity to each polynomial piece for interpolated ones.
        solver_options = dict(jump_t=knots)
    kwargs = dict(method=options.method, options=solver_options, rtol=options.rtol, atol=options.atol)
    if options.adjoint and torch.is_grad_enabled():
        params = tuple(p for p in dynamics.parameters() if p.requires_grad)
        params += tuple(c for c in control.tensors() if c.requires_grad)
        states = torchdiffeq.odeint_adjoint(func, initial, t, adjoint_params=params, **kwargs)
    else:
        states = torchdiffeq.odeint(func, initial, t, **kwargs)
    if at_knots:
        return states.movedim(0, 1)
    return states[-1]
