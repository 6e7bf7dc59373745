"""Exact solutions of fast weight fields whose inputs are constant on every knot interval: the fast path
`solve_exact` and its reference `solve_exact_reference`.

On a log-signature window (or on a piece of a piecewise-linear control read only through its derivative,
e.g. a rectilinear control with ``dx_only=True``) the key, value and learning rate of a
`FastWeightField` are constant, and each learning rule has a closed-form step
(docs/equations.md#closed-forms-on-constant-inputs, `exact_step`).

`solve_exact_reference` is the definition: a plain Python loop over the knot intervals, one call of
``rule.exact_step`` per interval, differentiated by autograd (memory O(T · d²) per sample).

`solve_exact` (selected in `solve` by the method `neuralde_seq.solvers.Exact`, and by the default `Auto`
wherever `exact_applies` says the closed form applies) computes the same states:

1. every input-dependent quantity (keys, values, learning rates) of a segment of the sequence is computed in
   one batched pass of the field's projections (all heads in one matmul, `FastWeightField.projections`);
2. Hebb: sums of outer products c·h·v kᵀ;
   Oja and pre-Delta: the affine steps M ↦ M − λ (M a) aᵀ + μ b aᵀ (`RankOneUpdate`;
   M = W or Wᵀ) one after the other over all samples and heads at once, with their adjoint written by hand
   (`neuralde_seq.solvers.affine_recurrence`, which says why they are not run as a parallel scan);
   post-Delta: its nonlinear exact step, step by step, over the precomputed inputs;
3. variable lengths: a step after a sample's final knot has length 0, which every closed form maps to the
   identity, so each sample stops at its own end.

``Exact(scan="parallel")`` (and "auto" on a GPU) composes the affine rules' steps of a segment by the
parallel prefix scan of `neuralde_seq.solvers.linear_scan` instead (each step a diagonal-plus-rank-one map of Wᵀ,
the rows of W the scan state's columns; with ``recurrence="chunked"``, the maps of its WY blocks): ⌈log₂ S⌉ rounds
for S steps, gradients by autograd through the recomputed segment.

Beside step 2's sequential recurrence, ``Exact(recurrence="chunked")`` computes the affine rules' steps in
the chunked WY / UT form of `neuralde_seq.solvers.chunked_delta` (blocks of steps as matmuls, only the block boundaries
one after the other; gradients by autograd through each recomputed segment): slower on a CPU with heads of width 8,
expected to be faster on a GPU. tests/test_chunked_delta.py checks it against the reference.

tests/test_exact.py checks it against the reference (float64, values and gradients) and against torchdiffeq's
rk4 with a step much smaller than a window (to solver accuracy).

Gradients: **recomputation per checkpointed segment.** The sequence is cut into segments of ``chunk_size``
knot intervals; the forward pass keeps only the state at each segment's start (O(T / chunk_size · d²) per
sample) and the raw control inputs of the sequence (O(T · C)); the backward pass recomputes one segment at a
time: its projections and activations with autograd, its states from the segment's first state, then the
adjoint recurrence G_{t−1} = G_t A_tᵀ backwards through the segment (by hand for the affine rules, by
autograd for post-Delta), and autograd from the steps' inputs to the projections' weights and the control.
So no O(T · d²) (nor O(T · d_model)) tensor is kept for the backward pass. (Computing the projections once
for the whole sequence instead, outside the segments, was measured: it saves one of their four passes but
keeps O(T · d_model) activations alive, and the process peaked at 1.3 GB against the reference's 0.36 GB.)
The alternative, reconstructing states backwards through the inverse steps
(docs/equations.md#closed-forms-on-constant-inputs), is exact in exact arithmetic but unstable in floating point
for these rules: each inverse step expands the component along k (Delta) or v (Oja) by up to e^{c‖k‖²h}, so
rounding errors grow like e^{Σ c‖k‖²h} over thousands of windows. (torchdiffeq's continuous adjoint
reconstructs W(s) backwards in just this way, and its gradients come out NaN or wrong at 4,500 windows for Oja
and both Deltas: docs/performance.md.)

Which fields qualify: every field on a piecewise-constant control (log-signature windows, where x and x' are
both the window's rate), and x'-only CDE fields (``dx_only=True``) on piecewise-linear controls; the standard
CDE forms on a piecewise-linear control read X, which moves on every piece, and have no closed form
(docs/equations.md#closed-forms-on-constant-inputs). `piece_inputs` checks it; `exact_applies` asks the same
question without raising (the rule of `neuralde_seq.solvers.Auto`).

Deeper models (``num_layers > 1``) are not solvable this way: the input of layer 2 is layer 1's output,
which changes inside every window as W(s, 1) moves (paper Eq. 33-35), so its field is not constant on a
window and has no closed form. `solve_exact` refuses them with a ValueError.
"""

