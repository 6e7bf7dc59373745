"""Tests of the .ts reader, the embedded JapaneseVowels data, and the dataset transforms and splits."""

import hashlib
import math
import re
from importlib import resources

import numpy as np
import pytest
import torch

from neuralde_seq.data import (
    IrregularDataset,
    channel_statistics,
    drop_observations,
    load_japanese_vowels,
    num_dropped,
    read_ts,
    standardise,
    stratified_split,
)

HEADER = """# a comment line
#
@problemName Toy
@timeStamps false
@missing true
@univariate false
@dimensions 2
@equalLength false
@classLabel true a b c
@data
"""


def _write(tmp_path, text, name="toy.ts"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------- .ts reader
def test_ts_variable_lengths_and_missing(tmp_path):
    path = _write(
        tmp_path,
        HEADER
        + "1.0,2.5,-3:4,5,6e-1:b\n"
        + "\n"
        + "# comment inside data\n"
        + "?,7:8,?:a\n"
        + "0.5,1.5,2.5,3.5:1,?,3,4:c\n",
    )
    data = read_ts(path)
    assert data.labels == ["b", "a", "c"]
    assert data.class_labels == ["a", "b", "c"]
    assert data.times is None
    assert [s.shape for s in data.series] == [(2, 3), (2, 2), (2, 4)]
    np.testing.assert_array_equal(data.series[0], [[1.0, 2.5, -3.0], [4.0, 5.0, 0.6]])
    np.testing.assert_array_equal(data.series[1], [[np.nan, 7.0], [8.0, np.nan]])
    np.testing.assert_array_equal(data.series[2][1], [1.0, np.nan, 3.0, 4.0])
    assert data.header["problemname"] == "Toy"


def test_ts_to_dataset_pads_with_nan_and_continues_time_grid(tmp_path):
    from neuralde_seq.data import from_ts

    data = read_ts(_write(tmp_path, HEADER + "1,2,3:4,5,6:b\n?,7:8,?:a\n"))
    ds = from_ts(data)
    assert ds.values.shape == (2, 3, 2)
    assert ds.lengths.tolist() == [3, 2]
    assert ds.labels.tolist() == [1, 0]  # class "b" is index 1 in the declared order a b c
    assert ds.class_names == ["a", "b", "c"]
    torch.testing.assert_close(ds.times, torch.tensor([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]))
    assert torch.isnan(ds.values[1, 2]).all()  # padding
    assert torch.isnan(ds.values[1, 0, 0]) and ds.values[1, 0, 1] == 8.0


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("1,2,x:3,4,5:a", "cannot read 'x'"),
        ("1,2,3:a", "1 dimensions"),  # header declares 2
        ("1,2,3:4,5:a", "different lengths"),
        ("1,2,3:4,5,6:z", "not among the declared class labels"),
        ("1,,3:4,5,6:a", "empty value"),
    ],
)
def test_ts_malformed_line_reports_line_number(tmp_path, bad_line, message):
    # the bad case is the second data line; HEADER has 10 lines, so it is on line 12
    path = _write(tmp_path, HEADER + "1,2,3:4,5,6:a\n" + bad_line + "\n")
    with pytest.raises(ValueError, match=rf"line 12: .*{re.escape(message)}"):
        read_ts(path)


def test_ts_missing_data_section_and_data_before_header(tmp_path):
    with pytest.raises(ValueError, match="no @data"):
        read_ts(_write(tmp_path, "@problemName x\n@classLabel true a\n"))
    with pytest.raises(ValueError, match="line 2: data line before @data"):
        read_ts(_write(tmp_path, "@problemName x\n1,2:a\n@data\n"))


