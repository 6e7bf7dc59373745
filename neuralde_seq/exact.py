"""Exact solutions of fast weight fields whose inputs are constant on every knot interval.

On a log-signature window (or on a piece of a piecewise-linear control read only through its derivative,
e.g. a rectilinear control with ``dx_only=True``) the key, value and learning rate of a
:class:`~neuralde_seq.fields.FastWeightField` are constant, and each learning rule has a closed-form step
(shared/DESIGN.md §5, :meth:`~neuralde_seq.rules.LearningRule.exact_step`). :func:`solve_exact` (selected by
``SolverOptions(method="exact")`` in :func:`~neuralde_seq.solvers.solve`) uses them:

1. every input-dependent quantity (keys, values, learning rates) of a segment of the sequence is computed in
   one batched pass of the field's projections (all heads in one matmul, :meth:`FastWeightField.projections`);
2. Hebb: sums of outer products c·h·v kᵀ;
   Oja and pre-Delta: the affine steps M ↦ M − λ (M a) aᵀ + μ b aᵀ (:class:`~neuralde_seq.rules.RankOneUpdate`;
   M = W or Wᵀ) one after the other, every step one element-wise pass over all samples and heads at once,
   and their adjoint written by hand (:func:`_affine_backward`);
   post-Delta: its nonlinear exact step, step by step, over the precomputed inputs;
3. variable lengths: a step after a sample's final knot has length 0, which every closed form maps to the
   identity, so each sample stops at its own end.

The reference (torchdiffeq rk4 with a step much smaller than a window) agrees to solver accuracy
(tests/test_exact.py).

Why the affine steps run one after the other, although they compose associatively: with heads of width
d = 8 (the papers' EigenWorms model) every parallel form (a prefix scan of the step maps, or WY/UT blocks of c
steps, each with a c × c triangular solve) does c·d or more multiply-adds per step where the sequential step
does 2·d², on batches of tiny matrices whose per-matrix overhead dominates on CPU. At the EigenWorms-like
shape (docs/performance.md) the sequential recurrence over all B·H fast weight matrices in a "batch-last"
layout (see :func:`_batch_last`), with its hand-written adjoint, takes about 0.5 s per training step (forward,
recomputation and adjoint), where an earlier WY-block and prefix-scan implementation differentiated by autograd
made the whole step 3.5-4 s slower than Hebb's.

Gradients: **recomputation per checkpointed segment.** The sequence is cut into segments of ``chunk_size``
knot intervals; the forward pass keeps only the state at each segment's start (O(T / chunk_size · d²) per
sample) and the raw control inputs of the sequence (O(T · C)); the backward pass recomputes one segment at a
time: its projections and activations with autograd, its states from the segment's first state, then the
adjoint recurrence G_{t−1} = G_t A_tᵀ backwards through the segment (by hand for the affine rules, by
autograd for post-Delta), and autograd from the steps' inputs to the projections' weights and the control.
So no O(T · d²) (nor O(T · d_model)) tensor is kept for the backward pass. (Computing the projections once
for the whole sequence instead, outside the segments, was measured: it saves one of their four passes but
keeps O(T · d_model) activations alive, and the process peaked at 1.3 GB against the reference's 0.36 GB.)
The alternative DESIGN §5 mentions, reconstructing states backwards through the
inverse steps, is exact in exact arithmetic but unstable in floating point for these rules: each inverse
step expands the component along k (Delta) or v (Oja) by up to e^{c‖k‖²h}, so rounding errors grow like
e^{Σ c‖k‖²h} over thousands of windows. (torchdiffeq's continuous adjoint reconstructs W(s) backwards in just this way, and its
gradients come out NaN or wrong at 4,500 windows for Oja and both Deltas: docs/performance.md.)

Which CDE forms have an exact path. On a piece of a piecewise-linear control (linear, rectilinear), X' is
constant but X moves linearly. So only fields that read X' alone have constant inputs there: the x'-only CDE
(paper Eq. 38, ``dx_only=True``), solved here. The paper's standard CDE forms read X too: Hebb and Oja take
their key and learning rate from X (W(h) = W0 + v ∫ σ(β(s)) k(s)ᵀ ds, an integral of softmax(·) of a linear
function with no closed form), Delta its value (along k, u = W k relaxes as u' = c‖k‖² (tanh(α + γ s) − u),
whose solution needs ∫ e^{as} tanh(α + γ s) ds, not elementary). Rectilinear controls do not help: time moves
on the first half of each interval and the values on the second, so X still changes on every piece. Those
forms keep the fixed-step path, where the inputs' projections are batched over the whole segment
(:class:`~neuralde_seq.solvers.Dynamics`) and only the rule runs step by step.

Deeper models (``num_layers > 1``) are not solvable this way: the input of layer 2 is layer 1's output,
which changes inside every window as W(s, 1) moves (paper Eq. 33-35), so its field is not constant on a
window and has no closed form. :func:`solve_exact` refuses them with a ValueError.
"""
from __future__ import annotations

