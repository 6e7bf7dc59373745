"""Tests of the UEA/UCR loaders and the ARFF reader, on archives the tests write in the upstream formats
(tests/fixtures_uea.py) and load through the real download path (file:// sources)."""

import dataclasses
import math
import re
import shutil

import numpy as np
import pytest
import torch
from fixtures_uea import write_uea_archive
from sklearn.model_selection import train_test_split

from neuralde_seq.data import (
    ChecksumError,
    CorruptCacheError,
    DataUnavailableError,
    load_character_trajectories,
    load_eigenworms,
    load_uea,
    parse_arff,
)


def _load(tmp_path, fmt="ts", name="Toy", cache="cache", fixture_kw=None, **kw):
    remotes, truth = write_uea_archive(tmp_path / f"src_{fmt}_{name}", name, fmt=fmt, **(fixture_kw or {}))
    kw.setdefault("dtype", torch.float64)
    splits = load_uea(name, fmt=fmt, cache_dir=tmp_path / cache, remotes=remotes, progress=False, **kw)
    return splits, truth, remotes


def _by_index(splits):
    """{index in TRAIN+TEST: (part, row)} over the three parts."""
    out = {}
    for part in splits:
        for row, index in enumerate(part.meta["indices"]):
            assert index not in out
            out[index] = (part, row)
    return out


def _assert_same_splits(a, b):
    for pa, pb in zip(a, b):
        assert pa.class_names == pb.class_names and pa.meta["indices"] == pb.meta["indices"]
        assert torch.equal(pa.times, pb.times) and torch.equal(pa.lengths, pb.lengths)
        assert torch.equal(pa.labels, pb.labels)
        torch.testing.assert_close(pa.values, pb.values, rtol=0, atol=0, equal_nan=True)


# --------------------------------------------------------------------------------------- contents
@pytest.mark.parametrize("fmt", ["ts", "arff"])
def test_values_lengths_and_labels_match_what_was_written(tmp_path, fmt):
    splits, truth, _ = _load(tmp_path, fmt)
    where = _by_index(splits)
    assert sorted(where) == list(range(len(truth["labels"])))  # every sample exactly once
    assert len(set(truth["lengths"])) > 3  # variable lengths in the fixture
    assert any(np.isnan(s).any() for s in truth["series"])  # and missing values
    for index, (part, row) in where.items():
        series, length = truth["series"][index], truth["lengths"][index]
        assert int(part.lengths[row]) == length
        expected = torch.as_tensor(series.T)
        torch.testing.assert_close(part.values[row, :length], expected, rtol=0, atol=0, equal_nan=True)
        assert torch.isnan(part.values[row, length:]).all()  # padding (ARFF's '?' padding included)
        assert part.class_names[int(part.labels[row])] == truth["labels"][index]
        assert torch.equal(part.times[row], torch.arange(part.values.shape[1], dtype=torch.float64))


def test_label_numbering_is_first_appearance(tmp_path):
    splits, truth, _ = _load(tmp_path)
    declared = truth["declared_class_labels"]
    assert splits.train.class_names == ["Running", "Badminton", "Standing"] == truth["class_names"]
    assert splits.train.class_names not in (declared, sorted(declared))  # the fixture tells the three apart
    assert splits.val.class_names == splits.test.class_names == splits.train.class_names
    assert splits.train.meta["declared_class_labels"] == declared
    assert splits.train.meta["num_archive_train"] == truth["num_train"]


def test_float32_is_the_float64_data_rounded(tmp_path):
    wide, _, _ = _load(tmp_path, cache="a")
    narrow, _, _ = _load(tmp_path, cache="b", dtype=torch.float32)
    assert narrow.train.values.dtype == torch.float32 and narrow.train.times.dtype == torch.float32
    torch.testing.assert_close(narrow.train.values, wide.train.values.float(), rtol=0, atol=0, equal_nan=True)


