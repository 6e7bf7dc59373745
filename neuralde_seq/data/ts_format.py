"""Reader for the UEA/sktime ``.ts`` text format.

The format, as used by the UEA & UCR time series classification archive:

* lines starting with ``#`` are comments, blank lines are ignored; in the header (before ``@data``), lines
  starting with ``%`` are comments too (the ARFF convention, which aeon's own ``.ts`` files use: its
  ``UnitTest_TRAIN.ts`` opens with ``%#`` lines);
* header lines start with ``@`` (``@problemName``, ``@timeStamps``, ``@missing``, ``@univariate``,
  ``@dimensions``, ``@equalLength``, ``@seriesLength``, ``@classLabel``, ``@targetLabel``), keywords
  are case-insensitive;
* ``@data`` ends the header; every following non-comment line is one case;
* in a case, dimensions are separated by ``:`` and values within a dimension by ``,``; ``?`` (or
  ``NaN``) marks a missing value (read as NaN); ``inf``, ``-inf`` and numbers too large for float64
  (``1e400``) are refused;
* with ``@classLabel true <labels>`` the last ``:`` field is the case's class label, one of the declared
  labels; with ``@targetLabel true`` (a regression file, as in the Monash/UEA regression archive) it is a
  real-valued target, which must be a finite number (``?``, ``NaN`` and ``inf`` are refused). Both are kept
  here as the string written in the file; `TsData.targets` says which kind the file has, and a
  header declaring both is refused;
* with ``@timeStamps true`` each dimension is a list of ``(timestamp,value)`` tuples.  Numeric
  timestamps are supported: the times of a case are the sorted union of the timestamps of its
  dimensions, and a dimension without a value at one of these times gets NaN there.  Date-time
  timestamps raise ``NotImplementedError``.

Cases may have different lengths, but all dimensions of one case must have the same length (as in every
UEA dataset); a case whose dimensions differ in length raises ``ValueError`` rather than being padded
silently.  Every malformed line raises ``ValueError`` naming the file, the line number and the
offending text.  What the header declares is checked on every case: the number of dimensions
(``@dimensions``, ``@univariate``), the length (``@seriesLength``, ``@equalLength true``), a label from
the declared list (``@classLabel true <labels>``, which must list them).  A file cut short is refused
when the cut falls in the header (no ``@data``), right after ``@data`` (no case) or inside a class-labelled
case; the formats declare no case count, so a file cut right after a complete case cannot be detected, nor
can a cut inside a regression target's digits (``0.25`` cut to ``0.2`` is still a number).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

__all__ = ["TsData", "read_ts", "parse_ts"]


@dataclass
class TsData:
    """Contents of a ``.ts`` file.

    Attributes:
        series: one float64 array of shape (C, L_i) per case (NaN = missing).
        labels: one label string per case (as written in the file), or ``None`` when the file declares no
            labels.
        class_labels: the class labels declared by ``@classLabel true ...`` (strings, in file order),
            or ``None`` when the header declares none.
        times: with ``@timeStamps true``, one float64 array of shape (L_i,) per case; else ``None``.
        header: the header keywords (lower-cased) and their raw values.
        targets: True for a regression file (``@targetLabel true``; an ARFF file whose class attribute is
            numeric): ``labels`` are then real-valued targets, each a finite number
            (``float(label)``), not class names. False for class labels or no labels.
    """

    series: list[np.ndarray]
    labels: list[str] | None
    class_labels: list[str] | None
    times: list[np.ndarray] | None = None
    header: dict[str, str] = field(default_factory=dict)
    targets: bool = False

    def __len__(self) -> int:
        return len(self.series)


_BOOL = {"true": True, "false": False}
_TUPLE_RE = re.compile(r"\(([^()]*)\)")


def read_ts(path: str | os.PathLike) -> TsData:
    """Read a ``.ts`` file from disk (UTF-8, falling back to Latin-1 for old archive files).

    Arguments:
        path: the ``.ts`` file.

    Returns:
        `TsData`, as `parse_ts`.

    Raises:
        ValueError: as `parse_ts` (malformed contents, naming the file and line).
        NotImplementedError: as `parse_ts` (date-time timestamps).
    """
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return parse_ts(text.splitlines(), source=str(path))


def _parse_value(token: str, source: str, lineno: int) -> float:
    token = token.strip()
    if token == "?":
        return math.nan
    if token == "":
        raise ValueError(f"{source}, line {lineno}: empty value (two commas in a row or a trailing comma)")
    try:
        value = float(token)  # also reads NaN, the other missing-value mark
    except ValueError:
        raise ValueError(f"{source}, line {lineno}: cannot read {token!r} as a number") from None
    if math.isinf(value):  # inf, -inf, or an overflow such as 1e400: never a measurement
        raise ValueError(f"{source}, line {lineno}: value {token!r} is not a finite number (reads as {value}); "
                         "only finite numbers and the missing-value marks '?' and NaN are allowed")
    return value


def _check_target(token: str, source: str, lineno: int) -> str:
    """A regression target as written (stripped), after checking that it reads as a finite number."""
    token = token.strip()
    try:
        value = float(token)
    except ValueError:
        raise ValueError(f"{source}, line {lineno}: target {token!r} is not a number (the file declares "
                         "real-valued regression targets: @targetLabel true, or a numeric ARFF class "
                         "attribute)") from None
    if not math.isfinite(value):  # '?' does not read as a number; NaN and inf do
        raise ValueError(f"{source}, line {lineno}: target {token!r} is not a finite number (reads as {value}); "
                         "a regression target cannot be missing or infinite")
    return token


def _parse_bool(key: str, value: str, source: str, lineno: int) -> bool:
    word = value.split()[0].lower() if value.split() else ""
    if word not in _BOOL:
        raise ValueError(f"{source}, line {lineno}: @{key} expects true or false, got {value!r}")
    return _BOOL[word]


def _split_dimensions_with_timestamps(body: str, source: str, lineno: int) -> list[str]:
    """Split a timestamped case on the ``:`` separators that lie outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{source}, line {lineno}: unbalanced ')'")
        elif ch == ":" and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"{source}, line {lineno}: unbalanced '('")
    parts.append(body[start:])
    return parts


