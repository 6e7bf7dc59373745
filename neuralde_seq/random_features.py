"""Random-feature (reservoir) mode: a frozen, randomly initialised model maps each series to features, read out by
a closed-form ridge regression. One forward pass, no backpropagation.

The state of a random linear CDE read out linearly is the "randomized signature" of reservoir computing (Cuchiero,
Gonon, Grigoryeva, Ortega & Teichmann; Compagnoni et al. 2023): the toolkit's structured linear CDEs
(`LinearCDE`, registry ``slice-*``), neural CDEs (``ncde``, ``nrde``, ``log-ncde``) and CT-FWPs (``*-cde``,
``*-ode``, ``*-rde``) serve as reservoirs, and the path's log-signatures as a non-random baseline
(``reservoir="logsignature"``).

Pieces:

- `RidgeReadout`: ridge regression in closed form, float64 torch, with the penalty chosen from a grid by exact
  leave-one-out error (the generalised cross-validation of scikit-learn's ``RidgeCV``/``RidgeClassifierCV``, from an
  eigendecomposition of the Gram matrix when samples <= features and of the covariance matrix otherwise);
  classification by one-vs-all ±1 targets as ``RidgeClassifier``.
- `RandomFeatures`: the feature map (``fit`` on training observations, ``transform`` any).
- `RandomFeatureClassifier`, `RandomFeatureRegressor`: scikit-learn estimators (also in `neuralde_seq.sklearn`),
  with the conventions of `SequenceClassifier` (X forms, ``times=``, channel standardisation, ``random_state``,
  ``n_jobs``, ``device``/``dtype``); the classifier's probabilities are its decision values at one temperature
  fitted to the readout's leave-one-out decisions.

What `RandomFeatures.fit` does, in order:

1. **Scale.** A reservoir's state must neither stay at the identity nor overflow, and what decides that is how far
   and how roughly the path moves (docs of `neuralde_seq.models.linear_cde`, "Scale"). The times and each value
   channel are divided by their `path_scales` on the training observations (the larger of the channel's spread
   and the scale that brings its mean quadratic variation to 10), then multiplied by ``input_scale``; the model's
   input is built from these (``model_inputs(reservoir, ...)``, ``parametrization="index"`` unless
   ``control_options`` says otherwise). A linear CDE reservoir then gets ``channel_scales`` 1.
2. **Model.** ``create_model(reservoir, inputs, 2, **model_options)`` under ``torch.manual_seed(seed)`` (torch's
   global random state is restored afterwards), ``width`` its size (``hidden`` of linear CDEs and NCDEs, ``d_model``
   of CT-FWPs; NCDE fields at PyTorch's initial scale, ``field_init_scale=1``, unless ``model_options`` gives
   one: log-ncde's registry field starts 1,000 times smaller, for training); every parameter gets
   ``requires_grad=False``, the model ``eval()``, and features are computed under ``torch.no_grad()``.
3. **Memory (linear CDEs).** With ``timescales=(τ_min, τ_max)`` (default ``(2, None)``: 2 knots to the longest
   training series), the time channel's matrix A_0 is set in units of Δt, the median time step of the training
   input (on a regular grid, one Euler step of the time channel is then the written-out per-knot factor), by
   ``memory``:

   - ``"decay"`` (every linear CDE): A_0 diagonal with entries (λ_j − 1)/Δt, λ_j = exp(−1/τ_j) for τ_j
     log-uniform in [τ_min, τ_max]: unit j is a low-pass filter forgetting by λ_j per knot, so the units see the
     series at every scale from a few knots to all of it (a random linear CDE's own A_0 makes every unit
     remember the whole series, and its states are then close to linear functionals of the whole path);
   - ``"oscillation"`` (``slice-block`` only, its default; block_size 2): each 2×2 block of A_0 is
     (ρ_j R(ω_j) − I)/Δt, R the rotation: pair j is a damped oscillator, a band-pass filter turning by ω_j and
     shrinking by ρ_j per knot, its period 2π/ω_j log-uniform in [2τ_min, τ_max] and its decay time half to
     twice that period (at least τ_min), ρ_j lowered where needed so that an Euler step over a gap of 3 median
     steps (2 for periods under 12 knots) does not expand (`_non_expanding_radius`; an irregular series' gaps
     would otherwise make fast oscillators grow). MiniRocket's dilated kernels are band-pass pattern detectors
     at many scales, and the proportion of time an oscillator spends above a threshold is their "ppv".
     A share ``fast_share`` of the pairs (default 1/3: with the default width 1,536, 256 fast pairs beside 512
     spread ones) is fast and nearly memoryless instead: periods log-uniform in [2τ_min, 6τ_min] (4-12 knots)
     and ρ_j = 0.3 (or the non-expanding bound where lower), units that respond to the path's last few
     increments, as MiniRocket's short zero-sum kernels do (ACSF1's spikes).

   The value channels' A_i keep their random draw, which gives the signature's higher levels.
4. **Features** of the states h (B, K, H) at the control's knots (each sample's own knots 0..end only), in the order
   given by ``features``:

   - ``"final"``: h at the sample's final knot (H);
   - ``"mean"``: the mean of h over the sample's knots (H);
   - ``"times"``: h at the fractions 1/n, 2/n, ..., 1 of the sample's knots, n = ``num_times`` (n·H; the last is
     the final state);
   - ``"ppv"``: for each of ``num_biases`` thresholds per unit, the proportion of the sample's knots at which
     h exceeds it (MiniRocket's "proportion of positive values"); the thresholds are quantiles, drawn uniformly in
     [0.25, 0.75] per unit, of the unit's states over the knots of up to 16 training series;
   - ``"mpv"``: for each of the same thresholds, the mean of h − b over the knots at which h exceeds b (0 where it
     never does; MultiRocket's "mean of positive values", `positive_mean`);
   - ``"max"``: the largest h over the sample's knots (H);
   - ``"values"``: the series' own values (rescaled, missing ones linearly interpolated) at the same fractions,
     and their mean over the knots ((n + 1)·C);
   - ``"levels"``: the distribution of the series' own levels, read as "ppv" and "mpv" read a unit: for each
     channel and each of ``num_levels`` thresholds (the channel's training quantiles at (k + 1/2) / num_levels,
     ``levels_``), the proportion of the sample's knots at which the (rescaled, interpolated) value exceeds the
     threshold and the mean excess there, and that proportion over each of the n consecutive parts of the series
     between the fractions (C · num_levels · (n + 2)). The reservoir reads the path's increments, so its states
     carry little of the level itself; QUANT's interval quantiles showed what levels are worth (ACSF1, 82 %).

   For ``"logsignature"``: ``"final"`` is the depth-``depth`` log-signature of the whole (time, values) path,
   ``"times"`` the log-signatures of the path from its start to each fraction, ``"windows"`` those of the n
   consecutive windows between the fractions, and ``"values"`` as above (``model_options``: ``depth`` (default
   3), ``backend`` (default "torch" for depth <= 2, else "pysiglib")).

The readout standardises every feature with its training mean and standard deviation.

**How the features are computed.** For a linear CDE reservoir, diagonal or of 2×2 blocks (the default oscillators),
on a CPU, with features among "final", "mean", "max", "ppv", "mpv" (and the path's own "values" and "levels"),
one compiled pass per series
(`neuralde_seq.ops.reservoir_features`, numba) steps the state knot by knot and adds up the features as it goes,
without storing a state: 15-30 times faster than forming every state with torch (`states`, `pooled`), which is the
path on a GPU (the parallel scan), for the other reservoirs and features, and for a fine-tuned map's smooth "ppv";
the two give the same features (tests/test_reservoir_features.py). The thresholds' states of the 16 series are formed
only at the 1,024 chosen knots per unit.

The defaults since issue 35: features "ppv", "mpv" and "levels" (each decided on one half of aeon's suite and
confirmed on the other), the fused pass, thresholds from 1,024 states per unit (4,096 before): 92.0 % against
MiniRocket's 91.5 % on the suite at 0.83-0.97 of its wall time (docs/benchmarks.md, "Random features beyond
MiniRocket", where the current measurements are). The table below predates them: its defaults read "ppv" alone and
its seconds are those of the torch loop.

Measured (benchmarks/random_features.py: aeon's bundled sets, 30 % of every series' points dropped, TRAIN drop seed 0,
TEST drop seed 1, the whole TRAIN file fitted; test accuracy %, mean of reservoir seeds 0-2 where marked (3), else
seed 0; seconds for fit and prediction on ACSF1 on one shared CPU thread):

| reservoir (width) | features | ACSF1 | OSULeaf | ArrowHead | GunPoint | mean | ACSF1 s |
| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |
| slice-block (1536), oscillators, a third fast, **the defaults** (3) | ppv | 71.0 | 94.8 | 83.4 | 98.4 | 86.9 | 13-14 |
| slice-block (1280), oscillators, a fifth fast (3) | ppv | 67.7 | 94.6 | 83.8 | 98.4 | 86.1 | 11-12 |
| slice-block (1024), oscillators, a quarter fast (3) | ppv | 69.0 | 94.1 | 82.1 | 98.4 | 85.9 | 9 |
| slice-block (1024), oscillators, 3/8 fast (3) | ppv | 73.0 | 94.1 | 81.1 | 98.4 | 86.7 | 9 |
| slice-block (1024), oscillators, a quarter fast, values ×4 (3) | ppv | 72.7 | 94.9 | 82.9 | 98.9 | 87.3 | 9 |
| slice-block (1024), oscillators, values ×4 (3) | ppv | 68.7 | 94.6 | 83.2 | 99.3 | 86.5 | 9 |
| slice-block (1024), oscillators, no fast units, the defaults before (3) | ppv | 59.7 | 94.6 | 85.3 | 98.7 | 84.6 | 9-10 |
| slice-block (1024), oscillators (3) | ppv, values | 60.3 | 94.4 | 85.5 | 98.7 | 84.7 | 10 |
| slice-block (1024), oscillators (3) | ppv, mean | 56.7 | 93.3 | 84.0 | 98.0 | 83.0 | 10 |
| slice-block (1024), oscillators, gap clamp 2 only (3) | ppv | 59.7 | 93.5 | 87.0 | 97.6 | 84.4 | 9 |
| slice-block (1024), oscillators, no gap clamp | ppv | 51.0 | 93.0 | 85.7 | 100.0 | 82.4 | 10 |
| slice-diag (1024), decay, the defaults before oscillators (3) | ppv, mean | 58.3 | 75.6 | 71.4 | 98.7 | 76.0 | 7-13 |
| slice-diag (1024) (3) | ppv, mean, values | 58.3 | 76.0 | 71.6 | 98.7 | 76.2 | 7 |
| slice-diag (1024) (3) | ppv | 61.0 | 70.8 | 59.4 | 98.7 | 72.5 | 7 |
| slice-diag (1024) (3) | ppv, mean, times | 41.3 | 73.4 | 74.9 | 98.7 | 72.1 | 7 |
| slice-diag (1024) | final / mean / times | 35/36/25 | 55/72/53 | 50/54/74 | 66/94/80 | 51/64/58 | 9 |
| slice-diag (1024), random A_0 (timescales=None) | ppv, mean | 33.0 | 57.0 | 78.9 | 96.7 | 66.4 | 11 |
| slice-diag (256) (3) | ppv, mean | 55.3 | 74.5 | 69.5 | 99.3 | 74.7 | 2 |
| slice-block (1024), decay (3) | ppv, mean, values | 59.0 | 78.1 | 70.1 | 99.3 | 76.6 | 12-16 |
| slice-dplr (1024) | ppv, values | 62.0 | 74.0 | 74.3 | 99.3 | 77.4 | 24 |
| slice-dense (128) | ppv, mean, values | 50.0 | 76.4 | 74.3 | 98.7 | 74.8 | 31 |
| delta-rde (64, exact) (3) | ppv, values | 46.7 | 70.0 | 70.3 | 96.2 | 70.8 | 0.9 |
| delta-cde (64) | all five | 36.0 | 64.5 | 76.6 | 90.7 | 66.9 | 8 |
| ncde (128, input_scale 4) | ppv, mean | 43.0 | 40.9 | 73.1 | 85.3 | 60.6 | 5 |
| logsignature (depth 4) | times, windows | 15.0 | 38.4 | 72.0 | 96.7 | 55.5 | 0.2 |
| MiniRocket + ridge (issue 23, same protocol) | | 78.0 | 95.5 | 85.1 | 99.3 | 89.5 | 4-30 |

Commands (from benchmarks/, with ``OMP_NUM_THREADS=1``): ``python random_features.py --rows defaults --seeds
0,1,2``; ``python random_features.py --rows oscillators-1024 --seeds 0,1,2 --feature-sets
ppv,ppv+mean,ppv+values,ppv+mean+values`` (oscillators without fast units); the rows with fast units ``python
random_features.py --rows oscillators-1280-fast20,oscillators-1024-fast25,oscillators-1024-fast37 --seeds 0,1,2
--feature-sets ppv`` (measured as `RandomFeatureClassifier` with these options and features "ppv", the same
numbers); the "values ×4" rows were a prototype (not kept) dividing the value channels' scales by 4 (not the
time channel's), in the first with a random quarter of the pairs fast at ρ = 0.3 without the non-expanding bound;
the "gap clamp 2 only" and "no gap clamp" rows were a prototype (not kept) of the same A_0, period and decay
draws, with ρ lowered until a gap of 2 steps does not expand (about ρ <= cos ω), or not lowered.

Reading. Fast, nearly memoryless oscillators (a third of the pairs, added to the 1,024 spread ones) gain ACSF1
11.3 points (59.7 → 71.0; MiniRocket 78.0) for −0.7 on the other three sets' mean (OSULeaf +0.2, ArrowHead −1.9,
GunPoint −0.3) and 40 % more time: ACSF1's classes differ by spikes of a few samples, which slow oscillators
smooth over and MiniRocket's short kernels catch. Taken from the 1,024 units instead of added, the same share
costs ArrowHead 3-4 points. Larger value channels (×4) help as much but make the states grow exponentially along
long noisy series (a 1,500-knot sine with noise: 1e13 at ×4, 2 at ×1; the value channels' random A_i), so they
are not an option. Also measured, not kept (ACSF1 alone, 3 seeds, before fast units): 3 "ppv" thresholds per unit
60.0, the path's slopes as a second input channel 58.7, values ×0.5 59.7, ×2 65.3.

Damped oscillators (``memory="oscillation"``, the default) gain 8.6 points on average over low-pass units
(OSULeaf +19, ArrowHead +14, ACSF1 +1.4, GunPoint 0) at the same cost: band-pass units respond to shape at a scale,
not to level, as MiniRocket's kernels (whose weights sum to zero), and the gap left to MiniRocket is now ACSF1's
(−18; OSULeaf −1, ArrowHead 0, GunPoint −0.6). Without lowering ρ where an irregular gap would make an Euler step
expand, ACSF1 (1,460 knots) loses 9 points. With oscillators "mean" no longer helps "ppv". For low-pass units:
what serves best are the proportions of time each unit spends above a threshold ("ppv", MiniRocket's
pooling): the states' means, the final state and the states at a few times are close to linear functionals of the
path (their readout is nearly a linear classifier of the smoothed series), and alone they trail "ppv" by 8-21
points on average; "times" helps on the short ArrowHead and hurts on the long ACSF1 (4 × 1,024 noisy local states
for 100 series). Memory matters most: a random linear CDE's own A_0 lets every unit remember the whole series
(−10 points on average, −26 on ACSF1). The diagonal reservoir is within about a point of the block and DPLR ones
(the dense one 1.5 behind) at half to a quarter of their time; widths beyond 1,024
do not help (4,096: 74.7). The CT-FWP (delta-rde, exact solver) is the fastest reservoir and 5 points behind, the
random NCDE 15 behind, and log-signatures of 4-16 windows miss the local shapes of long series (ACSF1 at chance).
Before oscillators the best random features stayed 13 points behind MiniRocket on average (ACSF1 −20, OSULeaf
−20, ArrowHead −14, GunPoint 0); with them 4.9 behind, and above the trained toolkit models on these sets
(docs/benchmarks.md, 20 % of TRAIN held out: ACSF1 45.7-51.3 %, OSULeaf 66.5 %, ArrowHead 58.7-68.2 %) in seconds.
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.metrics import accuracy_score, r2_score
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, column_or_1d

from .controls import Control, build_control
from .data.transforms.sampling import fill_gaps, median_step
from .data.transforms.standardisation import channel_statistics
from .estimator_inputs import (check_channels_like_fit, check_label_types, check_times_like_fit, estimator_dtype,
                               estimator_seed, read_sequences, standardised, threads_for_jobs)
from .input_checks import did_you_mean
from .models import FastWeightClassifier, LinearCDE, MODEL_NAMES, NeuralCDE, create_model, model_entry, model_inputs
from .models import control_options as registry_control_options
from .models.linear_cde import _pieces, path_scales
from .ops.reservoir_features import POOLED_FEATURES, fused_available, fused_features, fused_states
from .signatures import logsignature
from .solvers import solve
from .reservoir_tuning import FineTuning, fine_tune
from .training.input_spec import check_fill_gaps, warn_unobserved
from .training.objectives import ModelArguments
from .training.threads import torch_threads

__all__ = ["RidgeReadout", "RandomFeatures", "reservoir_states", "positive_proportion", "RandomFeatureClassifier", "RandomFeatureRegressor", "RESERVOIRS",
           "FEATURES", "MEMORIES", "DEFAULT_ALPHAS", "DEFAULT_FEATURES", "DEFAULT_OSCILLATION_FEATURES",
           "DEFAULT_LOGSIGNATURE_FEATURES"]

# The registry models whose per-knot state a reservoir reads, and the option that sets their width.
_WIDTH_OPTION = {LinearCDE: "hidden", NeuralCDE: "hidden", FastWeightClassifier: "d_model"}
# Reservoir widths by default (benchmarks/random_features.py): a reservoir wants more units than a trained model.
# Dense linear CDEs cost H² per unit step, CT-FWPs give d_model²/8 numbers per state.
_DEFAULT_WIDTHS = {"linear": 1024, "dense": 128, NeuralCDE: 128, FastWeightClassifier: 64}
# Oscillators: 1,024 units spread over all periods plus fast_share's third of fast ones (benchmarks: the fast pairs
# added to the slow ones, not taken from them, keep OSULeaf and ArrowHead).
_DEFAULT_OSCILLATION_WIDTH = 1536
RESERVOIRS = tuple(name for name in MODEL_NAMES if model_entry(name).constructor in _WIDTH_OPTION) + ("logsignature",)
FEATURES = ("final", "mean", "times", "ppv", "mpv", "max", "values", "levels", "windows")
# Features of the path itself, not of the reservoir (computed beside it; a log-signature map reads them too).
PATH_FEATURES = ("values", "levels")
DEFAULT_FEATURES = ("ppv", "mean")
DEFAULT_OSCILLATION_FEATURES = ("ppv", "mpv", "levels")
DEFAULT_LOGSIGNATURE_FEATURES = ("final", "windows")
# The penalties searched: wide, since the features' number (hundreds to thousands) sets the Gram matrix's scale.
DEFAULT_ALPHAS = tuple(float(a) for a in np.logspace(-3, 5, 17))
MEMORIES = ("decay", "oscillation")
# Oscillators' decay times in periods: a Q factor of about 1.5-6, the few cycles of a band-pass kernel.
_OSCILLATION_DECAY_PERIODS = (0.5, 2.0)
# Gaps (in median steps) over which an oscillator's Euler step must not expand (`_non_expanding_radius`).
_OSCILLATION_GAP = 3
# Fast, nearly memoryless oscillators (``fast_share`` of the pairs): periods log-uniform in this range, in units of
# τ_min (4-12 knots by default), shrinking by this radius per knot (at most; `_non_expanding_radius` still applies).
# They respond to the path's local increments, as MiniRocket's zero-sum kernels (ACSF1's spikes).
_FAST_PERIODS = (2.0, 6.0)
_FAST_RADIUS = 0.3
# fast_share "auto" with memory="oscillation" (benchmarks/random_features.py), else 0.
_OSCILLATION_FAST_SHARE = 1.0 / 3.0
_BIAS_SERIES = 16  # training series whose states give the "ppv" thresholds
_BIAS_POINTS = 1024  # states per unit they are drawn from, at most
# Series per forward pass are fewer than batch_size where their states (B·K·H numbers) would pass this: 1,024 units
# over 18,000 knots (EigenWorms) are 7e7 numbers per series.
_STATE_BUDGET = 2**25


# ------------------------------------------------------------------------------------------------ ridge readout

def _float64(array, device=None, name: str = "features") -> torch.Tensor:
    """``array`` (tensor or array-like) as a float64 tensor, on its own device (tensors) or ``device``."""
    if isinstance(array, torch.Tensor):
        tensor = array.detach()
        if not (tensor.is_floating_point() or tensor.dtype in (torch.int32, torch.int64, torch.bool)):
            raise TypeError(f"{name} must be real numbers, got a {tensor.dtype} tensor")
        return tensor.to(torch.float64)
    try:
        values = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be real numbers: {error}") from None
    return torch.as_tensor(values, device=device)


class RidgeReadout:
    """Ridge regression in closed form with the penalty chosen by exact leave-one-out error (float64 torch).

    For standardised features Z (N, P) (centred with an intercept) and targets Y (N, k), the weights for
    penalty α are W = (ZᵀZ + αI)⁻¹ Zᵀ Y_c, the intercept unpenalised. The leave-one-out residual of sample i
    is r_i / (1 − H_ii), r the training residual and H the hat matrix (with an intercept
    1/N + Z (ZᵀZ + αI)⁻¹ Zᵀ): both come from one eigendecomposition, of the Gram matrix ZZᵀ when N <= P and
    of ZᵀZ otherwise, for all α at once. The α with the least mean squared leave-one-out error over samples
    and targets is kept (the first of equals); this is scikit-learn's ``RidgeCV``/``RidgeClassifierCV`` with
    ``cv=None`` (tests/test_random_features.py checks both).

    Classification (``classification=True``): integer labels become one-vs-all targets, +1 for the sample's class
    and −1 elsewhere (one column, +1 for the larger class, with two classes), as scikit-learn's
    ``RidgeClassifier``; the predicted class is the largest decision value (its sign with two classes).

    Arguments:
        alphas: the penalties α searched, a positive number or a non-empty sequence of them (default
            `DEFAULT_ALPHAS`, 17 values from 1e-3 to 1e5).
        classification: targets are class labels (default False: real targets).
        standardize: divide each feature, centred, by its training standard deviation (default True; a constant
            feature is only centred).
        fit_intercept: fit an unpenalised intercept (default True).

    Fitted attributes (torch float64 tensors on the features' device): ``alpha_`` (float), ``cv_errors_``
    (n_alphas,) mean squared leave-one-out error per α, ``best_score_`` (−its least value), ``coef_`` (P, k) and
    ``intercept_`` (k,) in the original feature units, ``feature_mean_`` and ``feature_scale_`` (P,),
    ``n_features_in_``; ``classes_`` (K,) long, the sorted labels, for classification.
    `leave_one_out_decision_function` gives the training samples' leave-one-out outputs at ``alpha_``.
    """

    def __init__(self, alphas=DEFAULT_ALPHAS, *, classification: bool = False, standardize: bool = True,
                 fit_intercept: bool = True):
        grid = np.atleast_1d(np.asarray(alphas, dtype=np.float64)) if _is_numeric(alphas) else None
        if grid is None or grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
            raise ValueError(f"alphas must be a positive number or a non-empty 1-D sequence of positive finite "
                             f"numbers, got {alphas!r}")
        self.alphas = tuple(float(a) for a in grid)
        self.classification = bool(classification)
        self.standardize = bool(standardize)
        self.fit_intercept = bool(fit_intercept)

    def _features(self, features) -> torch.Tensor:
        F = _float64(features, name="features")
        if F.dim() != 2 or F.shape[0] == 0 or F.shape[1] == 0:
            raise ValueError(f"features must have shape (N, P) with N, P >= 1, got {tuple(F.shape)}")
        if not bool(torch.isfinite(F).all()):
            raise ValueError("features hold NaN or infinite values")
        return F

    def fit(self, features, targets) -> "RidgeReadout":
        """Fit the readout and choose α.

        Arguments:
            features: (N, P) real features (tensor or array; N >= 2).
            targets: (N,) integer labels (classification, at least 2 distinct), or (N,) / (N, k) real targets.

        Returns:
            self, fitted.

        Raises:
            ValueError: bad shapes, non-finite values, fewer than 2 samples or classes.
        """
        F = self._features(features)
        n, p = F.shape
        if n < 2:
            raise ValueError(f"features must hold at least 2 samples to fit and cross-validate, got n_samples={n}")
        Y = self._targets(targets, n, F.device)
        if self.fit_intercept:
            mean = F.mean(dim=0)
        else:
            mean = torch.zeros(p, dtype=F.dtype, device=F.device)
        if self.standardize:
            scale = (F - F.mean(dim=0)).square().mean(dim=0).sqrt()
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        else:
            scale = torch.ones(p, dtype=F.dtype, device=F.device)
        Z = (F - mean) / scale
        y_mean = Y.mean(dim=0) if self.fit_intercept else torch.zeros(Y.shape[1], dtype=Y.dtype, device=Y.device)
        Yc = Y - y_mean
        alphas = torch.tensor(self.alphas, dtype=F.dtype, device=F.device)
        leverage_floor = 1.0 / n if self.fit_intercept else 0.0  # the intercept's share of every hat-matrix diagonal
        if n > p:
            # covariance mode: ZᵀZ = V diag(λ) Vᵀ; with U = Z V, H = U diag(1/(λ+α)) Uᵀ
            eigenvalues, V = torch.linalg.eigh(Z.T @ Z)
            U = Z @ V
            U_y = U.T @ Yc
            U_sq = U.square()
        else:
            # Gram mode: ZZᵀ = Q diag(λ) Qᵀ; H = Q diag(λ/(λ+α)) Qᵀ, W = Zᵀ Q diag(1/(λ+α)) Qᵀ Y_c
            eigenvalues, Q = torch.linalg.eigh(Z @ Z.T)
            Q_y = Q.T @ Yc
            Q_sq = Q.square()
        eigenvalues = eigenvalues.clamp(min=0)  # rounding makes null directions slightly negative

        def leave_one_out_residuals(alpha: torch.Tensor) -> torch.Tensor:
            """(N, k) each sample's residual under the readout fitted without it: r_i / (1 − H_ii)."""
            inverse = 1.0 / (eigenvalues + alpha)
            if n > p:
                fitted = U @ (inverse.unsqueeze(1) * U_y)
                leverage = U_sq @ inverse + leverage_floor
            else:
                shrink = eigenvalues * inverse
                fitted = Q @ (shrink.unsqueeze(1) * Q_y)
                leverage = Q_sq @ shrink + leverage_floor
            return (Yc - fitted) / (1.0 - leverage).unsqueeze(1)

        errors = torch.stack([leave_one_out_residuals(alpha).square().mean() for alpha in alphas])
        best = int(torch.argmin(errors))  # the first of equal errors, as scikit-learn's strict comparison
        # target minus leave-one-out residual: what the readout fitted without sample i outputs for it
        self._leave_one_out_outputs = Y - leave_one_out_residuals(alphas[best])
        inverse = 1.0 / (eigenvalues + alphas[best])
        if n > p:
            W = V @ (inverse.unsqueeze(1) * U_y)
        else:
            W = Z.T @ (Q @ (inverse.unsqueeze(1) * Q_y))
        self.alpha_ = self.alphas[best]
        self.cv_errors_ = errors
        self.best_score_ = float(-errors[best])
        self._weights, self._target_mean = W, y_mean  # in standardised units: decisions from Z, as fitted
        self.coef_ = W / scale.unsqueeze(1)
        self.intercept_ = y_mean - mean @ self.coef_
        self.feature_mean_, self.feature_scale_ = mean, scale
        self.n_features_in_ = p
        return self

    def _targets(self, targets, n: int, device) -> torch.Tensor:
        if self.classification:
            labels = _float64(targets, device, name="targets").to(device)
            if labels.dim() != 1 or labels.shape[0] != n:
                raise ValueError(f"targets must be (N={n},) class labels, got shape {tuple(labels.shape)}")
            if not bool((labels == labels.round()).all()):
                raise ValueError("classification targets must be integer labels (map other labels to integers)")
            classes, codes = torch.unique(labels.long(), sorted=True, return_inverse=True)
            if classes.numel() < 2:
                raise ValueError(f"targets hold only {classes.numel()} class: a classifier needs at least 2")
            self.classes_ = classes
            self._target_ndim = 1
            return one_vs_all(codes, classes.numel())
        values = _float64(targets, device, name="targets").to(device)
        if values.dim() not in (1, 2) or values.shape[0] != n:
            raise ValueError(f"targets must have shape (N={n},) or (N, k), got {tuple(values.shape)}")
        if not bool(torch.isfinite(values).all()):
            raise ValueError("targets hold NaN or infinite values")
        self._target_ndim = values.dim()
        return values.reshape(n, -1)

    def decision_function(self, features) -> torch.Tensor:
        """The readout's outputs.

        Arguments:
            features: (M, P) features, P as at fit.

        Returns:
            float64 tensor: (M,) for regression on (N,) targets and for two classes, else (M, k) / (M, K).
        """
        if not hasattr(self, "coef_"):
            raise RuntimeError("this RidgeReadout is not fitted yet: call fit(features, targets) first")
        F = self._features(features).to(self.coef_.device)
        if F.shape[1] != self.n_features_in_:
            raise ValueError(f"features have {F.shape[1]} columns, the readout was fitted on {self.n_features_in_}")
        outputs = F @ self.coef_ + self.intercept_  # the standardisation folded in: one pass over F
        return outputs[:, 0] if (outputs.shape[1] == 1 and self._target_ndim == 1) else outputs

    def leave_one_out_decision_function(self) -> torch.Tensor:
        """The training samples' leave-one-out outputs at the chosen ``alpha_``: sample i's output from the readout
        fitted on the other N − 1 samples, y_i − r_i / (1 − H_ii) (the residuals whose mean square chose α, from the
        same eigendecomposition). The features' standardisation (mean and scale) stays that of all N samples, as in
        the choice of α and in scikit-learn's ``RidgeCV``; with ``standardize=False`` these are exactly the outputs
        of refits without each sample (the intercept is unpenalised, so the centring does not matter).

        Returns:
            float64 tensor on the features' device, shaped as `decision_function`'s on the training features:
            (N,) for regression on (N,) targets and for two classes, else (N, k) / (N, K).
        """
        if not hasattr(self, "coef_"):
            raise RuntimeError("this RidgeReadout is not fitted yet: call fit(features, targets) first")
        outputs = self._leave_one_out_outputs
        return outputs[:, 0] if (outputs.shape[1] == 1 and self._target_ndim == 1) else outputs

    def predict(self, features) -> torch.Tensor:
        """Predicted labels (classification: from ``classes_``) or targets.

        Arguments:
            features: (M, P) features.

        Returns:
            (M,) long labels, or (M,) / (M, k) float64 targets.
        """
        outputs = self.decision_function(features)
        if not self.classification:
            return outputs
        index = (outputs > 0).long() if outputs.dim() == 1 else outputs.argmax(dim=1)
        return self.classes_[index]


def one_vs_all(codes: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The ridge classifier's targets: +1 in each sample's class column and −1 elsewhere, as scikit-learn's
    ``RidgeClassifier``; with two classes one column, +1 for the second class.

    Arguments:
        codes: (N,) class indices in [0, num_classes).
        num_classes: K >= 2.

    Returns:
        (N, K) float64, or (N, 1) for K = 2.
    """
    n = codes.shape[0]
    Y = -torch.ones(n, num_classes, dtype=torch.float64, device=codes.device)
    Y[torch.arange(n, device=codes.device), codes] = 1.0
    return Y[:, 1:] if num_classes == 2 else Y


# The probability temperature T is searched between these multiples of the largest spread of a training series'
# leave-one-out decision values: at the lower end that series' logits differ by 30 (its probabilities stay apart from
# 0 and 1 in float64, so they still rank series for an AUROC, where leave-one-out separates the classes and the
# log-loss alone would send T to 0); at the upper end all probabilities are within 1e-3 of uniform.
_TEMPERATURE_RANGE = (1.0 / 30.0, 1000.0)


def _class_logits(decision: torch.Tensor) -> torch.Tensor:
    """The readout's decision values as logits of its classes, up to a temperature.

    Arguments:
        decision: (N,) two classes' decision values d (positive: the second class), or (N, K) one-vs-all columns.

    Returns:
        (N, 2) columns (0, d), whose softmax is (1 − σ(d), σ(d)), or the (N, K) decision values themselves.
    """
    if decision.dim() == 1:
        return torch.stack([torch.zeros_like(decision), decision], dim=1)
    return decision


def _fit_probability_temperature(decision: torch.Tensor, codes: torch.Tensor) -> float:
    """The temperature T > 0 minimising the mean log-loss of softmax(logits / T) (`_class_logits`), within
    `_TEMPERATURE_RANGE`.

    The log-loss is convex in β = 1/T (a log-sum-exp of linear functions of β minus a linear one), so its derivative
    increases in β: Newton's method on it, kept inside a bracket that each step narrows (bisection where Newton's
    step would leave it), in float64.

    Arguments:
        decision: (N,) or (N, K) decision values (the readout's leave-one-out ones at fit).
        codes: (N,) class indices in [0, K).

    Returns:
        T, a float; 1.0 where no row has finite, unequal logits (every T then gives the same probabilities).
    """
    logits = _class_logits(decision.detach().to(device="cpu", dtype=torch.float64))
    codes = codes.detach().to(device="cpu", dtype=torch.long)
    finite = torch.isfinite(logits).all(dim=1)  # a leverage rounded to 1 would give an infinite value
    logits, codes = logits[finite], codes[finite]
    if logits.shape[0] == 0:
        return 1.0
    spread = float((logits.max(dim=1).values - logits.min(dim=1).values).max())
    if not spread > 0:
        return 1.0
    true_logit = logits.gather(1, codes.unsqueeze(1)).squeeze(1)

    def derivatives(beta: float) -> tuple[float, float]:
        """The mean log-loss's first and second derivatives in β."""
        probabilities = torch.softmax(beta * logits, dim=1)
        expected = (probabilities * logits).sum(dim=1)
        variance = (probabilities * (logits - expected.unsqueeze(1)).square()).sum(dim=1)
        return float((expected - true_logit).mean()), float(variance.mean())

    low, high = 1.0 / (_TEMPERATURE_RANGE[1] * spread), 1.0 / (_TEMPERATURE_RANGE[0] * spread)
    if derivatives(low)[0] >= 0:  # the loss only grows with confidence: the decisions do not inform
        return 1.0 / low
    if derivatives(high)[0] <= 0:  # it only falls: leave-one-out separates the classes
        return 1.0 / high
    beta = math.sqrt(low * high)
    for _ in range(200):
        slope, curvature = derivatives(beta)
        if slope == 0.0:
            break
        if slope > 0:
            high = beta
        else:
            low = beta
        newton = beta - slope / curvature if curvature > 0 else math.nan
        previous, beta = beta, (newton if low < newton < high else 0.5 * (low + high))
        if abs(beta - previous) <= 1e-14 * beta:
            break
    return 1.0 / beta


def _is_numeric(alphas) -> bool:
    try:
        np.asarray(alphas, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return not isinstance(alphas, (str, bytes, bool))


# ------------------------------------------------------------------------------------------------ feature map

def _check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _fractions(end_index: torch.Tensor, num_times: int) -> torch.Tensor:
    """(B, n) knot indices round(j/n · end) for j = 1..n."""
    steps = torch.arange(1, num_times + 1, dtype=torch.float64, device=end_index.device) / num_times
    return torch.round(end_index.to(torch.float64).unsqueeze(1) * steps).long()


def _inside(end_index: torch.Tensor, knots: int, dtype) -> torch.Tensor:
    """(B, K, 1) 1 at each sample's knots 0..end, 0 after."""
    index = torch.arange(knots, device=end_index.device).unsqueeze(0)
    return (index <= end_index.unsqueeze(1)).to(dtype).unsqueeze(-1)


def _take(states: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """states (B, K, H) at per-sample knots index (B, n): (B, n·H)."""
    gathered = torch.gather(states, 1, index.unsqueeze(-1).expand(-1, -1, states.shape[-1]))
    return gathered.flatten(1)



def _non_expanding_radius(omega: torch.Tensor) -> torch.Tensor:
    """The largest ρ at which the Euler step of a damped rotation, I + g(ρR(ω) − I), does not expand over a gap of
    g = `_OSCILLATION_GAP` median steps (3), else, for oscillators too fast for that (periods under 12 steps), of
    g = 2: an irregular series' gaps would otherwise make fast oscillators grow. With z = ρe^{iω},
    |1 + g(z − 1)| <= 1  <=>  g ρ² − 2(g − 1) ρ cos ω + g − 2 <= 0, whose larger root is the bound (ρ <= cos ω at
    g = 2).

    Arguments:
        omega: (n,) angles per median step, in (0, π].

    Returns:
        (n,) radii in [0, 1].
    """
    g = float(_OSCILLATION_GAP)
    cosine = torch.cos(omega)
    discriminant = (cosine * (g - 1)).square() - g * (g - 2)
    wide = (cosine * (g - 1) + discriminant.clamp(min=0).sqrt()) / g
    return torch.where((discriminant >= 0) & (cosine > 0), wide, cosine.clamp(min=0.0))


def reservoir_states(model: torch.nn.Module, control: Control) -> torch.Tensor:
    """The states of a reservoir model at every knot, differentiable in its parameters (`RandomFeatures` reads them
    under ``torch.no_grad()``; `neuralde_seq.reservoir_tuning` trains through them).

    Arguments:
        model: a `LinearCDE`, `NeuralCDE` or one-layer CT-FWP (`FastWeightClassifier`).
        control: its input, batch size B.

    Returns:
        (B, K, H) states at the knots 0..max(end_index), constant after each sample's end (a CT-FWP's fast weights
        flattened, H = heads·d²).
    """
    if isinstance(model, LinearCDE):
        return model.hidden_states(control)
    if isinstance(model, NeuralCDE):
        return model.hidden_states(control, at_knots=True)
    network = model.network
    dynamics, layer = network.dynamics, network.layers[0]
    start = control.knots[0]
    x0 = control.evaluate(start) if dynamics.needs_value else None
    dx0 = control.derivative(start) if dynamics.needs_derivative else None
    timed = start.to(control.coeffs.dtype).expand(control.batch_size) if dynamics.needs_time else None
    initial = layer.initial(x0, dx0, None, timed).unsqueeze(1)  # (B, L=1, heads, d, d)
    weights = solve(dynamics, control, initial, network.solver, at_knots=True)
    return weights.flatten(2)


def _free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device``: a GPU's free memory, the CPU's available memory (Linux's MemAvailable), or None
    where it cannot be read (then nothing is refused)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _bytes(count: int) -> str:
    """A number of bytes for people: in MiB below 1 GiB, else in GiB."""
    return f"{count / 2**20:.1f} MiB" if count < 2**30 else f"{count / 2**30:.1f} GiB"


def reservoir_state_width(model: torch.nn.Module) -> int:
    """H, the width of `reservoir_states`' states, read off the model (forming them for one series of 10^5 knots
    would take gigabytes)."""
    if isinstance(model, (LinearCDE, NeuralCDE)):
        return int(model.hidden)
    return math.prod(model.network.layers[0].state_shape)


def positive_proportion(states: torch.Tensor, inside: torch.Tensor, biases: torch.Tensor,
                        spreads: torch.Tensor | None = None, temperature: float = 0.0) -> torch.Tensor:
    """The "ppv" feature: for each threshold, the proportion of a sample's knots at which each unit exceeds it; with
    ``temperature`` > 0 its smooth stand-in, the mean over the knots of σ((h − b) / (temperature · spread)), which
    tends to the exact proportion as the temperature goes to 0 (tests/test_reservoir_tuning.py) and has gradients
    in the states and thresholds.

    Arguments:
        states: (B, K, H) states at the knots.
        inside: (B, K, 1) 1 at each sample's knots, 0 after its end.
        biases: (num_biases, H) thresholds.
        spreads: (H,) each unit's spread, the unit of its transition width (needed with temperature > 0).
        temperature: 0 (default): the exact step 1[h > b]; > 0: the sigmoid's width in units of ``spreads``.

    Returns:
        (B, num_biases·H) proportions in [0, 1], the thresholds' blocks in order.
    """
    count = inside.sum(dim=1)
    parts = []
    for bias in biases:
        if temperature > 0:
            above = torch.sigmoid((states - bias) / (temperature * spreads))
        else:
            above = (states > bias).to(states.dtype)
        parts.append((above * inside).sum(dim=1) / count)
    return torch.cat(parts, dim=1)


def positive_mean(states: torch.Tensor, inside: torch.Tensor, biases: torch.Tensor) -> torch.Tensor:
    """The "mpv" feature (MultiRocket's mean of positive values): for each threshold, the mean of h − b over a
    sample's knots at which h exceeds b, 0 where it never does.

    Arguments:
        states: (B, K, H) states at the knots.
        inside: (B, K, 1) 1 at each sample's knots, 0 after its end.
        biases: (num_biases, H) thresholds.

    Returns:
        (B, num_biases·H) means, the thresholds' blocks in order.
    """
    parts = []
    for bias in biases:
        excess = (states - bias).clamp(min=0) * inside
        above = ((states > bias).to(states.dtype) * inside).sum(dim=1)
        parts.append(excess.sum(dim=1) / above.clamp(min=1))
    return torch.cat(parts, dim=1)


class RandomFeatures:
    """A frozen, randomly initialised registry model (or the path's log-signatures) as a feature map of series
    (module docstring: what ``fit`` does, the features, the measurements).

    Arguments:
        reservoir: one of `RESERVOIRS`: a linear CDE (``slice-diag``, ``slice-block``, ``slice-dense``,
            ``slice-dplr``), a neural CDE (``ncde``, ``nrde``, ``log-ncde``), a CT-FWP (``{hebb,oja,delta,
            delta-post}-{ode,cde,rde}``; its state is the fast weights W, H·d² per knot), or ``"logsignature"``
            (default ``"slice-block"``, with damped oscillators: ``memory``).
        features: a non-empty sequence of `FEATURES`: "final", "mean", "times", "ppv", "mpv", "max", "values",
            "levels" for models;
            "final", "times", "windows", "values" for ``"logsignature"``; "auto" (default):
            `DEFAULT_OSCILLATION_FEATURES` ("ppv", "mpv", "levels") with ``memory="oscillation"``,
            `DEFAULT_LOGSIGNATURE_FEATURES`
            for ``"logsignature"``, else `DEFAULT_FEATURES` ("ppv", "mean").
        width: the model's size: ``hidden`` of linear CDEs and NCDEs, ``d_model`` of CT-FWPs (8 heads of d_model/8:
            H·d² = d_model²/8 numbers per state); None (default): ``model_options``' own, else 1,024 for linear CDEs
            (1,536 with ``memory="oscillation"``, 128 for ``structure="dense"``), 128 for NCDEs, 64 for CT-FWPs.
        num_times: n, the fractions 1/n, ..., 1 of each series read by "times", "values" and "windows" (default 4).
        num_biases: thresholds per unit of "ppv" and "mpv" (default 1).
        num_levels: thresholds per channel of "levels" (default 64).
        input_scale: multiplies the rescaled path (times and values) before the model reads it (default 1.0).
        fast_share: the share of oscillator pairs made fast and nearly memoryless (periods log-uniform in
            [2τ_min, 6τ_min] knots, 4-12 by default, radius at most 0.3 per knot), in [0, 1); "auto" (default): 1/3
            with ``memory="oscillation"`` (with the default width: 512 slow pairs, as many as in 1,024 units, and
            256 fast ones), else 0 (only 0 is allowed then).
        timescales: linear CDEs with a time channel: (τ_min, τ_max) memory range in knots (τ_max None: the longest
            training series), or None (keep the random A_0); "auto" (default): (2, None) for linear CDEs, None for
            the others.
        memory: what the time channel's A_0 makes of the units (module docstring, "Memory"): "decay" (low-pass
            units), "oscillation" (damped 2×2 oscillators: ``slice-block`` only, its block_size then 2), or "auto"
            (default): "oscillation" for ``slice-block`` with timescales, else "decay".
        model_options: constructor options replacing the registry defaults (e.g. ``{"init_scale": 1.0}``,
            ``{"solver": {"method": "exact"}}``); for ``"logsignature"``: ``depth`` and ``backend``.
        control_options: `build_control` options replacing the registry's (default ``parametrization="index"``).
        fill_gaps: "auto" (default): before anything else, each series' gaps get unobserved points so that the
            reservoir, which steps once per knot, steps about the training data's median time step per knot
            (`neuralde_seq.data.fill_gaps`; a regular series with dropped points becomes its grid with NaN there,
            between its first and last observation);
            a positive number: that step, in the times' units; None: the observations' knots only. With 30 % of the
            points removed from aeon's series, the knots of the observations alone cost 2-11 points of accuracy
            (ItalyPowerDemand 84 against 93 %, PickupGestureWiimoteZ 65 against 76 %, docs/benchmarks.md).
        seed: seed of the model's draw and of the thresholds (default 0).
        batch_size: series per forward pass (default 32); fewer where their states (B × knots × H numbers) would
            pass 2**25 (128 MiB in float32).

    Fitted attributes: ``model_`` (the frozen module; None for "logsignature"), ``fill_step_`` (the step of
    ``fill_gaps``, or None), ``time_scale_`` (float),
    ``value_scales_`` (C,), ``state_width_`` (H), ``num_features_``, ``feature_slices_`` (each feature's columns: a
    dict name -> slice), ``biases_`` ((num_biases, H), "ppv" and "mpv" only), ``levels_`` ((C, num_levels), "levels" only), ``timescales_`` ((H,) the units' τ (for
    oscillators −1/log ρ_j, per unit of each pair), linear CDEs with memory only), ``periods_`` ((H,) each
    oscillator's period in knots, ``memory="oscillation"`` only, else None).
    """

    def __init__(self, reservoir: str = "slice-block", *, features: Sequence[str] | str = "auto",
                 width: int | None = None, num_times: int = 4, num_biases: int = 1, num_levels: int = 64,
                 input_scale: float = 1.0,
                 fast_share="auto", timescales="auto", memory: str = "auto", model_options: dict | None = None,
                 control_options: dict | None = None, fill_gaps="auto", seed: int = 0, batch_size: int = 32):
        if reservoir not in RESERVOIRS:
            hint = did_you_mean(str(reservoir), RESERVOIRS)
            raise ValueError(f"reservoir must be one of {', '.join(RESERVOIRS)}, got {reservoir!r}"
                             + (f"; {hint}" if hint else ""))
        auto_features = isinstance(features, str) and features == "auto"
        if auto_features:
            features = DEFAULT_LOGSIGNATURE_FEATURES if reservoir == "logsignature" else DEFAULT_FEATURES
        if isinstance(features, str) or not isinstance(features, Sequence) or len(features) == 0:
            raise ValueError(f"features must be a non-empty sequence of {FEATURES}, got {features!r}")
        allowed = ("final", "times", "windows", *PATH_FEATURES) if reservoir == "logsignature" else (
            "final", "mean", "times", "ppv", "mpv", "max", *PATH_FEATURES)
        for feature in features:
            if feature not in allowed:
                raise ValueError(f"features of reservoir {reservoir!r} must be among {allowed}, got {feature!r}")
        if len(set(features)) != len(features):
            raise ValueError(f"features repeats an entry: {features!r}")
        if width is not None:
            _check_positive_int("width", width)
            if reservoir == "logsignature":
                raise ValueError("width does not apply to reservoir 'logsignature' (its size is set by the depth)")
        _check_positive_int("num_times", num_times)
        _check_positive_int("num_biases", num_biases)
        _check_positive_int("num_levels", num_levels)
        _check_positive_int("batch_size", batch_size)
        if isinstance(input_scale, bool) or not isinstance(input_scale, numbers.Real) or not (
                math.isfinite(input_scale) and input_scale > 0):
            raise ValueError(f"input_scale must be a positive finite number, got {input_scale!r}")
        linear = reservoir != "logsignature" and model_entry(reservoir).constructor is LinearCDE
        self._explicit_timescales = not (isinstance(timescales, str) and timescales == "auto")
        if isinstance(timescales, str) and timescales == "auto":
            timescales = (2.0, None) if linear else None
        elif timescales is not None:
            if not linear:
                raise ValueError(f"timescales applies to the linear CDE reservoirs only, not {reservoir!r}: pass None")
            ok = isinstance(timescales, (tuple, list)) and len(timescales) == 2 and all(
                t is None or (isinstance(t, numbers.Real) and not isinstance(t, bool) and math.isfinite(t) and t > 0)
                for t in timescales) and timescales[0] is not None
            if not ok or (timescales[1] is not None and timescales[1] < timescales[0]):
                raise ValueError(f"timescales must be 'auto', None or (tau_min, tau_max) with 0 < tau_min <= tau_max "
                                 f"(tau_max None: the longest training series), got {timescales!r}")
        for name, value in (("model_options", model_options), ("control_options", control_options)):
            if value is not None and not isinstance(value, dict):
                raise TypeError(f"{name} must be a dict or None, got {type(value).__name__}")
        self._explicit_memory = not (isinstance(memory, str) and memory == "auto")
        if not self._explicit_memory:
            memory = "oscillation" if (reservoir == "slice-block" and timescales is not None) else "decay"
        elif memory not in MEMORIES:
            raise ValueError(f"memory must be 'auto' or one of {MEMORIES}, got {memory!r}")
        if memory == "oscillation":
            if timescales is None:
                raise ValueError("memory='oscillation' spreads the oscillators' periods over timescales: pass "
                                 "timescales 'auto' or (tau_min, tau_max), not None")
            structure = None if reservoir == "logsignature" else (model_options or {}).get(
                "structure", model_entry(reservoir).defaults.get("structure"))
            if not linear or structure != "block":
                raise ValueError(f"memory='oscillation' pairs units into 2x2 blocks: it needs the block linear CDE "
                                 f"(reservoir 'slice-block'), not {reservoir!r}")
            if (model_options or {}).get("block_size", 2) != 2:
                raise ValueError(f"memory='oscillation' needs model_options['block_size'] 2 (each oscillator a 2x2 "
                                 f"block), got {model_options['block_size']!r}")
        oscillation = memory == "oscillation"
        if isinstance(fast_share, str) and fast_share == "auto":
            fast_share = _OSCILLATION_FAST_SHARE if oscillation else 0.0
        elif isinstance(fast_share, bool) or not isinstance(fast_share, numbers.Real) or not 0 <= fast_share < 1:
            raise ValueError(f"fast_share must be 'auto' or a number in [0, 1), got {fast_share!r}")
        elif fast_share > 0 and not oscillation:
            raise ValueError(f"fast_share makes a share of the oscillators fast: it needs memory='oscillation', "
                             f"not {memory!r} (pass fast_share 'auto' or 0)")
        if control_options and "time_unit" in control_options:
            raise ValueError("control_options: time_unit does not apply to a reservoir, which divides the times by "
                             "their own scale on the training data (path_scales); input_scale scales the whole path")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.fill_gaps = check_fill_gaps(fill_gaps)
        self.reservoir, self.features, self.width = reservoir, tuple(features), width
        self.num_times, self.num_biases, self.input_scale = int(num_times), int(num_biases), float(input_scale)
        self.num_levels = int(num_levels)
        self.fast_share = float(fast_share)
        self.timescales = None if timescales is None else tuple(timescales)
        self.memory = memory
        if auto_features and memory == "oscillation":
            self.features = DEFAULT_OSCILLATION_FEATURES
        self.model_options, self.control_options = dict(model_options or {}), dict(control_options or {})
        self.seed, self.batch_size = int(seed), int(batch_size)
        if reservoir == "logsignature":
            unknown = set(self.model_options) - {"depth", "backend"}
            if unknown:
                raise ValueError(f"model_options of reservoir 'logsignature' are 'depth' and 'backend', got "
                                 f"{sorted(unknown)}")
            depth = self.model_options.get("depth", 3)
            _check_positive_int("model_options['depth']", depth)

    # -------------------------------------------------------------------------------------------- inputs
    def _control_options(self) -> dict:
        return {"parametrization": "index", **self.control_options}

    def _rescaled(self, times: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        time_scale = self.time_scale_ / self.input_scale
        value_scales = (self.value_scales_ / self.input_scale).to(device=values.device)
        # in float64, then back: large raw times keep their resolution
        return ((times.to(torch.float64) / time_scale).to(times.dtype),
                (values.to(torch.float64) / value_scales).to(values.dtype))

    def _linear_path(self, times, values, lengths, time_channel: bool = True) -> Control:
        fill = self.control_options.get("unobserved_fill")
        parametrization = self._control_options()["parametrization"]
        return build_control(times, values, lengths, interpolation="linear", time_channel=time_channel,
                             parametrization=parametrization, unobserved_fill=fill)

    def inputs(self, times: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor | None = None) -> Control:
        """The fitted map's input built from observations: the rescaled path as the reservoir reads it (a linear
        control with a time channel for ``"logsignature"``).

        Arguments:
            times: (B, T) observation times, strictly increasing within each sample's length.
            values: (B, T, C) observations (standardised), NaN for missing.
            lengths: (B,) valid observations per sample; None (default): all T.

        Returns:
            A `Control` of batch size B.
        """
        self._check_fitted()
        return self._inputs(*self._filled(times, values, lengths))

    def model_arguments(self, times: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor | None = None):
        """What a trainable copy of the map reads (`neuralde_seq.reservoir_tuning.ReservoirNetwork`): the input
        `inputs` gives and the "values" feature, which does not depend on the reservoir.

        Arguments:
            times: (B, T), values: (B, T, C), lengths: (B,) or None, as `transform`.

        Returns:
            ``ModelArguments(control, path_part)``: path_part the path features (`PATH_FEATURES`) in the order of
            ``features``, (B, width) float64, (B, 0) without them.
        """
        self._check_fitted()
        times, values, lengths = self._filled(times, values, lengths)
        return ModelArguments(self._inputs(times, values, lengths), self._path_features(times, values, lengths))

    def _filled(self, times, values, lengths):
        """The observations with `fill_gaps`' unobserved points at the fitted step (as given where it is None)."""
        if lengths is None:
            lengths = torch.full((values.shape[0],), values.shape[1], dtype=torch.long, device=values.device)
        if self.fill_step_ is None:
            return times, values, lengths
        return fill_gaps(times, values, lengths, self.fill_step_)

    def _inputs(self, times, values, lengths) -> Control:
        times, values = self._rescaled(times, values)
        if self.reservoir == "logsignature":
            return self._linear_path(times, values, lengths)
        return model_inputs(self.reservoir, times, values, lengths, **self._control_options())

    def _check_fitted(self) -> None:
        if not hasattr(self, "num_features_"):
            raise RuntimeError("this RandomFeatures is not fitted yet: call fit(times, values, lengths) first")

    # -------------------------------------------------------------------------------------------- fit
    def fit(self, times: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor | None = None) -> "RandomFeatures":
        """Scales, the frozen model and the thresholds from training observations (module docstring).

        Arguments:
            times: (N, T) observation times, strictly increasing within each sample's length.
            values: (N, T, C) observations, standardised (e.g. `channel_statistics`), NaN for missing.
            lengths: (N,) valid observations per sample; None (default): all T.

        Returns:
            self, fitted; the model lives on ``values``' device in its dtype.

        Raises:
            ValueError: observations `build_control` refuses, or a model option the constructor refuses.
        """
        if lengths is None:
            lengths = torch.full((values.shape[0],), values.shape[1], dtype=torch.long, device=values.device)
        self.fill_step_ = None if self.fill_gaps is None else (
            median_step(times, lengths) if self.fill_gaps == "auto" else float(self.fill_gaps))
        times, values, lengths = self._filled(times, values, lengths)
        scales = path_scales(self._linear_path(times, values, lengths))
        self.time_scale_ = float(scales[0])
        self.value_scales_ = torch.tensor(scales[1:], dtype=torch.float64)
        self.levels_ = self._level_thresholds(times, values, lengths) if "levels" in self.features else None
        control = self._inputs(times, values, lengths)
        self.model_ = None if self.reservoir == "logsignature" else self._build_model(control, values)
        self.timescales_ = self.periods_ = None
        if self.model_ is not None and self.timescales is not None:
            # the time channel is the path's channel 0 (and the first level-1 term of log-signature windows)
            if {**registry_control_options(self.reservoir), **self.control_options}.get("time_channel", True):
                self._set_memory(control)
            elif self._explicit_timescales or (self._explicit_memory and self.memory == "oscillation"):
                raise ValueError("timescales and memory set the memory along the time channel, which control_options "
                                 "turn off (time_channel=False): pass timescales=None (and memory 'auto' or 'decay')")
        self.biases_ = self.spreads_ = None
        self.temperature_ = 0.0  # the exact "ppv"; a fine-tuned map reads its smooth stand-in (reservoir_tuning)
        if "ppv" in self.features or "mpv" in self.features:
            generator = torch.Generator().manual_seed(self.seed)
            chosen = torch.randperm(control.batch_size, generator=generator)[:_BIAS_SERIES]
            self.biases_, self.spreads_ = self._thresholds(control[chosen.sort().values], generator)
        with torch.no_grad():
            probe = self._batch_features(control[:1], times[:1], values[:1],
                                         None if lengths is None else lengths[:1], sizes := [])
        self.feature_slices_ = {}
        for feature, size in zip(self.features, sizes):
            start = sum(s.stop - s.start for s in self.feature_slices_.values())
            self.feature_slices_[feature] = slice(start, start + size)
        # log-signature windows: their states are the windows' terms
        self.state_width_ = control.coeffs.shape[-1] if self.model_ is None else reservoir_state_width(self.model_)
        self.num_features_ = probe.shape[1]
        return self

    def _build_model(self, control: Control, values: torch.Tensor) -> torch.nn.Module:
        entry = model_entry(self.reservoir)
        options = dict(self.model_options)
        if entry.constructor is NeuralCDE:
            # log-ncde's registry field starts at 1/1000 of PyTorch's scale (its authors', for training): a reservoir
            # with it barely moves
            options.setdefault("field_init_scale", 1.0)
        width_option = _WIDTH_OPTION[entry.constructor]
        if self.width is not None:
            options[width_option] = self.width
        elif width_option not in options:
            if entry.constructor is LinearCDE:
                dense = options.get("structure", entry.defaults.get("structure")) == "dense"
                options[width_option] = (_DEFAULT_OSCILLATION_WIDTH if self.memory == "oscillation" else
                                         _DEFAULT_WIDTHS["dense" if dense else "linear"])
            else:
                options[width_option] = _DEFAULT_WIDTHS[entry.constructor]
        if entry.constructor is LinearCDE:
            if self.memory == "oscillation":
                options["block_size"] = 2
            path_channels = control.initial_value.shape[-1] if control.piecewise_constant else control.channels
            options.setdefault("channel_scales", (1.0,) * path_channels)  # the path is rescaled already
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = create_model(self.reservoir, control, 2, **options)
        if entry.constructor is FastWeightClassifier:
            network = model.network
            if len(network.layers) != 1 or network.layers[0].initial_state == "static":
                raise ValueError("a CT-FWP reservoir reads one layer's fast weights from the input: num_layers=1 and "
                                 "initial_state 'zeros' or 'rank_one'")
        model = model.to(device=values.device, dtype=values.dtype)
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        return model.eval()

    def _set_memory(self, control: Control) -> None:
        """The time channel's A_0 of a linear CDE reservoir, in units of the median time step Δt (module docstring,
        "Memory"): unit j forgets by exp(−1/τ_j) per step ("decay"), or pair j turns by ω_j and shrinks by ρ_j per
        step ("oscillation")."""
        model = self.model_
        terms, pieces = _pieces(control)
        active = torch.arange(pieces, device=terms.device).unsqueeze(0) < control.end_index.unsqueeze(1)
        steps = terms[..., 0][active].to(torch.float64)
        step = float(steps[steps > 0].median()) if bool((steps > 0).any()) else 1.0
        tau_min, tau_max = self.timescales
        tau_max = float(control.end_index.max()) if tau_max is None else tau_max
        tau_max = max(tau_max, tau_min)
        generator = torch.Generator().manual_seed(self.seed + 1)

        def log_uniform(count, low, high):
            return torch.exp(torch.empty(count, dtype=torch.float64).uniform_(math.log(low), math.log(high),
                                                                              generator=generator))

        A = model.A
        if self.memory == "oscillation":
            pairs = model.hidden // 2
            period = log_uniform(pairs, 2 * tau_min, max(tau_max, 2 * tau_min))
            tau = (period * log_uniform(pairs, *_OSCILLATION_DECAY_PERIODS)).clamp(min=tau_min)
            omega = 2 * math.pi / period
            radius = torch.exp(-1.0 / tau)
            fast = round(self.fast_share * pairs)
            if fast:
                # drawn after the others: fast_share 0 keeps the draw of the slow oscillators
                period[:fast] = log_uniform(fast, _FAST_PERIODS[0] * tau_min, _FAST_PERIODS[1] * tau_min)
                omega = 2 * math.pi / period
                radius[:fast] = _FAST_RADIUS
            rho = torch.minimum(radius, _non_expanding_radius(omega))
            cosine, sine = rho * torch.cos(omega), rho * torch.sin(omega)
            block = torch.stack([torch.stack([cosine - 1, -sine], dim=-1),
                                 torch.stack([sine, cosine - 1], dim=-1)], dim=-2) / step  # (pairs, 2, 2)
            with torch.no_grad():
                A[0] = block.to(dtype=A.dtype, device=A.device)
            self.timescales_ = (-1.0 / torch.log(rho)).repeat_interleave(2)  # 0 where ρ = 0 (no memory)
            self.periods_ = period.repeat_interleave(2)
            return
        tau = log_uniform(model.hidden, tau_min, tau_max)
        rates = (torch.exp(-1.0 / tau) - 1.0) / step
        rates = rates.to(dtype=A.dtype, device=A.device)
        with torch.no_grad():
            if model.structure in ("diagonal", "dplr"):
                A[0] = rates
                if model.structure == "dplr":
                    model.U[0] = 0.0  # the time channel's step is then diagonal
            elif model.structure == "block":
                A[0] = torch.diag_embed(rates.view(A.shape[1], A.shape[2]))
            else:
                A[0] = torch.diag(rates)
        self.timescales_ = tau

    # -------------------------------------------------------------------------------------------- states
    def states(self, control: Control) -> torch.Tensor:
        """The reservoir's states at every knot of ``control`` (a batch of `inputs`).

        Arguments:
            control: the model's input, batch size B.

        Returns:
            (B, K, H) states at the knots 0..max(end_index), constant after each sample's end (a CT-FWP's fast
            weights flattened, H = heads·d²); for ``"logsignature"`` the path's points (B, K, 1 + C).
        """
        self._check_fitted()
        return self._states(control)

    def _states(self, control: Control) -> torch.Tensor:
        with torch.no_grad():
            if self.model_ is None:
                return control.coeffs[:, : int(control.end_index.max()) + 1, 0]
            if self._fused(control.coeffs.device):  # the compiled loop of the fused features, states written out
                terms, h0 = self.model_.scan_inputs(control)
                return fused_states(terms, control.end_index, h0, self.model_.matrices(), self.model_.B.weight,
                                    self.model_.structure)
            return reservoir_states(self.model_, control)

    def _states_batch(self, knots: int, like: torch.Tensor) -> int:
        """Series per batch whose states are formed at once: at most ``batch_size``, and fewer where their states
        (B × knots × H numbers) would pass the budget; at least one.

        Raises:
            MemoryError: one series' states alone need more memory than ``like``'s device has free, said up front
                with the numbers (instead of the allocator failing, or the machine swapping, part way).
        """
        width = self.state_width_ if hasattr(self, "state_width_") else (
            reservoir_state_width(self.model_) if self.model_ is not None else like.shape[-1])
        need = knots * width * like.element_size()
        free = _free_memory(like.device)
        if free is not None and need > free:
            raise MemoryError(f"random features: the states of one series of {knots:,} knots × {width:,} units need "
                              f"{_bytes(need)} at once, and {like.device} has {_bytes(free)} free; "
                              "use fewer units (width), a diagonal or 2×2-block linear-cde reservoir on the CPU (its "
                              "fused kernel stores no states), or series with fewer points (e.g. averaged over windows)")
        return max(1, min(self.batch_size, _STATE_BUDGET // (knots * width)))

    @staticmethod
    def states_of(model: torch.nn.Module, control: Control) -> torch.Tensor:
        """`reservoir_states` of another ``model`` of this map's kind (a fine-tuned copy of ``model_``), with
        gradients.

        Arguments:
            model: the reservoir model; control: its input, batch size B.

        Returns:
            (B, K, H) states at the knots.
        """
        return reservoir_states(model, control)

    def _thresholds(self, control: Control, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(num_biases, H) quantiles, uniform in [0.25, 0.75] per unit, of the units' states on ``control``, and (H,)
        each unit's spread there: its interquartile range (the smooth "ppv"'s unit of width, `positive_proportion`;
        the smallest positive one where a unit is constant)."""
        ends = control.end_index
        points = int((ends + 1).sum())  # the states at the series' knots, in order (series, knot)
        chosen = torch.randperm(points, generator=generator)[:_BIAS_POINTS] if points > _BIAS_POINTS else None
        if self._fused(control.coeffs.device):  # the chosen states only, from the compiled loop
            index = torch.arange(points) if chosen is None else chosen
            offsets = torch.cumsum(ends.cpu() + 1, dim=0)
            series = torch.searchsorted(offsets, index, right=True)
            knots = index - (offsets[series] - (ends.cpu()[series] + 1))
            terms, h0 = self.model_.scan_inputs(control)
            by_unit = fused_states(terms, ends, h0, self.model_.matrices(), self.model_.B.weight,
                                   self.model_.structure, torch.stack([series, knots], dim=1))  # (H, M)
        else:  # the states of batch_size series at a time (within the memory budget), the chosen ones kept
            kept, first = [], 0  # (their order does not matter: each unit's states are sorted below)
            batch = self._states_batch(int(ends.max()) + 1, control.coeffs)
            for start in range(0, control.batch_size, batch):
                part = control[start:start + batch]
                states = self._states(part)
                pooled = states[_inside(part.end_index, states.shape[1], torch.bool).squeeze(-1)]  # (M_part, H)
                if chosen is not None:
                    inside = chosen[(chosen >= first) & (chosen < first + pooled.shape[0])]
                    pooled = pooled[(inside - first).to(pooled.device)]
                kept.append(pooled)
                first += int((part.end_index + 1).sum())
            pooled = torch.cat(kept)
            by_unit = pooled.t().contiguous()
        if by_unit.device.type == "cpu":  # numpy sorts each unit's row 4-7x faster than torch
            ordered = torch.from_numpy(np.sort(by_unit.numpy(), axis=1))  # (H, M)
        else:
            ordered = by_unit.sort(dim=1).values
        quantiles = torch.rand(self.num_biases, ordered.shape[0], generator=generator, dtype=torch.float64) * 0.5 + 0.25
        last = ordered.shape[1] - 1
        position = quantiles.to(ordered.device) * last
        below = position.floor().long()
        above = (below + 1).clamp(max=last)
        weight = (position - below).to(ordered.dtype)
        low = torch.gather(ordered, 1, below.t()).t()  # (num_biases, H)
        high = torch.gather(ordered, 1, above.t()).t()
        spreads = ordered[:, round(0.75 * last)] - ordered[:, round(0.25 * last)]
        positive = spreads[spreads > 0]
        floor = positive.min() if positive.numel() else torch.ones((), dtype=spreads.dtype, device=spreads.device)
        return low + weight * (high - low), torch.where(spreads > 0, spreads, floor)

    # -------------------------------------------------------------------------------------------- features
    def transform(self, times: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Features of series.

        Arguments:
            times: (B, T) observation times, strictly increasing within each sample's length.
            values: (B, T, C) observations, standardised as at fit, NaN for missing; dtype and device of fit.
            lengths: (B,) valid observations per sample; None (default): all T.

        Returns:
            (B, num_features_) float64 tensor on ``values``' device; a sample's row does not depend on the batch
            it is in.

        Raises:
            ValueError: the states overflowed (non-finite features): lower ``input_scale`` or the model's
                ``init_scale``.
        """
        self._check_fitted()
        times, values, lengths = self._filled(times, values, lengths)
        rows = []
        with torch.no_grad():
            # each batch's input is built from its own series (a series' features do not depend on the others)
            knots = int(lengths.max())  # at most (log-signature windows have fewer)
            if self._fused(values.device):  # no states stored: the batch holds the pieces' terms only
                batch = max(1, _STATE_BUDGET // (knots * (1 + values.shape[-1])))
            else:
                batch = self._states_batch(knots, values)
            for start in range(0, values.shape[0], batch):
                index = slice(start, start + batch)
                control = self._inputs(times[index], values[index], lengths[index])
                rows.append(self._batch_features(control, times[index], values[index], lengths[index]))
        features = rows[0] if len(rows) == 1 else torch.cat(rows)
        if not bool(torch.isfinite(features).all()):
            raise ValueError(f"reservoir {self.reservoir!r} gave non-finite features (its states overflowed): lower "
                             f"input_scale (now {self.input_scale}) or the model's init_scale")
        return features

    def fit_transform(self, times: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor | None = None
                      ) -> torch.Tensor:
        """`fit`, then `transform` of the same observations.

        Arguments:
            times: (N, T), values: (N, T, C), lengths: (N,) or None, as `fit`.

        Returns:
            (N, num_features_) float64 tensor.
        """
        return self.fit(times, values, lengths).transform(times, values, lengths)

    def _fused(self, device: torch.device) -> bool:
        """Whether the features come from the fused kernel (`neuralde_seq.ops.reservoir_features`): a linear CDE
        reservoir, diagonal or of 2×2 blocks, reading the path's increments, on a CPU, with features the kernel
        pools (and "values", which do not read the reservoir), exact "ppv" (not a fine-tuned map's smooth one), and
        numba installed. Otherwise every state is formed and pooled (`states`, `pooled`): the same numbers."""
        model = self.model_
        return (isinstance(model, LinearCDE) and device.type == "cpu" and model.control_depth == 1
                and (model.structure == "diagonal" or (model.structure == "block" and model.block_size == 2))
                and set(self.features) <= set(POOLED_FEATURES) | set(PATH_FEATURES)
                and getattr(self, "temperature_", 0.0) == 0.0
                and fused_available())

    def _batch_features(self, control: Control, times, values, lengths, sizes: list | None = None) -> torch.Tensor:
        """(B, F) features of one batch, in the order of ``features``; ``sizes`` (if given) gets each one's width."""
        constant = self._path_features(times, values, lengths, control)
        if not self._fused(control.coeffs.device):
            return self.pooled(self._states(control), control.end_index, constant, sizes=sizes)
        model = self.model_
        with torch.no_grad():
            terms, h0 = model.scan_inputs(control)
            pooled = fused_features(terms, control.end_index, h0, model.matrices(), model.B.weight, self.biases_,
                                    model.structure, tuple(f for f in self.features if f not in PATH_FEATURES))
        parts = [pooled[f] if f not in PATH_FEATURES else self._path_part(constant, f) for f in self.features]
        if sizes is not None:
            sizes.extend(part.shape[1] for part in parts)
        # one float64 array, each part converted as it is copied in (a cat of converted parts copies twice)
        out = torch.empty(parts[0].shape[0], sum(part.shape[1] for part in parts), dtype=torch.float64,
                          device=parts[0].device)
        start = 0
        for part in parts:
            out[:, start:start + part.shape[1]] = part
            start += part.shape[1]
        return out

    def pooled(self, states: torch.Tensor, end_index: torch.Tensor, path_part: torch.Tensor | None = None, *,
               biases: torch.Tensor | None = None, temperature: float | None = None,
               sizes: list | None = None) -> torch.Tensor:
        """The features of a batch from its states, in the order of ``features`` (differentiable in the states and
        the thresholds: `neuralde_seq.reservoir_tuning` trains through it).

        Arguments:
            states: (B, K, H) `states` of the batch (for ``"logsignature"`` the path's points).
            end_index: (B,) each sample's final knot.
            path_part: (B, width) the path features (`PATH_FEATURES`, which do not depend on the reservoir) in the
                order of ``features``, `_path_features`; None or (B, 0) when ``features`` has none.
            biases: (num_biases, H) "ppv" thresholds replacing ``biases_`` (default None: ``biases_``).
            temperature: the "ppv" stand-in's temperature replacing ``temperature_`` (`positive_proportion`).
            sizes: a list that gets each feature's width, or None.

        Returns:
            (B, F) float64 features.
        """
        biases = self.biases_ if biases is None else biases
        temperature = self.temperature_ if temperature is None else temperature
        parts = []
        if self.model_ is not None:
            inside = _inside(end_index, states.shape[1], states.dtype)
            count = inside.sum(dim=1)
        for feature in self.features:
            if feature in PATH_FEATURES:
                part = self._path_part(path_part, feature)
            elif self.model_ is None:  # log-signature windows of the path's points
                part = self._logsignatures(states, end_index, feature)
            elif feature == "final":
                part = states[torch.arange(states.shape[0], device=states.device), end_index]
            elif feature == "mean":
                part = (states * inside).sum(dim=1) / count
            elif feature == "times":
                part = _take(states, _fractions(end_index, self.num_times))
            elif feature == "max":
                part = states.masked_fill(inside == 0, -torch.inf).amax(dim=1)
            elif feature == "mpv":
                part = positive_mean(states, inside, biases)
            else:  # "ppv"
                part = positive_proportion(states, inside, biases, self.spreads_, temperature)
            parts.append(part.to(torch.float64))
            if sizes is not None:
                sizes.append(part.shape[1])
        return torch.cat(parts, dim=1)

    def _points(self, times, values, lengths) -> tuple[torch.Tensor, torch.Tensor]:
        """The series' rescaled values at the knots (missing ones linearly interpolated), (B, K, C), and each
        sample's end knot (B,)."""
        times, values = self._rescaled(times, values)
        path = self._linear_path(times, values, lengths, time_channel=False)
        return path.coeffs[:, : int(path.end_index.max()) + 1, 0], path.end_index

    def _points_in(self, control: Control, channels: int) -> torch.Tensor | None:
        """The value channels at the knots read off the reservoir's own input, where that input is the linear path
        of the same rescaled values with the time channel first and nothing after them (the linear CDE reservoirs'
        registry options; the path is then not built twice); else None."""
        if self.reservoir == "logsignature":
            return None
        options = {**registry_control_options(self.reservoir), **self._control_options()}
        plain = (options.get("interpolation") == "linear"
                 and options.get("time_channel", True)
                 and not any(options.get(k) for k in ("intensity_channel", "recency_channel"))
                 and control.channels == 1 + channels)
        return control.coeffs[:, : int(control.end_index.max()) + 1, 0, 1:] if plain else None

    def _path_features(self, times, values, lengths, control: Control | None = None) -> torch.Tensor:
        """The path features (`PATH_FEATURES`) of the batch in the order of ``features``, (B, width) float64; (B, 0)
        without them. ``control``: the batch's reservoir input, whose knots may give the values (`_points_in`)."""
        wanted = [f for f in self.features if f in PATH_FEATURES]
        if not wanted:
            return torch.zeros(values.shape[0], 0, dtype=torch.float64, device=values.device)
        points = None if control is None else self._points_in(control, values.shape[-1])
        if points is None:
            points, end = self._points(times, values, lengths)
        else:
            end = control.end_index
        parts = []
        for feature in wanted:
            if feature == "values":  # at the fractions, and the mean over the knots
                inside = _inside(end, points.shape[1], points.dtype)
                mean = (points * inside).sum(dim=1) / inside.sum(dim=1)
                parts.append(torch.cat([_take(points, _fractions(end, self.num_times)), mean], dim=1))
            else:
                parts.append(self._levels(points, end))
        return torch.cat([part.to(torch.float64) for part in parts], dim=1)

    def _path_part(self, path_part: torch.Tensor, feature: str) -> torch.Tensor:
        """``feature``'s columns of `_path_features`' output."""
        channels = self.value_scales_.numel()
        widths = {"values": (self.num_times + 1) * channels,
                  "levels": channels * self.num_levels * (self.num_times + 2)}
        start = sum(widths[f] for f in self.features[:self.features.index(feature)] if f in PATH_FEATURES)
        return path_part[:, start:start + widths[feature]]

    def _level_thresholds(self, times, values, lengths) -> torch.Tensor:
        """(C, num_levels) each channel's quantiles at (k + 1/2) / num_levels of its training values at the knots."""
        points, end = self._points(times, values, lengths)
        inside = _inside(end, points.shape[1], torch.bool).squeeze(-1)
        probabilities = (torch.arange(self.num_levels, dtype=torch.float64) + 0.5) / self.num_levels
        pooled = points[inside].detach().cpu().to(torch.float64).numpy()  # (M, C)
        return torch.from_numpy(np.quantile(pooled, probabilities.numpy(), axis=0).T.copy()).to(
            device=values.device, dtype=values.dtype)

    def _levels(self, points: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """The "levels" feature (module docstring) of points (B, K, C) at knots 0..end: per channel, the proportion of
        knots above each threshold, the mean excess there, and the proportion over each of the n parts, (B, C·L·(n +
        2)).

        Each sample's values are sorted once per part, so that the count above a threshold is a binary search and
        the sum above it a difference of running sums (O(K log K + L log K), not O(K·L), per sample and channel);
        the running sums in float64."""
        B, K, C = points.shape
        thresholds = self.levels_.to(device=points.device, dtype=points.dtype)  # (C, L)
        L = thresholds.shape[1]
        knots = torch.arange(K, device=points.device)
        inside = knots.unsqueeze(0) <= end.unsqueeze(1)  # (B, K)
        # part j of a sample: its knots after the fraction (j - 1)/n and up to j/n (the first from knot 0)
        bounds = _fractions(end, self.num_times)  # (B, n)
        part = (knots.view(1, K, 1) > bounds.unsqueeze(1)[:, :, :-1]).sum(dim=-1)  # (B, K)
        query = thresholds.unsqueeze(0).expand(B, C, L).contiguous()

        def above(mask: torch.Tensor, sums: bool):
            """(count above each threshold, knots in the mask) and, with sums, the sum of the excess above it."""
            values = points.transpose(1, 2).masked_fill(~mask.unsqueeze(1), -torch.inf)  # (B, C, K)
            ordered = values.sort(dim=-1).values
            total = mask.sum(dim=1).view(B, 1, 1).to(torch.float64)
            count = K - torch.searchsorted(ordered, query, right=True).to(torch.float64)  # values > threshold
            if not sums:
                return count, total
            running = torch.cat([torch.zeros(B, C, 1, dtype=torch.float64, device=points.device),
                                 ordered.to(torch.float64).nan_to_num(neginf=0.0).cumsum(dim=-1)], dim=-1)
            first = (K - count).long()  # the first sorted position above the threshold
            excess = running[..., -1:] - running.gather(-1, first) - query.to(torch.float64) * count
            return count, total, excess

        count, total, excess = above(inside, True)
        parts = [count / total, excess / count.clamp(min=1)]
        for j in range(self.num_times):
            part_count, part_total = above(inside & (part == j), False)
            parts.append(part_count / part_total.clamp(min=1))
        # (B, C, L) blocks -> per channel: proportions, mean excesses, then each part's proportions
        return torch.stack(parts, dim=2).reshape(B, C * (self.num_times + 2) * L).to(points.dtype)

    def _logsignatures(self, points: torch.Tensor, end: torch.Tensor, feature: str) -> torch.Tensor:
        """Log-signatures of the piecewise-linear (time, values) path over each sample's windows, (B, windows·D)."""
        depth = int(self.model_options.get("depth", 3))
        backend = self.model_options.get("backend", "torch" if depth <= 2 else "pysiglib")
        if feature == "final":
            starts, stops = torch.zeros_like(end).unsqueeze(1), end.unsqueeze(1)
        else:
            stops = _fractions(end, self.num_times)
            starts = torch.zeros_like(stops) if feature == "times" else torch.cat(
                [torch.zeros_like(stops[:, :1]), stops[:, :-1]], dim=1)
        results = []
        for w in range(stops.shape[1]):
            start, stop = starts[:, w], stops[:, w]
            span = int((stop - start).max()) + 1
            # each window's points, padded by repeating its last one (a constant stretch adds nothing)
            index = torch.minimum(start.unsqueeze(1) + torch.arange(span, device=end.device), stop.unsqueeze(1))
            window = torch.gather(points, 1, index.unsqueeze(-1).expand(-1, -1, points.shape[-1]))
            results.append(logsignature(window.to(torch.float64), depth, backend=backend))
        return torch.cat(results, dim=1)


# ------------------------------------------------------------------------------------------------ estimators

class _RandomFeatureEstimator(BaseEstimator):
    """Shared parameters, input handling, features and readout of the two estimators (see
    `RandomFeatureClassifier`)."""

    _classification = False

    def __init__(self, reservoir="slice-block", *, features="auto", width=None, num_times=4, num_biases=1,
                 num_levels=64, input_scale=1.0, fast_share="auto", timescales="auto", memory="auto",
                 model_options=None, control_options=None, fill_gaps="auto",
                 alphas=DEFAULT_ALPHAS, fine_tune=None, batch_size=32, random_state=None, n_jobs=None, device="cpu",
                 dtype="float32", verbose=False):
        self.reservoir = reservoir
        self.features = features
        self.width = width
        self.num_times = num_times
        self.num_biases = num_biases
        self.num_levels = num_levels
        self.input_scale = input_scale
        self.fast_share = fast_share
        self.timescales = timescales
        self.memory = memory
        self.model_options = model_options
        self.control_options = control_options
        self.fill_gaps = fill_gaps
        self.alphas = alphas
        self.fine_tune = fine_tune
        self.batch_size = batch_size
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.device = device
        self.dtype = dtype
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN marks a missing value
        tags.input_tags.three_d_array = True
        return tags

    def _data(self, X, times):
        """X (and times) as an unlabelled dataset in the estimator's dtype (`SequenceClassifier`'s checks,
        `read_sequences`)."""
        return read_sequences(X, times, estimator_dtype(self.dtype), type(self).__name__)

    def _features(self, data, device: torch.device) -> torch.Tensor:
        return self.feature_map_.transform(*self._standardised_inputs(data, device))

    # Not named transform / fit_transform: scikit-learn would take the estimators for transformers.
    def fit_random_features(self, X, y, times=None) -> np.ndarray:
        """`fit`, returning the random features of the training series (the forward pass `fit` makes anyway).

        Arguments:
            X, y, times: as `fit`.

        Returns:
            (N, n_random_features_) float64 array, as ``random_features(X, times)``.
        """
        return self._fit(X, y, times).cpu().numpy()

    def _fit(self, X, y, times) -> torch.Tensor:
        """Shared fit (``self._targets(y, num_samples)`` checks y and gives the readout's targets); returns the
        training features."""
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        readout = RidgeReadout(self.alphas, classification=self._classification)  # checks alphas first
        tuning = FineTuning.read(self.fine_tune)  # and the fine-tuning settings
        seed = estimator_seed(self.random_state)
        feature_map = RandomFeatures(self.reservoir, features=self.features, width=self.width,
                                     num_times=self.num_times, num_biases=self.num_biases,
                                     num_levels=self.num_levels, input_scale=self.input_scale, fast_share=self.fast_share,
                                     timescales=self.timescales,
                                     memory=self.memory, model_options=self.model_options,
                                     control_options=self._resolved_control_options(), fill_gaps=self.fill_gaps,
                                     seed=seed, batch_size=self.batch_size)
        device = torch.device(self.device)
        data = self._data(X, times)
        warn_unobserved(data, "training samples", feature_map.control_options["unobserved_fill"])
        targets = self._targets(y, len(data))
        fitted_with_times = times is not None
        self.channel_mean_, self.channel_scale_ = (s.numpy() for s in channel_statistics(data))
        self.feature_map_ = feature_map
        with torch_threads(threads_for_jobs(self.n_jobs)):
            feature_map.fit(*self._standardised_inputs(data, device))
            features = self._features(data, device)
            readout.fit(features, targets.to(features.device))
            self.fine_tuning_ = None
            if tuning is not None:
                features, readout = self._fine_tune(data, targets, device, readout, features, tuning, seed)
        self.readout_ = readout
        if self._classification:
            # on the final readout's leave-one-out decisions: its in-sample ones often separate the training series
            self.probability_temperature_ = _fit_probability_temperature(
                readout.leave_one_out_decision_function(), targets)
        self.n_features_in_ = data.num_channels
        self.n_random_features_ = int(features.shape[1])
        self.alpha_ = readout.alpha_
        self.seed_ = seed
        self.fitted_with_times_ = fitted_with_times
        return features

    def _fine_tune(self, data, targets: torch.Tensor, device: torch.device, readout: RidgeReadout,
                   features: torch.Tensor, tuning: FineTuning, seed: int):
        """`neuralde_seq.reservoir_tuning.fine_tune` of the fitted map; the readout refitted on all the series when
        the fine-tuned map is chosen. Returns (features, readout) of the map kept."""
        feature_map = self.feature_map_
        arguments = feature_map.model_arguments(*self._standardised_inputs(data, device))
        if self._classification:
            codes = targets.to(device)
            readout_targets, strata = one_vs_all(codes, len(self.classes_)), targets.cpu().numpy()
        else:
            y = targets.to(device=device, dtype=torch.float64).reshape(len(data), -1)
            scale = y.std(dim=0, unbiased=False)
            readout_targets, strata = (y - y.mean(dim=0)) / torch.where(scale > 0, scale, torch.ones_like(scale)), None
        progress = f"{type(self).__name__} fine-tuning" if self.verbose else False
        tuned, report = fine_tune(feature_map, readout, arguments, readout_targets, tuning,
                                  classification=self._classification, strata=strata, seed=seed, progress=progress)
        self.fine_tuning_ = report
        if tuned is feature_map:
            return features, readout
        self.feature_map_ = tuned
        features = self._features(data, device)
        refitted = RidgeReadout(self.alphas, classification=self._classification)
        refitted.fit(features, targets.to(features.device))
        return features, refitted

    def _resolved_control_options(self) -> dict:
        """``control_options`` with ``unobserved_fill`` "mean" (the default) as 0, the standardised values' mean."""
        options = {"unobserved_fill": "mean", **(self.control_options or {})}
        if isinstance(options["unobserved_fill"], str):
            if options["unobserved_fill"] != "mean":
                raise ValueError(f"control_options: unobserved_fill must be None, a finite number, one per channel, "
                                 f"or 'mean' (the training mean of each channel), got {options['unobserved_fill']!r}")
            options["unobserved_fill"] = 0.0
        return options

    def _standardised_inputs(self, data, device: torch.device):
        # in the estimator's dtype (the times'); the dataset holds the values in float64 (`read_sequences`)
        values = standardised(data.values, self.channel_mean_, self.channel_scale_, data.times.dtype).to(device)
        return data.times.to(device), values, data.lengths.to(device)

    def _checked_data(self, X, times):
        check_is_fitted(self, "readout_")
        check_times_like_fit(self, times)
        data = self._data(X, times)
        check_channels_like_fit(self, X, data.num_channels)
        return data

    def _outputs(self, X, times) -> torch.Tensor:
        """The readout's outputs for X, float64 on the CPU."""
        data = self._checked_data(X, times)
        if self.feature_map_.control_options.get("unobserved_fill") is not None:
            warn_unobserved(data, "samples", self.feature_map_.control_options["unobserved_fill"])
        with torch_threads(threads_for_jobs(self.n_jobs)):
            return self.readout_.decision_function(self._features(data, torch.device(self.device))).cpu()

    def random_features(self, X, times=None) -> np.ndarray:
        """The random features of X (before the readout's standardisation).

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array).

        Returns:
            (N, n_random_features_) float64 array.
        """
        data = self._checked_data(X, times)
        with torch_threads(threads_for_jobs(self.n_jobs)):
            return self._features(data, torch.device(self.device)).cpu().numpy()


class RandomFeatureClassifier(ClassifierMixin, _RandomFeatureEstimator):
    """A scikit-learn classifier of (irregularly sampled, ragged) sequences: a frozen random reservoir's features
    (`RandomFeatures`) read out by ridge regression with a leave-one-out choice of penalty (`RidgeReadout`). One
    forward pass, no training of the reservoir.

    X and times as `neuralde_seq.sklearn.SequenceClassifier`: a list of (T_i, C) or (T_i,) arrays, a 3-D (N, T, C)
    or a 2-D (N, T) array (N univariate sequences), NaN for missing values; ``times`` None (observation indices) or
    one (T_i,) array per sample. Each channel is standardised with the mean and standard deviation of its observed
    values in the X given to ``fit`` (``channel_mean_``, ``channel_scale_``), the feature map is fitted on it, and
    the readout on its features.

    Parameters:
        reservoir: one of `RESERVOIRS` (default "slice-block": damped oscillators, ``memory``).
        features: sequence of `FEATURES`, or "auto" (default); see `RandomFeatures`.
        width: the reservoir's size, or None (default: 1,024 units of a linear CDE, 1,536 with oscillators; see
            `RandomFeatures`).
        num_times: fractions of each series read by "times", "values", "windows" (default 4).
        num_biases: "ppv" and "mpv" thresholds per unit (default 1).
        num_levels: "levels" thresholds per channel (default 64).
        input_scale: multiplies the rescaled path (default 1.0).
        fast_share: share of fast, nearly memoryless oscillators in [0, 1), "auto" (default: 1/3 with
            oscillators, else 0); see `RandomFeatures`.
        timescales: memory range of linear CDE units, "auto" (default), None or (τ_min, τ_max); see
            `RandomFeatures`.
        memory: "auto" (default), "decay" or "oscillation": low-pass or oscillating linear CDE units; see
            `RandomFeatures`.
        model_options: dict of constructor options replacing the registry defaults, or None.
        control_options: dict of `build_control` options (default ``parametrization="index"`` and
            ``unobserved_fill="mean"``: a channel a sample never observes reads its training mean, 0 once
            standardised, said by one `UnobservedChannelWarning` per fit), or None.
        fill_gaps: "auto" (default), None or a positive time step: unobserved points filled into each series' gaps
            so that the reservoir steps about the training data's median time step per knot; see `RandomFeatures`.
        alphas: the ridge penalties searched by leave-one-out error (default `DEFAULT_ALPHAS`).
        fine_tune: None (default: the frozen reservoir), True (`FineTuning`'s defaults), a dict of `FineTuning`
            fields or a `FineTuning`: after the fit, the reservoir and its thresholds are trained by the leave-one-out
            error of the ridge readout on a part of X and kept only where they beat the untrained start on the
            held-out rest; the readout is then refitted on all of X (`neuralde_seq.reservoir_tuning`). Costs about
            4-5 forward passes of the reservoir over X per epoch.
        batch_size: series per forward pass (default 32).
        random_state: int seed, numpy RandomState or None (default: a fresh seed each fit): the reservoir's draw.
        n_jobs: torch threads, joblib's convention: None (default) is 1; -1 all cores.
        device: torch device of the reservoir ("cpu" (default), "cuda", ...); the readout runs there in float64.
        dtype: "float32" (default) or "float64" (or that torch dtype): the reservoir's precision.
        verbose: show the fine-tuning's progress (default False).

    Fitted attributes: ``classes_`` (K,), ``feature_map_`` (`RandomFeatures`; the fine-tuned one where it was
    chosen), ``readout_`` (`RidgeReadout`), ``alpha_``, ``n_random_features_``, ``n_features_in_`` (channels C),
    ``channel_mean_``, ``channel_scale_``, ``seed_``, ``fitted_with_times_`` (whether fit was given times:
    predictions then need them, and refuse them otherwise), ``fine_tuning_`` (None, or the report of
    `neuralde_seq.reservoir_tuning.fine_tune`: which map was chosen, the validation metrics of the start and of the
    best epoch, the history), ``probability_temperature_`` (the T > 0 of `predict_proba`: the temperature minimising
    the log-loss of the training series' leave-one-out decision values (`RidgeReadout.leave_one_out_decision_function`
    of the final readout), searched between 1/30 and 1,000 times their largest spread; not the feature map's
    ``temperature_``, the smooth "ppv"'s).

    Probabilities (`predict_proba`): softmax(decision / T) of the one-vs-all decision values, σ(d / T) for the
    second class with two classes; one temperature fitted on leave-one-out decisions, since the in-sample ones are
    overconfident (ridge often separates its training series). After fine-tuning they are somewhat optimistic: the
    reservoir was trained on part of the same series.
    """

    _classification = True

    def fit(self, X, y, times=None):
        """Fit the feature map and the readout on X, y.

        Arguments:
            X: N sequences: a list of (T_i, C) or (T_i,) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where
                missing.
            y: (N,) labels, at least 2 distinct.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array), strictly increasing.

        Returns:
            self, fitted.

        Raises:
            ValueError: bad X, y or parameters; the message names the problem.
        """
        self._fit(X, y, times)
        return self

    def _targets(self, y, num_samples: int) -> torch.Tensor:
        check_label_types(y)
        labels = column_or_1d(y, warn=True)
        check_classification_targets(labels)
        if labels.shape[0] != num_samples:
            raise ValueError(f"y has {labels.shape[0]} labels but X holds {num_samples} sequences")
        try:
            classes, codes = np.unique(labels, return_inverse=True)
        except TypeError:
            raise ValueError("y mixes label types that cannot be sorted (e.g. strings and numbers)") from None
        if len(classes) < 2:
            raise ValueError(f"y holds only 1 class ({classes[0]!r}): a classifier needs at least 2 classes")
        self.classes_ = classes
        return torch.as_tensor(codes.reshape(-1), dtype=torch.long)

    def decision_function(self, X, times=None):
        """The readout's decision values.

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample, as at `fit`.

        Returns:
            (N,) float64 array for two classes (positive: ``classes_[1]``), else (N, K) columns following
            ``classes_``.
        """
        return self._outputs(X, times).numpy()

    def predict(self, X, times=None):
        """The class of largest decision value of each sequence.

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample, as at `fit`.

        Returns:
            (N,) array of labels from ``classes_``.
        """
        decision = self.decision_function(X, times)
        index = (decision > 0).astype(np.int64) if decision.ndim == 1 else np.argmax(decision, axis=1)
        return self.classes_[index]

    def _log_probabilities(self, X, times) -> torch.Tensor:
        """(N, K) float64 log-probabilities on the CPU: log_softmax(logits / T) (`_class_logits`)."""
        check_is_fitted(self, "probability_temperature_")
        return torch.log_softmax(_class_logits(self._outputs(X, times)) / self.probability_temperature_, dim=1)

    def predict_proba(self, X, times=None):
        """Class probabilities: softmax(decision / T) of the decision values, T = ``probability_temperature_``
        (two classes: σ(d / T) for ``classes_[1]``, exactly 0.5 at d = 0, where `predict` gives ``classes_[0]``, the
        first of the tied columns). The argmax of each row is `predict`'s class, up to probabilities that round to
        equal values (decision values within about 1e-16 of a tie).

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample, as at `fit`.

        Returns:
            (N, K) float64 array; rows sum to 1, columns follow ``classes_``.

        Raises:
            sklearn.exceptions.NotFittedError: before `fit`.
        """
        # softmax normalises the exponentials itself: rows sum to 1 to rounding and d = 0 gives exactly 0.5
        return torch.softmax(self._log_probabilities(X, times), dim=1).numpy()

    def predict_log_proba(self, X, times=None):
        """log of `predict_proba`, computed as log_softmax (log σ with two classes): finite where the probability
        underflows to 0.

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample, as at `fit`.

        Returns:
            (N, K) float64 array of log-probabilities, columns following ``classes_``.
        """
        return self._log_probabilities(X, times).numpy()

    def score(self, X, y, times=None):
        """Accuracy of `predict` against y.

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            y: (N,) true labels.
            times: None or one (T_i,) array per sample, as at `fit`.

        Returns:
            The fraction of sequences whose predicted label equals y, a float.
        """
        return float(accuracy_score(y, self.predict(X, times)))


class RandomFeatureRegressor(RegressorMixin, _RandomFeatureEstimator):
    """A scikit-learn regressor of sequences by random features and a ridge readout: `RandomFeatureClassifier`'s
    parameters and input handling, with (N,) or (N, k) real targets; penalty chosen by the mean squared
    leave-one-out error over the targets.

    Fitted attributes: ``feature_map_``, ``readout_``, ``alpha_``, ``n_random_features_``, ``n_features_in_``,
    ``n_outputs_``, ``channel_mean_``, ``channel_scale_``, ``seed_``, ``fitted_with_times_``, ``fine_tuning_``
    (chosen on the validation part's mean squared error of standardised targets).
    """

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X, y, times=None):
        """Fit the feature map and the readout on X, y.

        Arguments:
            X: N sequences: a list of (T_i, C) or (T_i,) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where
                missing.
            y: (N,) or (N, k) finite targets.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array), strictly increasing.

        Returns:
            self, fitted.
        """
        self._fit(X, y, times)
        return self

    def _targets(self, y, num_samples: int) -> torch.Tensor:
        values = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
        if values.ndim not in (1, 2):
            raise ValueError(f"y must have shape (N,) or (N, k), got {values.shape}")
        if values.shape[0] != num_samples:
            raise ValueError(f"y has {values.shape[0]} targets but X holds {num_samples} sequences")
        self.n_outputs_ = 1 if values.ndim == 1 else int(values.shape[1])
        return torch.as_tensor(values)

    def predict(self, X, times=None):
        """Predicted targets.

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample, as at `fit`.

        Returns:
            (N,) or (N, k) float64 array, shaped as y was at fit.
        """
        return self._outputs(X, times).numpy()

    def score(self, X, y, times=None):
        """R² of `predict` against y (averaged over columns).

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            y: (N,) or (N, k) true targets.
            times: None or one (T_i,) array per sample, as at `fit`.

        Returns:
            R², a float.
        """
        return float(r2_score(y, self.predict(X, times)))
