"""The wing's task registry: a benchmark task (`Task`) by name, registered by the source module that loads its data.

A source module (`neuralde_seq.data.sources`) defines its loader and registers its task beside it
(``register_task(Task("uea", ..., load_uea))``), so adding a dataset touches one module. The registry sits in the wing's
base, below every room, so that any room can register without an import cycle; it is filled when
`neuralde_seq.data.sources` is imported, which importing `neuralde_seq.data` (or any module under it) does.
The protocol that runs a task (`load_task`: splits, subsampling, standardisation, test-set variants) is
`neuralde_seq.data.protocols`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

import torch

from .datasets import DatasetSplits

__all__ = ["Task", "TASKS", "METRICS", "register_task", "get_task"]

METRICS = ("accuracy", "auroc")


@dataclasses.dataclass(frozen=True)
class Task:
    """A benchmark task.

    Attributes:
        name: registry name.
        description: one line for tables and ``--help``.
        metric: the headline test metric, "accuracy" or "auroc".
        loader: the function returning the raw `DatasetSplits` (keyword
            arguments only).
        seed_option: the loader's keyword that receives the run's seed (its data then depend on the seed),
            or None (the loader's own fixed split seed is used for every run).
        standardise: standardise channels (and static features) with training statistics.
        load_dtype: dtype the loader produces before standardisation (None: the run's dtype). The small
            embedded data are processed in float64 as ``neuralde-seq compare`` does.
        fixed_options: loader keyword arguments the task always sets (not options of a config), e.g.
            ``normalise=False`` for a loader that can standardise itself: the task standardises once, with
            the statistics of the training data, also for the test-set variants. Every loader with a
            ``normalise`` option must get ``normalise=False`` here when ``standardise`` is True.
        check_options: a function of the task options (a dict) that raises ``ValueError`` when they cannot
            work together (e.g. the files task's ``train``/``test`` or ``path``), or None; called when a
            config is parsed, before anything runs, and by `load_task`.
    """

    name: str
    description: str
    metric: str
    loader: Callable[..., DatasetSplits]
    seed_option: str | None = None
    standardise: bool = True
    load_dtype: torch.dtype | None = None
    fixed_options: dict = dataclasses.field(default_factory=dict)
    check_options: Callable[[dict], None] | None = None

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if not callable(self.loader):
            raise ValueError(f"task {self.name!r}: loader must be a function, got {self.loader!r}")
        if (
            self.standardise
            and "normalise" in inspect.signature(self.loader).parameters
            and self.fixed_options.get("normalise") is not False
        ):
            # the loader would standardise first and load_task again: the double standardisation this prevents
            raise ValueError(
                f"task {self.name!r}: its loader can standardise itself; set fixed_options "
                "normalise=False so that the data are standardised once"
            )

    @property
    def data_depend_on_seed(self) -> bool:
        return self.seed_option is not None

    def load_function(self) -> Callable[..., DatasetSplits]:
        """The loader function (``loader``)."""
        return self.loader

    def option_names(self) -> tuple[str, ...]:
        """Options a config may set in ``task_options``: the loader's keyword arguments (minus those the
        task sets itself) plus ``subsample``."""
        params = inspect.signature(self.load_function()).parameters
        # ``options`` (a LoadOptions) is the loader's Python spelling of keywords a config already names
        reserved = {"dtype", "options", self.seed_option, *self.fixed_options}
        names = [
            p
            for p, spec in params.items()
            if p not in reserved and spec.kind in (spec.KEYWORD_ONLY, spec.POSITIONAL_OR_KEYWORD)
        ]
        return tuple(names) + ("subsample",)


TASKS: dict[str, Task] = {}
"""Every registered task by name, in the order the sources registered them (`neuralde_seq.data.sources`)."""


def register_task(task: Task) -> Task:
    """Add ``task`` to `TASKS` (called by the source module that defines its loader).

    Arguments:
        task: the `Task`; its ``name`` must not be registered yet.

    Returns:
        ``task`` itself.

    Raises:
        TypeError: ``task`` is not a `Task`.
        ValueError: a task of that name is registered already (naming the module of its loader).
    """
    if not isinstance(task, Task):
        raise TypeError(f"register_task needs a Task, got {type(task).__name__}")
    if task.name in TASKS:
        raise ValueError(
            f"a task named {task.name!r} is registered already (loader "
            f"{TASKS[task.name].loader.__module__}.{TASKS[task.name].loader.__qualname__}); "
            "pick another name"
        )
    TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    """The registered task ``name``.

    Arguments:
        name: a name in `TASKS`.

    Returns:
        Its `Task`.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    return TASKS[name]
