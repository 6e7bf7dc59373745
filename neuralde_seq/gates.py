"""Chrono initialisation of gate biases, shared by every gated model (the time-warp gated RNN, the GRU-type
baselines, the CT-FWPs' learning-rate and forget gates).

A gate σ(b) multiplies a rate, and a unit with gate value g forgets (or writes) over about 1/g time units. The
Geometric Deep Learning chapter "Grids" derives the gate as the time warping derivative dτ/dt; Tallec and
Ollivier (2018) initialise the biases so that the forgetting times spread over the dependency ranges expected,
2 to T_max (`chrono_bias`; docs/equations.md#forget-gate).
"""

from __future__ import annotations

import math

import torch

__all__ = ["chrono_bias", "check_t_max"]


def check_t_max(name: str, value) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is a finite number > 2 (a dependency range T_max).

    Arguments:
        name: the argument's name, for the message.
        value: the value given.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 2:
        raise ValueError(f"{name} must be a finite number > 2 (the longest dependency range), got {value!r}")


def chrono_bias(
    size,
    t_max: float,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Chrono initialisation of gate biases (Tallec and Ollivier 2018): b = log(u), u ~ U(1, t_max − 1).

    The Geometric Deep Learning chapter "Grids" derives that a gated RNN's gate plays the time warping
    derivative dτ/dt and that a unit forgets over about 1/gate steps; these biases spread the forgetting times
    of a *forget* gate σ(b) over 2 to ``t_max`` steps; an update gate, a learning rate or a forget *rate* takes
    −b (see the `neuralde_seq.models.gating` module docstring).

    Arguments:
        size: the shape of the result, an int or a tuple of ints (e.g. ``hidden``).
        t_max: the longest dependency range, in steps (or time units); a number > 2.
        generator: a ``torch.Generator`` for reproducible samples; None (default): torch's global one.
        dtype: a floating dtype of the result; None (default): torch's default dtype.
        device: the device of the result; None (default): the CPU (or torch's default device).

    Returns:
        A tensor of shape ``size`` with values in [0, log(t_max − 1)].

    Raises:
        ValueError: ``t_max`` is not a finite number > 2.
    """
    check_t_max("t_max", t_max)
    u = torch.empty(size, dtype=dtype, device=device)
    if not u.is_floating_point():
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    u.uniform_(1.0, float(t_max) - 1.0, generator=generator)
    return u.log_()
