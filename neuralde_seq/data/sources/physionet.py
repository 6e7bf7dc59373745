"""PhysioNet/CinC Challenge 2019 sepsis data in the protocol of the NCDE paper (Kidger et al. 2020).

Source: ``training_setA.zip`` (20,336 records, folder ``training/``) and ``training_setB.zip`` (20,000
records, folder ``training_setB/``) from ``https://archive.physionet.org/users/shared/challenge-2019/``,
the files the NCDE code downloads. Each record ``pNNNNNN.psv`` is a pipe-separated table with the header
`PHYSIONET_COLUMNS` (41 columns) and one row per ICU hour, ``NaN`` marking a missing value.

Protocol (the NCDE code ``experiments/datasets/sepsis.py``, which CKConv (paper 000) and the CT-FWP paper
(002) reuse), with every deviation named:

* **time-varying features**: the first 34 columns (HR ... Platelets), on the hourly grid of ``ICULOS``
  (hours since ICU admission): a record's sample has one time point per hour 1, 2, ..., L, where L is
  its last ``ICULOS`` not above 72; hours without a row (before the first row, or gaps) are all-NaN
  time points, as the NCDE code fills them. ``times`` are these hours (1..72), so all samples share one
  grid and a sample ends at its own L (``lengths``).
* **first 72 hours**: rows with ``ICULOS`` > 72 are dropped (the NCDE code stops reading there).
* **records kept**: those with L > 2 (the NCDE code's ``len(time) > 2``); the others (very short stays,
  or stays whose first row is past 72 hours) are excluded and counted in ``meta["excluded_records"]``.
* **label**: 1 ("sepsis") if any kept row has ``SepsisLabel`` = 1, else 0 ("no sepsis"). As in the NCDE
  code the label only looks at the first 72 hours: a record whose ``SepsisLabel`` turns 1 after hour 72
  is labelled 0.
* **static features** (``IrregularDataset.static``): Age, Gender, Unit1, Unit2, HospAdmTime, read from
  the last kept row (the NCDE code reads them from the last row it read, which is the first row past 72
  hours when there is one; the columns are constant within a record, so this only matters for malformed
  files). Missing values are handled as in the NCDE code: **a missing Unit1, Unit2 or HospAdmTime is
  set to 0** before normalisation (the value 0 is then standardised like any other); a missing Age or
  Gender stays NaN. With ``intensity=True`` two unnormalised 0/1 channels "Unit1 observed" and
  "Unit2 observed" are appended (the NCDE code's ``static_intensity``), giving 7 static features.
* **normalisation** (``normalise=True``): the 34 time-varying channels and the 5 static features are
  standardised with the mean and standard deviation of the *training* split's observed values
  (`standardise`; population std, where the NCDE code divides by the unbiased
  std + 1e-5, a difference of order 1/n). NaNs stay NaN: nothing time-varying is filled.
* **observational intensity** (``intensity=True``, "OI"): 34 more channels, the cumulative number of
  observations of each time-varying channel up to and including each hour (the cumulative sum of the
  observed mask, NaN after the sample's end), appended *after* the 34 feature channels and not
  normalised. (The NCDE code orders its channels time, intensity, features; the time channel is added
  by the control construction here, not by the loader.) ``intensity=False`` ("no-OI") gives the 34
  feature channels only and 5 static features.
* **split**: 70/15/15 stratified on the label with the NCDE seeds (``split_seed=0``: random states 0
  and 1, see `stratified_split`). Records are ordered by file name (the NCDE
  code used ``os.listdir`` order, which is file-system dependent).
* **raw columns**: ``meta["raw_channels"]`` (the 34 count channels, indices 34..67, with intensity) and
  ``meta["raw_static"]`` (the 2 observed flags, static columns 5 and 6) name what must never be
  standardised. `load_task` calls this loader with ``normalise=False``
  and standardises every other channel and static column once, with the training split's statistics
  (after its own subsampling), leaving these as they are.
* ``drop_rate`` removes that fraction of every record's hourly time points
  (`drop_observations`) before normalisation and before the intensity channels
  are counted, so the counts describe what the model sees. Not part of the papers' protocols.

Checksums: PhysioNet publishes no checksum for these two zips, so they are pinned with ``sha256=None``:
`fetch` records the SHA-256 of the first download in a manifest beside
the file and verifies every later use against it (trust on first use, with a warning); with the official
files the record counts 20,336 and 20,000 are checked as well. The parsed records are cached once per
pair of zip contents and dtype (``physionet2019_sepsis`` under ``<data_dir>/physionet_sepsis``); the zips
are read in memory, nothing is extracted. Since the cache key is the zips' hash, the zips must stay in the
cache directory.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Sequence
from pathlib import PurePosixPath

import numpy as np
import torch

from ...cache import CorruptCacheError, cached_tensors
from ...terminal import Progress
from ..base.datasets import DatasetSplits, IrregularDataset, stratified_split
from ..base.options import LoadOptions, accepts_load_options
from ..base.registry import Task, register_task
from ..io.cache_integrity import sha256_file
from ..io.download import RemoteFile, data_dir, fetch
from ..transforms.sampling import drop_observations
from ..transforms.standardisation import channel_statistics, standardise

__all__ = [
    "PHYSIONET_COLUMNS",
    "TIME_VARYING_FEATURES",
    "STATIC_FEATURES",
    "PHYSIONET_REMOTES",
    "PHYSIONET_CLASS_NAMES",
    "MAX_HOURS",
    "parse_psv",
    "read_physionet_archives",
    "load_physionet_sepsis",
]

PHYSIONET_COLUMNS = (
    "HR",
    "O2Sat",
    "Temp",
    "SBP",
    "MAP",
    "DBP",
    "Resp",
    "EtCO2",
    "BaseExcess",
    "HCO3",
    "FiO2",
    "pH",
    "PaCO2",
    "SaO2",
    "AST",
    "BUN",
    "Alkalinephos",
    "Calcium",
    "Chloride",
    "Creatinine",
    "Bilirubin_direct",
    "Glucose",
    "Lactate",
    "Magnesium",
    "Phosphate",
    "Potassium",
    "Bilirubin_total",
    "TroponinI",
    "Hct",
    "Hgb",
    "PTT",
    "WBC",
    "Fibrinogen",
    "Platelets",
    "Age",
    "Gender",
    "Unit1",
    "Unit2",
    "HospAdmTime",
    "ICULOS",
    "SepsisLabel",
)
TIME_VARYING_FEATURES = PHYSIONET_COLUMNS[:34]
STATIC_FEATURES = ("Age", "Gender", "Unit1", "Unit2", "HospAdmTime")
PHYSIONET_CLASS_NAMES = ("no sepsis", "sepsis")
MAX_HOURS = 72
MIN_HOURS = 3  # the NCDE code keeps records with more than 2 hourly time points
_ICULOS, _LABEL = PHYSIONET_COLUMNS.index("ICULOS"), PHYSIONET_COLUMNS.index("SepsisLabel")
_STATIC_COLUMNS = [PHYSIONET_COLUMNS.index(c) for c in STATIC_FEATURES]
_ZERO_FILLED_STATIC = ("Unit1", "Unit2", "HospAdmTime")  # NaN -> 0, as the NCDE code
_BASE = "https://archive.physionet.org/users/shared/challenge-2019/"
PHYSIONET_REMOTES = (
    RemoteFile(url=_BASE + "training_setA.zip", filename="training_setA.zip", sha256=None),
    RemoteFile(url=_BASE + "training_setB.zip", filename="training_setB.zip", sha256=None),
)
_OFFICIAL_RECORD_COUNTS = {"training_setA.zip": 20336, "training_setB.zip": 20000}
_FORMAT = 1  # bump when the cached contents change meaning
# a record file in any folder, e.g. training/p000001.psv; not macOS metadata such as __MACOSX/.../._p000001.psv
_RECORD_NAME = re.compile(r"(?:(?!__MACOSX/)[^/]+/)*p\d+\.psv")


def parse_psv(text: str, name: str = "<psv>", max_hours: int = MAX_HOURS) -> dict:
    """Parse one PhysioNet 2019 record onto its hourly grid (see the module docstring).

    Args:
        text: the ``.psv`` file's contents.
        name: used in error messages.
        max_hours: keep rows with ``ICULOS <= max_hours``.

    Returns:
        dict with ``values`` (L, 34) float64 for hours 1..L (NaN = missing; all NaN for an hour without a
            row), ``hours`` L (0 when no row is kept), ``static`` (5,) float64 (NaN kept), ``label`` 0 or 1.

    Raises:
        CorruptCacheError: wrong header, a row without 41 fields, a non-numeric value, an ICULOS that is
            not a positive integer or does not increase, or a SepsisLabel other than 0/1.
    """
    lines = text.strip().splitlines()
    if not lines or tuple(lines[0].strip().split("|")) != PHYSIONET_COLUMNS:
        raise CorruptCacheError(f"{name}: the header is not the 41-column PhysioNet 2019 header")
    try:
        rows = np.array([line.split("|") for line in lines[1:]], dtype=np.float64).reshape(-1, len(PHYSIONET_COLUMNS))
    except ValueError as error:
        raise CorruptCacheError(f"{name}: a row is not 41 numeric fields ({error})") from error
    if rows.shape[0] == 0:
        raise CorruptCacheError(f"{name}: the record has no rows")
    iculos = rows[:, _ICULOS]
    if not (np.isfinite(iculos).all() and (iculos == np.round(iculos)).all() and iculos.min() >= 1):
        raise CorruptCacheError(f"{name}: ICULOS must be positive integers")
    if (np.diff(iculos) <= 0).any():
        raise CorruptCacheError(f"{name}: ICULOS must increase from row to row")
    if not np.isin(rows[:, _LABEL], (0.0, 1.0)).all():
        raise CorruptCacheError(f"{name}: SepsisLabel must be 0 or 1")
    kept = rows[iculos <= max_hours]
    if kept.shape[0] == 0:
        return {"values": np.empty((0, 34)), "hours": 0, "static": rows[0, _STATIC_COLUMNS], "label": 0}
    hours = int(kept[-1, _ICULOS])
    values = np.full((hours, 34), np.nan)
    values[kept[:, _ICULOS].astype(np.int64) - 1] = kept[:, :34]
    return {
        "values": values,
        "hours": hours,
        "static": kept[-1, _STATIC_COLUMNS].copy(),
        "label": int(kept[:, _LABEL].max()),
    }


def read_physionet_archives(paths: Sequence, *, dtype: torch.dtype = torch.float32, progress: bool = True) -> dict:
    """Parse every record ``pNNNNNN.psv`` of the given zips (in any folder inside them), in memory.

    Other members (folders, ``__MACOSX`` metadata) are skipped. Records are ordered by file name; the same
    file name twice raises ``CorruptCacheError``.

    Returns:
        dict with ``values`` (N, T, 34) in ``dtype`` (NaN-padded after each record's length; T the longest
            length), ``lengths`` (N,) long, ``static`` (N, 5) float64 with NaN kept, ``labels`` (N,) long,
            ``records`` (N,) file names, ``excluded`` the names of the records with fewer than 3 hours in the
            first 72, and ``counts`` the number of ``.psv`` members of each zip.
    """
    parsed: dict[str, dict] = {}
    counts = []
    for path in paths:
        count = 0
        try:
            with zipfile.ZipFile(path) as archive:
                members = [m for m in archive.infolist() if not m.is_dir() and _RECORD_NAME.fullmatch(m.filename)]
                for member in Progress(
                    members, desc=f"reading {PurePosixPath(str(path)).name}", unit=" records", enabled=progress
                ):
                    record = PurePosixPath(member.filename).name
                    if record in parsed:
                        raise CorruptCacheError(f"record {record} appears twice in {list(map(str, paths))}")
                    text = archive.read(member).decode("ascii")
                    parsed[record] = parse_psv(text, f"{path}: {member.filename}")
                    count += 1
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, UnicodeDecodeError) as error:
            raise CorruptCacheError(
                f"archive {path} cannot be read ({type(error).__name__}: {error}); delete it to download it again"
            ) from error
        counts.append(count)
    names = sorted(parsed)
    kept = [n for n in names if parsed[n]["hours"] >= MIN_HOURS]
    excluded = [n for n in names if parsed[n]["hours"] < MIN_HOURS]
    if not kept:
        raise CorruptCacheError(
            f"no record of {list(map(str, paths))} has {MIN_HOURS} or more hours in the first "
            f"{MAX_HOURS}; these are not the PhysioNet 2019 training sets"
        )
    longest = max(parsed[n]["hours"] for n in kept)
    values = torch.full((len(kept), longest, 34), float("nan"), dtype=dtype)
    for i, n in enumerate(kept):
        values[i, : parsed[n]["hours"]] = torch.from_numpy(parsed[n]["values"]).to(dtype)
    return {
        "values": values,
        "lengths": torch.tensor([parsed[n]["hours"] for n in kept], dtype=torch.long),
        "static": torch.from_numpy(np.stack([parsed[n]["static"] for n in kept])),
        "labels": torch.tensor([parsed[n]["label"] for n in kept], dtype=torch.long),
        "records": kept,
        "excluded": excluded,
        "counts": counts,
    }


def _static(dataset: IrregularDataset) -> torch.Tensor:
    """The static features of a PhysioNet dataset (it always has them)."""
    assert dataset.static is not None
    return dataset.static


def _standardise_static(train: IrregularDataset, *others: IrregularDataset) -> tuple[IrregularDataset, ...]:
    """Standardise ``static`` with the training split's statistics (observed values, population std)."""
    # channel_statistics works on (N, T, C) values: view the static features as a one-step series
    as_series = train.replace(
        times=torch.zeros(len(train), 1, dtype=train.times.dtype),
        values=_static(train).unsqueeze(1),
        lengths=torch.ones(len(train), dtype=torch.long),
        static=None,
    )
    mean, std = channel_statistics(as_series)
    out = []
    for ds in (train, *others):
        static = _static(ds)
        scaled = ((static.to(torch.float64) - mean) / std).to(static.dtype)
        meta = dict(ds.meta)
        meta["standardise_static"] = {"mean": mean.tolist(), "std": std.tolist()}
        out.append(ds.replace(static=scaled, meta=meta))
    return tuple(out)


