"""Simulated ICU-like stays with a known ground truth (`simulate_records`; the benchmark task ``icu-records`` of
`neuralde_seq.data.protocols`): irregular records whose outcome is drawn from a latent risk score that is kept, so
that how much of it a model recovers can be measured against an oracle.

**A stay.** Every stay lasts ``stay_hours`` hours (the observation window, e.g. the first 48 h of an ICU stay) and
has a latent severity s ~ N(0, 1). Each channel c (`RECORDS_CHANNELS`: four vitals, three labs) has, per stay, a
latent level z_c and a latent trend d_c, both standard normal and both "worse" when positive:

    z_c = sqrt(ρ) · s + sqrt(1 − ρ) · e_c,        d_c = sqrt(ρ) · s + sqrt(1 − ρ) · f_c,

with ρ = ``severity_coupling`` and e_c, f_c independent N(0, 1). The channel's latent state at hour t is
x_c(t) = z_c + ``trend_size`` · d_c · (t / ``stay_hours`` − 1/2) (the trend is centred on the middle of the stay, so
it leaves the stay's mean level unchanged), measured with noise: x_c(t) + ``noise`` · ε. The recorded value is in
the channel's units: a vital is ``baseline + direction · scale · x``, a lab ``baseline · exp(direction · scale · x)``
(positive, skewed); direction −1 (systolic blood pressure) means that a worse state is a lower value.

**Sampling.** Channel c is measured at the times of a renewal process: the gaps are drawn uniformly from its own
range of hours (`RECORDS_CHANNELS`: vitals every 1 to 6 h, labs every 6 to 24 h), divided by the stay's
measurement intensity exp(r), r = ``informative_sampling`` · s + ``sampling_spread`` · u, u ~ N(0, 1): sicker
stays are measured more often (informative sampling), and u is the part of the clinicians' attention that severity
does not explain. The first measurement falls uniformly within the first gap (cut at the stay's end), so every
channel that is recorded in a stay is measured at least once. Times are charted to the minute (floored to 1/60 h),
so channels measured in the same minute share a time.

**Missing channels.** Each channel that does not carry the outcome's signal (temperature, creatinine, white cells)
is missing for a whole stay (never measured in it) with probability ``channel_missing``, independently; with
``missing_signal_channels`` the signal channels (heart rate, systolic blood pressure, respiratory rate, lactate)
may be missing too, with the same probability, and then the ground truth is no longer fully recoverable from the
records. A stay never loses every channel: should all be drawn missing, heart rate is kept.

**The outcome.** The latent risk score is

    risk = risk_offset + level_weight · level + trend_weight · trend + interaction_weight · interaction
           + sampling_weight · sampling,

each part standardised to mean 0 and variance 1 over the population of stays:

* level: heart rate's latent level z (a vital's level; a high heart rate is bad);
* trend: systolic blood pressure's latent trend d (a vital's trend over the stay; falling pressure is bad);
* interaction: (z_resp · z_lactate − ρ) / sqrt(1 + ρ²), the product of the latent levels of respiratory rate and
  lactate (a vital and a lab): either alone is harmless, both high together is bad, both low together also
  raises it (a product);
* sampling: r / sd(r), the stay's measurement intensity (how often everything was measured), the clinicians'
  attention beyond severity included (0 when ``informative_sampling`` and ``sampling_spread`` are both 0).

The label is a Bernoulli draw with probability sigmoid(``sharpness`` · risk) (`RECORDS_CLASSES`: 1 = poor
outcome). ``sharpness`` sets the label noise: large values make the label nearly a threshold of the risk score,
small ones a coin flip tilted by it. With the defaults the risk score has a standard deviation of about 2.4 and an
oracle that ranks stays by it reaches an AUROC of about 0.97 to 0.98 (the acceptance test asks 0.95 on 2,000
stays), while the best single summary (the count of measurements, or heart rate's mean) reaches about 0.8: a model
has to read a level, a trend, an interaction and the sampling itself. Stays hold about 100 distinct times each
(more for sicker stays; the longest about 300 to 400 among 2,000).

Knobs (`RecordsSpec`), with what each one models:

* ``stay_hours`` (48): the observation window in hours.
* ``severity_coupling`` (0.25): ρ, how much of each channel's level and trend the shared severity explains (0:
  channels independent, so the outcome parts are independent; 1: every channel is the severity).
* ``informative_sampling`` (0.25): how strongly severity raises the measurement rates (the log-rate per unit of
  severity; 0: sampling carries no information about severity).
* ``sampling_spread`` (0.25): the spread of the log-rate not explained by severity (clinicians' attention).
* ``channel_missing`` (0.2): the probability that a channel is missing for a whole stay.
* ``missing_signal_channels`` (False): whether the channels that carry the outcome can be missing too.
* ``trend_size`` (1.5): how far a channel's latent state moves over the stay per unit of latent trend, in units of
  the between-stay spread of its level.
* ``noise`` (0.5): measurement noise, in the same units.
* ``level_weight``, ``trend_weight``, ``interaction_weight``, ``sampling_weight`` (1, 1, 1, 1): the weights of the
  outcome's parts (0 removes a part).
* ``risk_offset`` (-0.5): the risk score's intercept (sets the prevalence; about 40 % poor outcomes by default).
* ``sharpness`` (2.5): the label's sharpness (inverse label noise).

Randomness comes from a ``numpy.random.Generator``: pass ``seed`` (a fresh generator seeded with it) or ``generator``
(drawn from, and advanced, in place), not both; with neither, a generator seeded from the operating system.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np
import torch

from ..base.datasets import IrregularDataset

__all__ = [
    "RecordsSpec",
    "SimulatedRecords",
    "simulate_records",
    "RECORDS_CHANNELS",
    "RECORDS_CLASSES",
    "RECORDS_SIGNAL_CHANNELS",
    "RECORDS_PARTS",
]


class RecordsChannel(NamedTuple):
    """One channel of the simulated records: ``kind`` "vital" (linear in the latent state) or "lab" (log-linear),
    its ``baseline`` and ``scale`` in ``unit``, ``direction`` (+1: a worse state is a higher value), and the range
    ``gap_hours`` of the gaps between its measurements at unit intensity."""

    name: str
    kind: str
    unit: str
    baseline: float
    scale: float
    direction: int
    gap_hours: tuple[float, float]


RECORDS_CHANNELS = (
    RecordsChannel("heart_rate", "vital", "bpm", 85.0, 12.0, 1, (1.0, 2.0)),
    RecordsChannel("systolic_bp", "vital", "mmHg", 120.0, 15.0, -1, (1.0, 2.0)),
    RecordsChannel("resp_rate", "vital", "/min", 18.0, 4.0, 1, (1.0, 3.0)),
    RecordsChannel("temperature", "vital", "degC", 37.0, 0.6, 1, (2.0, 6.0)),
    RecordsChannel("lactate", "lab", "mmol/L", 1.5, 0.35, 1, (6.0, 12.0)),
    RecordsChannel("creatinine", "lab", "mg/dL", 1.0, 0.3, 1, (12.0, 24.0)),
    RecordsChannel("wbc", "lab", "1e9/L", 9.0, 0.3, 1, (12.0, 24.0)),
)
"""The channels, in the order of the values' last axis (module docstring)."""

