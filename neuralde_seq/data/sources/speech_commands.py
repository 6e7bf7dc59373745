"""Speech Commands v0.02 (Warden 2018) in the protocol of the NCDE paper (Kidger et al. 2020).

Protocol (docs/design.md#dataset-protocols; the NCDE code ``experiments/datasets/speech_commands.py`` and
``common.py``, which CKConv's code (paper 000) copies for SC and SC_raw):

* the ten words ``yes, no, up, down, left, right, on, off, stop, go`` (labels 0..9 in this order); every
  other folder of the archive (the 25 other words, ``_background_noise_``) and the top-level files
  (``README.md``, ``LICENSE``, ``validation_list.txt``, ``testing_list.txt``) are ignored: the NCDE
  protocol draws its own random split and does not use the archive's lists;
* only clips of exactly 16000 samples (one second at 16 kHz): 34,975 clips in the real archive. Shorter
  clips are excluded, as in the NCDE code; their number is reported in ``meta["excluded_clips"]``;
* samples are the WAV's int16 values / 2^15;
* ``representation="mfcc"`` (SC): 20 MFCCs of the log-mel spectrum, n_fft 200, 64 mels
  (`neuralde_seq.data.sources.audio.mfcc`, which reproduces torchaudio's ``MFCC(log_mels=True, n_mfcc=20,
  melkwargs=dict(n_fft=200, n_mels=64))``): 161 frames x 20 channels; ``times`` are the frame indices
  0..160 (one frame = 100 samples = 6.25 ms), as the NCDE code's ``linspace(0, 160, 161)``;
* ``representation="raw"`` (paper 000's SC_raw): 16000 x 1, ``times`` the sample indices 0..15999
  (1/16000 s each). The NCDE code's time channel is not part of ``values``: the control construction adds
  it (``time_channel=True``); a sample rate change (SC_raw at 1/2, 1/4, ...) is the runner's business;
* split 70/15/15, stratified on the label, with the NCDE seeds: `stratified_split`
  with ``split_seed=0`` draws ``train_test_split(train_size=0.7, random_state=0)`` and then
  ``train_test_split(train_size=0.5, random_state=1)`` on the rest, exactly the calls of the NCDE code's
  ``split_data``. The NCDE code ordered clips by ``os.listdir`` (file-system dependent); here the clips
  are ordered by word and then by file name, so the split is reproducible everywhere;
* ``normalise=True``: every channel is standardised with the mean and standard deviation of the
  *training* split's observed values. The NCDE code computes these statistics on the training part of
  the same split before splitting, which is the same thing. Two small differences: it divides by
  ``std + 1e-5`` with the unbiased (n - 1) std, here the population std (ddof 0) is used, with no
  offset (`standardise`); with ~5.5 million values per channel the difference
  is below 1e-5 relative. For SC_raw the CKConv code's ``normalise_data`` unbinds the last axis of its
  (N, 1, 16000) tensor, i.e. it standardises every *time index* separately; that is not reproduced: the
  single audio channel is standardised as a whole. ``normalise=False`` keeps the int16 / 2^15 samples
  (or the raw MFCCs);
* ``drop_rate``: `drop_observations` removes that fraction of every sample's
  time points (frames or audio samples), reproducibly from ``drop_seed``, before normalisation (as the
  CKConv code drops before ``normalise_data``), so the statistics use the kept values only.

Files: the archive (2.4 GB, SHA-256 pinned from torchaudio's dataset code and TensorFlow Datasets'
checksums) is downloaded once into ``<data_dir>/speech_commands`` by `fetch`.
It is read as a stream, member by member, straight from the ``.tar.gz``: nothing is extracted to disk,
so no member can land outside the cache whatever its name. The kept clips are cached once as int16
(``speech_commands_audio``, about 1.1 GB) and the MFCCs once per dtype (``speech_commands_mfcc``); once
cached, the archive is not opened again (and may be deleted). Splitting, dropping and normalisation are
cheap and redone at every load. Memory: the raw representation holds 34,975 x 16000 values per
tensor, several GB while the splits are built.
"""

