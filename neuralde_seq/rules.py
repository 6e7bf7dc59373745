"""Learning rules: how a fast weight matrix changes, written once for every form.

Convention (docs/equations.md#equations-in-one-convention): per head the fast weight is ``W`` of shape
(d_v, d_k) and is read as ``y = W q``. A rule maps the current fast weights and the slow net's outputs at
one instant to the rate of change ``dW/ds``:

    Hebb         c · v kᵀ
    Oja          c · v (k − Wᵀv)ᵀ
    Delta, pre   c · (v − W k) kᵀ            with v = tanh(v_raw)
    Delta, post  c · tanh(v_raw − W k) kᵀ

where ``k = softmax(k_raw)``, ``v = tanh(v_raw)`` and ``c = σ(β)``. The same rule object is used by the
direct neural ODE, neural CDE and log-signature RDE fields (`neuralde_seq.fields`), so each rule
exists exactly once. A discrete recurrent FWP step is ``W + rate(...)``.

Each has the form dM/ds = c · e(M) · aᵀ with M = W (Wᵀ for Oja): a rule class declares its parts (activations,
the direction a, the written vector e, whether it acts on Wᵀ) and `LearningRule` assembles `rate` from them once.
Closed forms are optional capabilities (``LearningRule.capabilities``) that the solvers ask for, never a rule's
name. Rules are built by name from a registry (`register_rule`, `registered_rule`, `make_rule`), which the model
registry reads for its ``{rule}-{form}`` names.

All tensors carry arbitrary leading batch dimensions ``(...)``; heads are one of them.

Exact steps (docs/equations.md#closed-forms-on-constant-inputs). When k, v and β stay constant for a time h
(a log-signature window, a piece of a rectilinear control), every rule has a closed-form solution,
`LearningRule.exact_step`. Hebb, Oja and pre-Delta are affine in W and are described by
`LearningRule.affine_step` (a `RankOneUpdate`), which `neuralde_seq.solvers.exact_fast_weights`
applies over whole sequences; post-Delta's step is nonlinear and is applied step by step
(`LearningRule.exact_step_inputs`, `Delta.exact_step_from_inputs`). The formulas are written with ``expm1`` and an overflow-free ``asinh(sinh(·)·r)``
(`relaxation_rate`, `relax_error`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Callable

import torch

from .input_checks import unknown_name_message

__all__ = ["LearningRule", "Hebb", "Oja", "Delta", "make_rule", "RULE_NAMES", "register_rule",
           "unregister_rule", "registered_rule", "rule_names", "rule_title", "RuleEntry", "CAPABILITIES", "AFFINE_RATE",
           "AFFINE_STEP", "AFFINE_STEP_FORGET", "STEPWISE_STEP", "RankOneUpdate", "RankOneRate", "relaxation_rate",
           "relax_error"]


class _RelaxationRate(torch.autograd.Function):
    """(1 − e^{−a·n}) / n of a = c·h and n, with hand-written gradients (see `relaxation_rate`)."""

    generate_vmap_rule = True
    # (1 − e^{−x})/x = Σ_k (−x)^k/(k+1)!, kept to k = 4 for |x| < 1e-3 (the first term left out is < 1.4e-18).
    SERIES_BELOW = 1e-3
    PHI = tuple((-1) ** k / math.factorial(k + 1) for k in range(5))
    # g(x) = (1 − (1+x) e^{−x})/x² = e^{−x} Σ_k x^k/(k+2)!, kept to k = 21 for |x| < 2 (the terms left out
    # add up to < 7e-18 relative); for x >= 2 the closed form loses at most a factor 1.9 to cancellation.
    G_SERIES_BELOW = 2.0
    G_TERMS = tuple(1 / math.factorial(k + 2) for k in range(22))

    @staticmethod
    def _horner(coefficients, x):
        result = torch.full_like(x, coefficients[-1])
        for coefficient in reversed(coefficients[:-1]):
            result = result * x + coefficient
        return result

    @staticmethod
    def forward(a, norm_sq):
        x = a * norm_sq
        small = x.abs() < _RelaxationRate.SERIES_BELOW
        x_small = torch.where(small, x, torch.zeros_like(x))
        safe_x = torch.where(small, torch.ones_like(x), x)
        safe_norm = torch.where(small, torch.ones_like(norm_sq), norm_sq)
        return torch.where(small, a * _RelaxationRate._horner(_RelaxationRate.PHI, x_small),
                           -torch.expm1(-safe_x) / safe_norm)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        # Written with differentiable operations on safe arguments: double backward works and has no NaN.
        a, norm_sq = ctx.saved_tensors
        x = a * norm_sq
        decay = torch.exp(-x)
        grad_a = grad * decay if ctx.needs_input_grad[0] else None
        grad_norm = None
        if ctx.needs_input_grad[1]:
            small = x.abs() < _RelaxationRate.G_SERIES_BELOW
            x_small = torch.where(small, x, torch.zeros_like(x))
            x_large = torch.where(small, torch.ones_like(x), x)
            g = torch.where(small, decay * _RelaxationRate._horner(_RelaxationRate.G_TERMS, x_small),
                            ((1 - decay) - x_large * decay) / x_large / x_large)
            grad_norm = -grad * (a * a) * g
        return grad_a, grad_norm


def relaxation_rate(c: torch.Tensor, norm_sq: torch.Tensor, h) -> torch.Tensor:
    """(1 − e^{−c·n·h}) / n: the learning rate of one exact step of a relaxing rule
    (docs/equations.md#closed-forms-on-constant-inputs).

    With a = c·h and x = a·n, the value is a·(1 − x/2 + x²/6 − x³/24 + x⁴/120) (Horner form) for |x| < 1e-3,
    so that it stays accurate as the norm n → 0 (the limit is c·h), and ``-expm1(-x) / n`` otherwise. The
    gradients are not autograd's through these formulas (expm1's backward forms e^{−x} as expm1(−x) + 1, which
    has no relative accuracy left for large x, and ∂/∂n of ``-expm1(-x) / n`` cancels two terms for moderate x)
    but the closed forms ∂/∂c = h·e^{−x}, ∂/∂h = c·e^{−x} and ∂/∂n = −a²·g(x), g(x) = (1 − (1+x) e^{−x})/x²,
    with g evaluated as e^{−x}·Σ_{k<22} x^k/(k+2)! for |x| < 2 and as ((1 − e^{−x}) − x·e^{−x})/x/x otherwise
    (second derivatives are autograd's through these). Value and gradients are within a few rounding errors of
    the exact ones when x is exactly represented, in float64 and float32 (tests/test_relaxation_rate.py); the
    rounding of the products a = c·h and x = a·n adds its relative error times up to about 2 + x.

    Arguments:
        c: (..., 1) learning rate σ(β) (>= 0).
        norm_sq: (..., 1) squared norm n >= 0.
        h: step length (a number or a tensor broadcasting with c, >= 0).

    Returns:
        (1 − e^{−c·n·h}) / n, of the broadcast shape of c·h and ``norm_sq``.
    """
    a, norm_sq = torch.broadcast_tensors(c * h, norm_sq)
    return _RelaxationRate.apply(a, norm_sq)


# Above this |e|, sinh(e) is replaced by its exponential form (sinh(20) ≈ 2.4e8 is safe in float32).
_LARGE_ERROR = 20.0


def relax_error(e0: torch.Tensor, log_decay: torch.Tensor) -> torch.Tensor:
    """asinh(sinh(e0) · e^{log_decay}) element-wise, without overflow for large |e0|
    (docs/equations.md#closed-forms-on-constant-inputs).

    This is the exact solution at time h of de/ds = −c‖k‖² tanh(e) with log_decay = −c‖k‖²h <= 0 (post-Delta's
    error). For |e0| > 20, with L = |e0| + log_decay − log 2 + log1p(−e^{−2|e0|}) = log|sinh(e0) r|, the result is
    sign(e0)·(L + log(1 + sqrt(1 + e^{−2L}))) when L > 0 and sign(e0)·asinh(e^L) otherwise. Both branches
    are evaluated on clamped arguments, so neither produces inf or NaN (nor NaN gradients through where).

    Arguments:
        e0: the error at the start of the step, any shape.
        log_decay: −c‖k‖²h <= 0, broadcasting with ``e0``.

    Returns:
        The error at the end of the step, of the broadcast shape.
    """
    # The common case in a fraction of the operations (a post-Delta training step 1.7x faster), where reading the
    # flag is free: on the CPU. Elsewhere the read would be a host sync on every step: both branches, always.
    if e0.device.type == "cpu" and not bool((e0.abs() > _LARGE_ERROR).any()):
        return torch.asinh(torch.sinh(e0) * torch.exp(log_decay))
    return _relax_error_both_branches(e0, log_decay)


def _relax_error_both_branches(e0: torch.Tensor, log_decay: torch.Tensor) -> torch.Tensor:
    """`relax_error` without reading a value on the host: both branches, chosen element-wise."""
    clipped = e0.clamp(-_LARGE_ERROR, _LARGE_ERROR)
    direct = torch.asinh(torch.sinh(clipped) * torch.exp(log_decay))
    magnitude = e0.abs().clamp(min=_LARGE_ERROR)
    log_y = magnitude + log_decay - math.log(2.0) + torch.log1p(-torch.exp(-2 * magnitude))
    positive = log_y > 0
    log_y_pos = torch.where(positive, log_y, torch.ones_like(log_y))
    log_y_neg = torch.where(positive, -torch.ones_like(log_y), log_y)
    large = torch.where(positive, log_y_pos + torch.log1p(torch.sqrt(1 + torch.exp(-2 * log_y_pos))),
                        torch.asinh(torch.exp(log_y_neg)))
    return torch.where(e0.abs() > _LARGE_ERROR, torch.sign(e0) * large, direct)


@dataclasses.dataclass
class _RankOneTerms:
    """The terms shared by a rank-one affine step and rate: write·b aᵀ and −decay·(M a) aᵀ, M = W or Wᵀ.

    Attributes:
        a: (..., d_a) the direction that is read and written along.
        b: (..., d_b) the vector written.
        decay: (..., 1) the decay factor, or None (nothing decays: Hebb).
        write: (..., 1) the write factor.
        transposed: act on Wᵀ (Oja); default False. W is (..., d_b, d_a), or (..., d_a, d_b) when transposed.
    """

    a: torch.Tensor
    b: torch.Tensor
    decay: torch.Tensor | None
    write: torch.Tensor
    transposed: bool = False


@dataclasses.dataclass
class RankOneUpdate(_RankOneTerms):
    """An affine map of the fast weights, W ↦ scale·(W − decay·(W a) aᵀ) + write·b aᵀ (applied to Wᵀ if
    ``transposed``).

    This is one exact step of Hebb (decay None: nothing decays), pre-Delta (a = k, b = v) and Oja (on Wᵀ,
    a = v, b = k), see docs/equations.md#closed-forms-on-constant-inputs; ``scale`` = e^{−λh} is the forget
    gate's decay of the whole matrix (docs/equations.md#forget-gate), None without one.

    Attributes: ``a``, ``b``, ``decay``, ``write``, ``transposed`` as `_RankOneTerms`, and
        scale: (..., 1) the factor of the whole matrix, or None (1: no forget gate).
    """

    scale: torch.Tensor | None = None

    def apply(self, W: torch.Tensor) -> torch.Tensor:
        """W after the step.

        Arguments:
            W: (..., d_b, d_a) fast weights, or (..., d_a, d_b) when ``transposed``.

        Returns:
            The updated fast weights, shaped as ``W``.
        """
        M = W.transpose(-1, -2) if self.transposed else W
        written = (self.write * self.b).unsqueeze(-1) * self.a.unsqueeze(-2)
        decayed = None
        if self.decay is not None:
            recalled = (M @ self.a.unsqueeze(-1)).squeeze(-1)  # M a
            decayed = (self.decay * recalled).unsqueeze(-1) * self.a.unsqueeze(-2)
        if self.scale is None:
            M = M + (written if decayed is None else written - decayed)
        else:
            M = self.scale.unsqueeze(-1) * (M if decayed is None else M - decayed) + written
        return M.transpose(-1, -2) if self.transposed else M


@dataclasses.dataclass
class RankOneRate(_RankOneTerms):
    """The rate of an affine rule as a map of the fast weights: dM/ds = write·b aᵀ − decay·(M a) aᵀ − forget·M,
    M = W (or Wᵀ if ``transposed``).

    The continuous counterpart of `RankOneUpdate`: Hebb (decay None), pre-Delta (a = k, b = v) and Oja (on Wᵀ,
    a = v, b = k), with a forget gate's −λ W (docs/equations.md#forget-gate). Fixed-step solvers compose the
    Runge-Kutta step of such a rate into one affine map of W (`neuralde_seq.solvers.affine_rk4`).

    Attributes: ``a``, ``b``, ``decay``, ``write``, ``transposed`` as `_RankOneTerms`, and
        forget: (..., 1) the forget rate λ, or None (no forget gate).
    """

    forget: torch.Tensor | None = None

    def apply(self, W: torch.Tensor) -> torch.Tensor:
        """dW/ds at W.

        Arguments:
            W: (..., d_b, d_a) fast weights, or (..., d_a, d_b) when ``transposed``.

        Returns:
            dW/ds, shaped as ``W``.
        """
        M = W.transpose(-1, -2) if self.transposed else W
        error = self.write * self.b
        if self.decay is not None:
            error = error - self.decay * (M @ self.a.unsqueeze(-1)).squeeze(-1)
        rate = error.unsqueeze(-1) * self.a.unsqueeze(-2)
        if self.forget is not None:
            rate = rate - self.forget.unsqueeze(-1) * M
        return rate.transpose(-1, -2) if self.transposed else rate


def _relaxing_update(a, b, c, norm_sq, h, forget, transposed=False) -> RankOneUpdate:
    """The exact step of dM/ds = c (b − M a) aᵀ − λ M on constant inputs (pre-Delta on W, Oja on Wᵀ): with
    n = ‖a‖², M a relaxes to c n b / (λ + c n) at the rate λ + c n, and M's part orthogonal to a decays as
    e^{−λh} (docs/equations.md#forget-gate); without a forget gate (λ None) decay = write = (1 − e^{−cnh}) / n."""
    decay = relaxation_rate(c, norm_sq, h)
    if forget is None:
        return RankOneUpdate(a, b, decay, decay, transposed)
    write = c * relaxation_rate(torch.ones_like(c), forget + c * norm_sq, h)
    return RankOneUpdate(a, b, decay, write, transposed, scale=torch.exp(-forget * h))


# Capabilities a rule may declare (`LearningRule.capabilities`): what the solvers ask a rule before taking a fast path.
AFFINE_RATE = "affine_rate"                # `affine_rate` gives the rate as a `RankOneRate` (composed rk4 steps)
AFFINE_STEP = "affine_step"                # `affine_step` gives the exact step as a `RankOneUpdate`, no forget gate
AFFINE_STEP_FORGET = "affine_step_forget"  # ... and with a forget gate too
STEPWISE_STEP = "stepwise_step"            # `exact_step_inputs` + `exact_step_from_inputs`: a nonlinear exact step
CAPABILITIES = (AFFINE_RATE, AFFINE_STEP, AFFINE_STEP_FORGET, STEPWISE_STEP)


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
        raise NotImplementedError(f"{type(self).__name__} declares no error(M, k, v): a LearningRule subclass "
                                  "declares the vector it writes (or overrides rate)")

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
    def rate(self, W: torch.Tensor | None, k_raw: torch.Tensor, v_raw: torch.Tensor,
             beta: torch.Tensor) -> torch.Tensor:
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
            raise NotImplementedError(f"{type(self).__name__} declares no error(M, k, v): a LearningRule subclass "
                                      "declares the vector it writes (or overrides rate)")
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
            return (a.unsqueeze(-1) * written.unsqueeze(-2) if self.transposed
                    else written.unsqueeze(-1) * a.unsqueeze(-2))
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
        return (f"{self!r} has no closed-form step" + (" with a forget gate" if forget_gate else "")
                + ": it declares none of the capabilities 'affine_step'" + ("_forget" if forget_gate else "")
                + (" or 'stepwise_step'" if not forget_gate else ""))

    def affine_step(self, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor, h,
                    forget: torch.Tensor | None = None) -> RankOneUpdate | None:
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

    def affine_rate(self, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor,
                    forget: torch.Tensor | None = None) -> RankOneRate | None:
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

    def exact_step(self, W: torch.Tensor, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor,
                   h, forget: torch.Tensor | None = None) -> torch.Tensor:
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
            return self.affine_step(k_raw, v_raw, beta, h, forget).apply(W)
        if kind == "stepwise":
            return self.exact_step_from_inputs(W, *self.exact_step_inputs(k_raw, v_raw, beta, h))
        raise NotImplementedError(self.exact_step_refusal(forget is not None))

    def discrete_step(self, W: torch.Tensor | None, k_raw: torch.Tensor, v_raw: torch.Tensor,
                      beta: torch.Tensor) -> torch.Tensor:
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


_AFFINE = frozenset({AFFINE_RATE, AFFINE_STEP, AFFINE_STEP_FORGET})


class Hebb(LearningRule):
    """Purely additive rule, dW/ds = σ(β) v kᵀ (paper Eq. 21, top; e = v, a = k). Linear Transformer in the limit."""

    name = "hebb"
    title = "Hebb"
    uses_state = False
    swappable_cde_sources = True
    bounded = False  # W is a sum over the whole series
    capabilities = _AFFINE

    def error(self, M, k, v):
        """e = v (W is not read).

        Arguments:
            M: unused (None).
            k: (..., d_k) keys.
            v: (..., d_v) values.

        Returns:
            (..., d_v) v.
        """
        return v

    def affine_rate(self, k_raw, v_raw, beta, forget=None):
        """σ(β) v kᵀ (− λ W) as a `RankOneRate` (nothing decays).

        Arguments:
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.
            forget: (..., 1) the forget rate λ >= 0, or None: no forget gate.

        Returns:
            The `RankOneRate` (a = k, b = v, write σ(β)).
        """
        return RankOneRate(self.activate_key(k_raw), torch.tanh(v_raw), None, torch.sigmoid(beta), forget=forget)

    def affine_step(self, k_raw, v_raw, beta, h, forget=None):
        """W + σ(β) h v kᵀ; with a forget rate λ, e^{−λh} W + σ(β) (1 − e^{−λh})/λ · v kᵀ.

        Arguments:
            k_raw: (..., d_k) key pre-activations, constant over the step.
            v_raw: (..., d_v) value pre-activations, constant over the step.
            beta: (..., 1) learning-rate pre-activations, constant over the step.
            h: step length, a number or a tensor broadcasting with ``beta`` (..., 1).
            forget: (..., 1) the forget rate λ >= 0, or None: no forget gate.

        Returns:
            The step as a `RankOneUpdate` (no decay along k).
        """
        c = torch.sigmoid(beta)
        k, v = self.activate_key(k_raw), torch.tanh(v_raw)
        if forget is None:
            return RankOneUpdate(k, v, None, c * h)
        return RankOneUpdate(k, v, None, c * relaxation_rate(torch.ones_like(c), forget, h),
                             scale=torch.exp(-forget * h))


class Oja(LearningRule):
    """Oja's rule, dW/ds = σ(β) v (k − Wᵀv)ᵀ (paper Eq. 21, middle): on M = Wᵀ, e = k − M v along a = v.

    Arguments:
        softmax_after_subtract: False (default) follows the paper, k = softmax(k_raw) and then k − Wᵀv.
            True reproduces the public code, which applies the softmax to (k_raw − Wᵀv) instead
            (docs/design.md#pitfalls-of-public-code), for reproducing its numbers; it has no closed form.
    """

    name = "oja"
    title = "Oja"
    transposed = True
    direction = "v"

    def __init__(self, softmax_after_subtract: bool = False):
        self.softmax_after_subtract = bool(softmax_after_subtract)

    @property
    def capabilities(self):  # type: ignore[override]
        # softmax(k_raw − Wᵀv) is not affine in W: no closed form.
        return frozenset() if self.softmax_after_subtract else _AFFINE

    def rate_key(self, k_raw):
        """softmax(k_raw), or k_raw itself with ``softmax_after_subtract`` (the softmax comes in `error`).

        Arguments:
            k_raw: (..., d_k) key pre-activations.

        Returns:
            (..., d_k) keys.
        """
        return k_raw if self.softmax_after_subtract else self.activate_key(k_raw)

    def error(self, M, k, v):
        """e = k − Wᵀv (softmax(k_raw − Wᵀv) with ``softmax_after_subtract``), M = Wᵀ.

        Arguments:
            M: (..., d_k, d_v) Wᵀ, or None for W = 0.
            k: (..., d_k) keys from `rate_key`.
            v: (..., d_v) values.

        Returns:
            (..., d_k) the written vector.
        """
        if self.softmax_after_subtract:
            return self.activate_key(k if M is None else k - self.recall(M, v))
        return k if M is None else k - self.recall(M, v)

    def exact_step_refusal(self, forget_gate=False):
        """Why ``Oja(softmax_after_subtract=True)`` has no exact step (see `LearningRule.exact_step_refusal`).

        Arguments:
            forget_gate: whether the field has a forget gate.

        Returns:
            The sentence.
        """
        return ("Oja(softmax_after_subtract=True) has no closed-form step: softmax(k_raw − Wᵀv) is not affine in W"
                if self.softmax_after_subtract else super().exact_step_refusal(forget_gate))

    def affine_rate(self, k_raw, v_raw, beta, forget=None):
        """σ(β) v (k − Wᵀv)ᵀ (− λ W) as a `RankOneRate` on Wᵀ: σ(β) (k − Wᵀv) vᵀ (a = v, b = k).

        Arguments:
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.
            forget: (..., 1) the forget rate λ >= 0, or None: no forget gate.

        Returns:
            The `RankOneRate`, or None with ``softmax_after_subtract`` (not affine in W).
        """
        if self.softmax_after_subtract:
            return None
        c = torch.sigmoid(beta)
        return RankOneRate(torch.tanh(v_raw), self.activate_key(k_raw), c, c, transposed=True, forget=forget)

    def affine_step(self, k_raw, v_raw, beta, h, forget=None):
        """W + v (k − Wᵀv)ᵀ (1 − e^{−c‖v‖²h}) / ‖v‖²: on Wᵀ, a relaxation towards k along v (a = v, b = k).

        Arguments:
            k_raw: (..., d_k) key pre-activations, constant over the step.
            v_raw: (..., d_v) value pre-activations, constant over the step.
            beta: (..., 1) learning-rate pre-activations, constant over the step.
            h: step length, a number or a tensor broadcasting with ``beta`` (..., 1).
            forget: (..., 1) the forget rate λ >= 0, or None: no forget gate.

        Returns:
            The step as a `RankOneUpdate` on Wᵀ, or None with ``softmax_after_subtract``.
        """
        if self.softmax_after_subtract:
            return None
        k = self.activate_key(k_raw)
        v = torch.tanh(v_raw)
        return _relaxing_update(v, k, torch.sigmoid(beta), (v * v).sum(-1, keepdim=True), h, forget, transposed=True)

    def __repr__(self):
        return f"Oja(softmax_after_subtract={self.softmax_after_subtract})"


class Delta(LearningRule):
    """The delta rule (paper Eq. 21 bottom, App. A Eq. 32): e = v − W k (pre) or tanh(v_raw − W k) (post), a = k.

    Arguments:
        post: False gives "pre-delta", σ(β)(tanh(v_raw) − W k) kᵀ; True gives "post-delta",
            σ(β) tanh(v_raw − W k) kᵀ, which the paper found crucial for sequences over 4,000 steps.
    """

    cde_sources = ("dx", "x")

    def __init__(self, post: bool = False):
        self.post = bool(post)

    @property
    def name(self):  # type: ignore[override]
        return "delta-post" if self.post else "delta"

    @property
    def title(self):  # type: ignore[override]
        return "post-Delta" if self.post else "Delta"

    @property
    def capabilities(self):  # type: ignore[override]
        # Post-Delta's step is nonlinear in W (and has no closed form with a forget gate).
        return frozenset({STEPWISE_STEP}) if self.post else _AFFINE

    def rate_value(self, v_raw):
        """tanh(v_raw) for pre-Delta; v_raw itself for post-Delta (its tanh comes in `error`).

        Arguments:
            v_raw: (..., d_v) value pre-activations.

        Returns:
            (..., d_v) values.
        """
        return v_raw if self.post else torch.tanh(v_raw)

    def error(self, M, k, v):
        """e = v − W k (pre) or tanh(v_raw − W k) (post).

        Arguments:
            M: (..., d_v, d_k) W, or None for W = 0.
            k: (..., d_k) keys.
            v: (..., d_v) values from `rate_value`.

        Returns:
            (..., d_v) the written vector.
        """
        error = v - self.recall(M, k)
        return torch.tanh(error) if self.post else error

    def exact_step_refusal(self, forget_gate=False):
        """Why post-Delta has no exact step with a forget gate (see `LearningRule.exact_step_refusal`).

        Arguments:
            forget_gate: whether the field has a forget gate.

        Returns:
            The sentence.
        """
        if self.post and forget_gate:
            return ("post-Delta with a forget gate has no closed-form step: tanh(v − W k) and the decay of W's other "
                    "directions do not separate")
        return super().exact_step_refusal(forget_gate)

    def affine_rate(self, k_raw, v_raw, beta, forget=None):
        """Pre-Delta's σ(β) (v − W k) kᵀ (− λ W) as a `RankOneRate` (a = k, b = v); None for post-Delta.

        Arguments:
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.
            forget: (..., 1) the forget rate λ >= 0, or None: no forget gate.

        Returns:
            The `RankOneRate`, or None for post-Delta (tanh(v − W k) is not affine in W).
        """
        if self.post:
            return None
        c = torch.sigmoid(beta)
        return RankOneRate(self.activate_key(k_raw), torch.tanh(v_raw), c, c, forget=forget)

    def affine_step(self, k_raw, v_raw, beta, h, forget=None):
        """Pre-Delta: W + (v − W k) kᵀ (1 − e^{−c‖k‖²h}) / ‖k‖², a DeltaNet step; None for post-Delta.

        Arguments:
            k_raw: (..., d_k) key pre-activations, constant over the step.
            v_raw: (..., d_v) value pre-activations, constant over the step.
            beta: (..., 1) learning-rate pre-activations, constant over the step.
            h: step length, a number or a tensor broadcasting with ``beta`` (..., 1).
            forget: (..., 1) the forget rate λ >= 0, or None: no forget gate.

        Returns:
            The step as a `RankOneUpdate` (a = k, b = v), or None for post-Delta.
        """
        if self.post:
            return None
        k = self.activate_key(k_raw)
        return _relaxing_update(k, torch.tanh(v_raw), torch.sigmoid(beta), (k * k).sum(-1, keepdim=True), h, forget)

    def exact_step_inputs(self, k_raw, v_raw, beta, h):
        """What post-Delta's exact step needs besides W, computable for a whole sequence at once.

        Arguments:
            k_raw: (..., d_k) key pre-activations, constant over the step.
            v_raw: (..., d_v) value pre-activations, constant over the step.
            beta: (..., 1) learning-rate pre-activations, constant over the step.
            h: step length, a number or a tensor broadcasting with ``beta`` (..., 1).

        Returns:
            (k, v_raw, log_decay, inv_norm_sq): keys (..., d_k), value pre-activations (..., d_v), −c‖k‖²h and
                1/‖k‖² of shape (..., 1). (Keys are on the simplex, so ‖k‖² >= 1/d_k.)
        """
        if not self.post:
            return super().exact_step_inputs(k_raw, v_raw, beta, h)
        k = self.activate_key(k_raw)
        norm_sq = (k * k).sum(-1, keepdim=True)
        return k, v_raw, -torch.sigmoid(beta) * norm_sq * h, 1.0 / norm_sq

    post_step_inputs = exact_step_inputs  # the name it had

    @staticmethod
    def exact_step_from_inputs(W, k, v_raw, log_decay, inv_norm_sq):
        """Post-Delta's exact step: W + (e₀ − e_h) kᵀ/‖k‖², e₀ = v_raw − W k, e_h = asinh(sinh(e₀) e^{−c‖k‖²h}).

        The error e = v_raw − W k obeys de/ds = −c‖k‖² tanh(e) element-wise, and W changes only along kᵀ.

        Arguments:
            W: (..., d_v, d_k) fast weights at the start of the step.
            k: (..., d_k) keys, from `exact_step_inputs`.
            v_raw: (..., d_v) value pre-activations, from `exact_step_inputs`.
            log_decay: (..., 1) −c‖k‖²h, from `exact_step_inputs`.
            inv_norm_sq: (..., 1) 1/‖k‖², from `exact_step_inputs`.

        Returns:
            W after the step, shape (..., d_v, d_k).
        """
        e0 = v_raw - (W @ k.unsqueeze(-1)).squeeze(-1)
        change = (e0 - relax_error(e0, log_decay)) * inv_norm_sq
        return W + change.unsqueeze(-1) * k.unsqueeze(-2)

    post_step = exact_step_from_inputs  # the name it had

    def __repr__(self):
        return f"Delta(post={self.post})"


# ------------------------------------------------------------------------------------------ the registry
@dataclasses.dataclass(frozen=True)
class RuleEntry:
    """A registered rule: how `make_rule` builds it.

    Attributes:
        factory: called with the options of `make_rule`, returns a `LearningRule`.
        title: how model descriptions name it ("Hebb", "post-Delta", ...).
    """

    factory: Callable[..., LearningRule]
    title: str


_RULES: dict[str, RuleEntry] = {}


def register_rule(name: str, factory: Callable[..., LearningRule], *, title: str | None = None) -> None:
    """Make a rule buildable by name: ``make_rule(name, **options)`` calls ``factory(**options)``, and every
    model taking ``rule=`` accepts the name (`FastWeightField`, `neuralde_seq.models.FastWeightNetwork`,
    `neuralde_seq.models.ODERFWP`, ``create_model("delta-cde", ..., rule=name)``). The model registry's
    ``{rule}-{form}`` names are made once at import for the rules registered then (the built-in ones).

    Arguments:
        name: the name, a non-empty string not yet registered.
        factory: a callable returning a `LearningRule` (e.g. the class).
        title: how descriptions name the rule (default: ``name``).

    Raises:
        ValueError: an empty or taken name; TypeError: a factory that is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a rule's name must be a non-empty string, got {name!r}")
    if name in _RULES:
        raise ValueError(f"rule name {name!r} is already registered (unregister_rule({name!r}) first to replace it)")
    if not callable(factory):
        raise TypeError(f"factory must be callable (a LearningRule class or a function returning one), "
                        f"got {factory!r}")
    _RULES[name] = RuleEntry(factory, name if title is None else str(title))


def unregister_rule(name: str) -> None:
    """Remove a registration made by `register_rule`.

    Arguments:
        name: a registered name.

    Raises:
        ValueError: the name is not registered.
    """
    if name not in _RULES:
        raise ValueError(unknown_name_message("rule", name, _RULES, listing="registered rules"))
    del _RULES[name]


@contextlib.contextmanager
def registered_rule(name: str, factory: Callable[..., LearningRule], *, title: str | None = None):
    """`register_rule` for the duration of a ``with`` block (e.g. a test), removed on leaving it.

    Arguments:
        name: the rule's name, as `register_rule`.
        factory: what builds the rule, as `register_rule`.
        title: its name in messages, as `register_rule`.

    Yields:
        ``name``.
    """
    register_rule(name, factory, title=title)
    try:
        yield name
    finally:
        _RULES.pop(name, None)


def rule_names() -> tuple[str, ...]:
    """The names `make_rule` accepts now, in registration order (the built-in ones first).

    Returns:
        The names.
    """
    return tuple(_RULES)


def rule_title(name: str) -> str:
    """How descriptions name a registered rule.

    Arguments:
        name: a registered name.

    Returns:
        The title given to `register_rule`.
    """
    if name not in _RULES:
        raise ValueError(unknown_name_message("rule", name, _RULES, listing="registered rules"))
    return _RULES[name].title


def make_rule(rule: str | LearningRule, **options) -> LearningRule:
    """A rule from its name or a rule object.

    Arguments:
        rule: a registered name (`rule_names`: "hebb", "oja", "delta", "delta-post" and those added by
            `register_rule`), or a `LearningRule` (returned unchanged; options are then refused).
        **options: arguments of the named rule's factory.

    Returns:
        The `LearningRule`.

    Raises:
        ValueError: an unknown name, options given with a rule object, or a factory that returned no
            `LearningRule`.
    """
    if isinstance(rule, LearningRule):
        if options:
            raise ValueError(f"options {sorted(options)} given together with a rule object {rule!r}")
        return rule
    if not isinstance(rule, str):
        raise ValueError(f"rule must be a rule name ({', '.join(_RULES)}) or a LearningRule, got {rule!r}")
    if rule not in _RULES:
        raise ValueError(unknown_name_message("rule", rule, _RULES, listing="registered rules")
                         + " (or pass a LearningRule; neuralde_seq.rules.register_rule adds a name)")
    built = _RULES[rule].factory(**options)
    if not isinstance(built, LearningRule):
        raise ValueError(f"the factory registered for rule {rule!r} returned {built!r}, not a LearningRule")
    return built


register_rule("hebb", Hebb, title="Hebb")
register_rule("oja", Oja, title="Oja")
register_rule("delta", lambda **options: Delta(post=False, **options), title="Delta")
register_rule("delta-post", lambda **options: Delta(post=True, **options), title="post-Delta")


def __getattr__(name):
    # RULE_NAMES follows the registry (a rule registered later is in it); read as rules.RULE_NAMES or imported.
    if name == "RULE_NAMES":
        return rule_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
