"""The cubic spline interpolations: `NaturalCubic` (a natural cubic spline through each sample's points, as
torchcde's ``natural_cubic_coeffs``) and `HermiteCubic` (Hermite cubic pieces with backward differences: causal and
smooth, the toolkit's default)."""

from __future__ import annotations

import dataclasses

import torch
import torchcde

from .interpolation import PolynomialInterpolation, register_interpolation
from .splines import fill_missing_linear, natural_cubic_coefficients

__all__ = ["NaturalCubic", "HermiteCubic"]


def _pieces_from_torchcde_layout(raw: torch.Tensor) -> torch.Tensor:
    """torchcde's (N, pieces, 4C) layout (a, b, two_c, three_d side by side) as (N, pieces, 4, C) a, b, c, d."""
    a, b, two_c, three_d = raw.chunk(4, dim=-1)
    return torch.stack([a, b, two_c / 2, three_d / 3], dim=-2)


@dataclasses.dataclass(frozen=True)
class NaturalCubic(PolynomialInterpolation):
    """The natural cubic spline through each sample's own points (second derivative zero at its ends), through
    missing values channel by channel; the coefficients of ``torchcde.natural_cubic_coeffs``, computed for every
    sample and channel in one batched tridiagonal solve (`neuralde_seq.controls.splines.natural_cubic_coefficients`).
    Global along a sample: every point moves every piece, so a causal model should not read it."""

    global_pieces = True

    def pieces(self, path: torch.Tensor, knots: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        return _pieces_from_torchcde_layout(natural_cubic_coefficients(path, knots, lengths))


@dataclasses.dataclass(frozen=True)
class HermiteCubic(PolynomialInterpolation):
    """Hermite cubic pieces with backward differences (torchcde's
    ``hermite_cubic_coefficients_with_backward_differences``): each piece's slopes are the secants ending at its
    points, so the path up to a point depends on the points up to it only (causal), and it is continuously
    differentiable. Missing values are interpolated linearly first (`fill_missing_linear`)."""

    def pieces(self, path: torch.Tensor, knots: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        raw = torchcde.hermite_cubic_coefficients_with_backward_differences(fill_missing_linear(path, knots), t=knots)
        return _pieces_from_torchcde_layout(raw)


register_interpolation("natural_cubic", NaturalCubic)
register_interpolation("hermite_cubic", HermiteCubic)
