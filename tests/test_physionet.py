"""PhysioNet 2019 sepsis loader on fixture zips in the upstream format (tests/fixtures_physionet.py)."""

import numpy as np
import pytest
import torch
from fixtures_physionet import HEADER, write_physionet_archives
from sklearn.model_selection import train_test_split

import neuralde_seq.data.sources.physionet as physionet
from neuralde_seq.data import num_dropped
from neuralde_seq.data.io.cache_integrity import ChecksumError
from neuralde_seq.data.io.download import CorruptCacheError, DataUnavailableError, RemoteFile
from neuralde_seq.data.sources.physionet import load_physionet_sepsis, parse_psv


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    return write_physionet_archives(tmp_path_factory.mktemp("physionet_source"))


def _ncde_split(labels):
    idx = np.arange(len(labels))
    train, rest, _, rest_labels = train_test_split(
        idx, labels, train_size=0.7, random_state=0, shuffle=True, stratify=labels
    )
    val, test = train_test_split(rest, train_size=0.5, random_state=1, shuffle=True, stratify=rest_labels)
    return np.sort(train), np.sort(val), np.sort(test)


def _filled_static(truth):
    """The protocol's static features: Unit1, Unit2, HospAdmTime NaN -> 0; Age, Gender as they are."""
    static = truth["static"].copy()
    for column in (2, 3, 4):
        static[np.isnan(static[:, column]), column] = 0.0
    return static


def _grid(truth, i, length):
    out = np.full((length, 34), np.nan)
    out[: truth["hours"][i]] = truth["values"][i]
    return out


def test_hourly_grid_truncation_labels_static(archives, tmp_path):
    remotes, truth = archives
    splits = load_physionet_sepsis(
        intensity=False, normalise=False, cache_dir=tmp_path, remotes=remotes, dtype=torch.float64, progress=False
    )
    assert len(truth["records"]) == 38 and truth["excluded"] == ["p000005.psv", "p100004.psv"]
    assert [len(s) for s in splits] == [26, 6, 6]
    static = _filled_static(truth)
    for split, idx in zip(splits, _ncde_split(truth["labels"])):
        assert split.class_names == ["no sepsis", "sepsis"]
        assert split.values.shape == (len(idx), 72, 34)
        assert torch.equal(split.times, torch.arange(1, 73, dtype=torch.float64).expand(len(idx), 72))
        np.testing.assert_array_equal(split.lengths.numpy(), truth["hours"][idx])
        np.testing.assert_array_equal(split.labels.numpy(), truth["labels"][idx])
        for row, i in enumerate(idx):
            np.testing.assert_array_equal(split.values[row].numpy(), _grid(truth, i, 72))  # NaN where NaN
        np.testing.assert_array_equal(split.static.numpy(), static[idx])
        assert split.meta["excluded_records"] == 2
        assert split.meta["static_names"] == ["Age", "Gender", "Unit1", "Unit2", "HospAdmTime"]
    everything = {
        truth["records"][i]: (s, r) for s, idx in zip(splits, _ncde_split(truth["labels"])) for r, i in enumerate(idx)
    }
    s, r = everything["p000001.psv"]  # 90 hours, sepsis from hour 80: cut at 72, label 0
    assert s.lengths[r] == 72 and s.labels[r] == 0
    s, r = everything["p100001.psv"]  # 90 hours, sepsis from hour 60
    assert s.lengths[r] == 72 and s.labels[r] == 1
    s, r = everything["p000002.psv"]  # first row at hour 5: hours 1-4 are all-NaN time points
    assert torch.isnan(s.values[r, :4]).all() and not torch.isnan(s.values[r, 4]).all() and s.lengths[r] == 40
    s, r = everything["p100002.psv"]  # hours 7-9 missing
    assert torch.isnan(s.values[r, 6:9]).all()
    s, r = everything["p000003.psv"]  # Unit1 and Unit2 missing: zero-filled
    assert s.static[r, 2] == 0 and s.static[r, 3] == 0
    s, r = everything["p100003.psv"]  # HospAdmTime missing: zero-filled; septic
    assert s.static[r, 4] == 0 and s.labels[r] == 1


def _training_statistics(truth):
    """The split, and the training part's per-channel and static mean and std, computed from the raw truth."""
    parts = _ncde_split(truth["labels"])
    train_values = np.concatenate([truth["values"][i] for i in parts[0]])
    static = _filled_static(truth)
    return (
        parts,
        np.nanmean(train_values, axis=0),
        np.nanstd(train_values, axis=0),
        static,
        static[parts[0]].mean(0),
        static[parts[0]].std(0),
    )


