"""`LearningRule`, the base class every rule derives from (it assembles the rate, the discrete step and the exact
step from the parts a rule declares), and the capabilities a rule may declare (`CAPABILITIES`).
"""

from __future__ import annotations

import torch

from .rank_one import RankOneRate, RankOneUpdate

__all__ = ["LearningRule", "CAPABILITIES", "AFFINE_RATE", "AFFINE_STEP", "AFFINE_STEP_FORGET", "STEPWISE_STEP"]

# Capabilities a rule may declare (`LearningRule.capabilities`): what the solvers ask a rule before taking a fast path.
AFFINE_RATE = "affine_rate"  # `affine_rate` gives the rate as a `RankOneRate` (composed rk4 steps)
AFFINE_STEP = "affine_step"  # `affine_step` gives the exact step as a `RankOneUpdate`, no forget gate
AFFINE_STEP_FORGET = "affine_step_forget"  # ... and with a forget gate too
STEPWISE_STEP = "stepwise_step"  # `exact_step_inputs` + `exact_step_from_inputs`: a nonlinear exact step
CAPABILITIES = (AFFINE_RATE, AFFINE_STEP, AFFINE_STEP_FORGET, STEPWISE_STEP)
# The capabilities of a rule whose rate and exact step are affine in W (Hebb, Oja, pre-Delta).
_AFFINE = frozenset({AFFINE_RATE, AFFINE_STEP, AFFINE_STEP_FORGET})


