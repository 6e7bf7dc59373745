"""Random-feature (reservoir) mode: a frozen, randomly initialised model maps each series to features, read out by
a closed-form ridge regression. One forward pass, no backpropagation.

The state of a random linear CDE read out linearly is the "randomized signature" of reservoir computing (Cuchiero,
Gonon, Grigoryeva, Ortega & Teichmann; Compagnoni et al. 2023): the toolkit's structured linear CDEs
(`LinearCDE`, registry ``slice-*``), neural CDEs (``ncde``, ``nrde``, ``log-ncde``) and CT-FWPs (``*-cde``,
``*-ode``, ``*-rde``) serve as reservoirs, and the path's log-signatures as a non-random baseline
(``reservoir="logsignature"``).

Rooms (the names in ``__all__`` are also importable from this package):

- `neuralde_seq.random_features.readout`: `RidgeReadout`, ridge regression in closed form, float64 torch, with the
  penalty chosen from a grid by exact leave-one-out error (the generalised cross-validation of scikit-learn's
  ``RidgeCV``/``RidgeClassifierCV``, from an eigendecomposition of the Gram matrix when samples <= features and of
  the covariance matrix otherwise); classification by one-vs-all ±1 targets as ``RidgeClassifier``
  (`one_vs_all`), and the temperature of the classifier's probabilities.
- `neuralde_seq.random_features.reservoirs`: which models serve as reservoirs (`RESERVOIRS`), how one is built and
  frozen, the memory of its time channel (`MEMORIES`; "Memory" below) and its states (`reservoir_states`).
- `neuralde_seq.random_features.feature_kinds`: the features, by kind: pooled from the states ("final", "mean",
  "times", "ppv", "mpv", "max"; `positive_proportion`, `positive_mean`), of the path itself ("values", "levels")
  and the log-signatures' windows ("final", "times", "windows"), each a small object in its registry.
- `neuralde_seq.random_features.features`: `RandomFeatures`, the feature map (``fit`` on training observations,
  ``transform`` any), which dispatches to the fused kernel where it applies.
- `neuralde_seq.random_features.estimators`: `RandomFeatureClassifier`, `RandomFeatureRegressor`, scikit-learn
  estimators (also in `neuralde_seq.sklearn`), on the base they share with `SequenceClassifier`
  (`neuralde_seq.estimator_base`: X forms, ``times=``, the checks of fit and prediction, ``random_state``,
  ``n_jobs``); the classifier's probabilities are its decision values at one temperature fitted to the readout's
  leave-one-out decisions.
  fitted to the readout's leave-one-out decisions.

What `RandomFeatures.fit` does, in order:

1. **Input and scale.** The map fits an `InputSpec` on the training series (``input_spec_``): with ``standardise``
   (the estimators) each channel's statistics, the gap filling (``fill_gaps``) and the control's options
   (``parametrization="index"`` unless ``control_options`` says otherwise). A reservoir's state must neither stay
   at the identity nor overflow, and what decides that is how far and how roughly the path moves (docs of
   `neuralde_seq.models.linear_cde`, "Scale"): the times and each value channel are divided by their `path_scales`
   on the filled training series (the larger of the channel's spread and the scale that brings its mean quadratic
   variation to 10), then multiplied by ``input_scale``. The times' scale over ``input_scale`` is the spec's time
   unit; the value channels' are the map's own (``value_scales_``: a second scale after standardisation, of the
   path's spread and roughness rather than of the observed values). The model's input is the spec's control of
   these (`InputSpec.inputs_of`). A linear CDE reservoir then gets ``channel_scales`` 1.
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
| slice-block (1024), oscillators, no fast units, the old defaults (3) | ppv | 59.7 | 94.6 | 85.3 | 98.7 | 84.6 | 9-10 |
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

from .estimators import RandomFeatureClassifier, RandomFeatureRegressor
from .feature_kinds import FEATURES, PATH_FEATURES, positive_mean, positive_proportion
from .features import DEFAULT_FEATURES, DEFAULT_LOGSIGNATURE_FEATURES, DEFAULT_OSCILLATION_FEATURES, RandomFeatures
from .readout import DEFAULT_ALPHAS, RidgeReadout, one_vs_all
from .reservoirs import MEMORIES, RESERVOIRS, reservoir_state_width, reservoir_states

__all__ = [
    "RidgeReadout",
    "RandomFeatures",
    "reservoir_states",
    "positive_proportion",
    "RandomFeatureClassifier",
    "RandomFeatureRegressor",
    "RESERVOIRS",
    "FEATURES",
    "MEMORIES",
    "DEFAULT_ALPHAS",
    "DEFAULT_FEATURES",
    "DEFAULT_OSCILLATION_FEATURES",
    "DEFAULT_LOGSIGNATURE_FEATURES",
    "one_vs_all",
    "reservoir_state_width",
    "positive_mean",
    "PATH_FEATURES",
]

# The classes whose instances are fitted and kept carry this package's path, the one users import them from: messages
# and pickles name neuralde_seq.random_features.<Class>, which stays valid whichever room the class lives in.
for _kept in (RidgeReadout, RandomFeatures, RandomFeatureClassifier, RandomFeatureRegressor):
    _kept.__module__ = __name__
del _kept
