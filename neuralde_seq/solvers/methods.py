"""Solver choices as objects: a method (how the equation is stepped) and a gradient method (how its gradients are
computed), each carrying its own options and checking them when made, as diffrax's ``solver=Tsit5()`` and
``adjoint=RecursiveCheckpointAdjoint()`` do.

Methods (`Method`):

- `Auto` ``(exact=Exact(), fallback=RK4())``: the default; on every solve the closed form where it applies, else
  its fallback (`Auto.resolve`);
- the fixed-step methods `RK4`, `Heun3`, `Heun2`, `Midpoint`, `Euler` ``(step_size=None, affine_steps=True,
  scan="auto", max_steps=1_000_000)`` (`neuralde_seq.solvers.fixed_step`);
- the adaptive methods `Dopri5`, `Dopri8`, `Bosh3`, `Fehlberg2`, `AdaptiveHeun` ``(rtol=1e-7, atol=1e-9,
  max_steps=1_000_000)`` (torchdiffeq's);
- `Exact` ``(chunk_size=None, compile=False, recurrence="auto", block_size=None, scan="auto")``: the closed-form
  steps of `neuralde_seq.solvers.exact_fast_weights`.

Gradient methods (`Gradient`): `Checkpoint` ``(every=None)``, `Adjoint` ``(check_every=100)``, `Backprop` ``()``.

A method knows whether it can solve a field along a control (`Method.applies`, `Method.refusal` with the reason),
what it resolves to (`Method.resolve`: only `Auto` resolves to another), and how it solves (`Method.solve`), so
no other code asks for a method by its name. The options of each field are those of `neuralde_seq.solvers.
SolverOptions`, which stays the container users pass (``SolverOptions(method=RK4(step_size=0.01))`` or, as
before, ``SolverOptions(method="rk4", step_size=0.01)``): it stores its flat fields and builds these objects from
them (`method_from_options`, `gradient_from_options`). Each option's check is one entry of `OPTION_CHECKS`,
shared by the objects and the container; a message names the option as the user spelled it (``step_size`` in
``SolverOptions(step_size=...)``, ``RK4.step_size`` in ``RK4(step_size=...)``).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import numbers
from typing import Any, ClassVar, Mapping

import torch
import torchdiffeq

from .fixed_step import TABLEAUS, FixedStepSolve
from .chunked_delta import EXACT_SCANS
from .linear_scan import SCANS
from .torchdiffeq_solves import counting_steps, solve_adaptive_checkpointed, solve_adjoint, torchdiffeq_problem
from ..user_warnings import warn_user

__all__ = ["Method", "Auto", "FixedStep", "RK4", "Heun3", "Heun2", "Midpoint", "Euler", "Adaptive", "Dopri5",
           "Dopri8", "Bosh3", "Fehlberg2", "AdaptiveHeun", "Exact", "Gradient", "Checkpoint", "Adjoint", "Backprop",
           "METHODS", "GRADIENTS", "ADAPTIVE_METHODS", "OPTION_CHECKS", "OPTION_DEFAULTS", "method_from_options", "gradient_from_options",
           "NonFiniteSolveWarning", "DEFAULT_MAX_STEPS"]

# Steps of one solve above which it is refused: a million rk4 steps of a small model already take minutes.
DEFAULT_MAX_STEPS = 1_000_000


class NonFiniteSolveWarning(RuntimeWarning):
    """A solve from a finite state along a finite control ended with NaN or infinite states; the message says
    which steps it took and what to change (usually the units of the times)."""


# ---------------------------------------------------------------------------------------------------
# one check per option (the flat SolverOptions name), shared by the objects and SolverOptions

def _integer(minimum: int, allow_none: bool = True, none_means: str = ""):
    def check(name: str, value):
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ValueError(f"{name} must be {kind}{' or None' if allow_none else ''}{none_means}, got {value!r}")
        return int(value)  # numpy integers too
    return check


def _positive(allow_none: bool):
    # never a bool (True would be a step of 1) or a string (YAML's ``small`` or "0.1")
    def check(name: str, value):
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a positive number{' or None' if allow_none else ''}, got {value!r}")
        return value
    return check


def _flag(name: str, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def _one_of(valid: tuple, listed: str | None = None):
    def check(name: str, value):
        if value not in valid:
            raise ValueError(f"{name} must be {listed or f'one of {valid}'}, got {value!r}")
        return value
    return check


# SolverOptions field -> check(name as spelled, value) -> the value (normalised: numpy integers become int).
OPTION_CHECKS = {
    "step_size": _positive(allow_none=True),
    "rtol": _positive(allow_none=False),
    "atol": _positive(allow_none=False),
    "checkpoint_every": _integer(1),
    "adjoint_check": _integer(0, allow_none=False, none_means=" (0: off)"),
    "chunk_size": _integer(1),
    "compile": _flag,
    "max_steps": _integer(1, none_means=" (no limit)"),
    "exact_scan": _one_of(EXACT_SCANS, "'auto', 'sequential' or 'chunked'"),
    "exact_block_size": _integer(1),
    "affine_steps": _flag,
    "scan": _one_of(SCANS),
}

# True while SolverOptions builds the objects from its own fields: messages then name its fields.
_FLAT_SPELLING = contextvars.ContextVar("neuralde_seq_flat_spelling", default=False)


@contextlib.contextmanager
def _flat_spelling():
    token = _FLAT_SPELLING.set(True)
    try:
        yield
    finally:
        _FLAT_SPELLING.reset(token)


@dataclasses.dataclass(frozen=True)
class _Choice:
    """A solver choice: its fields, each a `SolverOptions` option (``_OPTIONS``: own name -> SolverOptions name),
    checked when made."""

    _OPTIONS: ClassVar[dict[str, str]] = {}
    name: ClassVar[str] = ""

    def __post_init__(self):
        for field, option in self._OPTIONS.items():
            object.__setattr__(self, field, OPTION_CHECKS[option](self._label(field), getattr(self, field)))
        self._check_together()

    def _check_together(self) -> None:
        """Rules between this choice's fields (none by default)."""

    def _label(self, field: str) -> str:
        """The field as the user spelled it (a SolverOptions field, or ``Class.field``)."""
        return self._OPTIONS.get(field, field) if _FLAT_SPELLING.get() else f"{type(self).__name__}.{field}"

    def options(self) -> dict[str, Any]:
        """This choice as `SolverOptions` fields (its name included)."""
        return {option: getattr(self, field) for field, option in self._OPTIONS.items()}

    @classmethod
    def from_options(cls, options: Mapping[str, Any]):
        """The choice that the `SolverOptions` fields ``options`` spell (messages name those fields)."""
        with _flat_spelling():
            return cls(**{field: options[option] for field, option in cls._OPTIONS.items() if option in options})


