"""How a controlled differential equation is solved, and how its gradients are computed.

The equation is ``dy/ds = f(y, X(s), X'(s))`` for s from the control's first knot to each sample's own
final knot, where ``f`` is a *dynamics* module (see :class:`Dynamics`) and X a
:class:`~neuralde_seq.controls.Control`. After its final knot a sample's state is frozen (its rate is
masked to zero), so that every sample in a padded batch gets exactly the answer it gets alone.
:func:`solve` is the one solve entry of the library: the CT-FWPs in every form, NCDE/NRDE and GRU-ODE call it
with their control, and ODE-RNN, ODE-RFWP and the latent models call it through :func:`evolve_over_gaps`.

**Fixed-step methods** (:data:`FIXED_STEP_METHODS`: ``rk4``, ``heun3``, ``heun2``, ``midpoint``, ``euler``,
with torchdiffeq's tableaus; ``rk4`` is its 3/8-rule variant) step through every knot of the control. Each
knot interval [k_i, k_{i+1}] is cut into ceil((k_{i+1} − k_i) / step_size) equal steps (one step when
``step_size`` is None: the paper's "step 1 on the index grid"). Every stage of every step is known before the
solve starts, and each knows the control piece it lies in (a stage at the end of a step reads the piece the
step lies in, never the next one, where piecewise-constant controls jump and samples end). So the control is
evaluated, and a dynamics module's input-only work (:meth:`Dynamics.control_features`: the fast weight
fields' projections of the input) is done, for a block of steps in batched tensor operations, and the
sequential loop only evaluates what depends on the state. A sample's grid never depends on what else is in
the batch.

**Adaptive methods** (:data:`ADAPTIVE_METHODS`: ``dopri5``, ...) are torchdiffeq's, solving in s with
``rtol``/``atol`` and stepping onto every knot (``jump_t``): the rate of a piecewise-constant control jumps
there, a sample's rate stops at its final knot, and the sensitivity to each polynomial piece of an
interpolated control starts and ends there.

**Gradients** (``SolverOptions.gradient``):

- ``"checkpoint"`` (default): backpropagation through the solver's own steps, exact for the discrete solve
  (equal to ``"backprop"`` to rounding), with memory O(√N) states for N steps: the forward pass keeps only
  the state at the start of every segment of ``checkpoint_every`` steps (default ⌈√N⌉), and the backward pass
  recomputes one segment at a time and backpropagates through it. A fixed-step segment is one autograd node
  (:class:`_CheckpointedSegment`) whose gradient reaches its first state, the dynamics' parameters and the
  control's tensors (as ``adjoint_params`` for the adjoint: other tensors the dynamics captures are treated as
  constants), so nothing of a segment stays alive between the passes. An adaptive solve (through
  ``torch.utils.checkpoint``, non-reentrant) carries its whole step-size state (state, last rate, step size, interpolant) across
  segment boundaries, and a recomputed segment retakes exactly the accepted and rejected steps of the
  forward pass (the same function of the same inputs), so the gradient is the one of the steps actually
  taken, step-size control included, as for ``"backprop"``. Time: about one extra forward solve.
- ``"adjoint"``: the continuous adjoint (:func:`torchdiffeq.odeint_adjoint`), the papers' method: memory
  independent of the number of steps, but the backward pass reconstructs the state by integrating the ODE
  backwards in time, which is unstable for contracting fields (learning rules that forget, GRUs, NCDEs): past
  a few hundred steps its gradients can be wrong by orders of magnitude or NaN. ``adjoint_params`` lists
  the dynamics' parameters and any control tensors that require gradients (without that list, gradients
  with respect to the control would silently be missing). Every ``adjoint_check``-th solve (the first one
  included) re-integrates the final state backwards without gradients and warns
  (:class:`AdjointReconstructionWarning`) with the measured relative error of the reconstructed initial
  state when it exceeds :data:`ADJOINT_RECONSTRUCTION_TOLERANCE`.
- ``"backprop"``: plain backpropagation through the solver's operations (memory O(N)).

``adjoint=True`` / ``adjoint=False`` remain shorthands for ``gradient="adjoint"`` / ``"backprop"``.

``method="exact"`` solves fast weight fields driven by inputs that are constant on every knot interval
(log-signature windows; piecewise-linear controls read through their derivative only) with the closed-form
steps of shared/DESIGN.md §5: see :mod:`neuralde_seq.exact` (its gradients recompute checkpointed segments
with a hand-written backward). It is selected here, so every model that calls :func:`solve` takes it through
its ``SolverOptions``.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Protocol

import torch
import torchdiffeq
from torch.utils.checkpoint import checkpoint

from .controls import Control

__all__ = ["SolverOptions", "Dynamics", "solve", "evolve_over_gaps", "AdjointReconstructionWarning",
           "FIXED_STEP_METHODS", "ADAPTIVE_METHODS", "EXACT_METHOD", "GRADIENT_METHODS",
           "ADJOINT_RECONSTRUCTION_TOLERANCE"]


@dataclasses.dataclass(frozen=True)
class _Tableau:
    """An explicit Runge-Kutta method: stage times ``c``, stage weights ``a`` (lower triangular) and ``b``."""

    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]


# torchdiffeq's fixed-grid tableaus, so that the "adjoint" gradient (which solves with torchdiffeq) and the
# other two see the same forward solution.
_TABLEAUS = {
    "euler": _Tableau((0.0,), ((),), (1.0,)),
    "midpoint": _Tableau((0.0, 0.5), ((), (0.5,)), (0.0, 1.0)),
    "heun2": _Tableau((0.0, 1.0), ((), (1.0,)), (0.5, 0.5)),
    "heun3": _Tableau((0.0, 1 / 3, 2 / 3), ((), (1 / 3,), (0.0, 2 / 3)), (0.25, 0.0, 0.75)),
    "rk4": _Tableau((0.0, 1 / 3, 2 / 3, 1.0), ((), (1 / 3,), (-1 / 3, 1.0), (1.0, -1.0, 1.0)),
                    (0.125, 0.375, 0.375, 0.125)),
}
# Multistep methods (torchdiffeq's Adams) are not offered: they reuse rates from earlier steps, across knots
# where the control's derivative (and a log-signature control itself) jumps.
FIXED_STEP_METHODS = tuple(_TABLEAUS)
ADAPTIVE_METHODS = ("dopri5", "dopri8", "bosh3", "fehlberg2", "adaptive_heun")
EXACT_METHOD = "exact"
GRADIENT_METHODS = ("checkpoint", "adjoint", "backprop")
# Relative error of the initial state reconstructed by a backward solve above which the adjoint check warns.
ADJOINT_RECONSTRUCTION_TOLERANCE = 1e-3


class AdjointReconstructionWarning(RuntimeWarning):
    """The continuous adjoint's backward reconstruction of the state is inaccurate for this solve, so its
    gradients are too: use ``SolverOptions(gradient="checkpoint")`` (the default)."""


@dataclasses.dataclass
class SolverOptions:
    """Options of :func:`solve`: what method, which steps, and how gradients are computed.

    Attributes:
        method: a fixed-step method (:data:`FIXED_STEP_METHODS`), an adaptive torchdiffeq method
            (:data:`ADAPTIVE_METHODS`), or "exact" (closed-form steps for inputs constant on every knot
            interval, :mod:`neuralde_seq.exact`). Default "rk4", as in the papers.
        step_size: largest step of a fixed-step method, in units of the control's parameter s; None
            takes one step per knot interval.
        rtol, atol: tolerances of adaptive methods (torchdiffeq's defaults, which the papers use).
        gradient: how gradients are computed (module docstring): "checkpoint" (the default when neither
            ``gradient`` nor ``adjoint`` is given: exact for the discrete solve, O(√N) memory, about one extra
            forward solve), "adjoint" (the continuous adjoint of the papers: constant memory, but wrong for
            contracting fields over long sequences) or "backprop" (plain backpropagation, O(N) memory).
            Not used by "exact", whose gradients recompute checkpointed segments by hand.
        adjoint: shorthand kept from earlier versions: True means ``gradient="adjoint"``, False means
            ``gradient="backprop"``. Giving both with different meanings is an error.
        checkpoint_every: ``gradient="checkpoint"``: steps per checkpointed segment for fixed-step methods,
            knot intervals per segment for adaptive ones (None: ⌈√N⌉ of N, which minimises memory).
        adjoint_check: ``gradient="adjoint"``: check the backward reconstruction of the state on every
            ``adjoint_check``-th solve that records gradients, the first included (module docstring; one extra
            solve without gradients each time); 0 turns the check off.
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
    gradient: str | None = None
    adjoint: bool | None = None
    checkpoint_every: int | None = None
    adjoint_check: int = 100
    chunk_size: int | None = None
    compile: bool = False

    def __post_init__(self):
        methods = FIXED_STEP_METHODS + ADAPTIVE_METHODS + (EXACT_METHOD,)
        if self.method not in methods:
            hint = (" (multistep methods reuse rates across knots, where controls jump: use rk4 or dopri5)"
                    if "adams" in str(self.method) else "")
            raise ValueError(f"method must be one of {methods}, got {self.method!r}{hint}")
        if self.gradient is not None and self.gradient not in GRADIENT_METHODS:
            raise ValueError(f"gradient must be one of {GRADIENT_METHODS}, got {self.gradient!r}")
        if self.adjoint is not None:
            if not isinstance(self.adjoint, bool):
                raise ValueError(f"adjoint must be True, False or None, got {self.adjoint!r}")
            implied = "adjoint" if self.adjoint else "backprop"
            if self.gradient is not None and self.gradient != implied:
                raise ValueError(f"adjoint={self.adjoint} means gradient={implied!r}, which contradicts "
                                 f"gradient={self.gradient!r}: give one of the two")
        if self.chunk_size is not None and not (isinstance(self.chunk_size, int) and self.chunk_size >= 1):
            raise ValueError(f"chunk_size must be a positive integer or None, got {self.chunk_size!r}")
        if self.method != EXACT_METHOD and (self.chunk_size is not None or self.compile):
            raise ValueError(f"chunk_size and compile are options of method='exact', not of {self.method!r}")
        if self.checkpoint_every is not None and not (
                isinstance(self.checkpoint_every, int) and not isinstance(self.checkpoint_every, bool)
                and self.checkpoint_every >= 1):
            raise ValueError(f"checkpoint_every must be a positive integer or None, got {self.checkpoint_every!r}")
        if isinstance(self.adjoint_check, bool) or not isinstance(self.adjoint_check, int) or self.adjoint_check < 0:
            raise ValueError(f"adjoint_check must be an integer >= 0 (0: off), got {self.adjoint_check!r}")
        if self.step_size is not None and not (self.step_size > 0 and math.isfinite(self.step_size)):
            raise ValueError(f"step_size must be a positive number or None, got {self.step_size!r}")
        if not (self.rtol > 0 and self.atol > 0):
            raise ValueError(f"rtol and atol must be positive, got rtol={self.rtol}, atol={self.atol}")
        self._adjoint_solves = 0  # counts solves for adjoint_check (not a field: not part of equality or repr)

    @property
    def gradient_method(self) -> str:
        """The gradient method in force: ``gradient`` if given, else the one ``adjoint`` implies, else
        "checkpoint"."""
        if self.gradient is not None:
            return self.gradient
        if self.adjoint is not None:
            return "adjoint" if self.adjoint else "backprop"
        return "checkpoint"


class Dynamics(Protocol):
    """What :func:`solve` integrates: an ``nn.Module`` with

    - ``forward(state, x, dx) -> rate``: ``state`` (B, ...) the current state, ``x`` (B, C) the control's
      value X(s) and ``dx`` (B, C) its derivative X'(s) (either may be None when not needed); returns
      dstate/ds with the shape of ``state``;
    - ``needs_value`` and ``needs_derivative``: booleans saying which of x and dx it reads;
    - optionally, a split of ``forward`` into the part that depends on the input only and the rest, which
      fixed-step solves use to do the first part for many steps at once:
      ``control_features(x, dx) -> tuple`` (x, dx of shape (N, C), N any number of points; returns tensors
      with N leading, or None entries) and ``rate_from_features(state, *features) -> rate`` (features with B
      leading), such that ``rate_from_features(state, *control_features(x, dx)) == forward(state, x, dx)``.
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



# ---------------------------------------------------------------------------------------------------
# fixed-step methods: our own Runge-Kutta loop over a grid known in advance

def _step_grid(control: Control, step_size: float | None):
    """(grid (M + 1,) in s, grid index of every knot (K,), knot interval of every step (M,)) of a fixed-step
    solve up to the batch's last final knot."""
    grid, counts = subdivide(control.knots[: int(control.end_index.max()) + 1], step_size)
    knot_position = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    piece = torch.repeat_interleave(torch.arange(counts.shape[0], device=counts.device), counts)
    return grid, knot_position, piece


class _FixedStepSolve:
    """One fixed-step solve of ``dynamics`` along ``control`` (module docstring)."""

    def __init__(self, dynamics, control: Control, options: SolverOptions, dtype: torch.dtype):
        self.dynamics, self.control = dynamics, control
        self.tableau = _TABLEAUS[options.method]
        grid, self.knot_position, self.piece = _step_grid(control, options.step_size)
        self.offset = grid[:-1] - control.knots[self.piece]  # step start − piece start
        self.width = grid[1:] - grid[:-1]
        self.widths = self.width.to(dtype).tolist()
        self.steps = self.width.shape[0]
        self.end_step = self.knot_position[control.end_index]  # (B,) the step count at which each sample stops
        self.all_active = int(self.end_step.min())  # steps before this one move every sample
        self.knot_steps = set(self.knot_position.tolist())
        self.split = hasattr(dynamics, "control_features")

    def segments(self, every: int | None) -> list[tuple[int, int]]:
        size = every or max(1, math.ceil(math.sqrt(self.steps)))
        return [(n, min(n + size, self.steps)) for n in range(0, self.steps, size)]

    def features(self, n0: int, n1: int) -> list[torch.Tensor | None]:
        """The dynamics' input-only features at every stage of steps n0..n1−1: tensors (n, stages, B, ...)."""
        control, dynamics = self.control, self.dynamics
        c = torch.tensor(self.tableau.c, dtype=control.coeffs.dtype, device=control.coeffs.device)
        offsets = self.offset[n0:n1, None].to(c.dtype) + c * self.width[n0:n1, None].to(c.dtype)  # (n, S)
        pieces = self.piece[n0:n1, None].expand_as(offsets).reshape(-1)
        x, dx = control.evaluate_points(pieces, offsets.reshape(-1), dynamics.needs_value,
                                        dynamics.needs_derivative)  # (B, n·S, C)
        channels = control.channels
        # Point-major, batch-minor: the features of one stage are then a contiguous (B, ...) block.
        x = None if x is None else x.transpose(0, 1).reshape(-1, channels)
        dx = None if dx is None else dx.transpose(0, 1).reshape(-1, channels)
        features = dynamics.control_features(x, dx) if self.split else (x, dx)
        shape = (n1 - n0, len(self.tableau.c), control.batch_size)
        return [None if t is None else t.reshape(*shape, *t.shape[1:]) for t in features]

    def rate(self, state, features):
        if self.split:
            return self.dynamics.rate_from_features(state, *features)
        return self.dynamics(state, *features)

    def run(self, y: torch.Tensor, n0: int, n1: int, keep: bool) -> tuple[torch.Tensor, ...]:
        """Steps n0..n1−1 from state y; returns (y after them, the states after every step that ends on a knot
        if ``keep``)."""
        stages = len(self.tableau.c)
        # One unbind per feature, not an index per stage: the backward of an index would fill a zero gradient
        # of the whole segment's features for every stage.
        features = [None if f is None else f.flatten(0, 1).unbind(0) for f in self.features(n0, n1)]
        tableau, kept = self.tableau, []
        for j, n in enumerate(range(n0, n1)):
            h = self.widths[n]
            if n >= self.all_active:  # samples past their end are frozen: their step is 0
                active = (n < self.end_step).to(y.dtype)
                h = (h * active).view(-1, *([1] * (y.dim() - 1)))
            rates = []
            for i, row in enumerate(tableau.a):
                stage = _step(y, h, _combine(row, rates)) if i else y
                rates.append(self.rate(stage, [None if f is None else f[j * stages + i] for f in features]))
            y = _step(y, h, _combine(tableau.b, rates))
            if keep and n + 1 in self.knot_steps:
                kept.append(y)
        return (y, *kept)

    def solve(self, initial: torch.Tensor, at_knots: bool, options: SolverOptions, checkpointed: bool):
        y, states = initial, [initial]
        if checkpointed:
            leaves = tuple(p for p in self.dynamics.parameters() if p.requires_grad)
            leaves += tuple(c for c in self.control.tensors() if c.requires_grad)
        for n0, n1 in self.segments(options.checkpoint_every):
            if checkpointed:
                out = _CheckpointedSegment.apply(self, n0, n1, at_knots, y, *leaves)
            else:
                out = self.run(y, n0, n1, at_knots)
            y = out[0]
            states.extend(out[1:])
        return torch.stack(states, 1) if at_knots else y


def _combine(weights, rates):
    """Σ_i w_i k_i over the nonzero weights, in fused multiply-adds."""
    total = None
    for w, k in zip(weights, rates):
        if w == 0.0:
            continue
        total = (k if w == 1.0 else k * w) if total is None else torch.add(total, k, alpha=w)
    return total


def _step(y, h, increment):
    """y + h · increment, h a number or a (B, 1, ...) tensor."""
    return torch.add(y, increment, alpha=h) if isinstance(h, float) else torch.addcmul(y, h, increment)


class _CheckpointedSegment(torch.autograd.Function):
    """Steps n0..n1−1 of a fixed-step solve as one autograd node: the forward pass runs them without a graph
    and keeps only the segment's first state; the backward pass recomputes the segment with a graph and
    backpropagates through it. Unlike ``torch.utils.checkpoint``, nothing of the segment (not even
    placeholders for its saved tensors) stays alive between the passes, so memory is O(segments) states.

    The gradient reaches the first state and the ``leaves`` passed in: the dynamics' parameters and the
    control's tensors that require grad (as ``adjoint_params`` for the adjoint); anything else the dynamics
    reads is treated as a constant. Not twice differentiable.
    """

    @staticmethod
    def forward(ctx, solve: _FixedStepSolve, n0: int, n1: int, keep: bool, y: torch.Tensor, *leaves):
        ctx.solve, ctx.segment, ctx.leaves = solve, (n0, n1, keep), leaves
        ctx.save_for_backward(y)
        return solve.run(y, n0, n1, keep)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grad_outputs):
        (y,) = ctx.saved_tensors
        with torch.enable_grad():
            start = y.detach().requires_grad_(True)
            outputs = ctx.solve.run(start, *ctx.segment)
            inputs = (start,) + tuple(ctx.leaves)
            grads = torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)
        return (None, None, None, None) + tuple(grads)


