"""Stateful ODE-Net: a continuous-in-depth residual network for time series classification (paper 004).

Queiruga, Erichson, Hodgkinson & Mahoney, "Stateful ODE-Nets using Basis Function Expansions". The hidden
features of the whole sequence, h(s) ∈ R^{hidden × T}, evolve in depth s ∈ [0, 1] under

    dh/ds = F(h, s) = N₂(K₂(s) ∗ ReLU(N₁(K₁(s) ∗ h + b₁(s), s)) + b₂(s), s),

where K_j(s) ∗ are 1-D convolutions over the sequence axis whose kernels and biases are basis expansions in s
(`neuralde_seq.basis.BasisConv1d`, paper Eq. 4) and N_j are stateful normalisations (`StatefulNorm`). F is the
residual branch of a ResNet basic block (conv, norm, ReLU, conv, norm) without the final ReLU. The ODE is solved
by a fixed-step explicit Runge-Kutta method (the tableaus of `neuralde_seq.solvers.fixed_step`) with ``depth_steps``
equal steps; a stage at the end of a step reads the weights with ``side="left"`` (see `neuralde_seq.basis`), so
a step inside one piece of a piecewise basis only sees that piece. With ``depth_scheme="euler"``, a
piecewise-constant basis and ``depth_steps = num_bases``, the block is exactly the residual network
h_{k+1} = h_k + F_k(h_k)/N with layer k's weights c_k (tested against such a network written out).

**Stateful normalisation** (paper Sec. 4.1-4.2, App. C.2). `StatefulNorm` is batch normalisation whose scale
γ(s) and shift β(s) (trained by gradient) and running statistics (state, not trained) are all expansions in the
same basis as the weights. During training every call normalises with the batch's statistics at that depth
(mean and variance over the samples and their valid time points) and records the point (s, mean, log variance);
after the solve the block fits the recorded point cloud by least squares (paper Eq. 13, `fit_to_points`) and
moves the running coefficients towards the fit with ``momentum`` (as ``nn.BatchNorm1d``). In evaluation every
call reads the running statistics at its own depth, μ(s) and σ²(s) = exp(ℓ(s)), so a model evaluated with
another step count, or projected onto another basis, uses statistics for each depth it visits. What we chose
where the paper leaves room: the state function is the log of (variance + eps) instead of the variance, so that
a projection or fit, which can undershoot between points, always gives a positive variance; directions of the
basis that no recorded point determines (a piece no stage fell in) keep their previous coefficients (the small
ridge of `fit_to_points`) instead of being set to zero.

**Changing the step count and the basis after training** (paper Sec. 5). ``model.depth_steps = n`` solves
with n steps from then on (nothing else changes); ``model.project_bases(basis_or_n)`` returns a copy whose
every expanded tensor (convolution kernels and biases, normalisation scales, shifts and running statistics) is
L2-projected onto the new basis (`neuralde_seq.basis.project`): fewer functions compress the model, more refine
it.

**Input** (`Observations`, as CKCNN in grid mode): the points of a sample are read in order on the sequence axis
(the convolutions see neighbours by index, not by time); each point carries its observed values with missing
entries zero-filled only together with one mask channel per input channel (``mask_channel=True``; False
requires fully observed data), and, with ``time_channel=True``, its time since the sample's first point divided
by ``time_unit`` (the only way the model sees irregular timing). An input projection (a linear map per point)
gives h(0). Points after a sample's end are zero in h and in its rate, the convolutions' padding is zero, and
the normalisation statistics and the pooling read valid points only: a sample's output in evaluation mode does
not depend on how much the batch is padded. Readout: ReLU, the mean over the sample's valid points, a linear
head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..basis import (
    BASIS_NAMES,
    BasisConv1d,
    BasisModule,
    Legendre,
    expand,
    fit_to_points,
    make_basis,
    project,
    project_module,
)
from ..input_checks import check_model_input, check_num_outputs
from ..observations import Observations
from ..solvers.fixed_step import FIXED_STEP_METHODS, TABLEAUS, weighted_sum
from .ckconv import grid_inputs
from .recurrent import _positive_int

__all__ = ["StatefulNorm", "StatefulODEBlock", "StatefulODENet"]


class StatefulNorm(BasisModule):
    """Continuous-in-depth batch normalisation over (batch, time) of (B, C, T) features (module docstring).

    y = (x − μ) / sqrt(σ² + eps) · γ(u) + β(u), with the batch's μ, σ² at depth u in training and the running
    μ(u), σ²(u) + eps = exp(ℓ(u)) in evaluation.

    Arguments:
        channels: C, the normalised channels.
        basis: a `neuralde_seq.basis.Basis`, or a name of `neuralde_seq.basis.BASIS_NAMES` with ``num_bases``.
        num_bases: the number of basis functions when ``basis`` is a name.
        momentum: weight of a training pass's fitted statistics in the running ones, in (0, 1] (default 0.1).
        eps: added to the variance (default 1e-5).

    Attributes:
        weight, bias: (n, C) coefficients of γ(u) (initially ≡ 1) and β(u) (≡ 0).
        running_mean, running_log_var: (n, C) coefficients of μ(u) (≡ 0) and ℓ(u) = log(σ²(u) + eps) (≡ 0).
    """

    running_mean: torch.Tensor  # buffers: (n, C) coefficients in the basis
    running_log_var: torch.Tensor

    expanded = ("weight", "bias", "running_mean", "running_log_var")

    def __init__(self, channels: int, basis, num_bases: int | None = None, momentum: float = 0.1, eps: float = 1e-5):
        super().__init__(make_basis(basis, num_bases))
        self.channels = _positive_int("channels", channels)
        if not 0 < momentum <= 1:
            raise ValueError(f"momentum must lie in (0, 1], got {momentum!r}")
        if not eps > 0:
            raise ValueError(f"eps must be positive, got {eps!r}")
        self.momentum, self.eps = float(momentum), float(eps)
        n = self.basis.num_bases
        # The constant function 1 in this basis (every basis here represents constants exactly).
        ones = project(torch.ones(1, channels, dtype=torch.float64), Legendre(1), self.basis)
        ones = ones.to(torch.get_default_dtype())
        self.weight = nn.Parameter(ones)
        self.bias = nn.Parameter(torch.zeros(n, channels))
        self.register_buffer("running_mean", torch.zeros(n, channels))
        self.register_buffer("running_log_var", torch.zeros(n, channels))
        self._recorded: list[tuple[float, torch.Tensor, torch.Tensor]] = []

    def extra_repr(self) -> str:
        return f"{self.channels}, basis={self.basis!r}, momentum={self.momentum}, eps={self.eps}"

    def statistics_at(self, u, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
        """The running mean and variance at depth u (what evaluation mode normalises with).

        Arguments:
            u: a number or 0-d tensor in [0, 1].
            side: see `neuralde_seq.basis.Basis.__call__`.

        Returns:
            (mean, variance + eps), each (C,).
        """
        log_var = expand(self.running_log_var, self.basis, u, side)
        return expand(self.running_mean, self.basis, u, side), torch.exp(log_var)

    def forward(self, x: torch.Tensor, u: float, mask: torch.Tensor | None = None, side: str = "right") -> torch.Tensor:
        """Normalise x at depth u.

        Arguments:
            x: (B, C, T) features.
            u: the depth in [0, 1] (a number).
            mask: (B, T) bool, the valid time points (the statistics read only these); None: all.
            side: see `neuralde_seq.basis.Basis.__call__`.

        Returns:
            (B, C, T).

        Raises:
            ValueError: x not (B, C, T), or a mask of another shape.
        """
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[1] != self.channels:
            raise ValueError(
                f"x must be a tensor (batch, {self.channels}, length), got "
                f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
            )
        if mask is not None and (mask.shape != (x.shape[0], x.shape[2]) or mask.dtype != torch.bool):
            raise ValueError(
                f"mask must be a bool tensor of shape {(x.shape[0], x.shape[2])}, got "
                f"{getattr(mask, 'dtype', None)} {tuple(getattr(mask, 'shape', ()))}"
            )
        # φ(u) on the host, then moved (no device synchronisation); the coefficients follow x's dtype.
        phi = self.basis(float(u), side).to(dtype=x.dtype, device=x.device)
        scale, shift = phi @ self.weight, phi @ self.bias
        if self.training:
            weights = torch.ones_like(x[:, :1]) if mask is None else mask.unsqueeze(1).to(x.dtype)
            count = weights.sum()
            mean = (x * weights).sum((0, 2)) / count
            var = ((x - mean[:, None]).square() * weights).sum((0, 2)) / count
            denominator = torch.sqrt(var + self.eps)
            with torch.no_grad():
                self._recorded.append((float(u), mean.detach(), torch.log(var.detach() + self.eps)))
        else:
            mean, denominator = phi @ self.running_mean, torch.exp(0.5 * (phi @ self.running_log_var))
        return (x - mean[:, None]) / denominator[:, None] * scale[:, None] + shift[:, None]

    @torch.no_grad()
    def update_statistics(self) -> None:
        """Fit the statistics recorded since the last update (paper Eq. 13) and move the running coefficients
        towards the fit by ``momentum``; then forget the records. Does nothing when nothing was recorded."""
        if not self._recorded:
            return
        points = torch.tensor([p[0] for p in self._recorded], dtype=torch.float64, device=self.running_mean.device)
        recorded = {
            "running_mean": [mean for _, mean, _ in self._recorded],
            "running_log_var": [log_var for _, _, log_var in self._recorded],
        }
        for name, statistics in recorded.items():
            running = getattr(self, name)
            values = torch.stack(statistics).to(running)
            fitted = fit_to_points(points, values, self.basis, previous=running)
            running.mul_(1 - self.momentum).add_(fitted, alpha=self.momentum)
        self._recorded.clear()

    def discard_records(self) -> None:
        """Forget the statistics recorded since the last `update_statistics`."""
        self._recorded.clear()

    def _project_in_place(self, target) -> None:
        self._recorded.clear()
        super()._project_in_place(target)


class StatefulODEBlock(nn.Module):
    """dh/ds = F(h, s) on s ∈ [0, 1] with basis-expanded convolutions and stateful normalisation (module
    docstring), solved with ``depth_steps`` fixed steps of the Runge-Kutta scheme ``depth_scheme``.

    Arguments:
        hidden: channels of h.
        basis: a `neuralde_seq.basis.Basis`, or a name of `neuralde_seq.basis.BASIS_NAMES` with ``num_bases``.
        num_bases: the number of basis functions when ``basis`` is a name.
        depth_steps: the number of solver steps (changeable after training).
        depth_scheme: the explicit Runge-Kutta scheme of the depth steps, a name of
            `neuralde_seq.solvers.fixed_step.FIXED_STEP_METHODS` ("rk4", "euler", ...).
        kernel_size: width of the convolutions (odd).
        normalization: use `StatefulNorm` (default True); False is the paper's ablation without normalisation.
        momentum: see `StatefulNorm`.
        eps: see `StatefulNorm`.
    """

    def __init__(
        self,
        hidden: int,
        basis,
        num_bases: int | None = None,
        depth_steps: int = 8,
        depth_scheme: str = "rk4",
        kernel_size: int = 3,
        normalization: bool = True,
        momentum: float = 0.1,
        eps: float = 1e-5,
    ):
        super().__init__()
        basis = make_basis(basis, num_bases)
        if depth_scheme not in FIXED_STEP_METHODS:
            raise ValueError(f"depth_scheme must be one of {FIXED_STEP_METHODS}, got {depth_scheme!r}")
        self.depth_scheme = depth_scheme
        self.depth_steps = depth_steps
        self.conv1 = BasisConv1d(hidden, hidden, kernel_size, basis)
        self.conv2 = BasisConv1d(hidden, hidden, kernel_size, basis)
        self.norm1: StatefulNorm | None
        self.norm2: StatefulNorm | None
        if normalization:
            self.norm1 = StatefulNorm(hidden, basis, momentum=momentum, eps=eps)
            self.norm2 = StatefulNorm(hidden, basis, momentum=momentum, eps=eps)
        else:
            self.norm1 = self.norm2 = None

    @property
    def depth_steps(self) -> int:
        """The number of solver steps; assign to change it (e.g. after training)."""
        return self._depth_steps

    @depth_steps.setter
    def depth_steps(self, value: int) -> None:
        self._depth_steps = _positive_int("depth_steps", value)

    @property
    def basis(self):
        """The basis of the block's expanded tensors."""
        return self.conv1.basis

    def rate(self, h: torch.Tensor, u: float, mask: torch.Tensor, side: str = "right") -> torch.Tensor:
        """F(h, u): the residual branch at depth u.

        Arguments:
            h: (B, hidden, T) features, zero at invalid points.
            u: the depth in [0, 1].
            mask: (B, T) bool valid points.
            side: see `neuralde_seq.basis.Basis.__call__`.

        Returns:
            (B, hidden, T), zero at invalid points.
        """
        weights = mask.unsqueeze(1).to(h.dtype)
        z = self.conv1(h, u, side)
        if self.norm1 is not None:
            z = self.norm1(z, u, mask, side)
        z = F.relu(z) * weights  # the next convolution must not read padding
        z = self.conv2(z, u, side)
        if self.norm2 is not None:
            z = self.norm2(z, u, mask, side)
        return z * weights

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """h(1) from h(0) = h by ``depth_steps`` steps of ``depth_scheme``; in training mode the normalisations'
        running statistics are then updated from this pass (`StatefulNorm.update_statistics`).

        Arguments:
            h: (B, hidden, T) features at depth 0, zero at invalid points.
            mask: (B, T) bool valid points.

        Returns:
            (B, hidden, T) features at depth 1.
        """
        norms = [norm for norm in (self.norm1, self.norm2) if norm is not None]
        for norm in norms:  # what an interrupted pass left is not this pass's
            norm.discard_records()
        tableau = TABLEAUS[self.depth_scheme]
        steps = self.depth_steps
        width = 1.0 / steps
        for k in range(steps):  # the Runge-Kutta step of neuralde_seq.solvers.fixed_step, in depth
            rates: list[torch.Tensor] = []
            for i, row in enumerate(tableau.a):
                stage = h + width * weighted_sum(row, rates) if i else h
                c = tableau.c[i]
                rates.append(self.rate(stage, (k + c) / steps, mask, "left" if c == 1.0 else "right"))
            h = h + width * weighted_sum(tableau.b, rates)
        if self.training:
            for norm in norms:
                norm.update_statistics()
        return h


