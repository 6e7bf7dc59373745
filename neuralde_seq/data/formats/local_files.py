"""Local ``.ts`` and ARFF files as datasets, with the files' own TRAIN / TEST split.

`load_files` reads a dataset that is already on disk: no download, no archive, no cache. It takes

* two files, ``load_files("data/X_TRAIN.ts", "data/X_TEST.ts")`` (each ``.ts`` or ``.arff``, the
  format read off the extension, case-insensitive); or
* a folder, ``load_files("data/X")``, holding ``<Name>_TRAIN.ts`` and ``<Name>_TEST.ts`` (or the
  ``.arff`` pair; where both pairs are present, as in the archive's per-dataset folders, the ``.ts`` pair
  is read: both give identical arrays). A folder holding several datasets needs ``name=`` to pick one.

Relative paths are resolved against the current working directory; ``meta`` records the absolute paths.
Files are UTF-8 (a BOM tolerated), or the encoding given as ``encoding=``; a file that is not valid in it
raises ``ValueError`` naming the file, line and byte (`neuralde_seq.data.formats.text_files`, the readers' one
encoding policy and number grammar). A value or timestamp beyond what ``dtype`` carries (1e308 overflows
float32; the models handle ``|x| <= magnitude_limit(dtype)``) raises ``ValueError`` naming the file and line.

Protocol:

1. The TEST file is the test set, all of its cases in file order (``test.meta["indices"]`` = 0..N-1).
2. The validation set is carved out of the TRAIN file: ``stratified_split(train_file,
   (1 - validation_fraction, validation_fraction), split_seed)``; for regression files (step 3) the same
   split unstratified (a random split of the same sizes with the same seed). ``meta["indices"]`` of the
   train and validation parts give their cases' positions in the TRAIN file.
3. Labels. Class labels (``@classLabel true ...`` in ``.ts``, a nominal class attribute in ARFF): the class
   names are the labels that occur in the TRAIN file, in the order the TRAIN header declares them.
   Declared labels with no TRAIN case are listed in ``meta["unused_class_labels"]``. A TEST label that no
   TRAIN case has raises ``ValueError`` (a model cannot learn a class it never sees). Regression targets
   (``@targetLabel true`` in ``.ts``, a numeric class attribute in relational ARFF): the last field of
   each case is a real number; the datasets have ``labels`` None, ``class_names`` [] and ``targets`` (N,)
   of ``dtype``, and a target that is not a finite number raises ``ValueError`` naming the file and line.
   TRAIN and TEST must both be class-labelled or both regression files. Different channel counts in TRAIN
   and TEST raise ``ValueError``, and so does a TRAIN file with timestamps beside a TEST file without (or
   the reverse).
4. Times: the timestamps of a ``@timeStamps true`` ``.ts`` file, else the observation index 0..L-1.
5. Values as read: ``?`` and ``NaN`` are missing (NaN), never filled. In files without timestamps, time steps
   after a series' last observed value (every channel missing) are padding, as in the archive's
   variable-length files (the ARFF files pad every series with ``?`` to a common width): a series' length is
   the position of its last time step with any observed channel, as `load_uea` reads it. How many series had
   such a tail is in ``meta["trailing_missing_cut"]``. In a ``@timeStamps true`` file every time step carries
   its own time, so none is padding: a trailing step with every channel missing is kept (a point where the
   series is read but nothing was observed), as `from_arrays` keeps it. A series with no observed value at all raises
   ``ValueError`` naming the file and the case.

Standardisation, dropping observations and subsampling are not applied here: the ``files`` benchmark
task (`neuralde_seq.data.protocols`) adds them, and a caller of `load_files` applies
`standardise` itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from ..base.datasets import DatasetSplits, IrregularDataset, _split, stratified_split
from .arff import read_arff
from .text_files import check_encoding
from .ts_format import TsData, check_value_range, read_ts

__all__ = ["load_files", "read_file", "find_split_files"]

_FORMATS = {".ts": "ts", ".arff": "arff"}
_PAIR_RE = re.compile(r"^(?P<name>.+)_(?P<part>TRAIN|TEST)\.(?P<ext>ts|arff)$", re.IGNORECASE)


class _FileData(NamedTuple):
    """One file's cases, trimmed: (C, L_i) float64 series, (L_i,) times or None, label strings (None for an unlabelled
    file read with ``labels_required=False``), and for a regression file the (N,) float64 targets (else None)."""

    path: Path
    fmt: str
    series: list
    times: list | None
    labels: list | None
    declared: list | None
    cut: int  # number of series that had a trailing all-missing tail
    targets: np.ndarray | None


def _resolve(path, what: str) -> Path:
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a path (str or os.PathLike), got {type(path).__name__} {path!r}")
    if isinstance(path, str) and not path.strip():
        raise ValueError(f"{what} is an empty string; give a file or folder path")
    return Path(path).expanduser().resolve()


def _file_format(path: Path, what: str) -> str:
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{what}: {path} is neither a .ts nor an .arff file (the format is read off the extension)")
    return fmt


def _read(
    path: Path, what: str, dtype: torch.dtype, encoding: str | None, reader: str, labels_required: bool = True
) -> _FileData:
    """Parse one labelled file (or, without ``labels_required``, an unlabelled one too), check its values fit
    ``dtype``, and cut each series' trailing all-missing padding (module docstring, 5)."""
    if not path.exists():
        raise FileNotFoundError(f"{what}: {path} does not exist")
    if path.is_dir():
        raise IsADirectoryError(f"{what}: {path} is a folder; give a .ts or .arff file")
    fmt = _file_format(path, what)
    data: TsData = read_ts(path, encoding=encoding) if fmt == "ts" else read_arff(path, encoding=encoding)
    check_value_range(data, dtype, reader)
    if data.labels is None and labels_required:
        raise ValueError(
            f"{what}: {path} carries no labels (a .ts file needs @classLabel true ... or @targetLabel true)"
        )
    series: list[np.ndarray] = []
    times: list[np.ndarray] | None = [] if data.times is not None else None
    cut = 0
    for k, case in enumerate(data.series):
        observed = ~np.isnan(case).all(axis=0)
        if not observed.any():
            raise ValueError(f"{what}: {path}, case {k} (0-based, in file order) has no observed value at all")
        # without timestamps a trailing all-missing tail is padding; with them each step is a real time point
        length = case.shape[1] if data.times is not None else int(np.flatnonzero(observed)[-1]) + 1
        cut += int(length < case.shape[1])
        series.append(case[:, :length])
        if times is not None:
            assert data.times is not None  # times is a list exactly when the file has timestamps
            times.append(data.times[k][:length])
    # the readers have checked that every target reads as a finite number, naming the line otherwise
    targets = np.asarray(data.labels, dtype=np.float64) if data.targets else None
    labels = None if data.labels is None else list(data.labels)
    return _FileData(path, fmt, series, times, labels, data.class_labels, cut, targets)