# ----------------------------------------------------------------------------------------- splits
def test_split_sizes_and_stratification(tmp_path):
    splits, truth, _ = _load(tmp_path)  # 40 Running, 20 Standing, 20 Badminton
    assert [len(p) for p in splits] == [56, 12, 12]
    expected = {"Running": (28, 6, 6), "Standing": (14, 3, 3), "Badminton": (14, 3, 3)}
    for k, part in enumerate(splits):
        counts = {name: int((part.labels == c).sum()) for c, name in enumerate(part.class_names)}
        assert counts == {name: sizes[k] for name, sizes in expected.items()}
    assert sorted(i for p in splits for i in p.meta["indices"]) == list(range(80))


def test_default_seed_reproduces_the_ncde_split(tmp_path):
    splits, truth, _ = _load(tmp_path)
    labels = truth["labels"]

    def ncde_split(class_order):
        # NeuralCDE's split_data: 70 % train with random_state 0, the rest halved with random_state 1
        codes = np.array([class_order.index(label) for label in labels])
        idx = np.arange(len(labels))
        train, rest, _, rest_codes = train_test_split(
            idx, codes, train_size=0.7, random_state=0, shuffle=True, stratify=codes
        )
        val, test = train_test_split(rest, train_size=0.5, random_state=1, shuffle=True, stratify=rest_codes)
        return [sorted(train.tolist()), sorted(val.tolist()), sorted(test.tolist())]

    assert [p.meta["indices"] for p in splits] == ncde_split(truth["class_names"])
    # the label numbering matters: with sorted class codes the same seeds pick other samples
    assert ncde_split(sorted(truth["class_names"]))[0] != splits.train.meta["indices"]
    other, _, _ = _load(tmp_path, cache="c2", split_seed=3)
    assert other.train.meta["indices"] != splits.train.meta["indices"]


@pytest.mark.parametrize("rate", [0.3, 0.5, 0.7])
def test_drop_rate_honoured_per_sample(tmp_path, rate):
    splits, truth, _ = _load(tmp_path, drop_rate=rate, drop_seed=11)
    where = _by_index(splits)
    total_dropped = 0
    for index, (part, row) in where.items():
        length = truth["lengths"][index]
        before = torch.as_tensor(truth["series"][index].T)  # (L, C)
        after = part.values[row, :length]
        observed_before = ~torch.isnan(before).all(dim=1)
        observed_after = ~torch.isnan(after).all(dim=1)
        dropped = observed_before & ~observed_after
        n_observed = int(observed_before.sum())
        wanted = max(0, min(math.floor(rate * length + 0.5), n_observed - 2))  # round half up, keep >= 2
        assert int(dropped.sum()) == wanted
        assert not (observed_after & ~observed_before).any()
        kept = ~dropped
        torch.testing.assert_close(after[kept], before[kept], rtol=0, atol=0, equal_nan=True)
        total_dropped += wanted
    assert total_dropped > 0
    # drops happen before the split: the same samples lose the same points whatever the split seed
    resplit, _, _ = _load(tmp_path, cache="other", drop_rate=rate, drop_seed=11, split_seed=4)
    for index, (part, row) in _by_index(resplit).items():
        part0, row0 = where[index]
        torch.testing.assert_close(part.values[row], part0.values[row0], rtol=0, atol=0, equal_nan=True)
    assert splits.train.meta["transforms"] == [{"drop_observations": {"rate": rate, "seed": 11}}]


# ---------------------------------------------------------------------------------------- formats
@pytest.mark.parametrize("channels", [3, 1])
def test_arff_and_ts_give_identical_tensors(tmp_path, channels):
    kw = {"channels": channels}
    from_ts, truth_ts, _ = _load(tmp_path, "ts", fixture_kw=kw)
    from_arff, truth_arff, _ = _load(tmp_path, "arff", fixture_kw=kw)
    padded_ts, _, _ = _load(tmp_path, "ts", cache="padded", fixture_kw={**kw, "pad_ts": True})
    assert truth_ts["lengths"] == truth_arff["lengths"]
    expected_archive = "Multivariate2018_arff.zip" if channels > 1 else "Univariate2018_arff.zip"
    assert from_arff.train.meta["archive"] == expected_archive
    _assert_same_splits(from_ts, from_arff)
    _assert_same_splits(from_ts, padded_ts)  # trailing '?' in a .ts file is padding too


