"""The wing's base, imported by every room: the dataset containers (`IrregularDataset`, `DatasetSplits`,
`stratified_split`), the loaders' shared options (`LoadOptions`) and the task registry (`Task`, `TASKS`,
`register_task`)."""

from .datasets import DatasetSplits, IrregularDataset, stratified_split
from .options import LoadOptions, accepts_load_options
from .registry import TASKS, Task, get_task, register_task

__all__ = [
    "DatasetSplits",
    "IrregularDataset",
    "stratified_split",
    "LoadOptions",
    "accepts_load_options",
    "TASKS",
    "Task",
    "get_task",
    "register_task",
]
