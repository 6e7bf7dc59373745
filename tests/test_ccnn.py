"""CCNN (paper 001), 1D causal: MAGNet kernel network, cropped Gaussian mask, kernel rescaling, the layer's
FFT and direct paths, causality, padding, the L2 kernel penalty. Float64 throughout."""

import math

import pytest
import torch

from neuralde_seq.controls import build_control
from neuralde_seq.models.ccnn import CCNN, SeparableFlexConv
from neuralde_seq.models.kernel_networks import MAGNet, cropped_length, gaussian_mask, kernel_positions
from neuralde_seq.observations import Observations

DT = torch.float64


def make_observations(seed=0, B=4, T=23, C=3, drop=0.3):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([T, 9, 17, 2][:B] + [T] * max(0, B - 4))
    times = torch.arange(T, dtype=DT).repeat(B, 1)
    values = torch.randn(B, T, C, generator=g, dtype=DT)
    values[torch.rand(B, T, C, generator=g) < drop] = float("nan")
    values[:, 0] = torch.randn(B, C, generator=g, dtype=DT)  # every sample observed at its first step
    return Observations.from_tensors(times, values, lengths)


def magnet_by_hand(net: MAGNet, c: torch.Tensor) -> torch.Tensor:
    """The MAGNet formula, written out element by element from its parameters."""
    gamma, mu, freq, phase = (p.detach().tolist() for p in (net.gamma, net.mu, net.freq, net.phase))
    n_filters, hidden = len(mu), len(mu[0])
    h = None
    for l in range(n_filters):
        g = torch.tensor(
            [
                [
                    math.exp(-0.5 * (gamma[l][i] * (x - mu[l][i])) ** 2) * math.sin(freq[l][i] * x + phase[l][i])
                    for i in range(hidden)
                ]
                for x in c.tolist()
            ],
            dtype=DT,
        )
        if l == 0:
            h = g
        else:
            lin = net.linears[l - 1]
            h = (h @ lin.weight.detach().T + lin.bias.detach()) * g
    return h @ net.output_linear.weight.detach().T + net.output_linear.bias.detach()


# --------------------------------------------------------------------------- MAGNet


def test_magnet_output_equals_formula():
    torch.manual_seed(0)
    net = MAGNet(out_channels=3, hidden=5, layers=3, omega_0=4.0).to(DT)
    with torch.no_grad():  # move every parameter off its initial value (phases start at 0)
        for p in net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    c = kernel_positions(9, dtype=DT)
    assert torch.allclose(net(c), magnet_by_hand(net, c), rtol=0, atol=1e-12)


def test_magnet_initialisation():
    torch.manual_seed(1)
    alpha, beta, omega_0, spread = 6.0, 1.0, 7.0, 0.3
    net = MAGNet(out_channels=2, hidden=4000, layers=3, omega_0=omega_0, alpha=alpha, beta=beta, spread=spread)
    for l in range(4):
        gamma = net.gamma[l].detach()
        # gamma_l ~ Gamma(alpha / (l + 1), beta): mean alpha / ((l + 1) beta), variance mean / beta
        assert abs(gamma.mean() / (alpha / (l + 1) / beta) - 1) < 0.05
        assert abs(gamma.var() / (alpha / (l + 1) / beta**2) - 1) < 0.12
        u = net.freq[l].detach() / (2 * math.pi * omega_0 * gamma)
        assert u.abs().max() <= 1 and u.abs().max() > 0.99 and abs(float(u.mean())) < 0.05
        mu = net.mu[l].detach()
        assert mu.max() <= 1 and mu.min() >= 1 - spread
    assert torch.equal(net.phase.detach(), torch.zeros_like(net.phase))
    assert all(torch.equal(lin.bias.detach(), torch.ones(4000)) for lin in net.linears)


# --------------------------------------------------------------------------- mask and crop


def test_gaussian_mask_is_one_at_its_centre():
    mean, width = torch.tensor(0.37, dtype=DT), torch.tensor(0.2, dtype=DT)
    assert float(gaussian_mask(mean.clone(), mean, width)) == 1.0
    c = torch.linspace(-1, 1, 101, dtype=DT)
    assert float(gaussian_mask(c, mean, width).max()) <= 1.0


