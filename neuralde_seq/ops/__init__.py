"""Numerical kernels shared by the models and solvers, each fast path beside the reference it must equal.

- `causal_conv`: causal convolution on a grid (direct and FFT; full channel mixing or
  depthwise) and at irregular times (direct and factorised). Used by CKConv and CCNN.
- `exact_fast_weights`: the exact solver of fast weight fields on inputs constant per
  knot interval (`solve_exact`, behind ``SolverOptions(method="exact")`` and the default ``method="auto"``
  wherever `exact_applies`) and its reference, a loop over
  ``rule.exact_step`` (`solve_exact_reference`).
- `affine_recurrence`: the affine (Hebb, Oja, pre-Delta) steps over a sequence and
  their hand-written adjoint, the inner loop of `solve_exact`.
- `linear_scan`: linear recurrences h_t = M_t h_{t−1} + b_t with diagonal, block-diagonal, dense or
  diagonal-plus-low-rank M_t by a
  parallel prefix scan (`parallel_scan`) beside the sequential loop (`sequential_scan`); used by the structured
  linear CDEs.

tests/test_ops.py, tests/test_exact.py and tests/test_linear_scan.py compare every fast path with its reference in
float64.
"""
from .causal_conv import causal_conv, causal_conv_direct, causal_conv_fft, irregular_causal_conv
from .exact_fast_weights import exact_applies, solve_exact, solve_exact_reference
from .linear_scan import parallel_scan, sequential_scan

__all__ = ["causal_conv", "causal_conv_direct", "causal_conv_fft", "irregular_causal_conv", "exact_applies",
           "solve_exact", "solve_exact_reference", "parallel_scan", "sequential_scan"]
