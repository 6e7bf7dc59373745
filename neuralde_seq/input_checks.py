"""What a model may be given: the input type it reads, in the dtype and on the device of its parameters.

Every model checks its input with `check_model_input` before reading anything of it, so a wrong input
fails with one message naming the model, what it reads, what it got and how to build the right thing (rather
than with an attribute or matrix-product error from deep inside). `solve` runs
the same dtype and device check on the tensors it is given.

A mismatched dtype is refused, not cast: casting a float64 input into a float32 model would silently drop the
precision the data was prepared in (float32 resolves unix times only to 128 s), and casting the model would
change its parameters behind the caller's back. The message says which conversion to make.
"""

from __future__ import annotations

import difflib
import itertools
import math
import numbers
from collections.abc import Iterable

import torch

__all__ = [
    "check_model_input",
    "check_input_type",
    "check_input_matches",
    "check_matches_module",
    "module_dtype_device",
    "check_num_outputs",
    "closest_names",
    "did_you_mean",
    "unknown_name_message",
    "UnknownOptionError",
    "DTYPES",
    "floating_dtype",
    "is_positive_finite",
]

# The dtypes a user names by string (estimators' dtype, a config's or the command line's --dtype): one table.
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def floating_dtype(dtype, argument: str = "dtype") -> torch.dtype:
    """The torch dtype of a ``dtype`` setting: "float32" or "float64", or that torch dtype.

    Raises:
        ValueError: any other value, naming ``argument``.
    """
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"{argument} must be 'float32' or 'float64' (or that torch dtype), got {dtype!r}")


def is_positive_finite(value: object) -> bool:
    """Whether ``value`` is a finite real number above 0 (a bool is not a number here; NaN and inf are not
    finite)."""
    # `not value <= 0` rather than `value > 0`: numbers.Real declares only < and <= (the same on finite numbers)
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and not value <= 0


class UnknownOptionError(TypeError, ValueError):
    """An option name a function or model does not take. A TypeError, as Python's own error for an unexpected
    keyword argument, and a ValueError, as every other bad setting (so either ``except`` clause catches it)."""


def _folded(name: str) -> str:
    """A name as compared for suggestions: case folded, '_' read as '-' (``Delta_CDE`` finds ``delta-cde``)."""
    return str(name).casefold().replace("_", "-")


def closest_names(given: str, valid: Iterable[str], n: int = 3) -> list[str]:
    """The names of ``valid`` closest to ``given`` (at most ``n``, closest first), by `difflib.get_close_matches`
    on the names case folded with '_' read as '-'; a name equal to ``given`` once folded, or once its separators
    are dropped (``deltacde`` for ``delta-cde``), is the only one returned.

    Arguments:
        given: the name that was not found.
        valid: the names that exist.
        n: the most names returned.

    Returns:
        A list of names of ``valid`` (empty when none is close).
    """
    valid = list(dict.fromkeys(str(v) for v in valid))  # a name listed twice (a row label and its model) once
    folded: dict[str, list[str]] = {}
    for name in valid:
        folded.setdefault(_folded(name), []).append(name)
    key = _folded(given)
    bare = key.replace("-", "")
    exact = [name for name in valid if _folded(name) == key or _folded(name).replace("-", "") == bare]
    if exact:  # the same name spelled another way: nothing else is meant
        return exact[:n]
    close = [name for match in difflib.get_close_matches(key, list(folded), n=n, cutoff=0.6) for name in folded[match]]
    return close[:n]


def did_you_mean(given: str, valid: Iterable[str]) -> str:
    """``"did you mean 'x'?"`` (or ``"'x' or 'y'"``) for the closest names of ``valid`` to ``given``, or "" when
    none is close (`closest_names`)."""
    close = closest_names(given, valid, n=2)
    return f"did you mean {' or '.join(map(repr, close))}?" if close else ""


def unknown_name_message(kind: str, given, valid: Iterable[str], *, where: str = "", listing: str | None = None) -> str:
    """The message for a name that is not one of ``valid``: the problem, the closest valid names, and all of them.

    E.g. ``unknown_name_message("model", "delta_cde", MODEL_NAMES, listing="known models")`` is "unknown model
    'delta_cde'; did you mean 'delta-cde'? known models: hebb-ode, ...".

    Arguments:
        kind: what the name names ("model", "option", ...).
        given: the name given.
        valid: the names accepted, in the order to list them.
        where: text after the name (e.g. " for model 'delta-cde'").
        listing: how to introduce the list (default "valid {kind}s").

    Returns:
        One line of text.
    """
    valid = [str(v) for v in valid]
    hint = did_you_mean(str(given), valid)
    return (
        f"unknown {kind} {given!r}{where}; {hint + ' ' if hint else ''}"
        f"{listing or f'valid {kind}s'}: {', '.join(valid)}"
    )