def _observation_counts(ds: IrregularDataset) -> torch.Tensor:
    """(N, T, C) cumulative observation counts of every channel; NaN after each sample's end."""
    counts = (~torch.isnan(ds.values)).to(ds.values.dtype).cumsum(dim=1)
    after_end = torch.arange(ds.values.shape[1], device=ds.values.device)[None, :] >= ds.lengths[:, None]
    return counts.masked_fill(after_end.unsqueeze(-1), float("nan"))


@accepts_load_options
def load_physionet_sepsis(
    *,
    intensity: bool,
    normalise: bool = True,
    cache_dir=None,
    remotes: Sequence[RemoteFile] | None = None,
    offline: bool | None = None,
    split_seed: int = 0,
    drop_rate: float = 0.0,
    drop_seed: int = 0,
    dtype: torch.dtype = torch.float32,
    progress: bool = True,
    options: LoadOptions | None = None,
) -> DatasetSplits:
    """PhysioNet 2019 sepsis prediction, first 72 hours, OI or no-OI (see the module docstring).

    Args:
        intensity: True for "OI" (34 cumulative-count channels and 2 static observed flags appended),
            False for "no-OI".
        normalise: standardise the 34 feature channels and the 5 static features with training statistics.
        cache_dir: cache root; files go to its ``physionet_sepsis`` sub-directory.
        remotes: RemoteFiles replacing the two official zips (e.g. ``file://`` fixtures); the official
            record counts are checked only without them.
        offline: never download (None reads ``$NEURALDE_SEQ_OFFLINE``); the zips must be in the cache.
        split_seed: ``stratified_split`` seed; 0 gives the NCDE split.
        drop_rate: fraction in [0, 1) of each record's hourly time points set to NaN (all features).
        drop_seed: seed of the dropped points.
        dtype: floating dtype of ``times``, ``values`` and ``static``.
        progress: show progress bars.
        options: a `LoadOptions` holding the eight shared keywords (``cache_dir`` to ``progress``) at once,
            instead of giving them one by one (giving both raises ``TypeError``); None (default).

    Returns:
        `DatasetSplits`: ``times`` (N, T) hours 1..T (T = 72 for the real data),
            ``values`` (N, T, 34) or (N, T, 68) with intensity, ``lengths`` (N,) the last hour of each record,
            ``labels`` (N,) 0/1 with ``class_names`` ("no sepsis", "sepsis"), ``static`` (N, 5) or (N, 7).
            ``meta`` names the channels and static features, records the excluded records' count, and lists
            the unnormalised count channels and flag columns in ``raw_channels`` and ``raw_static``.
    """
    if not isinstance(intensity, bool):
        raise ValueError(f"intensity must be True or False, got {intensity!r}")
    if not isinstance(normalise, bool):
        raise ValueError(f"normalise must be True or False, got {normalise!r}")
    # split_seed, drop_rate, dtype, ...: checked by LoadOptions (accepts_load_options)
    official = remotes is None
    remotes = list(PHYSIONET_REMOTES if remotes is None else remotes)
    if not remotes or not all(isinstance(r, RemoteFile) for r in remotes):
        raise ValueError(f"remotes must be a non-empty sequence of RemoteFile (the zips), got {remotes!r}")
    directory = data_dir(cache_dir) / "physionet_sepsis"

    paths = [fetch(r, directory, offline=offline, progress=progress) for r in remotes]
    digests = [r.sha256 or sha256_file(p) for r, p in zip(remotes, paths)]

    def build() -> dict:
        parsed = read_physionet_archives(paths, dtype=dtype, progress=progress)
        if official:
            for remote, count in zip(remotes, parsed["counts"]):
                if count != _OFFICIAL_RECORD_COUNTS[remote.filename]:
                    raise CorruptCacheError(
                        f"{directory / remote.filename} holds {count} records, the official file "
                        f"{_OFFICIAL_RECORD_COUNTS[remote.filename]}; delete it (and its "
                        ".sha256 manifest) to download it again"
                    )
        return parsed

    key = {
        "name": "physionet2019_sepsis",
        "format": _FORMAT,
        "dtype": str(dtype),
        "max_hours": MAX_HOURS,
        "zips": [[r.filename, d] for r, d in zip(remotes, digests)],
    }
    cached = cached_tensors(directory, key, build)

    static = cached["static"].clone()  # (N, 5) float64
    observed_units = ~torch.isnan(static[:, [STATIC_FEATURES.index("Unit1"), STATIC_FEATURES.index("Unit2")]])
    for feature in _ZERO_FILLED_STATIC:
        column = static[:, STATIC_FEATURES.index(feature)]
        column[torch.isnan(column)] = 0.0
    values = cached["values"].to(dtype)
    n, length = values.shape[0], values.shape[1]
    full = IrregularDataset(
        times=torch.arange(1, length + 1, dtype=dtype).expand(n, length),
        values=values,
        lengths=cached["lengths"],
        labels=cached["labels"],
        class_names=list(PHYSIONET_CLASS_NAMES),
        name="PhysioNet2019Sepsis_" + ("OI" if intensity else "noOI"),
        meta={
            "time_unit": "hour (ICULOS)",
            "excluded_records": len(cached["excluded"]),
            "sources": [r.url for r in remotes],
            "split_seed": split_seed,
        },
        # the observed flags ride along as extra static columns until normalisation is done
        static=torch.cat([static, observed_units.to(torch.float64)], dim=1).to(dtype),
    )
    if drop_rate:
        full = drop_observations(full, drop_rate, drop_seed)
    parts = stratified_split(full, (0.7, 0.15, 0.15), split_seed)
    del full
    if normalise:
        parts = standardise(*parts)
        base = _standardise_static(*[p.replace(static=_static(p)[:, :5]) for p in parts])
        parts = [b.replace(static=torch.cat([_static(b), _static(p)[:, 5:]], dim=1)) for b, p in zip(base, parts)]
    channels = list(TIME_VARYING_FEATURES)
    static_names = list(STATIC_FEATURES)
    out = []
    for part in parts:
        meta = dict(part.meta)
        if intensity:
            part = part.replace(values=torch.cat([part.values, _observation_counts(part)], dim=2))
            meta["channels"] = channels + [f"{c} observation count" for c in channels]
            meta["static_names"] = static_names + ["Unit1 observed", "Unit2 observed"]
            # counts and 0/1 flags stay raw (the NCDE code's protocol); load_task reads these lists
            meta["raw_channels"] = list(range(len(channels), 2 * len(channels)))
            meta["raw_static"] = [len(static_names), len(static_names) + 1]
        else:
            part = part.replace(static=part.static[:, :5])
            meta["channels"] = channels
            meta["static_names"] = static_names
            meta["raw_channels"], meta["raw_static"] = [], []
        out.append(part.replace(meta=meta))
    return DatasetSplits(*out)


register_task(
    Task(
        "physionet-sepsis",
        "PhysioNet 2019 sepsis prediction, first 72 h (AUROC)",
        "auroc",
        load_physionet_sepsis,
        fixed_options={"normalise": False},
    )
)
