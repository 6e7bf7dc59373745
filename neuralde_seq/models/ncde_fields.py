"""The vector fields of the NCDE, NRDE and Log-NCDE (`neuralde_seq.models.ncde.NeuralCDE`), as dynamics for `solve`.

- `CDEVectorField`: f_θ(z) of shape (hidden × C), an MLP ending in tanh (the NCDE paper's field), whose rate is
  f_θ(z) · dX/ds; it also differentiates its own columns for the log-ODE form (``column_derivative_sum``).
- `BasisCDEVectorField`: the same MLP with weights that change in time, W(u(s)) = Σ_i φ_i(u(s)) W_i
  (`neuralde_seq.basis.BasisLinear`; the "Weights that change in time" part of `neuralde_seq.models.ncde`).
- `LogODEVectorField`: the log-ODE method's rate on depth-1 or depth-2 log-signature windows, the CDE field's
  columns plus their Lie brackets (the "Log-NCDE" part of `neuralde_seq.models.ncde`), and the checks of the
  windows it reads (`log_ode_path_channels`).

`ACTIVATIONS` are the hidden layers' activations and `ACTIVATION_SLOPES` their derivatives.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn
from torch.func import jvp, vmap

from ..basis import BasisLinear, check_time_range, make_basis, time_position
from ..controls import Control
from ..signatures import logsignature_channels

__all__ = [
    "CDEVectorField",
    "BasisCDEVectorField",
    "LogODEVectorField",
    "ACTIVATIONS",
    "ACTIVATION_SLOPES",
    "log_ode_path_channels",
]

ACTIVATIONS = {"relu": nn.ReLU, "softplus": nn.Softplus, "tanh": nn.Tanh, "silu": nn.SiLU}


def _softplus_slope(pre: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    # nn.Softplus() is the identity above its threshold (20), where its slope is exactly 1
    return torch.where(pre > 20, torch.ones_like(pre), torch.sigmoid(pre))


def _silu_slope(pre: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    sigmoid = torch.sigmoid(pre)
    return sigmoid * (1 + pre * (1 - sigmoid))


# The derivative of each activation, from its input and output: the forward-mode step of `column_derivative_sum`.
ACTIVATION_SLOPES = {
    "relu": lambda pre, post: (pre > 0).to(pre.dtype),
    "softplus": _softplus_slope,
    "tanh": lambda pre, post: 1 - post * post,
    "silu": _silu_slope,
}


class CDEVectorField(nn.Module):
    """f_θ of a neural CDE/RDE as a dynamics for `solve`.

    ``matrix(z)`` is f_θ(z) of shape (B, hidden, C); ``forward(z, x, dx)`` is the rate f_θ(z) · dx;
    ``column_derivative_sum`` gives the Lie bracket terms of the log-ODE form (`LogODEVectorField`).

    Arguments:
        hidden: width of the hidden state z.
        in_channels: channels C of the driving control (log-signature channels for an RDE).
        width: width of the MLP's hidden layers.
        depth: number of hidden (ReLU) layers of the MLP, >= 1.
        activation: the hidden layers' activation, a key of `ACTIVATIONS`; "relu" as the paper. A
            smooth one ("softplus", "silu", "tanh") keeps f smooth in z, which high-order and adaptive
            solvers need for their full order (ReLU kinks cut rk4 to about second order).
    """

    needs_value = False
    needs_derivative = True

    def __init__(self, hidden: int, in_channels: int, width: int = 64, depth: int = 2, activation: str = "relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        act = ACTIVATIONS[activation]
        for name, value in (("hidden", hidden), ("in_channels", in_channels), ("width", width), ("depth", depth)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        layers: list[nn.Module] = [nn.Linear(hidden, width), act()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), act()]
        layers += [nn.Linear(width, hidden * in_channels), nn.Tanh()]
        self.net = nn.Sequential(*layers)
        self.hidden = hidden
        self.in_channels = in_channels
        self.activation = activation

    def matrix(self, z: torch.Tensor) -> torch.Tensor:
        """f_θ(z) of shape (B, hidden, in_channels)."""
        return self.net(z).view(*z.shape[:-1], self.hidden, self.in_channels)

    def column_derivative_sum(self, z: torch.Tensor, tangents: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """Σ_j J_{f_j}(z) v_j: each column f_j of f_θ differentiated along its own tangent v_j, summed (the Lie
        bracket terms of `LogODEVectorField`).

        Forward mode written out for this MLP: the C tangents go through the trunk together (a linear layer maps a
        tangent by its weight, an activation multiplies it by its slope, `ACTIVATION_SLOPES`), and the last layer
        is differentiated only in the rows of column j for tangent j, since J_{f_j}(z) v = tanh'(·)_j ⊙
        (W_j ∂trunk(z)[v]) with W_j those rows. It equals `LogODEVectorField.generic_column_derivative_sum` (C
        whole `torch.func.jvp` products, each computing all C columns of the largest layer for one tangent), and
        is about 3x faster (docs/log_ncde.md#cost: torch.func's forward mode has a large fixed cost per product on a
        CPU).

        Arguments:
            z: (B, hidden) states.
            tangents: (B, hidden, C): column j is v_j.
            columns: (B, hidden, C) ``matrix(z)`` (its tanh gives the last layer's derivative).

        Returns:
            (B, hidden).
        """
        slope = ACTIVATION_SLOPES[self.activation]
        value, tangent = z, tangents.movedim(-1, 0)  # (C, B, hidden): tangent j
        pre = z
        for layer in list(self.net)[:-2]:
            if isinstance(layer, nn.Linear):
                pre = layer(value)
                tangent = tangent @ layer.weight.t()
            else:
                value = layer(pre)
                tangent = tangent * slope(pre, value)
        rows = cast(nn.Linear, self.net[-2]).weight.view(self.hidden, self.in_channels, -1)  # (h, j): output h·C + j
        pre_tangents = torch.einsum("jbw,hjw->bhj", tangent, rows)  # (B, hidden, C)
        return ((1 - columns * columns) * pre_tangents).sum(-1)  # tanh' = 1 − tanh²

    def forward(self, z: torch.Tensor, x: torch.Tensor | None, dx: torch.Tensor) -> torch.Tensor:
        return (self.matrix(z) @ dx.unsqueeze(-1)).squeeze(-1)


class BasisCDEVectorField(nn.Module):
    """f_θ(z, u(s)) of a neural CDE/RDE whose linear layers are basis expansions in time (the docstring of
    `neuralde_seq.models.ncde`), as a dynamics for `solve` that reads s (``needs_time``): ``forward(z, x, dx, s)`` is
    f_θ(z, u(s)) · dx.

    ``matrix(z, s)`` is f_θ(z, u(s)) of shape (B, hidden, C). The layers are those of `CDEVectorField` with
    every ``nn.Linear`` replaced by a `neuralde_seq.basis.BasisLinear` of the same shape.

    Arguments:
        hidden: width of the hidden state z.
        in_channels: channels C of the driving control.
        width: width of the MLP's hidden layers.
        depth: number of hidden layers of the MLP, >= 1.
        activation: the hidden layers' activation, a key of `ACTIVATIONS`.
        basis: a `neuralde_seq.basis.Basis` (or a name of `neuralde_seq.basis.BASIS_NAMES` with ``num_bases``).
        time_range: (s_a, s_b), s_a < s_b: the span of s mapped onto u ∈ [0, 1].
        num_bases: the number of basis functions when ``basis`` is a name.
    """

    needs_value = False
    needs_derivative = True
    needs_time = True

    def __init__(
        self,
        hidden: int,
        in_channels: int,
        width: int,
        depth: int,
        activation: str,
        basis,
        time_range: tuple[float, float] | None,
        num_bases: int | None = None,
    ):
        super().__init__()
        plain = CDEVectorField(hidden, in_channels, width, depth, activation)  # checks the sizes and activation
        basis = make_basis(basis, num_bases)
        layers: list[nn.Module] = []
        for layer in plain.net:
            if isinstance(layer, nn.Linear):
                layers.append(BasisLinear(layer.in_features, layer.out_features, basis))
            else:
                layers.append(layer)
        self.net = nn.ModuleList(layers)
        self.time_range = check_time_range(basis, None, time_range)  # (refuses None)
        self.hidden = hidden
        self.in_channels = in_channels

    @property
    def basis(self):
        """The basis of the layers' weights."""
        return self.net[0].basis

    def depth(self, s: torch.Tensor) -> torch.Tensor:
        """u(s) = (s − s_a)/(s_b − s_a), held in [0, 1] beyond the range (with a `BasisRangeWarning`).

        Arguments:
            s: (B,) points of the control's parameter.

        Returns:
            (B,) depths u.
        """
        return time_position(s, self.time_range)

    def matrix(self, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """f_θ(z, u(s)) of shape (B, hidden, in_channels), for z (B, hidden) and s (B,)."""
        u = self.depth(s)
        out = z
        for layer in self.net:
            out = layer(out, u) if isinstance(layer, BasisLinear) else layer(out)
        return out.view(*z.shape[:-1], self.hidden, self.in_channels)

    def forward(self, z: torch.Tensor, x: torch.Tensor | None, dx: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """The rate of z.

        Arguments:
            z: (B, hidden) hidden states.
            x: the control's value (not read).
            dx: (B, in_channels) the control's derivative.
            s: (B,) the control's parameter at this point.

        Returns:
            (B, hidden): f_θ(z, u(s)) · dx.
        """
        return (self.matrix(z, s) @ dx.unsqueeze(-1)).squeeze(-1)


def _check_control_depth(control_depth) -> int:
    """control_depth as the log-ODE form reads it: 1 or 2, or a ValueError saying why not."""
    if isinstance(control_depth, bool) or not isinstance(control_depth, int) or control_depth < 1:
        raise ValueError(
            f"control_depth must be 1 or 2 (the log-signature depth of the windows read), got {control_depth!r}"
        )
    if control_depth > 2:
        raise ValueError(
            f"control_depth={control_depth}: the log-ODE step at depth {control_depth} needs brackets of "
            "brackets ([f_i, [f_j, f_k]], ...), which are not implemented; build the control with depth "
            "1 or 2"
        )
    return control_depth


def log_ode_path_channels(channels: int, control_depth: int) -> int:
    """The path's channels d whose log-signature windows of depth ``control_depth`` have ``channels`` terms in a
    Lyndon basis: d at depth 1, d + d(d−1)/2 at depth 2.

    Arguments:
        channels: D, the log-signature control's channels.
        control_depth: 1 or 2.

    Returns:
        d.

    Raises:
        ValueError: a depth other than 1 or 2 (depth 3 would need brackets of brackets), or a D that no d gives
            at that depth (an "expand" basis, window start values, or another depth).
    """
    _check_control_depth(control_depth)
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"channels must be a positive integer, got {channels!r}")
    if control_depth == 1:
        return channels
    d = 1
    while d + d * (d - 1) // 2 < channels:
        d += 1
    if d + d * (d - 1) // 2 != channels:
        below = d - 1 + (d - 1) * (d - 2) // 2
        raise ValueError(
            f"a depth-2 log-signature in a Lyndon basis has d + d(d−1)/2 channels (d the path's), and "
            f"{channels} is none ({below} for d={d - 1}, {d + d * (d - 1) // 2} for d={d}): the log-ODE "
            "form reads the increments and Lévy areas only (no 'expand' basis, no window start values)"
        )
    return d


class LogODEVectorField(nn.Module):
    """The log-ODE method's vector field on depth-1 or depth-2 log-signature windows, a dynamics for `solve`.

    For a CDE field f (``field.matrix(z)`` of shape (B, H, d), column i being f_i) and a window's log-signature rate
    ``dx`` = (λ_1..λ_d, λ_ij for i < j in lexicographic order), the rate of z is

        Σ_i λ_i f_i(z) + Σ_{i<j} λ_ij [f_i, f_j](z),   [f_i, f_j](z) = J_{f_j}(z) f_i(z) − J_{f_i}(z) f_j(z).

    The bracket sum equals Σ_j J_{f_j}(z) w_j with w_j = Σ_i Λ_ij f_i(z), Λ the antisymmetric matrix of the λ_ij
    (Λ_ij = λ_ij = −Λ_ji for i < j): d forward-mode Jacobian-vector products (`torch.func.jvp`, vmapped over j),
    whatever the number d(d−1)/2 of brackets. A field with a ``column_derivative_sum(z, tangents, columns)`` method
    (`CDEVectorField`) computes that sum itself, differentiating only column j along w_j (about 3x faster for the
    MLP at d = 7); any other field goes through `generic_column_derivative_sum` (whole JVPs of z ↦ f(z), column j of
    the j-th kept). Both are ordinary autograd operations, so every gradient method of `solve` differentiates
    through them. At depth 1 the rate is f(z) λ, the NCDE's, with no Jacobian work.

    Arguments:
        field: a CDE vector field with ``matrix(z)`` (or ``matrix(z, s)`` when it declares ``needs_time``, as
            `BasisCDEVectorField`) returning (B, H, d), and ``in_channels`` = d: `CDEVectorField` or any module
            with that interface (a linear field A_i z in the tests).
        control_depth: 1 or 2, the depth of the windows' log-signatures.

    Attributes:
        use_column_derivatives: whether the field's own ``column_derivative_sum`` is used (set when it has one;
            False forces the generic path, which the tests compare it with).

    Raises:
        ValueError: a depth other than 1 or 2.
    """

    needs_value = False
    needs_derivative = True

    _rows: torch.Tensor  # buffers: the Lyndon words ij, i < j
    _cols: torch.Tensor

    def __init__(self, field: nn.Module, control_depth: int):
        super().__init__()
        self.field: Any = field  # any module with the interface above
        self.control_depth = _check_control_depth(control_depth)
        self.path_channels = d = int(cast(Any, field).in_channels)
        self.channels = d if control_depth == 1 else d + d * (d - 1) // 2
        self.needs_time = bool(getattr(field, "needs_time", False))
        # A field that differentiates each column along its own tangent itself (CDEVectorField: only the last
        # layer's rows of that column) saves the d − 1 other columns of every Jacobian-vector product.
        self.use_column_derivatives = hasattr(field, "column_derivative_sum")
        first = next(field.parameters(), None)
        device = None if first is None else first.device
        rows, cols = torch.triu_indices(d, d, offset=1, device=device)  # the Lyndon words ij, i < j, in order
        self.register_buffer("_rows", rows, persistent=False)
        self.register_buffer("_cols", cols, persistent=False)

    def forward(
        self, z: torch.Tensor, x: torch.Tensor | None, dx: torch.Tensor, s: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The rate of z on a window.

        Arguments:
            z: (B, H) hidden states.
            x: the control's value (not read).
            dx: (B, d) at depth 1 or (B, d + d(d−1)/2) at depth 2: the window's log-signature per unit s.
            s: (B,) the control's parameter, passed to a field that ``needs_time``; None otherwise.

        Returns:
            (B, H) dz/ds.

        Raises:
            ValueError: ``dx`` without the channels of this depth.
        """
        if dx.shape[-1] != self.channels:
            raise ValueError(
                f"dx has {dx.shape[-1]} channels, but a depth-{self.control_depth} log-signature of a "
                f"{self.path_channels}-channel path has {self.channels}"
            )
        d = self.path_channels
        field = self.field
        matrix = (lambda state: field.matrix(state, s)) if self.needs_time else field.matrix
        columns = matrix(z)  # (B, H, d)
        rate = (columns @ dx[:, :d].unsqueeze(-1)).squeeze(-1)
        if self.control_depth == 1 or d == 1:
            return rate
        areas = dx[:, d:]  # (B, d(d−1)/2)
        upper = areas.new_zeros(areas.shape[0], d, d)
        upper[:, self._rows, self._cols] = areas
        tangents = columns @ (upper - upper.transpose(1, 2))  # (B, H, d): column j is w_j = Σ_i Λ_ij f_i
        if self.use_column_derivatives:
            return rate + field.column_derivative_sum(z, tangents, columns)
        return rate + self.generic_column_derivative_sum(matrix, z, tangents)

    @staticmethod
    def generic_column_derivative_sum(matrix, z: torch.Tensor, tangents: torch.Tensor) -> torch.Tensor:
        """Σ_j J_{f_j}(z) w_j for any field: d Jacobian-vector products of the whole z ↦ f(z) (`torch.func.jvp`,
        vmapped over j), of which column j is kept from the j-th.

        Arguments:
            matrix: z ↦ f(z), (B, H) to (B, H, d).
            z: (B, H) states.
            tangents: (B, H, d): column j is w_j.

        Returns:
            (B, H).
        """

        def derivative_along(tangent):
            return jvp(matrix, (z,), (tangent,))[1]

        derivatives = vmap(derivative_along, in_dims=2)(tangents)  # (d, B, H, d): [j] = J_f(z) w_j
        return derivatives.diagonal(dim1=0, dim2=3).sum(-1)


def _log_ode_depth(d: int, channels: int) -> int:
    """The depth of log-signature windows of ``channels`` terms in a Lyndon basis of a d-channel path (the one whose
    first point the control carries; 0 when no depth gives that count)."""
    depth, terms = 1, d
    while terms < channels and d > 1:  # a 1-channel path has only its increment at every depth
        depth += 1
        terms = logsignature_channels(d, depth)
    return depth if terms == channels else 0


def _check_log_ode_control(control: Control, needs_initial_value: bool = True) -> None:
    """Refuse, with what to do instead, a control the log-ODE form cannot read (``needs_initial_value``: a model
    starting from the path's first point, or the registry reading the path's channels from it)."""
    if not control.piecewise_constant:
        raise ValueError(
            "form='log-ode' (Log-NCDE) reads log-signature windows (build_control(interpolation='logsignature', "
            "depth=1 or 2)), but got an interpolated control; use form='cde' for an NCDE on it"
        )
    if any(name.startswith("start_") for name in control.channels_info):
        raise ValueError(
            "form='log-ode' reads the windows' log-signatures only, but this control also carries the "
            "path's values at the windows' starts: build it with window_start_values=False"
        )
    if control.initial_value is None:
        if needs_initial_value:
            raise ValueError(
                "form='log-ode' starts from the path's first point (and reads the path's channels from "
                "it), which this log-signature control does not carry (control.initial_value): build it "
                "with build_control(interpolation='logsignature'), or use initial_state='first_window' or "
                "'zeros'"
            )
        return  # its channel count is checked against the model's
    d = control.initial_value.shape[-1]
    depth = _log_ode_depth(d, control.channels)
    if depth > 2:
        raise ValueError(
            f"control has depth-{depth} log-signature windows of a {d}-channel path: the log-ODE step "
            f"at depth {depth} needs brackets of brackets ([f_i, [f_j, f_k]], ...), which are not "
            "implemented; build the control with depth 1 or 2"
        )
    if depth == 0:
        raise ValueError(
            f"control has {control.channels} channels, which is no log-signature of a {d}-channel path in "
            f"a Lyndon basis ({d} at depth 1, {d + d * (d - 1) // 2} at depth 2): the log-ODE form reads "
            "the increments and Lévy areas (logsig_basis='lyndon_brackets' or 'lyndon_words', not "
            "'expand')"
        )
