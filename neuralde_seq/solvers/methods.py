"""Solver choices as objects: a method (how the equation is stepped) and a gradient method (how its gradients are
computed), each carrying its own options and checking them when made, as diffrax's solver and adjoint arguments do
(``Tsit5()``, ``RecursiveCheckpointAdjoint()``).

Methods (`Method`):

- `Auto` ``(exact=Exact(), fallback=RK4())``: the default; on every solve the closed form where it applies, else
  its fallback (`Auto.resolve`);
- the fixed-step methods `RK4`, `Heun3`, `Heun2`, `Midpoint`, `Euler` ``(step_size=None, affine_steps=True,
  scan="auto", max_steps=1_000_000, compile="auto")`` (`neuralde_seq.solvers.fixed_step`);
- the adaptive methods `Dopri5`, `Dopri8`, `Bosh3`, `Fehlberg2`, `AdaptiveHeun` ``(rtol=1e-7, atol=1e-9,
  max_steps=1_000_000)`` (torchdiffeq's);
- `Exact` ``(chunk_size=None, compile=False, recurrence="auto", block_size=None, scan="auto")``: the closed-form
  steps of `neuralde_seq.solvers.exact_fast_weights`.

Gradient methods (`Gradient`): `Checkpoint` ``(every=None)``, `Adjoint` ``(check_every=100)``, `Backprop` ``()``.

Every option lives on the object it belongs to, under one name. ``max_steps`` belongs to the methods that choose how
many steps they take (a fixed-step grid from ``step_size``, an adaptive solve from its tolerances); `Exact` takes
one closed-form step per knot interval, so no limit applies to it, and `Auto` carries the limit in its fallback.

A method knows whether it can solve a field along a control (`Method.applies`, `Method.refusal` with the reason),
what it resolves to (`Method.resolve`: only `Auto` resolves to another), and how it solves (`Method.solve`, whose
kernels read the method's own fields), so no code asks for a method by its name. `Choice.to_dict` stores a choice
as ``{"type": "RK4", **fields}``; `neuralde_seq.solvers.options.parse_solver` reads it back, and every other
spelling the edges give (a method name, a flat mapping of options).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torchdiffeq

from ..input_checks import is_positive_finite
from ..user_warnings import warn_user
from .chunked_delta import EXACT_RECURRENCES
from .fixed_step import TABLEAUS, FixedStepSolve, Tableau, compile_unavailable
from .linear_scan import SCANS
from .torchdiffeq_solves import counting_steps, solve_adaptive_checkpointed, solve_adjoint, torchdiffeq_problem

__all__ = [
    "Choice",
    "Method",
    "Auto",
    "FixedStep",
    "RK4",
    "Heun3",
    "Heun2",
    "Midpoint",
    "Euler",
    "Adaptive",
    "Dopri5",
    "Dopri8",
    "Bosh3",
    "Fehlberg2",
    "AdaptiveHeun",
    "Exact",
    "Gradient",
    "Checkpoint",
    "Adjoint",
    "Backprop",
    "METHODS",
    "GRADIENTS",
    "NonFiniteSolveWarning",
    "DEFAULT_MAX_STEPS",
]

# Steps of one solve above which it is refused: a million rk4 steps of a small model already take minutes.
DEFAULT_MAX_STEPS = 1_000_000


class NonFiniteSolveWarning(RuntimeWarning):
    """A solve from a finite state along a finite control ended with NaN or infinite states; the message says
    which steps it took and what to change (usually the units of the times)."""


# ---------------------------------------------------------------------------------------------------
# the checks of the options: check(label, value) -> the value (normalised: numpy integers become int)


def _integer(minimum: int, allow_none: bool = True, none_means: str = ""):
    def check(label: str, value):
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ValueError(f"{label} must be {kind}{' or None' if allow_none else ''}{none_means}, got {value!r}")
        return int(value)

    return check


def _positive(allow_none: bool):
    # never a bool (True would be a step of 1) or a string (YAML's ``small`` or "0.1")
    def check(label: str, value):
        if value is None and allow_none:
            return None
        if not is_positive_finite(value):
            raise ValueError(f"{label} must be a positive number{' or None' if allow_none else ''}, got {value!r}")
        return value

    return check


def _flag(label: str, value):
    if not isinstance(value, bool):
        raise ValueError(f"{label} must be True or False, got {value!r}")
    return value


def _one_of(valid: tuple, listed: str | None = None):
    def check(label: str, value):
        if value not in valid:
            raise ValueError(f"{label} must be {listed or f'one of {valid}'}, got {value!r}")
        return value

    return check


_MAX_STEPS = _integer(1, none_means=" (no limit)")
COMPILE_CHOICES = (True, False, "auto")


def _compile_choice(label: str, value):
    # not _one_of: 1 == True and 0 == False would pass a membership test
    if not (isinstance(value, bool) or value == "auto" and isinstance(value, str)):
        raise ValueError(f"{label} must be True, False or 'auto', got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Choice:
    """A solver choice (a method or a gradient method): its dataclass fields are its options, each checked when the
    choice is made (``_CHECKS``: field -> check), messages naming it as ``Class.field``."""

    _CHECKS: ClassVar[dict[str, Callable[[str, Any], Any]]] = {}
    name: ClassVar[str] = ""  # the name the edges spell it by (a YAML ``method: rk4``, the CLI's ``--solver rk4``)

    def __init_subclass__(cls, name: str | None = None, **kwargs):
        # ``class RK4(FixedStep, name="rk4")``: the name the edges spell the choice by
        super().__init_subclass__(**kwargs)
        if name is not None:
            cls.name = name

    def __post_init__(self):
        for field, check in self._CHECKS.items():
            object.__setattr__(self, field, check(self._label(field), getattr(self, field)))
        self._check_together()

    def _check_together(self) -> None:
        """Rules between this choice's fields (none by default)."""

    def _label(self, field: str) -> str:
        return f"{type(self).__name__}.{field}"

    def to_dict(self) -> dict[str, Any]:
        """This choice as stored in results and checkpoints: ``{"type": "RK4", **fields}``, a field that is itself a
        choice (`Auto`'s) stored the same way; `neuralde_seq.solvers.options.parse_solver` reads it back."""
        stored: dict[str, Any] = {"type": type(self).__name__}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            stored[field.name] = value.to_dict() if isinstance(value, Choice) else value
        return stored


