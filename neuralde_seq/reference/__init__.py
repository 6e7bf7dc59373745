"""Reference classifiers: what a practitioner tries first, beside the toolkit's neural models.

A table that compares only neural models hides how far they trail the methods a practitioner reaches for
first. This package puts those methods on the toolkit's data, reading exactly the series the neural rows read
(the same dropped observations, the same standardisation), so that every comparison can show them:

- ``minirocket``: the MiniRocket transform (aeon's ``MiniRocket``, 10,000 kernels, ``random_state=seed``)
  followed by ``StandardScaler(with_mean=False)`` and ``RidgeClassifierCV(alphas=np.logspace(-3, 3, 10))``
  on the features: aeon's own ``MiniRocketClassifier`` recipe (`MiniRocketClassifier`);
- ``1nn-euclidean``: one nearest neighbour in Euclidean distance (numpy, here; `NearestNeighbourClassifier`);
- ``1nn-dtw``: one nearest neighbour in dynamic time warping distance (aeon's ``dtw_pairwise_distance``:
  squared pointwise differences summed over channels, i.e. dependent multichannel DTW, full window);
- ``summary-features``: per channel, over its observed points only, the mean, standard deviation, min, max,
  first and last values, least-squares slope against time, observation count and time since the last
  observation (`summary_features`), standardised and read by ``LogisticRegressionCV`` (L2 penalty chosen by
  stratified cross-validation; `SummaryFeatureClassifier`): the practitioner's first try on records (few,
  irregular observations per channel, as in clinical data), as MiniRocket is on series. It reads the
  irregular series themselves, without the grid below.

**From irregular series to a grid** (`to_grid`). The grid methods need equal-length arrays (N, C, L), so the
irregular series (times (N, T), values (N, T, C) with NaN where missing or dropped, lengths (N,)) are put on
a regular grid the way a user would:

1. the grid of sample i is, by default (``span="sample"``), ``L`` equally spaced times from its own first to
   its own last time point, ``times[i, 0]`` to ``times[i, lengths[i] - 1]`` (points whose values were all
   dropped keep their times, so the span is the series' original span). ``L`` is the longest training series in
   the training data's median time step, its span over that step plus one (``grid_length=None``; the number of
   points of a regular series, also when it is given as its kept points with their times). Why this grid: every
   bundled UCR/UEA series has the observation index as its times, so for equal-length data this grid *is* the
   original sampling grid: kept observations are reproduced exactly and only the dropped points are filled in,
   which is "interpolating the dropped series back onto the grid". For variable-length data (JapaneseVowels,
   PickupGestureWiimoteZ) every series is stretched onto L points (uniform scaling, the usual way to make such
   series equal-length). ``span="common"`` instead puts every series on one grid spanning the training data's
   earliest first time to its latest last time, for data whose absolute times matter (a shorter series is then
   held constant after its end);
2. each channel is interpolated linearly in time through its own observed points (``numpy.interp``), and
   held constant before its first and after its last observation (constant extrapolation);
3. a channel never observed in a sample is filled with ``fill_value``: in the estimators, the mean of the
   channel's observed values in the data they were fitted on (the training mean; 0 for standardised data,
   which is what the benchmark runner's tasks give).

Nothing is dropped: every sample and channel of the input is on the grid, and a bad input raises
``ValueError`` naming the argument.

**The estimators** follow scikit-learn's conventions (``get_params``, ``clone``, ``score``) and the toolkit's
estimators' input forms (`neuralde_seq.sklearn`): ``fit(X, y, times=None)``, ``predict(X, times=None)``,
where X is a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array with NaN marking missing values,
or an `IrregularDataset` (whose ``labels`` are then the default ``y``). The grid length, span and fill values
are fixed at ``fit`` and reused at prediction.

**The registry** (`REFERENCE_METHODS`, name -> `ReferenceMethod`) lets the benchmark runner use any such
closed-form method as a config row (``{"label": "minirocket", "model": "minirocket"}``): a method is an
estimator class with ``fit(X, y, times=None)`` / ``predict(X, times=None)``, its fixed options and the name of
its seed argument. Another method is registered with one line, e.g.
``register_reference_method(ReferenceMethod("reservoir", RandomFeatureClassifier, {"width": 512},
description="..."))``.

**For Python users**, `reference_scores` ``(train, test, references, seed)`` fits each method on ``train`` and
returns its test accuracy and wall times.

aeon is an optional dependency (``pip install "neuralde_seq[reference]"``); importing this package does not
import it, ``1nn-euclidean`` and ``summary-features`` do not need it, and ``minirocket`` and ``1nn-dtw``
without it raise ``ImportError`` saying how to install it.

**Rooms** (the names in ``__all__`` are also importable from this package):

- `neuralde_seq.reference.base`: what every reference estimator shares (the optional aeon, reading X, labels);
- `neuralde_seq.reference.grid`: `to_grid` and the grid-based estimators' common part;
- `neuralde_seq.reference.rocket`: `MiniRocketClassifier`, `MiniRocketRegressor`, `MultiRocketHydraClassifier`,
  `QuantClassifier` (aeon's transforms and classifiers on the grid);
- `neuralde_seq.reference.nearest_neighbour`: `NearestNeighbourClassifier` (Euclidean and DTW);
- `neuralde_seq.reference.summaries`: `summary_features` and `SummaryFeatureClassifier` (no grid);
- `neuralde_seq.reference.registry`: `ReferenceMethod` and `REFERENCE_METHODS`, with every built-in method
  registered, the toolkit's random features among them;
- `neuralde_seq.reference.scoring`: `fit_reference`, `evaluate_reference`, `warm_up`, `SeedEnsemble`,
  `reference_scores`.
"""

