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
  (``1e400``) are refused. Numbers (values, timestamps, targets, ``@dimensions`` and ``@seriesLength``)
  follow the one strict grammar of `neuralde_seq.data.formats.text_files`: ASCII digits in decimal or scientific
  notation, so ``1_5`` and ``١٢`` (which Python's `float` reads as 15 and 12) are refused;
* the file is UTF-8 (a BOM tolerated); a file that is not raises ``ValueError`` naming the line and byte
  (`neuralde_seq.data.formats.text_files`), unless its encoding is given (``read_ts(path, encoding="latin-1")``);
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

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..base.datasets import IrregularDataset
from .text_files import decode_text, is_number, number_problem, parse_number, parse_number_row, split_lines

__all__ = ["TsData", "read_ts", "parse_ts", "from_ts", "check_value_range", "out_of_range"]


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
        lines: the line of the file each case is on (1-based; N ints), or None (data built by hand).
        source: the file name the parsers were given (for error messages).
    """

    series: list[np.ndarray]
    labels: list[str] | None
    class_labels: list[str] | None
    times: list[np.ndarray] | None = None
    header: dict[str, str] = field(default_factory=dict)
    targets: bool = False
    lines: list[int] | None = None
    source: str = ""

    def __len__(self) -> int:
        return len(self.series)


_BOOL = {"true": True, "false": False}
_TUPLE_RE = re.compile(r"\(([^()]*)\)")


def read_ts(path: str | os.PathLike, *, encoding: str | None = None) -> TsData:
    """Read a ``.ts`` file from disk.

    Arguments:
        path: the ``.ts`` file.
        encoding: None (default): UTF-8, a BOM tolerated; or the name of the file's encoding (``"latin-1"``).

    Returns:
        `TsData`, as `parse_ts`.

    Raises:
        ValueError: bytes that are not valid in the encoding (naming the line and byte offset); as `parse_ts`
            (malformed contents, naming the file and line).
        TypeError: ``encoding`` is not a string.
        NotImplementedError: as `parse_ts` (date-time timestamps).
    """
    text = decode_text(Path(path).read_bytes(), str(path), encoding, reader="read_ts")
    return parse_ts(split_lines(text), source=str(path))


def _parse_value(token: str, source: str, lineno: int, where: str) -> float:
    """One value of a timestamped case (``?``/NaN = missing), by the grammar of `text_files`."""
    return float(parse_number_row(token, source, lineno, where=lambda _: where)[0])


def _check_target(token: str, source: str, lineno: int) -> str:
    """A regression target as written (stripped), after checking that it is a finite number of the grammar."""
    token = token.strip()
    if token == "?":
        raise ValueError(f"{source}, line {lineno}: target '?' is not a number: a regression target cannot be missing")
    if _NAN_OR_INF.fullmatch(token):
        raise ValueError(
            f"{source}, line {lineno}: target {token!r} is not a finite number; a regression target "
            "cannot be missing or infinite"
        )
    if not is_number(token):
        raise ValueError(
            f"{source}, line {lineno}: target {token!r} is not a number ({number_problem(token)}; "
            "the file declares real-valued regression targets: @targetLabel true, or a numeric ARFF "
            "class attribute)"
        )
    parse_number(token, source, lineno, "target")  # refuses 1e400
    return token


_NAN_OR_INF = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
# A date-time timestamp (2019-01-01, 12:30, 01/02/2019): refused as not implemented, not as malformed.
_DATE_TIME = re.compile(r"[0-9]{1,4}[-/][0-9]{1,2}[-/][0-9]{1,4}.*|[0-9]{1,2}:[0-9]{2}.*")


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
    ts: list[float] = []
    vs: list[float] = []
    for tup in tuples:
        fields_ = tup.split(",")
        if len(fields_) != 2:
            raise ValueError(f"{source}, line {lineno}: tuple ({tup}) is not (timestamp,value)")
        t_txt = fields_[0].strip()
        if _DATE_TIME.fullmatch(t_txt):
            raise NotImplementedError(f"{source}, line {lineno}: only numeric timestamps are supported, got {t_txt!r}")
        if _NAN_OR_INF.fullmatch(t_txt) or t_txt == "?":
            raise ValueError(f"{source}, line {lineno}: timestamp {t_txt!r} is not finite")
        t = parse_number(t_txt, source, lineno, "timestamp")
        ts.append(t)
        vs.append(_parse_value(fields_[1], source, lineno, f"tuple {len(vs) + 1}"))
    t_arr = np.asarray(ts, dtype=np.float64)
    if np.unique(t_arr).size != t_arr.size:
        raise ValueError(f"{source}, line {lineno}: repeated timestamp within one dimension")
    return t_arr, np.asarray(vs, dtype=np.float64)


def _check_header_agrees(univariate: bool | None, n_dims: int | None, seen: dict[str, int], source: str) -> None:
    if univariate and n_dims is not None and n_dims != 1:
        line = max(seen["univariate"], seen["dimensions"])
        raise ValueError(
            f"{source}, line {line}: @univariate {str(univariate).lower()} contradicts @dimensions {n_dims}"
        )


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
    case_lines: list[int] = []

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
                raise ValueError(
                    f"{source}, line {lineno}: @{line[1:].split()[0]} declared twice (first on line {seen[key]})"
                )
            seen[key] = lineno
            if key == "data":
                if value:
                    raise ValueError(f"{source}, line {lineno}: unexpected text after @data")
                _check_header_agrees(univariate, n_dims_declared, seen, source)
                if has_class_label and has_target:  # the last field cannot be both a class and a target
                    raise ValueError(
                        f"{source}, line {seen['targetlabel']}: @targetLabel true (regression "
                        f"targets) beside @classLabel true on line {seen['classlabel']}: a file "
                        "has class labels or regression targets, not both"
                    )
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
                if re.fullmatch(r"\+?[0-9]+", value) is None:  # int() also reads '1_0' and '١'
                    raise ValueError(
                        f"{source}, line {lineno}: @{key} expects an integer, got {value!r} (an integer "
                        "is ASCII digits 0-9)"
                    )
                number = int(value)
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
                    f"{source}, line {lineno}: label {label!r} is not among the declared class labels {class_labels}"
                )
        n_dims = len(parts)
        expected_dims = n_dims_declared if n_dims_declared is not None else (1 if univariate else None)
        if expected_dims is not None and n_dims != expected_dims:
            raise ValueError(f"{source}, line {lineno}: {n_dims} dimensions, header declares {expected_dims}")
        if series and n_dims != series[0].shape[0]:
            raise ValueError(f"{source}, line {lineno}: {n_dims} dimensions, earlier cases have {series[0].shape[0]}")

        if timestamps:
            dims = [_parse_timestamped_dimension(p, source, lineno) for p in parts]
            grid = np.unique(np.concatenate([t for t, _ in dims]))  # sorted union
            case = np.full((n_dims, grid.size), np.nan)
            for d, (t, v) in enumerate(dims):
                case[d, np.searchsorted(grid, t)] = v
            times.append(grid)
        else:
            dims_values = []
            for d, part in enumerate(parts):
                if not part.strip():
                    raise ValueError(f"{source}, line {lineno}: a dimension has no values")
                dims_values.append(
                    parse_number_row(part, source, lineno, where=lambda k, d=d: f"dimension {d + 1}, value {k + 1}")
                )
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
            raise ValueError(
                f"{source}, line {lineno}: length {case.shape[1]}, earlier cases have "
                f"{series[0].shape[1]} and the header declares @equalLength true"
            )
        series.append(case)
        case_lines.append(lineno)
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
        lines=case_lines,
        source=source,
    )


def check_value_range(data: TsData, dtype, reader: str) -> None:
    """Refuse values and timestamps that ``dtype`` cannot carry into a dataset, naming the file and line.

    A dataset in ``dtype`` accepts ``|x| <= neuralde_seq.observations.magnitude_limit(dtype)`` (4.29e9 in float32,
    1.15e77 in float64); a regression target must be finite in ``dtype``. Checked here, where the file and line
    are known, rather than after the cast (where 1e308 has become ``inf`` in float32).

    Arguments:
        data: the parsed file; ``data.lines`` and ``data.source`` locate a case in the file.
        dtype: the floating point torch dtype the dataset will have.
        reader: the function the caller offers ``dtype`` through (named in the advice).

    Raises:
        ValueError: naming the file, line, the value's place, the value, and whether it overflows ``dtype`` or
            lies beyond the range the models handle, with what to do.
    """
    from ...observations import magnitude_limit

    limit = magnitude_limit(dtype)
    arff = data.header.get("format", "").startswith("arff")
    source = data.source or "<ts>"

    def where(k: int) -> str:
        line = f", line {data.lines[k]}" if data.lines is not None else ""
        return f"{source}{line} (case {k}, 0-based)"

    def problem(value: float) -> str:
        return out_of_range(value, dtype, reader, "the values in the file")

    for k, case in enumerate(data.series):
        with np.errstate(invalid="ignore"):
            too_big = np.abs(case) > limit  # False for NaN (missing)
        if too_big.any():
            d, t = (int(i) for i in np.argwhere(too_big)[0])
            value = float(case[d, t])
            place = f"{'channel' if arff else 'dimension'} {d + 1}, " + (
                f"timestamp {float(data.times[k][t])!r}" if data.times is not None else f"value {t + 1}"
            )
            raise ValueError(f"{where(k)}: value {value!r} ({place}) {problem(value)}")
        if data.times is not None:
            stamps = np.asarray(data.times[k])
            if (np.abs(stamps) > limit).any():
                value = float(stamps[np.abs(stamps) > limit][0])
                raise ValueError(
                    f"{where(k)}: timestamp {value!r} {problem(value)}; or subtract a reference time "
                    "(e.g. each case's first timestamp) in the file"
                )
    if data.targets and data.labels is not None:
        for k, label in enumerate(data.labels):
            value = float(label)
            if abs(value) > float(torch.finfo(dtype).max):  # a target need only be finite in dtype
                raise ValueError(f"{where(k)}: target {label!r} {problem(value)}")


def out_of_range(value: float, dtype, reader: str | None, what: str = "the values") -> str:
    """Why ``value`` cannot enter a dataset in ``dtype`` and what to do, for error messages: it overflows ``dtype``
    or lies beyond ``magnitude_limit(dtype)``; ``reader`` is the function that takes ``dtype``."""
    from ...observations import magnitude_limit

    limit, largest, wide_limit = magnitude_limit(dtype), float(torch.finfo(dtype).max), magnitude_limit(torch.float64)
    if abs(value) > largest:
        text = f"overflows {dtype} (its largest number is {largest:.3g})"
    else:
        text = (
            f"lies outside the finite range |x| <= {limit:.3g} that the models handle in {dtype} "
            "(neuralde_seq.observations.magnitude_limit)"
        )
    rescale = f"rescale {what}" + ("" if "time" in what else " (standardise each channel)")
    if dtype == torch.float64:
        return f"{text}: {rescale}"
    if abs(value) <= wide_limit:
        to = f" to {reader}" if reader else ""
        return f"{text}: pass dtype=torch.float64{to} (range |x| <= {wide_limit:.3g}), or {rescale}"
    return (
        f"{text}; dtype=torch.float64 would hold it, but even in float64 the models handle only "
        f"|x| <= {wide_limit:.3g}: {rescale}"
    )


def from_ts(data: TsData, class_names: Sequence[str] | None = None, *, dtype=torch.float32, name: str = ""):
    """Build an `IrregularDataset` from parsed ``.ts`` contents.

    Arguments:
        data: the parsed file (`TsData`, from `read_ts` or `parse_ts`).
        class_names: the classes in index order; None (default): the header's declared labels, else the
            sorted distinct labels. Not for a regression file.
        dtype: floating point dtype of times, values (and targets); default float32.
        name: the dataset's name.

    Returns:
        The dataset. A regression file (``data.targets``, ``@targetLabel true``) gives a dataset with
            ``labels`` None, no class names and ``targets`` (N,) of ``dtype``.

    Raises:
        ValueError: the data carry no labels, or ``class_names`` is given for a regression file.
    """
    if data.labels is None:
        raise ValueError("the .ts data carry no labels; a classification dataset needs them")
    check_value_range(data, dtype, "from_ts")  # names the file and line of a value dtype cannot carry
    if data.targets:
        if class_names is not None:
            raise ValueError(
                f"class_names given ({list(class_names)}), but the .ts data hold regression targets "
                "(@targetLabel true), not classes"
            )
        targets = torch.as_tensor(np.asarray(data.labels, dtype=np.float64), dtype=dtype)
        dataset = IrregularDataset.from_sequences(data.series, None, [], times=data.times, dtype=dtype, name=name)
        return dataset.replace(targets=targets)
    if class_names is None:
        class_names = data.class_labels if data.class_labels is not None else sorted(set(data.labels))
    return IrregularDataset.from_sequences(
        data.series, data.labels, class_names, times=data.times, dtype=dtype, name=name
    )
