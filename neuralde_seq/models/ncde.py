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
(``build_control(interpolation="logsignature")``): on window j the control's derivative is that window's
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

Scale (``control_scales``). The field is bounded (its final tanh), so over a solve z moves like Σ_k f_θ(z_k) ΔX_k: a
random walk whose variance is at most ``hidden`` × the control's quadratic variation Σ_c Σ_k (ΔX^c_k)², plus a drift
of the same order from f's dependence on z. What sets z's size at initialisation is therefore how roughly the path
moves, summed over its channels, not its level or its number of knots alone. On a short standardised series that sum
is small (aeon's JapaneseVowels: 12; BasicMotions: 450), but 2,000 points of JapaneseVowels (12 channels continued
utterance after utterance, 30 % dropped) sum to 4,200, and z reached norms of 200 and the logits ~30 (a first loss
of 23-41 for ln K = 2.2; issue 33). ``control_scales`` divides each control channel the field reads by a fixed number;
the registry gives "ncde" and "nrde" `roughness_scales` of the training control, which leaves a channel as it is
unless the control's summed quadratic variation exceeds `CONTROL_ROUGHNESS_BUDGET` (300), and then shrinks each
channel to its share. The initial state reads the path's point unscaled (its level is standardised already).

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

**Log-NCDE** (Walker et al., ICML 2024, *Log Neural Controlled Differential Equations: The Lie Brackets Make a
Difference*; ``form="log-ode"``): the NCDE's own field f_θ: R^H → R^{H × d}, d the *path's* channels, solved by the
log-ODE method on log-signature windows of depth 1 or 2 (``build_control(interpolation="logsignature", depth=...)``). On
window j (s ∈ [j, j + 1), its log-signature λ = (λ_i, λ_ij for i < j) per unit s) the state solves

    dz/ds = Σ_i λ_i f_i(z) + Σ_{i<j} λ_ij [f_i, f_j](z),   [f_i, f_j](z) = J_{f_j}(z) f_i(z) − J_{f_i}(z) f_j(z),