RECORDS_SIGNAL_CHANNELS = ("heart_rate", "systolic_bp", "resp_rate", "lactate")
"""The channels whose latent state enters the outcome (never missing for a whole stay unless
``missing_signal_channels``)."""

RECORDS_PARTS = ("level", "trend", "interaction", "sampling")
"""The parts of the latent risk score, in the order of `SimulatedRecords.parts`."""

RECORDS_CLASSES = ("good outcome", "poor outcome")
"""Class names: label 1 is the poor outcome."""

_INDEX = {channel.name: c for c, channel in enumerate(RECORDS_CHANNELS)}
_MINUTE = 1.0 / 60.0


def _real(
    name: str,
    value,
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    """``value`` as a finite float within the bounds, else ``ValueError`` naming ``name``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not math.isfinite(float(value))
    ):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    value = float(value)
    too_low = low is not None and (value <= low if open_low else value < low)
    too_high = high is not None and (value >= high if open_high else value > high)
    if too_low or too_high:
        left, right = "(" if open_low else "[", ")" if open_high else "]"
        bounds = f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
        raise ValueError(f"{name} must lie in {bounds}, got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class RecordsSpec:
    """The knobs of the simulated ICU stays (the module docstring says what each one models).

    Every knob is checked on construction; a bad value raises ``ValueError`` naming it.

    Attributes:
        stay_hours: the observation window of every stay in hours (> 0; default 48).
        severity_coupling: ρ in [0, 1], the share of each channel's latent level and trend explained by the
            stay's severity (default 0.25).
        informative_sampling: in [0, 1], the measurement log-rate per unit of severity (default 0.25).
        sampling_spread: in [0, 1], the standard deviation of the measurement log-rate that severity does not
            explain (default 0.25).
        channel_missing: in [0, 1), the probability that a channel is missing for a whole stay (default 0.2).
        missing_signal_channels: the signal channels (`RECORDS_SIGNAL_CHANNELS`) can be missing too
            (default False).
        trend_size: >= 0, the change of a channel's latent state over the stay per unit of latent trend
            (default 1.5).
        noise: >= 0, the measurement noise's standard deviation in latent units (default 0.5).
        level_weight: weight of heart rate's level in the risk score (default 1).
        trend_weight: weight of systolic blood pressure's trend (default 1).
        interaction_weight: weight of the respiratory rate × lactate interaction (default 1).
        sampling_weight: weight of the measurement intensity (default 1).
        risk_offset: the risk score's intercept (default -0.5).
        sharpness: > 0, the label is Bernoulli(sigmoid(sharpness · risk)) (default 2.5).
    """

    stay_hours: float = 48.0
    severity_coupling: float = 0.25
    informative_sampling: float = 0.25
    sampling_spread: float = 0.25
    channel_missing: float = 0.2
    missing_signal_channels: bool = False
    trend_size: float = 1.5
    noise: float = 0.5
    level_weight: float = 1.0
    trend_weight: float = 1.0
    interaction_weight: float = 1.0
    sampling_weight: float = 1.0
    risk_offset: float = -0.5
    sharpness: float = 2.5

    def __post_init__(self):
        checked = {
            "stay_hours": _real("stay_hours", self.stay_hours, 0.0, None, open_low=True),
            "severity_coupling": _real("severity_coupling", self.severity_coupling, 0.0, 1.0),
            "informative_sampling": _real("informative_sampling", self.informative_sampling, 0.0, 1.0),
            "sampling_spread": _real("sampling_spread", self.sampling_spread, 0.0, 1.0),
            "channel_missing": _real("channel_missing", self.channel_missing, 0.0, 1.0, open_high=True),
            "trend_size": _real("trend_size", self.trend_size, 0.0),
            "noise": _real("noise", self.noise, 0.0),
            "sharpness": _real("sharpness", self.sharpness, 0.0, None, open_low=True),
            "risk_offset": _real("risk_offset", self.risk_offset),
        }
        for part in RECORDS_PARTS:
            checked[f"{part}_weight"] = _real(f"{part}_weight", getattr(self, f"{part}_weight"))
        if not isinstance(self.missing_signal_channels, (bool, np.bool_)):
            raise ValueError(f"missing_signal_channels must be True or False, got {self.missing_signal_channels!r}")
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "missing_signal_channels", bool(self.missing_signal_channels))

    @property
    def weights(self) -> np.ndarray:
        """(4,) the weights of `RECORDS_PARTS`, in that order."""
        return np.array([getattr(self, f"{part}_weight") for part in RECORDS_PARTS])


class SimulatedRecords(NamedTuple):
    """Simulated stays and their ground truth (module docstring).

    Attributes:
        dataset: the `IrregularDataset`: times (N, T) in hours on each stay's union grid (its sorted distinct
            measurement times), values (N, T, C) in the channels' units with C = len(`RECORDS_CHANNELS`), NaN
            where a channel was not measured at that time, lengths (N,), labels (N,) (`RECORDS_CLASSES`).
        severity: (N,) float64, each stay's latent severity s.
        risk: (N,) float64, the latent risk score whose sigmoid(sharpness · risk) drew the label.
        parts: (N, 4) float64, the standardised parts of the risk score (`RECORDS_PARTS`), before weighting.
        missing: (N, C) bool, the channels missing for the whole stay.
    """

    dataset: IrregularDataset
    severity: np.ndarray
    risk: np.ndarray
    parts: np.ndarray
    missing: np.ndarray

    def to_long_dataframe(self):
        """The stays as a database would hold them: one row per measurement, and the outcomes.

        Returns:
            ``(frame, outcome)``: ``frame`` a ``pandas.DataFrame`` with columns ``id`` (``"stay<i>"``), ``time``
            (hours), ``channel`` (the `RECORDS_CHANNELS` name) and ``value`` (its unit), one row per measured
            (stay, time, channel), in stay and time order; ``outcome`` a ``pandas.Series`` of the labels
            (`RECORDS_CLASSES` names) indexed by id. `neuralde_seq.data.from_long_dataframe` reads them back
            (``kind_column="channel", value_column="value", labels=outcome``).

        Raises:
            ImportError: pandas is not installed.
        """
        import pandas as pd

        data = self.dataset
        names = [channel.name for channel in RECORDS_CHANNELS]
        ids, times, channels, values = [], [], [], []
        for i in range(len(data)):
            length = int(data.lengths[i])
            block = data.values[i, :length].double().numpy()
            stay, column = np.nonzero(~np.isnan(block))
            ids += [f"stay{i}"] * len(stay)
            times += data.times[i, :length].double().numpy()[stay].tolist()
            channels += [names[c] for c in column]
            values += block[stay, column].tolist()
        frame = pd.DataFrame({"id": ids, "time": times, "channel": channels, "value": values})
        outcome = pd.Series(
            [data.class_names[int(k)] for k in data.labels],
            index=[f"stay{i}" for i in range(len(data))],
            name="outcome",
        )
        return frame, outcome


def _numpy_generator(seed: int | None, generator: np.random.Generator | None) -> np.random.Generator:
    if seed is not None and generator is not None:
        raise ValueError("pass either seed or generator, not both")
    if generator is not None:
        if not isinstance(generator, np.random.Generator):
            raise ValueError(f"generator must be a numpy.random.Generator, got {type(generator).__name__}")
        return generator
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.default_rng(seed)


def _measurement_times(
    rng: np.random.Generator, gap_hours: tuple[float, float], intensity: float, stay_hours: float
) -> np.ndarray:
    """Sorted distinct measurement times (to the minute) of one channel in one stay: a renewal process with gaps
    U(gap_hours) / intensity, the first measurement uniform within the first gap cut at the stay's end."""
    low, high = gap_hours
    count = int(math.ceil(stay_hours * intensity / low)) + 2
    gaps = rng.uniform(low, high, size=count) / intensity
    first = rng.uniform() * min(gaps[0], stay_hours)
    times = first + np.concatenate([[0.0], np.cumsum(gaps[1:])])
    times = np.floor(times[times < stay_hours] / _MINUTE) * _MINUTE
    return np.unique(times)


