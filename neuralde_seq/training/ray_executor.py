"""The runs of a benchmark grid as Ray tasks (``neuralde-seq bench CONFIG --executor ray [--address ADDR]``).

Ray is an optional extra: ``pip install "neuralde-seq[ray]"``. `run_on_ray` (called by
`neuralde_seq.training.runner.run_benchmark` with ``executor="ray"``) submits one task per run of the grid; each
task makes its run exactly as the serial loop does (`neuralde_seq.training.grid._train_run`: the run's own lock,
``--resume``, the checkpoints and ``result.json`` written safely into its folder) and returns its result, and the
driver, which holds the output folder's lock for the whole grid, writes the tables once every run is done.

Every node reads the config's data paths and writes into the output folder itself: on a cluster, give paths that
are the same on every node (a shared file system) and install the same neuralde-seq there.

A task whose worker process dies (killed, out of memory, its node lost) is submitted again by the driver, up to
``retries`` times, with resume: it continues from the run's last checkpoint (``last.pt``, written after every
epoch), so the run ends as an uninterrupted one would. Ray's own retries are off (``max_retries=0``): a retry of
a run made without ``--resume`` would otherwise start it afresh. When a run's worker has died more than
``retries`` times, the other runs still finish and `RunsFailed` names it; running the grid again with
``--resume`` continues it from its last checkpoint too. An error raised by a run (bad data, a bad option) is
raised as it is, and the other runs are cancelled.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["RAY_EXTRA", "RunsFailed", "import_ray", "run_on_ray"]

RAY_EXTRA = 'pip install "neuralde-seq[ray]"'
"""The command that installs Ray for ``--executor ray``."""


class RunsFailed(RuntimeError):
    """Runs whose Ray worker died more than ``retries`` times (the other runs of the grid are recorded).

    Arguments:
        message: the runs, named, and what to do.
        runs: ``(label, seed)`` of each; attribute ``runs``.
    """

    def __init__(self, message: str, runs: list[tuple[str, int]]):
        super().__init__(message)
        self.runs = runs


def import_ray():
    """The ``ray`` module; `ModuleNotFoundError` naming ``pip install "neuralde-seq[ray]"`` where it is missing."""
    try:
        import ray
    except ImportError as err:
        raise ModuleNotFoundError(f"executor 'ray' needs Ray, an optional extra: {RAY_EXTRA}", name="ray") from err
    return ray


# One grid's data (and the controls built from them) per worker process: the tasks of one seed that land on
# the same worker load it once.
_WORKER_DATA: dict = {}


def _worker_task_data(grid, plan: dict, cache_controls: bool):
    from .grid import _TaskData

    key = repr((sorted((k, repr(v)) for k, v in plan.items()), cache_controls))
    if key not in _WORKER_DATA:
        _WORKER_DATA.clear()
        _WORKER_DATA[key] = _TaskData(grid, progress=False, cache_controls=cache_controls)
    return _WORKER_DATA[key]


def _make_run(
    plan: dict, label: str, seed: int, resume: bool, threads: int | None, cache_controls: bool
) -> tuple[dict, bool]:
    """A Ray task: plan the grid again from ``plan`` (`neuralde_seq.training.grid._Grid.plan`) and make the run
    of row ``label`` with ``seed`` as the serial loop does."""
    from .grid import _plan_grid, _train_run
    from .threads import torch_threads

    grid = _plan_grid(**plan)
    row = next(r for r in grid.rows if r.label == label)

    def say(message: str) -> None:
        print(message, file=sys.stderr)

    with torch_threads(threads):
        return _train_run(
            grid,
            row,
            seed,
            _worker_task_data(grid, plan, cache_controls),
            resume=resume,
            progress=False,
            threads=threads,
            say=say,
        )


def _crash_errors(ray) -> tuple[type[BaseException], ...]:
    """Ray's errors for a task whose process or node died (as opposed to an error the run raised)."""
    names = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "LocalRayletDiedError")
    return tuple(getattr(ray.exceptions, name) for name in names if hasattr(ray.exceptions, name))