# ------------------------------------------------------------------------------------ cache, errors
def test_checksum_mismatch_leaves_no_cache(tmp_path):
    remotes, _ = write_uea_archive(tmp_path / "src", "Toy")
    wrong = [dataclasses.replace(remotes[0], sha256="0" * 64)]
    with pytest.raises(ChecksumError, match=remotes[0].sha256):
        load_uea("Toy", cache_dir=tmp_path / "cache", remotes=wrong, progress=False)
    assert not (tmp_path / "cache").exists()  # no archive, .part, extraction or tensor file, no directories


def test_offline_without_cache_writes_nothing(tmp_path, monkeypatch):
    remotes, _ = write_uea_archive(tmp_path / "src", "Toy")
    with pytest.raises(DataUnavailableError, match=re.escape(remotes[0].url)):
        load_uea("Toy", cache_dir=tmp_path / "cache", remotes=remotes, offline=True, progress=False)
    monkeypatch.setenv("NEURALDE_SEQ_OFFLINE", "1")
    monkeypatch.setenv("NEURALDE_SEQ_DATA", str(tmp_path / "env_cache"))
    with pytest.raises(DataUnavailableError, match=re.escape(str(tmp_path / "env_cache" / "uea"))):
        load_uea("Toy", remotes=remotes, progress=False)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "env_cache").exists()


def test_offline_with_archive_placed_by_hand(tmp_path, monkeypatch):
    reference, _, remotes = _load(tmp_path, cache="online")
    archive = tmp_path / "src_ts_Toy" / remotes[0].filename
    (tmp_path / "hand" / "uea").mkdir(parents=True)
    shutil.move(archive, tmp_path / "hand" / "uea" / remotes[0].filename)  # the source is gone
    monkeypatch.setenv("NEURALDE_SEQ_OFFLINE", "yes")
    monkeypatch.setenv("NEURALDE_SEQ_DATA", str(tmp_path / "hand"))
    offline = load_uea("Toy", remotes=remotes, progress=False, dtype=torch.float64)
    _assert_same_splits(reference, offline)


def test_second_load_uses_the_tensor_cache(tmp_path):
    first, _, remotes = _load(tmp_path, drop_rate=0.5)
    tensor_files = list((tmp_path / "cache" / "uea" / "tensors").glob("Toy-*.pt"))
    assert len(tensor_files) == 1
    (tmp_path / "cache" / "uea" / remotes[0].filename).unlink()  # no archive left to parse,
    (tmp_path / "src_ts_Toy" / remotes[0].filename).unlink()  # nor to download
    again = load_uea(
        "Toy",
        cache_dir=tmp_path / "cache",
        remotes=remotes,
        offline=True,
        progress=False,
        dtype=torch.float64,
        drop_rate=0.5,
    )
    _assert_same_splits(first, again)
    # other drop rates and seeds come from the same cached tensors
    plain = load_uea("Toy", cache_dir=tmp_path / "cache", remotes=remotes, offline=True, progress=False, split_seed=2)
    assert sum(len(p) for p in plain) == 80
    assert list((tmp_path / "cache" / "uea" / "tensors").glob("Toy-*.pt")) == tensor_files


def test_corrupt_tensor_cache_is_refused(tmp_path):
    _, _, remotes = _load(tmp_path)
    (path,) = (tmp_path / "cache" / "uea" / "tensors").glob("Toy-*.pt")
    path.write_bytes(b"not a torch file")
    with pytest.raises(CorruptCacheError, match=re.escape(str(path))):
        load_uea("Toy", cache_dir=tmp_path / "cache", remotes=remotes, progress=False)
    assert path.read_bytes() == b"not a torch file"