with f_i the i-th column of f_θ (`LogODEVectorField`). The level-2 terms are the Lévy areas in the order and sign of
`neuralde_seq.signatures` (the Lyndon words ij, i < j); with that sign, a linear field f_i(z) = A_i z driven first
along e_1 by a, then along e_2 by b, gets the generator a A_1 + b A_2 + (ab/2)(A_2 A_1 − A_1 A_2), the log of its exact
flow exp(b A_2) exp(a A_1) (tests/test_log_ncde.py). Unlike the NRDE, whose field reads the log-signature as an input
(its last layer is H × D, D = d + d(d−1)/2), the Log-NCDE's field is H × d and the areas enter through its Lie
brackets; at depth 1 both are the NCDE on the windows' increments. ``control_depth`` (1 or 2) says which windows the
model reads; depth 3 and beyond would need brackets of brackets, which are not implemented. z(t0) is a linear map of
the path's first point (``control.initial_value``), as the NRDE's. `NeuralCDE.penalty` is the paper's Lip(2)
regulariser and ``field_init_scale`` its initialisation (the authors divide the field's weights and biases by 1000);
docs/log_ncde.md has the cost and usage.
"""

from __future__ import annotations

import math
import numbers
from typing import cast

import torch
from torch import nn

from ..basis import check_time_range, make_basis, project_module
from ..controls import Control
from ..input_checks import check_input_matches, check_input_type, check_num_outputs
from ..solvers import Method, SolverOptions, solve, solver_options
from .linear_cde import _pieces
from .ncde_fields import (
    ACTIVATION_SLOPES,
    ACTIVATIONS,
    BasisCDEVectorField,
    CDEVectorField,
    LogODEVectorField,
    _check_log_ode_control,
    _log_ode_depth,
    log_ode_path_channels,
)

__all__ = [
    "CDEVectorField",
    "BasisCDEVectorField",
    "LogODEVectorField",
    "NeuralCDE",
    "NCDE_FORMS",
    "NCDE_INITIAL_STATES",
    "ACTIVATIONS",
    "ACTIVATION_SLOPES",
    "log_ode_path_channels",
    "roughness_scales",
    "CONTROL_ROUGHNESS_BUDGET",
]

NCDE_FORMS = ("cde", "rde", "log-ode")
NCDE_INITIAL_STATES = ("input", "first_window", "zeros")
# The quadratic variation, summed over the control's channels and averaged over the training samples, that the path a
# CDE/RDE field reads may keep (module docstring, "Scale"). Measured at the registry's defaults (seeds 0-2): on
# 2,000-point JapaneseVowels (sum 4,200 unscaled) z ends at norms 190-230 unscaled, 7-10 with 300, 38-50 with 1,000
# (first losses up to 6.4, near 3 ln K); 300 leaves short JapaneseVowels (12) as it is and shrinks BasicMotions'
# (450) noisy channels by at most 1.4x.
CONTROL_ROUGHNESS_BUDGET = 300.0


def roughness_scales(control: Control, budget: float = CONTROL_ROUGHNESS_BUDGET) -> tuple[float, ...]:
    """The ``control_scales`` the registry gives "ncde" and "nrde" from the training control (module docstring,
    "Scale"): per control channel c, max(1, √(C · QV_c / budget)), QV_c = Σ_k (ΔX^c_k)² the channel's quadratic
    variation over its pieces (the knot intervals' increments, or the log-signature windows' terms, which the field
    reads alike) averaged over the samples, C the control's channels. The scaled control's quadratic variation, summed
    over its channels, is then at most ``budget``; a channel within its share budget / C is left as it is, so short
    and smooth series are read as before.

    Arguments:
        control: an interpolated control or log-signature windows (any depth, with or without window start values:
            every channel the field reads).
        budget: the summed quadratic variation kept, a positive number.

    Returns:
        A tuple of C floats >= 1.

    Raises:
        TypeError: ``control`` is not a `Control`.
        ValueError: ``budget`` is not a positive finite number.
    """
    if not isinstance(control, Control):
        raise TypeError(f"control must be a neuralde_seq Control (build_control), got {type(control).__name__}")
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget < float("inf"):
        raise ValueError(f"budget must be a positive finite number, got {budget!r}")
    terms, _ = _pieces(control)  # zero after each sample's end: padding adds nothing
    roughness = terms.double().square().sum(dim=1).mean(dim=0)  # (C,)
    scales = (roughness * control.channels / budget).sqrt().clamp(min=1.0)
    return tuple(float(v) if math.isfinite(v) else 1.0 for v in scales.tolist())


def _check_control_scales(control_scales, channels: int) -> torch.Tensor:
    """control_scales as a (channels,) float64 tensor, or a ValueError saying what was expected."""
    values = [control_scales] * channels if isinstance(control_scales, numbers.Real) else control_scales
    try:
        if isinstance(values, (str, bytes)) or isinstance(control_scales, bool):
            raise TypeError
        scales = torch.as_tensor([float(v) for v in values], dtype=torch.float64)
    except (TypeError, ValueError):
        scales = None
    if scales is None or scales.numel() != channels or not bool(torch.isfinite(scales).all() & (scales > 0).all()):
        raise ValueError(
            f"control_scales must be one positive finite number or {channels} of them (one per control "
            f"channel), got {control_scales!r}"
        )
    return scales


class _ScaledControl(nn.Module):
    """A CDE field reading the control's derivative divided by fixed per-channel scales (`NeuralCDE`'s
    ``control_scales``), as a dynamics for `solve`."""

    needs_value = False
    needs_derivative = True

    def __init__(self, field: nn.Module, scales: torch.Tensor):
        super().__init__()
        self.field = field
        self.scales = scales
        self.needs_time = bool(getattr(field, "needs_time", False))

    def forward(self, z: torch.Tensor, x: torch.Tensor | None, dx: torch.Tensor, *s: torch.Tensor) -> torch.Tensor:
        return self.field(z, x, dx / self.scales, *s)


class NeuralCDE(nn.Module):
    """NCDE / NRDE / Log-NCDE classifier (see the module docstring).

    Arguments:
        in_channels: channels of the control (interpolated channels, or log-signature channels).
        num_classes: number of outputs: classes, or targets of a regression (>= 1).
        hidden: width of the hidden state z.
        width: width of the vector field's MLP layers.
        depth: number of hidden layers of the vector field's MLP.
        activation: activation of those layers ("relu", as the paper; see `CDEVectorField`).
        form: one of `NCDE_FORMS`: "cde" (interpolated control, NCDE), "rde" (log-signature control read by a
            field with one column per log-signature term, NRDE) or "log-ode" (log-signature windows of depth 1 or 2
            solved by the log-ODE method with the Lie brackets of a field with one column per path channel,
            Log-NCDE).
        solver: `SolverOptions` or a method object (default `Auto`: rk4, one step per knot, checkpointed
            gradients).
        initial_state: one of `NCDE_INITIAL_STATES`: "input" (default: a linear map of the path's first
            point), "first_window" (of the first piece's derivative) or "zeros".
        initial_channels: channels of the point that ``initial_state="input"`` reads (default
            ``in_channels`` for a CDE, the path's channels d for a Log-NCDE; required for an RDE, whose control
            channels are log-signatures).
        basis: None (default: the time-independent field `CDEVectorField`), or a name of
            `neuralde_seq.basis.BASIS_NAMES` (or a `neuralde_seq.basis.Basis`): the field's weights are expansions
            in time in this basis (`BasisCDEVectorField`, module docstring).
        num_bases: the number of basis functions, with a basis name.
        basis_time_range: (s_a, s_b), the span of the control's parameter s mapped onto the basis's [0, 1];
            required with ``basis`` (the registry fills it from the training inputs), refused without one.
        control_depth: ``form="log-ode"`` only, and required there: 1 or 2, the log-signature depth of the windows
            read; ``in_channels`` is then d or d + d(d−1)/2 for a d-channel path (`log_ode_path_channels`). The
            registry fills it from the training control (`log_ode_options`).
        field_init_scale: the vector field's initial weights and biases are multiplied by this positive number
            (default 1: PyTorch's initialisation). The Log-NCDE paper divides them by 1000 (``1e-3`` here), so that
            the flow starts near the identity.
        control_scales: ``form="cde"`` or ``"rde"`` only: one positive number, or ``in_channels`` of them, dividing
            the control's channels as the field reads them (module docstring, "Scale"); None (default): the control
            as it is. The registry gives "ncde" and "nrde" the training control's `roughness_scales`.

    ``forward(control)`` returns logits (B, num_classes) read at each sample's own final knot;
    ``forward(control, at_knots=True)`` the logits at every knot, (B, K, num_classes); ``hidden_states``
    gives z itself; ``penalty()`` the Log-NCDE paper's Lip(2) regulariser of the field.

    Raises:
        ValueError: an unknown form or initial state, sizes that are not positive integers, ``control_depth``
            missing or not 1 or 2 with ``form="log-ode"`` (or given with another form), ``in_channels`` that is not a
            log-signature width at that depth, a ``field_init_scale`` that is not a positive number, or
            ``control_scales`` that are not positive numbers, one or ``in_channels`` of them, or given with
            ``form="log-ode"``.
    """

    control_scales: torch.Tensor | None  # a buffer: (in_channels,) or None

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden: int = 32,
        width: int = 64,
        depth: int = 2,
        *,
        form: str = "cde",
        solver: SolverOptions | Method | None = None,
        initial_state: str = "input",
        initial_channels: int | None = None,
        activation: str = "relu",
        basis=None,
        num_bases: int | None = None,
        basis_time_range: tuple[float, float] | None = None,
        control_depth: int | None = None,
        field_init_scale: float = 1.0,
        control_scales=None,
    ):
        super().__init__()
        check_num_outputs(num_classes)
        if form not in NCDE_FORMS:
            raise ValueError(
                f"form must be 'cde' (interpolated control), 'rde' (log-signature control read as the "
                f"field's input) or 'log-ode' (log-signature windows by the log-ODE method), got {form!r}"
            )
        if initial_state not in NCDE_INITIAL_STATES:
            raise ValueError(f"initial_state must be one of {NCDE_INITIAL_STATES}, got {initial_state!r}")
        if initial_state == "input" and form == "rde" and initial_channels is None:
            raise ValueError(
                "form='rde' with initial_state='input' reads the path's first point, which is not one of "
                "the log-signature channels: give initial_channels (the path's channels), or use "
                "initial_state='first_window' or 'zeros'"
            )
        if (
            isinstance(field_init_scale, bool)
            or not isinstance(field_init_scale, (int, float))
            or not (0 < field_init_scale < float("inf"))
        ):
            raise ValueError(f"field_init_scale must be a positive number, got {field_init_scale!r}")
        field_channels = in_channels
        if form == "log-ode":
            if control_depth is None:
                raise ValueError(
                    "form='log-ode' needs control_depth (1 or 2): the log-signature depth of the windows "
                    "it reads, which their channel count alone does not fix (3 channels are a 3-channel "
                    "path at depth 1 or a 2-channel path at depth 2)"
                )
            field_channels = log_ode_path_channels(in_channels, control_depth)
            if initial_state == "input" and initial_channels is None:
                initial_channels = field_channels
        elif control_depth is not None:
            raise ValueError(f"control_depth is read by form='log-ode' only (got form={form!r}): drop it")
        time_range = check_time_range(basis, num_bases, basis_time_range)
        self.field: CDEVectorField | BasisCDEVectorField
        if basis is None:
            self.field = CDEVectorField(hidden, field_channels, width, depth, activation)
        else:
            self.field = BasisCDEVectorField(
                hidden, field_channels, width, depth, activation, make_basis(basis, num_bases), time_range
            )
        if field_init_scale != 1:
            with torch.no_grad():
                for parameter in self.field.parameters():
                    parameter.mul_(field_init_scale)
        if control_scales is not None and form == "log-ode":
            # its level-2 terms enter through brackets, and would need the products of their channels' scales
            raise ValueError(
                "control_scales is read by form='cde' and 'rde' only; the log-ODE form starts near the "
                "identity through field_init_scale instead: drop control_scales"
            )
        # a buffer: saved with the weights, so a reloaded model reads the path in the units it was trained in
        self.register_buffer(
            "control_scales",
            None
            if control_scales is None
            else _check_control_scales(control_scales, in_channels).to(torch.get_default_dtype()),
        )
        self.form = form
        self.control_depth = control_depth
        self.path_channels = field_channels if form == "log-ode" else None
        self.initial_state = initial_state
        self.initial_channels: int | None = None  # (initial_state "zeros": neither)
        self.initial: nn.Linear | None = None
        if initial_state == "input":
            self.initial_channels = in_channels if initial_channels is None else initial_channels
            self.initial = nn.Linear(self.initial_channels, hidden)
        elif initial_state == "first_window":
            self.initial_channels = in_channels
            self.initial = nn.Linear(in_channels, hidden)
        self.readout = nn.Linear(hidden, num_classes)
        self.solver = solver_options(solver)
        self.hidden = hidden
        self.in_channels = in_channels

    @staticmethod
    def log_ode_options(control: Control, options: dict | None = None) -> dict:
        """The options of a ``form="log-ode"`` model that its training control fixes (the registry's
        ``from_inputs`` for "log-ncde"): the windows' depth and the path's channels.

        Arguments:
            control: log-signature windows of depth 1 or 2 in a Lyndon basis, built with the path's first point
                (``build_control(interpolation="logsignature")``).
            options: the model options given so far (not read; the registry's ``from_inputs`` signature).

        Returns:
            ``{"control_depth": 1 or 2, "initial_channels": d}``, d the path's channels.

        Raises:
            TypeError: ``control`` is not a `Control`.
            ValueError: an interpolated control, windows with start values, without ``initial_value``, of depth 3 or
                more, or in the "expand" basis.
        """
        if not isinstance(control, Control):
            raise TypeError(
                f"control must be a neuralde_seq Control (build_control(interpolation='logsignature')), got "
                f"{type(control).__name__}"
            )
        _check_log_ode_control(control)
        assert control.initial_value is not None  # refused without it
        d = control.initial_value.shape[-1]
        return {"control_depth": 1 if control.channels == d else 2, "initial_channels": d}

    def penalty(self) -> torch.Tensor:
        """The Lip(2) regulariser of the Log-NCDE paper (its train.py), for every form (it is the same field):

            Σ_layers ( mean_r ‖W_r‖₂ + ‖b‖₂ )

        over the linear layers of the vector field's MLP, W_r the rows of a layer's weight and b its bias. It bounds
        the field's Lipschitz constants, on which the log-ODE method's error depends. The training loop adds
        ``penalty_weight · penalty()`` to the loss (config key ``training.penalty_weight``: the paper's λ, e.g.
        1e-3 on EigenWorms).

        Returns:
            () the penalty, differentiable in the field's parameters.

        Raises:
            ValueError: a field whose weights are basis expansions in time (``basis=...``), for which the paper
                defines no such bound.
        """
        if not isinstance(self.field, CDEVectorField):
            raise ValueError(
                "penalty() is the Lip(2) bound of a time-independent field; this NeuralCDE's weights are "
                "basis expansions in time (basis=...)"
            )
        terms = [
            layer.weight.norm(dim=1).mean() + layer.bias.norm()
            for layer in self.field.net
            if isinstance(layer, nn.Linear)
        ]
        return sum(terms[1:], terms[0])  # summed in the layers' order

    def _check(self, control: Control) -> None:
        check_input_type(self, control, Control)
        if self.form == "rde" and not control.piecewise_constant:
            raise ValueError(
                "this model was built with form='rde' (NRDE) and needs a log-signature control "
                "(build_control(interpolation='logsignature')), but got an interpolated control"
            )
        if self.form == "cde" and control.piecewise_constant:
            raise ValueError(
                "this model was built with form='cde' (NCDE) and needs an interpolated control, but got "
                "log-signature windows; build the model with form='rde' for an NRDE, or form='log-ode' "
                "for a Log-NCDE"
            )
        if self.form == "log-ode":
            _check_log_ode_control(control, needs_initial_value=self.initial_state == "input")
            d = None if control.initial_value is None else control.initial_value.shape[-1]
            if d is not None and (d != self.path_channels or control.channels != self.in_channels):
                raise ValueError(
                    f"control has depth-{_log_ode_depth(d, control.channels)} log-signature windows of a "
                    f"{d}-channel path ({control.channels} channels), but "
                    f"the model reads depth-{self.control_depth} windows of a "
                    f"{self.path_channels}-channel path ({self.in_channels} channels)"
                )
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
        assert self.initial is not None  # made for every initial_state but "zeros"
        if self.initial_state == "first_window":
            return self.initial(control.derivative(s0))
        if control.piecewise_constant:
            point = getattr(control, "initial_value", None)
            if point is None:
                raise ValueError(
                    "initial_state='input' for an NRDE needs the path's first point, but this log-signature "
                    "control does not carry it (control.initial_value); use initial_state='first_window' "
                    "or 'zeros'"
                )
        else:
            point = control.evaluate(s0)
        if point.shape[-1] != self.initial_channels:
            raise ValueError(
                f"the initial point has {point.shape[-1]} channels but the model expects "
                f"initial_channels={self.initial_channels}"
            )
        return self.initial(point)

    def hidden_states(self, control: Control, at_knots: bool = False, z0: torch.Tensor | None = None):
        """The hidden state z.

        Arguments:
            control: the input path, batch size B, ``channels == in_channels`` (interpolated for
                ``form="cde"``, log-signature windows for ``form="rde"``, of depth ``control_depth`` for
                ``form="log-ode"``).
            at_knots: False (default): z at each sample's own final knot; True: z at every knot.
            z0: (B, hidden) replaces the initial state z(t0); None (default): `initial_hidden`.

        Returns:
            (B, hidden), or (B, K, hidden) with ``at_knots`` (constant after a sample's end).
        """
        self._check(control)
        z0 = self.initial_hidden(control) if z0 is None else z0
        dynamics: nn.Module = self.field
        if self.form == "log-ode":  # (which requires control_depth)
            dynamics = LogODEVectorField(self.field, cast(int, self.control_depth))
        if self.control_scales is not None:
            dynamics = _ScaledControl(dynamics, self.control_scales)
        return solve(dynamics, control, z0, self.solver, at_knots=at_knots)

    def project_bases(self, target) -> NeuralCDE:
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
