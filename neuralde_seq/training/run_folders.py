"""What a benchmark grid leaves on disk, and how it is read back: the run folders, their results and the grid's
record.

A grid's output folder holds one folder per run, ``runs/<row label>/seed<k>-<fingerprint>/`` (the fingerprint of
the run's settings, `neuralde_seq.training.config.fingerprint`, with `data_digest` of the task's data), the run's
lock beside it (``runs/<row label>/.seed<k>-<fingerprint>.lock``: `_run_lock_name`), and `GRID_FILE`, the record
of the grid: its config, rows, seeds and every run's settings (`_record_grid`, `_read_grid`). Here a finished
run's ``result.json`` is read back (`_recorded_result`), the registry defaults it was made under are compared
with today's (`_registry_defaults`, `_registry_changes`; a folder made under others is set aside as
``stale-...``: `_stale_path`), and the results of a recorded grid's runs are found (`_recorded_runs`: what
``neuralde-seq report`` reads).

Making the runs is `neuralde_seq.training.grid`'s; the tables, `neuralde_seq.training.runner`'s.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..data import IrregularDataset
from ..file_format import check_format
from ..files import remove_stale_temporaries
from .config import slug
from .results import to_jsonable, write_json

__all__ = ["GRID_FILE", "data_digest"]


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
    return sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))


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
    """The registry defaults (``control <key>`` for a control option) that changed since ``result`` was made."""
    return _changed_keys(result["model_defaults"], defaults) + [
        f"control {k}" for k in _changed_keys(result["control_defaults"], control_defaults)
    ]


# --------------------------------------------------------------------------------------------------- run folders
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
        raise ValueError(
            f"the output folder {name!r} would lie outside {folder} (through '..' or a link); a row "
            "label names one folder inside it"
        )
    return path


def _run_lock_name(run_dir: Path) -> str:
    """The lock file of a run, beside its folder in the row's folder (its folder may be moved aside while held)."""
    return f".{run_dir.name}.lock"


# Keys every recorded result has (`run_benchmark` writes them): a file without them is not a finished run.
_RESULT_KEYS = ("label", "seed", "metrics", "diverged", "history", "model_defaults", "control_defaults")


def _recorded_result(path: Path) -> dict:
    """A finished run's ``result.json``, read for ``--resume``; a file that is not one (truncated by a crash,
    edited, another file) raises ValueError naming it and what to do."""
    what_to_do = (
        f"delete it (or its folder {path.parent}) to make that run afresh, or rerun without --resume "
        "(--fresh: every run made afresh)"
    )
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(
            f"{path}: cannot read this recorded run ({' '.join(str(err).split())}); {what_to_do}"
        ) from None
    check_format(result, path, "recorded run")
    missing = [key for key in _RESULT_KEYS if key not in result] if isinstance(result, dict) else list(_RESULT_KEYS)
    if missing:
        raise ValueError(f"{path}: not a finished run's result (no {', '.join(missing)}); {what_to_do}")
    return result


def _clear_stale_temporaries(folder: Path, progress: bool) -> None:
    """Remove the temporary files a killed writer left in ``folder`` (`remove_stale_temporaries`), saying so."""
    removed = remove_stale_temporaries(folder)
    if removed and progress:
        print(
            f"removed {len(removed)} temporary file(s) left in {folder} by an interrupted write: "
            f"{', '.join(p.name for p in removed)}",
            file=sys.stderr,
        )


# --------------------------------------------------------------------------------------------- the grid's record
GRID_FILE = "grid.json"
"""The record of the grid an output folder holds: `run_benchmark` writes it, `report_grid` reads it."""


def _record_grid(record: dict, out_dir: Path, say) -> dict:
    """Write a grid's ``record`` (`neuralde_seq.training.grid._Grid.record`) into its folder ``out_dir`` as
    `GRID_FILE`, unless the folder holds it already; ``say`` when it replaces another grid's (whose run folders are
    kept, and no longer reported). Returns the record."""
    path = out_dir / GRID_FILE
    try:
        before = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        before = None
    except (OSError, ValueError):
        before = "unreadable"
    check_format(before, path, "grid record")  # an older grid's folder is migrated, not written over
    if before == record:
        return record
    if before is not None:
        say(
            f"{path}: replaced the record of another grid (other config, rows, seeds or max_steps): its run folders "
            "are kept, and `report` reports this grid's"
        )
    write_json(record, path)
    return record


def _read_grid(out_dir: Path) -> dict:
    """The grid record of ``out_dir`` (`GRID_FILE`), checked; ValueError naming the file when there is none."""
    path = out_dir / GRID_FILE
    if not path.is_file():
        raise ValueError(
            f"{path}: no such file: {out_dir} holds no grid (neuralde-seq bench CONFIG --out {out_dir}, "
            "whole or any --shard, records it)"
        )
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{path}: cannot read the grid record ({' '.join(str(err).split())}); run any shard of the "
            "grid again to write it"
        ) from None
    check_format(record, path, "grid record")
    keys = ("name", "config", "task_metric", "task_description", "max_steps", "runs")
    if not isinstance(record, dict) or any(key not in record for key in keys):
        raise ValueError(
            f"{path}: not a grid record (it needs {', '.join(keys)}); run any shard of the grid again to write it"
        )
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
            if {k: v for k, v in settings.items() if k != "data"} != run[
                "settings"
            ] or folder.name != f"seed{seed}-{result.get('fingerprint')}":
                continue  # another grid's run (other settings), or a folder copied under another name
            changed = _registry_changes(result, defaults[model], control_defaults[model])
            if changed:
                other_defaults.append(f"{folder.name} (made under other registry defaults: {', '.join(changed)})")
                continue
            matches.append((folder, result))
        if len(matches) > 1:
            raise ValueError(
                f"{label} seed {seed}: {' and '.join(str(f) for f, _ in matches)} both hold this run of "
                "the grid, made from different data (the task's data changed between them): delete the "
                "outdated folder(s)"
            )
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
            groups = "; ".join(
                ", ".join(str(folders[(r["label"], r["seed"])]) for r in runs) for runs in digests.values()
            )
            raise ValueError(
                f"runs of the grid that read the same data{'' if key is None else f' (seed {key})'} were "
                f"made from different data: {groups}; delete the runs made from outdated data and make "
                "them again (bench --resume)"
            )
    return found, missing