def test_unknown_name_and_bad_arguments(tmp_path):
    remotes, _ = write_uea_archive(tmp_path / "src", "Toy")
    with pytest.raises(ValueError, match="Did you mean 'Toy'"):
        load_uea("Tox", cache_dir=tmp_path / "cache", remotes=remotes, progress=False)
    assert not (tmp_path / "cache" / "uea" / "tensors").exists()
    bad = [
        dict(name="charactertrajectories"),
        dict(fmt="csv"),
        dict(drop_rate=1.0),
        dict(drop_rate=True),
        dict(split_seed=-1),
        dict(dtype=torch.long),
        dict(remotes=remotes * 2),
    ]
    for kwargs in bad:
        call = {"name": "Toy", "remotes": remotes, **kwargs}
        with pytest.raises(ValueError):
            load_uea(call.pop("name"), cache_dir=tmp_path / "fresh", progress=False, **call)
    assert not (tmp_path / "fresh").exists()


# --------------------------------------------------------------------------------------- wrappers
def test_named_wrappers(tmp_path):
    classes = {str(k): 7 for k in range(1, 21)}
    remotes, truth = write_uea_archive(
        tmp_path / "ct", "CharacterTrajectories", class_counts=classes, min_length=4, max_length=8
    )
    ct = load_character_trajectories(cache_dir=tmp_path / "cache", remotes=remotes, progress=False)
    assert [len(p) for p in ct] == [98, 21, 21] and ct.train.num_classes == 20 and ct.train.num_channels == 3
    assert ct.train.name == "CharacterTrajectories" and ct.train.class_names == truth["class_names"]
    remotes, _ = write_uea_archive(
        tmp_path / "ew", "EigenWorms", fmt="arff", channels=6, class_counts={str(k): 8 for k in range(1, 6)}
    )
    ew = load_eigenworms(fmt="arff", cache_dir=tmp_path / "cache", remotes=remotes, progress=False)
    assert [len(p) for p in ew] == [28, 6, 6] and ew.train.num_channels == 6 and ew.train.num_classes == 5
    # data that do not fit the published description are refused
    remotes, _ = write_uea_archive(tmp_path / "wrong", "CharacterTrajectories", class_counts=classes, channels=2)
    with pytest.raises(RuntimeError, match=r"channels 2 \(expected 3\)"):
        load_character_trajectories(cache_dir=tmp_path / "cache2", remotes=remotes, progress=False)


# ------------------------------------------------------------------------------------- ARFF reader
RELATIONAL = """% comment
@RELATION 'Probe'

@attribute relationalAtt relational
@attribute att0 numeric
@attribute att1 NUMERIC
@attribute att2 numeric
@end relationalAtt
@attribute 'class value' {'A b',C,"D's"}
@data
'1,2,3\\n4,5,6','A b'
'7, ?, 9\\n10,11,?',C
"0.5,-1e-3,2\\n?,?,?",'D\\'s'
"""


