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
"""

from __future__ import annotations

import copy
import functools
import math
from typing import TypeVar, overload

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .user_warnings import warn_user

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

BASIS_NAMES = ("piecewise_constant", "piecewise_linear", "legendre", "fourier")
SIDES = ("right", "left")
# Extra Gauss points per cell for integrands with a Fourier factor, on cells of at most half a period.
_FOURIER_EXTRA_POINTS = 12


def _check_count(name: str, value, smallest: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < smallest:
        raise ValueError(f"{name} must be an integer >= {smallest}, got {value!r}")
    return int(value)


def _snap(v: torch.Tensor) -> torch.Tensor:
    """v with entries within a few units of rounding of an integer replaced by that integer."""
    nearest = torch.round(v)
    tolerance = 8 * torch.finfo(v.dtype).eps * v.abs().clamp(min=1.0)
    return torch.where((v - nearest).abs() <= tolerance, nearest, v)


class Basis:
    """A set of ``num_bases`` functions on the unit interval (module docstring).

    Calling a basis evaluates every function: ``basis(u)`` has shape (*u.shape, num_bases), in u's dtype and on
    its device. Bases are immutable values: equal when of the same kind and size, hashable.

    Arguments:
        num_bases: the number of functions n.
    """

    name = ""
    smallest = 1

    def __init__(self, num_bases: int):
        self.num_bases = _check_count("num_bases", num_bases, self.smallest)

    # ---- what the quadrature needs ----
    @property
    def polynomial_degree(self) -> int:
        """The degree of the functions on each piece (of their polynomial factor, for Fourier)."""
        raise NotImplementedError

    @property
    def frequency(self) -> int:
        """The highest frequency of a trigonometric factor (0: polynomials on every piece)."""
        return 0

    def breakpoints(self) -> np.ndarray:
        """The points of [0, 1] between which every function is smooth, 0 and 1 included (float64, sorted)."""
        return np.array([0.0, 1.0])

    # ---- evaluation ----
    def __call__(self, u, side: str = "right") -> torch.Tensor:
        """The functions at u.

        Arguments:
            u: a floating point tensor of any shape with entries in [0, 1] (a Python number becomes a float64
                tensor).
            side: "right" (default) or "left": which piece a point on a breakpoint of a piecewise-constant basis
                belongs to (module docstring); continuous bases ignore it.

        Returns:
            (*u.shape, num_bases) in u's dtype and on its device.

        Raises:
            TypeError: u is not a floating point tensor or a number.
            ValueError: an entry of u is NaN or outside [0, 1] (by more than rounding), or an unknown ``side``.
        """
        if isinstance(u, (int, float)) and not isinstance(u, bool):
            u = torch.tensor(float(u), dtype=torch.float64, device="cpu")  # a number: evaluated on the host
        if not isinstance(u, torch.Tensor) or not u.is_floating_point():
            raise TypeError(
                f"u must be a floating point tensor (or a number), got "
                f"{u.dtype if isinstance(u, torch.Tensor) else type(u).__name__}"
            )
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        tolerance = 8 * torch.finfo(u.dtype).eps
        outside = ~((u >= -tolerance) & (u <= 1 + tolerance))  # NaN included
        if bool(outside.any()):
            bad = u[outside].flatten()[0].item()
            raise ValueError(
                f"u must lie in [0, 1] (the basis lives on the unit interval: map the model's depth or "
                f"time range onto it), got {bad!r}"
            )
        return self._evaluate(u.clamp(0.0, 1.0), side)

    def _evaluate(self, u: torch.Tensor, side: str) -> torch.Tensor:
        raise NotImplementedError

    def resized(self, num_bases: int) -> Basis:
        """The same kind of basis with ``num_bases`` functions.

        Arguments:
            num_bases: the new number of functions.

        Returns:
            A new `Basis`.
        """
        return type(self)(num_bases)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.num_bases == self.num_bases

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.num_bases))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.num_bases})"


class PiecewiseConstant(Basis):
    """n indicator functions of the pieces [i/n, (i + 1)/n) (paper Eq. 5).

    Arguments:
        num_bases: the number of pieces n >= 1.
    """

    name = "piecewise_constant"

    @property
    def polynomial_degree(self) -> int:
        return 0

    def breakpoints(self) -> np.ndarray:
        return np.linspace(0.0, 1.0, self.num_bases + 1)

    def _evaluate(self, u, side):
        n = self.num_bases
        v = _snap(u * n)
        piece = torch.floor(v) if side == "right" else torch.ceil(v) - 1
        piece = piece.clamp(0, n - 1).long()
        return F.one_hot(piece, n).to(u.dtype)


class PiecewiseLinear(Basis):
    """n >= 2 hat functions on the uniform grid of nodes j/(n − 1) (paper Eq. 6): c_j = θ(j/(n − 1)).

    Arguments:
        num_bases: the number of nodes n >= 2.
    """

    name = "piecewise_linear"
    smallest = 2

    @property
    def polynomial_degree(self) -> int:
        return 1

    def breakpoints(self) -> np.ndarray:
        return np.linspace(0.0, 1.0, self.num_bases)

    def _evaluate(self, u, side):
        nodes = torch.arange(self.num_bases, dtype=u.dtype, device=u.device)
        return (1 - (u.unsqueeze(-1) * (self.num_bases - 1) - nodes).abs()).clamp(min=0)


class Legendre(Basis):
    """Legendre polynomials of degree 0..n − 1, orthonormal on [0, 1]: φ_k(u) = √(2k + 1) P_k(2u − 1).

    Arguments:
        num_bases: the number of polynomials n >= 1.
    """

    name = "legendre"

    @property
    def polynomial_degree(self) -> int:
        return self.num_bases - 1

    def _evaluate(self, u, side):
        x = 2 * u - 1
        values = [torch.ones_like(x)]
        if self.num_bases > 1:
            values.append(x)
        for k in range(1, self.num_bases - 1):  # Bonnet's recursion (k + 1) P_{k+1} = (2k + 1) x P_k − k P_{k−1}
            values.append(((2 * k + 1) * x * values[k] - k * values[k - 1]) / (k + 1))
        scale = torch.sqrt(torch.arange(self.num_bases, dtype=u.dtype, device=u.device) * 2 + 1)
        return torch.stack(values, -1) * scale


class Fourier(Basis):
    """The constant and m sine/cosine pairs, orthonormal on [0, 1]: 1, √2 cos(2πku), √2 sin(2πku), k = 1..m.

    Arguments:
        num_bases: n = 2m + 1, odd.
    """

    name = "fourier"

    def __init__(self, num_bases: int):
        super().__init__(num_bases)
        if self.num_bases % 2 == 0:
            raise ValueError(
                f"num_bases of a Fourier basis must be odd (the constant and whole sine/cosine pairs), got {num_bases}"
            )

    @property
    def polynomial_degree(self) -> int:
        return 0

    @property
    def frequency(self) -> int:
        return (self.num_bases - 1) // 2

    def _evaluate(self, u, side):
        values = [torch.ones_like(u)]
        for k in range(1, self.frequency + 1):
            angle = (2 * math.pi * k) * u
            values += [math.sqrt(2) * torch.cos(angle), math.sqrt(2) * torch.sin(angle)]
        return torch.stack(values, -1)


_CLASSES = {cls.name: cls for cls in (PiecewiseConstant, PiecewiseLinear, Legendre, Fourier)}


def make_basis(basis, num_bases: int | None = None) -> Basis:
    """A basis from its name and size, or a `Basis` itself.

    Arguments:
        basis: one of `BASIS_NAMES` (hyphens may stand for underscores), or a `Basis`.
        num_bases: the number of functions; required with a name, and if given with a `Basis` it must match
            (use ``basis.resized(n)`` to change it).

    Returns:
        The `Basis`.

    Raises:
        ValueError: an unknown name, a missing or mismatched ``num_bases``, or a size the kind refuses.
        TypeError: ``basis`` is neither a name nor a `Basis`.
    """
    if isinstance(basis, Basis):
        if num_bases is not None and num_bases != basis.num_bases:
            raise ValueError(f"num_bases={num_bases!r} contradicts the basis {basis!r}: give one of the two")
        return basis
    if not isinstance(basis, str):
        raise TypeError(f"basis must be one of {BASIS_NAMES} or a Basis, got {type(basis).__name__}")
    key = basis.replace("-", "_")
    if key not in _CLASSES:
        raise ValueError(f"basis must be one of {BASIS_NAMES}, got {basis!r}")
    if num_bases is None:
        raise ValueError(f"num_bases is required with basis={basis!r}")
    return _CLASSES[key](num_bases)


def expand(coefficients: torch.Tensor, basis: Basis, u, side: str = "right") -> torch.Tensor:
    """θ(u) = Σ_i φ_i(u) c_i.

    Arguments:
        coefficients: (n, *shape), the bases along dim 0.
        basis: the `Basis` (n = ``basis.num_bases``).
        u: the points, a tensor of any shape S (or a number), entries in [0, 1].
        side: see `Basis.__call__`.

    Returns:
        (*S, *shape) in the coefficients' dtype.

    Raises:
        ValueError: the coefficients' first dimension is not n (or as `Basis.__call__`).
    """
    _check_coefficients(coefficients, basis, "coefficients")
    return torch.tensordot(_basis_at(basis, u, coefficients, side), coefficients, dims=([-1], [0]))


def _basis_at(basis: Basis, u, like: torch.Tensor, side: str) -> torch.Tensor:
    """φ(u) in ``like``'s dtype and on its device. A number is checked and evaluated on the host (float64) and
    then moved: no device synchronisation, unlike the range check of a device tensor."""
    if isinstance(u, torch.Tensor):
        return basis(u, side).to(like.dtype)
    if isinstance(u, bool) or not isinstance(u, (int, float, np.floating, np.integer)):
        raise TypeError(f"u must be a number or a floating point tensor, got {type(u).__name__}")
    return basis(float(u), side).to(dtype=like.dtype, device=like.device)


def _check_coefficients(coefficients, basis: Basis, name: str) -> None:
    if not isinstance(basis, Basis):
        raise TypeError(f"basis must be a Basis (see make_basis), got {type(basis).__name__}")
    if not isinstance(coefficients, torch.Tensor) or not coefficients.is_floating_point():
        got = coefficients.dtype if isinstance(coefficients, torch.Tensor) else type(coefficients).__name__
        raise TypeError(f"{name} must be a floating point tensor, got {got}")
    if coefficients.dim() < 1 or coefficients.shape[0] != basis.num_bases:
        raise ValueError(
            f"{name} must have the {basis.num_bases} bases of {basis!r} along dim 0, got shape "
            f"{tuple(coefficients.shape)}"
        )


# ---------------------------------------------------------------------------------------------------------
# quadrature and projection
# ---------------------------------------------------------------------------------------------------------


def _cells(*bases: Basis) -> np.ndarray:
    """The union of the bases' breakpoints (points closer than 1e-12 merged), cut further into cells of at most
    half a period of the product's highest frequency."""
    points = np.unique(np.concatenate([b.breakpoints() for b in bases]))
    points = points[np.concatenate([[True], np.diff(points) > 1e-12])]
    points[-1] = 1.0
    frequency = sum(b.frequency for b in bases)
    if frequency:
        edges = [points[:1]]
        for a, b in zip(points[:-1], points[1:]):
            parts = max(1, math.ceil((b - a) * 2 * frequency))
            edges.append(np.linspace(a, b, parts + 1)[1:])
        points = np.concatenate(edges)
    return points