class LearningRule:
    """Base class: a rule declares its parts and the base class assembles the rate, dW/ds = c · e(M) · aᵀ.

    Every rule here has that form, with M = W (or M = Wᵀ when ``transposed``), c = σ(β) the learning rate, a the
    direction read and written along (the key, or the value when ``direction == "v"``) and e(M) the vector
    written (`error`). A subclass declares:

    - the activations: `rate_key` (default: `activate_key`, softmax), `rate_value` (default tanh),
      `learning_rate` (default σ);
    - `error(M, k, v)`: the written vector e, reading M only if ``uses_state``;
    - ``direction`` ("k" or "v"), ``transposed``, ``uses_state``;
    - for the models: ``cde_sources`` (which CDE input feeds the key and which the value), ``swappable_cde_sources``
      (``hebb_swap`` allowed), ``bounded`` (False: the models' read-out gets a LayerNorm by default), ``title``;
    - optional capabilities (``capabilities``, from `CAPABILITIES`) with their methods: `affine_rate`,
      `affine_step`, `exact_step_inputs` / `exact_step_from_inputs`. The solvers ask for these, never for a name.

    `rate`, `rate_features` / `rate_from_features`, `exact_step` and `discrete_step` are written here once.
    A new rule is a subclass plus `register_rule` (docs/design.md#adding-a-learning-rule).

    Attributes:
        name: short name used in configurations (``"hebb"``, ``"oja"``, ``"delta"``, ``"delta-post"``).
        title: how messages and model descriptions name the rule ("Hebb", "post-Delta", ...).
        uses_state: whether ``dW/ds`` depends on ``W`` (False only for Hebb).
        transposed: the rule acts on M = Wᵀ (Oja), e and a then of widths d_k and d_v.
        direction: "k" (a = k) or "v" (a = v).
        cde_sources: (key source, value source) of the "cde" form, each "x" or "dx" (`FastWeightField`).
        swappable_cde_sources: whether ``hebb_swap=True`` may exchange them (Hebb, paper Eq. 36-37).
        bounded: whether the fast weights stay bounded over a long series (Hebb's grow with its length).
        capabilities: a frozenset of `CAPABILITIES`.
    """

    name: str = ""
    title: str = ""
    uses_state: bool = True
    transposed: bool = False
    direction: str = "k"
    cde_sources: tuple[str, str] = ("x", "dx")
    swappable_cde_sources: bool = False
    bounded: bool = True
    capabilities: frozenset = frozenset()

    def activate_key(self, k_raw: torch.Tensor) -> torch.Tensor:
        """Keys (and queries) live on the simplex: softmax over the last dimension (paper App. A, Eq. 29).

        Written out (exp of the max-shifted input, over its sum) because torch.softmax over a short last
        dimension (a head's 8-32 entries) is several times slower on CPU; the shift is detached, which leaves
        value and gradient unchanged (softmax is shift-invariant).

        Arguments:
            k_raw: (..., d) key or query pre-activations.

        Returns:
            (..., d) softmax(k_raw), each row summing to 1.
        """
        exp = torch.exp(k_raw - k_raw.detach().amax(dim=-1, keepdim=True))
        return exp / exp.sum(dim=-1, keepdim=True)

    # -- the parts a rule declares -------------------------------------------------------------------
    def rate_key(self, k_raw: torch.Tensor) -> torch.Tensor:
        """The key the rate reads, from its pre-activation (default `activate_key`; queries always use that).

        Arguments:
            k_raw: (..., d_k) key pre-activations.

        Returns:
            (..., d_k) keys.
        """
        return self.activate_key(k_raw)

    def rate_value(self, v_raw: torch.Tensor) -> torch.Tensor:
        """The value the rate reads, from its pre-activation (default tanh).

        Arguments:
            v_raw: (..., d_v) value pre-activations.

        Returns:
            (..., d_v) values.
        """
        return torch.tanh(v_raw)

    def learning_rate(self, beta: torch.Tensor) -> torch.Tensor:
        """c, the learning rate, from its pre-activation (default σ(β)).

        Arguments:
            beta: (..., 1) learning-rate pre-activations.

        Returns:
            (..., 1) learning rates.
        """
        return torch.sigmoid(beta)

    def error(self, M: torch.Tensor | None, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """e(M), the vector written along a: dM/ds = c · e(M) · aᵀ. Subclasses declare it.

        Arguments:
            M: (..., d_e, d_a) the fast weights W, or Wᵀ when ``transposed``; None for W = 0 (and always None
                when the rule does not read its state, ``uses_state`` False).
            k: (..., d_k) keys from `rate_key`.
            v: (..., d_v) values from `rate_value`.

        Returns:
            (..., d_e) the written vector: d_v wide, or d_k wide when ``transposed``.
        """
        raise NotImplementedError(
            f"{type(self).__name__} declares no error(M, k, v): a LearningRule subclass "
            "declares the vector it writes (or overrides rate)"
        )

    @staticmethod
    def recall(M: torch.Tensor | None, a: torch.Tensor):
        """M a, what M recalls along a (0 for M = None), for `error`.

        Arguments:
            M: (..., d_e, d_a) fast weights (or their transpose), or None for 0.
            a: (..., d_a) the direction.

        Returns:
            (..., d_e) M a, or the number 0.0.
        """
        return 0.0 if M is None else (M @ a.unsqueeze(-1)).squeeze(-1)

    # Whether the class declares `error` (set for every subclass): a rule written the old way, as `rate` alone,
    # keeps working, its features then its raw inputs.
    _declares_error: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._declares_error = cls.error is not LearningRule.error

    # -- the rate, assembled once ----------------------------------------------------------------------
    def rate(
        self, W: torch.Tensor | None, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor
    ) -> torch.Tensor:
        """The rate of change of the fast weights, c · e(M) · aᵀ (transposed back for a rule on Wᵀ).

        Arguments:
            W: fast weights, shape (..., d_v, d_k), or None for W = 0 (used for the rank-one initial write).
            k_raw: key pre-activations, shape (..., d_k).
            v_raw: value pre-activations, shape (..., d_v).
            beta: learning-rate pre-activations, shape (..., 1).

        Returns:
            dW/ds of shape (..., d_v, d_k).
        """
        if not self._declares_error:
            raise NotImplementedError(
                f"{type(self).__name__} declares no error(M, k, v): a LearningRule subclass "
                "declares the vector it writes (or overrides rate)"
            )
        return self.rate_from_features(W, *self.rate_features(k_raw, v_raw, beta))

    # The rate in two parts, ``rate(W, k_raw, v_raw, beta) == rate_from_features(W, *rate_features(k_raw, v_raw,
    # beta))``: the activations, which depend on the input only (fixed-step solvers compute them for every
    # stage of many steps at once, see FastWeightField.control_features), and the part that reads W, which
    # runs step by step. c multiplies the input-only factor where it can (once for all steps); the order of the
    # products is the one the rules had when each was written out (bitwise-equal results).
    def rate_features(self, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor) -> tuple:
        """The input-only part of `rate`, for any number of points.

        Arguments:
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.

        Returns:
            A tuple of tensors for `rate_from_features`: ``(a, c·e)`` when the rule does not read W;
            ``(k, v, c·a)`` for a rule on Wᵀ; ``(k, v, c)`` otherwise (the inputs unchanged for a rule that
            overrides `rate` without declaring `error`).
        """
        if not self._declares_error:
            return k_raw, v_raw, beta
        k, v, c = self.rate_key(k_raw), self.rate_value(v_raw), self.learning_rate(beta)
        a = v if self.direction == "v" else k
        if not self.uses_state:
            return a, c * self.error(None, k, v)
        if self.transposed:
            return k, v, c * a
        return k, v, c

    def rate_from_features(self, W: torch.Tensor | None, *features: torch.Tensor) -> torch.Tensor:
        """dW/ds from W and the features of `rate_features`.

        Arguments:
            W: (..., d_v, d_k) fast weights, or None for W = 0.
            *features: the tensors `rate_features` returned.

        Returns:
            dW/ds of shape (..., d_v, d_k).
        """
        if not self._declares_error:
            return self.rate(W, *features)
        if not self.uses_state:
            a, written = features
            return (
                a.unsqueeze(-1) * written.unsqueeze(-2) if self.transposed else written.unsqueeze(-1) * a.unsqueeze(-2)
            )
        k, v, scale = features
        if self.transposed:  # dWᵀ/ds = c e aᵀ, so dW/ds = (c a) eᵀ
            return scale.unsqueeze(-1) * self.error(None if W is None else W.transpose(-1, -2), k, v).unsqueeze(-2)
        a = v if self.direction == "v" else k
        return (scale * self.error(W, k, v)).unsqueeze(-1) * a.unsqueeze(-2)

    # -- optional capabilities: closed forms on constant inputs ----------------------------------------
    @property
    def has_affine_rate(self) -> bool:
        """Whether `affine_rate` describes the rate (the capability ``"affine_rate"``)."""
        return AFFINE_RATE in self.capabilities

    def exact_step_kind(self, forget_gate: bool = False) -> str | None:
        """How the rule takes an exact step on constant inputs, from its ``capabilities``.

        Arguments:
            forget_gate: whether the field adds a forget gate, dW/ds = rate − λ W.

        Returns:
            "affine" (`affine_step`: the steps compose as affine maps), "stepwise" (`exact_step_inputs`,
            `exact_step_from_inputs`: a nonlinear step, one after the other), or None (no closed form).
        """
        if (AFFINE_STEP_FORGET if forget_gate else AFFINE_STEP) in self.capabilities:
            return "affine"
        if STEPWISE_STEP in self.capabilities and not forget_gate:
            return "stepwise"
        return None

    @property
    def has_exact_step(self) -> bool:
        """Whether the rule has a closed-form step without a forget gate (`exact_step_kind`)."""
        return self.exact_step_kind(False) is not None

    def exact_step_refusal(self, forget_gate: bool = False) -> str:
        """Why there is no exact step (a sentence for the error), for rules where `exact_step_kind` is None.

        Arguments:
            forget_gate: whether the field has a forget gate.

        Returns:
            The sentence.
        """
        return (
            f"{self!r} has no closed-form step"
            + (" with a forget gate" if forget_gate else "")
            + ": it declares none of the capabilities 'affine_step'"
            + ("_forget" if forget_gate else "")
            + (" or 'stepwise_step'" if not forget_gate else "")
        )

    def affine_step(
        self, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor, h, forget: torch.Tensor | None = None
    ) -> RankOneUpdate | None:
        """The exact step over a time h with constant inputs as an affine map of W (capability ``"affine_step"``,
        with ``forget`` ``"affine_step_forget"``).

        Arguments:
            k_raw: (..., d_k) key pre-activations, constant over the step.
            v_raw: (..., d_v) value pre-activations, constant over the step.
            beta: (..., 1) learning-rate pre-activations, constant over the step.
            h: step length, a number or a tensor broadcasting with ``beta`` (..., 1).
            forget: (..., 1) the forget rate λ >= 0 of dW/ds = rate − λ W (docs/equations.md#forget-gate), or
                None (default): no forget gate.

        Returns:
            The step as a `RankOneUpdate`, or None if it is not affine in W (post-Delta; the default).
        """
        return None

    def affine_rate(
        self, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor, forget: torch.Tensor | None = None
    ) -> RankOneRate | None:
        """The rate (with a forget gate: minus λ W) as an affine map of W (capability ``"affine_rate"``).

        Arguments:
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.
            forget: (..., 1) the forget rate λ >= 0, or None (default): no forget gate.

        Returns:
            A `RankOneRate` with ``apply(W) == rate(W, k_raw, v_raw, beta) − λ W``, or None if the rate is not
            affine in W (post-Delta; the default).
        """
        return None

    # A nonlinear exact step in two parts, as the rate (capability "stepwise_step"): what depends on the inputs
    # only, computed for a whole sequence at once, and the step from W, a function of tensors only (the exact
    # solver may torch.compile it; SolverOptions(compile=True)).
    def exact_step_inputs(self, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor, h) -> tuple:
        """The input-only part of a nonlinear exact step (capability ``"stepwise_step"``).

        Arguments:
            k_raw: (..., d_k) key pre-activations, constant over the step.
            v_raw: (..., d_v) value pre-activations, constant over the step.
            beta: (..., 1) learning-rate pre-activations, constant over the step.
            h: step length, a number or a tensor broadcasting with ``beta`` (..., 1).

        Returns:
            A tuple of tensors with the leading shape of the inputs, for `exact_step_from_inputs`.
        """
        raise NotImplementedError(self.exact_step_refusal(False))

    def exact_step_from_inputs(self, W: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
        """The nonlinear exact step from W and the tensors of `exact_step_inputs`.

        Arguments:
            W: (..., d_v, d_k) fast weights at the start of the step.
            *inputs: the tensors `exact_step_inputs` returned.

        Returns:
            W after the step, shape (..., d_v, d_k).
        """
        raise NotImplementedError(self.exact_step_refusal(False))

    def exact_step(
        self,
        W: torch.Tensor,
        k_raw: torch.Tensor,
        v_raw: torch.Tensor,
        beta: torch.Tensor,
        h,
        forget: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """W(t + h) for inputs constant over [t, t + h]: the exact solution of dW/ds = rate (− λ W with a forget
        gate; docs/equations.md#closed-forms-on-constant-inputs), by the capability the rule declares.

        Arguments:
            W: (..., d_v, d_k) fast weights at t.
            k_raw: (..., d_k) key pre-activations, as in `rate`.
            v_raw: (..., d_v) value pre-activations, as in `rate`.
            beta: (..., 1) learning-rate pre-activations, as in `rate`.
            h: step length, a number or a tensor broadcasting with ``beta`` (..., 1); h = 0 leaves W unchanged.
            forget: (..., 1) the forget rate λ >= 0, or None (default): no forget gate.

        Returns:
            W(t + h), shape (..., d_v, d_k).

        Raises:
            NotImplementedError: the rule has no exact step (`exact_step_kind` is None), e.g. post-Delta with a
                forget gate.
        """
        kind = self.exact_step_kind(forget is not None)
        if kind == "affine":
            update = self.affine_step(k_raw, v_raw, beta, h, forget)
            assert update is not None  # an affine exact_step_kind is one with an affine step
            return update.apply(W)
        if kind == "stepwise":
            return self.exact_step_from_inputs(W, *self.exact_step_inputs(k_raw, v_raw, beta, h))
        raise NotImplementedError(self.exact_step_refusal(forget is not None))

    def discrete_step(
        self, W: torch.Tensor | None, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor
    ) -> torch.Tensor:
        """One discrete update of a recurrent fast weight programmer, ``W + rate(W, k_raw, v_raw, beta)``
        (paper 002 Eq. 27; for pre-Delta the DeltaNet step W + σ(β)(v − W k)kᵀ).

        Arguments:
            W: (..., d_v, d_k) fast weights, or None for W = 0.
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.

        Returns:
            The new W, shape (..., d_v, d_k).
        """
        update = self.rate(W, k_raw, v_raw, beta)
        return update if W is None else W + update

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
