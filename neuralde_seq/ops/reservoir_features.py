"""The random-feature reservoir's features in one pass over each series, without storing its states: a fused CPU
kernel (numba) beside the plain torch reference it must equal.

The reservoir is a linear CDE whose state steps by h_{k+1} = h_k + Σ_d t_{k,d} (A_d h_k + B_d) over each piece's
increments t_k (D path channels), with A_d diagonal (H,) or block-diagonal of 2×2 blocks (n = H/2 blocks: the
damped oscillators of `neuralde_seq.random_features`). The features pool the states at the knots 0..end of each
series: ``final`` (h at the last knot), ``mean``, ``max``, and for each threshold b of a unit ``ppv`` (the share of
knots with h > b) and ``mpv`` (the mean of h − b over those knots, 0 where there are none).

Why a fused kernel: the reference forms every state, (N, K, H) numbers (ACSF1 at the default width: 200 series x
1,460 knots x 1,536 units, 1.8 GB in float32), and steps them with one small tensor operation per knot. The kernel
keeps one series' state (H numbers) in cache, steps it knot by knot with the inner loop over the units (which the
compiler vectorises), and adds each knot's contribution to the features as it goes (benchmarks/random_features.py
measures the two side by side).

`reference_features` is the reference: the states by the recurrence written as tensor operations, then the pooled
statistics. `fused_features` is the kernel; `fused_available` says whether numba is there.
tests/test_reservoir_features.py checks the two against each other in float64.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import torch

__all__ = ["POOLED_FEATURES", "STRUCTURES", "reference_features", "fused_features", "fused_states", "fused_available"]

POOLED_FEATURES = ("final", "mean", "max", "ppv", "mpv")
STRUCTURES = ("diagonal", "block")


def fused_available() -> bool:
    """Whether numba, which compiles the fused kernel, can be imported."""
    return importlib.util.find_spec("numba") is not None


def _check(terms, ends, h0, A, B, biases, structure):
    if structure not in STRUCTURES:
        raise ValueError(f"structure must be one of {STRUCTURES}, got {structure!r}")
    N, S, D = terms.shape
    H = h0.shape[1]
    if h0.shape[0] != N or ends.shape != (N,):
        raise ValueError(f"h0 must be (N={N}, H) and ends (N,), got {tuple(h0.shape)} and {tuple(ends.shape)}")
    expected = (D, H) if structure == "diagonal" else (D, H // 2, 2, 2)
    if tuple(A.shape) != expected or (structure == "block" and H % 2):
        raise ValueError(f"A must be {expected} for structure {structure!r} and H={H}, got {tuple(A.shape)}")
    if tuple(B.shape) != (H, D):
        raise ValueError(f"B must be (H={H}, D={D}), got {tuple(B.shape)}")
    if biases is not None and (biases.dim() != 2 or biases.shape[1] != H):
        raise ValueError(f"biases must be (num_biases, H={H}), got {tuple(biases.shape)}")
    if int(ends.min()) < 0 or int(ends.max()) > S:
        raise ValueError(f"ends must lie in [0, S={S}], got {int(ends.min())}..{int(ends.max())}")


def reference_features(
    terms: torch.Tensor,
    ends: torch.Tensor,
    h0: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    biases: torch.Tensor | None,
    structure: str,
) -> dict[str, torch.Tensor]:
    """The features from every state, formed step by step with tensor operations (the reference).

    Arguments:
        terms: (N, S, D) each piece's increments t_k (entries at and after a series' end are not read).
        ends: (N,) each series' last knot (its pieces 0..end−1; knots 0..end).
        h0: (N, H) the states at knot 0.
        A: (D, H) diagonal or (D, H/2, 2, 2) block-diagonal matrices, by ``structure``.
        B: (H, D) the offsets' matrix (a step adds B t_k).
        biases: (num_biases, H) the ``ppv``/``mpv`` thresholds, or None (then those two are not formed).
        structure: "diagonal" or "block".

    Returns:
        {"final", "mean", "max": (N, H); "ppv", "mpv": (N, num_biases·H), the thresholds' blocks in order (absent
        without biases)}, in the dtype of ``h0``.
    """
    _check(terms, ends, h0, A, B, biases, structure)
    N, S, _ = terms.shape
    h, stepped = h0, [h0]
    for k in range(S):
        t = terms[:, k]  # (N, D)
        if structure == "diagonal":
            step = (t @ A) * h
        else:
            M = torch.einsum("nd,dbij->nbij", t, A)  # Σ_d t_d A_d, (N, H/2, 2, 2)
            step = (M @ h.view(N, -1, 2, 1)).view(N, -1)
        h = h + step + t @ B.t()
        stepped.append(h)
    states = torch.stack(stepped, dim=1)  # (N, S + 1, H)
    inside = (torch.arange(S + 1, device=h0.device).unsqueeze(0) <= ends.unsqueeze(1)).unsqueeze(-1)
    count = inside.sum(dim=1).to(h0.dtype)
    out = {
        "final": states[torch.arange(N, device=h0.device), ends],
        "mean": (states * inside).sum(dim=1) / count,
        "max": states.masked_fill(~inside, -torch.inf).amax(dim=1),
    }
    if biases is not None:
        ppv, mpv = [], []
        for bias in biases:
            above = (states > bias) & inside
            ppv.append(above.sum(dim=1).to(h0.dtype) / count)
            mpv.append(((states - bias) * above).sum(dim=1) / above.sum(dim=1).clamp(min=1).to(h0.dtype))
        out["ppv"], out["mpv"] = torch.cat(ppv, dim=1), torch.cat(mpv, dim=1)
    return out


_KERNELS: dict[str, Any] = {}  # numba's compiled kernels, by name


def _kernel():
    """The numba kernel, compiled on first use (and cached on disk by numba)."""
    if "fused" in _KERNELS:
        return _KERNELS["fused"]
    import numba

    @numba.njit(cache=True, nogil=True)
    def advance(t, x, y, nx, ny, ax, axy, ayx, ay, bx, by):
        # (nx, ny) = the state after one piece of increments t (D,): h + Σ_d t_d (A_d h + B_d), block by block
        n = x.shape[0]
        step = t[0]
        for j in range(n):
            nx[j] = x[j] + step * (ax[0, j] * x[j] + axy[0, j] * y[j] + bx[0, j])
            ny[j] = y[j] + step * (ayx[0, j] * x[j] + ay[0, j] * y[j] + by[0, j])
        for d in range(1, t.shape[0]):
            step = t[d]
            for j in range(n):
                nx[j] += step * (ax[d, j] * x[j] + axy[d, j] * y[j] + bx[d, j])
                ny[j] += step * (ayx[d, j] * x[j] + ay[d, j] * y[j] + by[d, j])

    @numba.njit(cache=True, nogil=True)
    def step_and_pool(
        terms,
        ends,
        x0,
        y0,
        ax,
        axy,
        ayx,
        ay,
        bx,
        by,
        biases_x,
        biases_y,
        mean_on,
        max_on,
        mpv_on,
        final_x,
        final_y,
        mean_x,
        mean_y,
        max_x,
        max_y,
        ppv_x,
        ppv_y,
        mpv_x,
        mpv_y,
    ):
        # One series at a time; its state (x, and y for the second unit of each 2x2 block) stays in cache. The inner
        # loops run over the units, contiguous, so the compiler vectorises them.
        N, S, D = terms.shape
        n = x0.shape[1]
        Q = biases_x.shape[0]
        x = np.empty(n, dtype=x0.dtype)
        y = np.empty(n, dtype=x0.dtype)
        nx = np.empty(n, dtype=x0.dtype)
        ny = np.empty(n, dtype=x0.dtype)
        cnt_x = np.empty((Q, n), dtype=x0.dtype)
        cnt_y = np.empty((Q, n), dtype=x0.dtype)
        sum_x = np.empty((Q, n), dtype=x0.dtype)  # the excess above each threshold, summed (for mpv)
        sum_y = np.empty((Q, n), dtype=x0.dtype)
        for s in range(N):
            x[:] = x0[s]
            y[:] = y0[s]
            mean_x[s] = 0.0
            mean_y[s] = 0.0
            max_x[s] = -np.inf
            max_y[s] = -np.inf
            cnt_x[:] = 0.0
            cnt_y[:] = 0.0
            sum_x[:] = 0.0
            sum_y[:] = 0.0
            end = ends[s]
            for k in range(end + 1):
                if k > 0:
                    advance(terms[s, k - 1], x, y, nx, ny, ax, axy, ayx, ay, bx, by)
                    x, nx = nx, x
                    y, ny = ny, y
                if mean_on:
                    for j in range(n):
                        mean_x[s, j] += x[j]
                        mean_y[s, j] += y[j]
                if max_on:
                    for j in range(n):
                        max_x[s, j] = max(max_x[s, j], x[j])
                        max_y[s, j] = max(max_y[s, j], y[j])
                for q in range(Q):
                    if mpv_on:
                        for j in range(n):
                            e = x[j] - biases_x[q, j]
                            if e > 0:
                                cnt_x[q, j] += 1.0
                                sum_x[q, j] += e
                            e = y[j] - biases_y[q, j]
                            if e > 0:
                                cnt_y[q, j] += 1.0
                                sum_y[q, j] += e
                    else:
                        for j in range(n):
                            if x[j] > biases_x[q, j]:
                                cnt_x[q, j] += 1.0
                            if y[j] > biases_y[q, j]:
                                cnt_y[q, j] += 1.0
            knots = end + 1.0
            final_x[s] = x
            final_y[s] = y
            for j in range(n):
                mean_x[s, j] /= knots
                mean_y[s, j] /= knots
            for q in range(Q):
                for j in range(n):
                    ppv_x[s, q, j] = cnt_x[q, j] / knots
                    ppv_y[s, q, j] = cnt_y[q, j] / knots
                    mpv_x[s, q, j] = sum_x[q, j] / max(cnt_x[q, j], 1.0)
                    mpv_y[s, q, j] = sum_y[q, j] / max(cnt_y[q, j], 1.0)

    @numba.njit(cache=True, nogil=True)
    def step_only(terms, ends, x0, y0, ax, axy, ayx, ay, bx, by, rows, states_x, states_y):
        # The same recurrence, the states at the knots asked for written out: state (s, k) to row rows[s, k] (-1:
        # not asked for); for the few series whose states give the thresholds.
        N, S, D = terms.shape
        n = x0.shape[1]
        x = np.empty(n, dtype=x0.dtype)
        y = np.empty(n, dtype=x0.dtype)
        nx = np.empty(n, dtype=x0.dtype)
        ny = np.empty(n, dtype=x0.dtype)
        for s in range(N):
            x[:] = x0[s]
            y[:] = y0[s]
            for k in range(S + 1):
                if 0 < k <= ends[s]:
                    advance(terms[s, k - 1], x, y, nx, ny, ax, axy, ayx, ay, bx, by)
                    x, nx = nx, x
                    y, ny = ny, y
                row = rows[s, k]
                if row >= 0:  # unit-major (n, rows): each unit's states in a row
                    states_x[:, row] = x
                    states_y[:, row] = y

    _KERNELS["fused"] = step_and_pool
    _KERNELS["states"] = step_only
    return step_and_pool


def _kernel_arrays(terms, ends, h0, A, B, structure):
    """The kernels' arguments as contiguous numpy arrays in the dtype of ``h0``: (terms, ends, x0, y0, the four
    entries of the 2×2 blocks (D, n) each, the offsets' two halves (D, n) each); a function splitting (…, H) into the
    blocks' first and second units; and one joining them back into the order of h. A diagonal A is read as 2×2
    blocks with zero off-diagonals (one unit of zeros appended where H is odd, and dropped again)."""
    dtype = h0.dtype
    H = h0.shape[1]
    pad = H % 2  # diagonal only (_check: a block structure has even H)

    def split(t):  # (..., H) -> the first and second units of each block
        a = t.detach().to(device="cpu", dtype=dtype).numpy()
        if pad:
            a = np.concatenate([a, np.zeros(a.shape[:-1] + (1,), dtype=a.dtype)], axis=-1)
        return np.ascontiguousarray(a[..., 0::2]), np.ascontiguousarray(a[..., 1::2])

    def units(px, py):  # units in the order of h: (2j, 2j + 1) from the blocks' (x_j, y_j)
        joined = np.stack([px, py], axis=-1).reshape(*px.shape[:-1], 2 * px.shape[-1])
        return joined[..., :H]

    if structure == "block":
        Ab = A.detach().to(device="cpu", dtype=dtype).numpy()  # (D, n, 2, 2)
        entries = tuple(np.ascontiguousarray(Ab[:, :, i, j]) for i, j in ((0, 0), (0, 1), (1, 0), (1, 1)))
    else:
        ax, ay = split(A)
        entries = (ax, np.zeros_like(ax), np.zeros_like(ax), ay)
    arrays = (
        np.ascontiguousarray(terms.detach().to(device="cpu", dtype=dtype).numpy()),
        np.ascontiguousarray(ends.detach().cpu().numpy().astype(np.int64)),
        *split(h0),
        *entries,
        *split(B.t()),
    )
    return arrays, split, units


def fused_states(
    terms: torch.Tensor,
    ends: torch.Tensor,
    h0: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    structure: str,
    points: torch.Tensor | None = None,
) -> torch.Tensor:
    """The states of the recurrence by the compiled loop (arguments as `reference_features`), on the inputs' device.

    Arguments:
        points: None (default): every state, (N, S + 1, H), constant after each series' end (as
            `LinearCDE.hidden_states`); or (P, 2) distinct (series, knot) pairs: the states there only, unit-major,
            (H, P) (each unit's states in a row, the layout its quantiles are read in).
    """
    _check(terms, ends, h0, A, B, None, structure)
    _kernel()
    arrays, _, _ = _kernel_arrays(terms, ends, h0, A, B, structure)
    N, S = terms.shape[:2]
    H, n = h0.shape[1], arrays[2].shape[1]
    if points is None:
        rows = np.arange(N * (S + 1), dtype=np.int64).reshape(N, S + 1)
    else:
        pairs = points.detach().cpu().long().numpy()
        rows = np.full((N, S + 1), -1, dtype=np.int64)
        rows[pairs[:, 0], pairs[:, 1]] = np.arange(len(pairs))
    count = int(rows.max()) + 1 if rows.size else 0
    states_x, states_y = (np.empty((n, count), dtype=arrays[2].dtype) for _ in range(2))
    _KERNELS["states"](*arrays, rows, states_x, states_y)
    by_oscillator = np.empty((n, 2, count), dtype=states_x.dtype)  # rows (x_j, y_j) = units (2j, 2j + 1), as in h
    by_oscillator[:, 0], by_oscillator[:, 1] = states_x, states_y
    states = torch.from_numpy(by_oscillator.reshape(2 * n, count)[:H]).to(h0.device)
    return states.t().reshape(N, S + 1, H) if points is None else states


def fused_features(
    terms: torch.Tensor,
    ends: torch.Tensor,
    h0: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    biases: torch.Tensor | None,
    structure: str,
    features: tuple[str, ...] = POOLED_FEATURES,
) -> dict[str, torch.Tensor]:
    """`reference_features` by the fused kernel: the same arguments and results (those named in ``features`` only:
    the others are not computed), on the CPU (the result is on the inputs' device), in the dtype of ``h0``; the
    states are never stored.

    Raises:
        ImportError: numba is not installed (`fused_available`).
        ValueError: an unknown feature, or "ppv"/"mpv" without biases.
    """
    _check(terms, ends, h0, A, B, biases, structure)
    unknown = [f for f in features if f not in POOLED_FEATURES]
    if unknown:
        raise ValueError(f"features must be among {POOLED_FEATURES}, got {unknown}")
    if biases is None and ({"ppv", "mpv"} & set(features)):
        raise ValueError("features 'ppv' and 'mpv' need biases")
    if not ({"ppv", "mpv"} & set(features)):
        biases = None  # no thresholds to count against
    kernel = _kernel()
    arrays, split, units = _kernel_arrays(terms, ends, h0, A, B, structure)
    N, H, n = terms.shape[0], h0.shape[1], arrays[2].shape[1]
    bias_x, bias_y = split(torch.zeros(0, H, dtype=h0.dtype) if biases is None else biases)
    Q = bias_x.shape[0]
    dtype = arrays[2].dtype
    outputs = [np.empty((N, n), dtype=dtype) for _ in range(6)] + [np.empty((N, Q, n), dtype=dtype) for _ in range(4)]
    kernel(*arrays, bias_x, bias_y, "mean" in features, "max" in features, "mpv" in features, *outputs)
    final_x, final_y, mean_x, mean_y, max_x, max_y, ppv_x, ppv_y, mpv_x, mpv_y = outputs

    device = h0.device
    made = {
        "final": lambda: units(final_x, final_y),
        "mean": lambda: units(mean_x, mean_y),
        "max": lambda: units(max_x, max_y),
        "ppv": lambda: units(ppv_x, ppv_y).reshape(N, Q * H),
        "mpv": lambda: units(mpv_x, mpv_y).reshape(N, Q * H),
    }
    return {name: torch.from_numpy(made[name]()).to(device) for name in features}
