"""Continuous-time fast weight programmers: layers, the deeper coupled model, and classifiers.

One layer (paper Sec. 3): fast weights W(s) evolve under a `FastWeightField`
from W(t0) to each sample's final time T; the output is read as y = W(T) q(T), heads concatenated, then an
output projection, the Transformer feed-forward block (pre-LayerNorm, Linear-ReLU-Linear, residual) and,
for a classifier, a linear head.

Deeper models (paper App. C.1, Eq. 33-35): layer l's output x(s, l) = FFN(W(s, l) softmax(W_q x(s, l−1)))
is the input of layer l+1, in direct-ODE form, and all layers form one coupled ODE solved at once. Layer 1
takes the control in the chosen form (ODE, CDE or RDE). With one layer this is exactly the model of Sec. 3.

Sequence-to-sequence use: ``forward(control, at_knots=True)`` returns the output at every knot of the
control (each sample's outputs after its own end repeat its final output).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from ..controls import Control
from ..fields import FastWeightField
from ..input_checks import check_input_matches, check_input_type, check_num_outputs
from ..solvers import Method, SolverOptions, resolve_method, solve, solver_options

__all__ = ["FeedForward", "FastWeightLayer", "FastWeightNetwork", "FastWeightClassifier", "INITIAL_STATES"]

INITIAL_STATES = ("zeros", "rank_one", "static")


class FeedForward(nn.Module):
    """Transformer feed-forward block: x + Linear(ReLU(Linear(LayerNorm(x)))).

    Arguments:
        d_model: width of the input and output.
        d_ff: inner width.
        dropout: dropout after the ReLU and after the output projection (default 0).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The residual block.

        Arguments:
            x: (..., d_model) input.

        Returns:
            (..., d_model) output.
        """
        return x + self.net(self.norm(x))


class FastWeightLayer(nn.Module):
    """One fast weight layer: its vector field, its initial state and its readout.

    Arguments:
        in_channels: channels of this layer's input (the control for layer 1).
        d_model: width of the layer's output and input projection.
        n_heads: number of heads.
        rule: "hebb", "oja", "delta", "delta-post" (or a name added by `neuralde_seq.rules.register_rule`) or a
            LearningRule.
        form: "ode", "cde" or "rde".
        d_ff: inner width of the feed-forward block (default 4·d_model).
        dropout: dropout in the readout (never inside the vector field).
        initial_state: "zeros", "rank_one" (the rule's write from the input at t0, as the public code; in the
            "rde" form the first window's log-signature, which holds the path's starting point only when the
            control was built with ``window_start_values=True``) or "static" (the rule's write from static
            features, e.g. PhysioNet's).
        static_channels: number of static features, needed for initial_state="static".
        dx_only: CDE form only: keys and values both from x' (default False; see `FastWeightField`).
        hebb_swap: CDE Hebb only: keys from x' and values from x (default False; see `FastWeightField`).
        head_dim: d_k = d_v per head (default None: d_model // n_heads; see `FastWeightField`).
        forget_gate: a forget gate on W, dW/ds = rate − σ(γ) W (default False; see `FastWeightField`).
        chrono_t_max: chrono initialisation of the learning-rate (and forget) gate biases for dependencies of up to
            this many time units (default None: PyTorch's initialisation; see `FastWeightField`).
        basis: None (default) or a basis (name or `neuralde_seq.basis.Basis`) in which the slow net's weights
            change with time (paper 004; see `FastWeightField`).
        num_bases: the number of basis functions when ``basis`` is a name.
        basis_time_range: (t_start, t_end) mapped onto the basis's [0, 1] (`create_model` takes it from the
            training input).
    """

    def __init__(
        self,
        in_channels: int,
        d_model: int = 64,
        n_heads: int = 8,
        rule="delta",
        form: str = "cde",
        *,
        d_ff: int | None = None,
        dropout: float = 0.0,
        initial_state: str = "rank_one",
        static_channels: int | None = None,
        dx_only: bool = False,
        hebb_swap: bool = False,
        head_dim: int | None = None,
        forget_gate: bool = False,
        chrono_t_max: float | None = None,
        basis=None,
        num_bases: int | None = None,
        basis_time_range: tuple[float, float] | None = None,
    ):
        super().__init__()
        if initial_state not in INITIAL_STATES:
            raise ValueError(f"initial_state must be one of {INITIAL_STATES}, got {initial_state!r}")
        if (initial_state == "static") != (static_channels is not None):
            raise ValueError("initial_state='static' and static_channels go together: give both or neither")
        self.field = FastWeightField(
            in_channels,
            d_model,
            n_heads,
            rule,
            form=form,
            dx_only=dx_only,
            hebb_swap=hebb_swap,
            head_dim=head_dim,
            forget_gate=forget_gate,
            chrono_t_max=chrono_t_max,
            basis=basis,
            num_bases=num_bases,
            basis_time_range=basis_time_range,
        )
        H, d = self.field.n_heads, self.field.head_dim
        self.initial_state = initial_state
        if initial_state == "static":
            assert static_channels is not None  # given together (checked above)
            self.static_slow = nn.Sequential(
                nn.Linear(static_channels, d_model), nn.LayerNorm(d_model), nn.Linear(d_model, H * (2 * d + 1))
            )
        self.out_proj = nn.Linear(H * d, d_model)
        self.dropout = nn.Dropout(dropout)
        self.feed_forward = FeedForward(d_model, d_ff or 4 * d_model, dropout)
        self.d_model = d_model

    @property
    def state_shape(self) -> tuple[int, int, int]:
        return (self.field.n_heads, self.field.head_dim, self.field.head_dim)

    def initial(self, x, dx, static: torch.Tensor | None, s: torch.Tensor | None = None) -> torch.Tensor:
        """W(t0), following ``initial_state``.

        Arguments:
            x: (B, C) the control's value at the first knot, or None where the field does not read it.
            dx: (B, C) the control's derivative at the first knot, or None where the field does not read it.
            static: (B, S) static features (needed for ``initial_state="static"``), or None.
            s: (B,) the first knot's time, for a field with a basis (``needs_time``); None otherwise.

        Returns:
            W(t0) of shape (B, H, d_head, d_head).

        Raises:
            ValueError: ``initial_state="static"`` without static features.
        """
        if self.initial_state == "zeros":
            reference = x if x is not None else dx
            return reference.new_zeros(reference.shape[0], *self.state_shape)
        if self.initial_state == "rank_one":
            return self.field.initial_write(x, dx, s)
        if static is None:
            raise ValueError("this model was built with initial_state='static': pass static features, shape (B, S)")
        H, d = self.field.n_heads, self.field.head_dim
        k_raw, v_raw, beta = self.static_slow(static).view(-1, H, 2 * d + 1).split((d, d, 1), dim=-1)
        return self.field.rule.rate(None, k_raw, v_raw, beta)

    def readout(self, W: torch.Tensor, x, dx) -> torch.Tensor:
        """The layer's output from fast weights W and the layer's input at the same time.

        Arguments:
            W: (B, H, d_head, d_head) fast weights.
            x: (B, in_channels) the layer's input value, or None where the field does not read it.
            dx: (B, in_channels) its derivative, or None where the field does not read it.

        Returns:
            (B, d_model) output.
        """
        y = self.field.read(W, self.field.query(x, dx))
        return self.feed_forward(self.dropout(self.out_proj(y)))


class _CoupledDynamics(nn.Module):
    """dW(·, l)/ds for all layers at once; state (B, L, H, d, d). Layer l+1's input is layer l's output."""

    def __init__(self, layers: nn.ModuleList):
        super().__init__()
        self.layers = layers
        first = cast(FastWeightLayer, layers[0]).field
        self.needs_value = first.needs_value
        self.needs_derivative = first.needs_derivative
        self.needs_time = first.needs_time  # every layer has the same basis options
        # What the closed form (method "exact", or "auto" where it applies) solves: one layer's field. Deeper
        # layers read the previous layer's output, which moves inside every window, so they have no closed-form
        # step (neuralde_seq.solvers.exact_fast_weights).
        self.exact_field = first if len(layers) == 1 else None

    def control_features(self, x, dx, s=None):
        """Layer 1's projections of the input (what fixed-step solvers compute for many stages at once), and
        the input itself (and s), which deeper layers read."""
        return (x, dx, s, *self.layers[0].field.control_features(x, dx, s))

    def rate_from_features(self, state, x, dx, s, *first_features):
        return self._rates(state, x, dx, s, first_features)

    def forward(self, state, x, dx, s=None):
        return self._rates(state, x, dx, s, self.layers[0].field.control_features(x, dx, s))

    def _rates(self, state, x, dx, s, first_features):
        rates = []
        for l, layer in enumerate(self.layers):
            W = state[:, l]
            if l == 0:
                rates.append(layer.field.rate_from_features(W, *first_features))
            else:
                rates.append(layer.field(W, x, dx, s))
            if l + 1 < len(self.layers):
                # The readout inside the vector field runs without dropout (a random field is no ODE).
                x, dx = layer.feed_forward(layer.out_proj(layer.field.read(W, layer.field.query(x, dx)))), None
        return torch.stack(rates, dim=1)


class FastWeightNetwork(nn.Module):
    """A stack of ``num_layers`` fast weight layers solved as one coupled ODE (Eq. 33-35).

    Arguments:
        in_channels: channels of the control.
        num_layers: L >= 1.
        solver: `SolverOptions` or a method object (default: `Auto`, checkpointed gradients): the closed-form
            steps of docs/equations.md#closed-forms-on-constant-inputs (`neuralde_seq.solvers.exact_fast_weights`)
            where they apply (one layer, on log-signature controls, or on piecewise-linear controls with
            ``dx_only=True``), else rk4 with one step per knot interval. ``RK4()`` forces rk4; ``Exact()`` forces
            the closed form (deeper models are refused here). `resolve_method` says which a control gets.
        **layer_options: arguments of `FastWeightLayer` (d_model, n_heads, rule, form, ...); layers
            after the first take the previous layer's output in "ode" form.
    """

    def __init__(
        self, in_channels: int, num_layers: int = 1, solver: SolverOptions | Method | None = None, **layer_options
    ):
        super().__init__()
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
        layers = [FastWeightLayer(in_channels, **layer_options)]
        deeper = dict(layer_options, form="ode", dx_only=False, hebb_swap=False)
        for _ in range(num_layers - 1):
            layers.append(FastWeightLayer(layers[-1].d_model, **deeper))
        shapes = {layer.state_shape for layer in layers}
        if len(shapes) != 1:
            raise ValueError("all layers must have the same fast weight shape")
        self.layers = nn.ModuleList(layers)
        self.dynamics = _CoupledDynamics(self.layers)
        self.solver = solver_options(solver)
        # a forced closed form: deeper models etc. refused here already
        self.solver.method.check_dynamics(self.dynamics)
        self.form = layers[0].field.form
        self.d_model = layers[-1].d_model

    @property
    def first_layer(self) -> FastWeightLayer:
        """The first layer, which reads the control (nn.ModuleList types its items as any Module)."""
        return cast(FastWeightLayer, self.layers[0])

    def resolve_method(self, control: Control) -> Method:
        """The solver method `forward` uses on ``control``: `Exact` or `RK4` (its ``exact`` or ``fallback``) for
        the default `Auto` (`neuralde_seq.solvers.resolve_method`), the given method otherwise.

        Arguments:
            control: an input this network reads, batch size B.

        Returns:
            The method object, e.g. ``Exact()`` for a one-layer RDE-form network on log-signature windows.
        """
        self._check(control)
        return resolve_method(self.solver, self.dynamics, control)

    def _check(self, control: Control, model: nn.Module | None = None):
        """Raise unless ``control`` is a Control this network reads; messages name ``model`` (default this
        network), the module the caller holds."""
        model = self if model is None else model
        check_input_type(model, control, Control)
        first = self.first_layer.field
        if control.channels != first.in_channels:
            raise ValueError(f"control has {control.channels} channels but the model expects {first.in_channels}")
        if (self.form == "rde") != control.piecewise_constant:
            raise ValueError(
                f"form {self.form!r} needs "
                + (
                    "a log-signature control (interpolation='logsignature')"
                    if self.form == "rde"
                    else "an interpolated control, not log-signature windows"
                )
            )
        check_input_matches(model, control)

    def _initial(self, x, dx, static, s):
        states = []
        for l, layer in enumerate(self.layers):
            states.append(layer.initial(x, dx, static, s))
            if l + 1 < len(self.layers):
                x, dx = layer.readout(states[-1], x, dx), None
        return torch.stack(states, dim=1)

    def _readout(self, state, x, dx):
        for l, layer in enumerate(self.layers):
            x, dx = layer.readout(state[:, l], x, dx), None
        return x

    def forward(self, control: Control, static: torch.Tensor | None = None, at_knots: bool = False) -> torch.Tensor:
        """Outputs of the last layer.

        Arguments:
            control: the input path, batch size B, ``channels == in_channels``.
            static: (B, S) static features, for initial_state="static".
            at_knots: False gives each sample's output at its own final time, (B, d_model); True gives the
                outputs at every knot of the control, (B, K, d_model).

        Returns:
            (B, d_model), or (B, K, d_model) with ``at_knots``.

        Raises:
            TypeError: ``control`` is not a `Control`, or its dtype or device differs from the model's.
            ValueError: wrong channels, or a control of the wrong kind for the form (log-signature windows
                for "rde", an interpolated control otherwise).
        """
        self._check(control)
        needs_x, needs_dx = self.dynamics.needs_value, self.dynamics.needs_derivative
        s0 = control.knots[0]
        x0 = control.evaluate(s0) if needs_x else None
        dx0 = control.derivative(s0) if needs_dx else None
        timed = s0.to(control.coeffs.dtype).expand(control.batch_size) if self.dynamics.needs_time else None
        initial = self._initial(x0, dx0, static, timed)
        if not at_knots:
            final = solve(self.dynamics, control, initial, self.solver)
            x = control.final_value() if needs_x else None
            dx = control.final_derivative() if needs_dx else None
            return self._readout(final, x, dx)
        states = solve(self.dynamics, control, initial, self.solver, at_knots=True)  # (B, K, L, H, d, d)
        outputs = []
        for i in range(states.shape[1]):
            # The input at a knot is taken from the interval that ends there (causal), the first from the right.
            side = "right" if i == 0 else "left"
            s = control.knots[i].expand(control.batch_size)
            s = torch.minimum(s, control.end)  # after its end a sample's input stays at its final value
            x = control.evaluate(s, side=side) if needs_x else None
            dx = control.derivative(s, side=side) if needs_dx else None
            outputs.append(self._readout(states[:, i], x, dx))
        return torch.stack(outputs, dim=1)


class FastWeightClassifier(nn.Module):
    """A fast weight network followed by a linear classifier on each sample's final output.

    Arguments:
        in_channels: channels of the control.
        num_classes: number of classes (logits out).
        num_layers: number L >= 1 of fast weight layers, solved as one coupled ODE (default 1; see
            `FastWeightNetwork`).
        solver: `SolverOptions` or a method object (default None: `Auto`, the closed form where it applies, else
            rk4 with one step per knot; checkpointed gradients; see `FastWeightNetwork`).
        output_norm: a LayerNorm on the network's final output before the linear classifier: True, False (the
            papers' plain linear head), or None (default): True for Hebb's rule, whose fast weights (and logits)
            grow with the series' length, False for the others, whose fast weights stay bounded.
        **layer_options: arguments of `FastWeightLayer` (d_model, n_heads, rule, form, ...).

    ``forward(control, static=None)`` returns logits of shape (B, num_classes).
    """

    forwards_options_to = FastWeightLayer  # where **layer_options go (read by models.model_defaults)

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        num_layers: int = 1,
        solver: SolverOptions | Method | None = None,
        output_norm: bool | None = None,
        **layer_options,
    ):
        super().__init__()
        check_num_outputs(num_classes)
        if output_norm is not None and not isinstance(output_norm, bool):
            raise TypeError(f"output_norm must be True, False or None, got {output_norm!r}")
        self.network = FastWeightNetwork(in_channels, num_layers, solver, **layer_options)
        if output_norm is None:
            # Hebb's W is a sum over the whole series and grows like its length (logits in the tens at
            # initialisation on a 2,000-point series); Oja's and the Delta rules' stay bounded, and a final LayerNorm
            # slowed the Delta-CDE's learning of an early event at length 1,000 (tests/test_long_sequences.py).
            output_norm = not self.network.first_layer.field.rule.bounded
        self.output_norm = nn.LayerNorm(self.network.d_model) if output_norm else nn.Identity()
        self.head = nn.Linear(self.network.d_model, num_classes)

    def forward(self, control: Control, static: torch.Tensor | None = None) -> torch.Tensor:
        """Logits from each sample's final output.

        Arguments:
            control: the input path, batch size B, ``channels == in_channels``.
            static: (B, S) static features, for ``initial_state="static"``; None (default) otherwise.

        Returns:
            (B, num_classes) logits.
        """
        self.network._check(control, self)  # errors name this class, not the network inside it
        return self.head(self.output_norm(self.network(control, static)))

    def resolve_method(self, control: Control) -> Method:
        """The solver method `forward` uses on ``control`` (see `FastWeightNetwork.resolve_method`).

        Arguments:
            control: an input this classifier reads, batch size B.

        Returns:
            The method object (``Exact()`` or ``RK4()`` under the default `Auto`).
        """
        self.network._check(control, self)
        return resolve_method(self.network.solver, self.network.dynamics, control)