# ---------------------------------------------------------------------------------------------------
# methods


@dataclasses.dataclass(frozen=True)
class Method(Choice):
    """How `neuralde_seq.solvers.solve` steps the equation. Subclasses: `Auto`, `FixedStep`, `Adaptive`, `Exact`."""

    # Capabilities read by `solve` and the kernels (instead of the method's name):
    checks_own_inputs: ClassVar[bool] = False  # checks the control's and state's dtype and device itself
    computes_own_gradients: ClassVar[bool] = False  # a hand-written backward: `Gradient` does not apply
    fixed_grid: ClassVar[bool] = False  # steps on a grid known before the solve
    warns_not_finite: ClassVar[bool] = True  # `solve` checks its states (one pass over them) and says why
    chooses_per_solve: ClassVar[bool] = False  # `resolve` picks another method from the dynamics and control
    # The name torchdiffeq knows the method by (its adaptive solves and the continuous adjoint), where it has one.
    torchdiffeq_name: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs):
        # A family's members (RK4, Euler, ... of FixedStep) share its options: each member's docstring carries the
        # family's "Attributes:" section, so help(RK4) and the API pages list its arguments.
        super().__init_subclass__(**kwargs)
        doc = cls.__dict__.get("__doc__") or ""
        if "Attributes:" not in doc:
            inherited = next(
                (base.__doc__ for base in cls.__mro__[1:] if base.__doc__ and "Attributes:" in base.__doc__), None
            )
            if inherited is not None:
                cls.__doc__ = doc.rstrip() + "\n\n    " + inherited[inherited.index("Attributes:") :].strip() + "\n"

    def resolve(self, dynamics, control) -> Method:
        """The method that solves ``dynamics`` along ``control``: itself (`Auto` chooses)."""
        return self

    def refusal(self, dynamics, control=None) -> str | None:
        """Why this method cannot solve ``dynamics`` (along ``control``, if given), as a sentence naming the fix;
        None when it can. Every method but `Exact` solves every field."""
        return None

    def applies(self, dynamics, control=None) -> bool:
        """Whether this method solves ``dynamics`` (along ``control``, if given): `refusal` is None."""
        return self.refusal(dynamics, control) is None

    def check_dynamics(self, dynamics) -> None:
        """Refuse, when a model is built, dynamics this method can never solve (ValueError with the reason)."""
        reason = self.refusal(dynamics)
        if reason is not None:
            raise ValueError(reason)

    def solve(self, dynamics, control, initial: torch.Tensor, options, at_knots: bool) -> torch.Tensor:
        """Solve (see `neuralde_seq.solvers.solve`, which checks the inputs and resolves the method first): the
        kernels read this method's fields; ``options`` is the `SolverOptions` in force, for its gradient method
        (and the count of its adjoint solves, which `Adjoint.check_every` reads)."""
        raise NotImplementedError

    def describe_steps(self, widest: float) -> str:
        """The steps a solve took, for the message of a solve that ended non-finite (``widest``: widest knot
        interval)."""
        return f"({self.name})"

    def _solve_adjoint(self, dynamics, control, initial, options, at_knots):
        check = options._count_adjoint_solve()
        return solve_adjoint(dynamics, control, initial, self, at_knots, check=check)