# ---------------------------------------------------------------------------------------------------
# methods

@dataclasses.dataclass(frozen=True)
class Method(_Choice):
    """How `neuralde_seq.solvers.solve` steps the equation. Subclasses: `Auto`, `FixedStep`, `Adaptive`, `Exact`."""

    # Capabilities read by `solve` (instead of the method's name):
    checks_own_inputs: ClassVar[bool] = False  # checks the control's and state's dtype and device itself
    computes_own_gradients: ClassVar[bool] = False  # a hand-written backward: `Gradient` does not apply
    fixed_grid: ClassVar[bool] = False  # steps on a grid known before the solve
    warns_not_finite: ClassVar[bool] = True  # `solve` checks its states (one pass over them) and says why
    chooses_per_solve: ClassVar[bool] = False  # `resolve` picks another method from the dynamics and control
    # SolverOptions fields of other methods refused when set (groups of fields, message): others are ignored
    _REFUSED: ClassVar[tuple[tuple[tuple[str, ...], str], ...]] = ()

    def __init_subclass__(cls, **kwargs):
        # A family's members (RK4, Euler, ... of FixedStep) share its options: each member's docstring carries the
        # family's "Attributes:" section, so help(RK4) and the API pages list its arguments.
        super().__init_subclass__(**kwargs)
        doc = cls.__dict__.get("__doc__") or ""
        if "Attributes:" not in doc:
            inherited = next((base.__doc__ for base in cls.__mro__[1:] if base.__doc__ and "Attributes:" in base.__doc__),
                             None)
            if inherited is not None:
                cls.__doc__ = doc.rstrip() + "\n\n    " + inherited[inherited.index("Attributes:"):].strip() + "\n"

    def options(self) -> dict[str, Any]:
        return {"method": self.name, **super().options()}

    def resolve(self, dynamics, control) -> "Method":
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
        """Solve (see `neuralde_seq.solvers.solve`, which checks the inputs and resolves the method first):
        ``options`` the `SolverOptions` of this method (the kernels read its fields)."""
        raise NotImplementedError

    def describe_steps(self, widest: float) -> str:
        """The steps a solve took, for the message of a solve that ended non-finite (``widest``: widest knot
        interval)."""
        return f"({self.name})"

    @classmethod
    def refuse_foreign(cls, options: Mapping[str, Any]) -> None:
        """Refuse `SolverOptions` fields of other methods given with this one (``_REFUSED``)."""
        for fields, message in cls._REFUSED:
            if any(options.get(f, OPTION_DEFAULTS[f]) != OPTION_DEFAULTS[f] for f in fields):
                raise ValueError(message.format(method=cls.name))


