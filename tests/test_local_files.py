"""Local files (.ts, ARFF, folders), long-format DataFrames and the ``files`` benchmark task.

The fixtures are written here from known arrays (ragged lengths, missing values written as ``?`` and
``NaN``, optional timestamps), so every reader is compared with the arrays that were written, and the file,
numpy (``from_arrays``) and DataFrame routes are compared with each other.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from neuralde_seq.data import load_japanese_vowels
from neuralde_seq.data.formats.local_files import find_split_files, load_files, read_file
from neuralde_seq.data.protocols import load_task, local_files_splits
from neuralde_seq.data.transforms import num_dropped

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = ROOT / "tasks" / "configs" / "local_files_example.yaml"
CLASSES = ("a", "b", "c")
TRAIN_LABELS = [c for c in CLASSES for _ in range(4)]  # 12 cases, 4 per class
TEST_LABELS = ["c", "a", "b", "a", "c"]  # the order the TEST file is written in


def load(*args, **kwargs):
    """:func:`load_files` with a validation fraction of 0.25 unless given: 3 of the 12 TRAIN cases, one per class
    (the default 0.15 would carve 2 cases for 3 classes, too few to stratify)."""
    kwargs.setdefault("validation_fraction", 0.25)
    return load_files(*args, **kwargs)


# ------------------------------------------------------------------------------------------ fixtures
def _cases(seed: int, labels, channels: int = 2, timestamps: bool = False):
    """Per case: a (L_i, C) float64 array (NaN = missing; every time step keeps an observed channel, so no
    step is padding) and its (L_i,) times (rounded, strictly increasing; 0..L-1 without timestamps)."""
    rng = np.random.default_rng(seed)
    seqs, times = [], []
    for _ in labels:
        length = int(rng.integers(3, 9))
        x = np.round(rng.normal(size=(length, channels)), 4)
        holes = rng.random((length, channels)) < 0.25
        holes[np.arange(length), rng.integers(0, channels, size=length)] = False  # one channel observed per step
        x[holes] = np.nan
        seqs.append(x)
        t = np.round(np.cumsum(rng.uniform(0.1, 2.0, size=length)), 4) if timestamps else np.arange(length, dtype=float)
        times.append(t)
    return seqs, times


def _token(value: float, k: int) -> str:
    return ("?" if k % 2 else "NaN") if np.isnan(value) else repr(float(value))


def write_ts(path: Path, seqs, labels, times=None, declared=CLASSES) -> Path:
    """A .ts file of the cases; ``declared=None`` writes a regression file (``@targetLabel true``, the labels
    are then the targets, written as given). Case k is on line 9 + k."""
    label_line = "@targetLabel true" if declared is None else f"@classLabel true {' '.join(declared)}"
    lines = [
        "# written by tests/test_local_files.py",
        "@problemName Toy",
        f"@timeStamps {'true' if times is not None else 'false'}",
        "@missing true",
        f"@dimensions {seqs[0].shape[1]}",
        "@equalLength false",
        label_line,
        "@data",
    ]
    for i, (x, label) in enumerate(zip(seqs, labels)):
        dims = []
        for c in range(x.shape[1]):
            if times is None:
                dims.append(",".join(_token(v, i + k) for k, v in enumerate(x[:, c])))
            else:
                dims.append(",".join(f"({float(times[i][k])!r},{_token(v, i + k)})" for k, v in enumerate(x[:, c])))
        lines.append(":".join(dims) + f":{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_arff(path: Path, seqs, labels, declared=CLASSES) -> Path:
    """The UEA relational ARFF layout; ragged series padded with '?' to the longest, as the archive does.
    ``declared=None`` makes the class attribute numeric: regression targets."""
    width = max(x.shape[0] for x in seqs)
    lines = ["% written by tests/test_local_files.py", "@relation Toy", "@attribute input relational"]
    lines += [f"@attribute t{k} numeric" for k in range(width)]
    target = "numeric" if declared is None else f"{{{','.join(declared)}}}"
    lines += ["@end input", f"@attribute target {target}", "@data"]
    for i, (x, label) in enumerate(zip(seqs, labels)):
        rows = [
            ",".join(_token(v, i + k) for k, v in enumerate(x[:, c])) + ",?" * (width - x.shape[0])
            for c in range(x.shape[1])
        ]
        lines.append("'" + "\\n".join(rows) + f"',{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def toy(tmp_path):
    """TRAIN/TEST .ts files (untimestamped and timestamped) and the arrays written into them."""
    train, train_t = _cases(0, TRAIN_LABELS)
    test, test_t = _cases(1, TEST_LABELS)
    stamped_train, stamped_train_t = _cases(2, TRAIN_LABELS, timestamps=True)
    stamped_test, stamped_test_t = _cases(3, TEST_LABELS, timestamps=True)
    plain, stamped = tmp_path / "plain", tmp_path / "stamped"
    plain.mkdir()
    stamped.mkdir()
    return {
        "train": (train, train_t),
        "test": (test, test_t),
        "stamped_train": (stamped_train, stamped_train_t),
        "stamped_test": (stamped_test, stamped_test_t),
        "train_path": write_ts(plain / "Toy_TRAIN.ts", train, TRAIN_LABELS),
        "test_path": write_ts(plain / "Toy_TEST.ts", test, TEST_LABELS),
        "stamped_train_path": write_ts(stamped / "Toy_TRAIN.ts", stamped_train, TRAIN_LABELS, stamped_train_t),
        "stamped_test_path": write_ts(stamped / "Toy_TEST.ts", stamped_test, TEST_LABELS, stamped_test_t),
        "root": tmp_path,
    }


def _check_written(ds, seqs, times, labels, indices=None):
    """``ds`` holds exactly the written cases (``indices`` of them, in that order), with their times (and
    their class ``labels`` unless None)."""
    indices = range(len(seqs)) if indices is None else indices
    assert len(ds) == len(indices)
    for row, i in enumerate(indices):
        length = seqs[i].shape[0]
        assert int(ds.lengths[row]) == length
        torch.testing.assert_close(
            ds.values[row, :length].double(), torch.as_tensor(seqs[i]), equal_nan=True, rtol=0, atol=1e-6
        )
        assert torch.isnan(ds.values[row, length:]).all()
        torch.testing.assert_close(ds.times[row, :length].double(), torch.as_tensor(times[i]), rtol=1e-6, atol=0)
        if labels is not None:
            assert ds.class_names[int(ds.labels[row])] == labels[i]


def assert_same_dataset(a, b):
    assert a.class_names == b.class_names
    assert torch.equal(a.labels, b.labels) and torch.equal(a.lengths, b.lengths)
    assert a.times.dtype == b.times.dtype and a.values.dtype == b.values.dtype
    torch.testing.assert_close(a.times, b.times, rtol=0, atol=0)
    torch.testing.assert_close(a.values, b.values, rtol=0, atol=0, equal_nan=True)


# ------------------------------------------------------------------------------------------ files
def test_ts_files_keep_their_split_ragged_lengths_and_missing_values(toy):
    train, val, test = load(toy["train_path"], toy["test_path"], validation_fraction=0.25, split_seed=3)
    assert train.class_names == val.class_names == test.class_names == list(CLASSES)
    # the test set is the TEST file, every case in file order
    _check_written(test, *toy["test"], TEST_LABELS)
    assert test.meta["part"] == "test" and test.meta["indices"] == list(range(len(TEST_LABELS)))
    # train and validation partition the TRAIN file; each part's rows are the cases at its indices
    assert sorted(train.meta["indices"] + val.meta["indices"]) == list(range(len(TRAIN_LABELS)))
    _check_written(train, *toy["train"], TRAIN_LABELS, train.meta["indices"])
    _check_written(val, *toy["train"], TRAIN_LABELS, val.meta["indices"])
    # stratified: 3 of 12 with 4 per class is one per class
    assert sorted(val.labels.tolist()) == [0, 1, 2]
    # the split depends on split_seed and nothing else
    again = load(toy["train_path"], toy["test_path"], validation_fraction=0.25, split_seed=3)
    assert again.val.meta["indices"] == val.meta["indices"]
    seeds = {
        tuple(load(toy["train_path"], toy["test_path"], validation_fraction=0.25, split_seed=s).val.meta["indices"])
        for s in range(6)
    }
    assert len(seeds) > 1
    assert test.meta["train_file"] == str(toy["train_path"].resolve()) and test.meta["timestamps"] is False


def test_timestamped_ts_files_keep_their_timestamps(toy):
    train, val, test = load(toy["stamped_train_path"], toy["stamped_test_path"], dtype=torch.float64)
    assert test.times.dtype == torch.float64 and test.meta["timestamps"] is True
    _check_written(test, *toy["stamped_test"], TEST_LABELS)
    _check_written(train, *toy["stamped_train"], TRAIN_LABELS, train.meta["indices"])
    _check_written(val, *toy["stamped_train"], TRAIN_LABELS, val.meta["indices"])


def test_folder_and_arff_forms_equal_the_file_form(toy, tmp_path):
    by_files = load(toy["train_path"], toy["test_path"], split_seed=1)
    by_folder = load(toy["train_path"].parent, split_seed=1)
    arff_dir = tmp_path / "arff"
    arff_dir.mkdir()
    write_arff(arff_dir / "Toy_TRAIN.arff", toy["train"][0], TRAIN_LABELS)
    write_arff(arff_dir / "Toy_TEST.arff", toy["test"][0], TEST_LABELS)
    by_arff = load(arff_dir, split_seed=1)
    by_arff_files = load(arff_dir / "Toy_TRAIN.arff", arff_dir / "Toy_TEST.arff", split_seed=1)
    for other in (by_folder, by_arff, by_arff_files):
        for part, expected in zip(other, by_files):
            assert_same_dataset(part, expected)
            assert part.meta["indices"] == expected.meta["indices"] and part.name == "Toy"
    assert by_arff.test.meta["format"] == "arff"
    # the ARFF padding ('?' up to the longest series) became padding, and that is recorded
    ragged = sum(x.shape[0] < max(y.shape[0] for y in toy["test"][0]) for x in toy["test"][0])
    assert ragged > 0 and by_arff.test.meta["trailing_missing_cut"]["test_file"] == ragged
    # a folder holding both pairs (as the archive's folders do) reads the .ts pair
    for f in ("Toy_TRAIN.ts", "Toy_TEST.ts"):
        (arff_dir / f).write_text((toy["train_path"].parent / f).read_text())
    assert find_split_files(arff_dir)[0].name == "Toy_TRAIN.ts"
    assert load(arff_dir, split_seed=1).test.meta["format"] == "ts"


def test_folder_with_several_datasets_needs_a_name(toy):
    folder = toy["train_path"].parent
    train, test = toy["train"][0], toy["test"][0]
    write_ts(folder / "Other_TRAIN.ts", train, TRAIN_LABELS)
    write_ts(folder / "Other_TEST.ts", test[:2], TEST_LABELS[:2])
    with pytest.raises(ValueError, match=r"several datasets \(Other, Toy\).*name="):
        load(folder)
    assert len(load(folder, name="Other").test) == 2
    assert len(load(folder, name="Toy").test) == len(TEST_LABELS)
    with pytest.raises(FileNotFoundError, match="Missing_TRAIN.ts"):
        load(folder, name="Missing")
    # a folder named like one of its datasets (aeon's PickupGestureWiimoteZ/ beside PickupGestureWiimoteZ_eq) reads it
    named = folder.parent / "Other"
    named.mkdir()
    for f in ("Toy_TRAIN.ts", "Toy_TEST.ts", "Other_TRAIN.ts", "Other_TEST.ts"):
        (named / f).write_text((folder / f).read_text())
    assert len(load(named).test) == 2 and load(named).test.name == "Other"
    assert len(load(named, name="Toy").test) == len(TEST_LABELS)


def test_relative_paths_resolve_against_the_current_directory(toy, monkeypatch):
    monkeypatch.chdir(toy["train_path"].parent)
    rel = load("Toy_TRAIN.ts", "Toy_TEST.ts")
    monkeypatch.chdir(toy["root"])
    assert_same_dataset(rel.test, load("plain").test)
    assert rel.test.meta["test_file"] == str(toy["test_path"].resolve())


def test_declared_class_order_is_kept_and_unused_labels_are_reported(tmp_path):
    seqs, _ = _cases(5, TRAIN_LABELS)
    path = write_ts(tmp_path / "X_TRAIN.ts", seqs, TRAIN_LABELS, declared=("c", "z", "a", "b"))
    ds = read_file(path)
    assert ds.class_names == ["c", "a", "b"]
    assert [ds.class_names[i] for i in ds.labels.tolist()] == TRAIN_LABELS
    assert ds.meta["unused_class_labels"] == ["z"] and ds.meta["declared_class_labels"] == ["c", "z", "a", "b"]
    assert ds.name == "X_TRAIN"


def test_test_label_unseen_in_train_is_an_error(toy, tmp_path):
    bad = write_ts(tmp_path / "Bad_TEST.ts", toy["test"][0], ["a", "b", "d", "a", "c"], declared=("a", "b", "c", "d"))
    with pytest.raises(ValueError, match=r"label\(s\) \['d'\] that no case of the TRAIN file.*case 2"):
        load(toy["train_path"], bad)
    # declared in TRAIN's header but without a TRAIN case: still unseen
    train = write_ts(tmp_path / "T_TRAIN.ts", toy["train"][0], TRAIN_LABELS, declared=("a", "b", "c", "d"))
    with pytest.raises(ValueError, match=r"\['d'\]"):
        load(train, bad)


def test_channel_and_timestamp_mismatches_are_errors(toy, tmp_path):
    three, _ = _cases(7, TEST_LABELS, channels=3)
    wide = write_ts(tmp_path / "Wide_TEST.ts", three, TEST_LABELS)
    with pytest.raises(ValueError, match=r"has 2 channels, the TEST file .*Wide_TEST.ts has 3"):
        load(toy["train_path"], wide)
    with pytest.raises(ValueError, match="has timestamps .* and .* has none"):
        load(toy["stamped_train_path"], toy["test_path"])


def test_bad_arguments_name_the_argument(toy, tmp_path):
    with pytest.raises(ValueError, match="test is required when train is a file"):
        load(toy["train_path"])
    with pytest.raises(ValueError, match="train and test are the same file"):
        load(toy["train_path"], toy["train_path"])
    with pytest.raises(ValueError, match="test must be None when train is a folder"):
        load(toy["train_path"].parent, toy["test_path"])
    with pytest.raises(FileNotFoundError, match="test: .*nothere.ts does not exist"):
        load(toy["train_path"], tmp_path / "nothere.ts")
    # issue 36: a misspelt train path was answered "test is required when train is a file"
    for misspelt in (tmp_path / "Toy_TRAIM.ts", tmp_path / "no-such-folder"):
        with pytest.raises(FileNotFoundError, match=f"train: .*{misspelt.name} does not exist"):
            load(misspelt)
    csv = tmp_path / "x.csv"
    csv.write_text("1,2\n")
    with pytest.raises(ValueError, match="test: .*x.csv is neither a .ts nor an .arff file"):
        load(toy["train_path"], csv)
    with pytest.raises(ValueError, match="validation_fraction must be a number in \\(0, 1\\)"):
        load(toy["train_path"], toy["test_path"], validation_fraction=1.0)
    with pytest.raises(ValueError, match="split_seed must be a non-negative integer"):
        load(toy["train_path"], toy["test_path"], split_seed=-1)
    with pytest.raises(TypeError, match="train must be a path"):
        load(3, toy["test_path"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="holds no <Name>_TRAIN.ts"):
        load(empty)
    # a series with no observed value at all cannot be a sample
    seqs = [x.copy() for x in toy["test"][0]]
    seqs[1][:] = np.nan
    with pytest.raises(ValueError, match="case 1 .* has no observed value at all"):
        load(toy["train_path"], write_ts(tmp_path / "Hole_TEST.ts", seqs, TEST_LABELS))


# ------------------------------------------------------------------------------------------ numpy route
def test_file_route_equals_numpy_route(toy):
    from neuralde_seq.data.formats.arrays import from_arrays

    for key in ("", "stamped_"):
        seqs, times = toy[f"{key}train"]
        by_file = read_file(toy[f"{key}train_path"])
        by_arrays = from_arrays(seqs, TRAIN_LABELS, times=times)
        assert_same_dataset(by_file, by_arrays)
        test_seqs, test_times = toy[f"{key}test"]
        by_files = load(toy[f"{key}train_path"], toy[f"{key}test_path"]).test
        assert_same_dataset(by_files, from_arrays(test_seqs, TEST_LABELS, times=test_times))
        # and back: the file's arrays (what the estimators read) are the numpy route's inputs
        X, y, back_times = by_file.to_arrays()
        assert list(y) == [str(label) for label in TRAIN_LABELS]
        for x, seq, back, ts in zip(X, seqs, back_times, times):
            np.testing.assert_array_equal(x, np.asarray(seq, dtype=np.float32))  # NaN where NaN
            np.testing.assert_array_equal(back, np.asarray(ts, dtype=np.float32))


# ------------------------------------------------------------------------------------------ DataFrames
def _long_frame(seqs, times, labels, ids, seed=0):
    import pandas as pd

    rows = [
        {"id": ids[i], "time": t, "ch0": x[k, 0], "ch1": x[k, 1], "label": labels[i]}
        for i, (x, ts) in enumerate(zip(seqs, times))
        for k, t in enumerate(ts)
    ]
    frame = pd.DataFrame(rows)
    return frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)  # rows in no particular order


def test_long_dataframe_equals_numpy_route(toy):
    import pandas as pd

    from neuralde_seq.data.formats.arrays import from_arrays
    from neuralde_seq.data.formats.dataframes import from_long_dataframe

    seqs, times = toy["stamped_train"]
    ids = [f"s{i:02d}" for i in range(len(seqs))]
    frame = _long_frame(seqs, times, TRAIN_LABELS, ids)
    order = [int(i[1:]) for i in pd.unique(frame["id"])]  # samples in order of first appearance
    expected = from_arrays([seqs[i] for i in order], [TRAIN_LABELS[i] for i in order], times=[times[i] for i in order])
    wide = from_long_dataframe(frame, label_column="label")
    assert_same_dataset(wide, expected)
    assert wide.meta["ids"] == [ids[i] for i in order] and wide.meta["channels"] == ["ch0", "ch1"]
    assert wide.class_names == list(CLASSES)

    # tsfresh's stacked layout (NaN rows left out, as a melted frame has them) with labels as a Series by id
    stacked = (
        frame.melt(id_vars=["id", "time"], value_vars=["ch1", "ch0"], var_name="kind", value_name="value")
        .dropna(subset=["value"])
        .sample(frac=1.0, random_state=1)
    )
    y = pd.Series(dict(zip(ids, TRAIN_LABELS)))
    from_stacked = from_long_dataframe(stacked, kind_column="kind", value_column="value", labels=y)
    order = [int(i[1:]) for i in pd.unique(stacked["id"])]
    expected = from_arrays([seqs[i] for i in order], [TRAIN_LABELS[i] for i in order], times=[times[i] for i in order])
    assert_same_dataset(from_stacked, expected)
    assert from_stacked.meta["channels"] == ["ch0", "ch1"]  # sorted kinds

    # no time column: each id's rows in frame order are its steps 0..L-1
    in_order = _long_frame(seqs, times, TRAIN_LABELS, ids).sort_values(["id", "time"], kind="stable")
    indexed = from_long_dataframe(in_order.drop(columns="time"), time_column=None, label_column="label")
    assert_same_dataset(indexed, from_arrays(seqs, TRAIN_LABELS, times=[np.arange(len(t), dtype=float) for t in times]))


def test_long_dataframe_errors_name_the_problem(toy, monkeypatch):
    import pandas as pd

    from neuralde_seq.data.formats.dataframes import from_long_dataframe

    seqs, times = toy["stamped_train"]
    frame = _long_frame(seqs, times, TRAIN_LABELS, list(range(len(seqs))))
    with pytest.raises(ValueError, match=r"id 3 has several rows at time"):
        from_long_dataframe(pd.concat([frame, frame[frame["id"] == 3].head(1)]), label_column="label")
    varied = frame.copy()
    varied.loc[varied.index[varied["id"] == 2][0], "label"] = "c"
    with pytest.raises(ValueError, match=r"label_column 'label' varies within id 2"):
        from_long_dataframe(varied, label_column="label")
    with pytest.raises(KeyError, match=r"time_column='t' is not a column"):
        from_long_dataframe(frame, time_column="t", label_column="label")
    with pytest.raises(
        TypeError,
        match=r"column 'label' holds .* not numbers: it was taken as a channel because "
        r"value_columns was not given.* pass label_column='label'",
    ):
        from_long_dataframe(frame)  # the label column taken as a channel
    infinite = frame.copy()
    infinite.loc[4, "ch1"] = np.inf
    with pytest.raises(ValueError, match=r"value_columns 'ch1' has an infinite entry"):
        from_long_dataframe(infinite, label_column="label")
    no_time = frame.copy()
    no_time.loc[0, "time"] = np.nan
    with pytest.raises(ValueError, match=r"time_column 'time' has a missing or infinite entry"):
        from_long_dataframe(no_time, label_column="label")
    with pytest.raises(ValueError, match=r"ids without a label \[11\]"):
        from_long_dataframe(frame.drop(columns="label"), labels={i: "a" for i in range(11)})
    empty = frame.copy()
    empty.loc[empty["id"] == 5, ["ch0", "ch1"]] = np.nan
    with pytest.raises(ValueError, match=r"id 5 has no observed value"):
        from_long_dataframe(empty, label_column="label")
    monkeypatch.setitem(sys.modules, "pandas", None)  # pandas not installed
    with pytest.raises(ImportError, match="pip install pandas"):
        from_long_dataframe(frame, label_column="label")


# ------------------------------------------------------------------------------------------ the files task
def test_files_task_standardises_and_drops_independently_of_the_split(toy):
    folder = str(toy["train_path"].parent)
    data = load_task("files", path=folder, drop_rate=0.3, validation_fraction=0.25)
    train, val, test = data.splits
    assert [len(train), len(val), len(test)] == [9, 3, 5]
    assert [test.class_names[i] for i in test.labels.tolist()] == TEST_LABELS
    for c in range(train.num_channels):  # standardised with the training part's observed values
        x = train.values[..., c].double()
        x = x[~torch.isnan(x)]
        assert abs(x.mean().item()) < 1e-6 and abs(x.std(unbiased=False).item() - 1) < 1e-6
    # each TRAIN case loses num_dropped time points, the same ones whatever split_seed carves the validation
    raw = {
        s: local_files_splits(path=folder, drop_rate=0.3, validation_fraction=0.25, split_seed=s, dtype=torch.float64)
        for s in (0, 1)
    }
    assert raw[0].val.meta["indices"] != raw[1].val.meta["indices"]
    masks = {}
    for splits in raw.values():
        for part in splits[:2]:
            for row, i in enumerate(part.meta["indices"]):
                masks.setdefault(i, []).append(torch.isnan(part.values[row]))
    seqs = toy["train"][0]
    for i, (a, b) in masks.items():
        assert torch.equal(a, b)
        length = seqs[i].shape[0]
        written = torch.as_tensor(np.isnan(seqs[i]).all(axis=1))  # no step of the fixture is all-missing
        dropped = int(a[:length].all(dim=1).sum()) - int(written.sum())
        assert dropped == num_dropped(0.3, length)
    # the test set is dropped too, its samples unchanged
    plain = local_files_splits(path=folder, validation_fraction=0.25).test
    assert torch.equal(raw[0].test.lengths, plain.lengths)
    assert torch.isnan(raw[0].test.values).sum() > torch.isnan(plain.values).sum()


def test_files_task_options_are_checked_when_the_config_is_parsed():
    from neuralde_seq.training.config import ConfigError, parse_config

    base = {
        "name": "x",
        "task": "files",
        "training": {"epochs": 1, "lr": 1e-3, "batch_size": 4},
        "models": [{"model": "gru-d"}],
    }
    for options, message in (
        ({"train": "a.ts"}, "missing: test"),
        ({"path": "d", "train": "a.ts", "test": "b.ts"}, "either path .* or train and test"),
        ({}, "missing: train, test"),
        ({"path": 3}, "option path must be a non-empty path string"),
    ):
        with pytest.raises(ConfigError, match=rf"task_options \(task files\): .*{message}"):
            parse_config({**base, "task_options": options})
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config({**base, "task_options": {"path": "d", "folder": "d"}})
    assert parse_config({**base, "task_options": {"path": "d", "drop_rate": 0.5}}).task == "files"


def test_example_config_trains_one_step_on_the_embedded_files(tmp_path, monkeypatch):
    from neuralde_seq.training.runner import run_benchmark

    monkeypatch.chdir(ROOT)  # the config's paths are relative to the repository root
    results = run_benchmark(
        EXAMPLE_CONFIG, out_dir=tmp_path, overrides=["training.epochs=1"], models=["GRU-D"], max_steps=1, progress=False
    )
    assert [row["label"] for row in results["rows"]] == ["GRU-D"]
    (result_file,) = (tmp_path / "runs" / "GRU-D").glob("seed0-*/result.json")
    result = json.loads(result_file.read_text())
    assert result["smoke"] and result["data"]["task"] == "files"
    assert result["data"]["num_test"] == 370 and result["metrics"]["test"]["num_samples"] == 370
    assert result["data"]["num_train"] + result["data"]["num_val"] == 270
    assert result["data"]["classes"] == 9 and result["data"]["channels"] == 12
    # the test set is the official TEST file, in order
    import yaml

    options = yaml.safe_load(EXAMPLE_CONFIG.read_text())["task_options"]
    test = load_task("files", **options).splits.test
    official = load_japanese_vowels()[1]
    assert torch.equal(test.labels, official.labels) and torch.equal(test.lengths, official.lengths)


# ------------------------------------------------------------------------------------------ regression files
# Real targets as written in the files (mixed notations); the datasets must hold float(text) exactly.
TRAIN_TARGETS = ["0.5", "-1.25", "3", "1e-3", "2.5E+2", "-0.0", "7.125", "0.1", "-3.75", "12", "0.3333", "-8.5"]
TEST_TARGETS = ["4.5", "-2", "0.0625", "1.5e1", "-0.7"]


def _floats(texts) -> torch.Tensor:
    return torch.tensor([float(t) for t in texts], dtype=torch.float64)


@pytest.fixture
def reg(tmp_path):
    """A ragged regression (@targetLabel true) TRAIN/TEST .ts pair with NaN values, and what was written."""
    train, train_t = _cases(10, TRAIN_TARGETS)
    test, test_t = _cases(11, TEST_TARGETS)
    folder = tmp_path / "reg"
    folder.mkdir()
    return {
        "train": (train, train_t),
        "test": (test, test_t),
        "train_path": write_ts(folder / "Reg_TRAIN.ts", train, TRAIN_TARGETS, declared=None),
        "test_path": write_ts(folder / "Reg_TEST.ts", test, TEST_TARGETS, declared=None),
    }


def test_regression_file_reads_real_targets_not_classes(reg, tmp_path):
    from neuralde_seq.data import from_ts, read_ts

    ds = read_file(reg["train_path"], dtype=torch.float64)
    assert ds.labels is None and ds.class_names == [] and ds.num_classes == 0
    assert ds.targets.dtype == torch.float64 and torch.equal(ds.targets, _floats(TRAIN_TARGETS))
    _check_written(ds, *reg["train"], None)
    assert any(np.isnan(x).any() for x in reg["train"][0])  # the fixture has missing values to keep
    assert read_file(reg["train_path"]).targets.dtype == torch.float32  # the default dtype applies to targets
    # the numpy form the estimators read: y is the float64 targets
    X, y, times = ds.to_arrays()
    assert y.dtype == np.float64 and y.shape == (len(TRAIN_TARGETS),)
    np.testing.assert_array_equal(y, _floats(TRAIN_TARGETS).numpy())
    for x, seq in zip(X, reg["train"][0]):
        np.testing.assert_array_equal(x, seq)
    # subset, to and replace carry the targets
    sub = ds.subset([4, 0, 11])
    assert torch.equal(sub.targets, _floats(TRAIN_TARGETS)[[4, 0, 11]]) and sub.labels is None
    sub.targets[0] = 99.0
    assert float(ds.targets[4]) == float(TRAIN_TARGETS[4])  # a copy
    small = ds.to(dtype=torch.float32)
    assert small.targets.dtype == torch.float32 and small.values.dtype == torch.float32
    torch.testing.assert_close(small.targets, _floats(TRAIN_TARGETS).float(), rtol=0, atol=0)
    assert torch.equal(ds.replace(name="x").targets, ds.targets)
    # the .ts parser's own route (from_ts) and a timestamped regression file agree
    assert torch.equal(from_ts(read_ts(reg["train_path"]), dtype=torch.float64).targets, ds.targets)
    stamped, stamped_t = _cases(12, TEST_TARGETS, timestamps=True)
    timed = read_file(
        write_ts(tmp_path / "Timed.ts", stamped, TEST_TARGETS, stamped_t, declared=None), dtype=torch.float64
    )
    assert torch.equal(timed.targets, _floats(TEST_TARGETS)) and timed.meta["timestamps"] is True
    _check_written(timed, stamped, stamped_t, None)
    # a 2-channel relational ARFF with a numeric class attribute reads the same targets
    by_arff = read_file(
        write_arff(tmp_path / "Reg.arff", *reg["train"][:1], TRAIN_TARGETS, declared=None), dtype=torch.float64
    )
    assert by_arff.labels is None and torch.equal(by_arff.targets, ds.targets)
    torch.testing.assert_close(by_arff.values, ds.values, rtol=0, atol=0, equal_nan=True)


def test_regression_files_keep_the_test_file_and_split_train_at_random(reg):
    from sklearn.model_selection import train_test_split

    train, val, test = load(
        reg["train_path"], reg["test_path"], validation_fraction=0.25, split_seed=3, dtype=torch.float64
    )
    for part in (train, val, test):
        assert part.labels is None and part.class_names == [] and part.targets.dtype == torch.float64
    # the test set is the TEST file, whole and in order
    assert test.meta["indices"] == list(range(len(TEST_TARGETS)))
    assert torch.equal(test.targets, _floats(TEST_TARGETS))
    _check_written(test, *reg["test"], None)
    # train and validation partition the TRAIN file; each row's targets and values are its case's
    assert sorted(train.meta["indices"] + val.meta["indices"]) == list(range(len(TRAIN_TARGETS)))
    for part in (train, val):
        assert torch.equal(part.targets, _floats(TRAIN_TARGETS)[part.meta["indices"]])
        _check_written(part, *reg["train"], None, part.meta["indices"])
    # the classification path's split sizes and seed, unstratified
    _, expected = train_test_split(np.arange(len(TRAIN_TARGETS)), train_size=0.75, random_state=3, shuffle=True)
    assert val.meta["indices"] == sorted(expected.tolist()) and len(val) == 3
    assert load(reg["train_path"], reg["test_path"], split_seed=3).val.meta["indices"] == val.meta["indices"]
    seeds = {tuple(load(reg["train_path"], reg["test_path"], split_seed=s).val.meta["indices"]) for s in range(6)}
    assert len(seeds) > 1
    assert load(reg["train_path"].parent, split_seed=3).test.name == "Reg"  # the folder form too


def test_regression_beside_class_labels_is_an_error(reg, toy):
    with pytest.raises(
        ValueError,
        match=r"TRAIN file .*Reg_TRAIN.ts holds regression targets .* TEST file "
        r".*Toy_TEST.ts holds class labels",
    ):
        load(reg["train_path"], toy["test_path"])
    with pytest.raises(
        ValueError,
        match=r"TRAIN file .*Toy_TRAIN.ts holds class labels .* TEST file "
        r".*Reg_TEST.ts holds regression targets",
    ):
        load(toy["train_path"], reg["test_path"])


@pytest.mark.parametrize(
    "target, message",
    [
        ("abc", "target 'abc' is not a number"),
        ("?", "target '?' is not a number"),
        ("NaN", "target 'NaN' is not a finite number"),
        ("-inf", "target '-inf' is not a finite number"),
    ],
)
def test_bad_regression_target_names_file_and_line(reg, tmp_path, target, message):
    seqs, _ = reg["test"]
    path = write_ts(tmp_path / "Bad_TEST.ts", seqs, TEST_TARGETS[:3] + [target] + TEST_TARGETS[4:], declared=None)
    with pytest.raises(ValueError, match=rf"Bad_TEST.ts, line 12: {re.escape(message)}"):  # case 3: line 9 + 3
        read_file(path)
    with pytest.raises(ValueError, match=rf"Bad_TEST.ts, line 12: {re.escape(message)}"):
        load(reg["train_path"], path)


def test_header_with_class_labels_and_targets_and_flat_numeric_arff_are_refused(reg, tmp_path):
    text = reg["train_path"].read_text().replace("@targetLabel true", "@targetLabel true\n@classLabel true a b")
    both = tmp_path / "Both.ts"
    both.write_text(text)
    with pytest.raises(ValueError, match=r"Both.ts, line 7: @targetLabel true .* beside @classLabel true on line 8"):
        read_file(both)
    flat = tmp_path / "Flat.arff"  # a numeric last attribute of a flat file may be a time step: not a target
    flat.write_text(
        "@relation r\n@attribute t0 numeric\n@attribute t1 numeric\n@attribute y numeric\n@data\n1,2,0.5\n3,4,1.5\n"
    )
    with pytest.raises(
        ValueError,
        match=r"Flat.arff, line 5: the last attribute must be the nominal class .*"
        r"use its .ts file with @targetLabel true",
    ):
        read_file(flat)


def test_files_task_refuses_regression_files(reg):
    message = (
        r"classification benchmark, but .*Reg_TRAIN.ts and .*Reg_TEST.ts are regression files.*"
        r"neuralde_seq.load_files / neuralde_seq.data.read_file.*SequenceRegressor.*Regression\(\)"
    )
    with pytest.raises(ValueError, match=message):
        local_files_splits(train=str(reg["train_path"]), test=str(reg["test_path"]))
    with pytest.raises(ValueError, match=message):
        load_task("files", path=str(reg["train_path"].parent), validation_fraction=0.25)


def test_bad_targets_tensors_name_targets(reg):
    ds = read_file(reg["train_path"], dtype=torch.float64)
    n = len(ds)
    with pytest.raises(ValueError, match=r"targets must have shape \(N,\) or \(N, K\) with N = 12 .* got \(11,\)"):
        ds.replace(targets=torch.zeros(n - 1, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"targets must be a floating point tensor .* torch.int64"):
        ds.replace(targets=torch.arange(n))
    bad = torch.zeros(n, 2, dtype=torch.float64)
    bad[5, 1] = float("nan")
    with pytest.raises(ValueError, match=r"targets must be finite; sample 5 has \[0.0, nan\]"):
        ds.replace(targets=bad)
    with pytest.raises(ValueError, match=r"labels and targets are both given"):
        ds.replace(labels=torch.zeros(n, dtype=torch.long), class_names=["a"])
    # (N, K) targets are valid, and to_arrays returns them as (N, K) float64
    two = ds.replace(targets=torch.stack([ds.targets, -ds.targets], dim=1).float())
    y = two.to_arrays()[1]
    assert y.shape == (n, 2) and y.dtype == np.float64
    np.testing.assert_array_equal(y[:, 1], -_floats(TRAIN_TARGETS).float().double().numpy())
    # a regression dataset cannot be stratified
    with pytest.raises(ValueError, match=r"stratified_split needs labels, but the dataset holds regression targets"):
        from neuralde_seq.data import stratified_split

        stratified_split(ds, (0.5, 0.5), seed=0)


def test_sequence_regressor_fits_a_regression_file(reg):
    from neuralde_seq.sklearn import SequenceRegressor

    X, y, times = read_file(reg["train_path"]).to_arrays()
    model = SequenceRegressor("gru-dt", epochs=2, batch_size=8, random_state=0).fit(X, y, times=times)
    X_test, y_test, t_test = read_file(reg["test_path"]).to_arrays()
    predicted = model.predict(X_test, times=t_test)
    assert predicted.shape == y_test.shape == (len(TEST_TARGETS),) and np.isfinite(predicted).all()
    assert model.n_outputs_ == 1 and model.target_mean_[0] == pytest.approx(_floats(TRAIN_TARGETS).mean().item())


def test_a_timestamped_step_with_nothing_observed_is_kept_not_cut(tmp_path):
    # with timestamps every step is a real time point (nothing is padding): the file reads as from_arrays does
    from neuralde_seq.data import from_arrays

    nan = float("nan")
    seqs = [np.array([[1.0, 2.0], [nan, 3.0], [4.0, nan], [nan, nan]]), np.array([[0.5, 1.5], [2.5, nan]])]
    times = [np.array([0.0, 0.7, 1.1, 2.0]), np.array([0.0, 3.0])]
    path = write_ts(tmp_path / "stamped.ts", seqs, ["a", "b"], times=times)
    data = read_file(path, dtype=torch.float64)
    assert data.lengths.tolist() == [4, 2] and data.meta["trailing_missing_cut"] == 0
    expected = from_arrays(seqs, ["a", "b"], times=times, dtype=torch.float64)
    assert torch.equal(data.times[0], expected.times[0]) and data.times[0, 3] == 2.0
    assert torch.equal(data.values.isnan(), expected.values.isnan())
    assert torch.equal(data.values.nan_to_num(), expected.values.nan_to_num())
    # without timestamps the same tail is the archive's padding, cut and counted
    untimed = read_file(write_ts(tmp_path / "untimed.ts", seqs, ["a", "b"]), dtype=torch.float64)
    assert untimed.lengths.tolist() == [3, 2] and untimed.meta["trailing_missing_cut"] == 1