@dataclasses.dataclass(frozen=True)
class FixedStep(Method):
    """An explicit Runge-Kutta method on a grid through every knot (`neuralde_seq.solvers.fixed_step`).

    Attributes:
        step_size: largest step, in units of the control's parameter s; None (default): one step per knot interval.
        affine_steps: True (default): a one-layer fast weight field whose rule is affine in W (Hebb, Oja,
            pre-Delta; with or without a forget gate) is solved by composing each step's affine map M ↦ M P + Q,
            the step maps of all steps batched and only the composition sequential
            (`neuralde_seq.solvers.affine_rk4`; the same Runge-Kutta states to rounding, several times faster);
            False: the per-step loop (`neuralde_seq.solvers.fixed_step`), the reference. Other dynamics always
            take the per-step loop.
        scan: how those affine step maps are composed through a segment: "sequential" (one after the other, the
            composition's adjoint by hand), "parallel" (all prefix compositions of a segment by
            `neuralde_seq.solvers.linear_scan.parallel_scan`, in ⌈log₂ S⌉ rounds of batched products, with
            longer checkpointed segments when `Checkpoint.every` is None) or "auto" (default: parallel when the
            state is on a GPU or any non-CPU device, sequential on the CPU, where the loop is faster). The same
            states to rounding. "parallel" is refused where the per-step loop runs (``affine_steps=False``, or
            dynamics that are not one affine fast weight field).
        max_steps: the most steps one solve may take (default `DEFAULT_MAX_STEPS`, 1,000,000; None: no limit). A
            grid with more steps is refused before solving, with the number of steps, the span of s and the step
            size (e.g. hourly timestamps in seconds with step_size=0.01: 360,000 steps per observation interval).
        compile: run each step of the per-step loop (all its stages: the field's rates and the update) through
            ``torch.compile``, built once and reused for every step, segment and the backward pass's recomputation
            (`neuralde_seq.solvers.fixed_step.compiled_step`): on CUDA as a CUDA graph replayed every step (mode
            "reduce-overhead"), on a CPU as fused C++ kernels. The same states to rounding (the compiler may
            reorder floating-point operations). "auto" (default): on when the state is on a CUDA device (and
            torch.compile can run there), off on a CPU, where small fields gain little; True: on any device (on a
            CPU it needs a C compiler; the first call of each shape compiles, which takes tens of seconds); False:
            the eager loop, the reference. Where the per-step loop does not run (a fast weight field whose affine
            steps are composed, ``affine_steps=True``; the continuous adjoint's torchdiffeq solve) "auto" means off
            and True is refused. `Exact`'s ``compile`` is the same choice for its closed-form step.
    """

    step_size: float | None = None
    affine_steps: bool = True
    scan: str = "auto"
    max_steps: int | None = DEFAULT_MAX_STEPS
    compile: bool | str = "auto"

    _CHECKS: ClassVar[dict] = {
        "step_size": _positive(allow_none=True),
        "affine_steps": _flag,
        "scan": _one_of(SCANS),
        "max_steps": _MAX_STEPS,
        "compile": _compile_choice,
    }
    fixed_grid: ClassVar[bool] = True
    tableau: ClassVar[Tableau]  # the Butcher tableau (`neuralde_seq.solvers.fixed_step.TABLEAUS`)

    def __init_subclass__(cls, name: str | None = None, **kwargs):
        # ``class RK4(FixedStep, name="rk4")``: torchdiffeq's tableau and name of the method are ours too
        super().__init_subclass__(name=name, **kwargs)
        if name is not None:
            cls.tableau, cls.torchdiffeq_name = TABLEAUS[name], name

    def _check_together(self) -> None:
        if self.compile is True and self.scan == "parallel":
            raise ValueError(
                f"{self._label('compile')}=True compiles the steps of the per-step loop, but "
                f"{self._label('scan')}='parallel' composes affine step maps instead of stepping: use "
                "scan='auto' or compile='auto'"
            )
        if self.scan == "parallel" and not self.affine_steps:
            raise ValueError(
                f"{self._label('scan')}='parallel' composes the affine step maps of "
                f"{self._label('affine_steps')}=True; with {self._label('affine_steps')}=False the "
                "per-step loop runs, which has no parallel form"
            )

    def refusal(self, dynamics, control=None) -> str | None:
        """Why this method cannot solve ``dynamics``: ``compile=True`` where the per-step loop does not run (a fast
        weight field whose affine steps are composed); None otherwise."""
        from .affine_rk4 import affine_steps_apply

        if self.compile is True and affine_steps_apply(dynamics, self):
            return (
                f"{self._label('compile')}=True compiles the steps of the per-step loop, but "
                f"{type(dynamics).__name__} is one fast weight field whose rule is affine in W, solved by "
                f"composing its affine step maps ({self._label('affine_steps')}=True), which are not compiled: "
                f"use compile='auto' or False, or affine_steps=False to compile the per-step loop"
            )
        return None

    def compiles(self, device: torch.device | str) -> bool:
        """Whether the per-step loop runs its steps through ``torch.compile`` for a state on ``device``: ``compile``
        True (refused with a RuntimeError where torch.compile cannot run), or "auto" on a CUDA device where it
        can."""
        if self.compile is False or self.compile == "auto" and torch.device(device).type != "cuda":
            return False  # (before asking whether torch.compile can run: importing dynamo takes seconds)
        reason = compile_unavailable()
        if self.compile is True and reason is not None:
            raise RuntimeError(
                f"{self._label('compile')}=True needs torch.compile, which cannot run here: {reason}; "
                "leave compile='auto' or False"
            )
        return reason is None

    def solve(self, dynamics, control, initial, options, at_knots):
        gradient, recording = options.gradient, torch.is_grad_enabled()
        if isinstance(gradient, Adjoint) and recording:
            return self._solve_adjoint(dynamics, control, initial, options, at_knots)
        from .affine_rk4 import AffineFixedStepSolve, affine_steps_apply

        self.check_dynamics(dynamics)  # compile=True on the composed affine steps
        affine = affine_steps_apply(dynamics, self)
        if self.scan == "parallel" and not affine:
            raise ValueError(
                f"{type(self).__name__}(scan='parallel') composes the steps of one fast weight field "
                "whose rule is affine in W (Hebb, Oja, pre-Delta) with affine_steps=True; "
                f"{type(dynamics).__name__} is solved by the per-step loop, which has no parallel "
                "form: use scan='auto' or 'sequential'"
            )
        every = gradient.every if isinstance(gradient, Checkpoint) else None
        if affine:
            solver = AffineFixedStepSolve(dynamics, control, self, initial.dtype)
        else:
            solver = FixedStepSolve(dynamics, control, self, initial.dtype, compiled=self.compiles(initial.device))
        return solver.solve(initial, at_knots, every, isinstance(gradient, Checkpoint) and recording)

    def describe_steps(self, widest: float) -> str:
        step = widest if self.step_size is None else min(widest, self.step_size)
        return (
            f"with {self.name} steps up to {step:.3g} wide; explicit steps much wider than the scale on "
            "which the field changes (about one unit of s for these models at initialisation) are unstable"
        )