from __future__ import annotations

import re
import tarfile
import zlib
from collections.abc import Sequence

import numpy as np
import torch

from ...cache import CorruptCacheError, cached_tensors
from ...terminal import Progress
from ..base.datasets import DatasetSplits, IrregularDataset, stratified_split
from ..base.options import LoadOptions, accepts_load_options
from ..base.registry import Task, register_task
from ..io.cache_integrity import sha256_file
from ..io.download import RemoteFile, data_dir, fetch
from ..transforms.sampling import drop_observations
from ..transforms.standardisation import standardise
from .audio import mfcc, read_wav

__all__ = [
    "SPEECH_COMMANDS_WORDS",
    "SPEECH_COMMANDS_REMOTE",
    "SPEECH_COMMANDS_CLIPS",
    "CLIP_SAMPLES",
    "SAMPLE_RATE",
    "read_speech_commands_archive",
    "load_speech_commands",
]

SPEECH_COMMANDS_WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
SAMPLE_RATE = 16000
CLIP_SAMPLES = 16000
SPEECH_COMMANDS_CLIPS = 34975  # 16000-sample clips of the ten words in the v0.02 archive (NCDE code's assert)
SPEECH_COMMANDS_REMOTE = RemoteFile(
    url="http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz",
    filename="speech_commands_v0.02.tar.gz",
    sha256="af14739ee7dc311471de98f5f9d2c9191b18aedfe957f4a6ff791c709868ff58",
    size=2428923189,
)
MFCC_OPTIONS = {"sample_rate": SAMPLE_RATE, "n_mfcc": 20, "n_fft": 200, "n_mels": 64}
_FORMAT = 1  # bump when the cached contents change meaning
_MFCC_CHUNK = 512  # clips per MFCC batch: bounds the float64 working memory to ~100 MB


