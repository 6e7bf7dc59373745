"""Continuous kernel parameterisations: networks mapping a relative position to kernel values.

The two continuous-kernel convolutions of this package sample their kernels from these networks:

- `SirenKernel` (with `WeightNormLinear`): CKConv's kernel network ψ
  (`neuralde_seq.models.ckconv`, paper 000, Romero et al.).
- `MAGNet` with `gaussian_mask` and `cropped_length`: CCNN's kernel network and the
  FlexConv mask that crops it (`neuralde_seq.models.ccnn`, paper 001, Knigge, Romero et al.).
- Relative positions: `largest_span` gives CKConv's horizon (the largest time span seen, which
  maps to position 1; Δ enters as 2Δ/horizon − 1), `kernel_positions` CCNN's normalised lag
  positions (lag 0 at 1, lag K − 1 at −1).

SirenKernel (paper 000, Sec. 4.2 and App. E.1). Three layers, 1 → hidden → hidden → out·in, with hidden
layers ``sin(ω0 (W x + b))`` and a linear last layer, every layer weight-normalised (Salimans & Kingma:
W = g · v / ‖v‖, one g per output unit). Initialisation (SIREN): first layer W ~ U(−1/in, 1/in) (in = 1,
the position), later layers W ~ U(−√(6/in)/ω0, √(6/in)/ω0); sine-layer biases b_i ~ U(−π/‖W_i‖, π/‖W_i‖)
as paper Sec. 4.2 prescribes (the bias is inside ω0(·), so this spreads every unit's phase uniformly over
its period), then reduced modulo the period 2π/ω0 (the same function; it keeps float32 precise: drawn
biases reach π ω0/√2 in the second layer, phases of ~10⁴ rad at ω0 ≈ 70, which cost about two digits of
the kernel); the last layer's bias is zero. With weight normalisation the *parametrisation's* tensors are
initialised: ``weight_v`` = the drawn W and ``weight_g`` = its row norms, so the effective weight
g · v/‖v‖ is exactly the drawn W (writing an effective ``weight`` would be lost:
docs/design.md#pitfalls-of-public-code).

MAGNet (paper 001, from FlexConv, Romero et al. 2022a): a Multiplicative Anisotropic Gabor Network
mapping a relative position c in [-1, 1] to one kernel value per channel; with one input dimension
"anisotropic" reduces to one Gaussian scale per hidden unit (see `MAGNet`).
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "WeightNormLinear",
    "SirenKernel",
    "MAGNet",
    "gaussian_mask",
    "cropped_length",
    "kernel_positions",
    "largest_span",
]


# ------------------------------------------------------------------------ SIREN kernel network (CKConv)


class WeightNormLinear(nn.Module):
    """A linear layer with weight normalisation: effective weight W = g · v / ‖v‖ (row-wise norm).

    Parameters ``weight_g`` (out, 1), ``weight_v`` (out, in) and ``bias`` (out,). ``weight`` is the
    effective weight (a property); `set_weight` initialises g and v so that it equals a given W.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_v = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_g = nn.Parameter(torch.empty(out_features, 1))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.set_weight(nn.init.kaiming_uniform_(torch.empty(out_features, in_features), a=math.sqrt(5)))

    @property
    def weight(self) -> torch.Tensor:
        return self.weight_g * self.weight_v / self.weight_v.norm(dim=1, keepdim=True)

    @torch.no_grad()
    def set_weight(self, weight: torch.Tensor) -> None:
        """Set v = W and g = ‖W_i‖ so that the effective weight equals ``weight``."""
        self.weight_v.copy_(weight)
        self.weight_g.copy_(weight.norm(dim=1, keepdim=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _set_weight(layer: nn.Linear | WeightNormLinear, weight: torch.Tensor) -> None:
    if isinstance(layer, WeightNormLinear):
        layer.set_weight(weight)
    else:
        with torch.no_grad():
            layer.weight.copy_(weight)


class SirenKernel(nn.Module):
    """The kernel network MLP^ψ: normalised relative position p → kernel value ψ(p), (out, in).

    Three layers 1 → hidden → hidden → out·in; hidden layers ``sin(ω0 (W x + b))``; weight normalisation
    on every layer (``weight_norm=True``); SIREN initialisation (see the module docstring).

    Arguments:
        out_channels: the convolution's output channels (the kernel's first dimension).
        in_channels: the convolution's input channels (the kernel's second dimension).
        hidden: width of the two hidden layers (paper: 32).
        omega_0: ω0 of the sine layers.
        weight_norm: weight-normalised layers (paper) or plain ``nn.Linear``.
    """

    def __init__(
        self, out_channels: int, in_channels: int, hidden: int = 32, omega_0: float = 30.0, weight_norm: bool = True
    ):
        super().__init__()
        if hidden < 1:
            raise ValueError(f"hidden must be a positive integer, got {hidden!r}")
        if not omega_0 > 0:
            raise ValueError(f"omega_0 must be positive, got {omega_0!r}")
        self.out_channels, self.in_channels = out_channels, in_channels
        self.hidden, self.omega_0 = hidden, float(omega_0)
        linear = WeightNormLinear if weight_norm else nn.Linear
        self.layers = nn.ModuleList(
            [linear(1, hidden), linear(hidden, hidden), linear(hidden, out_channels * in_channels)]
        )
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """SIREN initialisation of the effective weights (module docstring), written to g and v."""
        for index, layer in enumerate(self.linear_layers()):
            assert layer.bias is not None  # every layer is made with a bias
            fan_in = layer.in_features
            bound = 1.0 / fan_in if index == 0 else math.sqrt(6.0 / fan_in) / self.omega_0
            weight = torch.empty(layer.out_features, fan_in).uniform_(-bound, bound)
            _set_weight(layer, weight)
            if index < len(self.layers) - 1:  # sine layer: b_i ~ U(−π/‖W_i‖, π/‖W_i‖) (paper Sec. 4.2) ...
                spread = math.pi / weight.norm(dim=1, dtype=torch.float64).clamp_min(1e-12)
                bias = (torch.rand(layer.out_features, dtype=torch.float64) * 2 - 1) * spread
                # ... reduced modulo the sine's period 2π/ω0: the same function and the same training
                # dynamics, but float32 no longer loses W x against a bias of size up to ~π ω0/√2.
                period = 2 * math.pi / self.omega_0
                layer.bias.copy_(torch.remainder(bias + period / 2, period) - period / 2)
            else:
                layer.bias.zero_()

    def linear_layers(self) -> list[nn.Linear | WeightNormLinear]:
        """The layers, of the types __init__ made (nn.ModuleList types its items as any Module)."""
        return cast("list[nn.Linear | WeightNormLinear]", list(self.layers))

    def hidden_features(self, positions: torch.Tensor) -> torch.Tensor:
        """Output of the two sine layers at normalised positions (...,): shape (..., hidden)."""
        h = positions.unsqueeze(-1)
        for layer in self.layers[:-1]:
            h = torch.sin(self.omega_0 * layer(h))
        return h

    def output_weight(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last layer's effective weight as (out, in, hidden) and bias as (out, in)."""
        last = self.linear_layers()[-1]
        bias = None if last.bias is None else last.bias.view(self.out_channels, self.in_channels)
        return last.weight.view(self.out_channels, self.in_channels, self.hidden), bias

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """Kernel values at normalised positions (...,): shape (..., out, in)."""
        return self.layers[-1](self.hidden_features(positions)).unflatten(-1, (self.out_channels, self.in_channels))


# ------------------------------------------------------------------------------------ relative positions


def largest_span(times: torch.Tensor, points: torch.Tensor, default: float) -> float:
    """The largest t_last − t_first over the samples, counting the points where ``points`` is True.

    Arguments: times (B, T); points (B, T) bool; default: returned when no sample has a point.
    """
    first = torch.where(points, times, math.inf).amin(1)
    last = torch.where(points, times, -math.inf).amax(1)
    span = (last - first)[torch.isfinite(last - first)]
    return float(span.max()) if span.numel() else default


def kernel_positions(kernel_size: int, dtype=None, device=None) -> torch.Tensor:
    """Normalised positions of lags 0..K-1: c_j = 1 - 2 j / (K - 1), from 1 (lag 0) down to -1."""
    if kernel_size < 2:
        raise ValueError(f"kernel_size must be at least 2, got {kernel_size}")
    lags = torch.arange(kernel_size, dtype=dtype or torch.get_default_dtype(), device=device)
    return 1.0 - 2.0 * lags / (kernel_size - 1)


# ------------------------------------------------------------------------- MAGNet and its mask (CCNN)


def gaussian_mask(positions: torch.Tensor, mean: torch.Tensor, width: torch.Tensor) -> torch.Tensor:
    """The FlexConv Gaussian mask exp(-(c - mean)^2 / (2 width^2)); equals 1 at c = mean."""
    return torch.exp(-0.5 * ((positions - mean) / width) ** 2)


def cropped_length(kernel_size: int, mean: float, width: float, threshold: float) -> int:
    """Number of lags kept by the causal crop: the lags 0..L-1 whose position is at or after the mask's
    lower threshold crossing r = mean - |width| sqrt(-2 ln threshold).

    Lag j is kept iff c_j = 1 - j h >= r, h = 2 / (K - 1), i.e. j <= (1 - r) / h; so
    L = floor((1 - r) / h) + 1, clipped to [1, K]. The mask is below the threshold at every lag >= L.
    (Only the far end is cropped: if a learnt mean below 1 pushes the mask under the threshold near lag 0
    too, those lags stay, multiplied by their small mask values.)
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie in (0, 1), got {threshold}")
    root = mean - abs(width) * math.sqrt(-2.0 * math.log(threshold))
    step = 2.0 / (kernel_size - 1)
    span = (1.0 - root) / step
    if span < 0:
        return 1
    return int(min(kernel_size, math.floor(span) + 1))


class MAGNet(nn.Module):
    """Multiplicative Anisotropic Gabor Network for 1D positions (the CCNN kernel network).

    With Gabor filters g_l(c) = exp(-(gamma_l (c - mu_l))^2 / 2) sin(w_l c + b_l) (one per hidden unit;
    in 1D the anisotropic scale is a single gamma per unit), the network is

        h_0 = g_0(c),   h_l = (A_l h_{l-1} + a_l) * g_l(c)  (l = 1..layers),   out = W h_L + b.

    Initialisation (FlexConv's MAGNet, as in the CCNN public code): gamma_l ~ Gamma(alpha / (l + 1), beta);
    w_l = 2 pi omega_0 gamma_l u with u ~ U(-1, 1) (omega_0 scales the frequencies); b_l = 0; mu_l ~
    U(-1, 1), or for a causal kernel mu_l = 1 - spread U(0, 1) (the Gabor centres lie within the mask's
    initial support next to lag 0); A_l Kaiming-uniform (linear gain) with a_l = 1; W Kaiming-uniform,
    b = 0 (a convolution then rescales W, see `SeparableFlexConv`).

    Arguments:
        out_channels: kernel values per position (one per input channel of a depthwise convolution).
        hidden: hidden units. layers: number of multiplicative layers (the paper's "3-layer MAGNet" has 3,
            i.e. 4 Gabor filters).
        omega_0: frequency scale. alpha, beta: Gamma distribution of the filters' scales.
        causal: place the Gabor centres as above. spread: their spread from c = 1 (causal only).

    ``forward(positions)``: positions (L,) -> (L, out_channels).
    """

    def __init__(
        self,
        out_channels: int,
        hidden: int = 32,
        layers: int = 3,
        omega_0: float = 10.0,
        alpha: float = 6.0,
        beta: float = 1.0,
        causal: bool = True,
        spread: float = 2.0,
    ):
        super().__init__()
        if layers < 0 or hidden < 1 or out_channels < 1:
            raise ValueError("MAGNet needs out_channels >= 1, hidden >= 1 and layers >= 0")
        if omega_0 <= 0 or alpha <= 0 or beta <= 0:
            raise ValueError("omega_0, alpha and beta must be positive")
        n_filters = layers + 1
        gamma = torch.stack(
            [
                torch.distributions.Gamma(torch.tensor(alpha / (l + 1)), torch.tensor(beta)).sample((hidden,))
                for l in range(n_filters)
            ]
        )  # (L+1, H)
        if causal:
            mu = 1.0 - min(float(spread), 2.0) * torch.rand(n_filters, hidden)
        else:
            mu = 2.0 * torch.rand(n_filters, hidden) - 1.0
        freq = 2.0 * math.pi * omega_0 * gamma * (2.0 * torch.rand(n_filters, hidden) - 1.0)
        self.gamma = nn.Parameter(gamma)
        self.mu = nn.Parameter(mu)
        self.freq = nn.Parameter(freq)
        self.phase = nn.Parameter(torch.zeros(n_filters, hidden))
        linears = [nn.Linear(hidden, hidden) for _ in range(layers)]
        self.linears = nn.ModuleList(linears)
        self.output_linear = nn.Linear(hidden, out_channels)
        for lin in linears:
            nn.init.kaiming_uniform_(lin.weight, nonlinearity="linear")
            nn.init.ones_(lin.bias)
        nn.init.kaiming_uniform_(self.output_linear.weight, nonlinearity="linear")
        nn.init.zeros_(self.output_linear.bias)
        self.omega_0 = float(omega_0)

    def filters(self, positions: torch.Tensor) -> torch.Tensor:
        """Gabor filter outputs, (layers + 1, L, hidden)."""
        c = positions.reshape(1, -1, 1)
        envelope = torch.exp(-0.5 * (self.gamma.unsqueeze(1) * (c - self.mu.unsqueeze(1))) ** 2)
        return envelope * torch.sin(self.freq.unsqueeze(1) * c + self.phase.unsqueeze(1))

    def hidden_features(self, positions: torch.Tensor) -> torch.Tensor:
        """h_L, (L, hidden)."""
        g = self.filters(positions)
        h = g[0]
        for l, lin in enumerate(self.linears, start=1):
            h = lin(h) * g[l]
        return h

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.output_linear(self.hidden_features(positions))

    def extra_repr(self) -> str:
        return f"omega_0={self.omega_0}, hidden={self.mu.shape[1]}, layers={len(self.linears)}"
