"""scikit-learn estimators on the toolkit's models: `SequenceClassifier` and `SequenceRegressor` (and, from
`neuralde_seq.random_features`, the reservoir mode's `RandomFeatureClassifier` and `RandomFeatureRegressor`; both
families build on `neuralde_seq.estimator_base`; the two trained ones share their parameters, training and
prediction in `neuralde_seq.estimator_training`).

Both train any registry model (`MODEL_NAMES`) with `fit` and
follow scikit-learn's conventions (``get_params``/``set_params``, ``clone``, pipelines, ``cross_val_score``,
``GridSearchCV``, pickling).

**X** holds N sequences with NaN marking a missing value, in the forms of
`pad_sequences`: a list of (T_i, C) arrays (or (T_i,) for univariate sequences;
lengths may differ), a 3-D (N, T, C) array, or a **2-D (N, T) array, read as N univariate sequences of T
time steps** (scikit-learn's tabular layout: a row is a sequence, a column a time step). So
``n_features_in_`` is the number of *channels* C (1 for a 2-D X), and a sequence may have any number of time
steps (at least 2) at prediction. Every sequence needs at least one observed value (an all-NaN sample is an
error naming it), values must be finite or NaN, and the channels at prediction must be those of fit.

**times** (keyword of ``fit``, ``predict``, ``predict_proba`` and ``score``): None (each sample's observation
index 0, 1, ...) or one (T_i,) array per sample (a list, or a 2-D (N, T) array), strictly increasing, in any unit;
an estimator fitted with times needs them at prediction, and one fitted without refuses them
(``fitted_with_times_``). Models that read a control path get the time channel in
units of the longest span in the data given to ``fit`` (``time_unit="auto"``, kept for prediction), and models
that read raw observations see the gaps, best in units where they are about 1. In cross-validation, route them with
scikit-learn's metadata routing (``sklearn.set_config(enable_metadata_routing=True)``,
``est.set_fit_request(times=True).set_score_request(times=True)``, ``cross_val_score(est, X, y,
params={"times": times})``).

What ``fit`` does, in order (so a direct `fit` call reproduces it exactly):

1. ``data = read_sequences(X, times, dtype, name)`` (X read once into an `IrregularDataset`, its observations checked
   once; `neuralde_seq.estimator_inputs`); ``spec = InputSpec.fit(model, data, control=..., standardise=True,
   fill_gaps=...)`` (`neuralde_seq.input_spec`, kept as ``input_spec_`` and applied to every later X by
   ``spec.transform``): each channel is standardised with the mean and standard deviation of its observed values in
   ``X`` (`channel_statistics`, also given as ``channel_mean_`` and ``channel_scale_``). The finite range of the models
   (`magnitude_limit`) applies to the standardised values, so raw values of 1e12 are accepted; a value beyond the
   dtype's largest number, or one that lies beyond the range once standardised (at prediction, far outside the training
   data), is refused naming it;
2. the model's input, ``spec.transform(data)``: for models that read a control path, with ``fill_gaps="auto"`` (the
   default) each series' gaps first get unobserved (NaN) points (`neuralde_seq.data.fill_gaps`) so that its path
   steps about the median time step between consecutive observations in the ``X`` given to ``fit``
   (`median_step`, kept as ``input_spec_.fill_step``) per knot: a regular series with dropped points gives the
   control of its grid with NaN there (from its first kept point to its last), so ragged series with their times
   and the same series on their grid are one input (without it, delta-rde on aeon's GunPoint with 30 % of the
   points removed scored 83 % with a 29-point spread over 3 seeds, 94 % with a 6-point spread with it;
   benchmarks/ragged_vs_grid.py); then the model's input, built from the spec's `ControlOptions` and time unit
   without checking the dataset's observations again (`InputSpec.inputs_of`). Models that read raw observations
   see the gaps as times and are not filled. Models that
   read a control path get ``parametrization="index"`` unless ``control_options`` says otherwise: the path is
   parametrised by observation index, so samples may have different times (with ``"time"``,
   `build_control` needs every sample on one time grid) and the solver's grid does not
   depend on the time units; the times enter the path as its time channel (the registry's
   ``time_channel=True``), divided by the longest span of the data given to ``fit`` (``time_unit="auto"``, unless
   ``control_options`` gives ``time_unit``: in raw units a 2,000-point series' time channel drove the CDEs' logits
   to hundreds at initialisation). With times None the two parametrisations coincide. Two more defaults of the
   control models, for records whose channels are measured at their own times: a channel that a sample never
   observes is filled with its training mean (``unobserved_fill="mean"``, 0 once standardised; one
   `UnobservedChannelWarning` per fit and per prediction names the channels and how many samples miss them),
   and, with ``control_options={"intensity_channel": True}``, each channel's running count of observations is a
   channel of the path too (which channels were measured when: on simulated ICU stays it lifted delta-rde from
   0.845 to 0.892 AUROC with 400 stays; not the default, because raw counts grow with the length as raw times do
   and drove a CDE's logits to the hundreds at initialisation on a 2,000-point series, while counts divided by a
   typical series' count, ``"auto"``, kept little of the gain; docs/benchmarks.md, "Irregular records"). Models that
   read raw observations see missing values through their own masks: of ``control_options`` they read ``time_unit`` and
   set the rest aside with an `IgnoredOptionWarning`, so that one grid search runs over every model name;
3. with ``validation_fraction`` (with ``epochs="auto"`` and no ``validation_fraction``: 0.15,
   ``AUTO_VALIDATION_FRACTION``), a validation split (stratified on the labels for the classifier, see
   `stratified_split` for classes too small to stratify; random for the regressor), drawn with ``seed``;
4. the training parameters as the runner's `TrainingSettings` (checked there), and the `TrainingSpec` that `fit`
   is given: epochs, lr, batch_size, weight_decay, grad_clip, penalty_weight, schedule, ``max_steps`` and
   ``n_jobs``'s threads; with ``epochs="auto"`` the epochs, evaluations and patience follow from the budget
   ``max_steps`` and the number of training series (`_step_budget`,
   `neuralde_seq.estimator_training`);
5. with ``augment_crop < 1`` or ``augment_drop_rate > 0``, the training inputs are `AugmentedInputs`: every batch
   is cropped and thinned afresh by `random_crop_and_drop` (torch's global generator, seeded by `fit`) before
   ``spec.transform`` builds its inputs; validation inputs stay as built in step 2;
6. for each of the ``ensemble`` members j = 0, 1, ... with the seed ``member_seed(seed, j)`` (``seed + 1000 j``,
   as the benchmark runner's ensembles; member 0 has ``seed``): ``torch.manual_seed``, ``create_model(model,
   inputs, outputs, **model_options)`` moved to ``device`` and ``dtype``, the empirical channel means of GRU-D,
   GRU-Δt and the like set from the training inputs, and ``fit(model, objective, (train inputs, targets), val,
   spec)`` with the member's seed (with ``baseline="summary-features"`` the member is `LogitOffset` of the model,
   whose logits are added, through a gate that starts at 0, to the out-of-fold logits of a
   `SummaryFeatureClassifier` fitted on ``X`` with ``seed`` (`summary_feature_logits`; the baseline fitted on all
   of ``X``, ``baseline_``, gives the offsets of later X), so training starts from the baseline), with
   `Classification` or `Regression` (MSE on targets standardised with their mean and standard deviation,
   ``target_mean_`` and ``target_scale_``; predictions are mapped back), and with a validation split
   `BestCheckpoint` in memory (the best validation weights are restored at the end) and, given a patience
   (``patience``, or ``epochs="auto"``'s), `EarlyStopping`. Every member trains on the same split;
7. ``model_`` is the one member, or `EnsembleClassifier` (the mean of the members' class probabilities) /
   `EnsembleRegressor` (the mean of their outputs, so of their predictions) of them.

``seed`` is ``random_state`` when it is an int, else drawn from it (None: a fresh one each fit). torch's
global random state is saved before and restored after ``fit`` (the estimator leaves it as it was).
"""

