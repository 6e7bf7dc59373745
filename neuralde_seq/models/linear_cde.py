"""Structured linear neural CDEs (SLiCE / linear NCDEs, Walker et al. 2025): a hidden state driven linearly by
the control,

    dh = Σ_i (A_i h + B_i) dX^i,

discretised over the control's pieces k (the knot intervals of an interpolated control, or log-signature windows)
as one affine map per piece, h_k = M_k h_{k−1} + b_k:

- depth 1 (the increments ΔX_k of an interpolated control, or depth-1 log-signature windows): the Euler step
  M_k = I + Σ_i ΔX^i_k A_i,  b_k = Σ_i ΔX^i_k B_i;
- depth 2 (log-signature windows with level-2 terms λ_ij, i < j): the log-ODE method, whose generator adds the Lie
  brackets of the affine fields f_i(h) = A_i h + B_i,
  [f_i, f_j](h) = J_{f_j} f_i − J_{f_i} f_j = (A_j A_i − A_i A_j) h + (A_j B_i − A_i B_j):
  L_k = Σ_i λ_i A_i + Σ_{i<j} λ_ij (A_j A_i − A_i A_j) (with offset Σ_i λ_i B_i + Σ_{i<j} λ_ij (A_j B_i − A_i B_j)),
  and the step is M_k = I + L_k, one Euler step of the window's log-ODE, as the authors' code. (exp(L_k) is the
  exact flow over the window up to third order in its increments; tests/test_linear_scan.py checks that order.)

The whole sequence is one linear recurrence, evaluated step by step or by a parallel prefix scan
(`neuralde_seq.solvers.linear_scan`). The A_i are

- ``"diagonal"``: diagonal (SLiCE's D-LNCDE; each unit its own scalar recurrence; brackets vanish),
- ``"block"``: block-diagonal with blocks of ``block_size`` (BD-LNCDE, the papers' recommended variant),
- ``"dense"``: full H × H (the linear NCDE, DE-LNCDE),
- ``"dplr"``: diagonal plus rank ``rank``, A_i = diag(a_i) + U_i V_iᵀ (DPLR-LNCDE; the structure of a pre-Delta
  CT-FWP's step, docs/linear_cdes.md). At depth 2 its steps are formed densely, as the authors' code does: the
  brackets of low-rank matrices are not low-rank.

Scale. For a diagonal A, Π_k (1 + ΔX_k a) ≈ exp(a (X_end − X_start) − a² Σ_k ΔX_k² / 2), and for non-commuting
matrices the quadratic variation Σ_k ΔX_k² can make the flow grow too: what decides whether a long sequence stays
finite is how far and how roughly the path moves, not the number of steps. A time channel counting observations
moves by 360 on a 361-point series, and e^{360 a} overflows from a random init; a spiky standardised channel (aeon's
ACSF1) has a quadratic variation in the hundreds. ``channel_scales`` divides each channel of the path by a fixed
number: the registry sets `path_scales` of the training control, the larger of each channel's standard deviation
over the points and the scale that brings its mean quadratic variation down to `ROUGHNESS_BUDGET` (10). A
standardised channel is left about as it is unless it is very rough, a uniform clock spans about √12 ≈ 3.5 units
whatever its length and units, and the flow starts O(init_scale). The level-2 terms λ_ij are divided by the product of
the two channels' scales, which is the log-signature of the rescaled path.

h_0 = W_0 X(t_0) + c_0 (the path's first point; ``control.initial_value`` for log-signature windows); the logits are
a linear readout of the mean of h over each sample's knots from the first to its final one (``readout="mean"``, the
authors' classifier, the default) or of h at its final knot (``readout="final"``). After a sample's end its
increments are zero, so M = I and b = 0: each sample stops at its own end, whatever the padding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ..controls import Control
from ..input_checks import check_input_matches, check_input_type, check_num_outputs
from ..solvers.linear_scan import apply_matrix, compose_matrices, parallel_scan, sequential_scan
from .recurrent import _positive_int

__all__ = ["LinearCDE", "SCANS", "READOUTS", "LINEAR_STRUCTURES", "ROUGHNESS_BUDGET", "path_scales", "control_depth_of"]

SCANS = ("auto", "parallel", "sequential")
READOUTS = ("final", "mean")
LINEAR_STRUCTURES = ("diagonal", "block", "dense", "dplr")


def _path_channels(channels: int, depth: int) -> int:
    """d with d + d(d−1)/2 = channels (depth 2) or d = channels (depth 1)."""
    if depth == 1:
        return channels
    d = int(round((math.sqrt(8 * channels + 1) - 1) / 2))
    if d * (d + 1) // 2 != channels:
        raise ValueError(
            f"a depth-2 log-signature in a Lyndon basis has d + d(d−1)/2 channels; {channels} is not "
            "such a number (an 'expand' basis, or window start values, are not read by LinearCDE)"
        )
    return d


def _window_start(control: Control) -> torch.Tensor:
    """(B, d) the path's first point, which log-signature windows carry as ``initial_value``."""
    if control.initial_value is None:
        raise ValueError("log-signature windows without initial_value: LinearCDE starts from the path's first point")
    return control.initial_value


