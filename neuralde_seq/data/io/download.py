"""Dataset downloads: the cache directory, offline mode, and verified, resumable transfers (`fetch`).

Every loader of a public dataset goes through this module, so the rules are the same for all of them:

* **Where.** `data_dir`: the ``cache_dir`` argument, else ``$NEURALDE_SEQ_DATA``, else
  ``~/.cache/neuralde_seq``. Each loader keeps its files in a sub-directory of it.
* **Downloads** (`fetch`) go through `urllib.request`, so ``http(s)://`` and ``file://``
  sources take the same code path (the tests use local ``file://`` and ``http://127.0.0.1`` sources).
  Bytes go to ``<filename>.part``; a broken transfer is retried, and an interrupted ``.part`` is resumed
  with an HTTP ``Range`` request (a server that ignores it sends the whole file, which then replaces the
  ``.part``; a ``file://`` source is simply read again from the start). The finished file is checked
  against its SHA-256 and only then renamed to its final name, so a file under its final name is
  always complete and verified.
* **Checksums, concurrency, bad caches** (`neuralde_seq.data.io.cache_integrity`): a
  `RemoteFile` pins the SHA-256 of its file where a trustworthy published value exists; where
  none exists (``sha256=None``) the policy is *trust on first use*: the first download's hash is
  recorded in a manifest ``<filename>.sha256`` beside the file and every later use is verified against
  it (an archive is opened and listed before its hash is recorded). Writes to a cache entry happen under
  an exclusive lock on ``<filename>.lock``. A cached file that fails its check is refused
  (`ChecksumError`, `CorruptCacheError`), never
  silently replaced.
* **Offline mode** (``offline=True`` or ``$NEURALDE_SEQ_OFFLINE`` set to 1/true/yes/on): cached files are
  used, and a missing one raises `DataUnavailableError` naming the URL and the path to put the
  file at, before anything is written to disk.
* **Extraction** of downloaded archives: `neuralde_seq.data.io.extraction.extract_archive`.
* **Preprocessed tensors** (`cached_tensors`, from `neuralde_seq.cache`) are computed once per
  key and saved atomically with a checksum of their contents; an unreadable or altered file is refused.
"""

from __future__ import annotations

import http.client
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import urlparse
from urllib.request import Request, urlopen

from ...cache import CorruptCacheError
from ...terminal import Progress
from .cache_integrity import (
    CHUNK_BYTES,
    LOCK_SUFFIX,
    MANIFEST_SUFFIX,
    ChecksumError,
    archive_problem,
    exclusive_lock,
    file_size,
    manifest_path,
    read_manifest,
    record_first_use,
    sha256_file,
    verify_cached,
)

__all__ = [
    "CorruptCacheError",
    "DataUnavailableError",
    "RemoteFile",
    "data_dir",
    "fetch",
    "resolve_offline",
]

DATA_DIR_ENV = "NEURALDE_SEQ_DATA"
OFFLINE_ENV = "NEURALDE_SEQ_OFFLINE"
PART_SUFFIX = ".part"
RETRY_BACKOFF_S = 0.5  # first pause before retrying a transfer that made no progress; doubles each time
_TIMEOUT_S = 60.0
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


class DataUnavailableError(RuntimeError):
    """A dataset file is neither in the cache nor obtainable (offline mode, no network, server error)."""


