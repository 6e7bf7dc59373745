"""Small UEA/UCR archives in the exact upstream formats, written by the tests themselves.

:func:`write_uea_archive` writes a zip laid out like the 2018 archive files
(``Multivariate2018_ts.zip`` holds ``Multivariate_ts/<Name>/<Name>_TRAIN.ts`` and ``..._TEST.ts``;
``Multivariate2018_arff.zip`` holds ``Multivariate_arff/<Name>/<Name>_TRAIN.arff`` in the relational
layout, plus the per-channel ``<Name>Dimension<k>_TRAIN.arff`` files the real archive also carries), with
a decoy dataset ``<Name>2`` beside it. The data are random but reproducible from ``seed`` and known to the
caller through the returned ground truth, so tests compare the loaders' output with what was written.

Formats as in the archive: ``.ts`` series of different lengths are written at their own length (with
``pad_ts=True`` padded with ``?`` to the file's longest series instead); ARFF series are always padded
with ``?`` to the file's longest series, as the relational attribute has a fixed number of time steps.
Values are rounded to 4 decimals and written with ``repr``, so both parsers read back exactly the same
float64 numbers.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from neuralde_seq.data.io.download import RemoteFile

DEFAULT_CLASS_COUNTS = {"Standing": 20, "Running": 40, "Badminton": 20}

# The real channels, classes and series length of the UEA datasets that the reproduction configs name through the
# `uea` task (the six datasets of Walker et al.'s protocol; the 2018 archive's descriptions). The config smoke runs
# write archives with these channels and classes, so that every model is built for its dataset's real input width
# (depth-2 log-signatures of Heartbeat's 61 channels have 1,891 area terms), and series far shorter than `length`.
UEA_DATASET_SHAPES = {
    "EigenWorms": {"channels": 6, "classes": 5, "length": 17984},
    "EthanolConcentration": {"channels": 3, "classes": 4, "length": 1751},
    "Heartbeat": {"channels": 61, "classes": 2, "length": 405},
    "MotorImagery": {"channels": 64, "classes": 2, "length": 3000},
    "SelfRegulationSCP1": {"channels": 6, "classes": 2, "length": 896},
    "SelfRegulationSCP2": {"channels": 7, "classes": 2, "length": 1152},
}


def _text(value: float) -> str:
    return "?" if np.isnan(value) else repr(float(value))


def _ts_file(name, series, labels, declared, pad: bool) -> str:
    channels = series[0].shape[0]
    lengths = {s.shape[1] for s in series}
    equal = len(lengths) == 1
    width = max(lengths)
    lines = [
        "# fixture of tests/fixtures_uea.py in the UEA .ts format",
        f"@problemName {name}",
        "@timeStamps false",
        f"@missing {'true' if any(np.isnan(s).any() for s in series) or (pad and not equal) else 'false'}",
        f"@univariate {'true' if channels == 1 else 'false'}",
        f"@dimensions {channels}",
        f"@equalLength {'true' if equal or pad else 'false'}",
    ]
    if equal or pad:
        lines.append(f"@seriesLength {width}")
    lines += [f"@classLabel true {' '.join(declared)}", "@data"]
    for case, label in zip(series, labels):
        if pad:
            case = np.concatenate([case, np.full((channels, width - case.shape[1]), np.nan)], axis=1)
        lines.append(":".join(",".join(_text(v) for v in row) for row in case) + f":{label}")
    return "\n".join(lines) + "\n"


def _arff_relational(name, series, labels, declared) -> str:
    channels = series[0].shape[0]
    width = max(s.shape[1] for s in series)
    lines = [
        "% fixture of tests/fixtures_uea.py in the UEA relational ARFF format",
        f"@relation '{name}'",
        "",
        "@attribute relationalAtt relational",
    ]
    lines += [f"@attribute att{t} numeric" for t in range(width)]
    lines += ["@end relationalAtt", f"@attribute activity {{{','.join(declared)}}}", "", "@data"]
    for case, label in zip(series, labels):
        padded = np.concatenate([case, np.full((channels, width - case.shape[1]), np.nan)], axis=1)
        rows = "\\n".join(",".join(_text(v) for v in row) for row in padded)  # a literal backslash-n
        lines.append(f"'{rows}',{label}")
    return "\n".join(lines) + "\n"


def _arff_flat(name, rows, labels, declared) -> str:
    width = max(len(r) for r in rows)
    lines = [f"@relation {name}"] + [f"@attribute att{t + 1} numeric" for t in range(width)]
    lines += [f"@attribute target {{{','.join(declared)}}}", "@data"]
    for row, label in zip(rows, labels):
        padded = np.concatenate([row, np.full(width - len(row), np.nan)])
        lines.append(",".join(_text(v) for v in padded) + f",{label}")
    return "\n".join(lines) + "\n"


def _make_data(rng, class_counts, appearance, channels, min_length, max_length, missing):
    declared = list(class_counts)
    labels = [c for c in declared for _ in range(class_counts[c])]
    labels = [labels[i] for i in rng.permutation(len(labels))]
    # Force the first distinct labels into `appearance` order (so it differs from declared and sorted order).
    for position, cls in enumerate(appearance):
        j = labels.index(cls, position)
        labels[position], labels[j] = labels[j], labels[position]
    series = []
    for i, label in enumerate(labels):
        length = int(rng.integers(min_length, max_length + 1))
        offset = declared.index(label)
        case = np.round(rng.normal(size=(channels, length)) + offset, 4)
        if missing and i % 4 == 1:  # an interior missing value in one channel
            case[int(rng.integers(0, channels)), int(rng.integers(1, length - 1))] = np.nan
        if missing and i % 9 == 2:  # a leading time step missing in every channel
            case[:, 0] = np.nan
        series.append(case)
    return labels, series


def write_uea_archive(
    directory,
    name: str,
    *,
    fmt: str = "ts",
    class_counts: dict[str, int] | None = None,
    appearance: list[str] | None = None,
    channels: int = 3,
    min_length: int = 5,
    max_length: int = 12,
    num_train: int | None = None,
    missing: bool = True,
    pad_ts: bool = False,
    seed: int = 0,
    repeats: Sequence[tuple[int, int]] = (),
) -> tuple[list[RemoteFile], dict]:
    """Write ``directory/{Multi,Uni}variate2018_<fmt>.zip`` holding dataset ``name``.

    Arguments:
        directory: where the zip goes (created if missing).
        name: the dataset name (folder and file names inside the zip).
        fmt: "ts" or "arff".
        class_counts: samples per class, in the order the header declares the classes
            (default ``DEFAULT_CLASS_COUNTS``: 20 Standing, 40 Running, 20 Badminton).
        appearance: order in which the classes first appear in TRAIN (default: the declared order rotated
            by one, which differs from both the declared and the sorted order for three classes).
        channels: number of channels (1 writes a univariate archive: flat ARFF, ``Univariate2018_*.zip``).
        min_length, max_length: series lengths are drawn uniformly in this range (equal values: equal length).
        num_train: samples in the TRAIN file (default: half, rounded down); the rest go to TEST.
        missing: put some interior and leading missing values (``?``) in the series.
        pad_ts: pad ``.ts`` series with ``?`` to the file's longest series (as ARFF always does).
        seed: seed of the data.
        repeats: (source, target) pairs of TRAIN+TEST positions: series ``target`` is written as an exact copy of
            series ``source``, with the target's own label (repeated series, as some archive datasets have).

    Returns:
        ``(remotes, truth)``: ``remotes`` is ``[RemoteFile(file:// URL, zip name, true sha256, size)]`` and
        ``truth`` holds ``labels`` (strings, TRAIN then TEST), ``series`` (the (C, L_i) float64 arrays as
        meant, without padding), ``lengths``, ``class_names`` (first-appearance order),
        ``declared_class_labels``, ``num_train``, ``archive`` (the zip's path) and ``members``.
    """
    if fmt not in ("ts", "arff"):
        raise ValueError(f"fmt must be 'ts' or 'arff', got {fmt!r}")
    class_counts = dict(DEFAULT_CLASS_COUNTS if class_counts is None else class_counts)
    declared = list(class_counts)
    appearance = list(appearance) if appearance is not None else declared[1:] + declared[:1]
    rng = np.random.default_rng(seed)
    labels, series = _make_data(rng, class_counts, appearance, channels, min_length, max_length, missing)
    for source, target in repeats:
        series[target] = series[source].copy()
    n_train = len(labels) // 2 if num_train is None else num_train
    kind = "Multivariate" if channels > 1 else "Univariate"
    folder = f"{kind}_{fmt}"
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / f"{kind}2018_{fmt}.zip"

    def files_for(dataset, part_series, part_labels, part):
        base = f"{folder}/{dataset}"
        if fmt == "ts":
            return {f"{base}/{dataset}_{part}.ts": _ts_file(dataset, part_series, part_labels, declared, pad_ts)}
        if channels == 1:
            return {
                f"{base}/{dataset}_{part}.arff": _arff_flat(dataset, [s[0] for s in part_series], part_labels, declared)
            }
        out = {f"{base}/{dataset}_{part}.arff": _arff_relational(dataset, part_series, part_labels, declared)}
        for k in range(channels):  # the real archive also ships one flat file per channel
            out[f"{base}/{dataset}Dimension{k + 1}_{part}.arff"] = _arff_flat(
                f"{dataset}Dimension{k + 1}", [s[k] for s in part_series], part_labels, declared
            )
        return out

    members = {}
    members.update(files_for(name, series[:n_train], labels[:n_train], "TRAIN"))
    members.update(files_for(name, series[n_train:], labels[n_train:], "TEST"))
    # A decoy dataset whose name extends the wanted one: a loader matching names loosely reads it instead.
    decoy_rng = np.random.default_rng(seed + 1000)
    decoy_labels, decoy_series = _make_data(decoy_rng, class_counts, appearance, channels, 3, 4, False)
    decoy_series = [s + 100.0 for s in decoy_series]
    members.update(files_for(f"{name}2", decoy_series[:10], decoy_labels[:10], "TRAIN"))
    members.update(files_for(f"{name}2", decoy_series[10:], decoy_labels[10:], "TEST"))
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for member in sorted(members):
            bundle.writestr(member, members[member])

    payload = archive.read_bytes()
    remote = RemoteFile(
        url=archive.resolve().as_uri(),
        filename=archive.name,
        sha256=hashlib.sha256(payload).hexdigest(),
        size=len(payload),
    )
    truth = {
        "name": name,
        "fmt": fmt,
        "labels": labels,
        "series": series,
        "lengths": [s.shape[1] for s in series],
        "class_names": list(dict.fromkeys(labels)),
        "declared_class_labels": declared,
        "num_train": n_train,
        "archive": archive,
        "members": sorted(members),
    }
    return [remote], truth