import shutil

import torch

from .controls import Control
from .fields import FastWeightField
from .rules import Delta

__all__ = ["solve_exact", "exact_field", "piece_inputs", "default_chunk_size"]

# Size of a checkpointed segment when SolverOptions.chunk_size is None, in fast weight entries per step times
# steps (B·S·H·d²): the backward pass of a segment holds its recomputed states (and, for the affine rules, the
# adjoint states too). At the EigenWorms-like shape (B 32, H 16, d 8) this gives 64 windows.
SEGMENT_ENTRIES = 2 ** 21


def default_chunk_size(post: bool, batch: int, heads: int, head_dim: int) -> int:
    """Knot intervals per checkpointed segment used when ``SolverOptions.chunk_size`` is None (the same for
    post-Delta, ``post=True``, and the affine rules: both hold one segment's states in the backward pass)."""
    return max(8, SEGMENT_ENTRIES // (batch * heads * head_dim * head_dim))


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
# The affine rules' steps run in a "batch-last" layout: a state is (d_b, d_a, N) and a step input (S, e, N), N =
# batch × heads innermost. Every per-step operation is then an element-wise product or a sum over an outer
# dimension with N contiguous entries, which runs several times faster on CPU than the same work on (N, d, d)
# matrices of width 8 (broadcasting over a last dimension of 8, or batched matmuls of 8 × 8 matrices).
def _batch_last(t: torch.Tensor) -> torch.Tensor:
    """(S, B, H, e) -> (S, e, B·H), contiguous (a reshape alone would return a strided view)."""
    return t.permute(0, 3, 1, 2).reshape(t.shape[0], t.shape[3], t.shape[1] * t.shape[2]).contiguous()


def _from_batch_last(t: torch.Tensor, heads: int) -> torch.Tensor:
    """(S, e, B·H) -> (S, B, H, e), the inverse of :func:`_batch_last`."""
    return t.view(t.shape[0], t.shape[1], -1, heads).permute(0, 2, 3, 1)


def _affine_forward(M, a, b, decay, write, keep_states: bool):
    """Apply the steps M ↦ M − decay·(M a) aᵀ + write·b aᵀ (batch-last layout) to M (d_b, d_a, N).

    Arguments: a (S, d_a, N), b (S, d_b, N), decay (S, 1, N) or None (Hebb: nothing decays), write (S, 1, N).
    Returns the final state (d_b, d_a, N), or the states after every step (S, d_b, d_a, N).
    """
    written = write * b
    if decay is None:  # Hebb: a sum of outer products
        if keep_states:
            return M + torch.cumsum(written.unsqueeze(2) * a.unsqueeze(1), dim=0)
        # Row by row (einsum would go through batched matmuls over N tiny strided matrices, far slower).
        return torch.stack([M[i] + (written[:, i: i + 1] * a).sum(0) for i in range(M.shape[0])])
    states = M.new_empty((a.shape[0],) + M.shape) if keep_states else None
    M = M if keep_states else M.clone()
    for t, (a_t, written_t, decay_t) in enumerate(zip(a, written, decay)):
        u = torch.addcmul(written_t, decay_t, (M * a_t).sum(1), value=-1.0)  # written − decay·M a
        if keep_states:
            M = torch.addcmul(M, u.unsqueeze(1), a_t, out=states[t])
        else:
            M.addcmul_(u.unsqueeze(1), a_t)
    return states if keep_states else M


def _affine_backward(M0, a, b, decay, write, grad_states, keep_states: bool, workspace: dict):
    """Gradients of :func:`_affine_forward` by its adjoint recurrence, with the states recomputed from M0.

    With u_t = write_t b_t − decay_t M_{t−1} a_t and M_t = M_{t−1} + u_t a_tᵀ, the gradient G_t on M_t gives
    g_t = G_t a_t (the gradient on u_t), G_{t−1} = G_t − decay_t g_t a_tᵀ (+ the gradient on M_{t−1} from
    outside), and per step: ∂a_t = G_tᵀ u_t − decay_t M_{t−1}ᵀ g_t, ∂b_t = write_t g_t, ∂write_t = g_t·b_t,
    ∂decay_t = −g_t·(M_{t−1} a_t). Only the recurrences for M and G are sequential (one pass each, over the
    segment); the per-step gradients are evaluated afterwards for all steps at once.

    Arguments: as :func:`_affine_forward`; grad_states the gradient on its output; ``workspace`` a dict in which
    the buffers of the recomputed and adjoint states are kept from one segment to the next (reusing them
    instead of allocating megabytes per segment saves the page faults).
    Returns:
        (∂M0, ∂a, ∂b, ∂decay or None, ∂write), shaped like the inputs.
    """
    steps = a.shape[0]
    written = write * b
    if decay is None:  # Hebb: G_t is the gradient on the final state plus what later states receive
        if keep_states:
            G = torch.flip(torch.cumsum(torch.flip(grad_states, (0,)), dim=0), (0,))  # G_t = Σ_{s>=t} ∂M_s
            g = (G * a.unsqueeze(1)).sum(2)
            grad_a = (G * written.unsqueeze(2)).sum(1)
            grad_M0 = G[0]
        else:  # row by row, as in _affine_forward
            g = torch.stack([(grad_states[i] * a).sum(1) for i in range(b.shape[1])], dim=1)
            grad_a = torch.zeros_like(a)
            for i in range(b.shape[1]):
                grad_a.addcmul_(grad_states[i], written[:, i: i + 1])
            grad_M0 = grad_states
        return grad_M0, grad_a, write * g, None, (g * b).sum(1, keepdim=True)
    shape = (steps,) + M0.shape
    if workspace.get("shape") != shape:
        workspace.update(shape=shape, before=M0.new_empty(shape), adjoint=M0.new_empty(shape))
    # Recompute the states before each step (before[t] = M_{t−1}), M_{t−1} a_t and u_t.
    before, G = workspace["before"], workspace["adjoint"]
    recalled, u, g = torch.empty_like(b), torch.empty_like(b), torch.empty_like(b)
    before[0] = M0
    # Per-step views made once (unbind), not by indexing in the loops.
    a_, written_, decay_, decayed_ = (t.unbind(0) for t in (a, written, decay, decay * a))
    recalled_, u_, g_, before_, G_ = (t.unbind(0) for t in (recalled, u, g, before, G))
    u_rows, g_rows = u.unsqueeze(2).unbind(0), g.unsqueeze(2).unbind(0)  # (d_b, 1, N) each
    for t in range(steps):
        torch.sum(before_[t] * a_[t], 1, out=recalled_[t])
        torch.addcmul(written_[t], decay_[t], recalled_[t], value=-1.0, out=u_[t])
        if t + 1 < steps:
            torch.addcmul(before_[t], u_rows[t], a_[t], out=before_[t + 1])
    # The adjoint recurrence, backwards: G[t] is the gradient on M_t (the state after step t).
    G[-1] = grad_states[-1] if keep_states else grad_states
    for t in range(steps - 1, 0, -1):
        torch.sum(G_[t] * a_[t], 1, out=g_[t])
        torch.addcmul(G_[t], g_rows[t], decayed_[t], value=-1.0, out=G_[t - 1])
        if keep_states:
            G_[t - 1].add_(grad_states[t - 1])
    torch.sum(G_[0] * a_[0], 1, out=g_[0])
    grad_M0 = torch.addcmul(G_[0], g_rows[0], decayed_[0], value=-1.0)
    # ∂a_t = Σ_i (G_t[i, :] u_t[i] − decay_t M_{t−1}[i, :] g_t[i]), accumulated over the rows i: no temporary
    # of the size of the states.
    decayed_g = decay * g
    grad_a = torch.zeros_like(a)
    for i in range(b.shape[1]):
        grad_a.addcmul_(G[:, i], u[:, i: i + 1])
        grad_a.addcmul_(before[:, i], decayed_g[:, i: i + 1], value=-1.0)
    grad_decay = -(g * recalled).sum(1, keepdim=True)
    return grad_M0, grad_a, write * g, grad_decay, (g * b).sum(1, keepdim=True)


def _projections(field: FastWeightField, x, dx):
    """The field's (k_raw, v_raw, beta) for every step from time-major inputs (T, B, C): (T, B, H, ·) each, in one
    batched pass (all steps and heads in one matmul)."""
    T, B = (x if x is not None else dx).shape[:2]
    flat = lambda t: None if t is None else t.reshape(T * B, t.shape[-1])
    # The projections are strided slices of one matmul's output; element-wise maps (tanh above all) run several
    # times faster on contiguous copies.
    return tuple(t.reshape(T, B, field.n_heads, -1).contiguous() for t in field.projections(flat(x), flat(dx)))


class _AffineSegments:
    """Hebb, Oja and pre-Delta: the steps and their adjoint by hand (:func:`_affine_forward`,
    :func:`_affine_backward`) on the steps' inputs (a, b, write[, decay]) of :meth:`RankOneUpdate`, each
    (T, B, H, ·)."""

    def __init__(self, field: FastWeightField, batch: int):
        self.field, self.batch, self.heads = field, batch, field.n_heads
        self.workspace = {}

    def prepare(self, x, dx, h):
        """The steps' inputs (a, b, write[, decay]), (S, B, H, ·) each, from a segment's (S, B, C) control inputs
        and (S, B) lengths."""
        update = self.field.rule.affine_step(*_projections(self.field, x, dx), h.view(*h.shape, 1, 1))
        self.transposed = update.transposed
        self.has_decay = update.decay is not None
        self.decay_is_write = update.decay is None or update.decay is update.write
        return (update.a, update.b, update.write) + (
            (update.decay,) if self.has_decay and not self.decay_is_write else ())

    def _unpack(self, segment):
        a, b, write = (_batch_last(t) for t in segment[:3])
        decay = (write if self.decay_is_write else _batch_last(segment[3])) if self.has_decay else None
        return a, b, decay, write

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
        a, b, decay, write = self._unpack(segment)
        return self._from_state(_affine_forward(self._to_state(W), a, b, decay, write, keep_states))

    def backward(self, W, segment, grad_out, keep_states):
        a, b, decay, write = self._unpack(segment)
        grad_M0, grad_a, grad_b, grad_decay, grad_write = _affine_backward(
            self._to_state(W), a, b, decay, write, self._to_state(grad_out), keep_states, self.workspace)
        if self.has_decay and self.decay_is_write:
            grad_write = grad_write + grad_decay
        grads = [grad_a, grad_b, grad_write] + ([grad_decay] if len(segment) == 4 else [])
        return self._from_state(grad_M0), [_from_batch_last(g, self.heads) for g in grads]


# ------------------------------------------------------------------------------------- post-Delta
class _PostDeltaSegments:
    """Post-Delta: its nonlinear exact step, step by step over the inputs of :meth:`Delta.post_step_inputs`
    (each (T, B, H, ·)); the backward pass by autograd through one recomputed segment."""

    def __init__(self, field: FastWeightField, step_fn):
        self.field, self.step_fn = field, step_fn

    def prepare(self, x, dx, h):
        """(k, v_raw, log_decay, inv_norm_sq), (S, B, H, ·) each, from a segment's (S, B, C) control inputs and
        (S, B) lengths."""
        return tuple(self.field.rule.post_step_inputs(*_projections(self.field, x, dx), h.view(*h.shape, 1, 1)))

    def advance(self, W, segment, keep_states):
        states = []
        for k, v_raw, log_decay, inv_norm_sq in zip(*segment):
            W = self.step_fn(W, k, v_raw, log_decay, inv_norm_sq)
            if keep_states:
                states.append(W)
        return torch.stack(states, dim=1) if keep_states else W

    def backward(self, W, segment, grad_out, keep_states):
        with torch.enable_grad():
            W = W.detach().requires_grad_()
            segment = [t.detach().requires_grad_() for t in segment]
            out = self.advance(W, segment, keep_states)
        grad_W, *grads = torch.autograd.grad(out, [W, *segment], grad_out, allow_unused=True)
        return (torch.zeros_like(W) if grad_W is None else grad_W), grads


# ------------------------------------------------------------------------------------- segments
class _CheckpointedSegments(torch.autograd.Function):
    """Advance W0 through the segments ``bounds`` of the steps, keeping only each segment's first state for the
    backward pass, which recomputes one segment at a time.

    ``solver`` (:class:`_AffineSegments` or :class:`_PostDeltaSegments`) has ``prepare(x, dx, h)``, a segment's
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
                grad_out = grad[:, start + 1: stop + 1].clone()
                grad_out[:, -1] += grad_W
            else:
                grad_out = grad_W
            with torch.enable_grad():
                pieces = [t[start:stop].detach().requires_grad_(need) for t, need in zip(inputs, needs)]
                prepared = ctx.solver.prepare(*_segment(pieces, ctx.has, 0, stop - start))
            grad_W, grad_prepared = ctx.solver.backward(starts[:, i], [t.detach() for t in prepared], grad_out,
                                                        ctx.keep_states)
            wrt = [p for p, need in zip(pieces, needs) if need] + [
                p for p, need in zip(parameters, needs[n_inputs:]) if need]
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
    if post:
        solver = _PostDeltaSegments(field, _maybe_compiled(Delta.post_step, options.compile))
    else:
        if options.compile:
            raise ValueError("SolverOptions(compile=True) compiles post-Delta's step function only; "
                             f"{rule!r} is solved by element-wise steps with a hand-written adjoint, which are not "
                             "compiled: leave compile=False")
        solver = _AffineSegments(field, batch)
    # Time-major inputs, so that a segment of the steps is a contiguous slice.
    sources = [t.transpose(0, 1).contiguous() for t in (x, dx) if t is not None]
    has = (x is not None, dx is not None)
    bounds = tuple((start, min(start + chunk, pieces)) for start in range(0, pieces, chunk))
    parameters = [p for p in field.parameters()]
    out = _CheckpointedSegments.apply(solver, bounds, at_knots, has, W0, *sources, lengths.to(initial.dtype).t(),
                                      *parameters)
    if at_knots:
        return out.reshape(batch, pieces + 1, *initial.shape[1:])
    return out.reshape(initial.shape)
