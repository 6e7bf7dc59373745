"""What the scikit-learn estimators of trained models share: `_SequenceEstimator`, the base of `SequenceClassifier`
and `SequenceRegressor` (`neuralde_seq.sklearn`, whose module docstring says what ``fit`` does, step by step), with
their parameters and checks, training and prediction, and the step budget of ``epochs="auto"`` (`_step_budget`).
"""

from __future__ import annotations

import math
import numbers
from functools import partial

import numpy as np
import torch
from sklearn.base import ClassifierMixin
from sklearn.model_selection import train_test_split

from .data.base.datasets import IrregularDataset, stratified_split
from .estimator_base import SequenceEstimatorBase
from .estimator_inputs import estimator_dtype, threads_for_jobs
from .input_checks import UnknownOptionError, did_you_mean, unknown_name_message
from .models import (
    MODEL_NAMES,
    check_control_overrides,
    create_model,
    model_entry,
    model_option_names,
    training_defaults,
)
from .solvers import parse_solver
from .training.augmentation import AugmentedInputs, member_seed
from .training.baseline_offset import BASELINES, LogitOffset, baseline_logits, summary_feature_logits
from .training.callbacks import BestCheckpoint, EarlyStopping
from .training.checkpoints import model_device
from .training.config import TrainingSettings
from .training.fit import fit as _fit
from .training.input_spec import InputSpec, check_fill_gaps
from .training.objectives import ModelArguments
from .training.objectives import predict as _predict
from .training.spec import TrainingSpec
from .user_warnings import IgnoredOptionWarning, options_spelled_as, warn_user

__all__ = ["AUTO_MAX_STEPS", "AUTO_VALIDATION_FRACTION"]

# epochs="auto": a budget of optimiser steps instead of passes, since one number of epochs is 3 steps each on 100
# series and 300 on 10,000. 2,000 steps: the default model (delta-rde, batch 32, 500-point series) took 0.08 s a
# step on one CPU thread, so at most about 3 minutes; the default epochs=100 give 300-400 steps on 100 series.
AUTO_MAX_STEPS = 2000
AUTO_VALIDATION_FRACTION = 0.15  # the split made for epochs="auto" without validation_fraction (the benchmarks' 15 %)
AUTO_EVALUATIONS = 50  # at least this many evaluations over the budget: its early stopping needs them on long epochs
AUTO_PATIENCE_SHARE = 0.2  # default patience: the evaluations covering a fifth of the budget


