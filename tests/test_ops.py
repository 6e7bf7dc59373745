"""neuralde_seq.ops.causal_conv: every fast path against its reference and both against a plain loop over the
formula, in float64 (values and gradients).

- Grid: FFT vs direct (``conv1d``), full channel mixing (CKConv) and depthwise (CCNN), odd and even lengths,
  kernels shorter than, as long as and longer than the sequence, batch > 1.
- Irregular times: the factorised sum (features once per distinct Δ) vs the direct one (ψ at every pair),
  unsorted times with repeated differences, partly observed points, NaN in unobserved entries.
- Irregular times on a lattice: the lattice form (scatter, grid convolution, gather) vs the pairwise form, at up
  to 1,000 points; `find_lattice`, `snap_times` and `fft_length` against their definitions.
"""

import pytest
import torch

from neuralde_seq.ops.causal_conv import (
    causal_conv,
    causal_conv_direct,
    causal_conv_fft,
    fft_length,
    find_lattice,
    irregular_causal_conv,
    lattice_causal_conv,
    snap_times,
)

D = torch.float64


def loop_causal_conv(x, kernel):
    """y[b, t] = Σ_{k ≤ min(t, K−1)} w_k x[b, t − k] written as loops over t and k (kernel (C_out, C_in, K): w_k a
    matrix; (C, K): w_k a per-channel scale)."""
    B, T, _ = x.shape
    out = kernel.shape[0]
    y = [torch.zeros(B, out, dtype=x.dtype) for _ in range(T)]
    for t in range(T):
        for k in range(min(t + 1, kernel.shape[-1])):
            w = kernel[..., k]
            y[t] = y[t] + (x[:, t - k] @ w.T if kernel.dim() == 3 else x[:, t - k] * w)
    return torch.stack(y, dim=1)


def _grid_case(kind, length, kernel_length, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, length, 4, generator=g, dtype=D)
    shape = (5, 4, kernel_length) if kind == "full" else (4, kernel_length)
    return x, torch.randn(shape, generator=g, dtype=D)


GRID_CASES = [
    (kind, T, K)
    for kind in ("full", "depthwise")
    for T, K in ((37, 5), (36, 5), (33, 33), (20, 31), (21, 64), (16, 1), (1, 3))
]


@pytest.mark.parametrize("kind,length,kernel_length", GRID_CASES)
def test_grid_fft_direct_and_loop_agree(kind, length, kernel_length):
    """Values and the gradients of a random linear functional (w.r.t. x and the kernel) of the three agree to
    1e-10; the FFT's zero padding leaves no circular wrap-around, and lags >= T are ignored."""
    x, kernel = _grid_case(kind, length, kernel_length)
    weights = torch.randn(x.shape[0], length, kernel.shape[0], generator=torch.Generator().manual_seed(1), dtype=D)
    results = {}
    for name, function in (("loop", loop_causal_conv), ("direct", causal_conv_direct), ("fft", causal_conv_fft)):
        xs, ks = x.clone().requires_grad_(), kernel.clone().requires_grad_()
        y = function(xs, ks)
        results[name] = (y.detach(), *torch.autograd.grad((y * weights).sum(), (xs, ks)))
    for name in ("direct", "fft"):
        for got, expected in zip(results[name], results["loop"]):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    assert results["loop"][0].abs().max() > 1  # not trivially zero
    if kernel_length > length:  # lags that never reach an output get no gradient
        assert results["fft"][2][..., length:].abs().max() == 0


def test_grid_dispatch_and_errors():
    x, kernel = _grid_case("full", 12, 4)
    assert torch.equal(causal_conv(x, kernel, "fft"), causal_conv_fft(x, kernel))
    assert torch.equal(causal_conv(x, kernel), causal_conv_direct(x, kernel))
    with pytest.raises(ValueError, match="algorithm must be one of"):
        causal_conv(x, kernel, "auto")
    with pytest.raises(ValueError, match="C_in"):
        causal_conv(x, kernel[:, :3])
    with pytest.raises(ValueError, match="depthwise"):
        causal_conv(x, kernel[0, :3])
    with pytest.raises(ValueError, match=r"\(B, T, C\)"):
        causal_conv(x[0], kernel)