_EXACT_ONLY = ((("chunk_size", "compile"), "chunk_size and compile are options of method='exact' (and of 'auto', "
                                           "where it takes the closed form), not of {method!r}"),
               (("exact_scan",), "exact_scan is an option of method='exact' (and of 'auto', where it takes the "
                                 "closed form), not of {method!r}"))


@dataclasses.dataclass(frozen=True)
class FixedStep(Method):
    """An explicit Runge-Kutta method on a grid through every knot (`neuralde_seq.solvers.fixed_step`).

    Attributes:
        step_size: largest step, in units of the control's parameter s; None: one step per knot interval.
        affine_steps: True (default): a one-layer fast weight field whose rule is affine in W is solved by
            composing each step's affine map (`neuralde_seq.solvers.affine_rk4`); False: the per-step loop.
        scan: how those affine step maps are composed: "sequential", "parallel" (a parallel prefix scan) or
            "auto" (parallel off the CPU).
        max_steps: the most steps one solve may take (None: no limit); a larger grid is refused before solving.
    """

    step_size: float | None = None
    affine_steps: bool = True
    scan: str = "auto"
    max_steps: int | None = DEFAULT_MAX_STEPS

    _OPTIONS: ClassVar[dict[str, str]] = {"step_size": "step_size", "affine_steps": "affine_steps", "scan": "scan",
                                          "max_steps": "max_steps"}
    _REFUSED = _EXACT_ONLY
    fixed_grid: ClassVar[bool] = True

    def _check_together(self) -> None:
        if self.scan == "parallel" and not self.affine_steps:
            raise ValueError(f"{self._label('scan')}='parallel' composes the affine step maps of "
                             f"{self._label('affine_steps')}=True; with {self._label('affine_steps')}=False the "
                             "per-step loop runs, which has no parallel form")

    @property
    def tableau(self):
        """The Butcher tableau (`neuralde_seq.solvers.fixed_step.TABLEAUS`)."""
        return TABLEAUS[self.name]

    def solve(self, dynamics, control, initial, options, at_knots):
        gradient, recording = options.gradient_choice, torch.is_grad_enabled()
        if isinstance(gradient, Adjoint) and recording:
            return solve_adjoint(dynamics, control, initial, options, at_knots)
        from .affine_rk4 import AffineFixedStepSolve, affine_steps_apply

        affine = affine_steps_apply(dynamics, options)
        if self.scan == "parallel" and not affine:
            raise ValueError("SolverOptions(scan='parallel') composes the steps of one fast weight field whose rule is "
                             "affine in W (Hebb, Oja, pre-Delta) with affine_steps=True; "
                             f"{type(dynamics).__name__} is solved by the per-step loop, which has no parallel "
                             "form: use scan='auto' or 'sequential'")
        fixed_step = AffineFixedStepSolve if affine else FixedStepSolve
        return fixed_step(dynamics, control, options, initial.dtype).solve(
            initial, at_knots, options, isinstance(gradient, Checkpoint) and recording)

    def describe_steps(self, widest: float) -> str:
        step = widest if self.step_size is None else min(widest, self.step_size)
        return (f"with {self.name} steps up to {step:.3g} wide; explicit steps much wider than the scale on "
                "which the field changes (about one unit of s for these models at initialisation) are unstable")


@dataclasses.dataclass(frozen=True)
class RK4(FixedStep):
    """Runge-Kutta of order 4 (torchdiffeq's 3/8-rule tableau): the papers' method. Options: `FixedStep`."""

    name: ClassVar[str] = "rk4"


