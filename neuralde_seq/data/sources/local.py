"""The ``files`` task: a dataset in local ``.ts`` / ARFF files (`load_files`) in the benchmark protocol."""

from __future__ import annotations

import os

import torch

from ..base.datasets import DatasetSplits
from ..base.registry import Task, register_task
from ..formats.local_files import load_files
from ..transforms.sampling import drop_observations

__all__ = ["check_files_options", "local_files_splits"]


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
        raise ValueError(
            "give either path (a folder with <Name>_TRAIN / <Name>_TEST files) or train and test "
            f"(two files), not both; got {', '.join(given)}"
        )
    if "path" not in given and given != ["train", "test"]:
        missing = [key for key in ("train", "test") if key not in given]
        raise ValueError(
            f"the files task needs train and test (two files) or path (a folder); missing: {', '.join(missing)}"
        )


def local_files_splits(
    *,
    train: str | os.PathLike | None = None,
    test: str | os.PathLike | None = None,
    path: str | os.PathLike | None = None,
    name: str | None = None,
    validation_fraction: float = 0.15,
    split_seed: int = 0,
    drop_rate: float = 0.0,
    drop_seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> DatasetSplits:
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
    source = path if path is not None else train
    assert source is not None  # check_files_options: path, or train and test
    splits = load_files(
        source,
        None if path is not None else test,
        validation_fraction=validation_fraction,
        split_seed=split_seed,
        dtype=dtype,
        name=name,
    )
    train_part, val_part, test_part = splits
    if train_part.targets is not None:  # load_files has checked that TEST holds targets too
        raise ValueError(
            f"the files task is a classification benchmark, but {train_part.meta['train_file']} and "
            f"{train_part.meta['test_file']} are regression files (@targetLabel true: real-valued "
            "targets, not classes). Regression files are read by neuralde_seq.load_files / "
            "neuralde_seq.data.read_file; train with neuralde_seq.sklearn.SequenceRegressor or "
            "neuralde_seq.fit(..., Regression())"
        )
    if drop_rate > 0:
        assert train_part.labels is not None and val_part.labels is not None  # class labels: no targets (above)
        # Rebuild the TRAIN file's dataset (both parts keep its padded length) in file order, drop, re-split.
        positions = torch.tensor(train_part.meta["indices"] + val_part.meta["indices"])
        order = torch.argsort(positions)
        whole = train_part.replace(
            times=torch.cat([train_part.times, val_part.times])[order],
            values=torch.cat([train_part.values, val_part.values])[order],
            lengths=torch.cat([train_part.lengths, val_part.lengths])[order],
            labels=torch.cat([train_part.labels, val_part.labels])[order],
        )
        whole = drop_observations(whole, float(drop_rate), int(drop_seed))
        train_part, val_part = (
            whole.subset(part.meta["indices"]).replace(meta={**part.meta, "transforms": whole.meta["transforms"]})
            for part in (train_part, val_part)
        )
        test_part = drop_observations(test_part, float(drop_rate), int(drop_seed) + 1)
    return DatasetSplits(
        *(
            part.replace(meta={**part.meta, "drop_rate": float(drop_rate), "drop_seed": int(drop_seed)})
            for part in (train_part, val_part, test_part)
        )
    )


register_task(
    Task(
        "files",
        "local .ts / ARFF files with their own TRAIN/TEST split (options train, test or path)",
        "accuracy",
        local_files_splits,
        load_dtype=torch.float64,
        check_options=check_files_options,
    )
)