# ---- irregular times ----------------------------------------------------------------------------------------


class _Features(torch.nn.Module):
    """A small feature map h(Δ) = sin(a Δ + b), (U,) -> (U, K)."""

    def __init__(self, K=6):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.a = torch.nn.Parameter(torch.randn(K, generator=g, dtype=D))
        self.b = torch.nn.Parameter(torch.randn(K, generator=g, dtype=D))

    def forward(self, delta):
        return torch.sin(delta.unsqueeze(-1) * self.a + self.b)


def loop_irregular_conv(times, x, observed, features, weight, bias):
    """y[b, i] = Σ_{j: t_j ≤ t_i} (W h(t_i − t_j) + b) x̃_j with x̃ the observed entries, by loops over b, i, j."""
    B, T, _ = x.shape
    rows = []
    for b in range(B):
        for i in range(T):
            y = torch.zeros(weight.shape[0], dtype=x.dtype)
            for j in range(T):
                if times[b, j] <= times[b, i] and observed[b, j].any():
                    psi = weight @ features(times[b, i : i + 1] - times[b, j : j + 1])[0] + bias
                    y = y + psi @ torch.where(observed[b, j], x[b, j], torch.zeros((), dtype=x.dtype))
            rows.append(y)
    return torch.stack(rows).view(B, T, -1)


def _irregular_case(seed=3):
    g = torch.Generator().manual_seed(seed)
    B, T, C_in, C_out = 3, 9, 2, 3
    # Unsorted times on a grid of 1/4 (repeated differences, equal times within a sample).
    times = torch.randint(0, 12, (B, T), generator=g).to(D) / 4
    x = torch.randn(B, T, C_in, generator=g, dtype=D)
    observed = torch.rand(B, T, C_in, generator=g) < 0.7
    observed[0, 2] = False  # a point with nothing observed: contributes nothing, still gets an output
    x[~observed] = float("nan")
    weight = torch.randn(C_out, C_in, 6, generator=g, dtype=D)
    bias = torch.randn(C_out, C_in, generator=g, dtype=D)
    return times, x, observed, weight, bias


def test_irregular_factorised_direct_and_loop_agree():
    """Values and gradients (w.r.t. x, the last layer's weight and bias, and the feature map's parameters) agree
    to 1e-10; unobserved entries receive zero gradient."""
    times, x, observed, weight, bias = _irregular_case()
    features = _Features()
    out_weights = torch.randn(*x.shape[:2], weight.shape[0], generator=torch.Generator().manual_seed(4), dtype=D)
    results = {}
    for algorithm in ("loop", "direct", "factorised"):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, weight, bias))
        if algorithm == "loop":
            y = loop_irregular_conv(times, xs, observed, features, ws, bs)
        else:
            y = irregular_causal_conv(times, xs, observed, features, ws, bs, algorithm=algorithm)
        grads = torch.autograd.grad((y * out_weights).sum(), (xs, ws, bs, *features.parameters()))
        results[algorithm] = (y.detach(), *grads)
    for algorithm in ("direct", "factorised"):
        for got, expected in zip(results[algorithm], results["loop"]):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    y, grad_x = results["factorised"][:2]
    assert torch.isfinite(y).all() and y.abs().max() > 1
    assert grad_x[~observed].abs().max() == 0


