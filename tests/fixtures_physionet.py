"""Small PhysioNet 2019 sepsis zips in the exact upstream format, and what a loader must read from them.

The real ``training_setA.zip`` holds ``training/p000001.psv`` ... and ``training_setB.zip`` holds
``training_setB/p100001.psv`` ... (the folder names the NCDE code and TensorFlow Datasets rely on). A
``.psv`` file is pipe-separated: the 41-column header, then one row per ICU hour with ``NaN`` for a
missing value, integers written without a decimal point (``80``, ``1``) and measurements with one or two
decimals (``36.11``). The fixture records cover the cases the protocol has to handle: stays longer than
72 hours, stays starting after hour 1, gaps of missing hours, sepsis inside and only after the first 72
hours, missing Unit1/Unit2/HospAdmTime, and records too short to keep.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np

from neuralde_seq.data.io.download import RemoteFile

HEADER = (
    "HR|O2Sat|Temp|SBP|MAP|DBP|Resp|EtCO2|BaseExcess|HCO3|FiO2|pH|PaCO2|SaO2|AST|BUN|Alkalinephos|Calcium|"
    "Chloride|Creatinine|Bilirubin_direct|Glucose|Lactate|Magnesium|Phosphate|Potassium|Bilirubin_total|"
    "TroponinI|Hct|Hgb|PTT|WBC|Fibrinogen|Platelets|Age|Gender|Unit1|Unit2|HospAdmTime|ICULOS|SepsisLabel"
)
LAYOUT = (("training_setA.zip", "training", 1), ("training_setB.zip", "training_setB", 100001))


def _fmt(x: float) -> str:
    if np.isnan(x):
        return "NaN"
    if float(x).is_integer():
        return str(int(x))
    return f"{x:.2f}"


def _record(rng, spec) -> tuple[str, dict]:
    """One .psv text from a spec, and its ground truth on the hourly grid of the first 72 hours."""
    first, last, gaps, sepsis_from = spec["first"], spec["last"], spec.get("gaps", ()), spec.get("sepsis_from")
    hours = [h for h in range(first, last + 1) if h not in gaps]
    static = [
        float(rng.integers(18, 90)),
        float(rng.integers(0, 2)),
        spec.get("unit1", float(rng.integers(0, 2))),
        np.nan,
        spec.get("hospadm", -float(rng.integers(0, 500)) / 100),
    ]
    static[3] = 1.0 - static[2] if not np.isnan(static[2]) else spec.get("unit2", np.nan)
    lines = [HEADER]
    grid = {}
    labels = []
    observe = rng.random(34) * 0.8 + 0.1  # per-channel observation probability
    for h in hours:
        values = np.round(rng.normal(50, 20, size=34), 2)
        values[rng.random(34) > observe] = np.nan
        if spec.get("empty_rows") and h in spec["empty_rows"]:
            values[:] = np.nan
        label = int(sepsis_from is not None and h >= sepsis_from)
        row = [_fmt(v) for v in values] + [_fmt(s) for s in static] + [str(h), str(label)]
        lines.append("|".join(row))
        if h <= 72:
            grid[h] = values
            labels.append(label)
    kept_hours = max(grid) if grid else 0
    values = np.full((kept_hours, 34), np.nan)
    for h, v in grid.items():
        values[h - 1] = v
    truth = {
        "values": values,
        "hours": kept_hours,
        "label": int(max(labels)) if labels else 0,
        "static": np.array(static, dtype=np.float64),
    }
    return "\n".join(lines) + "\n", truth


def default_specs(n_plain: int = 30, seed: int = 0) -> list[dict]:
    """Record specs: special cases first, then ``n_plain`` ordinary stays of 5..90 hours."""
    rng = np.random.default_rng(seed + 1)
    specs = [
        {"first": 1, "last": 90, "sepsis_from": 80},  # sepsis only after 72 h: label 0 under the protocol
        {"first": 1, "last": 90, "sepsis_from": 60},  # sepsis within 72 h: label 1
        {"first": 5, "last": 40},  # starts at hour 5: hours 1-4 all NaN
        {"first": 1, "last": 30, "gaps": (7, 8, 9)},  # missing hours in between
        {"first": 2, "last": 20, "unit1": np.nan, "unit2": np.nan},  # Unit1/Unit2 missing: 0 plus flags
        {"first": 1, "last": 25, "hospadm": np.nan, "sepsis_from": 10},  # HospAdmTime missing: 0
        {"first": 1, "last": 12, "empty_rows": (3, 4)},  # rows present but every feature NaN
        {"first": 1, "last": 2},  # 2 hours: excluded (NCDE keeps > 2)
        {"first": 75, "last": 80},  # first row past 72 h: excluded
        {"first": 1, "last": 3, "sepsis_from": 1},  # shortest kept record, septic
    ]
    for i in range(n_plain):
        first = int(rng.integers(1, 4))
        last = int(rng.integers(first + 4, 91))
        sepsis_from = int(rng.integers(first, last + 1)) if i % 3 == 0 else None
        specs.append({"first": first, "last": last, "sepsis_from": sepsis_from})
    return specs


def write_physionet_archives(
    directory,
    *,
    specs: list[dict] | None = None,
    seed: int = 0,
    sha256: str | None = "true",
) -> tuple[list[RemoteFile], dict]:
    """Write ``training_setA.zip`` and ``training_setB.zip`` into ``directory``; return ``(remotes, truth)``.

    Records alternate between the two zips (A: ``training/p0000NN.psv``, B: ``training_setB/p1000NN.psv``).

    Args:
        specs: record specs (see :func:`default_specs`): first/last ICULOS hour, missing hours, the hour
            SepsisLabel turns 1, static overrides.
        sha256: ``"true"`` pins each zip's real SHA-256, None pins nothing (trust on first use), any other
            string is pinned as given (a mismatch).

    Returns:
        remotes: the two ``file://`` RemoteFiles.
        truth: ``records`` (kept file names, sorted), per kept record in that order ``values`` (list of
        (L, 34) hourly grids, NaN = missing), ``hours`` (L), ``labels``, ``static`` ((N, 5) raw, NaN kept);
        ``excluded`` (names of the records not kept), ``class_names``.
    """
    rng = np.random.default_rng(seed)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    specs = default_specs(seed=seed) if specs is None else specs
    members = {zip_name: [] for zip_name, _, _ in LAYOUT}
    truths = {}
    for i, spec in enumerate(specs):
        zip_name, folder, start = LAYOUT[i % 2]
        record = f"p{start + i // 2:06d}.psv"
        text, truth = _record(rng, spec)
        members[zip_name].append((f"{folder}/{record}", text))
        truths[record] = truth
    remotes = []
    for zip_name, folder, _ in LAYOUT:
        path = directory / zip_name
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(f"{folder}/", "")
            for name, text in members[zip_name]:
                archive.writestr(name, text)
        blob = path.read_bytes()
        digest = hashlib.sha256(blob).hexdigest()
        pinned = digest if sha256 == "true" else sha256
        remotes.append(RemoteFile(url=path.resolve().as_uri(), filename=zip_name, sha256=pinned, size=len(blob)))
    kept = sorted(r for r, t in truths.items() if t["hours"] >= 3)
    return remotes, {
        "records": kept,
        "values": [truths[r]["values"] for r in kept],
        "hours": np.array([truths[r]["hours"] for r in kept]),
        "labels": np.array([truths[r]["label"] for r in kept]),
        "static": np.stack([truths[r]["static"] for r in kept]),
        "excluded": sorted(r for r, t in truths.items() if t["hours"] < 3),
        "class_names": ["no sepsis", "sepsis"],
    }
