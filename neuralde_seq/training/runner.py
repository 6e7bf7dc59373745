"""The benchmark runner: any registered model on any task (`neuralde_seq.data.protocols`) from a config.

``run_benchmark(config, out_dir=...)`` (and ``neuralde-seq bench CONFIG``) parses the config once
(`parse_config`), trains every model row with every seed through
`fit` (`fit_and_evaluate`), evaluates each best-validation checkpoint on
every test sample (and on the config's robustness variants of the test set: other drop rates, sampling
rates, time warps of the observation times), and writes (each control path
is built once per data split and control options, and shared by the rows and seeds that read it:
`ControlCache`):

    <out_dir>/runs/<row label>/seed<k>-<fingerprint>/result.json   config, metrics, history, timing, environment
    <out_dir>/runs/<row label>/seed<k>-<fingerprint>/curves.csv    learning curve, one line per epoch
    <out_dir>/runs/<row label>/seed<k>-<fingerprint>/best.pt, last.pt   best-validation and resume checkpoints
    <out_dir>/results.json, results.md              mean ± std over seeds beside the paper's number
    <out_dir>/curves.png, summary.png               learning curves; ours vs paper with error bars

A row may also name a reference method (a closed-form classifier of `neuralde_seq.reference`, e.g.
``{"label": "minirocket", "model": "minirocket"}``): it is fitted on the training and validation splits
together (`fit_and_evaluate_reference`) and scored on the same test sets; its folder holds ``result.json``
only (no checkpoints or curves), and the tables mark it as a reference row.

The fingerprint is a hash of everything that determines a run: the row's resolved settings (model,
options, control, training, solver), the task and its options, the seed, dtype, ``max_steps`` and a digest
of the task's data. ``resume=True`` reuses a finished run and continues an interrupted one only from the
folder of the same fingerprint, so a run made with other settings or data is never published under the
new config; such folders are reported and left alone. Smoke runs (``max_steps``) are marked in every
output and never aggregated with full runs (`report`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch

from ..data import DatasetSplits, IrregularDataset
from ..files import OutputLock, published_together, remove_stale_temporaries
from ..input_checks import floating_dtype
from ..solvers import SolverOptions, solver_repr_fields
from ..user_warnings import options_spelled_as
from .config import (BenchmarkConfig, ConfigError, ModelRow, TrainingSettings, apply_overrides, fingerprint, load_config, parse_config,
                     slug, validate_config)
from .callbacks import is_terminal, short_label
from .augmentation import ENSEMBLE_SEED_STEP, AugmentedInputs, EnsembleClassifier, member_seed
from .fit import ResumeMismatch, TrainingDiverged
from .input_spec import InputSpec
from .spec import TrainingSpec
from .objectives import ModelArguments
from .report import STD_DDOF, aggregate, environment, write_curves, write_report
from .results import to_jsonable, write_json
from .threads import DEFAULT_THREADS, check_threads, torch_threads
from .trainer import evaluate, train_classifier

__all__ = ["ConfigError", "ControlCache", "STD_DDOF", "aggregate", "apply_overrides", "build_model_inputs", "spec_inputs",
           "fit_and_evaluate", "fit_and_evaluate_reference", "load_config", "run_benchmark", "validate_config",
           "data_digest"]

# ------------------------------------------------------------------------------------ one training run
def _static_options(options: dict, num_static: int) -> dict:
    """Fill in ``static_channels`` for a model whose options ask for the task's static features.

    A model reads static features when its options say so: ``static_channels: auto`` (the task's number),
    or ``initial_state: static`` (fast weight models: the initial fast weights are written from them).
    """
    options = dict(options)
    wants = options.get("static_channels") == "auto" or (
        options.get("initial_state") == "static" and options.get("static_channels") is None)
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

    def __init__(self):
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

        defaults = {name: p.default for name, p in inspect.signature(build_control).parameters.items()
                    if p.kind == p.KEYWORD_ONLY}
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


def build_model_inputs(name: str, dataset: IrregularDataset, control: Mapping | None = None,
                       reads_static: bool = False, cache: ControlCache | None = None):
    """The input of model ``name`` for every sample of ``dataset``: ``spec_inputs(InputSpec.fit(name, dataset,
    control=control, reads_static=...), dataset, cache)`` (a ``time_unit="auto"`` in ``control`` is the span of
    ``dataset`` itself; `fit_and_evaluate` fits one spec on the training split for every split).

    Static features travel inside `Observations`; a control-path model that reads them (``reads_static``) gets
    ``ModelArguments(control, static)``.
    """
    from ..models import model_entry

    spec = InputSpec.fit(name, dataset, control=control,
                         reads_static=reads_static and model_entry(name).inputs == "control")
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
            raise ValueError(f"{type(model).__name__} has no depth_steps to change (a continuous-depth model such as "
                             "stateful-odenet has)")
        out = copy.deepcopy(out) if out is model else out
        out.depth_steps = int(change["depth_steps"])
    return out


def _check_test_labels(tests: Mapping | None) -> None:
    """Extra test sets are scored beside the splits under their labels: one named like a split would replace it
    (the model evaluated on one split's inputs with another's labels)."""
    from .config import RESERVED_VARIANT_LABELS

    clash = [label for label in dict(tests or {}) if label in RESERVED_VARIANT_LABELS]
    if clash:
        raise ValueError(f"tests: the label(s) {', '.join(map(repr, clash))} name a split "
                         f"({', '.join(RESERVED_VARIANT_LABELS)}); give the extra test sets other labels")


def _tagged(path: str | os.PathLike | None, tag: str) -> Path | None:
    """``path`` with ``tag`` inserted before its suffix (an ensemble member's checkpoint), or None."""
    if path is None or not tag:
        return None if path is None else Path(path)
    path = Path(path)
    return path.with_name(path.stem + tag + path.suffix)


def _count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _row_settings(training: "TrainingSettings | TrainingSpec | Mapping") -> TrainingSettings:
    """A row's `TrainingSettings` from the forms `fit_and_evaluate` takes (select_on "accuracy" unless given)."""
    if isinstance(training, TrainingSettings):
        return training
    if isinstance(training, TrainingSpec):
        training = {name: getattr(training, name) for name in TrainingSpec.field_names()}
    return TrainingSettings(**{"select_on": "accuracy", **dict(training)})


def run_spec(training: "TrainingSettings | TrainingSpec | Mapping", *, seed: int, max_steps: int | None = None,
             threads: int | None = DEFAULT_THREADS) -> TrainingSpec:
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
    training: "TrainingSettings | TrainingSpec | Mapping",
    checkpoint_path: str | os.PathLike | None,
    options: Mapping | None = None,
    control: Mapping | None = None,
    solver: "SolverOptions | Mapping | None" = None,
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
    spec = InputSpec.fit(model_name, train, control=control,
                         reads_static=reads_static and model_entry(model_name).inputs == "control")
    raw_spec = spec.reading_raw(train)
    inputs = {}
    for split, ds in datasets.items():
        try:
            inputs[split] = spec_inputs(spec, ds, control_cache)
        except ValueError as err:
            # Name the split (or test variant) and the model: the data problem is theirs, not the library's.
            what = "split" if split in ("train", "val", "test") else "test variant"
            # The advice fits only errors about missing observations (not, e.g., a log-signature depth).
            advice = (" A higher drop rate or a coarser subsample leaves samples with few or no observations; lower "
                      "them, or let the row fill unobserved channels (control: {unobserved_fill: mean}, the default, "
                      "or a value).") if ("observ" in str(err) or "all-NaN" in str(err)) else ""
            raise ValueError(f"model {model_name!r}, {what} {split!r}: cannot build its inputs: {err}.{advice}") from err

    training = _row_settings(training)
    eval_batch_size = int(training.eval_batch_size or training.batch_size)
    train_inputs = inputs["train"]
    train_model_input = train_inputs.args[0] if isinstance(train_inputs, ModelArguments) else train_inputs
    # What neuralde_seq.load_run needs beside the weights and the spec to rebuild the model and score as the run did.
    trained_model = {"data_channels": int(train.num_channels), "in_channels": int(train_model_input.channels),
                     "class_names": list(train.class_names),
                     "input_options": input_options(model_name, train_model_input, model_options),
                     "dtype": str(train.values.dtype).replace("torch.", ""), "eval_batch_size": eval_batch_size,
                     "ensemble": int(training.ensemble)}
    if training.augment_drop_rate > 0 or training.augment_crop < 1:
        # built afresh from augmented samples at every batch (validation and test inputs stay as built above)
        train_inputs = AugmentedInputs(
            train, spec.transform,
            drop_rate=training.augment_drop_rate, crop=training.augment_crop)

    def new_model(member_seed: int) -> torch.nn.Module:
        torch.manual_seed(member_seed)
        made = create_model(model_name, train_model_input, num_classes=train.num_classes,
                            solver=solver if solver else None, **model_options)
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
                model, train_inputs, train.labels, inputs["val"], val.labels,
                run_spec(training, seed=seed_j, max_steps=max_steps, threads=threads),
                checkpoint_path=_tagged(checkpoint_path, tag),
                last_checkpoint_path=_tagged(last_checkpoint_path, tag), resume=resume,
                patience=training.patience, select_on=training.select_on,
                progress=progress, num_classes=train.num_classes,
                # Everything that makes the run what it is: resuming from a checkpoint of another run is refused.
                config={"model": model_name, "model_options": model_options, "input_spec": raw_spec.to_dict(),
                        "solver": None if solver is None else repr(solver),
                        "trained_model": {**trained_model, "member": member}, **dict(run_settings or {})},
                desc=(desc or model_name) + (f" member {member + 1}/{training.ensemble}" if training.ensemble > 1
                                             else ""),
            )
        except TrainingDiverged as err:
            if _is_main():
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
            result = evaluate(evaluated, inputs[split], ds.labels, eval_batch_size, threads=threads)
            if result["num_samples"] != len(ds):
                raise RuntimeError(f"evaluation of {split!r} scored {result['num_samples']} of {len(ds)} samples")
            metrics[split] = result
    eval_seconds = time.perf_counter() - t1
    return {"model": model_name, "params": params, "options": model_options, "input_spec": raw_spec.to_dict(),
            "history": history,
            "diverged": diverged, "train_seconds": train_seconds, "eval_seconds": eval_seconds, "metrics": metrics}


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
    history = {"train_loss": [], "train_accuracy": [], "val_loss": [], "val_accuracy": [], "seconds_per_epoch": [],
               "epochs_run": 0, "steps": 0, "best_epoch": None}
    return {"model": method, "params": None, "options": {**estimator.get_params(deep=False), "fit_on": fit_on},
            "history": history, "diverged": None, "train_seconds": train_seconds, "compile_seconds": compile_seconds,
            "eval_seconds": eval_seconds, "metrics": metrics, "fit_on": fit_on, "num_fit": sum(len(ds) for ds in fit_sets)}


# ------------------------------------------------------------------------------------------ the runner
def _parse_dtype(dtype) -> torch.dtype:
    return torch.float32 if dtype is None else floating_dtype(dtype)


def _select_rows(rows: Sequence[ModelRow], models: Sequence[str] | None) -> list[ModelRow]:
    if models is None:
        return list(rows)
    wanted = list(models)
    labels = {r.label for r in rows}
    # A row's label names that row alone; a registry name that is no row's label names every row of that model.
    chosen = [r for r in rows if r.label in wanted or (r.model in wanted and r.model not in labels)]
    missing = [m for m in wanted if not any(m in (r.label, r.model) for r in rows)]
    if missing:
        raise ConfigError(f"--models: {', '.join(missing)} match no row; rows: "
                          + ", ".join(f"{r.label} ({r.model})" for r in rows))
    return chosen


def data_digest(splits: Iterable[IrregularDataset]) -> str:
    """A digest of the datasets' tensors and class names: changes whenever the data a run sees change."""
    digest = hashlib.sha256()
    for ds in splits:
        for tensor in (ds.times, ds.values, ds.lengths, ds.labels, ds.static):
            if tensor is None:
                digest.update(b"none")
                continue
            t = tensor.detach().cpu().contiguous()
            digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.numpy().tobytes())
        digest.update(json.dumps(ds.class_names).encode())
    return digest.hexdigest()[:16]


