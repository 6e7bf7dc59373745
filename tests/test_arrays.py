"""Tests of numpy input (neuralde_seq.data.formats.arrays), unlabelled datasets and stratified splits of small
classes."""

import warnings

import numpy as np
import pytest
import scipy.sparse
import torch
from sklearn.model_selection import train_test_split

from neuralde_seq.data import (
    IrregularDataset,
    from_arrays,
    from_concatenated,
    pad_sequences,
    standardise,
    stratified_split,
)

nan = np.nan


# ---------------------------------------------------------------------------------------- pad_sequences
def test_ragged_lists_are_padded_by_the_dataset_convention():
    a = np.array([[1.0, 2.0], [nan, 3.0], [4.0, nan]])
    b = np.array([[5.0, 6.0]])
    c = np.array([[7.0, 8.0], [9.0, 10.0]])
    times, values, lengths = pad_sequences(
        [a, b, c], [np.array([0.0, 0.5, 2.0]), np.array([3.0]), np.array([-1.0, 1.0])]
    )
    assert lengths.tolist() == [3, 1, 2] and lengths.dtype == torch.long
    assert values.shape == (3, 3, 2) and values.dtype == torch.float32
    np.testing.assert_array_equal(values[0].numpy(), a)
    np.testing.assert_array_equal(values[1, 0].numpy(), b[0])
    assert torch.isnan(values[1, 1:]).all() and torch.isnan(values[2, 2:]).all()
    # times as given, then the grid continues with the last step's spacing (1 for a one-point sample)
    np.testing.assert_allclose(times.numpy(), [[0.0, 0.5, 2.0], [3.0, 4.0, 5.0], [-1.0, 1.0, 3.0]])
    # the default times are the observation index
    default, _, _ = pad_sequences([a, b, c])
    np.testing.assert_array_equal(default.numpy(), [[0, 1, 2], [0, 1, 2], [0, 1, 2]])
    # the result is a valid dataset (IrregularDataset checks the convention)
    IrregularDataset(times, values, lengths, torch.zeros(3, dtype=torch.long), ["only"])


def test_univariate_forms_agree():
    rows = np.array([[1.0, nan, 3.0], [4.0, 5.0, 6.0]])
    from_2d = pad_sequences(rows)
    from_1d_list = pad_sequences([rows[0], rows[1]])
    from_column_list = pad_sequences([rows[0][:, None], rows[1][:, None]])
    from_nested_lists = pad_sequences(rows.tolist())
    for other in (from_1d_list, from_column_list, from_nested_lists):
        for x, y in zip(from_2d, other):
            torch.testing.assert_close(x, y, equal_nan=True)
    assert from_2d[1].shape == (2, 3, 1)


def test_3d_array_keeps_trailing_nan_rows_unless_lengths_are_given():
    x = np.arange(16, dtype=float).reshape(2, 4, 2)
    x[1, 2:] = nan  # unobserved steps at the end: not padding
    times = np.array([[0.0, 1.0, 2.0, 3.0], [0.0, 2.0, 5.0, 50.0]])
    t, v, n = pad_sequences(x, times)
    assert n.tolist() == [4, 4]
    np.testing.assert_array_equal(t[1].numpy(), times[1])
    # explicit lengths: what follows is padding, ignored in values and times alike
    x[1, 2:] = 99.0
    t, v, n = pad_sequences(x, times, lengths=[4, 2])
    assert n.tolist() == [4, 2]
    assert torch.isnan(v[1, 2:]).all()
    np.testing.assert_array_equal(t[1].numpy(), [0.0, 2.0, 4.0, 6.0])
    with pytest.raises(ValueError, match=r"lengths\[1\] = 5 must lie in \[1, 4\]"):
        pad_sequences(x, lengths=[4, 5])
    with pytest.raises(ValueError, match=r"lengths must have shape \(2,\)"):
        pad_sequences(x, lengths=[4])


