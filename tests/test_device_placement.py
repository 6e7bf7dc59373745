"""Device placement and host reads, checked on the CPU (issue 27; tests/test_cuda.py checks the same on a GPU).

- No tensor is silently created on the default device: every registry model (and the solver and scan variants
  that take other code paths) runs a training step's forward and backward on CPU inputs while tensor factories
  called without ``device=`` create on the "meta" device (tests/device_checks.py, `factories_on`), where any op
  mixing such a tensor with the CPU's raises. On a GPU the same stray tensor would land on the CPU and fail (or,
  as a CPU scalar, cost a copy); here it fails on every machine.
- The step loops read nothing on the host: the fixed-step solvers' loop and the exact solver's segments raise on
  ``.item()``, ``.tolist()``, ``bool()``, ``float()``, ``int()`` of a tensor and on tensors built from host data
  (`host_reads_forbidden`), each a host sync on a GPU, through a whole forward and backward pass. Argument checks
  and set-up before the loop may read values (once per solve).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from device_checks import (
    HostRead,
    build_registry_model,
    factories_on,
    host_reads_forbidden,
    registry_batch,
    training_loss,
    watch_step_loops,
)

from neuralde_seq import MODEL_NAMES
from neuralde_seq.solvers import RK4, Adjoint, Backprop, Checkpoint, Dopri5, Exact, SolverOptions

DTYPE = torch.float64
# Variants that take code paths the registry defaults do not: the rk4 loop and torchdiffeq's solves of a model
# whose default is the closed form, every gradient method, both scans, float32.
VARIANTS = {
    "delta-rde rk4": ("delta-rde", dict(solver=SolverOptions(RK4()))),
    "delta-cde rk4 backprop": ("delta-cde", dict(solver=SolverOptions(RK4(), gradient=Backprop()))),
    "ncde adjoint": ("ncde", dict(solver=SolverOptions(RK4(), gradient=Adjoint(check_every=1)))),
    "ncde dopri5 checkpoint": ("ncde", dict(solver=SolverOptions(Dopri5(rtol=1e-4, atol=1e-6)))),
    "gru-ode dopri5 backprop": (
        "gru-ode",
        dict(solver=SolverOptions(Dopri5(rtol=1e-4, atol=1e-6), gradient=Backprop())),
    ),
    "delta-cde rk4 per-step": ("delta-cde", dict(solver=SolverOptions(RK4(affine_steps=False)))),
    "delta-rde exact chunked": ("delta-rde", dict(solver=SolverOptions(Exact(recurrence="chunked", block_size=4)))),
    "slice-diag parallel": ("slice-diag", dict(scan="parallel")),
    "slice-block parallel": ("slice-block", dict(scan="parallel")),
    "slice-dplr parallel": ("slice-dplr", dict(scan="parallel")),
    "hebb-rde exact chunks": ("hebb-rde", dict(solver=SolverOptions(Exact(chunk_size=2)))),
    "oja-rde exact chunks": ("oja-rde", dict(solver=SolverOptions(Exact(chunk_size=2)))),
    "delta-post-rde exact chunks": ("delta-post-rde", dict(solver=SolverOptions(Exact(chunk_size=2)))),
}


def _step_on_meta_default(name: str, dtype=DTYPE, **overrides):
    """A training step's forward and backward (and an evaluation forward without gradients) of ``name`` on CPU
    inputs, with factories defaulting to "meta"; returns the model."""
    times, values, lengths = registry_batch()
    model, inputs = build_registry_model(name, times, values, lengths, dtype=dtype, **overrides)
    labels = torch.arange(times.shape[0]) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. an adjoint check's notice: not what is tested
        with factories_on("meta"):
            training_loss(model, inputs, labels).backward()
            model.eval()
            with torch.no_grad():
                logits = model(inputs)
    assert logits.device.type == "cpu" and logits.dtype == dtype
    return model


def test_a_stray_factory_call_fails_in_forward_and_backward():
    """The instrument itself: a tensor created without device= raises where it meets CPU tensors, in a module's
    forward and in a custom Function's backward alike (where torch.set_default_device alone does not reach)."""

    class Stray(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * torch.ones(grad.shape, dtype=grad.dtype)  # no device=: the bug class looked for

    x = torch.randn(4, dtype=DTYPE, requires_grad=True)
    with factories_on("meta"):
        with pytest.raises(RuntimeError, match="meta"):
            x + torch.zeros(4, dtype=DTYPE)
        y = Stray.apply(x).sum()
        with pytest.raises(RuntimeError, match="meta"):
            y.backward()
        # explicit devices and tensors that follow their inputs are untouched
        assert (x + torch.zeros(4, dtype=DTYPE, device=x.device) + x.new_zeros(4)).device.type == "cpu"
    assert torch.zeros(1).device.type == "cpu"  # restored


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_registry_model_creates_no_tensor_on_the_default_device(name):
    model = _step_on_meta_default(name)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert any(g is not None for g in grads), f"{name}: no gradient reached the parameters"
    for g in grads:
        if g is not None:
            assert g.device.type == "cpu" and bool(torch.isfinite(g).all())


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_solver_and_scan_variants_create_no_tensor_on_the_default_device(variant):
    name, overrides = VARIANTS[variant]
    _step_on_meta_default(name, **overrides)


def test_float32_models_create_no_tensor_on_the_default_device():
    for name in ("delta-rde", "delta-cde", "ckcnn", "slice-diag"):
        _step_on_meta_default(name, dtype=torch.float32)


def test_host_read_instrument_catches_item_bool_and_host_data():
    """The instrument itself raises on each kind of host read, and only inside."""
    x = torch.ones(3)
    with host_reads_forbidden():
        for read in (
            lambda: x.sum().item(),
            lambda: x.tolist(),
            lambda: bool(x.sum() > 0),
            lambda: float(x.sum()),
            lambda: int(x.sum()),
            lambda: torch.tensor([1.0, 2.0]),
            lambda: torch.as_tensor([1.0]),
        ):
            with pytest.raises(HostRead):
                read()
        assert torch.as_tensor(x).shape == (3,)  # from a tensor: no host data
    assert x.sum().item() == 3.0 and bool(x.sum() > 0) and torch.tensor([1.0]).item() == 1.0


# (model, overrides, the loops that must have run under the instrument)
STEP_LOOP_CASES = {
    "delta-cde rk4 checkpoint": (
        "delta-cde",
        dict(solver=SolverOptions(RK4(), gradient=Checkpoint(every=5))),
        {"fixed-step"},
    ),
    "delta-cde rk4 backprop": ("delta-cde", dict(solver=SolverOptions(RK4(), gradient=Backprop())), {"fixed-step"}),
    "delta-cde rk4 per-step checkpoint": (
        "delta-cde",
        dict(solver=SolverOptions(RK4(affine_steps=False), gradient=Checkpoint(every=5))),
        {"fixed-step"},
    ),
    "oja-cde rk4 checkpoint": (
        "oja-cde",
        dict(solver=SolverOptions(RK4(), gradient=Checkpoint(every=5))),
        {"fixed-step"},
    ),
    "ncde rk4 step_size": ("ncde", dict(solver=SolverOptions(RK4(step_size=0.4))), {"fixed-step"}),
    "hebb-rde exact": (
        "hebb-rde",
        dict(solver=SolverOptions(Exact(chunk_size=2))),
        {"exact-forward", "exact-backward"},
    ),
    "oja-rde exact": ("oja-rde", dict(solver=SolverOptions(Exact(chunk_size=2))), {"exact-forward", "exact-backward"}),
    "delta-rde exact": (
        "delta-rde",
        dict(solver=SolverOptions(Exact(chunk_size=2))),
        {"exact-forward", "exact-backward"},
    ),
    "delta-rde exact chunked": (
        "delta-rde",
        dict(solver=Exact(chunk_size=4, recurrence="chunked", block_size=2)),
        {"exact-forward", "exact-backward"},
    ),
    "delta-post-rde exact": (
        "delta-post-rde",
        dict(solver=SolverOptions(Exact(chunk_size=2))),
        {"exact-forward", "exact-backward"},
    ),
}


@pytest.mark.parametrize("case", list(STEP_LOOP_CASES))
def test_step_loops_read_nothing_on_the_host(case):
    name, overrides, loops = STEP_LOOP_CASES[case]
    times, values, lengths = registry_batch(length=40)
    model, inputs = build_registry_model(name, times, values, lengths, **overrides)
    labels = torch.arange(times.shape[0]) % 3
    # post-Delta's relax_error reads one flag per step on the CPU only, where it costs no sync (on other devices it
    # takes both branches without the read: test_relax_error_reads_nothing_off_the_cpu)
    allowed = ("relax_error",)
    with watch_step_loops(lambda: host_reads_forbidden(allowed_on_cpu=allowed)) as entered:
        loss = training_loss(model, inputs, labels)
        loss.backward()
    assert loops <= set(entered), f"{case}: the instrument never entered {loops - set(entered)}"
    if "fixed-step" in loops and isinstance(overrides["solver"].gradient, Checkpoint):
        assert entered.count("fixed-step") >= 4  # several segments forward and their recomputation backward
    assert all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in model.parameters())