def test_intensity_channels_are_cumulative_counts_and_normalisation(archives, tmp_path):
    remotes, truth = archives
    splits = load_physionet_sepsis(
        intensity=True, cache_dir=tmp_path, remotes=remotes, dtype=torch.float64, progress=False
    )
    parts, mean, std, static, s_mean, s_std = _training_statistics(truth)
    for split, idx in zip(splits, parts):
        assert split.values.shape == (len(idx), 72, 68)
        assert split.static.shape == (len(idx), 7)
        assert split.meta["channels"][34] == "HR observation count"
        for row, i in enumerate(idx):
            grid = _grid(truth, i, 72)
            length = truth["hours"][i]
            counts = np.cumsum(~np.isnan(grid), axis=0).astype(np.float64)
            counts[length:] = np.nan
            np.testing.assert_array_equal(split.values[row, :, 34:].numpy(), counts)
            np.testing.assert_allclose(split.values[row, :, :34].numpy(), (grid - mean) / std, rtol=0, atol=1e-10)
        np.testing.assert_allclose(split.static[:, :5].numpy(), (static[idx] - s_mean) / s_std, rtol=0, atol=1e-10)
        flags = ~np.isnan(truth["static"][idx][:, 2:4])
        np.testing.assert_array_equal(split.static[:, 5:].numpy(), flags.astype(np.float64))
    assert not torch.isnan(splits.train.static).any()
    assert any((s.static[:, 5:] == 0).any() for s in splits)  # the record with missing units
    no_oi = load_physionet_sepsis(
        intensity=False, cache_dir=tmp_path, remotes=remotes, dtype=torch.float64, progress=False
    )
    assert np.array_equal(no_oi.val.values.numpy(), splits.val.values[:, :, :34].numpy(), equal_nan=True)
    assert no_oi.val.static.shape[1] == 5


def test_drop_rate_per_record_and_counts_follow_it(archives, tmp_path):
    remotes, truth = archives
    splits = load_physionet_sepsis(
        intensity=True,
        normalise=False,
        drop_rate=0.5,
        drop_seed=3,
        cache_dir=tmp_path,
        remotes=remotes,
        dtype=torch.float64,
        progress=False,
    )
    for split, idx in zip(splits, _ncde_split(truth["labels"])):
        for row, i in enumerate(idx):
            grid = _grid(truth, i, 72)
            length = truth["hours"][i]
            observed_points = int((~np.isnan(grid[:length])).any(1).sum())
            got = split.values[row, :, :34].numpy()
            dropped = (~np.isnan(grid).all(1)) & np.isnan(got).all(1)
            assert dropped.sum() == num_dropped(0.5, length, observed_points)
            kept = ~np.isnan(got)
            np.testing.assert_array_equal(got[kept], grid[kept])
            counts = np.cumsum(kept, axis=0).astype(np.float64)
            counts[length:] = np.nan
            np.testing.assert_array_equal(split.values[row, :, 34:].numpy(), counts)


def test_cache_is_reused_and_unpinned_zips_are_trusted_on_first_use(tmp_path, monkeypatch):
    remotes, truth = write_physionet_archives(tmp_path / "src", sha256=None)
    cache = tmp_path / "cache"
    with pytest.warns(UserWarning, match="trust on first use"):
        first = load_physionet_sepsis(intensity=True, cache_dir=cache, remotes=remotes, progress=False)
    tensor_files = sorted((cache / "physionet_sepsis").glob("physionet2019_sepsis-*.pt"))
    assert len(tensor_files) == 1
    stamp = tensor_files[0].stat().st_mtime_ns

    def no_parsing(*args, **kwargs):
        raise AssertionError("the records were parsed again instead of read from the cache")

    monkeypatch.setattr(physionet, "read_physionet_archives", no_parsing)
    for remote in remotes:  # the source is gone: the cached zips and tensors must do
        (tmp_path / "src" / remote.filename).unlink()
    second = load_physionet_sepsis(intensity=True, cache_dir=cache, remotes=remotes, offline=True, progress=False)
    for a, b in zip(first, second):
        assert torch.equal(a.values.nan_to_num(-99), b.values.nan_to_num(-99)) and torch.equal(a.static, b.static)
    assert tensor_files[0].stat().st_mtime_ns == stamp
    # the recorded hash now guards the cached zip
    zipped = cache / "physionet_sepsis" / remotes[0].filename
    zipped.write_bytes(zipped.read_bytes() + b"\0")
    with pytest.raises(ChecksumError, match=remotes[0].filename):
        load_physionet_sepsis(intensity=False, cache_dir=cache, remotes=remotes, offline=True, progress=False)


def test_checksum_mismatch_and_offline_leave_nothing(tmp_path):
    remotes, _ = write_physionet_archives(tmp_path / "src", sha256="f" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError, match="f" * 64):
        load_physionet_sepsis(intensity=True, cache_dir=cache, remotes=remotes, progress=False)
    assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*"))
    with pytest.raises(DataUnavailableError, match="offline"):
        load_physionet_sepsis(
            intensity=True,
            cache_dir=cache,
            remotes=[RemoteFile(r.url, r.filename, None) for r in remotes],
            offline=True,
        )
    assert not cache.exists() or not any(cache.rglob("*"))