def _word_member(name: str) -> tuple[str, str] | None:
    """``(word, file name)`` when the member lies in one of the ten word folders, else None."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or parts[0] not in SPEECH_COMMANDS_WORDS:
        return None
    return parts[0], "/".join(parts[1:])


def read_speech_commands_archive(path, *, progress: bool = True) -> dict:
    """Read the ten words' 16000-sample clips from a Speech Commands ``.tar.gz``, streaming.

    Members are read in archive order without extracting anything. Only ``<word>/<name>.wav`` regular files
    of the ten words are used; everything else is skipped. Inside a word folder anything other than a
    ``.wav`` file, a file not at 16 kHz, mono and 16-bit, or a duplicated name raises
    `CorruptCacheError` (the real archive has none).

    Returns:
        dict with ``audio`` (N, 16000) int16 tensor, ``labels`` (N,) long (index into
            `SPEECH_COMMANDS_WORDS`), ``files`` (N,) member names ``<word>/<name>.wav``, ordered by word
            and then file name, and ``excluded`` (the member names of the clips that are not 16000 samples long).
    """
    clips: dict[tuple[int, str], np.ndarray] = {}
    excluded: list[str] = []
    try:
        with (
            tarfile.open(path, mode="r|gz") as archive,
            Progress(desc="reading Speech Commands", unit=" files", enabled=progress) as bar,
        ):
            for member in archive:
                bar.update(1)
                found = _word_member(member.name)
                if found is None:
                    continue
                word, rest = found
                if rest == "" and member.isdir():
                    continue
                if not (member.isfile() and re.fullmatch(r"[^/]+\.wav", rest)):
                    raise CorruptCacheError(
                        f"archive {path} has an unexpected member {member.name!r} in the "
                        f"'{word}' folder; delete the archive if it is not the Speech Commands "
                        "v0.02 archive"
                    )
                key = (SPEECH_COMMANDS_WORDS.index(word), rest)
                if key in clips or f"{word}/{rest}" in excluded:
                    raise CorruptCacheError(f"archive {path} holds {word}/{rest} twice; delete it")
                handle = archive.extractfile(member)
                assert handle is not None  # None only for members that are not regular files (refused above)
                try:
                    rate, samples = read_wav(handle.read())
                except ValueError as error:
                    raise CorruptCacheError(
                        f"archive {path}: member {member.name!r} is not a readable 16-bit "
                        f"PCM WAV file ({error}); delete the archive"
                    ) from error
                if rate != SAMPLE_RATE or samples.ndim != 1:
                    raise CorruptCacheError(
                        f"archive {path}: member {member.name!r} is not mono at {SAMPLE_RATE} Hz "
                        f"(rate {rate}, shape {samples.shape}); delete the archive"
                    )
                if samples.shape[0] != CLIP_SAMPLES:
                    excluded.append(f"{word}/{rest}")  # the protocol keeps one-second clips only
                    continue
                clips[key] = samples
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        raise CorruptCacheError(
            f"archive {path} cannot be read ({type(error).__name__}: {error}); delete it to download it again"
        ) from error
    if not clips:
        raise CorruptCacheError(
            f"archive {path} holds no {CLIP_SAMPLES}-sample clip of the words "
            f"{', '.join(SPEECH_COMMANDS_WORDS)}; delete it if it is not the Speech Commands "
            "archive"
        )
    order = sorted(clips)
    audio = torch.from_numpy(np.stack([clips[k] for k in order]))
    return {
        "audio": audio,
        "labels": torch.tensor([k[0] for k in order], dtype=torch.long),
        "files": [f"{SPEECH_COMMANDS_WORDS[k[0]]}/{k[1]}" for k in order],
        "excluded": sorted(excluded),
    }


def _check_options(representation, normalise, remotes) -> list[RemoteFile]:
    """This loader's own options; the shared ones are checked by `LoadOptions`."""
    if representation not in ("mfcc", "raw"):
        raise ValueError(f'representation must be "mfcc" or "raw", got {representation!r}')
    if not isinstance(normalise, bool):
        raise ValueError(f"normalise must be True or False, got {normalise!r}")
    remotes = [SPEECH_COMMANDS_REMOTE] if remotes is None else list(remotes)
    if len(remotes) != 1 or not isinstance(remotes[0], RemoteFile):
        raise ValueError(f"remotes must hold exactly one RemoteFile (the .tar.gz archive), got {remotes!r}")
    return remotes


