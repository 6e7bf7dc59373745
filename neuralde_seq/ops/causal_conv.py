"""Causal convolutions along time, each with a reference implementation and a fast one.

Used by CKConv (`neuralde_seq.models.ckconv`) and CCNN's separable FlexConv
(`neuralde_seq.models.ccnn`). Sequences are batch first, ``(B, T, C)``, as everywhere in the toolkit;
a kernel's last axis is the lag k (k = 0: the current step).

On a grid (`causal_conv`), with zeros before the start,

    full channel mixing (CKConv):   y[b, t, o] = Σ_c Σ_{k=0}^{min(t, K−1)} w[o, c, k] · x[b, t − k, c]
    depthwise (FlexConv):           y[b, t, c] =     Σ_{k=0}^{min(t, K−1)} w[c, k]    · x[b, t − k, c]

the kernel's rank telling the two apart. ``method="direct"`` (`causal_conv_direct`, ``conv1d``) is
the reference; ``method="fft"`` (`causal_conv_fft`, the convolution theorem) costs
O(T log T) instead of O(T · K) and agrees to rounding.

At irregular times (`irregular_causal_conv`), the kernel a continuous function ψ of the time
difference,

    y[b, i] = Σ_{j: t_j ≤ t_i} ψ(t_i − t_j) · x[b, j]      (observed entries of x only),

with ψ(Δ) = W h(Δ) + b, h a feature map (a kernel network's hidden layers). ``method="direct"`` forms ψ at
every pair (the reference, memory O(B T² C_out C_in)); ``method="factorised"`` evaluates h once per
distinct Δ and contracts through the features without forming the per-pair kernel (memory
O(B T² K)). The tests (tests/test_ops.py) compare each fast path with its reference in float64, values
and gradients, and both with a plain loop over the formula.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

__all__ = ["causal_conv", "causal_conv_direct", "causal_conv_fft", "irregular_causal_conv", "CONV_METHODS",
           "IRREGULAR_METHODS"]

CONV_METHODS = ("direct", "fft")
IRREGULAR_METHODS = ("direct", "factorised")


def _check_grid(x: torch.Tensor, kernel: torch.Tensor) -> None:
    if x.dim() != 3:
        raise ValueError(f"x must have shape (B, T, C), got {tuple(x.shape)}")
    if kernel.dim() == 3:
        if kernel.shape[1] != x.shape[-1]:
            raise ValueError(f"kernel (C_out, C_in, K) has C_in = {kernel.shape[1]} but x has {x.shape[-1]} channels")
    elif kernel.dim() == 2:
        if kernel.shape[0] != x.shape[-1]:
            raise ValueError(f"a depthwise kernel must have shape ({x.shape[-1]}, K), got {tuple(kernel.shape)}")
    else:
        raise ValueError(f"kernel must have shape (C_out, C_in, K) or (C, K), got {tuple(kernel.shape)}")
    if kernel.shape[-1] < 1:
        raise ValueError("kernel must have at least one lag")


def causal_conv_direct(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """The reference causal convolution, by ``conv1d`` (module docstring).

    Arguments:
        x: (B, T, C_in) input.
        kernel: (C_out, C_in, K) for full channel mixing, or (C_in, K) for a depthwise convolution;
            ``kernel[..., k]`` is the weight of lag k. Lags k >= T never reach an output and are dropped.

    Returns:
        (B, T, C_out) (C_out = C_in when depthwise).
    """
    _check_grid(x, kernel)
    length = x.shape[1]
    kernel = kernel[..., :length]
    k = kernel.shape[-1]
    # conv1d cross-correlates, out[t] = Σ_i w[i] x_pad[t + i]; with K − 1 zeros padded on the left,
    # x_pad[t + i] = x[t + i − (K − 1)], so w[i] is the weight of lag K − 1 − i: flip the kernel.
    padded = F.pad(x.transpose(1, 2), (k - 1, 0))
    if kernel.dim() == 2:
        y = F.conv1d(padded, kernel.flip(-1).unsqueeze(1), groups=kernel.shape[0])
    else:
        y = F.conv1d(padded, kernel.flip(-1))
    return y.transpose(1, 2)


def causal_conv_fft(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """The same causal convolution as `causal_conv_direct` (same arguments and result), by FFT.

    Both signals are zero-padded to the next power of two >= T + K − 1, so the circular convolution equals
    the linear one on the T outputs kept.

    Arguments:
        x: (B, T, C_in) input.
        kernel: (C_out, C_in, K) for full channel mixing, or (C_in, K) for a depthwise convolution;
            ``kernel[..., k]`` is the weight of lag k. Lags k >= T never reach an output and are dropped.

    Returns:
        (B, T, C_out) (C_out = C_in when depthwise).
    """
    _check_grid(x, kernel)
    length = x.shape[1]
    kernel = kernel[..., :length]
    n_fft = 1 << (length + kernel.shape[-1] - 2).bit_length()  # smallest power of two >= T + K − 1
    x_f = torch.fft.rfft(x.transpose(1, 2), n=n_fft)  # (B, C_in, F)
    k_f = torch.fft.rfft(kernel, n=n_fft)
    if kernel.dim() == 2:
        y_f = x_f * k_f
    else:
        # Σ_c X_c(f) K_oc(f), accumulated channel by channel: on CPU several times faster than a complex
        # einsum/bmm, which batches over frequencies with tiny matrices.
        y_f = x_f[:, 0:1] * k_f[:, 0]
        for c in range(1, x_f.shape[1]):
            y_f = y_f + x_f[:, c:c + 1] * k_f[:, c]
    return torch.fft.irfft(y_f, n=n_fft)[..., :length].transpose(1, 2)


def causal_conv(x: torch.Tensor, kernel: torch.Tensor, method: str = "direct") -> torch.Tensor:
    """Causal convolution on a grid by ``method``.

    Arguments:
        x: (B, T, C_in) input.
        kernel: (C_out, C_in, K) for full channel mixing, or (C_in, K) for a depthwise convolution;
            ``kernel[..., k]`` is the weight of lag k.
        method: "direct" (default, `causal_conv_direct`) or "fft" (`causal_conv_fft`).

    Returns:
        (B, T, C_out) (C_out = C_in when depthwise).

    Raises:
        ValueError: an unknown method, or shapes that do not fit.
    """
    if method == "direct":
        return causal_conv_direct(x, kernel)
    if method == "fft":
        return causal_conv_fft(x, kernel)
    raise ValueError(f"method must be one of {CONV_METHODS}, got {method!r}")


def irregular_causal_conv(times: torch.Tensor, x: torch.Tensor, observed: torch.Tensor,
                          features: Callable[[torch.Tensor], torch.Tensor], weight: torch.Tensor,
                          bias: torch.Tensor | None = None, method: str = "factorised") -> torch.Tensor:
    """y[b, i] = Σ_{j: t_j ≤ t_i} ψ(t_i − t_j) x̃[b, j], ψ(Δ) = weight · features(Δ) + bias (module docstring).

    Arguments:
        times: (B, T) time of every point (need not be sorted: only differences matter).
        x: (B, T, C_in); entries that are not observed may hold anything, NaN included.
        observed: (B, T, C_in) bool: x̃ is x where observed and 0 elsewhere; a point with no observed entry
            contributes nothing.
        features: maps time differences Δ (U,), in x's dtype, to features (U, K).
        weight: (C_out, C_in, K).
        bias: (C_out, C_in), or None (default) for no bias.
        method: "factorised" (fast; no gradient reaches ``times``) or "direct" (the reference).

    Returns:
        (B, T, C_out): the sum at every point, observed or not.
    """
    if method not in IRREGULAR_METHODS:
        raise ValueError(f"method must be one of {IRREGULAR_METHODS}, got {method!r}")
    x = torch.where(observed, x, torch.zeros((), dtype=x.dtype, device=x.device))
    source = observed.any(-1)  # (B, S)
    delta = times.unsqueeze(2) - times.unsqueeze(1)  # (B, Q, S): t_i − t_j
    pairs = (delta >= 0) & source.unsqueeze(1)
    if method == "direct":
        hidden = features(delta.reshape(-1).to(x.dtype)).view(*delta.shape, -1)  # (B, Q, S, K)
        kernel = torch.einsum("bqsk,ock->bqsoc", hidden, weight)
        if bias is not None:
            kernel = kernel + bias
        kernel = kernel * pairs.to(x.dtype)[..., None, None]
        return torch.einsum("bqsoc,bsc->bqo", kernel, x)
    # Features once per distinct time difference (data on a grid repeat them a lot); pairs that do not
    # contribute point to an extra row of zeros.
    distinct, inverse = torch.unique(delta[pairs].to(x.dtype), return_inverse=True)
    table = features(distinct)
    table = torch.cat([table, table.new_zeros(1, table.shape[-1])])
    index = torch.full(pairs.shape, distinct.shape[0], dtype=torch.long, device=pairs.device)
    index[pairs] = inverse
    hidden = table[index]  # (B, Q, S, K), zero where t_j > t_i or j contributes nothing
    # Σ_j (W h_ij + b) x_j = W (Σ_j h_ij x_jᵀ) + b Σ_j x_j, without the (B, Q, S, C_out, C_in) kernel.
    y = torch.einsum("bqkc,ock->bqo", torch.einsum("bqsk,bsc->bqkc", hidden, x), weight)
    if bias is not None:
        y = y + torch.einsum("bqs,bsc,oc->bqo", pairs.to(x.dtype), x, bias)
    return y
