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

The loaders are referenced directly; none of their modules has an optional dependency at import time.
This module imports nothing from `neuralde_seq.training`.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any, Callable

import torch

from .datasets import DatasetSplits, IrregularDataset, load_japanese_vowels, stratified_split
from .local_files import load_files
from .physionet import load_physionet_sepsis
from .speech_commands import load_speech_commands
from .synthetic import WARPED_ADDING_CLASSES, warped_adding
from .time_warps import TimeWarp, time_warp as warp_dataset
from .transforms import channel_statistics, drop_observations
from .transforms import subsample as subsample_dataset
from .uea import load_character_trajectories, load_eigenworms, load_uea

__all__ = ["Task", "TaskData", "TASKS", "TASK_NAMES", "get_task", "load_task", "japanese_vowels_splits",
           "local_files_splits", "warped_adding_splits"]

METRICS = ("accuracy", "auroc")


def japanese_vowels_splits(*, seed: int = 0, drop_rate: float = 0.0, val_fraction: float = 0.15,
                           dtype: torch.dtype = torch.float64) -> DatasetSplits:
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


def warped_adding_splits(*, num_train: int = 1000, num_val: int = 200, num_test: int = 500, num_events: int = 16,
                         event_duration: int = 4, warp_strength: float = 0.5, data_seed: int = 0,
                         dtype: torch.dtype = torch.float32) -> DatasetSplits:
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
        data = warped_adding(count, num_events, event_duration=event_duration, warp_strength=warp_strength,
                             generator=generator)
        parts.append(IrregularDataset(
            times=data.times.to(dtype), values=data.values.to(dtype),
            lengths=torch.full((count,), data.times.shape[1], dtype=torch.long), labels=data.targets,
            class_names=list(WARPED_ADDING_CLASSES), name=f"warped-adding {part}",
            meta={"raw_channels": [1], "num_events": num_events, "event_duration": event_duration,
                  "warp_strength": float(warp_strength), "data_seed": data_seed}))
    return DatasetSplits(*parts)


_FILES_SOURCES = ("train", "test", "path")


def check_files_options(options: dict) -> None:
    """Check the ``files`` task's source options: ``train`` and ``test`` (two files), or ``path`` (a folder).

    Arguments:
        options: the task options (a mapping; only ``train``, ``test``, ``path`` and ``name`` are checked).

    Raises:
        ValueError: a missing or extra source option, or one that is not a non-empty string, naming it.
    """
    given = [key for key in _FILES_SOURCES if options.get(key) is not None]
    for key in given + (["name"] if options.get("name") is not None else []):
        value = options[key]
        if not isinstance(value, (str, os.PathLike)) or (isinstance(value, str) and not value.strip()):
            raise ValueError(f"option {key} must be a non-empty path string, got {value!r}")
    if "path" in given and ("train" in given or "test" in given):
        raise ValueError("give either path (a folder with <Name>_TRAIN / <Name>_TEST files) or train and test "
                         f"(two files), not both; got {', '.join(given)}")
    if "path" not in given and given != ["train", "test"]:
        missing = [key for key in ("train", "test") if key not in given]
        raise ValueError(f"the files task needs train and test (two files) or path (a folder); "
                         f"missing: {', '.join(missing)}")


