"""Transforms of datasets: which observations they hold (`sampling`: dropping, cropping, subsampling), their
scale (`standardisation`, with training statistics) and their clock (`time_warps`); and long series made from a
set's own series (`long_series`).

``neuralde_seq.data.transforms`` was one module before it became this room; its names are all here still."""

from .long_series import concatenated
from .sampling import (
    check_augmentation,
    drop_observations,
    fill_gaps,
    median_step,
    num_dropped,
    random_crop_and_drop,
    subsample,
)
from .standardisation import channel_statistics, standardise
from .time_warps import WARP_KINDS, TimeWarp, time_warp, warp_times

__all__ = [
    "drop_observations",
    "num_dropped",
    "random_crop_and_drop",
    "subsample",
    "check_augmentation",
    "fill_gaps",
    "median_step",
    "channel_statistics",
    "standardise",
    "TimeWarp",
    "WARP_KINDS",
    "time_warp",
    "warp_times",
    "concatenated",
]