def _changed_keys(before: Mapping, now: Mapping) -> list[str]:
    before, now = _comparable_defaults(before), _comparable_defaults(now)
    return sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))


def _comparable_defaults(defaults: Mapping) -> dict:
    """Registry defaults as compared between a recorded run and today: the default solver (recorded as its repr)
    read back into its fields, a field added to `SolverOptions` since the run was recorded taken at its default,
    so that a new option that leaves the solver as it was does not make every recorded run another model."""
    out = dict(defaults)
    given = solver_repr_fields(out.get("solver"))
    if given is not None:  # (None: not a plain repr, compared as written)
        fields = {f.name: f.default for f in dataclasses.fields(SolverOptions)}
        out["solver"] = {**fields, **given}
    return out


def _unrecorded_control_defaults(now: Mapping) -> dict:
    """The registry control options of a run whose result records none (made before they were recorded):
    today's, less ``window_start_values``, which no registry entry set then (the log-signature CT-FWPs
    read the log-signatures only)."""
    return {k: v for k, v in now.items() if k != "window_start_values"}


def _stale_path(run_dir: Path) -> Path:
    """Where a run made under other registry defaults is moved: ``stale-<run folder>`` (``-2``, ... if taken)."""
    stale, k = run_dir.with_name(f"stale-{run_dir.name}"), 1
    while stale.exists():
        k += 1
        stale = run_dir.with_name(f"stale-{run_dir.name}-{k}")
    return stale


