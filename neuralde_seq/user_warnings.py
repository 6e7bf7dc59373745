"""Warnings a user can act on: attributed to the user's own call, with the fix spelled the way they gave options.

A warning raised deep inside a model's forward pass would otherwise point at ``torch/nn/modules/module.py``
(the frame that called ``forward``) and spell the fix as a constructor argument, though the user gave the
options through an estimator's ``model_options`` or a config row's ``options``. `warn_user` points the warning
at the first frame outside this package and the libraries it runs under (torch, scikit-learn, joblib), and
`spell_options` writes the fix in the form the model was built with: the estimators and the benchmark runner
build their models inside `options_spelled_as`, and a model records `current_spelling` when it is built.
Saying a warning once per model (not once per batch) is up to the model: it keeps a flag.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import sys
import warnings
from collections.abc import Iterator, Mapping

__all__ = [
    "IgnoredOptionWarning",
    "OptionSpelling",
    "options_spelled_as",
    "current_spelling",
    "spell_options",
    "warn_user",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The libraries between a user's call and a model's forward pass (torch's Module.__call__, scikit-learn's and
# joblib's cross-validation loops), skipped like this package's own frames.
_LIBRARIES = ("torch", "sklearn", "joblib")


class IgnoredOptionWarning(UserWarning):
    """An option given to every model of a search (e.g. an estimator's ``control_options``) that this model does not
    read: set aside, said once per fit."""


@dataclasses.dataclass(frozen=True)
class OptionSpelling:
    """How the user gives a model's options.

    Attributes:
        style: "arguments" (constructor or `create_model` keyword arguments), "model_options" (an estimator's
            ``model_options`` dict) or "config" (a benchmark config row's ``options`` mapping).
        given: the options the user gave (kept in the fix, with the fix's options on top).
        row: the config row's label (style "config").
    """

    style: str = "arguments"
    given: tuple = ()
    row: str | None = None


# (a frozen dataclass: the default is never mutated)
_SPELLING: contextvars.ContextVar[OptionSpelling] = contextvars.ContextVar(
    "neuralde_seq_option_spelling",
    default=OptionSpelling(),  # noqa: B039
)


@contextlib.contextmanager
def options_spelled_as(style: str, given: Mapping | None = None, row: str | None = None) -> Iterator[None]:
    """Models built inside spell their fixes in ``style`` (see `OptionSpelling`).

    Arguments:
        style: "arguments", "model_options" or "config".
        given: the options the user gave, or None.
        row: the config row's label, for style "config".
    """
    if style not in ("arguments", "model_options", "config"):
        raise ValueError(f"style must be 'arguments', 'model_options' or 'config', got {style!r}")
    token = _SPELLING.set(OptionSpelling(style, tuple(dict(given or {}).items()), row))
    try:
        yield
    finally:
        _SPELLING.reset(token)


def current_spelling() -> OptionSpelling:
    """The spelling in force (`options_spelled_as`; "arguments" outside it): a model records it when built."""
    return _SPELLING.get()


def _yaml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def spell_options(spelling: OptionSpelling, drop: tuple[str, ...] = (), **options) -> str:
    """The options set the way the user sets them, as an instruction, e.g. for ``mode="irregular"``:
    "build the model with mode='irregular'", "give model_options={'hidden': 16, 'mode': 'irregular'}" or
    "give the config row 'ckcnn' options: {hidden: 16, mode: irregular}".

    Arguments:
        spelling: the `OptionSpelling` the model was built under (`current_spelling`).
        drop: options the user gave that the fix removes (they do not apply with it).
        **options: the options of the fix.
    """
    merged = {**{k: v for k, v in spelling.given if k not in drop}, **options}
    if spelling.style == "model_options":
        return f"give model_options={merged!r}"
    if spelling.style == "config":
        row = f" {spelling.row!r}" if spelling.row else ""
        body = ", ".join(f"{k}: {_yaml_value(v)}" for k, v in merged.items())
        return f"give the config row{row} options: {{{body}}}"
    return "build the model with " + ", ".join(f"{k}={v!r}" for k, v in options.items())


def _is_library(filename: str) -> bool:
    """Whether a frame's file is this package's or an installed torch, scikit-learn or joblib file."""
    if filename.startswith(_PACKAGE_DIR):
        return True
    parts = filename.replace("\\", "/").split("/")
    return any(name in parts for name in _LIBRARIES) and ("site-packages" in parts or "dist-packages" in parts)


def warn_user(message: str, category: type[Warning]) -> None:
    """`warnings.warn` pointing at the user's call: the first frame outside this package and torch,
    scikit-learn and joblib (the outermost frame where every one is theirs), not at the line inside the package
    or torch that raised it.

    Arguments:
        message: the warning's text: the problem, then the fix (`spell_options`).
        category: the Warning subclass.
    """
    frame, level = sys._getframe(1), 2  # stacklevel 1 is this function, 2 its caller
    while frame.f_back is not None and _is_library(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
