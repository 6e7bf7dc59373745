"""Hebb's rule, dW/ds = σ(β) v kᵀ: purely additive, affine in W (it does not read W)."""

from __future__ import annotations

import torch

from .base import _AFFINE, LearningRule
from .rank_one import RankOneRate, RankOneUpdate
from .relaxation import relaxation_rate

__all__ = ["Hebb"]


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
        return RankOneUpdate(
            k, v, None, c * relaxation_rate(torch.ones_like(c), forget, h), scale=torch.exp(-forget * h)
        )