from __future__ import annotations

import numpy as np
import torch

from .estimator_base import SequenceClassifierMixin, SequenceRegressorMixin
from .estimator_training import AUTO_MAX_STEPS, AUTO_VALIDATION_FRACTION, _SequenceEstimator
from .random_features import RandomFeatureClassifier, RandomFeatureRegressor
from .training.augmentation import EnsembleClassifier, EnsembleRegressor
from .training.objectives import Classification, Regression

__all__ = [
    "SequenceClassifier",
    "SequenceRegressor",
    "RandomFeatureClassifier",
    "RandomFeatureRegressor",
    "AUTO_MAX_STEPS",
    "AUTO_VALIDATION_FRACTION",
]


class SequenceClassifier(SequenceClassifierMixin, _SequenceEstimator):
    """A scikit-learn classifier of (irregularly sampled, ragged) sequences with any registry model.

    X, times and what ``fit`` does: see the module docstring; parameters: see below. ``y``: N hashable labels
    (strings, ints, ...; of one kind: strings and numbers mixed are refused, as by scikit-learn's
    ``unique_labels``), at least 2 distinct; ``classes_`` holds them sorted (``np.unique(y)``) and
    `predict` returns them.

    Parameters:
        model: registry name, one of `MODEL_NAMES` (default "delta-rde": on aeon's long series the trained model to
            try first, above delta-cde on all four sets measured and 19-75 times faster per epoch, docs/benchmarks.md;
            for a first answer in seconds try `RandomFeatureClassifier`).
        model_options: dict of constructor arguments replacing the registry defaults (e.g. ``{"hidden": 16}``,
            ``{"d_model": 32, "n_heads": 4}``, ``{"solver": {"method": "rk4"}}``), or None.
        control_options: dict of `build_control` options replacing the defaults (control models; e.g.
            ``{"intensity_channel": True}``, ``{"unobserved_fill": None}``, ``{"parametrization": "time"}`` or
            ``{"time_unit": 1.0}`` for raw times instead of the default ``"auto"``; `SequenceClassifier`), or None.
        fill_gaps: "auto" (default: a control path steps about the training data's median time step per knot, its
            gaps filled with unobserved points; module docstring, step 2), None (one knot per observation) or a
            positive time step; models that read raw observations are not filled.
        epochs: passes over the training data (default 100), or "auto": at most ``max_steps`` steps, stopping
            early on a validation split (module docstring).
        max_steps: the step budget of ``epochs="auto"`` (None, the default: 2,000), or a cap with integer epochs.
        lr: Adam's learning rate (default 3e-3).
        batch_size: samples per training step, and per forward pass at prediction (default 32).
        weight_decay: Adam's weight decay (default 0.0): ``weight_decay * w`` added to each gradient before Adam's
            moments (torch's ``Adam``, not the decoupled ``AdamW``), as `fit`.
        grad_clip: max gradient norm, or None (default: no clipping), as `fit`.
        penalty_weight: weight of the model's ``penalty()`` in the loss (default 0.0), as `fit`.
        schedule: the learning rate over the ``epochs``: "auto" (default: the model's, `training_defaults`:
            "cosine" for delta-rde, "constant" for the others), "constant", or "cosine" (a linear warm-up over the
            first 5 % of the steps, then a half cosine towards 0), as `fit`.
        validation_fraction: None (default: train on all of X; with ``epochs="auto"`` 0.15), or the fraction in
            (0, 1) of X held out (stratified) to keep the weights of the best validation accuracy (ties: lower loss).
        patience: None (default), or stop after this many evaluations without a better validation score (one per
            epoch with integer epochs, needing ``validation_fraction``; ``epochs="auto"``: module docstring).
        augment_crop: the smallest fraction of a training series' points each batch's random crop keeps, in
            (0, 1], or "auto" (default: the model's, `training_defaults`).
        augment_drop_rate: probability of dropping each point of a training series at each batch, in [0, 1), or
            "auto" (default: the model's).
        ensemble: models trained with seeds ``seed_ + 1000 j`` (default 1); their class probabilities averaged.
        baseline: None (default) or "summary-features": the network learns what a `SummaryFeatureClassifier`
            misses, its logits added to the summary model's (``baseline_``; module docstring, step 6). For records
            with few samples.
        random_state: int seed, numpy RandomState or None (default: a fresh seed each fit); see the module
            docstring.
        n_jobs: torch threads during fit and predict, joblib's convention: None (default) is 1 unless inside
            ``joblib.parallel_config(n_jobs=...)``; -1 all cores, -2 all but one.
        verbose: show progress bars while training (default False).
        device: torch device to train and predict on ("cpu" (default), "cuda", ...).
        dtype: "float32" (default) or "float64" (or a torch dtype): the precision of the data and the model.

    Fitted attributes: ``classes_`` (K,), ``model_`` (the trained torch module; an `EnsembleClassifier` of the members
    with ``ensemble`` > 1; `LogitOffset` members with a baseline), ``baseline_`` (the fitted `SummaryFeatureClassifier`
    of ``baseline="summary-features"``, else None), ``history_`` (`fit`'s history; with an ensemble the first member's,
    every member's under ``"ensemble_members"``), ``training_spec_`` (the `TrainingSpec` of member 0: the epochs
    ``epochs="auto"`` chose, its evaluations and seed), ``patience_`` (the evaluations without improvement that stop a
    member, or None), ``n_features_in_`` (channels C), ``channel_mean_`` and ``channel_scale_`` (C,),
    ``control_options_`` (the control options used), ``input_spec_`` (the fitted `InputSpec` that turns X into the
    model's input; ``input_spec_.fill_step`` the step of ``fill_gaps``, or None), ``seed_``, ``validation_index_``
    (sorted indices of the samples of X held out for validation, or None), ``fitted_with_times_`` (whether fit was given
    times: predictions then need them, and refuse them otherwise).
    """

    _ensemble_of = EnsembleClassifier  # how ensemble > 1 members are read as one model

    def _fit(self, X, y, times):
        def targets(num_samples):
            classes, codes = self._class_codes(y, num_samples)
            found["classes"] = classes
            codes = torch.as_tensor(codes, dtype=torch.long)
            return codes, len(classes), Classification(len(classes)), (codes.numpy(), [str(c) for c in classes])

        found = {}
        self._train(X, y, times, targets)
        self.classes_ = found["classes"]

    def predict_proba(self, X, times=None):
        """Class probabilities (softmax of the model's logits).

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array), as at `fit`.

        Returns:
            (N, K) float64 array; rows sum to 1, columns follow ``classes_``.
        """
        logits = self._outputs(X, times)
        logits = logits - logits.max(axis=1, keepdims=True)
        weights = np.exp(logits)
        return weights / weights.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X, times=None):
        """log of `predict_proba`.

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array), as at `fit`.

        Returns:
            (N, K) float64 array of log-probabilities, columns following ``classes_``.
        """
        logits = self._outputs(X, times)
        shifted = logits - logits.max(axis=1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))

    def predict(self, X, times=None):
        """The most probable class of each sequence.

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array), as at `fit`.

        Returns:
            (N,) array of labels from ``classes_``.
        """
        probabilities = self.predict_proba(X, times)  # checks that the estimator is fitted
        return self.classes_[np.argmax(probabilities, axis=1)]


