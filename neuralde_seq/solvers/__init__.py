"""How a differential equation is solved: the methods and gradient methods as objects, the options that hold
them, the one solve entry, and every kernel that only solving uses, each fast path beside its reference.

- `methods`: the method objects (`Auto`, `RK4`, `Dopri5`, `Exact`, ...) and gradient objects (`Checkpoint`,
  `Adjoint`, `Backprop`), each carrying and checking its own options, knowing what it applies to and how it solves;
- `options`: `SolverOptions` (a method and a gradient object) and `parse_solver` (the one reader of the spellings
  the edges give: names, mappings, the stored ``{"type": "RK4", **fields}``);
- `integrate`: `solve`, the one solve entry, and `evolve_over_gaps`;
- `fixed_step`: our explicit Runge-Kutta loop (the reference of the fixed-step methods) and, beside it,
  `affine_rk4`: the same steps of a fast weight field with an affine rule as composed affine maps;
- `torchdiffeq_solves`: the adaptive methods and the continuous adjoint, through torchdiffeq;
- `exact_fast_weights`: the closed-form solver of fast weight fields (`solve_exact`) beside its reference
  (`solve_exact_reference`); its recurrences `affine_recurrence` (sequential, hand-written adjoint) and
  `chunked_delta` (the chunked WY / UT form);
- `linear_scan`: linear recurrences by a parallel prefix scan (`parallel_scan`) beside the sequential loop
  (`sequential_scan`), used by the fast weight paths above and by the structured linear CDEs.

A new method is a `Method` subclass in `methods` (its options as checked fields, `refusal` if it does not solve
every field, `solve` calling its kernel, a module of its own here) and its name in `METHODS`; nothing else names it.
tests/test_solvers.py, tests/test_solver_choices.py, tests/test_exact.py, tests/test_chunked_delta.py,
tests/test_affine_rk4.py and tests/test_linear_scan.py compare every fast path with its reference in float64.
"""

from .integrate import Dynamics, evolve_over_gaps, solve
from .methods import (
    DEFAULT_MAX_STEPS,
    GRADIENTS,
    METHODS,
    RK4,
    Adaptive,
    AdaptiveHeun,
    Adjoint,
    Auto,
    Backprop,
    Bosh3,
    Checkpoint,
    Choice,
    Dopri5,
    Dopri8,
    Euler,
    Exact,
    Fehlberg2,
    FixedStep,
    Gradient,
    Heun2,
    Heun3,
    Method,
    Midpoint,
    NonFiniteSolveWarning,
)
from .options import OPTION_NAMES, SolverOptions, parse_solver, resolve_method, solver_options
from .torchdiffeq_solves import ADJOINT_RECONSTRUCTION_TOLERANCE, AdjointReconstructionWarning

__all__ = [
    "SolverOptions",
    "parse_solver",
    "solver_options",
    "resolve_method",
    "OPTION_NAMES",
    "Dynamics",
    "solve",
    "evolve_over_gaps",
    "Choice",
    "Method",
    "Auto",
    "FixedStep",
    "RK4",
    "Heun3",
    "Heun2",
    "Midpoint",
    "Euler",
    "Adaptive",
    "Dopri5",
    "Dopri8",
    "Bosh3",
    "Fehlberg2",
    "AdaptiveHeun",
    "Exact",
    "Gradient",
    "Checkpoint",
    "Adjoint",
    "Backprop",
    "METHODS",
    "GRADIENTS",
    "DEFAULT_MAX_STEPS",
    "NonFiniteSolveWarning",
    "AdjointReconstructionWarning",
    "ADJOINT_RECONSTRUCTION_TOLERANCE",
]
