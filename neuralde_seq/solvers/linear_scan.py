"""Linear recurrences h_t = M_t h_{t−1} + b_t with structured M_t, by a parallel prefix scan beside the plain
sequential loop it must equal.

The structured linear CDEs (`neuralde_seq.models.linear_cde`) step their state by affine maps whose matrices are
diagonal, block-diagonal or dense. Affine maps compose associatively, (M₂, b₂) ∘ (M₁, b₁) = (M₂M₁, M₂b₁ + b₂),
so all prefix compositions can be formed in ⌈log₂ S⌉ rounds (Hillis-Steele: in round r every map t >= 2^r is
composed with the map 2^r before it), and then h_t = M_{1..t} h_0 + b_{1..t} for every t at once. That costs
O(S log S) matrix products instead of S, in log S sequential rounds instead of S: a gain where the hardware runs
the S products of a round in parallel (GPUs), a loss on a CPU with small states (benchmarks/linear_cdes.py says
which).

`sequential_scan` is the reference: one step after the other, differentiated by autograd. `parallel_scan` is
differentiated by autograd too (every round is plain tensor operations); tests/test_linear_scan.py checks the two
against each other in float64 (values and gradients, lengths up to 4,096).

Structures (`STRUCTURES`), with M of shape

- ``"diagonal"``: (S, B, H), M acts element-wise;
- ``"block"``: (S, B, n, k, k), H = n·k, independent k × k blocks;
- ``"dense"``: (S, B, H, H);
- ``"dplr"``: diagonal plus low rank, M = diag(d) + U Vᵀ, given as the tuple (d, U, V) with d (S, B, H) and U, V
  (S, B, H, r). Applying it costs O(H r) (the sequential scan's step), but a product of two such matrices has rank
  up to 2r: the low-rank form does not survive composition, so the parallel scan forms the dense matrices
  (O(H³) per composition). The pre-Delta CT-FWP step W ↦ W (I − λ k kᵀ) + λ v kᵀ is this structure with d = 1,
  r = 1 (each row of W one state; docs/linear_cdes.md).

b is (S, B, H) and h_0 is (B, H) in every case; with ``columns=True`` the state is a matrix of K columns, each
column its own state under the same M_t: b is (S, B, H, K) and h_0 (B, H, K). The fast weight recurrences use
this form: W_t = W_{t−1} P_t + Q_t is, transposed, W_tᵀ = P_tᵀ W_{t−1}ᵀ + Q_tᵀ, every row of W a column of the
state (`neuralde_seq.solvers.affine_rk4`, `neuralde_seq.solvers.exact_fast_weights`,
`neuralde_seq.solvers.chunked_delta`).
`parallel_segment_steps` sizes their checkpointed segments for the parallel scan.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "STRUCTURES",
    "sequential_scan",
    "parallel_scan",
    "apply_matrix",
    "compose_matrices",
    "dplr_to_dense",
    "PARALLEL_SCAN_ENTRIES",
    "parallel_segment_steps",
    "SCANS",
    "uses_parallel_scan",
]

STRUCTURES = ("diagonal", "block", "dense", "dplr")
# The values of the ``scan`` option of the fixed-step methods and `Exact` (`uses_parallel_scan`).
SCANS = ("auto", "sequential", "parallel")
# Numbers the autograd graph of one segment's parallel scan may hold (2^26: 256 MiB in float32), for
# `parallel_segment_steps`.
PARALLEL_SCAN_ENTRIES = 2**26


def _check(structure: str) -> None:
    if structure not in STRUCTURES:
        raise ValueError(f"structure must be one of {STRUCTURES}, got {structure!r}")


def apply_matrix(M: torch.Tensor, h: torch.Tensor, structure: str, columns: bool = False) -> torch.Tensor:
    """M h for a structured M.

    Arguments:
        M: (..., H) diagonal, (..., n, k, k) block-diagonal or (..., H, H) dense matrices, or the tuple (d, U, V)
            of a diagonal-plus-low-rank matrix diag(d) + U Vᵀ, d (..., H), U and V (..., H, r).
        h: (..., H) vectors, or (..., H, K) matrices if ``columns``.
        structure: one of `STRUCTURES`.
        columns: False: h holds vectors; True: h holds matrices, M applied to each of their K columns.

    Returns:
        (..., H) the products, or (..., H, K) if ``columns``.
    """
    _check(structure)
    if columns:
        if structure == "dplr":
            d, U, V = M
            return d.unsqueeze(-1) * h + U @ (V.transpose(-1, -2) @ h)
        if structure == "diagonal":
            return M.unsqueeze(-1) * h
        if structure == "dense":
            return M @ h
        n, k = M.shape[-3], M.shape[-1]
        blocks = h.reshape(*h.shape[:-2], n, k, h.shape[-1])
        return (M @ blocks).flatten(-3, -2)
    if structure == "dplr":
        d, U, V = M
        return d * h + (U @ (V.transpose(-1, -2) @ h.unsqueeze(-1))).squeeze(-1)
    if structure == "diagonal":
        return M * h
    if structure == "dense":
        return (M @ h.unsqueeze(-1)).squeeze(-1)
    n, k = M.shape[-3], M.shape[-1]
    blocks = h.reshape(*h.shape[:-1], n, k, 1)
    return (M @ blocks).flatten(-3)  # (broadcast) ..., H


def compose_matrices(later: torch.Tensor, earlier: torch.Tensor, structure: str) -> torch.Tensor:
    """The product later · earlier of two structured matrices (the same structure).

    Arguments:
        later: matrices applied second, shaped as in `apply_matrix`.
        earlier: matrices applied first, the same shape.
        structure: one of `STRUCTURES`.

    Returns:
        The products, the same shape.
    """
    _check(structure)
    if structure == "dplr":
        raise ValueError(
            "diagonal-plus-low-rank matrices do not compose into the same form (the rank adds up): "
            "compose their dense forms (dplr_to_dense)"
        )
    return later * earlier if structure == "diagonal" else later @ earlier


def dplr_to_dense(M: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The dense form diag(d) + U Vᵀ of a diagonal-plus-low-rank matrix.

    Arguments:
        M: the tuple (d, U, V): d (..., H), U and V (..., H, r).

    Returns:
        (..., H, H) the matrices.
    """
    d, U, V = M
    return torch.diag_embed(d) + U @ V.transpose(-1, -2)