@dataclasses.dataclass(frozen=True)
class RK4(FixedStep, name="rk4"):
    """Runge-Kutta of order 4 (torchdiffeq's 3/8-rule tableau): the papers' method. Options: `FixedStep`."""


@dataclasses.dataclass(frozen=True)
class Heun3(FixedStep, name="heun3"):
    """Heun's method of order 3. Options: `FixedStep`."""


@dataclasses.dataclass(frozen=True)
class Heun2(FixedStep, name="heun2"):
    """Heun's method of order 2 (the explicit trapezoid). Options: `FixedStep`."""


@dataclasses.dataclass(frozen=True)
class Midpoint(FixedStep, name="midpoint"):
    """The explicit midpoint method (order 2). Options: `FixedStep`."""


@dataclasses.dataclass(frozen=True)
class Euler(FixedStep, name="euler"):
    """The explicit Euler method (order 1). Options: `FixedStep`."""


@dataclasses.dataclass(frozen=True)
class Adaptive(Method):
    """An adaptive torchdiffeq method, solving in s and stepping onto every knot (``jump_t``: the rate of a
    piecewise-constant control jumps there, a sample's rate stops at its final knot, and the sensitivity to each
    polynomial piece of an interpolated control starts and ends there).

    Attributes:
        rtol: relative tolerance (default 1e-7, torchdiffeq's, which the papers use).
        atol: absolute tolerance (default 1e-9).
        max_steps: the most steps (accepted and rejected, counted from the field's evaluations over the forward
            solve) one solve may take (default `DEFAULT_MAX_STEPS`; None: no limit); the solve stops with an error
            once past it.
    """

    rtol: float = 1e-7
    atol: float = 1e-9
    max_steps: int | None = DEFAULT_MAX_STEPS

    _CHECKS: ClassVar[dict] = {
        "rtol": _positive(allow_none=False),
        "atol": _positive(allow_none=False),
        "max_steps": _MAX_STEPS,
    }

    def __init_subclass__(cls, name: str | None = None, **kwargs):
        # ``class Dopri5(Adaptive, name="dopri5")``: torchdiffeq's name of the method is ours too
        super().__init_subclass__(name=name, **kwargs)
        if name is not None:
            cls.torchdiffeq_name = name

    def solve(self, dynamics, control, initial, options, at_knots):
        gradient, recording = options.gradient, torch.is_grad_enabled()
        if isinstance(gradient, Adjoint) and recording:
            return self._solve_adjoint(dynamics, control, initial, options, at_knots)
        if isinstance(gradient, Checkpoint) and recording:
            func, t, _ = torchdiffeq_problem(dynamics, control, initial, self, at_knots=True)
            return solve_adaptive_checkpointed(func, initial, t, self, gradient.every, at_knots)
        func, t, kwargs = torchdiffeq_problem(dynamics, control, initial, self, at_knots)
        with counting_steps(func):
            states = torchdiffeq.odeint(func, initial, t, **kwargs)
        return states.movedim(0, 1) if at_knots else states[-1]

    def describe_steps(self, widest: float) -> str:
        return f"({self.name} with rtol={self.rtol:g}): the solution itself overflows over this span"


