"""CKConv and CKCNN: convolutions whose kernel is a continuous function of the relative position.

Paper 000 (Romero et al., "CKConv: Continuous Kernel Convolution for Sequential Data"). A CKConv layer
computes the causal convolution (Eq. 3-4)

    y(t) = Σ_{τ ≤ t} ψ(t − τ) x(τ) + bias,        ψ: R → R^{out × in},

where ψ is a small SIREN (the *kernel network*) evaluated at the relative positions the input needs.

Kernel network (paper Sec. 4.2 and App. E.1): `SirenKernel`,
whose architecture and SIREN initialisation `neuralde_seq.models.kernel_networks` describes.

Relative positions (paper App. E.1). A relative position Δ (time units) enters the kernel network as
p = 2Δ/horizon − 1: the largest relative position seen in training, ``horizon``, maps to 1 and Δ = 0 to
−1. ``horizon`` is fixed once (a constructor argument, or set from the first batch and stored as a
buffer): it never depends on how much a batch is padded, so padding cannot change a sample's output, and
the kernel stays one continuous function of time across lengths and sampling rates (App. E.2: the
normalisation must not follow each input's length).

Grid mode. The input is sampled on a regular grid of step ``step`` (time units between grid points at
training, 1/sr_train); the kernel is sampled at Δ_k = k · step, k = 0..L−1 (a global kernel, as long as
the input), and the convolution is computed by FFT (convolution theorem, paper Sec. 5) when L exceeds
``fft_threshold`` and directly (``conv1d``) otherwise; ``conv="fft"``/``"direct"`` force one (both
`neuralde_seq.ops.causal_conv.causal_conv`, compared in tests/test_ops.py).

Sampling-rate change (paper Eq. 5, App. A.2). Called with another step s (sampling rate sr2 = 1/s), the
kernel is sampled on the new grid, Δ_k = k · s (same continuous ψ, same horizon), and the sum is scaled
by sr1/sr2 = s/step: the Riemann sum Σ_k ψ(k s) x(t − k s) grows like 1/s, and Eq. 5,
(x*ψ)_sr2 ≈ (sr2/sr1)(x*ψ)_sr1, is undone by that factor. (App. E.3's Gaussian blurring of the kernel for
upsampled tests is not implemented.)

Irregular mode (paper Sec. 4.1 "irregularly sampled data"; CKCNN's default). Every observed point is read
at its own time:

    y(t_i) = Σ_{j: t_j ≤ t_i} ψ(t_i − t_j) x_j + bias,

summed over the observed entries only (a missing channel of x_j contributes nothing; it is not replaced
by a value). The kernel network is evaluated at the observed time differences with the same
normalisation as grid mode. On evenly spaced times the two modes compute the same sum whenever the
relative positions agree: when the spacing is ``step``, or when the horizon is set from the data (grid:
(L − 1) · step, irregular: the longest time span, so lag k maps to 2k/(L − 1) − 1 either way; a horizon
given in index units is read in time units here). No inverse-density weighting (App. A.1) and no Eq. 5
factor: it is the plain sum of the formula. Gradients do not flow into the times. Two forms compute it
(``irregular_conv``; `CKConv.plan_irregular` picks one per batch, the same for every layer of a CKCNN):

- Lattice form (`neuralde_seq.ops.causal_conv.lattice_causal_conv`). When every time of the batch lies on a
  lattice t = origin_b + n · h (integer times with points dropped, multiples of a resolution, a regular
  grid; `neuralde_seq.ops.causal_conv.find_lattice` finds the coarsest one, to the times' rounding), the sum
  is a grid convolution with the kernel sampled at k · h: the observed entries are scattered onto the N
  nodes (zeros where nothing is observed), convolved as in grid mode (FFT above ``fft_threshold`` nodes),
  and read back at each point's node. Exact (the same sum), at O(B · N log N): with 30 % of 1,429
  integer times dropped (T = 1,000, N = 1,429) one training step costs 1.4 times grid mode's on the same
  batch, against about 100 times for the pairwise form (one CPU thread; docs/performance.md). Arbitrary
  real times lie on no such lattice; a ``resolution`` snaps them to one
  (`neuralde_seq.ops.causal_conv.snap_times`: each time moves by at most resolution/2, so each term
  ψ(t_i − t_j) x_j by at most Lip(ψ) · resolution · |x_j|), in both forms alike.
- Pairwise form (`neuralde_seq.ops.causal_conv.irregular_causal_conv`, factorised through the kernel
  network's last layer): the reference, for any times. The kernel network runs once per distinct time
  difference, but the sum is over all pairs of points: time and memory O(B · T² · kernel_hidden) per layer.

``irregular_conv="auto"`` (the default) takes the lattice when there is one of at most
``max_lattice_size`` nodes and at most T² nodes (a sparser lattice costs more than the pairs), else the
pairwise form while T² stays within ``max_lattice_size``. Real-valued times on no lattice with more points than
that (the pairs of 2,000 points at batch 4 held 15 GB) are snapped to a lattice of `AUTO_LATTICE_NODES` (8,192)
nodes per horizon, a resolution fixed with the horizon, so a sample's answer never depends on its batch (each
term moves by at most Lip(ψ) · horizon / 8,192: relative positions by at most 2/8,192 of the kernel's domain);
give ``resolution`` to choose it, or ``irregular_conv="pairwise"`` for the exact sum. Only when even that lattice
exceeds ``max_lattice_size`` (a sample far longer than the horizon) does it sum over the pairs, and says so once
(`PairwiseFallbackWarning`).

Exactness of the irregular mode's invariances (tested): (1) shifting all times by a constant leaves every
Δ, hence every output, unchanged (exactly when the shift is exact in floating point). (2) Inserting
points at new times whose observed values are zero leaves a CKConv layer's outputs at the original times
unchanged exactly, because the layer is linear in x with its bias added per *output* point: an inserted
point adds ψ(t_i − t_new) · 0 = 0 (up to the summation order of the floating-point sum). A CKCNN is not
invariant to that: its first layer also produces a (non-zero) hidden feature *at* the inserted time,
which the next layer convolves. What a CKCNN is exactly invariant to is inserting points where nothing is
observed (all channels NaN) before a sample's end: in irregular mode the points that feed every layer are
those with at least one observed channel, while outputs are computed at every point of the sample.

CKCNN (paper Fig. 8, App. E). ``blocks`` residual blocks, each
CKConv → LayerNorm → ReLU → Dropout → CKConv → LayerNorm → ReLU → Dropout, plus a shortcut (a 1×1
linear map when the width changes, identity otherwise) and a ReLU after the sum, as in TCN residual
blocks; then each sample's output at its own last time (index ``lengths − 1``) and a linear head.
Everything between convolutions acts per time point, and the convolutions are causal, so padding after a
sample's end never changes its answer.

Missing values: grid mode zero-fills missing entries only together with one mask channel per input
channel (``mask_channel=True``, grid mode's default; paper Sec. 5, as Kidger et al. 2020); with
``mask_channel=False`` missing values raise. Irregular mode needs no filling: the first convolution and
the first block's 1×1 shortcut read the observed entries of each point only (a missing channel
contributes nothing to either), in both forms.

Penalty: `CKConv.kernel_l2` samples the kernel at k · ``step`` up to the horizon in both modes; in
irregular mode ``step`` should then be the data's time resolution (with the default 1.0 and times in
[0, 1] it reads ψ at Δ = 0 only).
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ..input_checks import check_model_input, check_num_outputs
from ..observations import Observations
from ..ops.causal_conv import Lattice, causal_conv, find_lattice, irregular_causal_conv, lattice_causal_conv, snap_times
from ..user_warnings import current_spelling, spell_options, warn_user
from .kernel_networks import SirenKernel, largest_span

__all__ = [
    "CKConv",
    "CKBlock",
    "CKCNN",
    "grid_inputs",
    "CONV_IMPLEMENTATIONS",
    "AUTO_LATTICE_NODES",
    "IRREGULAR_CONV_IMPLEMENTATIONS",
    "MODES",
    "MAX_LATTICE_SIZE",
    "TimesIgnoredWarning",
    "PairwiseFallbackWarning",
]


class TimesIgnoredWarning(UserWarning):
    """CKCNN in grid mode was given irregularly spaced times, which grid mode does not read (said once per model,
    at the user's call, with the fix in the form the model was built: constructor argument, estimator
    ``model_options`` or config row ``options``)."""


class PairwiseFallbackWarning(UserWarning):
    """Irregular mode found no affordable lattice for the times and computes the pairwise sum, O(T²)."""


def _spacings(observations: Observations) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T − 1) gaps between consecutive time points, and where they lie within each sample's length."""
    t = observations.times
    gaps = t[:, 1:] - t[:, :-1]
    inside = torch.arange(gaps.shape[1], device=t.device)[None, :] < (observations.lengths[:, None] - 1)
    return gaps, inside


