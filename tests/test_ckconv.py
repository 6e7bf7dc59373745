"""CKConv / CKCNN (paper 000): the layer's FFT and direct paths, causality, irregular mode (its lattice form
against its pairwise form, the default reading the times), Eq. 5, SIREN initialisation, padding and the
kernel L2 penalty."""

import math
import warnings

import pytest
import torch

from neuralde_seq import create_model
from neuralde_seq.controls import build_control
from neuralde_seq.models.ckconv import (
    AUTO_LATTICE_NODES,
    CKCNN,
    CKConv,
    PairwiseFallbackWarning,
    TimesIgnoredWarning,
    grid_inputs,
)
from neuralde_seq.models.kernel_networks import SirenKernel, WeightNormLinear
from neuralde_seq.observations import Observations

D = torch.float64


def _irregular_batch(batch=4, length=12, channels=3, seed=0, dyadic=False, missing=0.2, dtype=D):
    """Sorted random times (multiples of 1/64 when ``dyadic``), random lengths, some NaN entries."""
    g = torch.Generator().manual_seed(seed)
    gaps = torch.rand(batch, length, generator=g, dtype=dtype) + 0.05
    if dyadic:
        gaps = torch.ceil(gaps * 64) / 64
    times = gaps.cumsum(1)
    values = torch.randn(batch, length, channels, generator=g, dtype=dtype)
    values[torch.rand(values.shape, generator=g) < missing] = float("nan")
    values[:, 0] = torch.randn(batch, channels, generator=g, dtype=dtype)  # every sample observed at its start
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=g)
    lengths[0] = length
    return Observations.from_tensors(times, values, lengths)


