"""The options a model solves with: `SolverOptions`, a method object and a gradient object
(`neuralde_seq.solvers.methods`), and the one reader of every other spelling, `parse_solver`.

Inside the library solver options are objects: ``SolverOptions(method=RK4(step_size=0.5), gradient=Checkpoint())``,
and every model constructor taking ``solver=`` also takes a method object alone (`solver_options`: ``solver=RK4()``
is ``SolverOptions(method=RK4())``). Strings and mappings are read only at the edges, by `parse_solver`: YAML
configs (``solver: {method: rk4, step_size: 1.0}``), the command line (``--solver rk4``, ``--set
solver.gradient=adjoint``), the estimators' ``model_options={"solver": ...}`` and create_model's ``solver="rk4"``.
In a mapping, ``method`` and ``gradient`` are names (``"rk4"``, ``"adjoint"``), objects or stored choices (``{"type":
"RK4", "step_size": 0.5}``), and every other key is an option of the method or of the gradient method under its one
name (``step_size`` is ``RK4.step_size``, ``every`` is ``Checkpoint.every``; with ``Auto``, an option of its
``exact`` or ``fallback`` goes to that one, ``scan`` and ``compile`` to both). `SolverOptions.to_dict` stores the
choices as ``{"type": "RK4", **fields}``, which `SolverOptions.from_dict` (the same parser) reads back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from ..input_checks import UnknownOptionError, unknown_name_message
from .methods import GRADIENTS, METHODS, Adjoint, Auto, Checkpoint, Choice, FixedStep, Gradient, Method

__all__ = ["SolverOptions", "parse_solver", "solver_options", "resolve_method", "OPTION_NAMES"]


@dataclasses.dataclass(frozen=True)
class SolverOptions:
    """Options of `neuralde_seq.solvers.solve`: the method (how the equation is stepped, with its own options) and
    the gradient method (how its gradients are computed, with its own).

    Attributes:
        method: a `neuralde_seq.solvers.Method` object: `Auto` (default: on every solve the closed form `Exact`
            where the dynamics and control admit it, else its fallback `RK4`, one step per knot interval), a
            fixed-step method (`RK4`, `Heun3`, `Heun2`, `Midpoint`, `Euler`), an adaptive torchdiffeq method
            (`Dopri5`, `Dopri8`, `Bosh3`, `Fehlberg2`, `AdaptiveHeun`) or `Exact` (refuses dynamics or controls
            without a closed form). ``RK4()`` forces rk4 steps on every model.
        gradient: a `neuralde_seq.solvers.Gradient` object: `Checkpoint` (default: exact for the discrete solve,
            O(√N) memory, about one extra forward solve), `Adjoint` (the continuous adjoint of the papers:
            constant memory, but wrong for contracting fields over long sequences) or `Backprop` (plain
            backpropagation, O(N) memory). Not used by `Exact`, whose gradients recompute checkpointed segments
            by hand.
    """

    method: Method = dataclasses.field(default_factory=Auto)
    gradient: Gradient = dataclasses.field(default_factory=Checkpoint)
    # Not fields (ClassVar keeps them out of the dataclass): each instance's own, set by __post_init__.
    _adjoint_solves: ClassVar[int]
    _last_method: ClassVar[Method | None]

    def __post_init__(self):
        for field, kind, example in (("method", Method, "RK4(step_size=0.5)"), ("gradient", Gradient, "Checkpoint()")):
            value = getattr(self, field)
            if not isinstance(value, kind):
                hint = (
                    f"; the edges' spellings (a name, a mapping) are read by parse_solver({value!r})"
                    if isinstance(value, (str, Mapping))
                    else ""
                )
                raise TypeError(
                    f"SolverOptions.{field} must be a {kind.__name__} object (e.g. {example}), got {value!r}{hint}"
                )
        stepping = self.method.fallback if isinstance(self.method, Auto) else self.method
        if isinstance(stepping, FixedStep) and stepping.compile is True and isinstance(self.gradient, Adjoint):
            raise ValueError(
                f"{type(stepping).__name__}.compile=True compiles the steps of our fixed-step loop, but "
                "gradient Adjoint() solves with torchdiffeq's odeint_adjoint, which is not compiled: use "
                "Checkpoint() or Backprop(), or compile='auto'"
            )
        # Not fields (neither compared nor shown): the solves counted for Adjoint.check_every, and the method the
        # latest solve used.
        object.__setattr__(self, "_adjoint_solves", 0)
        object.__setattr__(self, "_last_method", None)

    def to_dict(self) -> dict[str, Any]:
        """These options as stored (results, checkpoints): ``{"method": {"type": "RK4", ...}, "gradient": {"type":
        "Checkpoint", "every": None}}`` (`neuralde_seq.solvers.Choice.to_dict`)."""
        return {"method": self.method.to_dict(), "gradient": self.gradient.to_dict()}

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> SolverOptions:
        """The options `to_dict` stored (read by `parse_solver`, which also takes the other spellings of a mapping).

        Arguments:
            stored: the mapping `to_dict` returned (e.g. read back from JSON).

        Raises:
            TypeError: ``stored`` is not a mapping.
            ValueError: an unknown type or a value a field refuses (the message names it).
        """
        if not isinstance(stored, Mapping):
            raise TypeError(f"SolverOptions.from_dict takes the mapping to_dict returns, got {type(stored).__name__}")
        return _from_mapping(stored, "SolverOptions.from_dict")

    @property
    def last_method(self) -> Method | None:
        """The method the latest `neuralde_seq.solvers.solve` with these options used: what `Auto` resolved to
        (its ``exact`` or its ``fallback``), any other method as given; None before the first solve."""
        return self._last_method

    @property
    def uses_adjoint(self) -> bool:
        """Whether gradients go through the continuous adjoint: the gradient method is `Adjoint` and the method in
        force does not compute its own gradients (the closed form does). With `Auto` the method in force is the
        latest solve's (`last_method`); before any solve, an adjoint is assumed possible."""
        used = self._last_method or self.method
        return isinstance(self.gradient, Adjoint) and not used.computes_own_gradients

    def _count_adjoint_solve(self) -> bool:
        """Count one adjoint solve; whether its backward reconstruction is checked (`Adjoint.check_every`: the
        first solve and every ``check_every``-th after it)."""
        assert isinstance(self.gradient, Adjoint)  # counted for adjoint solves only
        every, done = self.gradient.check_every, self._adjoint_solves
        object.__setattr__(self, "_adjoint_solves", done + 1)
        return bool(every) and done % every == 0


