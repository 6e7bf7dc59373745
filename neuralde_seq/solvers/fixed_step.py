"""Fixed-step solves: our own explicit Runge-Kutta loop over a grid of steps known before the solve.

The fixed-step methods (`neuralde_seq.solvers.FixedStep`: `RK4`, `Heun3`, `Heun2`, `Midpoint`, `Euler`; their
names `FIXED_STEP_METHODS`) use torchdiffeq's tableaus (`TABLEAUS`, each method's ``tableau``; ``rk4`` is its
3/8-rule variant), so that the continuous adjoint (which solves with torchdiffeq) and our loop see the same forward
solution. A solve steps through every knot of the control: each knot interval
[k_i, k_{i+1}] is cut into ceil((k_{i+1} − k_i) / step_size) equal steps (one step when ``step_size`` is None:
the paper's "step 1 on the index grid"). Every stage of every step is known before the solve starts, and
each knows the control piece it lies in (a stage at the end of a step reads the piece the step lies in, never
the next one, where piecewise-constant controls jump and samples end). So the control is evaluated, and a
dynamics module's input-only work (``control_features``) is done, for a block of steps in batched tensor
operations, and the sequential loop only evaluates what depends on the state. A sample's grid never depends
on what else is in the batch.

The number of steps is known before solving, and `step_grid` refuses a grid of more than the method's
``max_steps`` steps (hourly timestamps in seconds with ``step_size=0.01`` would otherwise take millions of steps,
silently).

Checkpointed gradients: a segment of steps is one autograd node (`CheckpointedSegment`) that keeps only
its first state; its backward pass recomputes the segment and backpropagates through it.

Compiled steps (``FixedStep.compile``, issue 38): on a GPU a small field's step is a chain of tiny kernel launches,
so the loop can run each step through `compiled_step`: `runge_kutta_step` (all stages of one step, the rates and
the update) compiled by ``torch.compile``, as a CUDA graph replayed every step on CUDA (mode "reduce-overhead",
`COMPILE_MODES`), fused kernels elsewhere. It is made once per dynamics class, tableau and mode and reused for every
step, segment, solve and the backward pass's recomputation; the dynamics module is an argument of the compiled
function (its parameters inputs of the graph), so a new module of the same structure, dtype and device reuses the
graph. The step
width goes in as a (B, 1, ...) tensor (0 past a sample's end), one shape for every step: a Python float would be
specialised on and recompile each width. The eager loop, running the same `runge_kutta_step`, is the reference
the tests compare it with.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import types
from collections.abc import Callable

import torch

from ..controls import Control

__all__ = [
    "FIXED_STEP_METHODS",
    "TABLEAUS",
    "Tableau",
    "subdivide",
    "step_grid",
    "FixedStepSolve",
    "CheckpointedSegment",
    "runge_kutta_step",
    "compiled_step",
    "compile_unavailable",
    "COMPILE_MODES",
]


@dataclasses.dataclass(frozen=True)
class Tableau:
    """An explicit Runge-Kutta method: stage times ``c``, stage weights ``a`` (lower triangular) and ``b``."""

    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]


# torchdiffeq's fixed-grid tableaus (module docstring).
TABLEAUS = {
    "euler": Tableau((0.0,), ((),), (1.0,)),
    "midpoint": Tableau((0.0, 0.5), ((), (0.5,)), (0.0, 1.0)),
    "heun2": Tableau((0.0, 1.0), ((), (1.0,)), (0.5, 0.5)),
    "heun3": Tableau((0.0, 1 / 3, 2 / 3), ((), (1 / 3,), (0.0, 2 / 3)), (0.25, 0.0, 0.75)),
    "rk4": Tableau(
        (0.0, 1 / 3, 2 / 3, 1.0), ((), (1 / 3,), (-1 / 3, 1.0), (1.0, -1.0, 1.0)), (0.125, 0.375, 0.375, 0.125)
    ),
}
# Multistep methods (torchdiffeq's Adams) are not offered: they reuse rates from earlier steps, across knots
# where the control's derivative (and a log-signature control itself) jumps.
FIXED_STEP_METHODS = tuple(TABLEAUS)


def subdivide(
    knots: torch.Tensor, step_size: float | None, max_steps: int | None = None, method_name: str = "fixed-step"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed-step grid through every knot.

    Arguments:
        knots: (K,) strictly increasing points in s.
        step_size: largest step, or None for one step per knot interval.
        max_steps: refuse grids of more steps (None: no limit).
        method_name: the method's name, for the message.

    Returns:
        (grid, counts): grid (M + 1,) points in s; counts (K − 1,) long, the number of steps in each knot
            interval (their cumulative sums are the knots' positions in the grid).

    Raises:
        ValueError: the grid would have more than ``max_steps`` steps (raised before anything is allocated).
    """
    gaps = knots[1:] - knots[:-1]
    if step_size is None:
        _check_step_count(gaps.shape[0], knots, step_size, max_steps, method_name)
        return knots, torch.ones_like(gaps, dtype=torch.long)
    # A relative slack keeps an interval that is a whole multiple of step_size from gaining a step through
    # rounding.
    counts = torch.ceil(gaps / step_size * (1 - 1e-9)).clamp(min=1)
    # Checked before the cast to long, which would wrap a count beyond 2^63 (or an infinite one).
    _check_step_count(float(counts.double().sum()), knots, step_size, max_steps, method_name)
    counts = counts.long()
    first_step = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)  # of each step's interval
    index_in_interval = torch.arange(int(counts.sum()), device=knots.device) - first_step
    fraction = index_in_interval.to(knots.dtype) / torch.repeat_interleave(counts, counts).to(knots.dtype)
    grid = torch.repeat_interleave(knots[:-1], counts) + fraction * torch.repeat_interleave(gaps, counts)
    grid = torch.cat([grid, knots[-1:]])
    return grid, counts


