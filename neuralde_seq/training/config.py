"""Benchmark configs: YAML files parsed once into typed settings.

`parse_config` checks a config against the schema (docs/benchmarks.md) and returns a
`BenchmarkConfig`: every row's training settings (`TrainingSettings`) merged with the top-level
ones, its `SolverOptions` built once, its paper number
(`PaperNumber`), and the test-set variants (`TestVariant`). Every error is a
`ConfigError` naming the key path (e.g. ``models[1].training.lr``). `BenchmarkConfig.to_dict`
gives the normalised config as plain data (for results files and fingerprints); `validate_config` is
``parse_config(...).to_dict()``.

Config files and ``--set`` values are read by `neuralde_seq.training.config_files` (`load_config`,
`apply_overrides`, `read_yaml`: at most `MAX_CONFIG_BYTES` bytes of UTF-8 and `MAX_CONFIG_NODES` YAML values with
every alias expanded; all importable from here too). Names that become folders are checked: the config's ``name``
is one folder name (`check_config_name`), a row's label has a letter or digit and `slug` turns it into one folder
name; evaluate labels cannot be a split's (train, val, test).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..data.transforms.sampling import check_augmentation
from ..input_checks import did_you_mean
from ..solvers import OPTION_NAMES, SolverOptions, parse_solver
from .config_files import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_NODES,
    ConfigError,
    apply_overrides,
    load_config,
    read_yaml,
)
from .spec import TrainingSpec, check_positive_int, read_number, show_value, yaml_number

__all__ = [
    "ConfigError",
    "TrainingSettings",
    "PaperNumber",
    "ModelRow",
    "TestVariant",
    "BenchmarkConfig",
    "TRAINING_DEFAULTS",
    "SELECT_ON",
    "REFERENCE_FIT_ON",
    "load_config",
    "apply_overrides",
    "parse_config",
    "validate_config",
    "fingerprint",
    "slug",
    "check_config_name",
    "read_yaml",
    "RESERVED_VARIANT_LABELS",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_NODES",
]

SELECT_ON = ("accuracy", "auroc", "loss")
TOP_KEYS = ("name", "description", "task", "task_options", "seeds", "training", "solver", "models", "evaluate")
TRAINING_DEFAULTS: dict[str, Any] = {
    "epochs": None,
    "lr": None,
    "batch_size": None,  # required
    "eval_batch_size": None,  # None: batch_size
    "patience": None,
    "grad_clip": None,
    "weight_decay": 0.0,
    "penalty_weight": 0.0,
    "schedule": "constant",  # the learning rate over the run (fit's `schedule`)
    "select_on": None,  # None: the task's metric
    # augmentation of every training batch (`neuralde_seq.data.random_crop_and_drop`): off by default
    "augment_drop_rate": 0.0,
    "augment_crop": 1.0,
    "ensemble": 1,  # models trained per run (other seeds), their mean class probabilities evaluated
}
ROW_KEYS = ("label", "model", "options", "control", "training", "solver", "paper")
PAPER_KEYS = ("value", "std", "metric", "source", "scale")
EVALUATE_KEYS = ("label", "drop_rate", "subsample", "time_warp", "model")
# What an evaluate variant may change in the trained model (`TestVariant.model_change`).
MODEL_CHANGE_KEYS = ("num_bases", "depth_steps")
# The splits a run is scored on, under these names: an evaluate variant of the same name would replace one.
RESERVED_VARIANT_LABELS = ("train", "val", "test")
# Default scale at which a paper prints a metric in [0, 1]: accuracy in %, AUROC as a fraction (paper 000;
# paper 002 prints AUC x 100, so its configs set scale: 100).
DEFAULT_SCALE = {"accuracy": 100.0, "auroc": 1.0}


_show = show_value  # a bounded repr of a value for an error message (spec.show_value)
_yaml_number = yaml_number  # YAML 1.1 (PyYAML) reads "1e-3" (no dot) as a string; every user means the number


@dataclasses.dataclass(frozen=True)
class TrainingSettings(TrainingSpec):
    """How one row is trained: a `TrainingSpec` read from the config's ``training:`` keys (`TRAINING_DEFAULTS`; the
    seed, ``max_steps`` and threads are each run's, set by `TrainingSettings.spec`), and what the runner reads
    besides: the checkpoint selection (``select_on``: None is the task's metric; ``patience``, `train_classifier`'s),
    the augmentation of every training batch (``augment_drop_rate``, ``augment_crop``:
    `neuralde_seq.training.augmentation.AugmentedInputs`) and the ensemble size (``ensemble``).

    Arguments:
        epochs, lr, batch_size, seed, weight_decay, grad_clip, penalty_weight, schedule, eval_every,
            eval_batch_size, max_steps, threads: `TrainingSpec`'s.
        select_on: the validation metric the best checkpoint (and early stopping) is chosen on, one of `SELECT_ON`,
            or None (the task's metric).
        patience: stop after this many epochs without improvement, or None.
        augment_drop_rate: probability of dropping each observed point of a training sample, in [0, 1).
        augment_crop: the smallest fraction of a training sample's points its random crop keeps, in (0, 1].
        ensemble: models trained per run (other seeds), their mean class probabilities evaluated.

    Raises:
        ValueError: a field out of range, naming it.
    """

    select_on: str | None = None
    patience: int | None = None
    augment_drop_rate: float = 0.0
    augment_crop: float = 1.0
    ensemble: int = 1

    MAPPING_KEYS = tuple(TRAINING_DEFAULTS)
    READERS = {
        **TrainingSpec.READERS,
        "patience": {"positive": True, "integer": True, "allow_none": True},
        "select_on": {"choices": SELECT_ON, "allow_none": True},
        "augment_drop_rate": {},
        "augment_crop": {},  # checked together in __post_init__
        "ensemble": {"positive": True, "integer": True},
    }

    def __post_init__(self):
        super().__post_init__()
        check_positive_int(self.patience, "patience", allow_none=True)
        if self.select_on is not None and self.select_on not in SELECT_ON:
            raise ValueError(f"select_on must be one of {', '.join(SELECT_ON)}, got {self.select_on!r}")
        try:
            check_augmentation(self.augment_drop_rate, self.augment_crop)
        except ValueError as err:
            raise ValueError(f"augment_{err}") from err
        check_positive_int(self.ensemble, "ensemble")

    def spec(self, **changes) -> TrainingSpec:
        """The `TrainingSpec` `fit` is given for this row, with ``changes`` (a run's ``seed``, ``max_steps``,
        ``threads``)."""
        return TrainingSpec(**{name: getattr(self, name) for name in TrainingSpec.field_names()}).replace(**changes)


def _training_dict(training: TrainingSettings) -> dict:
    """The settings as plain data (the config's keys, every one)."""
    return {key: getattr(training, key) for key in TRAINING_DEFAULTS}


@dataclasses.dataclass(frozen=True)
class PaperNumber:
    """The number a paper reports for a row: ``value`` (± ``std``) of ``metric`` printed at ``scale``."""

    value: float
    metric: str
    scale: float
    std: float | None = None
    source: str = ""


@dataclasses.dataclass(frozen=True)
class TestVariant:
    """A robustness variant of the test set (other drop rate and/or sampling rate, and/or warped times), and/or
    of the trained model (a change made after training, without retraining).

    Attributes:
        label: the variant's name (a results column).
        drop_rate: fraction of the original test observations dropped, or None (the training-time rate).
        subsample: keep every k-th time point, or None (the training-time factor).
        time_warp: a `neuralde_seq.data.transforms.time_warps.TimeWarp` of the test set's times, or None (no warp).
        model_change: None, or what to change in the trained model before evaluating it: ``num_bases: n``
            (every basis-expanded part projected onto n functions of its basis, `neuralde_seq.basis.project_module`:
            compression or refinement) and/or ``depth_steps: n`` (the solver steps of a continuous-depth model).
    """

    label: str
    drop_rate: float | None = None
    subsample: int | None = None
    time_warp: Any = None
    model_change: dict | None = None

    def to_dict(self) -> dict:
        """The variant as plain data (``time_warp`` and ``model`` only when set)."""
        out: dict[str, Any] = {"label": self.label, "drop_rate": self.drop_rate, "subsample": self.subsample}
        if self.time_warp is not None:
            out["time_warp"] = self.time_warp.to_dict()
        if self.model_change is not None:
            out["model"] = dict(self.model_change)
        return out


@dataclasses.dataclass(frozen=True)
class ModelRow:
    """One model row: registry name, constructor options, control options, training and solver settings.

    A *reference row* (``reference`` True) names a closed-form method of `neuralde_seq.reference.REFERENCE_METHODS`
    (e.g. ``minirocket``) instead of a registry model: ``options`` are its estimator's constructor arguments
    (and ``fit_on``: ``"train+val"``, the default, or ``"train"``), ``training`` is None and ``control`` empty.
    """

    label: str
    model: str
    options: dict
    control: dict
    training: TrainingSettings | None
    solver: SolverOptions | None
    solver_fields: dict  # the solver settings as given (for results files), None-free
    paper: PaperNumber | None = None
    reference: bool = False

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "label": self.label,
            "model": self.model,
            "options": copy.deepcopy(self.options),
            "control": copy.deepcopy(self.control),
            "training": None if self.training is None else _training_dict(self.training),
            "solver": None if self.solver is None else dict(self.solver_fields),
            "paper": None if self.paper is None else dataclasses.asdict(self.paper),
            "reference": self.reference,
        }
        return out


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig:
    """A parsed benchmark config (see `parse_config`)."""

    name: str
    description: str
    task: str
    task_options: dict
    seeds: tuple[int, ...]
    rows: tuple[ModelRow, ...]
    variants: tuple[TestVariant, ...]
    training: dict  # the top-level settings as given (rows hold the effective ones)
    solver: dict

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "task": self.task,
            "task_options": copy.deepcopy(self.task_options),
            "seeds": list(self.seeds),
            "training": dict(self.training),
            "solver": dict(self.solver),
            "models": [row.to_dict() for row in self.rows],
            "evaluate": [v.to_dict() for v in self.variants],
        }


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-able parts (dict keys sorted): names run folders by their settings."""
    text = json.dumps(parts, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _require_mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(value).__name__} {_show(value)}")
    return dict(value)


def _check_keys(mapping: Mapping, allowed: Sequence[str], where: str) -> None:
    unknown = [k for k in mapping if k not in allowed]
    if unknown:
        # the closest allowed key of each unknown one (a misspelt `optoins:` or `epoch:`), then every allowed key
        hints = [
            f"{str(k)!r}: {hint}" if len(unknown) > 1 else hint
            for k in unknown
            for hint in [did_you_mean(str(k), allowed)]
            if hint
        ]
        raise ConfigError(
            f"unknown key(s) {', '.join(repr(str(k)) for k in unknown)} in {where}; "
            + "".join(f"{hint} " for hint in hints)
            + f"allowed: {', '.join(allowed)}"
        )


def _number(
    value: Any,
    where: str,
    *,
    positive: bool = False,
    integer: bool = False,
    minimum: float | None = None,
    allow_none: bool = False,
):
    """`read_number`'s checked number, its error a `ConfigError`."""
    try:
        return read_number(value, where, positive=positive, integer=integer, minimum=minimum, allow_none=allow_none)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _parse_training(training: Mapping, where: str, task_metric: str) -> TrainingSettings:
    """A row's `TrainingSettings` from its merged ``training`` keys (`TrainingSpec.from_mapping`); ``select_on``
    None is the task's metric."""
    try:
        settings = TrainingSettings.from_mapping(
            training, where, missing_hint=" (in `training` or the row's `training`)"
        )
    except ValueError as err:
        raise ConfigError(str(err)) from err
    return settings if settings.select_on is not None else settings.replace(select_on=task_metric)


