"""The affine exact steps of the fast weight rules in chunked (WY / UT) form: blocks of steps as matmuls, and
only the block boundaries one after the other.

The steps. Hebb, Oja and pre-Delta take, on a window of constant inputs, the exact step of a
`neuralde_seq.rules.RankOneUpdate` (docs/equations.md#closed-forms-on-constant-inputs):

    M_t = s_t (M_{t−1} − δ_t (M_{t−1} a_t) a_tᵀ) + w_t b_t a_tᵀ            (M = W, or Wᵀ for Oja)

with, for pre-Delta (a = k, b = v = tanh(v_raw), c = σ(β), n = ‖k‖², window length h), δ = (1 − e^{−c n h})/n
(`relaxation_rate`); without a forget gate s = 1 and w = δ; with one (rate λ) s = e^{−λh} and
w = c (1 − e^{−(λ + c n) h})/(λ + c n). Oja is the same on Wᵀ with a = v, b = k; Hebb has δ = 0. A step of
length h = 0 (after a sample's end) has δ = w = 0, s = 1: the identity.

Writing u_t = w_t b_t − s_t δ_t M_{t−1} a_t, the step is M_t = s_t M_{t−1} + u_t a_tᵀ. Inside a block of C steps
that starts from M_0, with the cumulative scales γ_t = s_1 ⋯ s_t (γ_0 = 1),

    M_t = γ_t M_0 + Σ_{j ≤ t} (γ_t / γ_j) u_j a_jᵀ,

so that (using s_t γ_{t−1} = γ_t)

    u_t + Σ_{j < t} δ_t (γ_t / γ_j) (a_t · a_j) u_j = w_t b_t − δ_t γ_t M_0 a_t.

In matrices (rows indexed by the steps of the block: U = [u_tᵀ], A = [a_tᵀ], B = [b_tᵀ]) this is
(I + L) U = diag(w) B − diag(δ γ) A M_0ᵀ with L strictly lower triangular, L_tj = δ_t (γ_t/γ_j) (a_t · a_j).
The UT transform solves it once per block, independently of M_0 (one unit-triangular solve of C × C, for all
blocks at once):

    V̂ = (I + L)⁻¹ diag(w) B,   K̂ = (I + L)⁻¹ diag(δ γ) A,   U = V̂ − K̂ M_0ᵀ,
    M_C = γ_C M_0 + Uᵀ diag(γ_C / γ_j) A,

which is the WY form of the product of the (s_t I − s_t δ_t a_t a_tᵀ): M_C = M_0 (γ_C I − K̂ᵀ diag(γ_C/γ_j) A)
+ V̂ᵀ diag(γ_C/γ_j) A. Only the last two lines run block after block (two matmuls of C × d each); the states
inside a block, when they are asked for, are γ_t M_0 + Σ_{j≤t} (γ_t/γ_j) u_j a_jᵀ for all blocks at once. The
ratios γ_t/γ_j (t ≥ j) are exp of differences of cumulative log-scales, masked before the exponential, so none
overflows. This is the chunked delta rule of DeltaNet / Gated DeltaNet (Yang et al. 2024, 2025;
flash-linear-attention), here with the continuous-time factors δ, w, s of the closed-form steps, and for any
`RankOneUpdate` (pre-Delta, Oja on Wᵀ, Hebb; with or without a forget gate).

Stability: δ_t ‖a_t‖² = 1 − e^{−c n h} ∈ [0, 1), so every factor s_t (I − δ_t a_t a_tᵀ) is a contraction, and
(I + L)⁻¹ is the well-conditioned UT form of their product, as for DeltaNet with β ∈ [0, 1].

Post-Delta admits no chunked form: its exact step (`Delta.exact_step_from_inputs`) moves W along k by
(e₀ − asinh(sinh(e₀) e^{−c‖k‖²h}))/‖k‖², e₀ = v_raw − W k, which is not affine in W, so steps do not compose into
a product of matrices and a block cannot be solved without its states; it stays on the sequential path
(`neuralde_seq.solvers.exact_fast_weights`).

Cost. Per step and matrix, the sequential recurrence (`neuralde_seq.solvers.affine_recurrence`) does about
2·d_a·d_b multiply-adds forward, one step after the other; the chunked form does about C·(d_a + d_b) for the Gram
matrix and the triangular solve plus 2·d_a·d_b at the block boundaries, in batched matmuls, with T/C iterations
one after the other. On a CPU with heads of width 8 (batch 32, 16 heads, one thread) the sequential recurrence
with its hand-written adjoint is the faster (a training step's solve 1.5x faster than chunked with C = 16 and
2.5x than C = 64 at 1,000 and 4,096 windows without a forget gate; with one, whose sequential adjoint is
about 3x slower, chunked with C = 16 was 0.8-0.9x the sequential time: benchmarks/chunked_delta.py), so the
sequential recurrence stays the default on a CPU (``Exact(recurrence="auto")``; ``"sequential"`` forces it). On a
GPU the sequential recurrence is bound by several kernel launches per step, the chunked form by a few per block,
so the chunked form is expected to win there (to be timed).
The block boundaries compose too: block i maps its start to its end by M ↦ M P_i + Q_i (the WY form above), so with
``parallel=True`` (``Exact(scan="parallel")``, and "auto" on a GPU) they run as a parallel prefix scan of
⌈log₂ n⌉ rounds over the n blocks (`neuralde_seq.solvers.linear_scan.parallel_scan`), not n iterations.
`neuralde_seq.solvers.exact_fast_weights.solve_exact` takes it with ``Exact(recurrence="chunked")``, its
gradients by autograd through each recomputed checkpoint segment (the graph of a segment of S steps holds about
S·(C + 4d) numbers per matrix, plus d² per block; the forward pass keeps only the segment starts, so nothing of
size T·d² is kept).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .linear_scan import parallel_scan

__all__ = ["EXACT_RECURRENCES", "DEFAULT_BLOCK_SIZE", "chunked_affine_steps"]

# The values of `neuralde_seq.solvers.Exact.recurrence` ("auto": chunked on a GPU or other non-CPU device, sequential
# on a CPU).
EXACT_RECURRENCES = ("auto", "sequential", "chunked")
# Steps per WY block when `neuralde_seq.solvers.Exact.block_size` is None (flash-linear-attention's chunk length).
DEFAULT_BLOCK_SIZE = 64


def _blocks(t: torch.Tensor, blocks: int, size: int) -> torch.Tensor:
    """(N, S, ...) -> (N, blocks, size, ...), zero-padded at the end (a zero step is the identity)."""
    pad = blocks * size - t.shape[1]
    if pad:
        t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
    return t.reshape(t.shape[0], blocks, size, *t.shape[2:])


def chunked_affine_steps(
    M0: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    decay: torch.Tensor | None,
    write: torch.Tensor,
    scale: torch.Tensor | None = None,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    keep_states: bool = False,
    parallel: bool = False,
) -> torch.Tensor:
    """Apply S steps M ↦ s·(M − δ (M a) aᵀ) + w b aᵀ (`RankOneUpdate.apply`) to N matrices at once, in blocks
    of ``block_size`` steps by the WY / UT form of the module docstring. Differentiable by autograd.

    Arguments:
        M0: (N, d_b, d_a) the states before the first step (N = batch × heads).
        a: (N, S, d_a) the directions read and written along.
        b: (N, S, d_b) the vectors written.
        decay: (N, S) the decay factors δ, or None (nothing decays: Hebb).
        write: (N, S) the write factors w.
        scale: (N, S) the factors s of the whole matrix (forget gate, in [0, 1]), or None (s = 1).
        block_size: steps per block C (>= 1); the last block is padded with identity steps when C does not
            divide S.
        keep_states: False: the final states; True: the states after every step.
        parallel: False: the block boundaries one after the other; True: the blocks' affine maps
            M_end = M_start (γ_C I − K̂ᵀ diag(γ_C/γ_j) A) + V̂ᵀ diag(γ_C/γ_j) A composed by
            `neuralde_seq.solvers.linear_scan.parallel_scan` (⌈log₂ n⌉ rounds for n blocks), then the writes U of
            every block at once from its start.

    Returns:
        (N, d_b, d_a) the states after the S steps, or (N, S, d_b, d_a) the states after every step.
    """
    if not (isinstance(block_size, int) and block_size >= 1):
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    N, S, d_a = a.shape
    d_b = b.shape[-1]
    if S == 0:
        return M0.new_empty((N, 0, d_b, d_a)) if keep_states else M0
    size = min(block_size, S)
    count = -(-S // size)
    A, Bv, w = _blocks(a, count, size), _blocks(b, count, size), _blocks(write, count, size)  # (N, n, C, ·)
    strictly_lower = torch.ones(size, size, dtype=torch.bool, device=a.device).tril(-1)
    if scale is None:
        ratio = gamma = None  # γ = 1
    else:
        # log γ_t inside each block; scale 0 (e^{−λh} underflowed) is clamped to the smallest normal number.
        log_gamma = torch.cumsum(
            _blocks(torch.log(scale.clamp_min(torch.finfo(scale.dtype).tiny)), count, size), dim=-1
        )
        gamma = torch.exp(log_gamma)  # (N, n, C)
        differences = log_gamma.unsqueeze(-1) - log_gamma.unsqueeze(-2)  # log(γ_t/γ_j), (N, n, C, C)
        lower = torch.ones(size, size, dtype=torch.bool, device=a.device).tril()
        ratio = torch.exp(differences.masked_fill(~lower, float("-inf")))  # γ_t/γ_j for t >= j, else 0
    if decay is None:
        V_hat, K_hat = w.unsqueeze(-1) * Bv, None
    else:
        delta = _blocks(decay, count, size)
        gram = A @ A.transpose(-1, -2)  # a_t · a_j, (N, n, C, C)
        L = delta.unsqueeze(-1) * (gram if ratio is None else gram * ratio)
        L = L.masked_fill(~strictly_lower, 0.0)
        delta_gamma = delta if gamma is None else delta * gamma
        rhs = torch.cat([w.unsqueeze(-1) * Bv, delta_gamma.unsqueeze(-1) * A], dim=-1)
        # The unit diagonal is implied (L's zero diagonal is not read).
        solved = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)
        V_hat, K_hat = solved[..., :d_b], solved[..., d_b:]
    # A_end[j] = (γ_C/γ_j) a_j, the directions as they reach the block's end.
    A_end = A if ratio is None else ratio[..., -1, :].unsqueeze(-1) * A
    gamma_end = None if gamma is None else gamma[..., -1, None, None]  # (N, n, 1, 1)

    if parallel:
        # Transposed, M_endᵀ = (γ_C I − A_endᵀ K̂) M_startᵀ + A_endᵀ V̂: the dense scan over the blocks (time-major),
        # the rows of M the state's columns.
        A_end_T = A_end.transpose(-1, -2)  # (N, n, d_a, C)
        eye = torch.eye(d_a, dtype=M0.dtype, device=M0.device)
        P_T = (eye if gamma_end is None else gamma_end * eye).expand(N, count, d_a, d_a)
        if K_hat is not None:
            P_T = P_T - A_end_T @ K_hat
        ends = parallel_scan(
            P_T.transpose(0, 1), (A_end_T @ V_hat).transpose(0, 1), M0.transpose(-1, -2), "dense", columns=True
        ).transpose(-1, -2)  # (n, N, d_b, d_a)
        if not keep_states:
            return ends[-1]
        start = torch.cat([M0.unsqueeze(0), ends[:-1]]).transpose(0, 1)  # (N, n, d_b, d_a)
        U = V_hat if K_hat is None else V_hat - K_hat @ start.transpose(-1, -2)  # (N, n, C, d_b)
    else:
        # Only this loop is sequential: one iteration per block, matmuls of C × d, no host synchronisation. The
        # per-block views are made once by unbind, whose backward stacks the gradients once (indexing [:, i] in
        # the loop would make autograd fill a zero tensor of the whole size per block).
        per_block = [t.unbind(1) if t is not None else [None] * count for t in (V_hat, K_hat, A_end, gamma_end)]
        M = M0
        starts, writes = [], []
        for V_i, K_i, A_i, gamma_i in zip(*per_block):
            U = V_i if K_i is None else torch.baddbmm(V_i, K_i, M.transpose(-1, -2), alpha=-1.0)  # (N, C, d_b)
            if keep_states:
                starts.append(M)
                writes.append(U)
            M = torch.baddbmm(M if gamma_i is None else gamma_i * M, U.transpose(-1, -2), A_i)
        if not keep_states:
            return M
        start = torch.stack(starts, dim=1)  # (N, n, d_b, d_a)
        U = torch.stack(writes, dim=1)  # (N, n, C, d_b)
    # States inside every block at once: M_t = γ_t M_start + Σ_{j<=t} (γ_t/γ_j) u_j a_jᵀ.
    outer = (U.unsqueeze(-1) * A.unsqueeze(-2)).reshape(N, count, size, d_b * d_a)
    if ratio is None:
        states = torch.cumsum(outer, dim=2).reshape(N, count, size, d_b, d_a) + start.unsqueeze(2)
    else:
        assert gamma is not None  # ratio and gamma are None together (no scale)
        states = (ratio @ outer).reshape(N, count, size, d_b, d_a) + gamma[..., None, None] * start.unsqueeze(2)
    return states.reshape(N, count * size, d_b, d_a)[:, :S]
