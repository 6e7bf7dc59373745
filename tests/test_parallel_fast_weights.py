"""The fast weight recurrences composed by a parallel prefix scan (``RK4(scan="parallel")``,
``Exact(scan="parallel")``, issue 27) against their sequential forms, in float64.

- The affine rk4 path (neuralde_seq.solvers.affine_rk4): delta-cde, hebb-cde and oja-cde at 1,000 steps, three
  samples of different lengths, states at every knot: values, and gradients with respect to the field's weights,
  the control's coefficients and the initial state, equal to ``scan="sequential"`` (the hand-written adjoint) to
  1e-9 relative; in the default (long) segments and in several short checkpointed segments.
- The exact path (neuralde_seq.solvers.exact_fast_weights): pre-Delta (with and without a forget gate) at 1,000 and
  4,096 windows, the rank-one steps composed by the scan and the chunked WY blocks composed by the scan, against
  the sequential recurrence; Oja and Hebb at 300 windows.
- "auto" takes the sequential path on the CPU (the scan is never called) and the parallel one elsewhere;
  "parallel" calls the scan. Refused options name the problem.
- The parallel paths read nothing on the host inside the step loops and create no tensor on the default device
  (tests/device_checks.py's instruments).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import pytest
import torch
from device_checks import (
    build_registry_model,
    factories_on,
    host_reads_forbidden,
    registry_batch,
    training_loss,
    watch_step_loops,
)

from neuralde_seq import create_model, model_inputs
from neuralde_seq.controls import Control
from neuralde_seq.fields import FastWeightField
from neuralde_seq.solvers import (
    RK4,
    Backprop,
    Checkpoint,
    Dopri5,
    Exact,
    SolverOptions,
    affine_rk4,
    chunked_delta,
    exact_fast_weights,
    linear_scan,
    parse_solver,
    solve,
)

DTYPE = torch.float64


@contextlib.contextmanager
def _scan_calls():
    """The calls of `parallel_scan` made by the fast weight solvers inside (the real function, counted)."""
    calls = []
    modules = (affine_rk4, exact_fast_weights, chunked_delta)
    original = linear_scan.parallel_scan

    def counted(*args, **kwargs):
        calls.append(args[3])
        return original(*args, **kwargs)

    try:
        for module in modules:
            module.parallel_scan = counted
        yield calls
    finally:
        for module in modules:
            module.parallel_scan = original


def _states_and_grads(field, control, W0, options):
    """States at every knot of ``solve`` and the gradients of a fixed functional of them with respect to W0, the
    control's coefficients and the field's weights (name -> tensor)."""
    W0 = W0.detach().clone().requires_grad_()
    coeffs = control.coeffs.detach().clone().requires_grad_()
    control = dataclasses.replace(control, coeffs=coeffs)
    states = solve(field, control, W0, options, at_knots=True)
    weights = torch.linspace(-1, 1, states.numel(), dtype=DTYPE).view_as(states)
    # (the query projection reads the state out; the solve never uses it)
    named = [("W0", W0), ("control coefficients", coeffs)] + [
        (n, p) for n, p in field.named_parameters() if p.requires_grad and not n.startswith("query")
    ]
    grads = torch.autograd.grad((states.sin() * weights).sum(), [t for _, t in named], allow_unused=True)
    return states.detach(), {n: g for (n, _), g in zip(named, grads) if g is not None}


def _assert_equal(actual, expected, rtol=1e-9):
    (states, grads), (states_ref, grads_ref) = actual, expected
    assert (states - states_ref).abs().max() <= rtol * states_ref.abs().max()
    assert grads.keys() == grads_ref.keys() and {"W0", "control coefficients"} <= grads.keys()
    for name, g in grads_ref.items():
        assert g.abs().max() > 0, name  # zero on both paths would prove nothing
        error = (grads[name] - g).abs().max() / g.abs().max()
        assert error <= rtol, f"{name}: relative gradient error {error:.2e}"


# ------------------------------------------------------------------------------ affine rk4
def _cde_case(name, length=1000, seed=0, **options):
    g = torch.Generator().manual_seed(seed)
    times = torch.linspace(0, 1, length, dtype=DTYPE).repeat(3, 1)
    values = torch.cumsum(torch.randn(3, length, 3, generator=g, dtype=DTYPE), 1) / length**0.5
    control = model_inputs(name, times, values, torch.tensor([length, length - 137, length // 3]))
    torch.manual_seed(seed)
    model = create_model(name, control, 3, d_model=16, n_heads=2, **options).to(DTYPE)
    field = model.network.layers[0].field
    W0 = 0.3 * torch.randn(3, field.n_heads, field.head_dim, field.head_dim, generator=g, dtype=DTYPE)
    return field, control, W0


@pytest.mark.parametrize(
    "name,options",
    [("delta-cde", {}), ("hebb-cde", {}), ("oja-cde", {}), ("delta-cde", dict(forget_gate=True, chrono_t_max=20.0))],
)
def test_affine_rk4_parallel_equals_sequential_at_1000_steps(name, options):
    """The registry's CDE form (Hermite control, rk4, oja-cde with two steps per knot) at 1,000 points: the
    composition by the parallel scan in its default segments and in segments of 100 steps, against the
    sequential composition with its hand-written adjoint."""
    field, control, W0 = _cde_case(name, **options)
    expected = _states_and_grads(field, control, W0, SolverOptions(RK4(scan="sequential")))
    for every in (None, 100):
        with _scan_calls() as calls:
            actual = _states_and_grads(
                field, control, W0, SolverOptions(RK4(scan="parallel"), gradient=Checkpoint(every=every))
            )
        assert calls, "the parallel scan did not run"
        _assert_equal(actual, expected)


def test_affine_rk4_auto_is_sequential_on_the_cpu_and_the_segments():
    """ "auto" (the default) never calls the scan on the CPU and gives the sequential states; "parallel" calls it
    (forward and the recomputation backward) in segments sized by `parallel_segment_steps`."""
    field, control, W0 = _cde_case("delta-cde", length=200)
    assert SolverOptions().method.fallback.scan == SolverOptions().method.exact.scan == "auto"
    with _scan_calls() as calls:
        auto = _states_and_grads(field, control, W0, SolverOptions(RK4()))
    assert calls == []
    sequential = _states_and_grads(field, control, W0, SolverOptions(RK4(scan="sequential")))
    assert torch.equal(auto[0], sequential[0])
    solver = affine_rk4.AffineFixedStepSolve(field, control, RK4(scan="parallel"), DTYPE)
    assert solver.parallel and solver.segments(None) == [(0, solver.steps)]  # a small batch: one segment
    assert not affine_rk4.AffineFixedStepSolve(field, control, RK4(), DTYPE).parallel
    # A large batch: the segments shrink to what the scan's graph allows.
    per_step = 4096 * field.n_heads * 2 * field.head_dim**2
    size = linear_scan.parallel_segment_steps(solver.steps, per_step)
    graph = lambda S: S * math.ceil(math.log2(S)) * per_step
    assert 8 <= size < solver.steps and graph(size) <= linear_scan.PARALLEL_SCAN_ENTRIES < graph(2 * size)


# ------------------------------------------------------------------------------ exact
HEADS, HEAD_DIM, CHANNELS = 2, 4, 3


def _rde_case(rule, forget_gate, windows, seed=0):
    """A piecewise-constant control of ``windows`` windows of lengths in [0.25, 1.75], three samples ending at
    different windows; a field with weights large enough that the states move."""
    g = torch.Generator().manual_seed(seed)
    knots = torch.cat(
        [torch.zeros(1, dtype=DTYPE), torch.cumsum(0.25 + 1.5 * torch.rand(windows, generator=g, dtype=DTYPE), 0)]
    )
    coeffs = torch.zeros(3, windows + 1, 4, CHANNELS, dtype=DTYPE)
    coeffs[:, :windows, 0] = 1.5 * torch.randn(3, windows, CHANNELS, generator=g, dtype=DTYPE)
    control = Control(knots, coeffs, torch.tensor([windows, windows - 123, windows // 2 + 7]), piecewise_constant=True)
    torch.manual_seed(seed)
    field = FastWeightField(CHANNELS, HEADS * HEAD_DIM, HEADS, rule, form="rde", forget_gate=forget_gate).to(DTYPE)
    with torch.no_grad():
        for p in field.parameters():
            p.copy_(0.7 * torch.randn(p.shape, generator=g, dtype=DTYPE))
    W0 = 0.5 * torch.randn(3, HEADS, HEAD_DIM, HEAD_DIM, generator=g, dtype=DTYPE)
    return field, control, W0


@pytest.mark.parametrize("forget_gate", [False, True])
@pytest.mark.parametrize("windows", [1000, 4096])
def test_exact_parallel_equals_sequential(windows, forget_gate):
    """Pre-Delta at 1,000 and 4,096 windows: the rank-one steps composed by the scan (default segments, and
    segments of 300) and the WY blocks composed by the scan (blocks of 16 and 48), against the sequential
    recurrence with its hand-written adjoint."""
    field, control, W0 = _rde_case("delta", forget_gate, windows)
    expected = _states_and_grads(field, control, W0, SolverOptions(Exact(scan="sequential")))
    variants = [
        dict(),
        dict(chunk_size=300),
        dict(recurrence="chunked", block_size=16),
        dict(recurrence="chunked", block_size=48, chunk_size=480),
    ]
    for variant in variants:
        with _scan_calls() as calls:
            actual = _states_and_grads(field, control, W0, SolverOptions(Exact(scan="parallel", **variant)))
        # the rank-one steps as diagonal-plus-rank-one maps, the WY blocks as dense ones
        assert calls and set(calls) == {"dense" if "recurrence" in variant else "dplr"}, variant
        _assert_equal(actual, expected)


@pytest.mark.parametrize("rule", ["oja", "hebb"])
@pytest.mark.parametrize("forget_gate", [False, True])
def test_exact_parallel_of_the_other_affine_rules(rule, forget_gate):
    """Oja (the step on Wᵀ) and Hebb (nothing decays: a diagonal scan) at 300 windows, both parallel forms."""
    field, control, W0 = _rde_case(rule, forget_gate, 300, seed=1)
    expected = _states_and_grads(field, control, W0, SolverOptions(Exact(scan="sequential")))
    for variant in (dict(chunk_size=64), dict(recurrence="chunked", block_size=16)):
        with _scan_calls() as calls:
            actual = _states_and_grads(field, control, W0, SolverOptions(Exact(scan="parallel", **variant)))
        assert calls
        _assert_equal(actual, expected)


def test_exact_auto_is_sequential_on_the_cpu():
    field, control, W0 = _rde_case("delta", False, 200)
    with _scan_calls() as calls:
        auto = _states_and_grads(field, control, W0, SolverOptions(Exact()))
        _states_and_grads(field, control, W0, SolverOptions(Exact(recurrence="chunked")))
    assert calls == []
    assert torch.equal(auto[0], _states_and_grads(field, control, W0, SolverOptions(Exact(scan="sequential")))[0])
    assert linear_scan.uses_parallel_scan("auto", torch.device("cuda", 0))
    assert linear_scan.uses_parallel_scan("auto", "meta") and not linear_scan.uses_parallel_scan("auto", "cpu")
    assert linear_scan.uses_parallel_scan("parallel", "cpu") and not linear_scan.uses_parallel_scan(
        "sequential", "cuda"
    )


def test_refused_options():
    with pytest.raises(ValueError, match=r"Exact\.scan must be one of"):
        Exact(scan="fast")
    with pytest.raises(
        ValueError, match="scan is an option of Euler, Midpoint, Heun2, Heun3, RK4, Exact, not of Dopri5"
    ):
        parse_solver({"method": "dopri5", "scan": "parallel"})
    with pytest.raises(TypeError, match="unexpected keyword argument 'scan'"):
        Dopri5(scan="parallel")
    with pytest.raises(ValueError, match="affine_steps=False"):
        SolverOptions(RK4(scan="parallel", affine_steps=False))
    field, control, W0 = _rde_case("delta-post", False, 20)
    with pytest.raises(ValueError, match="post-Delta's exact step is not affine"):
        solve(field, control, W0, SolverOptions(Exact(scan="parallel")))
    with pytest.raises(ValueError, match="per-step loop, which has no parallel form"):
        solve(field, control, W0, SolverOptions(RK4(scan="parallel")))
    solve(field, control, W0, SolverOptions(Exact()))  # "auto": post-Delta's sequential steps, no refusal


# ------------------------------------------------------------------------------ instruments
PARALLEL_CASES = {
    "delta-cde rk4 checkpoint": (
        "delta-cde",
        SolverOptions(RK4(scan="parallel"), gradient=Checkpoint(every=5)),
        {"fixed-step"},
    ),
    "oja-cde rk4 backprop": ("oja-cde", SolverOptions(RK4(scan="parallel"), gradient=Backprop()), {"fixed-step"}),
    "delta-rde exact": (
        "delta-rde",
        SolverOptions(Exact(scan="parallel", chunk_size=3)),
        {"exact-forward", "exact-backward"},
    ),
    "hebb-rde exact": (
        "hebb-rde",
        SolverOptions(Exact(scan="parallel", chunk_size=3)),
        {"exact-forward", "exact-backward"},
    ),
    "delta-rde exact chunked": (
        "delta-rde",
        SolverOptions(Exact(scan="parallel", chunk_size=4, recurrence="chunked", block_size=2)),
        {"exact-forward", "exact-backward"},
    ),
}


@pytest.mark.parametrize("case", list(PARALLEL_CASES))
def test_parallel_step_loops_read_nothing_on_the_host(case):
    """A training step's forward and backward with host reads raising inside the step loops (which run the scan)."""
    name, options, loops = PARALLEL_CASES[case]
    times, values, lengths = registry_batch(length=40)
    model, inputs = build_registry_model(name, times, values, lengths, solver=options)
    labels = torch.arange(times.shape[0]) % 3
    with _scan_calls() as calls, watch_step_loops(host_reads_forbidden) as entered:
        training_loss(model, inputs, labels).backward()
    assert calls and loops <= set(entered), f"{case}: entered {set(entered)}, scan calls {len(calls)}"
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)


