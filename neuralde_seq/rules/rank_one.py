"""Rank-one affine maps of the fast weights: the exact step (`RankOneUpdate`) and the rate (`RankOneRate`) of the
affine rules (Hebb, Oja, pre-Delta), which the solvers compose over whole sequences
(docs/equations.md#closed-forms-on-constant-inputs), and `_relaxing_update`, the exact step of a relaxing rule.
"""

from __future__ import annotations

import dataclasses

import torch

from .relaxation import relaxation_rate

__all__ = ["RankOneUpdate", "RankOneRate"]


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
