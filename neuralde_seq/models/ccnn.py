"""CCNN: the Continuous Convolutional Neural Network (paper 001, Knigge, Romero et al.), 1D causal case.

The paper defines the CCNN for N-dimensional data; this module implements only what our sequences need:
**one dimension, causal** (the output at step t reads inputs at steps <= t). The pieces, by their names in
the paper:

- `MAGNet`: the kernel network phi_Kernel, a Multiplicative
  Anisotropic Gabor Network (from FlexConv, Romero et al. 2022a) mapping a relative position c in [-1, 1]
  to one kernel value per channel. With one input dimension "anisotropic" reduces to one Gaussian scale
  per hidden unit. It lives, with the Gaussian mask and the lag positions, in
  `neuralde_seq.models.kernel_networks`.
- `SeparableFlexConv`: a depthwise continuous convolution (one kernel per input channel, sampled
  from the MAGNet and multiplied by a learnable Gaussian mask), then a pointwise 1x1 channel mixing. The
  mask is *cropped* where it falls below a threshold, so the kernel network is sampled, and the
  convolution computed, only over the lags the mask lets through. The kernel network's last layer is
  rescaled at initialisation so that the generated kernel has variance gain^2 / (N_in |Omega|) ("kernel
  rescaling", Sec. 4.1), and `SeparableFlexConv.kernel_l2` gives the L2 penalty on the generated
  kernel (Eq. 3).
- `CCNNBlock`: the CCNN residual block (Fig. 7): x + act(Linear(Dropout(act(SepFlexConv(Norm(x)))))).
- `CCNN`: the classifier: input SepFlexConv, norm and activation, residual blocks, final norm,
  the output at each sample's own last time step, a linear head.

Grid and positions. The convolution runs on the observation grid (the T rows of the batch), as the
paper's 1D sequences: missing values are zero-filled and a mask channel per input channel says which
were observed (the two always go together). A kernel of ``kernel_size`` K covers lags 0..K-1; lag j sits
at the normalised position c_j = 1 - 2 j / (K - 1), so lag 0 (the current step) is c = 1 and the oldest
lag is c = -1 (the paper maps the longest training kernel [0, N] onto [-1, 1], App. C.1; for a causal
kernel the mask starts centred on c = 1, the current step). The times of the observations are not read:
this is a grid model, and irregular spacing shows only through the mask channel.

Convolution. ``y[t, c] = sum_{j=0}^{L-1} k[c, j] x[t - j, c]`` with zeros before the start, computed
directly (``conv1d``) for short kernels and by FFT for long ones: the depthwise case of
`neuralde_seq.ops.causal_conv.causal_conv`, whose two algorithms tests/test_ops.py compares.

Causality holds exactly in evaluation mode. In training mode the default batch norm (the paper's
BatchNorm; its statistics use only the valid steps) normalises with statistics of the whole batch, later
steps included, as any batch norm does; ``norm="layer"`` is causal in both modes.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..input_checks import check_model_input, check_num_outputs
from ..observations import Observations
from ..ops.causal_conv import causal_conv
from .kernel_networks import MAGNet, cropped_length, gaussian_mask, kernel_positions

__all__ = ["SeparableFlexConv", "CCNNBlock", "CCNN", "MaskedBatchNorm"]


# ----------------------------------------------------------------------------------- SeparableFlexConv


class SeparableFlexConv(nn.Module):
    """Separable FlexConv, 1D causal: depthwise continuous kernel x cropped Gaussian mask, then 1x1 mixing.

    The depthwise kernel of input channel c at lag j is k[c, j] = MAGNet(c_j)[c] * mask(c_j), with
    mask(c) = exp(-(c - mean)^2 / (2 width^2)) (mean and width learnable; mean starts at 1, lag 0). Lags
    past the mask's lower threshold crossing are cropped (see `cropped_length`): the MAGNet is
    sampled and the convolution computed only on the L kept lags (and never more than the input length).

    Kernel rescaling (paper Sec. 4.1), at construction: the MAGNet's last layer is multiplied so that the
    generated (masked, cropped) kernel has variance gain^2 / (fan_in |Omega|), with |Omega| = L the
    cropped kernel length at initialisation and fan_in = N_in (the paper's formula) or 1
    (``rescale_by_channels=False``, what the CCNN public code does for separable convolutions: the
    depthwise kernel then preserves each channel's variance and the 1x1 mixing handles N_in).
    ``kernel_rescale="paper"`` multiplies by gain / sqrt(fan_in |Omega|), which assumes that the kernel
    network's raw output has unit variance; a MAGNet's raw masked kernel at initialisation has a mean
    square of about 0.4 (0.2 to 1 from seed to seed), so the result is only about right.
    ``kernel_rescale="measured"`` (default) divides in addition by the RMS of the raw kernel measured on
    its initial grid, which gives the kernel exactly the target mean square. ``None``: no rescaling.

    Arguments:
        in_channels: channels before the 1x1 mixing.
        out_channels: channels after the 1x1 mixing.
        kernel_size: K, the longest kernel in steps (lags 0..K-1 map onto positions 1..-1).
        kernel_hidden: hidden width of the MAGNet (default 32).
        kernel_layers: number of MAGNet layers (default 3).
        omega_0: the MAGNet's frequency scale (default 10.0).
        mask_width: initial mask width (on the [-1, 1] position scale).
        mask_threshold: crop threshold: lags where the mask falls below it are cropped, in (0, 1).
        learn_mask_mean: whether the mask mean is learnt (else fixed at 1).
        kernel_rescale: "measured", "paper" or None (see above).
        kernel_gain: the gain g.
        rescale_by_channels: see above.
        conv: the convolution algorithm: "auto" (FFT when the kernel is longer than ``fft_threshold`` lags),
            "direct" or "fft". (On one CPU thread the direct depthwise ``conv1d`` was faster up to about 1000 lags for
            T = 4000, hence the default 512; GPUs were not measured.)
        fft_threshold: kernel length in lags above which ``conv="auto"`` uses the FFT (default 512).
        bias: a bias per channel after the depthwise convolution, and in the 1x1 mixing.

    ``forward(x)``: (B, T, in_channels) -> (B, T, out_channels).
    """

    mask_mean: torch.Tensor  # a parameter, or a buffer when not learnt

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        kernel_hidden: int = 32,
        kernel_layers: int = 3,
        omega_0: float = 10.0,
        mask_width: float = 0.075,
        mask_threshold: float = 0.1,
        learn_mask_mean: bool = True,
        kernel_rescale: str | None = "measured",
        kernel_gain: float = 1.0,
        rescale_by_channels: bool = True,
        conv: str = "auto",
        fft_threshold: int = 512,
        bias: bool = True,
    ):
        super().__init__()
        if conv not in ("auto", "direct", "fft"):
            raise ValueError(f"conv must be 'auto', 'direct' or 'fft', got {conv!r}")
        if kernel_rescale not in ("measured", "paper", None):
            raise ValueError(f"kernel_rescale must be 'measured', 'paper' or None, got {kernel_rescale!r}")
        if not 0.0 < mask_threshold < 1.0:
            raise ValueError(f"mask_threshold must lie in (0, 1), got {mask_threshold}")
        if mask_width <= 0:
            raise ValueError(f"mask_width must be positive, got {mask_width}")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, int(kernel_size)
        # The Gabor centres start inside the mask's initial support (1.667 widths, as the public code).
        self.kernel_net = MAGNet(
            in_channels, kernel_hidden, kernel_layers, omega_0, causal=True, spread=1.667 * mask_width
        )
        self.mask_width = nn.Parameter(torch.tensor(float(mask_width)))
        mean = torch.tensor(1.0)
        if learn_mask_mean:
            self.mask_mean = nn.Parameter(mean)
        else:
            self.register_buffer("mask_mean", mean)
        self.mask_threshold = float(mask_threshold)
        self.conv, self.fft_threshold = conv, int(fft_threshold)
        self.bias = nn.Parameter(torch.zeros(in_channels)) if bias else None
        self.pointwise = nn.Linear(in_channels, out_channels, bias=bias)
        nn.init.kaiming_normal_(self.pointwise.weight)
        if bias:
            nn.init.zeros_(self.pointwise.bias)
        self.kernel_gain = float(kernel_gain)
        self.rescale_by_channels = bool(rescale_by_channels)
        if kernel_rescale is not None:
            self._rescale_kernel(measured=kernel_rescale == "measured")

    # -- kernel
    def kernel_length(self) -> int:
        """L, the number of lags kept by the crop with the current mask parameters."""
        mean, width = float(self.mask_mean.detach()), float(self.mask_width.detach())
        return cropped_length(self.kernel_size, mean, width, self.mask_threshold)

    @property
    def positions(self) -> torch.Tensor:
        """Positions of the K lags, (K,), in the parameters' dtype and device."""
        return kernel_positions(self.kernel_size, dtype=self.mask_width.dtype, device=self.mask_width.device)

    def mask(self, positions: torch.Tensor | None = None) -> torch.Tensor:
        """The Gaussian mask at ``positions`` (default: all K lag positions)."""
        positions = self.positions if positions is None else positions
        return gaussian_mask(positions, self.mask_mean, self.mask_width.abs())

    def kernel(self, max_length: int | None = None) -> torch.Tensor:
        """The generated (masked, cropped) depthwise kernel, (in_channels, L); at most ``max_length`` lags."""
        L = self.kernel_length()
        if max_length is not None:
            L = max(1, min(L, int(max_length)))
        c = self.positions[:L]
        return self.kernel_net(c).transpose(0, 1) * self.mask(c)

    def kernel_l2(self) -> torch.Tensor:
        """Sum of squares of the generated kernel (the paper's L2 penalty on kernels, Eq. 3, before
        lambda / 2)."""
        return self.kernel().pow(2).sum()

    @torch.no_grad()
    def _rescale_kernel(self, measured: bool) -> None:
        k = self.kernel()
        fan_in = (self.in_channels if self.rescale_by_channels else 1) * k.shape[1]
        target = self.kernel_gain**2 / fan_in
        # The output bias is zero at initialisation, so scaling the weight scales the kernel.
        mean_square = float(k.pow(2).mean()) if measured else 1.0
        if mean_square > 0:
            self.kernel_net.output_linear.weight.mul_(math.sqrt(target / mean_square))

    # -- forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"SeparableFlexConv reads a tensor (batch, length, {self.in_channels}), got {type(x).__name__}"
            )
        if x.dim() != 3 or x.shape[-1] != self.in_channels:
            raise ValueError(f"x must have shape (batch, length, {self.in_channels}), got {tuple(x.shape)}")
        k = self.kernel(max_length=x.shape[1])
        algorithm = self.conv
        if algorithm == "auto":
            algorithm = "fft" if k.shape[1] > self.fft_threshold else "direct"
        y = causal_conv(x, k.to(x.dtype), algorithm)
        if self.bias is not None:
            y = y + self.bias
        return self.pointwise(y)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"mask_threshold={self.mask_threshold}, conv={self.conv!r}"
        )


