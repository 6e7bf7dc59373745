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

All tensors carry arbitrary leading batch dimensions ``(...)``; heads are one of them.

Exact steps (docs/equations.md#closed-forms-on-constant-inputs). When k, v and β stay constant for a time h
(a log-signature window, a piece of a rectilinear control), every rule has a closed-form solution,
`LearningRule.exact_step`. Hebb, Oja and pre-Delta are affine in W and are described by
`LearningRule.affine_step` (a `RankOneUpdate`), which `neuralde_seq.ops.exact_fast_weights`
applies over whole sequences; post-Delta's step is nonlinear and is applied step by step
(`Delta.post_step`). The formulas are written with ``expm1`` and an overflow-free ``asinh(sinh(·)·r)``
(`relaxation_rate`, `relax_error`).
"""
from __future__ import annotations

import dataclasses
import math

import torch

__all__ = ["LearningRule", "Hebb", "Oja", "Delta", "make_rule", "RULE_NAMES", "RankOneUpdate", "RankOneRate", "relaxation_rate",
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
    Runge-Kutta step of such a rate into one affine map of W (`neuralde_seq.ops.affine_rk4`).

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


class LearningRule:
    """Base class. Subclasses implement `rate`.

    Attributes:
        name: short name used in configurations (``"hebb"``, ``"oja"``, ``"delta"``, ``"delta-post"``).
        uses_state: whether ``dW/ds`` depends on ``W`` (False only for Hebb).
    """

    name: str = ""
    uses_state: bool = True

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

    def rate(self, W: torch.Tensor | None, k_raw: torch.Tensor, v_raw: torch.Tensor,
             beta: torch.Tensor) -> torch.Tensor:
        """The rate of change of the fast weights.

        Arguments:
            W: fast weights, shape (..., d_v, d_k), or None for W = 0 (used for the rank-one initial write).
            k_raw: key pre-activations, shape (..., d_k).
            v_raw: value pre-activations, shape (..., d_v).
            beta: learning-rate pre-activations, shape (..., 1).

        Returns:
            dW/ds of shape (..., d_v, d_k).
        """
        raise NotImplementedError

    # The rate in two parts, ``rate(W, k_raw, v_raw, beta) == rate_from_features(W, *rate_features(k_raw, v_raw,
    # beta))``: the activations, which depend on the input only (fixed-step solvers compute them for every
    # stage of many steps at once, see FastWeightField.control_features), and the part that reads W, which
    # runs step by step. The defaults suit a rule that implements only `rate`.
    def rate_features(self, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor) -> tuple:
        """The input-only part of `rate`, for any number of points.

        Arguments:
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.

        Returns:
            A tuple of tensors for `rate_from_features` (default: the inputs unchanged).
        """
        return k_raw, v_raw, beta

    def rate_from_features(self, W: torch.Tensor | None, *features: torch.Tensor) -> torch.Tensor:
        """dW/ds from W and the features of `rate_features`.

        Arguments:
            W: (..., d_v, d_k) fast weights, or None for W = 0.
            *features: the tensors `rate_features` returned.

        Returns:
            dW/ds of shape (..., d_v, d_k).
        """
        return self.rate(W, *features)

    has_exact_step: bool = True

    def affine_step(self, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor, h,
                    forget: torch.Tensor | None = None) -> RankOneUpdate | None:
        """The exact step over a time h with constant inputs as an affine map of W.

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

    has_affine_rate: bool = False

    def affine_rate(self, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor,
                    forget: torch.Tensor | None = None) -> RankOneRate | None:
        """The rate (with a forget gate: minus λ W) as an affine map of W, for rules where ``has_affine_rate``.

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

    def exact_step(self, W: torch.Tensor, k_raw: torch.Tensor, v_raw: torch.Tensor, beta: torch.Tensor,
                   h, forget: torch.Tensor | None = None) -> torch.Tensor:
        """W(t + h) for inputs constant over [t, t + h]: the exact solution of dW/ds = rate (− λ W with a forget
        gate; docs/equations.md#closed-forms-on-constant-inputs).

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
            NotImplementedError: the rule has no exact step (`affine_step` returns None, as for post-Delta).
        """
        update = self.affine_step(k_raw, v_raw, beta, h, forget)
        if update is None:
            raise NotImplementedError(f"{self!r} has no exact step" + ("" if forget is None else " with a forget gate"))
        return update.apply(W)

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


class Hebb(LearningRule):
    """Purely additive rule, dW/ds = σ(β) v kᵀ (paper Eq. 21, top). Linear Transformer in the limit."""

    name = "hebb"
    uses_state = False

    def rate(self, W, k_raw, v_raw, beta):
        """dW/ds = σ(β) v kᵀ (W is not read).

        Arguments:
            W: (..., d_v, d_k) fast weights, or None for W = 0.
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.

        Returns:
            dW/ds of shape (..., d_v, d_k).
        """
        return self.rate_from_features(W, *self.rate_features(k_raw, v_raw, beta))

    def rate_features(self, k_raw, v_raw, beta):
        """(k, σ(β) v).

        Arguments:
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.

        Returns:
            ``(k, cv)``: k = softmax(k_raw) (..., d_k) and σ(β) tanh(v_raw) (..., d_v).
        """
        return self.activate_key(k_raw), torch.sigmoid(beta) * torch.tanh(v_raw)

    def rate_from_features(self, W, k, cv):
        """σ(β) v kᵀ from the features of `rate_features`.

        Arguments:
            W: unused (Hebb does not read W); may be None.
            k: (..., d_k) keys.
            cv: (..., d_v) σ(β) v.

        Returns:
            dW/ds of shape (..., d_v, d_k).
        """
        return cv.unsqueeze(-1) * k.unsqueeze(-2)

    has_affine_rate = True

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
    """Oja's rule, dW/ds = σ(β) v (k − Wᵀv)ᵀ (paper Eq. 21, middle).

    Arguments:
        softmax_after_subtract: False (default) follows the paper, k = softmax(k_raw) and then k − Wᵀv.
            True reproduces the public code, which applies the softmax to (k_raw − Wᵀv) instead
            (docs/design.md#pitfalls-of-public-code), for reproducing its numbers.
    """

    name = "oja"

    def __init__(self, softmax_after_subtract: bool = False):
        self.softmax_after_subtract = bool(softmax_after_subtract)

    def rate(self, W, k_raw, v_raw, beta):
        """dW/ds = σ(β) v (k − Wᵀv)ᵀ.

        Arguments:
            W: (..., d_v, d_k) fast weights, or None for W = 0.
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.

        Returns:
            dW/ds of shape (..., d_v, d_k).
        """
        return self.rate_from_features(W, *self.rate_features(k_raw, v_raw, beta))

    def rate_features(self, k_raw, v_raw, beta):
        """(k, v, σ(β) v), k = softmax(k_raw) (k_raw itself with ``softmax_after_subtract``).

        Arguments:
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.

        Returns:
            ``(k, v, cv)``: (..., d_k), (..., d_v) and (..., d_v).
        """
        v = torch.tanh(v_raw)
        k = k_raw if self.softmax_after_subtract else self.activate_key(k_raw)
        return k, v, torch.sigmoid(beta) * v

    def rate_from_features(self, W, k, v, cv):
        """σ(β) v (k − Wᵀv)ᵀ from the features of `rate_features`.

        Arguments:
            W: (..., d_v, d_k) fast weights, or None for W = 0.
            k: (..., d_k) keys (pre-activations with ``softmax_after_subtract``).
            v: (..., d_v) values.
            cv: (..., d_v) σ(β) v.

        Returns:
            dW/ds of shape (..., d_v, d_k).
        """
        if W is not None:
            recalled = (W.transpose(-1, -2) @ v.unsqueeze(-1)).squeeze(-1)  # Wᵀv, (..., d_k)
            k = self.activate_key(k - recalled) if self.softmax_after_subtract else k - recalled
        elif self.softmax_after_subtract:
            k = self.activate_key(k)
        return cv.unsqueeze(-1) * k.unsqueeze(-2)

    @property
    def has_exact_step(self):  # type: ignore[override]
        # softmax(k_raw − Wᵀv) is not affine in W: no closed form.
        return not self.softmax_after_subtract

    @property
    def has_affine_rate(self):  # type: ignore[override]
        return not self.softmax_after_subtract

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

    def exact_step(self, W, k_raw, v_raw, beta, h, forget=None):
        """W(t + h) for inputs constant over [t, t + h] (see `LearningRule.exact_step`).

        Arguments:
            W: (..., d_v, d_k) fast weights at t.
            k_raw: (..., d_k) key pre-activations, constant over the step.
            v_raw: (..., d_v) value pre-activations, constant over the step.
            beta: (..., 1) learning-rate pre-activations, constant over the step.
            h: step length, a number or a tensor broadcasting with ``beta`` (..., 1).
            forget: (..., 1) the forget rate λ >= 0, or None: no forget gate.

        Returns:
            W(t + h), shape (..., d_v, d_k).

        Raises:
            NotImplementedError: with ``softmax_after_subtract`` (no closed form).
        """
        if self.softmax_after_subtract:
            raise NotImplementedError("Oja(softmax_after_subtract=True) has no closed-form step: softmax(k_raw − Wᵀv) "
                                      "is not affine in W")
        return super().exact_step(W, k_raw, v_raw, beta, h, forget)

    def __repr__(self):
        return f"Oja(softmax_after_subtract={self.softmax_after_subtract})"


class Delta(LearningRule):
    """The delta rule (paper Eq. 21 bottom, App. A Eq. 32).

    Arguments:
        post: False gives "pre-delta", σ(β)(tanh(v_raw) − W k) kᵀ; True gives "post-delta",
            σ(β) tanh(v_raw − W k) kᵀ, which the paper found crucial for sequences over 4,000 steps.
    """

    def __init__(self, post: bool = False):
        self.post = bool(post)

    @property
    def name(self):  # type: ignore[override]
        return "delta-post" if self.post else "delta"

    def rate(self, W, k_raw, v_raw, beta):
        """dW/ds = σ(β)(tanh(v_raw) − W k) kᵀ (pre) or σ(β) tanh(v_raw − W k) kᵀ (post).

        Arguments:
            W: (..., d_v, d_k) fast weights, or None for W = 0.
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.

        Returns:
            dW/ds of shape (..., d_v, d_k).
        """
        return self.rate_from_features(W, *self.rate_features(k_raw, v_raw, beta))

    def rate_features(self, k_raw, v_raw, beta):
        """(k, v, σ(β)): v = tanh(v_raw) for pre-Delta, v_raw itself for post-Delta.

        Arguments:
            k_raw: (..., d_k) key pre-activations.
            v_raw: (..., d_v) value pre-activations.
            beta: (..., 1) learning-rate pre-activations.

        Returns:
            ``(k, v, c)``: (..., d_k), (..., d_v) and (..., 1).
        """
        return self.activate_key(k_raw), v_raw if self.post else torch.tanh(v_raw), torch.sigmoid(beta)

    def rate_from_features(self, W, k, v, c):
        """c (v − W k) kᵀ (pre) or c tanh(v − W k) kᵀ (post) from the features of `rate_features`.

        Arguments:
            W: (..., d_v, d_k) fast weights, or None for W = 0.
            k: (..., d_k) keys.
            v: (..., d_v) values (pre-activations for post-Delta).
            c: (..., 1) σ(β).

        Returns:
            dW/ds of shape (..., d_v, d_k).
        """
        recalled = 0.0 if W is None else (W @ k.unsqueeze(-1)).squeeze(-1)  # W k, (..., d_v)
        error = torch.tanh(v - recalled) if self.post else v - recalled
        return (c * error).unsqueeze(-1) * k.unsqueeze(-2)

    @property
    def has_affine_rate(self):  # type: ignore[override]
        return not self.post

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

    def post_step_inputs(self, k_raw, v_raw, beta, h):
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
        k = self.activate_key(k_raw)
        norm_sq = (k * k).sum(-1, keepdim=True)
        return k, v_raw, -torch.sigmoid(beta) * norm_sq * h, 1.0 / norm_sq

    @staticmethod
    def post_step(W, k, v_raw, log_decay, inv_norm_sq):
        """Post-Delta's exact step: W + (e₀ − e_h) kᵀ/‖k‖², e₀ = v_raw − W k, e_h = asinh(sinh(e₀) e^{−c‖k‖²h}).

        The error e = v_raw − W k obeys de/ds = −c‖k‖² tanh(e) element-wise, and W changes only along kᵀ.

        Arguments:
            W: (..., d_v, d_k) fast weights at the start of the step.
            k: (..., d_k) keys, from `post_step_inputs`.
            v_raw: (..., d_v) value pre-activations, from `post_step_inputs`.
            log_decay: (..., 1) −c‖k‖²h, from `post_step_inputs`.
            inv_norm_sq: (..., 1) 1/‖k‖², from `post_step_inputs`.

        Returns:
            W after the step, shape (..., d_v, d_k).
        """
        e0 = v_raw - (W @ k.unsqueeze(-1)).squeeze(-1)
        change = (e0 - relax_error(e0, log_decay)) * inv_norm_sq
        return W + change.unsqueeze(-1) * k.unsqueeze(-2)

    def exact_step(self, W, k_raw, v_raw, beta, h, forget=None):
        """W(t + h) for inputs constant over [t, t + h]: the affine step for pre-Delta, `post_step` for
        post-Delta (see `LearningRule.exact_step`).

        Arguments:
            W: (..., d_v, d_k) fast weights at t.
            k_raw: (..., d_k) key pre-activations, constant over the step.
            v_raw: (..., d_v) value pre-activations, constant over the step.
            beta: (..., 1) learning-rate pre-activations, constant over the step.
            h: step length, a number or a tensor broadcasting with ``beta`` (..., 1).
            forget: (..., 1) the forget rate λ >= 0, or None: no forget gate (post-Delta has no closed form
                with one).

        Returns:
            W(t + h), shape (..., d_v, d_k).

        Raises:
            NotImplementedError: post-Delta with a forget gate.
        """
        if not self.post:
            return super().exact_step(W, k_raw, v_raw, beta, h, forget)
        if forget is not None:
            raise NotImplementedError("post-Delta with a forget gate has no closed-form step: tanh(v − W k) and the "
                                      "decay of W's other directions do not separate")
        return self.post_step(W, *self.post_step_inputs(k_raw, v_raw, beta, h))

    def __repr__(self):
        return f"Delta(post={self.post})"


RULE_NAMES = ("hebb", "oja", "delta", "delta-post")


def make_rule(rule: str | LearningRule, **options) -> LearningRule:
    """A rule from its name or a rule object.

    Arguments:
        rule: one of `RULE_NAMES` ("hebb", "oja", "delta", "delta-post"), or a `LearningRule`
            (returned unchanged; options are then refused).
        **options: constructor arguments of the named rule's class.

    Returns:
        The `LearningRule`.

    Raises:
        ValueError: an unknown name, or options given with a rule object.
    """
    if isinstance(rule, LearningRule):
        if options:
            raise ValueError(f"options {sorted(options)} given together with a rule object {rule!r}")
        return rule
    if rule == "hebb":
        return Hebb(**options)
    if rule == "oja":
        return Oja(**options)
    if rule == "delta":
        return Delta(post=False, **options)
    if rule == "delta-post":
        return Delta(post=True, **options)
    raise ValueError(f"rule must be one of {RULE_NAMES} or a LearningRule, got {rule!r}")
