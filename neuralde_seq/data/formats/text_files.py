"""The one encoding policy and the one number grammar of the package's text file readers.

Every text file reader (``.ts``, ARFF, and through them `load_files`, `read_file` and the archive loaders)
decodes and reads numbers here, so that they agree:

* **Encoding.** Files are UTF-8; a byte order mark (BOM) at the start is tolerated and dropped. A file that is
  not valid UTF-8 raises ``ValueError`` naming the file, the line, the byte offset and the byte, with what to
  do (re-save the file as UTF-8, or name its encoding with the reader's ``encoding`` argument). There is no
  silent fallback to another encoding: a guessed Latin-1 turns every ``é`` of a UTF-8 label into ``Ã©``.
  Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` only (the line numbers an editor shows), not at the other
  characters `str.splitlines` breaks on (U+2028, ``\\x85``, form feeds).
* **Numbers.** ASCII decimal or scientific notation: an optional sign, digits ``0-9`` with an optional decimal
  point, an optional exponent (``1``, ``-2.5``, ``.5``, ``3.``, ``1e-3``, ``+4E+02``), with spaces or tabs
  around it. Python's `float` grammar is wider and reads text no file format means as a number: ``1_5`` as
  15, ``١٢`` (Arabic-Indic digits) as 12, a full-width ``１`` as 1; here they raise ``ValueError`` naming the
  file, the line, the value's place and its text. The missing-value marks are the format's (``?`` and ``NaN``, any
  case, for ``.ts`` and ARFF); infinities and numbers too large for float64 (``1e400``) are refused.
"""

from __future__ import annotations

import codecs
import math
import re

import numpy as np

__all__ = [
    "decode_text",
    "check_encoding",
    "split_lines",
    "NUMBER",
    "is_number",
    "number_problem",
    "parse_number_row",
    "parse_number",
]

# One number: ASCII digits only (re's \d would also match Arabic-Indic and other digits).
NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_NUMBER_RE = re.compile(NUMBER)
_MISSING = r"\?|[+-]?[nN][aA][nN]"
_TOKEN = rf"[ \t]*(?:{NUMBER}|{_MISSING})[ \t]*"
_ROW_RE = re.compile(rf"{_TOKEN}(?:,{_TOKEN})*")
_INFINITY_RE = re.compile(r"[+-]?(?:inf|infinity)", re.IGNORECASE)
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")


def check_encoding(encoding, argument: str = "encoding") -> str | None:
    """``encoding`` checked: None (UTF-8, the default) or the name of a text encoding Python knows.

    Raises:
        TypeError: not a string (or None).
        ValueError: an unknown name, or a codec that is not a text encoding (``base64``, ``rot13``).
    """
    if encoding is None:
        return None
    if not isinstance(encoding, str):
        raise TypeError(
            f"{argument} must be None (UTF-8) or the name of a text encoding such as 'latin-1', got "
            f"{type(encoding).__name__} {encoding!r}"
        )
    try:
        codecs.lookup(encoding)
        b"x".decode(encoding, errors="replace")  # LookupError for codecs that are not bytes -> text (base64)
    except LookupError:
        raise ValueError(
            f"{argument}={encoding!r} is not a text encoding Python knows (e.g. 'utf-8', 'latin-1', 'cp1252')"
        ) from None
    return encoding


def decode_text(raw: bytes, source: str, encoding: str | None = None, reader: str = "the reader") -> str:
    """Decode a text file's bytes by the module's policy (UTF-8, BOM tolerated, no fallback).

    Arguments:
        raw: the file's bytes.
        source: the file's name, for the error message.
        encoding: None (UTF-8) or an explicit encoding (checked with `check_encoding`).
        reader: the function to name in the advice (``read_ts``, ``load_files``, ...).

    Raises:
        ValueError: bytes that are not valid in the encoding, naming the file, line, byte offset and byte.
    """
    encoding = check_encoding(encoding)
    name = "utf-8-sig" if encoding is None or codecs.lookup(encoding).name == "utf-8" else encoding
    try:
        return raw.decode(name)
    except UnicodeDecodeError as error:
        start = error.start
        line = raw.count(b"\n", 0, start) + raw.count(b"\r", 0, start) - raw.count(b"\r\n", 0, start) + 1
        line_start = max(raw.rfind(b"\n", 0, start), raw.rfind(b"\r", 0, start)) + 1
        shown = "UTF-8" if encoding is None else repr(encoding)
        raise ValueError(
            f"{source}, line {line}: byte 0x{raw[start]:02X} at byte offset {start} (byte {start - line_start + 1} "
            f"of the line) is not valid {shown} ({error.reason}); the file is read as {shown}, never guessed: "
            f"re-save it as UTF-8, or pass its encoding to {reader} (encoding='latin-1' or the file's actual "
            "encoding)"
        ) from None


