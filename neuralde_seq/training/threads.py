"""How many CPU threads torch uses while the library trains and predicts.

The models of this toolkit are small (hidden sizes 32-64, batches of tens of series), and a continuous-time
model runs hundreds to thousands of small sequential steps, whose tensor operations gain little from being
split over threads; on a machine where other processes hold the cores, torch's threads wait for each other on
every operation. ``benchmarks/threads.py`` times training steps side by side with 1, 2 and torch's default
number of threads. On 2 cores, idle: a second thread gained 0-7 % for the CDE models and GRU-D, 1.6-1.7 times
for CKCNN (long convolutions), and cost NCDE up to 40 %; busy: it made every model 3-10 times slower. So the
library's training and prediction calls (`fit`,
`train_classifier`, `run_benchmark`, the
scikit-learn estimators' ``n_jobs``, the CLI's ``--threads``) run on `DEFAULT_THREADS` = 1 thread per
process unless told otherwise, and put torch's setting back afterwards. For more throughput run more
processes (seeds, rows, data-parallel ranks); give CKCNN more threads on an idle machine.
"""

from __future__ import annotations

import contextlib
import numbers

import torch

__all__ = ["DEFAULT_THREADS", "torch_threads", "check_threads"]

DEFAULT_THREADS = 1


def check_threads(threads, name: str = "threads") -> int | None:
    """``threads`` if it is a positive integer or None; else a ValueError naming ``name``."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
        raise ValueError(f"{name} must be a positive integer or None (torch's own setting), got {threads!r}")
    return int(threads)


@contextlib.contextmanager
def torch_threads(threads: int | None):
    """Within the block torch's intra-op CPU threads are ``threads`` (None: left as they are); the previous
    number is restored on leaving, also when the block raises."""
    threads = check_threads(threads)
    if threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
