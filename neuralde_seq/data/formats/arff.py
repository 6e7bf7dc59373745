"""Reader for the ARFF files of the UEA & UCR time series classification archives.

Two layouts occur in the archives, and both are read into the same `TsData`
as the ``.ts`` reader produces, so a dataset gives identical arrays from either format:

* **multivariate (relational)**, the UEA multivariate archive:

      @relation 'BasicMotions'
      @attribute relationalAtt relational
      @attribute att0 numeric
      ...                                   one inner attribute per time step
      @end relationalAtt
      @attribute activity {Standing,Running,Walking,Badminton}
      @data
      '0.07,0.08,...\\n0.39,0.40,...\\n...',Standing

  One quoted field per case holding the channels, separated by ``\\n`` (a backslash and an ``n`` in
  the file, the ARFF escape of a line break), each channel a comma-separated row of values over the
  inner attributes; then the class value.
* **univariate (flat)**, the UCR archive: ``@attribute att1 numeric`` ... one per time step, the class
  attribute last, and each data line ``v1,v2,...,vT,label``.

Rules: the file is UTF-8 (a BOM tolerated; another encoding only when named: ``read_arff(path,
encoding="latin-1")``), and a file that is not raises ``ValueError`` naming the line and byte; keywords are
case-insensitive; ``%`` starts a comment line; ``?`` (or ``NaN``) is a missing
value (NaN); ``inf``, ``-inf`` and numbers too large for float64 (``1e400``) are refused; numbers follow the
strict grammar of `neuralde_seq.data.formats.text_files` (ASCII decimal or scientific notation: ``1_5`` and ``١٢`` are
refused, naming the line, the value's place and its text);
quoted names and values use ``'`` or ``"`` with backslash escapes; the class attribute is the last
attribute. Nominal (``{a,b,...}``): its values are the declared class labels in file order. Numeric, in the
relational layout only: a regression target per case (``TsData.targets`` True), which must be a finite
number; in the flat layout a numeric last attribute cannot be told from a time step, so it is refused (read
such a dataset from its ``.ts`` file, ``@targetLabel true``).
Variable-length datasets are stored padded with ``?`` to the common width; the reader keeps that
padding as NaN (the loaders read a series' length off its trailing NaNs). Sparse data lines and
string/date attributes raise ``NotImplementedError``; every malformed line raises ``ValueError`` naming
the file, the line number and the offending text. Every case is checked against the header: the number
of values (time-step attributes), the same number of channels as the first case, a class value from the
declared list. A file cut short is refused when the cut falls in the header (no ``@data``), right after
``@data`` (no case) or inside a case (a quoted value left open, too few values, a cut class value);
ARFF declares no case count, so a file cut right after a complete case cannot be detected.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .text_files import decode_text, parse_number_row, split_lines
from .ts_format import TsData, _check_target

__all__ = ["parse_arff", "read_arff", "decode_archive_text"]

_NUMERIC_TYPES = {"numeric", "real", "integer"}
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_RE = re.compile(r"\\(.)", re.DOTALL)


def decode_archive_text(raw: bytes, source: str = "<archive member>") -> str:
    """Decode an archive text file by the readers' one policy (`neuralde_seq.data.formats.text_files.decode_text`):
    UTF-8, a BOM tolerated, and a ``ValueError`` naming ``source``, the line and the byte otherwise (no
    silent Latin-1 fallback)."""
    return decode_text(raw, source, None, reader="the reader")


def read_arff(path: str | os.PathLike, *, encoding: str | None = None) -> TsData:
    """Read an ARFF file from disk (see the module docstring for the layouts).

    Arguments:
        path: the ``.arff`` file.
        encoding: None (default): UTF-8, a BOM tolerated; or the name of the file's encoding (``"latin-1"``).

    Returns:
        `TsData`, as `parse_arff`.

    Raises:
        ValueError: bytes that are not valid in the encoding (naming the line and byte offset); as
            `parse_arff` (malformed contents, naming the file and line).
        TypeError: ``encoding`` is not a string.
        NotImplementedError: as `parse_arff` (sparse data lines, string/date attributes).
    """
    text = decode_text(Path(path).read_bytes(), str(path), encoding, reader="read_arff")
    return parse_arff(split_lines(text), source=str(path))


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)


def _split_fields(line: str, source: str, lineno: int) -> list[str]:
    """Split an ARFF line on commas outside quotes; quoted fields are unquoted and unescaped."""
    if "'" not in line and '"' not in line:
        return [field.strip() for field in line.split(",")]
    fields, i, n = [], 0, len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] in "'\"":
            quote, j = line[i], i + 1
            while True:  # find the closing quote, skipping escaped ones
                j = line.find(quote, j)
                if j < 0:
                    raise ValueError(f"{source}, line {lineno}: unterminated quoted value")
                k = j
                while k > i + 1 and line[k - 1] == "\\":
                    k -= 1
                if (j - k) % 2 == 0:
                    break
                j += 1
            fields.append(_unescape(line[i + 1 : j]))
            i = j + 1
            while i < n and line[i] in " \t":
                i += 1
            if i < n and line[i] != ",":
                raise ValueError(f"{source}, line {lineno}: text after a quoted value: {line[i : i + 20]!r}")
        else:
            j = line.find(",", i)
            j = n if j < 0 else j
            fields.append(line[i:j].strip())
            i = j
        if i >= n:
            return fields
        i += 1  # the comma


def _parse_numbers(row: str, source: str, lineno: int, where=lambda k: f"value {k + 1}") -> np.ndarray:
    """A comma-separated row of numbers, ``?`` or ``NaN`` = NaN, as float64, by the grammar of `text_files`.

    Raises ``ValueError`` naming the line, the value's place (``where``) and the token for a value outside the
    grammar or an infinite value (``inf``, ``1e400``).
    """
    return parse_number_row(row, source, lineno, where)


def _parse_attribute(rest: str, source: str, lineno: int) -> tuple[str, str]:
    """``name type`` of an @attribute line; name unquoted, type lower-cased (nominal kept verbatim)."""
    rest = rest.strip()
    if rest[:1] in ("'", '"'):
        end = rest.find(rest[0], 1)
        if end < 0:
            raise ValueError(f"{source}, line {lineno}: unterminated attribute name")
        name, kind = rest[1:end], rest[end + 1 :].strip()
    else:
        brace = rest.find("{")
        parts = rest.split(None, 1) if brace < 0 else [rest[:brace].strip(), rest[brace:]]
        if len(parts) != 2 or not parts[0]:
            raise ValueError(f"{source}, line {lineno}: @attribute needs a name and a type")
        name, kind = parts
    if not kind:
        raise ValueError(f"{source}, line {lineno}: @attribute {name!r} has no type")
    return name, (kind if kind.startswith("{") else kind.lower())


def _nominal_values(kind: str, source: str, lineno: int) -> list[str]:
    if not kind.endswith("}"):
        raise ValueError(f"{source}, line {lineno}: nominal attribute without a closing brace")
    values = [v for v in _split_fields(kind[1:-1], source, lineno)]
    if not values or any(v == "" for v in values):
        raise ValueError(f"{source}, line {lineno}: empty nominal value")
    if len(set(values)) != len(values):
        raise ValueError(f"{source}, line {lineno}: repeated nominal value")
    return values


def parse_arff(lines: Iterable[str], source: str = "<arff>") -> TsData:
    """Parse the lines of a UEA/UCR ARFF file into `TsData`.

    Arguments:
        lines: the file's lines (with or without line ends).
        source: the file name used in error messages.

    Returns:
        `TsData` with ``series`` as one float64 array of shape (C, T) per case (T = the number of time-step
            attributes, padding kept as NaN), ``labels`` as strings, ``class_labels`` as declared by the class
            attribute (None for a numeric one), ``targets`` (True for a numeric class attribute: regression
            targets), and ``header`` with ``relation`` and ``format`` ("arff-relational" or "arff-flat").

    Raises:
        ValueError: a malformed or non-finite token, or a case that contradicts the header, naming
            ``source``, the line number and the offending text.
        NotImplementedError: sparse data lines, string/date attributes.
    """
    relation = None
    outer: list[tuple[str, str]] = []  # (name, type) of top-level attributes
    inner_count = 0  # numeric attributes inside the relational block
    in_relational: str | None = None
    relational_name: str | None = None
    in_data = False
    data_line = 0
    series: list[np.ndarray] = []
    labels: list[str] = []
    class_labels: list[str] | None = None
    targets = False  # a numeric class attribute: regression targets
    n_time: int | None = None
    case_lines: list[int] = []

    for lineno, raw_line in enumerate(lines, start=1):
        line = raw_line.strip()
        if not line or line.startswith("%"):
            continue
        if not in_data:
            if not line.startswith("@"):
                raise ValueError(f"{source}, line {lineno}: data line before @data")
            if line == "@":
                raise ValueError(f"{source}, line {lineno}: '@' without a keyword")
            keyword, *remainder = line[1:].split(None, 1)
            keyword, rest = keyword.lower(), (remainder[0] if remainder else "")
            if keyword == "relation":
                relation = rest.strip().strip("'\"")
            elif keyword == "attribute":
                name, kind = _parse_attribute(rest, source, lineno)
                if in_relational is not None:
                    if kind not in _NUMERIC_TYPES:
                        # a valid ARFF type is unsupported here; anything else is a malformed file
                        valid = kind.startswith("{") or kind.split()[0] in ("string", "date", "relational")
                        raise (NotImplementedError if valid else ValueError)(
                            f"{source}, line {lineno}: relational attributes must be numeric, got {kind!r}"
                        )
                    inner_count += 1
                    continue
                if kind == "relational":
                    if relational_name is not None:
                        raise ValueError(f"{source}, line {lineno}: a second relational attribute")
                    if outer:
                        raise ValueError(f"{source}, line {lineno}: the relational attribute must come first")
                    in_relational = relational_name = name
                    continue
                if kind.split()[0] in ("string", "date"):
                    raise NotImplementedError(
                        f"{source}, line {lineno}: {kind.split()[0]} attributes are not supported"
                    )
                if kind not in _NUMERIC_TYPES and not kind.startswith("{"):
                    raise ValueError(f"{source}, line {lineno}: unknown attribute type {kind!r}")
                outer.append((name, kind))
            elif keyword == "end":
                if in_relational is None or rest.strip().strip("'\"") != in_relational:
                    raise ValueError(f"{source}, line {lineno}: @end without a matching relational attribute")
                in_relational = None
            elif keyword == "data":
                if in_relational is not None:
                    raise ValueError(f"{source}, line {lineno}: @data inside the relational attribute")
                targets = bool(outer) and relational_name is not None and outer[-1][1] in _NUMERIC_TYPES
                if not targets and (not outer or not outer[-1][1].startswith("{")):
                    # a numeric last attribute of a flat file may be a time step of an unlabelled file
                    raise ValueError(
                        f"{source}, line {lineno}: the last attribute must be the nominal class "
                        "attribute (a numeric one, a regression target, is read in the relational "
                        "layout only; for a flat file use its .ts file with @targetLabel true)"
                    )
                class_labels = None if targets else _nominal_values(outer[-1][1], source, lineno)
                if relational_name is not None:
                    if len(outer) != 1:
                        raise ValueError(
                            f"{source}, line {lineno}: a relational file must have exactly one "
                            f"attribute after the relational one (the class), got {len(outer)}"
                        )
                    if inner_count == 0:
                        raise ValueError(f"{source}, line {lineno}: the relational attribute has no time steps")
                    n_time = inner_count
                else:
                    if any(kind not in _NUMERIC_TYPES for _, kind in outer[:-1]):
                        raise ValueError(f"{source}, line {lineno}: every attribute but the class must be numeric")
                    n_time = len(outer) - 1
                    if n_time == 0:
                        raise ValueError(f"{source}, line {lineno}: no time-step attributes")
                in_data, data_line = True, lineno
            else:
                raise ValueError(f"{source}, line {lineno}: unknown header keyword @{keyword}")
            continue

        # ---- a data line ----
        assert n_time is not None  # set at @data, before any data line
        if line.startswith("{"):
            raise NotImplementedError(f"{source}, line {lineno}: sparse ARFF data lines are not supported")
        if relational_name is not None:
            fields = _split_fields(line, source, lineno)
            if len(fields) != 2:
                raise ValueError(
                    f"{source}, line {lineno}: expected a quoted relational value and a class, got {len(fields)} fields"
                )
            rows = [
                _parse_numbers(row, source, lineno, lambda k, c=c: f"channel {c + 1}, value {k + 1}")
                for c, row in enumerate(fields[0].split("\n"))
            ]
            for channel, row in enumerate(rows):
                if row.size != n_time:
                    raise ValueError(
                        f"{source}, line {lineno}: {row.size} values per channel (channel {channel}), "
                        f"the relational attribute declares {n_time}"
                    )
            case = np.stack(rows)
            label = fields[1]
        else:
            fields = _split_fields(line, source, lineno)
            if len(fields) != n_time + 1:
                raise ValueError(f"{source}, line {lineno}: {len(fields)} fields, expected {n_time} values and a class")
            case = _parse_numbers(",".join(fields[:-1]), source, lineno, lambda k: f"field {k + 1}")[None, :]
            label = fields[-1]
        if series and case.shape[0] != series[0].shape[0]:
            raise ValueError(
                f"{source}, line {lineno}: {case.shape[0]} channels, earlier cases have {series[0].shape[0]}"
            )
        if label == "?" or label == "":
            raise ValueError(f"{source}, line {lineno}: missing {'target' if targets else 'class'} value")
        if targets:
            label = _check_target(label, source, lineno)
        elif class_labels is None or label not in class_labels:  # None only with targets
            raise ValueError(
                f"{source}, line {lineno}: class {label!r} is not among the declared values {class_labels}"
            )
        series.append(case)
        labels.append(label)
        case_lines.append(lineno)

    if not in_data:
        raise ValueError(f"{source}: no @data line (the file ends in its header: cut short, or not an ARFF file)")
    if not series:
        raise ValueError(f"{source}, line {data_line}: no cases after @data (the file is cut short or empty)")
    header = {"relation": relation or "", "format": "arff-relational" if relational_name else "arff-flat"}
    return TsData(
        series=series,
        labels=labels,
        class_labels=class_labels,
        times=None,
        header=header,
        targets=targets,
        lines=case_lines,
        source=source,
    )