def test_ts_timestamps_numeric_union_grid(tmp_path):
    text = (
        "@problemName ts\n@timeStamps true\n@univariate false\n@classLabel true x y\n@data\n"
        "(0,1.0),(2,3.0):(1,5.0),(2,6.0):y\n"
    )
    data = read_ts(_write(tmp_path, text))
    np.testing.assert_array_equal(data.times[0], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(data.series[0], [[1.0, np.nan, 3.0], [np.nan, 5.0, 6.0]])
    assert data.labels == ["y"]


def test_ts_datetime_timestamps_not_implemented(tmp_path):
    text = "@timeStamps true\n@classLabel true x\n@data\n(2020-01-01 00:00:00,1.0):x\n"
    with pytest.raises(NotImplementedError, match="numeric timestamps"):
        read_ts(_write(tmp_path, text))


# ---------------------------------------------------------------------------------------- embedded data
def test_japanese_vowels_counts_and_shapes():
    train, test = load_japanese_vowels()
    assert (len(train), len(test)) == (270, 370)
    for ds in (train, test):
        assert ds.num_channels == 12
        assert ds.class_names == [str(i) for i in range(1, 10)]
        assert int(ds.lengths.min()) >= 7 and int(ds.lengths.max()) <= 29
        assert set(ds.labels.tolist()) == set(range(9))
        # observed exactly within each length, NaN after
        obs_points = ds.observed.all(dim=2)
        steps = torch.arange(ds.values.shape[1])[None, :] < ds.lengths[:, None]
        assert torch.equal(obs_points, steps)
        assert torch.equal(ds.times[0], torch.arange(ds.values.shape[1], dtype=ds.times.dtype))
    assert int(torch.cat([train.lengths, test.lengths]).min()) == 7
    assert int(torch.cat([train.lengths, test.lengths]).max()) == 29
    assert torch.bincount(train.labels).tolist() == [30] * 9
    # first value of the first training case, as written in the file
    assert train.values[0, 0, 0].item() == pytest.approx(1.860936)


def test_japanese_vowels_sha256_matches_source_md():
    folder = resources.files("neuralde_seq.data").joinpath("embedded")
    source = folder.joinpath("SOURCE.md").read_text()
    for split in ("TRAIN", "TEST"):
        name = f"JapaneseVowels_{split}.ts"
        recorded = re.search(rf"{name}\s*\|\s*([0-9a-f]{{64}})", source)
        assert recorded, f"SOURCE.md lacks the sha256 of {name}"
        actual = hashlib.sha256(folder.joinpath(name).read_bytes()).hexdigest()
        assert actual == recorded.group(1)


# ---------------------------------------------------------------------------------------- transforms
def _toy_dataset(n=40, t_max=12, c=3, seed=0, classes=4):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, t_max + 1, size=n)
    series = [rng.normal(size=(c, int(length))) * (1 + np.arange(c))[:, None] + 5 for length in lengths]
    labels = [i % classes for i in range(n)]
    return IrregularDataset.from_sequences(series, labels, [f"k{i}" for i in range(classes)], dtype=torch.float64)


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.5, 0.7, 0.95])
def test_drop_observations_exact_count_per_sample(rate):
    ds = _toy_dataset()
    out = drop_observations(ds, rate, seed=1)
    before = ds.observed.any(dim=2).sum(dim=1)
    after = out.observed.any(dim=2).sum(dim=1)
    for i, length in enumerate(ds.lengths.tolist()):
        expected = min(math.floor(rate * length + 0.5), length - 2)
        assert before[i] - after[i] == expected, (i, length)
        assert after[i] >= 2
    # a dropped point loses all channels at once: every point is either fully observed or fully missing
    obs = out.observed
    assert torch.equal(obs.any(dim=2), obs.all(dim=2))
    # time grid, lengths and labels unchanged
    assert torch.equal(out.times, ds.times) and torch.equal(out.lengths, ds.lengths)
    assert torch.equal(out.labels, ds.labels)


def test_num_dropped_rounds_half_up_and_keeps_two():
    assert num_dropped(0.5, 5) == 3  # 2.5 -> 3 (not banker's 2)
    assert num_dropped(0.3, 7) == 2
    assert num_dropped(0.9, 3) == 1  # round(2.7) = 3, capped to keep 2
    assert num_dropped(0.5, 2) == 0


def test_drop_observations_keeps_values_and_is_reproducible():
    ds = _toy_dataset()
    a = drop_observations(ds, 0.5, seed=7)
    b = drop_observations(ds, 0.5, seed=7)
    c = drop_observations(ds, 0.5, seed=8)
    kept = a.observed
    assert torch.equal(a.values[kept], ds.values[kept])  # kept values bit-identical
    assert torch.equal(torch.isnan(a.values), torch.isnan(b.values))
    assert not torch.equal(torch.isnan(a.values), torch.isnan(c.values))
    assert not torch.isnan(ds.values[ds.observed]).any()  # input left untouched
    assert ds.observed.sum() > a.observed.sum()


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5, float("nan"), "0.3"])
def test_drop_observations_rejects_bad_rate(rate):
    with pytest.raises(ValueError, match="rate"):
        drop_observations(_toy_dataset(n=4), rate, seed=0)


