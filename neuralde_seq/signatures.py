"""Log-signatures of piecewise-linear paths, and their windowed form for neural RDEs.

This module holds the pure-torch path for depth 1 and 2, which needs nothing beyond torch and supports
autograd on any device. Depth 1 is the increment of the path over a window; depth 2 adds the Lévy areas
``A_ij`` (i < j), which are the level-2 coefficients of the log-signature in the Lyndon basis (and in
every other common basis: all agree at depth 2, shared/DESIGN.md §6).

For a piecewise-linear path through points p_0, ..., p_n with increments Δ_m = p_{m+1} − p_m::

    A_ij = ½ Σ_m [ (p_m^i − p_0^i) Δ_m^j − (p_m^j − p_0^j) Δ_m^i ]

(a straight segment sweeps no area of its own, so only the displacement before each segment counts).
"""
from __future__ import annotations

import torch

__all__ = ["logsignature_channels", "logsignature", "logsignature_windows"]


def logsignature_channels(channels: int, depth: int) -> int:
    """Number of log-signature terms of a ``channels``-dimensional path at ``depth`` (1 or 2)."""
    _check_depth(depth)
    return channels if depth == 1 else channels + channels * (channels - 1) // 2


def _check_depth(depth: int) -> None:
    if depth not in (1, 2):
        raise ValueError(f"depth must be 1 or 2 for the pure-torch log-signature, got {depth!r}")


def logsignature(path: torch.Tensor, depth: int) -> torch.Tensor:
    """Log-signature of the piecewise-linear path through the given points.

    Arguments:
        path: points of shape (..., n_points, channels), n_points >= 1 (a single point has zero
            log-signature).
        depth: 1 or 2.

    Returns:
        Tensor of shape (..., logsignature_channels(channels, depth)): the increment, followed at depth 2
        by the Lévy areas A_ij for i < j in lexicographic order (i.e. the Lyndon words ij).
    """
    _check_depth(depth)
    if path.dim() < 2 or path.shape[-2] < 1:
        raise ValueError(f"path must have shape (..., n_points >= 1, channels), got {tuple(path.shape)}")
    increment = path[..., -1, :] - path[..., 0, :]
    if depth == 1:
        return increment
    displacement = path[..., :-1, :] - path[..., :1, :]  # p_m − p_0 before each segment
    step = path[..., 1:, :] - path[..., :-1, :]
    # area[i, j] = ½ Σ_m (disp_m^i step_m^j − disp_m^j step_m^i)
    outer = displacement.transpose(-1, -2) @ step  # (..., C, C): Σ_m disp^i step^j
    area = 0.5 * (outer - outer.transpose(-1, -2))
    channels = path.shape[-1]
    rows, cols = torch.triu_indices(channels, channels, offset=1, device=path.device)
    return torch.cat([increment, area[..., rows, cols]], dim=-1)


def logsignature_windows(points: torch.Tensor, lengths: torch.Tensor, depth: int, step: int) -> tuple[
        torch.Tensor, torch.Tensor]:
    """Log-signatures over consecutive windows of ``step`` intervals of each sample's own points.

    Window j of sample b covers points jS, ..., min((j+1)S, L_b − 1): windows share their end points, so the
    windows' increments add up to the whole path's increment. The final window may be shorter.

    Arguments:
        points: (B, T, C) observed points, without NaN within each sample's length.
        lengths: (B,) number of valid points per sample, each >= 2.
        depth: 1 or 2.
        step: window size in intervals, >= 1.

    Returns:
        (logsig, windows): logsig of shape (B, N_max, D) with D = logsignature_channels(C, depth), zero
        after each sample's last window; windows (B,) long, the number of windows ceil((L_b − 1)/S).
    """
    if not isinstance(step, int) or step < 1:
        raise ValueError(f"step must be a positive integer, got {step!r}")
    batch, length, channels = points.shape
    windows = torch.div(lengths - 1 + step - 1, step, rounding_mode="floor")
    n_max = int(windows.max())
    # Pad each path by repeating its final point: a constant stretch adds nothing to a log-signature,
    # so every window (including a short final one) can be computed as a full window of step+1 points.
    padded_length = n_max * step + 1
    index = torch.arange(padded_length, device=points.device).clamp(max=length - 1)
    index = torch.minimum(index.unsqueeze(0), (lengths - 1).unsqueeze(1))  # (B, padded_length)
    padded = torch.gather(points, 1, index.unsqueeze(-1).expand(batch, padded_length, channels))
    starts = torch.arange(n_max, device=points.device) * step
    window_index = starts.unsqueeze(1) + torch.arange(step + 1, device=points.device)  # (N, S+1)
    window_points = padded[:, window_index]  # (B, N, S+1, C)
    logsig = logsignature(window_points, depth)
    valid = torch.arange(n_max, device=points.device).unsqueeze(0) < windows.unsqueeze(1)
    return logsig * valid.unsqueeze(-1).to(logsig.dtype), windows