def test_relax_error_reads_nothing_off_the_cpu():
    """Off the CPU, post-Delta's relax_error takes both branches element-wise without reading a flag on the host
    (on "meta" tensors any host read raises), and that path equals the CPU's, small and large errors alike."""
    from neuralde_seq.rules.relaxation import _relax_error_both_branches, relax_error

    e0 = torch.tensor([-30.0, -3.0, -1e-3, 0.0, 0.5, 4.0, 25.0], dtype=DTYPE)
    log_decay = torch.tensor([-0.1, -2.0, -0.5, -1.0, 0.0, -40.0, -3.0], dtype=DTYPE)
    out = relax_error(e0.to("meta"), log_decay.to("meta"))
    assert out.device.type == "meta" and out.shape == e0.shape
    small = e0.abs() < 20
    torch.testing.assert_close(
        _relax_error_both_branches(e0[small], log_decay[small]),
        relax_error(e0[small], log_decay[small]),
        rtol=0,
        atol=0,
    )
    torch.testing.assert_close(_relax_error_both_branches(e0, log_decay), relax_error(e0, log_decay), rtol=0, atol=0)
    # and it is the formula: asinh(sinh(e0) e^{log_decay}), in float64 where that does not overflow
    torch.testing.assert_close(
        relax_error(e0, log_decay), torch.asinh(torch.sinh(e0) * torch.exp(log_decay)), rtol=1e-13, atol=1e-15
    )
