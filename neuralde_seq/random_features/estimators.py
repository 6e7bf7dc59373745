"""The scikit-learn estimators of random features, `RandomFeatureClassifier` and `RandomFeatureRegressor` (also in
`neuralde_seq.sklearn`): a `RandomFeatures` map fitted on X (its input spec standardises each channel), read out by a
`RidgeReadout`, with the input handling, checks and conventions of `neuralde_seq.sklearn`'s estimators (their shared
base, `neuralde_seq.estimator_base`: X read and checked once).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from ..estimator_base import SequenceClassifierMixin, SequenceEstimatorBase, SequenceRegressorMixin
from ..estimator_inputs import estimator_dtype
from ..reservoir_tuning import FineTuning, fine_tune
from .features import RandomFeatures
from .readout import DEFAULT_ALPHAS, RidgeReadout, _class_logits, _fit_probability_temperature, one_vs_all

__all__ = ["RandomFeatureClassifier", "RandomFeatureRegressor"]


class _RandomFeatureEstimator(SequenceEstimatorBase):
    """Shared parameters, features and readout of the two estimators (see `RandomFeatureClassifier`)."""

    _classification = False
    _fitted_attribute = "readout_"

    def __init__(
        self,
        reservoir="slice-block",
        *,
        features="auto",
        width=None,
        num_times=4,
        num_biases=1,
        num_levels=64,
        input_scale=1.0,
        fast_share="auto",
        timescales="auto",
        memory="auto",
        model_options=None,
        control_options=None,
        fill_gaps="auto",
        alphas=DEFAULT_ALPHAS,
        fine_tune=None,
        batch_size=32,
        random_state=None,
        n_jobs=None,
        device="cpu",
        dtype="float32",
        verbose=False,
    ):
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

    def _data(self, X, times):
        """X (and times) as an unlabelled dataset in the estimator's dtype (`SequenceClassifier`'s checks,
        `read_sequences`)."""
        return self._dataset(X, times, estimator_dtype(self.dtype))

    def _prediction_dtype(self) -> torch.dtype:
        return estimator_dtype(self.dtype)

    def _unobserved_fill(self):
        return self.feature_map_.input_spec_.control.unobserved_fill

    def _features(self, data) -> torch.Tensor:
        """The fitted map's features of ``data`` (the dataset X was read into, on the estimator's device)."""
        return self.feature_map_.transform(data)

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
        self._require_y(y)
        readout = RidgeReadout(self.alphas, classification=self._classification)  # checks alphas first
        tuning = FineTuning.read(self.fine_tune)  # and the fine-tuning settings
        seed = self._seed()
        # the map's input spec standardises each channel and fills a channel a sample never observes with its
        # training mean (0 once standardised, said in one UnobservedChannelWarning), unless control_options say
        feature_map = RandomFeatures(
            self.reservoir,
            features=self.features,
            width=self.width,
            num_times=self.num_times,
            num_biases=self.num_biases,
            num_levels=self.num_levels,
            input_scale=self.input_scale,
            fast_share=self.fast_share,
            timescales=self.timescales,
            memory=self.memory,
            model_options=self.model_options,
            control_options={"unobserved_fill": "mean", **(self.control_options or {})},
            fill_gaps=self.fill_gaps,
            standardise=True,
            seed=seed,
            batch_size=self.batch_size,
        )
        data = self._data(X, times)  # read and checked once
        targets = self._targets(y, len(data))
        fitted_with_times = times is not None
        data = data.to(torch.device(self.device))
        self.feature_map_ = feature_map
        with self._threads():
            feature_map.fit(data)
            features = self._features(data)
            readout.fit(features, targets.to(features.device))
            self.fine_tuning_ = None
            if tuning is not None:
                features, readout = self._fine_tune(data, targets, readout, features, tuning, seed)
        spec = feature_map.input_spec_
        self.channel_mean_, self.channel_scale_ = np.array(spec.channel_mean), np.array(spec.channel_scale)
        self.readout_ = readout
        if self._classification:
            # on the final readout's leave-one-out decisions: its in-sample ones often separate the training series
            self.probability_temperature_ = _fit_probability_temperature(
                readout.leave_one_out_decision_function(), targets
            )
        self.n_features_in_ = data.num_channels
        self.n_random_features_ = int(features.shape[1])
        self.alpha_ = readout.alpha_
        self.seed_ = seed
        self.fitted_with_times_ = fitted_with_times
        return features

    def _fine_tune(
        self, data, targets: torch.Tensor, readout: RidgeReadout, features: torch.Tensor, tuning: FineTuning, seed: int
    ):
        """`neuralde_seq.reservoir_tuning.fine_tune` of the fitted map; the readout refitted on all the series when
        the fine-tuned map is chosen. Returns (features, readout) of the map kept."""
        feature_map = self.feature_map_
        device = data.values.device
        arguments = feature_map.model_arguments(data)
        if self._classification:
            codes = targets.to(device)
            readout_targets, strata = one_vs_all(codes, len(self.classes_)), targets.cpu().numpy()
        else:
            y = targets.to(device=device, dtype=torch.float64).reshape(len(data), -1)
            scale = y.std(dim=0, unbiased=False)
            readout_targets, strata = (y - y.mean(dim=0)) / torch.where(scale > 0, scale, torch.ones_like(scale)), None
        progress = f"{type(self).__name__} fine-tuning" if self.verbose else False
        tuned, report = fine_tune(
            feature_map,
            readout,
            arguments,
            readout_targets,
            tuning,
            classification=self._classification,
            strata=strata,
            seed=seed,
            progress=progress,
        )
        self.fine_tuning_ = report
        if tuned is feature_map:
            return features, readout
        self.feature_map_ = tuned
        features = self._features(data)
        refitted = RidgeReadout(self.alphas, classification=self._classification)
        refitted.fit(features, targets.to(features.device))
        return features, refitted

    def _outputs(self, X, times) -> torch.Tensor:
        """The readout's outputs for X, float64 on the CPU."""
        data = self._prediction_data(X, times).to(torch.device(self.device))
        with self._threads():
            return self.readout_.decision_function(self._features(data)).cpu()

    def random_features(self, X, times=None) -> np.ndarray:
        """The random features of X (before the readout's standardisation).

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array).

        Returns:
            (N, n_random_features_) float64 array.
        """
        data = self._prediction_data(X, times, warn=False).to(torch.device(self.device))
        with self._threads():
            return self._features(data).cpu().numpy()


class RandomFeatureClassifier(SequenceClassifierMixin, _RandomFeatureEstimator):
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

    def _targets(self, y, num_samples: int) -> torch.Tensor:
        self.classes_, codes = self._class_codes(y, num_samples)
        return torch.as_tensor(codes, dtype=torch.long)

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


class RandomFeatureRegressor(SequenceRegressorMixin, _RandomFeatureEstimator):
    """A scikit-learn regressor of sequences by random features and a ridge readout: `RandomFeatureClassifier`'s
    parameters and input handling, with (N,) or (N, k) real targets; penalty chosen by the mean squared
    leave-one-out error over the targets.

    Fitted attributes: ``feature_map_``, ``readout_``, ``alpha_``, ``n_random_features_``, ``n_features_in_``,
    ``n_outputs_``, ``channel_mean_``, ``channel_scale_``, ``seed_``, ``fitted_with_times_``, ``fine_tuning_``
    (chosen on the validation part's mean squared error of standardised targets).
    """

    def _targets(self, y, num_samples: int) -> torch.Tensor:
        values = self._real_targets(y, num_samples)
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
