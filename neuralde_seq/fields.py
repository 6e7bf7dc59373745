"""Vector fields: learning rules in direct neural ODE, neural CDE and log-signature RDE form.

A `FastWeightField` is the *slow net* of a continuous-time fast weight programmer: from the
control's value x(s) and derivative x'(s) it generates, per head, a key, a value and a learning rate, and
hands them with the current fast weights W(s) to a `LearningRule`, which
returns dW/ds. Which input feeds the keys and which the values is what distinguishes the forms
(docs/equations.md#equations-in-one-convention, paper Eq. 18-25, 36-38):

| form | key, β, query | value | paper |
| --- | --- | --- | --- |
| "ode" | x | x | Eq. 18-21, 32 |
| "cde" | x | x' | Eq. 23-25, Hebb and Oja |
| "cde" | x' | x | Eq. 23-25, Delta (pre and post) |
| "cde", swap (``hebb_swap=True``) | x' | x | Eq. 36-37 (Hebb only) |
| "cde", x' (``dx_only=True``) | x' | x' | Eq. 38 |
| "rde" | logsig window | logsig window | Sec. 4, EigenWorms: the "ode" field on a piecewise-constant logsig control |

In the "rde" form x is the control's whole constant input on a window: its log-signature, and, for a control
built with ``window_start_values=True``, the path's value at the window's start (without it the field never
sees the path's level; docs/design.md#choices).

Projections (as the public code, ``slow(LN(Linear(x)))``): the key source goes through an input
projection and LayerNorm, then one linear map gives every head's key pre-activation and learning-rate
pre-activation (and the value pre-activation too when the value has the same source). A value from the
*other* source is a linear map of the raw input; when that source is x' the map has no bias, as in the
paper's W_v x' (Eq. 24), so that a flat control writes nothing for Hebb and Oja. The query at the final
time comes from the key source through the same input projection and LayerNorm.

All heads are evaluated together in batched tensor operations (no loop over heads).
"""

from __future__ import annotations

import torch
from torch import nn

from .basis import BasisLinear, check_time_range, time_position
from .gates import check_t_max, chrono_bias
from .rules import LearningRule, make_rule

__all__ = ["FastWeightField", "FORMS"]

FORMS = ("ode", "cde", "rde")