def _inside(folder: Path, name: str) -> Path:
    """``folder / name``, checked to be a folder directly inside ``folder`` (after resolving links and ``..``):
    a name built from a config (a row label) never writes elsewhere."""
    path = folder / name
    if path.resolve().parent != folder.resolve():
        raise ValueError(f"the output folder {name!r} would lie outside {folder} (through '..' or a link); a row "
                         "label names one folder inside it")
    return path


# Keys every recorded result has (`run_benchmark` writes them): a file without them is not a finished run.
_RESULT_KEYS = ("label", "seed", "metrics", "diverged", "history")


def _recorded_result(path: Path) -> dict:
    """A finished run's ``result.json``, read for ``--resume``; a file that is not one (truncated by a crash,
    edited, another file) raises ValueError naming it and what to do."""
    what_to_do = (f"delete it (or its folder {path.parent}) to make that run afresh, or rerun without --resume "
                  "(--fresh: every run made afresh)")
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path}: cannot read this recorded run ({' '.join(str(err).split())}); {what_to_do}") \
            from None
    missing = [key for key in _RESULT_KEYS if key not in result] if isinstance(result, dict) else list(_RESULT_KEYS)
    if missing:
        raise ValueError(f"{path}: not a finished run's result (no {', '.join(missing)}); {what_to_do}")
    return result