# ---------------------------------------------------------------------------------------------------
# adaptive methods: torchdiffeq's, with their step-size state carried across checkpointed segments

def _solve_adaptive_checkpointed(func, initial: torch.Tensor, knots: torch.Tensor, options: SolverOptions,
                                 at_knots: bool) -> torch.Tensor:
    """torchdiffeq's adaptive solve through every knot, backpropagated segment by segment.

    The solver advances knot by knot (its steps end on every knot anyway, as they are jump times), and its
    complete state (y, the FSAL rate, the times, the proposed step and the interpolant) is the input and output
    of each checkpointed segment of knots, so a recomputed segment takes exactly the steps of the forward pass
    and the gradient flows through the step-size control as it does through ``torchdiffeq.odeint``. This reads
    torchdiffeq's solver state (``rk_state``, ``_advance``; stable since torchdiffeq 0.2.0)."""
    from torchdiffeq._impl.misc import _check_inputs
    from torchdiffeq._impl.odeint import SOLVERS
    from torchdiffeq._impl.rk_common import _RungeKuttaState

    _, wrapped, y0, t, rtol, atol, method, solver_options, _, _ = _check_inputs(
        func, initial, knots, options.rtol, options.atol, options.method, dict(jump_t=knots), None, SOLVERS)
    solver = SOLVERS[method](func=wrapped, y0=y0, rtol=rtol, atol=atol, **solver_options)
    solver._before_integrate(t.to(solver.dtype))
    t = t.to(solver.dtype)
    size = options.checkpoint_every or max(1, math.ceil(math.sqrt(len(t) - 1)))
    states = [y0]
    for i0 in range(1, len(t), size):
        targets = t[i0: i0 + size]
        start, jump_index = solver.rk_state, solver.next_jump_index
        n_interp = len(start.interp_coeff)

        def advance(y1, f1, t0, t1, dt, *interp, targets=targets, jump_index=jump_index):
            solver.rk_state = _RungeKuttaState(y1, f1, t0, t1, dt, list(interp))
            solver.next_jump_index = jump_index
            values = [solver._advance(target) for target in targets]
            state = solver.rk_state
            return (state.y1, state.f1, state.t0, state.t1, state.dt, *state.interp_coeff, *values)

        out = checkpoint(advance, start.y1, start.f1, start.t0, start.t1, start.dt, *start.interp_coeff,
                         use_reentrant=False, preserve_rng_state=False)
        solver.rk_state = _RungeKuttaState(*out[:5], list(out[5: 5 + n_interp]))
        states.extend(out[5 + n_interp:])
    return torch.stack(states, 1) if at_knots else states[-1]


