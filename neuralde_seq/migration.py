"""Files of older format versions brought up to date: the one place that reads what an older neuralde_seq wrote.

Every file neuralde_seq writes for later reading carries ``"format_version"`` (`neuralde_seq.file_format`), and
every reader refuses another version, naming this step. `migrate_path` (``neuralde-seq migrate PATH``) finds the
files under PATH and rewrites each older one in the current format, in place and atomically:

What changes from version 1 (unversioned, up to commit 539f159) to version 2:

- a run's ``result.json``: its settings with every setting recorded (the training settings once left out at their
  defaults, ``reference``, ``model_changes``), so its fingerprint, and with it the run folder's name, is computed
  anew; the registry's default solver stored as ``SolverOptions.to_dict`` instead of its ``repr``; the input spec's
  control as ``ControlOptions.to_dict`` and its unset fields written; the registry defaults of a run made before
  they were recorded taken as today's (as version 1 read them);
- ``grid.json``: its rows and its runs' settings as above;
- ``results.json``: its config's rows as above;
- checkpoints (``.pt``): the run's settings, solver, registry defaults and input spec as in ``result.json``;
- tensor caches: the key hashed with the format version, the file renamed to the name its key gives.

A run folder whose fingerprint changes is renamed (``seed<k>-<fingerprint>``), so that ``--resume`` finds it. Files
of the current version are left alone; a file this module cannot read (another program's JSON, a damaged file) is
named and left alone.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from .file_format import FORMAT_KEY, FORMAT_VERSION, format_version_of

__all__ = [
    "migrate_path",
    "migrate_result",
    "migrate_grid_record",
    "migrate_results_file",
    "migrate_checkpoint",
    "migrate_tensor_cache",
    "Migrated",
    "MigrationError",
]

# Version 1 left these training settings out of a run's settings at their defaults (its fingerprint rule).
_V1_OMITTED_TRAINING = {"schedule": "constant", "augment_drop_rate": 0.0, "augment_crop": 1.0, "ensemble": 1}
# The keys of a run's settings (`neuralde_seq.training.grid._Grid.settings`): what its fingerprint hashes.
_SETTINGS_KEYS = ("row", "task", "task_options", "seed", "dtype", "max_steps", "variants", "data", "model_changes")
_JSON_FILES = ("result.json", "results.json", "grid.json")


class MigrationError(ValueError):
    """A file (named) that claims an older format but holds a value the migration cannot read."""


@dataclasses.dataclass(frozen=True)
class Migrated:
    """One file (or run folder) `migrate_path` changed: ``path`` as it was, ``to`` where it is now (the same path
    unless renamed) and ``what`` it is."""

    path: Path
    to: Path
    what: str


# ------------------------------------------------------------------------------------------------ the pieces
def _as_json(value: Any) -> Any:
    from .training.results import to_jsonable

    return json.loads(json.dumps(to_jsonable(value)))


def _solver_from_repr(text: str) -> dict:
    """``repr(SolverOptions(...))`` as version 1 recorded it, in either of its spellings: the method and gradient
    objects (``SolverOptions(method=RK4(step_size=0.5), gradient=Checkpoint(every=None))``) or the flat record of
    the options by name (``SolverOptions(method='rk4', step_size=0.5, ...)``), as the options' mapping."""
    from . import solvers

    classes = {
        name: getattr(solvers, name)
        for name in solvers.__all__
        if isinstance(getattr(solvers, name), type) and issubclass(getattr(solvers, name), solvers.Choice)
    }

    def stored(node: ast.expr) -> Any:
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in classes) or node.args:
                raise ValueError(f"not a solver choice: {ast.unparse(node)}")
            return {"type": node.func.id, **{keyword.arg: stored(keyword.value) for keyword in node.keywords}}
        return ast.literal_eval(node)

    call = ast.parse(text, mode="eval").body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "SolverOptions"):
        raise ValueError("not a SolverOptions repr")
    fields = {keyword.arg: stored(keyword.value) for keyword in call.keywords}
    if all(isinstance(fields.get(k), dict) for k in ("method", "gradient")):
        return fields
    return {key: value for key, value in fields.items() if value is not None}  # the flat record: options by name


def _solver(value: Any, where: str) -> Any:
    """A recorded solver in the stored form of `SolverOptions.to_dict` (None stays None)."""
    from .solvers import parse_solver

    if value is None:
        return None
    try:
        options = parse_solver(_solver_from_repr(value) if isinstance(value, str) else value, argument=where)
        assert options is not None  # (value is not None)
        return _as_json(options.to_dict())
    except (SyntaxError, ValueError, TypeError) as error:
        raise MigrationError(f"{where}: cannot read the recorded solver {value!r}: {error}") from None


