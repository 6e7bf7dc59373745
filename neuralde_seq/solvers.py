"""How a controlled differential equation is solved, and how its gradients are computed.

The equation is ``dy/ds = f(y, X(s), X'(s))`` for s from the control's first knot to each sample's own
final knot, where ``f`` is a *dynamics* module (see `Dynamics`) and X a
`Control`. After its final knot a sample's state is frozen (its rate is
masked to zero), so that every sample in a padded batch gets exactly the answer it gets alone.
`solve` is the one solve entry of the library: the CT-FWPs in every form, NCDE/NRDE and GRU-ODE call it
with their control, and ODE-RNN, ODE-RFWP and the latent models call it through `evolve_over_gaps`.

**Fixed-step methods** (`FIXED_STEP_METHODS`: ``rk4``, ``heun3``, ``heun2``, ``midpoint``, ``euler``)
step through every knot of the control, each knot interval cut into ceil(gap / step_size) equal steps (one
step when ``step_size`` is None); the loop, with the control evaluated for blocks of steps at once, is in
`neuralde_seq.fixed_step`. One fast weight field whose rule is affine in W (Hebb, Oja, pre-Delta) takes the same
steps as one affine map each, composed (`neuralde_seq.ops.affine_rk4`; ``SolverOptions(affine_steps=False)``: the
per-step loop).

**Adaptive methods** (`ADAPTIVE_METHODS`: ``dopri5``, ...) are torchdiffeq's, solving in s with
``rtol``/``atol`` and stepping onto every knot (``jump_t``): the rate of a piecewise-constant control jumps
there, a sample's rate stops at its final knot, and the sensitivity to each polynomial piece of an
interpolated control starts and ends there.

Solves through torchdiffeq (adaptive methods, and the adjoint of any method) are in
`neuralde_seq.torchdiffeq_solves`.

**Gradients** (``SolverOptions.gradient``):

- ``"checkpoint"`` (default): backpropagation through the solver's own steps, exact for the discrete solve (equal
  to ``"backprop"`` to rounding), with memory O(√N) states for N steps: the forward pass keeps only the state at the
  start of every segment of ``checkpoint_every`` steps (default ⌈√N⌉), and the backward pass recomputes one segment
  at a time and backpropagates through it. A fixed-step segment is one autograd node
  (`CheckpointedSegment`) whose gradient reaches its first state, the dynamics'
  parameters and the control's tensors (as ``adjoint_params`` for the adjoint: other tensors the dynamics captures
  are treated as constants), so nothing of a segment stays alive between the passes. An adaptive solve (through
  ``torch.utils.checkpoint``, non-reentrant) carries its whole step-size state (state, last rate, step size,
  interpolant) across segment boundaries, and a recomputed segment retakes exactly the accepted and rejected steps
  of the forward pass (the same function of the same inputs), so the gradient is the one of the steps actually
  taken, step-size control included, as for ``"backprop"``. Time: about one extra forward solve.
- ``"adjoint"``: the continuous adjoint (`torchdiffeq.odeint_adjoint`), the papers' method: memory
  independent of the number of steps, but the backward pass reconstructs the state by integrating the ODE
  backwards in time, which is unstable for contracting fields (learning rules that forget, GRUs, NCDEs): past
  a few hundred steps its gradients can be wrong by orders of magnitude or NaN. ``adjoint_params`` lists
  the dynamics' parameters and any control tensors that require gradients (without that list, gradients
  with respect to the control would silently be missing). Every ``adjoint_check``-th solve (the first one
  included) re-integrates the final state backwards without gradients and warns
  (`AdjointReconstructionWarning`) with the measured relative error of the reconstructed initial
  state when it exceeds `ADJOINT_RECONSTRUCTION_TOLERANCE`.
- ``"backprop"``: plain backpropagation through the solver's operations (memory O(N)).

``adjoint=True`` / ``adjoint=False`` remain shorthands for ``gradient="adjoint"`` / ``"backprop"``.

``method="exact"`` solves fast weight fields driven by inputs that are constant on every knot interval
(log-signature windows; piecewise-linear controls read through their derivative only) with the closed-form steps of
docs/equations.md#closed-forms-on-constant-inputs: see `neuralde_seq.ops.exact_fast_weights` (its gradients recompute checkpointed segments
with a hand-written backward). It is selected here, so every model that calls `solve` takes it through its
``SolverOptions``.

**The default, ``method="auto"``,** is resolved on every solve by `resolve_method` (the one place that decides,
through `neuralde_seq.ops.exact_fast_weights.exact_applies`): "exact" where the dynamics and the control admit
the closed form (one fast weight layer whose rule has a closed-form step, on log-signature windows, or on a
piecewise-linear control read through x' only), "rk4" everywhere else (NCDEs, GRU-ODEs, cubic controls read
through X, deeper fast weight networks, the ODEs between observations of `evolve_over_gaps`). Both solve the same
equation, so the model is the same; the closed form is its exact solution (no step error) and several times
faster. ``method="rk4"`` forces rk4 steps on every model; ``method="exact"`` forces the closed form and refuses
what it cannot solve. `SolverOptions.last_method` says what the latest solve used.

**Choices as objects.** Every method and gradient method is an object of `neuralde_seq.solver_choices` that
carries and checks its own options and knows what it applies to (``RK4(step_size=0.01)``, ``Dopri5(rtol=1e-5)``,
``Exact(chunk_size=32)``, ``Auto()``; ``Checkpoint(every=50)``, ``Adjoint(check_every=100)``, ``Backprop()``):
``SolverOptions(method=RK4(step_size=0.01), gradient=Checkpoint())`` is the same options as
``SolverOptions(method="rk4", step_size=0.01, gradient="checkpoint")``, and `parse_solver` reads every spelling
the edges give (a method name, a dict of the fields, an object).

**Limits.** ``SolverOptions.max_steps`` (default 1,000,000) bounds the steps of one solve: a fixed-step grid is
refused before solving, an adaptive solve stops when it has taken that many steps. `solve` refuses a
control or initial state whose dtype or device differs from the dynamics' parameters, and warns
(`NonFiniteSolveWarning`) when a solve from finite inputs ends non-finite, which with finite inputs
(`magnitude_limit`) means steps too wide for the field, typically times in
large units with ``parametrization="time"``.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Protocol

import torch

from .controls import Control
from .fixed_step import FIXED_STEP_METHODS
from .input_checks import UnknownOptionError, check_matches_module, unknown_name_message
from .solver_choices import (ADAPTIVE_METHODS, DEFAULT_MAX_STEPS, GRADIENTS, OPTION_CHECKS, OPTION_DEFAULTS, Adaptive, AdaptiveHeun,
                             Adjoint, Auto, Backprop, Bosh3, Checkpoint, Dopri5, Dopri8, Euler, Exact, Fehlberg2,
                             FixedStep, Gradient, Heun2, Heun3, Method, Midpoint, NonFiniteSolveWarning, RK4,
                             gradient_from_options, method_from_options, warn_not_finite)
from .torchdiffeq_solves import ADJOINT_RECONSTRUCTION_TOLERANCE, AdjointReconstructionWarning

__all__ = ["SolverOptions", "parse_solver", "solver_repr_fields", "Dynamics", "solve", "evolve_over_gaps", "AdjointReconstructionWarning",
           "FIXED_STEP_METHODS", "ADAPTIVE_METHODS", "EXACT_METHOD", "AUTO_METHOD", "AUTO_FALLBACK",
           "GRADIENT_METHODS", "resolve_method", "check_method",
           "ADJOINT_RECONSTRUCTION_TOLERANCE", "DEFAULT_MAX_STEPS", "NonFiniteSolveWarning",
           # the choices as objects (`neuralde_seq.solver_choices`)
           "Method", "Auto", "FixedStep", "RK4", "Heun3", "Heun2", "Midpoint", "Euler", "Adaptive", "Dopri5",
           "Dopri8", "Bosh3", "Fehlberg2", "AdaptiveHeun", "Exact", "Gradient", "Checkpoint", "Adjoint", "Backprop"]


# The names of the methods' own constants, kept for code that reads them (the objects decide, not the names).
EXACT_METHOD = Exact.name
# The default: the closed form where it applies, else AUTO_FALLBACK (`Auto.resolve`).
AUTO_METHOD = Auto.name
AUTO_FALLBACK = RK4.name
GRADIENT_METHODS = tuple(GRADIENTS)


@dataclasses.dataclass
class SolverOptions:
    """Options of `solve`: what method, which steps, and how gradients are computed.

    The method and the gradient method may be given as objects that carry their own options
    (`neuralde_seq.solver_choices`): ``SolverOptions(method=RK4(step_size=0.01), gradient=Checkpoint(every=50))``
    is ``SolverOptions(method="rk4", step_size=0.01, gradient="checkpoint", checkpoint_every=50)``: the fields
    below store either spelling (equal options, the same repr), and `method_choice` / `gradient_choice` give them
    as objects. `parse_solver` reads every other spelling (a method name, a dict of these fields).

    Attributes:
        method: "auto" (default), a fixed-step method (`FIXED_STEP_METHODS`), an adaptive torchdiffeq method
            (`ADAPTIVE_METHODS`), or "exact" (closed-form steps for inputs constant on every knot
            interval, `neuralde_seq.ops.exact_fast_weights`; refuses dynamics or controls without a closed
            form). "auto" is resolved on every solve (`resolve_method`): "exact" where the dynamics and control
            admit the closed form (one fast weight layer on log-signature windows, or reading x' only of a
            piecewise-linear control), else "rk4" (the papers' method). The options below that belong to rk4
            (``step_size``, ``max_steps``, ``gradient``/``adjoint``, ``checkpoint_every``, ``adjoint_check``)
            apply to "auto" where it resolves to rk4, and those of "exact" (``chunk_size``, ``compile``) where
            it resolves to exact. Give method="rk4" to force rk4 steps on every model.
        step_size: largest step of a fixed-step method, in units of the control's parameter s; None
            takes one step per knot interval. With "auto": the step of its rk4 solves.
        max_steps: the most steps one solve may take (default `DEFAULT_MAX_STEPS`, 1,000,000; None: no
            limit). A fixed-step solve whose grid has more steps is refused before it starts, with the number
            of steps, the span of s and the step size (e.g. hourly timestamps in seconds with step_size=0.01:
            360,000 steps per observation interval); an adaptive solve (accepted and rejected steps, counted
            from its field evaluations over the forward solve) stops with an error once past it. Not used by
            "exact", which takes one closed-form step per knot interval.
        rtol: relative tolerance of adaptive methods (default 1e-7, torchdiffeq's, which the papers use).
        atol: absolute tolerance of adaptive methods (default 1e-9, torchdiffeq's, which the papers use).
        gradient: how gradients are computed (module docstring): "checkpoint" (the default when neither
            ``gradient`` nor ``adjoint`` is given: exact for the discrete solve, O(√N) memory, about one extra
            forward solve), "adjoint" (the continuous adjoint of the papers: constant memory, but wrong for
            contracting fields over long sequences) or "backprop" (plain backpropagation, O(N) memory).
            Not used by "exact", whose gradients recompute checkpointed segments by hand.
        adjoint: shorthand kept from earlier versions: True means ``gradient="adjoint"``, False means
            ``gradient="backprop"``. Giving both with different meanings is an error.
        checkpoint_every: ``gradient="checkpoint"``: steps per checkpointed segment for fixed-step methods,
            knot intervals per segment for adaptive ones (None: ⌈√N⌉ of N, which minimises memory).
        adjoint_check: ``gradient="adjoint"``: check the backward reconstruction of the state on every
            ``adjoint_check``-th solve that records gradients, the first included (module docstring; one extra
            solve without gradients each time); 0 turns the check off.
        chunk_size: "exact" (or "auto" where it resolves to exact) only: knot intervals per checkpointed segment
            (None: sized by `neuralde_seq.ops.exact_fast_weights.default_chunk_size`, e.g. 64 windows for every
            rule at batch 32, 16 heads of width 8). Memory of the backward pass grows with it, time hardly.
        compile: "exact" (or "auto" where it resolves to exact) only: run post-Delta's exact step through
            ``torch.compile`` (refused for the other rules where the closed form is taken; needs a C compiler on
            CPU; the first call compiles, which takes tens of seconds).
        exact_scan: "exact" (or "auto" where it resolves to exact) only: how the affine rules' closed-form steps
            (Hebb, Oja, pre-Delta) run through the sequence: "sequential" (one step after the other with a
            hand-written adjoint, the fastest on a CPU, benchmarks/chunked_delta.py), "chunked" (the WY / UT form
            of flash-linear-attention's chunked delta rule, `neuralde_seq.ops.chunked_delta`: blocks of steps as
            matmuls, only the block boundaries one after the other; 2-4 times faster on an H200,
            docs/performance.md) or "auto" (default): chunked when the state is on a GPU (or any non-CPU device),
            sequential on the CPU and for post-Delta. The same states to rounding. "chunked" is refused for
            post-Delta, whose step is not affine in W.
        exact_block_size: ``exact_scan`` "chunked" (or "auto" where it takes the chunked form) only: steps per WY
            block (None: `neuralde_seq.ops.chunked_delta.DEFAULT_BLOCK_SIZE`, 64).
        affine_steps: fixed-step methods (and "auto" where it resolves to rk4) only. True (default): a one-layer
            fast weight field whose rule is affine in W (Hebb, Oja, pre-Delta; with or without a forget gate)
            is solved by composing each step's affine map M ↦ M P + Q, the step maps of all steps batched and
            only the composition sequential (`neuralde_seq.ops.affine_rk4`; the same Runge-Kutta states to
            rounding, several times faster). False: the per-step loop (`neuralde_seq.fixed_step`), the
            reference. Other dynamics always take the per-step loop.
        scan: how the fast weight recurrences that are compositions of affine maps run through the steps of a
            segment: the affine rk4 path (``affine_steps``) and the exact path's affine rules (Hebb, Oja,
            pre-Delta; with ``exact_scan="chunked"``, its WY blocks). "sequential": one map after the other (the
            composition's adjoint by hand on the affine rk4 path and the exact path's rank-one steps);
            "parallel": all prefix compositions of a segment by `neuralde_seq.ops.linear_scan.parallel_scan`,
            in ⌈log₂ S⌉ rounds of batched products instead of S steps (gradients by autograd through the
            rounds, also ⌈log₂ S⌉ deep), with longer checkpointed segments when ``checkpoint_every`` /
            ``chunk_size`` is None (`neuralde_seq.ops.linear_scan.parallel_segment_steps`: the scan's graph
            within 2^26 numbers); "auto" (default): parallel when the state is on a GPU (or any non-CPU
            device), sequential on the CPU, where the sequential loop is faster. The same states to rounding.
            "parallel" is refused where no such recurrence is solved (post-Delta's exact step, the per-step
            loop: ``affine_steps=False`` or dynamics that are not one affine fast weight field, adaptive
            methods).
    """

    method: str | Method = AUTO_METHOD
    step_size: float | None = None
    rtol: float = 1e-7
    atol: float = 1e-9
    gradient: str | Gradient | None = None
    adjoint: bool | None = None
    checkpoint_every: int | None = None
    adjoint_check: int = 100
    chunk_size: int | None = None
    compile: bool = False
    max_steps: int | None = DEFAULT_MAX_STEPS
    exact_scan: str = "auto"
    exact_block_size: int | None = None
    affine_steps: bool = True
    scan: str = "auto"

    def __post_init__(self):
        # A method or gradient object (the new spelling) is stored as the fields it stands for, so that every
        # spelling of the same options is equal and has the same repr; its options given again are refused.
        for given, kind in ((self.method, Method), (self.gradient, Gradient)):
            if isinstance(given, kind):
                for option, value in given.options().items():
                    if option not in ("method", "gradient") and getattr(self, option) not in (_DEFAULTS[option], value):
                        raise ValueError(f"{option}={getattr(self, option)!r} is given twice, the other time in "
                                         f"{given!r}: give it once, in {type(given).__name__}(...)")
                    setattr(self, option, value)
        if self.gradient is not None and self.gradient not in GRADIENT_METHODS:
            raise ValueError(f"gradient must be one of {GRADIENT_METHODS}, got {self.gradient!r}")
        if self.adjoint is not None:
            if not isinstance(self.adjoint, bool):
                raise ValueError(f"adjoint must be True, False or None, got {self.adjoint!r}")
            implied = "adjoint" if self.adjoint else "backprop"
            if self.gradient is not None and self.gradient != implied:
                raise ValueError(f"adjoint={self.adjoint} means gradient={implied!r}, which contradicts "
                                 f"gradient={self.gradient!r}: give one of the two")
        # Every option checked (and normalised) as the method objects check their own, naming the field; then the
        # objects, which refuse options of other methods and their own fields' contradictions.
        for option, check in OPTION_CHECKS.items():
            setattr(self, option, check(option, getattr(self, option)))
        self._choices = None
        self.method_choice, self.gradient_choice  # (made now: what they refuse is refused here)
        # Not fields (not part of equality or repr): solves counted for adjoint_check, the method the latest solve
        # used, and the options "auto" resolves to (cached so that its adjoint_check count carries on).
        self._adjoint_solves = 0
        self._last_choice = None
        self._resolved = {}

    def _made_choices(self) -> tuple[Method, Gradient]:
        """(method, gradient) objects of the fields as they are now (fields may be set after construction)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        key = tuple(fields.values())
        cached = getattr(self, "_choices", None)  # (options unpickled from before it existed have none)
        if cached is None or cached[0] != key:
            cached = self._choices = (key, method_from_options(fields), gradient_from_options(fields))
        return cached[1], cached[2]

    @property
    def method_choice(self) -> Method:
        """The method as an object (`neuralde_seq.solver_choices`), e.g. ``RK4(step_size=0.01, ...)`` for
        ``SolverOptions(method="rk4", step_size=0.01)``."""
        return self._made_choices()[0]

    @property
    def gradient_choice(self) -> Gradient:
        """The gradient method as an object: `Checkpoint`, `Adjoint` or `Backprop` (``gradient`` and the
        shorthand ``adjoint`` read together)."""
        return self._made_choices()[1]

    @property
    def gradient_method(self) -> str:
        """The gradient method in force: ``gradient`` if given, else the one ``adjoint`` implies, else
        "checkpoint"."""
        return self.gradient_choice.name

    @property
    def last_method(self) -> str | None:
        """The method the latest `solve` with these options used: "auto" resolved to "exact" or "rk4", any
        other method as given; None before the first solve."""
        used = getattr(self, "_last_choice", None)  # (options unpickled from before it existed have none)
        return None if used is None else used.name

    @property
    def uses_adjoint(self) -> bool:
        """Whether gradients go through the continuous adjoint: the gradient method is `Adjoint` and the method
        in force does not compute its own gradients (the closed form does). With "auto" the method in force is
        the latest solve's (`last_method`); before any solve, an adjoint is assumed possible."""
        used = getattr(self, "_last_choice", None) or self.method_choice
        return isinstance(self.gradient_choice, Adjoint) and not used.computes_own_gradients

    def resolved(self, method: Method) -> "SolverOptions":
        """These options with ``method`` (one that `method_choice` resolved to) in place of the method: the other
        methods' options back at their defaults, the gradient options kept. Cached per method while the fields
        stay as they are, so that an adjoint_check count carries on over the solves."""
        if method == self.method_choice:
            return self
        key = tuple(getattr(self, f.name) for f in dataclasses.fields(self))
        cache = getattr(self, "_resolved", None)
        if cache is None:
            cache = self._resolved = {}
        hit = cache.get(method)
        if hit is None or hit[0] != key:
            own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                   if f.name != "method" and f.name not in OPTION_DEFAULTS}
            hit = cache[method] = (key, SolverOptions(**{**own, **method.options()}))
        return hit[1]

    def _rk4_fallback(self) -> "SolverOptions":
        """These options as "auto" solves where the closed form does not apply (method "rk4", the exact path's
        options dropped)."""
        return self.resolved(self.method_choice.fallback)


# Every field's default; the method's options (what `SolverOptions.resolved` replaces) are OPTION_DEFAULTS' keys.
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SolverOptions)}


