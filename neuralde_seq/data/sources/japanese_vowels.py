"""The UEA JapaneseVowels data shipped in the package (``neuralde_seq/data/embedded``), and its task
``japanese-vowels``: the protocol of ``neuralde-seq compare`` (drop and split drawn from the run's seed)."""

from __future__ import annotations

from importlib import resources

import torch

from ..base.datasets import DatasetSplits, IrregularDataset, stratified_split
from ..base.registry import Task, register_task
from ..formats.ts_format import from_ts, read_ts
from ..transforms.sampling import drop_observations

__all__ = ["embedded_path", "load_japanese_vowels", "japanese_vowels_splits"]


def embedded_path(filename: str):
    """Path of a file shipped in ``neuralde_seq/data/embedded``.

    Arguments:
        filename: the file's name, e.g. ``"JapaneseVowels_TRAIN.ts"``.

    Returns:
        An ``importlib.resources`` ``Traversable`` (use ``importlib.resources.as_file`` for a real path).
    """
    return resources.files("neuralde_seq.data").joinpath("embedded", filename)


def load_japanese_vowels(dtype: torch.dtype = torch.float32) -> tuple[IrregularDataset, IrregularDataset]:
    """The UEA JapaneseVowels dataset shipped in the package: ``(train, test)``, the official split.

    270 training and 370 test utterances, 12 channels (LPC cepstrum coefficients), 9 classes
    (speakers "1".."9"), lengths 7 to 29. The data have no timestamps, so ``times`` is the observation
    index 0..L-1 (padding continues the grid). See ``embedded/SOURCE.md`` for provenance and licence.

    Arguments:
        dtype: floating point dtype of times and values (default float32).

    Returns:
        ``(train, test)``: two `IrregularDataset`, with times (N, T), values (N, T, 12), lengths (N,).
    """
    out = []
    for split in ("TRAIN", "TEST"):
        with resources.as_file(embedded_path(f"JapaneseVowels_{split}.ts")) as path:
            data = read_ts(path)
        out.append(from_ts(data, dtype=dtype, name=f"JapaneseVowels_{split}"))
    train, test = out
    if train.class_names != test.class_names:
        raise RuntimeError("JapaneseVowels train and test files declare different class labels")
    return train, test


def japanese_vowels_splits(
    *, seed: int = 0, drop_rate: float = 0.0, val_fraction: float = 0.15, dtype: torch.dtype = torch.float64
) -> DatasetSplits:
    """The embedded JapaneseVowels data in the protocol of ``neuralde-seq compare`` (raw, not standardised).

    1. the official UEA train (270) / test (370) split shipped in the package;
    2. ``drop_rate`` of every sample's time points dropped (`drop_observations`)
       in train (seed ``seed``) and test (seed ``seed + 1``);
    3. the official train set split ``1 - val_fraction`` / ``val_fraction`` stratified into train and
       validation (seed ``seed``).

    Standardisation with the training part's statistics follows in `load_task`.

    Arguments:
        seed: seed of the training drop and of the split (the test drop uses ``seed + 1``).
        drop_rate: fraction of every sample's time points dropped, in [0, 1).
        val_fraction: fraction of the official train set carved out as validation, in (0, 1).
        dtype: floating dtype of times and values.

    Returns:
        ``DatasetSplits(train, val, test)``.
    """
    if not 0.0 <= float(drop_rate) < 1.0:
        raise ValueError(f"drop_rate must lie in [0, 1), got {drop_rate}")
    if not 0.0 < float(val_fraction) < 1.0:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction}")
    train_full, test = load_japanese_vowels(dtype=dtype)
    train_full = drop_observations(train_full, drop_rate, seed=seed)
    test = drop_observations(test, drop_rate, seed=seed + 1)
    train, val = stratified_split(train_full, (1.0 - val_fraction, val_fraction), seed=seed)
    return DatasetSplits(train, val, test)


register_task(
    Task(
        "japanese-vowels",
        "UEA JapaneseVowels (embedded): 9 speakers, 12 LPC channels",
        "accuracy",
        japanese_vowels_splits,
        seed_option="seed",
        load_dtype=torch.float64,
    )
)
