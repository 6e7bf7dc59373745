"""The ``icu-records`` task: simulated ICU-like stays with a known ground truth (`simulate_records`) as
train / validation / test datasets."""

from __future__ import annotations

import numpy as np
import torch

from ..base.datasets import DatasetSplits
from ..base.registry import Task, register_task
from ..synthetic.records import RecordsSpec, simulate_records

__all__ = ["icu_records_splits"]


def icu_records_splits(
    *,
    num_train: int = 2000,
    num_val: int = 500,
    num_test: int = 1000,
    stay_hours: float = 48.0,
    severity_coupling: float = 0.25,
    informative_sampling: float = 0.25,
    sampling_spread: float = 0.25,
    channel_missing: float = 0.2,
    missing_signal_channels: bool = False,
    trend_size: float = 1.5,
    noise: float = 0.5,
    level_weight: float = 1.0,
    trend_weight: float = 1.0,
    interaction_weight: float = 1.0,
    sampling_weight: float = 1.0,
    risk_offset: float = -0.5,
    sharpness: float = 2.5,
    data_seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> DatasetSplits:
    """The ``icu-records`` task's data (raw, not standardised): `simulate_records` stays as datasets.

    Train, validation and test sets are drawn one after another from one ``numpy.random.Generator`` seeded with
    ``data_seed`` (so they differ and are the same for every training seed). Each stay is a 48 h window (by default)
    of 7 channels (`neuralde_seq.data.synthetic.records.RECORDS_CHANNELS`: heart rate, systolic blood pressure,
    respiratory rate, temperature, lactate, creatinine, white cells) in their units, on the stay's union grid of
    measurement times in hours, NaN where a channel was not measured; labels 1 = poor outcome. The knobs are
    those of `RecordsSpec` (the module `neuralde_seq.data.synthetic.records` says what each one models).
    Each dataset's ``meta`` holds the channel names, units and knobs.

    Arguments:
        num_train: training stays (>= 1).
        num_val: validation stays (>= 1).
        num_test: test stays (>= 1).
        stay_hours: the observation window in hours.
        severity_coupling: share of each channel's level and trend explained by the stay's severity.
        informative_sampling: measurement log-rate per unit of severity.
        sampling_spread: spread of the measurement log-rate not explained by severity.
        channel_missing: probability that a channel is missing for a whole stay.
        missing_signal_channels: the channels that carry the outcome can be missing too.
        trend_size: change of a channel's latent state over the stay per unit of latent trend.
        noise: measurement noise in latent units.
        level_weight: weight of heart rate's level in the risk score.
        trend_weight: weight of systolic blood pressure's trend.
        interaction_weight: weight of the respiratory rate × lactate interaction.
        sampling_weight: weight of the measurement intensity.
        risk_offset: the risk score's intercept.
        sharpness: the label is Bernoulli(sigmoid(sharpness · risk)).
        data_seed: seed of the generator that draws the three sets.
        dtype: floating dtype of times and values.

    Returns:
        ``DatasetSplits(train, val, test)`` of `IrregularDataset`, labels 0/1.

    Raises:
        ValueError: an argument out of range (named).
    """
    if isinstance(data_seed, bool) or not isinstance(data_seed, int) or data_seed < 0:
        raise ValueError(f"data_seed must be a non-negative integer, got {data_seed!r}")
    spec = RecordsSpec(
        stay_hours=stay_hours,
        severity_coupling=severity_coupling,
        informative_sampling=informative_sampling,
        sampling_spread=sampling_spread,
        channel_missing=channel_missing,
        missing_signal_channels=missing_signal_channels,
        trend_size=trend_size,
        noise=noise,
        level_weight=level_weight,
        trend_weight=trend_weight,
        interaction_weight=interaction_weight,
        sampling_weight=sampling_weight,
        risk_offset=risk_offset,
        sharpness=sharpness,
    )
    for part, count in (("train", num_train), ("val", num_val), ("test", num_test)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"num_{part} must be a positive integer, got {count!r}")
    generator = np.random.default_rng(data_seed)
    parts = []
    for part, count in (("train", num_train), ("val", num_val), ("test", num_test)):
        data = simulate_records(count, spec, generator=generator, dtype=dtype, name=f"icu-records {part}").dataset
        data.meta["data_seed"] = data_seed
        parts.append(data)
    return DatasetSplits(*parts)


register_task(
    Task(
        "icu-records",
        "synthetic ICU stays: vitals and labs at their own rates, informative sampling, a known risk score (AUROC)",
        "auroc",
        icu_records_splits,
    )
)
