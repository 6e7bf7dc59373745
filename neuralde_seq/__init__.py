"""neuralde_seq: continuous-time sequence models for irregularly sampled time series.

What is solved (vector fields, controls), how it is solved (solvers) and what is done with the answer
(models) live in separate modules; this namespace gathers the public pieces.
"""
from .controls import Control, build_control
from .fields import FastWeightField
from .models import (FastWeightClassifier, FastWeightLayer, FastWeightNetwork, LatentODE, ODERFWP, control_options,
                     create_model, model_inputs, MODEL_NAMES)
from .observations import Observations
from .rules import Delta, Hebb, LearningRule, Oja, make_rule
from .signatures import logsignature, logsignature_windows
from .solvers import SolverOptions, solve

__version__ = "0.1.0"

__all__ = ["Control", "build_control", "Observations", "FastWeightField", "FastWeightClassifier",
           "FastWeightLayer", "FastWeightNetwork", "LatentODE", "ODERFWP", "control_options", "create_model", "model_inputs", "MODEL_NAMES",
           "Delta", "Hebb", "LearningRule", "Oja", "make_rule", "logsignature", "logsignature_windows",
           "SolverOptions", "solve"]
