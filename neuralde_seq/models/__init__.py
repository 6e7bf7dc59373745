"""Models, and the registry that creates them by name for the command line and benchmark scripts.

A registry entry gives the model's constructor defaults and the options of the control it reads
(:func:`control_options`), so that ``neuralde-seq --models delta-cde`` and a user's own script build the
same thing. Every keyword of the model's constructor can be overridden.
"""
from __future__ import annotations

from ..solvers import SolverOptions
from .fast_weights import FastWeightClassifier, FastWeightLayer, FastWeightNetwork, FeedForward

__all__ = ["FastWeightClassifier", "FastWeightLayer", "FastWeightNetwork", "FeedForward", "create_model",
           "control_options", "MODEL_NAMES"]

_INTERPOLATED = dict(method="hermite_cubic", time_channel=True)
_LOGSIG = dict(method="logsignature", time_channel=True, depth=2, step=4)

# name -> (constructor, default keyword arguments, control options)
_REGISTRY = {}
for _rule in ("hebb", "oja", "delta", "delta-post"):
    for _form, _control in (("ode", _INTERPOLATED), ("cde", _INTERPOLATED), ("rde", _LOGSIG)):
        _REGISTRY[f"{_rule}-{_form}"] = (FastWeightClassifier, dict(rule=_rule, form=_form), _control)

MODEL_NAMES = tuple(_REGISTRY)


def _entry(name: str):
    if name not in _REGISTRY:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODEL_NAMES)}")
    return _REGISTRY[name]


def control_options(name: str) -> dict:
    """Keyword arguments of :func:`~neuralde_seq.controls.build_control` for the model ``name``."""
    return dict(_entry(name)[2])


def create_model(name: str, in_channels: int, num_classes: int, *, solver: SolverOptions | dict | None = None,
                 **overrides):
    """A new model by registry name, e.g. ``create_model("delta-cde", control.channels, 9, d_model=64)``.

    Arguments:
        name: one of :data:`MODEL_NAMES`.
        in_channels: channels of the control the model reads.
        num_classes: number of classes.
        solver: :class:`~neuralde_seq.solvers.SolverOptions` or a dict of its fields.
        **overrides: constructor arguments replacing the registry defaults.
    """
    constructor, defaults, _ = _entry(name)
    if isinstance(solver, dict):
        solver = SolverOptions(**solver)
    return constructor(in_channels, num_classes, solver=solver, **{**defaults, **overrides})
