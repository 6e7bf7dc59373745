"""A small Speech Commands v0.02 archive in the exact upstream layout, and what a loader must read from it.

The real ``speech_commands_v0.02.tar.gz`` holds ``./<word>/<speaker>_nohash_<n>.wav`` files (16-bit PCM,
mono, 16 kHz, mostly 16000 samples, a few shorter), a ``./_background_noise_`` folder of long recordings,
and top-level ``README.md``, ``LICENSE``, ``validation_list.txt`` and ``testing_list.txt``. The fixture
has all of these, at a few clips per word.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np
from scipy.io import wavfile

from neuralde_seq.data.io.download import RemoteFile

WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
OTHER_WORDS = ("bed", "cat")  # two of the 25 other word folders of v0.02: must be ignored
ARCHIVE_NAME = "speech_commands_v0.02.tar.gz"


def _wav_bytes(samples: np.ndarray, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    wavfile.write(buffer, rate, samples.astype(np.int16))
    return buffer.getvalue()


def _add(archive: tarfile.TarFile, name: str, data: bytes | None) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 1500000000
    if data is None:
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        archive.addfile(info)
    else:
        info.size = len(data)
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(data))


def write_speech_commands_archive(
    directory,
    *,
    clips_per_word: int = 7,
    short_clips: dict | None = None,
    seed: int = 0,
    extra_members: dict[str, bytes] | None = None,
    sha256: str | None = "true",
) -> tuple[list[RemoteFile], dict]:
    """Write ``directory/speech_commands_v0.02.tar.gz`` and return ``([remote], truth)``.

    Args:
        clips_per_word: one-second clips per word (7 gives a 70/15/15 split with every class in every part).
        short_clips: ``{word: [length, ...]}`` clips shorter than 16000 samples, which must be excluded;
            by default three of them.
        seed: numpy seed of the random int16 samples.
        extra_members: more members (name -> bytes) appended as they are, e.g. malicious names.
        sha256: ``"true"`` pins the archive's real SHA-256 in the remote, None pins nothing, any other
            string is pinned as given (to provoke a checksum mismatch).

    Returns:
        remotes: ``[RemoteFile(file://..., "speech_commands_v0.02.tar.gz", sha256, size)]``.
        truth: ``files`` (kept member names ``<word>/<name>.wav`` in the documented order: by word in the
        order of ``WORDS``, then by file name), ``labels`` (N,) int, ``audio`` (N, 16000) int16,
        ``excluded`` (names of the short clips), ``class_names``, ``archive`` (the path), ``num_ignored_wavs``
        (WAV files outside the ten word folders).
    """
    rng = np.random.default_rng(seed)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if short_clips is None:
        short_clips = {"yes": [12000], "off": [15999], "go": [8000]}
    kept: dict[tuple[int, str], np.ndarray] = {}
    excluded: list[str] = []
    entries: list[tuple[str, bytes | None]] = [("./", None)]
    for index, word in enumerate(WORDS):
        entries.append((f"./{word}", None))
        names = set()
        lengths = [16000] * clips_per_word + list(short_clips.get(word, []))
        for n, length in enumerate(lengths):
            while True:  # speaker id: 8 hex digits, as in the real file names
                speaker = f"{int(rng.integers(0, 2**32)):08x}"
                name = f"{speaker}_nohash_{n % 3}.wav"
                if name not in names:
                    names.add(name)
                    break
            samples = rng.integers(-(2**15), 2**15, size=length).astype(np.int16)
            samples[:3] = [-32768, 32767, 0]  # the extremes must map to -1 and 1 - 2^-15
            entries.append((f"./{word}/{name}", _wav_bytes(samples)))
            if length == 16000:
                kept[(index, name)] = samples
            else:
                excluded.append(f"{word}/{name}")
    ignored = 0
    for word in OTHER_WORDS:
        entries.append((f"./{word}", None))
        for n in range(2):
            entries.append((f"./{word}/{n:08x}_nohash_0.wav", _wav_bytes(rng.integers(-1000, 1000, size=16000))))
            ignored += 1
    entries.append(("./_background_noise_", None))
    entries.append(("./_background_noise_/white_noise.wav", _wav_bytes(rng.integers(-500, 500, size=40000))))
    entries.append(("./_background_noise_/README.md", b"background noise files\n"))
    ignored += 1
    order = sorted(kept)
    files = [f"{WORDS[i]}/{name}" for i, name in order]
    # the archive's own split lists name some kept clips; the NCDE protocol ignores them
    entries.append(("./validation_list.txt", ("\n".join(files[::5]) + "\n").encode()))
    entries.append(("./testing_list.txt", ("\n".join(files[1::5]) + "\n").encode()))
    entries.append(("./README.md", b"Speech Commands Data Set v0.02 (fixture)\n"))
    entries.append(("./LICENSE", b"CC BY 4.0\n"))
    for name, data in (extra_members or {}).items():
        entries.append((name, data))
    # archive order is not sorted in the real file either: shuffle so the loader must sort
    shuffled = [entries[0]] + [entries[i] for i in rng.permutation(np.arange(1, len(entries)))]
    # directories must precede their files for a well-formed tar; keep them first
    shuffled.sort(key=lambda e: e[1] is not None)
    path = directory / ARCHIVE_NAME
    with tarfile.open(path, "w:gz") as archive:
        for name, data in shuffled:
            _add(archive, name, data)
    blob = path.read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    pinned = digest if sha256 == "true" else sha256
    remote = RemoteFile(url=path.resolve().as_uri(), filename=ARCHIVE_NAME, sha256=pinned, size=len(blob))
    truth = {
        "files": files,
        "labels": np.array([i for i, _ in order], dtype=np.int64),
        "audio": np.stack([kept[k] for k in order]),
        "excluded": sorted(excluded),
        "class_names": list(WORDS),
        "archive": path,
        "sha256": digest,
        "num_ignored_wavs": ignored,
    }
    return [remote], truth
