"""Structured linear recurrences and the linear CDEs built on them (neuralde_seq.solvers.linear_scan,
neuralde_seq.models.linear_cde).

- The parallel prefix scan equals the sequential loop (float64, 1e-10 relative), values and gradients, for every
  structure, at 1,000 and 4,096 steps, and at the lengths where the scan's rounds do not divide evenly.
- The structures agree with each other: a block-diagonal, diagonal or diagonal-plus-low-rank matrix written as a
  dense one gives the same states.
- The diagonal-plus-low-rank scan with the Delta structure (d = 1, U = −λk, V = k, b = λ v_r k per row of W)
  reproduces a pre-Delta CT-FWP's fast weight trajectory from the project's exact solver (1e-12, 1,000 windows).
- The model: each step is h ↦ (I + Σ ΔX^i A_i) h + B ΔX on the path divided by its channel scales, checked against
  a loop written out from the weights; the parallel and sequential scans give the same logits and gradients; a padded
  batch gives each sample what it gets alone; one constant-increment path has the closed form of a linear
  recurrence with a constant matrix.
- Log-signature windows: depth 1 with one window per interval equals the linear control; at depth 2 the window's
  generator L = Σ λ_i A_i + Σ λ_ij [A_j, A_i] (affine, with the B terms) has exp(L) within O(ε³) of the exact flow
  of the CDE over a two-segment window (the error falls 8x when ε halves; a wrong bracket sign leaves O(ε²)).
- The registry's channel scales keep a 361-point series' flow finite at init (the divergence they fix).
"""

import pytest
import torch

from neuralde_seq.controls import build_control
from neuralde_seq.fields import FastWeightField
from neuralde_seq.models import MODEL_NAMES, create_model, model_inputs
from neuralde_seq.models.linear_cde import LinearCDE
from neuralde_seq.solvers.exact_fast_weights import piece_inputs, solve_exact_reference
from neuralde_seq.solvers.linear_scan import STRUCTURES, dplr_to_dense, parallel_scan, sequential_scan

DTYPE = torch.float64


def _maps(structure, steps, batch=3, hidden=8, block=4, seed=0, scale=0.3):
    g = torch.Generator().manual_seed(seed)
    if structure == "diagonal":
        M = 1 + scale * torch.randn(steps, batch, hidden, generator=g, dtype=DTYPE) / 4
    elif structure == "block":
        n = hidden // block
        M = (
            torch.eye(block, dtype=DTYPE)
            + scale * torch.randn(steps, batch, n, block, block, generator=g, dtype=DTYPE) / block
        )
    elif structure == "dplr":
        rank = 2
        M = (
            1 + scale * torch.randn(steps, batch, hidden, generator=g, dtype=DTYPE) / 4,
            scale * torch.randn(steps, batch, hidden, rank, generator=g, dtype=DTYPE) / hidden,
            torch.randn(steps, batch, hidden, rank, generator=g, dtype=DTYPE),
        )
    else:
        M = (
            torch.eye(hidden, dtype=DTYPE)
            + scale * torch.randn(steps, batch, hidden, hidden, generator=g, dtype=DTYPE) / hidden
        )
    b = torch.randn(steps, batch, hidden, generator=g, dtype=DTYPE)
    h0 = torch.randn(batch, hidden, generator=g, dtype=DTYPE)
    return M, b, h0


