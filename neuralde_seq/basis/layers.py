"""Layers whose weights are basis expansions in depth or time (`BasisLinear`, `BasisConv1d`, on `BasisModule`),
and `project_module`, which projects every expanded tensor of a model onto another basis.
"""

from __future__ import annotations

import copy
import math
from typing import TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .functions import Basis, _check_count, expand, make_basis
from .projection import _gram, project

__all__ = ["BasisModule", "BasisLinear", "BasisConv1d", "project_module"]


def _init_scale(basis: Basis) -> float:
    """1 / sqrt(∫ Σ_i φ_i(u)² du): i.i.d. coefficients of variance σ² then give θ(u) a variance of σ² on average
    over u (1 for piecewise constant, about 1.2 for piecewise linear, 1/√n for the orthonormal bases)."""
    return 1.0 / math.sqrt(float(_gram(basis, basis).diagonal().sum()))


class BasisModule(nn.Module):
    """A module some of whose parameters and buffers are expansions in ``basis``, their bases along dim 0.

    Subclasses list those tensors' names in ``expanded`` (a tuple of attribute names); `project_module`
    projects them. Parameters and buffers not listed are copied unchanged.

    Arguments:
        basis: the `Basis` of the expanded tensors.
    """

    expanded: tuple[str, ...] = ()

    def __init__(self, basis: Basis):
        super().__init__()
        if not isinstance(basis, Basis):
            raise TypeError(f"basis must be a Basis (see make_basis), got {type(basis).__name__}")
        self.basis = basis

    def _project_in_place(self, target: Basis) -> None:
        for name in self.expanded:
            tensor = getattr(self, name)
            if tensor is None:
                continue
            with torch.no_grad():
                new = project(tensor.detach(), self.basis, target)
            if name in self._parameters:
                self._parameters[name] = nn.Parameter(new, requires_grad=tensor.requires_grad)
            else:
                self._buffers[name] = new
        self.basis = target


_Module = TypeVar("_Module", bound=nn.Module)


