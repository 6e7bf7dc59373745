"""Learning rules: how a fast weight matrix changes, written once for every form.

Convention (shared/DESIGN.md §3): per head the fast weight is ``W`` of shape (d_v, d_k) and is read as
``y = W q``. A rule maps the current fast weights and the slow net's outputs at one instant to the rate
of change ``dW/ds``::

    Hebb         c · v kᵀ
    Oja          c · v (k − Wᵀv)ᵀ
    Delta, pre   c · (v − W k) kᵀ            with v = tanh(v_raw)
    Delta, post  c · tanh(v_raw − W k) kᵀ

where ``k = softmax(k_raw)``, ``v = tanh(v_raw)`` and ``c = σ(β)``. The same rule object is used by the
direct neural ODE, neural CDE and log-signature RDE fields (:mod:`neuralde_seq.fields`), so each rule
exists exactly once. A discrete recurrent FWP step is ``W + rate(...)``.

All tensors carry arbitrary leading batch dimensions ``(...)``; heads are one of them.
"""
from __future__ import annotations

import torch

__all__ = ["LearningRule", "Hebb", "Oja", "Delta", "make_rule", "RULE_NAMES"]


class LearningRule:
    """Base class. Subclasses implement :meth:`rate`.

    Attributes:
        name: short name used in configurations (``"hebb"``, ``"oja"``, ``"delta"``, ``"delta-post"``).
        uses_state: whether ``dW/ds`` depends on ``W`` (False only for Hebb).
    """

    name: str = ""
    uses_state: bool = True

    def activate_key(self, k_raw: torch.Tensor) -> torch.Tensor:
        """Keys (and queries) live on the simplex: softmax over the last dimension (paper App. A, Eq. 29)."""
        return torch.softmax(k_raw, dim=-1)

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

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Hebb(LearningRule):
    """Purely additive rule, dW/ds = σ(β) v kᵀ (paper Eq. 21, top). Linear Transformer in the limit."""

    name = "hebb"
    uses_state = False

    def rate(self, W, k_raw, v_raw, beta):
        k = self.activate_key(k_raw)
        v = torch.tanh(v_raw)
        return torch.sigmoid(beta).unsqueeze(-1) * v.unsqueeze(-1) * k.unsqueeze(-2)


class Oja(LearningRule):
    """Oja's rule, dW/ds = σ(β) v (k − Wᵀv)ᵀ (paper Eq. 21, middle).

    Arguments:
        softmax_after_subtract: False (default) follows the paper, k = softmax(k_raw) and then k − Wᵀv.
            True reproduces the public code, which applies the softmax to (k_raw − Wᵀv) instead
            (shared/DESIGN.md §3), for reproducing its numbers.
    """

    name = "oja"

    def __init__(self, softmax_after_subtract: bool = False):
        self.softmax_after_subtract = bool(softmax_after_subtract)

    def rate(self, W, k_raw, v_raw, beta):
        v = torch.tanh(v_raw)
        if W is None:
            k = self.activate_key(k_raw)
        else:
            recalled = (W.transpose(-1, -2) @ v.unsqueeze(-1)).squeeze(-1)  # Wᵀv, (..., d_k)
            if self.softmax_after_subtract:
                k = self.activate_key(k_raw - recalled)
            else:
                k = self.activate_key(k_raw) - recalled
        return torch.sigmoid(beta).unsqueeze(-1) * v.unsqueeze(-1) * k.unsqueeze(-2)

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
        k = self.activate_key(k_raw)
        recalled = 0.0 if W is None else (W @ k.unsqueeze(-1)).squeeze(-1)  # W k, (..., d_v)
        if self.post:
            error = torch.tanh(v_raw - recalled)
        else:
            error = torch.tanh(v_raw) - recalled
        return torch.sigmoid(beta).unsqueeze(-1) * error.unsqueeze(-1) * k.unsqueeze(-2)

    def __repr__(self):
        return f"Delta(post={self.post})"


RULE_NAMES = ("hebb", "oja", "delta", "delta-post")


def make_rule(rule: str | LearningRule, **options) -> LearningRule:
    """A rule from its name (one of :data:`RULE_NAMES`) or a rule object (returned unchanged)."""
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