class FastWeightField(nn.Module):
    """The slow net and learning rule of one fast weight layer: (W, x, x') ↦ dW/ds.

    Arguments:
        in_channels: C, channels of the control.
        d_model: width of the input projection; also the total fast weight width H·d_head by default.
        n_heads: H, number of heads (independent fast weight matrices).
        rule: a `LearningRule` or its name ("hebb", "oja", "delta", "delta-post", or one added by
            `neuralde_seq.rules.register_rule`).
        form: "ode", "cde" or "rde" (see the module docstring).
        dx_only: CDE form with keys and values both from x' (Eq. 38).
        hebb_swap: CDE Hebb with keys from x' and values from x (Eq. 36-37).
        head_dim: d_k = d_v per head (default d_model // n_heads).
        forget_gate: add a forget gate, dW/ds = rate − λ W with λ = σ(γ) per head and γ from the slow net like
            β (docs/equations.md#forget-gate); default False.
        chrono_t_max: None (default): PyTorch's initialisation; a number > 2: chrono initialisation of the gate
            biases, b = −log u, u ~ U(1, chrono_t_max − 1), for the learning rate β (and the forget gate γ), so
            that σ(b) lies in [1/chrono_t_max, 1/2]: write and forgetting times of 2 to chrono_t_max time units
            (`neuralde_seq.models.chrono_bias`; docs/equations.md#forget-gate).
        basis: None (default): the slow net's weights are constant; a `neuralde_seq.basis.Basis` or one of
            `neuralde_seq.basis.BASIS_NAMES` (with ``num_bases``): the map from features to keys, values and
            learning rates is a `BasisLinear` whose weights change with s (paper 004's basis expansion in
            time, docs/stateful_odenets.md), compressible or refinable afterwards by
            `neuralde_seq.basis.project_module`. Not solvable by method="exact".
        num_bases: the number of basis functions when ``basis`` is a name.
        basis_time_range: (t_start, t_end), the span of s mapped onto the basis's [0, 1], u = (s − t_start) /
            (t_end − t_start); required with ``basis`` (`neuralde_seq.models.create_model` takes it from the
            training input). Beyond it the weights at its ends hold (a longer test series than any training
            series reads the weights of t_end), and a `neuralde_seq.basis.BasisRangeWarning` says so.

    Shapes: ``W`` is (B, H, d_head, d_head) (value × key); ``x`` and ``dx`` are (B, C).
    """

    def __init__(
        self,
        in_channels: int,
        d_model: int,
        n_heads: int,
        rule: str | LearningRule = "delta",
        *,
        form: str = "cde",
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
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        for name, value in (("in_channels", in_channels), ("d_model", d_model), ("n_heads", n_heads)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if head_dim is None:
            if d_model % n_heads:
                raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}; pass head_dim")
            head_dim = d_model // n_heads
        self.rule = make_rule(rule)
        if form != "cde" and (dx_only or hebb_swap):
            raise ValueError("dx_only and hebb_swap are options of the 'cde' form")
        if dx_only and hebb_swap:
            raise ValueError("dx_only and hebb_swap exclude each other")
        if hebb_swap and not self.rule.swappable_cde_sources:
            raise ValueError(
                f"hebb_swap applies to the Hebb rule only (rules with swappable_cde_sources), got rule "
                f"{self.rule.name or self.rule!r}"
            )
        self.form = form
        self.in_channels, self.d_model, self.n_heads, self.head_dim = in_channels, d_model, n_heads, head_dim
        if form in ("ode", "rde"):
            key_source = value_source = "x"
        elif dx_only:
            key_source = value_source = "dx"
        else:  # the rule says which CDE input feeds its keys (Delta: x') and which its values
            key_source, value_source = self.rule.cde_sources
            if not {key_source, value_source} <= {"x", "dx"}:
                raise ValueError(
                    f"{self.rule!r}.cde_sources must be a (key, value) pair of 'x' and 'dx', got "
                    f"{self.rule.cde_sources!r}"
                )
            if hebb_swap:
                key_source, value_source = value_source, key_source
        self.key_source, self.value_source = key_source, value_source
        self.needs_value = "x" in (key_source, value_source)
        self.needs_derivative = "dx" in (key_source, value_source)

        if not isinstance(forget_gate, bool):
            raise TypeError(f"forget_gate must be True or False, got {forget_gate!r}")
        if chrono_t_max is not None:
            check_t_max("chrono_t_max", chrono_t_max)
        self.forget_gate, self.chrono_t_max = forget_gate, chrono_t_max

        H, d = n_heads, head_dim
        self.input_proj = nn.Linear(in_channels, d_model)
        self.input_norm = nn.LayerNorm(d_model)
        shared_value = value_source == key_source
        # One map for all heads: per head [key (d), value (d) if shared, beta (1), forget (1) if gated].
        self._slow_split: tuple[int, ...] = (d, d, 1) if shared_value else (d, 1)
        if forget_gate:
            self._slow_split += (1,)
        self.basis_time_range = check_time_range(basis, num_bases, basis_time_range)
        self.slow: nn.Linear | BasisLinear
        if basis is None:
            self.slow = nn.Linear(d_model, H * sum(self._slow_split))
        else:
            self.slow = BasisLinear(d_model, H * sum(self._slow_split), basis, num_bases)
        self.value_proj = None if shared_value else nn.Linear(in_channels, H * d, bias=(value_source == "x"))
        self.query_proj = nn.Linear(d_model, H * d)
        if chrono_t_max is not None:  # drawn last: the field's other parameters are initialised as without it
            # beta (and forget) of each head, for every basis function
            assert self.slow.bias is not None  # both kinds of layer are made with a bias
            gates = self.slow.bias.view(-1, H, sum(self._slow_split))[..., (2 * d if shared_value else d) :]
            with torch.no_grad():
                gates.copy_(-chrono_bias(tuple(gates.shape), chrono_t_max, dtype=gates.dtype, device=gates.device))

    @property
    def needs_time(self) -> bool:
        """Whether the field reads s itself (basis-expanded slow weights): solvers then pass it (`Dynamics`)."""
        return self.basis_time_range is not None

    def basis_position(self, s: torch.Tensor) -> torch.Tensor:
        """u = (s − t_start) / (t_end − t_start), the position of s in the basis's [0, 1], held at 0 and 1 beyond
        ``basis_time_range`` (`neuralde_seq.basis.time_position`).

        Arguments:
            s: (N,) times.

        Returns:
            (N,) positions in [0, 1].

        Raises:
            ValueError: the field has no basis.
        """
        if self.basis_time_range is None:
            raise ValueError("this field's slow weights are constant (basis=None): it has no basis position")
        return time_position(s, self.basis_time_range)

    @property
    def has_exact_step(self) -> bool:
        """Whether the field has a closed-form step on constant inputs (post-Delta has none with a forget gate):
        the rule's `neuralde_seq.rules.LearningRule.exact_step_kind` with this field's forget gate."""
        return self.rule.exact_step_kind(self.forget_gate) is not None

    # -- slow net ---------------------------------------------------------------------------------
    def _source(self, which, x, dx):
        return x if which == "x" else dx

    def key_features(self, x: torch.Tensor | None, dx: torch.Tensor | None) -> torch.Tensor:
        """LN(Linear(key source)): what keys, learning rates and queries are made from.

        Arguments:
            x: (B, C) the control's value X(s), or None where the field does not read it.
            dx: (B, C) the control's derivative X'(s), or None where the field does not read it.

        Returns:
            (B, d_model) features.
        """
        return self.input_norm(self.input_proj(self._source(self.key_source, x, dx)))

    def projections(self, x: torch.Tensor | None, dx: torch.Tensor | None, s: torch.Tensor | None = None):
        """Pre-activations of keys, values and learning rates for every head.

        Arguments:
            x: (B, C) the control's value X(s), or None where the field does not read it.
            dx: (B, C) the control's derivative X'(s), or None where the field does not read it.
            s: (B,) the time of each row, read by a field with a basis (``needs_time``); None otherwise.

        Returns:
            (k_raw, v_raw, beta) of shapes (B, H, d_head), (B, H, d_head), (B, H, 1); with a forget gate
            (k_raw, v_raw, beta, forget), forget the rate λ = σ(γ) of shape (B, H, 1).
        """
        H, d = self.n_heads, self.head_dim
        features = self.key_features(x, dx)
        if self.needs_time:
            if s is None:
                raise ValueError("this field's slow weights change with s (basis=...): pass s")
            slow = self.slow(features, self.basis_position(s))
        else:
            slow = self.slow(features)
        parts = list(slow.view(-1, H, sum(self._slow_split)).split(self._slow_split, dim=-1))
        if self.value_proj is not None:
            parts.insert(1, self.value_proj(self._source(self.value_source, x, dx)).view(-1, H, d))
        if self.forget_gate:
            parts[3] = torch.sigmoid(parts[3])
        return tuple(parts)

    def forward(
        self, W: torch.Tensor, x: torch.Tensor | None, dx: torch.Tensor | None, s: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The vector field dW/ds.

        Arguments:
            W: (B, H, d_head, d_head) fast weights.
            x: (B, C) the control's value X(s), or None where the field does not read it.
            dx: (B, C) the control's derivative X'(s), or None where the field does not read it.
            s: (B,) the time of each row, read by a field with a basis (``needs_time``); None otherwise.

        Returns:
            dW/ds of shape (B, H, d_head, d_head).
        """
        return self.rate_from_features(W, *self.control_features(x, dx, s))

    # The slow net and the activations of its outputs read only the input, so fixed-step solvers compute them
    # for many stages at once (`Dynamics`) and only the part of the rule that
    # reads W runs step by step.
    def control_features(self, x: torch.Tensor | None, dx: torch.Tensor | None, s: torch.Tensor | None = None) -> tuple:
        """The rule's `rate_features` of `projections`.

        Arguments:
            x: (N, C) control values (any number N of points), or None where the field does not read them.
            dx: (N, C) control derivatives, or None where the field does not read them.
            s: (N,) the points' times, read by a field with a basis (``needs_time``); None otherwise.

        Returns:
            The rule's feature tensors, each with N leading and a head dimension H, then the forget rate λ
            (N, H, 1) with a forget gate.
        """
        k_raw, v_raw, beta, *forget = self.projections(x, dx, s)
        return tuple(self.rule.rate_features(k_raw, v_raw, beta)) + tuple(forget)

    def rate_from_features(self, W: torch.Tensor, *features: torch.Tensor) -> torch.Tensor:
        """dW/ds from W and the features of `control_features`: the rule's rate, minus λ W with a forget gate.

        Arguments:
            W: (B, H, d_head, d_head) fast weights.
            *features: the tensors `control_features` returned, B leading.

        Returns:
            dW/ds of shape (B, H, d_head, d_head).
        """
        if not self.forget_gate:
            return self.rule.rate_from_features(W, *features)
        *rule_features, forget = features
        return self.rule.rate_from_features(W, *rule_features) - forget.unsqueeze(-1) * W

    def initial_write(
        self, x: torch.Tensor | None, dx: torch.Tensor | None, s: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The rule's write into empty fast weights, used as a rank-one W(t0) (as the public code).

        Arguments:
            x: (B, C) the control's value X(s), or None where the field does not read it.
            dx: (B, C) the control's derivative X'(s), or None where the field does not read it.
            s: (B,) the time of each row, read by a field with a basis (``needs_time``); None otherwise.

        Returns:
            (B, H, d_head, d_head) the rule's rate at W = 0.
        """
        k_raw, v_raw, beta = self.projections(x, dx, s)[:3]  # a forget gate has nothing to forget in W = 0
        return self.rule.rate(None, k_raw, v_raw, beta)

    def query(self, x: torch.Tensor | None, dx: torch.Tensor | None) -> torch.Tensor:
        """Queries softmax(W_q LN(Linear(key source))) (paper Eq. 31).

        Arguments:
            x: (B, C) the control's value X(s), or None where the field does not read it.
            dx: (B, C) the control's derivative X'(s), or None where the field does not read it.

        Returns:
            (B, H, d_head) queries on the simplex.
        """
        q_raw = self.query_proj(self.key_features(x, dx)).view(-1, self.n_heads, self.head_dim)
        return self.rule.activate_key(q_raw)

    @staticmethod
    def read(W: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """y = W q per head, concatenated.

        Arguments:
            W: (B, H, d_v, d_k) fast weights.
            q: (B, H, d_k) queries.

        Returns:
            (B, H·d_v) the heads' outputs, concatenated.
        """
        return (W @ q.unsqueeze(-1)).squeeze(-1).flatten(1)

    def extra_repr(self) -> str:
        """The form, rule, heads and input sources, shown by ``print(module)``."""
        return (
            f"form={self.form!r}, rule={self.rule!r}, heads={self.n_heads}, head_dim={self.head_dim}, "
            f"key_source={self.key_source!r}, value_source={self.value_source!r}"
            + (", forget_gate=True" if self.forget_gate else "")
            + ("" if self.chrono_t_max is None else f", chrono_t_max={self.chrono_t_max}")
        )
