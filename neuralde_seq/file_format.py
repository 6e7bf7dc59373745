"""The version of the files neuralde_seq writes, and the check every reader makes.

Results (a run's ``result.json``, a grid's ``results.json`` and ``grid.json``), checkpoints and tensor caches carry
``"format_version": FORMAT_VERSION``. A reader given a file of another version refuses it with `OldFormatError`,
which says what to run: files of an older version are brought up to date by one module, `neuralde_seq.migration`
(``neuralde-seq migrate PATH``), so the code that reads files knows one format only.

Versions:
    1. Files written before they carried a version (up to commit 539f159): solvers recorded as their ``repr``,
       settings at their defaults left out of fingerprints, input specs without their unset fields.
    2. Choices stored as ``{"type": "RK4", **fields}`` (`neuralde_seq.solvers.SolverOptions.to_dict`), every
       setting recorded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["FORMAT_VERSION", "FORMAT_KEY", "OldFormatError", "check_format", "format_version_of"]

FORMAT_VERSION = 2
FORMAT_KEY = "format_version"


class OldFormatError(ValueError):
    """A file of another format version than this library's: the message names the file and what to do."""

    def __init__(self, message: str, path: str | os.PathLike | None = None):
        super().__init__(message)
        self.path = path


def format_version_of(data: Any) -> int:
    """The format version a file's contents (a dict) carry: 1 for contents without one (written before files
    carried a version)."""
    version = data.get(FORMAT_KEY, 1) if isinstance(data, dict) else 1
    return version if isinstance(version, int) and not isinstance(version, bool) else 1


def check_format(data: Any, path: str | os.PathLike, what: str) -> None:
    """Raise `OldFormatError` unless ``data`` (a file's contents, a dict) carry this library's `FORMAT_VERSION`.

    Arguments:
        data: the file's contents as read (a dict; anything else is left to the caller's own checks).
        path: the file, named in the message.
        what: what the file is, for the message (e.g. "checkpoint", "recorded run").

    Raises:
        OldFormatError: the contents carry an older version (or none): the message says to run
            ``neuralde-seq migrate PATH``; or a newer one: the message says to update neuralde_seq.
    """
    if not isinstance(data, dict):
        return
    version = format_version_of(data)
    if version == FORMAT_VERSION:
        return
    if version > FORMAT_VERSION:
        raise OldFormatError(
            f"{what} {path} has format version {version}, newer than this neuralde_seq reads "
            f"({FORMAT_VERSION}): update neuralde_seq to read it",
            path,
        )
    raise OldFormatError(
        f"{what} {path} has format version {version} (written by an older neuralde_seq); this one "
        f"reads version {FORMAT_VERSION}: run `neuralde-seq migrate {_migration_target(path)}` to "
        "bring the files there up to date",
        path,
    )


def _migration_target(path: str | os.PathLike) -> Path:
    """The folder to migrate for a file: a grid's output folder for anything under its ``runs/`` (the run folders
    are renamed together with the grid's record), else the file's own folder."""
    path = Path(path)
    for parent in path.parents:
        if parent.name == "runs":
            return parent.parent
    return path.parent
