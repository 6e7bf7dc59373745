"""Training loop, checkpoints, metrics and result writing."""

from .metrics import accuracy, auroc
from .results import format_table, to_jsonable, write_json, write_table
from .trainer import (
    SELECT_ON,
    ModelArguments,
    TrainingDiverged,
    default_last_checkpoint_path,
    evaluate,
    load_checkpoint,
    predict,
    save_checkpoint,
    train_classifier,
)

__all__ = [
    "ModelArguments",
    "SELECT_ON",
    "TrainingDiverged",
    "default_last_checkpoint_path",
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