# DPLR's parallel scan is the dense one on its dense form, so 4,096 steps add nothing the dense case does not test.
@pytest.mark.parametrize(
    "structure, steps", [(s, n) for s in STRUCTURES for n in (1, 7, 1000, 4096) if not (s == "dplr" and n == 4096)]
)
def test_parallel_scan_equals_sequential(structure, steps):
    """States and the gradients on M, b and h0 agree to 1e-10 (relative to the largest entry)."""
    M, b, h0 = _maps(structure, steps, seed=steps)
    leaves = (*M, b, h0) if structure == "dplr" else (M, b, h0)
    for t in leaves:
        t.requires_grad_(True)
    parallel = parallel_scan(M, b, h0, structure)
    sequential = sequential_scan(M, b, h0, structure)
    scale = float(sequential.detach().abs().max())
    assert torch.allclose(parallel, sequential, rtol=0, atol=1e-10 * scale)
    weights = torch.randn(parallel.shape, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    grads_parallel = torch.autograd.grad((parallel * weights).sum(), leaves)
    grads_sequential = torch.autograd.grad((sequential * weights).sum(), leaves)
    for got, expected in zip(grads_parallel, grads_sequential):
        assert torch.allclose(got, expected, rtol=0, atol=1e-10 * float(expected.abs().max()))


def test_structures_agree_as_dense_matrices():
    """The same maps as diagonal / block-diagonal and written out as dense matrices give the same states."""
    M, b, h0 = _maps("block", 50)
    dense = torch.stack([torch.stack([torch.block_diag(*M[s, i]) for i in range(3)]) for s in range(50)])
    assert torch.allclose(parallel_scan(M, b, h0, "block"), sequential_scan(dense, b, h0, "dense"), rtol=0, atol=1e-12)
    D, b, h0 = _maps("diagonal", 50)
    assert torch.allclose(
        parallel_scan(D, b, h0, "diagonal"), sequential_scan(torch.diag_embed(D), b, h0, "dense"), rtol=0, atol=1e-12
    )
    low_rank, b, h0 = _maps("dplr", 50)
    assert torch.allclose(
        sequential_scan(low_rank, b, h0, "dplr"),
        sequential_scan(dplr_to_dense(low_rank), b, h0, "dense"),
        rtol=0,
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="structure must be one of"):
        parallel_scan(D, b, h0, "banded")


def test_dplr_scan_reproduces_the_pre_delta_fast_weights():
    """A pre-Delta CT-FWP's exact step on a window, W ← W (I − λ k kᵀ) + λ v kᵀ with λ = (1 − e^{−c‖k‖²h})/‖k‖²
    (docs/equations.md), is a diagonal-plus-rank-one affine map of each row w of W: w ← (I + U Vᵀ) w + b with
    U = −λ k, V = k, b = λ v_r k. Both scans with these matrices give the W of the project's exact solver at every
    knot, on 1,000 log-signature windows of two samples of different lengths."""
    torch.manual_seed(0)
    times, values, lengths = _control(lengths=(2001, 1500), channels=2, seed=3)
    control = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=2)
    field = FastWeightField(control.channels, d_model=8, n_heads=2, rule="delta").to(DTYPE)
    B, H, dk = 2, field.n_heads, field.head_dim
    W0 = 0.1 * torch.randn(B, H, dk, dk, dtype=DTYPE)
    expected = solve_exact_reference(field, control, W0, at_knots=True)  # (B, K, H, d, d)
    pieces = int(control.end_index.max())
    x, dx = piece_inputs(field, control, pieces)
    flat = lambda t: None if t is None else t.reshape(B * pieces, -1)
    k_raw, v_raw, beta = (t.reshape(B, pieces, H, -1) for t in field.projections(flat(x), flat(dx))[:3])
    k, v, c = torch.softmax(k_raw, -1), torch.tanh(v_raw), torch.sigmoid(beta)
    active = (torch.arange(pieces).unsqueeze(0) < control.end_index.unsqueeze(1)).to(DTYPE)
    h = (control.knots[1 : pieces + 1] - control.knots[:pieces]).to(DTYPE) * active  # window lengths, 0 after ends
    norm_sq = k.square().sum(-1, keepdim=True)
    lam = -torch.expm1(-c * norm_sq * h[..., None, None]) / norm_sq  # (B, S, H, 1)
    # rows of W as the batch: state index (B, H, d_v), each row a d_k-vector
    rows = lambda t: (
        t.unsqueeze(3)
        .expand(B, pieces, H, dk, t.shape[-1])
        .permute(1, 0, 2, 3, 4)
        .reshape(pieces, B * H * dk, t.shape[-1])
    )
    ones = torch.ones(pieces, B * H * dk, dk, dtype=DTYPE)
    U, V = rows(-lam * k).unsqueeze(-1), rows(k).unsqueeze(-1)
    b = rows(lam * k) * v.permute(1, 0, 2, 3).reshape(pieces, B * H * dk, 1)
    h0 = W0.reshape(B * H * dk, dk)
    for scan in (sequential_scan, parallel_scan):
        W = scan((ones, U, V), b, h0, "dplr").reshape(pieces, B, H, dk, dk).transpose(0, 1)
        assert torch.allclose(W, expected[:, 1:], rtol=0, atol=1e-12)