def resolve_method(options: SolverOptions | None, dynamics, control: Control) -> str:
    """The method `solve` uses for ``dynamics`` along ``control`` under ``options``: the name of
    ``options.method_choice.resolve(dynamics, control)``. For "auto" (the default), "exact" where the closed form
    applies (`Exact.applies`: one fast weight layer with a closed-form step, on a control whose read parts are
    constant on every knot interval), else "rk4"; any other method as given (an explicit "exact" is not checked
    here: `solve` refuses what it cannot solve).

    Arguments:
        options: `SolverOptions` (None: the defaults, method "auto").
        dynamics: the dynamics module `solve` integrates (`Dynamics`), e.g. ``model.network.dynamics``.
        control: the control, batch size B.

    Returns:
        The method name: "exact", "rk4", or ``options.method`` when it is not "auto".
    """
    return (options or SolverOptions()).method_choice.resolve(dynamics, control).name


def check_method(options: SolverOptions, dynamics) -> None:
    """Refuse, when a model is built, a forced method that its dynamics can never use (`Method.check_dynamics`):
    method="exact" for dynamics without a closed-form step (deeper fast weight networks, rules without a closed
    form, fields that depend on s). Controls are checked at each solve; "auto" and the step methods accept every
    dynamics.

    Arguments:
        options: the model's `SolverOptions`.
        dynamics: the dynamics module the model will pass to `solve`.

    Raises:
        ValueError: the method cannot solve ``dynamics`` (the message says why).
    """
    options.method_choice.check_dynamics(dynamics)


