"""How a model is trained, in one object: `TrainingSpec`.

Every setup around `neuralde_seq.training.fit` (``train_classifier``, the benchmark runner's rows, the
scikit-learn estimators, the stress and trajectory tasks) builds one `TrainingSpec` and passes it on, instead of
re-listing epochs, learning rate, batch size, weight decay, clipping, penalty, schedule, evaluation and limits.
A spec checks itself when it is made (each bad field raises a ValueError naming it), is frozen (`replace` gives a
changed copy), and is read from a config's ``training:`` section by `TrainingSpec.from_mapping` (YAML's
``"1e-3"`` read as a number, unknown keys answered with the closest names).

``fit(model, objective, train, val, spec)`` and the keyword form ``fit(..., epochs=3, lr=1e-3, batch_size=32)``
are one call: `training_spec` turns the keywords into the spec.

This module also holds the readers of plain config values (`yaml_number`, `read_number`, `show_value`) that
`neuralde_seq.training.config` uses for every section of a config.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from ..input_checks import UnknownOptionError, did_you_mean, unknown_name_message
from .schedules import SCHEDULES
from .threads import DEFAULT_THREADS, check_threads

__all__ = ["TrainingSpec", "training_spec", "check_positive_int", "yaml_number", "read_number", "show_value"]


# ------------------------------------------------------------------------------------- plain config values
# Values quoted in error messages: bounded, whatever a config holds (a repr of shared nested lists grows
# exponentially with their depth).
_short_repr = reprlib.Repr()
_short_repr.maxstring = _short_repr.maxother = 80
_short_repr.maxlevel, _short_repr.maxlist, _short_repr.maxdict = 2, 5, 5  # at most 5**2 items shown


def show_value(value: Any) -> str:
    """A bounded repr of ``value`` for an error message."""
    return _short_repr.repr(value)


def yaml_number(value: Any) -> Any:
    """``value``, or the float a YAML 1.1 string such as ``"1e-3"`` spells (PyYAML reads an exponent without a dot as
    a string; every user means the number)."""
    if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", value.strip()):
        return float(value)
    return value


def read_number(
    value: Any,
    where: str,
    *,
    positive: bool = False,
    integer: bool = False,
    minimum: float | None = None,
    allow_none: bool = False,
):
    """A config's number, checked: ``value`` (after `yaml_number`) if it is a finite number (an integer when
    ``integer``; not a bool), positive when ``positive``, at least ``minimum``; None where ``allow_none``.

    Arguments:
        value: the value as the config holds it.
        where: its key path, for the message (e.g. ``models[1].training.lr``).

    Raises:
        ValueError: ``"<where> must be an integer, got ..."``, ``"... must be positive ..."``, ``"... must be >= ..."``.
    """
    value = yaml_number(value)
    if value is None and allow_none:
        return None
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or (isinstance(value, float) and not math.isfinite(value)):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{where} must be {kind}{' or null' if allow_none else ''}, got {show_value(value)}")
    if positive and not value > 0:
        raise ValueError(f"{where} must be positive, got {show_value(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{where} must be >= {minimum}, got {show_value(value)}")
    return value


def _read_choice(value: Any, where: str, choices: Sequence[str], allow_none: bool = False):
    if (value is None and allow_none) or value in choices:
        return value
    raise ValueError(f"{where} must be one of {', '.join(choices)}, got {show_value(value)}")


# ------------------------------------------------------------------------------------- the checks of a spec
def _is_real(value) -> bool:
    """A real number that is not a bool (numpy scalars included)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_positive_int(value, name: str, allow_none: bool = False):
    """``value`` if it is a positive integer (or None where ``allow_none``), else a ValueError naming ``name``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer{' or None' if allow_none else ''}, got {value!r}")
    return value


def _check_rate(value, name: str, *, positive: bool, allow_none: bool = False) -> None:
    # Real numbers only: a bool is not a rate (True was a learning rate of 1), a string met a comparison's TypeError.
    if value is None and allow_none:
        return
    if _is_real(value) and math.isfinite(value) and (value > 0 if positive else value >= 0):
        return
    if allow_none:
        raise ValueError(f"{name} must be a positive number or None, got {value!r}")
    raise ValueError(
        f"{name} must be a positive finite number, got {value!r}"
        if positive
        else f"{name} must be a finite number >= 0, got {value!r}"
    )


@dataclasses.dataclass(frozen=True)
class TrainingSpec:
    """How `fit` trains: Adam over ``epochs`` passes of the training data, evaluated as it goes.

    Arguments:
        epochs: passes over the training data.
        lr: Adam's learning rate (a positive finite number).
        batch_size: samples per training step (global over processes); the last batch may be smaller.
        seed: seeds torch's global RNG (+ rank) at the start and the data-order generator (default 0).
        weight_decay: Adam's weight decay (default 0).
        grad_clip: max gradient norm, or None (default: no clipping).
        penalty_weight: weight of ``model.penalty()`` in the loss (default 0).
        schedule: the learning rate over the run's ``epochs`` (`neuralde_seq.training.schedules.scheduled_lr`):
            "constant" (default) or "cosine" (linear warm-up over the first 5 % of the steps, then a half cosine
            towards 0).
        eval_every: evaluate every this many training steps as well as at the end of every epoch (None: at the
            end of every epoch only).
        eval_batch_size: batch size of evaluation (None, the default: ``batch_size``).
        max_steps: stop after this many training steps (a smoke run: ``history["smoke"]`` is True), or None.
        threads: torch's CPU threads while training, the previous number restored afterwards (default 1:
            `neuralde_seq.training.threads`); None: torch's setting.

    Raises:
        ValueError: a field out of range or of the wrong type, naming it (e.g. ``lr must be a positive finite
            number, got True``).
    """

    epochs: int
    lr: float
    batch_size: int
    seed: int = 0
    weight_decay: float = 0.0
    grad_clip: float | None = None
    penalty_weight: float = 0.0
    schedule: str = "constant"
    eval_every: int | None = None
    eval_batch_size: int | None = None
    max_steps: int | None = None
    threads: int | None = DEFAULT_THREADS

    # The keys `from_mapping` reads (a subclass may read fewer or more), the required ones, and how each is read
    # from plain data: read_number's keywords (plus "float": cast to float), or "choices".
    MAPPING_KEYS: ClassVar[tuple[str, ...]] = (
        "epochs",
        "lr",
        "batch_size",
        "seed",
        "weight_decay",
        "grad_clip",
        "penalty_weight",
        "schedule",
        "eval_every",
        "eval_batch_size",
        "max_steps",
        "threads",
    )
    REQUIRED: ClassVar[tuple[str, ...]] = ("epochs", "batch_size", "lr")
    READERS: ClassVar[dict[str, dict]] = {
        "epochs": {"positive": True, "integer": True},
        "batch_size": {"positive": True, "integer": True},
        "lr": {"positive": True, "float": True},
        "seed": {"integer": True},
        "eval_batch_size": {"positive": True, "integer": True, "allow_none": True},
        "grad_clip": {"positive": True, "allow_none": True},
        "weight_decay": {"minimum": 0.0, "float": True},
        "penalty_weight": {"minimum": 0.0, "float": True},
        "schedule": {"choices": SCHEDULES},
        "eval_every": {"positive": True, "integer": True, "allow_none": True},
        "max_steps": {"positive": True, "integer": True, "allow_none": True},
        "threads": {"positive": True, "integer": True, "allow_none": True},
    }

    def __post_init__(self):
        check_positive_int(self.epochs, "epochs")
        check_positive_int(self.batch_size, "batch_size")
        if self.eval_batch_size is not None:
            check_positive_int(self.eval_batch_size, "eval_batch_size")
        check_positive_int(self.eval_every, "eval_every", allow_none=True)
        check_positive_int(self.max_steps, "max_steps", allow_none=True)
        check_threads(self.threads)
        _check_rate(self.lr, "lr", positive=True)
        _check_rate(self.weight_decay, "weight_decay", positive=False)
        _check_rate(self.penalty_weight, "penalty_weight", positive=False)
        _check_rate(self.grad_clip, "grad_clip", positive=True, allow_none=True)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The names of the spec's fields, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def replace(self, **changes) -> Self:
        """A copy with ``changes`` (field name -> value), checked as a new spec.

        Raises:
            UnknownOptionError: a name that is no field (the closest ones suggested).
            ValueError: a changed value out of range, naming the field.
        """
        _refuse_unknown(changes, self.field_names(), f" for {type(self).__name__}.replace", "fields")
        return dataclasses.replace(self, **changes)

    def checkpoint_settings(self) -> dict:
        """The settings a resume checkpoint records and compares on resume, as `fit` has always written them (the
        constant schedule left out, so that checkpoints written before schedules existed resume)."""
        return {
            "epochs": self.epochs,
            "lr": float(self.lr),
            "batch_size": self.batch_size,
            "seed": int(self.seed),
            "weight_decay": float(self.weight_decay),
            "grad_clip": self.grad_clip,
            "penalty_weight": float(self.penalty_weight),
            **({} if self.schedule == "constant" else {"schedule": self.schedule}),
            "eval_every": self.eval_every,
        }

    @classmethod
    def check_names(cls, mapping: Mapping, where: str = "training") -> None:
        """Refuse keys of ``mapping`` that `from_mapping` does not read.

        Raises:
            UnknownOptionError: ``unknown key(s) 'epoch' in <where>; did you mean 'epochs'? allowed: ...``.
        """
        _refuse_unknown(mapping, cls.MAPPING_KEYS, f" in {where}", "allowed", kind="key(s)")

    @classmethod
    def from_mapping(cls, mapping: Mapping, where: str = "training", *, missing_hint: str = ""):
        """The spec a config's ``training:`` section (plain data, as YAML gives it) describes.

        Arguments:
            mapping: key -> value; keys among ``MAPPING_KEYS``; a value None is the field's default (a required
                key then counts as missing).
            where: the section's key path, prefixed to every message (e.g. ``models[1].training``).
            missing_hint: text after ``"<where>.<key> is required"`` (e.g. where else the key may be given).

        Returns:
            A spec of this class.

        Raises:
            UnknownOptionError: an unknown key (the closest names suggested).
            ValueError: a missing required key, or a value of the wrong type or out of range, naming its key path
                (``models[0].training.epochs must be positive, got 0``).
        """
        if not isinstance(mapping, Mapping):
            raise ValueError(f"{where} must be a mapping, got {type(mapping).__name__} {show_value(mapping)}")
        cls.check_names(mapping, where)
        for key in cls.REQUIRED:
            if mapping.get(key) is None:
                raise ValueError(f"{where}.{key} is required{missing_hint}")
        values = {}
        for key in cls.READERS:  # in the readers' order: the first bad key is reported
            if key not in mapping:
                continue
            reader = dict(cls.READERS[key])
            if "choices" in reader:
                values[key] = _read_choice(
                    mapping[key], f"{where}.{key}", reader["choices"], reader.get("allow_none", False)
                )
                continue
            as_float = reader.pop("float", False)
            value = read_number(mapping[key], f"{where}.{key}", **reader) if reader else yaml_number(mapping[key])
            values[key] = float(value) if as_float else value
        try:
            return cls(**values)
        except ValueError as err:  # a check across fields, or of a field read as given: its message names the field
            raise ValueError(f"{where}.{err}") from err


def _refuse_unknown(
    names: Mapping | Sequence, valid: Sequence[str], where: str, listing: str, kind: str = "argument"
) -> None:
    unknown = [str(k) for k in names if k not in valid]
    if not unknown:
        return
    if len(unknown) == 1:
        raise UnknownOptionError(unknown_name_message(kind, unknown[0], valid, where=where, listing=listing))
    hints = [f"{k!r}: {hint}" for k in unknown for hint in [did_you_mean(k, valid)] if hint]
    raise UnknownOptionError(
        f"unknown {kind} {', '.join(map(repr, unknown))}{where}; "
        + "".join(f"{hint} " for hint in hints)
        + f"{listing}: {', '.join(valid)}"
    )


def training_spec(
    spec: TrainingSpec | None, fields: Mapping[str, Any], caller: str = "fit", other_arguments: Sequence[str] = ()
) -> TrainingSpec:
    """The one spec of a call that takes ``spec`` or its fields as keywords (`fit`, ``train_classifier``).

    Arguments:
        spec: the spec given, or None.
        fields: the keywords given besides (field name -> value).
        caller: the function's name, for messages.
        other_arguments: the caller's other keyword arguments (suggested for a misspelt keyword too).

    Returns:
        ``spec`` itself, or ``TrainingSpec(**fields)``.

    Raises:
        TypeError: ``spec`` and a field given both (naming the field), a ``spec`` that is no `TrainingSpec`,
            required fields missing (naming them).
        UnknownOptionError: a keyword that is no field (the closest names suggested).
        ValueError: a field out of range, naming it.
    """
    if spec is not None:
        if not isinstance(spec, TrainingSpec):
            raise TypeError(
                f"{caller}(): spec must be a TrainingSpec, got {type(spec).__name__}; build one with "
                "TrainingSpec(epochs=..., lr=..., batch_size=...) (or TrainingSpec.from_mapping(a_dict))"
            )
        if fields:
            name = next(iter(fields))
            raise TypeError(
                f"{caller}() got both spec and {name}={fields[name]!r}: give {name} in the spec "
                f"(spec.replace({name}=...)) or leave spec out"
            )
        return spec
    names = TrainingSpec.field_names()
    _refuse_unknown(
        fields, (*names, *other_arguments), f" for {caller}()", f"{caller}'s keyword arguments", kind="keyword argument"
    )
    missing = [name for name in ("epochs", "lr", "batch_size") if name not in fields]
    if missing:
        raise TypeError(
            f"{caller}() needs epochs, lr and batch_size (or spec=TrainingSpec(...)); missing: {', '.join(missing)}"
        )
    return TrainingSpec(**fields)