def _run_outcome(result: dict, metric: str) -> str:
    """One finished run in a few words: its test metric, epochs and wall time (a reference row: its fit's)."""
    value = result["metrics"]["test"].get(metric)
    parts = [f"test {metric} " + ("-" if value is None else f"{value:.4g}")]
    if not result.get("reference"):
        epochs = result["history"].get("epochs_run", 0)
        parts.append(f"{epochs} epoch{'' if epochs == 1 else 's'}")
    parts.append(f"{result['timing']['total_seconds']:.1f} s")
    return ", ".join(parts) + (" (DIVERGED: last good checkpoint)" if result["diverged"] else "")


def _clear_stale_temporaries(folder: Path, progress: bool) -> None:
    """Remove the temporary files a killed writer left in ``folder`` (`remove_stale_temporaries`), saying so."""
    removed = remove_stale_temporaries(folder)
    if removed and progress:
        print(f"removed {len(removed)} temporary file(s) left in {folder} by an interrupted write: "
              f"{', '.join(p.name for p in removed)}", file=sys.stderr)


def _is_main() -> bool:
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def run_benchmark(
    config: Mapping | str | os.PathLike,
    *,
    out_dir: str | os.PathLike,
    overrides: Iterable[str] = (),
    task_overrides: Mapping | None = None,
    models: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    max_steps: int | None = None,
    resume: bool = False,
    progress: bool = True,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    threads: int | None = DEFAULT_THREADS,
    cache_controls: bool = True,
) -> dict:
    """Run a benchmark config (see the module docstring) and return the aggregated results.

    Arguments:
        config: a config dict or the path of a YAML file (schema in docs/benchmarks.md).
        out_dir: output folder.
        overrides: ``key.path=value`` strings applied before parsing (`apply_overrides`).
        task_overrides: extra keyword arguments of the task's loader not stored in the config (e.g.
            ``cache_dir``, ``remotes``, ``offline``); not written to the results.
        models: run only the rows whose label or model name is listed.
        seeds: replace the config's seeds.
        max_steps: stop each run after this many training steps: a smoke run of the config, marked as such
            and never aggregated with full runs.
        resume: reuse finished runs and continue interrupted ones whose fingerprint matches (module docstring).
        progress: show progress on stderr (default True): bars over the runs and epochs where stderr is a
            terminal, otherwise one line per epoch and one per finished run.
        device: torch device (default None: cpu).
        dtype: "float32" (default, also for None) or "float64", or a torch dtype: the precision of the data
            and the models.
        threads: torch's CPU threads for the run (default 1, `threads`; None: torch's
            setting), restored afterwards.
        cache_controls: build each control once per (data split, control options) and reuse it in every
            row and seed that reads it (`ControlCache`); False rebuilds it for every run.

    Returns:
        The aggregated results, as written to ``out_dir/results.json``: ``name``, ``description``, ``task``,
            ``config``, ``std_ddof``, ``smoke``, ``max_steps``, ``environment``, ``rows`` (one summary per row,
            over the seeds) and ``diverged``: the labels and seeds of runs that diverged (the CLI then exits 1).
            In a distributed run, processes other than rank 0 get only ``name``, ``diverged`` and ``rows`` None.

    Raises:
        ConfigError: an invalid config.
        ValueError: a bad argument (e.g. ``max_steps``, ``dtype``).
        OutputFolderBusy: (a ValueError) another process is running a benchmark into ``out_dir``
            (`neuralde_seq.files.OutputLock`).
    """
    check_threads(threads)
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"max_steps must be a positive integer or None, got {max_steps!r}")
    with torch_threads(threads), contextlib.ExitStack() as held:
        raw = apply_overrides(load_config(config), overrides)
        if seeds is not None:
            raw["seeds"] = [int(s) for s in seeds]
        cfg: BenchmarkConfig = parse_config(raw)
        rows = _select_rows(cfg.rows, models)
        torch_device = torch.device(device if device is not None else "cpu")
        torch_dtype = _parse_dtype(dtype)
        out_dir = Path(out_dir)
        if _is_main():  # one process at a time writes into out_dir: a second one is refused (OutputFolderBusy)
            held.enter_context(OutputLock(out_dir))
            _clear_stale_temporaries(out_dir, progress)

        from tqdm import tqdm

        from ..data.protocols import get_task, load_task

        task = get_task(cfg.task)
        env = environment(torch_device, torch_dtype)
        per_row: dict[str, list[dict]] = {r.label: [] for r in rows}
        data_cache: dict = {}
        # Controls per (split, control options), shared by the rows and seeds that read the same data.
        control_cache = ControlCache() if cache_controls else None

        def task_data(seed: int):
            key = seed if task.data_depend_on_seed else None
            if key not in data_cache:
                data_cache.clear()  # one seed's data at a time
                if control_cache is not None:
                    control_cache.clear()  # their controls go with them
                data = load_task(task.name, seed=seed, dtype=torch_dtype, progress=progress,
                                 **cfg.task_options, **dict(task_overrides or {}))
                splits = DatasetSplits(*(ds.to(device=torch_device) for ds in data.splits))
                tests = {v.label: data.test_variant(drop_rate=v.drop_rate, subsample=v.subsample,
                                                    time_warp=v.time_warp).to(device=torch_device)
                         for v in cfg.variants}
                digest = data_digest([*data.splits, *tests.values()])
                data_cache[key] = (data, splits, tests, digest)
            return data_cache[key]

        diverged_runs = []
        # What each model's options and control options were when not given (models.model_defaults,
        # models.control_options), recorded in every result so that a finished run made under other registry
        # defaults is not reused.
        from ..models import control_options, model_defaults

        def as_json(value):
            return json.loads(json.dumps(to_jsonable(value)))

        def reference_defaults(name):
            from ..reference import reference_method

            return reference_method(name).defaults()

        defaults = {row.model: as_json(reference_defaults(row.model) if row.reference else model_defaults(row.model))
                    for row in rows}
        control_defaults = {row.model: {} if row.reference else as_json(control_options(row.model)) for row in rows}
        model_changes = {v.label: dict(v.model_change) for v in cfg.variants if v.model_change is not None}
        runs = [(seed, row) for seed in cfg.seeds for row in rows]
        # Progress over the runs: a bar where stderr is a terminal, else one line per finished run (the epochs of
        # each run likewise: ProgressBar); nothing with progress=False.
        show = progress and _is_main()
        interactive = show and is_terminal(sys.stderr)
        run_bar = tqdm(total=len(runs), desc=short_label(cfg.name, 30), unit="run", disable=not interactive,
                       dynamic_ncols=True, file=sys.stderr, bar_format="{desc}: {n_fmt}/{total_fmt} runs |{bar}| "
                                                                       "{elapsed}<{remaining}")

        def say(message: str) -> None:
            """A message on stderr, above the bars where they are drawn."""
            if interactive:
                tqdm.write(message, file=sys.stderr)
            else:
                print(message, file=sys.stderr)

        def finished(index: int, row: ModelRow, seed: int, outcome: str) -> None:
            run_bar.update(1)
            if show and not interactive:
                say(f"[{index}/{len(runs)}] {row.label} seed {seed}: {outcome}")

        for index, (seed, row) in enumerate(runs, 1):
            data, splits, tests, digest = task_data(seed)
            settings = {"row": row.to_dict(), "task": cfg.task, "task_options": cfg.task_options, "seed": seed,
                        "dtype": str(torch_dtype).replace("torch.", ""), "max_steps": max_steps,
                        "variants": [v.label for v in cfg.variants], "data": digest}
            if model_changes:  # (only then: the fingerprints of runs without model changes stay as they were)
                settings["model_changes"] = model_changes
            run_id = fingerprint(settings)
            row_dir = _inside(out_dir / "runs", slug(row.label))
            run_dir = _inside(row_dir, f"seed{seed}-{run_id}")
            result_path = run_dir / "result.json"
            if _is_main():  # a run killed mid-write left its temporary files here; this process owns the folder now
                _clear_stale_temporaries(run_dir, progress)
            if resume:
                others = sorted(p.name for p in row_dir.glob(f"seed{seed}-*") if p.name != run_dir.name) \
                    if row_dir.exists() else []
                if others and _is_main():
                    say(f"[{row.label} seed {seed}] not reusing {', '.join(others)}: made with other settings or "
                        f"data (this run's fingerprint is {run_id})")
                if result_path.exists():
                    result = _recorded_result(result_path)
                    # Runs made before the defaults were recorded are taken to be made under today's model
                    # defaults, and under the control defaults there were before any was recorded.
                    made_with = result.get("model_defaults", defaults[row.model])
                    made_control = result.get("control_defaults", _unrecorded_control_defaults(
                        control_defaults[row.model]))
                    changed = _changed_keys(made_with, defaults[row.model]) + [
                        f"control {k}" for k in _changed_keys(made_control, control_defaults[row.model])]
                    if not changed:
                        per_row[row.label].append(result)
                        if result["diverged"]:
                            diverged_runs.append((row.label, seed))
                        finished(index, row, seed, f"reused the recorded run {run_dir.name}")
                        continue
                    # The fingerprint hashes the row as written; the registry defaults it resolved to changed
                    # since: that run is another model. Kept aside (never globbed as seed<k>-*), made afresh.
                    stale = _stale_path(run_dir)
                    if _is_main():
                        run_dir.rename(stale)
                        say(f"[{row.label} seed {seed}] not reusing {run_dir.name}: made with other registry "
                            f"defaults of {row.model!r} ({', '.join(changed)}); moved to {stale.name}")
            t0 = time.perf_counter()
            if row.reference:  # a closed-form method: fitted once, no epochs, checkpoints or curves
                fit = fit_and_evaluate_reference(row.model, splits, seed=seed, options=row.options, tests=tests,
                                                 model_changes=model_changes)
            else:
                def train():
                    # The registry defaults go into the resume checkpoint's settings too (not into the fingerprint):
                    # an interrupted run made under other defaults is another model, never continued.
                    # A model's warnings spell their fixes as this row's options (options_spelled_as).
                    with options_spelled_as("config", row.options, row=row.label):
                        return fit_and_evaluate(
                            row.model, splits, seed=seed, training=row.training, options=row.options, control=row.control,
                            solver=row.solver, tests=tests, model_changes=model_changes,
                            checkpoint_path=run_dir / "best.pt", last_checkpoint_path=run_dir / "last.pt",
                            resume=resume, max_steps=max_steps, progress=progress, desc=f"{row.label} seed {seed}",
                            threads=threads, control_cache=control_cache,
                            run_settings={**settings, "model_defaults": defaults[row.model],
                                          "control_defaults": control_defaults[row.model]})

                try:
                    fit = train()
                except ResumeMismatch as mismatch:
                    # Same fingerprint, other registry defaults (or a checkpoint from before they were recorded):
                    # set aside like a finished run of another model, and made afresh.
                    stale = _stale_path(run_dir)
                    if _is_main():
                        run_dir.rename(stale)
                        say(f"[{row.label} seed {seed}] not continuing {run_dir.name}: {mismatch}; moved to "
                            f"{stale.name}")
                    fit = train()
            result = {
                "name": cfg.name, "label": row.label, "model": row.model, "seed": seed, "fingerprint": run_id,
                "smoke": max_steps is not None, "config": settings, "data": data.info(),
                "params": fit["params"], "model_options": fit["options"], "model_defaults": defaults[row.model],
                "control_defaults": control_defaults[row.model], "input_spec": fit.get("input_spec"),
                "metrics": fit["metrics"], "history": fit["history"], "diverged": fit["diverged"],
                "timing": {"train_seconds": fit["train_seconds"], "eval_seconds": fit["eval_seconds"],
                           "total_seconds": time.perf_counter() - t0,
                           "seconds_per_epoch_mean": (sum(fit["history"]["seconds_per_epoch"])
                                                      / max(1, len(fit["history"]["seconds_per_epoch"])))},
                "environment": env,
            }
            if row.reference:
                result["timing"]["seconds_per_epoch_mean"] = None
                result["timing"]["compile_seconds"] = fit["compile_seconds"]
                result["reference"] = {"method": row.model, "fit_on": fit["fit_on"], "num_fit": fit["num_fit"]}
            if fit["diverged"]:
                diverged_runs.append((row.label, seed))
            if _is_main():
                write_json(result, result_path)
                if not row.reference:
                    write_curves(fit["history"], run_dir / "curves.csv")
            per_row[row.label].append(result)
            finished(index, row, seed, _run_outcome(result, task.metric))
        run_bar.close()

        cfg_dict = cfg.to_dict()
        cfg_dict["models"] = [r.to_dict() for r in rows]
        if not _is_main():
            return {"name": cfg.name, "diverged": diverged_runs, "rows": None}
        # results.json, results.md and the plots are one answer: published together, or (a failed write) not at all
        with published_together():
            results = write_report(cfg_dict, per_row, task_metric=task.metric, task_description=task.description,
                                   out_dir=out_dir, environment_info=env, max_steps=max_steps)
            results["diverged"] = [{"label": label, "seed": seed} for label, seed in diverged_runs]
            write_json(results, out_dir / "results.json")
        return results