def _check_solver(solver: dict, where: str) -> tuple[SolverOptions, dict]:
    _check_keys(solver, OPTION_NAMES, where)
    given = {k: _yaml_number(v) for k, v in solver.items()}
    try:
        options = parse_solver(given)  # the one reader of solver spellings (create_model, estimators, CLI)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from err
    assert options is not None  # None only for None
    return options, given


def slug(label: str) -> str:
    """A row label as a folder name: one path component, never ``.``, ``..``, empty or hidden.

    Runs of characters other than ASCII letters, digits, ``.``, ``_`` and ``-`` become ``_``; leading dots and
    underscores and trailing underscores are dropped (so ``..`` cannot name the parent folder); "row" if nothing
    is left. Labels of letters, digits, inner dots and dashes are kept as they are (their folders stay put).
    """
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", str(label)).lstrip("._").rstrip("_")
    return text or "row"


# Characters a config name may not hold: it names the default output folder results/<name>, one path component.
_UNSAFE_NAME = re.compile(r"[/\\:\x00-\x1f\x7f]")


def check_config_name(name: Any) -> str:
    """``name`` if it is a safe config name, one path component (the default output folder is
    ``results/<name>``): a non-empty string without ``/``, ``\\``, ``:`` or control characters, not starting
    with a dot (so not ``.`` or ``..``), at most 200 characters. Raises `ConfigError` naming ``name``."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"name must be a non-empty string, got {_show(name)}")
    bad = _UNSAFE_NAME.search(name)
    if bad or name.startswith(".") or len(name) > 200:
        why = (
            f"holds {bad.group()!r}"
            if bad
            else "starts with a dot"
            if name.startswith(".")
            else f"has {len(name)} characters (at most 200)"
        )
        raise ConfigError(
            f"name {_show(name)} {why}: the name is one folder name (the default output folder is "
            "results/<name>); use letters, digits, '-', '_' and '.'"
        )
    return name


def _parse_paper(paper: Any, where: str, task_metric: str) -> PaperNumber | None:
    if paper is None:
        return None
    paper = _require_mapping(paper, where)
    _check_keys(paper, PAPER_KEYS, where)
    if "value" not in paper:
        raise ConfigError(f"{where}.value is required (the paper's number)")
    metric = paper.get("metric", task_metric)
    if metric not in DEFAULT_SCALE:
        raise ConfigError(f"{where}.metric must be one of {', '.join(DEFAULT_SCALE)}, got {_show(metric)}")
    return PaperNumber(
        value=float(_number(paper["value"], f"{where}.value")),
        metric=metric,
        scale=float(_number(paper.get("scale", DEFAULT_SCALE[metric]), f"{where}.scale", positive=True)),
        std=_number(paper.get("std"), f"{where}.std", minimum=0.0, allow_none=True),
        source=str(paper.get("source") or ""),
    )


def _parse_variants(variants: Any) -> tuple[TestVariant, ...]:
    from ..data.transforms.time_warps import TimeWarp

    variants = variants or []
    if not isinstance(variants, list):
        raise ConfigError(f"evaluate must be a list of test-set variants, got {_show(variants)}")
    seen, out = set(), []
    for i, variant in enumerate(variants):
        where = f"evaluate[{i}]"
        variant = _require_mapping(variant, where)
        _check_keys(variant, EVALUATE_KEYS, where)
        if variant.get("label") is not None and not _is_label(variant["label"]):
            raise ConfigError(f"{where}.label must be a string, got {_show(variant['label'])}")
        if not any(key in variant for key in ("drop_rate", "subsample", "time_warp", "model")):
            raise ConfigError(f"{where} needs drop_rate, subsample, time_warp and/or model")
        rate = subsample = warp = change = None
        if "model" in variant:
            change = _require_mapping(variant["model"], f"{where}.model")
            _check_keys(change, MODEL_CHANGE_KEYS, f"{where}.model")
            if not change:
                raise ConfigError(f"{where}.model needs {' and/or '.join(MODEL_CHANGE_KEYS)}")
            change = {
                key: _number(value, f"{where}.model.{key}", positive=True, integer=True)
                for key, value in change.items()
            }
        if "drop_rate" in variant:
            rate = float(_number(variant["drop_rate"], f"{where}.drop_rate", minimum=0.0))
            if not rate < 1:
                raise ConfigError(f"{where}.drop_rate must lie in [0, 1), got {rate}")
        if "subsample" in variant:
            subsample = _number(variant["subsample"], f"{where}.subsample", positive=True, integer=True)
        if "time_warp" in variant:
            spec = variant["time_warp"]
            if isinstance(spec, Mapping):  # "1e-3"-style numbers written by YAML 1.1 as strings
                spec = {key: _yaml_number(value) for key, value in spec.items()}
            try:
                warp = TimeWarp.from_dict(spec, f"{where}.time_warp")
            except ValueError as err:
                raise ConfigError(str(err)) from err
        parts = [f"{k} {variant[k]}" for k in ("drop_rate", "subsample") if k in variant]
        if warp is not None:
            parts.append(warp.label())
        if change is not None:
            parts += [f"{k} {v}" for k, v in change.items()]
        label = str(variant.get("label") or ", ".join(parts))
        if label in RESERVED_VARIANT_LABELS:
            # Variants are scored beside the splits, under their labels: "train" would replace the training split.
            raise ConfigError(
                f"{where}.label {label!r} is reserved (the splits {', '.join(RESERVED_VARIANT_LABELS)} "
                "are reported under these names); choose another label"
            )
        if label in seen:
            raise ConfigError(f"{where}.label {label!r} is already used by another variant")
        seen.add(label)
        out.append(TestVariant(label, rate, subsample, warp, change))
    return tuple(out)


def _is_label(value: Any) -> bool:
    """A label as YAML may write it: a string or an integer (``label: 2024``), not a bool or a collection."""
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _check_warps_fit_rows(variants: Sequence[TestVariant], rows: Sequence[ModelRow]) -> None:
    """A per-sample random warp gives every test sample its own times; a control parametrised by time needs one
    grid for a whole batch (`neuralde_seq.build_control`), so that pairing is refused before anything runs."""
    from ..models import check_control_overrides, model_entry

    for i, variant in enumerate(variants):
        warp = variant.time_warp
        if warp is None or warp.kind == "uniform" or not warp.per_sample:
            continue
        for j, row in enumerate(rows):
            if row.reference or model_entry(row.model).inputs != "control":  # a reference row: any times
                continue
            control = check_control_overrides(row.model, row.control)
            if control.interpolation.windows or control.parametrization != "time":
                continue  # windows / observation index: every sample may have its own times
            raise ConfigError(
                f"evaluate[{i}].time_warp: a per-sample {warp.kind} warp gives every test sample its own times, but "
                f"models[{j}] ({row.label}, model {row.model}) reads a control parametrised by time, which needs "
                f"one time grid for all samples; set evaluate[{i}].time_warp.per_sample: false (one warp of the "
                f"common time axis) or give the row control: {{parametrization: index}}"
            )


# How a reference row is fitted: on the training and validation splits together (the default: a closed-form
# method selects nothing on validation data), or on the training split alone (then scored on validation too).
REFERENCE_FIT_ON = ("train+val", "train")


def _parse_reference_row(row: dict, where: str, label: str, task_metric: str) -> ModelRow:
    """A reference row (a closed-form method of `neuralde_seq.reference`): options checked against its
    estimator's constructor; training, control and solver settings refused (they do not apply)."""
    from ..reference import reference_method

    reference = reference_method(row["model"])
    for key in ("training", "control", "solver"):
        if key in row:
            raise ConfigError(
                f"{where}.{key}: {row['model']!r} is a reference method (fitted in closed form, "
                f"neuralde_seq.reference), {key} settings do not apply to it"
            )
    options = _require_mapping(row.get("options"), f"{where}.options")
    _check_keys(
        options, (*reference.option_names(), "fit_on", "ensemble"), f"{where}.options (reference method {row['model']})"
    )
    if options.get("fit_on", REFERENCE_FIT_ON[0]) not in REFERENCE_FIT_ON:
        raise ConfigError(
            f"{where}.options.fit_on must be one of {', '.join(REFERENCE_FIT_ON)}, got {_show(options['fit_on'])}"
        )
    options = {key: _yaml_number(value) for key, value in options.items()}
    if "ensemble" in options:  # estimators fitted with other seeds, their decision functions averaged
        options["ensemble"] = _number(options["ensemble"], f"{where}.options.ensemble", positive=True, integer=True)
    return ModelRow(
        label=label,
        model=row["model"],
        options=options,
        control={},
        training=None,
        solver=None,
        solver_fields={},
        paper=_parse_paper(row.get("paper"), f"{where}.paper", task_metric),
        reference=True,
    )


