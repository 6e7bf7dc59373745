"""Writing files safely, and a lock on an output folder.

Every file the library writes for a run (checkpoints, ``result.json``, ``curves.csv``, ``results.json``,
``results.md``, the plots) goes through `atomic_file` (or `write_text_atomic` / `write_bytes_atomic`):

- the bytes go to a temporary file with a unique, unpredictable name in the target's folder, created with
  ``O_EXCL`` (`tempfile.mkstemp`), so no symlink planted at a temporary name can redirect the write;
- the temporary file is flushed and fsynced, then ``os.replace``d onto the target: a reader sees the old file
  or the complete new one, never half a file, and two writers of one file never remove each other's
  temporary file;
- a target that is a symlink is replaced by the new file itself (``os.replace`` renames over the link, it
  never writes through it): the file the link pointed to is left untouched.

- a write that fails (a full disk, a quota) raises an `OSError` naming the file it was writing.

`published_together` makes the files written inside it appear together or not at all: a run's ``results.json``,
``results.md`` and plots are one answer, and a failed write of one of them leaves every old one in place.
`remove_stale_temporaries` clears the temporary files a killed writer left behind.

`OutputLock` (``with OutputLock(folder): ...``) keeps one process at a time writing into an output folder:
``neuralde-seq bench`` takes it on ``--out``, and a second process on the same folder is refused with
`OutputFolderBusy`, naming the folder and the holder's process id and host. The shards of one grid
(``bench --shard K/N``) share the folder: each takes the lock *shared* (``OutputLock(folder, shared=True)``),
which refuses only an exclusive holder (a whole run), and each run takes an exclusive lock of its own
(``OutputLock(row_folder, name=".seed<k>-<fingerprint>.lock")``).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import re
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

try:  # POSIX: a lock the kernel releases when its holder dies, however it dies
    import fcntl
except ImportError:  # pragma: no cover - Windows: a lock file created with O_EXCL, stale ones taken over
    fcntl = None  # type: ignore[assignment]  # mypy checks for one platform, where the module always exists

__all__ = [
    "atomic_file",
    "write_text_atomic",
    "write_bytes_atomic",
    "published_together",
    "remove_stale_temporaries",
    "OutputLock",
    "OutputFolderBusy",
    "LOCK_FILE_NAME",
]

LOCK_FILE_NAME = ".neuralde-seq.lock"
"""The lock file `OutputLock` keeps in an output folder while a run writes there."""


def _current_umask() -> int:
    # mkstemp creates files readable by their owner only; results should get the mode any new file gets.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()

# `atomic_file`'s temporary names: "." + the target's name + "." + mkstemp's 8 random characters + ".tmp"
_TEMPORARY_NAME = re.compile(r"^\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp$")

# the (temporary, target) pairs of the innermost `published_together`, or None outside one
_PENDING: contextvars.ContextVar[list | None] = contextvars.ContextVar("neuralde_seq_pending_files", default=None)


@contextlib.contextmanager
def published_together() -> Iterator[None]:
    """Every `atomic_file` closed inside the block is published (renamed onto its target) when the block ends
    without an error, all of them one after the other; if the block raises, every one of their temporary files is
    removed and every target is left as it was. A file written twice in the block is published once, with its last
    content. Nested blocks publish with the outermost one.

    Use as ``with published_together(): write_json(...); write_table(...); plot_summary(...)``.
    """
    if _PENDING.get() is not None:  # nested: the outer block publishes
        yield
        return
    pending: list = []
    token = _PENDING.set(pending)
    try:
        yield
    except BaseException:
        for temporary, _ in pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        raise
    finally:
        _PENDING.reset(token)
    last = {target: temporary for temporary, target in pending}
    blocked = [str(target) for target in last if Path(target).is_dir()]
    if blocked:  # the one rename that fails in one folder: refused before any file is published
        for temporary, _ in pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        raise IsADirectoryError(
            errno.EISDIR, "a folder stands where the file is to be written; nothing was published", blocked[0]
        )
    for temporary, target in pending:
        if last[target] != temporary:  # overwritten later in the block
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
    for target, temporary in last.items():
        os.replace(temporary, target)


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of `atomic_file` left in ``folder`` (not its subfolders) by a writer that was
    killed before it could clean up (e.g. ``.last.pt.k3v9x_2q.tmp``). Call it only where no other process can be
    writing into ``folder`` (under its `OutputLock`, or in a run folder owned by the caller).

    Arguments:
        folder: the folder (a missing one holds nothing).

    Returns:
        The paths removed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for entry in folder.iterdir():
        if _TEMPORARY_NAME.match(entry.name) and entry.is_file() and not entry.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
                removed.append(entry)
    return removed


SHARED_HOLDER = "mode=shared\n"
"""What a lock file holds while `OutputLock` holders with ``shared=True`` hold it (there may be several)."""


@contextlib.contextmanager
def atomic_file(
    path: str | os.PathLike, mode: str = "wb", *, encoding: str | None = None, newline: str | None = None
) -> Iterator[IO]:
    """Open a unique temporary file beside ``path`` for writing; on success it replaces ``path`` atomically.

    Use as ``with atomic_file(path) as f: torch.save(state, f)``. If the block raises, the temporary file is
    removed and ``path`` is left as it was.

    Arguments:
        path: the file to write (its folder is created if needed). If it is a symlink, the link itself is
            replaced by the new file; the file it pointed to is not touched.
        mode: "wb" (default: binary) or "w" (text).
        encoding: the text encoding in mode "w" (default None: UTF-8).
        newline: ``open``'s newline argument in mode "w" (e.g. "" for the csv module).

    Yields:
        The open temporary file.

    Raises:
        ValueError: ``mode`` is neither "wb" nor "w".
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp: O_CREAT | O_EXCL with a random name, so the temporary name is never an existing file or link.
    descriptor: int | None
    temporary: str | None
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(descriptor, 0o666 & ~_UMASK)
        try:
            text_options: dict[str, Any] = {} if mode == "wb" else {"encoding": encoding or "utf-8", "newline": newline}
            with os.fdopen(descriptor, mode, **text_options) as handle:
                descriptor = None  # the file object owns it now
                yield handle
                handle.flush()
                os.fsync(handle.fileno())  # the data is on disk before the name points at it
        except OSError as error:
            if error.filename is not None or error.errno is None:
                raise
            # a write's own error (ENOSPC, EDQUOT, EFBIG) names no file: name the one being written
            raise OSError(error.errno, f"{error.strerror} (writing {path})", str(path)) from error
        pending = _PENDING.get()
        if pending is not None:  # published_together renames it with the others
            pending.append((temporary, path))
        else:
            os.replace(temporary, path)
        temporary = None
    finally:
        if descriptor is not None:
            os.close(descriptor)
        if temporary is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through `atomic_file`.

    Arguments:
        path: the file to write (its folder is created if needed).
        data: the bytes.

    Returns:
        The `Path` written.
    """
    with atomic_file(path, "wb") as handle:
        handle.write(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike, text: str, *, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` through `atomic_file`.

    Arguments:
        path: the file to write (its folder is created if needed).
        text: the text.
        encoding: its encoding (default UTF-8).

    Returns:
        The `Path` written.
    """
    with atomic_file(path, "w", encoding=encoding, newline="") as handle:
        handle.write(text)
    return Path(path)


