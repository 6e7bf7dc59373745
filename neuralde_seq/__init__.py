"""neuralde_seq: continuous-time sequence models for irregularly sampled time series.

What is solved (vector fields, controls), how it is solved (solvers) and what is done with the answer
(models, training) live in separate modules; this namespace gathers the public pieces:

- data in: `Observations` (the raw irregular batch, validated once), `build_control` and
  `Control` (the continuous path X(s) the CDE/RDE models read) with its `ControlOptions` and the interpolations
  `HermiteCubic`, `NaturalCubic`, `Linear`, `Rectilinear`, `LogSignature` (your own with
  `register_interpolation`), `IrregularDataset`
  (observations + labels) read from numpy (`from_arrays`) or local .ts/ARFF files (`load_files`),
  `logsignature`, `logsignature_windows`; scikit-learn estimators are in `neuralde_seq.sklearn`;
- what is solved: the learning rules `Hebb`, `Oja`, `Delta` (`make_rule`; your own with `register_rule`) and their
  vector field `FastWeightField` in ODE, CDE and RDE form;
- how it is solved: `SolverOptions` and `solve` (fixed-step, adaptive, exact; checkpointed,
  adjoint or plain gradients), the method objects `Auto`, `RK4`, `Euler`, `Midpoint`, `Dopri5`, `Exact` and the
  gradient methods `Checkpoint`, `Adjoint`, `Backprop` (`SolverOptions(method=RK4(step_size=0.01))`);
- models: `create_model` by registry name (`MODEL_NAMES`), with `model_inputs` building
  each model's input; the fast weight classes;
- training: `fit` (the one loop) with an objective (`Classification`,
  `PerStepClassification`, `Regression`, `ELBO`), `train_classifier`,
  `evaluate`, `predict`, `TrainingDiverged`; benchmarks: `run_benchmark`, `report_grid` (the tables of a grid
  whose runs were spread over machines), and `load_run` (a run's trained model, a `TrainedClassifier`, scoring new
  raw data as the run did);
- reference methods (`neuralde_seq.reference`, imported on first use; aeon, which two of them need, is an
  optional extra): `reference_scores`, `to_grid`, `MiniRocketClassifier`, `MultiRocketHydraClassifier`,
  `QuantClassifier`, `MiniRocketRegressor`, `NearestNeighbourClassifier`, `SummaryFeatureClassifier`,
  `REFERENCE_METHODS`.
"""

from ._version import __version__ as __version__
from .basis import BasisConv1d, BasisLinear, make_basis, project, project_module
from .controls import (
    Control,
    ControlOptions,
    HermiteCubic,
    Linear,
    LogSignature,
    NaturalCubic,
    Rectilinear,
    build_control,
    register_interpolation,
    registered_interpolation,
)
from .data import IrregularDataset, TimeWarp, from_arrays, load_files, time_warp
from .fields import FastWeightField
from .models import (
    MODEL_NAMES,
    ODERFWP,
    FastWeightClassifier,
    FastWeightLayer,
    FastWeightNetwork,
    LatentODE,
    StatefulODENet,
    control_options,
    create_model,
    model_defaults,
    model_inputs,
)
from .observations import Observations
from .rules import Delta, Hebb, LearningRule, Oja, make_rule, register_rule, registered_rule
from .signatures import logsignature, logsignature_windows
from .solvers import (
    RK4,
    Adjoint,
    Auto,
    Backprop,
    Checkpoint,
    Dopri5,
    Euler,
    Exact,
    Midpoint,
    SolverOptions,
    parse_solver,
    solve,
)
from .trained_run import TrainedClassifier, load_run
from .training import (
    ELBO,
    Classification,
    InputSpec,
    PerStepClassification,
    Regression,
    TrainingDiverged,
    TrainingSpec,
    evaluate,
    fit,
    predict,
    train_classifier,
)
from .training.runner import report_grid, run_benchmark

__all__ = [
    # data in
    "Observations",
    "Control",
    "build_control",
    "ControlOptions",
    "HermiteCubic",
    "NaturalCubic",
    "Linear",
    "Rectilinear",
    "LogSignature",
    "register_interpolation",
    "registered_interpolation",
    "IrregularDataset",
    "from_arrays",
    "load_files",
    "logsignature",
    "logsignature_windows",
    "TimeWarp",
    "time_warp",
    # what is solved
    "LearningRule",
    "Hebb",
    "Oja",
    "Delta",
    "make_rule",
    "register_rule",
    "registered_rule",
    "FastWeightField",
    # how it is solved: the options, the method and gradient objects they hold, and the solve
    "SolverOptions",
    "parse_solver",
    "Auto",
    "RK4",
    "Euler",
    "Midpoint",
    "Dopri5",
    "Exact",
    "Checkpoint",
    "Adjoint",
    "Backprop",
    "solve",
    # models
    "create_model",
    "model_inputs",
    "model_defaults",
    "control_options",
    "MODEL_NAMES",
    "FastWeightClassifier",
    "FastWeightLayer",
    "FastWeightNetwork",
    "LatentODE",
    "ODERFWP",
    "StatefulODENet",
    # weights as basis expansions in time or depth (paper 004)
    "make_basis",
    "project",
    "project_module",
    "BasisLinear",
    "BasisConv1d",
    # training and benchmarks
    "fit",
    "TrainingSpec",
    "InputSpec",
    "Classification",
    "PerStepClassification",
    "Regression",
    "ELBO",
    "train_classifier",
    "evaluate",
    "predict",
    "TrainingDiverged",
    "run_benchmark",
    "report_grid",
    "load_run",
    "TrainedClassifier",
    # reference methods (neuralde_seq.reference, imported on first use)
    "reference_scores",
    "to_grid",
    "MiniRocketClassifier",
    "NearestNeighbourClassifier",
    "SummaryFeatureClassifier",
    "MultiRocketHydraClassifier",
    "QuantClassifier",
    "MiniRocketRegressor",
    "summary_features",
    "REFERENCE_METHODS",
]

# Imported on first access, so that `import neuralde_seq` imports neither scikit-learn nor (ever) aeon.
_REFERENCE_NAMES = (
    "reference_scores",
    "to_grid",
    "MiniRocketClassifier",
    "NearestNeighbourClassifier",
    "SummaryFeatureClassifier",
    "MultiRocketHydraClassifier",
    "QuantClassifier",
    "MiniRocketRegressor",
    "summary_features",
    "REFERENCE_METHODS",
)


def __getattr__(name):
    if name in _REFERENCE_NAMES:
        from . import reference

        return getattr(reference, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
