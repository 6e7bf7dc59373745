"""The process group as the training loop sees it: this process's rank and the number of processes.

Kept apart from `neuralde_seq.training.distributed` (which starts groups and runs the benchmark on N processes,
and so imports the runner): `fit` reads the rank here without importing anything above itself.
"""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["world", "is_main_process", "barrier"]


def world() -> tuple[int, int]:
    """(rank, world size) of this process: (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_process() -> bool:
    """Whether this process is rank 0 (or the only one): the process that writes files and prints."""
    return world()[0] == 0


def barrier() -> None:
    """Wait for every process of the group (nothing without a group of more than one process)."""
    if world()[1] > 1:
        dist.barrier()
