"""The basis families on the unit interval (piecewise constant, piecewise linear, Legendre, Fourier), `make_basis`
and `expand`: θ(u) = Σ_i c_i φ_i(u). The package docstring (`neuralde_seq.basis`) defines each family.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "BASIS_NAMES",
    "Basis",
    "PiecewiseConstant",
    "PiecewiseLinear",
    "Legendre",
    "Fourier",
    "make_basis",
    "expand",
]

BASIS_NAMES = ("piecewise_constant", "piecewise_linear", "legendre", "fourier")
SIDES = ("right", "left")


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
    """A set of ``num_bases`` functions on the unit interval (`neuralde_seq.basis`).

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
                belongs to (`neuralde_seq.basis`); continuous bases ignore it.

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