def _quadrature(*bases: Basis) -> tuple[np.ndarray, np.ndarray]:
    """Points and weights (float64) integrating the product of one function of each basis exactly (to
    rounding, with a Fourier factor) over [0, 1]."""
    degree = sum(b.polynomial_degree for b in bases)
    count = degree // 2 + 1  # m Gauss points integrate degree 2m − 1 exactly
    if any(b.frequency for b in bases):
        count += _FOURIER_EXTRA_POINTS
    nodes, weights = np.polynomial.legendre.leggauss(count)
    edges = _cells(*bases)
    left, width = edges[:-1, None], np.diff(edges)[:, None]
    points = left + (nodes[None, :] + 1) / 2 * width
    return points.ravel(), (weights[None, :] / 2 * width).ravel()


def gram_matrix(first: Basis, second: Basis) -> torch.Tensor:
    """The matrix of integrals G_ij = ∫_0^1 φ_i(u) ψ_j(u) du of two bases, by exact quadrature.

    Arguments:
        first: the basis φ (n1 functions).
        second: the basis ψ (n2 functions).

    Returns:
        (n1, n2) float64 tensor on the CPU.
    """
    return _gram(first, second).clone()


@functools.lru_cache(maxsize=256)
def _gram(first: Basis, second: Basis) -> torch.Tensor:
    points, weights = _quadrature(first, second)
    u = torch.from_numpy(points)
    return torch.einsum("q,qi,qj->ij", torch.from_numpy(weights), first(u), second(u))


