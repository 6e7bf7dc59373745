"""Benchmark tasks by name: each a data protocol (loader, splits, standardisation) and a headline metric.

``TASKS`` maps a task name to a `Task`; `load_task` runs its protocol and returns a
`TaskData`: the standardised train / validation / test splits, and a way to build robustness
variants of the test set (other drop rates, other sampling rates, time warps).

| task | loader | metric | data depend on the run's seed |
| --- | --- | --- | --- |
| japanese-vowels | `japanese_vowels_splits` (embedded data) | accuracy | yes (drop, split) |
| speech-commands | `load_speech_commands` | accuracy | no |
| physionet-sepsis | `load_physionet_sepsis` | AUROC | no |
| eigenworms | `load_eigenworms` | accuracy | no |
| character-trajectories | `load_character_trajectories` | accuracy | no |
| uea | `load_uea` (option ``name``) | accuracy | no |
| uea-seeded-split | `load_uea` (option ``name``; ``split_seed`` = the run's seed) | accuracy | yes (split) |
| files | `local_files_splits` (local ``.ts`` / ARFF: ``train`` + ``test``, or ``path``) | accuracy | no |
| warped-adding | `warped_adding_splits` (synthetic: the adding problem on a warped clock) | accuracy | no |

The ``files`` task reads a dataset from local files (`load_files`):
``task_options: {train: PATH, test: PATH}`` or ``{path: FOLDER}`` (relative paths are resolved against the
current working directory), keeping the files' TRAIN/TEST split; the validation set is carved from TRAIN
(``validation_fraction``, ``split_seed``), and ``drop_rate``/``drop_seed`` drop observations as the other tasks.
It is a classification benchmark: regression files (``@targetLabel true``) are refused with ``ValueError``.

The downloaded datasets use the papers' fixed split seed (``split_seed``, a loader option), so every
training seed sees the same split, as in the papers' code; the embedded JapaneseVowels protocol of
``neuralde-seq compare`` instead draws its drop and split from the run's seed.

Protocol shared by all tasks (`load_task`):

1. the loader returns the raw splits (its own options: ``drop_rate``, ``representation``, ...);
2. option ``subsample`` (a task option, default 1) keeps every k-th time point of every split
   (`subsample`), to train at a lower sampling rate;
3. every channel is standardised with the statistics of the training split's observed values
   (`channel_statistics`), and static features, where present, column by column
   with the training split's mean and std (docs/design.md#dataset-protocols; Kidger et al.'s code does both), exactly
   once: a loader that can standardise itself is called with ``normalise=False``. Channels and static
   columns a loader declares raw (``meta["raw_channels"]``, ``meta["raw_static"]``: indices, e.g. the
   PhysioNet observation counts and 0/1 flags) are left as they are; ``meta["standardise"]`` then gives
   them mean 0 and std 1, so ``values * std + mean`` undoes the standardisation of every channel.

Each task is registered by the source module that defines its loader (`neuralde_seq.data.sources`, into the
registry `neuralde_seq.data.base.registry`); importing this module imports every source, so `TASKS` is complete.
None of the sources has an optional dependency at import time. This module imports nothing from
`neuralde_seq.training`.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch

from . import sources  # noqa: F401  (importing the sources registers their tasks in TASKS)
from .base.datasets import DatasetSplits, IrregularDataset
from .base.registry import TASKS, Task, get_task
from .sources.japanese_vowels import japanese_vowels_splits
from .sources.local import check_files_options, local_files_splits
from .sources.warped_adding import warped_adding_splits
from .transforms.sampling import subsample as subsample_dataset
from .transforms.standardisation import channel_statistics
from .transforms.time_warps import TimeWarp
from .transforms.time_warps import time_warp as warp_dataset

__all__ = [
    "Task",
    "TaskData",
    "TASKS",
    "TASK_NAMES",
    "get_task",
    "load_task",
    "japanese_vowels_splits",
    "local_files_splits",
    "warped_adding_splits",
    "check_files_options",
]

TASK_NAMES = tuple(TASKS)
"""The registered tasks' names, in registration order (japanese-vowels first)."""


def _check_subsample(factor: Any, what: str = "subsample") -> int:
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"{what} must be a positive integer, got {factor!r}")
    return factor


def _declared_raw(datasets: tuple[IrregularDataset, ...], key: str, width: int) -> list[int]:
    """The indices a loader declares raw in ``meta[key]`` (the same in every split), checked."""
    declared = [ds.meta.get(key, []) for ds in datasets]
    raw = declared[0]
    if any(d != raw for d in declared[1:]):
        raise ValueError(f"the splits of {datasets[0].name!r} declare different meta[{key!r}]: {declared}")
    if (
        not isinstance(raw, (list, tuple))
        or any(isinstance(i, bool) or not isinstance(i, int) for i in raw)
        or len(set(raw)) != len(raw)
        or any(not 0 <= i < width for i in raw)
    ):
        raise ValueError(
            f"meta[{key!r}] of {datasets[0].name!r} must list distinct indices in [0, {width}), got {raw!r}"
        )
    return sorted(raw)


