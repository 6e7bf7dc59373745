"""The fitted input spec: what turns a user's series into a model's input, in one object.

A model reads a `Control` (the CDE, RDE and ODE models) or `Observations` (the recurrent and convolutional ones).
Between the series a user has and that input lie four choices, each of which must be the same for every split:

* **the model** (its registry name): which input it reads, and the control options it is registered with;
* **the time unit**: every time is divided by it before anything else, for a control (the time channel, and the
  solver's parameter s with ``parametrization="time"``) and for observations alike. ``"auto"`` is the longest span
  of the training series (`observation_span`), so that a training series spans at most [0, 1]; a number is a unit
  of the user's choosing (e.g. 3600 for hourly data stamped in seconds); None leaves the times as given;
* **the channel statistics**: with ``standardise=True`` each channel is centred and scaled by the mean and standard
  deviation of its observed training values (`channel_statistics`), NaN staying NaN. The benchmark tasks
  standardise in their data protocol (`neuralde_seq.data.protocols`: some channels, e.g. counts and 0/1 flags, are
  left as they are, and the practitioner's reference methods read the same standardised series), so the runner
  fits its spec with ``standardise=False``; the scikit-learn estimators fit theirs with ``standardise=True``;
* **the control**: its interpolation and options (`build_control`'s keywords: the model's registered ones with
  the given ones on top), and whether the model reads static features beside it.

`InputSpec.fit` fixes them on the training data (every ``"auto"`` is resolved there and nowhere else);
`InputSpec.transform` gives any split's input with them. The spec is plain data: `InputSpec.to_dict` is JSON, saved
in the runner's checkpoints (a resumed run with another spec is refused) and results, and the estimators keep
theirs as ``input_spec_`` (pickled with them). Observation models that integrate an ODE over the gaps (ODE-RNN,
stateful ODE-Net) measure them in the training span of the times they are given (their registry default), so
their dynamics are the same with any ``time_unit``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import torch

from ..controls import Control, renamed_control_options, time_unit_value
from ..data.transforms.standardisation import channel_statistics, standardised
from ..models import check_control_overrides, control_options, model_entry, model_inputs
from ..observations import Observations
from .objectives import ModelArguments

__all__ = ["InputSpec"]


def _lengths_of(data) -> torch.Tensor | None:
    return getattr(data, "lengths", None)


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """What turns series into the input of one model, fitted on the training split (module docstring).

    Build it with `InputSpec.fit`; `transform` gives the input of any split. Fields:

    Attributes:
        model: the registry name of the model (`neuralde_seq.models.MODEL_NAMES`).
        control: the `build_control` options in force (the model's registered ones with the given ones on top;
            ``time_unit`` is the field below); empty for a model that reads observations.
        time_unit: the resolved time unit (None: times as given).
        channel_mean, channel_scale: the (C,) training statistics that standardise each channel, or None (values as
            given).
        reads_static: a control model that also reads the samples' static features: `transform` gives
            ``ModelArguments(control, static)``.
    """

    model: str
    control: Mapping[str, Any]
    time_unit: float | None
    channel_mean: tuple[float, ...] | None = None
    channel_scale: tuple[float, ...] | None = None
    reads_static: bool = False

    @classmethod
    def fit(cls, model: str, train, *, control: Mapping | None = None, time_unit=None, standardise: bool = False,
            reads_static: bool = False) -> "InputSpec":
        """The spec of model ``model``, fitted on ``train``.

        Arguments:
            model: a registry name (`neuralde_seq.models.MODEL_NAMES`).
            train: the training data: anything with ``times`` (N, T), ``values`` (N, T, C) (NaN where missing) and
                optionally ``lengths`` (N,), e.g. an `IrregularDataset`, `Observations` or `SyntheticSequences`.
            control: `build_control` options that replace the model's registered ones (control models only). A
                ``time_unit`` among them is read as the argument below (the spelling of YAML rows and the
                estimators' ``control_options``).
            time_unit: None (default), a positive number, or ``"auto"`` (resolved here on ``train``).
            standardise: standardise each channel with ``train``'s statistics of its observed values.
            reads_static: a control model that reads static features beside its control.

        Returns:
            The fitted `InputSpec`.

        Raises:
            ValueError: an unknown model, control options for a model that reads observations, ``time_unit`` given
                twice or invalid, a channel with no observed value when standardising.
            UnknownOptionError: a control option `build_control` does not take.
        """
        entry = model_entry(model)
        control = renamed_control_options(control or {})
        if "time_unit" in control:
            if time_unit is not None:
                raise ValueError("time_unit is given twice: as an argument and in control; give it once")
            time_unit = control.pop("time_unit")
        if entry.inputs == "observations":
            if control:
                raise ValueError(f"model {model!r} reads raw observations: control options {sorted(control)} do "
                                 "not apply")
            if reads_static:
                raise ValueError(f"reads_static: model {model!r} reads observations, which carry their static "
                                 "features themselves")
        else:
            check_control_overrides(model, control)
            control = {**control_options(model), **control}
        unit = time_unit_value(time_unit, train.times, _lengths_of(train))
        mean = scale = None
        if standardise:
            mean, scale = (tuple(float(x) for x in s.tolist()) for s in channel_statistics(train))
        return cls(model=model, control=control, time_unit=unit, channel_mean=mean, channel_scale=scale,
                   reads_static=bool(reads_static))

    @property
    def standardises(self) -> bool:
        """Whether `transform` standardises the values."""
        return self.channel_mean is not None

    @property
    def control_options(self) -> dict:
        """The `build_control` keyword arguments of a control model, ``time_unit`` included ({} for an
        observation model)."""
        if model_entry(self.model).inputs == "observations":
            return {}
        return {**self.control, "time_unit": self.time_unit}

    def values_of(self, data) -> torch.Tensor:
        """``data.values`` as the model reads them: standardised (in the dtype of ``data.times``) when the spec
        standardises, else as given."""
        if not self.standardises:
            return data.values
        return standardised(data.values, np.asarray(self.channel_mean), np.asarray(self.channel_scale),
                            data.times.dtype)

    def transform(self, data) -> Control | Observations | ModelArguments:
        """The model's input for every sample of ``data`` (same fields as `fit`'s ``train``; ``static`` (N, S) read
        when the model reads static features).

        Returns:
            A `Control` (with ``reads_static``: ``ModelArguments(control, static)``) or `Observations`, on the device
            of ``data``.

        Raises:
            ValueError: data with other channels than the spec's statistics, a value beyond the models' finite range
                once standardised, or what `build_control` / `Observations.from_tensors` refuse.
        """
        if self.standardises and data.values.shape[-1] != len(self.channel_mean):
            raise ValueError(f"data have {data.values.shape[-1]} channel(s), the spec was fitted on "
                             f"{len(self.channel_mean)}")
        values = self.values_of(data)
        lengths = _lengths_of(data)
        static = getattr(data, "static", None)
        if model_entry(self.model).inputs == "observations":
            times = data.times if self.time_unit is None else data.times / self.time_unit
            return model_inputs(self.model, times, values, lengths, static=static)
        inputs = model_inputs(self.model, data.times, values, lengths, **self.control_options)
        if self.reads_static:
            if static is None:
                raise ValueError(f"model {self.model!r} reads static features but the data have none")
            return ModelArguments(inputs, static)
        return inputs

    def to_dict(self) -> dict:
        """The spec as JSON-ready data (`from_dict` reads it back)."""
        return {"model": self.model, "control": dict(self.control), "time_unit": self.time_unit,
                "channel_mean": None if self.channel_mean is None else list(self.channel_mean),
                "channel_scale": None if self.channel_scale is None else list(self.channel_scale),
                "reads_static": self.reads_static}

    @classmethod
    def from_dict(cls, data: Mapping) -> "InputSpec":
        """The spec `to_dict` wrote.

        Raises:
            ValueError: a mapping without the spec's fields, or with others.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, Mapping) or set(data) != fields:
            given = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"an input spec needs exactly the fields {sorted(fields)}, got {given}")
        model_entry(data["model"])
        tupled = {k: None if data[k] is None else tuple(float(x) for x in data[k])
                  for k in ("channel_mean", "channel_scale")}
        return cls(model=data["model"], control=dict(data["control"]), time_unit=data["time_unit"],
                   reads_static=bool(data["reads_static"]), **tupled)
