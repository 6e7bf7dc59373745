"""Models, and the registry that creates them by name for the command line and benchmark scripts.

A registry entry gives the model's constructor, its defaults and the input it reads: a control path
(`build_control` with the entry's options) or the raw observations
(`Observations`). `model_inputs` builds that input, so that
``neuralde-seq --models delta-cde`` and a user's own script build the same thing. Every keyword of the
model's constructor can be overridden in `create_model`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..controls import Control, ControlOptions, build_control, parse_control_options
from ..input_checks import UnknownOptionError, unknown_name_message
from ..observations import Observations, observation_span
from ..rules import rule_names, rule_title
from ..solvers import RK4, Method, SolverOptions, parse_solver, solver_options
from .ccnn import CCNN
from .ckconv import CKCNN
from .fast_weights import FastWeightClassifier, FastWeightLayer, FastWeightNetwork, FeedForward
from .gating import TimeWarpGatedRNN, chrono_bias
from .gru_observations import GRUD, GRUDeltaT
from .gru_ode import GRUODE
from .latent import LatentODE
from .linear_cde import LinearCDE, control_depth_of, path_scales
from .ncde import LogODEVectorField, NeuralCDE, roughness_scales
from .ode_rnn import ODERNN
from .rfwp import ODERFWP, RFWPCell
from .stateful_odenet import StatefulODENet

__all__ = [
    "FastWeightClassifier",
    "FastWeightLayer",
    "FastWeightNetwork",
    "FeedForward",
    "NeuralCDE",
    "LogODEVectorField",
    "GRUODE",
    "TimeWarpGatedRNN",
    "chrono_bias",
    "GRUDeltaT",
    "GRUD",
    "ODERNN",
    "ODERFWP",
    "RFWPCell",
    "LatentODE",
    "CKCNN",
    "CCNN",
    "StatefulODENet",
    "LinearCDE",
    "path_scales",
    "control_depth_of",
    "create_model",
    "control_options",
    "registered_control_options",
    "check_control_overrides",
    "model_defaults",
    "model_entry",
    "model_inputs",
    "input_options",
    "model_option_names",
    "check_model_options",
    "register_model",
    "ModelEntry",
    "MODEL_NAMES",
    "FAST_WEIGHT_MODEL_NAMES",
    "TRAINING_DEFAULTS",
    "training_defaults",
]


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """How to build a registered model and its input.

    Attributes:
        constructor: called as ``constructor(in_channels, num_classes, **options)``.
        defaults: default keyword arguments of the constructor.
        inputs: "control" (the model reads a Control built with ``control``) or "observations".
        control: the control options, for inputs="control": `build_control` keywords as written (the spelling the
            runner records in every result, e.g. ``dict(interpolation="linear", time_channel=True)``), read by
            `neuralde_seq.controls.parse_control_options`, or a `ControlOptions`.
        takes_solver: whether the constructor accepts ``solver=SolverOptions(...)``.
        from_inputs: optional function of the built input and the options given (registry defaults and
            overrides) returning constructor options that depend on the input (e.g. the NRDE's initial channels, a
            basis's time range), used when `create_model` is given the input itself.
        description: what the model is, in one line of at most 45 characters (``neuralde-seq models`` lists it
            beside the name and the input), e.g. "linear NCDE (SLiCE), diagonal-plus-low-rank".
        training: the training settings the estimators give it where theirs are "auto" (`training_defaults`):
            any of ``schedule``, ``augment_crop``, ``augment_drop_rate``, each set only where it was decided on one
            half of the proxy suite and held on the other (docs/benchmarks.md, "The default model's training").
    """

    constructor: Callable
    defaults: dict
    inputs: str = "control"
    control: Mapping | ControlOptions = dataclasses.field(default_factory=dict)
    takes_solver: bool = True
    from_inputs: Callable | None = None
    description: str = ""
    training: dict = dataclasses.field(default_factory=dict)


_REGISTRY: dict[str, ModelEntry] = {}
# The estimators' training settings that a model may set for itself, and their values where it does not.
TRAINING_DEFAULTS = {"schedule": "constant", "augment_crop": 1.0, "augment_drop_rate": 0.0}


def register_model(name: str, entry: ModelEntry) -> None:
    """Add a model to the registry.

    Arguments:
        name: the registry name (e.g. "delta-cde"), not yet taken.
        entry: the `ModelEntry` saying how to build the model and its input.

    Raises:
        ValueError: the name is taken, ``entry.inputs`` is neither "control" nor "observations", control options
            that `parse_control_options` refuses (or any for a model reading observations), or
            ``entry.training`` names an unknown setting or schedule (the values are checked by the estimators).
    """
    if name in _REGISTRY:
        raise ValueError(f"model name {name!r} is already registered")
    if entry.inputs not in ("control", "observations"):
        raise ValueError(f"inputs must be 'control' or 'observations', got {entry.inputs!r}")
    if entry.inputs == "observations" and entry.control:
        raise ValueError(f"model {name!r} reads observations: its entry takes no control options")
    try:
        parse_control_options(entry.control, where=f" for model {name!r}")
    except (TypeError, ValueError) as error:
        raise type(error)(f"model {name!r}'s control options: {error}") from None
    unknown = [k for k in entry.training if k not in TRAINING_DEFAULTS]
    if unknown:
        raise ValueError(
            "training: "
            + unknown_name_message("setting", unknown[0], TRAINING_DEFAULTS, listing="settings the registry sets")
        )
    if entry.training.get("schedule", "constant") not in ("constant", "cosine"):  # training.schedules.SCHEDULES
        raise ValueError(f"training schedule must be 'constant' or 'cosine', got {entry.training['schedule']!r}")
    _REGISTRY[name] = entry


_INTERPOLATED = dict(interpolation="hermite_cubic", time_channel=True)
_LOGSIG = dict(interpolation="logsignature", time_channel=True, depth=2, step=4)
# The CT-FWPs' RDE form reads each window's log-signature and the path's point at the window's start: from the
# log-signatures alone it never sees the level of the series (docs/design.md#choices).
_LOGSIG_WITH_LEVEL = dict(_LOGSIG, window_start_values=True)


def _basis_time_range(control: Control, options: dict) -> dict:
    """A basis-expanded model's time range: the training input's span of s, from its first knot to the last
    sample's end (nothing without a basis)."""
    if options.get("basis") is None:
        return {}
    return {"basis_time_range": (float(control.knots[0]), float(control.knots[int(control.end_index.max())]))}


# Oja's CDE form decays W at the rate σ(β)|v|² with v = tanh(W_v X') in [-1, 1]^d: where a spike saturates v the rate
# reaches d_head (16), and one rk4 step per knot (stable up to 2.8) blew up on a spiky 2,000-point series at step 2;
# two steps per knot trained (tests/test_defaults.py).
_SOLVER_DEFAULTS = {"oja-cde": RK4(step_size=0.5)}
# The estimators' default model trains with a cosine schedule and random crops (80 %) and drops (20 %) of every
# batch, each decided on half A of the proxy suite and confirmed on half B (3 seeds, docs/benchmarks.md, "The
# default model's training"): the schedule +2.0 and +3.0 points, every set's seed spread under 6 points against 17
# (OSULeaf), 12 (ArrowHead) and 10 (PickupGestureWiimoteZ) at a constant rate; the augmentation on top +2.5 and
# +5.6 (ACSF1 +11, PickupGestureWiimoteZ +13, OSULeaf -3; ArrowHeadx2000 +11). The schedule did not hold for
# slice-diag, delta-cde, gru-d or hebb-rde, which learn too slowly in 100 epochs to spare the annealed steps.
_TRAINING = {"delta-rde": {"schedule": "cosine", "augment_crop": 0.8, "augment_drop_rate": 0.2}}
_FORM_TEXT = {"ode": "ODE in time", "cde": "CDE in dX", "rde": "log-signature RDE"}
# The rules registered at import (the built-in ones): a rule registered later is built with rule=... directly.
for _rule in rule_names():
    for _form, _control in (("ode", _INTERPOLATED), ("cde", _INTERPOLATED), ("rde", _LOGSIG_WITH_LEVEL)):
        _name = f"{_rule}-{_form}"
        _defaults: dict[str, Any] = dict(rule=_rule, form=_form)
        if _name in _SOLVER_DEFAULTS:
            _defaults["solver"] = _SOLVER_DEFAULTS[_name]  # a method object: each model wraps it in options of its own
        register_model(
            _name,
            ModelEntry(
                FastWeightClassifier,
                _defaults,
                "control",
                _control,
                from_inputs=_basis_time_range,
                description=f"{rule_title(_rule)} fast weights, {_FORM_TEXT[_form]}",
                training=_TRAINING.get(_name, {}),
            ),
        )


def _ncde_inputs(control: Control, options: dict) -> dict:
    """The NCDE's and NRDE's options that the training control fixes: the scales that keep the control's summed
    quadratic variation within a budget (on 2,000-point JapaneseVowels the unscaled path drove z to norms of 200 and
    the first loss to 41, issue 33; `roughness_scales`), and a basis's time range."""
    scales = {} if options.get("form", "cde") == "log-ode" else {"control_scales": roughness_scales(control)}
    return {**scales, **_basis_time_range(control, options)}


register_model(
    "ncde",
    ModelEntry(
        NeuralCDE,
        dict(hidden=32, width=64, depth=2),
        "control",
        _INTERPOLATED,
        from_inputs=_ncde_inputs,
        description="neural CDE (Kidger et al. 2020)",
    ),
)
register_model(
    "nrde",
    ModelEntry(
        NeuralCDE,
        dict(form="rde", hidden=32, width=64, depth=2),
        "control",
        dict(_LOGSIG, depth=1, step=2),
        from_inputs=lambda control, options: dict(
            initial_channels=control.initial_value.shape[-1], **_ncde_inputs(control, options)
        ),
        description="neural rough DE on log-signature windows",
    ),
)
register_model(
    "gru-ode",
    ModelEntry(GRUODE, dict(hidden=32), "control", _INTERPOLATED, description="GRU-ODE on the interpolated path"),
)
register_model(
    "warp-gated-ode",
    ModelEntry(
        TimeWarpGatedRNN,
        dict(hidden=32),
        "control",
        _INTERPOLATED,
        description="gated ODE-RNN, invariant to time warps",
    ),
)
register_model(
    "gru-dt",
    ModelEntry(
        GRUDeltaT,
        dict(hidden=32),
        "observations",
        takes_solver=False,
        description="GRU over observations, time gaps as input",
    ),
)
register_model(
    "gru-d",
    ModelEntry(
        GRUD,
        dict(hidden=32),
        "observations",
        takes_solver=False,
        description="GRU-D: GRU decaying since last observation",
    ),
)
# ODE-RNN's ODE in units of the training data's longest span (unless given), as the authors' code normalises times.
register_model(
    "ode-rnn",
    ModelEntry(
        ODERNN,
        dict(hidden=32, width=64, depth=1),
        "observations",
        from_inputs=lambda observations, options: dict(
            time_unit=observation_span(observations.times, observations.lengths) or 1.0
        ),
        description="ODE between observations, GRU update at each",
    ),
)
for _rule in rule_names():
    register_model(
        f"{_rule}-ode-rfwp",
        ModelEntry(
            ODERFWP,
            dict(rule=_rule, hidden=32, heads=4, width=64, depth=1),
            "observations",
            description=f"ODE-RNN, recurrent {rule_title(_rule)} fast weights",
        ),
    )
register_model(
    "latent-ode-rnn",
    ModelEntry(
        LatentODE,
        dict(encoder="ode-rnn", latent=16, hidden=32),
        "observations",
        description="latent ODE (VAE), ODE-RNN encoder",
    ),
)
register_model(
    "latent-ode-rfwp",
    ModelEntry(
        LatentODE,
        dict(encoder="ode-rfwp", rule="delta", latent=16, hidden=32),
        "observations",
        description="latent ODE (VAE), ODE-RFWP encoder",
    ),
)
register_model(
    "ckcnn",
    ModelEntry(
        CKCNN,
        dict(hidden=32, blocks=2),
        "observations",
        takes_solver=False,
        description="CNN with continuous kernels (CKConv)",
    ),
)
register_model(
    "ccnn",
    ModelEntry(
        CCNN,
        dict(hidden=32, blocks=4, kernel_size=64),
        "observations",
        takes_solver=False,
        description="continuous CNN (FlexConv, MAGNet kernels)",
    ),
)
# Structured linear CDEs (SLiCE, Walker et al. 2025) on the increments of a linear control with a time channel (or
# on log-signature windows of depth 1-2). The input fixes the depth read and each channel's scale (the training
# paths' spread and roughness: a long series' flow stays finite at init, docs/linear_cdes.md).
_LINEAR = dict(interpolation="linear", time_channel=True)


def _linear_cde_inputs(control: Control, options: dict) -> dict:
    return {"control_depth": control_depth_of(control), "channel_scales": path_scales(control)}


_STRUCTURES = {"diagonal": "diagonal", "block": "block-diagonal", "dense": "dense", "dplr": "diagonal-plus-low-rank"}
for _name, _defaults in (
    ("slice-diag", dict(hidden=64, structure="diagonal")),
    ("slice-block", dict(hidden=64, structure="block", block_size=4)),
    ("slice-dense", dict(hidden=32, structure="dense")),
    # DPLR: the low-rank form does not survive composition, so its parallel scan works on
    # dense matrices (O(H³) each) on every device; the sequential scan's step is O(H·C·r)
    ("slice-dplr", dict(hidden=64, structure="dplr", rank=4, scan="sequential")),
):
    register_model(
        _name,
        ModelEntry(
            LinearCDE,
            _defaults,
            "control",
            _LINEAR,
            takes_solver=False,
            from_inputs=_linear_cde_inputs,
            description=f"linear NCDE (SLiCE), {_STRUCTURES[str(_defaults['structure'])]}",
        ),
    )
# Log-NCDE (Walker et al. 2024): the NCDE's field by the log-ODE method on depth-2 log-signature windows, with the
# authors' field (SiLU, final tanh, weights and biases / 1000 at init); their Lip(2) penalty is the training's
# penalty_weight (docs/log_ncde.md). The windows' depth and the path's channels come from the training control.
register_model(
    "log-ncde",
    ModelEntry(
        NeuralCDE,
        dict(form="log-ode", hidden=64, width=64, depth=2, activation="silu", field_init_scale=1e-3),
        "control",
        dict(_LOGSIG, depth=2, step=4),
        from_inputs=lambda control, options: dict(
            NeuralCDE.log_ode_options(control), **_basis_time_range(control, options)
        ),
        description="Log-NCDE: neural CDE by the log-ODE method",
    ),
)
# The time channel in units of the training set's span (unless given): one scale for every split.
register_model(
    "stateful-odenet",
    ModelEntry(
        StatefulODENet,
        dict(hidden=32),
        "observations",
        takes_solver=False,
        from_inputs=lambda observations, options: dict(
            time_unit=observation_span(observations.times, observations.lengths) or 1.0
        ),
        description="stateful ODE-Net: ODE in depth, basis weights",
    ),
)


MODEL_NAMES = tuple(_REGISTRY)
FAST_WEIGHT_MODEL_NAMES = tuple(name for name, entry in _REGISTRY.items() if entry.constructor is FastWeightClassifier)


def _entry(name: str) -> ModelEntry:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(unknown_name_message("model", name, _REGISTRY, listing="known models"))
    return _REGISTRY[name]


def model_entry(name: str) -> ModelEntry:
    """The registry entry of the model ``name``.

    Arguments:
        name: one of `MODEL_NAMES`.

    Returns:
        Its `ModelEntry` (constructor, defaults, input kind, control options, solver use).

    Raises:
        ValueError: an unknown name.
    """
    return _entry(name)


def training_defaults(name: str) -> dict:
    """The training settings the estimators give the model ``name`` where theirs are "auto": `TRAINING_DEFAULTS`
    with the registry entry's ``training`` on top (e.g. ``training_defaults("delta-rde")["schedule"]`` is
    "cosine").

    Arguments:
        name: one of `MODEL_NAMES`.

    Returns:
        A new dict: ``schedule``, ``augment_crop``, ``augment_drop_rate``.

    Raises:
        ValueError: an unknown name.
    """
    return {**TRAINING_DEFAULTS, **_entry(name).training}


def _keyword_defaults(constructor) -> dict:
    """The keyword defaults of ``constructor``, following ``**options`` that it forwards to the class named by
    its ``forwards_options_to`` attribute (e.g. FastWeightClassifier's layer options to FastWeightLayer)."""
    defaults = {}
    for parameter in inspect.signature(constructor).parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            target = getattr(constructor, "forwards_options_to", None)
            if target is not None:
                defaults.update(_keyword_defaults(target))
        elif parameter.default is not inspect.Parameter.empty and parameter.name not in ("in_channels", "num_classes"):
            defaults[parameter.name] = parameter.default
    return defaults


def model_defaults(name: str) -> dict:
    """Every option the model ``name`` gets when `create_model` is given none: its constructor's
    keyword defaults with the registry's on top (the one place the defaults live; the CLI, the estimators and
    the benchmark configs start from these). ``solver`` is the `SolverOptions` a model gets without one.

    E.g. ``model_defaults("delta-cde")["d_model"]`` is 64. Options that depend on the input (the NRDE's
    ``initial_channels``) are listed as None, and options with a default that the input replaces unless given
    (stateful-odenet's ``time_unit``: the training set's span; a basis model's ``basis_time_range``) as that
    default: `create_model`, given the input, fills them in.

    Arguments:
        name: one of `MODEL_NAMES`.

    Returns:
        A new dict from option name to default value (``in_channels`` and ``num_classes`` left out).

    Raises:
        ValueError: an unknown name.
    """
    entry = _entry(name)
    defaults = {**_keyword_defaults(entry.constructor), **entry.defaults}
    if entry.takes_solver:
        # the options in force (a registry default method wrapped, or the defaults), so that a run recorded under
        # another default solver is told apart
        defaults["solver"] = solver_options(defaults.get("solver"))
    return defaults


def _keyword_names(constructor) -> list[str] | None:
    """Every keyword option of ``constructor`` (following ``**options`` forwarded to its ``forwards_options_to``),
    or None where it takes ``**options`` it does not say where to."""
    names = []
    for parameter in inspect.signature(constructor).parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            target = getattr(constructor, "forwards_options_to", None)
            forwarded = None if target is None else _keyword_names(target)
            if forwarded is None:
                return None
            names += forwarded
        elif parameter.kind is not inspect.Parameter.VAR_POSITIONAL and parameter.name not in (
            "self",
            "in_channels",
            "num_classes",
        ):
            names.append(parameter.name)
    return list(dict.fromkeys(names))


def model_option_names(name: str) -> tuple[str, ...] | None:
    """The options `create_model` takes for the model ``name``: every keyword of its constructor (and of the
    class it forwards ``**options`` to), ``solver`` only for the models solved by a differential equation solver.

    Arguments:
        name: one of `MODEL_NAMES`.

    Returns:
        A tuple of option names, or None for a constructor taking ``**options`` that no check can list.

    Raises:
        ValueError: an unknown name.
    """
    entry = _entry(name)
    names = _keyword_names(entry.constructor)
    if names is None:
        return None
    names = [n for n in names if n != "solver"] + (["solver"] if entry.takes_solver else [])
    return tuple(names)


def check_model_options(name: str, options, *, spelled: str = "option") -> None:
    """Raise `UnknownOptionError` (a TypeError and a ValueError) for an option the model ``name`` does not
    take, naming the closest valid options and listing them all.

    Arguments:
        name: one of `MODEL_NAMES`.
        options: the option names given (a mapping or an iterable of names).
        spelled: how the message calls an option (e.g. "key of model_options").
    """
    valid = model_option_names(name)
    if valid is None:
        return
    unknown = [k for k in options if k not in valid]
    if unknown:
        raise UnknownOptionError(
            unknown_name_message(spelled, unknown[0], valid, where=f" for model {name!r}", listing="valid options")
        )


def control_options(name: str) -> dict:
    """The control options model ``name`` is registered with, as `build_control` keywords (as the registry writes
    them: the runner records them in every result).

    Arguments:
        name: one of `MODEL_NAMES`.

    Returns:
        A new dict of `build_control` keyword arguments (empty for models that read raw observations).

    Raises:
        ValueError: an unknown name.
    """
    control = _entry(name).control
    return control.to_keywords() if isinstance(control, ControlOptions) else dict(control)


def registered_control_options(name: str) -> ControlOptions:
    """The `ControlOptions` model ``name`` is registered with (`control_options`, read).

    Arguments:
        name: one of `MODEL_NAMES`.

    Returns:
        The options (``ControlOptions()`` for a model that reads raw observations).

    Raises:
        ValueError: an unknown name.
    """
    return parse_control_options(_entry(name).control)


def model_inputs(
    name: str,
    times: torch.Tensor,
    values: torch.Tensor,
    lengths: torch.Tensor | None = None,
    static: torch.Tensor | None = None,
    **control_overrides,
) -> Control | Observations:
    """The input the model ``name`` reads, built from observations (see `create_model`).

    Arguments:
        name: one of `MODEL_NAMES`.
        times: (B, T) observation times, strictly increasing within each sample's length.
        values: (B, T, C) observations, NaN for missing.
        lengths: (B,) number of valid observations per sample; None (default): all T.
        static: (B, S) static features, or None (default); only for models that read raw observations
            (a `Control` has none: give them to the model's ``forward``).
        **control_overrides: `build_control` keywords on top of the registered control options
            (`check_control_overrides`); not for models that read raw observations.

    Returns:
        A `Control` or `Observations`;
            its ``channels`` is the ``in_channels`` to give `create_model`. Build it once per data split
            and slice it per batch.

    Raises:
        ValueError: an unknown name, control options for a model that reads raw observations, static
            features for a model that reads a control, or observations `build_control` or
            `Observations.from_tensors` refuses.
        UnknownOptionError: a control option `build_control` does not take (the message names the closest).
    """
    entry = _entry(name)
    if static is not None and entry.inputs != "observations":
        # a Control has no place for them: dropping them here would train without them, silently
        raise ValueError(
            f"model {name!r} reads a control path, which carries no static features: give "
            "static= to the model's forward (models that read static features take "
            "ModelArguments(control, static)), not to model_inputs"
        )
    if entry.inputs == "observations":
        if control_overrides:
            raise ValueError(
                f"model {name!r} reads raw observations: control options {sorted(control_overrides)} do not apply"
            )
        return Observations.from_tensors(times, values, lengths, static)
    return build_control(times, values, lengths, check_control_overrides(name, control_overrides))


def check_control_overrides(name: str, overrides: Mapping | ControlOptions | None) -> ControlOptions:
    """Model ``name``'s control options with ``overrides`` on top: `parse_control_options` with the registered
    options as the base (a `ControlOptions` replaces them whole).

    Arguments:
        name: the model's registry name.
        overrides: `build_control` keywords (a config row's ``control``, an estimator's ``control_options``), a
            `ControlOptions`, or None.

    Returns:
        The options (possibly standing for values of the training split: ``time_unit="auto"``, ...).

    Raises:
        UnknownOptionError: an unknown option name, naming the closest.
        ValueError: a value its option refuses (named).
    """
    return parse_control_options(overrides, base=registered_control_options(name), where=f" for model {name!r}")


def input_options(name: str, inputs: Control | Observations, overrides: Mapping | None = None) -> dict:
    """The options of model ``name`` that its (training) input fixes, as `create_model` fills them in where
    ``overrides`` does not give them (None: not given): e.g. an NCDE's ``control_scales``, a linear CDE's
    ``channel_scales``, ODE-RNN's ``time_unit``, a basis's ``basis_time_range``; {} for a model without any.

    Plain numbers and tuples of them: `neuralde_seq.training.run.fit_and_evaluate` records them in its checkpoints,
    so that `neuralde_seq.load_run` rebuilds the model from its number of input channels alone
    (``create_model(name, inputs.channels, num_classes, **overrides, **input_options(...))`` is the model
    ``create_model(name, inputs, num_classes, **overrides)`` builds).

    Arguments:
        name: one of `MODEL_NAMES`.
        inputs: the input the model reads (``model_inputs(...)``).
        overrides: the constructor options given (default none).

    Raises:
        ValueError: an unknown name.
        TypeError: ``inputs`` of the kind the model does not read.
    """
    entry = _entry(name)
    expected = Observations if entry.inputs == "observations" else Control
    if not isinstance(inputs, expected):
        # Its channels would silently size the model for an input it cannot read.
        raise TypeError(
            f"model {name!r} reads {expected.__name__}, got a {type(inputs).__name__}: build its "
            f"input with neuralde_seq.model_inputs({name!r}, times, values, lengths)"
        )
    if entry.from_inputs is None:
        return {}
    options = {**entry.defaults, **dict(overrides or {})}
    derived = entry.from_inputs(inputs, options)
    return {key: value for key, value in derived.items() if options.get(key) is None}


def create_model(
    name: str,
    in_channels: int | Control | Observations,
    num_classes: int | None,
    *,
    solver: SolverOptions | Method | str | Mapping | None = None,
    **overrides,
):
    """A new model by registry name, e.g. ``create_model("delta-cde", inputs, 9, d_model=64)``.

    Arguments:
        name: one of `MODEL_NAMES`.
        in_channels: the input the model reads (``model_inputs(...)``), or its number of channels. Given
            the input, options that depend on it are filled in too (e.g. the NRDE's initial channels).
        num_classes: number of outputs: classes (>= 2) for classification, targets (>= 1) for regression;
            None for the models that can run without an output head (the ODE-RFWPs and latent ODEs, used as
            encoders or generative models).
        solver: `SolverOptions`, a method object such as ``RK4(step_size=0.5)``, or the edges' spellings that
            `neuralde_seq.solvers.parse_solver` reads: a method name such as "rk4" or "dopri5" (``RK4()``,
            ``Dopri5()``) or a mapping of its options (``{"method": "rk4", "step_size": 0.5}``); differential
            equation models only.
        **overrides: constructor arguments replacing the registry defaults.

    Returns:
        The new model, a ``torch.nn.Module`` (parameters in torch's default dtype, on the CPU).

    Raises:
        ValueError: an unknown name (the message names the closest), or ``solver`` for a model that is not solved
            by a differential equation solver, or an unknown method name (and whatever the constructor refuses).
        UnknownOptionError: an option the model does not take (a TypeError and a ValueError; the message names
            the closest valid options and lists them).
        TypeError: ``in_channels`` is an input of the kind the model does not read, or ``solver`` is none of
            the forms above.
    """
    entry = _entry(name)
    # Named before anything is built: the constructor's own TypeError names neither the model nor the valid options.
    check_model_options(name, overrides)
    solver = parse_solver(solver)  # every spelling (a method name, a dict, objects) read in one place
    options = {**entry.defaults, **overrides}
    if isinstance(in_channels, (Control, Observations)):
        options.update(input_options(name, in_channels, overrides))
        in_channels = in_channels.channels
    if solver is not None:
        if not entry.takes_solver:
            raise ValueError(f"model {name!r} is not solved by a differential equation solver: drop solver=")
        options["solver"] = solver
    return entry.constructor(in_channels, num_classes, **options)