def _check_step_count(
    steps: float, knots: torch.Tensor, step_size: float | None, max_steps: int | None, method_name: str
) -> None:
    if max_steps is None or steps <= max_steps:
        return
    start, end = float(knots[0]), float(knots[-1])
    per = (
        f"step_size={step_size:g}"
        if step_size is not None
        else f"one step per knot interval (step_size=None) over {knots.shape[0] - 1:,} intervals"
    )
    raise ValueError(
        f"the {method_name} solve would take {steps:,.0f} steps, more than max_steps={max_steps:,}: the "
        f"control's parameter s runs from {start:.6g} to {end:.6g} (a span of {end - start:.6g}) with "
        f"{per}. Use a larger step_size (or None: one step per knot interval), rescale the times to "
        "units where observation gaps are about 1, build the control with parametrization='index', or "
        "raise the method's max_steps (e.g. RK4(max_steps=...))"
    )


def step_grid(control: Control, step_size: float | None, max_steps: int | None = None, method_name: str = "fixed-step"):
    """(grid (M + 1,) in s, grid index of every knot (K,), knot interval of every step (M,)) of a fixed-step
    solve up to the batch's last final knot; more than ``max_steps`` steps raise (see `subdivide`)."""
    grid, counts = subdivide(control.knots[: int(control.end_index.max()) + 1], step_size, max_steps, method_name)
    knot_position = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    piece = torch.repeat_interleave(torch.arange(counts.shape[0], device=counts.device), counts)
    return grid, knot_position, piece