def test_irregular_without_kernel_bias_and_errors():
    times, x, observed, weight, _ = _irregular_case(seed=5)
    features = _Features()
    fast = irregular_causal_conv(times, x, observed, features, weight, None)
    expected = loop_irregular_conv(times, x, observed, features, weight, torch.zeros(3, 2, dtype=D))
    torch.testing.assert_close(fast, expected, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        irregular_causal_conv(times, x, observed, features, weight, None, algorithm="fft")


# ---- irregular times on a lattice ---------------------------------------------------------------------------


def lattice_kernel(features, weight, bias, spacing, size):
    """ψ(k h) = W h(k h) + b for k = 0..size−1, as (C_out, C_in, size)."""
    lags = torch.arange(size, dtype=weight.dtype) * spacing
    kernel = torch.einsum("ock,uk->ocu", weight, features(lags))
    return kernel if bias is None else kernel + bias.unsqueeze(-1)


def _dropped_lattice_case(batch, full_length, channels=2, drop=0.3, missing=0.2, spacing=1.0, seed=0):
    """Times on the lattice offset_b + n · spacing (n integer, 0..full_length − 1) with ``drop`` of the points
    removed and the rest packed to the front (uneven gaps), random lengths (padding after: times NaN-free
    garbage, values NaN), ``missing`` of the remaining entries NaN."""
    g = torch.Generator().manual_seed(seed)
    kept = full_length - round(drop * full_length)
    nodes = torch.rand(batch, full_length, generator=g).argsort(1)[:, :kept].sort(1).values
    offsets = torch.randint(-50, 50, (batch, 1), generator=g).to(D)
    times = offsets + nodes.to(D) * spacing
    x = torch.randn(batch, kept, channels, generator=g, dtype=D)
    observed = torch.rand(batch, kept, channels, generator=g) > missing
    lengths = torch.randint(kept // 2, kept + 1, (batch,), generator=g)
    lengths[0] = kept
    valid = torch.arange(kept).unsqueeze(0) < lengths.unsqueeze(1)
    observed &= valid.unsqueeze(-1)
    times = torch.where(valid, times, torch.full_like(times, -1e6))  # padding: far from every true time
    x[~observed] = float("nan")
    return times, x, observed, valid


@pytest.mark.parametrize("full_length,spacing,algorithm", [(40, 1.0, "direct"), (40, 0.25, "fft"), (1429, 1.0, "fft")])
def test_lattice_equals_pairwise(full_length, spacing, algorithm):
    """On times of a lattice (30 % of the points dropped, per-sample offsets, variable lengths, missing channels,
    1,000 points in the last case), the lattice form equals the factorised pairwise form (itself checked
    against the loop above) at every point within the lengths: values and the gradients w.r.t. x, the last
    layer's weight and bias and the feature map's parameters, to 1e-10 in float64."""
    times, x, observed, valid = _dropped_lattice_case(3 if full_length < 100 else 2, full_length, spacing=spacing)
    features = _Features()
    g = torch.Generator().manual_seed(4)
    weight = torch.randn(3, 2, 6, generator=g, dtype=D)
    bias = torch.randn(3, 2, generator=g, dtype=D)
    out_weights = torch.randn(*x.shape[:2], 3, generator=g, dtype=D) * valid.unsqueeze(-1)
    lattice = find_lattice(times, valid, max_size=10_000)
    assert lattice is not None and lattice.spacing == spacing
    results = {}
    for form in ("pairwise", "lattice"):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, weight, bias))
        if form == "pairwise":
            y = irregular_causal_conv(times, xs, observed, features, ws, bs)
        else:
            kernel = lattice_kernel(features, ws, bs, lattice.spacing, lattice.size)
            y = lattice_causal_conv(lattice.index, lattice.size, xs, observed, kernel, algorithm)
        grads = torch.autograd.grad((y * out_weights).sum(), (xs, ws, bs, *features.parameters()))
        results[form] = (torch.where(valid.unsqueeze(-1), y, 0).detach(), *grads)
    for got, expected in zip(results["lattice"], results["pairwise"]):
        # 1e-10 of the largest magnitude: a gradient summed over 1,000 x 1,000 pairs reaches 1e5.
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-10 * max(1.0, float(expected.abs().max())))
    assert results["pairwise"][0].abs().max() > 1
    assert results["lattice"][1][~observed].abs().max() == 0  # missing entries get no gradient