def parse_solver(value, *, argument: str = "solver") -> SolverOptions | None:
    """The one reader of every spelling of solver options (create_model's ``solver=``, the registry's defaults,
    YAML configs and the CLI's ``--solver``, the estimators' ``model_options={"solver": ...}``).

    Arguments:
        value: `SolverOptions` (returned as it is), a method object (``RK4(step_size=0.01)``), a gradient object
            (``Checkpoint()``), a method name (``"rk4"``: ``SolverOptions(method="rk4")``), a mapping of
            `SolverOptions` fields (``{"method": "rk4", "step_size": 0.01}``; its ``method``/``gradient`` may be
            objects), or None (none given: None).
        argument: the name the messages give ``value``.

    Returns:
        The `SolverOptions`, or None for None.

    Raises:
        ValueError: an unknown method (the valid ones listed), or a value a field refuses (the message names the
            field).
        UnknownOptionError: an unknown field (a TypeError and a ValueError; the closest named).
        TypeError: ``value`` is none of the forms above.
    """
    if value is None or isinstance(value, SolverOptions):
        return value
    if isinstance(value, Method):
        return SolverOptions(method=value)
    if isinstance(value, Gradient):
        return SolverOptions(gradient=value)
    if isinstance(value, str):  # a method name: what a user means by solver="rk4"
        return SolverOptions(method=value)
    if isinstance(value, Mapping):
        fields = [f.name for f in dataclasses.fields(SolverOptions)]
        unknown = [k for k in value if k not in fields]
        if unknown:
            raise UnknownOptionError(f"{argument}: " + unknown_name_message("option", unknown[0], fields,
                                                                            listing="SolverOptions fields"))
        return SolverOptions(**value)
    # refused here, not at the first forward pass (where it met an attribute error naming no argument)
    raise TypeError(f"{argument} must be SolverOptions, a dict of its fields, a method name (e.g. 'rk4'), a method "
                    f"object (e.g. RK4(step_size=0.5)) or None, got {type(value).__name__}")