def project_module(module: _Module, target) -> _Module:
    """A copy of ``module`` with every expanded tensor of its `BasisModule` parts projected onto another basis.

    Arguments:
        module: any module (itself a `BasisModule`, or containing some).
        target: a `Basis` (every part is projected onto it) or an int n (every part onto a basis of its own
            kind with n functions).

    Returns:
        A new module (a deep copy; ``module`` is left unchanged), in the same mode, dtype and device.

    Raises:
        ValueError: ``module`` contains no `BasisModule`, or a size its bases refuse.
        TypeError: ``target`` is neither a `Basis` nor an int.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(target, Basis):
        if isinstance(target, bool) or not isinstance(target, (int, np.integer)):
            raise TypeError(f"target must be a Basis or a number of basis functions, got {type(target).__name__}")
        _check_count("target", target)
    if not any(isinstance(m, BasisModule) for m in module.modules()):
        raise ValueError(f"{type(module).__name__} has no basis-expanded parts to project")
    copied = copy.deepcopy(module)
    for part in copied.modules():
        if isinstance(part, BasisModule):
            part._project_in_place(target if isinstance(target, Basis) else part.basis.resized(int(target)))
    return copied


def _depth(u, x: torch.Tensor, batch_only: bool):
    """u checked: a Python float (kept on the host, so that evaluating the basis needs no device synchronisation),
    or a tensor in x's dtype and on its device: 0-d, or (B,) matching x's first dimension."""
    if isinstance(u, (int, float, np.floating, np.integer)) and not isinstance(u, bool):
        return float(u)
    if not isinstance(u, torch.Tensor) or not u.is_floating_point():
        raise TypeError(
            f"u must be a number or a floating point tensor, got "
            f"{u.dtype if isinstance(u, torch.Tensor) else type(u).__name__}"
        )
    if u.dim() == 0:
        return u.to(device=x.device, dtype=x.dtype)
    if batch_only:
        raise ValueError(f"u must be a scalar (one depth for the whole batch), got shape {tuple(u.shape)}")
    if u.dim() != 1 or u.shape[0] != x.shape[0]:
        raise ValueError(f"u must be a scalar or one depth per sample, shape ({x.shape[0]},), got {tuple(u.shape)}")
    return u.to(device=x.device, dtype=x.dtype)


class BasisLinear(BasisModule):
    """A linear layer whose weight and bias are expansions in a basis: y = W(u) x + b(u), W(u) = Σ_i φ_i(u) W_i.

    With one constant basis function (``piecewise_constant``, ``legendre`` or ``fourier`` with n = 1) it is a
    plain ``nn.Linear`` with weight W_0 and bias b_0, exactly. Initialisation: every coefficient as
    ``nn.Linear`` initialises its weight (uniform in ±1/√in_features), scaled by 1/√(∫ Σ_i φ_i² du) so that W(u)
    has the plain layer's variance on average over u.

    Arguments:
        in_features: size of each input sample.
        out_features: size of each output sample.
        basis: a `Basis`, or one of `BASIS_NAMES` with ``num_bases``.
        num_bases: the number of functions when ``basis`` is a name.
        bias: learn an expanded bias b(u) (default True).

    Attributes:
        weight: (n, out_features, in_features) coefficients.
        bias: (n, out_features) coefficients, or None.
    """

    expanded = ("weight", "bias")

    def __init__(self, in_features: int, out_features: int, basis, num_bases: int | None = None, bias: bool = True):
        super().__init__(make_basis(basis, num_bases))
        self.in_features = _check_count("in_features", in_features)
        self.out_features = _check_count("out_features", out_features)
        n = self.basis.num_bases
        bound = _init_scale(self.basis) / math.sqrt(self.in_features)
        self.weight = nn.Parameter(torch.empty(n, out_features, in_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, out_features).uniform_(-bound, bound)) if bias else None

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, basis={self.basis!r}, bias={self.bias is not None}"

    def weights_at(self, u, side: str = "right") -> tuple[torch.Tensor, torch.Tensor | None]:
        """(W(u), b(u)) at one depth.

        Arguments:
            u: a number or 0-d tensor in [0, 1].
            side: see `Basis.__call__`.

        Returns:
            (out_features, in_features) weight and (out_features,) bias (None without bias).
        """
        u = _depth(u, self.weight, batch_only=True)
        return (
            expand(self.weight, self.basis, u, side),
            None if self.bias is None else expand(self.bias, self.basis, u, side),
        )

    def forward(self, x: torch.Tensor, u, side: str = "right") -> torch.Tensor:
        """y = W(u) x + b(u).

        Arguments:
            x: (B, ..., in_features) inputs ((..., in_features) when u is a scalar).
            u: the depth in [0, 1]: a number or 0-d tensor (one for all samples), or (B,) (one per sample,
                broadcast over x's middle dimensions).
            side: see `Basis.__call__`.

        Returns:
            (B, ..., out_features).

        Raises:
            TypeError: x or u of the wrong type.
            ValueError: x's last dimension is not ``in_features``, u of the wrong shape or outside [0, 1].
        """
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"x must be a tensor (..., {self.in_features}), got "
                f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
            )
        u = _depth(u, x, batch_only=False)
        if not isinstance(u, torch.Tensor) or u.dim() == 0:
            weight, bias = self.weights_at(u, side)
            return F.linear(x, weight, bias)
        # One product for every basis at once, then the per-sample combination Σ_i φ_i(u_b) (W_i x_b + b_i).
        n, out = self.basis.num_bases, self.out_features
        bias = None if self.bias is None else self.bias.reshape(n * out)
        every = F.linear(x, self.weight.reshape(n * out, self.in_features), bias)
        every = every.view(*x.shape[:-1], n, out)
        phi = self.basis(u, side).view(x.shape[0], *([1] * (x.dim() - 2)), n, 1)
        return (phi * every).sum(-2)


class BasisConv1d(BasisModule):
    """A 1-D convolution whose kernel and bias are expansions in a basis: y = conv(x; K(u)) + b(u).

    Initialisation as `BasisLinear` (uniform in ±1/√(in_channels · kernel_size), scaled).

    Arguments:
        in_channels: channels of the input.
        out_channels: channels of the output.
        kernel_size: width of the kernel.
        basis: a `Basis`, or one of `BASIS_NAMES` with ``num_bases``.
        num_bases: the number of functions when ``basis`` is a name.
        padding: as ``torch.nn.functional.conv1d`` (an int, or "same" for an odd ``kernel_size``; default "same").
        bias: learn an expanded bias (default True).

    Attributes:
        weight: (n, out_channels, in_channels, kernel_size) coefficients.
        bias: (n, out_channels) coefficients, or None.
    """

    expanded = ("weight", "bias")

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        basis,
        num_bases: int | None = None,
        padding="same",
        bias: bool = True,
    ):
        super().__init__(make_basis(basis, num_bases))
        self.in_channels = _check_count("in_channels", in_channels)
        self.out_channels = _check_count("out_channels", out_channels)
        self.kernel_size = _check_count("kernel_size", kernel_size)
        if padding == "same" and kernel_size % 2 == 0:
            raise ValueError(f"padding='same' needs an odd kernel_size (symmetric padding), got {kernel_size}")
        if padding != "same" and (isinstance(padding, bool) or not isinstance(padding, int) or padding < 0):
            raise ValueError(f"padding must be 'same' or an integer >= 0, got {padding!r}")
        self.padding = padding
        n = self.basis.num_bases
        bound = _init_scale(self.basis) / math.sqrt(in_channels * kernel_size)
        self.weight = nn.Parameter(torch.empty(n, out_channels, in_channels, kernel_size).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, out_channels).uniform_(-bound, bound)) if bias else None

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, padding={self.padding!r}, "
            f"basis={self.basis!r}, bias={self.bias is not None}"
        )

    def forward(self, x: torch.Tensor, u, side: str = "right") -> torch.Tensor:
        """The convolution with the kernel at depth u.

        Arguments:
            x: (B, in_channels, L) inputs.
            u: the depth in [0, 1], a number or 0-d tensor (one for the whole batch).
            side: see `Basis.__call__`.

        Returns:
            (B, out_channels, L') (L' = L with ``padding="same"``).

        Raises:
            ValueError: x not (B, in_channels, L), u not a scalar in [0, 1].
        """
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"x must be a tensor (batch, {self.in_channels}, length), got "
                f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
            )
        u = _depth(u, x, batch_only=True)
        weight = expand(self.weight, self.basis, u, side)
        bias = None if self.bias is None else expand(self.bias, self.basis, u, side)
        return F.conv1d(x, weight, bias, padding=self.padding)