def test_concatenated_frames_equal_the_list_form():
    rng = np.random.default_rng(0)
    samples = [rng.normal(size=(k, 3)) for k in (4, 1, 6)]
    samples[2][2, 1] = nan
    sample_times = [np.cumsum(rng.uniform(0.1, 1.0, s.shape[0])) for s in samples]
    expected = pad_sequences(samples, sample_times)
    got = from_concatenated(np.concatenate(samples), [4, 1, 6], np.concatenate(sample_times))
    for x, y in zip(expected, got):
        torch.testing.assert_close(x, y, equal_nan=True)
    univariate = from_concatenated(np.arange(5.0), np.array([2, 3]))
    np.testing.assert_array_equal(univariate[1][1, :, 0].numpy(), [2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="lengths sum to 10 but frames holds 11"):
        from_concatenated(np.zeros((11, 3)), [4, 6])
    with pytest.raises(ValueError, match=r"lengths\[1\] = 0"):
        from_concatenated(np.zeros((4, 3)), [4, 0])
    with pytest.raises(ValueError, match=r"times must have shape \(11,\)"):
        from_concatenated(np.zeros((11, 3)), [5, 6], times=np.arange(10.0))


def test_times_are_checked_per_sample():
    x = [np.ones((3, 2)), np.ones((4, 2))]
    with pytest.raises(
        ValueError,
        match=r"times\[1\] must be strictly increasing: times\[1\]\[1\] = 2.0 >= "
        r"times\[1\]\[2\] = 2.0",
    ):
        pad_sequences(x, [np.arange(3.0), np.array([0.0, 2.0, 2.0, 3.0])])
    with pytest.raises(ValueError, match=r"times\[0\] must have shape \(3,\).*got shape \(4,\)"):
        pad_sequences(x, [np.arange(4.0), np.arange(4.0)])
    with pytest.raises(ValueError, match="times holds 1 time arrays but sequences holds 2"):
        pad_sequences(x, [np.arange(3.0)])
    with pytest.raises(ValueError, match=r"times\[0\] holds a non-finite time"):
        pad_sequences(x, [np.array([0.0, nan, 2.0]), np.arange(4.0)])
    # float32 cannot tell these times apart: refused with advice instead of a silently flat grid
    with pytest.raises(
        ValueError,
        match=r"times of sequences\[0\] at steps 0 and 1 \(1000000000.0 and 1000000001.0\) "
        r"are distinct but become equal in torch.float32 .*use dtype=torch.float64",
    ):
        pad_sequences([np.ones((2, 1))], [np.array([1e9, 1e9 + 1])])
    t, _, _ = pad_sequences([np.ones((2, 1))], [np.array([1e9, 1e9 + 1])], dtype=torch.float64)
    assert t[0, 1] - t[0, 0] == 1.0


@pytest.mark.parametrize(
    "sequences, error, match",
    [
        ([np.ones((2, 2)), np.full((3, 2), nan)], ValueError, r"sequences\[1\] has no observed value"),
        (
            [np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 3))],
            ValueError,
            r"sequences\[2\] has 3 channel\(s\) but "
            r"sequences\[0\] has 2",
        ),
        (np.ones(5), ValueError, "1-D array of 5 numbers"),
        (np.ones((2, 3, 4, 5)), ValueError, "4 dimensions"),
        ([np.ones((2, 3, 4))], ValueError, r"sequences\[0\] must be a \(T_i, C\) array"),
        ([np.ones((2, 1)), np.array([[1.0], [np.inf]])], ValueError, r"sequences\[1\] holds an infinite value"),
        ([np.ones((2, 1)), np.zeros((0, 1))], ValueError, r"sequences\[1\] has no time step"),
        ([], ValueError, "holds no sequence"),
        (np.ones((2, 3)) + 1j, ValueError, "Complex data not supported"),
        (scipy.sparse.csr_matrix(np.ones((2, 3))), TypeError, "sparse"),
        ([np.array([["a", "b"]])], ValueError, r"sequences\[0\] must hold numbers"),
        ([np.array([{"a": 1}], dtype=object)], TypeError, r"sequences\[0\] must hold numbers"),
        ("abc", TypeError, "got str"),
    ],
)
def test_bad_sequences_raise_naming_the_sample(sequences, error, match):
    with pytest.raises(error, match=match):
        pad_sequences(sequences)


