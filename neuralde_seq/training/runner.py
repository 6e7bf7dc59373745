"""The benchmark runner: any registered model on any task (:mod:`neuralde_seq.tasks`) from a YAML config.

``run_benchmark(config, out_dir=...)`` (and ``neuralde-seq bench CONFIG``) trains every model row of the
config with every seed, evaluates each best-validation checkpoint on every test sample (and on the
config's robustness variants of the test set), and writes (each control path is built once per data split
and control options, and shared by the rows and seeds that read it: :class:`ControlCache`)::

    <out_dir>/runs/<row label>/seed<k>/result.json   config, metrics, history, timing, environment
    <out_dir>/runs/<row label>/seed<k>/curves.csv    learning curve, one line per epoch
    <out_dir>/runs/<row label>/seed<k>/best.pt, last.pt   best-validation and resume checkpoints
    <out_dir>/results.json, results.md              mean ± std over seeds beside the paper's number
    <out_dir>/curves.png, summary.png               learning curves; ours vs paper with error bars

The config schema is documented in docs/benchmarks.md. Standard deviations over seeds are *sample*
standard deviations (ddof = 1, Bessel's correction): the papers' "mean and standard deviation over 5
runs" come from Kidger et al.'s results code (``torch.Tensor.std``, unbiased by default), which paper
002's starred numbers are taken from. With a single seed the std is reported as missing.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import inspect
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch

from ..data import DatasetSplits, IrregularDataset
from .results import format_table, write_json, write_table
from .fit import TrainingDiverged
from .objectives import ModelArguments
from .trainer import SELECT_ON, evaluate, train_classifier

__all__ = [
    "ConfigError",
    "ControlCache",
    "STD_DDOF",
    "TRAINING_DEFAULTS",
    "aggregate",
    "apply_overrides",
    "build_model_inputs",
    "fit_and_evaluate",
    "load_config",
    "run_benchmark",
    "validate_config",
]

STD_DDOF = 1
"""Delta degrees of freedom of the std over seeds (sample std, as the papers' results code)."""

TOP_KEYS = ("name", "description", "task", "task_options", "seeds", "training", "solver", "models", "evaluate")
TRAINING_DEFAULTS: dict[str, Any] = {
    "epochs": None, "lr": None, "batch_size": None,  # required
    "eval_batch_size": None,  # None: batch_size
    "patience": None, "grad_clip": None, "weight_decay": 0.0, "penalty_weight": 0.0,
    "select_on": None,  # None: the task's metric
}
ROW_KEYS = ("label", "model", "options", "control", "training", "solver", "paper")
PAPER_KEYS = ("value", "std", "metric", "source", "scale")
EVALUATE_KEYS = ("label", "drop_rate", "subsample")
_DTYPES = {"float32": torch.float32, "float64": torch.float64}
# Default scale at which a paper prints a metric in [0, 1]: accuracy in %, AUROC as a fraction (paper 000;
# paper 002 prints AUC x 100, so its configs set scale: 100).
_DEFAULT_SCALE = {"accuracy": 100.0, "auroc": 1.0}


class ConfigError(ValueError):
    """A benchmark config is invalid; the message names the offending key (e.g. ``models[1].training.lr``)."""


# ----------------------------------------------------------------------------------------------- config
def load_config(config: Mapping | str | os.PathLike) -> dict:
    """A config as a dict: ``config`` itself (deep-copied) or the YAML file it names."""
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config))
    import yaml

    path = Path(config)
    if not path.exists():
        raise FileNotFoundError(f"config file {path} does not exist")
    with open(path) as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a YAML mapping, got {type(data).__name__}")
    return data


def _parse_value(text: str) -> Any:
    import yaml

    value = yaml.safe_load(text) if text.strip() else None
    return _yaml_number(value)


def _yaml_number(value: Any) -> Any:
    # YAML 1.1 (PyYAML) reads "1e-3" (no dot) as a string; every user means the number.
    if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", value.strip()):
        return float(value)
    return value