def control_depth_of(control: Control) -> int:
    """The depth at which a `LinearCDE` reads ``control``: 1 for an interpolated control or depth-1 log-signature
    windows, 2 for depth-2 windows.

    Arguments:
        control: an interpolated control or log-signature windows (``build_control``).

    Returns:
        1 or 2.

    Raises:
        ValueError: log-signature windows of depth > 2, in the "expand" basis, or with window start values.
    """
    if not control.piecewise_constant:
        return 1
    if any(name.startswith("start_") for name in control.channels_info):
        raise ValueError(
            "LinearCDE reads the windows' log-signatures only: build the control with window_start_values=False"
        )
    d = _window_start(control).shape[-1]
    if control.channels == d:
        return 1
    if control.channels == d + d * (d - 1) // 2:
        return 2
    raise ValueError(
        f"LinearCDE reads log-signatures of depth 1 or 2 in a Lyndon basis: a {d}-channel path has "
        f"{d} or {d + d * (d - 1) // 2} terms, the control has {control.channels}"
    )


def _pieces(control: Control) -> tuple[torch.Tensor, int]:
    """(B, S, D) each piece's increment (interpolated control) or log-signature (windows), zero after each end."""
    pieces = int(control.end_index.max())
    coeffs = control.coeffs[:, :pieces]  # (B, S, 4, D)
    if control.piecewise_constant:
        terms = coeffs[:, :, 0]  # a window's log-signature over its unit length of s
    else:
        gaps = (control.knots[1 : pieces + 1] - control.knots[:pieces]).to(coeffs.dtype).view(1, -1, 1)
        terms = gaps * (coeffs[:, :, 1] + gaps * (coeffs[:, :, 2] + gaps * coeffs[:, :, 3]))
    active = torch.arange(pieces, device=coeffs.device).unsqueeze(0) < control.end_index.unsqueeze(1)
    return terms * active.unsqueeze(-1).to(terms.dtype), pieces


# The quadratic variation Σ_k ΔX_k² a rescaled channel may keep (averaged over the samples). The log of a state unit
# after S steps I + ΔX_k A is a random walk whose variance is about ‖A_i‖² Σ_i Σ_k (ΔX^i_k)² ≈ init_scale² × the
# channels' mean quadratic variation (‖A_i‖² ≈ init_scale² / d at init): a budget of 10 keeps its spread about
# 1.6 at the default init. With 100, aeon's BasicMotions (6 noisy channels, quadratic variation 90 each) started
# every linear NCDE at states of 1e8-1e15; with 10, at 10-240. A smooth channel (PickupGestureWiimoteZ: 5.6) is not
# shrunk by it; a spiky one (ACSF1: 3,500) is.
ROUGHNESS_BUDGET = 10.0