def test_dtype_must_be_floating():
    with pytest.raises(ValueError, match="dtype must be a floating point torch.dtype"):
        pad_sequences([np.ones((2, 1))], dtype=torch.int64)
    t, v, _ = pad_sequences([np.ones((2, 1))], dtype=torch.float64)
    assert t.dtype == v.dtype == torch.float64


# ---------------------------------------------------------------------------------------- from_arrays
def _samples():
    rng = np.random.default_rng(1)
    return [rng.normal(size=(k, 2)) for k in (3, 5, 2, 4)]


def test_from_arrays_equals_the_dataset_constructor():
    samples = _samples()
    times = [np.cumsum(np.full(s.shape[0], 0.5)) for s in samples]
    ds = from_arrays(samples, ["b", "a", "b", "c"], times=times, name="toy")
    reference = IrregularDataset.from_sequences(
        [s.T for s in samples], ["b", "a", "b", "c"], ["a", "b", "c"], times=times, name="toy"
    )
    for field in ("times", "values", "lengths", "labels"):
        torch.testing.assert_close(getattr(ds, field), getattr(reference, field), equal_nan=True)
    assert ds.class_names == ["a", "b", "c"] and ds.name == "toy"


@pytest.mark.parametrize("labels", [["b", "a", "b", "c"], np.array([30, 10, 30, 20]), None])
def test_to_arrays_gives_back_what_from_arrays_read(labels):
    samples = _samples()
    samples[1][2, 0] = nan  # a missing value stays missing
    times = [np.cumsum(np.random.default_rng(i).uniform(0.1, 2.0, s.shape[0])) for i, s in enumerate(samples)]
    ds = from_arrays(
        samples, labels, times=times, class_names=None if labels is not None else ["a", "b"], dtype=torch.float64
    )
    X, y, back_times = ds.subset([0, 1, 2, 3]).to_arrays()
    assert len(X) == len(samples) and len(back_times) == len(samples)
    for x, s, t, t0 in zip(X, samples, back_times, times):
        np.testing.assert_array_equal(x, np.asarray(s, dtype=np.float64).reshape(len(t0), -1))  # NaN where NaN
        np.testing.assert_array_equal(t, t0)
    if labels is None:
        assert y is None
    else:
        assert list(y) == list(labels)
        assert y.dtype == np.int64 if isinstance(labels, np.ndarray) else isinstance(y[0], str)
        rebuilt = from_arrays(X, y, times=back_times, dtype=torch.float64)
        for field in ("times", "values", "lengths", "labels"):
            torch.testing.assert_close(getattr(rebuilt, field), getattr(ds, field), equal_nan=True)


def test_labels_map_to_sorted_indices_and_back():
    samples = _samples()
    labels = np.array([30, 10, 30, 20])
    ds = from_arrays(samples, labels)
    assert ds.labels.tolist() == [2, 0, 2, 1]
    assert ds.meta["classes"] == [10, 20, 30] and all(type(c) is int for c in ds.meta["classes"])
    assert ds.class_names == ["10", "20", "30"]
    # a prediction k maps back to meta["classes"][k]
    assert [ds.meta["classes"][k] for k in ds.labels.tolist()] == labels.tolist()
    # class_names fixes the order (and may hold classes without a sample)
    ds = from_arrays(samples, ["x", "y", "x", "x"], class_names=["y", "x", "z"])
    assert ds.labels.tolist() == [1, 0, 1, 1] and ds.class_names == ["y", "x", "z"]