def solver_options(value, *, argument: str = "solver") -> SolverOptions:
    """The `SolverOptions` of a constructor's ``solver=``: `SolverOptions` as given, a method object wrapped
    (``RK4(step_size=0.5)`` is ``SolverOptions(method=RK4(step_size=0.5))``), a gradient object wrapped, None the
    defaults. Names and mappings are the edges' spellings: `parse_solver` reads them.

    Arguments:
        value: `SolverOptions`, a `neuralde_seq.solvers.Method` or `neuralde_seq.solvers.Gradient` object, or None.
        argument: the name the messages give ``value``.

    Raises:
        TypeError: any other value (a string or mapping: naming `parse_solver`).
    """
    if value is None:
        return SolverOptions()
    if isinstance(value, SolverOptions):
        return value
    if isinstance(value, Method):
        return SolverOptions(method=value)
    if isinstance(value, Gradient):
        return SolverOptions(gradient=value)
    hint = (
        f"; a name or mapping is read at the edges (create_model, configs, the CLI, estimators) by "
        f"parse_solver({value!r})"
        if isinstance(value, (str, Mapping))
        else ""
    )
    raise TypeError(
        f"{argument} must be SolverOptions, a method object (e.g. RK4(step_size=0.5)), a gradient object "
        f"(e.g. Adjoint()) or None, got {value!r}{hint}"
    )


