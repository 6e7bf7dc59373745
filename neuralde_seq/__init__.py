"""neuralde_seq: continuous-time sequence models for irregularly sampled time series.

What is solved (vector fields, controls), how it is solved (solvers) and what is done with the answer
(models, training) live in separate modules; this namespace gathers the public pieces:

- data in: :class:`Observations` (the raw irregular batch, validated once), :func:`build_control` and
  :class:`Control` (the continuous path X(s) the CDE/RDE models read), :class:`IrregularDataset`
  (observations + labels) read from numpy (:func:`from_arrays`) or local .ts/ARFF files (:func:`load_files`),
  :func:`logsignature`, :func:`logsignature_windows`; scikit-learn estimators are in :mod:`neuralde_seq.sklearn`;
- what is solved: the learning rules :class:`Hebb`, :class:`Oja`, :class:`Delta` (:func:`make_rule`) and their
  vector field :class:`FastWeightField` in ODE, CDE and RDE form;
- how it is solved: :class:`SolverOptions` and :func:`solve` (fixed-step, adaptive, exact; checkpointed,
  adjoint or plain gradients);
- models: :func:`create_model` by registry name (:data:`MODEL_NAMES`), with :func:`model_inputs` building
  each model's input; the fast weight classes;
- training: :func:`fit` (the one loop) with an objective (:class:`Classification`,
  :class:`PerStepClassification`, :class:`Regression`, :class:`ELBO`), :func:`train_classifier`,
  :func:`evaluate`, :func:`predict`, :class:`TrainingDiverged`; benchmarks: :func:`run_benchmark`.
"""
from .controls import Control, build_control
from .data import IrregularDataset, from_arrays, load_files
from .fields import FastWeightField
from .models import (FastWeightClassifier, FastWeightLayer, FastWeightNetwork, LatentODE, ODERFWP, control_options, model_defaults,
                     create_model, model_inputs, MODEL_NAMES)
from .observations import Observations
from .rules import Delta, Hebb, LearningRule, Oja, make_rule
from .signatures import logsignature, logsignature_windows
from .solvers import SolverOptions, solve
from .training import (ELBO, Classification, PerStepClassification, Regression, TrainingDiverged, evaluate, fit,
                       predict, train_classifier)
from .training.runner import run_benchmark

__version__ = "0.1.0"

__all__ = [
    # data in
    "Observations", "Control", "build_control", "IrregularDataset", "from_arrays", "load_files", "logsignature",
    "logsignature_windows",
    # what is solved
    "LearningRule", "Hebb", "Oja", "Delta", "make_rule", "FastWeightField",
    # how it is solved
    "SolverOptions", "solve",
    # models
    "create_model", "model_inputs", "model_defaults", "control_options", "MODEL_NAMES", "FastWeightClassifier", "FastWeightLayer",
    "FastWeightNetwork", "LatentODE", "ODERFWP",
    # training and benchmarks
    "fit", "Classification", "PerStepClassification", "Regression", "ELBO", "train_classifier", "evaluate",
    "predict", "TrainingDiverged", "run_benchmark",
]
