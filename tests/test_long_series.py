"""`concatenated`: long series made of a classification set's own series, each continued by series of its class."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralde_seq.data import IrregularDataset, concatenated
from neuralde_seq.data.transforms import concatenated as exported


def small_dataset() -> IrregularDataset:
    """Six series of lengths 3-6 (two classes, a NaN in one, uneven times), each with values unique to it."""
    rng = np.random.default_rng(0)
    lengths = [3, 5, 4, 6, 5, 3]
    series = [rng.standard_normal((2, n)) + 10 * i for i, n in enumerate(lengths)]
    series[1][0, 2] = np.nan
    times = [np.cumsum(rng.uniform(0.5, 2.0, n)) + 3 * i for i, n in enumerate(lengths)]
    return IrregularDataset.from_sequences(series, [0, 1, 0, 1, 0, 1], ["a", "b"], times, dtype=torch.float64)


def pieces(data: IrregularDataset, result: IrregularDataset, i: int) -> list[int]:
    """The originals that series ``i`` of ``result`` is made of, found by matching values and time steps piece by
    piece (each must be a whole series of ``data``, except the last, which may be its first points)."""
    values, times = result.values[i].numpy(), result.times[i].numpy()
    found, start = [], 0
    while start < len(values):
        for j in range(len(data)):
            n = min(int(data.lengths[j]), len(values) - start)
            original_v = data.values[j, :n].numpy()
            original_t = data.times[j, :n].numpy()
            if np.allclose(values[start : start + n], original_v, equal_nan=True, rtol=0, atol=0) and np.allclose(
                np.diff(times[start : start + n]), np.diff(original_t), rtol=0, atol=1e-9
            ):
                found.append(j)
                start += n
                break
        else:
            raise AssertionError(f"series {i} at point {start} is no original series")
    return found


def test_every_series_has_the_length_and_is_made_of_its_class_series():
    data = small_dataset()
    result = concatenated(data, 23, seed=3)
    assert result.values.shape == (6, 23, 2) and result.lengths.tolist() == [23] * 6
    torch.testing.assert_close(result.labels, data.labels)
    assert result.class_names == data.class_names
    median_step = float(
        np.median(np.concatenate([np.diff(data.times[j, :n].numpy()) for j, n in enumerate(data.lengths.tolist())]))
    )
    for i in range(len(data)):
        chain = pieces(data, result, i)
        assert chain[0] == i  # the series itself first, at its own times
        torch.testing.assert_close(result.times[i, : data.lengths[i]], data.times[i, : data.lengths[i]])
        assert all(int(data.labels[j]) == int(data.labels[i]) for j in chain)
        whole = [int(data.lengths[j]) for j in chain]
        assert sum(whole[:-1]) < 23 <= sum(whole)  # only the last piece is cut, and only to reach the length
        # each piece starts one median step after the previous one's end
        ends = np.cumsum([int(data.lengths[j]) for j in chain])[:-1]
        gaps = result.times[i, ends] - result.times[i, ends - 1]
        torch.testing.assert_close(gaps, torch.full_like(gaps, median_step))
    assert bool((result.times[:, 1:] > result.times[:, :-1]).all())
    assert np.isnan(result.values[1, 2, 0].item())  # a missing value stays missing


def test_the_draws_follow_the_seed():
    data = small_dataset()
    first, again = concatenated(data, 40, seed=1), concatenated(data, 40, seed=1)
    torch.testing.assert_close(first.values, again.values, equal_nan=True)
    torch.testing.assert_close(first.times, again.times)
    other = concatenated(data, 40, seed=2)
    assert [pieces(data, first, i) for i in range(6)] != [pieces(data, other, i) for i in range(6)]
    assert first.meta["transforms"][-1] == {"concatenated": {"length": 40, "seed": 1}}
    assert exported is concatenated


def test_a_length_equal_to_the_longest_series_keeps_it_whole():
    data = small_dataset()
    result = concatenated(data, 6)
    torch.testing.assert_close(result.values[3], data.values[3])  # the longest: nothing appended, nothing cut
    assert pieces(data, result, 0)[0] == 0 and result.lengths.tolist() == [6] * 6


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda d: concatenated(d, 5), r"length \(5\) must be at least the longest series' length \(6\)"),
        (lambda d: concatenated(d, 10.0), "length must be an integer"),
        (lambda d: concatenated(d, True), "length must be an integer"),
        (lambda d: concatenated(d, 10, seed="0"), "seed must be an integer"),
        (lambda d: concatenated(d.replace(labels=None), 10), "dataset must have class labels"),
        (lambda d: concatenated(d.values, 10), "dataset must be an IrregularDataset"),
    ],
)
def test_bad_arguments_are_refused_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call(small_dataset())
