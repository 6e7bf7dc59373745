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
    <out_dir>/grid.json                              the grid: its config, rows, seeds and every run's settings
    <out_dir>/results.json, results.md              mean ± std over seeds beside the paper's number
    <out_dir>/curves.png, summary.png               learning curves; ours vs paper with error bars

A row may also name a reference method (a closed-form classifier of `neuralde_seq.reference`, e.g.
``{"label": "minirocket", "model": "minirocket"}``): it is fitted on the training and validation splits
together (`fit_and_evaluate_reference`) and scored on the same test sets; its folder holds ``result.json``
only (no checkpoints or curves), and the tables mark it as a reference row.

Grids on a cluster (docs/benchmarks.md, "Grids on a cluster"): ``shard=(K, N)`` makes only the K-th of N disjoint
parts of the runs (`shard_runs`; ``bench --shard K/N``), the shards of a grid sharing ``out_dir``, and
`report_grid` (``neuralde-seq report OUT``) writes the tables from the run folders of the grid recorded in
``<out_dir>/grid.json`` (`GRID_FILE`, written by every run); ``executor="ray"`` makes every run a Ray task
(`neuralde_seq.training.ray_executor`). Each run, wherever it is made, goes through one function (`_train_run`)
and holds a lock of its own, ``runs/<row label>/.seed<k>-<fingerprint>.lock``.

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
           "data_digest", "report_grid", "IncompleteGrid", "GRID_FILE", "EXECUTORS", "check_shard", "parse_shard",
           "shard_runs"]

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


# ------------------------------------------------------------------------------------------ a grid of runs
GRID_FILE = "grid.json"
"""The record of the grid an output folder holds: `run_benchmark` writes it, `report_grid` reads it."""

EXECUTORS = ("serial", "ray")
"""What `run_benchmark` runs the runs with: one after the other in this process, or as Ray tasks."""


class IncompleteGrid(ValueError):
    """`report_grid` found runs of the grid without a result (a `ValueError`: the CLI exits 2).

    Arguments:
        message: the runs, named, and what to do.
        missing: one ``{"label", "seed", "why"}`` per run; attribute ``missing``.
    """

    def __init__(self, message: str, missing: list[dict]):
        super().__init__(message)
        self.missing = missing