@functools.lru_cache(maxsize=256)
def _projection(source: Basis, target: Basis) -> torch.Tensor:
    mass = _gram(target, target)
    mixed = _gram(target, source)
    return torch.linalg.solve(mass, mixed)


def projection_matrix(source: Basis, target: Basis) -> torch.Tensor:
    """A = M⁻¹ R, the (n_target × n_source) matrix of the L2 projection (module docstring): c' = A c.

    Arguments:
        source: the basis of the coefficients c.
        target: the basis to project onto.

    Returns:
        (target.num_bases, source.num_bases) float64 tensor on the CPU.

    Raises:
        TypeError: an argument is not a `Basis`.
    """
    for name, basis in (("source", source), ("target", target)):
        if not isinstance(basis, Basis):
            raise TypeError(f"{name} must be a Basis (see make_basis), got {type(basis).__name__}")
    return _projection(source, target).clone()


def project(coefficients: torch.Tensor, source: Basis, target: Basis) -> torch.Tensor:
    """The L2 projection of θ(u) = Σ_i c_i φ_i(u) onto ``target`` (module docstring).

    Computed in float64 and returned in the coefficients' dtype, on their device; differentiable.

    Arguments:
        coefficients: (n_source, *shape), the bases along dim 0 (e.g. (n, out, in) for a linear layer).
        source: the basis of ``coefficients``.
        target: the basis to project onto.

    Returns:
        (n_target, *shape) coefficients c' = M⁻¹ R c.

    Raises:
        TypeError: ``coefficients`` is not a floating point tensor, or a basis is not a `Basis`.
        ValueError: the coefficients' first dimension is not ``source.num_bases``.
    """
    _check_coefficients(coefficients, source, "coefficients")
    if not isinstance(target, Basis):
        raise TypeError(f"target must be a Basis (see make_basis), got {type(target).__name__}")
    if source == target:
        return coefficients.clone()
    matrix = _projection(source, target).to(coefficients.device)
    projected = torch.tensordot(matrix, coefficients.to(torch.float64), dims=([1], [0]))
    return projected.to(coefficients.dtype)