def test_lattice_equals_pairwise_with_unsorted_and_equal_times():
    """The case of the pairwise tests (unsorted times on a grid of 1/4, equal times within a sample, a point
    with nothing observed): points on one node add up, as Δ = 0 counts in the pairwise sum."""
    times, x, observed, weight, bias = _irregular_case()
    features = _Features()
    points = torch.ones(times.shape, dtype=torch.bool)
    lattice = find_lattice(times, points, max_size=1000)
    assert lattice.spacing in (0.25, 0.5, 0.75, 1.0) and torch.equal(lattice.node_times(), times)
    expected = irregular_causal_conv(times, x, observed, features, weight, bias)
    for algorithm in ("direct", "fft"):
        kernel = lattice_kernel(features, weight, bias, lattice.spacing, lattice.size)
        y = lattice_causal_conv(lattice.index, lattice.size, x, observed, kernel, algorithm)
        torch.testing.assert_close(y, expected, rtol=0, atol=1e-10)
    # A depthwise kernel (C_in, K) works the same way: y[b, i, c] = Σ w[c, n_i − n_j] x̃[b, j, c].
    depthwise = torch.randn(2, lattice.size, generator=torch.Generator().manual_seed(0), dtype=D)
    y = lattice_causal_conv(lattice.index, lattice.size, x, observed, depthwise, "fft")
    b, i = 1, 4
    filled = torch.where(observed, x, torch.zeros((), dtype=D))
    lags = lattice.index[b, i] - lattice.index[b]
    manual = sum(depthwise[:, lags[j]] * filled[b, j] for j in range(times.shape[1]) if lags[j] >= 0)
    torch.testing.assert_close(y[b, i], manual, rtol=0, atol=1e-12)


def test_find_lattice_spacing_nodes_and_limits():
    points = torch.ones(2, 5, dtype=torch.bool)
    # Integer times with points dropped and per-sample offsets: spacing 1, nodes t − first time.
    times = torch.tensor([[3.0, 4, 7, 8, 12], [-2, 1, 2, 5, 6]], dtype=D)
    lattice = find_lattice(times, points, max_size=100)
    assert lattice.spacing == 1.0 and lattice.size == 10
    assert torch.equal(lattice.index, (times - times[:, :1]).long())
    assert torch.equal(lattice.origin, times[:, 0])
    # The common divisor of the gaps, smaller than the smallest gap: gaps 4, 6 and 10 -> spacing 2.
    lattice = find_lattice(torch.tensor([[0.0, 4, 10, 20, 24]], dtype=D), points[:1], max_size=100)
    assert lattice.spacing == 2.0 and lattice.index.tolist() == [[0, 2, 5, 10, 12]]
    # Multiples of 0.1 as computed in floating point (not exact binary fractions), float32 and float64.
    k = torch.tensor([[0, 3, 4, 9, 17], [0, 1, 5, 6, 30]])
    for dtype in (torch.float32, torch.float64):
        lattice = find_lattice(k.to(dtype) * 0.1 + 7.3, points, max_size=100)
        assert lattice is not None and abs(lattice.spacing - 0.1) < 1e-6 and torch.equal(lattice.index, k)
    # The tolerance is the rounding of the times' own dtype: float32 times read as float64 are 1e-7 off the
    # lattice, 1e6 float64 rounding units: no lattice (snap_times with a resolution puts them on one).
    assert find_lattice((k.float() * 0.1 + 7.3).double(), points, max_size=100) is None
    lattice = find_lattice(snap_times((k.float() * 0.1 + 7.3).double(), points, 0.1), points, max_size=100)
    assert torch.equal(lattice.index, k)
    # A long float32 grid with points dropped: a spacing read off one gap is 1e-3 off, 20 nodes off at the far
    # end, so the spacing must be refined along the way.
    fine = torch.linspace(0, 1, 20_000)
    keep = torch.rand(20_000, generator=torch.Generator().manual_seed(0)) > 0.3
    keep[[0, -1]] = True
    lattice = find_lattice(fine[keep].unsqueeze(0), torch.ones(1, int(keep.sum()), dtype=torch.bool), 100_000)
    assert lattice.size == 20_000 and torch.equal(lattice.index[0], keep.nonzero()[:, 0])
    # Arbitrary real times lie on no lattice of a bounded size.
    jitter = torch.tensor([[0.0, 1.0137, 2.2913, 3.5021, 4.0072]], dtype=D)
    assert find_lattice(jitter, points[:1], max_size=100_000) is None
    # The size limit: 0..1000 in steps of 1 has 1,001 nodes.
    grid = torch.arange(0.0, 1001.0, dtype=D).unsqueeze(0)
    assert find_lattice(grid, torch.ones_like(grid, dtype=torch.bool), max_size=1001).size == 1001
    assert find_lattice(grid, torch.ones_like(grid, dtype=torch.bool), max_size=1000) is None
    # Points not placed (padding) neither stretch the lattice nor need to lie on it.
    padded = torch.tensor([[0.0, 2, 4, 1e9 + 0.37]], dtype=D)
    lattice = find_lattice(padded, torch.tensor([[True, True, True, False]]), max_size=10)
    assert lattice.spacing == 2.0 and lattice.size == 3 and lattice.index.tolist() == [[0, 1, 2, 0]]
    # One time per sample: one node.
    assert find_lattice(torch.tensor([[5.0], [7.0]], dtype=D), torch.ones(2, 1, dtype=torch.bool), 1).size == 1
    with pytest.raises(ValueError, match="max_size"):
        find_lattice(times, points, max_size=0)
    with pytest.raises(ValueError, match="points"):
        find_lattice(times, points[:, :3], max_size=10)
    with pytest.raises(ValueError, match="finite"):
        find_lattice(torch.tensor([[0.0, float("nan")]]), torch.ones(1, 2, dtype=torch.bool), max_size=10)


