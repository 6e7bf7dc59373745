"""The library on a CUDA device against the CPU, in float64 (issue 27); every test here is marked ``cuda`` and is
skipped where no CUDA device is present (``pytest -m cuda`` runs only these; benchmarks/gpu_suite.py runs them).

- Every registry model: a training step's logits, loss and the loss's gradient with respect to every parameter on
  the device equal the CPU's to 1e-10 relative (relative to the largest entry of each tensor). The same
  operations in another order (a GPU's reductions, matmul blocking) differ by rounding, ~1e-16 relative per
  operation in float64, far below 1e-10 over these short sequences; an error in device handling (a tensor left on
  the CPU, a device-dependent branch computing something else) is not. Looser only where the algorithm differs on
  purpose, each with its reason (`LOOSER`).
- The fixed-step solvers (every method, checkpointed and plain gradients), the parallel and sequential scans
  (every structure, 1,000 steps), the exact solver (every rule with a closed form, several segments): the same on
  the device as on the CPU, to 1e-10.
- No host sync in the step loops: the fixed-step solver's and the exact solver's loops (forward and backward,
  after set-up, tests/device_checks.py `watch_step_loops`) run under ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import contextlib
import copy
import warnings

import pytest
import torch
import torch._dynamo
from device_checks import build_registry_model, registry_batch, training_loss, watch_step_loops

from neuralde_seq import MODEL_NAMES
from neuralde_seq.solvers import METHODS, RK4, Backprop, Checkpoint, Exact, FixedStep, SolverOptions, fixed_step
from neuralde_seq.solvers.linear_scan import STRUCTURES, parallel_scan, sequential_scan

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CPU tests cover the rest"),
]


@pytest.fixture(autouse=True)
def _eager_steps(monkeypatch):
    """The fixed-step loops' steps eager here (``compile="auto"`` would compile them on CUDA: tens of seconds per
    model, and the compiler's own host work inside the watched loops); the loop's compiled form runs as plain
    Python, so its device handling is checked too. tests/test_compiled_steps.py compares the compiled steps on CUDA
    with these. The compiled steps made here are dropped after each test (dynamo remembers a function first called
    while it was disabled as one to skip)."""
    monkeypatch.setattr(fixed_step, "_COMPILED_STEPS", {})
    with torch._dynamo.config.patch(disable=True):
        yield


DTYPE = torch.float64
RTOL = 1e-10
DEVICE = "cuda"
# Where the device computes the same function by another algorithm on purpose.
LOOSER = {
    # CKConv's long convolutions go through the FFT: cuFFT and pocketfft factor the transform differently, and an
    # FFT convolution's rounding error is relative to the largest term of the signal, not to each output entry.
    "ckcnn": 1e-8,
    "ccnn": 1e-8,
}


def _relative_error(actual: torch.Tensor, expected: torch.Tensor, scale: float | None = None) -> float:
    """max |actual − expected| / scale, the scale max |expected| by default (the error relative to the tensor's
    scale)."""
    if not expected.numel():
        return 0.0
    scale = float(expected.abs().max()) if scale is None else scale
    return float((actual.cpu() - expected).abs().max()) / max(scale, 1e-300)


def _assert_close(actual, expected, rtol, what, scale: float | None = None):
    assert actual.device.type == DEVICE, f"{what}: on {actual.device}, not on the device"
    assert actual.dtype == expected.dtype, f"{what}: {actual.dtype} on the device, {expected.dtype} on the CPU"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert bool(torch.isfinite(expected).all()), f"{what}: the CPU reference is not finite"
    error = _relative_error(actual, expected, scale)
    assert error <= rtol, f"{what}: relative error {error:.3g} > {rtol:g}"


def _step(model, inputs, labels):
    """(logits, loss, gradients by parameter name) of a training step."""
    model.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), loss.detach(), grads


def _compare_model(name, rtol=RTOL, length=24, **overrides):
    times, values, lengths = registry_batch(length=length)
    model, inputs = build_registry_model(name, times, values, lengths, **overrides)
    for module in model.modules():  # dropout draws from each device's own generator: off (as at evaluation)
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.eval()
    labels = torch.arange(times.shape[0]) % 3
    on_device = copy.deepcopy(model).to(DEVICE)
    expected = _step(model, inputs, labels)
    actual = _step(on_device, inputs.to(DEVICE), labels.to(DEVICE))
    _assert_close(actual[0], expected[0], rtol, f"{name}: logits")
    _assert_close(actual[1], expected[1], rtol, f"{name}: loss")
    assert actual[2].keys() == expected[2].keys() and expected[2], f"{name}: the parameters reached differ"
    # Every gradient to rtol of the largest gradient entry of the whole model: a gradient that is zero in exact
    # arithmetic (a bias before a normalisation, a kernel weight whose input is constant) holds only rounding noise
    # (~1e-17), whose error relative to itself says nothing; a device error in a small gradient (1e-6, say) is
    # still far above 1e-10 of the largest.
    model_scale = max(float(g.abs().max()) for g in expected[2].values())
    assert model_scale > 0, f"{name}: every gradient is zero"
    for key, grad in expected[2].items():
        _assert_close(actual[2][key], grad, rtol, f"{name}: gradient of {key}", scale=model_scale)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_registry_model_on_the_device_equals_the_cpu(name):
    _compare_model(name, LOOSER.get(name, RTOL))


@pytest.mark.parametrize(
    "method", [cls for cls in METHODS.values() if issubclass(cls, FixedStep)], ids=lambda cls: cls.name
)
@pytest.mark.parametrize("gradient", [Checkpoint(every=7), Backprop()], ids=["checkpoint", "backprop"])
def test_fixed_step_solvers_on_the_device_equal_the_cpu(method, gradient):
    # step_size 0.4 cuts the knot intervals (gaps 0.5-1.5) into 2-4 steps: the subdivided grid is exercised
    _compare_model("ncde", solver=SolverOptions(method(step_size=0.4), gradient=gradient))


@pytest.mark.parametrize("affine_steps", [True, False])
@pytest.mark.parametrize("rule", ["hebb", "oja", "delta"])
def test_fast_weight_rk4_on_the_device_equals_the_cpu(rule, affine_steps):
    # the affine rules' rk4 by composed step maps (affine_steps=True, where the library has it) and per step
    _compare_model(
        f"{rule}-cde", length=60, solver=SolverOptions(RK4(affine_steps=affine_steps), gradient=Checkpoint(every=16))
    )


@pytest.mark.parametrize("rule", ["hebb", "oja", "delta"])
def test_chunked_exact_solver_on_the_device_equals_the_cpu(rule):
    # the WY / UT blocks (Exact(recurrence="chunked")): 30 windows, blocks of 4, segments of 8
    _compare_model(f"{rule}-rde", length=120, solver=Exact(chunk_size=8, recurrence="chunked", block_size=4))


@pytest.mark.parametrize("rule", ["hebb", "oja", "delta"])
def test_parallel_fast_weight_scans_on_the_device_equal_the_cpu(rule):
    # the recurrences composed by the parallel prefix scan (scan="parallel" on both devices; "auto" on the device
    # is checked against the CPU's sequential path by the registry test): affine rk4, exact rank-one steps, WY blocks
    _compare_model(f"{rule}-cde", length=60, solver=SolverOptions(RK4(scan="parallel"), gradient=Checkpoint(every=16)))
    _compare_model(f"{rule}-rde", length=120, solver=Exact(chunk_size=8, scan="parallel"))
    _compare_model(
        f"{rule}-rde", length=120, solver=Exact(chunk_size=8, scan="parallel", recurrence="chunked", block_size=4)
    )


@pytest.mark.parametrize("rule", ["hebb", "oja", "delta", "delta-post"])
def test_exact_solver_on_the_device_equals_the_cpu(rule):
    # 120 points, log-signature windows of 4: 30 windows in segments of 8 (several checkpointed segments)
    _compare_model(f"{rule}-rde", length=120, solver=SolverOptions(Exact(chunk_size=8)))


def test_exact_solver_states_at_every_knot_on_the_device_equal_the_cpu():
    from neuralde_seq.solvers import solve

    times, values, lengths = registry_batch(length=120)
    model, inputs = build_registry_model("delta-rde", times, values, lengths)
    field = model.network.dynamics
    g = torch.Generator().manual_seed(3)
    heads, head_dim = field.exact_field.n_heads, field.exact_field.head_dim
    W0 = 0.1 * torch.randn(times.shape[0], heads, head_dim, head_dim, generator=g, dtype=DTYPE)
    options = SolverOptions(Exact(chunk_size=8))
    results = []
    for device in ("cpu", DEVICE):
        f = copy.deepcopy(field).to(device)
        start = W0.to(device, copy=True).requires_grad_()  # a leaf on each device (W0 itself stays without grad)
        states = solve(f, inputs.to(device), start, options, at_knots=True)
        (states.sin().sum()).backward()
        results.append(
            (states.detach(), start.grad, {n: p.grad for n, p in f.named_parameters() if p.grad is not None})
        )
    (expected, grad_expected, params_expected), (actual, grad_actual, params_actual) = results
    _assert_close(actual, expected, RTOL, "states at the knots")
    _assert_close(grad_actual, grad_expected, RTOL, "gradient of the initial state")
    assert params_actual.keys() == params_expected.keys() and params_expected
    for key, grad in params_expected.items():
        _assert_close(params_actual[key], grad, RTOL, f"gradient of {key}")


def _scan_inputs(structure, steps=1000, batch=3, hidden=8, device="cpu"):
    g = torch.Generator().manual_seed(1)
    rand = lambda *shape: torch.randn(*shape, generator=g, dtype=DTYPE)
    # contracting maps (|eigenvalues| < 1), so that 1,000 compositions stay finite
    if structure == "diagonal":
        M = 0.98 * torch.tanh(rand(steps, batch, hidden))
    elif structure == "block":
        M = 0.3 * rand(steps, batch, hidden // 4, 4, 4) / 4**0.5
    elif structure == "dense":
        M = 0.3 * rand(steps, batch, hidden, hidden) / hidden**0.5
    else:
        M = (
            0.9 * torch.tanh(rand(steps, batch, hidden)),
            0.1 * rand(steps, batch, hidden, 2),
            0.1 * rand(steps, batch, hidden, 2),
        )
    leaves = [
        t.to(device).requires_grad_()
        for t in ((M if isinstance(M, tuple) else (M,)) + (rand(steps, batch, hidden), rand(batch, hidden)))
    ]
    return leaves


@pytest.mark.parametrize("structure", STRUCTURES)
def test_scans_on_the_device_equal_the_cpu(structure):
    def run(scan, device):
        leaves = _scan_inputs(structure, device=device)
        M = tuple(leaves[:3]) if structure == "dplr" else leaves[0]
        states = scan(M, leaves[-2], leaves[-1], structure)
        weights = torch.linspace(-1, 1, states.numel(), dtype=DTYPE, device=device).view_as(states)
        (states * weights).sum().backward()
        return states.detach(), [t.grad for t in leaves]

    expected, expected_grads = run(sequential_scan, "cpu")
    for scan in (sequential_scan, parallel_scan):
        actual, actual_grads = run(scan, DEVICE)
        _assert_close(actual, expected, RTOL, f"{scan.__name__} {structure}: states")
        for i, (a, e) in enumerate(zip(actual_grads, expected_grads)):
            _assert_close(a, e, RTOL, f"{scan.__name__} {structure}: gradient of input {i}")


@pytest.mark.parametrize("scan", ["parallel", "sequential"])
def test_linear_cde_scans_on_the_device_equal_the_cpu(scan):
    for name in ("slice-diag", "slice-block", "slice-dense", "slice-dplr"):
        _compare_model(name, length=200, scan=scan)


@contextlib.contextmanager
def syncs_are_errors():
    """``torch.cuda.set_sync_debug_mode("error")`` inside (a global setting: it covers the autograd engine's
    device thread too), the previous mode after."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def test_sync_debug_mode_catches_a_host_read():
    x = torch.ones(3, device="cuda")
    with syncs_are_errors():
        with pytest.raises(RuntimeError, match="synchroniz"):
            x.sum().item()
        with pytest.raises(RuntimeError, match="synchroniz"):
            torch.tensor([1.0, 2.0], device="cuda")  # a blocking host-to-device copy
    assert x.sum().item() == 3.0


