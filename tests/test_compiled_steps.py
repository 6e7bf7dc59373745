"""The fixed-step loop's compiled steps (``FixedStep.compile``, issue 38) against the eager loop, its reference.

- Two registry models whose fields go through `FixedStepSolve.run` with rk4 (one step per knot interval) over 1,000
  steps, in float64: "ncde" (a CDE field f(z) dX read whole at every stage) and "delta-post-cde" (a fast weight CDE
  field whose input-only projections are split off, ``control_features``, and computed for a segment at once). The
  compiled path's logits and the loss's gradient with respect to every parameter equal the eager path's to
  rtol 1e-10, atol 1e-12 under checkpointed and plain backpropagated gradients. Not bitwise: inductor may fuse and
  reorder floating-point operations (a fused multiply-add, another order of a sum), which changes the last bits
  of each step; over 1,000 steps of a contracting field that stays near 1e-14 relative, far below the tolerance,
  while a wrong step (a stage's rate or weight, a width) moves the outputs by more than 1e-6.
- The samples have different lengths, so the steps past a sample's end (width 0) are taken too.
- Where compiling does not apply, True is refused naming the field; "auto" on a CPU runs the eager loop.
- On CUDA (``pytest -m cuda``), the compiled steps (a CUDA graph per step, mode "reduce-overhead") against the eager
  loop in float32.

Skipped where torch.compile cannot run (no torch._dynamo, or no C compiler for inductor's C++).
"""

from __future__ import annotations

import pytest
import torch
from device_checks import registry_batch
from torch._dynamo.utils import counters

from neuralde_seq import create_model, model_inputs
from neuralde_seq.solvers import (
    RK4,
    Adjoint,
    Auto,
    Backprop,
    Checkpoint,
    Exact,
    SolverOptions,
    fixed_step,
    parse_solver,
    solve,
)
from neuralde_seq.solvers.fixed_step import compile_unavailable

UNAVAILABLE = compile_unavailable()
needs_compile = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"torch.compile cannot run: {UNAVAILABLE}")

STEPS = 1000
# The smallest sizes of each model: the number of steps is the point, not the width.
MODELS = {"ncde": dict(hidden=4, width=8, depth=1), "delta-post-cde": dict(d_model=4, n_heads=1, d_ff=4)}


@pytest.fixture
def fresh_compiled_steps(monkeypatch):
    """An empty cache of compiled steps for the test: its steps compile anew (a graph captured in this test)."""
    monkeypatch.setattr(fixed_step, "_COMPILED_STEPS", {})
    return fixed_step._COMPILED_STEPS


def _step(name, compile, gradient, dtype, device="cpu"):
    """(logits, {parameter name: gradient of the loss}) of one training step of ``name`` on 3 samples on one grid of
    STEPS + 1 points (STEPS rk4 steps), of lengths STEPS + 1, −5 and −9."""
    times, values, lengths = registry_batch(length=STEPS + 1, batch=3, channels=2, dtype=dtype)
    inputs = model_inputs(name, times, values, lengths)
    torch.manual_seed(0)
    solver = SolverOptions(RK4(compile=compile), gradient=gradient)
    model = create_model(name, inputs, 3, solver=solver, **MODELS[name]).to(device=device, dtype=dtype)
    inputs = inputs.to(device=device, dtype=dtype)
    for module in model.modules():  # no dropout: both paths must see the same function
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.eval()
    logits = model(inputs)
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2], device=device))
    loss.backward()
    assert solver.last_method == RK4(compile=compile)  # rk4, not the closed form
    gradients = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), gradients


def _assert_same_step(compiled, eager, **tolerance):
    (logits, gradients), (expected_logits, expected_gradients) = compiled, eager
    torch.testing.assert_close(logits, expected_logits, **tolerance)
    assert gradients.keys() == expected_gradients.keys() and len(gradients) > 3
    for name, gradient in expected_gradients.items():
        assert bool(gradient.abs().max() > 0), f"{name}: no gradient reached it"
        torch.testing.assert_close(gradients[name], gradient, **tolerance, msg=lambda m: f"{name}: {m}")


@needs_compile
@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_steps_equal_the_eager_loop_over_1000_steps(name, fresh_compiled_steps):
    captured = counters["stats"]["unique_graphs"]
    for gradient in (Checkpoint(), Backprop()):
        eager = _step(name, False, gradient, torch.float64)
        compiled = _step(name, True, gradient, torch.float64)
        _assert_same_step(compiled, eager, rtol=1e-10, atol=1e-12)
    # the steps really ran through torch.compile: one compiled step (this field, rk4, the CPU's default mode) whose
    # graphs were captured here (without and with gradients)
    assert [key[1:] for key in fresh_compiled_steps] == [(RK4.tableau, None)]
    assert counters["stats"]["unique_graphs"] >= captured + 2


