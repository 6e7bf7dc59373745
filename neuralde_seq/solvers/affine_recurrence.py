"""The affine fast weight steps over a sequence, forward and adjoint, in a "batch-last" layout.

Hebb, Oja and pre-Delta take exact steps M ↦ M − decay·(M a) aᵀ + write·b aᵀ on constant inputs
(`RankOneUpdate`; M = W, or Wᵀ for Oja), and with a forget gate M ↦ scale·M − decay·(M a) aᵀ + write·b aᵀ
(here ``decay`` is the RankOneUpdate's decay times its scale). `affine_forward` applies S of them
one after the other to all B·H matrices at once, and `affine_backward` is its adjoint, written by hand.
`neuralde_seq.solvers.exact_fast_weights` runs them per checkpointed segment.

Why one after the other, although the steps compose associatively: with heads of width d = 8 (the papers'
EigenWorms model) every parallel form (a prefix scan of the step maps, or WY/UT blocks of c steps, each with
a c × c triangular solve) does c·d or more multiply-adds per step where the sequential step does 2·d², on
batches of tiny matrices whose per-matrix overhead dominates on CPU. At the EigenWorms-like shape
(docs/performance.md) this sequential recurrence, with its hand-written adjoint, takes about 0.5 s per
training step (forward, recomputation and adjoint), where an earlier WY-block and prefix-scan implementation
differentiated by autograd made the whole step 3.5-4 s slower than Hebb's.

Layout: a state is (d_b, d_a, N) and a step input (S, e, N), N = batch × heads innermost. Every per-step
operation is then an element-wise product or a sum over an outer dimension with N contiguous entries, which
runs several times faster on CPU than the same work on (N, d, d) matrices of width 8 (broadcasting over a
last dimension of 8, or batched matmuls of 8 × 8 matrices).
"""

from __future__ import annotations

import torch

__all__ = ["batch_last", "from_batch_last", "affine_forward", "affine_backward"]


def batch_last(t: torch.Tensor) -> torch.Tensor:
    """(S, B, H, e) -> (S, e, B·H), contiguous (a reshape alone would return a strided view)."""
    return t.permute(0, 3, 1, 2).reshape(t.shape[0], t.shape[3], t.shape[1] * t.shape[2]).contiguous()


def from_batch_last(t: torch.Tensor, heads: int) -> torch.Tensor:
    """(S, e, B·H) -> (S, B, H, e), the inverse of `batch_last`."""
    return t.view(t.shape[0], t.shape[1], -1, heads).permute(0, 2, 3, 1)


def affine_forward(M, a, b, decay, write, keep_states: bool, scale=None):
    """Apply the steps M ↦ scale·M − decay·(M a) aᵀ + write·b aᵀ (batch-last layout) to M (d_b, d_a, N).

    Arguments: a (S, d_a, N), b (S, d_b, N), decay (S, 1, N) or None (Hebb: nothing decays), write (S, 1, N),
    scale (S, 1, N) or None (1: no forget gate).
    Returns the final state (d_b, d_a, N), or the states after every step (S, d_b, d_a, N).
    """
    written = write * b
    if decay is None and scale is not None:  # Hebb with a forget gate: the general recurrence
        decay = torch.zeros_like(write)
    if decay is None:  # Hebb: a sum of outer products
        if keep_states:
            return M + torch.cumsum(written.unsqueeze(2) * a.unsqueeze(1), dim=0)
        # Row by row (einsum would go through batched matmuls over N tiny strided matrices, far slower).
        return torch.stack([M[i] + (written[:, i : i + 1] * a).sum(0) for i in range(M.shape[0])])
    states = M.new_empty((a.shape[0],) + M.shape) if keep_states else None
    M = M if keep_states else M.clone()
    for t, (a_t, written_t, decay_t) in enumerate(zip(a, written, decay)):
        u = torch.addcmul(written_t, decay_t, (M * a_t).sum(1), value=-1.0)  # written − decay·M a
        if scale is not None:
            M = M * scale[t]
        if states is not None:  # keep_states
            M = torch.addcmul(M, u.unsqueeze(1), a_t, out=states[t])
        else:
            M.addcmul_(u.unsqueeze(1), a_t)
    return states if states is not None else M


