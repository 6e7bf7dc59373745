"""Structured linear recurrences and the linear CDEs built on them (neuralde_seq.ops.linear_scan,
neuralde_seq.models.linear_cde).

- The parallel prefix scan equals the sequential loop (float64, 1e-10 relative), values and gradients, for every
  structure, at 1,000 and 4,096 steps, and at the lengths where the scan's rounds do not divide evenly.
- The structures agree with each other: a block-diagonal or diagonal matrix written as a dense one gives the same
  states.
- The model: each step is h ↦ (I + Σ ΔX^i A_i) h + B ΔX, checked against a loop written out from the weights; the
  parallel and sequential scans give the same logits and gradients; a padded batch gives each sample what it gets
  alone; one constant-increment path has the closed form of a linear recurrence with a constant matrix.
"""
import pytest
import torch

from neuralde_seq.controls import build_control
from neuralde_seq.models import MODEL_NAMES, create_model, model_inputs
from neuralde_seq.models.linear_cde import LinearCDE
from neuralde_seq.ops.linear_scan import STRUCTURES, parallel_scan, sequential_scan

DTYPE = torch.float64


def _maps(structure, steps, batch=3, hidden=8, block=4, seed=0, scale=0.3):
    g = torch.Generator().manual_seed(seed)
    if structure == "diagonal":
        M = 1 + scale * torch.randn(steps, batch, hidden, generator=g, dtype=DTYPE) / 4
    elif structure == "block":
        n = hidden // block
        M = torch.eye(block, dtype=DTYPE) + scale * torch.randn(steps, batch, n, block, block, generator=g,
                                                                dtype=DTYPE) / block
    else:
        M = torch.eye(hidden, dtype=DTYPE) + scale * torch.randn(steps, batch, hidden, hidden, generator=g,
                                                                 dtype=DTYPE) / hidden
    b = torch.randn(steps, batch, hidden, generator=g, dtype=DTYPE)
    h0 = torch.randn(batch, hidden, generator=g, dtype=DTYPE)
    return M, b, h0


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("steps", [1, 7, 1000, 4096])
def test_parallel_scan_equals_sequential(structure, steps):
    """States and the gradients on M, b and h0 agree to 1e-10 (relative to the largest entry)."""
    M, b, h0 = _maps(structure, steps, seed=steps)
    for t in (M, b, h0):
        t.requires_grad_(True)
    parallel = parallel_scan(M, b, h0, structure)
    sequential = sequential_scan(M, b, h0, structure)
    scale = float(sequential.detach().abs().max())
    assert torch.allclose(parallel, sequential, rtol=0, atol=1e-10 * scale)
    weights = torch.randn(parallel.shape, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    grads_parallel = torch.autograd.grad((parallel * weights).sum(), (M, b, h0))
    grads_sequential = torch.autograd.grad((sequential * weights).sum(), (M, b, h0))
    for got, expected in zip(grads_parallel, grads_sequential):
        assert torch.allclose(got, expected, rtol=0, atol=1e-10 * float(expected.abs().max()))


def test_structures_agree_as_dense_matrices():
    """The same maps as diagonal / block-diagonal and written out as dense matrices give the same states."""
    M, b, h0 = _maps("block", 50)
    dense = torch.stack([torch.stack([torch.block_diag(*M[s, i]) for i in range(3)]) for s in range(50)])
    assert torch.allclose(parallel_scan(M, b, h0, "block"), sequential_scan(dense, b, h0, "dense"),
                          rtol=0, atol=1e-12)
    D, b, h0 = _maps("diagonal", 50)
    assert torch.allclose(parallel_scan(D, b, h0, "diagonal"), sequential_scan(torch.diag_embed(D), b, h0, "dense"),
                          rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="structure must be one of"):
        parallel_scan(D, b, h0, "banded")


def _control(lengths=(40, 25, 9), channels=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    times = torch.cumsum(0.5 + torch.rand(T, generator=g, dtype=DTYPE), 0).expand(len(lengths), T).clone()
    values = torch.randn(len(lengths), T, channels, generator=g, dtype=DTYPE).cumsum(1) * 0.3
    return times, values, torch.tensor(lengths)


def _written_out(model, times, values):
    """h_k = (I + Σ_i ΔX^i A_i) h_{k−1} + B ΔX_k from the weights, on the linear control with a time channel."""
    X = torch.cat([times.unsqueeze(-1), values], -1)  # the control's channels: time first, then the values
    A = model.A
    if model.structure == "diagonal":
        A = torch.diag_embed(A)
    elif model.structure == "block":
        A = torch.stack([torch.block_diag(*A[i]) for i in range(A.shape[0])])
    h = model.initial(X[0])
    for k in range(1, X.shape[0]):
        dX = X[k] - X[k - 1]
        h = h + torch.einsum("c,cij,j->i", dX, A, h) + model.B(dX)
    return model.readout(h)


@pytest.mark.parametrize("method", ["linear", "hermite_cubic"])
@pytest.mark.parametrize("name", ["slice-diag", "slice-block", "slice-dense"])
def test_model_step_parallel_sequential_and_padding(name, method):
    """Increments are the control's values at the knots (the observations, for both interpolations)."""
    times, values, lengths = _control()
    control = build_control(times, values, lengths, method=method)
    torch.manual_seed(0)
    model = create_model(name, control, 3).to(DTYPE)
    logits = model(control)
    # each sample against the written-out recurrence on its own observations
    for i, L in enumerate(lengths.tolist()):
        expected = _written_out(model, times[i, :L], values[i, :L])
        assert torch.allclose(logits[i], expected, rtol=1e-10, atol=1e-10)
        alone = build_control(times[i:i + 1, :L], values[i:i + 1, :L], method=method)
        assert torch.allclose(model(alone)[0], logits[i], rtol=1e-12, atol=1e-12)
    model.scan = "sequential"
    sequential = model(control)
    assert torch.allclose(sequential, logits, rtol=1e-12, atol=1e-12)
    model.scan = "parallel"
    g_parallel = torch.autograd.grad(logits.square().sum(), model.A)[0]
    model.scan = "sequential"
    g_sequential = torch.autograd.grad(model(control).square().sum(), model.A)[0]
    assert torch.allclose(g_parallel, g_sequential, rtol=1e-10, atol=1e-12)


def test_constant_increments_have_the_closed_form():
    """On a straight line with equal steps every M_k and b_k is the same: h_n = M^n h_0 + Σ_{j<n} M^j b."""
    torch.manual_seed(1)
    model = LinearCDE(2, 2, hidden=6, structure="dense").to(DTYPE)
    n = 300
    times = torch.arange(n + 1, dtype=DTYPE).unsqueeze(0)
    values = 0.01 * torch.arange(n + 1, dtype=DTYPE).view(1, -1, 1)
    control = build_control(times, values, method="linear")
    states = model.hidden_states(control)[0]
    dX = torch.tensor([1.0, 0.01], dtype=DTYPE)
    M = torch.eye(6, dtype=DTYPE) + torch.einsum("c,cij->ij", dX, model.A)
    b = model.B(dX)
    h0 = model.initial(torch.tensor([0.0, 0.0], dtype=DTYPE))
    power = torch.linalg.matrix_power(M, n)
    geometric = torch.linalg.solve(torch.eye(6, dtype=DTYPE) - M, (torch.eye(6, dtype=DTYPE) - power) @ b)
    expected = power @ h0 + geometric
    assert torch.allclose(states[-1], expected, rtol=1e-8, atol=1e-10)


def test_registry_and_refusals():
    assert {"slice-diag", "slice-block", "slice-dense"} <= set(MODEL_NAMES)
    with pytest.raises(ValueError, match="block_size goes with structure='block'"):
        LinearCDE(2, 2, structure="diagonal", block_size=4)
    with pytest.raises(ValueError, match="multiple of block_size"):
        LinearCDE(2, 2, hidden=10, structure="block", block_size=4)
    with pytest.raises(ValueError, match="scan must be one of"):
        LinearCDE(2, 2, scan="fast")
    times, values, lengths = _control()
    logsig = model_inputs("delta-rde", times, values, lengths)
    model = LinearCDE(logsig.channels, 2).to(DTYPE)
    with pytest.raises(ValueError, match="not log-signature windows"):
        model(logsig)