@dataclasses.dataclass(frozen=True)
class Dopri5(Adaptive, name="dopri5"):
    """Dormand-Prince 5(4). Options: `Adaptive`."""


@dataclasses.dataclass(frozen=True)
class Dopri8(Adaptive, name="dopri8"):
    """Dormand-Prince 8(7). Options: `Adaptive`."""


@dataclasses.dataclass(frozen=True)
class Bosh3(Adaptive, name="bosh3"):
    """Bogacki-Shampine 3(2). Options: `Adaptive`."""


@dataclasses.dataclass(frozen=True)
class Fehlberg2(Adaptive, name="fehlberg2"):
    """Runge-Kutta-Fehlberg 2(1). Options: `Adaptive`."""


@dataclasses.dataclass(frozen=True)
class AdaptiveHeun(Adaptive, name="adaptive_heun"):
    """Heun-Euler 2(1). Options: `Adaptive`."""


@dataclasses.dataclass(frozen=True)
class Exact(Method, name="exact"):
    """The closed-form steps of one fast weight layer on inputs constant on every knot interval (log-signature
    windows; piecewise-linear controls read through x' only): docs/equations.md#closed-forms-on-constant-inputs,
    `neuralde_seq.solvers.exact_fast_weights`. Refuses other fields and controls, with the reason (`refusal`). Its
    gradients recompute checkpointed segments with a hand-written backward, so the gradient method does not apply.

    Attributes:
        chunk_size: knot intervals per checkpointed segment (None: sized to batch and heads by
            `neuralde_seq.solvers.exact_fast_weights.default_chunk_size`, e.g. 64 windows for every rule at batch
            32, 16 heads of width 8). Memory of the backward pass grows with it, time hardly.
        compile: run post-Delta's exact step through ``torch.compile`` (refused for the other rules where the
            closed form is taken; needs a C compiler on CPU; the first call compiles, which takes tens of seconds).
        recurrence: how the affine rules' (Hebb, Oja, pre-Delta) closed-form steps run through the sequence:
            "sequential" (one step after the other with a hand-written adjoint, the fastest on a CPU,
            benchmarks/chunked_delta.py), "chunked" (the WY / UT form of flash-linear-attention's chunked delta
            rule, `neuralde_seq.solvers.chunked_delta`: blocks of steps as matmuls, only the block boundaries one
            after the other; 2-4 times faster on an H200, docs/performance.md) or "auto" (default): chunked when
            the state is on a GPU (or any non-CPU device), sequential on the CPU and for post-Delta. The same
            states to rounding. "chunked" is refused for post-Delta, whose step is not affine in W.
        block_size: steps per WY block of the chunked recurrence (None: 64,
            `neuralde_seq.solvers.chunked_delta.DEFAULT_BLOCK_SIZE`).
        scan: "parallel" composes a segment's affine steps (with the chunked recurrence, its WY blocks) by a
            parallel prefix scan, in longer default segments
            (`neuralde_seq.solvers.linear_scan.parallel_segment_steps`); "sequential" one after the other; "auto"
            (default) parallel off the CPU. Refused for post-Delta.
    """

    chunk_size: int | None = None
    compile: bool = False
    recurrence: str = "auto"
    block_size: int | None = None
    scan: str = "auto"

    _CHECKS: ClassVar[dict] = {
        "chunk_size": _integer(1),
        "compile": _flag,
        "recurrence": _one_of(EXACT_RECURRENCES, "'auto', 'sequential' or 'chunked'"),
        "block_size": _integer(1),
        "scan": _one_of(SCANS),
    }
    checks_own_inputs: ClassVar[bool] = True
    computes_own_gradients: ClassVar[bool] = True
    warns_not_finite: ClassVar[bool] = False

    def _check_together(self) -> None:
        if self.block_size is not None and self.recurrence == "sequential":
            recurrence = self._label("recurrence")
            raise ValueError(
                f"{self._label('block_size')} is the block length of {recurrence}='chunked' (or 'auto' "
                f"where it takes the chunked form), but {recurrence} is 'sequential'"
            )

    def refusal(self, dynamics, control=None) -> str | None:
        from .exact_fast_weights import exact_refusal

        return exact_refusal(dynamics, control)

    def solve(self, dynamics, control, initial, options, at_knots):
        from .exact_fast_weights import solve_exact

        # solve_exact refuses fields and controls without a closed form, with the reason
        return solve_exact(dynamics, control, initial, self, at_knots=at_knots)


