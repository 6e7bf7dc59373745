"""Loaders for the UEA & UCR time series classification archives: any dataset by name, EigenWorms and
CharacterTrajectories.

**Which files (pinned).** The loaders read the *2018 releases* of the whole archives,
``Multivariate2018_ts.zip`` / ``Multivariate2018_arff.zip`` (the 30 UEA multivariate datasets) and
``Univariate2018_ts.zip`` / ``Univariate2018_arff.zip`` (the 128 UCR datasets), from
``https://www.timeseriesclassification.com/aeon-toolkit/Archives/``. The CDE papers' public code
(NeuralCDE, and CKConv after it) downloaded ``Multivariate2018_ts.zip`` and the NRDE code
``Multivariate2018_arff.zip``, then from ``.../Downloads/Archives/``, the address these files had before
the site moved them. The per-dataset zips (``.../aeon-toolkit/<Name>.zip``) are *not* used: they
follow the current state of each dataset, and CharacterTrajectories' changed on 1 November 2023
(leading/trailing zeros added, train/test split resampled; tsml-repo issue 95), while the 2018 archive
zips still hold the version the papers used. The price is one large download (the whole archive) for
the first dataset; only the requested dataset's members are read from it, straight from the zip (no
extraction), and its tensors are cached, so the archive is not needed again for that dataset.

**Checksums.** No checksum of these archive files is published (the site, aeon, sktime, tsml-repo,
torchtime, NeuralCDE and NeuralRDE give none), so none is invented here: every pinned
`RemoteFile` has ``sha256=None`` and the trust-on-first-use policy of
`neuralde_seq.data.io.download` applies: the first download's SHA-256 is recorded in
``<archive>.sha256`` beside it (with a warning) and verified on every later use. Files passed through
``remotes`` with a SHA-256 are verified against it.

**Protocol** (the CDE papers' public code; docs/design.md#dataset-protocols):

1. The archive's TRAIN and TEST files are concatenated (TRAIN first) into one dataset.
2. Class labels are numbered in order of first appearance in TRAIN then TEST, as the NCDE/CKConv code
   does (``class_names[k]`` is the k-th distinct label met). Besides reproducing their integer labels,
   this matters for the split: scikit-learn's stratified shuffle draws its random numbers class by class
   in the order of the label codes, so another numbering would pick other samples with the same seed.
   The archive's declared label order is kept in ``meta["declared_class_labels"]``.
3. Values stay as read: NaN (``?``) stays NaN, never zero-filled. A series' length is the position of its
   last time step with any observed channel (so the ``?`` padding of variable-length datasets in the ARFF
   files, and any trailing NaNs of the ``.ts`` files, become padding); missing values inside the series
   stay NaN. Times are the observation index 0..L-1 (the archives carry no timestamps).
4. Drop rates (``drop_rate`` 0.3/0.5/0.7): `drop_observations` with
   ``drop_seed`` on the whole concatenated dataset, *before* the split, as the CDE code does, so the points
   dropped from a sample do not depend on ``split_seed``. Deviation, on purpose: the NCDE/CKConv code
   removes ``int(T_max * rate)`` positions drawn from the *padded* grid (``torch.randperm``, generator
   seed 56789), so short series lose fewer real points than the rate says; here each sample loses
   ``round(rate * L_i)`` of its own observed points (at least 2 are kept), i.e. the rate is honoured per
   sample, and the points differ from theirs.
5. Split 70/15/15, stratified: ``stratified_split(dataset, (0.7, 0.15, 0.15), split_seed)``, which takes
   ``train_test_split(train_size=0.7, random_state=split_seed)`` and then splits the rest in halves with
   ``random_state=split_seed + 1``. The NCDE code's ``split_data`` does exactly this with random states 0
   and 1, so the default ``split_seed=0`` gives the same train/val/test samples as their code (given the
   label numbering of step 2). The NRDE code (EigenWorms) split *unstratified* after
   ``np.random.seed(0)``; that split cannot be reproduced with a stratified one, but the sizes are the
   same (EigenWorms: 181/39/39). Options for the Log-NCDE/SLiCE protocol (Walker et al.): ``stratified=False``
   makes both steps plain random splits (the same sizes; their code permutes TRAIN+TEST at random), and
   ``drop_repeated=True`` first keeps only the first occurrence of series that repeat an earlier one exactly
   (length, values and times, whatever the label: their ``process_uea.py`` drops repeated rows, EigenWorms
   259 → 236). The task ``uea-seeded-split`` draws the split from each run's seed, as their code does.
6. Nothing else: standardisation, the time channel, forward filling and log-signatures are the model
   input's business (``standardise(train, val, test)`` with training statistics, then
   ``build_control``/``model_inputs`` options), as for the embedded JapaneseVowels data.

The parsed TRAIN+TEST tensors (float64, before dropping and splitting) are cached once per dataset and
format with `cached_tensors` under ``<cache>/uea/tensors``; drop rates,
seeds and dtypes are applied on every load (cheap). Each part's ``meta["indices"]`` gives its samples'
positions in the TRAIN+TEST concatenation (positions below ``meta["num_archive_train"]`` came from TRAIN).
"""

