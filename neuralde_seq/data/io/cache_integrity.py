"""Cache integrity: SHA-256 checks, trust-on-first-use manifests, archive verification and the entry lock.

The rules every cached dataset file obeys (`fetch` applies them):

* **Checksums.** A `RemoteFile` pins the SHA-256 of its file where a
  trustworthy published value exists. Where none exists (``sha256=None``) the policy is *trust on first
  use*: the hash of the first download (or of the first file a user placed in the cache by hand) is
  recorded in a manifest ``<filename>.sha256`` beside the file, with a warning saying so, and every later
  use of the file, and every later download of it, is verified against that manifest. An archive
  (``.zip``, ``.tar``, ``.tar.gz``/``.tgz``, ``.tar.bz2``, ``.tar.xz``) is opened and listed (zip members
  CRC-checked, a compressed tar read to its end) *before* its hash is recorded; one that fails is deleted
  and never recorded.
* **Concurrency.** Everything that writes a cache entry (download, manifest, rename) happens under an
  exclusive lock on ``<filename>.lock`` beside it (``fcntl.flock``), so of several processes fetching the
  same file one downloads and the others wait and then reuse its verified file. The lock file is removed
  on release.
* **Bad caches are refused, never silently replaced**: a cached file whose hash differs raises
  `ChecksumError` and stays where it is (it may be the user's only copy); an unreadable archive
  or tensor file raises `CorruptCacheError` naming the file to delete. Each message says which
  files to delete or replace to recover.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tarfile
import warnings
import zipfile
from pathlib import Path
from typing import Protocol

try:
    import fcntl
except ImportError:  # not POSIX: exclusive_lock falls back to the filelock package
    fcntl = None  # type: ignore[assignment]  # mypy checks for one platform, where the module always exists

from ...cache import CorruptCacheError
from ...files import write_text_atomic

# Public: download.py and extraction.py build on these rules (this module imports neither of them).
__all__ = [
    "ChecksumError",
    "CorruptCacheError",
    "sha256_file",
    "PinnedFile",
    "CHUNK_BYTES",
    "MANIFEST_SUFFIX",
    "LOCK_SUFFIX",
    "file_size",
    "manifest_path",
    "read_manifest",
    "record_first_use",
    "verify_cached",
    "archive_problem",
    "exclusive_lock",
]

MANIFEST_SUFFIX = ".sha256"
LOCK_SUFFIX = ".lock"
# archive kinds by file name; the archive is opened and listed before its first-use hash is recorded
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
CHUNK_BYTES = 1 << 20  # bytes read at a time when hashing, checking or copying a file


class ChecksumError(RuntimeError):
    """A downloaded or cached file's SHA-256 differs from the expected one."""


class PinnedFile(Protocol):
    """What the checks need to know of a dataset file (`neuralde_seq.data.io.download.RemoteFile` is one): its
    source ``url``, its ``filename`` in the cache, and its pinned ``sha256`` (64 lowercase hexadecimal digits) or
    None (trust on first use). Read only: a frozen dataclass is one."""

    @property
    def url(self) -> str: ...

    @property
    def filename(self) -> str: ...

    @property
    def sha256(self) -> str | None: ...


