"""The fused reservoir kernel (neuralde_seq.ops.reservoir_features) against its torch reference and against the
linear CDE's own states, in float64, at the lengths users run (2,000 knots), and the random-feature map's features
by the kernel against the same map's features from every state (the path taken without numba)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralde_seq.models import LinearCDE
from neuralde_seq.ops import reservoir_features as kernels
from neuralde_seq.ops.reservoir_features import fused_features, fused_states, reference_features
from neuralde_seq.random_features import RandomFeatures

pytestmark = pytest.mark.skipif(not kernels.fused_available(), reason="numba is a core dependency")


def _problem(structure, N=4, S=2000, D=3, H=24, Q=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64)
    terms = randn(N, S, D) * 0.05
    ends = torch.tensor([S, S // 2, 1, 0][:N])
    terms[1, S // 2 :] = 0.0  # zero after each end, as the controls give them
    terms[2, 1:] = 0.0
    terms[3] = 0.0
    h0 = randn(N, H)
    # a stable recurrence over 2,000 steps: decaying diagonal parts, small mixing
    if structure == "diagonal":
        A = -0.5 * randn(D, H).abs()
    else:
        A = 0.2 * randn(D, H // 2, 2, 2)
        A[:, :, 0, 0] -= 0.5
        A[:, :, 1, 1] -= 0.5
    B = randn(H, D)
    return terms, ends, h0, A, B, randn(Q, H) * 0.3


@pytest.mark.parametrize("structure, H", [("block", 24), ("diagonal", 23)])
def test_fused_features_equal_the_reference_at_2000_knots(structure, H):
    terms, ends, h0, A, B, biases = _problem(structure, H=H)
    reference = reference_features(terms, ends, h0, A, B, biases, structure)
    fused = fused_features(terms, ends, h0, A, B, biases, structure)
    assert set(fused) == {"final", "mean", "max", "ppv", "mpv"} and fused["ppv"].shape == (4, 2 * H)
    for name in ("final", "mean", "max", "mpv"):
        torch.testing.assert_close(fused[name], reference[name], rtol=1e-9, atol=1e-11)
    # ppv counts knots above a threshold: equal unless a state lies within rounding of its threshold
    differs = (fused["ppv"] - reference["ppv"]).abs()
    assert float(differs.max()) <= 1.0 / 2001 + 1e-15 and int((differs > 0).sum()) <= 2
    # a series that ends at knot 0 has its initial state as every statistic
    torch.testing.assert_close(fused["final"][3], h0[3], rtol=0, atol=0)
    torch.testing.assert_close(fused["mean"][3], h0[3], rtol=1e-15, atol=0)
    # only what is asked for is computed, and it is the same
    some = fused_features(terms, ends, h0, A, B, biases, structure, ("ppv",))
    assert set(some) == {"ppv"} and torch.equal(some["ppv"], fused["ppv"])


@pytest.mark.parametrize("structure, block_size", [("block", 2), ("diagonal", None)])
def test_fused_states_equal_the_linear_cdes_own_states(structure, block_size):
    from neuralde_seq.controls import build_control

    torch.manual_seed(1)
    model = LinearCDE(3, 16, 2, structure=structure, block_size=block_size).double()
    times = torch.linspace(0, 1, 300).repeat(3, 1)
    values = torch.cumsum(torch.randn(3, 300, 2, dtype=torch.float64), dim=1) * 0.1
    lengths = torch.tensor([300, 170, 2])
    for b, n in enumerate(lengths.tolist()):
        values[b, n:] = float("nan")
        times[b, n:] = times[b, n - 1] + torch.arange(1, 301 - n) * 1e-3
    control = build_control(times.double(), values, lengths, interpolation="linear", time_channel=True)
    with torch.no_grad():
        expected = model.hidden_states(control)
        terms, h0 = model.scan_inputs(control)
        states = fused_states(terms, control.end_index, h0, model.matrices(), model.B.weight, structure)
    torch.testing.assert_close(states, expected, rtol=1e-10, atol=1e-12)


def test_random_features_by_the_kernel_equal_those_from_every_state(monkeypatch):
    rng = np.random.default_rng(2)
    times = torch.tensor(np.cumsum(rng.uniform(0.5, 1.5, (6, 700)), axis=1))
    values = torch.tensor(np.cumsum(rng.normal(size=(6, 700, 2)), axis=1) * 0.2)
    values[rng.random((6, 700)) < 0.3] = float("nan")
    values[:, 0] = 0.0
    lengths = torch.tensor([700, 650, 300, 700, 41, 500])
    features = ("ppv", "mpv", "max", "mean", "final")
    fast = RandomFeatures(features=features, width=64, num_biases=2, seed=3).fit(times, values, lengths)
    assert fast._fused_model(values.device) is not None
    by_kernel = fast.transform(times, values, lengths)
    monkeypatch.setattr("neuralde_seq.random_features.features.fused_available", lambda: False)
    slow = RandomFeatures(features=features, width=64, num_biases=2, seed=3).fit(times, values, lengths)
    assert slow._fused_model(values.device) is None
    torch.testing.assert_close(slow.biases_, fast.biases_, rtol=1e-9, atol=1e-12)
    from_states = slow.transform(times, values, lengths)
    for name in ("mpv", "max", "mean", "final"):
        cols = fast.feature_slices_[name]
        torch.testing.assert_close(by_kernel[:, cols], from_states[:, cols], rtol=1e-9, atol=1e-11)
    ppv = fast.feature_slices_["ppv"]
    assert float((by_kernel[:, ppv] - from_states[:, ppv]).abs().max()) <= 1.0 / 41


def test_bad_shapes_are_named():
    terms, ends, h0, A, B, biases = _problem("block", S=10)
    with pytest.raises(ValueError, match=r"A must be \(3, 12, 2, 2\)"):
        fused_features(terms, ends, h0, A[:, :5], B, biases, "block")
    with pytest.raises(ValueError, match=r"ends must lie in \[0, S=10\]"):
        fused_features(terms, ends + 11, h0, A, B, biases, "block")
    with pytest.raises(ValueError, match="structure must be one of"):
        fused_features(terms, ends, h0, A, B, biases, "dense")