def resolve_method(options: SolverOptions | Method | None, dynamics, control) -> Method:
    """The method `neuralde_seq.solvers.solve` uses for ``dynamics`` along ``control`` under ``options``:
    ``method.resolve(dynamics, control)``. For `Auto` (the default), its ``exact`` where the closed form applies
    (`Exact.applies`: one fast weight layer with a closed-form step, on a control whose read parts are constant on
    every knot interval), else its ``fallback``; any other method as given (an explicit `Exact` is not checked
    here: `solve` refuses what it cannot solve).

    Arguments:
        options: `SolverOptions`, a method object, or None (the defaults).
        dynamics: the dynamics module `solve` integrates (`Dynamics`), e.g. ``model.network.dynamics``.
        control: the control, batch size B.

    Returns:
        The method object, e.g. ``Exact()`` or ``RK4()`` under the default `Auto`.
    """
    return solver_options(options, argument="options").method.resolve(dynamics, control)


# ---------------------------------------------------------------------------------------------------
# the one parser of the edges' spellings

_CLASSES: dict[str, type[Choice]] = {
    **{cls.__name__: cls for cls in METHODS.values()},
    **{cls.__name__: cls for cls in GRADIENTS.values()},
}
# Every key a mapping of solver options may hold: method, gradient, and every option of every method and gradient.
OPTION_NAMES = (
    "method",
    "gradient",
    *dict.fromkeys(f.name for cls in _CLASSES.values() for f in dataclasses.fields(cls)),
)


def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


_C = TypeVar("_C", bound=Choice)


def _lookup(kind: str, registry: Mapping[str, type[_C]], name, argument: str) -> type[_C]:
    """The class ``name`` spells: a name of ``registry`` ("rk4") or a class name ("RK4")."""
    by_class = {cls.__name__: cls for cls in registry.values()}
    if isinstance(name, str) and (name in registry or name in by_class):
        return registry.get(name) or by_class[name]
    hint = (
        " (multistep methods reuse rates across knots, where controls jump: use rk4 or dopri5)"
        if kind == "method" and "adams" in str(name)
        else ""
    )
    raise ValueError(f"{argument}: {kind} must be one of {tuple(registry)}, got {name!r}{hint}")


def _made(cls: type[_C], fields: Mapping[str, Any], argument: str) -> _C:
    """``cls(**fields)``, a field that holds a method (`Auto`'s) read from any spelling; unknown fields named."""
    names = _field_names(cls)
    unknown = [k for k in fields if k not in names]
    if unknown:
        raise UnknownOptionError(
            f"{argument}: " + unknown_name_message("option", unknown[0], names, listing=f"{cls.__name__}'s options")
        )
    defaults = cls()
    values = {
        key: _choice(value, Method, METHODS, f"{argument}['{key}']")
        if isinstance(getattr(defaults, key), Method)
        else value
        for key, value in fields.items()
    }
    return cls(**values)


def _choice(value, base: type[_C], registry: Mapping[str, type[_C]], argument: str) -> _C:
    """A method or gradient object (``base``: `Method` or `Gradient`) from a name, a stored ``{"type": ...,
    **fields}`` mapping, or the object."""
    kind = "method" if base is Method else "gradient"
    if isinstance(value, base):
        return value
    if isinstance(value, Mapping):
        if "type" not in value:
            raise ValueError(
                f"{argument}: a {kind} given as a mapping needs its 'type' (e.g. {{'type': 'RK4', "
                f"'step_size': 0.5}}), got {dict(value)!r}"
            )
        fields = {k: v for k, v in value.items() if k != "type"}
        return _made(_lookup(kind, registry, value["type"], argument), fields, argument)
    return _lookup(kind, registry, value, argument)()


def _with_options(choice: _C, options: Mapping[str, Any], argument: str) -> _C:
    """``choice`` with the flat ``options`` applied: its own fields, and for `Auto` the options of its ``exact`` and
    ``fallback`` (an option both have, ``scan`` or ``compile``, goes to both)."""
    if not options:
        return choice
    own = {k: v for k, v in options.items() if k in _field_names(type(choice))}
    if own:
        choice = _made(
            type(choice), {**{f.name: getattr(choice, f.name) for f in dataclasses.fields(choice)}, **own}, argument
        )
    if isinstance(choice, Auto):
        parts = {}
        for part in ("exact", "fallback"):
            current = getattr(choice, part)
            given = {k: v for k, v in options.items() if k not in own and k in _field_names(type(current))}
            if given:
                parts[part] = dataclasses.replace(current, **given)
        choice = dataclasses.replace(choice, **parts) if parts else choice
    return choice