def test_malformed_records_are_refused():
    def row(iculos, label):
        return "|".join(["80"] * 34 + ["60", "1", "0", "1", "-1.5", str(iculos), str(label)])

    good_row = row(1, 0)
    with pytest.raises(CorruptCacheError, match="header"):
        parse_psv(HEADER.replace("HR", "HeartRate") + "\n" + good_row, "p1.psv")
    with pytest.raises(CorruptCacheError, match="increase"):
        parse_psv("\n".join([HEADER, good_row, good_row]), "p2.psv")
    with pytest.raises(CorruptCacheError, match="41 numeric"):
        parse_psv("\n".join([HEADER, good_row + "|3"]), "p3.psv")
    parsed = parse_psv("\n".join([HEADER, row(3, 1), row(80, 0)]), "p4.psv")
    assert parsed["hours"] == 3 and parsed["label"] == 1 and np.isnan(parsed["values"][:2]).all()
    np.testing.assert_array_equal(parsed["static"], [60, 1, 0, 1, -1.5])


def test_bad_options_raise(archives, tmp_path):
    remotes, _ = archives
    with pytest.raises(TypeError):
        load_physionet_sepsis(cache_dir=tmp_path, remotes=remotes)  # intensity must be chosen
    with pytest.raises(ValueError, match="intensity"):
        load_physionet_sepsis(intensity="yes", cache_dir=tmp_path, remotes=remotes)
    with pytest.raises(ValueError, match="remotes"):
        load_physionet_sepsis(intensity=True, cache_dir=tmp_path, remotes=[])


def test_official_zips_must_hold_the_published_record_counts(archives, tmp_path, monkeypatch):
    remotes, _ = archives
    monkeypatch.setattr(physionet, "PHYSIONET_REMOTES", tuple(remotes))  # the fixtures as "official" files
    with pytest.raises(CorruptCacheError, match="20336"):
        load_physionet_sepsis(intensity=False, cache_dir=tmp_path, progress=False)
    assert not any(p.suffix == ".pt" for p in tmp_path.rglob("*"))


def test_task_protocol_standardises_once_and_leaves_counts_and_flags_raw(archives, tmp_path):
    from neuralde_seq.data.protocols import TASKS, Task, load_task

    remotes, truth = archives
    data = load_task(
        "physionet-sepsis", intensity=True, remotes=remotes, cache_dir=tmp_path, dtype=torch.float64, progress=False
    )
    parts, mean, std, static, s_mean, s_std = _training_statistics(truth)
    for split, idx in zip(data.splits, parts):
        for row, i in enumerate(idx):
            grid = _grid(truth, i, 72)
            counts = np.cumsum(~np.isnan(grid), axis=0).astype(np.float64)
            counts[truth["hours"][i] :] = np.nan
            # a second standardisation would turn these counts into z-scores (e.g. 2 -> -1.0)
            np.testing.assert_array_equal(split.values[row, :, 34:].numpy(), counts)
            np.testing.assert_allclose(split.values[row, :, :34].numpy(), (grid - mean) / std, rtol=0, atol=1e-10)
        np.testing.assert_allclose(split.static[:, :5].numpy(), (static[idx] - s_mean) / s_std, rtol=0, atol=1e-10)
        flags = (~np.isnan(truth["static"][idx][:, 2:4])).astype(np.float64)
        np.testing.assert_array_equal(split.static[:, 5:].numpy(), flags)  # 0/1, not standardised
        assert split.meta["standardise"]["mean"][34:] == [0.0] * 34
        assert split.meta["standardise"]["std"][34:] == [1.0] * 34
        assert split.meta["standardise_static"]["std"][5:] == [1.0, 1.0]
    # a test variant at another drop rate: counts of what remains, raw; features with the training statistics
    variant = data.test_variant(drop_rate=0.5)
    dropped = load_physionet_sepsis(
        intensity=True,
        normalise=False,
        drop_rate=0.5,
        cache_dir=tmp_path,
        remotes=remotes,
        dtype=torch.float64,
        progress=False,
    ).test
    np.testing.assert_array_equal(variant.values[:, :, 34:].numpy(), dropped.values[:, :, 34:].numpy())
    np.testing.assert_allclose(
        variant.values[:, :, :34].numpy(), (dropped.values[:, :, :34].numpy() - mean) / std, rtol=0, atol=1e-10
    )
    # subsampled: the features are standardised once, with the statistics of the subsampled training split
    half = load_task(
        "physionet-sepsis",
        intensity=True,
        subsample=2,
        remotes=remotes,
        cache_dir=tmp_path,
        dtype=torch.float64,
        progress=False,
    ).splits.train
    features = half.values[:, :, :34]
    observed = ~torch.isnan(features)
    per_channel_mean = torch.where(observed, features, 0).sum((0, 1)) / observed.sum((0, 1))
    assert per_channel_mean.abs().max() < 1e-12
    assert torch.equal(half.values[:, :, 34:].nan_to_num(-1), data.splits.train.values[:, ::2, 34:].nan_to_num(-1))
    # a task whose loader can standardise itself must switch that off, or it would be standardised twice
    assert TASKS["physionet-sepsis"].fixed_options == {"normalise": False}
    with pytest.raises(ValueError, match="normalise=False"):
        Task("twice", "standardised twice", "auroc", load_physionet_sepsis)
