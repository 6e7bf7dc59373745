"""A benchmark grid: the runs of a config (every model row with every seed), and one run of it made in its folder.

`_plan_grid` reads a config into a `_Grid` (its rows, task, device, dtype, the registry defaults of its models and
every run's settings); `_TaskData` loads the task's data one seed at a time; `_train_run` makes one run (row,
seed) in its folder under the run's own lock, or reuses its recorded result (``--resume``): the body of the serial
loop of `neuralde_seq.training.runner.run_benchmark` and of a Ray task (`neuralde_seq.training.ray_executor`)
alike. For a job array, `shard_runs` splits the runs into disjoint parts (``bench --shard K/N``: `parse_shard`,
`check_shard`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..data import DatasetSplits
from ..file_format import FORMAT_KEY, FORMAT_VERSION
from ..files import OutputLock
from ..input_checks import floating_dtype
from ..user_warnings import options_spelled_as
from .config import (
    BenchmarkConfig,
    ConfigError,
    ModelRow,
    apply_overrides,
    fingerprint,
    load_config,
    parse_config,
    slug,
)
from .fit import ResumeMismatch
from .process_group import is_main_process
from .report import environment, write_curves
from .results import write_json
from .run import ControlCache, fit_and_evaluate, fit_and_evaluate_reference
from .run_folders import (
    _as_json,
    _clear_stale_temporaries,
    _inside,
    _recorded_result,
    _registry_changes,
    _registry_defaults,
    _run_lock_name,
    _stale_path,
    data_digest,
)

__all__ = ["check_shard", "parse_shard", "shard_runs"]


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
        raise ConfigError(
            f"--models: {', '.join(missing)} match no row; rows: " + ", ".join(f"{r.label} ({r.model})" for r in rows)
        )
    return chosen


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
        settings = {
            "row": row.to_dict(),
            "task": self.cfg.task,
            "task_options": self.cfg.task_options,
            "seed": seed,
            "dtype": str(self.dtype).replace("torch.", ""),
            "max_steps": self.max_steps,
            "variants": [v.label for v in self.cfg.variants],
            "data": digest,
            "model_changes": self.model_changes,
        }
        return settings

    def plan(self) -> dict:
        """`_plan_grid`'s arguments that plan this grid again (in a Ray task): picklable, the folder absolute."""
        return {
            "config": self.raw,
            "models": self.models,
            "max_steps": self.max_steps,
            "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""),
            "out_dir": str(self.out_dir.resolve()),
            "task_overrides": self.task_overrides,
        }

    def record(self) -> dict:
        """The grid as `GRID_FILE` holds it: the config of its rows, the task's metric, ``max_steps`` and every
        run's label, seed and settings (all but the data digest, which only loading the data gives)."""
        cfg = self.cfg.to_dict()
        cfg["models"] = [row.to_dict() for row in self.rows]
        runs = [
            {
                "label": row.label,
                "seed": seed,
                "settings": {k: v for k, v in self.settings(row, seed, None).items() if k != "data"},
            }
            for seed, row in self.runs()
        ]
        return _as_json(
            {
                FORMAT_KEY: FORMAT_VERSION,
                "name": self.cfg.name,
                "config": cfg,
                "task_metric": self.task.metric,
                "task_description": self.task.description,
                "max_steps": self.max_steps,
                "runs": runs,
            }
        )


def _plan_grid(
    config: Mapping | str | os.PathLike,
    *,
    out_dir: str | os.PathLike,
    overrides: Iterable[str] = (),
    seeds: Sequence[int] | None = None,
    models: Sequence[str] | None = None,
    max_steps: int | None = None,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    task_overrides: Mapping | None = None,
) -> _Grid:
    """The grid of a config (`run_benchmark`'s arguments of the same names): parsed, its rows selected."""
    from ..data.protocols import get_task

    raw = apply_overrides(load_config(config), overrides)
    if seeds is not None:
        raw["seeds"] = [int(s) for s in seeds]
    cfg: BenchmarkConfig = parse_config(raw)
    rows = _select_rows(cfg.rows, models)
    defaults, control_defaults = _registry_defaults((row.model, row.reference) for row in rows)
    return _Grid(
        raw=raw,
        models=None if models is None else tuple(models),
        cfg=cfg,
        rows=rows,
        task=get_task(cfg.task),
        device=torch.device(device if device is not None else "cpu"),
        dtype=_parse_dtype(dtype),
        max_steps=max_steps,
        out_dir=Path(out_dir),
        task_overrides=dict(task_overrides or {}),
        defaults=defaults,
        control_defaults=control_defaults,
        model_changes={v.label: dict(v.model_change) for v in cfg.variants if v.model_change is not None},
    )


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
            data = load_task(
                grid.task.name,
                seed=seed,
                dtype=grid.dtype,
                progress=self.progress,
                **grid.cfg.task_options,
                **grid.task_overrides,
            )
            splits = DatasetSplits(*(ds.to(device=grid.device) for ds in data.splits))
            tests = {
                v.label: data.test_variant(drop_rate=v.drop_rate, subsample=v.subsample, time_warp=v.time_warp).to(
                    device=grid.device
                )
                for v in grid.cfg.variants
            }
            self._loaded[key] = (data, splits, tests, data_digest([*data.splits, *tests.values()]))
        return self._loaded[key]