def irregular_spacing(observations: Observations) -> tuple[float, float] | None:
    """The (smallest, largest) spacing of the first sample whose time points are not equally spaced, or None.

    Arguments:
        observations: `Observations`; each sample's points up to its length are compared.

    Returns:
        None when every sample is equally spaced (to 1e-6 relative), else that sample's spacing range.
    """
    gaps, inside = _spacings(observations)
    high = torch.where(inside, gaps, torch.full_like(gaps, -math.inf)).amax(1)
    low = torch.where(inside, gaps, torch.full_like(gaps, math.inf)).amin(1)
    uneven = inside.any(1) & (high - low > 1e-6 * high.abs())
    if not bool(uneven.any()):
        return None
    b = int(uneven.nonzero()[0])
    return float(low[b]), float(high[b])


CONV_IMPLEMENTATIONS = ("auto", "fft", "direct")
IRREGULAR_CONV_IMPLEMENTATIONS = ("auto", "lattice", "pairwise")
MODES = ("grid", "irregular")
MAX_LATTICE_SIZE = 65536
# irregular_conv="auto" on real-valued times with too many points for the pairwise sum: nodes per horizon of the
# lattice they are snapped to (relative positions move by at most 2/8192 of the kernel's domain).
AUTO_LATTICE_NODES = 8192