def data_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The root of the dataset cache: ``cache_dir``, else ``$NEURALDE_SEQ_DATA``, else ``~/.cache/neuralde_seq``.

    ``~`` is expanded. The directory is not created here (offline runs must not write anything).

    Arguments:
        cache_dir: the cache root to use, or None (default) for the environment variable or the default.

    Returns:
        The cache root as a `Path` (``~`` expanded; it may not exist yet).

    Raises:
        ValueError: ``cache_dir`` is given but is not a non-empty path.
    """
    if cache_dir is not None:
        if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
            raise ValueError(f"cache_dir must be a non-empty path, got {cache_dir!r}")
        return Path(cache_dir).expanduser()
    from_env = os.environ.get(DATA_DIR_ENV, "")
    if from_env:
        return Path(from_env).expanduser()
    return Path("~/.cache/neuralde_seq").expanduser()


def resolve_offline(offline: bool | None = None) -> bool:
    """``offline`` itself, or for None the value of ``$NEURALDE_SEQ_OFFLINE`` (1/true/yes/on = offline).

    An unrecognised value of the variable raises ``ValueError`` rather than being guessed.
    """
    if offline is not None:
        if not isinstance(offline, bool):
            raise ValueError(f"offline must be True, False or None, got {offline!r}")
        return offline
    raw = os.environ.get(OFFLINE_ENV, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"${OFFLINE_ENV} must be one of 1/true/yes/on or 0/false/no/off, got {raw!r}")


@dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset: where to download it, its name in the cache, and its expected SHA-256.

    Attributes:
        url: ``http://``, ``https://`` or ``file://`` address.
        filename: the file's name inside the cache directory (a plain name, no directories).
        sha256: 64 hexadecimal digits, or None when no trustworthy published checksum exists (then the
            trust-on-first-use manifest applies; see the module docstring).
        size: the size in bytes if known (used to show progress and to reject a truncated transfer early).
    """

    url: str
    filename: str
    sha256: str | None
    size: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or urlparse(self.url).scheme not in ("http", "https", "file"):
            raise ValueError(f"url must be an http://, https:// or file:// address, got {self.url!r}")
        name = self.filename
        if (
            not isinstance(name, str)
            or name in ("", ".", "..")
            or "/" in name
            or "\\" in name
            or name.endswith((PART_SUFFIX, MANIFEST_SUFFIX, LOCK_SUFFIX))
        ):
            raise ValueError(
                f"filename must be a plain file name (no directories, not ending in {PART_SUFFIX}, "
                f"{MANIFEST_SUFFIX} or {LOCK_SUFFIX}), got {name!r}"
            )
        if self.sha256 is not None:
            if not isinstance(self.sha256, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", self.sha256):
                raise ValueError(f"sha256 must be 64 hexadecimal digits or None, got {self.sha256!r}")
            object.__setattr__(self, "sha256", self.sha256.lower())
        if self.size is not None and (isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0):
            raise ValueError(f"size must be a non-negative integer or None, got {self.size!r}")


# ------------------------------------------------------------------------------------------ fetch
class _TransientError(Exception):
    """A transfer failure worth retrying (connection dropped, timeout, server busy)."""


class _PermanentError(Exception):
    """A transfer failure that a retry cannot fix (404, a missing local file, ...)."""


def _make_directories(directory: Path) -> list[Path]:
    """Create ``directory`` and missing parents; return the ones created, outermost first."""
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    directory.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def _remove_if_empty(directories: list[Path]) -> None:
    for directory in reversed(directories):  # innermost first
        try:
            directory.rmdir()
        except OSError:
            return  # not empty (or gone): leave it and its parents


def fetch(
    remote: RemoteFile,
    directory: str | os.PathLike,
    *,
    offline: bool | None = None,
    retries: int = 3,
    progress: bool = True,
) -> Path:
    """The verified local copy ``directory / remote.filename`` of ``remote``, downloading it if needed.

    Safe to call from several processes at once for the same file: one downloads, the others wait on
    ``<filename>.lock`` and then reuse the verified file.

    Arguments:
        remote: the file to get.
        directory: the cache directory holding it (created when a download starts, not before).
        offline: True = never download; None (default) reads ``$NEURALDE_SEQ_OFFLINE``.
        retries: how often a failed transfer is retried (so at most ``retries + 1`` attempts per call).
            A retry after a transfer that delivered bytes resumes at once; one that delivered nothing waits
            ``RETRY_BACKOFF_S`` seconds, doubling each time.
        progress: show progress while downloading (a bar on a terminal, a line at start and end otherwise).

    Returns:
        The path of the file, whose SHA-256 matches ``remote.sha256`` (or the trust-on-first-use manifest
            when ``remote.sha256`` is None).

    Raises:
        ChecksumError: the cached file, or a fresh download, has another SHA-256. A cached file is left in
            place; a fresh download's ``.part`` file is removed. The message says which files to delete.
        DataUnavailableError: offline with no cached file (nothing is written), a permanent error (e.g.
            HTTP 404), or every attempt failed (the ``.part`` file is kept and resumed on the next call).
        CorruptCacheError: the cache path or its manifest exists but is not a readable file, or an
            unpinned archive does not open (a fresh download is then deleted; nothing is recorded).
    """
    if not isinstance(remote, RemoteFile):
        raise ValueError(f"remote must be a RemoteFile, got {type(remote).__name__}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
    directory = Path(directory)
    target = directory / remote.filename
    is_offline = resolve_offline(offline)

    # Without a lock: a complete file with a known hash only needs reading (manifests are written before
    # the file is renamed into place, so a file under its final name never lacks its manifest for long).
    if target.exists() or target.is_symlink():
        _check_is_file(remote, target)
        if remote.sha256 is not None or manifest_path(target).exists():
            verify_cached(remote, target)
            return target
    elif is_offline:
        raise _offline_error(remote, target)

    created = _make_directories(directory)
    try:
        with exclusive_lock(target.with_name(target.name + LOCK_SUFFIX)):
            return _fetch_locked(remote, target, is_offline, retries, progress)
    except BaseException:
        _remove_if_empty(created)
        raise


def _check_is_file(remote: RemoteFile, target: Path) -> None:
    if not target.is_file():
        raise CorruptCacheError(f"{target} exists but is not a readable file; remove it to download {remote.url} again")


def _offline_error(remote: RemoteFile, target: Path) -> DataUnavailableError:
    pinned = f" (SHA-256 {remote.sha256})" if remote.sha256 else ""
    return DataUnavailableError(
        f"{remote.filename} is not in the cache and offline mode is on (offline=True or ${OFFLINE_ENV}). "
        f"Download {remote.url}{pinned} and place it at {target}, or run once with network access."
    )


def _fetch_locked(remote: RemoteFile, target: Path, is_offline: bool, retries: int, progress: bool) -> Path:
    """The body of `fetch` once this process holds the entry's lock."""
    if target.exists() or target.is_symlink():  # placed by hand, or another process finished meanwhile
        _check_is_file(remote, target)
        verify_cached(remote, target)
        return target
    if is_offline:
        raise _offline_error(remote, target)
    part = target.with_name(target.name + PART_SUFFIX)
    manifest = manifest_path(target)
    try:
        _download(remote, part, target, retries, progress)
        actual = sha256_file(part)
        expected = remote.sha256 or read_manifest(manifest)
        if expected is not None and actual != expected:
            part.unlink()
            if remote.sha256:
                source, advice = (
                    "pinned",
                    (
                        "If the source changed on purpose, update the sha256 pinned for "
                        f"{remote.filename!r} in the code."
                    ),
                )
            else:
                source, advice = (
                    f"recorded in {manifest} on first use",
                    f"If the source changed on purpose, or the record is wrong, delete {manifest} "
                    "and call again: the next download is checked and its hash recorded anew.",
                )
            raise ChecksumError(
                f"the download of {remote.url} has SHA-256 {actual}, expected {expected} ({source}); the "
                f"download was deleted and nothing was cached at {target}. {advice}"
            )
        if expected is None:  # trust on first use: record only a file that is what its name says
            problem = archive_problem(part, remote.filename)
            if problem is not None:
                part.unlink()
                raise CorruptCacheError(
                    f"the download of {remote.url} is not a readable file of its kind ({problem}); it was "
                    f"deleted and its hash was not recorded. Call again to download it afresh; if that fails "
                    f"too, download it yourself, check that it opens, and place it at {target}."
                )
            record_first_use(remote, target, actual)
        os.replace(part, target)  # atomic: the final name only ever holds a complete, verified file
    except BaseException:
        if part.exists() and file_size(part) == 0:
            part.unlink()
        raise
    return target


def _download(remote: RemoteFile, part: Path, target: Path, retries: int, progress: bool) -> None:
    last_error: BaseException | None = None
    attempts = retries + 1
    for attempt in range(attempts):
        before = file_size(part)
        try:
            _transfer(remote, part, progress)
            return
        except _PermanentError as error:
            raise DataUnavailableError(
                f"cannot download {remote.url}: {error}. Download it yourself and place it at {target}."
            ) from None
        except _TransientError as error:
            last_error = error
        if attempt + 1 < attempts and file_size(part) <= before:
            time.sleep(RETRY_BACKOFF_S * 2**attempt)
    kept = file_size(part)
    kept_note = f" The {kept} bytes received are kept in {part} and the next call resumes from there." if kept else ""
    raise DataUnavailableError(
        f"could not download {remote.url} in {attempts} attempt(s) (last error: {last_error}).{kept_note} "
        f"Without network access, download it yourself and place it at {target}."
    )


def _transfer(remote: RemoteFile, part: Path, progress: bool) -> None:
    """One attempt: fetch the rest of the file into ``part`` (resuming it over HTTP when possible)."""
    scheme = urlparse(remote.url).scheme
    if part.is_symlink():  # a link planted at the partial file's name: its target would be resumed or truncated
        raise _PermanentError(
            f"the partial download {part} is a symbolic link; refusing to write through it: remove it"
        )
    offset = file_size(part)
    if remote.size is not None and offset > remote.size:
        offset = 0  # a stale .part longer than the file: start again
    headers = {"User-Agent": "neuralde_seq-data/1"}
    if offset and scheme in ("http", "https"):
        headers["Range"] = f"bytes={offset}-"
    try:
        response = urlopen(Request(remote.url, headers=headers), timeout=_TIMEOUT_S)
    except HTTPError as error:
        error.close()  # it holds the open connection
        if error.code == 416 and offset:  # the .part cannot be continued: start again from scratch
            part.unlink()
            raise _TransientError(f"HTTP 416 for a resume at byte {offset}") from None
        if error.code in (408, 429) or error.code >= 500:
            raise _TransientError(f"HTTP {error.code} {error.reason}") from None
        raise _PermanentError(f"HTTP {error.code} {error.reason}") from None
    except URLError as error:
        if scheme == "file" or isinstance(error.reason, (FileNotFoundError, PermissionError)):
            raise _PermanentError(str(error.reason)) from None
        raise _TransientError(str(error.reason)) from None
    except (OSError, http.client.HTTPException) as error:
        raise _TransientError(f"{type(error).__name__}: {error}") from None

    with response:
        status = response.getcode()
        append = False
        if offset and status == 206:
            content_range = response.headers.get("Content-Range", "")
            if not content_range.startswith(f"bytes {offset}-"):
                part.unlink()
                raise _TransientError(f"the server answered a resume at byte {offset} with {content_range!r}")
            append = True
        announced = response.headers.get("Content-Length")
        announced = int(announced) if announced and announced.isdigit() else None
        start = offset if append else 0
        total = start + announced if announced is not None else remote.size
        received = 0
        try:
            # not through a link created at the name since the check above (O_NOFOLLOW)
            flags = (
                os.O_WRONLY
                | os.O_CREAT
                | (os.O_APPEND if append else os.O_TRUNC)
                | getattr(os, "O_NOFOLLOW", 0)
                | getattr(os, "O_CLOEXEC", 0)
            )
            with (
                os.fdopen(os.open(part, flags, 0o666), "ab" if append else "wb") as out,
                Progress(
                    desc=f"downloading {remote.filename}",
                    total=total,
                    initial=start,
                    unit="B",
                    unit_scale=True,
                    enabled=progress,
                ) as bar,
            ):
                for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                    out.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
                out.flush()
                os.fsync(out.fileno())
        except (OSError, http.client.HTTPException) as error:
            raise _TransientError(f"{type(error).__name__} after {start + received} bytes: {error}") from None
    # http.client returns a short body silently when the connection drops: count the bytes ourselves.
    if announced is not None and received < announced:
        raise _TransientError(f"the connection closed after {start + received} of {start + announced} bytes")
    if remote.size is not None and start + received != remote.size:
        size = start + received
        part.unlink()
        raise _TransientError(f"received {size} bytes, expected {remote.size}")
