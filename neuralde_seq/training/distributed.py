"""Distributed data parallel runs: process groups, local launches, the benchmark on N processes.

`fit` trains data parallel by itself whenever a ``torch.distributed`` process
group of more than one process is initialised (see its module docstring). This module starts such groups:

- `init_from_env` joins the group described by torchrun's environment variables (``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``): backend gloo on CPU, nccl on CUDA,
  where each process takes the GPU ``cuda:LOCAL_RANK``; `shutdown` leaves it.
- `launch` runs a function in N local processes (spawned, rendezvous on a free port of 127.0.0.1)
  and returns what each returned; a failure in any process is raised in the caller as
  `DistributedError` naming the rank and carrying its traceback.
- `run_benchmark_distributed` is `run_benchmark` on N processes
  (``neuralde-seq bench CONFIG --nproc N``), or in a process started by torchrun:

      torchrun --nproc_per_node N -m neuralde_seq bench CONFIG [--device cuda]

The batch size of a config stays the *global* batch size: with N processes every training step still
sees ``batch_size`` samples, ``batch_size / N`` per process, and the gradient is that of one process.
"""

from __future__ import annotations

import datetime
import os
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..files import atomic_file, write_text_atomic

# In a module of their own so that fit reads the rank without importing this one (which imports the runner);
# re-exported here, where they were first.
from .process_group import barrier, is_main_process, world

__all__ = [
    "DistributedError",
    "backend_for",
    "init_from_env",
    "shutdown",
    "launched_by_torchrun",
    "world",
    "is_main_process",
    "barrier",
    "launch",
    "run_benchmark_distributed",
]

_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class DistributedError(RuntimeError):
    """A process of a `launch` failed. Attributes: ``rank`` (the first to fail), ``child_traceback``
    (its traceback as text, or None when it was killed without one)."""

    def __init__(self, message: str, rank: int, child_traceback: str | None):
        super().__init__(message)
        self.rank, self.child_traceback = rank, child_traceback


def backend_for(device: str | torch.device) -> str:
    """The process group backend for ``device``: nccl for CUDA, gloo for everything else."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def launched_by_torchrun() -> bool:
    """Whether this process belongs to a multi-process launch described by the environment (torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def init_from_env(device: str | torch.device = "cpu", timeout: float | None = None) -> torch.device:
    """Join the process group described by torchrun's environment variables.

    Arguments:
        device: where this process computes: "cpu" (backend gloo) or "cuda" (backend nccl; the process
            takes ``cuda:LOCAL_RANK``, one GPU per process, whatever index ``device`` names).
        timeout: seconds a collective may wait for the other processes before failing (None: torch's
            default, 30 minutes for gloo); a short one turns a hang into an error.

    Returns the device this process should put its model and data on. Without an environment of more than
    one process (``WORLD_SIZE`` unset or 1) nothing is initialised and ``device`` is returned as it is.
    """
    device = torch.device(device)
    if not launched_by_torchrun():
        return device
    missing = [name for name in _ENV if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"WORLD_SIZE={os.environ['WORLD_SIZE']} but {', '.join(missing)} unset: start the "
            "processes with torchrun or neuralde_seq.training.distributed.launch"
        )
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)  # nccl and all_gather_object work on the current device
    if not dist.is_initialized():
        dist.init_process_group(
            backend_for(device),
            init_method="env://",
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            timeout=None if timeout is None else datetime.timedelta(seconds=timeout),
        )
    return device


