"""Weights that change in time: a model's ``basis_time_range`` (`check_time_range`) and the position of a time in
its basis's [0, 1] (`time_position`), held at the ends beyond it with a `BasisRangeWarning`.
"""

from __future__ import annotations

import math
from typing import overload

import torch

from ..user_warnings import warn_user
from .functions import Basis

__all__ = ["BasisRangeWarning", "check_time_range", "time_position"]


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
