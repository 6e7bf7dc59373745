"""Numerical kernels of model layers, each fast path beside the reference it must equal (the kernels that only
solving uses are in `neuralde_seq.solvers`).

- `causal_conv`: causal convolution on a grid (direct and FFT; full channel mixing or
  depthwise) and at irregular times (direct and factorised). Used by CKConv and CCNN.
- `reservoir_features`: the random-feature reservoirs' features in one fused pass over each series.

tests/test_ops.py and tests/test_reservoir_features.py compare every fast path with its reference in float64.
"""

from .causal_conv import causal_conv, causal_conv_direct, causal_conv_fft, irregular_causal_conv

__all__ = ["causal_conv", "causal_conv_direct", "causal_conv_fft", "irregular_causal_conv"]
