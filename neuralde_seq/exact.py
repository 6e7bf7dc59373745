"""Exact solutions of fast weight fields whose inputs are constant on every knot interval.

On a log-signature window (or on a piece of a piecewise-linear control read only through its derivative,
e.g. a rectilinear control with ``dx_only=True``) the key, value and learning rate of a
:class:`~neuralde_seq.fields.FastWeightField` are constant, and each learning rule has a closed-form step
(shared/DESIGN.md §5, :meth:`~neuralde_seq.rules.LearningRule.exact_step`). :func:`solve_exact` (selected by
``SolverOptions(method="exact")`` in :func:`~neuralde_seq.solvers.solve`) uses them:

1. every input-dependent quantity (keys, values, learning rates) of a segment of the sequence is computed in
   one batched pass of the field's projections (all heads in one matmul, :meth:`FastWeightField.projections`);
2. Hebb: cumulative sums of c·h·v kᵀ;
   Oja and pre-Delta: the affine step maps W ↦ W − λ (W a) aᵀ + μ b aᵀ
   (:class:`~neuralde_seq.rules.RankOneUpdate`) are composed in blocks of ``WY_BLOCK`` steps with the
   WY/UT representation (one triangular solve per block gives the block's map W ↦ W A + B; all blocks in
   parallel), and the block maps by a parallel prefix scan (Hillis-Steele, log-depth). Intermediate states
   (``at_knots``) come from the prefix and a cumulative sum inside each block;
   post-Delta: its nonlinear exact step, step by step, over the precomputed inputs (only u = W k is
   sequential);
3. variable lengths: a step after a sample's final knot has length 0, which every closed form maps to the
   identity, so each sample stops at its own end.

The reference (torchdiffeq rk4 with a step much smaller than a window) agrees to solver accuracy
(tests/test_exact.py).

Gradients: **recomputation per checkpointed segment.** The sequence is cut into segments of ``chunk_size``
knot intervals; the forward pass keeps only the state at each segment's start (O(T / chunk_size · d²) per
sample) and the raw control inputs of the sequence (O(T · C)); the backward pass recomputes one segment at a
time, projections included, and backpropagates through it. So no O(T · d²) (nor O(T · d_model)) tensor is
kept for the backward pass. The alternative DESIGN §5 mentions, reconstructing states backwards through the
inverse steps, is exact in exact arithmetic but unstable in floating point for these rules: each inverse
step expands the component along k (Delta) or v (Oja) by up to e^{c‖k‖²h}, so rounding errors grow like
e^{Σ c‖k‖²h} over thousands of windows. (torchdiffeq's continuous adjoint reconstructs W(s) backwards in just this way, and its
gradients come out NaN or wrong at 4,500 windows for Oja and both Deltas: docs/performance.md.)

Deeper models (``num_layers > 1``) are not solvable this way: the input of layer 2 is layer 1's output,
which changes inside every window as W(s, 1) moves (paper Eq. 33-35), so its field is not constant on a
window and has no closed form. :func:`solve_exact` refuses them with a ValueError.
"""
from __future__ import annotations

import shutil

import torch

from .controls import Control
from .fields import FastWeightField
from .rules import Delta, RankOneUpdate

__all__ = ["solve_exact", "exact_field", "piece_inputs", "default_chunk_size", "WY_BLOCK"]

# Steps per WY block of the affine rules: one (WY_BLOCK × WY_BLOCK) triangular solve per block.
WY_BLOCK = 32
# Size of a checkpointed segment when SolverOptions.chunk_size is None, in tensor entries: the backward pass
# holds one segment's intermediate tensors at a time. The affine rules' tensors scale with the keys of the
# segment (B·S·H·d, with block maps of d² per WY block); post-Delta keeps the fast weights of every step of
# the segment (B·S·H·d²). At the EigenWorms-like shape (B 32, H 16, d 8) these give 128 and 64 windows.
SEGMENT_ENTRIES = {"affine": 2 ** 19, "post": 2 ** 21}