def _parse_timestamped_dimension(text: str, source: str, lineno: int) -> tuple[np.ndarray, np.ndarray]:
    text = text.strip()
    tuples = _TUPLE_RE.findall(text)
    leftover = _TUPLE_RE.sub("", text).replace(",", "").strip()
    if leftover:
        raise ValueError(f"{source}, line {lineno}: text outside (timestamp,value) tuples: {leftover[:40]!r}")
    if not tuples:
        raise ValueError(f"{source}, line {lineno}: a dimension has no (timestamp,value) tuples")
    ts, vs = [], []
    for tup in tuples:
        fields_ = tup.split(",")
        if len(fields_) != 2:
            raise ValueError(f"{source}, line {lineno}: tuple ({tup}) is not (timestamp,value)")
        t_txt = fields_[0].strip()
        try:
            t = float(t_txt)
        except ValueError:
            raise NotImplementedError(
                f"{source}, line {lineno}: only numeric timestamps are supported, got {t_txt!r}"
            ) from None
        if not math.isfinite(t):
            raise ValueError(f"{source}, line {lineno}: timestamp {t_txt!r} is not finite")
        ts.append(t)
        vs.append(_parse_value(fields_[1], source, lineno))
    t_arr = np.asarray(ts, dtype=np.float64)
    if np.unique(t_arr).size != t_arr.size:
        raise ValueError(f"{source}, line {lineno}: repeated timestamp within one dimension")
    return t_arr, np.asarray(vs, dtype=np.float64)


def _check_header_agrees(univariate: bool | None, n_dims: int | None, seen: dict[str, int], source: str) -> None:
    if univariate and n_dims is not None and n_dims != 1:
        line = max(seen["univariate"], seen["dimensions"])
        raise ValueError(f"{source}, line {line}: @univariate {str(univariate).lower()} contradicts "
                         f"@dimensions {n_dims}")