def _lattice_batch(batch=4, full_length=60, channels=3, drop=0.3, missing=0.2, spacing=1.0, seed=0, dtype=D):
    """Times offset_b + n · spacing (n integer in [0, full_length)) with ``drop`` of each sample's points removed
    and the rest packed to the front (uneven gaps), random lengths, ``missing`` of the entries NaN, every sample
    observed at its start."""
    g = torch.Generator().manual_seed(seed)
    kept = full_length - round(drop * full_length)
    nodes = torch.rand(batch, full_length, generator=g).argsort(1)[:, :kept].sort(1).values
    times = torch.randint(-20, 20, (batch, 1), generator=g).to(dtype) + nodes.to(dtype) * spacing
    values = torch.randn(batch, kept, channels, generator=g, dtype=dtype)
    values[torch.rand(values.shape, generator=g) < missing] = float("nan")
    values[:, 0] = torch.randn(batch, channels, generator=g, dtype=dtype)
    lengths = torch.randint(kept // 2, kept + 1, (batch,), generator=g)
    lengths[0] = kept
    return Observations.from_tensors(times, values, lengths)


def _same_weights(model, *others):
    """(model, *others), the others given the model's weights."""
    for other in others:
        other.load_state_dict(model.state_dict())
    return (model, *others)


# ---- the two convolution implementations ----------------------------------------------------------------

# (The convolution functions themselves: tests/test_ops.py.)


def test_ckconv_fft_and_direct_modes_agree_float32():
    torch.manual_seed(0)
    layer = CKConv(6, 7, omega_0=30.0, horizon=499.0, conv="fft")
    x = torch.randn(4, 500, 6)
    y_fft = layer(x)
    layer.conv = "direct"
    y_direct = layer(x)
    scale = y_fft.abs().max()
    assert scale > 0.1
    # float32 round-off of a 500-term sum (measured 9e-6 absolute for |y| up to 5.4): 1e-5 relative.
    assert (y_fft - y_direct).abs().max() <= 1e-5 * scale
    layer.conv, layer.fft_threshold = "auto", 499  # auto: FFT only when L > threshold
    torch.testing.assert_close(layer(x), y_fft, rtol=0, atol=0)
    layer.fft_threshold = 500
    torch.testing.assert_close(layer(x), y_direct, rtol=0, atol=0)


# ---- causality ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("conv", ["fft", "direct", "irregular"])
def test_output_has_no_gradient_from_the_future(conv):
    torch.manual_seed(0)
    length, t = 40, 17
    layer = CKConv(3, 2, omega_0=20.0, horizon=float(length - 1), conv="direct" if conv == "irregular" else conv)
    layer.double()
    x = torch.randn(2, length, 3, dtype=D, requires_grad=True)
    if conv == "irregular":
        times = torch.arange(length, dtype=D).expand(2, length)
        y = layer.forward_irregular(times, x, torch.ones(2, length, dtype=torch.bool))
    else:
        y = layer(x)
    y[:, t].sum().backward()
    past, future = x.grad[:, : t + 1], x.grad[:, t + 1 :]
    assert past.abs().max() > 1e-3
    if conv == "fft":  # the FFT's round-off only
        assert future.abs().max() <= 1e-12
    else:
        assert torch.count_nonzero(future) == 0


def test_ckcnn_is_causal_in_both_modes():
    obs = _irregular_batch(batch=2, length=15, missing=0.0)
    values = obs.values.clone().requires_grad_(True)
    for mode in ("grid", "irregular"):
        torch.manual_seed(1)
        model = CKCNN(3, 4, hidden=6, mode=mode, mask_channel=False, horizon=15.0).double()
        h = model.features(Observations(obs.times, values, obs.lengths))
        (grad,) = torch.autograd.grad(h[:, 6].sum(), values)
        assert grad[:, :7].abs().max() > 0 and torch.count_nonzero(grad[:, 7:]) == 0


# ---- irregular mode -------------------------------------------------------------------------------------


def test_irregular_mode_equals_grid_mode_on_regular_times():
    torch.manual_seed(0)
    step, length = 0.5, 30
    layer = CKConv(3, 4, omega_0=25.0, horizon=(length - 1) * step, step=step, conv="fft").double()
    x = torch.randn(2, length, 3, dtype=D)
    times = 7.0 + step * torch.arange(length, dtype=D).expand(2, length)
    grid = layer(x)
    irregular = layer.forward_irregular(times, x, torch.ones(2, length, dtype=torch.bool))
    torch.testing.assert_close(irregular, grid, rtol=0, atol=1e-11)


def test_ckcnn_irregular_equals_grid_on_regular_times_with_variable_lengths():
    g = torch.Generator().manual_seed(2)
    step, length = 0.25, 24
    times = 3.0 + step * torch.arange(length, dtype=D).expand(3, length)
    values = torch.randn(3, length, 2, generator=g, dtype=D)
    obs = Observations.from_tensors(times, values, torch.tensor([24, 11, 17]))
    torch.manual_seed(0)
    grid = CKCNN(2, 5, hidden=8, blocks=2, omega_0=20.0, mode="grid", mask_channel=False, step=step).double()
    irregular = CKCNN(2, 5, hidden=8, blocks=2, omega_0=20.0, mode="irregular", step=step).double()
    out_grid = grid(obs)  # sets the horizon from the batch: (24 − 1) · step
    irregular.load_state_dict(grid.state_dict())
    torch.testing.assert_close(irregular(obs), out_grid, rtol=0, atol=1e-10)
    torch.testing.assert_close(
        irregular(obs, return_sequence=True)[0], grid(obs, return_sequence=True)[0], rtol=0, atol=1e-10
    )


def test_irregular_mode_is_invariant_to_a_time_shift():
    obs = _irregular_batch(dyadic=True)
    torch.manual_seed(0)
    model = CKCNN(3, 4, hidden=8, omega_0=15.0, mode="irregular").double().eval()
    out = model(obs)
    # Times on a 1/64 grid shifted by 3: every difference is exact, hence every output.
    assert torch.equal(model(Observations(obs.times + 3.0, obs.values, obs.lengths)), out)
    # Any shift: equal up to the rounding of the shifted times.
    torch.testing.assert_close(model(Observations(obs.times - 0.3, obs.values, obs.lengths)), out, rtol=0, atol=1e-9)


def _insert_points(obs: Observations, new_times: torch.Tensor, new_value: float):
    """obs with extra points at ``new_times`` (one set for all samples, inside every sample's span), whose
    values are all ``new_value``; returns the new observations and where the original points went."""
    batch, length, channels = obs.values.shape
    times, values, index = [], [], []
    for b in range(batch):
        n = int(obs.lengths[b])
        t = torch.cat([obs.times[b, :n], new_times.to(obs.times)])
        v = torch.cat([obs.values[b, :n], torch.full((len(new_times), channels), new_value, dtype=obs.values.dtype)])
        order = torch.argsort(t)
        times.append(t[order])
        values.append(v[order])
        index.append(torch.argsort(order)[:n])  # position of original point i in the new order
    new_len = length + len(new_times)
    pad = lambda seq, fill: torch.stack(
        [
            torch.cat([s, s.new_full((new_len - s.shape[0], *s.shape[1:]), fill)])  # noqa
            for s in seq
        ]
    )
    t = pad(times, 0.0)
    for b in range(batch):  # padding times continue increasing (the values there are NaN anyway)
        n = times[b].shape[0]
        t[b, n:] = t[b, n - 1] + torch.arange(1, new_len - n + 1, dtype=t.dtype)
    return Observations.from_tensors(t, pad(values, float("nan")), obs.lengths + len(new_times)), index


def test_irregular_ckconv_ignores_inserted_zero_observations():
    obs = _irregular_batch(batch=3, length=10)
    new_times = torch.tensor([0.9, 1.7, 2.35])  # inside every sample's span
    torch.manual_seed(0)
    layer = CKConv(3, 5, omega_0=20.0, horizon=8.0).double()
    before = layer.forward_irregular(obs.times, obs.values, obs.mask)
    inserted, index = _insert_points(obs, new_times, 0.0)
    after = layer.forward_irregular(inserted.times, inserted.values, inserted.mask)  # zeros marked observed
    for b in range(3):
        n = int(obs.lengths[b])
        # Exact in exact arithmetic (each inserted point adds ψ(Δ) · 0); the float sum's order may differ.
        torch.testing.assert_close(after[b, index[b]], before[b, :n], rtol=0, atol=1e-13)


def test_ckcnn_irregular_ignores_inserted_unobserved_points_but_not_zero_observations():
    obs = _irregular_batch(batch=3, length=10)
    new_times = torch.tensor([0.9, 1.7, 2.35])
    torch.manual_seed(0)
    model = CKCNN(3, 4, hidden=8, omega_0=20.0, mode="irregular", horizon=8.0).double().eval()
    out = model(obs)
    missing, _ = _insert_points(obs, new_times, float("nan"))
    torch.testing.assert_close(model(missing), out, rtol=0, atol=1e-12)
    # Documented limitation: a zero *observation* is a point of the sequence, and the first layer's (non-zero)
    # output there feeds the next layer, so the network's answer changes.
    zeros, _ = _insert_points(obs, new_times, 0.0)
    assert (model(zeros) - out).abs().max() > 1e-3


def test_irregular_missing_channels_contribute_nothing():
    obs = _irregular_batch(batch=2, length=8, missing=0.3)
    torch.manual_seed(0)
    layer = CKConv(3, 2, omega_0=10.0, horizon=6.0).double()
    y = layer.forward_irregular(obs.times, obs.values, obs.mask)
    # The same as feeding zeros there and calling every valid point observed...
    zeros = torch.where(obs.mask, obs.values, torch.zeros((), dtype=D))
    torch.testing.assert_close(y, layer.forward_irregular(obs.times, zeros, obs.valid), rtol=0, atol=1e-13)
    # ...and a brute-force sum of ψ(t_i − t_j) x_j over observed entries.
    b, i = 0, 5
    expected = layer.bias.clone()
    for j in range(i + 1):
        psi = layer.kernel_at(obs.times[b, i] - obs.times[b, j])
        expected = expected + psi @ zeros[b, j]
    torch.testing.assert_close(y[b, i], expected, rtol=0, atol=1e-13)


# ---- sizes, sampling rate -------------------------------------------------------------------------------


def test_parameter_count_does_not_depend_on_sequence_length():
    torch.manual_seed(0)
    model = CKCNN(3, 4, hidden=10, blocks=2)
    count = sum(p.numel() for p in model.parameters())
    for length in (5, 50, 700):
        obs = Observations.from_tensors(torch.arange(length).float().expand(2, length), torch.randn(2, length, 3))
        assert model(obs).shape == (2, 4)
        assert sum(p.numel() for p in model.parameters()) == count
    other = CKCNN(3, 4, hidden=10, blocks=2, horizon=10_000.0)
    assert sum(p.numel() for p in other.parameters()) == count
    # The paper's copy-memory model (1 input channel, 10 hidden, 2 blocks, 10 classes) has 15.52K parameters.
    assert sum(p.numel() for p in CKCNN(1, 10, hidden=10, mask_channel=False).parameters()) == 15526


def test_sampling_rate_change_eq5():
    """Train rate sr1 = 100, test rate sr2 = 200 on t ∈ [0, 1]: with a smooth (low-ω0) kernel and a smooth
    input, the kernel sampled on the finer grid and the sum scaled by sr1/sr2 reproduce the sr1 output."""
    torch.manual_seed(0)
    layer = CKConv(2, 3, omega_0=1.0, horizon=1.0, step=0.01, bias=False).double()
    signal = lambda t: torch.stack([torch.sin(2 * math.pi * t), torch.cos(3 * t) * t], -1).unsqueeze(0)  # noqa
    t1, t2 = torch.linspace(0, 1, 101, dtype=D), torch.linspace(0, 1, 201, dtype=D)
    y1 = layer(signal(t1))
    y2 = layer(signal(t2), step=0.005)
    # Same continuous kernel on both grids.
    torch.testing.assert_close(layer.grid_kernel(201, 0.005)[..., ::2], layer.grid_kernel(101), rtol=0, atol=1e-12)
    scale = y1.abs().max()
    assert scale > 0.1
    assert (y2[:, ::2] - y1).abs().max() <= 0.02 * scale  # Riemann sums at two rates: O(step) apart
    # Without the sr1/sr2 factor the finer grid's sum is about twice as large.
    unscaled = y2[:, ::2] * 2
    assert (unscaled - y1).abs().max() > 0.5 * scale
    # The same holds for the whole network (grid mode, step passed through every layer).
    model = CKCNN(2, 3, hidden=4, omega_0=1.0, mode="grid", mask_channel=False, horizon=1.0, step=0.01).double()
    obs1 = Observations.from_tensors(t1.unsqueeze(0), signal(t1))
    obs2 = Observations.from_tensors(t2.unsqueeze(0), signal(t2))
    with torch.no_grad():
        coarse, fine = model(obs1), model(obs2, step=0.005)
    assert (fine - coarse).abs().max() <= 0.05 * coarse.abs().max()


def test_step_from_times_applies_eq5_to_a_subsampled_test_set():
    """A model with step_from_times reads the step from the times: on every 2nd point of the training grid
    (times kept) it computes exactly what model(obs, step=2 · step) computes, and on the training grid what
    the plain model computes; irregular spacings in a batch are refused."""
    g = torch.Generator().manual_seed(3)
    step, length = 0.5, 30
    times = step * torch.arange(length, dtype=D).expand(2, length)
    values = torch.randn(2, length, 2, generator=g, dtype=D)
    lengths = torch.tensor([30, 21])
    torch.manual_seed(0)
    plain = CKCNN(2, 3, hidden=6, omega_0=5.0, mode="grid", mask_channel=False, horizon=14.5, step=step).double()
    reading = CKCNN(
        2, 3, hidden=6, omega_0=5.0, mode="grid", mask_channel=False, horizon=14.5, step=step, step_from_times=True
    ).double()
    reading.load_state_dict(plain.state_dict())
    full = Observations.from_tensors(times, values, lengths)
    half = Observations.from_tensors(times[:, ::2].contiguous(), values[:, ::2].contiguous(), (lengths + 1) // 2)
    with torch.no_grad():
        torch.testing.assert_close(reading(full), plain(full), rtol=0, atol=0)
        torch.testing.assert_close(reading(half), plain(half, step=2 * step), rtol=0, atol=0)
        assert (plain(half) - plain(half, step=2 * step)).abs().max() > 1e-3  # the step matters
    assert reading.sampling_step(half) == 2 * step
    bent = times.clone()
    bent[1, 5:] += 0.1  # sample 1 has one longer gap inside its length
    with pytest.raises(ValueError, match="regularly spaced"):
        reading(Observations.from_tensors(bent, values, lengths))
    with pytest.raises(ValueError, match="step_from_times"):
        CKCNN(2, 3, mode="irregular", step_from_times=True)


# ---- initialisation -------------------------------------------------------------------------------------


def test_siren_initialisation_on_the_weight_norm_tensors():
    torch.manual_seed(0)
    omega_0, hidden = 30.0, 32
    net = SirenKernel(6, 5, hidden=hidden, omega_0=omega_0)
    bounds = [1.0 / 1, math.sqrt(6 / hidden) / omega_0, math.sqrt(6 / hidden) / omega_0]
    for index, (layer, bound) in enumerate(zip(net.layers, bounds)):
        assert isinstance(layer, WeightNormLinear)
        w = layer.weight.detach()  # effective weight g · v / ‖v‖
        assert w.abs().max() <= bound * (1 + 1e-6)
        assert w.abs().max() >= 0.8 * bound  # the draws fill the interval
        # What was initialised are g and v: v is the drawn W and g its row norms, so g · v/‖v‖ = v.
        torch.testing.assert_close(layer.weight_v.detach(), w)
        torch.testing.assert_close(layer.weight_g.detach(), w.norm(dim=1, keepdim=True))
        if index < 2:
            assert (layer.bias.abs() <= math.pi / w.norm(dim=1) + 1e-6).all()
            assert layer.bias.abs().max() <= math.pi / omega_0 * (1 + 1e-6)  # reduced modulo the period
        else:
            assert torch.count_nonzero(layer.bias) == 0
    names = {name for name, _ in CKCNN(2, 3, hidden=4).named_parameters()}
    assert "blocks.0.conv1.kernel_net.layers.1.weight_g" in names
    assert "blocks.0.conv1.kernel_net.layers.1.weight_v" in names
    assert not any(name.endswith("kernel_net.layers.1.weight") for name in names)
    # The CKCNN constructor does not re-initialise the kernel networks afterwards.
    torch.manual_seed(3)
    model = CKCNN(2, 3, hidden=4, omega_0=omega_0)
    for layer in model.blocks[1].conv2.kernel_net.layers[1:]:
        assert layer.weight.abs().max() <= math.sqrt(6 / hidden) / omega_0 * (1 + 1e-6)


def test_siren_without_weight_norm_uses_the_same_bounds():
    torch.manual_seed(0)
    net = SirenKernel(2, 2, hidden=16, omega_0=10.0, weight_norm=False)
    assert isinstance(net.layers[0], torch.nn.Linear)
    assert net.layers[0].weight.abs().max() <= 1.0
    assert net.layers[1].weight.abs().max() <= math.sqrt(6 / 16) / 10.0


# ---- padding --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["grid", "irregular"])
def test_padded_batch_equals_alone(mode):
    obs = _irregular_batch(batch=5, length=40, missing=0.25)
    torch.manual_seed(0)
    # fft_threshold 30: the padded batch (L = 40) goes through the FFT, short samples through conv1d.
    model = CKCNN(3, 4, hidden=8, omega_0=20.0, mode=mode, horizon=45.0, fft_threshold=30).double().eval()
    together = model(obs)
    for b in range(5):
        alone = model(obs[b])
        assert obs[b].values.shape[1] == int(obs.lengths[b])
        assert (alone - together[b : b + 1]).abs().max() <= 1e-6


def test_padding_content_is_ignored():
    obs = _irregular_batch(batch=3, length=20, missing=0.0)
    torch.manual_seed(0)
    for mode in ("grid", "irregular"):
        model = CKCNN(3, 4, hidden=8, mode=mode, mask_channel=False, horizon=20.0).double().eval()
        values = obs.values.clone()
        times = obs.times.clone()
        for b in range(3):
            n = int(obs.lengths[b])
            values[b, n:] = 1e3  # garbage after the end
            times[b, n:] = times[b, n - 1] - 1.0  # even times that go backwards
        torch.testing.assert_close(model(Observations(times, values, obs.lengths)), model(obs), rtol=0, atol=1e-12)


# ---- missing values in grid mode ------------------------------------------------------------------------


def test_grid_mode_never_zero_fills_silently():
    obs = _irregular_batch(batch=2, length=6, missing=0.3)
    with pytest.raises(ValueError, match="mask_channel"):
        CKCNN(3, 2, mode="grid", mask_channel=False).to(D)(obs)
    x = grid_inputs(obs.values, obs.lengths, mask_channel=True)
    assert x.shape == (2, 6, 6)
    torch.testing.assert_close(x[..., 3:], obs.mask.to(D))
    assert torch.equal(x[..., :3][obs.mask], obs.values[obs.mask])
    assert torch.count_nonzero(x[..., :3][~obs.mask]) == 0
    with pytest.raises(ValueError, match="NaN"):
        CKConv(3, 2, horizon=5.0)(obs.values)
    with pytest.raises(ValueError, match="grid mode"):
        CKCNN(3, 2, mode="irregular", mask_channel=True)


# ---- kernel L2 penalty ----------------------------------------------------------------------------------


def test_kernel_l2_is_the_sum_of_squares_of_the_sampled_kernel():
    torch.manual_seed(0)
    layer = CKConv(3, 2, omega_0=12.0, horizon=4.5, step=0.5).double()
    net = layer.kernel_net
    # By hand: positions k · step, k = 0..9, normalised 2Δ/horizon − 1, through sin(ω0(Wx + b)) twice, then linear.
    p = (torch.arange(10, dtype=D) * 0.5) * 2 / 4.5 - 1
    h = p.unsqueeze(1)
    for lin in net.layers[:2]:
        w = lin.weight_g * lin.weight_v / lin.weight_v.norm(dim=1, keepdim=True)
        h = torch.sin(12.0 * (h @ w.T + lin.bias))
    last = net.layers[2]
    w = last.weight_g * last.weight_v / last.weight_v.norm(dim=1, keepdim=True)
    kernel = h @ w.T + last.bias  # (10, out · in)
    penalty = layer.kernel_l2()
    torch.testing.assert_close(penalty, (kernel**2).sum(), rtol=1e-12, atol=0)
    penalty.backward()
    assert net.layers[0].weight_v.grad.abs().sum() > 0
    model = CKCNN(2, 3, hidden=4, horizon=9.0).double()
    torch.testing.assert_close(model.kernel_l2(), sum(c.kernel_l2() for c in model.convolutions()))
    torch.testing.assert_close(model.penalty(), model.kernel_l2())  # what train_classifier's penalty_weight uses
    assert len(model.convolutions()) == 4
    with pytest.raises(RuntimeError, match="horizon"):
        CKConv(1, 1).kernel_l2()


def test_horizon_is_fixed_by_the_first_batch_and_saved():
    torch.manual_seed(0)
    model = CKCNN(3, 2, hidden=4, mode="grid", mask_channel=False, step=0.5)
    obs = _irregular_batch(batch=3, length=12, missing=0.0, dtype=torch.float32)
    model(obs)
    assert all(float(c.horizon) == (int(obs.lengths.max()) - 1) * 0.5 for c in model.convolutions())
    model(obs[1])  # a shorter batch does not change it
    assert all(float(c.horizon) == 5.5 for c in model.convolutions())
    clone = CKCNN(3, 2, hidden=4, mode="grid", mask_channel=False, step=0.5)
    clone.load_state_dict(model.state_dict())
    torch.testing.assert_close(clone(obs), model(obs))


def test_wrong_kind_of_input_raises_type_error():
    """CKCNN reads Observations and a CKConv layer tensors: anything else (a Control, a bare tensor for the
    model, Observations for the layer) raises a TypeError naming the expected type."""
    times = torch.arange(6, dtype=D).expand(2, 6)
    values = torch.randn(2, 6, 3, generator=torch.Generator().manual_seed(0), dtype=D)
    obs = Observations.from_tensors(times, values)
    control = build_control(times, values, interpolation="linear")
    model = CKCNN(3, 2, hidden=4, blocks=1, kernel_hidden=4, horizon=5.0).double()
    for wrong, name in ((control, "Control"), (obs.values, "Tensor")):
        with pytest.raises(TypeError, match=f"reads Observations, got {name}"):
            model(wrong)
    layer = CKConv(3, 2, kernel_hidden=4, horizon=5.0).double()
    with pytest.raises(TypeError, match="reads a tensor .* got Observations"):
        layer(obs)
    with pytest.raises(TypeError, match="reads tensors .* got Tensor, Observations, Tensor"):
        layer.forward_irregular(obs.times, obs, obs.mask)


def test_grid_mode_warns_when_it_ignores_uneven_times():
    torch.manual_seed(0)
    index = torch.arange(12.0).repeat(3, 1)
    uneven = torch.sort(torch.rand(3, 12) * 10, 1).values
    values = torch.randn(3, 12, 2)
    model = create_model("ckcnn", Observations.from_tensors(index, values), 2, mode="grid").eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TimesIgnoredWarning)
        gapped = values.clone()
        gapped[:, 4] = float("nan")  # dropped points on the regular grid: times still evenly spaced
        model(Observations.from_tensors(index, gapped))
        at_index = model(Observations.from_tensors(index, values))
    with pytest.warns(TimesIgnoredWarning, match="mode='irregular'"):
        at_uneven = model(Observations.from_tensors(uneven, values))
    assert torch.equal(at_index, at_uneven)  # what the warning says: the times made no difference
    irregular = create_model("ckcnn", Observations.from_tensors(uneven, values), 2).eval()  # the default
    with warnings.catch_warnings():
        warnings.simplefilter("error", TimesIgnoredWarning)
        assert not torch.equal(
            irregular(Observations.from_tensors(uneven, values)), irregular(Observations.from_tensors(index, values))
        )


# ---- irregular mode on a lattice (the default) ----------------------------------------------------------


@pytest.mark.parametrize("full_length,blocks,conv", [(60, 2, "direct"), (60, 2, "fft"), (1429, 1, "auto")])
def test_lattice_form_equals_pairwise_form(full_length, blocks, conv):
    """Integer times with 30 % of the points dropped, variable lengths, missing channels (1,000 points in the
    last case): CKCNN on the lattice equals CKCNN summed pairwise, logits at every point within the lengths
    and the gradients w.r.t. every parameter (the kernel networks' included) and the observed values, to
    1e-10 of the largest magnitude in float64."""
    obs = _lattice_batch(batch=4 if full_length < 100 else 2, full_length=full_length)
    torch.manual_seed(0)
    options = dict(hidden=6, blocks=blocks, kernel_hidden=8, omega_0=20.0, conv=conv)
    lattice, pairwise = _same_weights(
        CKCNN(3, 4, irregular_conv="lattice", **options).double(),
        CKCNN(3, 4, irregular_conv="pairwise", **options).double(),
    )
    valid = obs.valid.unsqueeze(-1)
    weights = torch.randn(*obs.values.shape[:2], 4, generator=torch.Generator().manual_seed(1), dtype=D) * valid
    results = {}
    for name, model in (("lattice", lattice), ("pairwise", pairwise)):
        values = obs.values.clone().requires_grad_(True)
        out = model(Observations(obs.times, values, obs.lengths), return_sequence=True)
        grads = torch.autograd.grad((out * weights).sum(), (values, *model.parameters()))
        results[name] = (torch.where(valid, out, 0).detach(), torch.nan_to_num(grads[0]), *grads[1:])
    plan = lattice.blocks[0].conv1.plan_irregular(obs.times, obs.valid)[1]
    assert plan is not None and plan.spacing == 1.0
    for got, expected in zip(results["lattice"], results["pairwise"]):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-10 * max(1.0, float(expected.abs().max())))
    assert results["pairwise"][0].abs().max() > 0.1
    assert results["pairwise"][1][~obs.mask].abs().max() == 0  # missing entries: no gradient
    # The default ("auto") takes the lattice here, and gives the same answer.
    _, default = _same_weights(lattice, CKCNN(3, 4, **options).double())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(default(obs), lattice(obs), rtol=0, atol=0)


