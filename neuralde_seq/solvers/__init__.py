"""How a differential equation is solved: the methods and gradient methods as objects, the options that hold
them, the one solve entry, and every kernel that only solving uses, each fast path beside its reference.

- `methods`: the method objects (`Auto`, `RK4`, `Dopri5`, `Exact`, ...) and gradient objects (`Checkpoint`,
  `Adjoint`, `Backprop`), each carrying and checking its own options, knowing what it applies to and how it solves;
- `options`: `SolverOptions` (a method and a gradient object), `parse_solver` (the one reader of the spellings
  the edges give), `solve` and `evolve_over_gaps`;
- `fixed_step`: our explicit Runge-Kutta loop (the reference of the fixed-step methods) and, beside it,
  `affine_rk4`: the same steps of a fast weight field with an affine rule as composed affine maps;
- `torchdiffeq_solves`: the adaptive methods and the continuous adjoint, through torchdiffeq;
- `exact_fast_weights`: the closed-form solver of fast weight fields (`solve_exact`) beside its reference
  (`solve_exact_reference`); its recurrences `affine_recurrence` (sequential, hand-written adjoint) and
  `chunked_delta` (the chunked WY / UT form);
- `linear_scan`: linear recurrences by a parallel prefix scan (`parallel_scan`) beside the sequential loop
  (`sequential_scan`), used by the fast weight paths above and by the structured linear CDEs.

tests/test_solvers.py, tests/test_solver_choices.py, tests/test_exact.py, tests/test_chunked_delta.py,
tests/test_affine_rk4.py and tests/test_linear_scan.py compare every fast path with its reference in float64.
"""
from .options import *  # noqa: F401,F403
from .options import __all__
