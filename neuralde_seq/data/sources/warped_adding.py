"""The ``warped-adding`` task: the adding problem on a per-sample warped clock (`warped_adding`) as
train / validation / test datasets."""

from __future__ import annotations

import torch

from ..base.datasets import DatasetSplits, IrregularDataset
from ..base.registry import Task, register_task
from ..synthetic.stress import WARPED_ADDING_CLASSES, warped_adding

__all__ = ["warped_adding_splits"]


def warped_adding_splits(
    *,
    num_train: int = 1000,
    num_val: int = 200,
    num_test: int = 500,
    num_events: int = 16,
    event_duration: int = 4,
    warp_strength: float = 0.5,
    data_seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> DatasetSplits:
    """The ``warped-adding`` task's data (raw, not standardised): `warped_adding` sequences as datasets.

    Train, validation and test sets are drawn one after another from one generator seeded with ``data_seed``
    (so they differ and are the same for every training seed). Every sample has G = num_events · event_duration
    points on the grid 0..G − 1 (the defaults: 64 points, 16 events of about 4 steps, event durations 2 to 6);
    channel 0 holds the event values, channel 1 the 0/1 marks, declared raw (``meta["raw_channels"] = [1]``:
    the task standardises only the values). Classes `WARPED_ADDING_CLASSES`.

    Arguments:
        num_train: training sequences (>= 1).
        num_val: validation sequences (>= 1).
        num_test: test sequences (>= 1).
        num_events: events per sequence (>= 2).
        event_duration: mean event duration in grid steps (a positive integer).
        warp_strength: the bound on each sample's local clock speed's distance from 1, in [0, 1)
            (`warped_adding`).
        data_seed: seed of the generator that draws the three sets.
        dtype: floating dtype of times and values.

    Returns:
        ``DatasetSplits(train, val, test)`` of `IrregularDataset`, fully observed, labels 0/1.

    Raises:
        ValueError: an argument out of range (named).
    """
    if isinstance(data_seed, bool) or not isinstance(data_seed, int) or data_seed < 0:
        raise ValueError(f"data_seed must be a non-negative integer, got {data_seed!r}")
    generator = torch.Generator().manual_seed(data_seed)
    parts = []
    for part, count in (("train", num_train), ("val", num_val), ("test", num_test)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"num_{part} must be a positive integer, got {count!r}")
        data = warped_adding(
            count, num_events, event_duration=event_duration, warp_strength=warp_strength, generator=generator
        )
        parts.append(
            IrregularDataset(
                times=data.times.to(dtype),
                values=data.values.to(dtype),
                lengths=torch.full((count,), data.times.shape[1], dtype=torch.long),
                labels=data.targets,
                class_names=list(WARPED_ADDING_CLASSES),
                name=f"warped-adding {part}",
                meta={
                    "raw_channels": [1],
                    "num_events": num_events,
                    "event_duration": event_duration,
                    "warp_strength": float(warp_strength),
                    "data_seed": data_seed,
                },
            )
        )
    return DatasetSplits(*parts)


register_task(
    Task(
        "warped-adding",
        "synthetic: is the sum of two marked values > 1, events on a per-sample warped clock",
        "accuracy",
        warped_adding_splits,
        load_dtype=torch.float64,
    )
)