def affine_backward(M0, a, b, decay, write, grad_states, keep_states: bool, workspace: dict, scale=None):
    """Gradients of `affine_forward` by its adjoint recurrence, with the states recomputed from M0.

    With u_t = write_t b_t − decay_t M_{t−1} a_t and M_t = s_t M_{t−1} + u_t a_tᵀ (s_t = scale_t, or 1), the
    gradient G_t on M_t gives g_t = G_t a_t (the gradient on u_t), G_{t−1} = s_t G_t − decay_t g_t a_tᵀ (+ the
    gradient on M_{t−1} from outside), and per step: ∂a_t = G_tᵀ u_t − decay_t M_{t−1}ᵀ g_t, ∂b_t = write_t g_t,
    ∂write_t = g_t·b_t, ∂decay_t = −g_t·(M_{t−1} a_t), ∂s_t = ⟨G_t, M_{t−1}⟩. Only the recurrences for M and G
    are sequential (one pass each, over the segment); the per-step gradients are evaluated afterwards for all
    steps at once.

    Arguments: as `affine_forward`; grad_states the gradient on its output; ``workspace`` a dict in which
    the buffers of the recomputed and adjoint states are kept from one segment to the next (reusing them
    instead of allocating megabytes per segment saves the page faults).
    Returns:
        (∂M0, ∂a, ∂b, ∂decay or None, ∂write), shaped like the inputs, and ∂scale when ``scale`` is given.
    """
    steps = a.shape[0]
    written = write * b
    given_decay = decay is not None
    if decay is None and scale is not None:  # Hebb with a forget gate: the general recurrence
        decay = torch.zeros_like(write)
    if decay is None:  # Hebb: G_t is the gradient on the final state plus what later states receive
        if keep_states:
            G = torch.flip(torch.cumsum(torch.flip(grad_states, (0,)), dim=0), (0,))  # G_t = Σ_{s>=t} ∂M_s
            g = (G * a.unsqueeze(1)).sum(2)
            grad_a = (G * written.unsqueeze(2)).sum(1)
            grad_M0 = G[0]
        else:  # row by row, as in affine_forward
            g = torch.stack([(grad_states[i] * a).sum(1) for i in range(b.shape[1])], dim=1)
            grad_a = torch.zeros_like(a)
            for i in range(b.shape[1]):
                grad_a.addcmul_(grad_states[i], written[:, i : i + 1])
            grad_M0 = grad_states
        return grad_M0, grad_a, write * g, None, (g * b).sum(1, keepdim=True)
    shape = (steps,) + M0.shape
    if workspace.get("shape") != shape:
        workspace.update(shape=shape, before=M0.new_empty(shape), costate=M0.new_empty(shape))
    # Recompute the states before each step (before[t] = M_{t−1}), M_{t−1} a_t and u_t.
    before, G = workspace["before"], workspace["costate"]
    recalled, u, g = torch.empty_like(b), torch.empty_like(b), torch.empty_like(b)
    before[0] = M0
    # Per-step views made once (unbind), not by indexing in the loops.
    a_, written_, decay_, decayed_ = (t.unbind(0) for t in (a, written, decay, decay * a))
    recalled_, u_, g_, before_, G_ = (t.unbind(0) for t in (recalled, u, g, before, G))
    u_rows, g_rows = u.unsqueeze(2).unbind(0), g.unsqueeze(2).unbind(0)  # (d_b, 1, N) each
    scale_ = None if scale is None else scale.unbind(0)
    for t in range(steps):
        torch.sum(before_[t] * a_[t], 1, out=recalled_[t])
        torch.addcmul(written_[t], decay_[t], recalled_[t], value=-1.0, out=u_[t])
        if t + 1 < steps:
            kept = before_[t] if scale_ is None else before_[t] * scale_[t]
            torch.addcmul(kept, u_rows[t], a_[t], out=before_[t + 1])
    # The adjoint recurrence, backwards: G[t] is the gradient on M_t (the state after step t).
    G[-1] = grad_states[-1] if keep_states else grad_states
    for t in range(steps - 1, 0, -1):
        torch.sum(G_[t] * a_[t], 1, out=g_[t])
        kept = G_[t] if scale_ is None else G_[t] * scale_[t]
        torch.addcmul(kept, g_rows[t], decayed_[t], value=-1.0, out=G_[t - 1])
        if keep_states:
            G_[t - 1].add_(grad_states[t - 1])
    torch.sum(G_[0] * a_[0], 1, out=g_[0])
    grad_M0 = torch.addcmul(G_[0] if scale_ is None else G_[0] * scale_[0], g_rows[0], decayed_[0], value=-1.0)
    # ∂a_t = Σ_i (G_t[i, :] u_t[i] − decay_t M_{t−1}[i, :] g_t[i]), accumulated over the rows i: no temporary
    # of the size of the states.
    decayed_g = decay * g
    grad_a = torch.zeros_like(a)
    for i in range(b.shape[1]):
        grad_a.addcmul_(G[:, i], u[:, i : i + 1])
        grad_a.addcmul_(before[:, i], decayed_g[:, i : i + 1], value=-1.0)
    grad_decay = -(g * recalled).sum(1, keepdim=True) if given_decay else None
    grads = (grad_M0, grad_a, write * g, grad_decay, (g * b).sum(1, keepdim=True))
    if scale is None:
        return grads
    grad_scale = torch.zeros_like(scale)
    for i in range(b.shape[1]):  # ⟨G_t, M_{t−1}⟩ row by row, as ∂a
        grad_scale.add_((G[:, i] * before[:, i]).sum(1, keepdim=True))
    return grads + (grad_scale,)
