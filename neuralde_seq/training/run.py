"""One run of a benchmark: a registry model trained on a task's splits and scored on every test sample, or a
reference method fitted and scored.

`fit_and_evaluate` fits the model's `InputSpec` on the training split, builds the inputs of every split once
(`spec_inputs`; `build_model_inputs` for one dataset), trains with `train_classifier` (the `TrainingSpec` of
`run_spec`) and evaluates the best-validation checkpoint on validation, test and the config's test variants (a
variant's change of the trained model: `changed_model`); `fit_and_evaluate_reference` does the same for a
closed-form method of `neuralde_seq.reference`. Controls are shared between the runs that read the same data with
the same options through a `ControlCache`.

Nothing here knows of folders: which run goes where, and what a finished one leaves, is the grid's
(`neuralde_seq.training.grid`, `neuralde_seq.training.run_folders`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch

from ..data import DatasetSplits, IrregularDataset
from ..solvers import SolverOptions, parse_solver
from .augmentation import AugmentedInputs, EnsembleClassifier, member_seed
from .config import TrainingSettings
from .fit import TrainingDiverged
from .input_spec import InputSpec
from .objectives import ModelArguments
from .process_group import is_main_process
from .spec import TrainingSpec
from .threads import DEFAULT_THREADS, torch_threads
from .trainer import evaluate, train_classifier

__all__ = [
    "ControlCache",
    "build_model_inputs",
    "spec_inputs",
    "changed_model",
    "run_spec",
    "fit_and_evaluate",
    "fit_and_evaluate_reference",
]


def _static_options(options: dict, num_static: int) -> dict:
    """Fill in ``static_channels`` for a model whose options ask for the task's static features.

    A model reads static features when its options say so: ``static_channels: auto`` (the task's number),
    or ``initial_state: static`` (fast weight models: the initial fast weights are written from them).
    """
    options = dict(options)
    wants = options.get("static_channels") == "auto" or (
        options.get("initial_state") == "static" and options.get("static_channels") is None
    )
    if wants:
        if num_static == 0:
            raise ValueError("the model's options ask for static features, but the task has none")
        options["static_channels"] = num_static
    return options


class ControlCache:
    """Controls already built in one runner invocation, per (data split, control options).

    Every row and seed of a benchmark builds its model's input for every split, but many of them build the
    same control: the seeds of a task whose data do not depend on the seed, and models sharing an
    interpolation (e.g. every NCDE and fast weight CDE row of a PhysioNet config). `build_model_inputs`
    given a cache builds each such control once and hands the same `Control`
    to every later run (controls are never modified by training or evaluation).

    The key is the dataset *object* and the effective options of
    `build_control` (the model's registered ones with the row's overrides, and
    build_control's defaults filled in, so that spelling out a default gives the same key). The cache keeps
    a reference to each dataset it holds a control for, so that a later dataset at the same address can
    never be mistaken for it. It lives in memory only; `clear` drops everything (the runner does so
    when it loads other data). ``hits`` and ``misses`` count the lookups.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[int, str], tuple[IrregularDataset, Any]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    @staticmethod
    def options_key(options: Mapping) -> str:
        """The canonical text of build_control options: defaults filled in, keys sorted."""
        from ..controls import build_control

        defaults = {
            name: p.default
            for name, p in inspect.signature(build_control).parameters.items()
            if p.kind == p.KEYWORD_ONLY
        }
        # repr() of values JSON cannot hold keeps the key deterministic.
        return json.dumps({**defaults, **dict(options)}, sort_keys=True, default=repr)

    def get(self, dataset: IrregularDataset, options: Mapping, build):
        """The control of ``dataset`` with ``options``: the cached one, or ``build()``'s, then cached."""
        key = (id(dataset), self.options_key(options))
        entry = self._entries.get(key)
        if entry is not None and entry[0] is dataset:
            self.hits += 1
            return entry[1]
        self.misses += 1
        control = build()
        self._entries[key] = (dataset, control)
        return control


def build_model_inputs(
    name: str,
    dataset: IrregularDataset,
    control: Mapping | None = None,
    reads_static: bool = False,
    cache: ControlCache | None = None,
):
    """The input of model ``name`` for every sample of ``dataset``: ``spec_inputs(InputSpec.fit(name, dataset,
    control=control, reads_static=...), dataset, cache)`` (a ``time_unit="auto"`` in ``control`` is the span of
    ``dataset`` itself; `fit_and_evaluate` fits one spec on the training split for every split).

    Static features travel inside `Observations`; a control-path model that reads them (``reads_static``) gets
    ``ModelArguments(control, static)``.
    """
    from ..models import model_entry

    spec = InputSpec.fit(
        name, dataset, control=control, reads_static=reads_static and model_entry(name).inputs == "control"
    )
    return spec_inputs(spec, dataset, cache)


def spec_inputs(spec: InputSpec, dataset: IrregularDataset, cache: ControlCache | None = None):
    """``spec.transform(dataset)``, with a ``cache``: a control already built for this dataset with the same
    effective options is reused (see `ControlCache`); inputs of models reading raw observations are cheap and never
    cached."""
    if cache is None or not spec.control:
        return spec.transform(dataset)
    alone = dataclasses.replace(spec, reads_static=False)  # the control is cached, the static features go beside it
    # the gap filling changes the control as an option would, so it is part of the key
    options = spec.control_options if spec.fill_step is None else {**spec.control_options, "fill_step": spec.fill_step}
    control = cache.get(dataset, options, lambda: alone.transform(dataset))
    return ModelArguments(control, dataset.static) if spec.reads_static else control


def changed_model(model: torch.nn.Module, change: Mapping) -> torch.nn.Module:
    """The trained ``model`` with an evaluate variant's model change applied, as a copy (the model itself is left
    as it is): ``num_bases: n`` projects every basis-expanded part onto n functions of its basis
    (`neuralde_seq.basis.project_module`), ``depth_steps: n`` sets the solver steps of a continuous-depth model.

    Arguments:
        model: the trained model.
        change: the variant's ``model`` mapping (`neuralde_seq.training.config.TestVariant.model_change`).

    Returns:
        The changed copy.

    Raises:
        ValueError: the model has no basis-expanded parts (``num_bases``) or no ``depth_steps``.
    """
    import copy

    from ..basis import project_module

    out = model
    if "num_bases" in change:
        out = project_module(out, int(change["num_bases"]))  # ValueError without basis-expanded parts
    if "depth_steps" in change:
        if not hasattr(out, "depth_steps"):
            raise ValueError(
                f"{type(model).__name__} has no depth_steps to change (a continuous-depth model such as "
                "stateful-odenet has)"
            )
        out = copy.deepcopy(out) if out is model else out
        cast(Any, out).depth_steps = int(change["depth_steps"])  # the model's own property (checked above)
    return out


def _check_test_labels(tests: Mapping | None) -> None:
    """Extra test sets are scored beside the splits under their labels: one named like a split would replace it
    (the model evaluated on one split's inputs with another's labels)."""
    from .config import RESERVED_VARIANT_LABELS

    clash = [label for label in dict(tests or {}) if label in RESERVED_VARIANT_LABELS]
    if clash:
        raise ValueError(
            f"tests: the label(s) {', '.join(map(repr, clash))} name a split "
            f"({', '.join(RESERVED_VARIANT_LABELS)}); give the extra test sets other labels"
        )


def _labels(dataset: IrregularDataset, split: str) -> torch.Tensor:
    """The class labels of a split or test set (the runner trains and scores classifiers)."""
    if dataset.labels is None:
        raise ValueError(f"{split!r} has no class labels: fit_and_evaluate trains and scores a classifier")
    return dataset.labels


def _tagged(path: str | os.PathLike | None, tag: str) -> Path | None:
    """``path`` with ``tag`` inserted before its suffix (an ensemble member's checkpoint), or None."""
    if path is None or not tag:
        return None if path is None else Path(path)
    path = Path(path)
    return path.with_name(path.stem + tag + path.suffix)


def _count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _row_settings(training: TrainingSettings | TrainingSpec | Mapping) -> TrainingSettings:
    """A row's `TrainingSettings` from the forms `fit_and_evaluate` takes (select_on "accuracy" unless given)."""
    if isinstance(training, TrainingSettings):  # select_on None stands for a task's metric, which there is none of here
        return training if training.select_on is not None else training.replace(select_on="accuracy")
    if isinstance(training, TrainingSpec):
        training = {name: getattr(training, name) for name in TrainingSpec.field_names()}
    return TrainingSettings(**{"select_on": "accuracy", **dict(training)})


def run_spec(
    training: TrainingSettings | TrainingSpec | Mapping,
    *,
    seed: int,
    max_steps: int | None = None,
    threads: int | None = DEFAULT_THREADS,
) -> TrainingSpec:
    """The `TrainingSpec` one run of a row trains with: the row's settings with the run's ``seed`` (an ensemble
    member's own), ``max_steps`` and ``threads``.

    Arguments:
        training: the row's settings (`TrainingSettings`, a `TrainingSpec`, or their fields as a mapping).
        seed: the run's seed.
        max_steps: a smoke run's step limit, or None.
        threads: torch's CPU threads (None: torch's setting).
    """
    return _row_settings(training).spec(seed=seed, max_steps=max_steps, threads=threads)


def fit_and_evaluate(
    model_name: str,
    splits: DatasetSplits,
    *,
    seed: int,
    training: TrainingSettings | TrainingSpec | Mapping,
    checkpoint_path: str | os.PathLike | None,
    options: Mapping | None = None,
    control: Mapping | None = None,
    solver: SolverOptions | Mapping | None = None,
    tests: Mapping[str, IrregularDataset] | None = None,
    model_changes: Mapping[str, Mapping] | None = None,
    last_checkpoint_path: str | os.PathLike | None = None,
    resume: bool = False,
    max_steps: int | None = None,
    progress: bool = True,
    desc: str | None = None,
    control_cache: ControlCache | None = None,
    run_settings: Mapping | None = None,
    threads: int | None = DEFAULT_THREADS,
) -> dict:
    """Train one model on ``splits`` and evaluate its best-validation checkpoint on every test sample.

    The protocol of ``neuralde-seq compare`` and the benchmark runner: fit the model's `InputSpec` on the training
    split (``control`` its options; ``time_unit: auto`` the training split's span) and build the inputs of every
    split with it once (`spec_inputs`), seed torch with ``seed`` and create the model
    (``create_model(model_name, inputs, num_classes, solver=solver, **options)``), set GRU-D/GRU-Δt's
    empirical means from the training inputs, train with
    `train_classifier` (``training`` holds its settings: epochs, lr,
    batch_size, eval_batch_size, patience, grad_clip, weight_decay, penalty_weight, schedule, select_on), then
    evaluate on validation, test and each extra test set of ``tests`` (label -> dataset; the trained model changed
    by `changed_model` first for a label in ``model_changes``, label -> change), asserting that
    every sample was scored. A diverged run reports its last good checkpoint and the reason.

    ``training.augment_drop_rate`` / ``augment_crop`` (`neuralde_seq.data.random_crop_and_drop`): the training
    inputs are built afresh from randomly cropped and thinned samples at every batch (`AugmentedInputs`).
    ``training.ensemble`` = K > 1: K models are trained, with seeds ``seed + ENSEMBLE_SEED_STEP * j`` (j = 0 is
    ``seed`` itself) and checkpoints ``<name>.member<j><suffix>`` for j > 0, and their mean class probabilities
    (`EnsembleClassifier`) are evaluated; ``params`` counts all members, ``history`` is the first member's with
    every member's under ``ensemble_members``, and ``diverged`` the first divergence's message.

    ``threads``: torch's CPU threads for training and evaluation (default 1; None: torch's setting).

    ``splits`` (and ``tests``) must already be on the device and in the dtype to use. With a
    ``control_cache`` (`ControlCache`), controls already built for these very datasets with the same
    options are reused instead of rebuilt.

    The checkpoints' settings (``config``) hold what `neuralde_seq.load_run` needs to score new raw data as the run
    did: ``input_spec``, the spec with the standardisation the splits record (``meta["standardise"]``, the task
    protocol's: `InputSpec.reading_raw`), and ``trained_model``: the model's input channels, the options its
    training input fixed (`neuralde_seq.models.input_options`), the class names, dtype, evaluation batch size, and
    the ensemble's size and the member's index.

    Returns a dict: ``model``, ``params``, ``options`` (effective constructor options), ``input_spec``
    (`InputSpec.to_dict` of that spec), ``history``,
    ``diverged`` (None or the message), ``train_seconds``, ``eval_seconds`` and ``metrics``
    (``{"val": ..., "test": ..., <label>: ...}``, each as `evaluate` returns).
    """
    from ..models import create_model, input_options, model_entry

    train, val, test = splits
    num_static = 0 if train.static is None else train.static.shape[1]
    model_options = _static_options(dict(options or {}), num_static)
    reads_static = model_options.get("static_channels") is not None
    _check_test_labels(tests)
    datasets = {"train": train, "val": val, "test": test, **dict(tests or {})}
    # One spec for every split, fitted on the training split (time_unit "auto": its span). The task's protocol has
    # standardised the splits already (neuralde_seq.data.protocols), so the spec leaves the values as they are; the
    # checkpoints hold it with the protocol's statistics (reading_raw), which turns the raw data into the same inputs.
    spec = InputSpec.fit(
        model_name, train, control=control, reads_static=reads_static and model_entry(model_name).inputs == "control"
    )
    raw_spec = spec.reading_raw(train)
    inputs = {}
    for split, ds in datasets.items():
        try:
            inputs[split] = spec_inputs(spec, ds, control_cache)
        except ValueError as err:
            # Name the split (or test variant) and the model: the data problem is theirs, not the library's.
            what = "split" if split in ("train", "val", "test") else "test variant"
            # The advice fits only errors about missing observations (not, e.g., a log-signature depth).
            advice = (
                (
                    " A higher drop rate or a coarser subsample leaves samples with few or no observations; lower "
                    "them, or let the row fill unobserved channels (control: {unobserved_fill: mean}, the default, "
                    "or a value)."
                )
                if ("observ" in str(err) or "all-NaN" in str(err))
                else ""
            )
            raise ValueError(
                f"model {model_name!r}, {what} {split!r}: cannot build its inputs: {err}.{advice}"
            ) from err

    training = _row_settings(training)
    assert training.select_on is not None  # _row_settings fills it in
    eval_batch_size = int(training.eval_batch_size or training.batch_size)
    train_inputs = inputs["train"]
    train_model_input = train_inputs.args[0] if isinstance(train_inputs, ModelArguments) else train_inputs
    parsed_solver = parse_solver(solver) if solver else None  # recorded in its stored form
    # What neuralde_seq.load_run needs beside the weights and the spec to rebuild the model and score as the run did.
    trained_model = {
        "data_channels": int(train.num_channels),
        "in_channels": int(train_model_input.channels),
        "class_names": list(train.class_names),
        "input_options": input_options(model_name, train_model_input, model_options),
        "dtype": str(train.values.dtype).replace("torch.", ""),
        "eval_batch_size": eval_batch_size,
        "ensemble": int(training.ensemble),
    }
    if training.augment_drop_rate > 0 or training.augment_crop < 1:
        # built afresh from augmented samples at every batch (validation and test inputs stay as built above)
        train_inputs = AugmentedInputs(
            train, spec.transform, drop_rate=training.augment_drop_rate, crop=training.augment_crop
        )

    def new_model(member_seed: int) -> torch.nn.Module:
        torch.manual_seed(member_seed)
        made = create_model(
            model_name,
            train_model_input,
            num_classes=train.num_classes,
            solver=solver if solver else None,
            **model_options,
        )
        made = made.to(device=train.values.device, dtype=train.values.dtype)
        if hasattr(made, "set_empirical_mean"):  # GRU-D, GRU-Δt: the training set's mean of each channel
            made.set_empirical_mean(inputs["train"])
        return made

    model = new_model(seed)
    model_changes = dict(model_changes or {})
    for label, change in model_changes.items():  # refused before training, not after
        try:
            changed_model(model, change)
        except ValueError as err:
            raise ValueError(f"model {model_name!r}, test variant {label!r}: {err}") from err
    # An ensemble's members: seed, seed + ENSEMBLE_SEED_STEP, seed + 2 * ENSEMBLE_SEED_STEP, ... (apart from the
    # row's other seeds 0, 1, 2, ...); each with its own checkpoints.
    members, histories, diverged = [], [], None
    t0 = time.perf_counter()
    for member in range(training.ensemble):
        seed_j = member_seed(seed, member)
        if member:
            model = new_model(seed_j)
        tag = "" if member == 0 else f".member{member}"
        try:
            history = train_classifier(
                model,
                train_inputs,
                _labels(train, "train"),
                inputs["val"],
                _labels(val, "val"),
                run_spec(training, seed=seed_j, max_steps=max_steps, threads=threads),
                checkpoint_path=_tagged(checkpoint_path, tag),
                last_checkpoint_path=_tagged(last_checkpoint_path, tag),
                resume=resume,
                patience=training.patience,
                select_on=training.select_on,
                progress=progress,
                num_classes=train.num_classes,
                # Everything that makes the run what it is: resuming from a checkpoint of another run is refused.
                config={
                    "model": model_name,
                    "model_options": model_options,
                    "input_spec": raw_spec.to_dict(),
                    "solver": None if parsed_solver is None else parsed_solver.to_dict(),
                    "trained_model": {**trained_model, "member": member},
                    **dict(run_settings or {}),
                },
                desc=(desc or model_name)
                + (f" member {member + 1}/{training.ensemble}" if training.ensemble > 1 else ""),
            )
        except TrainingDiverged as err:
            if is_main_process():
                print(f"[{desc or model_name}] {err}", file=sys.stderr)
            diverged = diverged or str(err)
            history = err.history
        members.append(model)
        histories.append(history)
    history = histories[0]
    if training.ensemble > 1:
        history = {**history, "ensemble_members": histories}
        model = EnsembleClassifier(members)
    params = sum(_count_parameters(m) for m in members)
    train_seconds = time.perf_counter() - t0

    # The model now holds the best-validation (or last good) weights.
    t1 = time.perf_counter()
    metrics = {}
    with torch_threads(threads):
        for split, ds in datasets.items():
            if split == "train":
                continue
            evaluated = changed_model(model, model_changes[split]) if split in model_changes else model
            result = evaluate(evaluated, inputs[split], _labels(ds, split), eval_batch_size, threads=threads)
            if result["num_samples"] != len(ds):
                raise RuntimeError(f"evaluation of {split!r} scored {result['num_samples']} of {len(ds)} samples")
            metrics[split] = result
    eval_seconds = time.perf_counter() - t1
    return {
        "model": model_name,
        "params": params,
        "options": model_options,
        "input_spec": raw_spec.to_dict(),
        "history": history,
        "diverged": diverged,
        "train_seconds": train_seconds,
        "eval_seconds": eval_seconds,
        "metrics": metrics,
    }


def fit_and_evaluate_reference(
    method: str,
    splits: DatasetSplits,
    *,
    seed: int,
    options: Mapping | None = None,
    tests: Mapping[str, IrregularDataset] | None = None,
    model_changes: Mapping[str, Mapping] | None = None,
) -> dict:
    """Fit a reference method (a closed-form classifier of `neuralde_seq.reference`) and score it on every test
    sample: the runner's reference rows.

    The method reads the same (dropped, standardised) series as the model rows, put on a grid by
    `neuralde_seq.reference.to_grid`. It is fitted, by default, on the training and validation splits together
    (``options["fit_on"] = "train+val"``): a closed-form method has no epochs or checkpoints to select on
    validation data (MiniRocket's ridge penalty is chosen by its own leave-one-out cross-validation on the data
    it is fitted on; 1-NN has nothing to choose), so a practitioner fits it on all the labelled data, as the
    UCR/UEA protocol does with the whole TRAIN file; the model rows see the same samples, training on one part
    and selecting on the other. Its validation metrics are then None (they would be in-sample). With
    ``fit_on: "train"`` it is fitted on the training split alone and scored on validation too.

    Arguments:
        method: a name of `neuralde_seq.reference.REFERENCE_METHODS`.
        splits: the task's `DatasetSplits` (any device; the method runs on the CPU).
        seed: the run's seed (a randomised method's seed, e.g. MiniRocket's ``random_state``).
        options: the row's options: the estimator's constructor arguments and ``fit_on``.
        tests: extra test sets, label -> dataset (the config's ``evaluate`` variants).
        model_changes: label -> change of the variants that change a trained model: they do not apply to a
            closed-form method, whose metrics for them are None.

    Returns:
        A dict with the keys of `fit_and_evaluate`'s (``params`` None, an empty ``history``, ``diverged``
        None; ``train_seconds`` the fit's wall time, ``eval_seconds`` the predictions') and ``compile_seconds``
        (the warm-up's before the fit: numba's one-off compilation, `neuralde_seq.reference.warm_up`), ``fit_on``
        and ``num_fit`` (the samples fitted on).
    """
    from ..reference import evaluate_reference, fit_reference

    options = dict(options or {})
    fit_on = options.pop("fit_on", "train+val")
    train, val, test = splits
    fit_sets = (train, val) if fit_on == "train+val" else (train,)
    estimator, train_seconds, compile_seconds = fit_reference(method, fit_sets, seed=seed, options=options)
    metrics, eval_seconds = {}, 0.0
    _check_test_labels(tests)
    datasets = {"val": val, "test": test, **dict(tests or {})}
    none = {"accuracy": None, "auroc": None, "loss": None, "num_samples": 0}
    for split, ds in datasets.items():
        if (split == "val" and fit_on == "train+val") or split in dict(model_changes or {}):
            metrics[split] = dict(none)  # in-sample, or a change of a trained network: nothing to score
            continue
        result = evaluate_reference(estimator, ds)
        if result["num_samples"] != len(ds):
            raise RuntimeError(f"evaluation of {split!r} scored {result['num_samples']} of {len(ds)} samples")
        eval_seconds += result.pop("seconds")
        metrics[split] = result
    history = {
        "train_loss": [],
        "train_accuracy": [],
        "val_loss": [],
        "val_accuracy": [],
        "seconds_per_epoch": [],
        "epochs_run": 0,
        "steps": 0,
        "best_epoch": None,
    }
    return {
        "model": method,
        "params": None,
        "options": {**estimator.get_params(deep=False), "fit_on": fit_on},
        "history": history,
        "diverged": None,
        "train_seconds": train_seconds,
        "compile_seconds": compile_seconds,
        "eval_seconds": eval_seconds,
        "metrics": metrics,
        "fit_on": fit_on,
        "num_fit": sum(len(ds) for ds in fit_sets),
    }