def test_arff_relational_parsing():
    data = parse_arff(RELATIONAL.splitlines(), source="probe.arff")
    assert data.class_labels == ["A b", "C", "D's"] and data.labels == ["A b", "C", "D's"]
    np.testing.assert_array_equal(data.series[0], [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(data.series[1], [[7, np.nan, 9], [10, 11, np.nan]])
    np.testing.assert_array_equal(data.series[2], [[0.5, -0.001, 2], [np.nan] * 3])
    assert data.header == {"relation": "Probe", "format": "arff-relational"}


def test_arff_flat_parsing():
    text = "@relation u\n@attribute\tatt1\tnumeric\n@attribute att2 real\n@attribute target{x,y}\n@data\n1,2,y\n3,?,x\n"
    data = parse_arff(text.splitlines())
    assert data.labels == ["y", "x"] and data.class_labels == ["x", "y"]
    np.testing.assert_array_equal(np.stack(data.series), [[[1, 2]], [[3, np.nan]]])


@pytest.mark.parametrize(
    "line, message",
    [
        ("'1,2\\n4,5,6',C", "line 11: 2 values per channel"),
        ("'1,2,3\\n4,5,6',E", "line 11: class 'E' is not among"),
        ("'1,2,x\\n4,5,6',C", "line 11: cannot read 'x'"),
        ("'1,,3\\n4,5,6',C", "line 11: empty value"),
        ("'1,2,3\\n4,5,6,C", "line 11: unterminated"),
    ],
)
def test_arff_errors_name_the_line(line, message):
    lines = RELATIONAL.splitlines()[:10] + [line]
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_arff(lines, source="probe.arff")


def test_arff_structural_errors():
    with pytest.raises(ValueError, match="no @data"):
        parse_arff(RELATIONAL.splitlines()[:9])
    with pytest.raises(NotImplementedError, match="sparse"):
        parse_arff(RELATIONAL.splitlines()[:10] + ["{0 1, 3 C}"])
    with pytest.raises(ValueError, match="2 channels, earlier cases have 1"):
        parse_arff(RELATIONAL.splitlines()[:10] + ["'1,2,3',C", "'1,2,3\\n4,5,6',C"])
    with pytest.raises(ValueError, match="nominal class"):
        parse_arff(["@relation r", "@attribute a numeric", "@attribute b numeric", "@data", "1,2"])


# ------------------------------------------------------------------ the Log-NCDE / SLiCE protocol options
def test_drop_repeated_keeps_the_first_occurrence_whatever_the_label(tmp_path):
    """Series 5 and 60 are written as copies of series 0 and 2 (NaNs included, labels their own): with
    drop_repeated they, and only they, are gone, and every other sample keeps its TRAIN+TEST position."""
    kw = dict(fixture_kw=dict(repeats=[(0, 5), (2, 60)]))
    kept, truth, _ = _load(tmp_path, drop_repeated=True, **kw)
    assert sorted(_by_index(kept)) == [i for i in range(len(truth["labels"])) if i not in (5, 60)]
    assert kept.train.meta["repeated_dropped"] == [5, 60]
    assert any(np.isnan(truth["series"][i]).any() for i in (0, 2, 5, 60))  # the NaN mask is compared too
    everything, _, _ = _load(tmp_path, cache="cache2", **kw)
    assert sorted(_by_index(everything)) == list(range(len(truth["labels"])))


def test_unstratified_split_is_the_plain_random_split(tmp_path):
    """stratified=False: train_test_split without stratification, 70 % then the rest in halves (seeds s, s + 1)."""
    seed = 7
    splits, truth, _ = _load(tmp_path, stratified=False, split_seed=seed)
    n = len(truth["labels"])
    train, rest = train_test_split(np.arange(n), train_size=0.7, random_state=seed)
    val, test = train_test_split(rest, train_size=0.5, random_state=seed + 1)
    for part, expected in zip(splits, (train, val, test)):
        assert part.meta["indices"] == sorted(expected.tolist())
    stratified, _, _ = _load(tmp_path, cache="cache2", split_seed=seed)
    assert stratified.train.meta["indices"] != splits.train.meta["indices"]


def test_seeded_split_task_draws_the_split_from_the_run_seed(tmp_path):
    """Task uea-seeded-split: the same seed gives the same split, another seed another one (task uea: the same
    split for every seed)."""
    from neuralde_seq.data.protocols import load_task

    remotes, _ = write_uea_archive(tmp_path / "src", "Toy")
    common = dict(
        name="Toy", remotes=remotes, cache_dir=tmp_path / "cache", progress=False, stratified=False, drop_repeated=True
    )
    indices = {
        seed: load_task("uea-seeded-split", seed=seed, **common).splits.train.meta["indices"] for seed in (2345, 3456)
    }
    assert indices[2345] != indices[3456]
    assert load_task("uea-seeded-split", seed=2345, **common).splits.train.meta["indices"] == indices[2345]
    fixed = {seed: load_task("uea", seed=seed, **common).splits.train.meta["indices"] for seed in (2345, 3456)}
    assert fixed[2345] == fixed[3456]
    with pytest.raises(ValueError, match="drop_repeated must be True or False"):
        load_task("uea", drop_repeated="yes", **{k: v for k, v in common.items() if k != "drop_repeated"})