def solver_repr_fields(text: str) -> dict | None:
    """The fields of ``repr(SolverOptions(...))`` (as checkpoints and results record a solver) read back as a dict
    for `parse_solver`, or None for a text that is not such a repr of plain values.

    Arguments:
        text: the recorded repr.
    """
    import ast

    if not isinstance(text, str) or not text.startswith("SolverOptions("):
        return None
    try:
        call = ast.parse(text, mode="eval").body
        return {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
    except (SyntaxError, ValueError, AttributeError):
        return None


class Dynamics(Protocol):
    """What `solve` integrates: an ``nn.Module`` with

    - ``forward(state, x, dx) -> rate``: ``state`` (B, ...) the current state, ``x`` (B, C) the control's
      value X(s) and ``dx`` (B, C) its derivative X'(s) (either may be None when not needed); returns
      dstate/ds with the shape of ``state``;
    - ``needs_value`` and ``needs_derivative``: booleans saying which of x and dx it reads;
    - optionally, a split of ``forward`` into the part that depends on the input only and the rest, which
      fixed-step solves use to do the first part for many steps at once:
      ``control_features(x, dx) -> tuple`` (x, dx of shape (N, C), N any number of points; returns tensors
      with N leading, or None entries) and ``rate_from_features(state, *features) -> rate`` (features with B
      leading), such that ``rate_from_features(state, *control_features(x, dx)) == forward(state, x, dx)``;
    - optionally, ``needs_time = True`` for a field that depends on s itself (weights expanded in a basis of s,
      `neuralde_seq.basis`): every solver then passes s as a last argument, ``forward(state, x, dx, s)`` and
      ``control_features(x, dx, s)``, s of shape (B,) (or (N,), one per point); the exact solver refuses it.
    """

    needs_value: bool
    needs_derivative: bool

    def __call__(self, state: torch.Tensor, x: torch.Tensor | None, dx: torch.Tensor | None) -> torch.Tensor:
        ...


# ---------------------------------------------------------------------------------------------------
# the solve entry

def solve(dynamics, control: Control, initial: torch.Tensor, options: SolverOptions | None = None, *,
          at_knots: bool = False) -> torch.Tensor:
    """Solve ``dy/ds = dynamics(y, X(s), X'(s))`` from the first knot to each sample's final knot.

    Arguments:
        dynamics: an ``nn.Module`` following `Dynamics`.
        control: the control X, batch size B.
        initial: (B, ...) the state at the first knot.
        options: `SolverOptions` (default: method "auto": the closed form where `resolve_method` finds it
            applies, else rk4 with one step per knot interval and checkpointed gradients).
        at_knots: False returns each sample's state at its own final knot; True returns the states at
            every knot of the control up to the batch's last final knot (constant after a sample's end).

    Returns:
        (B, ...) final states, or (B, K, ...) states at the K knots if ``at_knots``.

    Raises:
        TypeError: ``control`` is not a Control, or (for every method but an explicit "exact", which checks its
            own inputs) the control, ``initial`` and the dynamics' parameters differ in dtype or device.
        ValueError: ``initial`` is not a (B, ...) tensor, or the solve needs more than ``options.max_steps``
            steps.
    """
    options = options or SolverOptions()
    if not isinstance(control, Control):
        raise TypeError(f"control must be a neuralde_seq Control (see build_control), got {type(control).__name__}")
    if not isinstance(initial, torch.Tensor) or initial.dim() < 1 or initial.shape[0] != control.batch_size:
        shape = tuple(initial.shape) if isinstance(initial, torch.Tensor) else type(initial).__name__
        raise ValueError(f"initial must be a tensor (B={control.batch_size}, ...), got {shape}")
    method = options.method_choice
    if not method.checks_own_inputs:
        # One dtype and device for the dynamics, the control and the state (a mismatch would otherwise fail deep
        # inside the dynamics with a matrix-product error).
        check_matches_module(dynamics, control.coeffs, "the control", "the dynamics module")
        check_matches_module(dynamics, initial, "the initial state", "the dynamics module")
        if initial.is_floating_point() and initial.dtype != control.coeffs.dtype:
            raise TypeError(f"the initial state is {initial.dtype} but the control is {control.coeffs.dtype}: convert "
                            f"one of them (initial.to({control.coeffs.dtype}) or control.to({initial.dtype}))")
    chosen = method.resolve(dynamics, control)
    options._last_choice = chosen
    states = chosen.solve(dynamics, control, initial, options.resolved(chosen), at_knots)
    if chosen.warns_not_finite and not bool(torch.isfinite(states).all()) and bool(torch.isfinite(initial).all()):
        warn_not_finite(control, chosen)
    return states


# ---------------------------------------------------------------------------------------------------
# autonomous ODEs between observations

class _GapDynamics(torch.nn.Module):
    """dh/dτ = Δt_b · f(h): the gap enters as the derivative of a linear control X(τ) = Δt_b τ on τ ∈ [0, 1]."""

    needs_value = False
    needs_derivative = True

    def __init__(self, f: torch.nn.Module):
        super().__init__()
        self.f = f

    def forward(self, h, x, dx):
        return dx * self.f(h)


def evolve_over_gaps(f: torch.nn.Module, h: torch.Tensor, gap: torch.Tensor,
                     options: SolverOptions | None = None) -> torch.Tensor:
    """Evolve each sample's state over its own time gap under the autonomous ODE dh/dt = f(h).

    The one implementation of "evolve between observations" (ODE-RNN, ODE-RFWP, the Latent ODE's encoder
    and decoder). Samples of a batch have different gaps, so the solve runs in a normalised time
    τ ∈ [0, 1] with the gap as a per-sample scale of the field, dh/dτ = Δt_b · f(h), through `solve`
    (a linear control with slope Δt_b), so every method and gradient method of `SolverOptions` applies.
    With a fixed-step method every sample takes the same steps in τ, so its answer never depends on the rest
    of the batch (an adaptive method's error control spans the batch). A negative gap integrates backwards in
    time.

    Arguments:
        f: the vector field, an ``nn.Module`` mapping (B, H) to (B, H).
        h: (B, H) states.
        gap: (B,) time gaps Δt_b (0 leaves a sample exactly where it is).
        options: `SolverOptions`; ``step_size`` is the step in τ (None: one step per gap). This ODE has no
            closed form: the default "auto" solves it with rk4, and "exact" is refused.

    Returns:
        (B, H) states after the gaps; h itself (the same tensor) when every gap is zero.
    """
    options = options or SolverOptions()
    if not isinstance(h, torch.Tensor) or not isinstance(gap, torch.Tensor) or h.dim() != 2 or gap.shape != h.shape[:1]:
        raise ValueError(f"h must be (B, H) and gap (B,), got h {tuple(getattr(h, 'shape', ()))} and gap "
                         f"{tuple(getattr(gap, 'shape', ()))}")
    if not options.method_choice.applies(_GapDynamics(f)):
        raise ValueError(f"method={options.method!r} solves fast weight fields on inputs constant over each knot "
                         "interval; the ODE between observations, dh/dt = f(h) with f a network, has no closed form: "
                         "use 'rk4' or 'dopri5'")
    if not bool((gap != 0).any()):
        return h
    gap = gap.to(h.dtype)
    coeffs = h.new_zeros(h.shape[0], 2, 4, 1)
    coeffs[:, 0, 1, 0] = gap  # X(τ) = Δt τ on [0, 1] ...
    coeffs[:, 1, 0, 0] = gap  # ... and constant after it
    knots = torch.tensor([0.0, 1.0], dtype=h.dtype, device=h.device)
    control = Control(knots, coeffs, torch.ones(h.shape[0], dtype=torch.long, device=h.device))
    return solve(_GapDynamics(f), control, h, options)