def split_lines(text: str) -> list[str]:
    """``text`` split at ``\\n``, ``\\r\\n`` and ``\\r`` only (see the module docstring)."""
    return _LINE_BREAK_RE.split(text)


def is_number(token: str) -> bool:
    """Whether ``token`` (already stripped) is a number of the module's grammar (not a missing-value mark)."""
    return _NUMBER_RE.fullmatch(token) is not None


def number_problem(token: str) -> str:
    """Why ``token`` (stripped) is not a number of the grammar, in words, for an error message."""
    if token == "":
        return "an empty value (two commas in a row or a trailing comma)"
    if any(ch.isdigit() and not "0" <= ch <= "9" for ch in token):
        return "it holds non-ASCII digits (only 0-9 are digits in the file formats)"
    if "_" in token:
        return "it holds an underscore (digit grouping is not part of the file formats)"
    if any(ch.isspace() for ch in token):
        return "it holds a space inside the value"
    return "it is not a decimal number"


_GRAMMAR = "numbers are ASCII decimal or scientific notation (1, -2.5, 1e-3), and '?' or NaN marks a missing value"


def parse_number_row(row: str, source: str, lineno: int, where=lambda k: f"value {k + 1}") -> np.ndarray:
    """A comma-separated row of numbers of the grammar, ``?`` and ``NaN`` read as NaN, as float64.

    Arguments:
        row: the row's text, e.g. ``"1.5, ?, -2e3"``.
        source: the file name, for error messages.
        lineno: the row's line in the file, for error messages.
        where: maps the 0-based position of a value in the row to its place in words, for error messages.

    Returns:
        (n,) float64 array.

    Raises:
        ValueError: a value outside the grammar, an infinity or a number too large for float64, naming
            ``source``, ``lineno``, the value's place and its text.
    """
    if _ROW_RE.fullmatch(row) is None:
        for k, token in enumerate(row.split(",")):
            token = token.strip(" \t")
            if token == "?" or is_number(token) or re.fullmatch(_MISSING, token):
                continue
            if _INFINITY_RE.fullmatch(token):
                raise ValueError(
                    f"{source}, line {lineno}: value {token!r} is not a finite number ({where(k)}); "
                    "only finite numbers and the missing-value marks '?' and NaN are allowed"
                )
            if token == "":
                raise ValueError(
                    f"{source}, line {lineno}: empty value ({where(k)}: two commas in a row or a trailing comma)"
                )
            raise ValueError(
                f"{source}, line {lineno}: cannot read {token!r} as a number ({where(k)}): "
                f"{number_problem(token)}; {_GRAMMAR}"
            )
        raise ValueError(f"{source}, line {lineno}: cannot read the values")  # pragma: no cover
    tokens = row.split(",")
    if "?" in row:
        tokens = ["nan" if t.strip(" \t") == "?" else t for t in tokens]
    values = np.array(tokens, dtype=np.float64)
    infinite = np.isinf(values)
    if infinite.any():  # 1e400: an overflow, never a measurement
        k = int(np.argmax(infinite))
        token = tokens[k].strip(" \t")
        raise ValueError(
            f"{source}, line {lineno}: value {token!r} is not a finite number ({where(k)}; it overflows "
            "float64, whose largest number is 1.8e308); only finite numbers and the missing-value marks "
            "'?' and NaN are allowed"
        )
    return values


def parse_number(token: str, source: str, lineno: int, what: str) -> float:
    """One number of the grammar (no missing-value mark), finite in float64; ``what`` names it in messages."""
    token = token.strip(" \t")
    if not is_number(token):
        raise ValueError(
            f"{source}, line {lineno}: {what} {token!r} is not a number ({number_problem(token)}; "
            "numbers are ASCII decimal or scientific notation: 1, -2.5, 1e-3)"
        )
    value = float(token)
    if math.isinf(value):
        raise ValueError(f"{source}, line {lineno}: {what} {token!r} is not a finite number (it overflows float64)")
    return value
