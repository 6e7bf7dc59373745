"""Neural controlled and rough differential equations: the NCDE and NRDE baselines.

**NCDE** (Kidger, Morrill, Foster & Lyons 2020, *Neural Controlled Differential Equations for Irregular
Time Series*): a hidden state z of width ``hidden`` solves

    z(t0) = ζ_θ(X(t0)),    dz = f_θ(z) dX(s),   i.e.   dz/ds = f_θ(z) · dX/ds,

where X is the interpolated control, ζ_θ a linear map and f_θ an MLP: Linear(hidden → width), ReLU,
``depth − 1`` × [Linear(width → width), ReLU], Linear(width → hidden · C), tanh, reshaped to a
(hidden × C) matrix (C = control channels). The class is read by a linear map of z at each sample's own
final time. This is the vector field of the paper's public code (``num_hidden_layers`` = ``depth``,
``hidden_hidden_channels`` = ``width``); the final tanh keeps the field bounded.

**NRDE** (Morrill, Salvi, Kidger & Foster 2021, *Neural Rough Differential Equations for Long Time
Series*): the same vector field driven by piecewise-constant log-signature windows
(``build_control(method="logsignature")``): on window j the control's derivative is that window's
log-signature per unit s, so dz/ds = f_θ(z) · logsig_j and f_θ outputs (hidden × logsig channels).

One class serves both: ``form="cde"`` expects an interpolated control, ``form="rde"`` a log-signature
control, and giving it the other raises an error that says which was expected.

Initial state (``initial_state``):

- ``"input"`` (default, both papers): z(t0) = Linear(X(t0)), the path's value at its first knot.
  For an interpolated control that is ``control.evaluate(knots[0])`` (``initial_channels`` defaults to
  the control's channels). A log-signature control holds only the windows' log-signatures, not the
  path's first point; the NRDE paper's code uses that point, so ``form="rde"`` with
  ``initial_state="input"`` needs a control that carries it as ``control.initial_value`` (B, C_path)
  and ``initial_channels=C_path``, and raises an error otherwise.
- ``"first_window"``: z(t0) = Linear(the first window's log-signature) (or, for a CDE, of dX/ds at
  t0): what a log-signature control without its first point allows. A deviation from the NRDE paper.
- ``"zeros"``: z(t0) = 0.

Solving uses `solve` (checkpointed gradients by default). Each sample is frozen after its
own final knot, so a sample gets the same answer alone or in a padded batch.

**Weights that change in time** (paper 004, Queiruga, Erichson et al.; ``basis=...``, ``num_bases=...``): every
linear layer of f_θ becomes a `neuralde_seq.basis.BasisLinear`, W(u) = Σ_i φ_i(u) W_i, and the field is
f_θ(z, u(s)) with u(s) = (s − s_a)/(s_b − s_a) for ``basis_time_range = (s_a, s_b)`` in units of the control's
parameter s. The range is an explicit argument (the registry fills it from the inputs `create_model` is given:
the training control's first knot and its last final knot), never read from whatever batch comes first. Before
s_a and after s_b the weights stay at their values at the ends (u is held in [0, 1], with a
`neuralde_seq.basis.BasisRangeWarning`, as the CT-FWP fields do): a test series that runs longer than every
training series is read with the last weights. The field declares ``needs_time``, so every solver passes s (see
`neuralde_seq.solvers.Dynamics`). A point on a breakpoint of a piecewise-constant basis reads the piece on its
right. ``project_bases`` returns a copy with the field's weights projected onto another basis (compression,
refinement). With ``basis=None`` (the default) the field is the time-independent `CDEVectorField`, exactly as
before.
"""
from __future__ import annotations

import torch
from torch import nn

from ..basis import BasisLinear, check_time_range, make_basis, project_module, time_position
from ..controls import Control
from ..input_checks import check_input_matches, check_input_type, check_num_outputs
from ..solvers import SolverOptions, solve

__all__ = ["CDEVectorField", "BasisCDEVectorField", "NeuralCDE", "NCDE_INITIAL_STATES", "ACTIVATIONS"]

NCDE_INITIAL_STATES = ("input", "first_window", "zeros")
ACTIVATIONS = {"relu": nn.ReLU, "softplus": nn.Softplus, "tanh": nn.Tanh, "silu": nn.SiLU}