def fit_to_points(
    points: torch.Tensor, values: torch.Tensor, basis: Basis, previous: torch.Tensor | None = None, ridge: float = 1e-10
) -> torch.Tensor:
    """Least-squares coefficients of values observed at scattered points (paper Eq. 13):

        argmin_c Σ_p (y_p − Σ_i φ_i(u_p) c_i)² + λ ‖c − c_previous‖²,    λ = ridge · trace(ΦᵀΦ) / n,

    The small ridge term towards ``previous`` (zeros if None) only decides the directions the points do not
    determine (a piece of a piecewise basis that no point falls in keeps its previous coefficients); elsewhere
    the fit is the least-squares fit to a relative ``ridge``. Solved in float64.

    Arguments:
        points: (P,) points u_p in [0, 1].
        values: (P, *shape) the values y_p.
        basis: the `Basis` (n functions).
        previous: (n, *shape) coefficients that undetermined directions keep, or None (zeros).
        ridge: the relative weight λ of the term towards ``previous`` (> 0).

    Returns:
        (n, *shape) coefficients in the values' dtype, on their device.

    Raises:
        ValueError: mismatched shapes, no points, or a ridge that is not positive.
    """
    if not isinstance(points, torch.Tensor) or points.dim() != 1 or points.numel() == 0:
        raise ValueError(f"points must be a non-empty 1-D tensor, got {getattr(points, 'shape', points)!r}")
    if not isinstance(values, torch.Tensor) or values.dim() < 1 or values.shape[0] != points.shape[0]:
        raise ValueError(
            f"values must have the {points.shape[0]} points along dim 0, got shape "
            f"{tuple(getattr(values, 'shape', ()))}"
        )
    if not ridge > 0:
        raise ValueError(f"ridge must be positive, got {ridge!r}")
    n = basis.num_bases
    design = basis(points.to(torch.float64))  # (P, n)
    flat = values.to(torch.float64).reshape(points.shape[0], -1)
    if previous is None:
        prior = flat.new_zeros(n, flat.shape[1])
    else:
        _check_coefficients(previous, basis, "previous")
        if previous.shape[1:] != values.shape[1:]:
            raise ValueError(f"previous has shape {tuple(previous.shape)} but the values {tuple(values.shape)}")
        prior = previous.to(device=flat.device, dtype=torch.float64).reshape(n, -1)
    normal = design.T @ design
    weight = ridge * float(normal.diagonal().sum()) / n
    eye = torch.eye(n, dtype=torch.float64, device=design.device)
    solution = torch.linalg.solve(normal + weight * eye, design.T @ flat + weight * prior)
    return solution.reshape(n, *values.shape[1:]).to(values.dtype)


