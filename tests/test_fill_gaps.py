"""Tests of `fill_gaps` (unobserved points filled into the gaps between observations): a regular series with
dropped points becomes its grid with NaN there, uneven gaps are cut evenly and at most max_substeps times, the
linear path is unchanged, and random features read ragged series with their times as they read the same series on
its grid (the estimators' default)."""

import numpy as np
import pytest
import torch

from neuralde_seq import build_control
from neuralde_seq.data import fill_gaps, median_step
from neuralde_seq.sklearn import RandomFeatureClassifier


def _ragged(seed, n=6, length=30, channels=2):
    """Regular series (times 0..length-1) with interior points removed; returns the kept (values, times) and the
    full grids with NaN at the removed steps."""
    rng = np.random.default_rng(seed)
    kept_x, kept_t, grids = [], [], []
    for _ in range(n):
        x = rng.normal(size=(length, channels))
        x[rng.random((length, channels)) < 0.1] = np.nan  # some channels missing at kept steps too
        x[0] = x[-1] = 0.5
        keep = np.sort(
            np.concatenate([[0, length - 1], rng.choice(np.arange(1, length - 1), length // 2, replace=False)])
        )
        grid = np.full_like(x, np.nan)
        grid[keep] = x[keep]
        kept_x.append(x[keep])
        kept_t.append(keep.astype(float))
        grids.append(grid)
    return kept_x, kept_t, grids


def _padded(xs, ts):
    width = max(len(x) for x in xs)
    times = torch.tensor(np.stack([np.concatenate([t, t[-1] + np.arange(1, width - len(t) + 1)]) for t in ts]))
    values = torch.tensor(np.stack([np.concatenate([x, np.full((width - len(x), x.shape[1]), np.nan)]) for x in xs]))
    return times, values, torch.tensor([len(x) for x in xs])


def test_a_regular_series_with_dropped_points_becomes_its_grid_with_nan_there():
    xs, ts, grids = _ragged(0)
    times, values, lengths = fill_gaps(*_padded(xs, ts), step=1.0)
    assert lengths.tolist() == [len(g) for g in grids]
    for b, grid in enumerate(grids):
        np.testing.assert_array_equal(times[b, : len(grid)].numpy(), np.arange(len(grid), dtype=float))
        np.testing.assert_array_equal(values[b, : len(grid)].numpy(), grid)  # NaN where dropped (equal as NaN)


def test_uneven_gaps_are_cut_evenly_and_at_most_max_substeps_times():
    times = torch.tensor([[0.0, 2.5, 3.0, 103.0]], dtype=torch.float64)
    values = torch.tensor([[[1.0], [2.0], [3.0], [4.0]]], dtype=torch.float64)
    filled_t, filled_v, lengths = fill_gaps(times, values, torch.tensor([4]), step=1.0, max_substeps=5)
    # 2.5 -> 3 pieces of 5/6, 0.5 -> 1 piece, 100 -> capped at 5 pieces of 20
    expected = [0.0, 5 / 6, 5 / 3, 2.5, 3.0, 23.0, 43.0, 63.0, 83.0, 103.0]
    assert int(lengths[0]) == len(expected)
    np.testing.assert_allclose(filled_t[0].numpy(), expected, rtol=1e-12)
    observed = ~torch.isnan(filled_v[0, :, 0])
    np.testing.assert_array_equal(filled_v[0, observed, 0].numpy(), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(observed.numpy(), [1, 0, 0, 1, 1, 0, 0, 0, 0, 1])
    with pytest.raises(ValueError, match="step must be a positive"):
        fill_gaps(times, values, torch.tensor([4]), step=0.0)
    with pytest.raises(ValueError, match="max_substeps must be a positive integer"):
        fill_gaps(times, values, torch.tensor([4]), step=1.0, max_substeps=0)


def test_the_linear_path_is_the_same_path_with_more_knots():
    rng = np.random.default_rng(1)
    t = np.cumsum(rng.uniform(0.2, 3.0, size=12))
    x = rng.normal(size=(12, 1))
    times, values = torch.tensor(t[None]), torch.tensor(x[None])
    filled = fill_gaps(times, values, torch.tensor([12]), step=median_step(times, torch.tensor([12])))
    original = build_control(times, values, interpolation="linear", parametrization="time")
    refined = build_control(*filled, interpolation="linear", parametrization="time")
    for s in np.linspace(t[0], t[-1], 200):
        np.testing.assert_allclose(
            refined.evaluate(float(s)).numpy(), original.evaluate(float(s)).numpy(), rtol=0, atol=1e-12
        )


@pytest.mark.parametrize("length", [40, 2000])
def test_random_features_of_ragged_series_with_times_equal_those_of_the_grid(length):
    xs, ts, grids = _ragged(2, n=12, length=length, channels=1)
    y = np.arange(12) % 2
    ragged = RandomFeatureClassifier(width=32, random_state=0, dtype="float64").fit(xs, y, times=ts)
    on_grid = RandomFeatureClassifier(width=32, random_state=0, dtype="float64").fit(grids, y)
    assert ragged.feature_map_.input_spec_.fill_step == 1.0
    np.testing.assert_allclose(
        ragged.random_features(xs, times=ts), on_grid.random_features(grids), rtol=1e-10, atol=1e-10
    )
    # without filling, the reservoir steps once per observation: other features
    unfilled = RandomFeatureClassifier(width=32, random_state=0, dtype="float64", fill_gaps=None).fit(xs, y, times=ts)
    assert not np.allclose(unfilled.random_features(xs, times=ts), on_grid.random_features(grids), atol=1e-3)
    with pytest.raises(ValueError, match="fill_gaps must be"):
        RandomFeatureClassifier(width=8, fill_gaps=-1.0).fit(xs, y, times=ts)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_batched_fill_is_the_sample_by_sample_reference_bit_for_bit(dtype):
    """Random ragged batches: lengths from 1 up (a sample of one point has nothing to fill), gaps that are whole
    multiples of the step (not cut once more) and uneven ones, NaN values, max_substeps from 1 to 19."""
    from neuralde_seq.data.transforms.sampling import fill_gaps_reference

    generator = torch.Generator().manual_seed(0)
    for trial in range(150):
        batch, longest, channels = (
            int(torch.randint(low, high, (1,), generator=generator)) for low, high in ((1, 7), (1, 40), (1, 4))
        )
        lengths = torch.randint(1, longest + 1, (batch,), generator=generator)
        if trial % 3 == 0:
            steps = torch.randint(1, 4, (batch, longest), generator=generator).to(torch.float64) * 0.5
        else:
            steps = torch.rand(batch, longest, generator=generator, dtype=torch.float64) * 3 + 1e-3
        times = torch.cumsum(steps, dim=1).to(dtype)
        values = torch.randn(batch, longest, channels, generator=generator, dtype=dtype)
        values[torch.rand(values.shape, generator=generator) < 0.3] = float("nan")
        step = float(torch.rand(1, generator=generator)) * 2 + 0.05
        substeps = int(torch.randint(1, 20, (1,), generator=generator))
        got = fill_gaps(times, values, lengths, step, substeps)
        expected = fill_gaps_reference(times, values, lengths, step, substeps)
        assert torch.equal(got[2], expected[2]), trial
        assert torch.equal(got[0], expected[0]), trial
        assert torch.equal(got[1].isnan(), expected[1].isnan()), trial
        assert torch.equal(got[1].nan_to_num(), expected[1].nan_to_num()), trial