SYNC_CASES = {
    "ncde rk4 checkpoint": (
        "ncde",
        dict(solver=SolverOptions(RK4(step_size=0.4), gradient=Checkpoint(every=16))),
        {"fixed-step"},
    ),
    "delta-cde rk4 backprop": ("delta-cde", dict(solver=SolverOptions(RK4(), gradient=Backprop())), {"fixed-step"}),
    "delta-cde rk4 per-step": ("delta-cde", dict(solver=SolverOptions(RK4(affine_steps=False))), {"fixed-step"}),
    "delta-rde exact chunked": (
        "delta-rde",
        dict(solver=Exact(chunk_size=8, recurrence="chunked", block_size=4)),
        {"exact-forward", "exact-backward"},
    ),
    "delta-cde rk4 sequential": ("delta-cde", dict(solver=SolverOptions(RK4(scan="sequential"))), {"fixed-step"}),
    "delta-cde rk4 parallel": (
        "delta-cde",
        dict(solver=SolverOptions(RK4(scan="parallel"), gradient=Checkpoint(every=16))),
        {"fixed-step"},
    ),
    "delta-rde exact parallel": (
        "delta-rde",
        dict(solver=SolverOptions(Exact(chunk_size=8, scan="parallel"))),
        {"exact-forward", "exact-backward"},
    ),
    "delta-rde exact chunked parallel": (
        "delta-rde",
        dict(solver=Exact(chunk_size=8, scan="parallel", recurrence="chunked", block_size=4)),
        {"exact-forward", "exact-backward"},
    ),
    **{
        f"{rule}-rde exact": (
            f"{rule}-rde",
            dict(solver=SolverOptions(Exact(chunk_size=8))),
            {"exact-forward", "exact-backward"},
        )
        for rule in ("hebb", "oja", "delta", "delta-post")
    },
}


