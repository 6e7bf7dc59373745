"""Speech Commands loader on a fixture archive in the upstream layout (tests/fixtures_speech.py)."""

import numpy as np
import pytest
import torch
from fixtures_speech import write_speech_commands_archive
from sklearn.model_selection import train_test_split
from test_audio import reference_mfcc

from neuralde_seq.data import num_dropped
from neuralde_seq.data.io.cache_integrity import ChecksumError
from neuralde_seq.data.io.download import CorruptCacheError, DataUnavailableError, RemoteFile
from neuralde_seq.data.sources.speech_commands import load_speech_commands


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_speech_commands_archive(tmp_path_factory.mktemp("sc_source"))


def _ncde_split(labels):
    """The NCDE code's split_data on sample indices: 70 % (random_state 0), then halves (random_state 1)."""
    idx = np.arange(len(labels))
    train, rest, _, rest_labels = train_test_split(
        idx, labels, train_size=0.7, random_state=0, shuffle=True, stratify=labels
    )
    val, test = train_test_split(rest, train_size=0.5, random_state=1, shuffle=True, stratify=rest_labels)
    return np.sort(train), np.sort(val), np.sort(test)


def _identify(split, truth):
    """Index into truth["files"] of every sample of a raw, unnormalised split (clips are unique noise)."""
    lookup = {truth["audio"][i].tobytes(): i for i in range(len(truth["files"]))}
    ints = np.round(split.values[:, :, 0].double().numpy() * 2**15).astype(np.int16)
    return np.array([lookup[row.tobytes()] for row in ints])


def test_raw_values_are_wav_samples_labels_and_exclusions(archive, tmp_path):
    remotes, truth = archive
    splits = load_speech_commands(
        representation="raw", normalise=False, cache_dir=tmp_path, remotes=remotes, progress=False
    )
    total = sum(len(s) for s in splits)
    assert total == len(truth["files"]) == 70  # 3 short clips, 4 other-word and 1 background WAVs left out
    for split in splits:
        assert split.class_names == truth["class_names"]
        assert split.values.shape[1:] == (16000, 1)
        assert (split.lengths == 16000).all()
        assert torch.equal(split.times[0], torch.arange(16000, dtype=torch.float32))
        assert split.static is None
        assert split.meta["excluded_clips"] == len(truth["excluded"]) == 3
        ids = _identify(split, truth)  # raises KeyError if any value differs from int16 / 2^15
        expected = torch.tensor(truth["audio"][ids].astype(np.float64) / 2**15, dtype=torch.float32)
        assert torch.equal(split.values[:, :, 0], expected)
        assert torch.equal(split.labels, torch.as_tensor(truth["labels"][ids]))
    assert splits.train.values.min() == -1.0 and splits.train.values.max() == 1 - 2**-15


def test_split_is_the_ncde_split_and_stratified(archive, tmp_path):
    remotes, truth = archive
    splits = load_speech_commands(
        representation="raw", normalise=False, cache_dir=tmp_path, remotes=remotes, progress=False
    )
    assert [len(s) for s in splits] == [49, 10, 11]  # floor(0.7 * 70), floor(0.5 * 21), rest
    for split, expected in zip(splits, _ncde_split(truth["labels"])):
        np.testing.assert_array_equal(_identify(split, truth), expected)
    for k in range(10):  # 7 clips per word: 4.9 expected in train, the rest halved between val and test
        train, val, test = (int((s.labels == k).sum()) for s in splits)
        assert train + val + test == 7
        assert abs(train - 4.9) < 1 and abs(val - (val + test) / 2) <= 1


def test_mfcc_representation_matches_formula_and_normalisation(archive, tmp_path):
    remotes, truth = archive
    raw = load_speech_commands(
        normalise=False, cache_dir=tmp_path, remotes=remotes, dtype=torch.float64, progress=False
    )
    train_idx, val_idx, _ = _ncde_split(truth["labels"])
    assert raw.train.values.shape == (49, 161, 20)
    assert torch.equal(raw.train.times[0], torch.arange(161, dtype=torch.float64))
    for i in (0, 17, 48):
        ref, _ = reference_mfcc(truth["audio"][train_idx[i]].astype(np.float64) / 2**15)
        got = raw.train.values[i].numpy()
        assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-8
    norm = load_speech_commands(cache_dir=tmp_path, remotes=remotes, dtype=torch.float64, progress=False)
    train_raw = raw.train.values.reshape(-1, 20)
    mean, std = train_raw.mean(0), train_raw.std(0, unbiased=False)
    torch.testing.assert_close(norm.train.values, (raw.train.values - mean) / std, rtol=0, atol=1e-10)
    torch.testing.assert_close(norm.val.values, (raw.val.values - mean) / std, rtol=0, atol=1e-10)
    flat = norm.train.values.reshape(-1, 20)
    torch.testing.assert_close(flat.mean(0), torch.zeros(20, dtype=torch.float64), rtol=0, atol=1e-10)
    torch.testing.assert_close(flat.std(0, unbiased=False), torch.ones(20, dtype=torch.float64), rtol=0, atol=1e-10)
    float32 = load_speech_commands(normalise=False, cache_dir=tmp_path, remotes=remotes, progress=False)
    assert float32.train.values.dtype == torch.float32
    torch.testing.assert_close(float32.train.values.double(), raw.train.values, rtol=1e-6, atol=1e-5)


