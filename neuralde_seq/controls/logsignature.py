"""Log-signature windows (`LogSignature`): the piecewise-constant controls of neural RDEs.

Each sample's path is cut into windows of ``step`` observation intervals and each window's log-signature is computed
(`neuralde_seq.signatures`); window j of every sample occupies s ∈ [j, j + 1) of the `Control`, whatever the
``parametrization``, so batching never changes any sample's grid. A log-signature holds only the path's movement
over a window (increments, areas), never its level; ``window_start_values=True`` appends the path's value at each
window's start as further channels, constant over the window, so that a field reading x sees the level too
(docs/design.md#choices, "RDE form"). Their disk cache is `neuralde_seq.controls.logsignature_cache`.
"""

from __future__ import annotations

import dataclasses

import torch

from ..signatures import DEFAULT_BASIS, check_logsignature_options, logsignature_channels, logsignature_windows
from .control import Control
from .interpolation import Interpolation, ObservedChannels, check_finite, register_interpolation
from .splines import fill_missing_linear

__all__ = ["LogSignature", "logsignature_control"]


@dataclasses.dataclass(frozen=True)
class LogSignature(Interpolation):
    """Piecewise-constant log-signature windows, for neural RDEs (``build_control(interpolation="logsignature")``).

    Attributes:
        depth: log-signature depth (1 or 2 with the torch backend, any with the others; default 2).
        step: window size, in observation intervals (default 4).
        backend: library computing the log-signatures: "torch" (default, depth <= 2, no extra dependency),
            "pysiglib" or "signatory" (optional dependencies; see `neuralde_seq.signatures`). Its ``build_control``
            keyword is ``logsig_backend``.
        basis: coordinates of the log-signatures: "lyndon_brackets" (default), "lyndon_words" or "expand" (at depth
            <= 2 the Lyndon bases coincide). Its ``build_control`` keyword is ``logsig_basis``.
        window_start_values: after each window's log-signature, also give the path's value at the window's start
            (the point j·step of window j: its values and masks, missing values interpolated as for the
            log-signature; not the time and count channels, whose level is the position in the series, unbounded
            with its length), constant over the window. An RDE field (``form="rde"``) then reads the path's level
            throughout, not only its movement: without it, its output is the same for the values and the values
            plus any constant. Default False.
    """

    depth: int = 2
    step: int = 4
    backend: str = "torch"
    basis: str = DEFAULT_BASIS
    window_start_values: bool = False

    windows = True
    keyword_fields = {"logsig_backend": "backend", "logsig_basis": "basis"}
    title = "log-signature"

    def __post_init__(self):
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 1:
            raise ValueError(f"step must be a positive integer, got {self.step!r}")
        if not isinstance(self.window_start_values, bool):
            raise ValueError(f"window_start_values must be True or False, got {self.window_start_values!r}")
        # whether the backend is installed is checked when the windows are computed
        check_logsignature_options(self.depth, self.backend, self.basis, installed=False)

    def build(self, observed: ObservedChannels) -> Control:
        """The log-signature windows of the points (knots the indices; see `logsignature_control`)."""
        # logsignature_control read from the module when called (tests replace it to see that a cache computes nothing)
        return logsignature_control(
            observed.path,
            observed.lengths,
            self.depth,
            self.step,
            observed.names,
            self.backend,
            self.basis,
            self.window_start_values,
        )


register_interpolation("logsignature", LogSignature)