def _options_of(choice: Choice) -> set[str]:
    names = set(_field_names(type(choice)))
    if isinstance(choice, Auto):
        names |= set(_field_names(type(choice.exact))) | set(_field_names(type(choice.fallback)))
    return names


def _foreign_option(key: str, method: Method, gradient: Gradient, argument: str) -> Exception:
    """The error for the option ``key`` that neither ``method`` nor ``gradient`` has."""
    owners = [name for name, cls in _CLASSES.items() if key in _field_names(cls)]
    if owners:
        return ValueError(
            f"{argument}: {key} is an option of {', '.join(owners)}, not of "
            f"{type(method).__name__} or {type(gradient).__name__}"
        )
    return UnknownOptionError(
        f"{argument}: " + unknown_name_message("option", key, OPTION_NAMES, listing="solver options")
    )


def _from_mapping(value: Mapping[str, Any], argument: str) -> SolverOptions:
    flat = dict(value)
    method = _choice(flat.pop("method", Auto.name), Method, METHODS, argument)
    gradient = _choice(flat.pop("gradient", Checkpoint.name), Gradient, GRADIENTS, argument)
    # the method's own fields first (Auto's exact and fallback), which decide what the other options belong to
    method = _with_options(method, {k: flat.pop(k) for k in list(flat) if k in _field_names(type(method))}, argument)
    method_names, gradient_names = _options_of(method), _options_of(gradient)
    for key in flat:
        if key not in method_names and key not in gradient_names:
            raise _foreign_option(key, method, gradient, argument)
    method = _with_options(method, {k: v for k, v in flat.items() if k in method_names}, argument)
    gradient = _with_options(gradient, {k: v for k, v in flat.items() if k in gradient_names}, argument)
    return SolverOptions(method=method, gradient=gradient)


def parse_solver(value, *, argument: str = "solver") -> SolverOptions | None:
    """The one reader of every spelling of solver options at the edges: create_model's ``solver=``, the registry's
    defaults, YAML configs and the CLI's ``--solver``, the estimators' ``model_options={"solver": ...}``, and the
    stored form of `SolverOptions.to_dict`.

    Arguments:
        value: `SolverOptions` (returned as it is); a method object (``RK4(step_size=0.01)``) or a gradient object
            (``Adjoint()``), wrapped; a method name (``"rk4"``: ``SolverOptions(method=RK4())``); a mapping
            (module docstring: ``{"method": "rk4", "step_size": 0.01, "gradient": "adjoint"}``, or the stored
            ``{"method": {"type": "RK4", "step_size": 0.01}, "gradient": {"type": "Adjoint", "check_every":
            100}}``); or None (none given: None).
        argument: the name the messages give ``value``.

    Returns:
        The `SolverOptions`, or None for None.

    Raises:
        ValueError: an unknown method or gradient method (the valid ones listed), an option of another method
            (its owners named), or a value an option refuses (the message names it, e.g. ``RK4.step_size``).
        UnknownOptionError: an unknown option (a TypeError and a ValueError; the closest named).
        TypeError: ``value`` is none of the forms above.
    """
    if value is None:
        return None
    if isinstance(value, (SolverOptions, Method, Gradient)):
        return solver_options(value, argument=argument)
    if isinstance(value, str):  # a method name: what a user means by solver="rk4"
        return SolverOptions(method=_choice(value, Method, METHODS, argument))
    if isinstance(value, Mapping):
        return _from_mapping(value, argument)
    # refused here, not at the first forward pass (where it met an attribute error naming no argument)
    raise TypeError(
        f"{argument} must be SolverOptions, a mapping of its options, a method name (e.g. 'rk4'), a "
        f"method object (e.g. RK4(step_size=0.5)) or None, got {type(value).__name__}"
    )
