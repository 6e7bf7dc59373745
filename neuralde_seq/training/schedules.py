"""Learning-rate schedules of `neuralde_seq.training.fit.fit`: the rate of each training step as a function of
the step count alone, so that a resumed run continues its schedule exactly."""

from __future__ import annotations

import math

__all__ = ["SCHEDULES", "WARMUP_FRACTION", "scheduled_lr"]

SCHEDULES = ("constant", "cosine")
WARMUP_FRACTION = 0.05  # "cosine": the share of the run's steps spent warming up linearly


def scheduled_lr(lr: float, schedule: str, step: int, total_steps: int) -> float:
    """The learning rate of training step ``step`` (0-based) of ``total_steps``.

    Arguments:
        lr: the peak (and, for "constant", the only) learning rate.
        schedule: "constant", or "cosine": a linear warm-up from lr/w to lr over the first w =
            max(1, round(0.05 · total_steps)) steps, then a half cosine from lr down towards 0 at ``total_steps``.
        step: the step, 0 <= step.
        total_steps: the run's planned steps (epochs × steps per epoch), >= 1.

    Returns:
        The learning rate, > 0 for every step before ``total_steps``.
    """
    if schedule == "constant":
        return lr
    if schedule != "cosine":
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    warmup = max(1, round(WARMUP_FRACTION * total_steps))
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return lr * 0.5 * (1.0 + math.cos(math.pi * progress))
