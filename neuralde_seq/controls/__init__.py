"""Controls: continuous paths X(s) built from irregularly sampled observations, what the CDE, ODE and RDE models read.

The room, one concept per module:

- `control`: the `Control` type (piecewise-cubic paths on shared knots);
- `interpolation`: the `Interpolation` base class, the registry of names (`register_interpolation`), and what the
  piecewise polynomial interpolations share; one module per kind of interpolation: `cubic` (`NaturalCubic`,
  `HermiteCubic`), `linear` (`Linear`, `Rectilinear`), `logsignature` (`LogSignature` windows);
- `options`: `ControlOptions` (every option in one typed object) and `parse_control_options`, the one reader of
  options written as keywords (configs, the model registry, the estimators' ``control_options``);
- `builder`: `build_control` (observations to the channels at their points, then the interpolation), and `control_of`
  (the same from an `Observations` batch checked when it was made, not checked again);
- `splines`: the vectorised natural cubic spline and linear fill through missing values;
- `logsignature_cache`: the disk cache of log-signature controls.

A new interpolation is a subclass of `Interpolation` (or `PolynomialInterpolation`) in its own module, registered
under its name with `register_interpolation` (docs/design.md#architecture).
"""

from .builder import build_control, control_of, observed_channels
from .control import Control
from .cubic import HermiteCubic, NaturalCubic
from .interpolation import (
    Interpolation,
    ObservedChannels,
    PolynomialInterpolation,
    interpolation_names,
    parse_interpolation,
    register_interpolation,
    registered_interpolation,
)
from .linear import Linear, Rectilinear
from .logsignature import LogSignature, logsignature_control
from .logsignature_cache import LogSignatureCacheError, cached_logsignature_control
from .options import MISSING_POLICIES, ControlOptions, control_option_names, parse_control_options, time_unit_value

__all__ = [
    "Control",
    "build_control",
    "control_of",
    "ControlOptions",
    "parse_control_options",
    "control_option_names",
    "Interpolation",
    "PolynomialInterpolation",
    "NaturalCubic",
    "HermiteCubic",
    "Linear",
    "Rectilinear",
    "LogSignature",
    "register_interpolation",
    "registered_interpolation",
    "interpolation_names",
    "parse_interpolation",
    "ObservedChannels",
    "observed_channels",
    "logsignature_control",
    "cached_logsignature_control",
    "LogSignatureCacheError",
    "time_unit_value",
    "MISSING_POLICIES",
]