def parse_ts(lines: Iterable[str], source: str = "<ts>") -> TsData:
    """Parse the lines of a ``.ts`` file (see the module docstring for the format).

    Arguments:
        lines: the file's lines (with or without line ends).
        source: the file name used in error messages.

    Returns:
        `TsData`; ``series[i]`` has shape (C, L_i); ``targets`` is True for ``@targetLabel true``.

    Raises:
        ValueError: a malformed or non-finite token (a regression target included), or a case or header
            that contradicts the header, naming ``source``, the line number and the offending text.
        NotImplementedError: date-time timestamps.
    """
    header: dict[str, str] = {}
    class_labels: list[str] | None = None
    has_class_label = False
    has_target = False
    timestamps = False
    n_dims_declared: int | None = None
    univariate: bool | None = None
    equal_length: bool | None = None
    series_length: int | None = None
    in_data = False
    data_line = 0
    seen: dict[str, int] = {}  # header keyword -> line

    series: list[np.ndarray] = []
    labels: list[str] = []
    times: list[np.ndarray] = []

    for lineno, raw_line in enumerate(lines, start=1):
        line = raw_line.strip()
        if not line or line.startswith("#") or (not in_data and line.startswith("%")):
            continue
        if not in_data:
            if not line.startswith("@"):
                raise ValueError(f"{source}, line {lineno}: data line before @data")
            key, _, value = line[1:].partition(" ")
            key = key.lower()
            value = value.strip()
            if key in seen:  # a second, contradicting declaration would silently win
                raise ValueError(f"{source}, line {lineno}: @{line[1:].split()[0]} declared twice (first on line "
                                 f"{seen[key]})")
            seen[key] = lineno
            if key == "data":
                if value:
                    raise ValueError(f"{source}, line {lineno}: unexpected text after @data")
                _check_header_agrees(univariate, n_dims_declared, seen, source)
                if has_class_label and has_target:  # the last field cannot be both a class and a target
                    raise ValueError(f"{source}, line {seen['targetlabel']}: @targetLabel true (regression "
                                     f"targets) beside @classLabel true on line {seen['classlabel']}: a file "
                                     "has class labels or regression targets, not both")
                in_data, data_line = True, lineno
                continue
            header[key] = value
            if key == "classlabel":
                words = value.split()
                has_class_label = _parse_bool(key, value, source, lineno)
                if has_class_label:
                    if len(words) < 2:  # without the list no label could be checked
                        raise ValueError(f"{source}, line {lineno}: @classLabel true must list the class labels")
                    class_labels = words[1:]
                elif len(words) > 1:
                    raise ValueError(f"{source}, line {lineno}: @classLabel false takes no labels")
            elif key == "targetlabel":
                has_target = _parse_bool(key, value, source, lineno)
            elif key == "timestamps":
                timestamps = _parse_bool(key, value, source, lineno)
            elif key == "univariate":
                univariate = _parse_bool(key, value, source, lineno)
            elif key == "equallength":
                equal_length = _parse_bool(key, value, source, lineno)
            elif key in ("dimensions", "serieslength"):
                try:
                    number = int(value)
                except ValueError:
                    raise ValueError(f"{source}, line {lineno}: @{key} expects an integer, got {value!r}") from None
                if number < 1:
                    raise ValueError(f"{source}, line {lineno}: @{key} must be positive, got {number}")
                if key == "dimensions":
                    n_dims_declared = number
                else:
                    series_length = number
            # other keywords (problemName, missing, ...) are kept in `header` only
            continue

        # ---- a data line ----
        if line.startswith("@"):
            raise ValueError(f"{source}, line {lineno}: header line after @data")
        if timestamps:
            parts = _split_dimensions_with_timestamps(line, source, lineno)
        else:
            parts = line.split(":")
        label = None
        if has_class_label or has_target:
            if len(parts) < 2:
                raise ValueError(f"{source}, line {lineno}: expected dimensions followed by ':label'")
            label = parts[-1].strip()
            parts = parts[:-1]
            if not label:
                raise ValueError(f"{source}, line {lineno}: empty label")
            if has_target:
                label = _check_target(label, source, lineno)
            if class_labels is not None and label not in class_labels:
                raise ValueError(
                    f"{source}, line {lineno}: label {label!r} is not among the declared class labels "
                    f"{class_labels}"
                )
        n_dims = len(parts)
        expected_dims = n_dims_declared if n_dims_declared is not None else (1 if univariate else None)
        if expected_dims is not None and n_dims != expected_dims:
            raise ValueError(f"{source}, line {lineno}: {n_dims} dimensions, header declares {expected_dims}")
        if series and n_dims != series[0].shape[0]:
            raise ValueError(
                f"{source}, line {lineno}: {n_dims} dimensions, earlier cases have {series[0].shape[0]}"
            )

        if timestamps:
            dims = [_parse_timestamped_dimension(p, source, lineno) for p in parts]
            grid = np.unique(np.concatenate([t for t, _ in dims]))  # sorted union
            case = np.full((n_dims, grid.size), np.nan)
            for d, (t, v) in enumerate(dims):
                case[d, np.searchsorted(grid, t)] = v
            times.append(grid)
        else:
            dims_values = []
            for part in parts:
                if not part.strip():
                    raise ValueError(f"{source}, line {lineno}: a dimension has no values")
                dims_values.append([_parse_value(tok, source, lineno) for tok in part.split(",")])
            lengths = {len(v) for v in dims_values}
            if len(lengths) != 1:
                raise ValueError(
                    f"{source}, line {lineno}: dimensions of one case have different lengths "
                    f"{[len(v) for v in dims_values]}"
                )
            case = np.asarray(dims_values, dtype=np.float64)
        if series_length is not None and equal_length is not False and case.shape[1] != series_length:
            raise ValueError(
                f"{source}, line {lineno}: length {case.shape[1]}, header declares @seriesLength {series_length}"
            )
        if equal_length and series and case.shape[1] != series[0].shape[1]:
            raise ValueError(f"{source}, line {lineno}: length {case.shape[1]}, earlier cases have "
                             f"{series[0].shape[1]} and the header declares @equalLength true")
        series.append(case)
        if label is not None:
            labels.append(label)

    if not in_data:
        raise ValueError(f"{source}: no @data line (the file ends in its header: cut short, or not a .ts file)")
    if not series:
        raise ValueError(f"{source}, line {data_line}: no cases after @data (the file is cut short or empty)")
    return TsData(
        series=series,
        labels=labels if (has_class_label or has_target) else None,
        class_labels=class_labels,
        times=times if timestamps else None,
        header=header,
        targets=has_target,
    )