class StatefulODENet(nn.Module):
    """Stateful ODE-Net classifier for irregular time series (module docstring).

    Arguments:
        in_channels: channels of the observations.
        num_classes: number of outputs (classes, or regression targets).
        hidden: channels of the features h.
        kernel_size: width of the depth-dependent convolutions over the sequence (odd; default 3).
        basis: the basis of every expanded tensor, a name of `neuralde_seq.basis.BASIS_NAMES` (default
            "piecewise_linear", which compresses best: docs/stateful_odenets.md; ``model.project_bases`` changes it).
        num_bases: the number of basis functions (default 8; odd for "fourier", >= 2 for "piecewise_linear").
        depth_steps: solver steps over depth s ∈ [0, 1] (default 8); assign ``model.depth_steps`` to change it.
        depth_scheme: the explicit Runge-Kutta scheme of the depth steps, a name of
            `neuralde_seq.solvers.fixed_step.FIXED_STEP_METHODS` (default "rk4").
        normalization: stateful normalisation in the block (default True).
        momentum: of the running statistics, in (0, 1] (default 0.1).
        eps: added to variances (default 1e-5).
        mask_channel: one mask channel per input channel, missing values zero-filled (default True); False
            requires fully observed data.
        time_channel: add the time since each sample's first point, divided by ``time_unit`` (default True).
        time_unit: the unit of the time channel (default 1.0): choose it so that a sample spans about 1.

    ``forward(observations)`` returns (B, num_classes).
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden: int = 32,
        kernel_size: int = 3,
        basis: str = "piecewise_linear",
        num_bases: int = 8,
        depth_steps: int = 8,
        depth_scheme: str = "rk4",
        *,
        normalization: bool = True,
        momentum: float = 0.1,
        eps: float = 1e-5,
        mask_channel: bool = True,
        time_channel: bool = True,
        time_unit: float = 1.0,
    ):
        super().__init__()
        check_num_outputs(num_classes)
        _positive_int("in_channels", in_channels)
        _positive_int("hidden", hidden)
        if not isinstance(basis, str):
            raise TypeError(
                f"basis must be one of {BASIS_NAMES} (with num_bases), got {type(basis).__name__}; "
                "to change the basis of a model, use model.project_bases"
            )
        if not (isinstance(time_unit, (int, float)) and time_unit > 0):
            raise ValueError(f"time_unit must be a positive number, got {time_unit!r}")
        self.in_channels, self.num_classes = in_channels, num_classes
        self.mask_channel, self.time_channel = bool(mask_channel), bool(time_channel)
        self.time_unit = float(time_unit)
        features = in_channels * (2 if self.mask_channel else 1) + int(self.time_channel)
        self.input = nn.Linear(features, hidden)
        self.block = StatefulODEBlock(
            hidden,
            make_basis(basis, num_bases),
            depth_steps=depth_steps,
            depth_scheme=depth_scheme,
            kernel_size=kernel_size,
            normalization=normalization,
            momentum=momentum,
            eps=eps,
        )
        self.head = nn.Linear(hidden, num_classes)

    @property
    def depth_steps(self) -> int:
        """The number of solver steps over depth; assign to change it (e.g. after training)."""
        return self.block.depth_steps

    @depth_steps.setter
    def depth_steps(self, value: int) -> None:
        self.block.depth_steps = value

    @property
    def basis(self):
        """The basis of the expanded tensors."""
        return self.block.basis

    def project_bases(self, target) -> StatefulODENet:
        """A copy with every expanded tensor (kernels, biases, normalisation scales, shifts and running
        statistics) L2-projected onto another basis (`neuralde_seq.basis.project_module`).

        Arguments:
            target: a `neuralde_seq.basis.Basis`, or an int n (the same kind of basis with n functions).

        Returns:
            A new `StatefulODENet` (this one is unchanged), same mode, dtype, device and ``depth_steps``.
        """
        return project_module(self, target)

    def inputs(self, observations: Observations) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-point input features and the valid points.

        Arguments:
            observations: `Observations` with ``channels == in_channels``.

        Returns:
            ((B, T, features) inputs: values (missing zero-filled), mask channels, time channel; (B, T) bool
            valid points).

        Raises:
            ValueError: missing values with ``mask_channel=False``.
        """
        valid = observations.valid
        x = grid_inputs(observations.values, observations.lengths, self.mask_channel)
        if self.time_channel:
            times = observations.times
            since = torch.where(
                valid, (times - times[:, :1]) / self.time_unit, torch.zeros((), dtype=times.dtype, device=times.device)
            )
            x = torch.cat([x, since.unsqueeze(-1).to(x.dtype)], -1)
        return x, valid

    def features(self, observations: Observations) -> torch.Tensor:
        """h(1), the block's output at every point.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T points.

        Returns:
            (B, hidden, T), zero after each sample's end.
        """
        check_model_input(self, observations, Observations)
        if observations.channels != self.in_channels:
            raise ValueError(
                f"observations have {observations.channels} channels but the model expects {self.in_channels}"
            )
        x, valid = self.inputs(observations)
        h = (self.input(x) * valid.unsqueeze(-1).to(x.dtype)).transpose(1, 2)
        return self.block(h, valid)

    def forward(self, observations: Observations) -> torch.Tensor:
        """Logits: ReLU of h(1), averaged over each sample's valid points, then the linear head.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B.

        Returns:
            (B, num_classes).
        """
        h = self.features(observations)
        valid = observations.valid.unsqueeze(1).to(h.dtype)
        pooled = (F.relu(h) * valid).sum(-1) / valid.sum(-1)
        return self.head(pooled)