@accepts_load_options
def load_speech_commands(
    *,
    representation: str = "mfcc",
    normalise: bool = True,
    cache_dir=None,
    remotes: Sequence[RemoteFile] | None = None,
    offline: bool | None = None,
    split_seed: int = 0,
    drop_rate: float = 0.0,
    drop_seed: int = 0,
    dtype: torch.dtype = torch.float32,
    progress: bool = True,
    options: LoadOptions | None = None,
) -> DatasetSplits:
    """Speech Commands v0.02, ten words, 70/15/15 stratified split (see the module docstring).

    Args:
        representation: ``"mfcc"`` (SC: 161 x 20 per clip) or ``"raw"`` (SC_raw: 16000 x 1).
        normalise: standardise each channel with training-split statistics.
        cache_dir: cache root (default ``$NEURALDE_SEQ_DATA`` or ``~/.cache/neuralde_seq``); files go to
            its ``speech_commands`` sub-directory.
        remotes: one `RemoteFile` replacing the official archive (e.g. a
            ``file://`` fixture); the official archive's clip count (34,975) is checked only without it.
        offline: never download (None reads ``$NEURALDE_SEQ_OFFLINE``). Works from cached tensors alone.
        split_seed: ``stratified_split`` seed; 0 gives the NCDE split (random states 0 and 1).
        drop_rate: fraction in [0, 1) of each sample's time points set to NaN (all channels).
        drop_seed: seed of the dropped points.
        dtype: floating dtype of ``times`` and ``values`` (MFCCs are computed in float64 and cast).
        progress: show progress bars.
        options: a `LoadOptions` holding the eight shared keywords (``cache_dir`` to ``progress``) at once,
            instead of giving them one by one (giving both raises ``TypeError``); None (default).

    Returns:
        `DatasetSplits` of `IrregularDataset`:
            ``times`` (N, T) frame or sample indices, ``values`` (N, T, C) with (T, C) = (161, 20) or (16000, 1),
            ``lengths`` all T, ``labels`` (N,) in 0..9, ``class_names`` the ten words, no static features;
            ``meta`` records the representation, the time unit, the normalisation statistics, the number of
            clips excluded for not being 16000 samples long, and the source.
    """
    (remote,) = _check_options(representation, normalise, remotes)
    directory = data_dir(cache_dir) / "speech_commands"
    # the archive's content (not its URL) identifies the cache, so a mirror reuses it
    source_key = {"archive": remote.filename, "sha256": remote.sha256, "format": _FORMAT}

    def archive_sha256() -> str:
        # unpinned fixture archives are identified by their content, so a changed file is never mistaken
        if remote.sha256 is not None:
            return remote.sha256
        return sha256_file(fetch(remote, directory, offline=offline, progress=progress))

    def build_audio() -> dict:
        path = fetch(remote, directory, offline=offline, progress=progress)
        clips = read_speech_commands_archive(path, progress=progress)
        if remotes is None and len(clips["files"]) != SPEECH_COMMANDS_CLIPS:
            raise CorruptCacheError(
                f"{path} holds {len(clips['files'])} one-second clips of the ten words, the "
                f"v0.02 archive {SPEECH_COMMANDS_CLIPS}; delete it to download it again"
            )
        return clips

    source_key["sha256"] = archive_sha256()
    audio_key = {"name": "speech_commands_audio", **source_key}

    def audio_tensors() -> dict:
        return cached_tensors(directory, audio_key, build_audio)

    if representation == "mfcc":

        def build_mfcc() -> dict:
            clips = audio_tensors()
            audio = clips["audio"]
            chunks = []
            for start in range(0, audio.shape[0], _MFCC_CHUNK):
                wave = audio[start : start + _MFCC_CHUNK].to(torch.float64) / 2**15
                chunks.append(mfcc(wave, **MFCC_OPTIONS).to(dtype))
            return {"features": torch.cat(chunks), "labels": clips["labels"], "excluded": len(clips["excluded"])}

        mfcc_key = {"name": "speech_commands_mfcc", **source_key, "mfcc": MFCC_OPTIONS, "dtype": str(dtype)}
        cached = cached_tensors(directory, mfcc_key, build_mfcc)
        values, labels, excluded = cached["features"], cached["labels"], cached["excluded"]
        time_unit = f"MFCC frame ({MFCC_OPTIONS['n_fft'] // 2} samples = 6.25 ms), frame 0 centred on sample 0"
    else:
        cached = audio_tensors()
        values = (cached["audio"].to(dtype) / 2**15).unsqueeze(-1)  # int16 / 2^15 is exact in float32
        labels, excluded = cached["labels"], len(cached["excluded"])
        time_unit = "audio sample (1/16000 s)"

    n, length = values.shape[0], values.shape[1]
    full = IrregularDataset(
        times=torch.arange(length, dtype=dtype).expand(n, length),  # a view: no (N, T) copy
        values=values,
        lengths=torch.full((n,), length, dtype=torch.long),
        labels=labels,
        class_names=list(SPEECH_COMMANDS_WORDS),
        name=f"SpeechCommands_{representation}",
        meta={
            "representation": representation,
            "time_unit": time_unit,
            "sample_rate": SAMPLE_RATE,
            "excluded_clips": int(excluded),
            "source": remote.url,
            "split_seed": split_seed,
        },
    )
    del values, cached
    if drop_rate:
        full = drop_observations(full, drop_rate, drop_seed)
    train, val, test = stratified_split(full, (0.7, 0.15, 0.15), split_seed)
    del full
    if normalise:
        train, val, test = standardise(train, val, test)
    return DatasetSplits(train, val, test)


register_task(
    Task(
        "speech-commands",
        "Speech Commands v0.02, 10 words (MFCC or raw audio)",
        "accuracy",
        load_speech_commands,
        fixed_options={"normalise": False},
    )
)