from __future__ import annotations

from typing import Any

import torch

from ..controls import Control
from ..fields import FastWeightField
from .affine_recurrence import affine_backward, affine_forward, batch_last, from_batch_last
from .chunked_delta import DEFAULT_BLOCK_SIZE, chunked_affine_steps
from .fixed_step import compile_unavailable
from .linear_scan import parallel_scan, parallel_segment_steps, uses_parallel_scan

__all__ = [
    "solve_exact",
    "solve_exact_reference",
    "exact_applies",
    "exact_refusal",
    "exact_field",
    "piece_inputs",
    "default_chunk_size",
    "default_chunked_segment",
]

# Size of a checkpointed segment when Exact.chunk_size is None, in fast weight entries per step times
# steps (B·S·H·d²): the backward pass of a segment holds its recomputed states (and, for the affine rules, the
# adjoint states too). At the EigenWorms-like shape (B 32, H 16, d 8) this gives 64 windows.
SEGMENT_ENTRIES = 2**21


def default_chunk_size(post: bool, batch: int, heads: int, head_dim: int) -> int:
    """Knot intervals per checkpointed segment used when ``Exact.chunk_size`` is None (the same for
    post-Delta, ``post=True``, and the affine rules: both hold one segment's states in the backward pass)."""
    return max(8, SEGMENT_ENTRIES // (batch * heads * head_dim * head_dim))


def default_chunked_segment(batch: int, heads: int, head_dim: int, block_size: int) -> int:
    """Knot intervals per checkpointed segment of the chunked recurrence (``Exact.recurrence="chunked"``) when
    ``Exact.chunk_size`` is None: a whole number of blocks (at least one) whose autograd graph, about
    C + 4·d numbers per step and head (the C × C block matrices and the step vectors), fits `SEGMENT_ENTRIES`."""
    per_step = batch * heads * (block_size + 4 * head_dim)
    return block_size * max(1, SEGMENT_ENTRIES // (per_step * block_size))


def _field_refusal(dynamics) -> str | None:
    """Why ``dynamics`` has no closed-form step (a sentence naming the fix), or None when it has one: a single
    `FastWeightField` (itself, or its ``exact_field`` attribute) whose inputs do not depend on s and whose rule
    has a closed-form step."""
    field = getattr(dynamics, "exact_field", dynamics)
    if field is None:
        return (
            "the Exact method solves one fast weight layer: the inputs of layers after the first are the previous "
            "layer's outputs, which change inside every window, so they have no closed-form step; use a "
            "stepping method (e.g. RK4()) for num_layers > 1"
        )
    if not isinstance(field, FastWeightField):
        return (
            f"the Exact method needs a FastWeightField (or dynamics with an exact_field), got {type(dynamics).__name__}"
        )
    if getattr(field, "needs_time", False):
        return (
            "the Exact method needs inputs constant on every window, but the field's slow net changes with s "
            "(basis-expanded weights): use a fixed-step method such as RK4()"
        )
    if not field.has_exact_step:
        return (
            f"the Exact method: rule {field.rule!r}"
            + (" with a forget gate" if field.forget_gate else "")
            + f" has no closed-form step ({field.rule.exact_step_refusal(field.forget_gate)}); use a fixed-step "
            "method such as RK4()"
        )
    return None


def _control_refusal(field: FastWeightField, coeffs: torch.Tensor, piecewise_constant: bool) -> str | None:
    """Why the field's inputs are not constant on the knot intervals of ``coeffs`` (B, N, 4, C), or None when
    they are: piecewise-constant controls always qualify; otherwise x must have no term of order >= 1 (if read)
    and x' no term of order >= 2 (if read)."""
    if piecewise_constant:
        return None
    if field.needs_value and bool((coeffs[:, :, 1:] != 0).any()):
        return (
            "the Exact method needs inputs constant on every knot interval, but the field reads the control's "
            f"value x (key from {field.key_source!r}, value from {field.value_source!r}) and the control is "
            "not piecewise constant: use a log-signature control, or a piecewise-linear control with a field "
            "reading x' only (form='cde', dx_only=True)"
        )
    if field.needs_derivative and bool((coeffs[:, :, 2:] != 0).any()):
        return (
            "the Exact method needs inputs constant on every knot interval, but the field reads x' of a control "
            "that is not piecewise linear: build it with interpolation='linear' or 'rectilinear' (or use a "
            "log-signature control)"
        )
    return None


def exact_applies(dynamics, control: Control) -> bool:
    """Whether `solve_exact` can solve ``dynamics`` along ``control``: the one rule by which
    `neuralde_seq.solvers.Auto` picks the closed form (`neuralde_seq.solvers.resolve_method`), and the
    same conditions `solve_exact` refuses without (`exact_field`, `piece_inputs`).

    True for one fast weight layer (a `FastWeightField` or dynamics whose ``exact_field`` is one) whose rule has a
    closed-form step and whose slow net does not depend on s, on a control whose read parts are constant on
    every knot interval: log-signature windows (any form), or a piecewise-linear control (linear, rectilinear)
    read through x' only (form="cde" with ``dx_only=True``). Decided from the control's coefficients (one pass
    over them), so a cubic control that happens to be linear on every piece of this batch qualifies too; the
    closed form and rk4 solve the same equation, so either answer is the model's.

    Arguments:
        dynamics: what `neuralde_seq.solvers.solve` integrates (any `neuralde_seq.solvers.Dynamics`).
        control: the control, batch size B.

    Returns:
        True when the closed form applies, else False (never raises for other dynamics).
    """
    return exact_refusal(dynamics, control) is None


def exact_refusal(dynamics, control: Control | None = None) -> str | None:
    """Why `solve_exact` cannot solve ``dynamics`` (along ``control``, if given), as a sentence naming the fix;
    None when it can (the conditions of `exact_applies`). `neuralde_seq.solvers.methods.Exact.refusal`.

    Arguments:
        dynamics: what `neuralde_seq.solvers.solve` integrates.
        control: the control, batch size B, or None to ask about the dynamics alone.
    """
    refusal = _field_refusal(dynamics)
    if refusal is not None or control is None:
        return refusal
    field = getattr(dynamics, "exact_field", dynamics)
    pieces = int(control.end_index.max())
    return _control_refusal(field, control.coeffs[:, :pieces], control.piecewise_constant)


def exact_field(dynamics) -> FastWeightField:
    """The single `FastWeightField` that ``dynamics`` integrates (its ``exact_field`` attribute, or the
    dynamics itself); ValueError if there is none or its rule has no closed-form step."""
    refusal = _field_refusal(dynamics)
    if refusal is not None:
        raise ValueError(refusal)
    return getattr(dynamics, "exact_field", dynamics)


def piece_inputs(field: FastWeightField, control: Control, pieces: int):
    """The field's inputs (x, x') on each of the first ``pieces`` knot intervals, (B, pieces, C) each (None
    when the field does not read it), checked to be constant on every interval.

    Piecewise-constant controls (log-signature windows) give the window's rate for both x and x', as
    `Control.evaluate_piece` and `Control.derivative_piece` do. A piecewise-polynomial control
    qualifies where its read parts are constant: x' of a piecewise-linear control (linear, rectilinear), or x
    of a piecewise-constant polynomial.
    """
    coeffs = control.coeffs[:, :pieces]  # (B, N, 4, C)
    refusal = _control_refusal(field, coeffs, control.piecewise_constant)
    if refusal is not None:
        raise ValueError(refusal)
    if control.piecewise_constant:
        rate = coeffs[:, :, 0]
        return (rate if field.needs_value else None), (rate if field.needs_derivative else None)
    return (coeffs[:, :, 0] if field.needs_value else None), (coeffs[:, :, 1] if field.needs_derivative else None)


def _projections(field: FastWeightField, x, dx):
    """The field's (k_raw, v_raw, beta) for every step from time-major inputs (T, B, C): (T, B, H, ·) each, in one
    batched pass (all steps and heads in one matmul)."""
    T, B = (x if x is not None else dx).shape[:2]
    flat = lambda t: None if t is None else t.reshape(T * B, t.shape[-1])
    # The projections are strided slices of one matmul's output; element-wise maps (tanh above all) run several
    # times faster on contiguous copies.
    return tuple(t.reshape(T, B, field.n_heads, -1).contiguous() for t in field.projections(flat(x), flat(dx)))


class _AffineSegments:
    """Hebb, Oja and pre-Delta: the steps and their adjoint by hand (`affine_forward`,
    `affine_backward`) on the steps' inputs (a, b, write[, decay]) of `RankOneUpdate`, each
    (T, B, H, ·)."""

    def __init__(self, field: FastWeightField, batch: int):
        self.field, self.batch, self.heads = field, batch, field.n_heads
        self.workspace: dict[str, Any] = {}  # `affine_backward`'s buffers

    def prepare(self, x, dx, h):
        """The steps' inputs (a, b, write[, decay][, scale]), (S, B, H, ·) each, from a segment's (S, B, C) control
        inputs and (S, B) lengths; with a forget gate the decay is the `RankOneUpdate`'s times its scale (the
        form `affine_forward` takes)."""
        k_raw, v_raw, beta, *forget = _projections(self.field, x, dx)
        update = self.field.rule.affine_step(k_raw, v_raw, beta, h.view(*h.shape, 1, 1), *forget)
        self.transposed = update.transposed
        self.has_scale = update.scale is not None
        self.has_decay = update.decay is not None
        self.decay_is_write = update.decay is None or (update.decay is update.write and not self.has_scale)
        decay = update.decay if not self.has_scale or update.decay is None else update.decay * update.scale
        return (
            (update.a, update.b, update.write)
            + ((decay,) if self.has_decay and not self.decay_is_write else ())
            + ((update.scale,) if self.has_scale else ())
        )

    def _unpack(self, segment):
        a, b, write = (batch_last(t) for t in segment[:3])
        decay = (write if self.decay_is_write else batch_last(segment[3])) if self.has_decay else None
        scale = batch_last(segment[-1]) if self.has_scale else None
        return a, b, decay, write, scale

    def _to_state(self, W):  # (B, [S,] H, d_v, d_k) -> (d_b, d_a, N) or (S, d_b, d_a, N)
        M = W.transpose(-1, -2) if self.transposed else W
        if M.dim() == 4:
            return M.permute(2, 3, 0, 1).reshape(M.shape[2], M.shape[3], -1).contiguous()
        return M.permute(1, 3, 4, 0, 2).reshape(M.shape[1], M.shape[3], M.shape[4], -1).contiguous()

    def _from_state(self, M):  # inverse of _to_state
        M = M.reshape(*M.shape[:-1], self.batch, self.heads)
        W = M.permute(2, 3, 0, 1) if M.dim() == 4 else M.permute(3, 0, 4, 1, 2)
        return W.transpose(-1, -2) if self.transposed else W

    def advance(self, W, segment, keep_states):
        a, b, decay, write, scale = self._unpack(segment)
        return self._from_state(affine_forward(self._to_state(W), a, b, decay, write, keep_states, scale))

    def backward(self, W, segment, grad_out, keep_states):
        a, b, decay, write, scale = self._unpack(segment)
        grad_M0, grad_a, grad_b, grad_decay, grad_write, *grad_scale = affine_backward(
            self._to_state(W), a, b, decay, write, self._to_state(grad_out), keep_states, self.workspace, scale
        )
        if self.has_decay and self.decay_is_write:
            grad_write = grad_write + grad_decay
        grads = (
            [grad_a, grad_b, grad_write]
            + ([grad_decay] if self.has_decay and not self.decay_is_write else [])
            + grad_scale
        )
        return self._from_state(grad_M0), [from_batch_last(g, self.heads) for g in grads]


# ------------------------------------------------------------------------------------- chunked (WY / UT)
class _ChunkedAffineSegments:
    """Hebb, Oja and pre-Delta in the chunked WY / UT form (`neuralde_seq.solvers.chunked_delta`): the steps of
    a segment in blocks of ``block_size``, the backward pass by autograd through the recomputed segment (its
    graph holds O(S·(C + d)) numbers per sample and d² per block, not the S·d² of every state).
    The prepared inputs are (a, b, write[, decay][, scale]) of `RankOneUpdate`, each (S, B, H, ·)."""

    def __init__(self, field: FastWeightField, batch: int, block_size: int, parallel: bool = False):
        """``parallel``: the block boundaries by a parallel prefix scan (`chunked_affine_steps`)."""
        self.field, self.batch, self.heads, self.block_size = field, batch, field.n_heads, block_size
        self.parallel = parallel

    def prepare(self, x, dx, h):
        """The steps' inputs from a segment's (S, B, C) control inputs and (S, B) lengths."""
        k_raw, v_raw, beta, *forget = _projections(self.field, x, dx)
        update = self.field.rule.affine_step(k_raw, v_raw, beta, h.view(*h.shape, 1, 1), *forget)
        self.transposed = update.transposed
        self.has_scale = update.scale is not None
        self.has_decay = update.decay is not None
        # Without a forget gate pre-Delta's decay is its write (one tensor, whose gradients autograd sums).
        self.decay_is_write = update.decay is update.write
        separate_decay = self.has_decay and not self.decay_is_write
        return (
            (update.a, update.b, update.write)
            + ((update.decay,) if separate_decay else ())
            + ((update.scale,) if self.has_scale else ())
        )

    def _rows(self, t):  # (S, B, H, e) -> (B·H, S, e)
        return t.permute(1, 2, 0, 3).reshape(self.batch * self.heads, t.shape[0], t.shape[3])

    def advance(self, W, segment, keep_states):
        a, b, write = (self._rows(t) for t in segment[:3])
        write = write.squeeze(-1)
        decay = None
        if self.has_decay:
            decay = write if self.decay_is_write else self._rows(segment[3]).squeeze(-1)
        scale = self._rows(segment[-1]).squeeze(-1) if self.has_scale else None
        M = W.transpose(-1, -2) if self.transposed else W
        M = chunked_affine_steps(
            M.reshape(self.batch * self.heads, *M.shape[2:]),
            a,
            b,
            decay,
            write,
            scale,
            block_size=self.block_size,
            keep_states=keep_states,
            parallel=self.parallel,
        )
        if keep_states:  # (B·H, S, d_b, d_a) -> (B, S, H, ·, ·)
            M = M.reshape(self.batch, self.heads, *M.shape[1:]).transpose(1, 2)
        else:
            M = M.reshape(self.batch, self.heads, *M.shape[1:])
        return M.transpose(-1, -2) if self.transposed else M

    def backward(self, W, segment, grad_out, keep_states):
        return _autograd_backward(self, W, segment, grad_out, keep_states)


class _ParallelAffineSegments(_ChunkedAffineSegments):
    """Hebb, Oja and pre-Delta step by step, the steps of a segment composed by a parallel prefix scan
    (``Exact(scan="parallel")`` with ``recurrence="sequential"``): the step M ↦ s (M − δ (M a) aᵀ) + w b aᵀ is,
    transposed, Mᵀ ↦ s (I − δ a aᵀ) Mᵀ + w a bᵀ, a diagonal-plus-rank-one map (diagonal for Hebb) of the state Mᵀ
    whose columns are the rows of M (`neuralde_seq.solvers.linear_scan.parallel_scan`, ``columns=True``). Backward pass
    by autograd through the recomputed segment (its graph about S·⌈log₂ S⌉·2d² numbers per matrix)."""

    def __init__(self, field: FastWeightField, batch: int):
        super().__init__(field, batch, block_size=1)

    def advance(self, W, segment, keep_states):
        steps, matrices = segment[0].shape[0], self.batch * self.heads
        flat = lambda t: t.reshape(steps, matrices, t.shape[-1])  # (S, B, H, e) -> (S, N, e), time-major
        a, b, write = (flat(t) for t in segment[:3])
        decay = None
        if self.has_decay:
            decay = write if self.decay_is_write else flat(segment[3])
        scale = flat(segment[-1]) if self.has_scale else None
        d_a = a.shape[-1]
        diagonal = (a.new_ones(()) if scale is None else scale).expand(steps, matrices, d_a)
        if decay is None:
            maps, structure = diagonal, "diagonal"
        else:
            toward = -(decay if scale is None else decay * scale) * a
            maps, structure = (diagonal, toward.unsqueeze(-1), a.unsqueeze(-1)), "dplr"
        M = W.transpose(-1, -2) if self.transposed else W  # (B, H, d_b, d_a)
        states = parallel_scan(
            maps,
            (write * a).unsqueeze(-1) * b.unsqueeze(-2),
            M.reshape(matrices, *M.shape[2:]).transpose(-1, -2),
            structure,
            columns=True,
        ).transpose(-1, -2)  # (S, N, d_b, d_a)
        if keep_states:  # -> (B, S, H, d_b, d_a)
            M = states.reshape(steps, self.batch, self.heads, *states.shape[2:]).transpose(0, 1)
        else:
            M = states[-1].reshape(self.batch, self.heads, *states.shape[2:])
        return M.transpose(-1, -2) if self.transposed else M


def _autograd_backward(solver, W, segment, grad_out, keep_states):
    """Gradients on W and on the prepared inputs of one segment by autograd through ``solver.advance``."""
    with torch.enable_grad():
        W = W.detach().requires_grad_()
        segment = [t.detach().requires_grad_() for t in segment]
        out = solver.advance(W, segment, keep_states)
    grad_W, *grads = torch.autograd.grad(out, [W, *segment], grad_out, allow_unused=True)
    return (torch.zeros_like(W) if grad_W is None else grad_W), grads


# ------------------------------------------------------------------------------------- nonlinear steps (post-Delta)
class _StepwiseSegments:
    """A rule with a nonlinear exact step (capability "stepwise_step": post-Delta): the step, one after the other
    over the inputs of ``rule.exact_step_inputs`` (each (T, B, H, ·)); the backward pass by autograd through one
    recomputed segment."""

    def __init__(self, field: FastWeightField, step_fn):
        self.field, self.step_fn = field, step_fn

    def prepare(self, x, dx, h):
        """The step inputs (post-Delta: k, v_raw, log_decay, inv_norm_sq), (S, B, H, ·) each, from a segment's
        (S, B, C) control inputs and (S, B) lengths."""
        return tuple(self.field.rule.exact_step_inputs(*_projections(self.field, x, dx), h.view(*h.shape, 1, 1)))

    def advance(self, W, segment, keep_states):
        states = []
        for inputs in zip(*segment):
            W = self.step_fn(W, *inputs)
            if keep_states:
                states.append(W)
        return torch.stack(states, dim=1) if keep_states else W

    def backward(self, W, segment, grad_out, keep_states):
        return _autograd_backward(self, W, segment, grad_out, keep_states)


# ------------------------------------------------------------------------------------- segments
class _CheckpointedSegments(torch.autograd.Function):
    """Advance W0 through the segments ``bounds`` of the steps, keeping only each segment's first state for the
    backward pass, which recomputes one segment at a time.

    ``solver`` (`_AffineSegments` or `_StepwiseSegments`) has ``prepare(x, dx, h)``, a segment's
    step inputs from its control inputs and lengths (the projections and activations, differentiable);
    ``advance(W, prepared, keep_states)``, the final state or the states after every step (time at dim 1); and
    ``backward(W, prepared, grad_out, keep_states)``, the gradients on W and on the prepared step inputs.
    ``tensors`` are the control inputs present (x and/or dx as ``has`` says), then the lengths, all time-major
    ((N, B, ·)), then the tensors ``prepare`` reads besides its arguments (the field's weights), listed so that
    they receive gradients.
    """

    @staticmethod
    def forward(ctx, solver, bounds, keep_states, has, W0, *tensors):
        n_inputs = sum(has) + 1
        inputs = tensors[:n_inputs]
        starts, states = [], [W0.unsqueeze(1)]
        W = W0
        for start, stop in bounds:
            starts.append(W)
            out = solver.advance(W, solver.prepare(*_segment(inputs, has, start, stop)), keep_states)
            if keep_states:
                states.append(out)
                W = out[:, -1]
            else:
                W = out
        ctx.solver, ctx.bounds, ctx.keep_states, ctx.has = solver, bounds, keep_states, has
        ctx.save_for_backward(torch.stack(starts, dim=1), *tensors)
        return torch.cat(states, dim=1) if keep_states else W

    @staticmethod
    def backward(ctx, grad):
        starts, *tensors = ctx.saved_tensors
        n_inputs = sum(ctx.has) + 1
        inputs, parameters = tensors[:n_inputs], tensors[n_inputs:]
        needs = ctx.needs_input_grad[5:]
        grad_inputs = [torch.zeros_like(t) if need else None for t, need in zip(inputs, needs)]
        grad_parameters = [torch.zeros_like(p) if need else None for p, need in zip(parameters, needs[n_inputs:])]
        # With keep_states the last state's gradient is in grad[:, -1], which the last segment's grad_out holds.
        grad_W = torch.zeros_like(grad[:, -1]) if ctx.keep_states else grad
        for i in reversed(range(len(ctx.bounds))):
            start, stop = ctx.bounds[i]
            if ctx.keep_states:
                grad_out = grad[:, start + 1 : stop + 1].clone()
                grad_out[:, -1] += grad_W
            else:
                grad_out = grad_W
            with torch.enable_grad():
                pieces = [t[start:stop].detach().requires_grad_(need) for t, need in zip(inputs, needs)]
                prepared = ctx.solver.prepare(*_segment(pieces, ctx.has, 0, stop - start))
            grad_W, grad_prepared = ctx.solver.backward(
                starts[:, i], [t.detach() for t in prepared], grad_out, ctx.keep_states
            )
            wrt = [p for p, need in zip(pieces, needs) if need] + [
                p for p, need in zip(parameters, needs[n_inputs:]) if need
            ]
            used = [(t, g) for t, g in zip(prepared, grad_prepared) if g is not None and t.requires_grad]
            if not wrt or not used:
                continue
            grads = iter(torch.autograd.grad([t for t, _ in used], wrt, [g for _, g in used], allow_unused=True))
            for j, need in enumerate(needs[:n_inputs]):
                if need:
                    g = next(grads)
                    if g is not None:
                        grad_inputs[j][start:stop] += g
            for j, need in enumerate(needs[n_inputs:]):
                if need:
                    g = next(grads)
                    if g is not None:
                        grad_parameters[j] += g
        if ctx.keep_states:
            grad_W = grad_W + grad[:, 0]
        return (None, None, None, None, grad_W, *grad_inputs, *grad_parameters)


def _segment(inputs, has, start, stop):
    """(x, dx, h) of the steps start:stop from the time-major sequence inputs [x][, dx], h (None where absent)."""
    parts = iter(t[start:stop] for t in inputs)
    x = next(parts) if has[0] else None
    dx = next(parts) if has[1] else None
    return x, dx, next(parts)


_COMPILED: dict = {}


def _maybe_compiled(function, compile: bool):
    if not compile:
        return function
    if function not in _COMPILED:
        reason = compile_unavailable()
        if reason is not None:
            raise RuntimeError(
                f"Exact(compile=True) needs torch.compile, which cannot run here: {reason}; leave compile=False"
            )
        _COMPILED[function] = torch.compile(function, dynamic=False)
    return _COMPILED[function]


def _sequence(field: FastWeightField, control: Control, initial: torch.Tensor):
    """What both solvers step through: W0 (B, H, d, d) from ``initial``; the field's inputs x, dx (B, N, C) or
    None (`piece_inputs`) on the N = max(end_index) knot intervals; and the step lengths (B, N) in
    ``initial``'s dtype, 0 after each sample's final knot."""
    batch, H, d = control.batch_size, field.n_heads, field.head_dim
    if initial.shape[0] != batch or initial[0].numel() != H * d * d:
        raise ValueError(
            f"initial must have shape (B={batch}, ...) with {H}·{d}² fast weight entries per sample, got "
            f"{tuple(initial.shape)}"
        )
    pieces = int(control.end_index.max())
    x, dx = piece_inputs(field, control, pieces)
    knots = control.knots[: pieces + 1].to(initial.dtype)
    active = torch.arange(pieces, device=knots.device).unsqueeze(0) < control.end_index.unsqueeze(1)
    lengths = (knots[1:] - knots[:-1]).unsqueeze(0) * active.to(knots.dtype)
    return initial.reshape(batch, H, d, d), x, dx, lengths


def solve_exact_reference(dynamics, control: Control, initial: torch.Tensor, *, at_knots: bool = False) -> torch.Tensor:
    """The definition `solve_exact` computes faster: ``W ← rule.exact_step(W, *field.projections(x_j,
    dx_j), h_j)`` for every knot interval j in a Python loop, differentiated by autograd (it keeps every state).

    Arguments:
        dynamics: a `FastWeightField`, or a module whose ``exact_field`` attribute is one (as `solve_exact`).
        control: the control, batch size B (as `solve_exact`).
        initial: (B, H, d_head, d_head) fast weights at the first knot, or any shape with B leading and
            H·d_head² entries per sample.
        at_knots: False (default): each sample's final state; True: the states at every knot.

    Returns:
        As `solve_exact`: (B, ...) each sample's state at its own final knot, or (B, K, ...) the states at
            the knots, "..." the shape of ``initial[0]``.
    """
    field = exact_field(dynamics)
    W, x, dx, lengths = _sequence(field, control, initial)
    states = [W]
    for j in range(lengths.shape[1]):
        inputs = (None if x is None else x[:, j], None if dx is None else dx[:, j])
        k_raw, v_raw, beta, *forget = field.projections(*inputs)
        W = field.rule.exact_step(W, k_raw, v_raw, beta, lengths[:, j].view(-1, 1, 1), *forget)
        states.append(W)
    if at_knots:
        return torch.stack(states, dim=1).reshape(control.batch_size, len(states), *initial.shape[1:])
    return W.reshape(initial.shape)


def solve_exact(dynamics, control: Control, initial: torch.Tensor, method, *, at_knots: bool = False) -> torch.Tensor:
    """Solve a fast weight field exactly on a control whose field inputs are constant on each knot interval.

    Arguments:
        dynamics: a `FastWeightField`, or a module whose ``exact_field`` attribute is one (a one-layer
            `FastWeightNetwork`'s dynamics; None for deeper models, refused).
        control: the control, batch size B; see `piece_inputs` for which controls qualify.
        initial: (B, H, d_head, d_head) fast weights at the first knot, or any shape with B leading and
            H·d_head² entries per sample (e.g. (B, 1, H, d, d)).
        method: the `neuralde_seq.solvers.Exact` method (``chunk_size``, ``compile``, ``recurrence``,
            ``block_size`` and ``scan`` are read). ``recurrence="chunked"`` (Hebb, Oja, pre-Delta; refused for
            post-Delta) computes the same states by the WY / UT form of `neuralde_seq.solvers.chunked_delta`,
            blocks of ``block_size`` steps, gradients by autograd through each recomputed segment.
            ``scan`` ("auto": "parallel" off the CPU) "parallel" composes the affine rules' steps of a segment
            (with "chunked": its blocks) by a parallel prefix scan (`_ParallelAffineSegments`,
            `chunked_affine_steps`), in longer default segments; refused for post-Delta.
        at_knots: False (default): each sample's final state; True: the states at every knot (as in
            `solve`).

    Returns:
        (B, ...) each sample's state at its own final knot, or (B, K, ...) the states at the knots
            0..max(end_index) (constant after a sample's end), "..." the shape of ``initial[0]``.
    """
    field = exact_field(dynamics)
    batch, H, d = control.batch_size, field.n_heads, field.head_dim
    W0, x, dx, lengths = _sequence(field, control, initial)
    pieces = lengths.shape[1]
    rule = field.rule
    # The rule's capability, not its name: affine steps (Hebb, Oja, pre-Delta) compose; a nonlinear one (post-Delta)
    # is taken step by step.
    stepwise = rule.exact_step_kind(field.forget_gate) == "stepwise"
    title = rule.title or repr(rule)
    recurrence = method.recurrence  # one of EXACT_RECURRENCES (checked by Exact)
    if recurrence == "auto":  # measured on an H200 (docs/performance.md): the chunked form wins there, not on a CPU
        recurrence = "chunked" if W0.device.type != "cpu" and not stepwise else "sequential"
    if recurrence == "chunked" and stepwise:
        raise ValueError(
            "Exact(recurrence='chunked') applies to the affine rules (Hebb, Oja, pre-Delta): "
            f"{title}'s exact step is not affine in W and has no chunked form; use "
            "recurrence='sequential'"
        )
    if method.compile and not stepwise:
        raise ValueError(
            "Exact(compile=True) compiles a nonlinear exact step (post-Delta's) only; "
            f"{rule!r} is solved by affine steps (hand-written adjoint, or the chunked form), which are "
            "not compiled: leave compile=False"
        )
    composition = method.scan
    if composition == "parallel" and stepwise:
        raise ValueError(
            "Exact(scan='parallel') composes the affine rules' exact steps (Hebb, Oja, "
            f"pre-Delta): {title}'s exact step is not affine in W; use scan='auto' or 'sequential'"
        )
    parallel = not stepwise and uses_parallel_scan(composition, W0.device)
    solver: _ChunkedAffineSegments | _ParallelAffineSegments | _StepwiseSegments | _AffineSegments
    if recurrence == "chunked":
        block = method.block_size or DEFAULT_BLOCK_SIZE
        if parallel:  # whole blocks, as many as the scan's graph allows (the blocks' inner graphs counted in)
            per_block = batch * H * (block * (block + 4 * d) + 2 * d * d)
            chunk = method.chunk_size or block * parallel_segment_steps(-(-pieces // block), per_block)
        else:
            chunk = method.chunk_size or default_chunked_segment(batch, H, d, block)
        solver = _ChunkedAffineSegments(field, batch, block, parallel)
    elif parallel:
        chunk = method.chunk_size or parallel_segment_steps(pieces, batch * H * 2 * d * d)
        solver = _ParallelAffineSegments(field, batch)
    else:
        chunk = method.chunk_size or default_chunk_size(stepwise, batch, H, d)
        solver = (
            _StepwiseSegments(field, _maybe_compiled(rule.exact_step_from_inputs, method.compile))
            if stepwise
            else _AffineSegments(field, batch)
        )
    # Time-major inputs, so that a segment of the steps is a contiguous slice.
    sources = [t.transpose(0, 1).contiguous() for t in (x, dx) if t is not None]
    has = (x is not None, dx is not None)
    bounds = tuple((start, min(start + chunk, pieces)) for start in range(0, pieces, chunk))
    parameters = [p for p in field.parameters()]
    out = _CheckpointedSegments.apply(solver, bounds, at_knots, has, W0, *sources, lengths.t(), *parameters)
    if at_knots:
        return out.reshape(batch, pieces + 1, *initial.shape[1:])
    return out.reshape(initial.shape)
