"""Training: one loop (`fit`), objectives, callbacks, checkpoints, metrics, the benchmark runner.

- `fit` — the training loop every path uses; `TrainingSpec` — how it trains (epochs, lr, batch size, ...);
- `InputSpec` (`.input_spec`) — what turns series into a model's input, fitted on the training split;
- objectives (`.objectives`): `Classification`, `PerStepClassification`,
  `Regression`, `ELBO`, or a subclass of `Objective`;
- callbacks (`.callbacks`): `BestCheckpoint`, `EarlyStopping`, `StopWhen`,
  `TimeLimit`, `DivergenceGuard`, `ProgressBar`;
- `train_classifier`, `evaluate`, `predict`: classification in one call;
- `AugmentedInputs` (training inputs cropped and thinned afresh per batch), `EnsembleClassifier`,
  `EnsembleRegressor`;
- checkpoints (`.checkpoints`), metrics, results tables (`.results`);
- the benchmark runner: one run (`.run`), a config's runs and shards (`.grid`), what they leave on disk
  (`.run_folders`), a grid run and its tables (`.runner`).
"""

from .augmentation import AugmentedInputs, EnsembleClassifier, EnsembleRegressor
from .callbacks import (
    BestCheckpoint,
    Callback,
    DivergenceGuard,
    EarlyStopping,
    FitState,
    ProgressBar,
    StopWhen,
    TimeLimit,
)
from .checkpoints import CheckpointError, default_last_checkpoint_path, load_checkpoint, save_checkpoint
from .fit import ResumeMismatch, TrainingDiverged, fit
from .input_spec import InputSpec
from .metrics import accuracy, auroc
from .objectives import ELBO, Classification, ModelArguments, Objective, PerStepClassification, Regression
from .results import format_table, to_jsonable, write_json, write_table
from .spec import TrainingSpec
from .trainer import SELECT_ON, evaluate, predict, train_classifier

__all__ = [
    "fit",
    "TrainingSpec",
    "InputSpec",
    "Objective",
    "Classification",
    "PerStepClassification",
    "Regression",
    "ELBO",
    "ModelArguments",
    "Callback",
    "FitState",
    "BestCheckpoint",
    "EarlyStopping",
    "StopWhen",
    "TimeLimit",
    "DivergenceGuard",
    "ProgressBar",
    "TrainingDiverged",
    "ResumeMismatch",
    "SELECT_ON",
    "train_classifier",
    "evaluate",
    "predict",
    "save_checkpoint",
    "load_checkpoint",
    "CheckpointError",
    "default_last_checkpoint_path",
    "accuracy",
    "auroc",
    "format_table",
    "to_jsonable",
    "write_json",
    "write_table",
    "AugmentedInputs",
    "EnsembleClassifier",
    "EnsembleRegressor",
]