class FixedStepSolve:
    """One fixed-step solve of ``dynamics`` along ``control`` (module docstring)."""

    def __init__(self, dynamics, control: Control, method, dtype: torch.dtype, compiled: bool = False):
        """``method``: the fixed-step method (`neuralde_seq.solvers.FixedStep`: its ``tableau``, ``step_size`` and
        ``max_steps`` are read); ``dtype``: the state's; ``compiled``: whether `run` takes its steps through
        `compiled_step` (``FixedStep.compiles`` decides) instead of the eager `runge_kutta_step`."""
        self.dynamics, self.control = dynamics, control
        self.tableau = method.tableau
        grid, self.knot_position, self.piece = step_grid(control, method.step_size, method.max_steps, method.name)
        self.offset = grid[:-1] - control.knots[self.piece]  # step start − piece start
        self.width = grid[1:] - grid[:-1]
        self.widths = self.width.to(dtype).tolist()
        self.steps = self.width.shape[0]
        self.end_step = self.knot_position[control.end_index]  # (B,) the step count at which each sample stops
        self.all_active = int(self.end_step.min())  # steps before this one move every sample
        self.knot_steps = set(self.knot_position.tolist())
        self.split = hasattr(dynamics, "control_features")
        self.timed = getattr(dynamics, "needs_time", False)
        # the stage times, copied to the device once here: a copy per segment would block the host on a GPU
        self.stage_times = torch.tensor(self.tableau.c, dtype=control.coeffs.dtype, device=control.coeffs.device)
        self.compiled_step = compiled_step(dynamics, self.tableau, control.coeffs.device) if compiled else None

    def segments(self, every: int | None) -> list[tuple[int, int]]:
        size = every or max(1, math.ceil(math.sqrt(self.steps)))
        return [(n, min(n + size, self.steps)) for n in range(0, self.steps, size)]

    def features(self, n0: int, n1: int) -> list[torch.Tensor | None]:
        """The dynamics' input-only features at every stage of steps n0..n1−1: tensors (n, stages, B, ...)."""
        control, dynamics = self.control, self.dynamics
        c = self.stage_times
        offsets = self.offset[n0:n1, None].to(c.dtype) + c * self.width[n0:n1, None].to(c.dtype)  # (n, S)
        pieces = self.piece[n0:n1, None].expand_as(offsets).reshape(-1)
        x, dx = control.evaluate_points(
            pieces, offsets.reshape(-1), dynamics.needs_value, dynamics.needs_derivative
        )  # (B, n·S, C)
        channels = control.channels
        # Point-major, batch-minor: the features of one stage are then a contiguous (B, ...) block.
        x = None if x is None else x.transpose(0, 1).reshape(-1, channels)
        dx = None if dx is None else dx.transpose(0, 1).reshape(-1, channels)
        inputs: tuple[torch.Tensor | None, ...] = (x, dx)
        if self.timed:  # each point's s, repeated over the batch (point-major, batch-minor as x)
            s = control.knots[pieces].to(offsets.dtype) + offsets.reshape(-1)
            inputs += (s.repeat_interleave(control.batch_size).to(control.coeffs.dtype),)
        features = dynamics.control_features(*inputs) if self.split else inputs
        shape = (n1 - n0, len(self.tableau.c), control.batch_size)
        return [None if t is None else t.reshape(*shape, *t.shape[1:]) for t in features]

    def run(self, y: torch.Tensor, n0: int, n1: int, keep: bool) -> tuple[torch.Tensor, ...]:
        """Steps n0..n1−1 from state y; returns (y after them, the states after every step that ends on a knot
        if ``keep``)."""
        stages = len(self.tableau.c)
        # One unbind per feature, not an index per stage: the backward of an index would fill a zero gradient
        # of the whole segment's features for every stage.
        features = [None if f is None else f.flatten(0, 1).unbind(0) for f in self.features(n0, n1)]
        tableau, dynamics, split, kept = self.tableau, self.dynamics, self.split, []
        compiled = self.compiled_step
        if compiled is not None:
            # Every step's widths as a (B, 1, ...) tensor, 0 past a sample's end, made for the segment at once: the
            # same shape at every step (one graph), and no host value in the loop.
            steps = torch.arange(n0, n1, device=self.end_step.device)
            widths = self.width[n0:n1, None].to(y.dtype) * (steps[:, None] < self.end_step).to(y.dtype)
            widths = widths.view(n1 - n0, -1, *([1] * (y.dim() - 1))).unbind(0)
            if not torch.is_grad_enabled():  # (a checkpointed segment's forward): one graph, whatever y requires
                y = y.detach()
        for j, n in enumerate(range(n0, n1)):
            stage_features = [[None if f is None else f[j * stages + i] for f in features] for i in range(stages)]
            if compiled is not None:
                y = compiled(dynamics, split, tableau, y, widths[j], stage_features)
            else:
                h = self.widths[n]
                if n >= self.all_active:  # samples past their end are frozen: their step is 0
                    active = (n < self.end_step).to(y.dtype)
                    h = (h * active).view(-1, *([1] * (y.dim() - 1)))
                y = runge_kutta_step(dynamics, split, tableau, y, h, stage_features)
            if keep and n + 1 in self.knot_steps:
                kept.append(y)
        return (y, *kept)

    def solve(self, initial: torch.Tensor, at_knots: bool, every: int | None, checkpointed: bool):
        """The states after the solve from ``initial`` (as `neuralde_seq.solvers.solve`), the steps run in segments
        of ``every`` steps (None: ⌈√N⌉), each one autograd node (`CheckpointedSegment`) if ``checkpointed``."""
        y, states = initial, [initial]
        if checkpointed:
            leaves = tuple(p for p in self.dynamics.parameters() if p.requires_grad)
            leaves += tuple(c for c in self.control.tensors() if c.requires_grad)
        for n0, n1 in self.segments(every):
            if checkpointed:
                out = CheckpointedSegment.apply(self, n0, n1, at_knots, y, *leaves)
            else:
                out = self.run(y, n0, n1, at_knots)
            y = out[0]
            states.extend(out[1:])
        return torch.stack(states, 1) if at_knots else y


