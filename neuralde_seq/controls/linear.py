"""The piecewise linear interpolations: `Linear` (straight lines between the points) and `Rectilinear` (time first,
then the values: a path that never uses a value before its time)."""

from __future__ import annotations

import dataclasses

import torch

from .interpolation import PolynomialInterpolation, register_interpolation
from .splines import fill_missing_linear

__all__ = ["Linear", "Rectilinear"]


@dataclasses.dataclass(frozen=True)
class Linear(PolynomialInterpolation):
    """Straight lines between each sample's points (missing values interpolated linearly first): causal, with a
    derivative that jumps at the points."""

    def pieces(self, path: torch.Tensor, knots: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        points = fill_missing_linear(path, knots)
        slope = (points[:, 1:] - points[:, :-1]) / (knots[1:] - knots[:-1]).unsqueeze(-1)
        zeros = torch.zeros_like(slope)
        return torch.stack([points[:, :-1], slope, zeros, zeros], dim=-2)


@dataclasses.dataclass(frozen=True)
class Rectilinear(PolynomialInterpolation):
    """Time first, then the values, between each sample's points: each observation interval [s_i, s_{i+1}] is split
    at its midpoint, the time channel (channel 0, so ``time_channel=True`` is needed) moves on the first half and the
    values move along the second. The knots are the points and the midpoints (2T − 1)."""

    needs_time_channel = "time moves first, then the values"
    pieces_per_interval = 2

    def piece_knots(self, knots: torch.Tensor) -> torch.Tensor:
        mid = 0.5 * (knots[1:] + knots[:-1])
        return torch.cat([torch.stack([knots[:-1], mid], dim=1).flatten(), knots[-1:]])

    def pieces(self, path: torch.Tensor, knots: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        points = fill_missing_linear(path, knots)
        half = (0.5 * (knots[1:] - knots[:-1])).unsqueeze(-1)  # (L-1, 1)
        start, stop = points[:, :-1], points[:, 1:]
        corner = start.clone()
        corner[..., 0] = stop[..., 0]  # time has moved, values not yet
        zeros = torch.zeros_like(start)
        first = torch.stack([start, (corner - start) / half, zeros, zeros], dim=-2)
        second = torch.stack([corner, (stop - corner) / half, zeros, zeros], dim=-2)
        return torch.stack([first, second], dim=2).flatten(1, 2)


register_interpolation("linear", Linear)
register_interpolation("rectilinear", Rectilinear)