def simulate_records(
    num_stays: int,
    spec: RecordsSpec | None = None,
    *,
    seed: int | None = None,
    generator: np.random.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    name: str = "icu-records",
) -> SimulatedRecords:
    """Simulate ``num_stays`` ICU-like stays with the knobs of ``spec`` (module docstring).

    Arguments:
        num_stays: N, the number of stays (>= 1).
        spec: the knobs, a `RecordsSpec` (default: ``RecordsSpec()``, the documented defaults).
        seed: seed of a fresh ``numpy.random.Generator`` (not with ``generator``); default None.
        generator: a ``numpy.random.Generator`` to draw from, advanced in place (not with ``seed``).
        dtype: floating dtype of the dataset's times and values (default float32).
        name: the dataset's name.

    Returns:
        `SimulatedRecords`: the dataset (times (N, T), values (N, T, C), lengths (N,), labels (N,)) and the
            ground truth per stay (severity, risk, parts, missing).

    Raises:
        ValueError: a bad ``num_stays``, ``spec``, ``seed`` or ``generator`` (named).
    """
    if isinstance(num_stays, bool) or not isinstance(num_stays, (int, np.integer)) or num_stays < 1:
        raise ValueError(f"num_stays must be a positive integer, got {num_stays!r}")
    spec = RecordsSpec() if spec is None else spec
    if not isinstance(spec, RecordsSpec):
        raise ValueError(f"spec must be a RecordsSpec, got {type(spec).__name__}")
    rng = _numpy_generator(seed, generator)
    n, channels = int(num_stays), len(RECORDS_CHANNELS)
    rho, hours = spec.severity_coupling, spec.stay_hours

    # ---- the latent state of every stay: severity, levels, trends, measurement intensity, missing channels
    severity = rng.standard_normal(n)
    shared = math.sqrt(rho) * severity[:, None]
    level = shared + math.sqrt(1.0 - rho) * rng.standard_normal((n, channels))
    trend = shared + math.sqrt(1.0 - rho) * rng.standard_normal((n, channels))
    log_rate = spec.informative_sampling * severity + spec.sampling_spread * rng.standard_normal(n)
    can_miss = np.array(
        [spec.missing_signal_channels or c.name not in RECORDS_SIGNAL_CHANNELS for c in RECORDS_CHANNELS]
    )
    missing = (rng.uniform(size=(n, channels)) < spec.channel_missing) & can_miss
    missing[missing.all(axis=1), _INDEX["heart_rate"]] = False

    # ---- the outcome
    rate_sd = math.hypot(spec.informative_sampling, spec.sampling_spread)
    parts = np.stack(
        [
            level[:, _INDEX["heart_rate"]],
            trend[:, _INDEX["systolic_bp"]],
            (level[:, _INDEX["resp_rate"]] * level[:, _INDEX["lactate"]] - rho) / math.sqrt(1.0 + rho**2),
            log_rate / rate_sd if rate_sd > 0 else np.zeros(n),
        ],
        axis=1,
    )
    risk = spec.risk_offset + parts @ spec.weights
    probability = 1.0 / (1.0 + np.exp(-spec.sharpness * risk))
    labels = (rng.uniform(size=n) < probability).astype(np.int64)

    # ---- the records: each channel's measurement times, merged onto the stay's union grid
    series, grids = [], []
    for i in range(n):
        intensity = math.exp(log_rate[i])
        per_channel = [
            None if missing[i, c] else _measurement_times(rng, channel.gap_hours, intensity, hours)
            for c, channel in enumerate(RECORDS_CHANNELS)
        ]
        grid = np.unique(np.concatenate([t for t in per_channel if t is not None]))
        values = np.full((channels, grid.size), np.nan)
        for c, (channel, times) in enumerate(zip(RECORDS_CHANNELS, per_channel)):
            if times is None:
                continue
            state = level[i, c] + spec.trend_size * trend[i, c] * (times / hours - 0.5)
            state = state + spec.noise * rng.standard_normal(times.size)
            shift = channel.direction * channel.scale * state
            measured = channel.baseline + shift if channel.kind == "vital" else channel.baseline * np.exp(shift)
            values[c, np.searchsorted(grid, times)] = measured
        series.append(values)
        grids.append(grid)
    dataset = IrregularDataset.from_sequences(series, labels.tolist(), RECORDS_CLASSES, grids, dtype=dtype, name=name)
    dataset.meta.update(
        {
            "channels": [c.name for c in RECORDS_CHANNELS],
            "units": [c.unit for c in RECORDS_CHANNELS],
            "spec": dataclasses.asdict(spec),
        }
    )
    return SimulatedRecords(dataset, severity, risk, parts, missing)
