"""Basis-function expansions of parameters in depth or time, and projections between bases.

Paper 004 (Queiruga, Erichson, Hodgkinson & Mahoney, "Stateful ODE-Nets using Basis Function Expansions")
writes a weight that changes with depth (or time) u as a linear combination of K basis functions (Eq. 4):

    θ(u) = Σ_i c_i φ_i(u),        u ∈ [0, 1],

with coefficients c_i of the weight's own shape. A model maps its own depth or time range onto the unit
interval. Bases (`BASIS_NAMES`, made by `make_basis`):

- ``piecewise_constant`` (n pieces): φ_i = 1 on [i/n, (i + 1)/n) (paper Eq. 5). With the forward Euler method,
  n steps and n pieces, an ODE-Net whose weights use it is a residual network with n layers.
- ``piecewise_linear`` (n >= 2 hat functions): φ_j(u) = max(0, 1 − |(n − 1) u − j|), the hat around the node
  j/(n − 1) of a uniform grid (paper Eq. 6): c_j is the value of θ at the node.
- ``legendre`` (degree n − 1): φ_k(u) = √(2k + 1) P_k(2u − 1), orthonormal on [0, 1].
- ``fourier`` (n = 2m + 1 odd): 1, √2 cos(2πku), √2 sin(2πku) for k = 1..m, in that order; orthonormal on
  [0, 1]. An even n is refused (a cosine without its sine would make the expansion depend on the phase).

A point on the breakpoint between two pieces of a piecewise-constant basis belongs to the piece on its right
(``side="right"``, the default) or on its left (``side="left"``); u = 1 belongs to the last piece and u = 0 to
the first whichever side is asked for. A fixed-step solver reads the stage at the end of a step with
``side="left"``, so a step that lies within one piece only ever sees that piece's weights. Points within a few
units of rounding of a breakpoint are taken to be on it (1/49 · 49 is 0.9999999999999999 in float64).

**Projection** (paper Eq. 8 and App. C.1). The L2 projection of θ(u) = Σ_i c_i φ_i(u) (``source``) onto
``target`` (functions ψ_j) minimises ∫_0^1 (θ − Σ_j c'_j ψ_j)² du: the normal equations are

    M c' = R c,        M_jk = ∫ ψ_j ψ_k du,        R_ji = ∫ ψ_j φ_i du,

solved once for the (n_target × n_source) matrix A = M⁻¹ R (float64), then applied to every scalar component
of the coefficients. The integrals use Gauss-Legendre quadrature on every cell between consecutive breakpoints
of the two bases (so a piecewise integrand is a polynomial on each cell) with enough points to be exact for the
integrand's degree: m points integrate degree 2m − 1 exactly. Fourier functions are not polynomials: cells are
cut to at most half a period of the integrand's highest frequency, and 12 points more than the polynomial part
needs bring the error below float64 rounding (about 1e-19 for a half-period). Projection onto a space that
contains the source function reproduces it (to rounding); onto a smaller one it is the best approximation in
L2: the residual is orthogonal to the target space.

**Point clouds** (paper Eq. 13, for running statistics): `fit_to_points` fits coefficients to values observed at
scattered points by least squares.

**Modules**: `BasisLinear` and `BasisConv1d` expand weight and bias in a basis and take the depth u with every
call; `project_module` returns a copy of any module with every expanded tensor of its `BasisModule` parts
projected onto another basis (compression to fewer functions, refinement to more).

**Rooms**: `functions` (the bases, `make_basis`, `expand`), `projection` (quadrature, projections, fits to
points), `layers` (the expanded modules and `project_module`) and `time_range` (weights that change in time:
`check_time_range`, `time_position`); every public name is importable from ``neuralde_seq.basis``.
"""

from .functions import (
    BASIS_NAMES,
    Basis,
    Fourier,
    Legendre,
    PiecewiseConstant,
    PiecewiseLinear,
    expand,
    make_basis,
)
from .layers import BasisConv1d, BasisLinear, BasisModule, project_module
from .projection import fit_to_points, gram_matrix, project, projection_matrix
from .time_range import BasisRangeWarning, check_time_range, time_position

__all__ = [
    "BASIS_NAMES",
    "Basis",
    "PiecewiseConstant",
    "PiecewiseLinear",
    "Legendre",
    "Fourier",
    "make_basis",
    "expand",
    "gram_matrix",
    "projection_matrix",
    "project",
    "fit_to_points",
    "BasisModule",
    "BasisLinear",
    "BasisConv1d",
    "project_module",
    "BasisRangeWarning",
    "check_time_range",
    "time_position",
]
