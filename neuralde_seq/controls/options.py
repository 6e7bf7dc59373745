"""`ControlOptions`: every option of a control in one typed object, and the one parser of their spelling at the edges.

A control is built by `neuralde_seq.controls.build_control` from observations and a `ControlOptions`: the
interpolation (an object carrying its own options, e.g. ``LogSignature(depth=2, step=8)``), the channels beside the
values, how missing values and never observed channels are handled, the parametrisation and the time unit. Every
value is checked once, in the constructor, and a bad one is refused naming the field.

Where options are written as text or keywords (``build_control``'s keywords, a config row's ``control:``, the model
registry's entries, the estimators' ``control_options``) they are read by one parser, `parse_control_options`
(also ``ControlOptions.parse``): interpolations by their registered names, their options by their keywords, each
on top of the options it refines (a model's registered ones).

Three options may stand for a value fixed on the training split, which `neuralde_seq.training.InputSpec.fit`
resolves: ``time_unit="auto"`` (the training series' longest span), ``intensity_channel="auto"`` (whether the
channels are measured at their own times) and ``unobserved_fill="mean"`` (each channel's training mean). They are
options like any other (the same object goes from a config to the spec, and the spec resolves them with
``dataclasses.replace``); `build_control` and a fitted spec refuse them unresolved (`ControlOptions.unresolved`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..input_checks import UnknownOptionError, unknown_name_message
from ..observations import observation_span
from .cubic import HermiteCubic
from .interpolation import (
    RESERVED_KEYWORDS,
    Interpolation,
    interpolation_class,
    interpolation_keywords,
    interpolation_name,
    parse_interpolation,
)

__all__ = [
    "ControlOptions",
    "parse_control_options",
    "control_option_names",
    "time_unit_value",
    "MISSING_POLICIES",
    "PARAMETRIZATIONS",
    "UNRESOLVED",
]

MISSING_POLICIES = ("interpolate", "forward_fill", "zero")
PARAMETRIZATIONS = ("time", "index")
# The options that may stand for a value of the training split, and the word that says so.
UNRESOLVED = {"time_unit": "auto", "intensity_channel": "auto", "unobserved_fill": "mean"}
_FLAGS = ("time_channel", "mask_channel", "intensity_channel", "recency_channel")


@dataclasses.dataclass(frozen=True)
class ControlOptions:
    """Every option of a control (`neuralde_seq.controls.build_control` builds it from observations and these).

    Attributes:
        interpolation: an `Interpolation` object: `HermiteCubic()` (default: causal and smooth), `NaturalCubic()`,
            `Linear()`, `Rectilinear()` (time moves first, then the values; needs the time channel) or
            `LogSignature(depth, step, ...)` (piecewise-constant log-signature windows, for neural RDEs), or any
            registered one. Its name (``"hermite_cubic"``, ...) is read by `parse_control_options`, not here.
        time_channel: prepend the observation time as channel 0 (default True).
        mask_channel: append C channels that are 1 where a value was observed and 0 where missing.
        intensity_channel: append C channels with the cumulative count of observations per channel (the
            "observational intensity" of PhysioNet's OI setting): at point i of a sample, how many of its points
            0..i observe the channel. ``"auto"``: True where the training channels are measured at their own times
            (resolved by ``InputSpec.fit``).
        recency_channel: append C channels with the time since each channel's last observation (in the time unit):
            0 at a point that observes the channel; before the channel's first observation, and throughout a channel
            the sample never observes, the time since the sample's first point. With the counts, what GRU-D's decays
            read: how stale each value is.
        count_unit: the intensity channels' counts are divided by this (a positive number; None, the default: raw
            counts). A count grows with the series' length, as the time does (``InputSpec.fit`` with
            ``intensity_channel="auto"`` sets it to the median count of a channel in a training series).
        missing: one of `MISSING_POLICIES`: ``"interpolate"`` (default) through missing values (constant before the
            first and after the last observation), ``"forward_fill"`` the last observation (the first one
            backward), or ``"zero"``, which needs ``mask_channel`` so that a zero stays distinguishable from a
            missing value.
        unobserved_fill: the value of a channel with no observation at all in a sample: a finite number for every
            channel, or a sequence of C finite numbers, one per channel (kept as a tuple); None (default) refuses
            such a sample, naming it. ``"mean"``: each channel's training mean (resolved by ``InputSpec.fit``).
        parametrization: ``"time"`` (default: s is the observation time; every sample on one time grid) or
            ``"index"`` (s is the observation index; time enters as a channel). Log-signature windows are indexed
            by window either way.
        time_unit: times are divided by this (a positive number) before anything else: the time channel then reads
            time in these units, and with ``parametrization="time"`` so does the solver's parameter s, in which
            ``step_size`` is measured (e.g. hourly data stamped in seconds: 3600). None (default): times as given.
            ``"auto"``: the training split's longest span (`time_unit_value`, resolved by ``InputSpec.fit``).

    Raises:
        ValueError: a value the field does not take, or options that do not go together (``missing="zero"``
            without ``mask_channel``, an interpolation that needs the time channel without it), naming the field.
        TypeError: ``interpolation`` is not an `Interpolation` object.
    """

    interpolation: Interpolation = HermiteCubic()
    time_channel: bool = True
    mask_channel: bool = False
    intensity_channel: bool | str = False
    recency_channel: bool = False
    count_unit: float | None = None
    missing: str = "interpolate"
    unobserved_fill: float | tuple[float, ...] | str | None = None
    parametrization: str = "time"
    time_unit: float | str | None = None

    def __post_init__(self):
        if not isinstance(self.interpolation, Interpolation):
            hint = (
                f"; the name {self.interpolation!r} is read by ControlOptions.parse and build_control's keywords"
                if isinstance(self.interpolation, str)
                else ""
            )
            raise TypeError(
                f"interpolation must be an Interpolation object (e.g. HermiteCubic(), "
                f"LogSignature(depth=2, step=4)), got {self.interpolation!r}{hint}"
            )
        for flag in _FLAGS:
            given = getattr(self, flag)
            if flag == "intensity_channel" and isinstance(given, str) and given == "auto":
                continue
            # a string such as "no" would otherwise read as True
            if not isinstance(given, bool) and type(given).__name__ != "bool_":
                allowed = (
                    "True, False or 'auto' (True where the training channels are measured at their own times)"
                    if flag == "intensity_channel"
                    else "True or False"
                )
                raise ValueError(f"{flag} must be {allowed}, got {given!r}")
            object.__setattr__(self, flag, bool(given))
        if self.count_unit is not None:
            if not (_finite_number(self.count_unit) and self.count_unit > 0):
                raise ValueError(f"count_unit must be None or a positive finite number, got {self.count_unit!r}")
            object.__setattr__(self, "count_unit", float(self.count_unit))
        if self.missing not in MISSING_POLICIES:
            raise ValueError(f"missing must be one of {MISSING_POLICIES}, got {self.missing!r}")
        object.__setattr__(self, "unobserved_fill", _checked_fill(self.unobserved_fill))
        if self.parametrization not in PARAMETRIZATIONS:
            raise ValueError(f"parametrization must be 'time' or 'index', got {self.parametrization!r}")
        if self.time_unit is not None and not (isinstance(self.time_unit, str) and self.time_unit == "auto"):
            if not (_finite_number(self.time_unit) and self.time_unit > 0):
                raise ValueError(
                    f"time_unit must be a positive finite number, None or 'auto' (the training span), "
                    f"got {self.time_unit!r}"
                )
            object.__setattr__(self, "time_unit", float(self.time_unit))
        if self.missing == "zero" and not self.mask_channel:
            raise ValueError(
                "missing='zero' needs mask_channel=True, so that a zero is distinguishable from a missing value"
            )
        if self.interpolation.needs_time_channel and not self.time_channel:
            raise ValueError(
                f"interpolation={interpolation_name(self.interpolation)!r} needs time_channel=True "
                f"({self.interpolation.needs_time_channel})"
            )

    def __repr__(self) -> str:
        # the fields that differ from their defaults: what these options say beyond ControlOptions()
        changed = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default
        ]
        return f"ControlOptions({', '.join(changed)})"

    # ---- the edges ------------------------------------------------------------------------------
    @classmethod
    def parse(
        cls, given: Mapping | ControlOptions | None, *, base: ControlOptions | None = None, where: str = ""
    ) -> ControlOptions:
        """`parse_control_options` (the one reader of options written as keywords).

        Arguments:
            given: keywords, options, or None.
            base: the options they refine.
            where: text after an unknown option's name in messages.

        Returns:
            The options.
        """
        return parse_control_options(given, base=base, where=where)

    def to_keywords(self) -> dict[str, Any]:
        """The options as ``build_control`` keywords: every field, the interpolation as its object
        (``build_control(t, x, **options.to_keywords())`` builds what ``build_control(t, x, options)`` does).

        Returns:
            A new dict.
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON-ready data: every field, the interpolation as ``{"type": <class name>, **fields}``
        and a fill per channel as a list (`from_dict` reads it back).

        Returns:
            A new dict.
        """
        data = self.to_keywords()
        data["interpolation"] = self.interpolation.to_dict()
        if isinstance(self.unobserved_fill, tuple):
            data["unobserved_fill"] = list(self.unobserved_fill)
        return data

    @classmethod
    def from_dict(cls, data: Mapping, argument: str = "control options") -> ControlOptions:
        """The options `to_dict` wrote, every field present and checked as the constructor checks it.

        Arguments:
            data: the mapping.
            argument: its name in messages.

        Returns:
            The options.

        Raises:
            ValueError: a mapping without exactly the fields, or a field the constructor refuses (named).
        """
        fields = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(data, Mapping) or set(data) != set(fields):
            given = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"{argument} need exactly the fields {fields}, got {given}")
        if not isinstance(data["interpolation"], Mapping):
            raise ValueError(
                f"{argument}: interpolation must be a dict {{'type': <class name>, **fields}}, got "
                f"{data['interpolation']!r}"
            )
        return cls(**{**data, "interpolation": parse_interpolation(data["interpolation"], "interpolation")})

    # ---- values fixed on the training split -------------------------------------------------------
    @property
    def unresolved(self) -> tuple[str, ...]:
        """The fields that stand for a value of the training split (`UNRESOLVED`: ``time_unit="auto"``,
        ``intensity_channel="auto"``, ``unobserved_fill="mean"``), which ``InputSpec.fit`` resolves."""
        return tuple(
            name
            for name, word in UNRESOLVED.items()
            if isinstance(getattr(self, name), str) and getattr(self, name) == word
        )

    def check_resolved(self, what: str = "build_control") -> None:
        """Refuse options that still stand for a value of the training split.

        Arguments:
            what: who needs the values, for the message.

        Raises:
            ValueError: naming the first such field and how to resolve it.
        """
        for name in self.unresolved:
            if name == "time_unit":
                raise ValueError(
                    f"time_unit='auto' is resolved from the training split by the runner and the "
                    f"estimators (InputSpec.fit); for {what} give the number, e.g. "
                    "neuralde_seq.observations.observation_span(train_times, train_lengths), and use it "
                    "for every split"
                )
            raise ValueError(
                f"{name}={UNRESOLVED[name]!r} is resolved on the training split by InputSpec.fit (the "
                f"runner and the estimators fit one); for {what} give the value it stands for"
            )


def _finite_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _checked_fill(fill):
    """``unobserved_fill`` checked: None, "mean", a finite number (as a float) or a non-empty sequence of them (as a
    tuple of floats)."""
    if fill is None or (isinstance(fill, str) and fill == "mean"):
        return fill
    if _finite_number(fill):
        return float(fill)
    if isinstance(fill, Sequence) and not isinstance(fill, str) and len(fill) > 0 and all(map(_finite_number, fill)):
        return tuple(float(v) for v in fill)
    # NaN would mark the filled channel missing again (the result was that of unobserved_fill=0.0)
    raise ValueError(
        f"unobserved_fill must be None, a finite number or a sequence of finite numbers, one per channel, "
        f"or 'mean' (each channel's training mean, resolved by InputSpec.fit): the value of a channel a "
        f"sample never observes; got {fill!r}"
    )


# ---------------------------------------------------------------------------------------------------
# the one parser of options written as keywords

_OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(ControlOptions))
RESERVED_KEYWORDS.update(_OPTION_FIELDS)  # no interpolation's keyword may shadow an option of every control


def control_option_names() -> list[str]:
    """Every keyword `parse_control_options` reads: the fields of `ControlOptions`, then those of the registered
    interpolations.

    Returns:
        The names.
    """
    return [*_OPTION_FIELDS, *interpolation_keywords()]


def parse_control_options(
    given: Mapping | ControlOptions | None, *, base: ControlOptions | None = None, where: str = ""
) -> ControlOptions:
    """Control options from their spelling at the edges: ``build_control``'s keywords, a config row's ``control:``,
    a model registry entry, an estimator's ``control_options``.

    Keywords refine ``base`` (default: ``ControlOptions()``): each field given replaces the base's;
    ``interpolation`` is an object, a registered name or its dict form (`parse_interpolation`), and an
    interpolation's own options are its keywords (``depth``, ``step``, ``logsig_backend``, ``logsig_basis``,
    ``window_start_values`` for ``"logsignature"``). Given beside the name of the base's interpolation (or alone),
    they replace the base interpolation's; a name of another interpolation starts from that one's defaults.

    Arguments:
        given: a mapping of keywords; a `ControlOptions` (returned as it is); or None (``base``).
        base: the options refined (e.g. a model's registered ones); default ``ControlOptions()``.
        where: text after an unknown option's name in messages (e.g. " for model 'ncde'").

    Returns:
        The `ControlOptions`.

    Raises:
        UnknownOptionError: an option no control takes (the message names the closest).
        ValueError: a value its field refuses, or an interpolation's option given for another interpolation
            (named).
        TypeError: ``given`` is neither a mapping, options nor None.
    """
    base = ControlOptions() if base is None else base
    if given is None:
        return base
    if isinstance(given, ControlOptions):
        return given
    if not isinstance(given, Mapping):
        raise TypeError(
            f"control options must be a mapping of build_control keywords or a ControlOptions, got "
            f"{type(given).__name__}"
        )
    owners = interpolation_keywords()
    valid = control_option_names()
    for key in given:
        if key not in valid:
            raise UnknownOptionError(
                unknown_name_message("control option", key, valid, where=where, listing="valid control options")
            )
    interpolation = base.interpolation
    if "interpolation" in given:
        named = given["interpolation"]
        if not (isinstance(named, str) and named == interpolation_name(base.interpolation)):
            interpolation = parse_interpolation(named)  # another one (or a whole object): its own options
    own = type(interpolation).keywords()
    changes = {}
    for key, value in given.items():
        if key in owners:
            if key not in own:
                names = " or ".join(repr(name) for name in owners[key])
                raise ValueError(
                    f"{key} is an option of the {_titles(owners[key])} interpolation ({names}), not of "
                    f"a {interpolation.label} control (interpolation="
                    f"{interpolation_name(interpolation)!r})"
                )
            changes[own[key]] = value
    if changes:
        interpolation = dataclasses.replace(interpolation, **changes)
    fields = {key: value for key, value in given.items() if key in _OPTION_FIELDS and key != "interpolation"}
    return dataclasses.replace(base, interpolation=interpolation, **fields)


def _titles(names: list[str]) -> str:
    return " / ".join(interpolation_class(name).title or name for name in names)


def time_unit_value(
    time_unit, times: torch.Tensor, lengths: torch.Tensor | None, argument: str = "time_unit"
) -> float | None:
    """A ``time_unit`` setting as the number (or None) it stands for on the training times.

    Arguments:
        time_unit: None (times as given), a finite positive number, or ``"auto"``: the longest span of the training
            samples, ``observation_span(times, lengths)``.
        times: (N, T) training observation times.
        lengths: (N,) their valid steps per sample (None: all T).
        argument: the argument's name in messages.

    Returns:
        None or a positive float.

    Raises:
        ValueError: any other value, or ``"auto"`` on training samples that span no time.
    """
    if time_unit is None:
        return None
    if isinstance(time_unit, str):
        if time_unit != "auto":
            raise ValueError(f"{argument} must be None, a positive number or 'auto', got {time_unit!r}")
        if lengths is None:
            lengths = torch.full((times.shape[0],), times.shape[1], dtype=torch.long, device=times.device)
        span = observation_span(times, lengths)
        if not span > 0:
            raise ValueError(
                f"{argument}='auto': the training samples span no time (every sample has one "
                "observation time); give a number"
            )
        return float(span)
    if not (_finite_number(time_unit) and float(time_unit) > 0):
        raise ValueError(f"{argument} must be None, a positive number or 'auto', got {time_unit!r}")
    return float(time_unit)