def test_snap_times_moves_each_time_by_at_most_half_the_resolution():
    g = torch.Generator().manual_seed(0)
    times = torch.rand(3, 50, generator=g, dtype=D).cumsum(1) * 3 + 10
    points = torch.ones(times.shape, dtype=torch.bool)
    points[2, 40:] = False
    snapped = snap_times(times, points, 0.5)
    assert (snapped - times)[points].abs().max() <= 0.25 + 1e-12
    assert torch.equal(snapped[:, 0], times[:, 0])  # each sample's first point stays
    assert torch.equal(snapped[~points], times[~points])
    steps = (snapped - snapped[:, :1]) / 0.5
    assert (steps[points] - steps[points].round()).abs().max() <= 1e-9
    lattice = find_lattice(snapped, points, max_size=1000)
    assert lattice is not None and lattice.spacing % 0.5 < 1e-9
    with pytest.raises(ValueError, match="resolution"):
        snap_times(times, points, 0.0)


def test_lattice_causal_conv_errors():
    x = torch.randn(1, 4, 2, dtype=D)
    index = torch.tensor([[0, 1, 3, 5]])
    kernel = torch.randn(3, 2, 6, dtype=D)
    with pytest.raises(ValueError, match="index must lie"):
        lattice_causal_conv(index, 5, x, torch.ones(1, 4, dtype=torch.bool), kernel)
    with pytest.raises(ValueError, match="index must be a long"):
        lattice_causal_conv(index.float(), 6, x, torch.ones(1, 4, dtype=torch.bool), kernel)
    with pytest.raises(ValueError, match="observed"):
        lattice_causal_conv(index, 6, x, torch.ones(1, 4, 3, dtype=torch.bool), kernel)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        lattice_causal_conv(index, 6, x, torch.ones(1, 4, dtype=torch.bool), kernel, "pairwise")


def test_fft_length_is_the_smallest_5_smooth_number():
    def smooth(n):
        for p in (2, 3, 5):
            while n % p == 0:
                n //= p
        return n == 1

    for minimum in range(1, 3000):
        n = fft_length(minimum)
        assert n >= minimum and smooth(n) and not any(smooth(m) for m in range(minimum, n))
    with pytest.raises(ValueError, match="minimum"):
        fft_length(0)