# ---------------------------------------------------------------------------------------------------------
# CKConv
# ---------------------------------------------------------------------------------------------------------


class CKConv(nn.Module):
    """Continuous kernel convolution (causal), in grid mode (`forward`) or irregular mode
    (`forward_irregular`; its lattice and pairwise forms: `plan_irregular`). See the module docstring.

    Arguments:
        in_channels: channels of the input.
        out_channels: channels of the output.
        kernel_hidden: hidden width of the kernel network (paper: 32).
        omega_0: ω0 of the kernel network.
        horizon: the largest relative position (time units) of training, mapped to 1; None: set by the
            first forward call (grid: (L − 1) · step; irregular: the largest time span) and then fixed.
        step: time between grid points at training (1/sr_train), in the units of ``horizon``.
        conv: "auto" (FFT when L > ``fft_threshold``, else direct), "fft" or "direct".
        fft_threshold: see ``conv``. (``conv`` and ``fft_threshold`` also choose how irregular mode's lattice
            form convolves, with L the number of lattice nodes.)
        weight_norm: weight normalisation in the kernel network.
        bias: a learned bias per output channel.
        irregular_conv: how irregular mode computes its sum (the same sum each way): "lattice" (the points
            scattered onto their batch's common lattice, convolved there: O(N log N) for N nodes; raises
            when the times lie on no lattice of at most ``max_lattice_size`` nodes), "pairwise" (the sum over
            every pair of points, O(T²): the reference) or "auto" (default: the lattice when there is one
            with at most ``max_lattice_size`` and at most T² nodes, T the most points of a sample, else
            pairwise, warning once with `PairwiseFallbackWarning` when no lattice was found and T² exceeds
            ``max_lattice_size``). See `plan_irregular`.
        resolution: irregular mode: None (default) reads the times as they are (a lattice, when used, holds
            them to their rounding); a positive number (time units) first snaps every time to the nearest
            multiple of it after its sample's first point (`neuralde_seq.ops.causal_conv.snap_times`: an
            approximation, error at most Lip(ψ) · resolution per term), which puts arbitrary real times on a
            lattice.
        max_lattice_size: irregular mode: the most nodes a lattice may have (default `MAX_LATTICE_SIZE`,
            65,536: a batch of 32 with 32 channels then needs a few GiB per layer, as the pairwise form at
            T = 1,000).
    """

    horizon: torch.Tensor  # a buffer: () float64, NaN until set

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        kernel_hidden: int = 32,
        omega_0: float = 30.0,
        horizon: float | None = None,
        step: float = 1.0,
        conv: str = "auto",
        fft_threshold: int = 64,
        weight_norm: bool = True,
        bias: bool = True,
        irregular_conv: str = "auto",
        resolution: float | None = None,
        max_lattice_size: int = MAX_LATTICE_SIZE,
    ):
        super().__init__()
        if conv not in CONV_IMPLEMENTATIONS:
            raise ValueError(f"conv must be one of {CONV_IMPLEMENTATIONS}, got {conv!r}")
        if irregular_conv not in IRREGULAR_CONV_IMPLEMENTATIONS:
            raise ValueError(f"irregular_conv must be one of {IRREGULAR_CONV_IMPLEMENTATIONS}, got {irregular_conv!r}")
        if resolution is not None and (
            isinstance(resolution, bool)
            or not isinstance(resolution, (int, float))
            or not (math.isfinite(resolution) and resolution > 0)
        ):
            raise ValueError(f"resolution must be None or a positive finite number, got {resolution!r}")
        if isinstance(max_lattice_size, bool) or not isinstance(max_lattice_size, int) or max_lattice_size < 1:
            raise ValueError(f"max_lattice_size must be a positive integer, got {max_lattice_size!r}")
        if not step > 0:
            raise ValueError(f"step must be positive, got {step!r}")
        if horizon is not None and not horizon > 0:
            raise ValueError(f"horizon must be positive, got {horizon!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_net = SirenKernel(out_channels, in_channels, kernel_hidden, omega_0, weight_norm)
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.register_buffer(
            "horizon", torch.tensor(float("nan") if horizon is None else float(horizon), dtype=torch.float64)
        )
        self.step = float(step)
        self.conv = conv
        self.fft_threshold = int(fft_threshold)
        self.irregular_conv = irregular_conv
        self.resolution = None if resolution is None else float(resolution)
        self.max_lattice_size = max_lattice_size
        self._warned_pairwise = False  # PairwiseFallbackWarning once per layer, not once per batch

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, horizon={float(self.horizon):g}, step={self.step:g}, "
            f"conv={self.conv!r}, fft_threshold={self.fft_threshold}, irregular_conv={self.irregular_conv!r}, "
            f"resolution={self.resolution}, max_lattice_size={self.max_lattice_size}"
        )

    # ---- relative positions ----
    @property
    def has_horizon(self) -> bool:
        return not bool(torch.isnan(self.horizon))

    def set_horizon(self, horizon: float, overwrite: bool = False) -> None:
        """Fix the horizon (no-op if already set, unless ``overwrite``); a non-positive value becomes ``step``."""
        if self.has_horizon and not overwrite:
            return
        horizon = float(horizon)
        if not math.isfinite(horizon):
            raise ValueError(f"horizon must be finite, got {horizon}")
        self.horizon.fill_(horizon if horizon > 0 else self.step)

    def _horizon(self) -> float:
        if not self.has_horizon:
            raise RuntimeError("the CKConv horizon is not set yet: pass horizon= or call the layer once")
        return float(self.horizon)

    def normalise(self, delta: torch.Tensor) -> torch.Tensor:
        """Relative positions Δ (time units) → kernel-network input 2Δ/horizon − 1."""
        return delta * (2.0 / self._horizon()) - 1.0

    def kernel_at(self, delta: torch.Tensor) -> torch.Tensor:
        """ψ at relative positions Δ (...,) in time units: (..., out, in)."""
        return self.kernel_net(self.normalise(delta))

    def grid_kernel(self, length: int, step: float | None = None, *, dtype=None, device=None) -> torch.Tensor:
        """The kernel sampled at Δ_k = k · step, k = 0..length−1: (out, in, length). No Eq. 5 factor."""
        step = self.step if step is None else float(step)
        ref = self.kernel_net.linear_layers()[0].bias
        assert ref is not None  # the kernel network's layers have biases
        delta = torch.arange(length, dtype=dtype or ref.dtype, device=device or ref.device) * step
        return self.kernel_at(delta).permute(1, 2, 0)

    def kernel_l2(self) -> torch.Tensor:
        """L2 penalty: sum of squares of the kernel sampled on the training grid, Δ_k = k · step for
        k = 0..⌊horizon/step⌋ (all relative positions a training input of span ``horizon`` uses)."""
        count = int(math.floor(self._horizon() / self.step + 1e-9)) + 1
        return self.grid_kernel(count).square().sum()

    def _grid_algorithm(self, length: int) -> str:
        """The `causal_conv` algorithm for a grid of ``length`` points under ``conv`` and ``fft_threshold``."""
        return "fft" if self.conv == "fft" or (self.conv == "auto" and length > self.fft_threshold) else "direct"

    # ---- grid mode ----
    def forward(self, x: torch.Tensor, step: float | None = None) -> torch.Tensor:
        """Grid mode: x (B, L, in) sampled with ``step`` (default: the training step) → (B, L, out).

        The kernel is sampled at k · step and the sum scaled by step / self.step (paper Eq. 5).
        """
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"CKConv.forward reads a tensor (batch, length, {self.in_channels}), got {type(x).__name__}"
            )
        if x.dim() != 3 or x.shape[-1] != self.in_channels:
            raise ValueError(f"x must have shape (batch, length, {self.in_channels}), got {tuple(x.shape)}")
        if torch.isnan(x).any():
            raise ValueError(
                "x contains NaN: CKConv never zero-fills missing values itself; use a mask channel "
                "(grid_inputs) or forward_irregular"
            )
        step = self.step if step is None else float(step)
        if not step > 0:
            raise ValueError(f"step must be positive, got {step!r}")
        length = x.shape[1]
        if not self.has_horizon:
            self.set_horizon((length - 1) * step)
        kernel = self.grid_kernel(length, step, dtype=x.dtype, device=x.device)
        y = causal_conv(x, kernel, self._grid_algorithm(length))
        if step != self.step:
            y = y * (step / self.step)
        return y if self.bias is None else y + self.bias

    # ---- irregular mode ----
    def forward_irregular(
        self, times: torch.Tensor, values: torch.Tensor, observed: torch.Tensor, points: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Irregular mode: y(t_i) = Σ_{j: t_j ≤ t_i, observed} ψ(t_i − t_j) x_j + bias at every t_i, by the form
        `plan_irregular` picks (lattice or pairwise; the same sum).

        Arguments:
            times: (B, T) time of each point (need not be sorted; only differences matter).
            values: (B, T, in); entries that are not observed may hold anything, NaN included.
            observed: (B, T, in) or (B, T) bool: which entries (or whole points) contribute.
            points: (B, T) bool, the points whose outputs are wanted (e.g. those within each sample's length:
                padding times then cannot stretch the lattice), or None (default): every point. The outputs
                at the other points are finite but unspecified.

        Returns (B, T, out): the output at every point, observed or not.
        """
        if not all(isinstance(a, torch.Tensor) for a in (times, values, observed)):
            raise TypeError(
                "CKConv.forward_irregular reads tensors times (B, T), values (B, T, in) and observed, got "
                f"{', '.join(type(a).__name__ for a in (times, values, observed))}"
            )
        if values.dim() != 3 or values.shape[-1] != self.in_channels:
            raise ValueError(f"values must have shape (batch, length, {self.in_channels}), got {tuple(values.shape)}")
        if times.shape != values.shape[:2]:
            raise ValueError(f"times has shape {tuple(times.shape)}, values {tuple(values.shape)}: (B, T) must agree")
        if observed.dim() == 2:
            observed = observed.unsqueeze(-1).expand_as(values)
        if observed.shape != values.shape or observed.dtype != torch.bool:
            raise ValueError("observed must be a bool tensor of shape (B, T) or (B, T, in)")
        if points is None:
            points = torch.ones(times.shape, dtype=torch.bool, device=times.device)
        elif not isinstance(points, torch.Tensor) or points.shape != times.shape or points.dtype != torch.bool:
            raise ValueError(f"points must be None or a bool tensor of shape {tuple(times.shape)}")
        if not self.has_horizon:
            self.set_horizon(largest_span(times, observed.any(-1), self.step))
        times, lattice = self.plan_irregular(times, points)
        return self.irregular_sum(times, lattice, values, observed)

    def plan_irregular(self, times: torch.Tensor, points: torch.Tensor) -> tuple[torch.Tensor, Lattice | None]:
        """How irregular mode computes its sum for these times (one plan serves every layer of a network).

        1. With a ``resolution``, the times are snapped to it (`neuralde_seq.ops.causal_conv.snap_times`).
        2. ``irregular_conv="pairwise"``: no lattice. Else `neuralde_seq.ops.causal_conv.find_lattice`: the
           coarsest lattice origin_b + n · h of at most ``max_lattice_size`` nodes holding every point to
           the times' rounding (after snapping, the snapped times lie on one by construction).
        3. ``"lattice"`` uses it, or raises without one. ``"auto"`` uses it when it has at most T² nodes (T:
           the most points of a sample; on a sparser lattice the T² pairs cost less), else the pairwise
           form; without a lattice (and without a ``resolution``), when T² exceeds ``max_lattice_size``, it
           snaps the times to horizon / `AUTO_LATTICE_NODES` and takes that lattice, or, if that one too exceeds
           ``max_lattice_size``, the pairwise form with a warning once (`PairwiseFallbackWarning`).

        Arguments:
            times: (B, T) time of each point.
            points: (B, T) bool, the points whose outputs are wanted (they must lie on the lattice).

        Returns:
            The times the sum reads ((B, T): snapped when a ``resolution`` is set, else ``times``), and the
            `neuralde_seq.ops.causal_conv.Lattice` they lie on, or None for the pairwise form.

        Raises:
            ValueError: ``irregular_conv="lattice"`` and no lattice of at most ``max_lattice_size`` nodes holds
                the times.
        """
        if self.resolution is not None:
            times = snap_times(times, points, self.resolution)
        if self.irregular_conv == "pairwise":
            return times, None
        lattice = find_lattice(times, points, self.max_lattice_size)
        if self.irregular_conv == "lattice":
            if lattice is None:
                raise ValueError(
                    f"irregular_conv='lattice': these times lie on no common lattice of at most "
                    f"max_lattice_size = {self.max_lattice_size} nodes (to their rounding); pass a "
                    f"resolution to snap them to one, a larger max_lattice_size, or "
                    f"irregular_conv='pairwise'"
                )
            return times, lattice
        most_points = int(points.sum(1).max()) if points.numel() else 0
        if lattice is None and self.resolution is None and most_points**2 > self.max_lattice_size:
            # Real-valued times on no lattice, too many points for the pairs (2,000 points at batch 4 held 15 GB):
            # snap them to AUTO_LATTICE_NODES nodes per horizon, a resolution fixed with the horizon (so a sample's
            # answer does not depend on its batch), each term moved by at most Lip(ψ) · horizon / AUTO_LATTICE_NODES.
            snapped = snap_times(times, points, self._horizon() / AUTO_LATTICE_NODES)
            lattice = find_lattice(snapped, points, self.max_lattice_size)
            if lattice is not None:
                return snapped, lattice
        if lattice is None:
            if most_points**2 > self.max_lattice_size and not self._warned_pairwise:
                self._warned_pairwise = True
                warn_user(
                    f"CKConv irregular mode: these times lie on no common lattice of at most "
                    f"{self.max_lattice_size} nodes (to their rounding), so it sums over every pair of "
                    f"points, O(T²) per layer with T = {most_points}; a resolution (time units, the option "
                    f"resolution) snaps them to a lattice and makes it O(N log N)",
                    PairwiseFallbackWarning,
                )
            return times, None
        return times, (lattice if lattice.size <= most_points**2 else None)

    def irregular_sum(
        self, times: torch.Tensor, lattice: Lattice | None, values: torch.Tensor, observed: torch.Tensor
    ) -> torch.Tensor:
        """y(t_i) = Σ_{j: t_j ≤ t_i, observed} ψ(t_i − t_j) x_j + bias, on ``lattice`` or pairwise (None).

        Arguments:
            times: (B, T) times, as `plan_irregular` returns them.
            lattice: the plan's `neuralde_seq.ops.causal_conv.Lattice`, or None for the pairwise form.
            values: (B, T, in); entries that are not observed may hold anything, NaN included.
            observed: (B, T, in) or (B, T) bool: which entries (or whole points) contribute.

        Returns (B, T, out).
        """
        if lattice is None:
            if observed.dim() == 2:
                observed = observed.unsqueeze(-1).expand_as(values)
            # ψ(Δ) = W h(Δ) + b with h the kernel network's hidden features: the sum is contracted through h.
            weight, kernel_bias = self.kernel_net.output_weight()
            y = irregular_causal_conv(
                times,
                values,
                observed,
                lambda delta: self.kernel_net.hidden_features(self.normalise(delta)),
                weight,
                kernel_bias,
            )
        else:
            kernel = self.grid_kernel(lattice.size, lattice.spacing, dtype=values.dtype, device=values.device)
            y = lattice_causal_conv(
                lattice.index, lattice.size, values, observed, kernel, self._grid_algorithm(lattice.size)
            )
        return y if self.bias is None else y + self.bias


# ---------------------------------------------------------------------------------------------------------
# CKCNN
# ---------------------------------------------------------------------------------------------------------


class CKBlock(nn.Module):
    """Residual block: (CKConv → LayerNorm → ReLU → Dropout) × 2, plus shortcut, then ReLU.

    ``forward(x, conv)`` takes x (B, L, in) and ``conv(layer, h)``, a function applying one of this
    block's CKConv layers (grid or irregular), so the same block serves both modes.
    """

    def __init__(self, in_channels: int, out_channels: int, dropout: float = 0.0, **conv_options):
        super().__init__()
        self.conv1 = CKConv(in_channels, out_channels, **conv_options)
        self.norm1 = nn.LayerNorm(out_channels)
        self.conv2 = CKConv(out_channels, out_channels, **conv_options)
        self.norm2 = nn.LayerNorm(out_channels)
        self.dropout = nn.Dropout(dropout)
        self.shortcut = nn.Linear(in_channels, out_channels) if in_channels != out_channels else nn.Identity()

    def forward(self, x: torch.Tensor, conv) -> torch.Tensor:
        out = self.dropout(F.relu(self.norm1(conv(self.conv1, x))))
        out = self.dropout(F.relu(self.norm2(conv(self.conv2, out))))
        return F.relu(out + self.shortcut(x))


def grid_inputs(values: torch.Tensor, lengths: torch.Tensor, mask_channel: bool) -> torch.Tensor:
    """Grid-mode input (B, T, C or 2C) from observed values (B, T, C) with NaN for missing.

    Missing entries within a sample's length become 0 only together with mask channels (1 = observed,
    0 = missing; appended after the values) when ``mask_channel``; otherwise they raise. Steps after a
    sample's end become 0 (causal convolutions never read them for the sample's own outputs).
    """
    length = values.shape[1]
    valid = (torch.arange(length, device=values.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)
    observed = ~torch.isnan(values) & valid
    if not mask_channel and (valid & ~observed).any():
        raise ValueError(
            "values has missing entries (NaN) within the samples' lengths: CKCNN in grid mode needs "
            "mask_channel=True (zero-fill plus a mask channel per input channel) or mode='irregular'"
        )
    x = torch.where(observed, values, torch.zeros((), dtype=values.dtype, device=values.device))
    return torch.cat([x, observed.to(values.dtype)], dim=-1) if mask_channel else x


class CKCNN(nn.Module):
    """Continuous kernel CNN classifier (paper Fig. 8): CKBlocks, readout at each sample's last time, head.

    Arguments:
        in_channels: channels of the observations.
        num_classes: number of classes.
        hidden: channels of every block.
        blocks: number of residual blocks (paper: 2).
        kernel_hidden: hidden width of every kernel network (paper: 32).
        omega_0: ω0 of every kernel network.
        dropout: dropout after each convolution's activation.
        mode: "irregular" (default: every observation at its own time, on the batch's lattice or pairwise,
            see ``irregular_conv``) or "grid" (points read by index on a grid of spacing ``step``, their times
            ignored; FFT/direct convolution).
        mask_channel: grid mode only: append a mask channel per input channel; False requires fully
            observed data. None (default): True in grid mode, False in irregular mode.
        horizon: the largest relative position (time units) of training, mapped to 1, shared by all layers
            (see `CKConv`); None (default): set from the first batch's longest sample and then fixed.
        step: time between grid points at training, in the units of ``horizon`` (default 1.0; see `CKConv`).
        conv: "auto" (default: FFT when the length exceeds ``fft_threshold``, else direct), "fft" or "direct".
        fft_threshold: the length above which ``conv="auto"`` uses the FFT (default 64).
        weight_norm: weight normalisation in the kernel networks (default True).
        step_from_times: grid mode only: read each batch's sampling step from its observation times (the
            common spacing of consecutive times; a batch whose spacings differ raises ValueError) instead of
            assuming the training ``step``. A test set sampled at another rate (e.g. every 2nd point, times
            kept) then gets the paper's Eq. 5 treatment without being told: kernel at k · step, sum scaled
            by step / ``step``. ``step`` must be the training data's spacing.
        irregular_conv: irregular mode only: "auto" (default), "lattice" or "pairwise" (see `CKConv`): how
            every layer computes the sum; one plan per batch (`CKConv.plan_irregular`) serves all layers.
        resolution: irregular mode only: None (default, the times as they are) or a time resolution the times
            are snapped to (see `CKConv`).
        max_lattice_size: irregular mode only: the most nodes of a lattice (default 65,536; see `CKConv`).

    ``forward(observations)`` returns logits (B, num_classes); see `forward` for the options.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden: int = 30,
        blocks: int = 2,
        kernel_hidden: int = 32,
        omega_0: float = 30.0,
        dropout: float = 0.0,
        mode: str = "irregular",
        *,
        mask_channel: bool | None = None,
        horizon: float | None = None,
        step: float = 1.0,
        conv: str = "auto",
        fft_threshold: int = 64,
        weight_norm: bool = True,
        step_from_times: bool = False,
        irregular_conv: str = "auto",
        resolution: float | None = None,
        max_lattice_size: int = MAX_LATTICE_SIZE,
    ):
        super().__init__()
        check_num_outputs(num_classes)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if step_from_times and mode != "grid":
            raise ValueError("step_from_times applies to grid mode; irregular mode reads the times anyway")
        if mode == "grid" and (
            irregular_conv != "auto" or resolution is not None or max_lattice_size != MAX_LATTICE_SIZE
        ):
            raise ValueError(
                "irregular_conv, resolution and max_lattice_size apply to irregular mode; grid mode "
                "reads the points by index"
            )
        if not isinstance(blocks, int) or blocks < 1:
            raise ValueError(f"blocks must be a positive integer, got {blocks!r}")
        if mask_channel is None:
            mask_channel = mode == "grid"
        if mask_channel and mode == "irregular":
            raise ValueError("mask_channel applies to grid mode only: irregular mode sums over observed entries")
        self.in_channels, self.num_classes, self.mode = in_channels, num_classes, mode
        self.mask_channel = bool(mask_channel)
        self.step = float(step)
        self.step_from_times = bool(step_from_times)
        conv_options = dict(
            kernel_hidden=kernel_hidden,
            omega_0=omega_0,
            horizon=horizon,
            step=step,
            conv=conv,
            fft_threshold=fft_threshold,
            weight_norm=weight_norm,
            irregular_conv=irregular_conv,
            resolution=resolution,
            max_lattice_size=max_lattice_size,
        )
        first = 2 * in_channels if self.mask_channel else in_channels
        self.blocks = nn.ModuleList(
            [CKBlock(first if b == 0 else hidden, hidden, dropout, **conv_options) for b in range(blocks)]
        )
        self.head = nn.Linear(hidden, num_classes)
        # TimesIgnoredWarning once per model (not per batch), its fix spelled as the model was built
        self._warned_times_ignored = False
        self._option_spelling = current_spelling()

    def convolutions(self) -> list[CKConv]:
        """Every `CKConv` layer of the model.

        Returns:
            The layers, in module order.
        """
        return [m for m in self.modules() if isinstance(m, CKConv)]

    def kernel_l2(self) -> torch.Tensor:
        """Sum of every CKConv layer's `CKConv.kernel_l2` (add ``λ ·`` this to the loss).

        Returns:
            A scalar tensor.
        """
        total = sum(layer.kernel_l2() for layer in self.convolutions())
        assert isinstance(total, torch.Tensor)  # the model has at least one layer
        return total

    def penalty(self) -> torch.Tensor:
        """The regulariser ``train_classifier`` weights by ``penalty_weight``: `kernel_l2` (paper 000
        defines no kernel penalty of its own; this is the plain sum of squares of the sampled kernels).

        Returns:
            A scalar tensor.
        """
        return self.kernel_l2()

    def _set_horizon(self, observations: Observations, step: float) -> None:
        layers = [layer for layer in self.convolutions() if not layer.has_horizon]
        if not layers:
            return
        if self.mode == "grid":
            horizon = (int(observations.lengths.max()) - 1) * step
        else:
            horizon = largest_span(observations.times, observations.mask.any(-1), step)
        for layer in layers:
            layer.set_horizon(horizon)

    def sampling_step(self, observations: Observations) -> float:
        """The common spacing of consecutive observation times within every sample of the batch (times after
        a sample's end excluded).

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T time points.

        Returns:
            The mean spacing, or the training ``step`` if no sample has two points.

        Raises:
            ValueError: the spacings differ by more than 1e-6 relative: grid mode needs one regular grid per
                batch.
        """
        gaps, inside = _spacings(observations)
        gaps = gaps[inside]
        if gaps.numel() == 0:
            return self.step
        low, high = float(gaps.min()), float(gaps.max())
        if high - low > 1e-6 * abs(high):
            raise ValueError(
                f"step_from_times needs regularly spaced times, but this batch's spacings range over "
                f"[{low:g}, {high:g}]; use mode='irregular' for irregular times"
            )
        return float(gaps.mean())

    def features(self, observations: Observations, step: float | None = None) -> torch.Tensor:
        """Output of the last block at every time point.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T time points.
            step: grid mode only: this input's sampling step (paper Eq. 5); None (default): read from the times
                with ``step_from_times``, else the training ``step``.

        Returns:
            (B, T, hidden) features.

        Raises:
            ValueError: wrong channels, ``step`` in irregular mode, or irregular spacing with
                ``step_from_times``.
        """
        check_model_input(self, observations, Observations)  # type, then dtype and device against the weights
        if observations.channels != self.in_channels:
            raise ValueError(
                f"observations have {observations.channels} channels but the model expects {self.in_channels}"
            )
        if step is not None and self.mode != "grid":
            raise ValueError("step (a sampling-rate change) applies to grid mode; irregular mode reads the times")
        if step is None and self.step_from_times:
            step = self.sampling_step(observations)
        step = self.step if step is None else float(step)
        self._set_horizon(observations, step)
        if self.mode == "grid":
            spacing = None if self.step_from_times else irregular_spacing(observations)
            if spacing is not None and not getattr(self, "_warned_times_ignored", False):
                # Grid mode reads point k as time k · step: uneven times would be ignored without a word.
                self._warned_times_ignored = True
                fix = spell_options(
                    getattr(self, "_option_spelling", current_spelling()),
                    mode="irregular",
                    drop=("mask_channel", "step_from_times"),
                )
                warn_user(
                    f"CKCNN in grid mode reads the points as equally spaced and ignores their times, but "
                    f"these times are not equally spaced (spacings from {spacing[0]:g} to {spacing[1]:g} "
                    f"within a sample): {fix} (irregular mode, the default) to read them. Said once per "
                    f"model.",
                    TimesIgnoredWarning,
                )
            h = grid_inputs(observations.values, observations.lengths, self.mask_channel)
            conv = lambda layer, x: layer(x, step)  # noqa: E731
        else:
            valid = observations.valid
            channel_mask = observations.mask
            point_mask = channel_mask.any(-1)
            times = torch.where(
                valid, observations.times, torch.zeros((), dtype=observations.times.dtype, device=valid.device)
            )
            first_conv = cast(CKBlock, self.blocks[0]).conv1  # nn.ModuleList types its items as any Module
            # One plan (lattice or pairwise) for every layer: the times are the same throughout.
            times, lattice = first_conv.plan_irregular(times, valid)

            def conv(layer, x):
                return layer.irregular_sum(times, lattice, x, channel_mask if layer is first_conv else point_mask)

            # The shortcut of the first block reads the observed entries only (missing ones contribute nothing).
            h = torch.where(
                channel_mask, observations.values, torch.zeros((), dtype=observations.values.dtype, device=valid.device)
            )
        for block in self.blocks:
            h = block(h, conv)
        return h

    def forward(
        self, observations: Observations, step: float | None = None, return_sequence: bool = False
    ) -> torch.Tensor:
        """Logits read at each sample's own last time (index ``lengths − 1``), or at every time point.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T time points.
            step: grid mode only: this input's sampling step (paper Eq. 5); None (default): read from the times
                with ``step_from_times``, else the training ``step``.
            return_sequence: return the logits at every time point (default False).

        Returns:
            (B, num_classes), or (B, T, num_classes) with ``return_sequence=True``.
        """
        h = self.features(observations, step)
        if return_sequence:
            return self.head(h)
        index = (observations.lengths - 1).to(h.device).view(-1, 1, 1).expand(-1, 1, h.shape[-1])
        return self.head(h.gather(1, index).squeeze(1))