def test_standardise_uses_training_statistics_only():
    train = drop_observations(_toy_dataset(seed=1), 0.4, seed=3)
    test = _toy_dataset(seed=2, n=10)
    test = test.replace(values=test.values * 3 - 10)  # very different statistics
    tr, te = standardise(train, test)
    v = train.values.numpy().reshape(-1, train.num_channels)
    mean = np.nanmean(v, axis=0)
    std = np.nanstd(v, axis=0)
    np.testing.assert_allclose(tr.values.numpy(), (train.values.numpy() - mean) / std, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(te.values.numpy(), (test.values.numpy() - mean) / std, rtol=1e-12, atol=1e-12)
    # NaN pattern preserved; the training part is centred and scaled
    assert torch.equal(torch.isnan(te.values), torch.isnan(test.values))
    np.testing.assert_allclose(np.nanmean(tr.values.numpy().reshape(-1, 3), axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(np.nanstd(tr.values.numpy().reshape(-1, 3), axis=0), 1, atol=1e-12)
    m, s = channel_statistics(train)
    np.testing.assert_allclose(m.numpy(), mean, rtol=1e-12)


def test_standardise_rejects_channel_without_observations():
    ds = _toy_dataset(n=6)
    values = ds.values.clone()
    values[:, :, 1] = float("nan")
    with pytest.raises(ValueError, match=r"channel\(s\) \[1\]"):
        standardise(ds.replace(values=values))


# ---------------------------------------------------------------------------------------- splits
def test_stratified_split_keeps_proportions_and_loses_nothing():
    train, _ = load_japanese_vowels()
    (a, ia), (b, ib) = stratified_split(train, (0.85, 0.15), seed=0, return_indices=True)
    assert len(a) + len(b) == len(train)
    assert sorted(np.concatenate([ia, ib]).tolist()) == list(range(len(train)))
    counts_b = torch.bincount(b.labels, minlength=9)
    # 15 % of 30 per class is 4.5: every class gets 4 or 5 validation samples
    assert int(counts_b.min()) >= 4 and int(counts_b.max()) <= 5
    assert torch.equal(a.values[0].isnan(), train.values[int(ia[0])].isnan())
    # same seed, same split; another seed, another split
    (_, ia2), _ = stratified_split(train, (0.85, 0.15), seed=0, return_indices=True)
    (_, ia3), _ = stratified_split(train, (0.85, 0.15), seed=1, return_indices=True)
    assert np.array_equal(ia, ia2) and not np.array_equal(ia, ia3)


def test_stratified_three_way_split():
    ds = _toy_dataset(n=200, classes=4)
    parts = stratified_split(ds, (0.7, 0.15, 0.15), seed=3, return_indices=True)
    idx = np.concatenate([p[1] for p in parts])
    assert sorted(idx.tolist()) == list(range(200))
    assert [len(p[0]) for p in parts] == [140, 30, 30]
    for sub, _ in parts:
        frac = torch.bincount(sub.labels, minlength=4).double() / len(sub)
        assert torch.allclose(frac, torch.full((4,), 0.25, dtype=torch.float64), atol=0.04)
    with pytest.raises(ValueError, match="fractions"):
        stratified_split(ds, (0.5, 0.4), seed=0)


def test_dataset_validation_names_the_argument():
    ds = _toy_dataset(n=5)
    with pytest.raises(ValueError, match="labels"):
        ds.replace(labels=torch.tensor([0, 1, 2, 3, 9]))
    bad_times = ds.times.clone()
    bad_times[2, 1] = bad_times[2, 0]
    with pytest.raises(ValueError, match="times must be strictly increasing.*sample 2"):
        ds.replace(times=bad_times)
    with pytest.raises(ValueError, match="values must have shape"):
        ds.replace(values=ds.values[:, :, :, None])
    sub = ds.subset([4, 0])
    assert torch.equal(sub.labels, ds.labels[[4, 0]]) and len(sub) == 2
