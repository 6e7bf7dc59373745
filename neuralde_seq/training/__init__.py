"""Training loop, checkpoints, metrics and result writing."""

from .metrics import accuracy, auroc
from .results import format_table, to_jsonable, write_json, write_table
from .trainer import (
    TrainingDiverged,
    evaluate,
    load_checkpoint,
    predict,
    save_checkpoint,
    train_classifier,
)

__all__ = [
    "TrainingDiverged",
    "accuracy",
    "auroc",
    "evaluate",
    "format_table",
    "load_checkpoint",
    "predict",
    "save_checkpoint",
    "to_jsonable",
    "train_classifier",
    "write_json",
    "write_table",
]
