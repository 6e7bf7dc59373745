"""Oja's rule, dW/ds = σ(β) v (k − Wᵀv)ᵀ: on Wᵀ, a relaxation towards k along v."""

from __future__ import annotations

import torch

from .base import _AFFINE, LearningRule
from .rank_one import RankOneRate, _relaxing_update

__all__ = ["Oja"]


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
    def capabilities(self):
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
        return (
            "Oja(softmax_after_subtract=True) has no closed-form step: softmax(k_raw − Wᵀv) is not affine in W"
            if self.softmax_after_subtract
            else super().exact_step_refusal(forget_gate)
        )

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