def _row(row: Any) -> Any:
    """A config row (`ModelRow.to_dict`) with every setting written."""
    if not isinstance(row, dict):
        return row
    out = dict(row)
    if isinstance(out.get("training"), dict):
        out["training"] = {
            **out["training"],
            **{k: v for k, v in _V1_OMITTED_TRAINING.items() if k not in out["training"]},
        }
    out.setdefault("reference", False)
    return out


def _settings(settings: Mapping) -> dict:
    """A run's settings (what its fingerprint hashes, and the other keys beside them) with every setting written."""
    out = dict(settings)
    out["row"] = _row(out.get("row"))
    out.setdefault("model_changes", {})
    return out


def _renamed_path(value: Any, old_folder: str, new_folder: str) -> Any:
    """A recorded file path inside the run folder ``old_folder``, now inside ``new_folder`` (other values as given)."""
    if not isinstance(value, str) or Path(value).parent.name != old_folder:
        return value
    return str(Path(value).parent.with_name(new_folder) / Path(value).name)


def _fingerprint(settings: Mapping) -> str:
    from .training.config import fingerprint

    return fingerprint({key: settings[key] for key in _SETTINGS_KEYS if key in settings})


def _defaults(model: str, reference: bool) -> tuple[dict, dict]:
    """Today's registry defaults of ``model``: what version 1 took a run made before they were recorded to be
    made under (its control defaults without ``window_start_values``, which no entry set then)."""
    from .training.run_folders import _registry_defaults

    defaults, controls = _registry_defaults([(model, reference)])
    return defaults[model], {k: v for k, v in controls[model].items() if k != "window_start_values"}


def _recorded_defaults(record: dict, model: Any, reference: bool, where: str) -> None:
    """Fill in and convert ``record``'s ``model_defaults`` and ``control_defaults`` (in place)."""
    if not isinstance(model, str):
        raise MigrationError(f"{where}: the run records no model name, got {model!r}")
    if "model_defaults" not in record or "control_defaults" not in record:
        defaults, controls = _defaults(model, reference)
        record.setdefault("model_defaults", defaults)
        record.setdefault("control_defaults", controls)
    if isinstance(record["model_defaults"], dict) and "solver" in record["model_defaults"]:
        record["model_defaults"] = {
            **record["model_defaults"],
            "solver": _solver(record["model_defaults"]["solver"], f"{where}: model_defaults"),
        }


def _input_spec(spec: Any, model: Any, where: str) -> Any:
    """An input spec as `InputSpec.to_dict` writes it now (checked by reading it back)."""
    from .models import check_control_overrides, model_entry
    from .training.input_spec import InputSpec

    if not isinstance(spec, dict):
        return spec
    out = {**{name: None for name in ("fill_step", "static_mean", "static_scale")}, **spec}
    control = out.get("control")
    try:
        if isinstance(model, str) and model_entry(model).inputs == "observations":
            out["control"] = None if not control else control
        elif isinstance(control, dict) and not isinstance(control.get("interpolation"), Mapping):
            # the form written before ControlOptions: keywords on top of the model's registered options
            out["control"] = _as_json(check_control_overrides(model, control).to_dict())
        return _as_json(InputSpec.from_dict(out).to_dict())
    except (ValueError, TypeError) as error:
        raise MigrationError(f"{where}: cannot read the recorded input spec: {error}") from None


def _versioned(data: Any, where: str) -> bool:
    """Whether ``data`` needs migrating (version 1); False for the current version, MigrationError for a newer."""
    version = format_version_of(data)
    if version > FORMAT_VERSION:
        raise MigrationError(
            f"{where} has format version {version}, newer than this neuralde_seq's "
            f"({FORMAT_VERSION}): update neuralde_seq"
        )
    return version < FORMAT_VERSION


# ------------------------------------------------------------------------------------------------ the files
def migrate_result(result: dict, where: str = "result") -> dict:
    """A run's ``result.json`` contents of version 1 in the current format (a new dict; the fingerprint is the
    settings' anew).

    Arguments:
        result: the contents as read.
        where: the file, for messages.

    Raises:
        MigrationError: a recorded value the migration cannot read (named).
    """
    out = dict(result)
    if isinstance(out.get("config"), dict):
        out["config"] = _settings(out["config"])
        old, out["fingerprint"] = out.get("fingerprint"), _fingerprint(out["config"])
        if isinstance(out.get("history"), dict):  # the checkpoint paths it records name the run folder
            out["history"] = {
                key: _renamed_path(value, f"seed{out.get('seed')}-{old}", f"seed{out.get('seed')}-{out['fingerprint']}")
                if key.endswith("_path")
                else value
                for key, value in out["history"].items()
            }
    row = (out.get("config") or {}).get("row") or {}
    _recorded_defaults(out, out.get("model"), bool(row.get("reference")), where)
    if out.get("input_spec") is not None:
        out["input_spec"] = _input_spec(out["input_spec"], out.get("model"), f"{where}: input_spec")
    out[FORMAT_KEY] = FORMAT_VERSION
    return out


