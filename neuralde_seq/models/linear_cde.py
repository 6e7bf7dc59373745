"""Structured linear neural CDEs (SLiCE / linear NCDEs, Walker et al. 2025): a hidden state driven linearly by
the control's increments,

    h_k = h_{k−1} + Σ_i ΔX^i_k A_i h_{k−1} + B ΔX_k,        ΔX_k = X(t_k) − X(t_{k−1}),

over the knots t_k of the control (the Euler step of dh = Σ_i A_i h dX^i + B dX). Every step is the affine map
h ↦ M_k h + b_k with M_k = I + Σ_i ΔX^i_k A_i and b_k = B ΔX_k, so the whole sequence is one linear recurrence,
evaluated step by step or by a parallel prefix scan (`neuralde_seq.ops.linear_scan`). The A_i are

- ``"diagonal"``: diagonal (SLiCE's diagonal variant; each unit its own scalar recurrence),
- ``"block"``: block-diagonal with blocks of ``block_size`` (the paper's block-diagonal variant),
- ``"dense"``: full H × H (the linear NCDE).

h_0 = W_0 X(t_0) + c_0; the logits are a linear readout of h at each sample's final knot. After a sample's end
its increments are zero, so M = I and b = 0: each sample stops at its own end, whatever the padding. A control
with a time channel gives the time increments as one of the ΔX^i (SLiCE adds such a channel too).

Reads an interpolated `Control` (registry: a linear control with a time channel); increments are
the control's values at the knots, exactly, for any piecewise-cubic interpolation.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..controls import Control
from ..input_checks import check_input_matches, check_input_type, check_num_outputs
from ..ops.linear_scan import STRUCTURES, parallel_scan, sequential_scan
from .recurrent import _positive_int

__all__ = ["LinearCDE", "SCANS"]

SCANS = ("parallel", "sequential")


class LinearCDE(nn.Module):
    """Structured linear neural CDE classifier (module docstring).

    Arguments:
        in_channels: C, channels of the control.
        num_classes: number of outputs.
        hidden: H, width of the state.
        structure: "diagonal", "block" or "dense" (the A_i's structure).
        block_size: k, the block width: required with ``structure="block"`` (H a multiple of it), refused
            otherwise.
        scan: "parallel" (default: a prefix scan of the steps' affine maps) or "sequential" (the step-by-step
            reference); both give the same states up to rounding.
        init_scale: the A_i's entries are drawn from N(0, (init_scale² / (C·k))), k the width each row mixes (1
            diagonal, block_size, H dense), so that M_k starts near the identity (default 0.5).

    ``forward(control)`` gives (B, num_classes) logits; ``hidden_states(control)`` the states at every knot.

    Raises:
        ValueError: sizes not positive integers, an unknown structure or scan, H not a multiple of block_size.
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 64, structure: str = "diagonal",
                 block_size: int | None = None, scan: str = "parallel", init_scale: float = 0.5):
        super().__init__()
        _positive_int("in_channels", in_channels)
        _positive_int("hidden", hidden)
        check_num_outputs(num_classes)
        if structure not in STRUCTURES:
            raise ValueError(f"structure must be one of {STRUCTURES}, got {structure!r}")
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
        if (block_size is not None) != (structure == "block"):
            raise ValueError("block_size goes with structure='block' (and is required there)")
        if structure == "block":
            _positive_int("block_size", block_size)
            if hidden % block_size:
                raise ValueError(f"hidden ({hidden}) must be a multiple of block_size ({block_size})")
        if not (isinstance(init_scale, (int, float)) and math.isfinite(init_scale) and init_scale > 0):
            raise ValueError(f"init_scale must be a finite positive number, got {init_scale!r}")
        self.in_channels, self.hidden, self.structure, self.block_size, self.scan = (
            in_channels, hidden, structure, block_size, scan)
        width = {"diagonal": 1, "block": block_size, "dense": hidden}[structure]
        shape = {"diagonal": (in_channels, hidden),
                 "block": (in_channels, hidden // (block_size or 1), block_size, block_size),
                 "dense": (in_channels, hidden, hidden)}[structure]
        self.A = nn.Parameter(torch.randn(shape) * (init_scale / math.sqrt(in_channels * width)))
        self.B = nn.Linear(in_channels, hidden, bias=False)
        self.initial = nn.Linear(in_channels, hidden)
        self.readout = nn.Linear(hidden, num_classes)

    def step_maps(self, increments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The steps' affine maps (M_k, b_k) from the increments.

        Arguments:
            increments: (S, B, C) the control's increments ΔX_k, time-major.

        Returns:
            (M, b): M (S, B, H), (S, B, n, k, k) or (S, B, H, H) by structure, b (S, B, H).
        """
        if self.structure == "diagonal":
            M = 1 + increments @ self.A
        else:
            # Σ_i ΔX^i A_i over the channels, plus the identity
            M = torch.tensordot(increments, self.A, dims=([2], [0]))
            eye = torch.eye(M.shape[-1], dtype=M.dtype, device=M.device)
            M = M + eye
        return M, self.B(increments)

    def hidden_states(self, control: Control) -> torch.Tensor:
        """The states at every knot.

        Arguments:
            control: an interpolated control, batch size B, ``channels == in_channels``.

        Returns:
            (B, K, H) the states at the knots 0..max(end_index) (constant after a sample's end).
        """
        check_input_type(self, control, Control)
        if control.piecewise_constant:
            raise ValueError("LinearCDE reads the increments of an interpolated control, not log-signature windows")
        if control.channels != self.in_channels:
            raise ValueError(f"control has {control.channels} channels but the model expects {self.in_channels}")
        check_input_matches(self, control)
        pieces = int(control.end_index.max())
        coeffs = control.coeffs[:, :pieces]  # (B, S, 4, C)
        gaps = (control.knots[1: pieces + 1] - control.knots[:pieces]).to(coeffs.dtype).view(1, -1, 1)
        increments = gaps * (coeffs[:, :, 1] + gaps * (coeffs[:, :, 2] + gaps * coeffs[:, :, 3]))
        active = torch.arange(pieces, device=coeffs.device).unsqueeze(0) < control.end_index.unsqueeze(1)
        increments = increments * active.unsqueeze(-1).to(increments.dtype)  # zero after each end: M = I, b = 0
        h0 = self.initial(control.coeffs[:, 0, 0])  # X(t_0)
        M, b = self.step_maps(increments.transpose(0, 1))
        scan = parallel_scan if self.scan == "parallel" else sequential_scan
        states = scan(M, b, h0, self.structure)  # (S, B, H)
        return torch.cat([h0.unsqueeze(1), states.transpose(0, 1)], dim=1)

    def forward(self, control: Control) -> torch.Tensor:
        """Logits from h at each sample's final knot.

        Arguments:
            control: an interpolated control, batch size B, ``channels == in_channels``.

        Returns:
            (B, num_classes) logits.
        """
        states = self.hidden_states(control)
        final = states[torch.arange(states.shape[0], device=states.device), control.end_index]
        return self.readout(final)

    def extra_repr(self) -> str:
        """The structure and scan, shown by ``print(module)``."""
        return (f"structure={self.structure!r}, hidden={self.hidden}, block_size={self.block_size}, "
                f"scan={self.scan!r}")