# ---------------------------------------------------------------------------------------------------------
# modules
# ---------------------------------------------------------------------------------------------------------


def _init_scale(basis: Basis) -> float:
    """1 / sqrt(∫ Σ_i φ_i(u)² du): i.i.d. coefficients of variance σ² then give θ(u) a variance of σ² on average
    over u (1 for piecewise constant, about 1.2 for piecewise linear, 1/√n for the orthonormal bases)."""
    return 1.0 / math.sqrt(float(_gram(basis, basis).diagonal().sum()))


class BasisModule(nn.Module):
    """A module some of whose parameters and buffers are expansions in ``basis``, their bases along dim 0.

    Subclasses list those tensors' names in ``expanded`` (a tuple of attribute names); `project_module`
    projects them. Parameters and buffers not listed are copied unchanged.

    Arguments:
        basis: the `Basis` of the expanded tensors.
    """

    expanded: tuple[str, ...] = ()

    def __init__(self, basis: Basis):
        super().__init__()
        if not isinstance(basis, Basis):
            raise TypeError(f"basis must be a Basis (see make_basis), got {type(basis).__name__}")
        self.basis = basis

    def _project_in_place(self, target: Basis) -> None:
        for name in self.expanded:
            tensor = getattr(self, name)
            if tensor is None:
                continue
            with torch.no_grad():
                new = project(tensor.detach(), self.basis, target)
            if name in self._parameters:
                self._parameters[name] = nn.Parameter(new, requires_grad=tensor.requires_grad)
            else:
                self._buffers[name] = new
        self.basis = target


_Module = TypeVar("_Module", bound=nn.Module)


