"""Tests of neuralde_seq.controls.splines.natural_cubic_coefficients and its use in build_control.

The reference everywhere is torchcde (``torchcde.natural_cubic_coeffs``, its per-(sample, channel) loop
through missing values), called here directly, sample by sample on each sample's own prefix where
samples have different lengths. Everything is float64 unless a test is about float32.
"""

import pytest
import torch
import torchcde

import neuralde_seq.controls.splines as splines
from neuralde_seq import build_control
from neuralde_seq.controls.splines import natural_cubic_coefficients

F64 = torch.float64
TOL = dict(rtol=0, atol=1e-10)
NAN = float("nan")


def _times(length, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return torch.cumsum(0.3 + torch.rand(length, generator=g, dtype=F64), 0).to(dtype)


def _missing_data(batch=5, length=11, channels=9, seed=0):
    """Random values with ~60 % NaN, plus one channel of every kind the missing-value rules distinguish."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, channels, generator=g, dtype=F64)
    x[torch.rand(batch, length, channels, generator=g) < 0.6] = NAN
    special = x[:, :, :6]
    special[:, :, 0] = torch.randn(batch, length, generator=g, dtype=F64)  # fully observed
    special[:, :, 1] = NAN  # one observation only (at a different point per sample)
    special[torch.arange(batch), torch.arange(batch) % length, 1] = torch.randn(batch, generator=g, dtype=F64)
    special[:, :, 2] = NAN  # exactly two observations, interior
    special[:, 2, 2], special[:, length - 3, 2] = 1.5, -0.5
    special[:, :, 3] = NAN  # two observations, at the first and last point
    special[:, 0, 3], special[:, -1, 3] = -1.0, 2.0
    special[:, :3, 4] = NAN  # leading and trailing NaN around observed values
    special[:, -2:, 4] = NAN
    special[:, :, 5] = NAN  # never observed
    return x


def test_coefficients_equal_torchcde_through_missing_values():
    x = _missing_data()
    t = _times(x.shape[1])
    expected = torchcde.natural_cubic_coeffs(x, t)
    ours = natural_cubic_coefficients(x, t)
    assert ours.shape == expected.shape == (5, 10, 4 * 9) and ours.dtype == F64
    torch.testing.assert_close(ours, expected, **TOL)
    # several batch dimensions, and the default times 0, 1, ..., length - 1
    x4 = x.reshape(1, 5, 11, 9).expand(2, 5, 11, 9).clone()
    torch.testing.assert_close(natural_cubic_coefficients(x4), torchcde.natural_cubic_coeffs(x4), **TOL)


@pytest.mark.parametrize("length", [2, 3, 40])
def test_coefficients_equal_torchcde_without_missing_values(length):
    g = torch.Generator().manual_seed(length)
    x = torch.randn(4, length, 3, generator=g, dtype=F64)
    t = _times(length, seed=length)
    torch.testing.assert_close(natural_cubic_coefficients(x, t), torchcde.natural_cubic_coeffs(x, t), **TOL)


def test_short_series_with_missing_values_equal_torchcde():
    x = torch.tensor(
        [[[NAN, 1.0, NAN], [2.0, NAN, NAN]], [[3.0, NAN, NAN], [NAN, 4.0, NAN]]], dtype=F64
    )  # length 2: every case at once
    torch.testing.assert_close(natural_cubic_coefficients(x), torchcde.natural_cubic_coeffs(x), **TOL)


@pytest.mark.parametrize("complete", [False, True])
def test_lengths_build_each_sample_on_its_own_prefix(complete):
    x = _missing_data(batch=6, length=12, channels=7, seed=1)
    if complete:
        x = torch.randn_like(x)
    lengths = torch.tensor([12, 2, 7, 3, 12, 9])
    t = _times(12, seed=1)
    padded = x.clone()
    for b, n in enumerate(lengths.tolist()):
        padded[b, n:] = torch.tensor([NAN, float("inf"), 1e300, -3.0])[torch.arange(12 - n) % 4].unsqueeze(-1)
    padded.requires_grad_(True)
    t.requires_grad_(True)
    reference_t = t.detach().clone().requires_grad_(True)  # collects torchcde's gradients of all samples
    weights = torch.randn(6, 11, 28, generator=torch.Generator().manual_seed(1), dtype=F64)
    ours = natural_cubic_coefficients(padded, t, lengths)
    assert ours.shape == (6, 11, 28)
    (ours * weights).sum().backward()
    for b, n in enumerate(lengths.tolist()):
        prefix = x[b, :n].clone().requires_grad_(True)
        expected = torchcde.natural_cubic_coeffs(prefix, reference_t[:n])
        torch.testing.assert_close(ours[b, : n - 1], expected, **TOL)
        assert torch.equal(ours[b, n - 1 :], torch.zeros_like(ours[b, n - 1 :]))
        # the padding gets no gradient (and sends no NaN into the sample's)
        (expected * weights[b, : n - 1]).sum().backward()
        torch.testing.assert_close(padded.grad[b, :n], torch.nan_to_num(prefix.grad), **TOL)
        assert torch.equal(padded.grad[b, n:], torch.zeros_like(padded.grad[b, n:]))
    torch.testing.assert_close(t.grad, reference_t.grad, rtol=1e-9, atol=1e-9)


def test_samples_solved_in_chunks_equal_torchcde(monkeypatch):
    # Chunks of 2 samples (of 3 series each): the loop over chunks and the concatenation are exercised.
    monkeypatch.setattr(splines, "_ELEMENTS_PER_SOLVE", 2 * 11 * 9)
    x = _missing_data(batch=5, length=11, channels=9, seed=2)
    t = _times(11, seed=2)
    lengths = torch.tensor([11, 4, 11, 6, 2])
    ours = natural_cubic_coefficients(x, t, lengths)
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(ours[b, : n - 1], torchcde.natural_cubic_coeffs(x[b, :n], t[:n]), **TOL)
    complete = torch.randn(5, 11, 9, dtype=F64)
    torch.testing.assert_close(
        natural_cubic_coefficients(complete, t), torchcde.natural_cubic_coeffs(complete, t), **TOL
    )


@pytest.mark.parametrize("complete", [False, True])
def test_gradients_equal_torchcde(complete):
    base = torch.randn(3, 7, 6, dtype=F64) if complete else _missing_data(batch=3, length=7, channels=6, seed=3)
    weights = torch.randn(3, 6, 24, generator=torch.Generator().manual_seed(3), dtype=F64)
    t0 = _times(7, seed=3)
    grads = []
    for function in (natural_cubic_coefficients, torchcde.natural_cubic_coeffs):
        x = base.clone().requires_grad_(True)
        t = t0.clone().requires_grad_(True)
        (function(x, t) * weights).sum().backward()
        grads.append((x.grad, t.grad))
    (ours_x, ours_t), (ref_x, ref_t) = grads
    assert torch.isfinite(ours_x).all() and ours_x.abs().sum() > 0
    torch.testing.assert_close(ours_x, torch.nan_to_num(ref_x), **TOL)  # zero at missing values in both
    torch.testing.assert_close(ours_t, ref_t, rtol=1e-9, atol=1e-9)


def test_gradcheck_through_missing_values():
    x = torch.tensor([[[NAN, 0.3], [1.2, NAN], [NAN, -0.7], [0.4, NAN], [NAN, NAN]]], dtype=F64)
    observed = ~torch.isnan(x)
    t = _times(5, seed=4)

    def of_observed(v):
        return natural_cubic_coefficients(x.masked_scatter(observed, v), t)

    torch.autograd.gradcheck(of_observed, (x[observed].clone().requires_grad_(True),))


def test_float32_follows_the_input_and_matches_torchcde():
    x = _missing_data(seed=5)
    t = _times(11, seed=5)
    ours = natural_cubic_coefficients(x.float(), t.float())
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours.double(), torchcde.natural_cubic_coeffs(x, t), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_equals_torchcde():
    x = _missing_data(seed=6)
    t = _times(11, seed=6)
    ours = natural_cubic_coefficients(x.cuda(), t.cuda())
    assert ours.device.type == "cuda"
    torch.testing.assert_close(ours.cpu(), torchcde.natural_cubic_coeffs(x, t), **TOL)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x, t: natural_cubic_coefficients(x.long(), None), TypeError, "x must be a floating point"),
        (lambda x, t: natural_cubic_coefficients(x[0, :, 0], None), ValueError, "x must have shape"),
        (lambda x, t: natural_cubic_coefficients(x[:, :1], None), ValueError, "x must have at least 2 time points"),
        (lambda x, t: natural_cubic_coefficients(x, t[:-1]), ValueError, "t must have shape (length,) = (11,)"),
        (lambda x, t: natural_cubic_coefficients(x, t.float()), ValueError, "t must have x's dtype"),
        (lambda x, t: natural_cubic_coefficients(x, t.flip(0)), ValueError, "t must be strictly increasing"),
        (
            lambda x, t: natural_cubic_coefficients(x, t.index_fill(0, torch.tensor([3]), NAN)),
            ValueError,
            "t must be finite",
        ),
        (
            lambda x, t: natural_cubic_coefficients(x, t, torch.tensor([11, 11])),
            ValueError,
            "lengths must have the batch shape of x",
        ),
        (
            lambda x, t: natural_cubic_coefficients(x, t, torch.full((5,), 11.0)),
            TypeError,
            "lengths must be an integer tensor",
        ),
        (
            lambda x, t: natural_cubic_coefficients(x, t, torch.tensor([11, 1, 11, 11, 11])),
            ValueError,
            "lengths must lie in [2, 11]",
        ),
        (
            lambda x, t: natural_cubic_coefficients(x, t, torch.tensor([11, 12, 11, 11, 11])),
            ValueError,
            "lengths must lie in [2, 11]",
        ),
    ],
)
def test_bad_input_names_the_argument(call, error, message):
    with pytest.raises(error) as info:
        call(_missing_data(), _times(11))
    assert message in str(info.value)


# ---------------------------------------------------------------------------------------------------
# build_control(interpolation="natural_cubic")


def test_build_control_natural_cubic_equals_torchcde_per_sample():
    g = torch.Generator().manual_seed(7)
    lengths = torch.tensor([9, 4, 9, 2, 6])
    t = _times(9, seed=7)
    times = t.expand(5, 9).clone()
    values = torch.randn(5, 9, 3, generator=g, dtype=F64)
    values[torch.rand(5, 9, 3, generator=g) < 0.5] = NAN
    values[:, 0, 0] = 0.25  # every sample observes every channel at least once
    values[:, 1, 1] = -0.5
    values[:, 1, 2] = 1.0
    for b, n in enumerate(lengths.tolist()):
        values[b, n:] = 1e6  # padding: must not leak into any sample
    control = build_control(times, values, lengths, interpolation="natural_cubic", time_channel=True, mask_channel=True)
    assert torch.equal(control.knots, t) and control.end_index.tolist() == (lengths - 1).tolist()
    for b, n in enumerate(lengths.tolist()):
        observed = ~torch.isnan(values[b, :n])
        path = torch.cat([t[:n, None], values[b, :n], observed.to(F64)], dim=-1)
        raw = torchcde.natural_cubic_coeffs(path, t[:n])
        a, b1, two_c, three_d = raw.chunk(4, dim=-1)
        expected = torch.stack([a, b1, two_c / 2, three_d / 3], dim=-2)  # (n - 1, 4, C)
        torch.testing.assert_close(control.coeffs[b, : n - 1], expected, **TOL)
        # after its end the path is constant at its final value, as torchcde's spline ends
        end_value = torchcde.CubicSpline(raw, t[:n]).evaluate(t[n - 1])
        after = control.coeffs[b, n - 1 :]
        torch.testing.assert_close(after[:, 0], end_value.expand_as(after[:, 0]), **TOL)
        assert torch.equal(after[:, 1:], torch.zeros_like(after[:, 1:]))
        # a sample alone has the same path as in the padded batch
        alone = build_control(
            times[b : b + 1, :n],
            values[b : b + 1, :n],
            interpolation="natural_cubic",
            time_channel=True,
            mask_channel=True,
        )
        torch.testing.assert_close(alone.coeffs[0], control.coeffs[b, :n], **TOL)


def test_linear_fill_equals_torchcde_through_every_pattern_of_missing_values():
    from neuralde_seq.controls.splines import fill_missing_linear

    g = torch.Generator().manual_seed(3)
    knots = torch.cumsum(torch.rand(17, generator=g, dtype=torch.float64) + 0.1, 0)
    path = torch.randn(40, 17, 5, generator=g, dtype=torch.float64)
    path[torch.rand(40, 17, 5, generator=g) < 0.6] = float("nan")
    path[0, :, 1] = float("nan")  # never observed: 0 (torchcde's constant path)
    path[1, :, 2] = float("nan")
    path[1, 8, 2] = 0.7  # one observation: constant
    path[2, :5, 0] = float("nan")  # leading and trailing gaps: the nearest observation
    path[2, -4:, 0] = float("nan")
    filled = fill_missing_linear(path, knots)
    expected = torchcde.linear_interpolation_coeffs(path, t=knots)
    assert not filled.isnan().any()
    assert torch.allclose(filled, expected, rtol=0, atol=1e-12)
    assert (filled[0, :, 1] == 0).all() and (filled[1, :, 2] == 0.7).all()
    complete = torch.randn(3, 17, 2, dtype=torch.float64)
    assert fill_missing_linear(complete, knots) is complete
    # at the lengths users run: 5,000 points, 90 % missing, long gaps
    knots = torch.cumsum(torch.rand(5000, generator=g, dtype=torch.float64) + 0.01, 0)
    path = torch.randn(2, 5000, 3, generator=g, dtype=torch.float64)
    path[torch.rand(2, 5000, 3, generator=g) < 0.9] = float("nan")
    path[0, 1000:4000, 0] = float("nan")
    expected = torchcde.linear_interpolation_coeffs(path, t=knots)
    torch.testing.assert_close(fill_missing_linear(path, knots), expected, rtol=0, atol=1e-12)