@dataclasses.dataclass(frozen=True)
class Auto(Method, name="auto"):
    """The default: on every solve, ``exact`` where it applies (one fast weight layer whose rule has a closed-form
    step, on log-signature windows or reading x' only of a piecewise-linear control), else ``fallback``. Both solve
    the same equation; the closed form is its exact solution (no step error) and several times faster.

    Attributes:
        exact: the `Exact` method used where the closed form applies (default ``Exact()``).
        fallback: the method used elsewhere (NCDEs, GRU-ODEs, cubic controls read through X, deeper fast weight
            networks, the ODEs between observations): a fixed-step or adaptive method (default ``RK4()``, the
            papers' method: one step per knot interval).
    """

    exact: Exact = dataclasses.field(default_factory=Exact)
    fallback: Method = dataclasses.field(default_factory=RK4)

    chooses_per_solve: ClassVar[bool] = True

    def _check_together(self) -> None:
        if type(self.exact) is not Exact:
            raise ValueError(f"{self._label('exact')} must be Exact(...), got {self.exact!r}")
        if not isinstance(self.fallback, (FixedStep, Adaptive)):
            raise ValueError(
                f"{self._label('fallback')} must be a fixed-step or adaptive method (e.g. RK4(...), "
                f"Dopri5(...)), got {self.fallback!r}"
            )

    def resolve(self, dynamics, control) -> Method:
        return self.exact if self.exact.applies(dynamics, control) else self.fallback

    def solve(self, dynamics, control, initial, options, at_knots):
        return self.resolve(dynamics, control).solve(dynamics, control, initial, options, at_knots)


