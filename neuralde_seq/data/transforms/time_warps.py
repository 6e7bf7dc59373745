"""Time warps of a dataset's observation times: uniform rescaling, smooth random warps, piecewise-linear warps.

A time warp τ is a strictly increasing map of time (the Geometric Deep Learning chapter "Grids", paper 003:
a model class is invariant to time warping if for every τ some model of the class processes the warped data
as the original model did the original data; gated RNNs are that class, `neuralde_seq.models.gating`). Here a
warp acts on the observation ``times`` of an `IrregularDataset`; the values (NaN included), lengths, labels
and static features are unchanged, and the order of the times is kept exactly. Every kind is a map of a
sample's observation window [t0, T] (t0 its first and T its last valid time) written with the normalised time
u = (t − t0) / (T − t0) ∈ [0, 1]:

    t' = t0 + factor · (T − t0) · τ(u),   τ(0) = 0, τ(1) = 1, τ' > 0,

so t0 stays, and T stays when ``factor`` is 1 (``factor`` > 0 stretches or shrinks the whole window).

- ``"uniform"``: τ(u) = u, i.e. t' = t0 + factor · (t − t0): every gap multiplied by ``factor``.
- ``"smooth"``: τ(u) = u + Σ_{k=1..K} a_k sin(kπu) / (kπ), K = ``modes``, with a_k = ``strength`` ·
  w_k / Σ_j |w_j| and w_k ~ U(−1, 1) / k (higher modes weaker). Then τ'(u) = 1 + Σ a_k cos(kπu) lies in
  [1 − strength, 1 + strength]: ``strength`` in [0, 1) bounds how far the local speed leaves 1 (0 is the
  identity), and the sum of the |a_k| is exactly ``strength``.
- ``"piecewise"``: [0, 1] cut into ``pieces`` equal parts; on part p the slope is s_p = r_p / mean(r), with
  r_p drawn log-uniformly in [1 / max_slope, max_slope]. τ is continuous, τ(0) = 0 and τ(1) = 1 (the slopes'
  mean is 1), each slope lies in [1 / max_slope², max_slope²] and any two differ by a factor of at most
  max_slope².

The random kinds draw their parameters from a ``torch.Generator`` seeded with ``seed`` (required: a warp is
reproducible), one draw per sample in the dataset's order (``per_sample=True``, the default: sample b's
window [t0_b, T_b] gets draw b), or one draw for the whole dataset (``per_sample=False``: τ maps the common
window [min t0, max T] onto itself and every sample's times go through the same map, so samples observed on
one time grid stay on one grid; a sample ending before the common T does not keep its own end).

**Controls parametrised by time need one grid.** `neuralde_seq.build_control` with ``parametrization="time"``
(the registry's default for every control-path model) needs every sample of a batch observed on one time grid.
A per-sample warp gives each sample its own times, so such a control cannot be built from it: use
``per_sample=False``, or parametrise the control by observation index (``parametrization="index"``; then only
the time channel sees the warp), or a model that reads observations directly (GRU-D, ODE-RNN, CKCNN, ...).
Uniform warps keep a common grid (samples on one grid share their t0).

**Channels derived from time.** No loader of the toolkit stores time in ``values``: the time channel of a
control is built from ``times`` by `build_control` (``time_channel=True``), so it follows the warp; UEA, the
embedded JapaneseVowels and Speech Commands carry the index or frame grid as ``times``; PhysioNet's hour grid
(``ICULOS``) is ``times`` and its observation-count channels (``intensity``) count observations in order, which
a monotone warp does not change. Static features are left as they are, including PhysioNet's ``HospAdmTime``
(hours from hospital to ICU admission, before the observation window that the warp maps). A dataset of one's
own that keeps a time-derived quantity in a value channel must warp that channel itself (or let the control
build it from ``times``).

**Padding.** Times after a sample's length are rebuilt by the datasets' convention: the grid continues from the
warped last time with the warped last step (a one-point sample keeps its padding's offsets from its first time);
the padded values stay NaN.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch

from ..base.datasets import IrregularDataset

__all__ = [
    "TimeWarp",
    "WARP_KINDS",
    "time_warp",
    "warp_times",
    "warp_parameters",
    "smooth_coefficients",
    "smooth_warp",
    "piecewise_warp",
]

WARP_KINDS = ("uniform", "smooth", "piecewise")
_KEYS = {
    "uniform": ("kind", "factor"),
    "smooth": ("kind", "strength", "modes", "seed", "per_sample", "factor"),
    "piecewise": ("kind", "pieces", "max_slope", "seed", "per_sample", "factor"),
}
_REQUIRED = {"uniform": ("factor",), "smooth": ("strength", "seed"), "piecewise": ("pieces", "seed")}
_DEFAULTS = {
    "smooth": {"modes": 3, "per_sample": True, "factor": 1.0},
    "piecewise": {"max_slope": 2.0, "per_sample": True, "factor": 1.0},
}


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _is_integer(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


@dataclasses.dataclass(frozen=True)
class TimeWarp:
    """A time warp of observation times (the kinds and their formulas are in the module docstring).

    Build one directly or from a mapping with `TimeWarp.from_dict` (the runner's ``time_warp:`` entries);
    apply it with `time_warp` or ``warp.apply(dataset)``. Options that a kind does not read must be left
    None; the defaults of the options a kind reads are filled in (``modes`` 3, ``max_slope`` 2,
    ``per_sample`` True, ``factor`` 1).

    Arguments:
        kind: one of `WARP_KINDS`: "uniform", "smooth" or "piecewise".
        factor: a positive number multiplying the window's length (uniform: required; the others: default 1,
            which keeps each window's end).
        strength: smooth: the bound on |τ' − 1|, a number in [0, 1) (required).
        modes: smooth: the number K of sine terms, a positive integer (default 3).
        pieces: piecewise: the number of equal parts of the window, a positive integer (required).
        max_slope: piecewise: raw slopes are drawn log-uniformly in [1 / max_slope, max_slope], a number >= 1
            (default 2).
        seed: smooth and piecewise: a non-negative integer seeding the draws (required).
        per_sample: smooth and piecewise: True (default): one draw per sample, on the sample's own window;
            False: one draw for the whole dataset, on the common window.

    Raises:
        ValueError: an unknown kind, a missing required option, an option the kind does not read, or a value
            out of its range, naming the option.
    """

    kind: str
    factor: float | None = None
    strength: float | None = None
    modes: int | None = None
    pieces: int | None = None
    max_slope: float | None = None
    seed: int | None = None
    per_sample: bool | None = None

    def __post_init__(self):
        checked = _check_fields({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, "TimeWarp")
        for key, value in checked.items():
            object.__setattr__(self, key, value)

    @classmethod
    def from_dict(cls, spec: TimeWarp | Mapping, where: str = "time_warp") -> TimeWarp:
        """A warp from a mapping such as ``{"kind": "smooth", "strength": 0.5, "seed": 0}``.

        Arguments:
            spec: a mapping with ``kind`` and the kind's options (see `TimeWarp`); unknown keys are refused.
                A `TimeWarp` is returned as it is.
            where: the name of the mapping in error messages (e.g. ``evaluate[2].time_warp``).

        Returns:
            The `TimeWarp`.

        Raises:
            ValueError: ``spec`` is not a mapping, has no or an unknown ``kind``, misses a required option,
                has a key the kind does not read, or a value out of range; the message names ``where.<key>``.
        """
        if isinstance(spec, TimeWarp):
            return spec
        if not isinstance(spec, Mapping):
            raise ValueError(
                f"{where} must be a mapping with a kind ({', '.join(WARP_KINDS)}) and its options, "
                f"got {type(spec).__name__} {spec!r}"
            )
        kind = spec.get("kind")
        if kind not in WARP_KINDS:
            raise ValueError(f"{where}.kind must be one of {', '.join(WARP_KINDS)}, got {kind!r}")
        unknown = [str(k) for k in spec if k not in _KEYS[kind]]
        if unknown:
            raise ValueError(
                f"{where}: key(s) {', '.join(repr(k) for k in unknown)} do not apply to a {kind} warp; "
                f"its keys: {', '.join(_KEYS[kind])}"
            )
        return cls(**_check_fields(dict(spec), where))

    def to_dict(self) -> dict:
        """The warp as plain data: ``kind`` and the options its kind reads (defaults filled in).

        Returns:
            A dict that `TimeWarp.from_dict` turns back into an equal warp.
        """
        return {key: getattr(self, key) for key in _KEYS[self.kind]}

    def label(self) -> str:
        """A short description for tables, e.g. ``"uniform x0.25"``, ``"smooth 0.5 (seed 0)"``.

        Returns:
            The text.
        """
        if self.kind == "uniform":
            return f"uniform x{self.factor:g}"
        text = f"smooth {self.strength:g}" if self.kind == "smooth" else f"piecewise {self.pieces} pieces"
        if self.factor != 1:
            text += f" x{self.factor:g}"
        return text + f" (seed {self.seed}{'' if self.per_sample else ', shared'})"

    def apply(self, dataset: IrregularDataset) -> IrregularDataset:
        """``time_warp(dataset, self)``.

        Arguments:
            dataset: the `IrregularDataset` whose times to warp.

        Returns:
            A new dataset with warped times (see `time_warp`).
        """
        return time_warp(dataset, self)


def _check_fields(fields: dict, where: str) -> dict:
    """A warp's options checked (errors name ``where.<option>``), with its kind's defaults filled in."""
    fields = {
        key: fields.get(key)
        for key in ("kind", "factor", "strength", "modes", "pieces", "max_slope", "seed", "per_sample")
    }
    kind = fields["kind"]
    if kind not in WARP_KINDS:
        raise ValueError(f"{where}.kind must be one of {', '.join(WARP_KINDS)}, got {kind!r}")
    for key, value in fields.items():
        if key not in _KEYS[kind] and value is not None:
            raise ValueError(f"{where}.{key} does not apply to a {kind} warp; its keys: {', '.join(_KEYS[kind])}")
    for key in _REQUIRED[kind]:
        if fields[key] is None:
            why = " (the warp is random: a seed makes it reproducible)" if key == "seed" else ""
            raise ValueError(f"{where}.{key} is required for a {kind} warp{why}")
    for key, value in _DEFAULTS.get(kind, {}).items():
        if fields[key] is None:
            fields[key] = value
    if not _is_number(fields["factor"]) or not fields["factor"] > 0:
        raise ValueError(f"{where}.factor must be a positive finite number, got {fields['factor']!r}")
    fields["factor"] = float(fields["factor"])
    if kind == "smooth":
        if not _is_number(fields["strength"]) or not 0 <= fields["strength"] < 1:
            raise ValueError(
                f"{where}.strength must be a number in [0, 1) (the bound on |dτ/du − 1|: 1 or more "
                f"could stop or reverse time), got {fields['strength']!r}"
            )
        fields["strength"] = float(fields["strength"])
        if not _is_integer(fields["modes"]) or fields["modes"] < 1:
            raise ValueError(f"{where}.modes must be a positive integer, got {fields['modes']!r}")
    if kind == "piecewise":
        if not _is_integer(fields["pieces"]) or fields["pieces"] < 1:
            raise ValueError(f"{where}.pieces must be a positive integer, got {fields['pieces']!r}")
        if not _is_number(fields["max_slope"]) or not fields["max_slope"] >= 1:
            raise ValueError(f"{where}.max_slope must be a finite number >= 1, got {fields['max_slope']!r}")
        fields["max_slope"] = float(fields["max_slope"])
    if kind != "uniform":
        if not _is_integer(fields["seed"]) or fields["seed"] < 0:
            raise ValueError(f"{where}.seed must be a non-negative integer, got {fields['seed']!r}")
        if not isinstance(fields["per_sample"], bool):
            raise ValueError(f"{where}.per_sample must be true or false, got {fields['per_sample']!r}")
    return fields


def warp_parameters(warp: TimeWarp | Mapping, num_draws: int) -> torch.Tensor | None:
    """The random parameters of a warp, drawn from a generator seeded with ``warp.seed`` (float64, CPU).

    Arguments:
        warp: a `TimeWarp` (or a mapping for `TimeWarp.from_dict`).
        num_draws: the number of draws: the number of samples for a per-sample warp, 1 for a shared one.

    Returns:
        None for a uniform warp; smooth: the sine coefficients a, (num_draws, modes), each row's absolute
            values summing to ``strength``; piecewise: the slopes s, (num_draws, pieces), each row's mean 1.
            Row b is the same whatever ``num_draws`` > b is (draws are made in order).

    Raises:
        ValueError: ``num_draws`` not a positive integer.
    """
    warp = TimeWarp.from_dict(warp)
    if not _is_integer(num_draws) or num_draws < 1:
        raise ValueError(f"num_draws must be a positive integer, got {num_draws!r}")
    if warp.kind == "uniform":
        return None
    # TimeWarp requires the seed of the random kinds and fills in their other options' defaults
    assert warp.seed is not None
    generator = torch.Generator().manual_seed(warp.seed)
    if warp.kind == "smooth":
        assert warp.strength is not None and warp.modes is not None
        return smooth_coefficients(num_draws, warp.strength, warp.modes, generator)
    assert warp.max_slope is not None and warp.pieces is not None
    log_range = math.log(warp.max_slope)
    raw = torch.exp((2 * torch.rand(num_draws, warp.pieces, generator=generator, dtype=torch.float64) - 1) * log_range)
    return raw / raw.mean(dim=1, keepdim=True)


def smooth_coefficients(
    num_draws: int, strength: float, modes: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Sine coefficients of smooth warps: a_k = strength · w_k / Σ_j |w_j|, w_k ~ U(−1, 1) / k (float64, CPU).

    Arguments:
        num_draws: the number of warps (rows), a positive integer.
        strength: the sum of each row's |a_k|, in [0, 1): the bound on |τ' − 1|.
        modes: K, the number of coefficients per row, a positive integer.
        generator: a CPU ``torch.Generator`` to draw from (advanced in place); None: torch's global one.

    Returns:
        (num_draws, modes) coefficients; the rows are drawn in order, so row b does not depend on num_draws.

    Raises:
        ValueError: an argument out of range (named).
    """
    if not _is_integer(num_draws) or num_draws < 1:
        raise ValueError(f"num_draws must be a positive integer, got {num_draws!r}")
    if not _is_integer(modes) or modes < 1:
        raise ValueError(f"modes must be a positive integer, got {modes!r}")
    if not _is_number(strength) or not 0 <= strength < 1:
        raise ValueError(f"strength must be a number in [0, 1), got {strength!r}")
    # uniform draws: torch.rand fills row after row whatever the size (torch.randn does not), so row b is the same
    # for any num_draws
    weights = 2 * torch.rand(num_draws, modes, generator=generator, dtype=torch.float64) - 1
    weights = weights / torch.arange(1, modes + 1, dtype=torch.float64)
    total = weights.abs().sum(dim=1, keepdim=True)
    return torch.where(total > 0, strength * weights / total.clamp_min(1e-300), torch.zeros_like(weights))


def smooth_warp(u: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """τ(u) − u = Σ_k a_k sin(kπu) / (kπ) of the smooth warp (module docstring): its displacement.

    Arguments:
        u: (N, M) normalised times in [0, 1].
        coefficients: (N, K) or (1, K) the a_k of each row (`warp_parameters`).

    Returns:
        (N, M) the displacement τ(u) − u, in u's dtype; exactly 0 at u = 0 and at u = 1.
    """
    k = torch.arange(1, coefficients.shape[1] + 1, dtype=u.dtype, device=u.device)
    waves = torch.sin(u.unsqueeze(-1) * (k * math.pi)) / (k * math.pi)
    displacement = (waves * coefficients.to(u).unsqueeze(1)).sum(dim=-1)
    # sin(kπ) is about 1e-16, not 0: the window's end is kept exactly
    return torch.where(u == 1, torch.zeros_like(displacement), displacement)


def piecewise_warp(u: torch.Tensor, slopes: torch.Tensor) -> torch.Tensor:
    """τ(u) − u of the piecewise-linear warp: τ has slope s_p on [p/P, (p+1)/P), τ(0) = 0.

    Arguments:
        u: (N, M) normalised times in [0, 1].
        slopes: (N, P) or (1, P) the slopes of each row, mean 1 (`warp_parameters`).

    Returns:
        (N, M) the displacement τ(u) − u, in u's dtype; exactly 0 at u = 0 and at u = 1.
    """
    slopes = slopes.to(u)
    pieces = slopes.shape[1]
    piece = torch.clamp(torch.floor(u * pieces), 0, pieces - 1).long()
    start = torch.cumsum(slopes, dim=1) / pieces - slopes / pieces  # τ at the start of each piece
    start, slope = (x.expand(u.shape[0], -1).gather(1, piece) for x in (start, slopes))
    displacement = start + slope * (u - piece.to(u) / pieces) - u
    return torch.where((u == 0) | (u == 1), torch.zeros_like(displacement), displacement)


def warp_times(times: torch.Tensor, lengths: torch.Tensor, warp: TimeWarp | Mapping) -> torch.Tensor:
    """Warped observation times (module docstring), computed in float64 and returned in ``times``' dtype.

    Arguments:
        times: (N, T) floating, strictly increasing in every row (padding included).
        lengths: (N,) long, each sample's number of valid times (1 <= length <= T).
        warp: a `TimeWarp` or a mapping for `TimeWarp.from_dict`.

    Returns:
        (N, T) the warped times, on ``times``' device: valid times t' = t0 + factor · (T − t0) · τ(u), the padding
            continuing from the last warped time with the last warped step (a one-point sample keeps its
            padding's offsets from its first time).

    Raises:
        ValueError: bad ``times`` / ``lengths`` shapes or values, or a warp whose times are no longer strictly
            increasing once rounded to ``times``' dtype (gaps below its resolution).
    """
    warp = TimeWarp.from_dict(warp)
    if not isinstance(times, torch.Tensor) or times.dim() != 2 or not times.is_floating_point():
        raise ValueError(
            f"times must be a floating tensor of shape (N, T), got "
            f"{tuple(times.shape) if isinstance(times, torch.Tensor) else type(times).__name__}"
        )
    n, width = times.shape
    if not isinstance(lengths, torch.Tensor) or lengths.shape != (n,) or lengths.dtype != torch.long:
        raise ValueError(f"lengths must be a long tensor of shape ({n},)")
    if n and (int(lengths.min()) < 1 or int(lengths.max()) > width):
        raise ValueError(f"lengths must lie in [1, {width}], got [{int(lengths.min())}, {int(lengths.max())}]")
    t = times.to(torch.float64)
    position = torch.arange(width, device=times.device).unsqueeze(0)
    valid = position < lengths.to(times.device).unsqueeze(1)
    first = t[:, 0]
    last = t.gather(1, (lengths.to(times.device) - 1).unsqueeze(1)).squeeze(1)
    if warp.kind == "uniform" or warp.per_sample:
        start, span = first.unsqueeze(1), (last - first).unsqueeze(1)
    else:
        start = first.min().reshape(1, 1)
        span = (last.max() - start).reshape(1, 1)
    # u in [0, 1] on the valid times; padding gets a placeholder (it is rebuilt below)
    u = torch.where(
        valid & (span > 0), (t - start) / torch.where(span > 0, span, torch.ones_like(span)), torch.zeros_like(t)
    ).clamp(0.0, 1.0)
    if warp.kind == "uniform":
        displacement = torch.zeros_like(t)
    else:
        parameters = warp_parameters(warp, n if warp.per_sample else 1)
        assert parameters is not None  # drawn for every kind but uniform
        parameters = parameters.to(times.device)
        shape = smooth_warp if warp.kind == "smooth" else piecewise_warp
        displacement = shape(u, parameters)
    # t' = t0 + factor·(T − t0)·(u + δ(u)), written so that factor 1 and δ = 0 give t back bit for bit
    assert warp.factor is not None  # TimeWarp fills in its default, 1
    warped = t + (warp.factor - 1.0) * (t - start) + warp.factor * span * displacement
    # padding: continue from the last warped time with the last warped step
    last_index = (lengths.to(times.device) - 1).unsqueeze(1)
    last_time = warped.gather(1, last_index)
    previous = warped.gather(1, (last_index - 1).clamp_min(0))
    step = last_time - previous
    steps_after = (position - last_index).to(torch.float64)
    padded = last_time + steps_after * step
    one_point = (lengths.to(times.device) == 1).unsqueeze(1)
    # a one-point sample has no last step: its padding keeps its offsets from its (warped) first time
    warped = torch.where(valid, warped, torch.where(one_point, warped[:, :1] + (t - t[:, :1]), padded))
    result = warped.to(times.dtype)
    if width > 1:
        increasing = (result[:, 1:] > result[:, :-1]).all(dim=1)
        if not increasing.all():
            bad = int(torch.nonzero(~increasing)[0])
            raise ValueError(
                f"the {warp.label()} warp leaves the times of sample {bad} not strictly increasing in "
                f"{times.dtype} (warped gaps below its resolution); use float64 times or a milder warp"
            )
    return result


def time_warp(dataset: IrregularDataset, warp: TimeWarp | Mapping) -> IrregularDataset:
    """The dataset with its observation times warped (module docstring); nothing else changes.

    Arguments:
        dataset: the `IrregularDataset` to warp; it is not modified.
        warp: a `TimeWarp` or a mapping for `TimeWarp.from_dict`, e.g. ``{"kind": "uniform", "factor": 2}``.

    Returns:
        A new dataset: times warped by `warp_times`, values (NaN included), lengths, labels, targets and static
            features copied unchanged; ``meta["transforms"]`` records ``{"time_warp": warp.to_dict()}``.

    Raises:
        ValueError: a bad warp (naming the option) or warped times that are not strictly increasing in the
            dataset's dtype.
        TypeError: ``dataset`` is not an `IrregularDataset`.
    """
    if not isinstance(dataset, IrregularDataset):
        raise TypeError(f"dataset must be an IrregularDataset, got {type(dataset).__name__}")
    warp = TimeWarp.from_dict(warp)
    times = warp_times(dataset.times, dataset.lengths, warp)
    meta = dict(dataset.meta)
    meta["transforms"] = list(meta.get("transforms", [])) + [{"time_warp": warp.to_dict()}]
    return dataset.replace(
        times=times,
        values=dataset.values.clone(),
        meta=meta,
        static=None if dataset.static is None else dataset.static.clone(),
        targets=None if dataset.targets is None else dataset.targets.clone(),
    )