def shutdown() -> None:
    """Leave the process group (if one is initialised)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _free_port() -> int:
    # Port 0: the OS picks a free port; it is released at once for rank 0's store to bind it (a tiny race
    # with other programs, acceptable for local launches).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(
    rank: int,
    fn: Callable,
    args: tuple,
    kwargs: dict,
    nproc: int,
    port: int,
    device: str,
    threads: int,
    timeout: float | None,
    folder: str,
) -> None:
    # The child sees the same environment torchrun would give it, so both launches share init_from_env.
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    torch.set_num_threads(threads)
    try:
        init_from_env(device, timeout=timeout)
        result = fn(*args, **kwargs)
        with atomic_file(Path(folder) / f"result{rank}.pt") as handle:
            torch.save(result, handle)
    except BaseException:
        # The time orders the failures: the first is the cause, later ones are usually peers whose
        # collectives broke because of it.
        write_text_atomic(Path(folder, f"error{rank}.txt"), f"{time.time()!r}\n{traceback.format_exc()}")
        raise
    finally:
        shutdown()


def launch(
    fn: Callable,
    nproc: int,
    args: Sequence = (),
    kwargs: dict | None = None,
    *,
    device: str = "cpu",
    threads: int | None = None,
    timeout: float | None = None,
) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` in ``nproc`` local processes forming one process group.

    Arguments:
        fn: a picklable (module-level) function; it runs with the group initialised (`init_from_env`:
            gloo on CPU, nccl with one GPU per process for ``device="cuda"``).
        nproc: number of processes (>= 1).
        args: its positional arguments (picklable).
        kwargs: its keyword arguments (picklable), or None.
        device: "cpu" or "cuda".
        threads: torch threads per process (default: the CPU cores divided among the processes).
        timeout: seconds a collective may wait before failing (see `init_from_env`).

    Returns:
        The list of the processes' return values, by rank (each saved with ``torch.save``).
    Raises `DistributedError` naming the rank that failed first, with its traceback, after the
    other processes were stopped.
    """
    import torch.multiprocessing as mp

    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be a positive integer, got {nproc!r}")
    if torch.device(device).type == "cuda" and nproc > torch.cuda.device_count():
        raise ValueError(f"nproc={nproc} processes need as many GPUs, {torch.cuda.device_count()} visible")
    threads = threads or max(1, (os.cpu_count() or 1) // nproc)
    with tempfile.TemporaryDirectory(prefix="neuralde-seq-ddp-") as folder:
        try:
            mp.start_processes(
                _worker,
                args=(fn, tuple(args), dict(kwargs or {}), nproc, _free_port(), str(device), threads, timeout, folder),
                nprocs=nproc,
                join=True,
                start_method="spawn",
            )
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as error:
            raise _failure(folder, error) from None
        return [torch.load(Path(folder) / f"result{rank}.pt", weights_only=False) for rank in range(nproc)]


def _failure(folder: str, error) -> DistributedError:
    reports = []
    for path in Path(folder).glob("error*.txt"):
        stamp, _, text = path.read_text().partition("\n")
        reports.append((float(stamp), int(path.stem[len("error") :]), text))
    if not reports:  # killed without a Python exception (a signal, os._exit)
        return DistributedError(
            f"rank {error.error_index} of the distributed launch failed: {error}", error.error_index, None
        )
    reports.sort()
    _, rank, text = reports[0]
    last_line = text.strip().splitlines()[-1]
    others = [r for _, r, _ in reports[1:]]
    also = f" (then rank(s) {', '.join(map(str, others))} failed too)" if others else ""
    return DistributedError(
        f"rank {rank} of the distributed launch failed{also}: {last_line}\n\nTraceback of rank {rank}:\n{text}",
        rank,
        text,
    )


def _benchmark_here(kwargs: dict) -> dict:
    from .runner import run_benchmark

    # Progress bars and the printed table: once, from rank 0 (fit hides its own bars on other ranks too).
    return run_benchmark(**{**kwargs, "progress": kwargs.get("progress", True) and is_main_process()})


def _benchmark_worker(kwargs: dict) -> dict | None:
    results = _benchmark_here(kwargs)
    return results if is_main_process() else None  # rank 0's copy is the one returned


def run_benchmark_distributed(nproc: int | None = None, **run_benchmark_kwargs) -> dict:
    """`run_benchmark` data parallel over processes.

    Arguments:
        nproc: processes to launch on this machine (each with a GPU for ``device="cuda"``); None or 1 in
            a process started by torchrun: join torchrun's group instead; None or 1 otherwise: one process,
            plain `run_benchmark`.
        **run_benchmark_kwargs: `run_benchmark`'s arguments (``config``, ``out_dir``, ``device``, ...);
            picklable, as they travel to the processes.

    Returns rank 0's results (under torchrun: what run_benchmark returns in this process).
    """
    from .config import apply_overrides, load_config, validate_config
    from .runner import run_benchmark

    device = run_benchmark_kwargs.get("device") or "cpu"
    if launched_by_torchrun():
        if nproc not in (None, 1):
            raise ValueError(
                f"nproc={nproc} in a process started by torchrun: torchrun already started "
                f"{os.environ['WORLD_SIZE']} processes (give one or the other)"
            )
        already = dist.is_available() and dist.is_initialized()
        run_benchmark_kwargs["device"] = str(init_from_env(device))
        try:
            return _benchmark_here(run_benchmark_kwargs)
        finally:
            if not already:
                shutdown()
    if nproc is None or nproc == 1:
        return run_benchmark(**run_benchmark_kwargs)
    # A bad config raises ConfigError here, as with one process, not as the failure of N processes.
    validate_config(
        apply_overrides(load_config(run_benchmark_kwargs["config"]), run_benchmark_kwargs.get("overrides", ()))
    )
    return launch(
        _benchmark_worker, nproc, (run_benchmark_kwargs,), device=device, threads=run_benchmark_kwargs.get("threads")
    )[0]
