"""The closed-form pieces of the relaxing rules' exact steps, written to neither overflow nor cancel
(docs/equations.md#closed-forms-on-constant-inputs).

- `relaxation_rate`: (1 − e^{−c·n·h}) / n, the learning rate of one exact step of pre-Delta and Oja (and, with c = 1
  and n = λ, of a forget gate), with hand-written gradients (`_RelaxationRate`);
- `relax_error`: asinh(sinh(e₀)·r) without overflow for large |e₀|, post-Delta's error at the end of a step.
"""

from __future__ import annotations

import math

import torch

__all__ = ["relaxation_rate", "relax_error"]


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
        return torch.where(
            small, a * _RelaxationRate._horner(_RelaxationRate.PHI, x_small), -torch.expm1(-safe_x) / safe_norm
        )

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
            g = torch.where(
                small,
                decay * _RelaxationRate._horner(_RelaxationRate.G_TERMS, x_small),
                ((1 - decay) - x_large * decay) / x_large / x_large,
            )
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
    large = torch.where(
        positive, log_y_pos + torch.log1p(torch.sqrt(1 + torch.exp(-2 * log_y_pos))), torch.asinh(torch.exp(log_y_neg))
    )
    return torch.where(e0.abs() > _LARGE_ERROR, torch.sign(e0) * large, direct)