@pytest.mark.parametrize(
    "labels, class_names, match",
    [
        (["a", "b", "a"], None, "labels has 3 entries but there are 4 sequences"),
        (["a", None, "a", "b"], None, r"labels\[1\] is missing"),
        ([1.0, nan, 1.0, 2.0], None, r"labels\[1\] is missing"),
        (["a", 1, "a", 1], None, "labels mix types that cannot be sorted"),
        (["a", "b", "a", "q"], ["a", "b"], r"1 label\(s\) are not in class_names.*labels\[3\] = 'q'"),
        (["a", "b", "a", "b"], ["a", "b", "a"], "class_names lists 'a' twice"),
        (np.array([["a"], ["b"], ["a"], ["b"]]), None, r"labels must be 1-D"),
        ([["a"], ["b"], ["a"], ["b"]], None, r"labels\[0\] = \['a'\] is not hashable"),
    ],
)
def test_bad_labels_raise(labels, class_names, match):
    with pytest.raises(ValueError, match=match):
        from_arrays(_samples(), labels, class_names=class_names)


def test_unlabelled_dataset_for_prediction():
    ds = from_arrays(_samples(), class_names=["a", "b"])
    assert ds.labels is None and ds.class_names == ["a", "b"] and len(ds) == 4
    sub = ds.subset([2, 0])
    assert sub.labels is None and sub.lengths.tolist() == [2, 3]
    (scaled,) = standardise(ds.to(dtype=torch.float64))
    assert scaled.labels is None and scaled.values.dtype == torch.float64
    assert ds.observations.values.shape == (4, 5, 2)
    with pytest.raises(ValueError, match="stratified_split needs labels"):
        stratified_split(ds, (0.5, 0.5), seed=0)


# ---------------------------------------------------------------------------------------- splits
def _labelled(counts):
    labels = np.repeat(np.arange(len(counts)), counts)
    rng = np.random.default_rng(0)
    samples = [rng.normal(size=(3, 1)) for _ in labels]
    return from_arrays(samples, [f"class{k}" for k in labels])


def test_stratifiable_splits_are_unchanged_and_silent():
    ds = _labelled([6, 9, 5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (_, a), (_, b) = stratified_split(ds, (0.75, 0.25), seed=4, return_indices=True)
    take, rest = train_test_split(
        np.arange(len(ds)), train_size=0.75, stratify=ds.labels.numpy(), random_state=4, shuffle=True
    )
    np.testing.assert_array_equal(a, np.sort(take))
    np.testing.assert_array_equal(b, np.sort(rest))


def test_more_classes_than_a_part_holds_falls_back_to_a_random_split():
    ds = _labelled([4] * 10)  # 40 samples, 10 classes: a 20 % part of 8 cannot hold every class
    with pytest.warns(
        UserWarning,
        match=r"cannot stratify 40 samples into parts of 32 and 8.*a part of 8 samples "
        r"cannot hold one of each of the 10 classes",
    ):
        (_, a), (_, b) = stratified_split(ds, (0.8, 0.2), seed=1, return_indices=True)
    assert len(a) == 32 and len(b) == 8
    assert sorted(np.concatenate([a, b]).tolist()) == list(range(40))
    with pytest.warns(UserWarning):
        (_, a2), _ = stratified_split(ds, (0.8, 0.2), seed=1, return_indices=True)
    np.testing.assert_array_equal(a, a2)  # reproducible


def test_singleton_class_is_named_in_the_warning():
    ds = _labelled([10, 10, 1])
    with pytest.warns(UserWarning, match=r"class\(es\) with fewer than 2 samples: 'class2' \(1 sample\)"):
        parts = stratified_split(ds, (0.7, 0.15, 0.15), seed=0, return_indices=True)
    indices = np.concatenate([p[1] for p in parts])
    assert sorted(indices.tolist()) == list(range(21))
    assert [len(p[1]) for p in parts] == [14, 3, 4]