def migrate_grid_record(record: dict, where: str = "grid.json") -> dict:
    """A grid's ``grid.json`` contents of version 1 in the current format (a new dict)."""
    out = {key: value for key, value in record.items() if key != "format"}
    if isinstance(out.get("config"), dict):
        out["config"] = {**out["config"], "models": [_row(row) for row in out["config"].get("models", [])]}
    out["runs"] = [
        {**run, "settings": _settings(run["settings"])}
        if isinstance(run, dict) and isinstance(run.get("settings"), dict)
        else run
        for run in out.get("runs", [])
    ]
    out[FORMAT_KEY] = FORMAT_VERSION
    return out


def migrate_results_file(results: dict, where: str = "results.json") -> dict:
    """A grid's (or a comparison's) ``results.json`` contents of version 1 in the current format (a new dict)."""
    out = dict(results)
    if isinstance(out.get("config"), dict) and isinstance(out["config"].get("models"), list):
        out["config"] = {**out["config"], "models": [_row(row) for row in out["config"]["models"]]}
    out[FORMAT_KEY] = FORMAT_VERSION
    return out


def migrate_checkpoint(checkpoint: dict, where: str = "checkpoint") -> dict:
    """A checkpoint (best, last or resume) of version 1 in the current format: its ``config`` (the run's settings,
    solver, registry defaults and input spec) as `migrate_result` converts them; weights, optimizer, history and
    random states untouched (a new dict; the tensors are the same objects)."""
    out = dict(checkpoint)
    config = out.get("config")
    if isinstance(config, dict) and config:
        config = dict(config)
        if "row" in config:  # a benchmark run's checkpoint: its settings are the run's
            config.update(_settings({key: config[key] for key in _SETTINGS_KEYS if key in config}))
            _recorded_defaults(config, config.get("model"), bool((config["row"] or {}).get("reference")), where)
            folders = [f"seed{config.get('seed')}-{_fingerprint(s)}" for s in (checkpoint["config"], config)]
            if isinstance(out.get("history"), dict):  # the checkpoint paths it records name the run folder
                out["history"] = {
                    key: _renamed_path(value, *folders) if key.endswith("_path") else value
                    for key, value in out["history"].items()
                }
        if "solver" in config:
            config["solver"] = _solver(config["solver"], f"{where}: solver")
        if config.get("input_spec") is not None:
            config["input_spec"] = _input_spec(config["input_spec"], config.get("model"), f"{where}: input_spec")
        out["config"] = config
    out[FORMAT_KEY] = FORMAT_VERSION
    return out


def migrate_tensor_cache(payload: dict, where: str = "cache file") -> tuple[dict, str]:
    """A tensor cache file's contents of version 1 in the current format, and the file name its key now gives.

    Raises:
        MigrationError: contents that do not match the checksum stored with them (a damaged file is not
            re-signed).
    """
    from .cache import cache_file_name, payload_checksum

    old_json, data = payload.get("key"), payload.get("data")
    if (
        not isinstance(old_json, str)
        or not isinstance(data, dict)
        or payload_checksum(data, old_json) != payload.get("checksum")
    ):
        raise MigrationError(
            f"{where}: its contents do not match the checksum stored with them; delete it to compute it again"
        )
    old = json.loads(old_json)
    key_json = json.dumps(
        {FORMAT_KEY: FORMAT_VERSION, "neuralde_seq": old.get("neuralde_seq"), "key": old["key"]}, sort_keys=True
    )
    new = {FORMAT_KEY: FORMAT_VERSION, "key": key_json, "data": data, "checksum": payload_checksum(data, key_json)}
    return new, cache_file_name(old["key"], key_json)


# ------------------------------------------------------------------------------------------------ the walk
def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise MigrationError(f"{path}: cannot be read as JSON ({' '.join(str(error).split())}); left alone") from None


def _run_folder_rename(folder: Path, seed: Any, old: Any, new: str) -> Path | None:
    """Where a run folder ``seed<k>-<old fingerprint>`` goes now, or None if its name is not a run folder's or
    stays."""
    if folder.name != f"seed{seed}-{old}" or old == new:
        return None
    return folder.with_name(f"seed{seed}-{new}")


