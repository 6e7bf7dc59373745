"""Per-channel standardisation of datasets with the training set's statistics of its observed values."""

from __future__ import annotations

import numpy as np
import torch

from ...observations import magnitude_limit
from ..base.datasets import IrregularDataset

__all__ = ["channel_statistics", "standardise", "standardised"]


def channel_statistics(dataset: IrregularDataset) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and standard deviation (population, ddof=0) over the observed values only.

    Computed in float64. A channel with zero spread gets std 1 (so it is only centred).

    Arguments:
        dataset: an `IrregularDataset` with values (N, T, C), NaN where missing.

    Returns:
        ``(mean, std)``: two (C,) float64 tensors.

    Raises:
        ValueError: naming the channel, if a channel has no observation at all.
    """
    v = dataset.values.to(torch.float64)
    obs = ~torch.isnan(v)
    count = obs.sum(dim=(0, 1))
    empty = torch.nonzero(count == 0).flatten().tolist()
    if empty:
        raise ValueError(f"channel(s) {empty} of the training set have no observed value; cannot standardise")
    filled = torch.where(obs, v, torch.zeros((), dtype=v.dtype, device=v.device))
    mean = filled.sum(dim=(0, 1)) / count
    centred = torch.where(obs, v - mean, torch.zeros((), dtype=v.dtype, device=v.device))
    std = torch.sqrt((centred**2).sum(dim=(0, 1)) / count)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return mean, std


def standardise(train: IrregularDataset, *others: IrregularDataset) -> tuple[IrregularDataset, ...]:
    """Standardise every channel with the mean and std of the *training* set's observed values.

    NaNs stay NaN. The statistics are recorded in each result's ``meta["standardise"]``.

    Arguments:
        train: the training `IrregularDataset`, whose observed values give each channel's mean and std
            (`channel_statistics`).
        *others: further datasets (validation, test, ...) with the same channels, standardised with the
            training statistics.

    Returns:
        A tuple ``(train, *others)`` of new datasets (always a tuple, also with no ``others``).

    Raises:
        ValueError: a training channel has no observation, or a dataset's channel count differs from the
            training set's.
    """
    mean, std = channel_statistics(train)
    out = []
    for ds in (train, *others):
        if ds.num_channels != train.num_channels:
            raise ValueError(
                f"a dataset to standardise has {ds.num_channels} channels, the training set {train.num_channels}"
            )
        m = mean.to(device=ds.values.device)
        s = std.to(device=ds.values.device)
        vals = ((ds.values.to(torch.float64) - m) / s).to(ds.values.dtype)
        meta = dict(ds.meta)
        meta["standardise"] = {"mean": mean.tolist(), "std": std.tolist()}
        out.append(ds.replace(values=vals, meta=meta))
    return tuple(out)


def standardised(
    values: torch.Tensor, mean: np.ndarray, scale: np.ndarray, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """(N, T, C) values minus ``mean`` (C,) over ``scale`` (C,), computed in float64 (as
    `standardise`), in ``dtype`` (default the values' dtype); NaN stays NaN.

    The finite range of the models (`magnitude_limit` of ``dtype``) is judged here, on the standardised values:
    raw values of 1e12 are fine once standardised, a value far outside the training data's range is not.

    Raises:
        ValueError: a standardised value beyond ``magnitude_limit(dtype)``, naming X, where it is and how far it
            lies from the channel's training mean.
    """
    dtype = values.dtype if dtype is None else dtype
    m = torch.as_tensor(np.array(mean, dtype=np.float64), device=values.device)
    s = torch.as_tensor(np.array(scale, dtype=np.float64), device=values.device)
    result = (values.to(torch.float64) - m) / s
    limit = magnitude_limit(dtype)
    beyond = result.abs() > limit  # False for NaN (a missing value)
    if bool(beyond.any()):
        size = torch.where(beyond, result.abs(), torch.zeros((), dtype=result.dtype, device=result.device))
        b, t, c = (int(k) for k in np.unravel_index(int(torch.argmax(size)), tuple(result.shape)))
        raise ValueError(
            f"X[{b}] has the value {float(values[b, t, c]):.6g} at step {t}, channel {c}: "
            f"{float(result[b, t, c]):.3g} standard deviations from the channel's training mean "
            f"(channel_mean_[{c}] = {float(m[c]):.6g}, channel_scale_[{c}] = {float(s[c]):.6g}), beyond the finite "
            f"range |x| <= {limit:.3g} that the models handle in {dtype} (neuralde_seq.observations.magnitude_limit) "
            "after standardisation: check X for an entry in other units, or use dtype='float64'"
        )
    return result.to(dtype)
