"""Long real series made from a classification set's own series: each series continued by other series of its class,
one after another on one clock (`concatenated`). For checking that models and their defaults hold on long, rough,
real series (issue 33: a default that is fine at 250 points can diverge at 2,000) when the real sets at hand are
short."""

from __future__ import annotations

import numpy as np
import torch

from ..base.datasets import IrregularDataset

__all__ = ["concatenated"]


def concatenated(dataset: IrregularDataset, length: int, *, seed: int = 0) -> IrregularDataset:
    """A dataset of series of exactly ``length`` points, each a chain of real series of one class.

    Series i of the result starts with series i of ``dataset`` (its own times and values) and continues with series
    drawn uniformly at random, with replacement, from the series of its class (itself included), each appended
    whole: its values as they are (NaN where missing), its times shifted so that its first point lies one median
    step after the previous piece's last point (the median of every time step of ``dataset``, 1 if no series has two
    points), so the times stay strictly increasing and keep each piece's own spacing. **The last piece is cut**: the
    chain stops at exactly ``length`` points, so the last appended series usually contributes only its first points
    (this function makes a dataset; it is not a transform that keeps all of its input). Series i's labels, static
    features and class names are kept. Reproducible: a ``numpy.random.default_rng(seed)`` stream walked over the
    series in order.

    Arguments:
        dataset: a labelled `IrregularDataset` of N series (times (N, T), values (N, T, C)); it is not modified.
        length: L, the number of points of every result series: an integer at least the longest series' length
            (no series of ``dataset`` is cut to fit).
        seed: seed of the stream that draws the appended series (default 0).

    Returns:
        A new `IrregularDataset` with times (N, L), values (N, L, C), lengths all L, the labels, static features
        and class names of ``dataset``; ``meta["transforms"]`` records the call.

    Raises:
        ValueError: ``dataset`` not an `IrregularDataset` or without class labels, ``length`` not an integer or
            shorter than the longest series, ``seed`` not an integer.
    """
    if not isinstance(dataset, IrregularDataset):
        raise ValueError(f"dataset must be an IrregularDataset, got {type(dataset).__name__}")
    if dataset.labels is None:
        raise ValueError(
            "dataset must have class labels (labels is None): the appended series are drawn from each series' own class"
        )
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
        raise ValueError(f"length must be an integer, got {length!r}")
    longest = int(dataset.lengths.max())
    if length < longest:
        raise ValueError(
            f"length ({length}) must be at least the longest series' length ({longest}): "
            "concatenated lengthens series and never cuts one of the dataset's whole series"
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    length = int(length)
    times = dataset.times.detach().cpu().double().numpy()
    values = dataset.values.detach().cpu().numpy()
    lengths = dataset.lengths.cpu().numpy()
    labels = dataset.labels.cpu().numpy()
    steps = np.concatenate([np.diff(times[i, :n]) for i, n in enumerate(lengths)])
    gap = float(np.median(steps)) if steps.size else 1.0
    members = {c: np.flatnonzero(labels == c) for c in np.unique(labels)}
    rng = np.random.default_rng(seed)
    out_times = np.empty((len(dataset), length))
    out_values = np.empty((len(dataset), length, values.shape[2]), dtype=values.dtype)
    for i in range(len(dataset)):
        piece, filled, end = i, 0, None
        while filled < length:
            if end is not None:
                piece = int(rng.choice(members[labels[i]]))
            take = min(int(lengths[piece]), length - filled)
            t = times[piece, :take]
            # each piece keeps its own spacing; it starts one median step after the previous piece's end
            out_times[i, filled : filled + take] = t if end is None else t - t[0] + end + gap
            out_values[i, filled : filled + take] = values[piece, :take]
            filled += take
            end = out_times[i, filled - 1]
    meta = dict(dataset.meta)
    meta["transforms"] = list(meta.get("transforms", [])) + [{"concatenated": {"length": length, "seed": int(seed)}}]
    return dataset.replace(
        times=torch.as_tensor(out_times, dtype=dataset.times.dtype, device=dataset.times.device),
        values=torch.as_tensor(out_values, device=dataset.values.device),
        lengths=torch.full_like(dataset.lengths, length),
        meta=meta,
    )