def runge_kutta_step(dynamics, split: bool, tableau: Tableau, y: torch.Tensor, h, stage_features) -> torch.Tensor:
    """One explicit Runge-Kutta step of ``dynamics`` from y: the rates at every stage and the update
    y + h Σ_i b_i k_i. The body of `FixedStepSolve.run`'s loop, eager or through `compiled_step`.

    Arguments:
        dynamics: the dynamics module (`neuralde_seq.solvers.Dynamics`).
        split: True: ``stage_features`` hold its ``control_features``, read by ``rate_from_features``; False: its
            inputs (x, dx[, s]), read by its forward.
        tableau: the method's `Tableau`.
        y: (B, ...) the state at the step's start.
        h: the step width: a number, or a (B, 1, ...) tensor (0 for the samples past their end).
        stage_features: per stage, a list of the features (or inputs) there, each (B, ...) or None.

    Returns:
        (B, ...) the state after the step.
    """
    rates: list[torch.Tensor] = []
    for i, row in enumerate(tableau.a):
        stage = _step(y, h, weighted_sum(row, rates)) if i else y
        features = stage_features[i]
        rates.append(dynamics.rate_from_features(stage, *features) if split else dynamics(stage, *features))
    return _step(y, h, weighted_sum(tableau.b, rates))


# torch.compile's mode for a step, by the state's device type: on CUDA the step is captured as a CUDA graph and
# replayed (one launch per step instead of one per operation); elsewhere inductor's default (fused kernels).
COMPILE_MODES = {"cuda": "reduce-overhead"}
# The compiled steps, by (dynamics class, tableau, mode): made once, reused by every solve.
_COMPILED_STEPS: dict[tuple, Callable] = {}


def compile_unavailable() -> str | None:
    """Why ``torch.compile`` cannot run here, or None when it can: dynamo does not support this Python or platform,
    or no C compiler is on PATH (inductor builds C++ on a CPU, and triton's launchers on CUDA, with one)."""
    try:
        import torch._dynamo

        if not torch._dynamo.is_dynamo_supported():
            return "torch._dynamo does not support this Python or platform"
    except ImportError as error:  # a stripped-down build of torch
        return f"torch._dynamo cannot be imported ({error})"
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        return "no C compiler (cc or gcc) is on PATH"
    return None


def compiled_step(dynamics, tableau: Tableau, device: torch.device | str) -> Callable:
    """`runge_kutta_step` through ``torch.compile`` (mode `COMPILE_MODES` of the device type, else the default), made
    once per dynamics class, tableau and mode and reused (the module docstring's "Compiled steps"). Each has its
    own copy of the step's code, so that dynamo's limit of graphs per code object (8) counts the shapes, dtypes and
    gradient modes of one kind of field, not of every field compiled in the process.

    Arguments:
        dynamics: the dynamics module the steps will read (only its class is part of the key: the module itself is
            an argument of every call, its parameters inputs of the graph).
        tableau: the method's `Tableau`.
        device: the state's device.

    Returns:
        A callable with `runge_kutta_step`'s arguments (compiled at its first call of each shape and gradient mode).
    """
    mode = COMPILE_MODES.get(torch.device(device).type)
    key = (type(dynamics), tableau, mode)
    if key not in _COMPILED_STEPS:
        code = runge_kutta_step.__code__.replace()  # a distinct code object: dynamo's cache of graphs is per code
        step = types.FunctionType(code, runge_kutta_step.__globals__, runge_kutta_step.__name__)
        _COMPILED_STEPS[key] = torch.compile(step, mode=mode)
    return _COMPILED_STEPS[key]


def weighted_sum(weights, rates):
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


class CheckpointedSegment(torch.autograd.Function):
    """Steps n0..n1−1 of a fixed-step solve as one autograd node: the forward pass runs them without a graph
    and keeps only the segment's first state; the backward pass recomputes the segment with a graph and
    backpropagates through it. Unlike ``torch.utils.checkpoint``, nothing of the segment (not even
    placeholders for its saved tensors) stays alive between the passes, so memory is O(segments) states.

    The gradient reaches the first state and the ``leaves`` passed in: the dynamics' parameters and the
    control's tensors that require grad (as ``adjoint_params`` for the adjoint); anything else the dynamics
    reads is treated as a constant. Not twice differentiable.
    """

    @staticmethod
    def forward(ctx, solve: FixedStepSolve, n0: int, n1: int, keep: bool, y: torch.Tensor, *leaves):
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