def check_shard(shard: Sequence[int]) -> tuple[int, int]:
    """``shard`` as ``(K, N)``, checked: the K-th of N parts of a grid, ``1 <= K <= N`` (1-based, as the task ids of
    a job array ``--array=1-N`` are).

    Arguments:
        shard: a pair of integers (K, N).

    Raises:
        ValueError: not a pair of integers with 1 <= K <= N; the message says what is expected.
    """
    try:
        k, n = shard
    except (TypeError, ValueError):
        raise ValueError(f"shard must be a pair (K, N), got {shard!r}") from None
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (k, n)) or n < 1 or not 1 <= k <= n:
        raise ValueError(f"shard must be K/N with 1 <= K <= N (the K-th of N parts, counted from 1 as a job array "
                         f"--array=1-N counts), got {k!r}/{n!r}")
    return k, n


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` (e.g. ``"2/8"``, the 2nd of 8 parts) as ``(K, N)``, checked by `check_shard`.

    Arguments:
        text: ``K/N``, two whole numbers.

    Raises:
        ValueError: not two whole numbers K/N with 1 <= K <= N.
    """
    try:
        k, n = (int(part) for part in str(text).split("/"))
    except ValueError:
        raise ValueError(f"shard must be K/N, two whole numbers (e.g. 2/8: the 2nd of 8 parts), got {text!r}") \
            from None
    return check_shard((k, n))


def shard_runs(runs: Sequence, shard: Sequence[int]) -> list:
    """The runs of part K of N: every N-th run of the grid's run list from the K-th (round robin).

    The N parts are disjoint and together hold every run; each holds ⌊n/N⌋ or ⌈n/N⌉ of the n runs; and a part
    holds the same runs as long as the grid's rows and seeds are unchanged (the run list is seed by seed, each
    seed's rows in the config's order).

    Arguments:
        runs: the grid's runs in order.
        shard: (K, N), 1 <= K <= N.
    """
    k, n = check_shard(shard)
    return list(runs)[k - 1::n]


def _as_json(value):
    """``value`` as it reads back from a JSON file (what a recorded result or grid compares equal to)."""
    return json.loads(json.dumps(to_jsonable(value)))


def _registry_defaults(models: Iterable[tuple[str, bool]]) -> tuple[dict, dict]:
    """What each model's options and control options are when not given (models.model_defaults,
    models.control_options; a reference method's estimator defaults), per name, from (name, is_reference) pairs:
    recorded in every result so that a finished run made under other registry defaults is not reused."""
    from ..models import control_options, model_defaults
    from ..reference import reference_method

    defaults, controls = {}, {}
    for name, reference in models:
        defaults[name] = _as_json(reference_method(name).defaults() if reference else model_defaults(name))
        controls[name] = {} if reference else _as_json(control_options(name))
    return defaults, controls


def _registry_changes(result: Mapping, defaults: Mapping, control_defaults: Mapping) -> list[str]:
    """The registry defaults (``control <key>`` for a control option) that changed since ``result`` was made.

    Runs made before the defaults were recorded are taken to be made under today's model defaults, and under
    the control defaults there were before any was recorded."""
    made_with = result.get("model_defaults", defaults)
    made_control = result.get("control_defaults", _unrecorded_control_defaults(control_defaults))
    return _changed_keys(made_with, defaults) + [f"control {k}" for k in _changed_keys(made_control, control_defaults)]


@dataclasses.dataclass
class _Grid:
    """What the runs of one grid share (`_plan_grid`)."""

    raw: dict  # the config with its overrides and seeds applied: what a Ray task parses again
    models: tuple[str, ...] | None
    cfg: BenchmarkConfig
    rows: list[ModelRow]
    task: Any
    device: torch.device
    dtype: torch.dtype
    max_steps: int | None
    out_dir: Path
    task_overrides: dict
    defaults: dict
    control_defaults: dict
    model_changes: dict

    def runs(self) -> list[tuple[int, ModelRow]]:
        """Every (seed, row) of the grid, seed by seed."""
        return [(seed, row) for seed in self.cfg.seeds for row in self.rows]

    def settings(self, row: ModelRow, seed: int, digest: str | None) -> dict:
        """Everything that determines the run of ``row`` with ``seed`` on data of ``digest``: its fingerprint's."""
        settings = {"row": row.to_dict(), "task": self.cfg.task, "task_options": self.cfg.task_options, "seed": seed,
                    "dtype": str(self.dtype).replace("torch.", ""), "max_steps": self.max_steps,
                    "variants": [v.label for v in self.cfg.variants], "data": digest}
        if self.model_changes:  # (only then: the fingerprints of runs without model changes stay as they were)
            settings["model_changes"] = self.model_changes
        return settings

    def plan(self) -> dict:
        """`_plan_grid`'s arguments that plan this grid again (in a Ray task): picklable, the folder absolute."""
        return {"config": self.raw, "models": self.models, "max_steps": self.max_steps, "device": str(self.device),
                "dtype": str(self.dtype).replace("torch.", ""), "out_dir": str(self.out_dir.resolve()),
                "task_overrides": self.task_overrides}

    def record(self) -> dict:
        """The grid as `GRID_FILE` holds it: the config of its rows, the task's metric, ``max_steps`` and every
        run's label, seed and settings (all but the data digest, which only loading the data gives)."""
        cfg = self.cfg.to_dict()
        cfg["models"] = [row.to_dict() for row in self.rows]
        runs = [{"label": row.label, "seed": seed,
                 "settings": {k: v for k, v in self.settings(row, seed, None).items() if k != "data"}}
                for seed, row in self.runs()]
        return _as_json({"format": 1, "name": self.cfg.name, "config": cfg, "task_metric": self.task.metric,
                         "task_description": self.task.description, "max_steps": self.max_steps, "runs": runs})


def _plan_grid(config: Mapping | str | os.PathLike, *, out_dir: str | os.PathLike, overrides: Iterable[str] = (),
               seeds: Sequence[int] | None = None, models: Sequence[str] | None = None, max_steps: int | None = None,
               device: str | torch.device | None = None, dtype: str | torch.dtype | None = None,
               task_overrides: Mapping | None = None) -> _Grid:
    """The grid of a config (`run_benchmark`'s arguments of the same names): parsed, its rows selected."""
    from ..data.protocols import get_task

    raw = apply_overrides(load_config(config), overrides)
    if seeds is not None:
        raw["seeds"] = [int(s) for s in seeds]
    cfg: BenchmarkConfig = parse_config(raw)
    rows = _select_rows(cfg.rows, models)
    defaults, control_defaults = _registry_defaults((row.model, row.reference) for row in rows)
    return _Grid(raw=raw, models=None if models is None else tuple(models), cfg=cfg, rows=rows,
                 task=get_task(cfg.task), device=torch.device(device if device is not None else "cpu"),
                 dtype=_parse_dtype(dtype), max_steps=max_steps, out_dir=Path(out_dir),
                 task_overrides=dict(task_overrides or {}), defaults=defaults, control_defaults=control_defaults,
                 model_changes={v.label: dict(v.model_change) for v in cfg.variants if v.model_change is not None})


class _TaskData:
    """The task's data for one seed at a time (a task whose data do not depend on the seed: once), on the grid's
    device, with its test variants and digest; and the controls built from them (`ControlCache`), shared by the
    rows and seeds that read the same data."""

    def __init__(self, grid: _Grid, *, progress: bool, cache_controls: bool):
        self.grid, self.progress = grid, progress
        self.control_cache = ControlCache() if cache_controls else None
        self._loaded: dict = {}

    def __call__(self, seed: int) -> tuple:
        """``(data, splits, tests, digest)`` of ``seed``: the `TaskData`, its splits, the variants of its test
        set (label -> dataset) and `data_digest` of them all."""
        from ..data.protocols import load_task

        grid = self.grid
        key = seed if grid.task.data_depend_on_seed else None
        if key not in self._loaded:
            self._loaded.clear()  # one seed's data at a time
            if self.control_cache is not None:
                self.control_cache.clear()  # their controls go with them
            data = load_task(grid.task.name, seed=seed, dtype=grid.dtype, progress=self.progress,
                             **grid.cfg.task_options, **grid.task_overrides)
            splits = DatasetSplits(*(ds.to(device=grid.device) for ds in data.splits))
            tests = {v.label: data.test_variant(drop_rate=v.drop_rate, subsample=v.subsample,
                                                time_warp=v.time_warp).to(device=grid.device)
                     for v in grid.cfg.variants}
            self._loaded[key] = (data, splits, tests, data_digest([*data.splits, *tests.values()]))
        return self._loaded[key]


def _run_lock_name(run_dir: Path) -> str:
    """The lock file of a run, beside its folder in the row's folder (its folder may be moved aside while held)."""
    return f".{run_dir.name}.lock"


def _train_run(grid: _Grid, row: ModelRow, seed: int, task_data: _TaskData, *, resume: bool, progress: bool,
               threads: int | None, say) -> tuple[dict, bool]:
    """Make one run of the grid (row, seed) in its folder, or reuse its recorded result: the body of the serial
    loop and of a Ray task alike.

    The run holds an exclusive lock of its own (`OutputLock` on ``runs/<row>/.seed<k>-<fingerprint>.lock``)
    while it reads and writes its folder, so that two processes (shards whose parts overlap, a task retried while
    its first attempt still runs) never write one run at once.

    Returns:
        The run's result (as written to its ``result.json``) and whether it was reused from the folder.
    """
    data, splits, tests, digest = task_data(seed)
    settings = grid.settings(row, seed, digest)
    run_id = fingerprint(settings)
    row_dir = _inside(grid.out_dir / "runs", slug(row.label))
    run_dir = _inside(row_dir, f"seed{seed}-{run_id}")
    result_path = run_dir / "result.json"
    defaults, control_defaults = grid.defaults[row.model], grid.control_defaults[row.model]
    with contextlib.ExitStack() as held:
        if _is_main():
            held.enter_context(OutputLock(row_dir, name=_run_lock_name(run_dir)))
            # a run killed mid-write left its temporary files here; this process holds the run's lock now
            _clear_stale_temporaries(run_dir, progress)
        if resume:
            others = sorted(p.name for p in row_dir.glob(f"seed{seed}-*") if p.name != run_dir.name)
            if others and _is_main():
                say(f"[{row.label} seed {seed}] not reusing {', '.join(others)}: made with other settings or "
                    f"data (this run's fingerprint is {run_id})")
            if result_path.exists():
                result = _recorded_result(result_path)
                changed = _registry_changes(result, defaults, control_defaults)
                if not changed:
                    return result, True
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
                                             model_changes=grid.model_changes)
        else:
            def train():
                # The registry defaults go into the resume checkpoint's settings too (not into the fingerprint):
                # an interrupted run made under other defaults is another model, never continued.
                # A model's warnings spell their fixes as this row's options (options_spelled_as).
                with options_spelled_as("config", row.options, row=row.label):
                    return fit_and_evaluate(
                        row.model, splits, seed=seed, training=row.training, options=row.options, control=row.control,
                        solver=row.solver, tests=tests, model_changes=grid.model_changes,
                        checkpoint_path=run_dir / "best.pt", last_checkpoint_path=run_dir / "last.pt",
                        resume=resume, max_steps=grid.max_steps, progress=progress, desc=f"{row.label} seed {seed}",
                        threads=threads, control_cache=task_data.control_cache,
                        run_settings={**settings, "model_defaults": defaults, "control_defaults": control_defaults})

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
            "name": grid.cfg.name, "label": row.label, "model": row.model, "seed": seed, "fingerprint": run_id,
            "smoke": grid.max_steps is not None, "config": settings, "data": data.info(),
            "params": fit["params"], "model_options": fit["options"], "model_defaults": defaults,
            "control_defaults": control_defaults, "input_spec": fit.get("input_spec"),
            "metrics": fit["metrics"], "history": fit["history"], "diverged": fit["diverged"],
            "timing": {"train_seconds": fit["train_seconds"], "eval_seconds": fit["eval_seconds"],
                       "total_seconds": time.perf_counter() - t0,
                       "seconds_per_epoch_mean": (sum(fit["history"]["seconds_per_epoch"])
                                                  / max(1, len(fit["history"]["seconds_per_epoch"])))},
            "environment": environment(grid.device, grid.dtype),
        }
        if row.reference:
            result["timing"]["seconds_per_epoch_mean"] = None
            result["timing"]["compile_seconds"] = fit["compile_seconds"]
            result["reference"] = {"method": row.model, "fit_on": fit["fit_on"], "num_fit": fit["num_fit"]}
        if _is_main():
            write_json(result, result_path)
            if not row.reference:
                write_curves(fit["history"], run_dir / "curves.csv")
    return result, False


class _RunProgress:
    """Progress over the runs: a bar where stderr is a terminal, else one line per finished run (the epochs of each
    run likewise: ProgressBar); nothing with ``progress`` False and in processes other than rank 0."""

    def __init__(self, name: str, total: int, metric: str, progress: bool):
        from tqdm import tqdm

        self.total, self.metric, self.count = total, metric, 0
        self.show = progress and _is_main()
        self.interactive = self.show and is_terminal(sys.stderr)
        self.bar = tqdm(total=total, desc=short_label(name, 30), unit="run", disable=not self.interactive,
                        dynamic_ncols=True, file=sys.stderr,
                        bar_format="{desc}: {n_fmt}/{total_fmt} runs |{bar}| {elapsed}<{remaining}")

    def say(self, message: str) -> None:
        """A message on stderr, above the bars where they are drawn."""
        from tqdm import tqdm

        if self.interactive:
            tqdm.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr)

    def finished(self, result: dict, reused: bool) -> None:
        self.count += 1
        self.bar.update(1)
        if self.show and not self.interactive:
            outcome = (f"reused the recorded run seed{result['seed']}-{result['fingerprint']}" if reused
                       else _run_outcome(result, self.metric))
            self.say(f"[{self.count}/{self.total}] {result['label']} seed {result['seed']}: {outcome}")

    def close(self) -> None:
        self.bar.close()


def _record_grid(grid: _Grid, say) -> dict:
    """Write the grid's record (`GRID_FILE`) into its folder, unless it holds it already; say when it replaces
    another grid's (whose run folders are kept, and no longer reported). Returns the record."""
    record = grid.record()
    path = grid.out_dir / GRID_FILE
    try:
        before = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        before = None
    except (OSError, ValueError):
        before = "unreadable"
    if before == record:
        return record
    if before is not None:
        say(f"{path}: replaced the record of another grid (other config, rows, seeds or max_steps): its run folders "
            "are kept, and `report` reports this grid's")
    write_json(record, path)
    return record


def _read_grid(out_dir: Path) -> dict:
    """The grid record of ``out_dir`` (`GRID_FILE`), checked; ValueError naming the file when there is none."""
    path = out_dir / GRID_FILE
    if not path.is_file():
        raise ValueError(f"{path}: no such file: {out_dir} holds no grid (neuralde-seq bench CONFIG --out {out_dir}, "
                         "whole or any --shard, records it)")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: cannot read the grid record ({' '.join(str(err).split())}); run any shard of the "
                         "grid again to write it") from None
    keys = ("name", "config", "task_metric", "task_description", "max_steps", "runs")
    if not isinstance(record, dict) or any(key not in record for key in keys):
        raise ValueError(f"{path}: not a grid record (it needs {', '.join(keys)}); run any shard of the grid again "
                         "to write it")
    return record


def _recorded_runs(record: dict, out_dir: Path) -> tuple[list[dict], list[dict]]:
    """The results of the grid's runs found in ``out_dir`` (in the grid's order) and the runs without one
    (``{"label", "seed", "why"}``).

    A run's result is the ``result.json`` of a folder ``runs/<row>/seed<k>-<fingerprint>`` whose settings are the
    grid's for that run (any data digest: the data are checked to be the same across runs instead), made under
    today's registry defaults (what ``--resume`` reuses). Folders of other settings, other defaults or set aside
    (``stale-...``) are never taken.

    Raises:
        ValueError: two folders hold the run (made from other data), or runs that read the same data were made
            from different data; the message names the folders.
    """
    from ..data.protocols import get_task

    rows = {row["label"]: row for row in record["config"]["models"]}
    defaults, control_defaults = _registry_defaults((row["model"], bool(row.get("reference"))) for row in rows.values())
    found, missing, folders = [], [], {}
    for run in record["runs"]:
        label, seed, model = run["label"], run["seed"], rows[run["label"]]["model"]
        row_dir = out_dir / "runs" / slug(label)
        matches, other_defaults = [], []
        for folder in sorted(row_dir.glob(f"seed{seed}-*")) if row_dir.is_dir() else []:
            path = folder / "result.json"
            if not path.is_file():
                continue
            result = _recorded_result(path)
            settings = _as_json(result.get("config", {}))
            if {k: v for k, v in settings.items() if k != "data"} != run["settings"] \
                    or folder.name != f"seed{seed}-{result.get('fingerprint')}":
                continue  # another grid's run (other settings), or a folder copied under another name
            changed = _registry_changes(result, defaults[model], control_defaults[model])
            if changed:
                other_defaults.append(f"{folder.name} (made under other registry defaults: {', '.join(changed)})")
                continue
            matches.append((folder, result))
        if len(matches) > 1:
            raise ValueError(f"{label} seed {seed}: {' and '.join(str(f) for f, _ in matches)} both hold this run of "
                             "the grid, made from different data (the task's data changed between them): delete the "
                             "outdated folder(s)")
        if matches:
            folders[(label, seed)], result = matches[0]
            found.append(result)
        else:
            why = "; ".join(other_defaults) if other_defaults else "no result.json of this grid's settings"
            missing.append({"label": label, "seed": seed, "why": why})
    # One data digest per seed (a task whose data do not depend on the seed: one for every run).
    by_data: dict = {}
    for result in found:
        key = result["seed"] if get_task(record["config"]["task"]).data_depend_on_seed else None
        by_data.setdefault(key, {}).setdefault(result["config"].get("data"), []).append(result)
    for key, digests in by_data.items():
        if len(digests) > 1:
            groups = "; ".join(", ".join(str(folders[(r["label"], r["seed"])]) for r in runs)
                               for runs in digests.values())
            raise ValueError(f"runs of the grid that read the same data{'' if key is None else f' (seed {key})'} were "
                             f"made from different data: {groups}; delete the runs made from outdated data and make "
                             "them again (bench --resume)")
    return found, missing


def _write_grid_report(record: dict, results: Sequence[dict], out_dir: Path, missing: Sequence[dict] = ()) -> dict:
    """The tables and plots of a grid from its runs' results (`write_report`): what a whole run writes at its end
    and `report_grid` writes from the run folders. The environment is the runs' (the first run's, with
    ``environment_differs`` naming the fields where other runs' differ); ``diverged`` lists the runs that diverged,
    ``missing`` those without a result."""
    cfg = record["config"]
    per_row: dict[str, list[dict]] = {row["label"]: [] for row in cfg["models"]}
    for result in results:
        per_row[result["label"]].append(result)
    env = results[0]["environment"]
    differs = sorted({key for r in results for key in {*r["environment"], *env}
                      if r["environment"].get(key) != env.get(key)})
    # results.json, results.md and the plots are one answer: published together, or (a failed write) not at all
    with published_together():
        written = write_report(cfg, per_row, task_metric=record["task_metric"],
                               task_description=record["task_description"], out_dir=out_dir, environment_info=env,
                               max_steps=record["max_steps"], missing=[{"label": m["label"], "seed": m["seed"]}
                                                                      for m in missing])
        if differs:
            written["environment_differs"] = differs
        written["diverged"] = [{"label": r["label"], "seed": r["seed"]} for r in results if r["diverged"]]
        write_json(written, out_dir / "results.json")
    return written


def report_grid(out_dir: str | os.PathLike, *, partial: bool = False) -> dict:
    """The tables and plots of the grid recorded in ``out_dir``, from its run folders (``neuralde-seq report OUT``):
    after the shards of a grid (``bench --shard K/N``) have run, or again after any run.

    Reads the grid's record (`GRID_FILE`, written by every `run_benchmark` into its folder), takes for each run of
    the grid the ``result.json`` of its folder (the settings the record gives, today's registry defaults; folders of
    other settings, data or defaults and those set aside are left out, see `_recorded_runs`) and writes
    ``results.json``, ``results.md``, ``curves.png`` and ``summary.png`` as a whole run writes them (one writer:
    a whole run writes its tables this way too). It takes the output folder's lock shared, as shards do: it may
    run while shards still run, never during a whole run into the folder.

    Arguments:
        out_dir: the grid's output folder.
        partial: write the tables of the runs there are when some have no result, marked INCOMPLETE (the
            title of results.md and summary.png, a note naming the missing runs, and ``missing`` in results.json);
            default False: raise `IncompleteGrid`.

    Returns:
        The results, as written to ``results.json`` (as `run_benchmark` returns them; ``missing`` lists the
            runs without a result).

    Raises:
        IncompleteGrid: (a ValueError) runs without a result, unless ``partial``; or no run has one.
        ValueError: no grid record in ``out_dir``; a run held by two folders; runs of one seed's data made from
            different data.
        OutputFolderBusy: a whole run is writing into ``out_dir``.
    """
    out_dir = Path(out_dir)
    record = _read_grid(out_dir)
    with OutputLock(out_dir, shared=True):
        found, missing = _recorded_runs(record, out_dir)
        total = len(record["runs"])
        if not found:
            raise IncompleteGrid(f"{out_dir}: none of the {total} runs of grid {record['name']!r} has a result yet",
                                 missing)
        if missing and not partial:
            named = "; ".join(f"{m['label']} seed {m['seed']} ({m['why']})" for m in missing)
            raise IncompleteGrid(
                f"{out_dir}: {len(missing)} of the {total} runs of grid {record['name']!r} have no result: {named}. "
                f"Run the shards that hold them (or bench CONFIG --out {out_dir} --resume), or report --partial for "
                "the tables of the runs there are, marked INCOMPLETE", missing)
        return _write_grid_report(record, found, out_dir, missing)


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
    shard: Sequence[int] | None = None,
    executor: str = "serial",
    address: str | None = None,
    retries: int = 2,
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
        shard: (K, N): run only the K-th of N disjoint parts of the grid's runs (`shard_runs`; 1 <= K <= N), for
            job arrays: the shards of one grid share ``out_dir`` (each takes its lock shared), write their run
            folders and no tables; `report_grid` writes those once every shard is done. Default None: every run,
            then the tables.
        executor: "serial" (default: the runs one after the other in this process) or "ray": each run a Ray task
            (`neuralde_seq.training.ray_executor`; ``pip install "neuralde-seq[ray]"``), the tables written here.
        address: ``executor="ray"``: the Ray cluster to connect to (``ray.init(address=...)``: "auto", or
            ``host:port``); None: the cluster this process is connected to, else a local instance.
        retries: ``executor="ray"``: how many times a run whose worker process died is submitted again, continuing
            from its last checkpoint (default 2).

    Returns:
        The aggregated results, as written to ``out_dir/results.json``: ``name``, ``description``, ``task``,
            ``config``, ``std_ddof``, ``smoke``, ``max_steps``, ``environment``, ``rows`` (one summary per row,
            over the seeds), ``missing`` (empty) and ``diverged``: the labels and seeds of runs that diverged (the
            CLI then exits 1). A shard returns ``name``, ``shard`` [K, N], ``runs`` (its runs' labels, seeds and
            folders), ``diverged`` and ``rows`` None. In a distributed run, processes other than rank 0 get only
            ``name``, ``diverged`` and ``rows`` None.

    Raises:
        ConfigError: an invalid config.
        ValueError: a bad argument (e.g. ``max_steps``, ``dtype``, ``shard``, ``executor``).
        OutputFolderBusy: (a ValueError) another process is running a benchmark into ``out_dir``
            (`neuralde_seq.files.OutputLock`): a whole run, or (for a whole run) shards; or another process
            is making one of the runs.
        ModuleNotFoundError: ``executor="ray"`` without Ray installed (the message gives the pip command).
        RunsFailed: (a RuntimeError) ``executor="ray"``: runs whose worker died more than ``retries`` times.
    """
    check_threads(threads)
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"max_steps must be a positive integer or None, got {max_steps!r}")
    if shard is not None:
        shard = check_shard(shard)
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if executor != "ray" and address is not None:
        raise ValueError(f"address is the Ray cluster of executor='ray' (executor is {executor!r})")
    if executor == "ray" and shard is not None:
        raise ValueError("shard and executor='ray' are two ways to spread a grid: give one (Ray schedules every run "
                         "of the grid itself)")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
    if executor == "ray":
        import torch.distributed as dist

        from .ray_executor import import_ray

        if dist.is_available() and dist.is_initialized():
            raise ValueError("executor='ray' in a distributed process group: each Ray task makes a run of its own "
                             "(give one or the other)")
        import_ray()  # before anything is written: without Ray, the error names the pip command
    with torch_threads(threads), contextlib.ExitStack() as held:
        grid = _plan_grid(config, out_dir=out_dir, overrides=overrides, seeds=seeds, models=models,
                          max_steps=max_steps, device=device, dtype=dtype, task_overrides=task_overrides)
        runs = grid.runs() if shard is None else shard_runs(grid.runs(), shard)
        tracker = _RunProgress(grid.cfg.name, len(runs), grid.task.metric, progress)
        held.callback(tracker.close)  # also when a run fails (closed again, at no cost, below)
        record = None
        if _is_main():
            # One whole run at a time writes into out_dir (a second one is refused: OutputFolderBusy); the shards
            # of a grid share it (each run has a lock of its own).
            held.enter_context(OutputLock(grid.out_dir, shared=shard is not None))
            if shard is None:  # (shards share the folder: one's temporary files may be another's live writes)
                _clear_stale_temporaries(grid.out_dir, progress)
            record = _record_grid(grid, tracker.say)
        if executor == "ray":
            from .ray_executor import run_on_ray

            results = run_on_ray(grid, runs, resume=resume, address=address, retries=retries, threads=threads,
                                 tracker=tracker, cache_controls=cache_controls)
        else:
            task_data = _TaskData(grid, progress=progress, cache_controls=cache_controls)
            results = []
            for seed, row in runs:
                result, reused = _train_run(grid, row, seed, task_data, resume=resume, progress=progress,
                                            threads=threads, say=tracker.say)
                results.append(result)
                tracker.finished(result, reused)
        tracker.close()
        diverged = [{"label": r["label"], "seed": r["seed"]} for r in results if r["diverged"]]
        if not _is_main():
            return {"name": grid.cfg.name, "diverged": [(d["label"], d["seed"]) for d in diverged], "rows": None}
        if shard is not None:
            print(f"{grid.cfg.name}: shard {shard[0]}/{shard[1]} made {len(runs)} of the grid's {len(grid.runs())} "
                  f"runs in {grid.out_dir / 'runs'}; once every shard is done: neuralde-seq report {grid.out_dir}")
            return {"name": grid.cfg.name, "shard": list(shard), "diverged": diverged, "rows": None,
                    "runs": [{"label": r["label"], "seed": r["seed"],
                              "folder": f"runs/{slug(r['label'])}/seed{r['seed']}-{r['fingerprint']}"}
                             for r in results]}
        return _write_grid_report(record, results, grid.out_dir)