@pytest.mark.parametrize("case", list(SYNC_CASES))
def test_step_loops_do_not_sync(case):
    name, overrides, loops = SYNC_CASES[case]
    times, values, lengths = registry_batch(length=200)
    model, inputs = build_registry_model(name, times, values, lengths, **overrides)
    model, inputs, labels = model.to("cuda"), inputs.to("cuda"), (torch.arange(times.shape[0]) % 3).to("cuda")
    training_loss(model, inputs, labels).backward()  # warm-up: lazy initialisation (cuBLAS handles) may sync
    model.zero_grad(set_to_none=True)
    with watch_step_loops(syncs_are_errors) as entered:
        training_loss(model, inputs, labels).backward()
    assert loops <= set(entered), f"{case}: the instrument never entered {loops - set(entered)}"
    assert all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in model.parameters())


def test_random_features_on_the_device_equal_the_fused_cpu_kernel():
    # The device forms every state (the parallel scan) and pools them; the CPU runs the fused kernel (issue 35):
    # the continuous features to 1e-10, the proportions up to a state within rounding of its threshold.
    import numpy as np

    from neuralde_seq.random_features import RandomFeatureClassifier

    rng = np.random.default_rng(0)
    X = [np.cumsum(rng.normal(size=(int(rng.integers(300, 1000)), 2)), axis=0) for _ in range(24)]
    y = np.arange(24) % 3
    cpu = RandomFeatureClassifier(features=("ppv", "mpv", "max", "mean", "final"), random_state=0, dtype="float64")
    gpu = RandomFeatureClassifier(
        features=("ppv", "mpv", "max", "mean", "final"), random_state=0, dtype="float64", device=DEVICE
    )
    expected, actual = cpu.fit_random_features(X, y), gpu.fit_random_features(X, y)
    assert cpu.feature_map_._fused(torch.device("cpu")) and not gpu.feature_map_._fused(torch.device(DEVICE))
    slices = cpu.feature_map_.feature_slices_
    for name in ("mpv", "max", "mean", "final"):
        columns = slices[name]
        error = _relative_error(torch.as_tensor(actual[:, columns]), torch.as_tensor(expected[:, columns]))
        assert error <= RTOL, f"{name}: {error:.2e}"
    ppv = slices["ppv"]
    assert float(np.abs(actual[:, ppv] - expected[:, ppv]).max()) <= 1.0 / 300
    np.testing.assert_allclose(gpu.decision_function(X), cpu.decision_function(X), rtol=1e-6, atol=1e-8)