@dataclasses.dataclass(frozen=True)
class Heun3(FixedStep):
    """Heun's method of order 3. Options: `FixedStep`."""

    name: ClassVar[str] = "heun3"


@dataclasses.dataclass(frozen=True)
class Heun2(FixedStep):
    """Heun's method of order 2 (the explicit trapezoid). Options: `FixedStep`."""

    name: ClassVar[str] = "heun2"


@dataclasses.dataclass(frozen=True)
class Midpoint(FixedStep):
    """The explicit midpoint method (order 2). Options: `FixedStep`."""

    name: ClassVar[str] = "midpoint"


@dataclasses.dataclass(frozen=True)
class Euler(FixedStep):
    """The explicit Euler method (order 1). Options: `FixedStep`."""

    name: ClassVar[str] = "euler"


@dataclasses.dataclass(frozen=True)
class Adaptive(Method):
    """An adaptive torchdiffeq method, solving in s and stepping onto every knot (``jump_t``).

    Attributes:
        rtol: relative tolerance (default 1e-7, torchdiffeq's, which the papers use).
        atol: absolute tolerance (default 1e-9).
        max_steps: the most steps (accepted and rejected) one solve may take (None: no limit); the solve stops
            with an error once past it.
    """

    rtol: float = 1e-7
    atol: float = 1e-9
    max_steps: int | None = DEFAULT_MAX_STEPS

    _OPTIONS: ClassVar[dict[str, str]] = {"rtol": "rtol", "atol": "atol", "max_steps": "max_steps"}
    _REFUSED = _EXACT_ONLY + ((("scan",), "scan is an option of the fixed-step methods' affine step maps and of "
                                          "method='exact' (and of 'auto'), not of the adaptive method {method!r}"),)

    def solve(self, dynamics, control, initial, options, at_knots):
        gradient, recording = options.gradient_choice, torch.is_grad_enabled()
        if isinstance(gradient, Adjoint) and recording:
            return solve_adjoint(dynamics, control, initial, options, at_knots)
        if isinstance(gradient, Checkpoint) and recording:
            func, t, _ = torchdiffeq_problem(dynamics, control, initial, options, at_knots=True)
            return solve_adaptive_checkpointed(func, initial, t, options, at_knots)
        func, t, kwargs = torchdiffeq_problem(dynamics, control, initial, options, at_knots)
        with counting_steps(func):
            states = torchdiffeq.odeint(func, initial, t, **kwargs)
        return states.movedim(0, 1) if at_knots else states[-1]

    def describe_steps(self, widest: float) -> str:
        return f"({self.name} with rtol={self.rtol:g}): the solution itself overflows over this span"


@dataclasses.dataclass(frozen=True)
class Dopri5(Adaptive):
    """Dormand-Prince 5(4). Options: `Adaptive`."""

    name: ClassVar[str] = "dopri5"


@dataclasses.dataclass(frozen=True)
class Dopri8(Adaptive):
    """Dormand-Prince 8(7). Options: `Adaptive`."""

    name: ClassVar[str] = "dopri8"


@dataclasses.dataclass(frozen=True)
class Bosh3(Adaptive):
    """Bogacki-Shampine 3(2). Options: `Adaptive`."""

    name: ClassVar[str] = "bosh3"


@dataclasses.dataclass(frozen=True)
class Fehlberg2(Adaptive):
    """Runge-Kutta-Fehlberg 2(1). Options: `Adaptive`."""

    name: ClassVar[str] = "fehlberg2"


@dataclasses.dataclass(frozen=True)
class AdaptiveHeun(Adaptive):
    """Heun-Euler 2(1). Options: `Adaptive`."""

    name: ClassVar[str] = "adaptive_heun"