_HOW_TO_BUILD = {
    "Control": "build it with neuralde_seq.build_control(times, values, lengths, ...) or "
    "neuralde_seq.model_inputs(model_name, times, values, lengths)",
    "Observations": "build it with neuralde_seq.Observations.from_tensors(times, values, lengths) or "
    "neuralde_seq.model_inputs(model_name, times, values, lengths)",
}
_WHAT_IT_IS = {
    "Control": "a Control is an interpolated path (or log-signature windows), for the neural CDE/ODE/RDE models",
    "Observations": "Observations are the raw observations, for GRU-D, GRU-Δt, ODE-RNN, ODE-RFWP, the latent "
    "models, CKCNN and CCNN",
}


def module_dtype_device(module: torch.nn.Module) -> tuple[torch.dtype | None, torch.device | None]:
    """(dtype, device) of the module's first floating point parameter or buffer; (None, None) if it has none."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype, tensor.device
    return None, None


def check_matches_module(module: torch.nn.Module, tensor: torch.Tensor, what: str, owner: str | None = None) -> None:
    """Raise if ``tensor`` (any shape) has another floating dtype or device than ``module``'s parameters.

    Arguments:
        module: the model or dynamics module.
        tensor: the input's data tensor.
        what: how to call the input in the message (e.g. "the Control").
        owner: the module's name in the message (default its class name).
    """
    dtype, device = module_dtype_device(module)
    owner = owner or type(module).__name__
    if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
        verb = "are" if what.endswith("Observations") else "is"
        raise TypeError(
            f"{owner} has {dtype} parameters but {what} {verb} {tensor.dtype}: convert one of them, "
            f"model.to({tensor.dtype}) or X.to({dtype}) (inputs are not cast, "
            "which could silently drop precision)"
        )
    if device is not None and tensor.device != device:
        verb = "are" if what.endswith("Observations") else "is"
        raise TypeError(
            f"{owner}'s parameters are on {device} but {what} {verb} on {tensor.device}: move one of them, "
            f"model.to('{tensor.device}') or X.to('{device}')"
        )


def check_input_type(model: torch.nn.Module, inputs, expected: type) -> None:
    """Raise a TypeError unless ``inputs`` is an ``expected`` (the Control or Observations class); the message
    names the model, what it reads, what it got, and how to build the right input."""
    if not isinstance(inputs, expected):
        name, got = expected.__name__, type(inputs).__name__
        what = f" ({_WHAT_IT_IS[got]})" if got in _WHAT_IT_IS else ""
        raise TypeError(f"{type(model).__name__} reads {name}, got {got}{what}: {_HOW_TO_BUILD.get(name, '')}")


def check_input_matches(model: torch.nn.Module, inputs) -> None:
    """Raise a TypeError if a Control's coefficients or Observations' values have another dtype or device than
    ``model``'s parameters."""
    data = inputs.coeffs if hasattr(inputs, "coeffs") else inputs.values
    check_matches_module(model, data, f"the {type(inputs).__name__}")


def check_model_input(model: torch.nn.Module, inputs, expected: type) -> None:
    """Raise unless ``inputs`` is an ``expected`` (a Control or Observations class) in the dtype and on the device
    of ``model``'s parameters (`check_input_type`, then `check_input_matches`; a model with checks of
    its own between the two calls them separately).

    Arguments:
        model: the model about to read ``inputs``.
        inputs: what it was given.
        expected: `Control` or `Observations`.

    Raises:
        TypeError: ``inputs`` is of another type (the message names the expected type and how to build it), or
            its dtype or device differs from the model's.
    """
    check_input_type(model, inputs, expected)
    check_input_matches(model, inputs)


def check_num_outputs(num_classes) -> int:
    """The one check of a model's output count (every model's constructor runs it).

    Arguments:
        num_classes: the number of outputs: classes, or regression targets.

    Returns:
        ``num_classes``, unchanged.

    Raises:
        ValueError: anything but a positive integer (None included: only the models that can run without an
            output head accept None, and they do not call this).
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(
            f"num_classes (outputs: classes, or regression targets) must be a positive integer, got {num_classes!r}"
        )
    return num_classes