def local_files_splits(*, train: str | os.PathLike | None = None, test: str | os.PathLike | None = None,
                       path: str | os.PathLike | None = None, name: str | None = None,
                       validation_fraction: float = 0.15, split_seed: int = 0, drop_rate: float = 0.0,
                       drop_seed: int = 0, dtype: torch.dtype = torch.float32) -> DatasetSplits:
    """Local ``.ts`` / ARFF files in the benchmark protocol (raw, not standardised): the ``files`` task.

    Arguments:
        train: the TRAIN file (with ``test``); or
        test: the TEST file (with ``train``); or
        path: a folder holding ``<Name>_TRAIN`` / ``<Name>_TEST`` files (``name`` picks one of several).
            Relative paths are resolved against the current working directory (where ``neuralde-seq bench``
            is started), not the config file's folder.
        validation_fraction: the fraction of the TRAIN file carved out, stratified, as the validation set.
        split_seed: seed of that stratified validation split.
        drop_rate: fraction of every sample's time points set missing
            (`drop_observations`), in [0, 1).
        drop_seed: seed of the drop: the TRAIN file's cases with ``drop_seed``, *before* the validation split
            (so the points dropped from a case do not depend on ``split_seed``), the TEST file's with
            ``drop_seed + 1``.
        dtype: floating dtype of the returned splits.

    Returns:
        ``DatasetSplits(train, val, test)`` as `load_files` gives them
            (test = the whole TEST file, in order), with ``drop_rate`` applied. Each part's ``meta`` adds
            ``drop_rate`` and ``drop_seed``.

    Raises:
        ValueError: a bad option (named), whatever `load_files` raises,
            and regression files (``@targetLabel true``): the task scores classes (accuracy).
    """
    check_files_options({"train": train, "test": test, "path": path, "name": name})
    if isinstance(drop_rate, bool) or not isinstance(drop_rate, (int, float)) or not 0.0 <= float(drop_rate) < 1.0:
        raise ValueError(f"drop_rate must be a number in [0, 1), got {drop_rate!r}")
    if isinstance(drop_seed, bool) or not isinstance(drop_seed, int) or drop_seed < 0:
        raise ValueError(f"drop_seed must be a non-negative integer, got {drop_seed!r}")
    splits = load_files(path if path is not None else train, None if path is not None else test,
                        validation_fraction=validation_fraction, split_seed=split_seed, dtype=dtype, name=name)
    train_part, val_part, test_part = splits
    if train_part.targets is not None:  # load_files has checked that TEST holds targets too
        raise ValueError(f"the files task is a classification benchmark, but {train_part.meta['train_file']} and "
                         f"{train_part.meta['test_file']} are regression files (@targetLabel true: real-valued "
                         "targets, not classes). Regression files are read by neuralde_seq.load_files / "
                         "neuralde_seq.data.read_file; train with neuralde_seq.sklearn.SequenceRegressor or "
                         "neuralde_seq.fit(..., Regression())")
    if drop_rate > 0:
        # Rebuild the TRAIN file's dataset (both parts keep its padded length) in file order, drop, re-split.
        positions = torch.tensor(train_part.meta["indices"] + val_part.meta["indices"])
        order = torch.argsort(positions)
        whole = train_part.replace(
            times=torch.cat([train_part.times, val_part.times])[order],
            values=torch.cat([train_part.values, val_part.values])[order],
            lengths=torch.cat([train_part.lengths, val_part.lengths])[order],
            labels=torch.cat([train_part.labels, val_part.labels])[order])
        whole = drop_observations(whole, float(drop_rate), int(drop_seed))
        train_part, val_part = (whole.subset(part.meta["indices"]).replace(
            meta={**part.meta, "transforms": whole.meta["transforms"]}) for part in (train_part, val_part))
        test_part = drop_observations(test_part, float(drop_rate), int(drop_seed) + 1)
    return DatasetSplits(*(part.replace(meta={**part.meta, "drop_rate": float(drop_rate),
                                              "drop_seed": int(drop_seed)})
                           for part in (train_part, val_part, test_part)))