def logsignature_control(
    path: torch.Tensor,
    lengths: torch.Tensor,
    depth: int,
    step: int,
    names: tuple[str, ...],
    backend: str,
    basis: str,
    window_start_values: bool = False,
) -> Control:
    """The log-signature windows of ``path`` as a piecewise-constant `Control` (what `LogSignature` builds).

    Arguments:
        path: (B, T, C) points of the path (NaN where missing: interpolated linearly on the index first).
        lengths: (B,) long, valid points per sample.
        depth: log-signature depth.
        step: window size in observation intervals.
        names: (C,) channel names of the path (their number fixes the log-signature width).
        backend: the library computing the log-signatures, as `LogSignature`'s.
        basis: the log-signature coordinates, as `LogSignature`'s.
        window_start_values: append, after the D log-signature channels, the path's point at each window's start
            (point j·step of the sample, after the interpolation through missing values) in its value and mask
            channels, named ``start_<name>`` (default False). Not in the time and count channels: their level
            is the position in the series, which grows with its length (1,000s of steps on long series, which
            swamps the other inputs of the slow net); their increments are in the log-signature.

    Returns:
        A piecewise-constant `Control` with K = N_max + 1 knots 0, 1, ..., N_max (N_max the most windows of any
        sample), ``coeffs`` (B, K, 4, D) or, with ``window_start_values``, (B, K, 4, D + C): on window j the
        constant coefficient is [logsig_j] or [logsig_j, path(j·step)], zero after each sample's last window;
        ``initial_value`` (B, C) the path's first point.

    Raises:
        ValueError: ``window_start_values`` is not a bool, or the options `check_logsignature_options` refuses.
    """
    check_logsignature_options(depth, backend, basis)
    if not isinstance(window_start_values, bool):
        raise ValueError(f"window_start_values must be True or False, got {window_start_values!r}")
    valid = torch.arange(path.shape[1], device=path.device).unsqueeze(0) < lengths.unsqueeze(1)
    if torch.isnan(path).any():
        # Log-signatures need complete points: interpolate linearly through missing values first, within each
        # sample's own points (its padding marked missing, so that it never enters the line).
        knots = torch.arange(path.shape[1], dtype=path.dtype, device=path.device)
        path = fill_missing_linear(path.masked_fill(~valid.unsqueeze(-1), float("nan")), knots)
    path = path.masked_fill(~valid.unsqueeze(-1), 0.0)
    initial_value = path[:, 0].clone()
    logsig, windows = logsignature_windows(path, lengths, depth, step, backend=backend, basis=basis)
    batch, n_windows, width = logsig.shape
    assert width == logsignature_channels(len(names), depth, basis)
    channel_names = tuple(f"logsig{i}" for i in range(width))
    if window_start_values:
        # not the time and count channels (build_control's "time", "count<c>"): positions, unbounded
        levels = [c for c, name in enumerate(names) if name != "time" and not name.startswith(("count", "recency"))]
        logsig = torch.cat([logsig, _window_starts(path[..., levels], windows, step)], dim=-1)
        channel_names += tuple(f"start_{names[c]}" for c in levels)
    coeffs = torch.zeros(batch, n_windows + 1, 4, logsig.shape[-1], dtype=path.dtype, device=path.device)
    coeffs[:, :n_windows, 0] = logsig  # and 0 past each sample's end (the solver freezes it there)
    knots = torch.arange(n_windows + 1, dtype=path.dtype, device=path.device)
    check_finite(coeffs, knots, "logsignature", why="a window's log-signature holds products of its increments")
    return Control(knots, coeffs, windows, True, channel_names, initial_value)


def _window_starts(path: torch.Tensor, windows: torch.Tensor, step: int) -> torch.Tensor:
    """The path's point at the start of each log-signature window (`logsignature_windows`' windows: window j
    starts at point j·step).

    Arguments:
        path: (B, T, C) complete points (no NaN within each sample's length).
        windows: (B,) long, each sample's number of windows.
        step: window size in observation intervals.

    Returns:
        (B, N_max, C) with N_max = max(windows): row j is path[b, j·step], zero after each sample's last window.
    """
    n_windows = int(windows.max())
    starts = torch.arange(n_windows, device=path.device) * step  # (N,): j·step < L_b − 1 on every real window
    valid = torch.arange(n_windows, device=path.device).unsqueeze(0) < windows.unsqueeze(1)  # (B, N)
    index = torch.where(valid, starts.unsqueeze(0), torch.zeros_like(starts).unsqueeze(0))
    points = torch.gather(path, 1, index.unsqueeze(-1).expand(-1, -1, path.shape[-1]))
    return points.masked_fill(~valid.unsqueeze(-1), 0.0)