def path_scales(control: Control) -> tuple[float, ...]:
    """Each path channel's scale over the training paths: the larger of its standard deviation over the points of all
    samples and the scale that brings its quadratic variation Σ_k ΔX_k², averaged over the samples, down to
    `ROUGHNESS_BUDGET`. The ``channel_scales`` the registry gives a `LinearCDE` from its training control (module
    docstring, "Scale"). A channel that never moves gets 1.

    Arguments:
        control: an interpolated control or log-signature windows of depth 1 or 2.

    Returns:
        A tuple of d positive floats, d the path's channels.
    """
    control_depth_of(control)  # refuses what a LinearCDE cannot read
    d = _window_start(control).shape[-1] if control.piecewise_constant else control.channels
    terms, pieces = _pieces(control)
    increments = terms[..., :d].double()
    # X − X(t_0) at every knot (the spread does not depend on the starting level)
    points = torch.cat([torch.zeros_like(increments[:, :1]), increments.cumsum(dim=1)], dim=1)
    valid = torch.arange(pieces + 1, device=points.device).unsqueeze(0) <= control.end_index.unsqueeze(1)
    spread = points[valid].std(dim=0, correction=0)  # over every sample's knots up to its end
    # zero increments after each end add nothing to the quadratic variation
    roughness = (increments.square().sum(dim=1).mean(dim=0) / ROUGHNESS_BUDGET).sqrt()
    scale = torch.maximum(spread, roughness)
    return tuple(float(v) if v > 0 and math.isfinite(v) else 1.0 for v in scale.tolist())