@dataclasses.dataclass(frozen=True)
class Task:
    """A benchmark task.

    Attributes:
        name: registry name.
        description: one line for tables and ``--help``.
        metric: the headline test metric, "accuracy" or "auroc".
        loader: the function returning the raw `DatasetSplits` (keyword
            arguments only).
        seed_option: the loader's keyword that receives the run's seed (its data then depend on the seed),
            or None (the loader's own fixed split seed is used for every run).
        standardise: standardise channels (and static features) with training statistics.
        load_dtype: dtype the loader produces before standardisation (None: the run's dtype). The small
            embedded data are processed in float64 as ``neuralde-seq compare`` does.
        fixed_options: loader keyword arguments the task always sets (not options of a config), e.g.
            ``normalise=False`` for a loader that can standardise itself: the task standardises once, with
            the statistics of the training data, also for the test-set variants. Every loader with a
            ``normalise`` option must get ``normalise=False`` here when ``standardise`` is True.
        check_options: a function of the task options (a dict) that raises ``ValueError`` when they cannot
            work together (e.g. the files task's ``train``/``test`` or ``path``), or None; called when a
            config is parsed, before anything runs, and by `load_task`.
    """

    name: str
    description: str
    metric: str
    loader: Callable[..., DatasetSplits]
    seed_option: str | None = None
    standardise: bool = True
    load_dtype: torch.dtype | None = None
    fixed_options: dict = dataclasses.field(default_factory=dict)
    check_options: Callable[[dict], None] | None = None

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if not callable(self.loader):
            raise ValueError(f"task {self.name!r}: loader must be a function, got {self.loader!r}")
        if self.standardise and "normalise" in inspect.signature(self.loader).parameters and \
                self.fixed_options.get("normalise") is not False:
            # the loader would standardise first and load_task again: the double standardisation this prevents
            raise ValueError(f"task {self.name!r}: its loader can standardise itself; set fixed_options "
                             "normalise=False so that the data are standardised once")

    @property
    def data_depend_on_seed(self) -> bool:
        return self.seed_option is not None

    def load_function(self) -> Callable[..., DatasetSplits]:
        """The loader function (``loader``)."""
        return self.loader

    def option_names(self) -> tuple[str, ...]:
        """Options a config may set in ``task_options``: the loader's keyword arguments (minus those the
        task sets itself) plus ``subsample``."""
        params = inspect.signature(self.load_function()).parameters
        reserved = {"dtype", self.seed_option, *self.fixed_options}
        names = [p for p, spec in params.items()
                 if p not in reserved and spec.kind in (spec.KEYWORD_ONLY, spec.POSITIONAL_OR_KEYWORD)]
        return tuple(names) + ("subsample",)


_TASK_LIST = [
    Task("japanese-vowels", "UEA JapaneseVowels (embedded): 9 speakers, 12 LPC channels", "accuracy",
         japanese_vowels_splits, seed_option="seed", load_dtype=torch.float64),
    Task("speech-commands", "Speech Commands v0.02, 10 words (MFCC or raw audio)", "accuracy",
         load_speech_commands, fixed_options={"normalise": False}),
    Task("physionet-sepsis", "PhysioNet 2019 sepsis prediction, first 72 h (AUROC)", "auroc",
         load_physionet_sepsis, fixed_options={"normalise": False}),
    Task("eigenworms", "UEA EigenWorms: 5 classes, length 17,984", "accuracy", load_eigenworms),
    Task("character-trajectories", "UEA CharacterTrajectories: 20 characters, 3 channels", "accuracy",
         load_character_trajectories),
    Task("uea", "any UEA/UCR archive dataset (option name)", "accuracy", load_uea),
    # The Log-NCDE/SLiCE code draws a new 70/15/15 split from every run's seed (configs walker2024_uea_*.yaml).
    Task("uea-seeded-split", "any UEA/UCR archive dataset, split drawn from the run's seed (option name)", "accuracy",
         load_uea, seed_option="split_seed"),
    Task("files", "local .ts / ARFF files with their own TRAIN/TEST split (options train, test or path)",
         "accuracy", local_files_splits, load_dtype=torch.float64, check_options=check_files_options),
    Task("warped-adding", "synthetic: is the sum of two marked values > 1, events on a per-sample warped clock",
         "accuracy", warped_adding_splits, load_dtype=torch.float64),
]
TASKS: dict[str, Task] = {task.name: task for task in _TASK_LIST}
TASK_NAMES = tuple(TASKS)


