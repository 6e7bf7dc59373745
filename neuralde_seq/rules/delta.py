"""The delta rule: pre-Delta, σ(β) (v − W k) kᵀ (affine in W), and post-Delta, σ(β) tanh(v_raw − W k) kᵀ (a
nonlinear exact step, taken step by step)."""

from __future__ import annotations

import torch

from .base import _AFFINE, STEPWISE_STEP, LearningRule
from .rank_one import RankOneRate, _relaxing_update
from .relaxation import relax_error

__all__ = ["Delta"]


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
    def name(self):
        return "delta-post" if self.post else "delta"

    @property
    def title(self):
        return "post-Delta" if self.post else "Delta"

    @property
    def capabilities(self):
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
            return (
                "post-Delta with a forget gate has no closed-form step: tanh(v − W k) and the decay of W's other "
                "directions do not separate"
            )
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