def project_module(module: _Module, target) -> _Module:
    """A copy of ``module`` with every expanded tensor of its `BasisModule` parts projected onto another basis.

    Arguments:
        module: any module (itself a `BasisModule`, or containing some).
        target: a `Basis` (every part is projected onto it) or an int n (every part onto a basis of its own
            kind with n functions).

    Returns:
        A new module (a deep copy; ``module`` is left unchanged), in the same mode, dtype and device.

    Raises:
        ValueError: ``module`` contains no `BasisModule`, or a size its bases refuse.
        TypeError: ``target`` is neither a `Basis` nor an int.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(target, Basis):
        if isinstance(target, bool) or not isinstance(target, (int, np.integer)):
            raise TypeError(f"target must be a Basis or a number of basis functions, got {type(target).__name__}")
        _check_count("target", target)
    if not any(isinstance(m, BasisModule) for m in module.modules()):
        raise ValueError(f"{type(module).__name__} has no basis-expanded parts to project")
    copied = copy.deepcopy(module)
    for part in copied.modules():
        if isinstance(part, BasisModule):
            part._project_in_place(target if isinstance(target, Basis) else part.basis.resized(int(target)))
    return copied


def _depth(u, x: torch.Tensor, batch_only: bool):
    """u checked: a Python float (kept on the host, so that evaluating the basis needs no device synchronisation),
    or a tensor in x's dtype and on its device: 0-d, or (B,) matching x's first dimension."""
    if isinstance(u, (int, float, np.floating, np.integer)) and not isinstance(u, bool):
        return float(u)
    if not isinstance(u, torch.Tensor) or not u.is_floating_point():
        raise TypeError(
            f"u must be a number or a floating point tensor, got "
            f"{u.dtype if isinstance(u, torch.Tensor) else type(u).__name__}"
        )
    if u.dim() == 0:
        return u.to(device=x.device, dtype=x.dtype)
    if batch_only:
        raise ValueError(f"u must be a scalar (one depth for the whole batch), got shape {tuple(u.shape)}")
    if u.dim() != 1 or u.shape[0] != x.shape[0]:
        raise ValueError(f"u must be a scalar or one depth per sample, shape ({x.shape[0]},), got {tuple(u.shape)}")
    return u.to(device=x.device, dtype=x.dtype)


class BasisLinear(BasisModule):
    """A linear layer whose weight and bias are expansions in a basis: y = W(u) x + b(u), W(u) = Σ_i φ_i(u) W_i.

    With one constant basis function (``piecewise_constant``, ``legendre`` or ``fourier`` with n = 1) it is a
    plain ``nn.Linear`` with weight W_0 and bias b_0, exactly. Initialisation: every coefficient as
    ``nn.Linear`` initialises its weight (uniform in ±1/√in_features), scaled by 1/√(∫ Σ_i φ_i² du) so that W(u)
    has the plain layer's variance on average over u.

    Arguments:
        in_features: size of each input sample.
        out_features: size of each output sample.
        basis: a `Basis`, or one of `BASIS_NAMES` with ``num_bases``.
        num_bases: the number of functions when ``basis`` is a name.
        bias: learn an expanded bias b(u) (default True).

    Attributes:
        weight: (n, out_features, in_features) coefficients.
        bias: (n, out_features) coefficients, or None.
    """

    expanded = ("weight", "bias")

    def __init__(self, in_features: int, out_features: int, basis, num_bases: int | None = None, bias: bool = True):
        super().__init__(make_basis(basis, num_bases))
        self.in_features = _check_count("in_features", in_features)
        self.out_features = _check_count("out_features", out_features)
        n = self.basis.num_bases
        bound = _init_scale(self.basis) / math.sqrt(self.in_features)
        self.weight = nn.Parameter(torch.empty(n, out_features, in_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, out_features).uniform_(-bound, bound)) if bias else None

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, basis={self.basis!r}, bias={self.bias is not None}"

    def weights_at(self, u, side: str = "right") -> tuple[torch.Tensor, torch.Tensor | None]:
        """(W(u), b(u)) at one depth.

        Arguments:
            u: a number or 0-d tensor in [0, 1].
            side: see `Basis.__call__`.

        Returns:
            (out_features, in_features) weight and (out_features,) bias (None without bias).
        """
        u = _depth(u, self.weight, batch_only=True)
        return (
            expand(self.weight, self.basis, u, side),
            None if self.bias is None else expand(self.bias, self.basis, u, side),
        )

    def forward(self, x: torch.Tensor, u, side: str = "right") -> torch.Tensor:
        """y = W(u) x + b(u).

        Arguments:
            x: (B, ..., in_features) inputs ((..., in_features) when u is a scalar).
            u: the depth in [0, 1]: a number or 0-d tensor (one for all samples), or (B,) (one per sample,
                broadcast over x's middle dimensions).
            side: see `Basis.__call__`.

        Returns:
            (B, ..., out_features).

        Raises:
            TypeError: x or u of the wrong type.
            ValueError: x's last dimension is not ``in_features``, u of the wrong shape or outside [0, 1].
        """
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"x must be a tensor (..., {self.in_features}), got "
                f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
            )
        u = _depth(u, x, batch_only=False)
        if not isinstance(u, torch.Tensor) or u.dim() == 0:
            weight, bias = self.weights_at(u, side)
            return F.linear(x, weight, bias)
        # One product for every basis at once, then the per-sample combination Σ_i φ_i(u_b) (W_i x_b + b_i).
        n, out = self.basis.num_bases, self.out_features
        bias = None if self.bias is None else self.bias.reshape(n * out)
        every = F.linear(x, self.weight.reshape(n * out, self.in_features), bias)
        every = every.view(*x.shape[:-1], n, out)
        phi = self.basis(u, side).view(x.shape[0], *([1] * (x.dim() - 2)), n, 1)
        return (phi * every).sum(-2)


class BasisConv1d(BasisModule):
    """A 1-D convolution whose kernel and bias are expansions in a basis: y = conv(x; K(u)) + b(u).

    Initialisation as `BasisLinear` (uniform in ±1/√(in_channels · kernel_size), scaled).

    Arguments:
        in_channels: channels of the input.
        out_channels: channels of the output.
        kernel_size: width of the kernel.
        basis: a `Basis`, or one of `BASIS_NAMES` with ``num_bases``.
        num_bases: the number of functions when ``basis`` is a name.
        padding: as ``torch.nn.functional.conv1d`` (an int, or "same" for an odd ``kernel_size``; default "same").
        bias: learn an expanded bias (default True).

    Attributes:
        weight: (n, out_channels, in_channels, kernel_size) coefficients.
        bias: (n, out_channels) coefficients, or None.
    """

    expanded = ("weight", "bias")

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        basis,
        num_bases: int | None = None,
        padding="same",
        bias: bool = True,
    ):
        super().__init__(make_basis(basis, num_bases))
        self.in_channels = _check_count("in_channels", in_channels)
        self.out_channels = _check_count("out_channels", out_channels)
        self.kernel_size = _check_count("kernel_size", kernel_size)
        if padding == "same" and kernel_size % 2 == 0:
            raise ValueError(f"padding='same' needs an odd kernel_size (symmetric padding), got {kernel_size}")
        if padding != "same" and (isinstance(padding, bool) or not isinstance(padding, int) or padding < 0):
            raise ValueError(f"padding must be 'same' or an integer >= 0, got {padding!r}")
        self.padding = padding
        n = self.basis.num_bases
        bound = _init_scale(self.basis) / math.sqrt(in_channels * kernel_size)
        self.weight = nn.Parameter(torch.empty(n, out_channels, in_channels, kernel_size).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, out_channels).uniform_(-bound, bound)) if bias else None

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, padding={self.padding!r}, "
            f"basis={self.basis!r}, bias={self.bias is not None}"
        )

    def forward(self, x: torch.Tensor, u, side: str = "right") -> torch.Tensor:
        """The convolution with the kernel at depth u.

        Arguments:
            x: (B, in_channels, L) inputs.
            u: the depth in [0, 1], a number or 0-d tensor (one for the whole batch).
            side: see `Basis.__call__`.

        Returns:
            (B, out_channels, L') (L' = L with ``padding="same"``).

        Raises:
            ValueError: x not (B, in_channels, L), u not a scalar in [0, 1].
        """
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"x must be a tensor (batch, {self.in_channels}, length), got "
                f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
            )
        u = _depth(u, x, batch_only=True)
        weight = expand(self.weight, self.basis, u, side)
        bias = None if self.bias is None else expand(self.bias, self.basis, u, side)
        return F.conv1d(x, weight, bias, padding=self.padding)


# ------------------------------------------------------------------------------- weights that change in time
class BasisRangeWarning(UserWarning):
    """A model with weights expanded in time was evaluated beyond its ``basis_time_range``: the weights at the
    range's ends were used there (`time_position`)."""


@overload
def check_time_range(basis: None, num_bases: int | None, basis_time_range: object) -> None: ...


@overload
def check_time_range(basis: Basis | str, num_bases: int | None, basis_time_range: object) -> tuple[float, float]: ...


def check_time_range(basis, num_bases, basis_time_range) -> tuple[float, float] | None:
    """The ``basis_time_range`` of a model whose weights may be expanded in time, checked with its companions.

    Arguments:
        basis: None (constant weights) or the basis (a `Basis` or a name of `BASIS_NAMES`).
        num_bases: the number of functions, or None.
        basis_time_range: (t_start, t_end), or None.

    Returns:
        (t_start, t_end) as floats, or None without a basis.

    Raises:
        ValueError: ``num_bases`` or ``basis_time_range`` without a basis, a basis without a time range, or a range
            that is not a finite pair with t_end > t_start.
    """
    if basis is None:
        if num_bases is not None or basis_time_range is not None:
            given = "num_bases" if num_bases is not None else "basis_time_range"
            raise ValueError(f"{given} is an option of a basis: give basis= too (basis=None: constant weights)")
        return None
    if basis_time_range is None:
        raise ValueError(
            "basis= needs basis_time_range=(t_start, t_end), the span of s its [0, 1] stands for "
            "(create_model fills it from the training input)"
        )
    try:
        start, end = (float(t) for t in basis_time_range)
    except (TypeError, ValueError):
        raise ValueError(
            f"basis_time_range must be a pair of numbers (t_start, t_end), got {basis_time_range!r}"
        ) from None
    if not (math.isfinite(start) and math.isfinite(end) and end > start):
        raise ValueError(f"basis_time_range must be finite with t_end > t_start, got {basis_time_range!r}")
    return start, end


def time_position(s: torch.Tensor, time_range: tuple[float, float]) -> torch.Tensor:
    """u = (s − t_start) / (t_end − t_start), the position of s in a basis's [0, 1], held at 0 and 1 beyond the
    range, with a `BasisRangeWarning` (the weights at the range's ends are used there).

    Arguments:
        s: (N,) times.
        time_range: (t_start, t_end).

    Returns:
        (N,) positions in [0, 1].
    """
    start, end = time_range
    u = (s - start) / (end - start)
    tolerance = 64 * torch.finfo(u.dtype).eps  # a rounding error at the ends is no extrapolation
    if bool(((u < -tolerance) | (u > 1 + tolerance)).any()):
        # At the user's line (not inside a forward pass), so Python's once-per-location filter says it once per run.
        warn_user(
            f"s from {float(s.min()):.6g} to {float(s.max()):.6g} reaches beyond the basis_time_range "
            f"{tuple(time_range)}: the weights at its ends are used there (give a basis_time_range covering "
            "the data to avoid it)",
            BasisRangeWarning,
        )
    return u.clamp(0.0, 1.0)
