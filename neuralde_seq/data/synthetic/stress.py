"""Synthetic stress tasks of paper 000 (CKConv, Sec. 5 "Stress experiments", App. C): copy memory and the
adding problem, each with a sequence-length option.

Both generators return a `SyntheticSequences` in the toolkit's data convention (docs/design.md#data-conventions):
``times`` (N, L) on the integer grid 0, 1, ..., L − 1, ``values`` (N, L, C), fully observed (no NaN), and ``targets``.
Every sample has the same length L, so ``lengths`` is L for all of them; build the model's input with
``Observations.from_tensors(data.times, data.values)`` or
``neuralde_seq.models.model_inputs(name, data.times, data.values)``.

Randomness comes from a ``torch.Generator``: pass ``seed`` (a fresh generator seeded with it) or
``generator`` (drawn from, and advanced, in place: drawing a training set and then a test set from one
generator gives two different, reproducible sets), not both; with neither, torch's global generator is
used, as ``torch.rand`` does. The tensors are on the CPU (move them with ``.to``).

Copy memory (paper 000 App. C, after Hochreiter & Schmidhuber 1997, in the form of Bai et al. 2018's TCN
benchmark, whose GRU/TCN rows paper 000 Tab. 2 reports). For a blank length T and a memory of M = 10
symbols, a sequence has T + 2M digits:

    position:  0 .. M−1        M .. M+T−2       M+T−1 .. T+2M−1
    input:     s_1 .. s_M      0 (T − 1 blanks)  9 (M + 1 markers)
    target:    0 ................................. 0 at the first T + M positions, then s_1 .. s_M

with s_i drawn uniformly from {1, ..., 8} (``num_symbols`` = 8; blank 0, marker ``num_symbols + 1``). The
first marker tells the model to start recalling: the target is 0 everywhere except the last M positions,
where it is the M symbols in their original order. Classes: 0 .. num_symbols + 1 (10 by default); the
input is one channel holding the digit's value, as in Bai et al.'s code.

Adding problem (paper 000 App. C, after Hochreiter & Schmidhuber 1997, in the form of Le et al. 2015 and
Arjovsky et al. 2016). A sequence of length T has two channels: channel 0 holds values drawn uniformly
from [0, 1); channel 1 is 0 except at exactly two marked positions, where it is 1. The target is the sum
of the two marked values. ``markers="halves"`` (default) puts one mark uniformly in the first half,
positions [0, ⌊T/2⌋), and one uniformly in the second half, [⌊T/2⌋, T), so the first marked value must be
held for about T/2 steps or more; ``markers="anywhere"`` draws two distinct positions uniformly over the
whole sequence, as the TCN benchmark code of Bai et al. does. (Hochreiter & Schmidhuber's own first
version differs again: values in [−1, 1], marks among the first 10 and the first T/2 − 1 positions,
target 0.5 + (X1 + X2)/4; it is not implemented.) The target is the sum of two independent U[0, 1)
values, mean 1 and variance 1/6, so always predicting 1 has mean squared error 1/6 ≈ 0.167
(`ADDING_TRIVIAL_MSE`; paper 000 quotes "approx. 0.17", App. C "about 0.1767").

Warped adding (`warped_adding`; the benchmark task ``warped-adding`` of `neuralde_seq.data.protocols`): the adding
problem with events whose durations are time-warped per sample, as a classification task. Definition and the
reasoning behind it in the function's docstring.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "SyntheticSequences",
    "copy_memory",
    "adding_problem",
    "warped_adding",
    "ADDING_TRIVIAL_MSE",
    "ADDING_MARKERS",
    "WARPED_ADDING_CLASSES",
]

ADDING_TRIVIAL_MSE = 1.0 / 6.0
"""Expected mean squared error of always predicting 1 on the adding problem (variance of U[0,1) + U[0,1))."""

ADDING_MARKERS = ("halves", "anywhere")

WARPED_ADDING_CLASSES = ("sum < 1", "sum > 1")
"""Class names of `warped_adding`: class 1 when the two marked values add up to more than 1."""


class SyntheticSequences(NamedTuple):
    """A generated data set of N sequences of length L (see the module docstring).

    Attributes:
        times: (N, L) float32, the grid 0, 1, ..., L − 1 in every row.
        values: (N, L, C) float32, fully observed inputs.
        targets: copy memory: (N, L) long class index per position; adding problem: (N,) float32; warped
            adding: (N,) long class index (`WARPED_ADDING_CLASSES`).
    """

    times: torch.Tensor
    values: torch.Tensor
    targets: torch.Tensor

    @property
    def observations(self):
        """The inputs without the targets, as `Observations` (validated)."""
        from ...observations import Observations

        return Observations.from_tensors(self.times, self.values)


def _check_count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def _generator(seed: int | None, generator: torch.Generator | None) -> torch.Generator | None:
    if seed is not None and generator is not None:
        raise ValueError("pass either seed or generator, not both")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        if generator.device.type != "cpu":
            raise ValueError(
                f"generator must be a CPU generator (the data are drawn on the CPU), got {generator.device}"
            )
        return generator
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        return torch.Generator().manual_seed(seed)
    return None


def _grid_times(num_samples: int, length: int) -> torch.Tensor:
    return torch.arange(length, dtype=torch.float32).expand(num_samples, length).contiguous()


def copy_memory(
    num_samples: int,
    length: int,
    *,
    memory: int = 10,
    num_symbols: int = 8,
    seed: int | None = None,
    generator: torch.Generator | None = None,
) -> SyntheticSequences:
    """The copy-memory task: N sequences of T + 2·memory digits (layout in the module docstring).

    Arguments:
        num_samples: N, number of sequences (>= 1).
        length: T, the blank length (>= 1): T − 1 blanks separate the symbols from the first marker, and
            the symbols are recalled T + memory steps after they were shown. Sequence length T + 2·memory.
        memory: number of symbols to remember (paper: 10).
        num_symbols: symbols are drawn uniformly from 1..num_symbols (paper: 8); the blank is 0 and the
            marker num_symbols + 1, so there are num_symbols + 2 classes.
        seed: seed of a fresh ``torch.Generator`` to draw from (not with ``generator``); default None.
        generator: a CPU ``torch.Generator`` to draw from, advanced in place (not with ``seed``); with neither,
            torch's global generator is used (module docstring).

    Returns:
        `SyntheticSequences` with times (N, T + 2·memory), values (N, T + 2·memory, 1) holding the
            digits as floats, targets (N, T + 2·memory) long.
    """
    _check_count("num_samples", num_samples, 1)
    _check_count("length", length, 1)
    _check_count("memory", memory, 1)
    _check_count("num_symbols", num_symbols, 1)
    gen = _generator(seed, generator)
    symbols = torch.randint(1, num_symbols + 1, (num_samples, memory), generator=gen)
    digits = torch.cat(
        [
            symbols,
            torch.zeros(num_samples, length - 1, dtype=torch.long),
            torch.full((num_samples, memory + 1), num_symbols + 1, dtype=torch.long),
        ],
        dim=1,
    )
    targets = torch.cat([torch.zeros(num_samples, length + memory, dtype=torch.long), symbols], dim=1)
    return SyntheticSequences(
        _grid_times(num_samples, digits.shape[1]), digits.to(torch.float32).unsqueeze(-1), targets
    )


def adding_problem(
    num_samples: int,
    length: int,
    *,
    markers: str = "halves",
    seed: int | None = None,
    generator: torch.Generator | None = None,
) -> SyntheticSequences:
    """The adding problem: N sequences of length T with a value and a marker channel (module docstring).

    Arguments:
        num_samples: N, number of sequences (>= 1).
        length: T, the sequence length (>= 2).
        markers: "halves" (one mark in each half; default) or "anywhere" (two distinct positions).
        seed: seed of a fresh ``torch.Generator`` to draw from (not with ``generator``); default None.
        generator: a CPU ``torch.Generator`` to draw from, advanced in place (not with ``seed``); with neither,
            torch's global generator is used (module docstring).

    Returns:
        `SyntheticSequences` with times (N, T), values (N, T, 2) (channel 0: values in [0, 1),
            channel 1: the 0/1 marks, exactly two 1s per sequence), targets (N,) float32, the sum of the two
            marked values.
    """
    _check_count("num_samples", num_samples, 1)
    _check_count("length", length, 2)
    if markers not in ADDING_MARKERS:
        raise ValueError(f"markers must be one of {ADDING_MARKERS}, got {markers!r}")
    gen = _generator(seed, generator)
    numbers = torch.rand(num_samples, length, generator=gen)
    if markers == "halves":
        half = length // 2
        first = torch.randint(0, half, (num_samples,), generator=gen)
        second = torch.randint(half, length, (num_samples,), generator=gen)
    else:
        # A uniform ordered pair of distinct positions: the second is drawn from the T − 1 others.
        first = torch.randint(0, length, (num_samples,), generator=gen)
        second = torch.randint(0, length - 1, (num_samples,), generator=gen)
        second = second + (second >= first).long()
    rows = torch.arange(num_samples)
    marks = torch.zeros(num_samples, length)
    marks[rows, first] = 1.0
    marks[rows, second] = 1.0
    targets = numbers[rows, first] + numbers[rows, second]
    return SyntheticSequences(_grid_times(num_samples, length), torch.stack([numbers, marks], dim=-1), targets)


def warped_adding(
    num_samples: int,
    num_events: int = 16,
    *,
    event_duration: int = 4,
    warp_strength: float = 0.5,
    modes: int = 3,
    seed: int | None = None,
    generator: torch.Generator | None = None,
) -> SyntheticSequences:
    """The adding problem on a warped clock, as a classification task (the ``warped-adding`` benchmark task).

    **Definition.** A sample is a sequence of K = ``num_events`` events. Event k holds a value v_k ~ U[0, 1) and lasts
    from b_k to b_{k+1}, with event boundaries b_k = G · τ(k / K) on the clock [0, G], G = K · ``event_duration``, where
    τ is the sample's own smooth random time warp (`neuralde_seq.data.transforms.time_warps`:
    τ(u) = u + Σ_{j=1..modes} a_j sin(jπu)/(jπ), Σ |a_j| = ``warp_strength``, so every event lasts between
    (1 − warp_strength) and (1 + warp_strength) times ``event_duration``). Two events are marked: one drawn uniformly
    among the first ⌊K/2⌋ events, one among the others (the adding problem's "halves"). The sample is observed on the
    common grid t = 0, 1, ..., G − 1: channel 0 is the value of the event in progress at t (the event k with
    b_k <= t < b_{k+1}), channel 1 is 1 while a marked event is in progress and 0 otherwise. Every event covers at least
    one grid point (its duration is at least ``event_duration · (1 − warp_strength)`` >= 1). The label is 1 when the two
    marked values add up to more than 1, else 0 (`WARPED_ADDING_CLASSES`): the adding problem's target thresholded at
    its median, so the classes are balanced; chance is 50 %, and a model that reads only the second marked value
    (predicting 1 when it exceeds 1/2) is right 75 % of the time: above that it must carry the first value across the
    gap.

    **Why a warp, and why gating should help.** The first marked value has to be held from its event to the
    second mark and then to the end, over about G/2 to G time units, and each sample's warp changes how long
    the events and the gaps last (by up to ``warp_strength`` in local speed), so the task rewards a memory
    that does not depend on the speed of the clock. The Geometric Deep Learning chapter "Grids" (paper 003)
    shows that such invariance to time warps calls for a gate that scales the rate of the hidden state,
    dh/dt = g ⊙ (f − h) with g playing dτ/dt (the model ``warp-gated-ode``): a unit with a small gate keeps
    its value for about 1/g time units, and one whose gate opens only while a mark is on latches the marked
    value whatever the event's duration. The ungated field dh/dt = f − h forgets within about one time unit
    unless its recurrent weights build an attractor. Chrono initialisation (``chrono_t_max`` = G) starts the
    gates at 1/u, u spread over 2 to G time units, so units with memories as long as the dependency exist from
    the first step instead of having to be learnt. Test-time warps of the clock (the runner's ``time_warp``
    variants: uniform 1/4 to 4, smooth, piecewise) then change the durations beyond the training range; a
    latching gated unit is expected to degrade least, the chapter's caveat being that class invariance does
    not promise zero-shot transfer to an unseen warp.

    The grid is the same for every sample, so controls parametrised by time (the registry's default) can be
    built from these samples; the warp is in the timing of the content, not in the observation times.

    Arguments:
        num_samples: N, number of sequences (>= 1).
        num_events: K, events per sequence (>= 2).
        event_duration: the mean duration of an event in grid steps (a positive integer); G = K · event_duration.
        warp_strength: the bound on how far each sample's local clock speed leaves 1, in [0, 1), with
            event_duration · (1 − warp_strength) >= 1 (every event covers a grid point); 0: every event lasts
            exactly event_duration steps.
        modes: the number of sine terms of each sample's warp (a positive integer, default 3).
        seed: seed of a fresh ``torch.Generator`` to draw from (not with ``generator``); default None.
        generator: a CPU ``torch.Generator`` to draw from, advanced in place (not with ``seed``); with neither,
            torch's global generator is used (module docstring).

    Returns:
        `SyntheticSequences` with times (N, G) float32, the grid 0..G − 1 in every row; values (N, G, 2) float32
            (channel 0: the value in progress, channel 1: the 0/1 mark); targets (N,) long, the class (1: the two
            marked values sum to more than 1).

    Raises:
        ValueError: an argument out of range (named).
    """
    from ..transforms.time_warps import smooth_coefficients, smooth_warp

    _check_count("num_samples", num_samples, 1)
    _check_count("num_events", num_events, 2)
    _check_count("event_duration", event_duration, 1)
    _check_count("modes", modes, 1)
    if isinstance(warp_strength, bool) or not isinstance(warp_strength, (int, float)) or not 0 <= warp_strength < 1:
        raise ValueError(f"warp_strength must be a number in [0, 1), got {warp_strength!r}")
    if event_duration * (1 - warp_strength) < 1:
        raise ValueError(
            f"event_duration · (1 − warp_strength) must be at least 1 so that every event covers a grid "
            f"point, got {event_duration} · (1 − {warp_strength}) = {event_duration * (1 - warp_strength)}"
        )
    gen = _generator(seed, generator)
    grid = num_events * event_duration
    coefficients = smooth_coefficients(num_samples, float(warp_strength), modes, gen)
    event_values = torch.rand(num_samples, num_events, generator=gen)
    half = num_events // 2
    first = torch.randint(0, half, (num_samples,), generator=gen)
    second = torch.randint(half, num_events, (num_samples,), generator=gen)
    u = torch.arange(num_events + 1, dtype=torch.float64).expand(num_samples, -1) / num_events
    boundaries = grid * (u + smooth_warp(u, coefficients))  # (N, K + 1), b_0 = 0, b_K = G
    clock = torch.arange(grid, dtype=torch.float64).expand(num_samples, -1).contiguous()
    # the event in progress at t: the number of inner boundaries b_1..b_{K-1} at or before t
    event = torch.searchsorted(boundaries[:, 1:-1].contiguous(), clock, right=True)
    rows = torch.arange(num_samples).unsqueeze(1)
    values = event_values[rows, event]
    marks = ((event == first.unsqueeze(1)) | (event == second.unsqueeze(1))).to(torch.float32)
    flat = torch.arange(num_samples)
    labels = (event_values[flat, first] + event_values[flat, second] > 1).long()
    return SyntheticSequences(_grid_times(num_samples, grid), torch.stack([values, marks], dim=-1), labels)