@pytest.mark.parametrize("case", list(PARALLEL_CASES))
def test_parallel_paths_create_no_tensor_on_the_default_device(case):
    """Tensor factories without ``device=`` create on "meta" inside: any such tensor in the scans fails."""
    name, options, _ = PARALLEL_CASES[case]
    times, values, lengths = registry_batch()
    model, inputs = build_registry_model(name, times, values, lengths, solver=options)
    labels = torch.arange(times.shape[0]) % 3
    with _scan_calls() as calls, factories_on("meta"):
        training_loss(model, inputs, labels).backward()
    assert calls and all(p.grad is None or p.grad.device.type == "cpu" for p in model.parameters())


@pytest.mark.parametrize("structure", linear_scan.STRUCTURES)
def test_matrix_state_scans_equal_one_vector_scan_per_column(structure):
    """``columns=True``: both scans of a (H, K) state equal the vector scans of its K columns under the same maps
    (values and gradients), at 1,000 steps."""
    g = torch.Generator().manual_seed(4)
    steps, batch, hidden, K = 1000, 2, 8, 3
    rand = lambda *shape: torch.randn(*shape, generator=g, dtype=DTYPE)
    M = {
        "diagonal": lambda: 0.98 * torch.tanh(rand(steps, batch, hidden)),
        "block": lambda: 0.3 * rand(steps, batch, 2, 4, 4) / 2,
        "dense": lambda: 0.3 * rand(steps, batch, hidden, hidden) / hidden**0.5,
        "dplr": lambda: (
            0.9 * torch.tanh(rand(steps, batch, hidden)),
            0.1 * rand(steps, batch, hidden, 2),
            0.1 * rand(steps, batch, hidden, 2),
        ),
    }[structure]()
    leaves = list(M if isinstance(M, tuple) else (M,)) + [rand(steps, batch, hidden, K), rand(batch, hidden, K)]
    leaves = [t.requires_grad_() for t in leaves]
    maps = tuple(leaves[:-2]) if structure == "dplr" else leaves[0]
    weights = rand(steps, batch, hidden, K)
    expected = torch.stack(
        [linear_scan.sequential_scan(maps, leaves[-2][..., k], leaves[-1][..., k], structure) for k in range(K)], dim=-1
    )
    expected_grads = torch.autograd.grad((expected * weights).sum(), leaves)
    for scan in (linear_scan.sequential_scan, linear_scan.parallel_scan):
        states = scan(maps, leaves[-2], leaves[-1], structure, columns=True)
        torch.testing.assert_close(states, expected, rtol=1e-10, atol=1e-12)
        for got, want in zip(torch.autograd.grad((states * weights).sum(), leaves), expected_grads):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10 * float(want.abs().max()))