class OutputFolderBusy(ValueError):
    """Another process holds the lock on an output folder (a `ValueError`: the CLI reports it and exits 2).

    Arguments:
        message: the folder, the holder and what to do.
        folder: the output folder; attribute ``folder``.
        holder: the lock file's text (``pid=<n> host=<name>``, or "" when it could not be read); attribute
            ``holder``.
    """

    def __init__(self, message: str, folder: Path, holder: str):
        super().__init__(message)
        self.folder, self.holder = folder, holder


def _holder_text() -> str:
    return f"pid={os.getpid()} host={socket.gethostname()}\n"


def _parse_holder(text: str) -> dict:
    return dict(part.split("=", 1) for part in text.split() if "=" in part)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    except OSError:  # pragma: no cover - e.g. Windows without such a process
        return False
    return True


class OutputLock:
    """A lock on an output folder: exclusive (one process at a time), or shared by several processes.

    The lock is the file ``<folder>/.neuralde-seq.lock`` (or ``<folder>/<name>``) holding ``pid=<n> host=<name>``
    while an exclusive holder holds it, ``mode=shared`` while shared holders do. On POSIX it is locked with
    ``fcntl.flock``, which the kernel releases when the holder exits or is killed: a file left by a dead process is
    simply taken over (with a message). Elsewhere the file is created with ``O_CREAT|O_EXCL``; one left by a dead
    process of this host is taken over with a message, one of another host is refused (a shared lock is not
    available there: it warns and takes none). The lock is not reentrant: taking it twice in one process without
    releasing it is refused too.

    A shared lock (``shared=True``) is what the shards of one grid take on their common output folder: any
    number of shared holders at once, but none while an exclusive holder (a whole run) holds it, and no exclusive
    holder while one of them does. The last shared holder to leave removes the file.

    Arguments:
        folder: the output folder (created if needed).
        shared: take the lock shared (default False: exclusive).
        name: the lock file's name inside ``folder`` (default `LOCK_FILE_NAME`); a plain file name.

    Use ``with OutputLock(folder): ...``, or `acquire` and `release`.

    Raises (on `acquire`):
        OutputFolderBusy: another process holds the lock (exclusive: any other holder; shared: an exclusive one);
            the message names the folder, the holder's process id and host (or that shards hold it), and what to
            do.
    """

    def __init__(self, folder: str | os.PathLike, *, shared: bool = False, name: str = LOCK_FILE_NAME):
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            raise ValueError(f"name must be a plain file name (no folder), got {name!r}")
        self.folder = Path(folder)
        self.path = self.folder / name
        self.shared = bool(shared)
        self._descriptor: int | None = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._descriptor is not None

    def _busy(self, holder: str) -> OutputFolderBusy:
        fields = _parse_holder(holder)
        if fields.get("mode") == "shared":
            return OutputFolderBusy(
                f"output folder {self.folder} is in use by the shards of a grid (bench --shard; lock file "
                f"{self.path}): wait for them to finish, or give another output folder (--out)",
                self.folder,
                holder,
            )
        who = (
            f"process {fields['pid']} on host {fields.get('host', '?')}"
            if "pid" in fields
            else "another process (its id is not written yet)"
        )
        return OutputFolderBusy(
            f"output folder {self.folder} is in use by {who} (lock file {self.path}): wait for that run to finish, "
            f"or give another output folder (--out)",
            self.folder,
            holder,
        )

    def acquire(self) -> None:
        """Take the lock, or raise `OutputFolderBusy` at once (it never waits)."""
        if self._descriptor is not None:
            raise self._busy(_holder_text())
        self.folder.mkdir(parents=True, exist_ok=True)
        if fcntl is None:  # pragma: no cover - exercised where fcntl is missing
            if self.shared:
                print(
                    f"neuralde-seq: warning: no shared lock on this platform; {self.folder} is not locked: make sure "
                    "no other run than the shards of this grid writes into it",
                    file=sys.stderr,
                )
                return
            self._acquire_exclusive_create()
        else:
            self._acquire_flock()

    def _acquire_flock(self) -> None:
        # O_NONBLOCK: a FIFO planted at the name must not hang the open (it changes nothing for a regular file)
        flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        leaving = 100  # tries while the last shared holder checks, exclusively, whether it is the last
        while True:
            try:
                descriptor = os.open(self.path, flags, 0o666 & ~_UMASK)
            except OSError as error:
                if os.path.islink(self.path):
                    raise OSError(f"lock file {self.path} is a symlink; refusing to follow it: remove it") from error
                raise OSError(error.errno, f"{error.strerror} (opening the lock file)", str(self.path)) from error
            kind = os.fstat(descriptor).st_mode
            if not stat.S_ISREG(kind):
                os.close(descriptor)
                what = "a FIFO" if stat.S_ISFIFO(kind) else "a socket" if stat.S_ISSOCK(kind) else "not a file"
                raise OSError(
                    f"lock file {self.path} is {what}, not a regular file: remove it (a run keeps a plain "
                    "file there while it writes into the folder)"
                )
            try:
                fcntl.flock(descriptor, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_descriptor(descriptor)
                for _ in range(20):  # the holder writes its id just after locking: give it a moment
                    if holder.strip():
                        break
                    time.sleep(0.01)
                    holder = _read_descriptor(descriptor)
                os.close(descriptor)
                if self.shared and holder == SHARED_HOLDER and leaving:  # a shard leaving: gone in a moment
                    leaving -= 1
                    time.sleep(0.01)
                    continue
                raise self._busy(holder) from None
            except OSError as error:
                os.close(descriptor)
                if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
                # A file system without locks (some network mounts): run, as before locks existed, but say so.
                print(
                    f"neuralde-seq: warning: cannot lock {self.folder} ({error.strerror}); make sure no other "
                    "run writes into it",
                    file=sys.stderr,
                )
                return
            except BaseException:
                os.close(descriptor)
                raise
            # The holder before us may have removed the file after we opened it: then we locked a file that
            # no longer has the name, and a third process could lock a new one. Only the named file counts.
            try:
                same = os.path.samestat(os.fstat(descriptor), os.stat(self.path, follow_symlinks=False))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(descriptor)
        left = _read_descriptor(descriptor)
        if self.shared and left == SHARED_HOLDER:
            self._descriptor = descriptor  # other shards hold it too (or held it): their text is ours
            return
        if left.strip() and (not self.shared or "pid" in _parse_holder(left)):
            # the kernel released it: its holder ended without removing the file
            print(
                f"neuralde-seq: taking over the lock on {self.folder} left by a process that has ended "
                f"({left.strip()})",
                file=sys.stderr,
            )
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, (SHARED_HOLDER if self.shared else _holder_text()).encode(), 0)
        self._descriptor = descriptor

    def _acquire_exclusive_create(self) -> None:  # pragma: no cover - platforms without fcntl
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        for _ in range(3):
            try:
                descriptor = os.open(self.path, flags, 0o666 & ~_UMASK)
            except FileExistsError:
                try:
                    holder = self.path.read_text(errors="replace")
                except FileNotFoundError:
                    continue  # released meanwhile: try again
                fields = _parse_holder(holder)
                stale = (
                    fields.get("host") == socket.gethostname()
                    and fields.get("pid", "").isdigit()
                    and not _process_alive(int(fields["pid"]))
                )
                if not stale:
                    raise self._busy(holder) from None
                print(
                    f"neuralde-seq: taking over the lock on {self.folder} left by a process that has ended "
                    f"({holder.strip()})",
                    file=sys.stderr,
                )
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                continue
            os.write(descriptor, _holder_text().encode())
            self._descriptor = descriptor
            return
        raise self._busy("")

    def release(self) -> None:
        """Give the lock back (nothing if it is not held)."""
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is None:
            return
        if self.shared:
            # Only the last shared holder removes the file: it is the last when it can take the lock exclusively.
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # other shards still hold it (the conversion may drop ours: we are leaving anyway)
                os.close(descriptor)
                return
        # Remove the name while still holding the lock: a process that opened it meanwhile sees, once it gets
        # the lock, that the name is gone, and tries again on a new file.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(descriptor)


def _read_descriptor(descriptor: int) -> str:
    try:
        return os.pread(descriptor, 4096, 0).decode("utf-8", "replace")
    except OSError:
        return ""