def _class_order(labels: list, declared: list | None) -> list[str]:
    """The distinct ``labels``, in ``declared`` order when given, else sorted."""
    present = set(labels)
    if declared is not None:
        return [c for c in dict.fromkeys(declared) if c in present]
    return sorted(present)


def _dataset(part: _FileData, class_names: list[str], dtype: torch.dtype, name: str, meta: dict) -> IrregularDataset:
    if part.targets is None:
        ds = IrregularDataset.from_sequences(
            part.series, part.labels, class_names, times=part.times, dtype=dtype, name=name
        )
        return ds.replace(meta=meta)
    ds = IrregularDataset.from_sequences(part.series, None, [], times=part.times, dtype=dtype, name=name)
    return ds.replace(meta=meta, targets=torch.as_tensor(part.targets, dtype=dtype))


def _kind(part: _FileData) -> str:
    return "class labels" if part.targets is None else "regression targets (@targetLabel true)"


def _check_dtype(dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating point torch.dtype, got {dtype!r}")


def read_file(
    path: str | os.PathLike,
    *,
    dtype: torch.dtype = torch.float32,
    name: str | None = None,
    encoding: str | None = None,
    labels_required: bool = True,
) -> IrregularDataset:
    """One labelled ``.ts`` or ARFF file as an `IrregularDataset`, cases in file order.

    Arguments:
        path: the file (``.ts`` or ``.arff``, by extension; relative to the current directory).
        dtype: floating dtype of ``times``, ``values`` and (regression files) ``targets``.
        name: the dataset's name (default: the file name without its extension).
        encoding: None (default): UTF-8, a BOM tolerated; or the name of the file's encoding (``"latin-1"``).
        labels_required: True (default): a file without labels is an error; False: it is read with ``labels``
            None and ``class_names`` [] (data to predict on, `neuralde_seq.load_run`).

    Returns:
        An `IrregularDataset` of N cases: ``times`` (N, T) (timestamps of a ``@timeStamps true``
            file, else 0..L-1), ``values`` (N, T, C) with NaN for missing values and padding, ``lengths`` (N,),
            and either ``labels`` (N,) indexing ``class_names``, or for a regression file (``@targetLabel
            true``) ``targets`` (N,) with ``labels`` None and ``class_names`` [] (module docstring, step 3).
            ``meta`` records the file, its format, the declared labels and how many series lost a trailing
            all-missing tail (step 5).

    Raises:
        FileNotFoundError, IsADirectoryError: ``path`` is missing or a folder.
        ValueError: another extension, an unlabelled file (unless ``labels_required`` is False), a series with no
            observed value, a malformed line or regression target, bytes not valid in the encoding, or a value
            beyond ``dtype``'s range (naming the file and line); an unknown ``encoding``.
        TypeError: ``encoding`` is not a string.
    """
    _check_dtype(dtype)
    check_encoding(encoding)
    part = _read(_resolve(path, "path"), "path", dtype, encoding, "read_file", labels_required=bool(labels_required))
    class_names = _class_order(part.labels, part.declared) if part.targets is None and part.labels is not None else []
    meta = {
        "source": "local file",
        "file": str(part.path),
        "format": part.fmt,
        "timestamps": part.times is not None,
        "declared_class_labels": part.declared,
        "unused_class_labels": [c for c in (part.declared or []) if c not in class_names],
        "trailing_missing_cut": part.cut,
    }
    return _dataset(part, class_names, dtype, name if name is not None else part.path.stem, meta)


def find_split_files(folder: str | os.PathLike, name: str | None = None) -> tuple[Path, Path, str]:
    """The TRAIN and TEST files of a dataset folder: ``(train_path, test_path, dataset_name)``.

    Arguments:
        folder: a folder holding ``<Name>_TRAIN.ts`` and ``<Name>_TEST.ts`` (or the ``.arff`` pair; the
            ``.ts`` pair is preferred where both are complete). Not searched recursively.
        name: the dataset to pick when the folder holds several (case-sensitive, as in the file names);
            default: the one named like the folder, if any.

    Raises:
        FileNotFoundError: no such folder, or no complete TRAIN/TEST pair (the files found are listed).
        ValueError: several datasets, no ``name`` and none named like the folder.
    """
    root = _resolve(folder, "path")
    if not root.is_dir():
        raise FileNotFoundError(f"path: {root} is not a folder")
    pairs: dict[str, dict[tuple[str, str], Path]] = {}
    for entry in sorted(root.iterdir()):
        match = _PAIR_RE.match(entry.name)
        if match and entry.is_file():
            key = (match["part"].upper(), match["ext"].lower())
            pairs.setdefault(match["name"], {})[key] = entry
    if name is not None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        pairs = {k: v for k, v in pairs.items() if k == name}
    found = ", ".join(sorted(p.name for files in pairs.values() for p in files.values())) or "none"
    if not pairs:
        wanted = f"{name}_TRAIN.ts / {name}_TEST.ts (or .arff)" if name else "<Name>_TRAIN.ts / <Name>_TEST.ts"
        raise FileNotFoundError(f"path: {root} holds no {wanted} files")
    if len(pairs) > 1 and name is None and root.name in pairs:
        pairs = {root.name: pairs[root.name]}  # the folder's namesake (aeon's PickupGestureWiimoteZ/ beside _eq)
    if len(pairs) > 1:
        raise ValueError(f"path: {root} holds several datasets ({', '.join(sorted(pairs))}); pick one with name=")
    ((dataset, files),) = pairs.items()
    for ext in ("ts", "arff"):
        if ("TRAIN", ext) in files and ("TEST", ext) in files:
            return files[("TRAIN", ext)], files[("TEST", ext)], dataset
    raise FileNotFoundError(
        f"path: {root} has no complete TRAIN/TEST pair of one format for {dataset!r} (found: {found})"
    )


def load_files(
    train: str | os.PathLike,
    test: str | os.PathLike | None = None,
    *,
    validation_fraction: float = 0.15,
    split_seed: int = 0,
    dtype: torch.dtype = torch.float32,
    name: str | None = None,
    encoding: str | None = None,
) -> DatasetSplits:
    """A local labelled dataset with its own TRAIN / TEST split (see the module docstring for the protocol).

    Arguments:
        train: the TRAIN file (``.ts`` / ``.arff``), or a folder holding ``<Name>_TRAIN`` and ``<Name>_TEST``
            files (then ``test`` must be None). Relative paths are resolved against the current directory.
        test: the TEST file; required when ``train`` is a file.
        validation_fraction: share of the TRAIN file carved out, stratified (at random for regression files),
            as the validation set, in (0, 1).
        split_seed: seed of that split (non-negative integer).
        dtype: floating dtype of ``times``, ``values`` and (regression files) ``targets``.
        name: the dataset's name; with a folder, also which dataset to read when it holds several.
            Default: the ``<Name>`` of the files (a TRAIN file name without ``_TRAIN`` and extension).
        encoding: None (default): UTF-8, a BOM tolerated; or the name of both files' encoding (``"latin-1"``).

    Returns:
        ``DatasetSplits(train, val, test)`` of `IrregularDataset`, each with
            ``times`` (N, T), ``values`` (N, T, C) (NaN = missing or padding), ``lengths`` (N,), ``labels`` (N,)
            and the same ``class_names``, or for regression files ``targets`` (N,), ``labels`` None and
            ``class_names`` []; T is the longest series of each part's file. ``meta`` records the
            absolute file paths, format, ``part``, ``indices`` (positions in the file the part comes from),
            ``num_file_train``, ``split_seed``, ``validation_fraction``, the declared and unused class labels.

    Raises:
        FileNotFoundError / IsADirectoryError: a missing file or folder, a folder without a TRAIN/TEST pair.
        ValueError: a bad argument (named); TRAIN and TEST the same file; a TEST label absent from TRAIN;
            a regression file beside a class-labelled one; different channel counts; timestamps in one file
            only; a malformed file or regression target, bytes not valid in the encoding, a value beyond
            ``dtype``'s range (file and line named); an unknown ``encoding``.
        TypeError: a path that is not a str or os.PathLike; ``encoding`` not a string.
    """
    _check_dtype(dtype)
    check_encoding(encoding)
    if (
        isinstance(validation_fraction, bool)
        or not isinstance(validation_fraction, (int, float, np.floating))
        or not 0.0 < float(validation_fraction) < 1.0
    ):
        raise ValueError(f"validation_fraction must be a number in (0, 1), got {validation_fraction!r}")
    if isinstance(split_seed, bool) or not isinstance(split_seed, (int, np.integer)) or split_seed < 0:
        raise ValueError(f"split_seed must be a non-negative integer, got {split_seed!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"name must be a non-empty string or None, got {name!r}")

    train_path = _resolve(train, "train")
    if not train_path.exists():  # a misspelt path: say so, rather than ask for a test file
        raise FileNotFoundError(f"train: {train_path} does not exist")
    if train_path.is_dir():
        if test is not None:
            raise ValueError(
                f"test must be None when train is a folder ({train_path}): the folder's "
                "<Name>_TEST file is the test set"
            )
        train_path, test_path, found_name = find_split_files(train_path, name)
    else:
        if test is None:
            raise ValueError(
                f"test is required when train is a file ({train_path}); pass the TEST file, or "
                "the folder holding both. For a single file without a test split use read_file and "
                "stratified_split"
            )
        test_path = _resolve(test, "test")
        found_name = re.sub(r"_TRAIN$", "", train_path.stem, flags=re.IGNORECASE)
    if train_path == test_path:
        raise ValueError(f"train and test are the same file ({train_path}): the test set must be held out")
    dataset_name = name if name is not None else found_name

    tr = _read(train_path, "train", dtype, encoding, "load_files")
    te = _read(test_path, "test", dtype, encoding, "load_files")
    if (tr.targets is None) != (te.targets is None):
        raise ValueError(
            f"the TRAIN file {train_path} holds {_kind(tr)} and the TEST file {test_path} holds "
            f"{_kind(te)}: both files must hold class labels or both regression targets"
        )
    regression = tr.targets is not None
    c_train, c_test = tr.series[0].shape[0], te.series[0].shape[0]
    if c_train != c_test:
        raise ValueError(
            f"the TRAIN file {train_path} has {c_train} channels, the TEST file {test_path} has "
            f"{c_test}: they must agree"
        )
    if (tr.times is None) != (te.times is None):
        has, lacks = (train_path, test_path) if tr.times is not None else (test_path, train_path)
        raise ValueError(
            f"{has} has timestamps (@timeStamps true) and {lacks} has none: both files must be timestamped or neither"
        )
    class_names = []
    if not regression:
        assert tr.labels is not None and te.labels is not None  # _read required labels (or targets)
        class_names = _class_order(tr.labels, tr.declared)
        unseen = sorted(set(te.labels) - set(class_names))
        if unseen:
            first = next(k for k, lab in enumerate(te.labels) if lab in unseen)
            raise ValueError(
                f"the TEST file {test_path} has label(s) {unseen} that no case of the TRAIN file "
                f"{train_path} has (first: case {first}); TRAIN labels: {class_names}"
            )

    meta = {
        "source": "local files",
        "train_file": str(train_path),
        "test_file": str(test_path),
        "format": tr.fmt if tr.fmt == te.fmt else f"{tr.fmt}+{te.fmt}",
        "timestamps": tr.times is not None,
        "declared_class_labels": tr.declared,
        "unused_class_labels": [c for c in (tr.declared or []) if c not in class_names],
        "trailing_missing_cut": {"train_file": tr.cut, "test_file": te.cut},
        "num_file_train": len(tr.series),
        "split_seed": int(split_seed),
        "validation_fraction": float(validation_fraction),
    }
    train_full = _dataset(tr, class_names, dtype, dataset_name, meta)
    test_set = _dataset(
        te, class_names, dtype, dataset_name, {**meta, "part": "test", "indices": list(range(len(te.series)))}
    )
    fractions = (1.0 - float(validation_fraction), float(validation_fraction))
    # regression targets cannot be stratified: the same split's plain random form (same sizes, same seed)
    parts = (
        _split(train_full, fractions, int(split_seed), stratify=False, return_indices=True)
        if regression
        else stratified_split(train_full, fractions, int(split_seed), return_indices=True)
    )
    out = [
        part.replace(meta={**meta, "part": part_name, "indices": [int(i) for i in indices]})
        for part_name, (part, indices) in zip(("train", "val"), parts)
    ]
    return DatasetSplits(out[0], out[1], test_set)