def parse_config(config: Mapping) -> BenchmarkConfig:
    """Check a config against the schema (docs/benchmarks.md) and return it as a `BenchmarkConfig`:
    defaults filled in, each row's ``training`` and ``solver`` merged with the top-level ones. Raises
    `ConfigError` naming the bad key path."""
    from ..data.protocols import TASK_NAMES, get_task
    from ..models import MODEL_NAMES, check_control_overrides, model_entry, model_option_names

    if not isinstance(config, Mapping):
        raise ConfigError(f"the config must be a mapping, got {type(config).__name__}")
    cfg = copy.deepcopy(dict(config))
    _check_keys(cfg, TOP_KEYS, "the config")
    for key in ("name", "task", "models"):
        if key not in cfg:
            raise ConfigError(f"the config has no `{key}` (required keys: name, task, training, models)")
    check_config_name(cfg["name"])
    if cfg.get("description") is not None and not isinstance(cfg["description"], str):
        raise ConfigError(
            f"description must be a string, got {type(cfg['description']).__name__} {_show(cfg['description'])}"
        )
    if cfg["task"] not in TASK_NAMES:
        hint = did_you_mean(str(cfg["task"]), TASK_NAMES)
        raise ConfigError(
            f"task {_show(cfg['task'])} is not a known task; {hint + ' ' if hint else ''}known tasks: "
            f"{', '.join(TASK_NAMES)}"
        )
    task = get_task(cfg["task"])

    options = _require_mapping(cfg.get("task_options"), "task_options")
    try:
        known_options = task.option_names()
    except ImportError:
        known_options = None  # the loader's module is missing: load_task reports it when the data are needed
    if known_options is not None:
        _check_keys(options, known_options, f"task_options (task {task.name})")
    if task.check_options is not None:  # options that only work together (the files task's train/test or path)
        try:
            task.check_options(options)
        except ValueError as err:
            raise ConfigError(f"task_options (task {task.name}): {err}") from err
    if "drop_rate" in options:
        rate = _number(options["drop_rate"], "task_options.drop_rate", minimum=0.0)
        if not rate < 1:
            raise ConfigError(f"task_options.drop_rate must lie in [0, 1), got {rate}")
    if "subsample" in options:
        _number(options["subsample"], "task_options.subsample", positive=True, integer=True)

    seeds = cfg.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(f"seeds must be a non-empty list of integers, got {_show(seeds)}")
    for i, s in enumerate(seeds):
        _number(s, f"seeds[{i}]", integer=True, minimum=0)
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds contains duplicates: {_show(seeds)}")

    training = _require_mapping(cfg.get("training"), "training")
    _check_keys(training, tuple(TRAINING_DEFAULTS), "training")
    solver_given = _require_mapping(cfg.get("solver"), "solver")
    _, solver_given = _check_solver(solver_given, "solver")

    rows = cfg["models"]
    if not isinstance(rows, list) or not rows:
        raise ConfigError("models must be a non-empty list of model rows")
    labels, slugs, parsed = set(), set(), []
    for i, row in enumerate(rows):
        where = f"models[{i}]"
        row = _require_mapping(row, where)
        _check_keys(row, ROW_KEYS, where)
        if "model" not in row:
            raise ConfigError(f"{where} has no `model`; known models: {', '.join(MODEL_NAMES)}")
        reference = False
        if not isinstance(row["model"], str):
            raise ConfigError(f"{where}.model must be a model name (a string), got {_show(row['model'])}")
        if row["model"] not in MODEL_NAMES:
            from ..reference import REFERENCE_METHODS

            if row["model"] not in REFERENCE_METHODS:
                hint = did_you_mean(row["model"], [*MODEL_NAMES, *REFERENCE_METHODS])
                raise ConfigError(
                    f"{where}.model {_show(row['model'])} is not a known model; "
                    f"{hint + ' ' if hint else ''}known models: "
                    f"{', '.join(MODEL_NAMES)}; reference methods: {', '.join(REFERENCE_METHODS)}"
                )
            reference = True
        if row.get("label") is not None and not _is_label(row["label"]):
            raise ConfigError(f"{where}.label must be a string, got {_show(row['label'])}")
        label = str(row.get("label") or row["model"])
        if not re.search(r"[A-Za-z0-9]", label):
            # The label names the row's output folder (runs/<label>): '..' or '/' would name no folder of its own.
            raise ConfigError(
                f"{where}.label {label!r} has no letter or digit; a row label names the row's output "
                "folder (runs/<label>)"
            )
        # Folders differing only in case are one folder on macOS and Windows.
        if label in labels or slug(label).lower() in slugs:
            raise ConfigError(f"{where}.label {label!r} is used by another row (labels name output folders)")
        labels.add(label)
        slugs.add(slug(label).lower())
        if reference:
            parsed.append(_parse_reference_row(row, where, label, task.metric))
            continue
        entry = model_entry(row["model"])
        model_options = _require_mapping(row.get("options"), f"{where}.options")
        if "solver" in model_options:
            raise ConfigError(f"{where}.options.solver: give solver settings in {where}.solver")
        allowed = model_option_names(row["model"])  # every constructor option (fast weight layers' too)
        if allowed is not None:
            _check_keys(model_options, [p for p in allowed if p != "solver"], f"{where}.options (model {row['model']})")
        control = _require_mapping(row.get("control"), f"{where}.control")
        if control:
            if entry.inputs != "control" and set(control) - {"time_unit"}:
                raise ConfigError(
                    f"{where}.control: model {row['model']!r} reads raw observations, "
                    "control options other than time_unit do not apply"
                )
            try:  # read as the run will read it (the row keeps its spelling: its fingerprint hashes the row as written)
                check_control_overrides(row["model"], control)
            except ValueError as error:  # UnknownOptionError too
                raise ConfigError(f"{where}.control: {error}") from None
        row_training = _require_mapping(row.get("training"), f"{where}.training")
        row_settings = _parse_training({**training, **row_training}, f"{where}.training", task.metric)
        row_solver = _require_mapping(row.get("solver"), f"{where}.solver")
        if row_solver and not entry.takes_solver:
            raise ConfigError(f"{where}.solver: model {row['model']!r} is not solved by a differential equation solver")
        solver: SolverOptions | None = None
        fields: dict[str, Any] = {}
        if entry.takes_solver:  # the top-level solver applies to the models that take one
            solver, fields = _check_solver({**solver_given, **row_solver}, f"{where}.solver")
        parsed.append(
            ModelRow(
                label=label,
                model=row["model"],
                options=model_options,
                control=control,
                training=row_settings,
                solver=solver,
                solver_fields=fields,
                paper=_parse_paper(row.get("paper"), f"{where}.paper", task.metric),
            )
        )
    variants = _parse_variants(cfg.get("evaluate"))
    _check_warps_fit_rows(variants, parsed)
    return BenchmarkConfig(
        name=cfg["name"],
        description=str(cfg.get("description") or ""),
        task=cfg["task"],
        task_options=options,
        seeds=tuple(seeds),
        rows=tuple(parsed),
        variants=variants,
        training=training,
        solver=solver_given,
    )


def validate_config(config: Mapping) -> dict:
    """`parse_config` as plain data: the normalised config (``models`` holds each row's effective
    ``training`` and ``solver``)."""
    return parse_config(config).to_dict()