@dataclasses.dataclass(frozen=True)
class Exact(Method):
    """The closed-form steps of one fast weight layer on inputs constant on every knot interval
    (`neuralde_seq.solvers.exact_fast_weights`); refuses other fields and controls, with the reason (`refusal`).

    Attributes:
        chunk_size: knot intervals per checkpointed segment (None: sized to batch and heads,
            `neuralde_seq.solvers.exact_fast_weights.default_chunk_size`).
        compile: run post-Delta's step through ``torch.compile`` (refused for the other rules).
        recurrence: how the affine rules' (Hebb, Oja, pre-Delta) closed-form steps run through the sequence:
            "sequential", "chunked" (the WY form of `neuralde_seq.solvers.chunked_delta`, refused for post-Delta) or
            "auto" (chunked off the CPU). ``SolverOptions.exact_scan``.
        block_size: steps per WY block of the chunked recurrence (None: 64). ``SolverOptions.exact_block_size``.
        scan: "parallel" composes a segment's affine steps by a parallel prefix scan, "sequential" one after the
            other, "auto" parallel off the CPU (refused for post-Delta).
    """

    chunk_size: int | None = None
    compile: bool = False
    recurrence: str = "auto"
    block_size: int | None = None
    scan: str = "auto"

    _OPTIONS: ClassVar[dict[str, str]] = {"chunk_size": "chunk_size", "compile": "compile",
                                          "recurrence": "exact_scan", "block_size": "exact_block_size",
                                          "scan": "scan"}
    name: ClassVar[str] = "exact"
    checks_own_inputs: ClassVar[bool] = True
    computes_own_gradients: ClassVar[bool] = True
    warns_not_finite: ClassVar[bool] = False

    def _check_together(self) -> None:
        if self.block_size is not None and self.recurrence == "sequential":
            recurrence = self._label("recurrence")
            raise ValueError(f"{self._label('block_size')} is the block length of {recurrence}='chunked' (or 'auto' "
                             f"where it takes the chunked form), but {recurrence} is 'sequential'")

    def refusal(self, dynamics, control=None) -> str | None:
        from .exact_fast_weights import exact_refusal

        return exact_refusal(dynamics, control)

    def solve(self, dynamics, control, initial, options, at_knots):
        from .exact_fast_weights import solve_exact

        # solve_exact refuses fields and controls without a closed form, with the reason
        return solve_exact(dynamics, control, initial, options, at_knots=at_knots)


@dataclasses.dataclass(frozen=True)
class Auto(Method):
    """The default: on every solve, ``exact`` where it applies (one fast weight layer whose rule has a closed-form
    step, on log-signature windows or reading x' only of a piecewise-linear control), else ``fallback``. Both solve
    the same equation; the closed form is its exact solution and several times faster.

    Attributes:
        exact: the `Exact` options used where the closed form applies.
        fallback: the `RK4` options used elsewhere (``scan`` the same as ``exact``'s: one
            ``SolverOptions.scan``).
    """

    exact: Exact = dataclasses.field(default_factory=Exact)
    fallback: RK4 = dataclasses.field(default_factory=RK4)

    name: ClassVar[str] = "auto"
    chooses_per_solve: ClassVar[bool] = True

    def _check_together(self) -> None:
        for field, kind in (("exact", Exact), ("fallback", RK4)):
            if type(getattr(self, field)) is not kind:
                raise ValueError(f"{self._label(field)} must be {kind.__name__}(...), got {getattr(self, field)!r}")
        if self.exact.scan != self.fallback.scan:
            raise ValueError(f"Auto: exact.scan={self.exact.scan!r} and fallback.scan={self.fallback.scan!r} differ; "
                             "they are one option (SolverOptions.scan): give the same")

    def options(self) -> dict[str, Any]:
        return {**self.exact.options(), **self.fallback.options(), "method": self.name}

    @classmethod
    def from_options(cls, options: Mapping[str, Any]):
        with _flat_spelling():
            return cls(exact=Exact.from_options(options), fallback=RK4.from_options(options))

    def resolve(self, dynamics, control) -> Method:
        return self.exact if self.exact.applies(dynamics, control) else self.fallback


# The methods SolverOptions takes by name, in the order its messages list them (the fixed-step ones in
# `neuralde_seq.solvers.fixed_step.FIXED_STEP_METHODS` order).
METHODS: dict[str, type[Method]] = {cls.name: cls for cls in (Auto, Euler, Midpoint, Heun2, Heun3, RK4, Dopri5,
                                                               Dopri8, Bosh3, Fehlberg2, AdaptiveHeun, Exact)}
ADAPTIVE_METHODS = tuple(name for name, cls in METHODS.items() if issubclass(cls, Adaptive))
# Every method option's default (a SolverOptions field's default), read from the methods that own it.
OPTION_DEFAULTS = {option: field.default for cls in (FixedStep, Adaptive, Exact)
                   for field in dataclasses.fields(cls) for name, option in cls._OPTIONS.items() if name == field.name}