from __future__ import annotations

import difflib
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ...cache import CorruptCacheError, cached_tensors
from ..base.datasets import DatasetSplits, IrregularDataset, _split
from ..base.options import LoadOptions, accepts_load_options
from ..base.registry import Task, register_task
from ..formats.arff import decode_archive_text, parse_arff
from ..formats.text_files import split_lines
from ..formats.ts_format import TsData, parse_ts
from ..io.download import RemoteFile, data_dir, fetch
from ..transforms.sampling import drop_observations

__all__ = [
    "ARCHIVE_BASE_URL",
    "first_occurrences",
    "CDE_SPLIT_SEED",
    "UEA_MULTIVARIATE_2018",
    "load_character_trajectories",
    "load_eigenworms",
    "load_uea",
    "uea_archive",
]

ARCHIVE_BASE_URL = "https://www.timeseriesclassification.com/aeon-toolkit/Archives/"
CDE_SPLIT_SEED = 0  # random_state 0 (train vs rest) and 1 (val vs test) in the NCDE code's split_data
SPLIT_FRACTIONS = (0.7, 0.15, 0.15)
FORMATS = ("ts", "arff")
_PARSER_VERSION = 1  # bump when parsing or the cached layout changes, so old tensor caches are not used

# The 30 datasets of the UEA multivariate archive, 2018 release (Bagnall et al., arXiv:1811.00075).
UEA_MULTIVARIATE_2018 = (
    "ArticularyWordRecognition",
    "AtrialFibrillation",
    "BasicMotions",
    "CharacterTrajectories",
    "Cricket",
    "DuckDuckGeese",
    "EigenWorms",
    "Epilepsy",
    "ERing",
    "EthanolConcentration",
    "FaceDetection",
    "FingerMovements",
    "HandMovementDirection",
    "Handwriting",
    "Heartbeat",
    "InsectWingbeat",
    "JapaneseVowels",
    "Libras",
    "LSST",
    "MotorImagery",
    "NATOPS",
    "PEMS-SF",
    "PenDigits",
    "PhonemeSpectra",
    "RacketSports",
    "SelfRegulationSCP1",
    "SelfRegulationSCP2",
    "SpokenArabicDigits",
    "StandWalkJump",
    "UWaveGestureLibrary",
)

# archive file -> the folder its datasets sit in (member paths are <folder>/<Name>/<Name>_TRAIN.<fmt>)
_ARCHIVE_FOLDERS = {
    "Multivariate2018_ts.zip": "Multivariate_ts",
    "Multivariate2018_arff.zip": "Multivariate_arff",
    "Univariate2018_ts.zip": "Univariate_ts",
    "Univariate2018_arff.zip": "Univariate_arff",
}

# Published sizes, checked when the pinned archives are used (a mismatch means another data version).
_PUBLISHED = {
    "EigenWorms": {"samples": 259, "channels": 6, "classes": 5, "max_length": 17984},
    "CharacterTrajectories": {"samples": 2858, "channels": 3, "classes": 20, "max_length": 182},
}


