"""Tests of the download/cache layer: cache directory, fetch (checksums, offline, retries, resume over HTTP
Range), safe extraction and the tensor cache.

Downloads go through the real code path with local sources: ``file://`` URLs, and an HTTP server on
127.0.0.1 in a thread that honours (or ignores) Range requests and can cut responses short.
"""

import hashlib
import http.server
import io
import multiprocessing
import os
import re
import shutil
import tarfile
import threading
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from neuralde_seq.cache import cached_tensors
from neuralde_seq.data.io.cache_integrity import ChecksumError
from neuralde_seq.data.io.download import (
    CorruptCacheError,
    DataUnavailableError,
    RemoteFile,
    data_dir,
    fetch,
    resolve_offline,
)
from neuralde_seq.data.io.extraction import extract_archive

PAYLOAD = np.random.default_rng(7).integers(0, 256, size=64 * 1024, dtype=np.uint8).tobytes()
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


def _all_paths(root: Path) -> list[Path]:
    return sorted(root.rglob("*")) if root.exists() else []


@pytest.fixture
def source_file(tmp_path):
    path = tmp_path / "source" / "data.bin"
    path.parent.mkdir()
    path.write_bytes(PAYLOAD)
    return path


def _remote(path: Path, sha=PAYLOAD_SHA, **kw) -> RemoteFile:
    return RemoteFile(url=path.resolve().as_uri(), filename="data.bin", sha256=sha, **kw)


# ------------------------------------------------------------------------------- directory and flags
def test_data_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NEURALDE_SEQ_DATA", raising=False)
    assert data_dir() == tmp_path / "home" / ".cache" / "neuralde_seq"
    monkeypatch.setenv("NEURALDE_SEQ_DATA", str(tmp_path / "from_env"))
    assert data_dir() == tmp_path / "from_env"
    assert data_dir(tmp_path / "arg") == tmp_path / "arg"  # the argument beats the variable
    monkeypatch.setenv("NEURALDE_SEQ_DATA", "~/x")
    assert data_dir() == tmp_path / "home" / "x"
    assert not (tmp_path / "from_env").exists() and not (tmp_path / "home").exists()  # nothing created


def test_resolve_offline(monkeypatch):
    monkeypatch.delenv("NEURALDE_SEQ_OFFLINE", raising=False)
    assert resolve_offline() is False
    for word, expected in (("1", True), ("TRUE", True), ("yes", True), ("0", False), ("false", False)):
        monkeypatch.setenv("NEURALDE_SEQ_OFFLINE", word)
        assert resolve_offline() is expected
        assert resolve_offline(not expected) is (not expected)  # the argument wins
    monkeypatch.setenv("NEURALDE_SEQ_OFFLINE", "maybe")
    with pytest.raises(ValueError, match="NEURALDE_SEQ_OFFLINE"):
        resolve_offline()


def test_remote_file_validation():
    with pytest.raises(ValueError, match="filename"):
        RemoteFile("https://x/a.zip", "dir/a.zip", None)
    with pytest.raises(ValueError, match="filename"):
        RemoteFile("https://x/a.zip", "a.zip.part", None)
    with pytest.raises(ValueError, match="filename"):
        RemoteFile("https://x/a.zip", "a.zip.lock", None)  # the name of the entry's lock file
    with pytest.raises(ValueError, match="sha256"):
        RemoteFile("https://x/a.zip", "a.zip", "abc")
    with pytest.raises(ValueError, match="url"):
        RemoteFile("ftp://x/a.zip", "a.zip", None)
    assert RemoteFile("https://x/a.zip", "a.zip", "AB" * 32).sha256 == "ab" * 32


