"""Shared helpers of tests/test_device_placement.py and tests/test_cuda.py (issue 27): a small batch for every
registry model, a training loss, and instruments that watch the solvers' step loops.

- `registry_batch` / `build_registry_model`: the registry's input and model for a padded, irregular batch with
  missing values, as a user builds them (`model_inputs`, `create_model`).
- `watch_step_loops(context)`: enters ``context()`` around each step loop only, i.e. after a solve's argument
  checks and set-up (which may read values on the host): `FixedStepSolve.run` (the fixed-step methods' loop over a
  segment, recomputed in the backward pass; its subclasses' loops too, e.g. the affine step maps' solve of
  `neuralde_seq.solvers.affine_rk4`) and the exact solver's `_CheckpointedSegments` forward and backward (its loops
  over the segments and steps, the projections of each segment included, sequential or chunked).
- `host_reads_forbidden`: inside it, reading a tensor's value on the host (``.item()``, ``.tolist()``,
  ``bool()``, ``float()``, ``int()``) or building a tensor from host data (``torch.tensor(list)``), which on a GPU
  is a synchronising copy either way, raises `HostRead`.
- `factories_on(device)`: tensor factories called without ``device=`` create on ``device``, in the forward and
  the backward pass alike (``torch.set_default_device`` alone does not reach the autograd engine's backward calls).
"""

from __future__ import annotations

import contextlib
import functools
import sys

import torch
import torch.utils._device

from neuralde_seq import create_model, model_inputs

NUM_CLASSES = 3


