"""The registry of closed-form methods (`REFERENCE_METHODS`, name -> `ReferenceMethod`): the benchmark runner's
config rows and `reference_scores` name them. The practitioner's references and the toolkit's own random features
(`neuralde_seq.random_features`) are registered here.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from ..input_checks import did_you_mean, unknown_name_message
from ..random_features import RandomFeatureClassifier
from .base import _require
from .nearest_neighbour import NearestNeighbourClassifier
from .rocket import MiniRocketClassifier, MultiRocketHydraClassifier, QuantClassifier
from .summaries import SummaryFeatureClassifier

__all__ = [
    "ReferenceMethod",
    "REFERENCE_METHODS",
    "METHOD_KINDS",
    "register_reference_method",
    "reference_method",
    "create_reference",
]

METHOD_KINDS = ("reference", "random features")  # ReferenceMethod.kind


@dataclasses.dataclass(frozen=True)
class ReferenceMethod:
    """A closed-form (non-gradient) classifier usable as a row of the benchmark runner and in `reference_scores`.

    Attributes:
        name: the registry name (a config row's ``model``).
        estimator: the estimator class, or ``"module:Class"`` imported when first used. Its instances have
            ``fit(X, y, times=None)`` and ``predict(X, times=None)`` with X a list of (T_i, C) arrays (NaN where
            missing) and times a list of (T_i,) arrays, as the toolkit's scikit-learn estimators.
        options: fixed constructor arguments (e.g. ``{"distance": "dtw"}``); a config row cannot change them.
        seed_parameter: the constructor argument that receives the run's seed, or None (a deterministic method).
        requires: the optional modules it needs (checked before anything runs; ImportError with the install
            command when missing).
        description: one line for tables and listings.
        kind: what tables call it: "reference" (default: a practitioner's method, the honest reference) or
            "random features" (the toolkit's own closed-form mode, `neuralde_seq.random_features`).
    """

    name: str
    estimator: type | str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    seed_parameter: str | None = "random_state"
    requires: tuple[str, ...] = ()
    description: str = ""
    kind: str = "reference"

    def estimator_class(self) -> type[Any]:
        """The estimator class (imported from ``"module:Class"`` where given so)."""
        if isinstance(self.estimator, str):
            module, _, attribute = self.estimator.partition(":")
            return getattr(importlib.import_module(module), attribute)
        return self.estimator

    def option_names(self) -> tuple[str, ...]:
        """The constructor arguments a config row may set (not the fixed options nor the seed's)."""
        parameters = inspect.signature(self.estimator_class().__init__).parameters
        return tuple(
            p
            for p in parameters
            if p != "self"
            and p not in self.options
            and p != self.seed_parameter
            and parameters[p].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        )

    def defaults(self) -> dict:
        """The constructor's defaults with the fixed options (recorded in results, checked on resume)."""
        parameters = inspect.signature(self.estimator_class().__init__).parameters
        out = {
            p: v.default
            for p, v in parameters.items()
            if p not in ("self", self.seed_parameter) and v.default is not inspect.Parameter.empty
        }
        return {**out, **dict(self.options)}

    def check_available(self) -> None:
        """Raise ImportError naming the install command if a required optional module is missing."""
        for module in self.requires:
            _require(module, f"the {self.name} reference method")

    def create(self, seed: int | None = None, **options):
        """A new unfitted estimator with the fixed options, ``options`` and the seed.

        Arguments:
            seed: the seed (given to ``seed_parameter``; ignored by a deterministic method).
            **options: constructor arguments among `option_names`.
        """
        self.check_available()
        allowed = self.option_names()
        unknown = [k for k in options if k not in allowed]
        if unknown:
            hint = did_you_mean(str(unknown[0]), allowed)
            raise ValueError(
                f"unknown option(s) {', '.join(map(repr, unknown))} of reference method {self.name!r}; "
                f"{hint + ' ' if hint else ''}allowed: {', '.join(allowed)}"
            )
        kwargs = {**dict(self.options), **options}
        if self.seed_parameter is not None:
            kwargs[self.seed_parameter] = seed
        return self.estimator_class()(**kwargs)


REFERENCE_METHODS: dict[str, ReferenceMethod] = {}
"""The closed-form methods by name (`register_reference_method` adds one)."""


def register_reference_method(reference: ReferenceMethod, *, replace: bool = False) -> ReferenceMethod:
    """Add ``reference`` to `REFERENCE_METHODS` (so that config rows and `reference_scores` can name it).

    Arguments:
        reference: the `ReferenceMethod`.
        replace: allow replacing a reference method of the same name (default False: an error).

    Returns:
        ``reference``.

    Raises:
        ValueError: the name is taken (by a reference method, unless ``replace``, or by a registry model).
    """
    from ..models import MODEL_NAMES

    if reference.name in MODEL_NAMES:
        raise ValueError(f"reference method name {reference.name!r} is a model of the registry (MODEL_NAMES)")
    if reference.name in REFERENCE_METHODS and not replace:
        raise ValueError(f"a reference method named {reference.name!r} is already registered")
    if reference.kind not in METHOD_KINDS:
        raise ValueError(f"kind must be one of {METHOD_KINDS}, got {reference.kind!r}")
    REFERENCE_METHODS[reference.name] = reference
    return reference


def reference_method(name: str) -> ReferenceMethod:
    """The registered method ``name``.

    Arguments:
        name: a key of `REFERENCE_METHODS`.

    Raises:
        ValueError: an unknown name (the known ones are listed).
    """
    if name not in REFERENCE_METHODS:
        raise ValueError(unknown_name_message("reference method", name, REFERENCE_METHODS, listing="known"))
    return REFERENCE_METHODS[name]


def create_reference(name: str, seed: int | None = None, **options):
    """A new unfitted estimator of reference method ``name`` (`ReferenceMethod.create`).

    Arguments:
        name: a key of `REFERENCE_METHODS`.
        seed: the seed of a randomised method (MiniRocket's ``random_state``).
        **options: constructor arguments of the method's estimator.
    """
    return reference_method(name).create(seed, **options)


register_reference_method(
    ReferenceMethod(
        "minirocket",
        MiniRocketClassifier,
        requires=("aeon",),
        description="MiniRocket (aeon) + RidgeClassifierCV on the series interpolated onto a grid",
    )
)
register_reference_method(
    ReferenceMethod(
        "multirocket-hydra",
        MultiRocketHydraClassifier,
        requires=("aeon",),
        description="MultiRocket + Hydra (aeon) + ridge on the series interpolated onto a grid",
    )
)
register_reference_method(
    ReferenceMethod(
        "quant",
        QuantClassifier,
        requires=("aeon",),
        description="QUANT (aeon): interval quantiles + extra trees, on the series interpolated onto a grid",
    )
)
register_reference_method(
    ReferenceMethod(
        "1nn-euclidean",
        NearestNeighbourClassifier,
        {"distance": "euclidean"},
        seed_parameter=None,
        description="1-nearest neighbour, Euclidean distance, on the series interpolated onto a grid",
    )
)
register_reference_method(
    ReferenceMethod(
        "1nn-dtw",
        NearestNeighbourClassifier,
        {"distance": "dtw"},
        seed_parameter=None,
        requires=("aeon",),
        description="1-nearest neighbour, DTW distance (aeon, full window), on the series interpolated onto a grid",
    )
)
register_reference_method(
    ReferenceMethod(
        "summary-features",
        SummaryFeatureClassifier,
        description="per-channel summary statistics of the observed points (mean, std, min, max, first, last, slope, "
        "count, time since last) + LogisticRegressionCV",
    )
)
# The toolkit's own closed-form mode (not a reference): a frozen random model read out by ridge regression, on the
# irregular series themselves (no grid).
register_reference_method(
    ReferenceMethod(
        "random-features",
        RandomFeatureClassifier,
        kind="random features",
        description="frozen random slice-block reservoir of damped oscillators (the defaults), its features read out "
        "by closed-form ridge",
    )
)
register_reference_method(
    ReferenceMethod(
        "random-features-delta-rde",
        RandomFeatureClassifier,
        {"reservoir": "delta-rde"},
        kind="random features",
        description="frozen random delta-rde (CT-FWP) reservoir, its features read out by closed-form ridge",
    )
)
# The same reservoir trained (neuralde_seq.reservoir_tuning): a trained model that starts where random features end.
register_reference_method(
    ReferenceMethod(
        "random-features-tuned",
        RandomFeatureClassifier,
        {"fine_tune": True},
        kind="random features",
        description="the random-features reservoir and thresholds fine-tuned by the ridge readout's leave-one-out "
        "error, kept where it beats the untrained start on a held-out fifth of the training series",
    )
)