def test_fetch_progress_off_a_terminal_is_two_lines_not_bar_frames(tmp_path, source_file, capsys):
    """pytest's captured stderr is not a terminal, as a job's log is not: the download says when it starts and
    ends, with the bytes received, and draws no bar (no carriage returns)."""
    fetch(_remote(source_file), tmp_path / "cache", progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("downloading data.bin: started"), lines
    assert lines[1].startswith("downloading data.bin: done") and f"{len(PAYLOAD) / 1024:.1f} KiB" in lines[1], lines


# ----------------------------------------------------------------------------------- fetch, file://
def test_fetch_file_url_and_cache_hit(tmp_path, source_file):
    cache = tmp_path / "cache" / "nested"
    path = fetch(_remote(source_file), cache, progress=False)
    assert path == cache / "data.bin" and path.read_bytes() == PAYLOAD
    assert [p.name for p in _all_paths(cache)] == ["data.bin"]  # no .part or temporary left
    source_file.unlink()  # a second fetch must not download: the source is gone
    assert fetch(_remote(source_file), cache, offline=False, progress=False).read_bytes() == PAYLOAD


def test_fetch_checksum_mismatch_leaves_nothing(tmp_path, source_file):
    cache = tmp_path / "cache" / "deep" / "er"
    wrong = "0" * 64
    with pytest.raises(ChecksumError) as info:
        fetch(_remote(source_file, sha=wrong), cache, progress=False)
    message = str(info.value)
    assert wrong in message and PAYLOAD_SHA in message and source_file.resolve().as_uri() in message
    assert not (tmp_path / "cache").exists()  # neither file, .part nor the directories it created


def test_cached_file_with_wrong_hash_is_refused_and_kept(tmp_path, source_file):
    cache = tmp_path / "cache"
    path = fetch(_remote(source_file), cache, progress=False)
    path.write_bytes(PAYLOAD[:-1] + b"\x00")
    with pytest.raises(ChecksumError, match=re.escape(str(path))):
        fetch(_remote(source_file), cache, progress=False)
    assert path.read_bytes() == PAYLOAD[:-1] + b"\x00"  # the user's file is not deleted silently


def test_trust_on_first_use_manifest(tmp_path, source_file):
    cache = tmp_path / "cache"
    remote = _remote(source_file, sha=None)
    with pytest.warns(UserWarning, match="no published checksum"):
        path = fetch(remote, cache, progress=False)
    manifest = cache / "data.bin.sha256"
    assert manifest.read_text().split()[0] == PAYLOAD_SHA
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a verified second use does not warn again
        assert fetch(remote, cache, progress=False) == path
    path.write_bytes(b"changed")
    with pytest.raises(ChecksumError, match="first use"):
        fetch(remote, cache, progress=False)
    # a re-download after deleting the file is verified against the manifest too
    path.unlink()
    source_file.write_bytes(b"another file at the same address")
    with pytest.raises(ChecksumError, match="first use"):
        fetch(remote, cache, progress=False)
    assert not path.exists() and not (cache / "data.bin.part").exists()


def test_offline_without_cache_writes_nothing(tmp_path, source_file, monkeypatch):
    cache = tmp_path / "cache"
    with pytest.raises(DataUnavailableError) as info:
        fetch(_remote(source_file), cache, offline=True, progress=False)
    assert source_file.resolve().as_uri() in str(info.value) and str(cache / "data.bin") in str(info.value)
    monkeypatch.setenv("NEURALDE_SEQ_OFFLINE", "1")
    with pytest.raises(DataUnavailableError):
        fetch(_remote(source_file), cache, progress=False)
    assert not cache.exists()


def test_offline_with_file_placed_by_hand(tmp_path, source_file, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(source_file, cache / "data.bin")
    source_file.unlink()
    monkeypatch.setenv("NEURALDE_SEQ_OFFLINE", "true")
    assert fetch(_remote(source_file), cache, progress=False).read_bytes() == PAYLOAD
    # without a pinned checksum, the hand-placed file's hash is recorded on first use
    with pytest.warns(UserWarning, match="trust on first use"):
        fetch(_remote(source_file, sha=None), cache, progress=False)
    assert (cache / "data.bin.sha256").read_text().split()[0] == PAYLOAD_SHA


def test_missing_local_source_is_permanent(tmp_path):
    with pytest.raises(DataUnavailableError, match="cannot download"):
        fetch(_remote(tmp_path / "nope.bin"), tmp_path / "cache", progress=False, retries=5)
    assert not (tmp_path / "cache").exists()


# ------------------------------------------------------------------------------------- fetch, HTTP
class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, payload: bytes):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.payload = payload
        self.honour_range = True
        self.cuts: list[int] = []  # bytes to send in the next responses before closing the connection
        self.statuses: list[int] = []  # error statuses to answer the next requests with
        self.ranges: list[str | None] = []  # the Range header of every request
        # stall_s > 0: the first response sends half its body, then waits until a second request comes in
        # (a concurrent download) or stall_s seconds pass; finished_at holds when each body was complete
        self.stall_s = 0.0
        self.second_request = threading.Event()
        self.finished_at: list[float] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/data.bin"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        server: _Server = self.server
        requested = self.headers.get("Range")
        server.ranges.append(requested)
        if len(server.ranges) > 1:
            server.second_request.set()
        if server.statuses:
            self.send_error(server.statuses.pop(0))
            return
        payload, start = server.payload, 0
        if requested and server.honour_range:
            start = int(re.fullmatch(r"bytes=(\d+)-", requested).group(1))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(payload) - 1}/{len(payload)}")
        else:
            self.send_response(200)
        body = payload[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if server.cuts:  # announce the whole body, send part of it, drop the connection
            self.wfile.write(body[: server.cuts.pop(0)])
            self.wfile.flush()
            self.close_connection = True
            return
        if server.stall_s and len(server.ranges) == 1:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            server.second_request.wait(server.stall_s)
            body = body[len(body) // 2 :]
        self.wfile.write(body)
        self.wfile.flush()
        server.finished_at.append(time.time())

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    srv = _Server(PAYLOAD)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("honour_range", [True, False])
def test_broken_download_is_resumed(tmp_path, server, honour_range):
    server.honour_range = honour_range
    server.cuts = [3000]
    remote = RemoteFile(server.url, "data.bin", PAYLOAD_SHA)
    path = fetch(remote, tmp_path / "cache", progress=True)
    assert path.read_bytes() == PAYLOAD
    # the retry asked for the rest only; a server ignoring Range sent everything, which replaced the .part
    assert server.ranges == [None, "bytes=3000-"]
    assert [p.name for p in _all_paths(tmp_path / "cache")] == ["data.bin"]


def test_failed_attempts_keep_part_and_next_call_resumes(tmp_path, server):
    server.cuts = [1000, 1000, 1000]
    remote = RemoteFile(server.url, "data.bin", PAYLOAD_SHA, size=len(PAYLOAD))
    cache = tmp_path / "cache"
    with pytest.raises(DataUnavailableError, match="3 attempt"):
        fetch(remote, cache, retries=2, progress=False)
    part = cache / "data.bin.part"
    assert part.read_bytes() == PAYLOAD[:3000] and not (cache / "data.bin").exists()
    assert server.ranges == [None, "bytes=1000-", "bytes=2000-"]
    path = fetch(remote, cache, progress=False)
    assert server.ranges[-1] == "bytes=3000-" and path.read_bytes() == PAYLOAD and not part.exists()


@pytest.mark.parametrize("transport", ["http", "file"])
def test_a_link_planted_at_the_partial_file_is_refused_and_its_target_kept(tmp_path, server, source_file, transport):
    # issue 36: fetch resumed into (or truncated) whatever a planted <file>.part link pointed at
    cache = tmp_path / "cache"
    cache.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious" * 100)
    os.symlink(victim, cache / "data.bin.part")
    url = server.url if transport == "http" else source_file.as_uri()
    with pytest.raises(
        DataUnavailableError,
        match=r"data\.bin\.part is a symbolic link; refusing to write through "
        r"it: remove it",
    ):
        fetch(RemoteFile(url, "data.bin", PAYLOAD_SHA), cache, progress=False)
    assert victim.read_bytes() == b"precious" * 100
    assert not (cache / "data.bin").exists()


def test_server_error_is_retried_and_404_is_not(tmp_path, server):
    server.statuses = [503]
    remote = RemoteFile(server.url, "data.bin", PAYLOAD_SHA)
    assert fetch(remote, tmp_path / "a", progress=False).read_bytes() == PAYLOAD
    assert len(server.ranges) == 2
    server.ranges.clear()
    server.statuses = [404, 404]
    with pytest.raises(DataUnavailableError, match="404"):
        fetch(remote, tmp_path / "b", retries=3, progress=False)
    assert len(server.ranges) == 1 and not (tmp_path / "b").exists()


def test_checksum_mismatch_over_http_leaves_nothing(tmp_path, server):
    server.cuts = [5000]  # even after a resumed transfer
    with pytest.raises(ChecksumError):
        fetch(RemoteFile(server.url, "data.bin", "f" * 64), tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists()


# ------------------------------------------------------------------- concurrency and first-use records
def _fetch_in_child(url: str, cache: str, barrier, results) -> None:
    """Run in a spawned process: wait for the other one, then fetch; report times, file hash, warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        barrier.wait(timeout=60)
        started = time.time()
        try:
            path = fetch(RemoteFile(url, "data.bin", None), cache, progress=False)
            outcome = {"path": str(path), "sha": hashlib.sha256(path.read_bytes()).hexdigest()}
        except Exception as error:  # reported to the parent, which fails the test with it
            outcome = {"error": f"{type(error).__name__}: {error}"}
    results.put({**outcome, "started": started, "finished": time.time(), "warnings": [str(w.message) for w in caught]})


def test_two_processes_fetching_one_file_download_once_and_record_the_right_hash(tmp_path, server):
    # The first response stalls half-way until a second request arrives (what two unlocked downloads do)
    # or 1.5 s pass; the second process must instead wait for the lock and reuse the first one's file.
    server.stall_s = 1.5
    cache = tmp_path / "cache"
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    children = [
        context.Process(target=_fetch_in_child, args=(server.url, str(cache), barrier, results)) for _ in range(2)
    ]
    for child in children:
        child.start()
    outcomes = [results.get(timeout=120) for _ in children]
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    assert [o.get("error") for o in outcomes] == [None, None]
    assert {o["path"] for o in outcomes} == {str(cache / "data.bin")}
    assert [o["sha"] for o in outcomes] == [PAYLOAD_SHA, PAYLOAD_SHA]
    assert len(server.ranges) == 1  # one download: the second process reused the first one's file
    assert max(o["started"] for o in outcomes) < server.finished_at[0]  # they did overlap
    recorded = [o for o in outcomes if any("trust on first use" in w for w in o["warnings"])]
    assert len(recorded) == 1  # the hash was recorded once, by the process that downloaded
    assert (cache / "data.bin.sha256").read_text().split()[0] == PAYLOAD_SHA
    assert [p.name for p in _all_paths(cache)] == ["data.bin", "data.bin.sha256"]  # no .part or .lock left


def _archive_bytes(kind: str) -> bytes:
    buffer = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
            bundle.writestr("set/a.txt", PAYLOAD)
            bundle.writestr("set/b.txt", PAYLOAD[::-1])
    else:
        with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
            for name, data in (("set/a.txt", PAYLOAD), ("set/b.txt", PAYLOAD[::-1])):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                bundle.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("name", ["set.zip", "set.tar.gz"])
@pytest.mark.parametrize("damage", ["truncated", "empty", "not an archive"])
def test_corrupt_archive_is_deleted_and_never_recorded(tmp_path, name, damage):
    good = _archive_bytes("zip" if name.endswith(".zip") else "tar")
    bad = {"truncated": good[: len(good) * 2 // 3], "empty": b"", "not an archive": PAYLOAD}[damage]
    source = tmp_path / "source" / name
    source.parent.mkdir()
    source.write_bytes(bad)
    remote = RemoteFile(source.as_uri(), name, None)
    cache = tmp_path / "cache"
    with pytest.raises(CorruptCacheError, match="not recorded") as info:
        fetch(remote, cache, progress=False)
    assert "Call again" in str(info.value) and source.as_uri() in str(info.value)
    assert not cache.exists()  # no file, no .part, no manifest, no lock, no directory
    # the advice: once the source serves the whole file, calling again records the good file's hash
    source.write_bytes(good)
    with pytest.warns(UserWarning, match="trust on first use"):
        path = fetch(remote, cache, progress=False)
    assert path.read_bytes() == good
    assert (cache / f"{name}.sha256").read_text().split()[0] == hashlib.sha256(good).hexdigest()


def test_corrupt_archive_placed_by_hand_is_refused_and_kept(tmp_path):
    good = _archive_bytes("zip")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "set.zip").write_bytes(good[:-100])
    remote = RemoteFile((tmp_path / "nowhere.zip").as_uri(), "set.zip", None)
    with pytest.raises(CorruptCacheError, match="hash was not recorded"):
        fetch(remote, cache, offline=True, progress=False)
    assert sorted(p.name for p in cache.iterdir()) == ["set.zip"]  # kept, nothing recorded
    (cache / "set.zip").write_bytes(good)  # the advice: replace it with a good copy
    with pytest.warns(UserWarning, match="trust on first use"):
        assert fetch(remote, cache, offline=True, progress=False).read_bytes() == good


EMPTY_SHA = hashlib.sha256(b"").hexdigest()


def test_advice_for_a_poisoned_manifest_with_a_good_file_recovers(tmp_path, source_file):
    # the state the unlocked concurrent download left: a good file, the empty file's hash recorded
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(source_file, cache / "data.bin")
    (cache / "data.bin.sha256").write_text(f"{EMPTY_SHA}  data.bin\n")
    remote = _remote(source_file, sha=None)
    with pytest.raises(ChecksumError) as info:
        fetch(remote, cache, progress=False)
    named = re.search(r"delete both (\S+) and (\S+) to download", str(info.value))
    assert named is not None, str(info.value)
    for path in named.groups():  # follow the advice literally
        Path(path).unlink()
    with pytest.warns(UserWarning, match="trust on first use"):
        assert fetch(remote, cache, progress=False).read_bytes() == PAYLOAD
    assert (cache / "data.bin.sha256").read_text().split()[0] == PAYLOAD_SHA


def test_advice_for_a_download_that_contradicts_the_manifest_recovers(tmp_path, source_file):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "data.bin.sha256").write_text(f"{EMPTY_SHA}  data.bin\n")  # a wrong record, no file
    remote = _remote(source_file, sha=None)
    with pytest.raises(ChecksumError) as info:
        fetch(remote, cache, progress=False)
    assert not (cache / "data.bin").exists() and not (cache / "data.bin.part").exists()
    named = re.search(r"delete (\S+) and call again", str(info.value))
    assert named is not None, str(info.value)
    Path(named.group(1)).unlink()
    with pytest.warns(UserWarning, match="trust on first use"):
        assert fetch(remote, cache, progress=False).read_bytes() == PAYLOAD
    assert (cache / "data.bin.sha256").read_text().split()[0] == PAYLOAD_SHA


def test_advice_for_a_pinned_mismatch_names_the_file_to_delete(tmp_path, source_file):
    cache = tmp_path / "cache"
    path = fetch(_remote(source_file), cache, progress=False)
    path.write_bytes(b"damaged")
    with pytest.raises(ChecksumError, match=r"delete it to download") as info:
        fetch(_remote(source_file), cache, progress=False)
    Path(re.match(r"cached file (\S+) has", str(info.value)).group(1)).unlink()
    assert fetch(_remote(source_file), cache, progress=False).read_bytes() == PAYLOAD


def test_lock_is_exclusive_and_removed(tmp_path):
    from neuralde_seq.data.io.cache_integrity import exclusive_lock

    lock = tmp_path / "x.lock"
    entered = []

    def second():
        with exclusive_lock(lock):
            entered.append(time.time())

    with exclusive_lock(lock):
        thread = threading.Thread(target=second)  # flock locks are per open file: threads exclude too
        thread.start()
        thread.join(0.5)
        assert entered == [] and thread.is_alive()  # still waiting while the first holder has it
        released = time.time()
    thread.join(10)
    assert entered and entered[0] >= released and not lock.exists()


# --------------------------------------------------------------------------------------- extraction
def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
    return path


def test_extract_zip_all_and_selected(tmp_path):
    archive = _zip(tmp_path / "a.zip", {"top/x.txt": b"x", "top/sub/y.txt": b"yy", "other/z.txt": b"z"})
    everything = extract_archive(archive, tmp_path / "all")
    assert sorted(str(p.relative_to(everything)) for p in everything.rglob("*") if p.is_file()) == [
        "other/z.txt",
        "top/sub/y.txt",
        "top/x.txt",
    ]
    assert (everything / "top" / "sub" / "y.txt").read_bytes() == b"yy"
    chosen = extract_archive(archive, tmp_path / "some", members=lambda name: name.startswith("top/"))
    assert sorted(str(p.relative_to(chosen)) for p in chosen.rglob("*") if p.is_file()) == [
        "top/sub/y.txt",
        "top/x.txt",
    ]
    with pytest.raises(ValueError, match="missing.txt"):
        extract_archive(archive, tmp_path / "named", members=["top/x.txt", "missing.txt"])
    assert not (tmp_path / "named").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary directory left


def test_extract_refuses_escaping_members(tmp_path):
    for bad in ("../evil.txt", "/abs/evil.txt", "ok/../../evil.txt"):
        archive = _zip(tmp_path / "bad.zip", {"fine.txt": b"1", bad: b"evil"})
        with pytest.raises(CorruptCacheError, match="outside the target"):
            extract_archive(archive, tmp_path / "out" / "target")
        assert not (tmp_path / "out" / "target").exists() and not (tmp_path / "evil.txt").exists()
        assert list((tmp_path / "out").iterdir()) == []


def test_extract_tar_and_refuse_links(tmp_path):
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as bundle:
        info = tarfile.TarInfo("d/a.txt")
        info.size = 3
        bundle.addfile(info, io.BytesIO(b"abc"))
    assert (extract_archive(good, tmp_path / "g") / "d" / "a.txt").read_bytes() == b"abc"
    linked = tmp_path / "link.tar"
    with tarfile.open(linked, "w") as bundle:
        info = tarfile.TarInfo("d/link")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        bundle.addfile(info)
    with pytest.raises(CorruptCacheError, match="link"):
        extract_archive(linked, tmp_path / "l")
    assert not (tmp_path / "l").exists()


def test_extract_corrupt_zip_leaves_nothing_and_partial_dir_is_not_complete(tmp_path):
    data = bytes(range(256)) * 40
    archive = _zip(tmp_path / "c.zip", {"m.bin": data})
    raw = bytearray(archive.read_bytes())
    at = raw.find(data[:64])
    raw[at + 100] ^= 0xFF  # stored (uncompressed) member: flip a byte of its data, the CRC no longer matches
    archive.write_bytes(bytes(raw))
    with pytest.raises(CorruptCacheError, match="corrupt"):
        extract_archive(archive, tmp_path / "t")
    assert not (tmp_path / "t").exists()
    # a leftover temporary directory of an interrupted extraction is not mistaken for the result
    good = _zip(tmp_path / "g.zip", {"m.bin": data})
    (tmp_path / ".t.partial-1-abc").mkdir()
    assert (extract_archive(good, tmp_path / "t") / "m.bin").read_bytes() == data


# ------------------------------------------------------------------------------------- tensor cache
def test_cached_tensors_builds_once_and_reloads_bitwise(tmp_path):
    calls = []
    values = torch.randn(5, 7, dtype=torch.float64)

    def build():
        calls.append(1)
        return {"values": values, "names": ["a", "b"], "count": 3, "nested": {"mask": values > 0}, "none": None}

    key = {"name": "Toy", "option": 1}
    first = cached_tensors(tmp_path / "t", key, build)
    second = cached_tensors(tmp_path / "t", key, build)
    assert len(calls) == 1
    assert torch.equal(second["values"], values) and second["values"].dtype == torch.float64
    assert torch.equal(second["nested"]["mask"], values > 0)
    assert second["names"] == ["a", "b"] and second["count"] == 3 and second["none"] is None
    assert first is not second
    cached_tensors(tmp_path / "t", {"name": "Toy", "option": 2}, build)  # another key: built again
    assert len(calls) == 2
    assert len(list((tmp_path / "t").glob("Toy-*.pt"))) == 2


def test_cached_tensors_refuses_corrupt_files(tmp_path):
    values = torch.arange(2000, dtype=torch.float64) + 0.123456789

    def build():
        return {"values": values}

    cached_tensors(tmp_path, {"name": "X"}, build)
    (path,) = tmp_path.glob("X-*.pt")
    original = path.read_bytes()
    path.write_bytes(original[: len(original) // 2])  # truncated
    with pytest.raises(CorruptCacheError, match=re.escape(str(path))):
        cached_tensors(tmp_path, {"name": "X"}, build)
    tampered = bytearray(original)
    at = tampered.find(values.numpy().tobytes()[:64])
    assert at > 0
    tampered[at + 8 * 1000 + 3] ^= 0x01  # one bit of one stored number
    path.write_bytes(bytes(tampered))
    with pytest.raises(CorruptCacheError, match="do not match the checksum"):
        cached_tensors(tmp_path, {"name": "X"}, build)
    assert path.read_bytes() == bytes(tampered)  # refused, not replaced


def test_cached_tensors_writes_nothing_when_build_fails(tmp_path):
    def failing():
        raise RuntimeError("no data")

    with pytest.raises(RuntimeError, match="no data"):
        cached_tensors(tmp_path / "t", {"name": "X"}, failing)
    with pytest.raises(ValueError, match="numpy|ndarray"):
        cached_tensors(tmp_path / "t", {"name": "X"}, lambda: {"values": np.zeros(3)})
    assert not (tmp_path / "t").exists()
    with pytest.raises(ValueError, match="JSON"):
        cached_tensors(tmp_path / "t", {"name": object()}, lambda: {})