def test_drop_rate_is_honoured_per_sample(archive, tmp_path):
    remotes, truth = archive
    kwargs = dict(representation="raw", normalise=False, cache_dir=tmp_path, remotes=remotes, progress=False)
    splits = load_speech_commands(drop_rate=0.3, drop_seed=5, **kwargs)
    clean = load_speech_commands(**kwargs)
    want = num_dropped(0.3, 16000)
    assert want == 4800
    patterns = []
    for split, ref in zip(splits, clean):
        missing = torch.isnan(split.values[:, :, 0])
        assert (missing.sum(1) == want).all()
        assert torch.equal(split.values[~missing], ref.values[~missing])
        patterns.append(missing)
    again = load_speech_commands(drop_rate=0.3, drop_seed=5, **kwargs)
    other = load_speech_commands(drop_rate=0.3, drop_seed=6, **kwargs)
    assert torch.equal(torch.isnan(again.train.values[:, :, 0]), patterns[0])
    assert not torch.equal(torch.isnan(other.train.values[:, :, 0]), patterns[0])
    mfcc = load_speech_commands(drop_rate=0.5, normalise=True, cache_dir=tmp_path, remotes=remotes, progress=False)
    frames_missing = torch.isnan(mfcc.test.values).all(-1)
    assert (frames_missing.sum(1) == num_dropped(0.5, 161)).all()
    assert torch.isnan(mfcc.test.values).any(-1).equal(frames_missing)  # whole time points, all channels


def test_cached_tensors_are_reused_without_the_archive(archive, tmp_path):
    remotes, _ = archive
    first = load_speech_commands(cache_dir=tmp_path, remotes=remotes, progress=False)
    cache = tmp_path / "speech_commands"
    (cache / "speech_commands_v0.02.tar.gz").unlink()  # the tensors alone must suffice now
    cached = sorted(p.name for p in cache.iterdir())
    assert any(n.startswith("speech_commands_mfcc-") for n in cached)
    assert any(n.startswith("speech_commands_audio-") for n in cached)
    gone = RemoteFile(
        url=(tmp_path / "nowhere.tar.gz").as_uri(),
        filename=remotes[0].filename,
        sha256=remotes[0].sha256,
        size=remotes[0].size,
    )
    second = load_speech_commands(cache_dir=tmp_path, remotes=[gone], offline=True, progress=False)
    for a, b in zip(first, second):
        assert torch.equal(a.values, b.values) and torch.equal(a.labels, b.labels)
    raw = load_speech_commands(representation="raw", cache_dir=tmp_path, remotes=[gone], offline=True, progress=False)
    assert len(raw.train) == 49
    assert sorted(p.name for p in cache.iterdir()) == cached  # nothing rebuilt, nothing added


def test_checksum_mismatch_and_offline_leave_nothing(tmp_path):
    remotes, truth = write_speech_commands_archive(tmp_path / "src", clips_per_word=7, sha256="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError, match="0" * 64):
        load_speech_commands(cache_dir=cache, remotes=remotes, progress=False)
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))
    good = RemoteFile(remotes[0].url, remotes[0].filename, truth["sha256"], remotes[0].size)
    with pytest.raises(DataUnavailableError, match="offline"):
        load_speech_commands(cache_dir=cache, remotes=[good], offline=True, progress=False)
    assert not cache.exists() or not any(cache.rglob("*"))


def test_unexpected_members_are_refused_and_nothing_escapes(tmp_path):
    evil = {"./yes/../../evil.wav": b"RIFF"}
    remotes, _ = write_speech_commands_archive(tmp_path / "src", extra_members=evil)
    cache = tmp_path / "cache"
    with pytest.raises(CorruptCacheError, match="evil.wav"):
        load_speech_commands(cache_dir=cache, remotes=remotes, progress=False)
    assert not any(p.name == "evil.wav" for p in tmp_path.rglob("*"))
    assert not (tmp_path.parent / "evil.wav").exists()
    assert not any(p.suffix == ".pt" for p in cache.rglob("*"))  # no tensor cache from a refused archive


def test_bad_options_raise(archive, tmp_path):
    remotes, _ = archive
    with pytest.raises(ValueError, match="representation"):
        load_speech_commands(representation="spectrogram", cache_dir=tmp_path, remotes=remotes)
    with pytest.raises(ValueError, match="remotes"):
        load_speech_commands(cache_dir=tmp_path, remotes=remotes * 2)
    with pytest.raises(ValueError, match="drop_rate"):
        load_speech_commands(cache_dir=tmp_path, remotes=remotes, drop_rate=1.5)


def test_official_archive_must_hold_34975_clips(archive, tmp_path, monkeypatch):
    import neuralde_seq.data.sources.speech_commands as speech_commands

    remotes, _ = archive
    monkeypatch.setattr(speech_commands, "SPEECH_COMMANDS_REMOTE", remotes[0])  # the fixture as "official"
    with pytest.raises(CorruptCacheError, match="34975"):
        load_speech_commands(cache_dir=tmp_path, progress=False)
    assert not any(p.suffix == ".pt" for p in tmp_path.rglob("*"))