def _step_budget(num_train: int, batch_size: int, budget: int, patience: int | None) -> tuple[dict, int]:
    """How ``epochs="auto"`` spends ``budget`` optimiser steps on ``num_train`` training series.

    Epochs: ``budget // steps_per_epoch`` (at least 1), so that the run takes at most ``budget`` steps and the
    cosine schedule ends with it; ``max_steps`` is set only where one epoch is longer than the budget. `fit`
    evaluates at the end of every epoch and, where an epoch is longer than ``ceil(budget / AUTO_EVALUATIONS)``
    steps, every that many steps besides. The default patience covers ``AUTO_PATIENCE_SHARE`` of the budget:
    ``ceil(0.2 budget / steps between evaluations)`` evaluations (100 series, batch 32, budget 2,000: 3 steps an
    epoch, 666 epochs, patience 134; 10,000 series: 266 steps an epoch, 7 epochs, an evaluation every 40 steps,
    patience 10).

    Arguments:
        num_train: series in the training split (a positive integer).
        batch_size: samples per step.
        budget: optimiser steps at most.
        patience: evaluations without improvement before stopping, or None (the default above).

    Returns:
        (the `TrainingSpec` fields ``epochs``, ``eval_every`` and ``max_steps``, the patience in evaluations).
    """
    steps_per_epoch = -(-num_train // batch_size)
    spacing = -(-budget // AUTO_EVALUATIONS)
    fields = {
        "epochs": max(1, budget // steps_per_epoch),
        "eval_every": spacing if steps_per_epoch > spacing else None,
        "max_steps": budget if steps_per_epoch > budget else None,
    }
    if patience is None:
        patience = max(1, math.ceil(AUTO_PATIENCE_SHARE * budget / min(steps_per_epoch, spacing)))
    return fields, patience


class _SequenceEstimator(SequenceEstimatorBase):
    """Shared parameters, input handling, training and prediction of the two estimators.

    Parameters:
        model: registry name, one of `MODEL_NAMES` (default "delta-rde": on aeon's long series the trained model to
            try first, above delta-cde on all four sets measured and 19-75 times faster per epoch, docs/benchmarks.md;
            for a first answer in seconds try `RandomFeatureClassifier`).
        model_options: dict of constructor arguments replacing the registry defaults (e.g. ``{"hidden": 16}``,
            ``{"d_model": 32, "n_heads": 4}``, ``{"solver": {"method": "rk4"}}``), or None.
        control_options: dict of `build_control` options replacing the registry's and the estimators' defaults
            (``parametrization="index"``, ``time_unit="auto"``, ``unobserved_fill="mean"``; `neuralde_seq.sklearn`'s
            docstring, step 2), for models that read a control path; e.g. ``{"unobserved_fill": None}`` to refuse a
            sample that never observes a channel, ``{"intensity_channel": True}`` (each channel's running count of
            observations; ``"auto"``: where channels are measured at their own times, in units of a typical
            series' count), ``{"recency_channel": True}`` (the time since each channel's last observation),
            ``{"parametrization": "time"}``, or ``{"time_unit": 1.0}``: the raw times in the time channel instead of
            ``"auto"``, times divided by the longest span in the data given to ``fit``, kept for prediction), or
            None. Models that read raw observations take ``time_unit`` (their times divided by it; default: as
            given) and set the other options aside with an `IgnoredOptionWarning`. Read into ``input_spec_``.
        fill_gaps: "auto" (default), None or a positive time step: for models that read a control path,
            unobserved points filled into each series' gaps so that the path steps about this step per knot ("auto":
            the median step of the data given to ``fit``; `neuralde_seq.sklearn`'s docstring, step 2); None reads the
            series as given (one knot per observation). Models that read raw observations are not filled ("auto"
            leaves them as they are; a number is refused).
        epochs: passes over the training data (default 100), or "auto": a budget of ``max_steps`` optimiser
            steps with early stopping on a validation split (``validation_fraction``, default 0.15), the epochs
            following from the budget and the number of training series (`_step_budget`). The defaults give a few
            hundred steps on a dataset of tens of series: 20 epochs at 1e-3 left the CT-FWPs near chance on aeon's
            PickupGestureWiimoteZ (50 series), docs/your_own_data.md.
        max_steps: with ``epochs="auto"`` the step budget (None, the default: ``AUTO_MAX_STEPS`` = 2,000); with
            integer epochs None (default) or a cap on the steps (``history_["stopped_by"]`` is then "max_steps").
        lr: Adam's learning rate (default 3e-3, the benchmarks' rate for every model).
        batch_size: samples per step (and per forward pass at prediction; default 32).
        weight_decay: Adam's weight decay (default 0.0), as `fit`.
        grad_clip: max gradient norm, or None, as `fit`.
        penalty_weight: weight of the model's ``penalty()`` in the loss (default 0.0), as `fit`.
        schedule: the learning rate over the ``epochs``: "auto" (default: the model's, `training_defaults`:
            "cosine" for delta-rde, "constant" for the others), "constant", or "cosine" (a linear warm-up over the
            first 5 % of the steps, then a half cosine towards 0), as `fit`.
        validation_fraction: None (train on all of X for ``epochs`` epochs; with ``epochs="auto"`` 0.15 of X), or a
            fraction in (0, 1) of X held out to select the best evaluation's weights (and to stop early).
        patience: None, or stop after this many evaluations without a better validation score: one evaluation
            per epoch with integer ``epochs`` (needs ``validation_fraction``); with ``epochs="auto"`` (None:
            the evaluations covering a fifth of the budget) see `_step_budget`.
        augment_crop: the smallest fraction of a training series' observed points the random crop of every
            batch keeps, in (0, 1], or "auto" (default: the model's, `training_defaults`; 1.0, no crop, unless
            the registry says otherwise), as `random_crop_and_drop`.
        augment_drop_rate: probability of dropping each observed point of a training series afresh at every
            batch, in [0, 1), or "auto" (default: the model's; 0.0, none, unless the registry says otherwise).
            Validation and prediction read the series whole.
        ensemble: models trained (a positive integer, default 1), with the seeds ``member_seed(seed, j)``
            (``seed + 1000 j``), on the same split; the classifier averages their class probabilities, the
            regressor their predictions.
        baseline: None (default), or "summary-features" (classifier only): the network's logits are added to those
            of a `SummaryFeatureClassifier` (out of fold on the training data, 5 stratified folds; for new data the
            one fitted on all of it, ``baseline_``), so that the network learns what the per-channel summaries
            miss (`neuralde_seq.training.baseline_offset`). On irregular records with few samples, where the
            summaries carry most of the signal (docs/benchmarks.md, "Irregular records").
        random_state: int seed, numpy RandomState or None (`neuralde_seq.sklearn`'s docstring).
        n_jobs: torch threads during fit and predict, joblib's convention: None is 1 (the safe choice for these
            small models, `threads`) unless inside ``joblib.parallel_config(n_jobs=...)``;
            -1 all cores, -2 all but one. torch's previous setting is restored afterwards.
        verbose: show progress bars while training.
        device: torch device to train and predict on ("cpu", "cuda", ...).
        dtype: "float32" or "float64" (or a torch dtype): the precision of the data and the model.
    """

    def __init__(
        self,
        model="delta-rde",
        *,
        model_options=None,
        control_options=None,
        fill_gaps="auto",
        epochs=100,
        max_steps=None,
        lr=3e-3,
        batch_size=32,
        weight_decay=0.0,
        grad_clip=None,
        penalty_weight=0.0,
        schedule="auto",
        validation_fraction=None,
        patience=None,
        augment_crop="auto",
        augment_drop_rate="auto",
        ensemble=1,
        baseline=None,
        random_state=None,
        n_jobs=None,
        verbose=False,
        device="cpu",
        dtype="float32",
    ):
        self.model = model
        self.model_options = model_options
        self.control_options = control_options
        self.fill_gaps = fill_gaps
        self.epochs = epochs
        self.max_steps = max_steps
        self.lr = lr
        self.batch_size = batch_size
        self.weight_decay = weight_decay
        self.grad_clip = grad_clip
        self.penalty_weight = penalty_weight
        self.schedule = schedule
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.augment_crop = augment_crop
        self.augment_drop_rate = augment_drop_rate
        self.ensemble = ensemble
        self.baseline = baseline
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.device = device
        self.dtype = dtype

    _fitted_attribute = "model_"

    # ------------------------------------------------------------------ parameters
    def _torch_dtype(self) -> torch.dtype:
        return estimator_dtype(self.dtype)

    def _checked_settings(self) -> dict:
        """The parameters checked, before any work: a bad one raises naming it."""
        if not isinstance(self.model, str) or self.model not in MODEL_NAMES:
            hint = did_you_mean(str(self.model), MODEL_NAMES)
            raise ValueError(
                f"model must be one of the registry's models, got {self.model!r}; "
                f"{hint + ' ' if hint else ''}models: {', '.join(MODEL_NAMES)}"
            )
        for name in ("model_options", "control_options"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, dict):
                raise TypeError(f"{name} must be a dict or None, got {type(value).__name__}")
        # Option names checked before any work, in the estimator's terms (model_options={...}).
        valid = model_option_names(self.model)
        unknown = [] if valid is None else [k for k in (self.model_options or {}) if k not in valid]
        if unknown:
            assert valid is not None
            raise UnknownOptionError(
                "model_options: "
                + unknown_name_message(
                    "option", unknown[0], valid, where=f" for model {self.model!r}", listing="valid options"
                )
            )
        if self.control_options and model_entry(self.model).inputs == "control":
            try:
                check_control_overrides(self.model, self.control_options)
            except UnknownOptionError as error:
                raise UnknownOptionError(f"control_options: {error}") from None
        if self.validation_fraction is not None:
            f = self.validation_fraction
            if isinstance(f, bool) or not isinstance(f, numbers.Real) or not 0.0 < float(f) < 1.0:
                raise ValueError(f"validation_fraction must be None or a number in (0, 1), got {f!r}")
        training = self._training_settings()  # every training parameter checked, naming it
        if self.baseline is not None:
            if not isinstance(self.baseline, str) or self.baseline not in BASELINES:
                raise ValueError(
                    f"baseline must be None or one of {', '.join(map(repr, BASELINES))}, got {self.baseline!r}"
                )
            if not isinstance(self, ClassifierMixin):
                raise ValueError(
                    f"baseline={self.baseline!r} is a classifier's (its logits are the offset): "
                    f"{type(self).__name__} takes baseline=None"
                )
        if self.patience is not None and self.validation_fraction is None and not self._auto_epochs():
            raise ValueError(
                f"patience={self.patience!r} needs a validation split to watch: set validation_fraction "
                "(e.g. 0.1), or epochs='auto' (which makes one)"
            )
        control = {}
        given = dict(self.control_options or {})
        if model_entry(self.model).inputs == "control":
            control["parametrization"] = "index"  # samples may have different times (neuralde_seq.sklearn's docstring)
            # The time channel in units of the training data's longest span: in raw units it grows like the series'
            # length, and a CDE integrating it over 2,000 points started with logits in the hundreds (ncde, nrde,
            # hebb-cde) or NaN (oja-cde) on a spiky series (tests/test_defaults.py).
            control["time_unit"] = "auto"
            control.update(given)
        else:
            # One control_options for every model (a grid search over model names): an observation model reads the
            # time unit and sees missing values through its own masks, so the path's options are set aside, said.
            if "time_unit" in given:
                control["time_unit"] = given.pop("time_unit")
            if given:
                warn_user(
                    f"control_options {sorted(given)} do not apply to model {self.model!r}, which reads the raw "
                    "observations (missing values through its masks, gaps as times): ignored; of "
                    "control_options it reads time_unit only",
                    IgnoredOptionWarning,
                )
        fill = check_fill_gaps(self.fill_gaps)
        if model_entry(self.model).inputs == "observations":
            if fill is not None and fill != "auto":
                raise ValueError(
                    f"fill_gaps={fill!r}: model {self.model!r} reads raw observations, which see the gaps "
                    "as times; leave fill_gaps at 'auto' (which fills only control paths) or None"
                )
            fill = None  # "auto": filling applies to control paths only (neuralde_seq.sklearn's docstring)
        model_options = dict(self.model_options or {})
        if model_options.get("solver") is not None:  # read (and refused) before any work, as create_model reads it
            model_options["solver"] = parse_solver(model_options["solver"], argument="model_options['solver']")
        return {
            "dtype": self._torch_dtype(),
            "device": torch.device(self.device),
            "control": control,
            "fill_gaps": fill,
            "model_options": model_options,
            "training": training,
        }

    def _auto_epochs(self) -> bool:
        """Whether ``epochs`` is "auto" (a step budget).

        Raises:
            ValueError: ``epochs`` neither "auto" nor a positive integer.
        """
        if isinstance(self.epochs, str) and self.epochs == "auto":
            return True
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, numbers.Integral) or self.epochs < 1:
            raise ValueError(f"epochs must be a positive integer or 'auto', got {self.epochs!r}")
        return False

    def _training_settings(self) -> TrainingSettings:
        """The training parameters as the benchmark runner's row settings, which check them (a bad one raises
        naming it, e.g. ``augment_crop must lie in (0, 1], got 0``); with ``epochs="auto"`` its epochs stand in
        until the training split's size is known (`_training_plan`). A setting left at "auto" is the model's
        (`training_defaults`)."""
        registered = {
            name: value if (value := getattr(self, name)) != "auto" else default
            for name, default in training_defaults(self.model).items()
        }
        return TrainingSettings(
            epochs=1 if self._auto_epochs() else self.epochs,
            lr=self.lr,
            batch_size=self.batch_size,
            weight_decay=self.weight_decay,
            grad_clip=self.grad_clip,
            penalty_weight=self.penalty_weight,
            schedule=registered["schedule"],
            max_steps=self.max_steps,
            threads=threads_for_jobs(self.n_jobs),
            patience=self.patience,
            augment_crop=registered["augment_crop"],
            augment_drop_rate=registered["augment_drop_rate"],
            ensemble=self.ensemble,
        )

    def _training_plan(self, training: TrainingSettings, seed: int, num_train: int) -> tuple[TrainingSpec, int | None]:
        """The `TrainingSpec` `fit` is given for ``num_train`` training series with ``seed``, and the patience in
        evaluations (None: no early stopping)."""
        spec = training.spec(seed=seed)
        if not self._auto_epochs():
            return spec, training.patience
        budget = AUTO_MAX_STEPS if training.max_steps is None else training.max_steps
        fields, patience = _step_budget(num_train, training.batch_size, budget, training.patience)
        return spec.replace(**fields), patience

    # ------------------------------------------------------------------ inputs
    def _inputs(self, spec: InputSpec, data: IrregularDataset, device: torch.device):
        """The model's input for ``data`` by the fitted ``spec``, on ``device``."""
        try:
            inputs = spec.transform(data)
        except ValueError as error:
            if "unobserved_fill" in str(error):
                raise ValueError(
                    f"{error} (with {type(self).__name__}: control_options={{'unobserved_fill': 'mean'}}, "
                    "the default, fills it with the channel's training mean)"
                ) from error
            raise
        return inputs.to(device)

    def _augmented_inputs(self, spec: InputSpec, device: torch.device, batch: IrregularDataset):
        """The model's input for an augmented training batch; what the crop and drops made unreadable is named as
        theirs (it is met mid-training, and its sample index counts within the batch)."""
        try:
            return self._inputs(spec, batch, device)
        except ValueError as error:
            raise ValueError(
                f"augment_crop={self.augment_crop!r}, augment_drop_rate={self.augment_drop_rate!r} left "
                f"a series of a training batch that {self.model!r} cannot read: {error}; or crop and "
                "drop less"
            ) from error

    @staticmethod
    def _offset_batch(build, batch: IrregularDataset) -> ModelArguments:
        """An augmented batch whose static features hold the baseline's offsets: the model's input built without
        them, and the offsets beside it."""
        return ModelArguments(build(batch.replace(static=None)), batch.static)

    # ------------------------------------------------------------------ training
    def _train(self, X, y, times, make_targets):
        """Shared fit: ``make_targets(num_samples)`` validates y and returns (targets tensor, number of model
        outputs, objective, strata): strata None (random validation split) or (class indices (N,), class
        names) to stratify the validation split on."""
        settings = self._checked_settings()
        training = settings["training"]
        self._require_y(y)
        data = self._dataset(X, times, settings["dtype"])
        targets, outputs, objective, strata = make_targets(len(data))
        fitted_with_times = times is not None
        device = settings["device"]
        # Channel statistics and time_unit "auto" from the data given to fit, kept for predict (input_spec_).
        spec = InputSpec.fit(
            self.model, data, control=settings["control"], standardise=True, fill_gaps=settings["fill_gaps"]
        )
        inputs = self._inputs(spec, data, torch.device("cpu"))
        seed = self._seed()
        n = len(data)
        train_index, val_index = np.arange(n), None
        validation_fraction = self.validation_fraction
        if validation_fraction is None and self._auto_epochs():
            validation_fraction = AUTO_VALIDATION_FRACTION  # "auto" stops early: it needs a split to watch
        if validation_fraction is not None:
            held = math.ceil(float(validation_fraction) * n)  # scikit-learn's rounding of the held-out part
            if held < 1 or n - held < 1:
                given = (
                    ""
                    if self.validation_fraction is not None
                    else " (epochs='auto' holds it out when validation_fraction is not given)"
                )
                raise ValueError(
                    f"validation_fraction={validation_fraction}{given} of {n} samples leaves {n - held} "
                    f"to train on and {held} to validate: each part needs at least 1 sample; lower "
                    "validation_fraction, or give more samples"
                )
            fractions = (1.0 - float(validation_fraction), float(validation_fraction))
            if strata is not None:
                codes, names = strata
                labelled = data.replace(labels=torch.as_tensor(codes, dtype=torch.long), class_names=names)
                (_, train_index), (_, val_index) = stratified_split(labelled, fractions, seed, return_indices=True)
            else:
                train_index, val_index = train_test_split(np.arange(n), test_size=fractions[1], random_state=seed)
                train_index, val_index = np.sort(train_index), np.sort(val_index)
        inputs = inputs.to(device)
        offsets, self.baseline_ = None, None
        if self.baseline is not None:  # every sample's offset from a baseline fitted without it
            codes, names = strata
            logits, self.baseline_ = summary_feature_logits(data, codes, len(names), seed=seed)
            offsets = torch.as_tensor(logits, dtype=settings["dtype"], device=device)
        # the network's input, with the offsets beside it when there is a baseline (LogitOffset reads both)
        model_inputs = inputs if offsets is None else ModelArguments(inputs, offsets)
        train = (model_inputs[torch.as_tensor(train_index)], targets[torch.as_tensor(train_index)])
        val = (
            None
            if val_index is None
            else (model_inputs[torch.as_tensor(val_index)], targets[torch.as_tensor(val_index)])
        )
        plan, patience = self._training_plan(training, seed, len(train_index))
        train_inputs = train[0]
        if training.augment_drop_rate > 0 or training.augment_crop < 1:
            # built afresh from randomly cropped and thinned series at every batch (validation inputs as built)
            build = partial(self._augmented_inputs, spec, device)
            raw = data.subset(train_index).to(device)
            if offsets is not None:  # the offsets ride along as the batch's static features (crop and drop keep them)
                raw = raw.replace(static=offsets[torch.as_tensor(train_index)])
                build = partial(self._offset_batch, build)
            train_inputs = AugmentedInputs(raw, build, drop_rate=training.augment_drop_rate, crop=training.augment_crop)
        fork_devices = (
            [] if device.type != "cuda" else [device.index if device.index is not None else torch.cuda.current_device()]
        )
        members, histories = [], []
        with self._threads(), torch.random.fork_rng(devices=fork_devices):
            for member in range(training.ensemble):
                seed_j = member_seed(seed, member)  # the runner's member seeds: member 0 has seed itself
                torch.manual_seed(seed_j)
                # warnings of the model spell their fixes as model_options={...}
                with options_spelled_as("model_options", settings["model_options"]):
                    model = create_model(self.model, inputs, outputs, **settings["model_options"])
                model = model.to(device=device, dtype=settings["dtype"])
                if hasattr(model, "set_empirical_mean"):  # GRU-D, GRU-Δt, ...: the training inputs' channel means
                    model.set_empirical_mean(inputs[torch.as_tensor(train_index)])
                if offsets is not None:
                    model = LogitOffset(model)
                callbacks = []
                if val is not None:
                    callbacks.append(BestCheckpoint(None))
                    if patience is not None:
                        callbacks.append(EarlyStopping(int(patience)))
                label = type(self).__name__ + (
                    f" member {member + 1}/{training.ensemble}" if training.ensemble > 1 else ""
                )
                histories.append(
                    _fit(
                        model,
                        objective,
                        (train_inputs, train[1]),
                        val,
                        plan.replace(seed=seed_j),
                        callbacks=callbacks,
                        progress=label if self.verbose else False,
                    )
                )
                members.append(model.eval())
        # the runner's form: the first member's history, every member's under "ensemble_members"
        self.model_ = members[0] if len(members) == 1 else self._ensemble_of(members).eval()
        self.history_ = histories[0] if len(histories) == 1 else {**histories[0], "ensemble_members": histories}
        self.training_spec_ = plan.replace(seed=seed)
        self.patience_ = patience
        self.n_features_in_ = data.num_channels
        self.input_spec_ = spec
        self.channel_mean_ = np.array(spec.channel_mean)
        self.channel_scale_ = np.array(spec.channel_scale)
        # the control options as given, time_unit resolved (the spec's control also holds the registered ones)
        self.control_options_ = {
            **settings["control"],
            **({"time_unit": spec.time_unit} if "time_unit" in settings["control"] else {}),
            **(
                {"intensity_channel": spec.control.intensity_channel}
                if "intensity_channel" in settings["control"]
                else {}
            ),
        }
        self.seed_ = seed
        self.validation_index_ = val_index
        self.fitted_with_times_ = fitted_with_times
        return self

    # ------------------------------------------------------------------ prediction
    def _prediction_dtype(self) -> torch.dtype:
        return next(self.model_.parameters()).dtype

    def _unobserved_fill(self):
        return None if self.input_spec_.control is None else self.input_spec_.control.unobserved_fill

    def _outputs(self, X, times) -> np.ndarray:
        """The model's outputs for X, (N, outputs) float64."""
        data = self._prediction_data(X, times)
        inputs = self._inputs(self.input_spec_, data, model_device(self.model_))
        if self.baseline_ is not None:
            parameter = next(self.model_.parameters())
            offsets = baseline_logits(self.baseline_, data, len(self.classes_))
            inputs = ModelArguments(inputs, torch.as_tensor(offsets, dtype=parameter.dtype, device=parameter.device))
        with self._threads():
            outputs = _predict(self.model_, inputs, self.batch_size)
        return outputs.detach().cpu().to(torch.float64).numpy()
