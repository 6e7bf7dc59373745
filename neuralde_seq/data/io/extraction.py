"""Safe extraction of downloaded zip and tar archives (`extract_archive`).

Members that would land outside the target directory, and tar links or device files, are refused;
everything is extracted into a temporary sibling directory that is renamed to the target only when
complete, so an interrupted extraction never looks finished.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import uuid
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

from ...cache import CorruptCacheError
from .cache_integrity import CHUNK_BYTES

__all__ = ["extract_archive"]


def _safe_destination(root: Path, name: str, archive: Path) -> Path | None:
    """Where member ``name`` goes under ``root``; None for the archive's root itself; refuses escapes."""
    posix = name.replace("\\", "/")
    if posix.startswith("/") or re.match(r"^[A-Za-z]:", posix) or ".." in PurePosixPath(posix).parts:
        raise CorruptCacheError(
            f"archive {archive} has a member {name!r} that would land outside the target "
            "directory; refusing to extract it. Delete the archive if it is not what you expected."
        )
    parts = [p for p in PurePosixPath(posix).parts if p not in ("", ".")]
    if not parts:
        return None
    destination = root.joinpath(*parts)
    if os.path.commonpath([os.path.abspath(root), os.path.abspath(destination)]) != os.path.abspath(root):
        raise CorruptCacheError(f"archive {archive} has a member {name!r} outside the target directory; refusing it")
    return destination


def _member_filter(members) -> tuple[Callable[[str], bool], set[str] | None]:
    if members is None:
        return (lambda name: True), None
    if callable(members):
        return members, None
    if isinstance(members, (str, bytes)):
        raise ValueError("members must be an iterable of member names or a predicate, not a single string")
    wanted = {str(m) for m in members}
    return (lambda name: name in wanted), wanted


def extract_archive(
    archive: str | os.PathLike,
    target: str | os.PathLike,
    *,
    members: Iterable[str] | Callable[[str], bool] | None = None,
) -> Path:
    """Extract a zip or tar archive (any compression tarfile reads) into the directory ``target``.

    Arguments:
        archive: the archive file.
        target: the directory to create. If it already exists it is returned as it is: it can only exist
            complete, because extraction happens in a temporary sibling directory renamed at the end.
        members: None for every member; an iterable of member names (all must exist); or a predicate on a
            member's name. Members keep their paths inside the archive, relative to ``target``.

    Returns:
        ``target`` as a `Path`.

    Raises:
        CorruptCacheError: the archive is unreadable (not zip/tar, CRC error, truncated), or a member would
            land outside ``target`` (absolute path, ``..``), or a tar member is a link or device file.
            Nothing is left behind.
        ValueError: some requested member names are not in the archive.
    """
    archive, target = Path(archive), Path(target)
    if target.is_dir():
        return target
    if target.exists():
        raise CorruptCacheError(f"{target} exists but is not a directory; remove it to extract {archive} again")
    if not archive.is_file():
        raise ValueError(f"archive {archive} is not a file")
    select, wanted = _member_filter(members)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    temporary.mkdir()
    found: set[str] = set()
    try:
        try:
            if zipfile.is_zipfile(archive):
                with zipfile.ZipFile(archive) as bundle:
                    for info in bundle.infolist():
                        if not select(info.filename):
                            continue
                        found.add(info.filename)
                        destination = _safe_destination(temporary, info.filename, archive)
                        if destination is None:
                            continue
                        if info.is_dir():
                            destination.mkdir(parents=True, exist_ok=True)
                            continue
                        destination.parent.mkdir(parents=True, exist_ok=True)
                        with bundle.open(info) as source, open(destination, "wb") as sink:
                            shutil.copyfileobj(source, sink, CHUNK_BYTES)
            elif tarfile.is_tarfile(archive):
                with tarfile.open(archive, "r:*") as bundle:
                    for member in bundle:
                        if not select(member.name):
                            continue
                        found.add(member.name)
                        destination = _safe_destination(temporary, member.name, archive)
                        if destination is None:
                            continue
                        if member.isdir():
                            destination.mkdir(parents=True, exist_ok=True)
                        elif member.isfile():
                            destination.parent.mkdir(parents=True, exist_ok=True)
                            contents = bundle.extractfile(member)
                            assert contents is not None  # None only for members that are not regular files
                            with contents as source, open(destination, "wb") as sink:
                                shutil.copyfileobj(source, sink, CHUNK_BYTES)
                        else:
                            raise CorruptCacheError(
                                f"archive {archive} has a member {member.name!r} that is a link "
                                "or device file; refusing to extract it"
                            )
            else:
                raise CorruptCacheError(f"{archive} is neither a zip nor a tar archive; delete it to download it again")
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, zipfile.LargeZipFile) as error:
            raise CorruptCacheError(
                f"archive {archive} is corrupt ({type(error).__name__}: {error}); delete it to download it again"
            ) from error
        if wanted is not None and wanted - found:
            raise ValueError(f"archive {archive} has no member(s) {sorted(wanted - found)}")
        try:
            os.rename(temporary, target)
        except OSError:
            if not target.is_dir():  # not a lost race with another extraction of the same archive
                raise
    finally:
        if temporary.exists():
            shutil.rmtree(temporary)
    return target