def test_default_ckcnn_output_changes_when_uneven_times_change():
    """Issue 23's acceptance line: the same values at other (uneven) times give another answer, the one the
    pairwise sum gives at those times; grid mode gives one answer for both (it ignores times)."""
    values = torch.randn(3, 40, 2, generator=torch.Generator().manual_seed(0), dtype=D)
    first = _lattice_batch(batch=3, full_length=57, channels=2, missing=0.0, seed=1)
    second = _lattice_batch(batch=3, full_length=57, channels=2, missing=0.0, seed=2)
    first, second = (Observations.from_tensors(o.times, values) for o in (first, second))
    torch.manual_seed(0)
    model = create_model("ckcnn", first, 5, horizon=60.0).double().eval()  # registry defaults
    assert model.mode == "irregular"
    _, pairwise = _same_weights(
        model, create_model("ckcnn", first, 5, horizon=60.0, irregular_conv="pairwise").double().eval()
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither TimesIgnoredWarning nor PairwiseFallbackWarning
        out_first, out_second = model(first), model(second)
    assert (out_first - out_second).abs().max() > 1e-3
    torch.testing.assert_close(out_first, pairwise(first), rtol=0, atol=1e-10)
    torch.testing.assert_close(out_second, pairwise(second), rtol=0, atol=1e-10)
    torch.manual_seed(0)
    grid = create_model("ckcnn", first, 5, horizon=60.0, mode="grid").double().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TimesIgnoredWarning)
        assert torch.equal(grid(first), grid(second))


