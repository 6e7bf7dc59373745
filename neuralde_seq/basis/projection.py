"""L2 projections between bases by exact quadrature (`gram_matrix`, `projection_matrix`, `project`) and the
least-squares fit to scattered points (`fit_to_points`): the package docstring (`neuralde_seq.basis`) gives the
normal equations and the quadrature.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from .functions import Basis, _check_coefficients

__all__ = ["gram_matrix", "projection_matrix", "project", "fit_to_points"]

# Extra Gauss points per cell for integrands with a Fourier factor, on cells of at most half a period.
_FOURIER_EXTRA_POINTS = 12


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
    """A = M⁻¹ R, the (n_target × n_source) matrix of the L2 projection (`neuralde_seq.basis`): c' = A c.

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
    """The L2 projection of θ(u) = Σ_i c_i φ_i(u) onto ``target`` (`neuralde_seq.basis`).

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
