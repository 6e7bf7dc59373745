"""What an interpolation is: the `Interpolation` base class, the registry of names, and what the piecewise polynomial
ones share.

An interpolation is an object carrying its own options (a frozen dataclass: ``LogSignature(depth=2, step=4)``,
``HermiteCubic()``) that builds a `Control` from the control's channels at the observation points
(`ObservedChannels`, made by `neuralde_seq.controls.builder.observed_channels`). Adding one is one class in one
module, a subclass of `Interpolation` (or of `PolynomialInterpolation`, which only computes the pieces), and one
`register_interpolation` call giving its name, which is how configs, estimator parameters and ``build_control``'s
keywords spell it (``interpolation="linear"``); its fields are then ``build_control`` keywords too.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from ..input_checks import UnknownOptionError, unknown_name_message
from .control import Control

__all__ = [
    "Interpolation",
    "PolynomialInterpolation",
    "ObservedChannels",
    "register_interpolation",
    "registered_interpolation",
    "interpolation_names",
    "interpolation_name",
    "interpolation_keywords",
    "interpolation_class",
    "parse_interpolation",
]


@dataclasses.dataclass
class ObservedChannels:
    """A control's channels at the observation points, before interpolation: what every interpolation's
    `Interpolation.build` starts from (made by `neuralde_seq.controls.builder.observed_channels`).

    Attributes:
        path: (B, T, C') the channels (time, values, masks, counts, as named) at the T points of the longest sample;
            NaN only in value channels with ``missing="interpolate"``. Points past a sample's length are padding.
        knots: (T,) strictly increasing parameter values s of the points (the shared time grid, or 0, 1, ..., T − 1).
        lengths: (B,) long, valid points per sample.
        names: (C',) channel names: "time" first when there is a time channel, then "x<c>", "mask<c>", "count<c>",
            "recency<c>".
    """

    path: torch.Tensor
    knots: torch.Tensor
    lengths: torch.Tensor
    names: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Interpolation:
    """How a control is built from its channels at the observation points. Subclasses are frozen dataclasses whose
    fields are their options, checked in ``__post_init__`` (errors name the field), and implement `build`.

    Class attributes a subclass may set:

    - ``windows``: its knots are window indices 0, 1, ... whatever ``parametrization`` says (log-signatures);
    - ``needs_time_channel``: why it refuses ``time_channel=False`` ("": it does not);
    - ``keyword_fields``: ``build_control`` keyword -> field, where the keyword is spelt otherwise than the field
      (``LogSignature``'s ``logsig_backend`` is its ``backend``);
    - ``title``: how messages name it (e.g. "log-signature"; default its registered name).
    """

    windows: ClassVar[bool] = False
    needs_time_channel: ClassVar[str] = ""
    keyword_fields: ClassVar[Mapping[str, str]] = {}
    title: ClassVar[str] = ""

    def build(self, observed: ObservedChannels) -> Control:
        """The control through the points.

        Arguments:
            observed: the channels at the points, (B, T, C').

        Returns:
            A `Control` of B samples, each ending at its own final knot and constant after it.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define build(observed)")

    @classmethod
    def keywords(cls) -> dict[str, str]:
        """Its ``build_control`` keywords: keyword -> field, one per field."""
        spelt = {field: keyword for keyword, field in cls.keyword_fields.items()}
        return {spelt.get(f.name, f.name): f.name for f in dataclasses.fields(cls)}

    def to_keywords(self) -> dict[str, Any]:
        """Its fields as ``build_control`` keywords (``interpolation=<name>`` and these build it)."""
        return {keyword: getattr(self, field) for keyword, field in self.keywords().items()}

    def to_dict(self) -> dict[str, Any]:
        """``{"type": <class name>, **fields}``, JSON-ready (tuples as lists); `parse_interpolation` reads it back."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {"type": type(self).__name__, **{k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}}

    @property
    def label(self) -> str:
        """Its name in messages: the title, else its registered name, else its class name."""
        return self.title or interpolation_name(self)


class PolynomialInterpolation(Interpolation):
    """An interpolation by polynomial pieces of degree at most 3 between the points: a subclass only computes the
    pieces (`pieces`); building the control around them (zero past each sample's end, held at its final value, the
    overflow check) is done here once.

    Class attributes a subclass may set: ``global_pieces`` (its pieces depend on every point of a sample, as a
    natural cubic spline's: `pieces` gets every sample at once with its length; otherwise the samples of one length
    are interpolated together on their own points, so that padding never enters a path) and
    ``pieces_per_interval`` (pieces between two points, with `piece_knots` the knots they start at).
    """

    global_pieces: ClassVar[bool] = False
    pieces_per_interval: ClassVar[int] = 1

    def pieces(self, path: torch.Tensor, knots: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """The coefficients a, b, c, d of ``a + b f + c f² + d f³`` on each piece, f the offset from its first knot.

        Arguments:
            path: (N, L, C) points, NaN where missing (interpolated through).
            knots: (L,) strictly increasing parameter values of the points.
            lengths: (N,) long, each sample's own number of points (its pieces from there on are zero): given to
                ``global_pieces`` interpolations only; the others get samples of one length L.

        Returns:
            (N, pieces_per_interval · (L − 1), 4, C) coefficients.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define pieces(path, knots, lengths)")

    def piece_knots(self, knots: torch.Tensor) -> torch.Tensor:
        """The knots of the pieces, given the points' knots (L,): those knots themselves (one piece per interval)
        unless ``pieces_per_interval`` says otherwise.

        Arguments:
            knots: (L,) the points' parameter values.

        Returns:
            (pieces_per_interval · (L − 1) + 1,) knots.
        """
        return knots

    def build(self, observed: ObservedChannels) -> Control:
        path, lengths = observed.path, observed.lengths
        knots = self.piece_knots(observed.knots)
        coeffs = _zero_pieces(path, knots.shape[0])
        if self.global_pieces:
            # One solve for every sample, each on its own valid prefix (padding never enters a global spline).
            coeffs[:, : knots.shape[0] - 1] = self.pieces(path, observed.knots, lengths)
        else:
            for sample_length in torch.unique(lengths).tolist():
                members = torch.nonzero(lengths == sample_length).flatten()
                pieces = self.pieces(path[members, :sample_length], observed.knots[:sample_length])
                coeffs[members, : pieces.shape[1]] = pieces
        return _spline_control(
            coeffs, knots, self.pieces_per_interval * (lengths - 1), observed.names, interpolation_name(self)
        )


def _zero_pieces(path: torch.Tensor, num_knots: int) -> torch.Tensor:
    """(B, K, 4, C') zero coefficients: one piece per knot interval, plus the constant piece past the last knot."""
    return torch.zeros(path.shape[0], num_knots, 4, path.shape[-1], dtype=path.dtype, device=path.device)


def _spline_control(
    coeffs: torch.Tensor, knots: torch.Tensor, end_index: torch.Tensor, names: tuple[str, ...], name: str
) -> Control:
    """The `Control` of interpolated pieces ``coeffs`` (B, K, 4, C') on ``knots`` (K,), each sample held at its
    value at its final knot ``knots[end_index[b]]`` from there on (modifies ``coeffs``)."""
    final = _value_at_end(coeffs, knots, end_index)
    after_end = torch.arange(coeffs.shape[1], device=coeffs.device).unsqueeze(0) >= end_index.unsqueeze(1)
    coeffs[after_end] = 0.0
    coeffs[:, :, 0] = torch.where(after_end.unsqueeze(-1), final.unsqueeze(1), coeffs[:, :, 0])
    check_finite(coeffs, knots, name)
    return Control(knots, coeffs, end_index, False, names)


def check_finite(coeffs: torch.Tensor, knots: torch.Tensor, name: str, why: str | None = None) -> None:
    """Refuse a path whose coefficients overflowed although its points are within the finite range.

    Arguments:
        coeffs: (B, K, 4, C) the control's coefficients.
        knots: (K,) its knots.
        name: the interpolation's name, for the message.
        why: what makes its coefficients large (default: the cubics' slopes and curvatures over the smallest gap).

    Raises:
        ValueError: a coefficient is not finite, naming the interpolation, the dtype and the remedies.
    """
    if bool(torch.isfinite(coeffs).all()):
        return
    if why is None:
        # A cubic's coefficients grow like (change of value) / gap³, so tiny gaps overflow first.
        gaps = knots[1:] - knots[:-1]
        why = (
            f"its slopes and curvatures scale like (change of value) / gap^3, and the smallest gap between "
            f"knots is {float(gaps.min()):.3g}"
        )
    raise ValueError(
        f"the {name} control's coefficients overflow in {coeffs.dtype}: {why}; standardise the "
        "values, rescale the times (units where observation gaps are about 1) or use "
        "parametrization='index', or compute in float64"
    )


def _value_at_end(coeffs, knots, end_index):
    last = (end_index - 1).clamp(min=0)
    piece = coeffs[torch.arange(coeffs.shape[0], device=coeffs.device), last]  # (B, 4, C)
    f = (knots[end_index] - knots[last]).unsqueeze(-1)
    a, b, c, d = piece.unbind(-2)
    return a + f * (b + f * (c + f * d))


# ---------------------------------------------------------------------------------------------------
# the registry of names: how configs, estimator parameters and build_control's keywords spell an interpolation

_REGISTRY: dict[str, type[Interpolation]] = {}
# build_control keywords that are not an interpolation's: ControlOptions' fields, which no interpolation field may
# shadow (set by neuralde_seq.controls.options, the module that defines them)
RESERVED_KEYWORDS: set[str] = {"interpolation"}


def register_interpolation(name: str, cls: type[Interpolation]) -> None:
    """Make an interpolation class buildable by name: ``build_control(..., interpolation=name, **its fields)``, a
    config row's ``control: {interpolation: name}``, an estimator's ``control_options``; and its dict form
    ``{"type": cls.__name__, ...}`` readable by `parse_interpolation`.

    Arguments:
        name: the name, a non-empty string not yet registered.
        cls: a subclass of `Interpolation` (a frozen dataclass whose fields all have defaults), not registered under
            another name, whose ``build_control`` keywords are not those of the control's other options.

    Raises:
        ValueError: an empty or taken name, a class registered already, or keywords that clash.
        TypeError: ``cls`` is not such a class.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"an interpolation's name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"interpolation name {name!r} is already registered")
    if not (isinstance(cls, type) and issubclass(cls, Interpolation) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"an interpolation must be a dataclass subclassing Interpolation, got {cls!r}")
    for other, registered in _REGISTRY.items():
        if registered is cls or registered.__name__ == cls.__name__:
            raise ValueError(
                f"{cls.__name__} is already registered as {other!r}: a class has one name (and "
                "interpolation classes distinct class names, which their saved form records)"
            )
    clash = sorted(set(cls.keywords()) & RESERVED_KEYWORDS)
    if clash:
        raise ValueError(
            f"{cls.__name__}'s fields {clash} are spelt as options of every control; rename them (or "
            "spell them otherwise with keyword_fields)"
        )
    _REGISTRY[name] = cls


@contextlib.contextmanager
def registered_interpolation(name: str, cls: type[Interpolation]):
    """`register_interpolation` for the duration of a ``with`` block (e.g. a test), removed on leaving it.

    Arguments:
        name: the interpolation's name, as `register_interpolation`.
        cls: its class, as `register_interpolation`.

    Yields:
        ``name``.
    """
    register_interpolation(name, cls)
    try:
        yield name
    finally:
        _REGISTRY.pop(name, None)


def interpolation_names() -> tuple[str, ...]:
    """The names registered now, in registration order (the built-in ones first).

    Returns:
        The names.
    """
    return tuple(_REGISTRY)


def interpolation_class(name: str) -> type[Interpolation]:
    """The class registered under ``name``.

    Arguments:
        name: a registered name.

    Returns:
        The class.

    Raises:
        ValueError: an unknown name, with the closest registered ones.
    """
    if name not in _REGISTRY:
        raise ValueError(unknown_name_message("interpolation", name, _REGISTRY, listing="interpolation must be one of"))
    return _REGISTRY[name]


def interpolation_name(interpolation: Interpolation) -> str:
    """The name an interpolation object's class is registered under (its class name where it is not registered).

    Arguments:
        interpolation: an `Interpolation` object.

    Returns:
        The name.
    """
    for name, cls in _REGISTRY.items():
        if type(interpolation) is cls:
            return name
    return type(interpolation).__name__


def interpolation_keywords() -> dict[str, list[str]]:
    """Every ``build_control`` keyword that belongs to a registered interpolation, with the names of those it
    belongs to.

    Returns:
        keyword -> registered names, in registration order.
    """
    found: dict[str, list[str]] = {}
    for name, cls in _REGISTRY.items():
        for keyword in cls.keywords():
            found.setdefault(keyword, []).append(name)
    return found


def parse_interpolation(value, argument: str = "interpolation") -> Interpolation:
    """An interpolation from any of its spellings: the object itself, its registered name (``"linear"``: the class
    with its defaults), or its dict form ``{"type": "LogSignature", "depth": 2, ...}`` (`Interpolation.to_dict`).

    Arguments:
        value: the spelling.
        argument: the argument's name in messages.

    Returns:
        The `Interpolation` object.

    Raises:
        ValueError: an unknown name or type, or a value that is none of the spellings.
        UnknownOptionError: a field the class does not have, in the dict form.
    """
    if isinstance(value, Interpolation):
        return value
    if isinstance(value, str):
        return interpolation_class(value)()
    if isinstance(value, Mapping) and "type" in value:
        classes = {cls.__name__: cls for cls in _REGISTRY.values()}
        kind = value["type"]
        if kind not in classes:
            raise ValueError(
                unknown_name_message(f"{argument} type", kind, classes, listing="registered interpolation classes")
            )
        cls = classes[kind]
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = [k for k in value if k != "type" and k not in fields]
        if unknown:
            raise UnknownOptionError(
                unknown_name_message(
                    "field", unknown[0], sorted(fields), where=f" of {argument} {kind}", listing="its fields"
                )
            )
        given = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items() if k != "type"}
        return cls(**given)
    raise ValueError(
        f"{argument} must be an Interpolation object (e.g. HermiteCubic()), one of the names "
        f"{', '.join(_REGISTRY)}, or a dict {{'type': <class name>, **fields}}, got {value!r}"
    )