def _fast_weight_field(dtype=torch.float64):
    times, values, lengths = registry_batch(length=12, batch=3, channels=2, dtype=dtype)
    inputs = model_inputs("delta-cde", times, values, lengths)
    torch.manual_seed(0)
    model = create_model("delta-cde", inputs, 3, d_model=4, n_heads=1, d_ff=4).to(dtype)
    return model, inputs.to(dtype)


def test_compile_true_is_refused_where_the_per_step_loop_does_not_run(fresh_compiled_steps):
    # the composed affine steps of one Delta field: refused when the model is built, and by solve
    model, inputs = _fast_weight_field()
    with pytest.raises(ValueError, match=r"RK4\.compile=True compiles the steps of the per-step loop.*affine_steps"):
        create_model("delta-cde", inputs, 3, d_model=4, n_heads=1, d_ff=4, solver=RK4(compile=True))
    dynamics = model.network.dynamics
    initial = torch.zeros(3, 1, 4, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"RK4\.compile=True compiles the steps"):
        solve(dynamics, inputs, initial, RK4(compile=True))
    with pytest.raises(ValueError, match=r"RK4\.compile=True compiles the steps.*scan='parallel'"):
        RK4(compile=True, scan="parallel")
    # the continuous adjoint solves with torchdiffeq, as the fallback of Auto too
    for method in (RK4(compile=True), Auto(fallback=RK4(compile=True))):
        with pytest.raises(
            ValueError,
            match=r"RK4\.compile=True compiles the steps of our fixed-step loop, but "
            r"gradient Adjoint\(\)",
        ):
            SolverOptions(method, gradient=Adjoint())
    # values other than True, False and "auto"
    for value in ("yes", 1, None, "True"):
        with pytest.raises(ValueError, match=r"RK4\.compile must be True, False or 'auto', got"):
            RK4(compile=value)
    with pytest.raises(ValueError, match=r"RK4\.compile must be True, False or 'auto', got 'on'"):
        parse_solver({"method": "rk4", "compile": "on"})
    # "auto" on the same field: the composed steps, eagerly (nothing compiled); False too
    for compile in ("auto", False):
        solve(dynamics, inputs, initial, RK4(compile=compile))
    assert fresh_compiled_steps == {}


def test_auto_runs_the_eager_loop_on_a_cpu(fresh_compiled_steps, monkeypatch):
    """compile="auto" (the default) on a CPU: the per-step loop's steps are not compiled, so none is made; the
    same states as compile=False, bitwise."""
    times, values, lengths = registry_batch(length=30, batch=3, channels=2)
    inputs = model_inputs("ncde", times, values, lengths)
    made = []
    monkeypatch.setattr(fixed_step, "compiled_step", lambda *args: made.append(args))
    states = {}
    for compile in ("auto", False):
        torch.manual_seed(0)
        model = create_model("ncde", inputs, 3, solver=RK4(compile=compile), **MODELS["ncde"]).double()
        states[compile] = model(inputs.to(torch.float64))
    assert RK4().compile == "auto" and not RK4().compiles("cpu") and not made and fresh_compiled_steps == {}
    torch.testing.assert_close(states["auto"], states[False], rtol=0, atol=0)
    # on a CUDA device "auto" compiles, where torch.compile can run
    assert RK4().compiles("cuda") == (UNAVAILABLE is None) and RK4(compile=True).compiles("cpu")


def test_compile_true_without_a_c_compiler_is_refused(monkeypatch):
    monkeypatch.setattr(fixed_step.shutil, "which", lambda name: None)
    with pytest.raises(
        RuntimeError,
        match=r"RK4\.compile=True needs torch\.compile, which cannot run here: no C "
        r"compiler \(cc or gcc\) is on PATH",
    ):
        RK4(compile=True).compiles("cpu")
    assert not RK4().compiles("cuda")  # "auto" leaves it off instead


def test_the_stored_form_round_trips_the_choice():
    for compile in (True, False, "auto"):
        options = SolverOptions(Auto(exact=Exact(), fallback=RK4(compile=compile)))
        assert SolverOptions.from_dict(options.to_dict()) == options
        assert options.to_dict()["method"]["fallback"]["compile"] == compile


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CPU tests cover the rest")
@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_steps_on_cuda_equal_the_eager_loop(name, fresh_compiled_steps):
    """The compiled steps on CUDA (mode "reduce-overhead": each step a CUDA graph, replayed), float32, against the
    eager loop on the same device: to float32's rounding over 1,000 steps."""
    assert fixed_step.COMPILE_MODES["cuda"] == "reduce-overhead"
    for gradient in (Checkpoint(), Backprop()):
        eager = _step(name, False, gradient, torch.float32, device="cuda")
        compiled = _step(name, "auto", gradient, torch.float32, device="cuda")
        _assert_same_step(compiled, eager, rtol=1e-4, atol=1e-6)
    assert [key[1:] for key in fresh_compiled_steps] == [(RK4.tableau, "reduce-overhead")]