class CDEVectorField(nn.Module):
    """f_θ of a neural CDE/RDE as a dynamics for `solve`.

    ``matrix(z)`` is f_θ(z) of shape (B, hidden, C); ``forward(z, x, dx)`` is the rate f_θ(z) · dx.

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

    def matrix(self, z: torch.Tensor) -> torch.Tensor:
        """f_θ(z) of shape (B, hidden, in_channels)."""
        return self.net(z).view(*z.shape[:-1], self.hidden, self.in_channels)

    def forward(self, z: torch.Tensor, x: torch.Tensor | None, dx: torch.Tensor) -> torch.Tensor:
        return (self.matrix(z) @ dx.unsqueeze(-1)).squeeze(-1)


class BasisCDEVectorField(nn.Module):
    """f_θ(z, u(s)) of a neural CDE/RDE whose linear layers are basis expansions in time (module docstring), as a
    dynamics for `solve` that reads s (``needs_time``): ``forward(z, x, dx, s)`` is f_θ(z, u(s)) · dx.

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

    def __init__(self, hidden: int, in_channels: int, width: int, depth: int, activation: str, basis,
                 time_range: tuple[float, float], num_bases: int | None = None):
        super().__init__()
        plain = CDEVectorField(hidden, in_channels, width, depth, activation)  # checks the sizes and activation
        basis = make_basis(basis, num_bases)
        layers = []
        for layer in plain.net:
            if isinstance(layer, nn.Linear):
                layers.append(BasisLinear(layer.in_features, layer.out_features, basis))
            else:
                layers.append(layer)
        self.net = nn.ModuleList(layers)
        self.time_range = check_time_range(basis, None, time_range)
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