def get_task(name: str) -> Task:
    """The registered task ``name``.

    Arguments:
        name: a name in `TASKS`.

    Returns:
        Its `Task`.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    return TASKS[name]


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
    if not isinstance(raw, (list, tuple)) or any(isinstance(i, bool) or not isinstance(i, int) for i in raw) \
            or len(set(raw)) != len(raw) or any(not 0 <= i < width for i in raw):
        raise ValueError(f"meta[{key!r}] of {datasets[0].name!r} must list distinct indices in [0, {width}), "
                         f"got {raw!r}")
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
            raise ValueError(f"a split to standardise has {ds.num_channels} channels, the training split "
                             f"{train.num_channels}")
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
        if s_mean is not None:
            static = _scale(ds.static, s_mean, s_std)
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
    _raw_train: IrregularDataset = dataclasses.field(repr=False, default=None)
    _raw_test: IrregularDataset = dataclasses.field(repr=False, default=None)  # before subsampling
    _loader_kwargs: dict = dataclasses.field(repr=False, default_factory=dict)
    _dtype: torch.dtype = torch.float32

    def info(self) -> dict:
        train, val, test = self.splits
        return {"task": self.task.name, "description": self.task.description, "metric": self.task.metric,
                "num_train": len(train), "num_val": len(val), "num_test": len(test),
                "channels": train.num_channels, "classes": train.num_classes,
                "static_features": 0 if train.static is None else train.static.shape[1],
                "max_length": int(train.lengths.max()), "options": dict(self.options), "seed": self.seed}

    def test_variant(self, *, drop_rate: float | None = None, subsample: int | None = None,
                     time_warp: TimeWarp | dict | None = None) -> IrregularDataset:
        """The test set the task would give with ``drop_rate`` and/or ``subsample`` replaced, and/or its
        observation times warped, standardised with the *training* split's statistics (of the data the model
        was trained on).

        ``drop_rate`` and ``subsample`` are absolute, not relative to the training options: ``drop_rate=0.5``
        drops 50 % of the original test observations (the loader's own drop protocol and seed), ``subsample=1``
        is the full sampling rate even for a model trained with ``subsample: 2``. The drop comes first, then the
        subsampling, then the time warp (`neuralde_seq.data.time_warps`: on the raw times, before the
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
        test = self._raw_test
        if drop_rate is not None and drop_rate != self._loader_kwargs.get("drop_rate", 0.0):
            kwargs = {**self._loader_kwargs, "drop_rate": drop_rate}
            test = self.task.load_function()(**kwargs).test
            base = self._raw_test
            # The variant must hold the same test samples, only other observations dropped.
            if len(test) != len(base) or not torch.equal(test.labels, base.labels) or \
                    not torch.equal(test.lengths, base.lengths):
                raise RuntimeError(f"task {self.task.name!r}: the test set loaded with drop_rate={drop_rate} "
                                   "holds different samples from the training-time test set")
        factor = self.options.get("subsample", 1) if subsample is None else _check_subsample(subsample)
        if factor != 1:
            test = subsample_dataset(test, factor)
        if time_warp is not None:
            test = warp_dataset(test, TimeWarp.from_dict(time_warp))
        if self.task.standardise:
            test = _standardise_splits(self._raw_train, test)[1]
        return test.to(dtype=self._dtype)


def load_task(name: str, /, *, seed: int = 0, dtype: torch.dtype = torch.float32, progress: bool = True,
              **options) -> TaskData:
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
    return TaskData(task=task, splits=splits, options={**options, "subsample": factor},
                    seed=int(seed) if task.data_depend_on_seed else None, _raw_train=raw.train, _raw_test=raw_test,
                    _loader_kwargs=kwargs, _dtype=dtype)