@pytest.mark.parametrize("step", [0.5, 1.0])
def test_default_equals_grid_mode_on_regular_times(step):
    """Evenly spaced times (spacing 0.5), variable lengths, 200 points (FFT): the default CKCNN equals grid mode
    without mask channels, with no warning, whether or not ``step`` is the spacing: both normalise relative
    positions by the horizon set from the first batch ((L − 1) · step in grid mode, the longest time span in
    irregular mode), so position k maps to 2k/(L − 1) − 1 in both."""
    g = torch.Generator().manual_seed(2)
    times = 3.0 + 0.5 * torch.arange(200, dtype=D).expand(3, 200)
    obs = Observations.from_tensors(times, torch.randn(3, 200, 2, generator=g, dtype=D), torch.tensor([200, 91, 150]))
    torch.manual_seed(0)
    grid, default = _same_weights(
        CKCNN(2, 5, hidden=8, omega_0=20.0, mode="grid", mask_channel=False, step=step).double(),
        CKCNN(2, 5, hidden=8, omega_0=20.0, step=step).double(),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = grid(obs, return_sequence=True)
        got = default(obs, return_sequence=True)
    assert default.blocks[0].conv1.plan_irregular(obs.times, obs.valid)[1].size == 200
    for b, n in enumerate(obs.lengths.tolist()):
        torch.testing.assert_close(got[b, :n], expected[b, :n], rtol=0, atol=1e-10)
    # A horizon given in index units (199) reads the same times differently in irregular mode: it is in
    # time units there, so half the span is used.
    torch.manual_seed(0)
    fixed = CKCNN(2, 5, hidden=8, omega_0=20.0, mode="grid", mask_channel=False, horizon=199.0).double()
    _, indexed = _same_weights(fixed, CKCNN(2, 5, hidden=8, omega_0=20.0, horizon=199.0).double())
    assert (indexed(obs) - fixed(obs)).abs().max() > 1e-3


def test_lattice_padded_batch_equals_alone_and_ignores_padding_times():
    """A sample alone equals itself in a padded batch, though alone its lattice may be coarser (sample 1 has
    even times only: spacing 2 alone, 1 in the batch); padding times, however far away, change nothing."""
    obs = _lattice_batch(batch=4, full_length=50, missing=0.25)
    times = obs.times.clone()
    n = int(obs.lengths[1])
    times[1, :n] = 2 * torch.arange(n, dtype=D) + 10  # only even gaps
    obs = Observations.from_tensors(times, obs.values, obs.lengths)
    torch.manual_seed(0)
    model = CKCNN(3, 4, hidden=8, omega_0=20.0, horizon=60.0, irregular_conv="lattice").double().eval()
    together = model(obs)
    assert model.blocks[0].conv1.plan_irregular(obs[1].times, obs[1].valid)[1].spacing == 2.0
    for b in range(4):
        torch.testing.assert_close(model(obs[b]), together[b : b + 1], rtol=0, atol=1e-10)
    far = obs.times.clone()
    for b in range(4):
        far[b, int(obs.lengths[b]) :] = 1e9 + torch.arange(far.shape[1] - int(obs.lengths[b]), dtype=D)
    torch.testing.assert_close(model(Observations(far, obs.values, obs.lengths)), together, rtol=0, atol=0)


def test_auto_plan_fallback_warning_and_lattice_errors():
    """irregular_conv="auto": the lattice when the times lie on one with at most T² nodes; pairwise on a
    sparser lattice; pairwise with one PairwiseFallbackWarning per layer when there is none and T² exceeds
    max_lattice_size. irregular_conv="lattice" raises there instead."""
    layer = CKConv(2, 3, horizon=10.0, max_lattice_size=1000)
    dense = torch.tensor([[0.0, 1, 3, 4, 6, 7]])
    points = torch.ones(1, 6, dtype=torch.bool)
    assert layer.plan_irregular(dense, points)[1].size == 8
    sparse = torch.tensor([[0.0, 1, 37, 38, 39, 40]])  # 41 nodes > 6² pairs
    assert layer.plan_irregular(sparse, points)[1] is None
    real = torch.sort(torch.rand(1, 40, generator=torch.Generator().manual_seed(0)) * 30, 1).values
    many = torch.ones(1, 40, dtype=torch.bool)  # 40² = 1600 > 1000
    with pytest.warns(PairwiseFallbackWarning, match="resolution"):
        assert layer.plan_irregular(real, many)[1] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer.plan_irregular(real, many)  # once per layer
        CKConv(2, 3, horizon=10.0).plan_irregular(real, many)  # 1600 <= 65,536: cheap, no warning
    strict = CKConv(2, 3, horizon=10.0, irregular_conv="lattice")
    with pytest.raises(ValueError, match="no common lattice"):
        strict.plan_irregular(real, many)
    assert strict.plan_irregular(sparse, points)[1].size == 41  # "lattice" takes it however sparse
    assert CKConv(2, 3, irregular_conv="pairwise").plan_irregular(dense, points)[1] is None
    for bad in (dict(irregular_conv="fft"), dict(resolution=0.0), dict(resolution=-1.0), dict(max_lattice_size=0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            CKConv(2, 3, **bad)
    for irregular_only in (dict(irregular_conv="pairwise"), dict(resolution=0.1), dict(max_lattice_size=10)):
        with pytest.raises(ValueError, match="irregular mode"):
            CKCNN(2, 3, mode="grid", **irregular_only)


def test_resolution_snaps_times_in_both_forms():
    """With a resolution, every form reads the snapped times: the lattice form on jittered times equals the
    pairwise form on the snapped times, and differs from the unsnapped answer by at most what the documented
    bound allows (here: times moved by ≤ 0.05 of a 60-unit horizon)."""
    obs = _lattice_batch(batch=3, full_length=40, missing=0.2, seed=3)
    jitter = (torch.rand(obs.times.shape, generator=torch.Generator().manual_seed(4), dtype=D) - 0.5) * 0.1
    jittered = Observations.from_tensors(obs.times + jitter, obs.values, obs.lengths)
    torch.manual_seed(0)
    snapping, pairwise, exact = _same_weights(
        CKCNN(3, 4, hidden=6, omega_0=5.0, horizon=60.0, resolution=1.0, irregular_conv="lattice").double().eval(),
        CKCNN(3, 4, hidden=6, omega_0=5.0, horizon=60.0, irregular_conv="pairwise").double().eval(),
        CKCNN(3, 4, hidden=6, omega_0=5.0, horizon=60.0, irregular_conv="pairwise").double().eval(),
    )
    snapped_times = snapping.blocks[0].conv1.plan_irregular(
        torch.where(jittered.valid, jittered.times, 0), jittered.valid
    )[0]
    # Each sample's first point stays, the others move to first + integer: back onto the integers plus the
    # first point's jitter.
    shift = (obs.times + jitter)[:, :1] - obs.times[:, :1]
    torch.testing.assert_close(torch.where(obs.valid, snapped_times, 0), torch.where(obs.valid, obs.times + shift, 0))
    torch.testing.assert_close(snapping(jittered), pairwise(obs), rtol=0, atol=1e-10)  # shift-invariant
    assert 0 < (snapping(jittered) - exact(jittered)).abs().max() < 0.05


def test_auto_snaps_many_real_valued_times_to_a_fine_lattice():
    """Real-valued times on no lattice with T² above max_lattice_size (the pairs of 2,000 such points held 15 GB):
    "auto" snaps them to horizon / AUTO_LATTICE_NODES and sums on that lattice. Every time moves by at most half
    that resolution, the answer is within the documented bound of the exact pairwise sum, and it is the same for a
    sample alone and in a padded batch (the resolution is fixed with the horizon, not drawn from the batch)."""
    torch.manual_seed(0)
    T = 600  # 600² > 65,536: no pairwise sum by default
    times = torch.cumsum(torch.rand(2, T, dtype=D) + 0.5, dim=1)
    lengths = torch.tensor([T, 450])
    points = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    values = torch.randn(2, T, 3, dtype=D)
    observed = points.unsqueeze(-1).expand(-1, -1, 3) & (torch.rand(2, T, 3) > 0.3)
    layer = CKConv(3, 4, irregular_conv="auto").to(D)
    exact = CKConv(3, 4, irregular_conv="pairwise").to(D)
    exact.load_state_dict(layer.state_dict())
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no PairwiseFallbackWarning: the snapped lattice is used
        fast = layer.forward_irregular(times, values, observed)
        reference = exact.forward_irregular(times, values, observed)
        snapped, lattice = layer.plan_irregular(times, points)
        assert lattice is not None and lattice.size <= AUTO_LATTICE_NODES + 1
        resolution = float(layer.horizon) / AUTO_LATTICE_NODES
        assert float((snapped - times)[points].abs().max()) <= resolution / 2 * (1 + 1e-9)
        assert float((snapped - times)[points].abs().max()) > 0  # the times really were off-lattice
        # the same sum as the pairwise form on the snapped times, and close to it on the raw ones
        on_snapped = exact.forward_irregular(snapped, values, observed)
        keep = points.unsqueeze(-1).expand_as(fast)
        scale = reference[keep].abs().max()
        assert float((fast - on_snapped)[keep].abs().max()) <= 1e-10 * float(scale)
        assert float((fast - reference)[keep].abs().max()) <= 1e-2 * float(scale)
        alone = layer.forward_irregular(times[1:, :450], values[1:, :450], observed[1:, :450])
    torch.testing.assert_close(alone, fast[1:, :450], rtol=0, atol=1e-12)