def _control(lengths=(40, 25, 9), channels=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    times = torch.cumsum(0.5 + torch.rand(T, generator=g, dtype=DTYPE), 0).expand(len(lengths), T).clone()
    values = torch.randn(len(lengths), T, channels, generator=g, dtype=DTYPE).cumsum(1) * 0.3
    return times, values, torch.tensor(lengths)


def _dense_fields(model):
    """The A_i as dense (d, H, H) matrices."""
    A = model.A
    if model.structure in ("diagonal", "dplr"):
        A = torch.diag_embed(A)
    elif model.structure == "block":
        A = torch.stack([torch.block_diag(*A[i]) for i in range(A.shape[0])])
    if model.structure == "dplr":
        A = A + model.U @ model.V.transpose(-1, -2)
    return A


def _written_out(model, times, values):
    """h_k = (I + Σ_i ΔX^i A_i) h_{k−1} + B ΔX_k from the weights, on the linear control with a time channel, every
    channel divided by the model's channel scale."""
    X = torch.cat([times.unsqueeze(-1), values], -1) / model.channel_scales  # time first, then the values
    A = _dense_fields(model)
    h = model.initial(X[0])
    for k in range(1, X.shape[0]):
        dX = X[k] - X[k - 1]
        h = h + torch.einsum("c,cij,j->i", dX, A, h) + model.B(dX)
    return model.readout(h)


@pytest.mark.parametrize("method", ["linear", "hermite_cubic"])
@pytest.mark.parametrize("name", ["slice-diag", "slice-block", "slice-dense", "slice-dplr"])
def test_model_step_parallel_sequential_and_padding(name, method):
    """Increments are the control's values at the knots (the observations, for both interpolations)."""
    times, values, lengths = _control()
    control = build_control(times, values, lengths, interpolation=method)
    torch.manual_seed(0)
    model = create_model(name, control, 3, readout="final", scan="parallel").to(DTYPE)
    logits = model(control)
    # each sample against the written-out recurrence on its own observations
    for i, L in enumerate(lengths.tolist()):
        expected = _written_out(model, times[i, :L], values[i, :L])
        assert torch.allclose(logits[i], expected, rtol=1e-10, atol=1e-10)
        alone = build_control(times[i : i + 1, :L], values[i : i + 1, :L], interpolation=method)
        assert torch.allclose(model(alone)[0], logits[i], rtol=1e-12, atol=1e-12)
    model.scan = "sequential"
    sequential = model(control)
    assert torch.allclose(sequential, logits, rtol=1e-12, atol=1e-12)
    params = [p for p in model.parameters()]
    g_parallel = torch.autograd.grad(logits.square().sum(), params)
    model.scan = "sequential"
    g_sequential = torch.autograd.grad(model(control).square().sum(), params)
    for got, expected in zip(g_parallel, g_sequential):
        assert torch.allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_mean_readout_averages_each_samples_own_states():
    """readout="mean" (the authors' classifier) reads the mean of h over the sample's own knots, h_0 included: the
    written-out recurrence's states averaged, the same for a sample alone and in a padded batch."""
    times, values, lengths = _control()
    control = build_control(times, values, lengths, interpolation="linear")
    torch.manual_seed(4)
    model = create_model("slice-block", control, 3, readout="mean").to(DTYPE)
    logits = model(control)
    for i, L in enumerate(lengths.tolist()):
        X = torch.cat([times[i, :L].unsqueeze(-1), values[i, :L]], -1) / model.channel_scales
        A, h = _dense_fields(model), model.initial(X[0])
        states = [h]
        for k in range(1, L):
            h = h + torch.einsum("c,cij,j->i", X[k] - X[k - 1], A, h) + model.B(X[k] - X[k - 1])
            states.append(h)
        assert torch.allclose(logits[i], model.readout(torch.stack(states).mean(0)), rtol=1e-10, atol=1e-10)
        alone = build_control(times[i : i + 1, :L], values[i : i + 1, :L], interpolation="linear")
        assert torch.allclose(model(alone)[0], logits[i], rtol=1e-12, atol=1e-12)


def test_constant_increments_have_the_closed_form():
    """On a straight line with equal steps every M_k and b_k is the same: h_n = M^n h_0 + Σ_{j<n} M^j b."""
    torch.manual_seed(1)
    model = LinearCDE(2, 2, hidden=6, structure="dense").to(DTYPE)
    n = 300
    times = torch.arange(n + 1, dtype=DTYPE).unsqueeze(0)
    values = 0.01 * torch.arange(n + 1, dtype=DTYPE).view(1, -1, 1)
    control = build_control(times, values, interpolation="linear")
    states = model.hidden_states(control)[0]
    dX = torch.tensor([1.0, 0.01], dtype=DTYPE)
    M = torch.eye(6, dtype=DTYPE) + torch.einsum("c,cij->ij", dX, model.A)
    b = model.B(dX)
    h0 = model.initial(torch.tensor([0.0, 0.0], dtype=DTYPE))
    power = torch.linalg.matrix_power(M, n)
    geometric = torch.linalg.solve(torch.eye(6, dtype=DTYPE) - M, (torch.eye(6, dtype=DTYPE) - power) @ b)
    expected = power @ h0 + geometric
    assert torch.allclose(states[-1], expected, rtol=1e-8, atol=1e-10)


def test_depth_one_windows_equal_the_linear_control():
    """A depth-1 log-signature window per observation interval holds the interval's increment: the same model
    weights give the same states as on the linear control."""
    times, values, lengths = _control()
    linear = build_control(times, values, lengths, interpolation="linear")
    windows = build_control(times, values, lengths, interpolation="logsignature", depth=1, step=1)
    torch.manual_seed(2)
    model = LinearCDE(3, 2, hidden=8, structure="block", block_size=4, channel_scales=(2.0, 0.5, 3.0)).to(DTYPE)
    assert torch.allclose(model.hidden_states(windows), model.hidden_states(linear), rtol=0, atol=1e-12)


def _augmented(generator, offset):
    """The (H+1)×(H+1) matrix of the affine map h ↦ generator h + offset."""
    H = generator.shape[-1]
    out = torch.zeros(H + 1, H + 1, dtype=DTYPE)
    out[:H, :H], out[:H, H] = generator, offset
    return out


@pytest.mark.parametrize("structure", ["dense", "block", "dplr"])
def test_depth_two_window_generator_is_the_log_ode_of_the_flow(structure):
    """On a window made of two straight segments (increments a then b), the exact flow of dh = Σ (A_i h + B_i) dX^i
    is exp(Ξ_b) exp(Ξ_a) (Ξ the augmented generator of each segment); the model's step is I + L with L the log-ODE
    generator from the window's depth-2 log-signature, and exp(L) must match the exact flow up to O(ε³): halving the
    increments cuts the error by ~8 (a missing or wrong-sign bracket term leaves an O(ε²) error, a ratio of ~4)."""
    torch.manual_seed(3)
    extra = {"block": dict(block_size=2), "dplr": dict(rank=1)}.get(structure, {})
    model = LinearCDE(6, 2, hidden=4, structure=structure, control_depth=2, init_scale=2.0, **extra).to(DTYPE)
    with torch.no_grad():
        model.B.weight.normal_()
    A = _dense_fields(model)
    errors = []
    for eps in (0.1, 0.05):
        a = eps * torch.tensor([1.0, 0.7, -0.4], dtype=DTYPE)
        b = eps * torch.tensor([0.5, -0.9, 0.8], dtype=DTYPE)
        points = torch.stack([torch.zeros(3, dtype=DTYPE), a, a + b]).unsqueeze(0)  # channel 0 plays time
        control = build_control(points[..., 0], points[..., 1:], interpolation="logsignature", depth=2, step=2)
        M, offset = model.step_maps(control.coeffs[:, :1, 0].transpose(0, 1))
        if structure == "block":
            M = torch.block_diag(*M[0, 0])
        else:
            M = M[0, 0]
        L = _augmented(M - torch.eye(4, dtype=DTYPE), offset[0, 0])
        segment = lambda inc: _augmented(torch.einsum("c,cij->ij", inc, A), model.B(inc))
        exact = torch.linalg.matrix_exp(segment(b)) @ torch.linalg.matrix_exp(segment(a))
        errors.append(float((torch.linalg.matrix_exp(L) - exact).abs().max().detach()))
    assert 6.5 < errors[0] / errors[1] < 9.5, errors


def test_channel_scales_keep_a_long_series_finite():
    """A time channel counting 361 observations: (1 + ΔX a)^361 with raw increments overflows from a random init for
    a growing unit, and the registry's channel scales (each channel's standard deviation over the training points)
    keep it O(1)."""
    T = 361
    times = torch.arange(T, dtype=DTYPE).unsqueeze(0).expand(4, T)
    values = torch.randn(4, T, 3, generator=torch.Generator().manual_seed(0), dtype=DTYPE).cumsum(1)
    control = model_inputs("slice-diag", times, values)
    torch.manual_seed(0)
    model = create_model("slice-diag", control, 2).to(DTYPE)
    assert torch.allclose(model.channel_scales[0], torch.arange(T, dtype=DTYPE).std(correction=0))  # the clock
    assert model.hidden_states(control).abs().max() < 50
    raw = create_model("slice-diag", control, 2, channel_scales=(1.0,) * 4).to(DTYPE)
    with torch.no_grad():
        raw.A.copy_(model.A)
    assert raw.hidden_states(control).abs().max() > 1e6


def test_channel_scales_bound_a_rough_channel():
    """A channel jumping 0, 3, 0, 3, ... over 1,001 points has standard deviation 1.5 but quadratic variation 9,000:
    its scale brings that down to the roughness budget (10), and a block model's states stay below 100, where
    dividing by the standard deviation alone leaves products of (I + 2A)(I − 2A) that reach 1e44-1e130 (seeds 0-4)."""
    T = 1001
    times = torch.arange(T, dtype=DTYPE).unsqueeze(0).expand(2, T)
    values = (3.0 * (torch.arange(T) % 2)).to(DTYPE).view(1, T, 1).expand(2, T, 1)
    control = model_inputs("slice-block", times, values)
    torch.manual_seed(0)
    model = create_model("slice-block", control, 2).to(DTYPE)
    assert torch.allclose(model.channel_scales[1], torch.tensor(9.0 * (T - 1) / 10, dtype=DTYPE).sqrt())
    assert model.hidden_states(control).abs().max() < 100
    by_std = create_model("slice-block", control, 2, channel_scales=(float(model.channel_scales[0]), 1.5)).to(DTYPE)
    with torch.no_grad():
        by_std.A.copy_(model.A)
    assert not (by_std.hidden_states(control).abs().max() < 1e30)


def test_penalty_is_the_mean_frobenius_norm_per_channel():
    model = LinearCDE(3, 2, hidden=4, structure="dplr", rank=2).to(DTYPE)
    expected = (
        sum(
            torch.sqrt(model.A[i].square().sum() + model.U[i].square().sum() + model.V[i].square().sum())
            for i in range(3)
        )
        / 3
    )
    assert torch.allclose(model.penalty(), expected, rtol=1e-14)


def test_auto_scan_is_sequential_on_a_cpu_and_parallel_elsewhere():
    model = LinearCDE(2, 2)
    assert model.scan == "auto"
    assert model.scan_for(torch.device("cpu")) == "sequential" and model.scan_for(torch.device("cuda")) == "parallel"
    model.scan = "parallel"
    assert model.scan_for(torch.device("cpu")) == "parallel"


def test_registry_and_refusals():
    assert {"slice-diag", "slice-block", "slice-dense", "slice-dplr"} <= set(MODEL_NAMES)
    with pytest.raises(ValueError, match="rank goes with structure='dplr'"):
        LinearCDE(2, 2, structure="dplr")
    with pytest.raises(ValueError, match="not such a number"):
        LinearCDE(5, 2, control_depth=2)
    with pytest.raises(ValueError, match="channel_scales must be 3 finite positive"):
        LinearCDE(3, 2, channel_scales=(1.0, 0.0, 2.0))
    with pytest.raises(ValueError, match="block_size goes with structure='block'"):
        LinearCDE(2, 2, structure="diagonal", block_size=4)
    with pytest.raises(ValueError, match="multiple of block_size"):
        LinearCDE(2, 2, hidden=10, structure="block", block_size=4)
    with pytest.raises(ValueError, match="scan must be one of"):
        LinearCDE(2, 2, scan="fast")
    with pytest.raises(ValueError, match="readout must be one of"):
        LinearCDE(2, 2, readout="last")
    times, values, lengths = _control()
    logsig = model_inputs("delta-rde", times, values, lengths)  # window start values: refused
    with pytest.raises(ValueError, match="window_start_values=False"):
        create_model("slice-diag", logsig, 2)
    depth2 = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=4)
    model = LinearCDE(depth2.channels, 2, control_depth=2).to(DTYPE)
    model(depth2)
    with pytest.raises(ValueError, match="reads depth-1 controls, the control has depth 2"):
        LinearCDE(depth2.channels, 2).to(DTYPE)(depth2)