@pytest.mark.parametrize(
    "K,mean,width,threshold",
    [
        (64, 1.0, 0.075, 0.1),
        (64, 1.0, 0.3, 0.1),
        (200, 1.0, 0.21, 0.05),
        (50, 0.93, 0.1, 0.2),
        (30, 1.05, 0.4, 0.1),
        (40, 1.0, 5.0, 0.1),  # the last keeps the whole kernel
    ],
)
def test_crop_where_mask_falls_below_threshold(K, mean, width, threshold):
    torch.manual_seed(0)
    conv = SeparableFlexConv(3, 2, K, kernel_hidden=4, mask_threshold=threshold).to(DT)
    with torch.no_grad():
        conv.mask_mean.fill_(mean)
        conv.mask_width.fill_(width)
    # the threshold formula: lags with c_j >= mean - width sqrt(-2 ln threshold)
    root = mean - width * math.sqrt(-2 * math.log(threshold))
    expected = min(K, math.floor((1 - root) / (2 / (K - 1))) + 1)
    assert cropped_length(K, mean, width, threshold) == expected
    # the same length read off the mask values themselves: the last lag where the mask is >= threshold
    m = conv.mask().detach()
    above = torch.nonzero(m >= threshold).flatten()
    assert expected == int(above.max()) + 1
    if expected < K:
        assert float(m[expected]) < threshold <= float(m[expected - 1])
    # the sampled kernel has that length, and the kernel network is evaluated on those lags only
    seen = []
    handle = conv.kernel_net.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].numel()))
    k = conv.kernel()
    handle.remove()
    assert k.shape == (3, expected) and seen == [expected]
    # and it is the MAGNet times the mask on those lags
    c = kernel_positions(K, dtype=DT)[:expected]
    assert torch.allclose(k, conv.kernel_net(c).T * gaussian_mask(c, conv.mask_mean, conv.mask_width), atol=1e-15)


# --------------------------------------------------------------------------- kernel rescaling


@pytest.mark.parametrize("n_in,K", [(24, 64), (16, 256)])
def test_kernel_rescaling_gives_variance_one_over_fan_in(n_in, K):
    def variances(mode):
        out = []
        for seed in range(6):
            torch.manual_seed(seed)
            conv = SeparableFlexConv(n_in, 8, K, kernel_hidden=32, omega_0=10.0, kernel_rescale=mode).to(DT)
            k = conv.kernel().detach()
            out.append((float(k.var()), n_in * k.shape[1]))
        return out

    measured = variances("measured")
    ratio = sum(v * fan for v, fan in measured) / len(measured)  # variance / (1 / (N_in |Omega|)), averaged
    assert abs(ratio - 1) < 0.1
    paper = variances("paper")  # the paper's fixed factor: off by the MAGNet's raw variance (about 0.4)
    ratio = sum(v * fan for v, fan in paper) / len(paper)
    assert 0.2 < ratio < 1
    raw = variances(None)
    ratio = sum(v * fan for v, fan in raw) / len(raw)
    assert ratio > 20  # a missing rescale is off by about N_in |Omega| times the raw variance


# --------------------------------------------------------------------------- convolution

# (The convolution functions themselves: tests/test_ops.py.)


def test_flexconv_fft_and_direct_agree():
    torch.manual_seed(3)
    conv = SeparableFlexConv(5, 6, 300, mask_width=0.6, conv="direct", fft_threshold=64).to(DT)
    x = torch.randn(2, 150, 5, dtype=DT)
    assert conv.kernel_length() > 64  # long enough that "auto" picks the FFT
    direct = conv(x)
    conv.conv = "fft"
    fft = conv(x)
    conv.conv = "auto"
    auto = conv(x)
    assert (direct - fft).abs().max() < 1e-5 and torch.equal(auto, fft)


# --------------------------------------------------------------------------- the classifier


def small_ccnn(**options):
    torch.manual_seed(0)
    defaults = dict(hidden=8, blocks=2, kernel_size=32, kernel_hidden=8, mask_width=0.4, dropout=0.0)
    return CCNN(3, 5, **{**defaults, **options}).to(DT)