def _scale(tensor: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    # in float64: a raw column (mean 0, std 1) comes back bit for bit
    return ((tensor.to(torch.float64) - mean.to(tensor.device)) / std.to(tensor.device)).to(tensor.dtype)


def _standardise_splits(train: IrregularDataset, *others: IrregularDataset) -> tuple[IrregularDataset, ...]:
    """Standardise channels (and static features, column by column) with the training split's statistics.

    Statistics: mean and population std of the observed (non-NaN) training values; a constant column is
    only centred. Columns declared raw (``meta["raw_channels"]``, ``meta["raw_static"]``) keep their
    values and get mean 0, std 1 in ``meta["standardise"]`` / ``meta["standardise_static"]``.

    Args:
        train: the split whose statistics are used; values (N, T, C), static (N, S) or None.
        others: splits with the same C (and S).

    Returns:
        ``(train, *others)`` standardised, as new datasets.
    """
    datasets = (train, *others)
    for ds in others:
        if ds.num_channels != train.num_channels:
            raise ValueError(
                f"a split to standardise has {ds.num_channels} channels, the training split {train.num_channels}"
            )
    raw = _declared_raw(datasets, "raw_channels", train.num_channels)
    keep = [c for c in range(train.num_channels) if c not in raw]
    mean = torch.zeros(train.num_channels, dtype=torch.float64)
    std = torch.ones(train.num_channels, dtype=torch.float64)
    if keep:
        mean[keep], std[keep] = channel_statistics(train.replace(values=train.values[..., keep]))
    s_mean = s_std = None
    if train.static is not None:
        width = train.static.shape[1]
        if any(ds.static is None or ds.static.shape[1] != width for ds in others):
            raise ValueError("every split must carry the training split's static features")
        raw_static = _declared_raw(datasets, "raw_static", width)
        keep_static = [c for c in range(width) if c not in raw_static]
        s_mean = torch.zeros(width, dtype=torch.float64)
        s_std = torch.ones(width, dtype=torch.float64)
        if keep_static:
            s = train.static[:, keep_static].to(torch.float64)
            observed = ~torch.isnan(s)
            count = observed.sum(dim=0)
            empty = [keep_static[i] for i in torch.nonzero(count == 0).flatten().tolist()]
            if empty:
                raise ValueError(f"static feature(s) {empty} of the training set have no observed value")
            zero = torch.zeros((), dtype=s.dtype)
            column_mean = torch.where(observed, s, zero).sum(dim=0) / count
            column_std = torch.sqrt(torch.where(observed, (s - column_mean) ** 2, zero).sum(dim=0) / count)
            s_mean[keep_static] = column_mean
            s_std[keep_static] = torch.where(column_std > 0, column_std, torch.ones_like(column_std))
    out = []
    for ds in datasets:
        meta = dict(ds.meta)
        meta["standardise"] = {"mean": mean.tolist(), "std": std.tolist()}
        static = ds.static
        # s_mean and s_std are set exactly when the training split, and so every split (checked), has static features
        if static is not None and s_mean is not None and s_std is not None:
            static = _scale(static, s_mean, s_std)
            meta["standardise_static"] = {"mean": s_mean.tolist(), "std": s_std.tolist()}
        out.append(ds.replace(values=_scale(ds.values, mean, std), static=static, meta=meta))
    return tuple(out)


@dataclasses.dataclass
class TaskData:
    """The data of one task for one run: ``splits`` (standardised, in the requested dtype) and the
    means to build test-set variants with `test_variant`.

    Attributes:
        task: the `Task`.
        splits: standardised `DatasetSplits`.
        options: the task options used (loader options and ``subsample``).
        seed: the seed given to a seed-dependent loader, else None.
    """

    task: Task
    splits: DatasetSplits
    options: dict
    seed: int | None
    _raw_train: IrregularDataset | None = dataclasses.field(repr=False, default=None)
    _raw_test: IrregularDataset | None = dataclasses.field(repr=False, default=None)  # before subsampling
    _loader_kwargs: dict = dataclasses.field(repr=False, default_factory=dict)
    _dtype: torch.dtype = torch.float32

    def info(self) -> dict:
        train, val, test = self.splits
        return {
            "task": self.task.name,
            "description": self.task.description,
            "metric": self.task.metric,
            "num_train": len(train),
            "num_val": len(val),
            "num_test": len(test),
            "channels": train.num_channels,
            "classes": train.num_classes,
            "static_features": 0 if train.static is None else train.static.shape[1],
            "max_length": int(train.lengths.max()),
            "options": dict(self.options),
            "seed": self.seed,
        }

    def test_variant(
        self, *, drop_rate: float | None = None, subsample: int | None = None, time_warp: TimeWarp | dict | None = None
    ) -> IrregularDataset:
        """The test set the task would give with ``drop_rate`` and/or ``subsample`` replaced, and/or its
        observation times warped, standardised with the *training* split's statistics (of the data the model
        was trained on).

        ``drop_rate`` and ``subsample`` are absolute, not relative to the training options: ``drop_rate=0.5``
        drops 50 % of the original test observations (the loader's own drop protocol and seed), ``subsample=1``
        is the full sampling rate even for a model trained with ``subsample: 2``. The drop comes first, then the
        subsampling, then the time warp (`neuralde_seq.data.transforms.time_warps`: on the raw times, before the
        standardisation, which reads only values). None keeps the training-time value (no warp for
        ``time_warp``).

        Arguments:
            drop_rate: fraction of the original test observations dropped, in [0, 1), or None.
            subsample: keep every k-th time point (a positive integer), or None.
            time_warp: a `TimeWarp` or a mapping for `TimeWarp.from_dict` (e.g. ``{"kind": "uniform",
                "factor": 2}``), or None.

        Returns:
            The test variant, an `IrregularDataset` in the run's dtype with the test set's samples in order.

        Raises:
            ValueError: a bad ``subsample`` or ``time_warp`` (naming the option).
        """
        raw_train, test = self._raw_train, self._raw_test
        if raw_train is None or test is None:
            raise RuntimeError(
                "TaskData.test_variant reads the raw splits load_task keeps; this TaskData was made without them"
            )
        if drop_rate is not None and drop_rate != self._loader_kwargs.get("drop_rate", 0.0):
            kwargs = {**self._loader_kwargs, "drop_rate": drop_rate}
            base = test
            test = self.task.load_function()(**kwargs).test
            # The variant must hold the same test samples, only other observations dropped.
            assert test.labels is not None and base.labels is not None  # a task is a classification
            if (
                len(test) != len(base)
                or not torch.equal(test.labels, base.labels)
                or not torch.equal(test.lengths, base.lengths)
            ):
                raise RuntimeError(
                    f"task {self.task.name!r}: the test set loaded with drop_rate={drop_rate} "
                    "holds different samples from the training-time test set"
                )
        factor = self.options.get("subsample", 1) if subsample is None else _check_subsample(subsample)
        if factor != 1:
            test = subsample_dataset(test, factor)
        if time_warp is not None:
            test = warp_dataset(test, TimeWarp.from_dict(time_warp))
        if self.task.standardise:
            test = _standardise_splits(raw_train, test)[1]
        return test.to(dtype=self._dtype)


def load_task(
    name: str, /, *, seed: int = 0, dtype: torch.dtype = torch.float32, progress: bool = True, **options
) -> TaskData:
    """Run the protocol of task ``name`` (see the module docstring) and return its `TaskData`.

    Arguments:
        name: a name in `TASKS` (positional only: ``name=`` is the uea task's dataset option).
        seed: the run's seed, used by tasks whose data depend on it (japanese-vowels); ignored otherwise.
        dtype: floating dtype of the returned splits.
        progress: show the loader's download / preprocessing progress, where it has any.
        **options: the task's options (`Task.option_names`): its loader's keyword arguments (e.g.
            ``drop_rate``, ``representation``, ``name``, ``cache_dir``, ``remotes``) and ``subsample``.
    """
    task = get_task(name)
    loader = task.load_function()
    known = task.option_names()
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for task {name!r}; its options: {', '.join(known)}")
    options = dict(options)
    if task.check_options is not None:
        task.check_options(options)
    factor = _check_subsample(options.pop("subsample", 1))
    params = inspect.signature(loader).parameters
    kwargs = {**options, **task.fixed_options}
    kwargs["dtype"] = task.load_dtype or dtype
    if task.seed_option is not None:
        kwargs[task.seed_option] = int(seed)
    if "progress" in params and "progress" not in kwargs:
        kwargs["progress"] = progress
    raw = loader(**kwargs)
    if not isinstance(raw, DatasetSplits):
        raise TypeError(f"the loader of task {name!r} returned {type(raw).__name__}, not DatasetSplits")
    raw_test = raw.test
    if factor != 1:
        raw = DatasetSplits(*(subsample_dataset(ds, factor) for ds in raw))
    splits = tuple(raw)
    if task.standardise:
        splits = _standardise_splits(*splits)
    splits = DatasetSplits(*(ds.to(dtype=dtype) for ds in splits))
    return TaskData(
        task=task,
        splits=splits,
        options={**options, "subsample": factor},
        seed=int(seed) if task.data_depend_on_seed else None,
        _raw_train=raw.train,
        _raw_test=raw_test,
        _loader_kwargs=kwargs,
        _dtype=dtype,
    )