def _migrate_file(path: Path, dry_run: bool) -> tuple[Migrated | None, Path | None]:
    """Migrate one file; return what changed (None if it was current) and the run folder's new path if the file
    says its folder is renamed."""
    from .training.checkpoints import atomic_save
    from .training.results import write_json

    if path.suffix == ".json":
        data = _read_json(path)
        if not isinstance(data, dict) or not _versioned(data, str(path)):
            return None, None
        rename = None
        if path.name == "result.json":
            new = migrate_result(data, str(path))
            if "fingerprint" in data:
                rename = _run_folder_rename(path.parent, data.get("seed"), data["fingerprint"], new["fingerprint"])
            what = "recorded run"
        elif path.name == "grid.json":
            new, what = migrate_grid_record(data, str(path)), "grid record"
        else:
            new, what = migrate_results_file(data, str(path)), "results"
        if not dry_run:
            write_json(new, path)
        return Migrated(path, path, what), rename

    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - a damaged or foreign file: named and left alone
        raise MigrationError(f"{path}: cannot be read as a torch file ({type(error).__name__}); left alone") from None
    if not isinstance(data, dict) or not _versioned(data, str(path)):
        return None, None
    if "model_state" in data:
        new = migrate_checkpoint(data, str(path))
        config = new.get("config") or {}
        rename = None
        if "row" in config:
            old_fingerprint = _fingerprint(data["config"])
            rename = _run_folder_rename(path.parent, config.get("seed"), old_fingerprint, _fingerprint(config))
        if not dry_run:
            atomic_save(new, path)
        return Migrated(path, path, "checkpoint"), rename
    if {"key", "data", "checksum"} <= set(data):
        new, name = migrate_tensor_cache(data, str(path))
        to = path.with_name(name)
        if not dry_run:
            atomic_save(new, to)
            if to != path:
                path.unlink()
        return Migrated(path, to, "tensor cache"), None
    return None, None


def _candidates(root: Path) -> Iterable[Path]:
    if root.is_file():
        yield root
        return
    for path in sorted(root.rglob("*")):
        if path.is_file() and (path.name in _JSON_FILES or path.suffix == ".pt") and not path.name.startswith("."):
            yield path


def migrate_path(
    path: str | os.PathLike, *, dry_run: bool = False, say: Callable[[str], None] | None = None
) -> list[Migrated]:
    """Bring every file neuralde_seq wrote under ``path`` (a file or a folder, searched recursively) to the current
    format version, in place and atomically; rename the run folders whose fingerprint changes.

    Arguments:
        path: a file (``result.json``, ``results.json``, ``grid.json``, a checkpoint or a tensor cache ``.pt``) or a
            folder holding such files (a bench/compare output folder, a cache folder).
        dry_run: only say what would change (default False).
        say: called with a line per file or folder changed (and per file left alone, with why); default: nothing.

    Returns:
        What changed (`Migrated`: the path, where it is now, what it is); empty when everything was current.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        MigrationError: a run folder would be renamed onto an existing one (both named).
    """
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist")
    say = say or (lambda line: None)
    changed: list[Migrated] = []
    renames: dict[Path, Path] = {}
    for file in _candidates(root):
        try:
            migrated, rename = _migrate_file(file, dry_run)
        except MigrationError as error:
            say(f"skipped: {error}")
            continue
        if migrated is not None:
            changed.append(migrated)
            say(
                f"{'would migrate' if dry_run else 'migrated'} {migrated.what} {file}"
                + (f" (now {migrated.to.name})" if migrated.to != file else "")
            )
        if rename is not None:
            if renames.get(file.parent, rename) != rename:
                raise MigrationError(
                    f"{file.parent}: its files give two fingerprints ({renames[file.parent].name}, "
                    f"{rename.name}); migrate them one at a time"
                )
            renames[file.parent] = rename
    for folder, to in renames.items():
        if to.exists():
            raise MigrationError(
                f"cannot rename run folder {folder} to {to.name}: {to} exists (the same run made "
                "again by this version?); move one of them away and migrate again"
            )
        if not dry_run:
            folder.rename(to)
            lock = folder.with_name(f".{folder.name}.lock")
            if lock.exists():
                lock.unlink()  # the lock of the old name: a run holding it would have this folder open
        changed.append(Migrated(folder, to, "run folder"))
        say(
            f"{'would rename' if dry_run else 'renamed'} run folder {folder} to {to.name} (its settings' new "
            "fingerprint)"
        )
    return changed