class NeuralCDE(nn.Module):
    """NCDE / NRDE classifier (see the module docstring).

    Arguments:
        in_channels: channels of the control (interpolated channels, or log-signature channels).
        num_classes: number of outputs: classes, or targets of a regression (>= 1).
        hidden: width of the hidden state z.
        width: width of the vector field's MLP layers.
        depth: number of hidden layers of the vector field's MLP.
        activation: activation of those layers ("relu", as the paper; see `CDEVectorField`).
        form: "cde" (interpolated control, NCDE) or "rde" (log-signature control, NRDE).
        solver: `SolverOptions` (default rk4, one step per knot, checkpointed gradients).
        initial_state: one of `NCDE_INITIAL_STATES`: "input" (default: a linear map of the path's first
            point), "first_window" (of the first piece's derivative) or "zeros".
        initial_channels: channels of the point that ``initial_state="input"`` reads (default
            ``in_channels`` for a CDE; required for an RDE, whose control channels are log-signatures).
        basis: None (default: the time-independent field `CDEVectorField`), or a name of
            `neuralde_seq.basis.BASIS_NAMES` (or a `neuralde_seq.basis.Basis`): the field's weights are expansions
            in time in this basis (`BasisCDEVectorField`, module docstring).
        num_bases: the number of basis functions, with a basis name.
        basis_time_range: (s_a, s_b), the span of the control's parameter s mapped onto the basis's [0, 1];
            required with ``basis`` (the registry fills it from the training inputs), refused without one.

    ``forward(control)`` returns logits (B, num_classes) read at each sample's own final knot;
    ``forward(control, at_knots=True)`` the logits at every knot, (B, K, num_classes); ``hidden_states``
    gives z itself.
    """

    def __init__(self, in_channels: int, num_classes: int, hidden: int = 32, width: int = 64, depth: int = 2, *,
                 form: str = "cde", solver: SolverOptions | None = None, initial_state: str = "input",
                 initial_channels: int | None = None, activation: str = "relu", basis=None,
                 num_bases: int | None = None, basis_time_range: tuple[float, float] | None = None):
        super().__init__()
        check_num_outputs(num_classes)
        if form not in ("cde", "rde"):
            raise ValueError(f"form must be 'cde' (interpolated control) or 'rde' (log-signature control), got {form!r}")
        if initial_state not in NCDE_INITIAL_STATES:
            raise ValueError(f"initial_state must be one of {NCDE_INITIAL_STATES}, got {initial_state!r}")
        if initial_state == "input" and form == "rde" and initial_channels is None:
            raise ValueError("form='rde' with initial_state='input' reads the path's first point, which is not one of "
                             "the log-signature channels: give initial_channels (the path's channels), or use "
                             "initial_state='first_window' or 'zeros'")
        time_range = check_time_range(basis, num_bases, basis_time_range)
        if basis is None:
            self.field = CDEVectorField(hidden, in_channels, width, depth, activation)
        else:
            self.field = BasisCDEVectorField(hidden, in_channels, width, depth, activation,
                                             make_basis(basis, num_bases), time_range)
        self.form = form
        self.initial_state = initial_state
        if initial_state == "input":
            self.initial_channels = in_channels if initial_channels is None else initial_channels
            self.initial = nn.Linear(self.initial_channels, hidden)
        elif initial_state == "first_window":
            self.initial_channels = in_channels
            self.initial = nn.Linear(in_channels, hidden)
        else:
            self.initial_channels = None
            self.initial = None
        self.readout = nn.Linear(hidden, num_classes)
        self.solver = solver or SolverOptions()
        self.hidden = hidden
        self.in_channels = in_channels

    def _check(self, control: Control) -> None:
        check_input_type(self, control, Control)
        if self.form == "rde" and not control.piecewise_constant:
            raise ValueError("this model was built with form='rde' (NRDE) and needs a log-signature control "
                             "(build_control(method='logsignature')), but got an interpolated control")
        if self.form == "cde" and control.piecewise_constant:
            raise ValueError("this model was built with form='cde' (NCDE) and needs an interpolated control, but got "
                             "log-signature windows; build the model with form='rde' for an NRDE")
        if control.channels != self.in_channels:
            raise ValueError(f"control has {control.channels} channels but the model expects {self.in_channels}")
        check_input_matches(self, control)

    def initial_hidden(self, control: Control) -> torch.Tensor:
        """z(t0), following ``initial_state``.

        Arguments:
            control: the input path, batch size B.

        Returns:
            z(t0) of shape (B, hidden).

        Raises:
            ValueError: ``initial_state="input"`` on a log-signature control without ``initial_value``, or an
                initial point whose channels differ from ``initial_channels``.
        """
        s0 = control.knots[0]
        if self.initial_state == "zeros":
            return control.coeffs.new_zeros(control.batch_size, self.hidden)
        if self.initial_state == "first_window":
            return self.initial(control.derivative(s0))
        if control.piecewise_constant:
            point = getattr(control, "initial_value", None)
            if point is None:
                raise ValueError("initial_state='input' for an NRDE needs the path's first point, but this log-signature "
                                 "control does not carry it (control.initial_value); use initial_state='first_window' "
                                 "or 'zeros'")
        else:
            point = control.evaluate(s0)
        if point.shape[-1] != self.initial_channels:
            raise ValueError(f"the initial point has {point.shape[-1]} channels but the model expects "
                             f"initial_channels={self.initial_channels}")
        return self.initial(point)

    def hidden_states(self, control: Control, at_knots: bool = False, z0: torch.Tensor | None = None):
        """The hidden state z.

        Arguments:
            control: the input path, batch size B, ``channels == in_channels`` (interpolated for
                ``form="cde"``, log-signature windows for ``form="rde"``).
            at_knots: False (default): z at each sample's own final knot; True: z at every knot.
            z0: (B, hidden) replaces the initial state z(t0); None (default): `initial_hidden`.

        Returns:
            (B, hidden), or (B, K, hidden) with ``at_knots`` (constant after a sample's end).
        """
        self._check(control)
        z0 = self.initial_hidden(control) if z0 is None else z0
        return solve(self.field, control, z0, self.solver, at_knots=at_knots)

    def project_bases(self, target) -> "NeuralCDE":
        """A copy whose field's weights are L2-projected onto another basis (`neuralde_seq.basis.project_module`).

        Arguments:
            target: a `neuralde_seq.basis.Basis`, or an int n (the same kind of basis with n functions).

        Returns:
            A new `NeuralCDE` (this one is unchanged).

        Raises:
            ValueError: the model was built without a basis.
        """
        if isinstance(self.field, CDEVectorField):
            raise ValueError("this NeuralCDE was built with basis=None (a time-independent field): nothing to project")
        return project_module(self, target)

    def forward(self, control: Control, at_knots: bool = False) -> torch.Tensor:
        """Logits (or regression outputs) from z.

        Arguments:
            control: the input path, batch size B (see `hidden_states`).
            at_knots: False (default): at each sample's own final knot; True: at every knot.

        Returns:
            (B, num_classes), or (B, K, num_classes) with ``at_knots``.
        """
        return self.readout(self.hidden_states(control, at_knots=at_knots))