def default_chunk_size(post: bool, batch: int, heads: int, head_dim: int) -> int:
    """Knot intervals per checkpointed segment used when ``SolverOptions.chunk_size`` is None."""
    if post:
        return max(8, SEGMENT_ENTRIES["post"] // (batch * heads * head_dim * head_dim))
    blocks = round(SEGMENT_ENTRIES["affine"] / (batch * heads * head_dim * WY_BLOCK))
    return WY_BLOCK * max(1, blocks)


def exact_field(dynamics) -> FastWeightField:
    """The single :class:`FastWeightField` that ``dynamics`` integrates (its ``exact_field`` attribute, or the
    dynamics itself); ValueError if there is none or its rule has no closed-form step."""
    field = getattr(dynamics, "exact_field", dynamics)
    if field is None:
        raise ValueError("method='exact' solves one fast weight layer: the inputs of layers after the first are the "
                         "previous layer's outputs, which change inside every window, so they have no closed-form "
                         "step; use a torchdiffeq method (e.g. 'rk4') for num_layers > 1")
    if not isinstance(field, FastWeightField):
        raise ValueError(f"method='exact' needs a FastWeightField (or dynamics with an exact_field), got "
                         f"{type(dynamics).__name__}")
    if not field.rule.has_exact_step:
        raise ValueError(f"method='exact': rule {field.rule!r} has no closed-form step")
    return field


def piece_inputs(field: FastWeightField, control: Control, pieces: int):
    """The field's inputs (x, x') on each of the first ``pieces`` knot intervals, (B, pieces, C) each (None
    when the field does not read it), checked to be constant on every interval.

    Piecewise-constant controls (log-signature windows) give the window's rate for both x and x', as
    :meth:`Control.evaluate_piece` and :meth:`Control.derivative_piece` do. A piecewise-polynomial control
    qualifies where its read parts are constant: x' of a piecewise-linear control (linear, rectilinear), or x
    of a piecewise-constant polynomial.
    """
    coeffs = control.coeffs[:, :pieces]  # (B, N, 4, C)
    if control.piecewise_constant:
        rate = coeffs[:, :, 0]
        return (rate if field.needs_value else None), (rate if field.needs_derivative else None)
    x = dx = None
    if field.needs_value:
        if (coeffs[:, :, 1:] != 0).any():
            raise ValueError("method='exact' needs inputs constant on every knot interval, but the field reads the "
                             f"control's value x (key from {field.key_source!r}, value from {field.value_source!r}) "
                             "and the control is not piecewise constant: use a log-signature control, or a "
                             "piecewise-linear control with a field reading x' only (form='cde', dx_only=True)")
        x = coeffs[:, :, 0]
    if field.needs_derivative:
        if (coeffs[:, :, 2:] != 0).any():
            raise ValueError("method='exact' needs inputs constant on every knot interval, but the field reads x' "
                             "of a control that is not piecewise linear: build it with method='linear' or "
                             "'rectilinear' (or use a log-signature control)")
        dx = coeffs[:, :, 1]
    return x, dx


# ------------------------------------------------------------------------------------- affine rules
def _compose(first, then):
    """The map 'first, then then' of maps W ↦ W A + B given as (A, B)."""
    A1, B1 = first
    A2, B2 = then
    return A1 @ A2, B1 @ A2 + B2


def _prefix_scan(A: torch.Tensor, B: torch.Tensor, dim: int):
    """Inclusive prefix compositions of the maps (A_i, B_i) along ``dim`` (Hillis-Steele: log2(n) levels)."""
    n = A.shape[dim]
    offset = 1
    while offset < n:
        earlier = (A.narrow(dim, 0, n - offset), B.narrow(dim, 0, n - offset))
        later = (A.narrow(dim, offset, n - offset), B.narrow(dim, offset, n - offset))
        A_new, B_new = _compose(earlier, later)
        A = torch.cat([A.narrow(dim, 0, offset), A_new], dim)
        B = torch.cat([B.narrow(dim, 0, offset), B_new], dim)
        offset *= 2
    return A, B


def _wy_blocks(a, b, decay, write):
    """Per block of steps, the composed map and what the states inside it need.

    Arguments (blocks already cut): a (..., n, C, d_a), b (..., n, C, d_b), decay and write (..., n, C, 1).
    With u_i = write_i b_i − decay_i W_{i−1} a_i the step is W_i = W_{i−1} + u_i a_iᵀ, and
    W_{i−1} a_i = W_0 a_i + Σ_{j<i} (a_j·a_i) u_j, so (I + L) U = write·b − decay·a W_0ᵀ with
    L_ij = decay_i (a_i·a_j) (j < i): U = U_b − U_a W_0ᵀ.

    Returns:
        (A, B, U_a, U_b): the block maps W ↦ W A + B, A = I − U_aᵀ a, B = U_bᵀ a, of shapes (..., n, d_a, d_a)
        and (..., n, d_b, d_a); U_a (..., n, C, d_a), U_b (..., n, C, d_b).
    """
    d_a = a.shape[-1]
    decayed = decay * a
    # Only the strictly lower triangle of (decay·a) aᵀ is read: the solve is told the matrix is unit lower
    # triangular, so neither a mask nor the identity has to be written (its gradient is lower-triangular too).
    U = torch.linalg.solve_triangular(decayed @ a.transpose(-1, -2), torch.cat([decayed, write * b], dim=-1),
                                      upper=False, unitriangular=True)  # one solve for both right-hand sides
    U_a, U_b = U.split((d_a, b.shape[-1]), dim=-1)
    maps = U.transpose(-1, -2) @ a  # [U_aᵀ a; U_bᵀ a] in one product
    A = torch.eye(d_a, dtype=a.dtype, device=a.device) - maps[..., :d_a, :]
    return A, maps[..., d_a:, :], U_a, U_b


def _affine_advance(W0, update: RankOneUpdate, keep_states: bool, blocks_fn):
    """Apply the steps ``update`` (tensors (B, S, H, ·)) to W0 (B, H, d_v, d_k).

    Returns the final state (B, H, d_v, d_k), or the states after every step (B, S, H, d_v, d_k).
    """
    M0 = W0.transpose(-1, -2) if update.transposed else W0  # the map acts on M: M ↦ M − λ (M a) aᵀ + μ b aᵀ
    a, b, write = update.a, update.b, update.write
    steps = a.shape[1]
    if update.decay is None:  # Hebb: a cumulative sum
        if keep_states:
            M = M0.unsqueeze(1) + torch.cumsum((write * b).unsqueeze(-1) * a.unsqueeze(-2), dim=1)
        else:
            M = M0 + torch.einsum("bshi,bshj->bhij", write * b, a)
    else:
        decay = update.decay
        pad = -steps % WY_BLOCK  # zero steps are identities
        def blocks(t):  # (B, S, H, e) -> (B, H, n, WY_BLOCK, e)
            t = torch.nn.functional.pad(t, (0, 0, 0, 0, 0, pad))
            # One copy into head-major blocks, instead of one per product that reads a strided view.
            return t.view(t.shape[0], -1, WY_BLOCK, *t.shape[2:]).permute(0, 3, 1, 2, 4).contiguous()
        a_, b_, decay_, write_ = blocks(a), blocks(b), blocks(decay), blocks(write)
        A, B, U_a, U_b = blocks_fn(a_, b_, decay_, write_)
        A, B = _prefix_scan(A, B, dim=2)  # (B, H, n, ·, ·): the maps from the segment's start to each block's end
        if not keep_states:
            M = M0 @ A[:, :, -1] + B[:, :, -1]
        else:
            ends = M0.unsqueeze(2) @ A + B  # state after each block
            starts = torch.cat([M0.unsqueeze(2), ends[:, :, :-1]], dim=2)  # (B, H, n, d_b, d_a)
            U = U_b - U_a @ starts.transpose(-1, -2)  # (B, H, n, C, d_b)
            inside = starts.unsqueeze(3) + torch.cumsum(U.unsqueeze(-1) * a_.unsqueeze(-2), dim=3)
            M = inside.flatten(2, 3)[:, :, :steps].transpose(1, 2)  # (B, S, H, d_b, d_a)
    return M.transpose(-1, -2) if update.transposed else M


# ------------------------------------------------------------------------------------- post-Delta
def _post_advance(W, inputs, keep_states: bool, step_fn):
    k, v_raw, log_decay, inv_norm_sq = inputs
    states = []
    for i in range(k.shape[1]):
        W = step_fn(W, k[:, i], v_raw[:, i], log_decay[:, i], inv_norm_sq[:, i])
        if keep_states:
            states.append(W)
    return torch.stack(states, dim=1) if keep_states else W


# ------------------------------------------------------------------------------------- segments
class _CheckpointedSegments(torch.autograd.Function):
    """Advance W0 through the segments ``bounds`` of the sequence inputs, keeping only each segment's first
    state for the backward pass, which recomputes one segment at a time.

    ``advance(W, segment_inputs, keep_states)`` maps the state at a segment's start and the inputs of its steps
    (time at dim 1) to its final state, or to its states after every step. ``parameters`` are the tensors
    ``advance`` reads besides its arguments (the field's weights), listed so that they receive gradients.
    """

    @staticmethod
    def forward(ctx, advance, bounds, keep_states, n_inputs, W0, *tensors):
        inputs = tensors[:n_inputs]
        starts, states = [], [W0.unsqueeze(1)]
        W = W0
        for start, stop in bounds:
            starts.append(W)
            out = advance(W, [t[:, start:stop] for t in inputs], keep_states)
            if keep_states:
                states.append(out)
                W = out[:, -1]
            else:
                W = out
        ctx.advance, ctx.bounds, ctx.keep_states, ctx.n_inputs = advance, bounds, keep_states, n_inputs
        ctx.save_for_backward(torch.stack(starts, dim=1), *tensors)
        return torch.cat(states, dim=1) if keep_states else W

    @staticmethod
    def backward(ctx, grad):
        starts, *tensors = ctx.saved_tensors
        inputs, parameters = tensors[: ctx.n_inputs], tensors[ctx.n_inputs:]
        needs = ctx.needs_input_grad[5:]
        grad_inputs = [torch.zeros_like(t) if need else None for t, need in zip(inputs, needs)]
        grad_parameters = [torch.zeros_like(p) if need else None for p, need in zip(parameters, needs[ctx.n_inputs:])]
        grad_W = grad[:, -1] if ctx.keep_states else grad
        for i in reversed(range(len(ctx.bounds))):
            start, stop = ctx.bounds[i]
            with torch.enable_grad():
                W = starts[:, i].detach().requires_grad_()
                pieces = [t[:, start:stop].detach().requires_grad_(need) for t, need in zip(inputs, needs)]
                out = ctx.advance(W, pieces, ctx.keep_states)
            if ctx.keep_states:
                grad_out = grad[:, start + 1: stop + 1].clone()
                grad_out[:, -1] += grad_W
            else:
                grad_out = grad_W
            wrt = [W] + [p for p, need in zip(pieces, needs) if need] + [
                p for p, need in zip(parameters, needs[ctx.n_inputs:]) if need]
            grads = iter(torch.autograd.grad(out, wrt, grad_out, allow_unused=True))
            grad_W = next(grads)
            grad_W = torch.zeros_like(W) if grad_W is None else grad_W
            for j, need in enumerate(needs[: ctx.n_inputs]):
                if need:
                    g = next(grads)
                    if g is not None:
                        grad_inputs[j][:, start:stop] += g
            for j, need in enumerate(needs[ctx.n_inputs:]):
                if need:
                    g = next(grads)
                    if g is not None:
                        grad_parameters[j] += g
        if ctx.keep_states:
            grad_W = grad_W + grad[:, 0]
        return (None, None, None, None, grad_W, *grad_inputs, *grad_parameters)


_COMPILED: dict = {}


def _maybe_compiled(function, compile: bool):
    if not compile:
        return function
    if function not in _COMPILED:
        if shutil.which("cc") is None and shutil.which("gcc") is None:
            raise RuntimeError("SolverOptions(compile=True) needs a C compiler (cc or gcc) for torch.compile on CPU, "
                               "and none is on PATH: install one or leave compile=False")
        _COMPILED[function] = torch.compile(function, dynamic=False)
    return _COMPILED[function]


def solve_exact(dynamics, control: Control, initial: torch.Tensor, options, *, at_knots: bool = False) -> torch.Tensor:
    """Solve a fast weight field exactly on a control whose field inputs are constant on each knot interval.

    Arguments:
        dynamics: a :class:`FastWeightField`, or a module whose ``exact_field`` attribute is one (a one-layer
            :class:`~neuralde_seq.models.FastWeightNetwork`'s dynamics; None for deeper models, refused).
        control: the control, batch size B; see :func:`piece_inputs` for which controls qualify.
        initial: (B, H, d_head, d_head) fast weights at the first knot, or any shape with B leading and
            H·d_head² entries per sample (e.g. (B, 1, H, d, d)).
        options: :class:`~neuralde_seq.solvers.SolverOptions` with method "exact" (``chunk_size`` and
            ``compile`` are read).
        at_knots: as in :func:`~neuralde_seq.solvers.solve`.

    Returns:
        (B, ...) each sample's state at its own final knot, or (B, K, ...) the states at the knots
        0..max(end_index) (constant after a sample's end), "..." the shape of ``initial[0]``.
    """
    field = exact_field(dynamics)
    batch = control.batch_size
    H, d = field.n_heads, field.head_dim
    if initial.shape[0] != batch or initial[0].numel() != H * d * d:
        raise ValueError(f"initial must have shape (B={batch}, ...) with {H}·{d}² fast weight entries per sample, got "
                         f"{tuple(initial.shape)}")
    pieces = int(control.end_index.max())
    x, dx = piece_inputs(field, control, pieces)
    knots = control.knots[: pieces + 1].to(initial.dtype)
    active = torch.arange(pieces, device=knots.device).unsqueeze(0) < control.end_index.unsqueeze(1)
    lengths = (knots[1:] - knots[:-1]).unsqueeze(0) * active.to(knots.dtype)  # (B, N): 0 after a sample's end
    W0 = initial.reshape(batch, H, d, d)
    rule = field.rule
    post = isinstance(rule, Delta) and rule.post
    chunk = options.chunk_size or default_chunk_size(post, batch, H, d)
    step_fn = _maybe_compiled(Delta.post_step, options.compile) if post else None
    blocks_fn = _maybe_compiled(_wy_blocks, options.compile) if not post else None
    sources = [t for t in (x, dx) if t is not None]
    has = (x is not None, dx is not None)

    def advance(W, segment, keep_states):
        # One batched pass of the projections over the segment's steps, then the rule's exact steps.
        parts = iter(segment[:-1])
        seg_x = next(parts) if has[0] else None
        seg_dx = next(parts) if has[1] else None
        h = segment[-1]
        steps = h.shape[1]
        flat = lambda t: None if t is None else t.reshape(batch * steps, t.shape[-1])
        # The projections are strided slices of one matmul's output; element-wise maps (tanh above all) run several
        # times faster on contiguous copies.
        k_raw, v_raw, beta = (t.reshape(batch, steps, H, -1).contiguous()
                              for t in field.projections(flat(seg_x), flat(seg_dx)))
        h = h.view(batch, steps, 1, 1)
        if post:
            return _post_advance(W, rule.post_step_inputs(k_raw, v_raw, beta, h), keep_states, step_fn)
        return _affine_advance(W, rule.affine_step(k_raw, v_raw, beta, h), keep_states, blocks_fn)

    bounds = tuple((start, min(start + chunk, pieces)) for start in range(0, pieces, chunk))
    parameters = [p for p in field.parameters()]
    out = _CheckpointedSegments.apply(advance, bounds, at_knots, len(sources) + 1, W0, *sources,
                                      lengths.to(initial.dtype), *parameters)
    if at_knots:
        return out.reshape(batch, pieces + 1, *initial.shape[1:])
    return out.reshape(initial.shape)