def registry_batch(length: int = 24, batch: int = 3, channels: int = 2, seed: int = 0, dtype=torch.float64):
    """(times (B, T), values (B, T, C), lengths (B,)): one uneven time grid shared by the samples (as
    parametrization="time" needs), about 20 % missing values (none at the first point), lengths T, T−5, T−9."""
    g = torch.Generator().manual_seed(seed)
    times = torch.cumsum(torch.rand(1, length, generator=g, dtype=torch.float64) + 0.5, 1).repeat(batch, 1)
    values = torch.randn(batch, length, channels, generator=g, dtype=torch.float64)
    values[torch.rand(batch, length, channels, generator=g) < 0.2] = float("nan")
    values[:, 0] = torch.randn(batch, channels, generator=g, dtype=torch.float64)
    lengths = torch.tensor([length - 5 * (b % 2) - 9 * (b // 2 % 2) for b in range(batch)])
    return times.to(dtype), values.to(dtype), lengths


def build_registry_model(name: str, times, values, lengths, dtype=torch.float64, seed: int = 0, **overrides):
    """(model, inputs) for the registry model ``name`` on this batch (CPU, ``dtype``)."""
    inputs = model_inputs(name, times, values, lengths)
    torch.manual_seed(seed)
    model = create_model(name, inputs, NUM_CLASSES, **overrides).to(dtype)
    return model, inputs.to(dtype)


def training_loss(model, inputs, labels) -> torch.Tensor:
    """Cross-entropy of the model's logits (B, NUM_CLASSES) against ``labels`` (B,)."""
    return torch.nn.functional.cross_entropy(model(inputs), labels)


class HostRead(RuntimeError):
    """A tensor's value was read on the host (or a tensor built from host data) inside a step loop."""


def _refuse(what, original, allowed_on_cpu):
    def refused(self, *args, **kwargs):
        if self.device.type == "cpu" and sys._getframe(1).f_code.co_name in allowed_on_cpu:
            return original(self, *args, **kwargs)
        raise HostRead(f"{what} inside a solver's step loop: on a GPU this waits for the device (a host sync)")

    return refused


@contextlib.contextmanager
def host_reads_forbidden(allowed_on_cpu: tuple[str, ...] = ()):
    """Make host reads of tensor values (and tensors built from host data) raise `HostRead` inside, except reads of
    CPU tensors made directly by the functions named in ``allowed_on_cpu`` (code that reads a flag on the CPU only,
    where it costs no sync, and takes a path without the read on other devices)."""
    names = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")
    own = {name: torch.Tensor.__dict__[name] for name in names if name in torch.Tensor.__dict__}
    originals = {name: getattr(torch.Tensor, name) for name in names}
    tensor, as_tensor = torch.tensor, torch.as_tensor

    def checked_tensor(data, *args, **kwargs):
        if not isinstance(data, torch.Tensor):
            raise HostRead(
                "torch.tensor(host data) inside a solver's step loop: on a GPU a synchronous "
                "host-to-device copy; build it once before the loop"
            )
        return tensor(data, *args, **kwargs)

    def checked_as_tensor(data, *args, **kwargs):
        if not isinstance(data, torch.Tensor):
            raise HostRead(
                "torch.as_tensor(host data) inside a solver's step loop: on a GPU a synchronous "
                "host-to-device copy; build it once before the loop"
            )
        return as_tensor(data, *args, **kwargs)

    try:
        for name in names:
            setattr(torch.Tensor, name, _refuse(f"Tensor.{name.strip('_')}()", originals[name], allowed_on_cpu))
        torch.tensor, torch.as_tensor = checked_tensor, checked_as_tensor
        yield
    finally:
        for name in names:  # back to torch's own (inherited from its C base where torch.Tensor has none)
            if name in own:
                setattr(torch.Tensor, name, own[name])
            else:
                delattr(torch.Tensor, name)
        torch.tensor, torch.as_tensor = tensor, as_tensor


@contextlib.contextmanager
def watch_step_loops(context, record: list | None = None):
    """Enter ``context()`` around every step loop of the fixed-step and exact solvers (module docstring); the
    names of the loops entered are appended to ``record``."""
    from neuralde_seq.solvers import exact_fast_weights, fixed_step

    record = [] if record is None else record

    def watched(function, name):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            record.append(name)
            with context():
                return function(*args, **kwargs)

        return wrapper

    try:  # the fixed-step solves that compose affine step maps, where the library has them
        from neuralde_seq.solvers import affine_rk4  # noqa: F401
    except ImportError:
        pass
    # every fixed-step solve class with a step loop of its own (FixedStepSolve and its subclasses)
    solves = [fixed_step.FixedStepSolve] + [c for c in fixed_step.FixedStepSolve.__subclasses__() if "run" in vars(c)]
    segments = exact_fast_weights._CheckpointedSegments
    runs = {cls: vars(cls)["run"] for cls in solves}
    forward, backward = segments.forward, segments.backward
    try:
        for cls, run in runs.items():
            cls.run = watched(run, "fixed-step")
        segments.forward = staticmethod(watched(forward, "exact-forward"))
        segments.backward = staticmethod(watched(backward, "exact-backward"))
        yield record
    finally:
        for cls, run in runs.items():
            cls.run = run
        segments.forward, segments.backward = staticmethod(forward), staticmethod(backward)


@contextlib.contextmanager
def factories_on(device: str):
    """Tensor factories (torch.zeros, torch.tensor, torch.arange, ...) called without ``device=`` create on
    ``device``: ``torch.set_default_device`` for calls through any name, plus wrappers of the ``torch.*``
    factories themselves, which also act inside custom autograd Functions' backward (run by the autograd engine,
    outside the default-device mode)."""
    wrapped = {}
    for factory in torch.utils._device._device_constructors():
        name = factory.__name__
        if getattr(torch, name, None) is factory:
            wrapped[name] = factory

    def on_device(factory):
        @functools.wraps(factory)
        def wrapper(*args, **kwargs):
            if kwargs.get("device") is None:
                kwargs["device"] = device
            return factory(*args, **kwargs)

        return wrapper

    try:
        for name, factory in wrapped.items():
            setattr(torch, name, on_device(factory))
        torch.set_default_device(device)
        yield
    finally:
        torch.set_default_device(None)
        for name, factory in wrapped.items():
            setattr(torch, name, factory)