def sha256_file(path: str | os.PathLike) -> str:
    """Hexadecimal SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def file_size(path: Path) -> int:
    """Size of ``path`` in bytes, 0 when it does not exist."""
    return path.stat().st_size if path.exists() else 0


# ------------------------------------------------------------------------------ checksum manifests
def manifest_path(target: Path) -> Path:
    """The trust-on-first-use manifest of the cached file ``target``: ``<target>.sha256`` beside it."""
    return target.with_name(target.name + MANIFEST_SUFFIX)


def read_manifest(manifest: Path) -> str | None:
    """The SHA-256 recorded in ``manifest``, None when there is no manifest; an unreadable one raises
    `CorruptCacheError` naming the files to delete."""
    if not manifest.exists():
        return None
    try:
        text = manifest.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CorruptCacheError(
            f"checksum manifest {manifest} cannot be read ({error}); delete it together with "
            f"the file it describes to download that file again"
        ) from error
    words = text.split()
    if not words or not re.fullmatch(r"[0-9a-f]{64}", words[0]):
        raise CorruptCacheError(
            f"checksum manifest {manifest} does not start with a SHA-256; delete it together "
            "with the file it describes to download that file again"
        )
    return words[0]


def record_first_use(remote: PinnedFile, target: Path, digest: str) -> None:
    """Write ``digest`` (the SHA-256 of ``target``, the cached copy of ``remote``) to its manifest, with a warning
    that trust on first use applies (the caller holds the entry's lock)."""
    manifest = manifest_path(target)
    write_text_atomic(manifest, f"{digest}  {remote.filename}\n")
    warnings.warn(
        f"no published checksum is pinned for {remote.url}; recorded the SHA-256 {digest} of {target} in "
        f"{manifest} (trust on first use). Every later use of this file is verified against it.",
        stacklevel=4,
    )


def verify_cached(remote: PinnedFile, target: Path) -> None:
    """Check ``target``, the cached copy of ``remote``, against ``remote.sha256`` or the hash its manifest recorded;
    with neither, record its hash (trust on first use; the caller holds the entry's lock). A mismatch raises
    `ChecksumError`, an unpinned archive that does not open `CorruptCacheError`; the file stays in place."""
    actual = sha256_file(target)
    manifest = manifest_path(target)
    expected: str | None
    if remote.sha256 is not None:
        expected = remote.sha256
        source, advice = "pinned", f"delete it to download {remote.url} again, or replace it with the right file."
    else:
        expected = read_manifest(manifest)
        if expected is None:  # placed by hand, or downloaded before the manifest existed
            problem = archive_problem(target, remote.filename)
            if problem is not None:  # left in place: it may be the user's only copy
                raise CorruptCacheError(
                    f"cached file {target} is not a readable file of its kind ({problem}); its hash was not "
                    f"recorded. Delete it to download {remote.url} again, or replace it with a good copy."
                )
            record_first_use(remote, target, actual)
            return
        # either file may be the wrong one (the record too, e.g. left by an interrupted older version)
        source = f"recorded in {manifest} on first use"
        advice = (
            f"delete both {target} and {manifest} to download {remote.url} again and record its hash "
            f"anew, or replace {target} with the right file."
        )
    if actual != expected:
        raise ChecksumError(
            f"cached file {target} has SHA-256 {actual}, expected {expected} ({source}). It was left in place: {advice}"
        )


# --------------------------------------------------------------------------- archive verification
def archive_problem(path: Path, filename: str) -> str | None:
    """Why ``path`` is not a readable archive of the kind its ``filename`` names, or None if it is.

    Empty files are refused whatever the name (no dataset file is empty; an empty hash in a manifest is
    what an interrupted concurrent download used to leave). Zip: the member list is read and every
    member's CRC checked. Tar: every member header is read and a compressed stream is read to its end,
    which checks its end-of-stream marker and CRC.
    """
    if file_size(path) == 0:
        return "the file is empty"
    lower = filename.lower()
    try:
        if lower.endswith(".zip"):
            with zipfile.ZipFile(path) as bundle:
                if not bundle.infolist():
                    return "the zip archive has no members"
                bad = bundle.testzip()
                if bad is not None:
                    return f"zip member {bad!r} fails its CRC check"
        elif lower.endswith(_TAR_SUFFIXES):
            with tarfile.open(path, "r:*") as bundle:
                if not bundle.getmembers():
                    return "the tar archive has no members"
                while bundle.fileobj.read(CHUNK_BYTES):  # rest of a compressed stream: end marker and CRC
                    pass
    except (zipfile.BadZipFile, zipfile.LargeZipFile, tarfile.TarError, EOFError, OSError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None


# ------------------------------------------------------------------------------------- entry lock
@contextlib.contextmanager
def exclusive_lock(lock: Path):
    """Hold an exclusive lock on the file ``lock`` (created if missing, deleted on release).

    Deleting the lock file is safe because a waiter, once it has the lock, checks that the path still
    names the file it locked; if the previous holder deleted it meanwhile, it starts over on a new file.
    """
    if fcntl is None:  # pragma: no cover (not POSIX)
        try:
            from filelock import FileLock
        except ImportError:
            raise RuntimeError(
                f"locking {lock} needs fcntl (POSIX) or the filelock package; install filelock (pip install filelock)"
            ) from None
        with FileLock(str(lock)):
            yield
        return
    while True:
        lock.parent.mkdir(parents=True, exist_ok=True)  # another process may have removed it, empty
        try:
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            try:
                current = os.path.samestat(os.fstat(descriptor), os.stat(lock))
            except FileNotFoundError:
                current = False
        except BaseException:
            os.close(descriptor)
            raise
        if current:
            break
        os.close(descriptor)
    try:
        yield
    finally:
        try:
            os.unlink(lock)
        finally:
            os.close(descriptor)  # releases the lock
