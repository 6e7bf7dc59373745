"""Writing results: JSON, and aligned tables readable both as markdown and as plain text."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..files import write_text_atomic

__all__ = ["to_jsonable", "write_json", "format_table", "write_table"]


def to_jsonable(obj: Any) -> Any:
    """Convert tensors, numpy values, paths and tuples to JSON-friendly types (NaN/inf become None).

    Arguments:
        obj: any nesting of mappings, lists, tuples, sets, tensors, numpy arrays and scalars, paths, numbers,
            strings and None.

    Returns:
        The same data as dicts (string keys), lists, numbers, strings, booleans and None; any other object
            becomes its ``str``.
    """
    try:
        import numpy as np
        import torch
    except ImportError:  # pragma: no cover
        np = torch = None
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [to_jsonable(v) for v in obj]
    if torch is not None and isinstance(obj, torch.Tensor):
        return to_jsonable(obj.detach().cpu().tolist())
    if np is not None and isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if np is not None and isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, os.PathLike):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return str(obj)


def write_json(data: Any, path: str | os.PathLike) -> Path:
    """Write ``data`` as indented JSON (parent folders created), atomically (`neuralde_seq.files.atomic_file`).

    Arguments:
        data: anything `to_jsonable` converts.
        path: the file to write.

    Returns:
        The `Path` written.
    """
    # Atomic (a unique temporary file, then os.replace): a reader or a crash never leaves half a file.
    return write_text_atomic(path, json.dumps(to_jsonable(data), indent=2, allow_nan=False) + "\n")


def _cell(value: Any, fmt: str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if fmt is not None:
        try:
            return format(value, fmt)
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    headers: Sequence[str] | None = None,
    formats: Mapping[str, str] | None = None,
) -> str:
    """Render rows (dicts) as a markdown table whose columns are padded to equal width.

    Numbers are right-aligned, text left-aligned; a missing value shows as ``-``.

    Arguments:
        rows: the table's rows, one mapping of column key to value each.
        columns: the keys to show, in order.
        headers: the columns' titles (default None: the keys); as many as ``columns``.
        formats: an optional format spec per key (e.g. ``{"acc": ".3f"}``); floats default to ``.4g``.

    Returns:
        The Markdown table as a string.

    Raises:
        ValueError: ``headers`` and ``columns`` differ in length.
    """
    headers = list(headers) if headers is not None else list(columns)
    if len(headers) != len(columns):
        raise ValueError(f"{len(headers)} headers for {len(columns)} columns")
    formats = dict(formats or {})
    cells = [[_cell(row.get(col), formats.get(col)) for col in columns] for row in rows]
    numeric = [
        all(isinstance(row.get(col), (int, float)) or row.get(col) is None for row in rows) and bool(rows)
        for col in columns
    ]
    widths = [max([len(h)] + [len(r[j]) for r in cells]) for j, h in enumerate(headers)]

    def line(items, aligns):
        padded = [s.rjust(w) if right else s.ljust(w) for s, w, right in zip(items, widths, aligns)]
        return "| " + " | ".join(padded) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if num else ("-" * (w + 2)) for w, num in zip(widths, numeric)) + "|"
    out = [line(headers, numeric), sep] + [line(r, numeric) for r in cells]
    return "\n".join(out)


def write_table(text: str, path: str | os.PathLike, *, title: str | None = None, notes: str | None = None) -> Path:
    """Write a table produced by `format_table` to a markdown file, with an optional title and notes (atomically,
    `neuralde_seq.files.atomic_file`).

    Arguments:
        text: the table (or any Markdown text).
        path: the file to write (parent folders created).
        title: a first-level heading above the table, or None.
        notes: text below the table, or None.

    Returns:
        The `Path` written.
    """
    parts = []
    if title:
        parts.append(f"# {title}\n\n")
    parts.append(text + "\n")
    if notes:
        parts.append("\n" + notes.rstrip() + "\n")
    return write_text_atomic(path, "".join(parts))
