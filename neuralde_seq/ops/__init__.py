"""Numerical kernels shared by the models and solvers, each fast path beside the reference it must equal.

- `causal_conv`: causal convolution on a grid (direct and FFT; full channel mixing or
  depthwise) and at irregular times (direct and factorised). Used by CKConv and CCNN.
- `exact_fast_weights`: the exact solver of fast weight fields on inputs constant per
  knot interval (`solve_exact`, behind ``SolverOptions(method="exact")`` and the default ``method="auto"``
  wherever `exact_applies`) and its reference, a loop over
  ``rule.exact_step`` (`solve_exact_reference`).
- `affine_recurrence`: the affine (Hebb, Oja, pre-Delta) steps over a sequence and
  their hand-written adjoint, the inner loop of `solve_exact`.
- `chunked_delta`: the same steps in the chunked WY / UT form (blocks of steps as matmuls), behind
  ``SolverOptions(exact_scan="chunked")``.
- `affine_rk4`: a fixed-step Runge-Kutta solve of a fast weight field whose rate is affine in W (Hebb, Oja,
  pre-Delta in CDE form) as composed affine step maps W ↦ W P + Q, built for all steps of a segment at once; the
  default where it applies (``SolverOptions(affine_steps=True)``), beside the per-step loop of `neuralde_seq.fixed_step`.
- `linear_scan`: linear recurrences h_t = M_t h_{t−1} + b_t with diagonal, block-diagonal, dense or
  diagonal-plus-low-rank M_t by a
  parallel prefix scan (`parallel_scan`) beside the sequential loop (`sequential_scan`); used by the structured
  linear CDEs, and (with a matrix state, ``columns=True``) by the fast weight paths above under
  ``SolverOptions(scan="parallel")``, the default on a GPU.

tests/test_ops.py, tests/test_exact.py, tests/test_chunked_delta.py, tests/test_affine_rk4.py and
tests/test_linear_scan.py compare every fast path with its reference in float64.
"""
from .causal_conv import causal_conv, causal_conv_direct, causal_conv_fft, irregular_causal_conv
from .exact_fast_weights import exact_applies, solve_exact, solve_exact_reference
from .linear_scan import parallel_scan, sequential_scan

__all__ = ["causal_conv", "causal_conv_direct", "causal_conv_fft", "irregular_causal_conv", "exact_applies",
           "solve_exact", "solve_exact_reference", "parallel_scan", "sequential_scan"]