def uea_archive(name: str, fmt: str = "ts") -> RemoteFile:
    """The pinned 2018 archive file that holds dataset ``name`` in format ``fmt`` ("ts" or "arff").

    The 30 names of `UEA_MULTIVARIATE_2018` are in the multivariate archive; every other name is
    looked for in the univariate (UCR) one. ``sha256`` is None: no checksum is published (module docstring).
    """
    _check_name(name)
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    kind = "Multivariate" if name in UEA_MULTIVARIATE_2018 else "Univariate"
    filename = f"{kind}2018_{fmt}.zip"
    return RemoteFile(url=ARCHIVE_BASE_URL + filename, filename=filename, sha256=None)


def _check_name(name) -> None:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_\-]*", name):
        raise ValueError(f"name must be a dataset name such as 'CharacterTrajectories', got {name!r}")
    folded = {known.lower(): known for known in UEA_MULTIVARIATE_2018}
    if name not in UEA_MULTIVARIATE_2018 and name.lower() in folded:
        raise ValueError(
            f"unknown dataset {name!r}; the archive spells it {folded[name.lower()]!r} (names are case-sensitive)"
        )


def _find_member(names: list[str], dataset: str, part: str, fmt: str, folder: str | None, archive: Path) -> str:
    """The zip member holding ``<dataset>_<part>.<fmt>`` (the expected path first, else by file name)."""
    wanted = f"{dataset}_{part}.{fmt}"
    if folder is not None and f"{folder}/{dataset}/{wanted}" in names:
        return f"{folder}/{dataset}/{wanted}"
    matches = [n for n in names if n.rsplit("/", 1)[-1] == wanted]
    if len(matches) > 1:  # prefer a file inside a folder named after the dataset
        matches = [n for n in matches if n.rsplit("/", 2)[-2:-1] == [dataset]] or matches
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise CorruptCacheError(f"archive {archive} holds several files named {wanted}: {matches}")
    suffix = f"_{part}.{fmt}"
    available = sorted({n.rsplit("/", 1)[-1][: -len(suffix)] for n in names if n.endswith(suffix)})
    close = difflib.get_close_matches(dataset, available, n=3)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise ValueError(
        f"dataset {dataset!r} is not in archive {archive} (no member {wanted}; names are case-sensitive).{hint}"
    )


def _read_member(bundle: zipfile.ZipFile, member: str, fmt: str, archive: Path) -> TsData:
    source = f"{archive}:{member}"
    try:
        raw = bundle.read(member)
    except (zipfile.BadZipFile, EOFError, OSError) as error:  # CRC mismatch, truncated archive
        raise CorruptCacheError(
            f"archive {archive} is corrupt ({type(error).__name__}: {error}); delete it to download it again"
        ) from error
    lines = split_lines(decode_archive_text(raw, source))  # UTF-8 or a ValueError naming the member and line
    return parse_ts(lines, source=source) if fmt == "ts" else parse_arff(lines, source=source)


def _trim_trailing_missing(series: np.ndarray, times: np.ndarray | None, where: str):
    """Cut a (C, L) series after its last time step with any observed channel (padding -> length)."""
    observed = ~np.isnan(series).all(axis=0)
    if not observed.any():
        raise ValueError(f"{where} has no observed value at all")
    length = int(np.flatnonzero(observed)[-1]) + 1
    return series[:, :length], (None if times is None else times[:length])


def _parse_archive(archive: Path, name: str, fmt: str, folder: str | None) -> dict:
    """Read TRAIN and TEST of ``name`` from the zip and return the cacheable TRAIN+TEST tensors."""
    try:
        bundle = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as error:
        raise CorruptCacheError(
            f"archive {archive} cannot be opened as a zip file ({error}); delete it to download it again"
        ) from error
    with bundle:
        names = bundle.namelist()
        parts = {
            part: _read_member(bundle, _find_member(names, name, part, fmt, folder, archive), fmt, archive)
            for part in ("TRAIN", "TEST")
        }
    train, test = parts["TRAIN"], parts["TEST"]
    for part, data in parts.items():
        if data.labels is None:
            raise ValueError(f"{name} {part} ({archive}) carries no class labels")
    if train.series[0].shape[0] != test.series[0].shape[0]:
        raise ValueError(f"{name}: TRAIN has {train.series[0].shape[0]} channels, TEST {test.series[0].shape[0]}")
    timestamped = train.times is not None or test.times is not None
    series, times = [], []
    for part, data in parts.items():
        for k, case in enumerate(data.series):
            case_times = None
            if timestamped:
                case_times = data.times[k] if data.times is not None else np.arange(case.shape[1], dtype=np.float64)
            case, case_times = _trim_trailing_missing(case, case_times, f"{name} {part} case {k}")
            series.append(case)
            times.append(case_times)
    assert train.labels is not None and test.labels is not None  # refused above without
    labels = list(train.labels) + list(test.labels)
    class_names = list(dict.fromkeys(labels))  # first appearance, TRAIN then TEST (module docstring, step 2)
    dataset = IrregularDataset.from_sequences(
        series, labels, class_names, times=times if timestamped else None, dtype=torch.float64, name=name
    )
    return {
        "values": dataset.values,
        "lengths": dataset.lengths,
        "labels": dataset.labels,
        "times": dataset.times if timestamped else None,
        "class_names": class_names,
        "declared_class_labels": list(train.class_labels or []),
        "num_archive_train": len(train),
    }