def method_from_options(options: Mapping[str, Any]) -> Method:
    """The `Method` that `SolverOptions` fields spell (``options["method"]`` its name): an unknown name and
    options of other methods are refused here, the method's own options by the method."""
    name = options.get("method", Auto.name)
    if not isinstance(name, str) or name not in METHODS:
        methods = tuple(METHODS)
        hint = (" (multistep methods reuse rates across knots, where controls jump: use rk4 or dopri5)"
                if "adams" in str(name) else "")
        raise ValueError(f"method must be one of {methods}, got {name!r}{hint}")
    cls = METHODS[name]
    cls.refuse_foreign(options)
    return cls.from_options(options)


# ---------------------------------------------------------------------------------------------------
# gradient methods

@dataclasses.dataclass(frozen=True)
class Gradient(_Choice):
    """How gradients of a solve are computed. Subclasses: `Checkpoint`, `Adjoint`, `Backprop`. Not used by
    `Exact`, whose gradients recompute checkpointed segments by hand."""

    def options(self) -> dict[str, Any]:
        return {"gradient": self.name, **super().options()}


@dataclasses.dataclass(frozen=True)
class Checkpoint(Gradient):
    """Backpropagation through the solver's own steps with O(√N) memory: the forward pass keeps the state at the
    start of every segment, the backward pass recomputes one segment at a time (the default; exact for the
    discrete solve, about one extra forward solve).

    Attributes:
        every: steps per segment for fixed-step methods, knot intervals per segment for adaptive ones (None: ⌈√N⌉
            of N). ``SolverOptions.checkpoint_every``.
    """

    every: int | None = None

    _OPTIONS: ClassVar[dict[str, str]] = {"every": "checkpoint_every"}
    name: ClassVar[str] = "checkpoint"


@dataclasses.dataclass(frozen=True)
class Adjoint(Gradient):
    """The continuous adjoint (`torchdiffeq.odeint_adjoint`), the papers' method: memory independent of the
    steps, but wrong for contracting fields over long sequences.

    Attributes:
        check_every: re-integrate the final state backwards on every ``check_every``-th solve that records
            gradients (the first included) and warn when the initial state is not recovered; 0: never.
            ``SolverOptions.adjoint_check``.
    """

    check_every: int = 100

    _OPTIONS: ClassVar[dict[str, str]] = {"check_every": "adjoint_check"}
    name: ClassVar[str] = "adjoint"


@dataclasses.dataclass(frozen=True)
class Backprop(Gradient):
    """Plain backpropagation through the solver's operations (memory O(N) for N steps)."""

    name: ClassVar[str] = "backprop"


GRADIENTS: dict[str, type[Gradient]] = {cls.name: cls for cls in (Checkpoint, Adjoint, Backprop)}


def gradient_from_options(options: Mapping[str, Any]) -> Gradient:
    """The `Gradient` that `SolverOptions` fields spell: ``gradient``, else the one the shorthand ``adjoint``
    implies (True: adjoint, False: backprop), else checkpoint."""
    name = options.get("gradient")
    if name is None:
        adjoint = options.get("adjoint")
        name = Checkpoint.name if adjoint is None else (Adjoint.name if adjoint else Backprop.name)
    if name not in GRADIENTS:
        raise ValueError(f"gradient must be one of {tuple(GRADIENTS)}, got {name!r}")
    return GRADIENTS[name].from_options(options)


def warn_not_finite(control, method: Method) -> None:
    """Say why a solve from a finite state along a finite control ended non-finite (not raised: training's
    divergence guard handles a non-finite loss, and stops the run with its own record)."""
    knots = control.knots[: int(control.end_index.max()) + 1]
    start, end = float(knots[0]), float(knots[-1])
    widest = float((knots[1:] - knots[:-1]).max())
    warn_user(f"the solve produced non-finite states (NaN or inf) over s from {start:.6g} to {end:.6g} "
              f"{method.describe_steps(widest)}. Rescale the times to units where observation gaps are about 1, "
              "or build the control with parametrization='index' (every gap 1), or give a smaller step_size",
              NonFiniteSolveWarning)