class LinearCDE(nn.Module):
    """Structured linear neural CDE classifier (module docstring).

    Arguments:
        in_channels: the control's channels: d for an interpolated path or depth-1 windows, d + d(d−1)/2 for
            depth-2 windows (d the path's channels).
        num_classes: number of outputs.
        hidden: H, width of the state.
        structure: "diagonal", "block", "dense" or "dplr" (the A_i's structure).
        block_size: k, the block width: required with ``structure="block"`` (H a multiple of it), refused
            otherwise.
        rank: r, the low rank of ``structure="dplr"`` (required there, refused otherwise).
        scan: "parallel" (a prefix scan of the steps' affine maps), "sequential" (the step-by-step reference) or
            "auto" (default: sequential on a CPU, parallel on an accelerator, `scan_for`); all give the same states
            up to rounding.
        init_scale: the A_i's entries are drawn from N(0, init_scale² / (d·k)), k the width each row mixes (1
            diagonal, block_size, H dense, r for the low-rank factors), so that the flow starts near the identity
            (default 0.5).
        control_depth: 1 (default) or 2: the log-signature depth of the control read (`control_depth_of`; the
            registry sets it from the training control).
        channel_scales: d positive numbers dividing the path's channels (module docstring, "Scale"), or None
            (default: 1, the raw path). The registry gives the training control's `path_scales`.
        readout: "mean" (default: the mean of h over the sample's knots, h_0 included, as the authors' classifier)
            or "final" (h at each sample's final knot).

    ``forward(control)`` gives (B, num_classes) logits; ``hidden_states(control)`` the states at every knot;
    ``penalty()`` the authors' Lip(2) regulariser (see there).

    Raises:
        ValueError: sizes not positive integers, an unknown structure or scan, H not a multiple of block_size,
            block_size or rank with the wrong structure, in_channels not a depth-2 width, bad
            channel_scales.
    """

    channel_scales: torch.Tensor  # buffers: (d,) the path channels' scales; the level-2 pairs' channels (P,)
    _pair_left: torch.Tensor
    _pair_right: torch.Tensor

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden: int = 64,
        structure: str = "diagonal",
        block_size: int | None = None,
        rank: int | None = None,
        scan: str = "auto",
        init_scale: float = 0.5,
        control_depth: int = 1,
        channel_scales: Sequence[float] | None = None,
        readout: str = "mean",
    ):
        super().__init__()
        _positive_int("in_channels", in_channels)
        _positive_int("hidden", hidden)
        check_num_outputs(num_classes)
        if structure not in LINEAR_STRUCTURES:
            raise ValueError(f"structure must be one of {LINEAR_STRUCTURES}, got {structure!r}")
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
        if readout not in READOUTS:
            raise ValueError(f"readout must be one of {READOUTS}, got {readout!r}")
        if (block_size is not None) != (structure == "block"):
            raise ValueError("block_size goes with structure='block' (and is required there)")
        if (rank is not None) != (structure == "dplr"):
            raise ValueError("rank goes with structure='dplr' (and is required there)")
        if structure == "block":
            block_size = _positive_int("block_size", block_size)
            if hidden % block_size:
                raise ValueError(f"hidden ({hidden}) must be a multiple of block_size ({block_size})")
        if structure == "dplr":
            _positive_int("rank", rank)
        if not (isinstance(init_scale, (int, float)) and math.isfinite(init_scale) and init_scale > 0):
            raise ValueError(f"init_scale must be a finite positive number, got {init_scale!r}")
        if control_depth not in (1, 2):
            raise ValueError(f"control_depth must be 1 or 2, got {control_depth!r}")
        d = _path_channels(in_channels, control_depth)
        if channel_scales is None:
            scales = torch.ones(d)
        else:
            scales = torch.as_tensor(list(channel_scales), dtype=torch.float64)
            if scales.shape != (d,) or not bool(torch.isfinite(scales).all() and (scales > 0).all()):
                raise ValueError(
                    f"channel_scales must be {d} finite positive numbers (one per path channel), got {channel_scales!r}"
                )
            scales = scales.to(torch.get_default_dtype())
        self.in_channels, self.hidden, self.structure, self.block_size, self.rank, self.scan = (
            in_channels,
            hidden,
            structure,
            block_size,
            rank,
            scan,
        )
        self.control_depth, self.path_channels, self.readout_mode = control_depth, d, readout
        self.register_buffer("channel_scales", scales)
        block = block_size or 1  # block_size is given exactly with structure "block"
        width = {"diagonal": 1, "block": block, "dense": hidden, "dplr": 1}[structure]
        shape = {
            "diagonal": (d, hidden),
            "dplr": (d, hidden),
            "block": (d, hidden // block, block, block),
            "dense": (d, hidden, hidden),
        }[structure]
        self.A = nn.Parameter(torch.randn(shape) * (init_scale / math.sqrt(d * width)))
        if structure == "dplr":
            assert rank is not None  # required with structure "dplr" (checked above)
            # U_i V_iᵀ h then has entries of the size a dense A_i h has: σ² sqrt(r H) = init_scale / sqrt(d)
            factor_std = math.sqrt(init_scale / math.sqrt(d * rank * hidden))
            self._factor_std = factor_std
            self.U = nn.Parameter(torch.randn(d, hidden, rank) * factor_std)
            self.V = nn.Parameter(torch.randn(d, hidden, rank) * factor_std)
        self.B = nn.Linear(d, hidden, bias=False)
        self.initial = nn.Linear(d, hidden)
        self.readout = nn.Linear(hidden, num_classes)
        pairs = [(i, j) for i in range(d) for j in range(i + 1, d)] if control_depth == 2 else []
        self.register_buffer("_pair_left", torch.tensor([i for i, _ in pairs], dtype=torch.long), persistent=False)
        self.register_buffer("_pair_right", torch.tensor([j for _, j in pairs], dtype=torch.long), persistent=False)

    def scan_for(self, device: torch.device) -> str:
        """The scan used on ``device``: ``scan`` itself, or for "auto" the sequential loop on a CPU and the parallel
        scan elsewhere. A CPU thread runs a parallel round's products one after another, so the scan's extra
        arithmetic (⌈log₂ S⌉ compositions per step) costs without its lower depth paying: slice-block took 12.6x
        the sequential loop's time per training step at EigenWorms' shape (docs/performance.md).

        Arguments:
            device: where the control lives.

        Returns:
            "parallel" or "sequential".
        """
        if self.scan != "auto":
            return self.scan
        return "sequential" if torch.device(device).type == "cpu" else "parallel"

    @property
    def step_structure(self) -> str:
        """The structure of the step matrices M_k: the A_i's, except DPLR at depth 2, whose steps are dense."""
        return "dense" if (self.structure == "dplr" and self.control_depth == 2) else self.structure

    def matrices(self) -> torch.Tensor:
        """The A_i in the step structure's layout: (d, H), (d, n, k, k) or (d, H, H) (DPLR: diag(a_i) + U_i V_iᵀ,
        dense; only needed at depth 2, where its steps are dense)."""
        if self.structure == "dplr":
            return torch.diag_embed(self.A) + self.U @ self.V.transpose(-1, -2)
        return self.A

    def brackets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The Lie brackets of the affine fields f_i(h) = A_i h + B_i for the pairs i < j (lexicographic, the
        order of the log-signature's level-2 terms).

        Returns:
            (A_br, B_br): A_br (P, ...) the matrices A_j A_i − A_i A_j (in `step_structure`; zero for diagonal A),
            B_br (P, H) the vectors A_j B_i − A_i B_j, P = d(d−1)/2 (P = 0 at depth 1).
        """
        i, j = self._pair_left, self._pair_right
        A, structure = self.matrices(), self.step_structure
        A_i, A_j = A[i], A[j]
        B_i, B_j = self.B.weight.t()[i], self.B.weight.t()[j]  # (P, H)
        A_br = compose_matrices(A_j, A_i, structure) - compose_matrices(A_i, A_j, structure)
        B_br = apply_matrix(A_j, B_i, structure) - apply_matrix(A_i, B_j, structure)
        return A_br, B_br

    def step_maps(self, terms: torch.Tensor):
        """The steps' affine maps (M_k, b_k) from the pieces' increments or log-signatures.

        Arguments:
            terms: (S, B, in_channels) per piece, time-major: the increments ΔX_k (depth 1) or the log-signature
                (λ_i, then λ_ij for i < j; depth 2), already divided by the channel scales.

        Returns:
            (M, b): M (S, B, H), (S, B, n, k, k), (S, B, H, H) or the tuple (d, U, V) of (S, B, H),
            (S, B, H, d·r), (S, B, H, d·r) by `step_structure`; b (S, B, H).
        """
        d = self.path_channels
        level1, level2 = terms[..., :d], terms[..., d:]
        b = self.B(level1)
        if self.step_structure == "dplr":
            diag = 1 + level1 @ self.A
            S, B = level1.shape[:2]
            # Σ_i ΔX^i U_i V_iᵀ = [ΔX^1 U_1, ..., ΔX^d U_d] [V_1, ..., V_d]ᵀ
            U = (level1[..., None, None] * self.U).permute(0, 1, 3, 2, 4).reshape(S, B, self.hidden, -1)
            V = self.V.permute(1, 0, 2).reshape(self.hidden, -1).expand(S, B, -1, -1)
            return (diag, U, V), b
        if self.structure == "diagonal":
            M = 1 + level1 @ self.A
        else:
            M = torch.tensordot(level1, self.matrices(), dims=([2], [0]))
            M = M + torch.eye(M.shape[-1], dtype=M.dtype, device=M.device)
        if self.control_depth == 2:
            A_br, B_br = self.brackets()
            b = b + level2 @ B_br
            if self.structure != "diagonal":  # diagonal matrices commute: their brackets are zero
                M = M + torch.tensordot(level2, A_br, dims=([2], [0]))
        return M, b

    def _scaled_terms(self, control: Control) -> tuple[torch.Tensor, int]:
        terms, pieces = _pieces(control)
        scales = self.channel_scales.to(terms.dtype)
        if self.control_depth == 2:
            scales = torch.cat([scales, scales[self._pair_left] * scales[self._pair_right]])
        return terms / scales, pieces

    def scan_inputs(self, control: Control) -> tuple[torch.Tensor, torch.Tensor]:
        """What the recurrence reads: each piece's terms divided by the channel scales and the state at knot 0.

        Arguments:
            control: as in `hidden_states` (not checked here).

        Returns:
            (terms (B, S, in_channels), zero at and after each sample's end; h0 (B, H)).
        """
        terms, _ = self._scaled_terms(control)
        first = _window_start(control) if control.piecewise_constant else control.coeffs[:, 0, 0]  # X(t_0)
        return terms, self.initial(first / self.channel_scales.to(first.dtype))

    def hidden_states(self, control: Control) -> torch.Tensor:
        """The states at every knot.

        Arguments:
            control: an interpolated control or log-signature windows (depth ``control_depth``), batch size B,
                ``channels == in_channels``.

        Returns:
            (B, K, H) the states at the knots 0..max(end_index) (constant after a sample's end).
        """
        check_input_type(self, control, Control)
        if control.channels != self.in_channels:
            raise ValueError(f"control has {control.channels} channels but the model expects {self.in_channels}")
        depth = control_depth_of(control)
        if depth != self.control_depth:
            raise ValueError(
                f"the model reads depth-{self.control_depth} controls, the control has depth {depth} "
                f"(create it with control_depth={depth})"
            )
        check_input_matches(self, control)
        terms, h0 = self.scan_inputs(control)
        M, b = self.step_maps(terms.transpose(0, 1))
        scan = parallel_scan if self.scan_for(terms.device) == "parallel" else sequential_scan
        states = scan(M, b, h0, self.step_structure)  # (S, B, H)
        return torch.cat([h0.unsqueeze(1), states.transpose(0, 1)], dim=1)

    def forward(self, control: Control) -> torch.Tensor:
        """Logits from h at each sample's final knot, or from its mean over the sample's knots (``readout``).

        Arguments:
            control: as in `hidden_states`.

        Returns:
            (B, num_classes) logits.
        """
        states = self.hidden_states(control)
        if self.readout_mode == "mean":
            knots = torch.arange(states.shape[1], device=states.device).unsqueeze(0)
            inside = (knots <= control.end_index.unsqueeze(1)).to(states.dtype).unsqueeze(-1)  # (B, K, 1)
            return self.readout((states * inside).sum(dim=1) / inside.sum(dim=1))
        final = states[torch.arange(states.shape[0], device=states.device), control.end_index]
        return self.readout(final)

    def learning_rate_scales(self) -> list[tuple[nn.Parameter, float]]:
        """The factors of the training loop's learning rate for A (and DPLR's U, V), read by `fit`'s
        `parameter_groups`: each makes one Adam step change A_i by about ``lr`` in spectral norm, as it does for a
        diagonal A.

        Why: Adam moves every entry by about ``lr`` per step whatever its size. A coherent step over a row that mixes
        k entries changes A_i by k·lr in norm (k = block_size for blocks, H dense), and the low-rank part
        U_i V_iᵀ by H·√r·σ·lr (σ the factors' init std; about 19 lr at H 64, rank 4, one data channel). The flow
        is exponential in A, so at the shared default lr (3e-3) the states of slice-dense grew 1.5x per step on a
        2,000-point series of JapaneseVowels and its loss reached 65 by step 16 (docs/linear_cdes.md, "Learning
        rate"). Dividing by k (and by H·√r·σ) is the maximal-update rule for Adam (a hidden matrix's rate goes
        as 1 / fan-in).

        Returns:
            (parameter, factor) pairs: (A, 1 / k) with k = 1 diagonal and DPLR, block_size, H dense; DPLR also
            (U, f) and (V, f) with f = 1 / (H·√r·σ).
        """
        width = {"diagonal": 1, "block": self.block_size or 1, "dense": self.hidden, "dplr": 1}[self.structure]
        scales = [(self.A, 1.0 / width)]
        if self.structure == "dplr":
            assert self.rank is not None  # required with structure "dplr"
            factor = 1.0 / (self.hidden * math.sqrt(self.rank) * self._factor_std)
            scales += [(self.U, factor), (self.V, factor)]
        return scales

    def penalty(self) -> torch.Tensor:
        """The authors' Lip(2) regulariser of a linear field: the mean over path channels i of the Frobenius norm
        of A_i's parameters (the entries of A_i; for "dplr" its diagonal and both factors). Weighted by the
        training loop's ``penalty_weight`` (their λ).

        Returns:
            () the penalty.
        """
        flat = self.A.reshape(self.path_channels, -1)
        if self.structure == "dplr":
            flat = torch.cat(
                [flat, self.U.reshape(self.path_channels, -1), self.V.reshape(self.path_channels, -1)], dim=1
            )
        return flat.norm(dim=1).mean()

    def extra_repr(self) -> str:
        """The structure, scan and depth, shown by ``print(module)``."""
        extra = {"block": f", block_size={self.block_size}", "dplr": f", rank={self.rank}"}.get(self.structure, "")
        return (
            f"structure={self.structure!r}{extra}, hidden={self.hidden}, scan={self.scan!r}, "
            f"control_depth={self.control_depth}, readout={self.readout_mode!r}"
        )