# ------------------------------------------------------------------------------------------- norms


class MaskedBatchNorm(nn.Module):
    """Batch normalisation over channels whose statistics use only the valid (non-padding) time steps.

    Training: per-channel mean and (biased) variance over the valid entries of the batch; running
    statistics updated as ``nn.BatchNorm1d`` does (momentum, unbiased running variance). Evaluation: the
    running statistics, so each sample's output is independent of the rest of the batch and of padding.
    ``forward(x, valid)``: x (B, T, C), valid (B, T) bool.
    """

    running_mean: torch.Tensor  # buffers: (C,)
    running_var: torch.Tensor

    def __init__(self, channels: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        if self.training:
            w = valid.unsqueeze(-1).to(x.dtype)
            n = w.sum()
            mean = (x * w).sum(dim=(0, 1)) / n
            var = ((x - mean) ** 2 * w).sum(dim=(0, 1)) / n
            with torch.no_grad():
                unbiased = var * (n / (n - 1)) if n > 1 else var
                self.running_mean.lerp_(mean.detach().to(self.running_mean.dtype), self.momentum)
                self.running_var.lerp_(unbiased.detach().to(self.running_var.dtype), self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class _LayerNorm(nn.LayerNorm):
    """LayerNorm over channels at each time step (ignores ``valid``: it is pointwise in time)."""

    def forward(self, x: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        return super().forward(x)


def _make_norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return MaskedBatchNorm(channels)
    if kind == "layer":
        return _LayerNorm(channels)
    raise ValueError(f"norm must be 'batch' or 'layer', got {kind!r}")


# ------------------------------------------------------------------------------------------- blocks


class CCNNBlock(nn.Module):
    """The CCNN residual block (paper Fig. 7; S4-style with a nonlinearity at the end):
    x + act(Linear(Dropout(act(SeparableFlexConv(Norm(x)))))).

    ``forward(x, valid)``: x (B, T, channels), valid (B, T) bool (used by the batch norm's statistics).
    """

    def __init__(self, channels: int, kernel_size: int, *, dropout: float = 0.0, norm: str = "batch", **conv_options):
        super().__init__()
        self.norm = _make_norm(norm, channels)
        self.conv = SeparableFlexConv(channels, channels, kernel_size, **conv_options)
        self.activation = nn.GELU()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(channels, channels)
        nn.init.kaiming_normal_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        y = self.activation(self.conv(self.norm(x, valid)))
        y = self.activation(self.linear(self.dropout(y)))
        return x + y


class CCNN(nn.Module):
    """CCNN classifier on raw observations (1D, causal).

    Input: the observed values zero-filled, concatenated with one 0/1 mask channel per value channel
    (2 * in_channels channels). Then SeparableFlexConv -> Norm -> GELU to ``hidden`` channels, ``blocks``
    `CCNNBlock`, a final norm, the features at each sample's own last time step (index length - 1),
    optionally concatenated with static features, and a linear head.

    Arguments:
        in_channels: value channels C (``Observations.channels``).
        num_classes: number of classes.
        hidden: channels of the residual stream (default 32).
        blocks: number of residual blocks (default 4).
        kernel_size: longest kernel in steps (K; positions are normalised by it; default 64).
        kernel_hidden: hidden width of the MAGNet kernel network (default 16; paper: 32).
        kernel_layers: number of MAGNet layers (default 3, as the paper).
        omega_0: the MAGNet's frequency scale (default 10.0).
        mask_width: initial width of the Gaussian mask, on the [-1, 1] position scale (default 0.075, as the
            public code).
        mask_threshold: the mask value below which lags are cropped, in (0, 1) (default 0.1, as the public
            code).
        learn_mask_mean: whether the Gaussian mask's mean is learnt (else fixed at 1; default True).
        dropout: dropout in the blocks (default 0.1).
        norm: "batch" (masked batch norm, as the paper's BatchNorm; default) or "layer".
        kernel_rescale: "measured" (default), "paper" or None: the kernel rescaling at construction (see
            `SeparableFlexConv`).
        kernel_gain: the gain g of the kernel rescaling (default 1.0; see `SeparableFlexConv`).
        rescale_by_channels: whether the rescaling's fan-in counts the input channels (default True; see
            `SeparableFlexConv`).
        conv: the convolution algorithm: "auto" (default: FFT when the kernel is longer than ``fft_threshold``
            lags), "direct" or "fft".
        fft_threshold: kernel length in lags above which ``conv="auto"`` uses the FFT (default 512).
        static_channels: number of static features appended to the readout (None: static is not read).

    ``forward(observations)`` -> logits (B, num_classes). ``kernel_l2()``: the sum over all layers of the
    generated kernels' sums of squares; the paper's regularised loss is loss + lambda / 2 * kernel_l2().
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden: int = 32,
        blocks: int = 4,
        *,
        kernel_size: int = 64,
        kernel_hidden: int = 16,
        kernel_layers: int = 3,
        omega_0: float = 10.0,
        mask_width: float = 0.075,
        mask_threshold: float = 0.1,
        learn_mask_mean: bool = True,
        dropout: float = 0.1,
        norm: str = "batch",
        kernel_rescale: str | None = "measured",
        kernel_gain: float = 1.0,
        rescale_by_channels: bool = True,
        conv: str = "auto",
        fft_threshold: int = 512,
        static_channels: int | None = None,
    ):
        super().__init__()
        check_num_outputs(num_classes)
        conv_options: dict[str, Any] = dict(
            kernel_hidden=kernel_hidden,
            kernel_layers=kernel_layers,
            omega_0=omega_0,
            mask_width=mask_width,
            mask_threshold=mask_threshold,
            learn_mask_mean=learn_mask_mean,
            kernel_rescale=kernel_rescale,
            kernel_gain=kernel_gain,
            rescale_by_channels=rescale_by_channels,
            conv=conv,
            fft_threshold=fft_threshold,
        )
        self.in_channels, self.num_classes = in_channels, num_classes
        self.input_conv = SeparableFlexConv(2 * in_channels, hidden, kernel_size, **conv_options)
        self.input_norm = _make_norm(norm, hidden)
        self.activation = nn.GELU()
        self.blocks = nn.ModuleList(
            CCNNBlock(hidden, kernel_size, dropout=dropout, norm=norm, **conv_options) for _ in range(blocks)
        )
        self.output_norm = _make_norm(norm, hidden)
        self.static_channels = static_channels
        self.head = nn.Linear(hidden + (static_channels or 0), num_classes)

    def flex_convs(self) -> list[SeparableFlexConv]:
        """Every `SeparableFlexConv` layer of the model.

        Returns:
            The layers, in module order.
        """
        return [m for m in self.modules() if isinstance(m, SeparableFlexConv)]

    def kernel_l2(self) -> torch.Tensor:
        """Sum over layers of the generated kernels' sums of squares (paper Eq. 3 without lambda / 2).

        Returns:
            A scalar tensor.
        """
        total = sum(conv.kernel_l2() for conv in self.flex_convs())
        assert isinstance(total, torch.Tensor)  # the model has at least one layer
        return total

    def penalty(self) -> torch.Tensor:
        """The regulariser the trainer weights by ``penalty_weight`` (λ): ½ · `kernel_l2` (paper Eq. 3).

        Returns:
            A scalar tensor.
        """
        return 0.5 * self.kernel_l2()

    def features(self, observations: Observations) -> torch.Tensor:
        """Features at every step (causal: step t reads steps <= t only).

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T steps.

        Returns:
            (B, T, hidden) features.
        """
        check_model_input(self, observations, Observations)  # type, then dtype and device against the weights
        values = observations.values
        if values.shape[-1] != self.in_channels:
            raise ValueError(f"expected {self.in_channels} value channels, got {values.shape[-1]}")
        observed = observations.mask
        valid = observations.valid
        x = torch.cat([torch.where(observed, values, torch.zeros_like(values)), observed.to(values.dtype)], -1)
        h = self.activation(self.input_norm(self.input_conv(x), valid))
        for block in self.blocks:
            h = block(h, valid)
        return self.output_norm(h, valid)

    def forward(self, observations: Observations) -> torch.Tensor:
        """Logits from the features at each sample's own last step (with the static features appended when
        ``static_channels`` is set).

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T steps.
                With ``static_channels``, ``observations.static`` (B, static_channels) is needed.

        Returns:
            (B, num_classes) logits.

        Raises:
            ValueError: wrong channels, or no static features for a model built with ``static_channels``.
        """
        h = self.features(observations)
        last = (observations.lengths - 1).to(h.device)
        out = h[torch.arange(h.shape[0], device=h.device), last]
        if self.static_channels is not None:
            if observations.static is None:
                raise ValueError(
                    f"this model was built with static_channels={self.static_channels}: the "
                    "observations need static features"
                )
            out = torch.cat([out, observations.static.to(out.dtype)], dim=-1)
        return self.head(out)