# The methods by the name the edges spell them by, in the order messages list them.
METHODS: dict[str, type[Method]] = {
    cls.name: cls
    for cls in (Auto, Euler, Midpoint, Heun2, Heun3, RK4, Dopri5, Dopri8, Bosh3, Fehlberg2, AdaptiveHeun, Exact)
}


# ---------------------------------------------------------------------------------------------------
# gradient methods


@dataclasses.dataclass(frozen=True)
class Gradient(Choice):
    """How gradients of a solve are computed. Subclasses: `Checkpoint`, `Adjoint`, `Backprop`. Not used by
    `Exact`, whose gradients recompute checkpointed segments by hand."""


@dataclasses.dataclass(frozen=True)
class Checkpoint(Gradient, name="checkpoint"):
    """Backpropagation through the solver's own steps with O(√N) memory for N steps (the default; exact for the
    discrete solve, equal to `Backprop` to rounding, about one extra forward solve). The forward pass keeps only the
    state at the start of every segment, the backward pass recomputes one segment at a time and backpropagates
    through it. A fixed-step segment is one autograd node (`neuralde_seq.solvers.fixed_step.CheckpointedSegment`)
    whose gradient reaches its first state, the dynamics' parameters and the control's tensors; an adaptive solve
    carries its whole step-size state across segment boundaries, so a recomputed segment retakes exactly the
    accepted and rejected steps of the forward pass.

    Attributes:
        every: steps per segment for fixed-step methods, knot intervals per segment for adaptive ones (None: ⌈√N⌉
            of N, which minimises memory).
    """

    every: int | None = None

    _CHECKS: ClassVar[dict] = {"every": _integer(1)}


@dataclasses.dataclass(frozen=True)
class Adjoint(Gradient, name="adjoint"):
    """The continuous adjoint (`torchdiffeq.odeint_adjoint`), the papers' method: memory independent of the number
    of steps, but the backward pass reconstructs the state by integrating the ODE backwards in time, which is
    unstable for contracting fields (learning rules that forget, GRUs, NCDEs): past a few hundred steps its
    gradients can be wrong by orders of magnitude or NaN. Its parameters are the dynamics' parameters and any control
    tensors that require gradients.

    Attributes:
        check_every: re-integrate the final state backwards without gradients on every ``check_every``-th solve that
            records gradients (the first included) and warn (`AdjointReconstructionWarning`) with the measured
            relative error of the reconstructed initial state when it exceeds `ADJOINT_RECONSTRUCTION_TOLERANCE`
            (one extra solve each time); 0: never.
    """

    check_every: int = 100

    _CHECKS: ClassVar[dict] = {"check_every": _integer(0, allow_none=False, none_means=" (0: off)")}


@dataclasses.dataclass(frozen=True)
class Backprop(Gradient, name="backprop"):
    """Plain backpropagation through the solver's operations (memory O(N) for N steps)."""


GRADIENTS: dict[str, type[Gradient]] = {cls.name: cls for cls in (Checkpoint, Adjoint, Backprop)}


def warn_not_finite(control, method: Method) -> None:
    """Say why a solve from a finite state along a finite control ended non-finite (not raised: training's
    divergence guard handles a non-finite loss, and stops the run with its own record)."""
    knots = control.knots[: int(control.end_index.max()) + 1]
    start, end = float(knots[0]), float(knots[-1])
    widest = float((knots[1:] - knots[:-1]).max())
    warn_user(
        f"the solve produced non-finite states (NaN or inf) over s from {start:.6g} to {end:.6g} "
        f"{method.describe_steps(widest)}. Rescale the times to units where observation gaps are about 1, "
        "or build the control with parametrization='index' (every gap 1), or give a smaller step_size",
        NonFiniteSolveWarning,
    )