def sequential_scan(
    M: torch.Tensor, b: torch.Tensor, h0: torch.Tensor, structure: str, columns: bool = False
) -> torch.Tensor:
    """Every state of h_t = M_t h_{t−1} + b_t, one step after the other (the reference).

    Arguments:
        M: (S, B, ...) the step matrices (see the module docstring for each structure's shape).
        b: (S, B, H) the step offsets, or (S, B, H, K) if ``columns``.
        h0: (B, H) the initial state, or (B, H, K) if ``columns``.
        structure: one of `STRUCTURES`.
        columns: whether the states are matrices of K columns (module docstring).

    Returns:
        (S, B, H) the states h_1 .. h_S, or (S, B, H, K) if ``columns``.
    """
    _check(structure)
    states, h = [], h0
    steps = zip(*M) if structure == "dplr" else M
    for M_t, b_t in zip(steps, b):
        h = apply_matrix(M_t, h, structure, columns) + b_t
        states.append(h)
    return torch.stack(states) if states else b.new_empty((0,) + tuple(h0.shape))


def parallel_scan(
    M: torch.Tensor, b: torch.Tensor, h0: torch.Tensor, structure: str, columns: bool = False
) -> torch.Tensor:
    """Every state of h_t = M_t h_{t−1} + b_t by a prefix scan of the affine maps (module docstring).

    Arguments:
        M: (S, B, ...) the step matrices (see the module docstring for each structure's shape).
        b: (S, B, H) the step offsets, or (S, B, H, K) if ``columns``.
        h0: (B, H) the initial state, or (B, H, K) if ``columns``.
        structure: one of `STRUCTURES`.
        columns: whether the states are matrices of K columns (module docstring).

    Returns:
        (S, B, H) the states h_1 .. h_S (or (S, B, H, K) if ``columns``), equal to `sequential_scan`'s up to
        rounding.
    """
    _check(structure)
    if structure == "dplr":  # the low-rank form does not survive composition (module docstring)
        d, U, V = M
        M, structure = dplr_to_dense((d, U, V)), "dense"
    steps = M.shape[0]
    offset = 1
    while offset < steps:
        # (M_t, b_t) ← (M_t, b_t) ∘ (M_{t−offset}, b_{t−offset}) for t >= offset; the first `offset` maps are
        # already complete prefixes.
        later_M, later_b = M[offset:], b[offset:]
        earlier_M, earlier_b = M[:-offset], b[:-offset]
        M = torch.cat([M[:offset], compose_matrices(later_M, earlier_M, structure)])
        b = torch.cat([b[:offset], apply_matrix(later_M, earlier_b, structure, columns) + later_b])
        offset *= 2
    return apply_matrix(M, h0.unsqueeze(0), structure, columns) + b


def parallel_segment_steps(steps: int, entries_per_step: int, budget: int = PARALLEL_SCAN_ENTRIES) -> int:
    """Steps per checkpointed segment of a recurrence composed by `parallel_scan`: all ``steps`` when the scan's
    autograd graph (about S·⌈log₂ S⌉·``entries_per_step`` numbers for S steps: every round keeps its inputs) fits
    ``budget``, else the largest power of two that fits, and at least 8 (longer segments mean fewer segments one
    after the other, the scan's gain on a GPU).

    Arguments:
        steps: steps of the whole solve (>= 0).
        entries_per_step: numbers of one step's map and offset over the batch (e.g. B·H·d_a·(d_a + d_b)).
        budget: numbers the graph may hold.

    Returns:
        The segment length, in 1..max(steps, 1).
    """
    graph = lambda S: S * max(1, math.ceil(math.log2(S))) * entries_per_step
    if steps <= 1 or graph(steps) <= budget:
        return max(steps, 1)
    size = 8
    while size * 2 < steps and graph(size * 2) <= budget:
        size *= 2
    return min(size, steps)


def uses_parallel_scan(scan: str, device: torch.device) -> bool:
    """Whether a recurrence whose tensors are on ``device`` runs as a `parallel_scan`: ``scan`` "parallel";
    "sequential": never; "auto": on every device but the CPU, where the sequential loop is faster (the scan does
    O(log S) times the work, in log S rounds instead of S steps: a gain only where launches, not arithmetic, bound
    the time)."""
    if scan not in SCANS:
        raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
    return scan == "parallel" or (scan == "auto" and torch.device(device).type != "cpu")
