"""Writing results: JSON, and aligned tables readable both as markdown and as plain text."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..files import write_text_atomic

__all__ = ["to_jsonable", "write_json", "format_table", "write_table", "TERMINAL_WIDTH", "changed_settings"]


def to_jsonable(obj: Any) -> Any:
    """Convert tensors, numpy values, paths and tuples to JSON-friendly types (NaN/inf become None).

    Arguments:
        obj: any nesting of mappings, lists, tuples, sets, tensors, numpy arrays and scalars, paths, numbers,
            strings and None.

    Returns:
        The same data as dicts (string keys), lists, numbers, strings, booleans and None; any other object
            becomes its ``to_dict()`` (a choice such as `SolverOptions`: ``{"type": ..., **fields}``) or else its
            ``str``.
    """
    try:
        import numpy as np
        import torch
    except ImportError:  # pragma: no cover
        np = torch = None  # type: ignore[assignment]  # the checks below skip them (both are dependencies)
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
    if callable(getattr(obj, "to_dict", None)):  # a choice (SolverOptions, ControlOptions, ...): its stored form
        return to_jsonable(obj.to_dict())
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


TERMINAL_WIDTH = 80
"""Columns of the terminal that tables and progress lines printed by the toolkit fit in."""


def _is_empty(cell: str) -> bool:
    return cell in ("", "-")


def format_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    headers: Sequence[str] | None = None,
    formats: Mapping[str, str] | None = None,
    drop_empty: bool = True,
    max_width: int | None = None,
    repeat: int = 1,
    right: Sequence[str] = (),
) -> str:
    """Render rows (dicts) as a markdown table whose columns are padded to equal width.

    Numbers are right-aligned, text left-aligned; a missing value shows as ``-``.

    Arguments:
        rows: the table's rows, one mapping of column key to value each.
        columns: the keys to show, in order.
        headers: the columns' titles (default None: the keys); as many as ``columns``.
        formats: an optional format spec per key (e.g. ``{"acc": ".3f"}``); floats default to ``.4g``.
        drop_empty: leave out the columns whose cells are all missing (None, ``""`` or ``"-"``) when there is at
            least one row (default True): a column of dashes says nothing.
        max_width: None (default), or the most characters a line may have: a wider table is split into several
            tables, one below the other with a blank line between them, each holding the first ``repeat``
            columns and as many of the others, in order, as fit (a single column wider than that gets a table
            of its own).
        repeat: the leading columns every part of a split table repeats (default 1: the row names).
        right: keys of columns right-aligned whatever their values (e.g. numbers written as text, "93.51 ± 1.95").

    Returns:
        The Markdown table (or tables) as a string.

    Raises:
        ValueError: ``headers`` and ``columns`` differ in length, or ``max_width``/``repeat`` is not a positive
            integer.
    """
    headers = list(headers) if headers is not None else list(columns)
    if len(headers) != len(columns):
        raise ValueError(f"{len(headers)} headers for {len(columns)} columns")
    for name, value in (("max_width", max_width), ("repeat", repeat)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(
                f"{name} must be a positive integer{' or None' if name == 'max_width' else ''}, got {value!r}"
            )
    formats = dict(formats or {})
    columns = list(columns)
    cells = [[_cell(row.get(col), formats.get(col)) for col in columns] for row in rows]
    keep = list(range(len(columns)))
    if drop_empty and rows:
        keep = [j for j in keep if not all(_is_empty(r[j]) for r in cells)]
    numeric = [
        (all(isinstance(row.get(col), (int, float)) or row.get(col) is None for row in rows) and bool(rows))
        or col in right
        for col in columns
    ]
    widths = [max([len(h)] + [len(r[j]) for r in cells]) for j, h in enumerate(headers)]

    def render(chosen: list[int]) -> str:
        def line(items):
            padded = [items[j].rjust(widths[j]) if numeric[j] else items[j].ljust(widths[j]) for j in chosen]
            return "| " + " | ".join(padded) + " |"

        sep = (
            "|"
            + "|".join(("-" * (widths[j] + 1) + ":") if numeric[j] else ("-" * (widths[j] + 2)) for j in chosen)
            + "|"
        )
        return "\n".join([line(headers), sep] + [line(r) for r in cells])

    if max_width is None:
        return render(keep)
    leading, rest = keep[:repeat], keep[repeat:]

    def width_of(chosen: list[int]) -> int:  # "| a | b |": each column adds its width and 3
        return 1 + sum(widths[j] + 3 for j in chosen)

    # As few parts as fit (greedily), then the cuts that make the widest part narrowest: no part of one column.
    count = 0
    start = 0
    while start < len(rest):
        end = start + 1
        while end < len(rest) and width_of(leading + rest[start : end + 1]) <= max_width:
            end += 1
        count, start = count + 1, end
    parts = _balanced_parts(rest, count, lambda part: width_of(leading + part)) if count > 1 else [rest]
    return "\n\n".join(render(leading + part) for part in parts)


def _balanced_parts(items: list, count: int, width) -> list[list]:
    """``items`` cut into ``count`` consecutive non-empty parts whose largest ``width(part)`` is smallest."""
    n = len(items)
    # (items used, parts made) -> (widest part so far, cut positions)
    best: dict[tuple[int, int], tuple[Any, list[int]]] = {(0, 0): (0, [])}
    for made in range(1, count + 1):
        for used in range(made, n - (count - made) + 1):
            options = [
                (max(best[(cut, made - 1)][0], width(items[cut:used])), best[(cut, made - 1)][1] + [cut])
                for cut in range(made - 1, used)
                if (cut, made - 1) in best
            ]
            if options:
                best[(used, made)] = min(options, key=lambda option: option[0])
    cuts = best[(n, count)][1][1:] + [n]
    bounds = [0] + cuts
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]


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


def changed_settings(before: Mapping, now: Mapping, *, then: str = "then") -> list[str]:
    """What differs between two nestings of settings, one entry per changed leaf, e.g.
    ``["model_defaults.hidden: 32 then, 6 now"]``: a message about a changed setting names it, not two whole dicts.

    Arguments:
        before: the recorded settings (nested mappings; a solver as `SolverOptions.to_dict` stores it).
        now: the settings now.
        then: the word for the recorded side (default "then"; e.g. "there" for a checkpoint).

    Returns:
        ``"<dotted key>: <before> <then>, <now> now"`` for every key whose values differ (a missing key shows as
            "absent"), sorted by key.
    """
    missing = object()
    out: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            for key in sorted(set(a) | set(b), key=str):
                walk(a.get(key, missing), b.get(key, missing), f"{path}.{key}" if path else str(key))
        elif a != b:
            shown = ["absent" if v is missing else repr(v) for v in (a, b)]
            out.append(f"{path or 'value'}: {shown[0]} {then}, {shown[1]} now")

    walk(before, now, "")
    return out