def apply_overrides(config: Mapping, overrides: Iterable[str]) -> dict:
    """Apply ``key.path=value`` overrides (values parsed as YAML) to a deep copy of ``config``.

    Path components index mappings by key and lists by position, e.g. ``training.epochs=1``,
    ``task_options.drop_rate=0.5``, ``models.0.options.d_model=64``, ``seeds=[0,1]``. Missing mapping keys
    are created (and then checked by :func:`validate_config`).
    """
    out = copy.deepcopy(dict(config))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must have the form key.path=value")
        path, text = item.split("=", 1)
        keys = [k for k in path.strip().split(".")]
        if not path.strip() or any(not k for k in keys):
            raise ConfigError(f"override {item!r} has an empty key")
        node: Any = out
        for depth, key in enumerate(keys):
            last = depth == len(keys) - 1
            where = ".".join(keys[:depth + 1])
            if isinstance(node, list):
                if not re.fullmatch(r"\d+", key) or int(key) >= len(node):
                    raise ConfigError(f"override {item!r}: {where} is not an index of a list of {len(node)}")
                if last:
                    node[int(key)] = _parse_value(text)
                else:
                    node = node[int(key)]
            elif isinstance(node, dict):
                if last:
                    node[key] = _parse_value(text)
                else:
                    if node.get(key) is None:
                        node[key] = {}
                    node = node[key]
            else:
                raise ConfigError(f"override {item!r}: {'.'.join(keys[:depth])} is not a mapping or list")
    return out


def _require_mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(value).__name__} {value!r}")
    return dict(value)


def _check_keys(mapping: Mapping, allowed: Sequence[str], where: str) -> None:
    unknown = [k for k in mapping if k not in allowed]
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(repr(str(k)) for k in unknown)} in {where}; "
                          f"allowed: {', '.join(allowed)}")


def _number(value: Any, where: str, *, positive: bool = False, integer: bool = False, minimum: float | None = None,
            allow_none: bool = False):
    value = _yaml_number(value)
    if value is None and allow_none:
        return None
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or (isinstance(value, float) and not math.isfinite(value)):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where} must be {kind}{' or null' if allow_none else ''}, got {value!r}")
    if positive and not value > 0:
        raise ConfigError(f"{where} must be positive, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{where} must be >= {minimum}, got {value!r}")
    return value


def _check_training(training: dict, where: str) -> dict:
    out = dict(training)
    for key in ("epochs", "batch_size"):
        if out[key] is None:
            raise ConfigError(f"{where}.{key} is required (in `training` or the row's `training`)")
        out[key] = _number(out[key], f"{where}.{key}", positive=True, integer=True)
    if out["lr"] is None:
        raise ConfigError(f"{where}.lr is required (in `training` or the row's `training`)")
    out["lr"] = float(_number(out["lr"], f"{where}.lr", positive=True))
    out["eval_batch_size"] = _number(out["eval_batch_size"], f"{where}.eval_batch_size", positive=True,
                                     integer=True, allow_none=True)
    out["patience"] = _number(out["patience"], f"{where}.patience", positive=True, integer=True, allow_none=True)
    out["grad_clip"] = _number(out["grad_clip"], f"{where}.grad_clip", positive=True, allow_none=True)
    out["weight_decay"] = float(_number(out["weight_decay"], f"{where}.weight_decay", minimum=0.0))
    out["penalty_weight"] = float(_number(out["penalty_weight"], f"{where}.penalty_weight", minimum=0.0))
    if out["select_on"] is not None and out["select_on"] not in SELECT_ON:
        raise ConfigError(f"{where}.select_on must be one of {', '.join(SELECT_ON)}, got {out['select_on']!r}")
    return out


def _check_solver(solver: dict, where: str) -> dict:
    from ..solvers import SolverOptions

    fields = [f.name for f in dataclasses.fields(SolverOptions)]
    _check_keys(solver, fields, where)
    try:
        SolverOptions(**{k: _yaml_number(v) for k, v in solver.items()})
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from err
    return {k: _yaml_number(v) for k, v in solver.items()}


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "row"