def run_on_ray(
    grid,
    runs: Sequence,
    *,
    resume: bool,
    address: str | None,
    retries: int,
    threads: int | None,
    tracker,
    cache_controls: bool = True,
) -> list[dict]:
    """Make ``runs`` of ``grid`` as Ray tasks and return their results in the order of ``runs``.

    Arguments:
        grid: the grid (`neuralde_seq.training.grid._plan_grid`).
        runs: (seed, row) pairs.
        resume: the tasks' first attempts reuse finished runs and continue interrupted ones (``--resume``);
            a task submitted again after its worker died always continues from its last checkpoint.
        address: the cluster (``ray.init(address=...)``); None: the one this process is connected to, else a
            local instance (started here and shut down at the end).
        retries: how many times a run whose worker died is submitted again.
        threads: torch's CPU threads per task (the CPUs each task asks Ray for; None: 1).
        tracker: the progress over the runs (``say`` and ``finished``).
        cache_controls: each worker builds a control once per (data split, control options) for the tasks it runs
            (`neuralde_seq.training.run.ControlCache`; default True).

    Raises:
        ModuleNotFoundError: Ray is not installed.
        RunsFailed: runs whose worker died more than ``retries`` times.
    """
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        ray.init(address=address)
    elif address is not None:
        tracker.say(f"ray: this process is connected to a cluster already; address {address!r} is not used")
    try:
        return _run_tasks(
            ray,
            grid,
            runs,
            resume=resume,
            retries=retries,
            threads=threads,
            tracker=tracker,
            cache_controls=cache_controls,
        )
    finally:
        if started:
            ray.shutdown()


def _run_tasks(
    ray, grid, runs: Sequence, *, resume: bool, retries: int, threads: int | None, tracker, cache_controls: bool
) -> list[dict]:
    plan = grid.plan()
    if grid.device.type == "cuda":
        plan["device"] = "cuda"  # the GPU Ray gives the task is its cuda:0 (CUDA_VISIBLE_DEVICES)
    task = ray.remote(_make_run).options(
        num_cpus=threads or 1, num_gpus=1 if grid.device.type == "cuda" else 0, max_retries=0
    )
    crashes = _crash_errors(ray)
    pending = {
        task.remote(plan, row.label, seed, resume, threads, cache_controls): (row.label, seed, 0) for seed, row in runs
    }
    results, failed = {}, []
    try:
        while pending:
            (done,), _ = ray.wait(list(pending), num_returns=1)
            label, seed, attempt = pending.pop(done)
            try:
                result, reused = ray.get(done)
            except crashes as err:
                reason = " ".join(str(err).split())[:200]
                if attempt < retries:
                    tracker.say(
                        f"[{label} seed {seed}] its worker died ({reason}); submitted again (retry "
                        f"{attempt + 1} of {retries}), continuing from its last checkpoint"
                    )
                    pending[task.remote(plan, label, seed, True, threads, cache_controls)] = (label, seed, attempt + 1)
                else:
                    failed.append((label, seed, reason))
                continue
            except ray.exceptions.RayTaskError as err:  # the run raised: the same error as in the serial loop
                cause = getattr(err, "cause", None)
                raise (cause if isinstance(cause, BaseException) else err) from None
            results[(label, seed)] = result
            tracker.finished(result, reused)
    finally:
        for ref in pending:  # an error, or an interrupt: the other runs stop (their workers with them)
            ray.cancel(ref, force=True)
    if failed:
        named = "; ".join(f"{label} seed {seed} ({reason})" for label, seed, reason in failed)
        raise RunsFailed(
            f"the worker of {len(failed)} run(s) died {retries + 1} time(s): {named}. The other runs are "
            f"recorded in {grid.out_dir}; run the grid again with --resume to continue these from their "
            "last checkpoints",
            [(label, seed) for label, seed, _ in failed],
        )
    return [results[(row.label, seed)] for seed, row in runs]