def _train_run(
    grid: _Grid,
    row: ModelRow,
    seed: int,
    task_data: _TaskData,
    *,
    resume: bool,
    progress: bool,
    threads: int | None,
    say,
) -> tuple[dict, bool]:
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
        if is_main_process():
            held.enter_context(OutputLock(row_dir, name=_run_lock_name(run_dir)))
            # a run killed mid-write left its temporary files here; this process holds the run's lock now
            _clear_stale_temporaries(run_dir, progress)
        if resume:
            others = sorted(p.name for p in row_dir.glob(f"seed{seed}-*") if p.name != run_dir.name)
            if others and is_main_process():
                say(
                    f"[{row.label} seed {seed}] not reusing {', '.join(others)}: made with other settings or "
                    f"data (this run's fingerprint is {run_id})"
                )
            if result_path.exists():
                result = _recorded_result(result_path)
                changed = _registry_changes(result, defaults, control_defaults)
                if not changed:
                    return result, True
                # The fingerprint hashes the row as written; the registry defaults it resolved to changed
                # since: that run is another model. Kept aside (never globbed as seed<k>-*), made afresh.
                stale = _stale_path(run_dir)
                if is_main_process():
                    run_dir.rename(stale)
                    say(
                        f"[{row.label} seed {seed}] not reusing {run_dir.name}: made with other registry "
                        f"defaults of {row.model!r} ({', '.join(changed)}); moved to {stale.name}"
                    )
        t0 = time.perf_counter()
        if row.reference:  # a closed-form method: fitted once, no epochs, checkpoints or curves
            fit = fit_and_evaluate_reference(
                row.model, splits, seed=seed, options=row.options, tests=tests, model_changes=grid.model_changes
            )
        else:

            def train():
                # The registry defaults go into the resume checkpoint's settings too (not into the fingerprint):
                # an interrupted run made under other defaults is another model, never continued.
                # A model's warnings spell their fixes as this row's options (options_spelled_as).
                with options_spelled_as("config", row.options, row=row.label):
                    return fit_and_evaluate(
                        row.model,
                        splits,
                        seed=seed,
                        training=row.training,
                        options=row.options,
                        control=row.control,
                        solver=row.solver,
                        tests=tests,
                        model_changes=grid.model_changes,
                        checkpoint_path=run_dir / "best.pt",
                        last_checkpoint_path=run_dir / "last.pt",
                        resume=resume,
                        max_steps=grid.max_steps,
                        progress=progress,
                        desc=f"{row.label} seed {seed}",
                        threads=threads,
                        control_cache=task_data.control_cache,
                        run_settings={**settings, "model_defaults": defaults, "control_defaults": control_defaults},
                    )

            try:
                fit = train()
            except ResumeMismatch as mismatch:
                # Same fingerprint, other registry defaults (or a checkpoint from before they were recorded):
                # set aside like a finished run of another model, and made afresh.
                stale = _stale_path(run_dir)
                if is_main_process():
                    run_dir.rename(stale)
                    say(f"[{row.label} seed {seed}] not continuing {run_dir.name}: {mismatch}; moved to {stale.name}")
                fit = train()
        result = {
            FORMAT_KEY: FORMAT_VERSION,
            "name": grid.cfg.name,
            "label": row.label,
            "model": row.model,
            "seed": seed,
            "fingerprint": run_id,
            "smoke": grid.max_steps is not None,
            "config": settings,
            "data": data.info(),
            "params": fit["params"],
            "model_options": fit["options"],
            "model_defaults": defaults,
            "control_defaults": control_defaults,
            "input_spec": fit.get("input_spec"),
            "metrics": fit["metrics"],
            "history": fit["history"],
            "diverged": fit["diverged"],
            "timing": {
                "train_seconds": fit["train_seconds"],
                "eval_seconds": fit["eval_seconds"],
                "total_seconds": time.perf_counter() - t0,
                "seconds_per_epoch_mean": (
                    sum(fit["history"]["seconds_per_epoch"]) / max(1, len(fit["history"]["seconds_per_epoch"]))
                ),
            },
            "environment": environment(grid.device, grid.dtype),
        }
        if row.reference:
            result["timing"]["seconds_per_epoch_mean"] = None
            result["timing"]["compile_seconds"] = fit["compile_seconds"]
            result["reference"] = {"method": row.model, "fit_on": fit["fit_on"], "num_fit": fit["num_fit"]}
        if is_main_process():
            write_json(result, result_path)
            if not row.reference:
                write_curves(fit["history"], run_dir / "curves.csv")
    return result, False


# -------------------------------------------------------------------------------------------------------- shards
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
        raise ValueError(
            f"shard must be K/N with 1 <= K <= N (the K-th of N parts, counted from 1 as a job array "
            f"--array=1-N counts), got {k!r}/{n!r}"
        )
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
        raise ValueError(f"shard must be K/N, two whole numbers (e.g. 2/8: the 2nd of 8 parts), got {text!r}") from None
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
    return list(runs)[k - 1 :: n]