def _check_format(fmt) -> None:
    """This loader's own option; the shared ones (seeds, drop rate, dtype, ...) are checked by `LoadOptions`."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")


def first_occurrences(dataset: IrregularDataset) -> np.ndarray:
    """The positions of the samples that do not repeat an earlier sample exactly (same length, and the same times
    and values, NaN where NaN, over it; labels are not compared), in order.

    Arguments:
        dataset: an `IrregularDataset`.

    Returns:
        (M,) int positions, increasing: the first occurrence of every distinct series.
    """
    seen, keep = set(), []
    for i in range(len(dataset)):
        length = int(dataset.lengths[i])
        values = dataset.values[i, :length].double().cpu().numpy()
        times = dataset.times[i, :length].double().cpu().numpy()
        # NaN != NaN: compare the values with NaN set to 0 together with the NaN mask
        key = (length, times.tobytes(), np.nan_to_num(values, nan=0.0).tobytes(), np.isnan(values).tobytes())
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)


@accepts_load_options
def load_uea(
    name: str,
    *,
    fmt: str = "ts",
    cache_dir: str | os.PathLike | None = None,
    remotes: Sequence[RemoteFile] | None = None,
    offline: bool | None = None,
    split_seed: int = CDE_SPLIT_SEED,
    drop_rate: float = 0.0,
    drop_seed: int = 0,
    dtype: torch.dtype = torch.float32,
    progress: bool = True,
    stratified: bool = True,
    drop_repeated: bool = False,
    options: LoadOptions | None = None,
) -> DatasetSplits:
    """Any UEA/UCR archive dataset, split 70/15/15 as in the CDE papers (see the module docstring).

    Arguments:
        name: the dataset's name as the archive spells it (case-sensitive), e.g. "CharacterTrajectories".
        fmt: read the ".ts" files ("ts", default, as the NCDE code did) or the ARFF files ("arff", as the
            NRDE code did); both give identical tensors.
        cache_dir: root of the data cache (default ``$NEURALDE_SEQ_DATA`` or ``~/.cache/neuralde_seq``);
            this loader uses its ``uea/`` sub-directory.
        remotes: replaces the pinned archive: a sequence holding exactly one ``.zip`` `RemoteFile`
            laid out like the archive (``<folder>/<name>/<name>_TRAIN.<fmt>``, found by file name when the
            folders differ). Used by the tests with ``file://`` fixtures.
        offline: True = use only cached files; None reads ``$NEURALDE_SEQ_OFFLINE``.
        split_seed: seed of `stratified_split`; 0 reproduces the NCDE split.
        drop_rate: fraction of each sample's time points to set missing (0 = none), applied before the split.
        drop_seed: seed of `drop_observations`.
        dtype: floating dtype of ``times`` and ``values`` of the returned datasets.
        progress: show download progress.
        options: a `LoadOptions` holding the eight shared keywords (``cache_dir`` to ``progress``) at once,
            instead of giving them one by one (giving both raises ``TypeError``); None (default).
        stratified: True (default): the stratified split of the CDE papers; False: plain random splits of the
            same sizes (the Log-NCDE/SLiCE code).
        drop_repeated: drop every series that repeats an earlier one of TRAIN+TEST exactly (length, values
            and times, whatever its label), before dropping observations and splitting (default False; the
            Log-NCDE/SLiCE code does). ``meta["repeated_dropped"]`` lists the positions dropped.

    Returns:
        ``DatasetSplits(train, val, test)`` of `IrregularDataset`: ``times`` (N, T)
            observation indices, ``values`` (N, T, C) with NaN for missing values and padding, ``lengths`` (N,),
            ``labels`` (N,). Every part has the same ``class_names`` and padded length T (the longest series of
            the whole dataset). ``meta`` records the source, the options, ``part`` and ``indices`` (positions
            in the TRAIN+TEST concatenation, repeated series included).

    Raises:
        ValueError: a bad argument, or ``name`` is not in the archive (with close names suggested).
        DataUnavailableError: a file is neither cached nor obtainable (e.g. offline); see `fetch`.
        ChecksumError: a downloaded or cached file's SHA-256 differs from the expected one; see `fetch`.
        CorruptCacheError: a cached file is damaged; see `cached_tensors`.
    """
    _check_name(name)
    _check_format(fmt)
    for arg, value in (("stratified", stratified), ("drop_repeated", drop_repeated)):
        if not isinstance(value, bool):
            raise ValueError(f"{arg} must be True or False, got {value!r}")
    if remotes is None:
        archive_remote = uea_archive(name, fmt)
    else:
        remotes = list(remotes)
        if len(remotes) != 1 or not isinstance(remotes[0], RemoteFile) or not remotes[0].filename.endswith(".zip"):
            raise ValueError(
                f"remotes must hold exactly one .zip RemoteFile laid out like the archive, got {remotes!r}"
            )
        archive_remote = remotes[0]
    root = data_dir(cache_dir) / "uea"
    key = {
        "name": name,
        "loader": "uea",
        "parser_version": _PARSER_VERSION,
        "format": fmt,
        "archive": {"url": archive_remote.url, "filename": archive_remote.filename, "sha256": archive_remote.sha256},
    }

    def build() -> dict:
        archive = fetch(archive_remote, root, offline=offline, progress=progress)
        return _parse_archive(archive, name, fmt, _ARCHIVE_FOLDERS.get(archive_remote.filename))

    data = cached_tensors(root / "tensors", key, build)
    values = data["values"]
    times = data["times"]
    if times is None:
        times = torch.arange(values.shape[1], dtype=values.dtype).expand(values.shape[0], -1).clone()
    dataset = IrregularDataset(
        times=times,
        values=values,
        lengths=data["lengths"],
        labels=data["labels"],
        class_names=list(data["class_names"]),
        name=name,
        meta={
            "source": "UEA & UCR time series classification archive",
            "archive": archive_remote.filename,
            "url": archive_remote.url,
            "format": fmt,
            "label_order": "first appearance in TRAIN then TEST (NCDE/CKConv code)",
            "declared_class_labels": list(data["declared_class_labels"]),
            "num_archive_train": int(data["num_archive_train"]),
            "split_seed": int(split_seed),
            "drop_rate": float(drop_rate),
            "drop_seed": int(drop_seed),
            "stratified": stratified,
            "drop_repeated": drop_repeated,
        },
    )
    positions = np.arange(len(dataset))  # each sample's position in TRAIN+TEST
    if drop_repeated:
        positions = first_occurrences(dataset)
        dropped = sorted(set(range(len(dataset))) - set(positions.tolist()))
        dataset = dataset.subset(positions.tolist())
        dataset = dataset.replace(meta={**dataset.meta, "repeated_dropped": dropped})
    if drop_rate > 0:
        dataset = drop_observations(dataset, float(drop_rate), int(drop_seed))
    parts = _split(dataset, SPLIT_FRACTIONS, int(split_seed), stratify=stratified, return_indices=True)
    out = []
    for part_name, (part, indices) in zip(("train", "val", "test"), parts):
        meta = {**part.meta, "part": part_name, "indices": [int(positions[i]) for i in indices]}
        out.append(part.replace(meta=meta).to(dtype=dtype))
    return DatasetSplits(*out)


def _check_published(splits: DatasetSplits, name: str, whole: bool) -> None:
    """Compare with the published description (channels and classes always; sizes for the pinned files)."""
    expected = _PUBLISHED[name]
    train = splits.train
    found = {"channels": train.num_channels, "classes": train.num_classes}
    if whole:
        found["samples"] = sum(len(part) for part in splits)
        found["max_length"] = int(max(int(part.lengths.max()) for part in splits))
    wrong = {k: (v, expected[k]) for k, v in found.items() if v != expected[k]}
    if wrong:
        details = ", ".join(f"{k} {got} (expected {want})" for k, (got, want) in wrong.items())
        raise RuntimeError(
            f"the {name} data read do not match the published dataset: {details}. The archive "
            "may be another version of the data."
        )


@accepts_load_options
def load_eigenworms(
    *,
    fmt: str = "ts",
    cache_dir: str | os.PathLike | None = None,
    remotes: Sequence[RemoteFile] | None = None,
    offline: bool | None = None,
    split_seed: int = CDE_SPLIT_SEED,
    drop_rate: float = 0.0,
    drop_seed: int = 0,
    dtype: torch.dtype = torch.float32,
    progress: bool = True,
    options: LoadOptions | None = None,
) -> DatasetSplits:
    """EigenWorms (UEA): 259 series of length 17,984, 6 channels, 5 classes; split 181/39/39 by default.

    `load_uea` with ``name="EigenWorms"`` (see it for the arguments), plus a check that the data have
    6 channels and 5 classes (and 259 series of length 17,984 when the pinned archive is used).

    The NRDE protocol's time channel, forward fill and standard scaling (docs/design.md#dataset-protocols) are *not*
    applied here: the loader returns the raw values, as every loader does. They belong to the model input:
    scale with ``standardise(train, val, test)`` (training statistics), then build the control with
    ``time_channel=True`` and ``missing="forward_fill"`` (only relevant with a drop rate: EigenWorms has no
    missing values) and the log-signature windows (``interpolation="logsignature"``, ``depth``, ``step``).
    The NRDE code's split was unstratified (``np.random.seed(0)``) and is not reproduced; the sizes are.

    Arguments:
        fmt: read the ".ts" files ("ts", default) or the ARFF files ("arff"); both give identical tensors.
        cache_dir: root of the data cache (default ``$NEURALDE_SEQ_DATA`` or ``~/.cache/neuralde_seq``);
            the ``uea/`` sub-directory is used.
        remotes: replaces the pinned archive: a sequence holding exactly one ``.zip`` `RemoteFile` laid out
            like the archive (as `load_uea`), or None (default).
        offline: True = use only cached files; None (default) reads ``$NEURALDE_SEQ_OFFLINE``.
        split_seed: seed of `stratified_split` (default: the NCDE split's, 0).
        drop_rate: fraction of each sample's time points to set missing (default 0 = none), applied before
            the split.
        drop_seed: seed of `drop_observations` (default 0).
        dtype: floating dtype of ``times`` and ``values`` of the returned datasets (default float32).
        progress: show download progress (default True).
        options: a `LoadOptions` holding the eight shared keywords (``cache_dir`` to ``progress``) at once,
            instead of giving them one by one (giving both raises ``TypeError``); None (default).

    Returns:
        ``DatasetSplits(train, val, test)`` of `IrregularDataset`, as `load_uea`: ``times`` (N, T),
            ``values`` (N, T, C), ``lengths`` (N,), ``labels`` (N,).

    Raises:
        ValueError: a bad argument.
        RuntimeError: the data read do not match the published dataset (channels, classes; with the pinned
            archive also the number of series and the longest length).
        DataUnavailableError: a file is neither cached nor obtainable (e.g. offline); see `fetch`.
        ChecksumError: a downloaded or cached file's SHA-256 differs from the expected one; see `fetch`.
        CorruptCacheError: a cached file is damaged; see `cached_tensors`.
    """
    splits = load_uea(
        "EigenWorms",
        fmt=fmt,
        cache_dir=cache_dir,
        remotes=remotes,
        offline=offline,
        split_seed=split_seed,
        drop_rate=drop_rate,
        drop_seed=drop_seed,
        dtype=dtype,
        progress=progress,
    )
    _check_published(splits, "EigenWorms", whole=remotes is None)
    return splits


@accepts_load_options
def load_character_trajectories(
    *,
    fmt: str = "ts",
    cache_dir: str | os.PathLike | None = None,
    remotes: Sequence[RemoteFile] | None = None,
    offline: bool | None = None,
    split_seed: int = CDE_SPLIT_SEED,
    drop_rate: float = 0.0,
    drop_seed: int = 0,
    dtype: torch.dtype = torch.float32,
    progress: bool = True,
    options: LoadOptions | None = None,
) -> DatasetSplits:
    """CharacterTrajectories (UEA, 2018 version): 2,858 pen-tip trajectories (1,422 TRAIN + 1,436 TEST),
    3 channels (x and y velocity, pen-tip force), 20 classes, variable lengths up to 182.

    `load_uea` with ``name="CharacterTrajectories"`` (see it for the arguments), plus a check of
    3 channels and 20 classes (and 2,858 series, longest 182, when the pinned archive is used). The 2018
    archive is pinned because the per-dataset download changed in November 2023 (zero padding, new
    split). The drop rates of the CDE papers' irregular-sampling runs are ``drop_rate=0.3, 0.5, 0.7``
    (rate honoured per sample; see the module docstring for how this differs from their code).

    Arguments:
        fmt: read the ".ts" files ("ts", default) or the ARFF files ("arff"); both give identical tensors.
        cache_dir: root of the data cache (default ``$NEURALDE_SEQ_DATA`` or ``~/.cache/neuralde_seq``);
            the ``uea/`` sub-directory is used.
        remotes: replaces the pinned archive: a sequence holding exactly one ``.zip`` `RemoteFile` laid out
            like the archive (as `load_uea`), or None (default).
        offline: True = use only cached files; None (default) reads ``$NEURALDE_SEQ_OFFLINE``.
        split_seed: seed of `stratified_split` (default: the NCDE split's, 0).
        drop_rate: fraction of each sample's time points to set missing (default 0 = none), applied before
            the split.
        drop_seed: seed of `drop_observations` (default 0).
        dtype: floating dtype of ``times`` and ``values`` of the returned datasets (default float32).
        progress: show download progress (default True).
        options: a `LoadOptions` holding the eight shared keywords (``cache_dir`` to ``progress``) at once,
            instead of giving them one by one (giving both raises ``TypeError``); None (default).

    Returns:
        ``DatasetSplits(train, val, test)`` of `IrregularDataset`, as `load_uea`: ``times`` (N, T),
            ``values`` (N, T, C), ``lengths`` (N,), ``labels`` (N,).

    Raises:
        ValueError: a bad argument.
        RuntimeError: the data read do not match the published dataset (channels, classes; with the pinned
            archive also the number of series and the longest length).
        DataUnavailableError: a file is neither cached nor obtainable (e.g. offline); see `fetch`.
        ChecksumError: a downloaded or cached file's SHA-256 differs from the expected one; see `fetch`.
        CorruptCacheError: a cached file is damaged; see `cached_tensors`.
    """
    splits = load_uea(
        "CharacterTrajectories",
        fmt=fmt,
        cache_dir=cache_dir,
        remotes=remotes,
        offline=offline,
        split_seed=split_seed,
        drop_rate=drop_rate,
        drop_seed=drop_seed,
        dtype=dtype,
        progress=progress,
    )
    _check_published(splits, "CharacterTrajectories", whole=remotes is None)
    return splits


register_task(Task("eigenworms", "UEA EigenWorms: 5 classes, length 17,984", "accuracy", load_eigenworms))
register_task(
    Task(
        "character-trajectories",
        "UEA CharacterTrajectories: 20 characters, 3 channels",
        "accuracy",
        load_character_trajectories,
    )
)
register_task(Task("uea", "any UEA/UCR archive dataset (option name)", "accuracy", load_uea))
# The Log-NCDE/SLiCE code draws a new 70/15/15 split from every run's seed (configs walker2024_uea_*.yaml).
register_task(
    Task(
        "uea-seeded-split",
        "any UEA/UCR archive dataset, split drawn from the run's seed (option name)",
        "accuracy",
        load_uea,
        seed_option="split_seed",
    )
)