def validate_config(config: Mapping) -> dict:
    """Check a config against the schema (docs/benchmarks.md) and return it normalised: defaults filled
    in, each row's ``training`` and ``solver`` merged with the top-level ones (keys ``training`` and
    ``solver`` of each row then hold the effective settings). Raises :class:`ConfigError` naming the bad key.
    """
    from ..models import MODEL_NAMES, model_entry
    from ..tasks import TASK_NAMES, get_task

    if not isinstance(config, Mapping):
        raise ConfigError(f"the config must be a mapping, got {type(config).__name__}")
    cfg = copy.deepcopy(dict(config))
    _check_keys(cfg, TOP_KEYS, "the config")
    for key in ("name", "task", "models"):
        if key not in cfg:
            raise ConfigError(f"the config has no `{key}` (required keys: name, task, training, models)")
    if not isinstance(cfg["name"], str) or not cfg["name"].strip():
        raise ConfigError(f"name must be a non-empty string, got {cfg['name']!r}")
    cfg["description"] = str(cfg.get("description") or "")
    if cfg["task"] not in TASK_NAMES:
        raise ConfigError(f"task {cfg['task']!r} is not a known task; known tasks: {', '.join(TASK_NAMES)}")
    task = get_task(cfg["task"])

    options = _require_mapping(cfg.get("task_options"), "task_options")
    try:
        known_options = task.option_names()
    except ImportError:
        known_options = None  # the loader's module is missing: load_task reports it when the data are needed
    if known_options is not None:
        _check_keys(options, known_options, f"task_options (task {task.name})")
    if "drop_rate" in options:
        rate = _number(options["drop_rate"], "task_options.drop_rate", minimum=0.0)
        if not rate < 1:
            raise ConfigError(f"task_options.drop_rate must lie in [0, 1), got {rate}")
    if "subsample" in options:
        _number(options["subsample"], "task_options.subsample", positive=True, integer=True)
    cfg["task_options"] = options

    seeds = cfg.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(f"seeds must be a non-empty list of integers, got {seeds!r}")
    for i, s in enumerate(seeds):
        _number(s, f"seeds[{i}]", integer=True, minimum=0)
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds contains duplicates: {seeds}")
    cfg["seeds"] = list(seeds)

    training = _require_mapping(cfg.get("training"), "training")
    _check_keys(training, tuple(TRAINING_DEFAULTS), "training")
    solver = _check_solver(_require_mapping(cfg.get("solver"), "solver"), "solver")
    cfg["training"], cfg["solver"] = training, solver

    rows = cfg["models"]
    if not isinstance(rows, list) or not rows:
        raise ConfigError("models must be a non-empty list of model rows")
    labels, slugs, normalised = set(), set(), []
    for i, row in enumerate(rows):
        where = f"models[{i}]"
        row = _require_mapping(row, where)
        _check_keys(row, ROW_KEYS, where)
        if "model" not in row:
            raise ConfigError(f"{where} has no `model`; known models: {', '.join(MODEL_NAMES)}")
        if row["model"] not in MODEL_NAMES:
            raise ConfigError(f"{where}.model {row['model']!r} is not a known model; known models: "
                              f"{', '.join(MODEL_NAMES)}")
        entry = model_entry(row["model"])
        label = str(row.get("label") or row["model"])
        if label in labels or _slug(label) in slugs:
            raise ConfigError(f"{where}.label {label!r} is used by another row (labels name output folders)")
        labels.add(label)
        slugs.add(_slug(label))
        model_options = _require_mapping(row.get("options"), f"{where}.options")
        params = inspect.signature(entry.constructor).parameters
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            allowed = [p for p in params if p not in ("self", "in_channels", "num_classes", "solver")]
            _check_keys(model_options, allowed, f"{where}.options (model {row['model']})")
        if "solver" in model_options:
            raise ConfigError(f"{where}.options.solver: give solver settings in {where}.solver")
        control = _require_mapping(row.get("control"), f"{where}.control")
        if control:
            if entry.inputs != "control":
                raise ConfigError(f"{where}.control: model {row['model']!r} reads raw observations, "
                                  "control options do not apply")
            from ..controls import build_control

            allowed = [p for p in inspect.signature(build_control).parameters
                       if p not in ("times", "values", "lengths")]
            _check_keys(control, allowed, f"{where}.control")
        row_training = _require_mapping(row.get("training"), f"{where}.training")
        _check_keys(row_training, tuple(TRAINING_DEFAULTS), f"{where}.training")
        merged = _check_training({**TRAINING_DEFAULTS, **training, **row_training}, f"{where}.training")
        if merged["select_on"] is None:
            merged["select_on"] = task.metric
        row_solver = _check_solver(_require_mapping(row.get("solver"), f"{where}.solver"), f"{where}.solver")
        if row_solver and not entry.takes_solver:
            raise ConfigError(f"{where}.solver: model {row['model']!r} is not solved by a differential equation "
                              "solver")
        # The top-level solver applies to the models that take one.
        effective_solver = {**solver, **row_solver} if entry.takes_solver else None
        paper = row.get("paper")
        if paper is not None:
            paper = _require_mapping(paper, f"{where}.paper")
            _check_keys(paper, PAPER_KEYS, f"{where}.paper")
            if "value" not in paper:
                raise ConfigError(f"{where}.paper.value is required (the paper's number)")
            paper["value"] = float(_number(paper["value"], f"{where}.paper.value"))
            paper["std"] = _number(paper.get("std"), f"{where}.paper.std", minimum=0.0, allow_none=True)
            paper["metric"] = paper.get("metric", task.metric)
            if paper["metric"] not in _DEFAULT_SCALE:
                raise ConfigError(f"{where}.paper.metric must be one of {', '.join(_DEFAULT_SCALE)}, "
                                  f"got {paper['metric']!r}")
            paper["scale"] = float(_number(paper.get("scale", _DEFAULT_SCALE[paper["metric"]]),
                                           f"{where}.paper.scale", positive=True))
            paper["source"] = str(paper.get("source") or "")
        normalised.append({"label": label, "model": row["model"], "options": model_options, "control": control,
                           "training": merged, "solver": effective_solver, "paper": paper})
    cfg["models"] = normalised

    variants = cfg.get("evaluate") or []
    if not isinstance(variants, list):
        raise ConfigError(f"evaluate must be a list of test-set variants, got {variants!r}")
    seen, out = set(), []
    for i, variant in enumerate(variants):
        where = f"evaluate[{i}]"
        variant = _require_mapping(variant, where)
        _check_keys(variant, EVALUATE_KEYS, where)
        if "drop_rate" not in variant and "subsample" not in variant:
            raise ConfigError(f"{where} needs drop_rate and/or subsample")
        if "drop_rate" in variant:
            rate = _number(variant["drop_rate"], f"{where}.drop_rate", minimum=0.0)
            if not rate < 1:
                raise ConfigError(f"{where}.drop_rate must lie in [0, 1), got {rate}")
            variant["drop_rate"] = float(rate)
        if "subsample" in variant:
            variant["subsample"] = _number(variant["subsample"], f"{where}.subsample", positive=True, integer=True)
        label = str(variant.get("label") or ", ".join(f"{k} {variant[k]}" for k in ("drop_rate", "subsample")
                                                        if k in variant))
        if label in seen or label in ("test", "val"):
            raise ConfigError(f"{where}.label {label!r} is already used")
        seen.add(label)
        out.append({"label": label, "drop_rate": variant.get("drop_rate"), "subsample": variant.get("subsample")})
    cfg["evaluate"] = out
    return cfg


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
    interpolation (e.g. every NCDE and fast weight CDE row of a PhysioNet config). :func:`build_model_inputs`
    given a cache builds each such control once and hands the same :class:`~neuralde_seq.controls.Control`
    to every later run (controls are never modified by training or evaluation).

    The key is the dataset *object* and the effective options of
    :func:`~neuralde_seq.controls.build_control` (the model's registered ones with the row's overrides, and
    build_control's defaults filled in, so that spelling out a default gives the same key). The cache keeps
    a reference to each dataset it holds a control for, so that a later dataset at the same address can
    never be mistaken for it. It lives in memory only; :meth:`clear` drops everything (the runner does so
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
    """The input of model ``name`` for every sample of ``dataset`` (see ``neuralde_seq.models.model_inputs``).

    Static features travel inside :class:`~neuralde_seq.observations.Observations`; a control-path model
    that reads them (``reads_static``) gets ``ModelArguments(control, static)``. With a ``cache``, a
    control already built for this dataset with the same effective options is reused (see
    :class:`ControlCache`); inputs of models reading raw observations are cheap and never cached.
    """
    from ..models import control_options, model_entry, model_inputs

    def build():
        return model_inputs(name, dataset.times, dataset.values, dataset.lengths, static=dataset.static,
                            **dict(control or {}))

    if cache is not None and model_entry(name).inputs == "control":
        # The options model_inputs passes to build_control: the registered ones, overridden by the row's.
        inputs = cache.get(dataset, {**control_options(name), **dict(control or {})}, build)
    else:
        inputs = build()
    if reads_static and model_entry(name).inputs == "control":
        if dataset.static is None:
            raise ValueError(f"model {name!r} reads static features but the dataset has none")
        return ModelArguments(inputs, dataset.static)
    return inputs


def _count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def fit_and_evaluate(
    model_name: str,
    splits: DatasetSplits,
    *,
    seed: int,
    training: Mapping,
    checkpoint_path: str | os.PathLike,
    options: Mapping | None = None,
    control: Mapping | None = None,
    solver: Mapping | None = None,
    tests: Mapping[str, IrregularDataset] | None = None,
    last_checkpoint_path: str | os.PathLike | None = None,
    resume: bool = False,
    max_steps: int | None = None,
    progress: bool = True,
    desc: str | None = None,
    control_cache: ControlCache | None = None,
) -> dict:
    """Train one model on ``splits`` and evaluate its best-validation checkpoint on every test sample.

    The protocol of ``neuralde-seq compare`` and the benchmark runner: build the model's inputs once per
    split (:func:`build_model_inputs`), seed torch with ``seed`` and create the model
    (``create_model(model_name, inputs, num_classes, solver=solver, **options)``), set GRU-D/GRU-Δt's
    empirical means from the training inputs, train with
    :func:`~neuralde_seq.training.train_classifier` (``training`` holds its settings: epochs, lr,
    batch_size, eval_batch_size, patience, grad_clip, weight_decay, penalty_weight, select_on), then
    evaluate on validation, test and each extra test set of ``tests`` (label -> dataset), asserting that
    every sample was scored. A diverged run reports its last good checkpoint and the reason.

    ``splits`` (and ``tests``) must already be on the device and in the dtype to use. With a
    ``control_cache`` (:class:`ControlCache`), controls already built for these very datasets with the same
    options are reused instead of rebuilt.

    Returns a dict: ``model``, ``params``, ``options`` (effective constructor options), ``history``,
    ``diverged`` (None or the message), ``train_seconds``, ``eval_seconds`` and ``metrics``
    (``{"val": ..., "test": ..., <label>: ...}``, each as :func:`~neuralde_seq.training.evaluate` returns).
    """
    from ..models import create_model

    train, val, test = splits
    num_static = 0 if train.static is None else train.static.shape[1]
    model_options = _static_options(dict(options or {}), num_static)
    reads_static = model_options.get("static_channels") is not None
    datasets = {"train": train, "val": val, "test": test, **dict(tests or {})}
    inputs = {split: build_model_inputs(model_name, ds, control, reads_static, cache=control_cache)
              for split, ds in datasets.items()}

    torch.manual_seed(seed)
    model = create_model(model_name, inputs["train"].args[0] if isinstance(inputs["train"], ModelArguments)
                         else inputs["train"], num_classes=train.num_classes, solver=dict(solver) if solver else None,
                         **model_options)
    model = model.to(device=train.values.device, dtype=train.values.dtype)
    if hasattr(model, "set_empirical_mean"):  # GRU-D, GRU-Δt: the training set's mean of each channel
        model.set_empirical_mean(inputs["train"])
    params = _count_parameters(model)
    eval_batch_size = int(training.get("eval_batch_size") or training["batch_size"])
    diverged = None
    t0 = time.perf_counter()
    try:
        history = train_classifier(
            model, inputs["train"], train.labels, inputs["val"], val.labels,
            epochs=int(training["epochs"]), lr=float(training["lr"]), batch_size=int(training["batch_size"]),
            seed=seed, checkpoint_path=checkpoint_path, last_checkpoint_path=last_checkpoint_path, resume=resume,
            weight_decay=float(training.get("weight_decay") or 0.0),
            penalty_weight=float(training.get("penalty_weight") or 0.0), grad_clip=training.get("grad_clip"),
            patience=training.get("patience"), eval_batch_size=eval_batch_size,
            select_on=training.get("select_on") or "accuracy", max_steps=max_steps, progress=progress,
            config={"model": model_name, "model_options": model_options, "control_options": dict(control or {}),
                    "solver": solver, "training": dict(training)},
            desc=desc or model_name,
        )
    except TrainingDiverged as err:
        print(f"[{desc or model_name}] {err}", file=sys.stderr)
        diverged = str(err)
        history = err.history
    train_seconds = time.perf_counter() - t0

    # The model now holds the best-validation (or last good) weights.
    t1 = time.perf_counter()
    metrics = {}
    for split, ds in datasets.items():
        if split == "train":
            continue
        result = evaluate(model, inputs[split], ds.labels, eval_batch_size)
        if result["num_samples"] != len(ds):
            raise RuntimeError(f"evaluation of {split!r} scored {result['num_samples']} of {len(ds)} samples")
        metrics[split] = result
    eval_seconds = time.perf_counter() - t1
    return {"model": model_name, "params": params, "options": model_options, "history": history,
            "diverged": diverged, "train_seconds": train_seconds, "eval_seconds": eval_seconds, "metrics": metrics}


# ------------------------------------------------------------------------------------------ aggregation
def aggregate(values: Sequence[float | None], ddof: int = STD_DDOF) -> dict:
    """``{"values", "n", "mean", "std"}`` of the non-missing values; std with ``ddof`` (None if n <= ddof).

    Missing values (None, e.g. an undefined AUROC) are counted in ``missing`` and excluded.
    """
    present = [float(v) for v in values if v is not None]
    n = len(present)
    mean = sum(present) / n if n else None
    std = math.sqrt(sum((v - mean) ** 2 for v in present) / (n - ddof)) if n > ddof else None
    return {"values": list(values), "n": n, "missing": len(values) - n, "mean": mean, "std": std}


def _environment(device: torch.device, dtype: torch.dtype) -> dict:
    import numpy
    import sklearn

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                                cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
            "numpy": numpy.__version__, "sklearn": sklearn.__version__, "threads": torch.get_num_threads(),
            "device": str(device), "dtype": str(dtype).replace("torch.", ""), "git_commit": commit}


_CURVE_COLUMNS = ("epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "val_auroc", "seconds")


def _write_curves(history: Mapping, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(_CURVE_COLUMNS)
        for i in range(len(history["train_loss"])):
            auroc = history.get("val_auroc", [None] * (i + 1))[i]
            writer.writerow([i + 1, repr(history["train_loss"][i]), repr(history["train_accuracy"][i]),
                             repr(history["val_loss"][i]), repr(history["val_accuracy"][i]),
                             "" if auroc is None else repr(auroc), repr(history["seconds_per_epoch"][i])])


def _format_mean_std(stats: dict, scale: float, digits: int) -> str:
    if stats["mean"] is None:
        return "-"
    text = f"{stats['mean'] * scale:.{digits}f}"
    if stats["std"] is not None:
        text += f" ± {stats['std'] * scale:.{digits}f}"
    return text


def _digits(scale: float) -> int:
    return 2 if scale >= 100 else 4


def _summarise_row(row: dict, results: list[dict], task_metric: str, variants: list[dict]) -> dict:
    paper = row["paper"]
    metric = paper["metric"] if paper else task_metric
    scale = paper["scale"] if paper else _DEFAULT_SCALE[metric]
    splits = ["test", "val"] + [v["label"] for v in variants]
    stats = {split: {m: aggregate([r["metrics"][split][m] for r in results]) for m in ("accuracy", "auroc", "loss")}
             for split in splits}
    spe = [sum(r["history"]["seconds_per_epoch"]) / len(r["history"]["seconds_per_epoch"])
           for r in results if r["history"]["seconds_per_epoch"]]
    ours = stats["test"][metric]
    diff = None
    if paper and ours["mean"] is not None:
        diff = ours["mean"] * scale - paper["value"]
    return {"label": row["label"], "model": row["model"], "seeds": [r["seed"] for r in results], "metric": metric,
            "scale": scale, "metrics": stats, "paper": paper, "difference": diff,
            "params": results[0]["params"] if results else None,
            "seconds_per_epoch": aggregate(spe), "diverged_seeds": [r["seed"] for r in results if r["diverged"]]}


def _metric_name(metric: str, scale: float) -> str:
    name = "accuracy" if metric == "accuracy" else "AUROC"
    if scale == 1:
        return name
    return f"{name} %" if scale == 100 and metric == "accuracy" else f"{name} ×{scale:g}"


def _results_table(summaries: list[dict], variants: list[dict]) -> str:
    rows = []
    for s in summaries:
        metric, scale = s["metric"], s["scale"]
        digits = _digits(scale)
        other = "auroc" if metric == "accuracy" else "accuracy"
        other_scale = _DEFAULT_SCALE[other]
        paper = s["paper"]
        row = {
            "label": s["label"], "model": s["model"], "seeds": len(s["seeds"]),
            "metric": _metric_name(metric, scale),
            "ours": _format_mean_std(s["metrics"]["test"][metric], scale, digits),
            "paper": "-" if not paper else (f"{paper['value']:.{digits}f}" +
                                            (f" ± {paper['std']:.{digits}f}" if paper["std"] is not None else "")),
            "diff": "-" if s["difference"] is None else f"{s['difference']:+.{digits}f}",
            "other": (f"{'AUROC' if other == 'auroc' else 'acc ×100'} "
                      + _format_mean_std(s["metrics"]["test"][other], other_scale, _digits(other_scale))),
            "val": _format_mean_std(s["metrics"]["val"][metric], scale, digits),
        }
        for v in variants:
            row[f"variant:{v['label']}"] = _format_mean_std(s["metrics"][v["label"]][metric], scale, digits)
        row["params"] = s["params"]
        row["spe"] = s["seconds_per_epoch"]["mean"]
        rows.append(row)
    columns = ["label", "model", "seeds", "metric", "ours", "paper", "diff", "other", "val"] + \
        [f"variant:{v['label']}" for v in variants] + ["params", "spe"]
    headers = ["row", "model", "seeds", "metric", "ours (test)", "paper", "ours − paper", "other test metric",
               "ours (val)"] + [f"test: {v['label']}" for v in variants] + ["params", "s/epoch"]
    return format_table(rows, columns, headers=headers, formats={"params": "d", "spe": ".2f"})


# ------------------------------------------------------------------------------------------ the runner
def _parse_dtype(dtype) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def _select_rows(rows: list[dict], models: Sequence[str] | None) -> list[dict]:
    if models is None:
        return rows
    wanted = list(models)
    chosen = [r for r in rows if r["label"] in wanted or r["model"] in wanted]
    missing = [m for m in wanted if not any(m in (r["label"], r["model"]) for r in rows)]
    if missing:
        raise ConfigError(f"--models: {', '.join(missing)} match no row; rows: "
                          + ", ".join(f"{r['label']} ({r['model']})" for r in rows))
    return chosen


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
    threads: int | None = None,
    cache_controls: bool = True,
) -> dict:
    """Run a benchmark config (see the module docstring) and return the aggregated results.

    Arguments:
        config: a config dict or the path of a YAML file (schema in docs/benchmarks.md).
        out_dir: output folder.
        overrides: ``key.path=value`` strings applied before validation (:func:`apply_overrides`).
        task_overrides: extra keyword arguments of the task's loader not stored in the config (e.g.
            ``cache_dir``, ``remotes``, ``offline``); not written to the results.
        models: run only the rows whose label or model name is listed.
        seeds: replace the config's seeds.
        max_steps: stop each run after this many optimizer steps (smoke runs of a config).
        resume: skip runs whose ``result.json`` exists, and resume interrupted runs from their last
            checkpoint.
        progress: tqdm progress bars over runs and epochs.
        device: torch device (default cpu). dtype: "float32" (default) or "float64".
        threads: ``torch.set_num_threads`` for the run.
        cache_controls: build each control once per (data split, control options) and reuse it in every
            row and seed that reads it (:class:`ControlCache`, in memory for this call); False rebuilds
            it for every run (less memory held when rows use many different controls).
    """
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        torch.set_num_threads(threads)
    raw = apply_overrides(load_config(config), overrides)
    if seeds is not None:
        raw["seeds"] = [int(s) for s in seeds]
    cfg = validate_config(raw)
    rows = _select_rows(cfg["models"], models)
    torch_device = torch.device(device if device is not None else "cpu")
    torch_dtype = _parse_dtype(dtype)
    out_dir = Path(out_dir)
    variants = cfg["evaluate"]

    from tqdm import tqdm

    from ..tasks import get_task, load_task
    from .plots import plot_curves, plot_summary

    task = get_task(cfg["task"])
    environment = _environment(torch_device, torch_dtype)
    per_row: dict[str, list[dict]] = {r["label"]: [] for r in rows}
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
                             **cfg["task_options"], **dict(task_overrides or {}))
            splits = DatasetSplits(*(ds.to(device=torch_device) for ds in data.splits))
            tests = {v["label"]: data.test_variant(drop_rate=v["drop_rate"], subsample=v["subsample"]).to(
                device=torch_device) for v in variants}
            data_cache[key] = (data, splits, tests)
        return data_cache[key]

    runs = [(seed, row) for seed in cfg["seeds"] for row in rows]
    run_bar = tqdm(runs, desc=cfg["name"], unit="run", disable=not progress, dynamic_ncols=True)
    for seed, row in run_bar:
        run_dir = out_dir / "runs" / _slug(row["label"]) / f"seed{seed}"
        result_path = run_dir / "result.json"
        run_bar.set_postfix(row=row["label"], seed=seed)
        if resume and result_path.exists():
            per_row[row["label"]].append(json.loads(result_path.read_text()))
            continue
        data, splits, tests = task_data(seed)
        t0 = time.perf_counter()
        fit = fit_and_evaluate(
            row["model"], splits, seed=seed, training=row["training"], options=row["options"],
            control=row["control"], solver=row["solver"], tests=tests, checkpoint_path=run_dir / "best.pt",
            last_checkpoint_path=run_dir / "last.pt", resume=resume, max_steps=max_steps, progress=progress,
            desc=f"{row['label']} seed {seed}", control_cache=control_cache,
        )
        result = {
            "name": cfg["name"], "label": row["label"], "model": row["model"], "seed": seed,
            "config": {"task": cfg["task"], "task_options": cfg["task_options"], "row": row,
                       "max_steps": max_steps},
            "data": data.info(),
            "params": fit["params"], "model_options": fit["options"],
            "metrics": fit["metrics"], "history": fit["history"], "diverged": fit["diverged"],
            "timing": {"train_seconds": fit["train_seconds"], "eval_seconds": fit["eval_seconds"],
                       "total_seconds": time.perf_counter() - t0,
                       "seconds_per_epoch_mean": (sum(fit["history"]["seconds_per_epoch"])
                                                  / max(1, len(fit["history"]["seconds_per_epoch"])))},
            "environment": environment,
        }
        write_json(result, result_path)
        _write_curves(fit["history"], run_dir / "curves.csv")
        per_row[row["label"]].append(result)
    run_bar.close()

    summaries = [_summarise_row(row, sorted(per_row[row["label"]], key=lambda r: r["seed"]), task.metric, variants)
                 for row in rows]
    results = {
        "name": cfg["name"], "description": cfg["description"], "task": cfg["task"],
        "config": cfg, "std_ddof": STD_DDOF, "max_steps": max_steps, "environment": environment,
        "rows": summaries,
    }
    write_json(results, out_dir / "results.json")
    table = _results_table(summaries, variants)
    notes = [
        f"Task {cfg['task']} ({task.description}); task options {cfg['task_options'] or '{}'}; "
        f"seeds {cfg['seeds']}; device {torch_device}, {str(torch_dtype).replace('torch.', '')}.",
        "ours: test metric of each run's best-validation checkpoint, mean ± sample std (ddof = 1) over seeds, "
        "at the paper's scale; ours − paper: difference of the means; s/epoch: training pass only.",
    ]
    if variants:
        notes.append("test: <variant>: the test set with other drop rate / sampling rate (absolute), models "
                     "trained with the task options above.")
    if max_steps is not None:
        notes.append(f"Smoke run: every run stopped after {max_steps} optimizer steps.")
    diverged = [f"{s['label']} (seeds {s['diverged_seeds']})" for s in summaries if s["diverged_seeds"]]
    if diverged:
        notes.append("Diverged, last good checkpoint reported: " + ", ".join(diverged) + ".")
    sources = sorted({s["paper"]["source"] for s in summaries if s["paper"] and s["paper"]["source"]})
    if sources:
        notes.append("Paper numbers: " + "; ".join(sources) + ".")
    write_table(table, out_dir / "results.md", title=cfg["name"] + (f": {cfg['description']}" if cfg["description"]
                                                                    else ""), notes="\n\n".join(notes))
    plot_curves({r["label"]: [res["history"] for res in sorted(per_row[r["label"]], key=lambda x: x["seed"])]
                 for r in rows}, out_dir / "curves.png", title=cfg["name"])
    plot_summary(summaries, out_dir / "summary.png", title=cfg["name"])
    if progress:
        print(table)
        print(f"\nwrote {out_dir / 'results.json'}, {out_dir / 'results.md'}, {out_dir / 'curves.png'}, "
              f"{out_dir / 'summary.png'}")
    return results