from .base import INSTALL_HINT
from .grid import to_grid
from .nearest_neighbour import NearestNeighbourClassifier
from .registry import (
    METHOD_KINDS,
    REFERENCE_METHODS,
    ReferenceMethod,
    create_reference,
    reference_method,
    register_reference_method,
)
from .rocket import (
    MINIROCKET_KERNEL_SET,
    MINIROCKET_MIN_LENGTH,
    MiniRocketClassifier,
    MiniRocketRegressor,
    MultiRocketHydraClassifier,
    QuantClassifier,
)
from .scoring import (
    DEFAULT_REFERENCE_METHODS,
    ReferenceFit,
    SeedEnsemble,
    as_arrays,
    evaluate_reference,
    fit_reference,
    reference_scores,
    warm_up,
)
from .summaries import SUMMARY_STATISTICS, SummaryFeatureClassifier, summary_feature_names, summary_features

__all__ = [
    "to_grid",
    "MiniRocketClassifier",
    "MultiRocketHydraClassifier",
    "QuantClassifier",
    "MiniRocketRegressor",
    "NearestNeighbourClassifier",
    "SummaryFeatureClassifier",
    "summary_features",
    "summary_feature_names",
    "SUMMARY_STATISTICS",
    "ReferenceMethod",
    "REFERENCE_METHODS",
    "register_reference_method",
    "reference_method",
    "create_reference",
    "reference_scores",
    "fit_reference",
    "ReferenceFit",
    "evaluate_reference",
    "as_arrays",
    "warm_up",
    "SeedEnsemble",
    "DEFAULT_REFERENCE_METHODS",
    "INSTALL_HINT",
    "METHOD_KINDS",
    "MINIROCKET_MIN_LENGTH",
    "MINIROCKET_KERNEL_SET",
]

# The classes whose instances are fitted and kept carry this package's path, the one users import them from: messages
# and pickles name neuralde_seq.reference.<Class>, which stays valid whichever room the class lives in.
for _kept in (
    MiniRocketClassifier,
    MiniRocketRegressor,
    MultiRocketHydraClassifier,
    QuantClassifier,
    NearestNeighbourClassifier,
    SummaryFeatureClassifier,
    SeedEnsemble,
):
    _kept.__module__ = __name__
del _kept
