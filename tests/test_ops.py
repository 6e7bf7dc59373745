"""neuralde_seq.ops.causal_conv: every fast path against its reference and both against a plain loop over the
formula, in float64 (values and gradients).

- Grid: FFT vs direct (``conv1d``), full channel mixing (CKConv) and depthwise (CCNN), odd and even lengths,
  kernels shorter than, as long as and longer than the sequence, batch > 1.
- Irregular times: the factorised sum (features once per distinct Δ) vs the direct one (ψ at every pair),
  unsorted times with repeated differences, partly observed points, NaN in unobserved entries.
"""
import pytest
import torch

from neuralde_seq.ops.causal_conv import causal_conv, causal_conv_direct, causal_conv_fft, irregular_causal_conv

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


GRID_CASES = [(kind, T, K) for kind in ("full", "depthwise")
              for T, K in ((37, 5), (36, 5), (33, 33), (20, 31), (21, 64), (16, 1), (1, 3))]


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
    with pytest.raises(ValueError, match="method"):
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
                    psi = weight @ features(times[b, i:i + 1] - times[b, j:j + 1])[0] + bias
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
    for method in ("loop", "direct", "factorised"):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, weight, bias))
        if method == "loop":
            y = loop_irregular_conv(times, xs, observed, features, ws, bs)
        else:
            y = irregular_causal_conv(times, xs, observed, features, ws, bs, method=method)
        grads = torch.autograd.grad((y * out_weights).sum(), (xs, ws, bs, *features.parameters()))
        results[method] = (y.detach(), *grads)
    for method in ("direct", "factorised"):
        for got, expected in zip(results[method], results["loop"]):
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
    with pytest.raises(ValueError, match="method"):
        irregular_causal_conv(times, x, observed, features, weight, None, method="fft")
