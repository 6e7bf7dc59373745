"""The benchmark runner: any registered model on any task (`neuralde_seq.data.protocols`) from a config.

``run_benchmark(config, out_dir=...)`` (and ``neuralde-seq bench CONFIG``) parses the config once
(`parse_config`), trains every model row with every seed through `fit`
(`neuralde_seq.training.run.fit_and_evaluate`), evaluates each best-validation checkpoint on every test sample (and
on the config's robustness variants of the test set: other drop rates, sampling rates, time warps of the
observation times), and writes (each control path is built once per data split and control options, and shared by
the rows and seeds that read it: `neuralde_seq.training.run.ControlCache`):

    <out_dir>/runs/<row label>/seed<k>-<fingerprint>/result.json   config, metrics, history, timing, environment
    <out_dir>/runs/<row label>/seed<k>-<fingerprint>/curves.csv    learning curve, one line per epoch
    <out_dir>/runs/<row label>/seed<k>-<fingerprint>/best.pt, last.pt   best-validation and resume checkpoints
    <out_dir>/grid.json                              the grid: its config, rows, seeds and every run's settings
    <out_dir>/results.json, results.md              mean ± std over seeds beside the paper's number
    <out_dir>/curves.png, summary.png               learning curves; ours vs paper with error bars

A row may also name a reference method (a closed-form classifier of `neuralde_seq.reference`, e.g.
``{"label": "minirocket", "model": "minirocket"}``): it is fitted on the training and validation splits
together (`neuralde_seq.training.run.fit_and_evaluate_reference`) and scored on the same test sets; its folder
holds ``result.json`` only (no checkpoints or curves), and the tables mark it as a reference row.

Grids on a cluster (docs/benchmarks.md, "Grids on a cluster"): ``shard=(K, N)`` makes only the K-th of N disjoint
parts of the runs (`neuralde_seq.training.grid.shard_runs`; ``bench --shard K/N``), the shards of a grid sharing
``out_dir``, and `report_grid` (``neuralde-seq report OUT``) writes the tables from the run folders of the grid
recorded in ``<out_dir>/grid.json`` (`neuralde_seq.training.run_folders.GRID_FILE`, written by every run);
``executor="ray"`` makes every run a Ray task (`neuralde_seq.training.ray_executor`). Each run, wherever it is
made, goes through one function (`neuralde_seq.training.grid._train_run`) and holds a lock of its own,
``runs/<row label>/.seed<k>-<fingerprint>.lock``.

The fingerprint is a hash of everything that determines a run: the row's resolved settings (model,
options, control, training, solver), the task and its options, the seed, dtype, ``max_steps`` and a digest
of the task's data. ``resume=True`` reuses a finished run and continues an interrupted one only from the
folder of the same fingerprint, so a run made with other settings or data is never published under the
new config; such folders are reported and left alone. Smoke runs (``max_steps``) are marked in every
output and never aggregated with full runs (`report`).

The runner's rooms, each a module of `neuralde_seq.training`: `run` (one run: a model trained and scored, or a
reference method fitted and scored), `grid` (the runs of a config, one run made in its folder, shards),
`run_folders` (what a grid leaves on disk and how it is read back: run folders, results, the grid's record) and
this module (a grid run serially or on Ray, its progress and tables).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch

from ..files import OutputLock, published_together
from .callbacks import is_terminal, short_label
from .config import slug
from .grid import _plan_grid, _TaskData, _train_run, check_shard, shard_runs
from .process_group import is_main_process
from .report import say_written, write_report
from .results import write_json
from .run_folders import _clear_stale_temporaries, _read_grid, _record_grid, _recorded_runs
from .threads import DEFAULT_THREADS, check_threads, torch_threads

__all__ = ["run_benchmark", "report_grid", "IncompleteGrid", "EXECUTORS"]


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


def _run_outcome(result: dict, metric: str) -> str:
    """One finished run in a few words: its test metric, epochs and wall time (a reference row: its fit's)."""
    value = result["metrics"]["test"].get(metric)
    parts = [f"test {metric} " + ("-" if value is None else f"{value:.4g}")]
    if not result.get("reference"):
        epochs = result["history"].get("epochs_run", 0)
        parts.append(f"{epochs} epoch{'' if epochs == 1 else 's'}")
    parts.append(f"{result['timing']['total_seconds']:.1f} s")
    return ", ".join(parts) + (" (DIVERGED: last good checkpoint)" if result["diverged"] else "")


class _RunProgress:
    """Progress over the runs: a bar where stderr is a terminal, else one line per finished run (the epochs of each
    run likewise: ProgressBar); nothing with ``progress`` False and in processes other than rank 0."""

    def __init__(self, name: str, total: int, metric: str, progress: bool):
        from tqdm import tqdm

        self.total, self.metric, self.count = total, metric, 0
        self.show = progress and is_main_process()
        self.interactive = self.show and is_terminal(sys.stderr)
        self.bar = tqdm(
            total=total,
            desc=short_label(name, 30),
            unit="run",
            disable=not self.interactive,
            dynamic_ncols=True,
            file=sys.stderr,
            bar_format="{desc}: {n_fmt}/{total_fmt} runs |{bar}| {elapsed}<{remaining}",
        )

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
            outcome = (
                f"reused the recorded run seed{result['seed']}-{result['fingerprint']}"
                if reused
                else _run_outcome(result, self.metric)
            )
            self.say(f"[{self.count}/{self.total}] {result['label']} seed {result['seed']}: {outcome}")

    def close(self) -> None:
        self.bar.close()


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
    differs = sorted(
        {key for r in results for key in {*r["environment"], *env} if r["environment"].get(key) != env.get(key)}
    )
    # results.json, results.md and the plots are one answer: published together, or (a failed write) not at all
    with published_together():
        written = write_report(
            cfg,
            per_row,
            task_metric=record["task_metric"],
            task_description=record["task_description"],
            out_dir=out_dir,
            environment_info=env,
            max_steps=record["max_steps"],
            missing=[{"label": m["label"], "seed": m["seed"]} for m in missing],
        )
        if differs:
            written["environment_differs"] = differs
        written["diverged"] = [{"label": r["label"], "seed": r["seed"]} for r in results if r["diverged"]]
        write_json(written, out_dir / "results.json")
    say_written(out_dir, written)  # after the block: the files are in place now
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
            raise IncompleteGrid(
                f"{out_dir}: none of the {total} runs of grid {record['name']!r} has a result yet", missing
            )
        if missing and not partial:
            named = "; ".join(f"{m['label']} seed {m['seed']} ({m['why']})" for m in missing)
            raise IncompleteGrid(
                f"{out_dir}: {len(missing)} of the {total} runs of grid {record['name']!r} have no result: {named}. "
                f"Run the shards that hold them (or bench CONFIG --out {out_dir} --resume), or report --partial for "
                "the tables of the runs there are, marked INCOMPLETE",
                missing,
            )
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
        raise ValueError(
            "shard and executor='ray' are two ways to spread a grid: give one (Ray schedules every run "
            "of the grid itself)"
        )
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
    if executor == "ray":
        import torch.distributed as dist

        from .ray_executor import import_ray

        if dist.is_available() and dist.is_initialized():
            raise ValueError(
                "executor='ray' in a distributed process group: each Ray task makes a run of its own "
                "(give one or the other)"
            )
        import_ray()  # before anything is written: without Ray, the error names the pip command
    with torch_threads(threads), contextlib.ExitStack() as held:
        grid = _plan_grid(
            config,
            out_dir=out_dir,
            overrides=overrides,
            seeds=seeds,
            models=models,
            max_steps=max_steps,
            device=device,
            dtype=dtype,
            task_overrides=task_overrides,
        )
        runs = grid.runs() if shard is None else shard_runs(grid.runs(), shard)
        tracker = _RunProgress(grid.cfg.name, len(runs), grid.task.metric, progress)
        held.callback(tracker.close)  # also when a run fails (closed again, at no cost, below)
        record = None
        if is_main_process():
            # One whole run at a time writes into out_dir (a second one is refused: OutputFolderBusy); the shards
            # of a grid share it (each run has a lock of its own).
            held.enter_context(OutputLock(grid.out_dir, shared=shard is not None))
            if shard is None:  # (shards share the folder: one's temporary files may be another's live writes)
                _clear_stale_temporaries(grid.out_dir, progress)
            record = _record_grid(grid.record(), grid.out_dir, tracker.say)
        if executor == "ray":
            from .ray_executor import run_on_ray

            results = run_on_ray(
                grid,
                runs,
                resume=resume,
                address=address,
                retries=retries,
                threads=threads,
                tracker=tracker,
                cache_controls=cache_controls,
            )
        else:
            task_data = _TaskData(grid, progress=progress, cache_controls=cache_controls)
            results = []
            for seed, row in runs:
                result, reused = _train_run(
                    grid, row, seed, task_data, resume=resume, progress=progress, threads=threads, say=tracker.say
                )
                results.append(result)
                tracker.finished(result, reused)
        tracker.close()
        diverged = [{"label": r["label"], "seed": r["seed"]} for r in results if r["diverged"]]
        if not is_main_process():
            return {"name": grid.cfg.name, "diverged": [(d["label"], d["seed"]) for d in diverged], "rows": None}
        if shard is not None:
            print(
                f"{grid.cfg.name}: shard {shard[0]}/{shard[1]} made {len(runs)} of the grid's {len(grid.runs())} "
                f"runs in {grid.out_dir / 'runs'}; once every shard is done: neuralde-seq report {grid.out_dir}"
            )
            return {
                "name": grid.cfg.name,
                "shard": list(shard),
                "diverged": diverged,
                "rows": None,
                "runs": [
                    {
                        "label": r["label"],
                        "seed": r["seed"],
                        "folder": f"runs/{slug(r['label'])}/seed{r['seed']}-{r['fingerprint']}",
                    }
                    for r in results
                ],
            }
        assert record is not None  # recorded by the main process (the others returned above)
        return _write_grid_report(record, results, grid.out_dir)