# ---------------------------------------------------------------------------------------------------
# the continuous adjoint: torchdiffeq's odeint_adjoint

class _SteppedField(torch.nn.Module):
    """dy/du on the step-counting time u of fixed-step methods (for torchdiffeq's adjoint): s(u) is linear on
    each step [n, n + 1].

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


def _torchdiffeq_problem(dynamics, control: Control, initial: torch.Tensor, options: SolverOptions, at_knots: bool):
    """(func, t, kwargs) of a torchdiffeq solve of the same problem: in the step-counting time u for
    fixed-step methods, in s for adaptive ones; t lists every knot if ``at_knots`` (and for adaptive methods
    in any case, see :func:`_solve_adaptive_checkpointed`), else the first and last."""
    if options.method in FIXED_STEP_METHODS:
        grid, knot_position, piece_of_step = _step_grid(control, options.step_size)
        func = _SteppedField(dynamics, control, grid.to(initial.dtype), piece_of_step,
                             knot_position[control.end_index].to(initial.dtype))
        t = knot_position.to(initial.dtype)
        solver_options = dict(step_size=1.0, perturb=True)
    else:
        func = _ContinuousField(dynamics, control)
        t = control.knots[: int(control.end_index.max()) + 1].to(initial.dtype)
        # Every knot is a jump: of the rate for piecewise-constant controls and at samples' ends, and of
        # the sensitivity to each polynomial piece for interpolated ones.
        solver_options = dict(jump_t=t)
    if not at_knots:
        t = t[[0, -1]]
    return func, t, dict(method=options.method, options=solver_options, rtol=options.rtol, atol=options.atol)


def _check_adjoint_reconstruction(func, initial, final, t, kwargs) -> None:
    """Integrate the final state back to the first time, as the adjoint's backward pass does, and warn when the
    initial state is not recovered."""
    with torch.no_grad():
        recovered = torchdiffeq.odeint(func, final.detach(), t.flip(0), **kwargs)[-1]
        scale = torch.maximum(initial.detach().norm(), final.detach().norm()).clamp_min(torch.finfo(final.dtype).tiny)
        error = float((recovered - initial.detach()).norm() / scale)
    if not error <= ADJOINT_RECONSTRUCTION_TOLERANCE:
        warnings.warn(f"continuous adjoint: integrating the final state backwards recovers the initial state with a "
                      f"relative error of {error:.3g} (> {ADJOINT_RECONSTRUCTION_TOLERANCE:g}), so the adjoint gradients "
                      f"of this solve are unreliable; use SolverOptions(gradient='checkpoint') (the default), exact "
                      f"for the discrete solve with O(sqrt(steps)) memory", AdjointReconstructionWarning, stacklevel=3)


def _solve_adjoint(dynamics, control, initial, options: SolverOptions, at_knots: bool) -> torch.Tensor:
    func, t, kwargs = _torchdiffeq_problem(dynamics, control, initial, options, at_knots)
    params = tuple(p for p in dynamics.parameters() if p.requires_grad)
    params += tuple(c for c in control.tensors() if c.requires_grad)
    states = torchdiffeq.odeint_adjoint(func, initial, t, adjoint_params=params, **kwargs)
    if options.adjoint_check and options._adjoint_solves % options.adjoint_check == 0:
        _check_adjoint_reconstruction(func, initial, states[-1], t, kwargs)
    options._adjoint_solves += 1
    return states.movedim(0, 1) if at_knots else states[-1]


# ---------------------------------------------------------------------------------------------------
# the solve entry

def solve(dynamics, control: Control, initial: torch.Tensor, options: SolverOptions | None = None, *,
          at_knots: bool = False) -> torch.Tensor:
    """Solve ``dy/ds = dynamics(y, X(s), X'(s))`` from the first knot to each sample's final knot.

    Arguments:
        dynamics: an ``nn.Module`` following :class:`Dynamics`.
        control: the control X, batch size B.
        initial: (B, ...) the state at the first knot.
        options: :class:`SolverOptions` (default: rk4, one step per knot interval, checkpointed gradients).
        at_knots: False returns each sample's state at its own final knot; True returns the states at
            every knot of the control up to the batch's last final knot (constant after a sample's end).

    Returns:
        (B, ...) final states, or (B, K, ...) states at the K knots if ``at_knots``.
    """
    options = options or SolverOptions()
    if not isinstance(control, Control):
        raise TypeError(f"control must be a neuralde_seq Control (see build_control), got {type(control).__name__}")
    if not isinstance(initial, torch.Tensor) or initial.dim() < 1 or initial.shape[0] != control.batch_size:
        shape = tuple(initial.shape) if isinstance(initial, torch.Tensor) else type(initial).__name__
        raise ValueError(f"initial must be a tensor (B={control.batch_size}, ...), got {shape}")
    if options.method == EXACT_METHOD:
        from .exact import solve_exact

        return solve_exact(dynamics, control, initial, options, at_knots=at_knots)
    gradient = options.gradient_method
    recording = torch.is_grad_enabled()
    if gradient == "adjoint" and recording:
        return _solve_adjoint(dynamics, control, initial, options, at_knots)
    checkpointed = gradient == "checkpoint" and recording
    if options.method in FIXED_STEP_METHODS:
        return _FixedStepSolve(dynamics, control, options, initial.dtype).solve(initial, at_knots, options,
                                                                                checkpointed)
    if checkpointed:
        func, t, _ = _torchdiffeq_problem(dynamics, control, initial, options, at_knots=True)
        return _solve_adaptive_checkpointed(func, initial, t, options, at_knots)
    func, t, kwargs = _torchdiffeq_problem(dynamics, control, initial, options, at_knots)
    states = torchdiffeq.odeint(func, initial, t, **kwargs)
    return states.movedim(0, 1) if at_knots else states[-1]


# ---------------------------------------------------------------------------------------------------
# autonomous ODEs between observations

class _GapDynamics(torch.nn.Module):
    """dh/dτ = Δt_b · f(h): the gap enters as the derivative of a linear control X(τ) = Δt_b τ on τ ∈ [0, 1]."""

    needs_value = False
    needs_derivative = True

    def __init__(self, f: torch.nn.Module):
        super().__init__()
        self.f = f

    def forward(self, h, x, dx):
        return dx * self.f(h)


def evolve_over_gaps(f: torch.nn.Module, h: torch.Tensor, gap: torch.Tensor,
                     options: SolverOptions | None = None) -> torch.Tensor:
    """Evolve each sample's state over its own time gap under the autonomous ODE dh/dt = f(h).

    The one implementation of "evolve between observations" (ODE-RNN, ODE-RFWP, the Latent ODE's encoder
    and decoder). Samples of a batch have different gaps, so the solve runs in a normalised time
    τ ∈ [0, 1] with the gap as a per-sample scale of the field, dh/dτ = Δt_b · f(h), through :func:`solve`
    (a linear control with slope Δt_b), so every method and gradient method of :class:`SolverOptions` applies.
    With a fixed-step method every sample takes the same steps in τ, so its answer never depends on the rest
    of the batch (an adaptive method's error control spans the batch). A negative gap integrates backwards in
    time.

    Arguments:
        f: the vector field, an ``nn.Module`` mapping (B, H) to (B, H).
        h: (B, H) states.
        gap: (B,) time gaps Δt_b (0 leaves a sample exactly where it is).
        options: :class:`SolverOptions`; ``step_size`` is the step in τ (None: one step per gap).

    Returns:
        (B, H) states after the gaps; h itself (the same tensor) when every gap is zero.
    """
    options = options or SolverOptions()
    if not isinstance(h, torch.Tensor) or not isinstance(gap, torch.Tensor) or h.dim() != 2 or gap.shape != h.shape[:1]:
        raise ValueError(f"h must be (B, H) and gap (B,), got h {tuple(getattr(h, 'shape', ()))} and gap "
                         f"{tuple(getattr(gap, 'shape', ()))}")
    if options.method == EXACT_METHOD:
        raise ValueError("method='exact' solves fast weight fields on inputs constant over each knot interval; the "
                         "ODE between observations, dh/dt = f(h) with f a network, has no closed form: use 'rk4' or "
                         "'dopri5'")
    if not bool((gap != 0).any()):
        return h
    gap = gap.to(h.dtype)
    coeffs = h.new_zeros(h.shape[0], 2, 4, 1)
    coeffs[:, 0, 1, 0] = gap  # X(τ) = Δt τ on [0, 1] ...
    coeffs[:, 1, 0, 0] = gap  # ... and constant after it
    knots = torch.tensor([0.0, 1.0], dtype=h.dtype, device=h.device)
    control = Control(knots, coeffs, torch.ones(h.shape[0], dtype=torch.long, device=h.device))
    return solve(_GapDynamics(f), control, h, options)