class SequenceRegressor(SequenceRegressorMixin, _SequenceEstimator):
    """A scikit-learn regressor of (irregularly sampled, ragged) sequences with any registry model.

    X, times and what ``fit`` does: see the module docstring. ``y``: (N,) or (N, k) finite real targets; the
    model has k outputs (1 for (N,) targets) and is trained with the MSE on targets standardised per column
    (``target_mean_``, ``target_scale_``); `predict` maps its outputs back to y's scale and shape.

    Parameters:
        model: registry name, one of `MODEL_NAMES` (default "delta-rde": on aeon's long series the trained model to
            try first, above delta-cde on all four sets measured and 19-75 times faster per epoch, docs/benchmarks.md;
            for a first answer in seconds try `RandomFeatureClassifier`).
        model_options: dict of constructor arguments replacing the registry defaults (e.g. ``{"hidden": 16}``,
            ``{"d_model": 32, "n_heads": 4}``, ``{"solver": {"method": "rk4"}}``), or None.
        control_options: dict of `build_control` options replacing the defaults (control models; e.g.
            ``{"intensity_channel": True}``, ``{"unobserved_fill": None}``, ``{"parametrization": "time"}`` or
            ``{"time_unit": 1.0}`` for raw times instead of the default ``"auto"``; `SequenceClassifier`), or None.
        fill_gaps: "auto" (default: a control path steps about the training data's median time step per knot, its
            gaps filled with unobserved points; module docstring, step 2), None (one knot per observation) or a
            positive time step; models that read raw observations are not filled.
        epochs: passes over the training data (default 100), or "auto": at most ``max_steps`` steps, stopping
            early on a validation split (module docstring).
        max_steps: the step budget of ``epochs="auto"`` (None, the default: 2,000), or a cap with integer epochs.
        lr: Adam's learning rate (default 3e-3).
        batch_size: samples per training step, and per forward pass at prediction (default 32).
        weight_decay: Adam's weight decay (default 0.0): ``weight_decay * w`` added to each gradient before Adam's
            moments (torch's ``Adam``, not the decoupled ``AdamW``), as `fit`.
        grad_clip: max gradient norm, or None (default: no clipping), as `fit`.
        penalty_weight: weight of the model's ``penalty()`` in the loss (default 0.0), as `fit`.
        schedule: the learning rate over the ``epochs``: "auto" (default: the model's, `training_defaults`:
            "cosine" for delta-rde, "constant" for the others), "constant", or "cosine" (a linear warm-up over the
            first 5 % of the steps, then a half cosine towards 0), as `fit`.
        validation_fraction: None (default: train on all of X; with ``epochs="auto"`` 0.15), or the fraction in
            (0, 1) of X held out (drawn at random) to keep the weights of the best validation MSE.
        patience: None (default), or stop after this many evaluations without a better validation score (one per
            epoch with integer epochs, needing ``validation_fraction``; ``epochs="auto"``: module docstring).
        augment_crop: every training batch's random crop: the smallest fraction of a series' points kept, in
            (0, 1], or "auto" (default: the model's, `training_defaults`).
        augment_drop_rate: every training batch's drop rate, in [0, 1), or "auto" (default: the model's).
        ensemble: models trained with seeds ``seed_ + 1000 j`` (default 1); their predictions averaged.
        baseline: None only (the summary-feature baseline is a classifier's; given, it is refused).
        random_state: int seed, numpy RandomState or None (default: a fresh seed each fit); see the module
            docstring.
        n_jobs: torch threads during fit and predict, joblib's convention: None (default) is 1 unless inside
            ``joblib.parallel_config(n_jobs=...)``; -1 all cores, -2 all but one.
        verbose: show progress bars while training (default False).
        device: torch device to train and predict on ("cpu" (default), "cuda", ...).
        dtype: "float32" (default) or "float64" (or a torch dtype): the precision of the data and the model.

    Fitted attributes: ``model_`` (an `EnsembleRegressor` with ``ensemble`` > 1), ``history_``, ``training_spec_``,
    ``patience_``, ``n_features_in_`` (channels C), ``n_outputs_`` (k),
    ``channel_mean_``, ``channel_scale_``, ``target_mean_`` and ``target_scale_`` (k,), ``control_options_``,
    ``input_spec_``, ``seed_``, ``validation_index_``, ``fitted_with_times_``.
    """

    _ensemble_of = EnsembleRegressor  # how ensemble > 1 members are read as one model

    def _fit(self, X, y, times):
        def targets(num_samples):
            values = self._real_targets(y, num_samples)
            columns = values.reshape(num_samples, -1)
            mean = columns.mean(axis=0)
            scale = columns.std(axis=0)
            scale = np.where(scale > 0, scale, 1.0)
            found.update(mean=mean, scale=scale, ndim=values.ndim)
            standardised = ((columns - mean) / scale).reshape(values.shape)
            return torch.as_tensor(standardised, dtype=self._torch_dtype()), columns.shape[1], Regression("mse"), None

        found = {}
        self._train(X, y, times, targets)
        self.target_mean_, self.target_scale_ = found["mean"], found["scale"]
        self.n_outputs_ = int(found["mean"].shape[0])
        self._target_ndim = found["ndim"]

    def predict(self, X, times=None):
        """Predicted targets, mapped back to y's scale.

        Arguments:
            X: N sequences, in the forms `fit` accepts, with the channels of fit.
            times: None or one (T_i,) array per sample (a list or a 2-D (N, T) array), as at `fit`.

        Returns:
            (N,) or (N, k) float64 array, shaped as y was at fit.
        """
        outputs = self._outputs(X, times) * self.target_scale_ + self.target_mean_
        return outputs[:, 0] if self._target_ndim == 1 else outputs