@pytest.mark.parametrize("options,train", [({}, False), ({"conv": "fft"}, False), ({"norm": "layer"}, True)])
def test_causality(options, train):
    """The features at step t have zero gradient with respect to the inputs after t (up to round-off of
    the FFT, whose result is causal exactly only in exact arithmetic)."""
    model = small_ccnn(**options)
    model.train(train)
    obs = make_observations(B=1, T=20, drop=0.0)
    values = obs.values.clone().requires_grad_(True)
    h = model.features(Observations(obs.times, values, obs.lengths))
    assert min(c.kernel_length() for c in model.flex_convs()) > 3
    direction = torch.randn(h.shape[-1], dtype=DT, generator=torch.Generator().manual_seed(0))
    for t in (0, 7, 13):
        (grad,) = torch.autograd.grad((h[0, t] * direction).sum(), values, retain_graph=True)
        past, future = grad[0, : t + 1], grad[0, t + 1 :]
        assert past.abs().sum() > 0
        if options.get("conv") == "fft":
            assert future.abs().max() <= 1e-12 * past.abs().max()
        else:
            assert torch.count_nonzero(future) == 0
        if t >= 2:
            assert grad[0, t - 2].abs().sum() > 0  # the kernel reaches back


@pytest.mark.parametrize("options,train", [({}, False), ({"conv": "fft"}, False), ({"norm": "layer"}, True)])
def test_padded_batch_equals_alone(options, train):
    model = small_ccnn(**options)
    if not train:  # give the batch norms running statistics that are not the identity
        model.train()
        model(make_observations(seed=5))
    model.train(train)
    obs = make_observations()
    batch = model(obs)
    for i in range(obs.batch_size):
        alone = model(obs[i])
        assert (batch[i] - alone[0]).abs().max() <= 1e-6


def test_batch_norm_statistics_ignore_padding():
    obs = make_observations()
    longer = Observations(
        torch.arange(40, dtype=DT).repeat(obs.batch_size, 1),
        torch.cat([obs.values, torch.full((obs.batch_size, 17, 3), float("nan"), dtype=DT)], 1),
        obs.lengths,
    )
    model = small_ccnn()
    model.train()
    assert (model(obs) - model(longer)).abs().max() <= 1e-10


def test_kernel_l2_is_the_sum_of_squares_of_the_generated_kernels():
    model = small_ccnn()
    with torch.no_grad():
        for conv in model.flex_convs():
            conv.mask_width.add_(0.1 * torch.rand(()))
            conv.mask_mean.sub_(0.05 * torch.rand(()))
    expected = 0.0
    for conv in model.flex_convs():
        mean, width = float(conv.mask_mean.detach()), float(conv.mask_width.detach())
        root = mean - width * math.sqrt(-2 * math.log(conv.mask_threshold))
        K = conv.kernel_size
        L = min(K, math.floor((1 - root) * (K - 1) / 2) + 1)
        c = 1 - 2 * torch.arange(L, dtype=DT) / (K - 1)
        mask = torch.exp(-0.5 * ((c - mean) / width) ** 2)
        k = magnet_by_hand(conv.kernel_net, c).T * mask
        expected += float((k**2).sum())
    penalty = model.kernel_l2()
    assert abs(penalty.item() - expected) <= 1e-10 * expected
    penalty.backward()
    conv = model.flex_convs()[0]
    assert conv.mask_width.grad is not None and conv.kernel_net.output_linear.weight.grad.abs().sum() > 0


def test_missing_values_read_only_through_zero_fill_and_mask():
    model = small_ccnn()
    model.eval()
    obs = make_observations()
    values = obs.values.clone()
    assert torch.isnan(values).any()
    logits = model(obs)
    assert torch.isfinite(logits).all() and logits.shape == (4, 5)
    # the mask channel is read: an observed zero differs from a missing value
    filled = Observations(obs.times, torch.nan_to_num(values, nan=0.0), obs.lengths)
    assert (model(filled) - logits).abs().max() > 1e-6


def test_wrong_kind_of_input_raises_type_error():
    """CCNN reads Observations and a SeparableFlexConv layer a tensor: anything else (a Control, a bare tensor
    for the model, Observations for the layer) raises a TypeError naming the expected type."""
    obs = make_observations(drop=0.0)
    control = build_control(obs.times, obs.values, obs.lengths, interpolation="linear")
    model = small_ccnn()
    for wrong, name in ((control, "Control"), (obs.values, "Tensor")):
        with pytest.raises(TypeError, match=f"reads Observations, got {name}"):
            model(wrong)
    with pytest.raises(TypeError, match="reads a tensor .* got Observations"):
        model.input_conv(obs)
