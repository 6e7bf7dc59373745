"""The fitted input spec: what turns a user's series into a model's input, in one object.

A model reads a `Control` (the CDE, RDE and ODE models) or `Observations` (the recurrent and convolutional ones).
Between the series a user has and that input lie five choices, each of which must be the same for every split:

* **the model** (its registry name): which input it reads, and the control options it is registered with;
* **the time unit**: every time is divided by it before anything else, for a control (the time channel, and the
  solver's parameter s with ``parametrization="time"``) and for observations alike. ``"auto"`` is the longest span
  of the training series (`observation_span`), so that a training series spans at most [0, 1]; a number is a unit
  of the user's choosing (e.g. 3600 for hourly data stamped in seconds); None leaves the times as given;
* **the channel statistics**: with ``standardise=True`` each channel is centred and scaled by the mean and standard
  deviation of its observed training values (`channel_statistics`), NaN staying NaN. The benchmark tasks
  standardise in their data protocol (`neuralde_seq.data.protocols`: some channels, e.g. counts and 0/1 flags, are
  left as they are, and the practitioner's reference methods read the same standardised series), so the runner
  fits its spec with ``standardise=False`` on the standardised splits and then records the protocol's statistics
  in it (`InputSpec.reading_raw`: mean 0 and scale 1 for the channels left as they are, and the static features'
  own statistics), so that the spec in its checkpoints turns the *raw* data into the model's input as the run did
  (`neuralde_seq.load_run`); the scikit-learn estimators fit theirs with ``standardise=True``;
* **the control**: its `ControlOptions` (the interpolation object and every option: the model's registered ones with
  the given ones on top, read by `parse_control_options`), and whether the model reads static features beside it;
* **the gap filling** (control models): with ``fill_gaps="auto"`` each series' gaps get unobserved (NaN) points
  (`neuralde_seq.data.fill_gaps`) so that its path steps about the training series' median time step
  (`median_step`) per knot; a regular series with dropped points becomes its grid with NaN there (between its
  first and last kept points). A control parametrised by observation index (the estimators' default) otherwise
  steps once per observation, a gap of three steps as one, so one data set gave two models: on aeon's GunPoint with
  30 % of the points removed, delta-rde scored 83 % (spread 29 points over 3 seeds) on the kept points with their
  times and 96 % (spread 3) on their grid, 94 % (spread 6) filled (benchmarks/ragged_vs_grid.py). The estimators
  fill by default; the runner and the stress tasks do not (their protocols put every series on its grid with NaN
  already, so there is nothing to fill). Observation models read the gaps as times and are not filled.

`InputSpec.fit` fixes them on the training data (every ``"auto"`` is resolved there and nowhere else: the given
options may say ``time_unit="auto"``, ``intensity_channel="auto"`` and ``unobserved_fill="mean"``, one
`ControlOptions` type holding them before and after, and a fitted spec holds none of them);
`InputSpec.transform` gives any split's input with them. The spec is plain data: `InputSpec.to_dict` is JSON, saved
in the runner's checkpoints (a resumed run with another spec is refused) and results, and the estimators keep
theirs as ``input_spec_`` (pickled with them). Observation models that integrate an ODE over the gaps (ODE-RNN,
stateful ODE-Net) measure them in the training span of the times they are given (their registry default), so
their dynamics are the same with any ``time_unit``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..controls import Control, ControlOptions, control_of, parse_control_options, time_unit_value
from ..data.base.datasets import IrregularDataset
from ..data.transforms.sampling import fill_gaps, median_step
from ..data.transforms.standardisation import channel_statistics, standardised
from ..input_checks import is_positive_finite
from ..models import control_options, model_entry
from ..observations import Observations, check_min_length, check_rescaled_times
from ..user_warnings import warn_user
from .objectives import ModelArguments

__all__ = ["InputSpec", "check_fill_gaps", "UnobservedChannelWarning", "unobserved_channels", "warn_unobserved"]


class UnobservedChannelWarning(UserWarning):
    """Some samples never observe some channel, and those channels were filled (``unobserved_fill``)."""


def _observed_within(data) -> tuple[torch.Tensor, torch.Tensor]:
    """``(observed, inside)``: (N, T, C) True at an observed value within its series' length, and (N, T) True at the
    time points within it (``values`` (N, T, C), NaN where missing, optional ``lengths``)."""
    values = data.values
    lengths = _lengths_of(data)
    inside = torch.ones(values.shape[:2], dtype=torch.bool, device=values.device)
    if lengths is not None:
        inside = torch.arange(values.shape[1], device=values.device)[None, :] < lengths.to(values.device)[:, None]
    return ~torch.isnan(values) & inside.unsqueeze(-1), inside


def unobserved_channels(data) -> torch.Tensor:
    """(C,) long: for each channel, the number of samples of ``data`` (``values`` (N, T, C), NaN where missing,
    optional ``lengths``) without a single observation of it."""
    observed, _ = _observed_within(data)
    return (~observed.any(dim=1)).sum(dim=0).cpu()


def warn_unobserved(data, what: str, fill) -> None:
    """One `UnobservedChannelWarning` naming every channel that some sample of ``data`` never observes, and how
    many such samples there are, when there is one (``what``: e.g. "training samples"; ``fill``: the value written
    there, or one per channel). Silent otherwise, and where ``fill`` is None."""
    if fill is None:
        return  # nothing is filled: build_control refuses such samples, naming one
    counts = unobserved_channels(data)
    if not bool((counts > 0).any()):
        return
    if isinstance(fill, numbers.Real):
        fill = [fill] * int(counts.shape[0])
    names = list(getattr(data, "meta", {}).get("channels") or [])
    parts = []
    for c in torch.nonzero(counts > 0).flatten().tolist():
        label = f"{c} ({names[c]})" if c < len(names) else str(c)
        parts.append(f"channel {label} in {int(counts[c])}")
    filled = ", ".join(f"{float(fill[c]):.3g}" for c in torch.nonzero(counts > 0).flatten().tolist())
    warn_user(
        f"{'; '.join(parts)} of {int(data.values.shape[0])} {what} never observed: filled with {filled} "
        "(unobserved_fill; 'mean', the default, is the channel's training mean); a control's "
        "intensity and recency channels, where it has them, show the channel was never observed. Give "
        "unobserved_fill=<value> in the control options to choose the value",
        UnobservedChannelWarning,
    )


def _lengths_of(data) -> torch.Tensor | None:
    return getattr(data, "lengths", None)


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """What turns series into the input of one model, fitted on the training split (module docstring).

    Build it with `InputSpec.fit`; `transform` gives the input of any split. Fields:

    Attributes:
        model: the registry name of the model (`neuralde_seq.models.MODEL_NAMES`), or None: a control path with the
            spec's `ControlOptions` alone, read by no registry model (random features' log-signatures).
        control: the `ControlOptions` in force (the model's registered ones with the given ones on top, every
            value resolved; their ``time_unit`` is None: the unit is the field below); None for a model that reads
            observations.
        time_unit: the resolved time unit (None: times as given).
        channel_mean, channel_scale: the (C,) training statistics that standardise each channel, or None (values as
            given).
        reads_static: a control model that also reads the samples' static features: `transform` gives
            ``ModelArguments(control, static)``.
        fill_step: the time step (in the data's own units) `fill_gaps` fills each series' gaps to before the control
            is built, or None (no filling).
        static_mean, static_scale: the (S,) training statistics that standardise each static feature (column), or
            None (static features as given). Set by `reading_raw` from a task's protocol (the estimators have no
            static features).
    """

    model: str | None
    control: ControlOptions | None
    time_unit: float | None
    channel_mean: tuple[float, ...] | None = None
    channel_scale: tuple[float, ...] | None = None
    reads_static: bool = False
    fill_step: float | None = None
    static_mean: tuple[float, ...] | None = None
    static_scale: tuple[float, ...] | None = None

    def __post_init__(self):
        if self.model is not None and model_entry(self.model).inputs == "observations":
            if self.control is not None:
                raise ValueError(
                    f"model {self.model!r} reads raw observations: the spec's control must be None, got "
                    f"{self.control!r}"
                )
            return
        if not isinstance(self.control, ControlOptions):
            raise TypeError(
                f"the spec's control must be a ControlOptions for model {self.model!r}, got "
                f"{type(self.control).__name__}"
            )
        self.control.check_resolved("a fitted input spec")
        if self.control.time_unit is not None:
            raise ValueError(
                f"the spec's control.time_unit must be None (the spec's time_unit field is the unit), got "
                f"{self.control.time_unit!r}"
            )

    @classmethod
    def fit(
        cls,
        model: str | None,
        train,
        *,
        control: Mapping | ControlOptions | None = None,
        time_unit=None,
        standardise: bool = False,
        reads_static: bool = False,
        fill_gaps=None,
    ) -> InputSpec:
        """The spec of model ``name``, fitted on ``train``.

        Arguments:
            model: a registry name (`neuralde_seq.models.MODEL_NAMES`), or None for a control path of ``control`` (a
                `ControlOptions`) alone.
            train: the training data: anything with ``times`` (N, T), ``values`` (N, T, C) (NaN where missing) and
                optionally ``lengths`` (N,), e.g. an `IrregularDataset`, `Observations` or `SyntheticSequences`.
            control: control models only: `build_control` keywords on top of the model's registered options (read by
                `parse_control_options`; a config row's ``control``, an estimator's ``control_options``), or a
                `ControlOptions` replacing them whole. A ``time_unit`` among them is read as the argument below.
                With keywords, ``unobserved_fill="mean"`` is the default. It is resolved here: each channel's mean
                over ``train``'s observed values as the model reads them (0 when standardising), with one
                `UnobservedChannelWarning` naming the channels some training sample never observes; None refuses a
                sample without any observation of a channel. ``intensity_channel="auto"`` is resolved here too: True
                where ``train``'s channels are measured at their own times (a time point observing some channels
                and not others, or a series never observing a channel: which channels are measured when is then
                information), else False (`_intensity_auto`); when True, the counts are divided by the median count
                of a channel in a training series (``count_unit``, unless given), as the times are by their span.
            time_unit: None (default), a positive number, or ``"auto"`` (resolved here on ``train``).
            standardise: standardise each channel with ``train``'s statistics of its observed values.
            reads_static: a control model that reads static features beside its control.
            fill_gaps: None (default: the series as given), ``"auto"`` (fill to ``median_step`` of ``train``) or a
                positive time step: unobserved points filled into each series' gaps before its control is built
                (control models only; module docstring).

        Returns:
            The fitted `InputSpec`.

        Raises:
            ValueError: an unknown model, control options or ``fill_gaps`` for a model that reads observations,
                ``time_unit`` given twice or invalid, ``fill_gaps`` neither None, "auto" nor a positive number, a
                channel with no observed value when standardising, a control option's value (named).
            UnknownOptionError: a control option `build_control` does not take.
        """
        reads = "control" if model is None else model_entry(model).inputs
        if control is not None and not isinstance(control, (Mapping, ControlOptions)):
            raise TypeError(
                f"control must be a mapping of build_control keywords, a ControlOptions or None, got "
                f"{type(control).__name__}"
            )
        if model is None and not isinstance(control, ControlOptions):
            raise TypeError(
                "model None (a control path without a registry model) needs control=ControlOptions(...): "
                f"there are no registered options to read keywords on top of, got {control!r}"
            )
        given_unit = None
        if isinstance(control, ControlOptions):
            given_unit = control.time_unit
        elif control is not None:
            control = dict(control)
            given_unit = control.pop("time_unit", None)
        if given_unit is not None:
            if time_unit is not None:
                raise ValueError("time_unit is given twice: as an argument and in control; give it once")
            time_unit = given_unit
        options = None
        if reads == "observations":
            if control:
                given = sorted(control) if isinstance(control, dict) else control
                raise ValueError(f"model {model!r} reads raw observations: control options {given} do not apply")
            if reads_static:
                raise ValueError(
                    f"reads_static: model {model!r} reads observations, which carry their static features themselves"
                )
            if fill_gaps is not None:
                raise ValueError(
                    f"fill_gaps={fill_gaps!r}: model {model!r} reads raw observations, which see the gaps "
                    "as times; give fill_gaps=None"
                )
        elif isinstance(control, ControlOptions):
            options = control
        else:
            # A channel a sample never observes (a lab never drawn in a stay) is filled with its training mean, said
            # in a warning, unless the options say otherwise (None: refuse such data).
            assert model is not None  # without a model, control is a ControlOptions (refused above otherwise)
            base = parse_control_options({"unobserved_fill": "mean", **control_options(model)})
            options = parse_control_options(control, base=base, where=f" for model {model!r}")
        unit = time_unit_value(time_unit, train.times, _lengths_of(train))
        mean = scale = None
        if standardise:
            mean, scale = (tuple(float(x) for x in s.tolist()) for s in channel_statistics(train))
        if options is not None:
            resolved: dict[str, Any] = {"time_unit": None}  # the spec's unit is its own field
            if options.intensity_channel == "auto":
                resolved["intensity_channel"] = _intensity_auto(train)
                if resolved["intensity_channel"] and options.count_unit is None:
                    # counts grow with the length as times do: in units of a typical series' count (time_unit's reason)
                    resolved["count_unit"] = _median_count(train)
            if options.unobserved_fill == "mean":
                resolved["unobserved_fill"] = _training_means(train, mean)
                warn_unobserved(train, "training samples", resolved["unobserved_fill"])
            options = dataclasses.replace(options, **resolved)
        return cls(
            model=model,
            control=options,
            time_unit=unit,
            channel_mean=mean,
            channel_scale=scale,
            reads_static=bool(reads_static),
            fill_step=_fill_step(fill_gaps, train),
        )

    def reading_raw(self, standardised_data) -> InputSpec:
        """This spec, fitted (``standardise=False``) on data a task's protocol had standardised, made to read the raw
        data instead: the statistics the protocol recorded in ``standardised_data.meta`` (``"standardise"``: each
        channel's mean and std, 0 and 1 for a channel left as it is; ``"standardise_static"``: the static
        features', where there are any) become ``channel_mean``/``channel_scale`` and ``static_mean``/
        ``static_scale``. ``reading_raw(train).transform(raw)`` is then ``self.transform(standardised)``: the same
        float64 arithmetic as the protocol (`neuralde_seq.data.protocols`), cast to the times' dtype.

        Arguments:
            standardised_data: the standardised training split (an `IrregularDataset`); without a recorded
                standardisation (data given as they are) the spec is returned unchanged.

        Returns:
            The spec with the data's standardisation.

        Raises:
            ValueError: this spec standardises already (it would standardise twice), or the recorded statistics do
                not match the data's channels or static features.
        """
        meta = getattr(standardised_data, "meta", None) or {}
        channels, static = meta.get("standardise"), meta.get("standardise_static")
        if channels is None and static is None:
            return self
        if self.standardises:
            raise ValueError(
                "reading_raw: this spec standardises the values itself (standardise=True); fit it with "
                "standardise=False on the standardised data"
            )
        changes: dict[str, Any] = {}  # the mean and scale fields
        for prefix, stats, width in (
            ("channel", channels, standardised_data.values.shape[-1]),
            (
                "static",
                static,
                None if getattr(standardised_data, "static", None) is None else standardised_data.static.shape[1],
            ),
        ):
            if stats is None:
                continue
            mean, scale = (tuple(float(x) for x in stats[key]) for key in ("mean", "std"))
            if width is None or len(mean) != width or len(scale) != width:
                raise ValueError(
                    f"reading_raw: the recorded {prefix} standardisation has {len(mean)} mean(s) and "
                    f"{len(scale)} std(s), the data have {width} {prefix}s"
                )
            changes[f"{prefix}_mean"], changes[f"{prefix}_scale"] = mean, scale
        return dataclasses.replace(self, **changes)

    @property
    def standardises(self) -> bool:
        """Whether `transform` standardises the values."""
        return self.channel_mean is not None

    @property
    def control_options(self) -> dict:
        """The `build_control` keyword arguments of a control model (`ControlOptions.to_keywords`), ``time_unit``
        included ({} for an observation model)."""
        if self.control is None:
            return {}
        return {**self.control.to_keywords(), "time_unit": self.time_unit}

    def values_of(self, data) -> torch.Tensor:
        """``data.values`` as the model reads them, in the dtype of ``data.times``: standardised when the spec
        standardises, else as given."""
        if not self.standardises:
            return data.values.to(data.times.dtype)
        return standardised(
            data.values, np.asarray(self.channel_mean), np.asarray(self.channel_scale), data.times.dtype
        )

    def transform(self, data) -> Control | Observations | ModelArguments:
        """The model's input for every sample of ``data`` (same fields as `fit`'s ``train``; ``static`` (N, S) read
        when the model reads static features): `inputs_of` the spec's `observations` of it.

        Returns:
            A `Control` (with ``reads_static``: ``ModelArguments(control, static)``) or `Observations`, on the device
            of ``data``.

        Raises:
            ValueError: data with other channels than the spec's statistics, a value beyond the models' finite range
                once standardised, or what `observations` and `inputs_of` refuse.
        """
        observations = self.observations(data)
        inputs = self.inputs_of(observations)
        if self.reads_static:
            if observations.static is None:
                raise ValueError(f"model {self.model!r} reads static features but the data have none")
            return ModelArguments(inputs, observations.static)
        return inputs

    def observations(self, data) -> Observations:
        """The observations the model's input is built from: ``data``'s values as the model reads them
        (`values_of`), each series' gaps filled to ``fill_step`` (control models, `fill_gaps`), its static features
        as the model reads them; the times in ``data``'s own units (the time unit applies in `inputs_of`).

        An `IrregularDataset` or `Observations` was checked when it was made (`validate_observations`), and what the
        spec does to it keeps it valid, so it is not checked again (the estimators' X is read and checked once);
        anything else (e.g. `SyntheticSequences`) is checked here, as the model reads it (`Observations.from_tensors`).

        Arguments:
            data: anything with ``times`` (N, T), ``values`` (N, T, C) (NaN where missing), optionally ``lengths``
                (N,) and ``static`` (N, S), on any device.

        Returns:
            An `Observations` batch on ``data``'s device, times and values in the dtype of ``data.times``.

        Raises:
            ValueError: data with other channels than the spec's statistics, a value beyond the models' finite range
                once standardised, or (data that are neither a dataset nor observations) what
                `Observations.from_tensors` refuses.
        """
        if self.channel_mean is not None and data.values.shape[-1] != len(self.channel_mean):  # standardises
            raise ValueError(
                f"data have {data.values.shape[-1]} channel(s), the spec was fitted on {len(self.channel_mean)}"
            )
        values = self.values_of(data)
        lengths = _lengths_of(data)
        static = self._static_of(data)
        times = data.times
        if self.fill_step is not None:
            if lengths is None:
                lengths = torch.full((values.shape[0],), values.shape[1], dtype=torch.long, device=values.device)
            times, values, lengths = fill_gaps(times, values, lengths, self.fill_step)
        if not isinstance(data, (IrregularDataset, Observations)):
            return Observations.from_tensors(times, values, lengths, static)
        assert lengths is not None  # datasets and observations have theirs
        return Observations(times, values, lengths.to(values.device).long(), static)

    def inputs_of(self, observations: Observations) -> Control | Observations:
        """The model's input built from the spec's `observations`: a `Control` of the spec's `ControlOptions` with its
        time unit (`control_of`), or, for a model that reads observations, the observations with their times
        divided by the time unit. They are not checked again; the times divided by the unit are
        (`check_rescaled_times`).

        Arguments:
            observations: what `observations` returned (or a selection of its samples).

        Returns:
            A `Control` or `Observations` on the observations' device.

        Raises:
            ValueError: a sample with fewer than 2 points, times the unit takes beyond the finite range or makes
                equal, or what `control_of` refuses.
        """
        if self.control is None:
            times, lengths = observations.times, observations.lengths
            check_min_length(lengths, 2)
            if self.time_unit is not None:
                times = times / self.time_unit
                check_rescaled_times(times, lengths, self.time_unit)
            return Observations(times, observations.values, lengths, observations.static)
        return control_of(observations, dataclasses.replace(self.control, time_unit=self.time_unit))

    def _static_of(self, data) -> torch.Tensor | None:
        """``data.static`` (N, S) as the model reads it: standardised column by column in float64 (as the task
        protocols do), in the dtype of ``data.times``, when the spec holds static statistics; else as given."""
        static = getattr(data, "static", None)
        if static is None or self.static_mean is None:
            return static
        if static.shape[-1] != len(self.static_mean):
            raise ValueError(
                f"data have {static.shape[-1]} static feature(s), the spec was fitted on {len(self.static_mean)}"
            )
        mean = torch.tensor(self.static_mean, dtype=torch.float64, device=static.device)
        scale = torch.tensor(self.static_scale, dtype=torch.float64, device=static.device)
        return ((static.to(torch.float64) - mean) / scale).to(data.times.dtype)

    def to_dict(self) -> dict:
        """The spec as JSON-ready data (`from_dict` reads it back): the control by field
        (`ControlOptions.to_dict`: the interpolation as ``{"type": "HermiteCubic", **fields}``), null for a model
        that reads observations; every field, null when unset."""
        optional = {name: getattr(self, name) for name in ("fill_step", "static_mean", "static_scale")}
        control = None if self.control is None else self.control.to_dict()
        return {
            "model": self.model,
            "control": control,
            "time_unit": self.time_unit,
            "channel_mean": None if self.channel_mean is None else list(self.channel_mean),
            "channel_scale": None if self.channel_scale is None else list(self.channel_scale),
            "reads_static": self.reads_static,
            **{name: list(value) if isinstance(value, tuple) else value for name, value in optional.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> InputSpec:
        """The spec `to_dict` wrote, every value checked as `fit` (or `reading_raw`) would have made it: a spec edited
        by hand, or read from a damaged file, is refused naming the field, never read as something else (an infinite
        scale would zero a channel, a negative one flip it, the string "false" read as True). Specs of older files
        are brought to this form by `neuralde_seq.migration`.

        Raises:
            ValueError: a mapping without the spec's fields, or with others, or a field with a value `fit` never
                writes (named).
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, Mapping) or set(data) != fields:
            given = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"an input spec needs exactly the fields {sorted(fields)}, got {given}")
        model = data["model"]
        if model is not None and not isinstance(model, str):
            raise ValueError(f"input spec: model must be a registry name (a string) or null, got {model!r}")
        reads = "control" if model is None else model_entry(model).inputs
        control = data["control"]
        if control is not None and not isinstance(control, Mapping):
            raise ValueError(f"input spec: control must be a mapping of control options or null, got {control!r}")
        reads_static = data["reads_static"]
        if not isinstance(reads_static, bool):
            raise ValueError(f"input spec: reads_static must be true or false, got {reads_static!r}")
        if reads == "observations":
            # what fit refuses for a model that reads observations is refused here too, not ignored
            if control:
                raise ValueError(
                    f"input spec: model {model!r} reads raw observations, so control must be empty "
                    f"(null), got {sorted(control)}"
                )
            control = None
            if reads_static:
                raise ValueError(
                    f"input spec: reads_static must be false for model {model!r}, which reads "
                    "observations (they carry their static features themselves)"
                )
            if data["fill_step"] is not None:
                raise ValueError(
                    f"input spec: fill_step must be absent or null for model {model!r}, which reads raw observations"
                )
        else:
            control = _control_from_dict(model, control)
        time_unit = data["time_unit"]
        if time_unit is not None:  # "auto" is resolved by fit: a spec holds the number it stood for
            if not is_positive_finite(time_unit):
                raise ValueError(
                    "input spec: time_unit must be null or a positive finite number (fit resolves "
                    f"'auto' to the training span), got {time_unit!r}"
                )
            time_unit = float(time_unit)
        statistics = {**_statistics(data, "channel"), **_statistics(data, "static")}
        return cls(
            model=model,
            control=control,
            time_unit=time_unit,
            reads_static=reads_static,
            fill_step=check_fill_gaps(data["fill_step"], "input spec: fill_step", auto=False),
            **statistics,
        )


def _control_from_dict(model: str | None, control: Mapping | None) -> ControlOptions:
    """A saved spec's control options, in the form `InputSpec.to_dict` writes (every field, the interpolation as a
    dict ``{"type": ...}``).

    Raises:
        ValueError: a control in another form, a value its option refuses, an unresolved value ("auto", "mean") or a
            ``time_unit`` inside it, each named with "input spec: control".
    """
    if control is None:
        raise ValueError(f"input spec: control must be the control options of model {model!r}, got null")
    try:
        if not isinstance(control.get("interpolation"), Mapping):
            raise ValueError(
                "a spec holds its control as InputSpec.to_dict writes it (the interpolation as "
                f"{{'type': ...}}), got {sorted(control)}"
            )
        options = ControlOptions.from_dict(control, "input spec: control")
        options.check_resolved("a fitted input spec")
    except ValueError as error:
        raise type(error)(f"input spec: control: {error}") from None
    if options.time_unit is not None:
        raise ValueError(
            f"input spec: control: time_unit must be null (the spec's time_unit field is the unit), got "
            f"{options.time_unit!r}"
        )
    return options


def _statistics(data: Mapping, prefix: str) -> dict:
    """``data``'s ``<prefix>_mean`` and ``<prefix>_scale`` (prefix "channel" or "static") as tuples of finite floats,
    the scales positive, one of each per channel (or static feature); or both None.

    Raises:
        ValueError: one given without the other, lengths that differ, or a value that is not null nor a non-empty
            list of finite numbers (positive for a scale), naming the field and the first bad entry.
    """
    mean, scale = (f"{prefix}_mean", f"{prefix}_scale")
    unit = "channel" if prefix == "channel" else "static feature"
    means, scales = _statistic(data, mean, unit), _statistic(data, scale, unit)
    if (means is None) != (scales is None):
        raise ValueError(f"input spec: {mean} and {scale} must both be null or both be given")
    if means is not None and scales is not None:
        if len(means) != len(scales):
            raise ValueError(
                f"input spec: {mean} has {len(means)} {unit}(s), {scale} {len(scales)}; give one of each per {unit}"
            )
        bad = [c for c, x in enumerate(scales) if not x > 0]
        if bad:
            raise ValueError(
                f"input spec: {scale} must be positive (a standard deviation), got {scales[bad[0]]} for {unit} {bad[0]}"
            )
    return {mean: means, scale: scales}


def _statistic(data: Mapping, name: str, unit: str) -> tuple[float, ...] | None:
    """``data[name]`` (a mean or scale, one per ``unit``: channel or static feature; absent: None) as a tuple of
    finite floats, or None.

    Raises:
        ValueError: not null nor a non-empty list of finite numbers, naming the field and the first bad entry.
    """
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__") or len(value) == 0:
        raise ValueError(f"input spec: {name} must be null or a list with one number per {unit}, got {value!r}")
    for c, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(float(x)):
            raise ValueError(f"input spec: {name} must hold finite numbers, got {x!r} for {unit} {c}")
    return tuple(float(x) for x in value)


def check_fill_gaps(fill_gaps, name: str = "fill_gaps", auto: bool = True):
    """``fill_gaps`` checked: None, ``"auto"`` (where ``auto``) or a positive finite time step (as a float).

    Raises:
        ValueError: anything else, naming the argument (``name``).
    """
    if fill_gaps is None or (auto and isinstance(fill_gaps, str) and fill_gaps == "auto"):
        return fill_gaps
    if is_positive_finite(fill_gaps):
        return float(fill_gaps)
    allowed = "None, 'auto' or a positive time step" if auto else "None or a positive time step"
    raise ValueError(f"{name} must be {allowed}, got {fill_gaps!r}")


def _intensity_auto(train) -> bool:
    """``intensity_channel="auto"`` resolved on ``train``: whether its channels are measured at their own times,
    i.e. some time point of a series observes some channels and not others, or some series never observes a
    channel. A time point with every channel missing is not counted: it is a dropped point, and a series with its
    dropped points removed (their times kept) must give the same model as the series on its grid with NaN there."""
    observed, inside = _observed_within(train)
    some = observed.any(dim=-1)
    partial_point = bool((inside & some & ~observed.all(dim=-1)).any())
    never_observed = bool((~observed.any(dim=1)).any())
    return partial_point or never_observed


def _median_count(train) -> float:
    """The median number of observations of a channel in a series of ``train``, over the (series, channel) pairs
    that have one (at least 1)."""
    observed, _ = _observed_within(train)
    counts = observed.sum(dim=1).flatten()
    counts = counts[counts > 0]
    return max(1.0, float(counts.double().median())) if counts.numel() else 1.0


def _training_means(train, standardised_mean) -> list[float]:
    """``unobserved_fill="mean"`` resolved on ``train``: each channel's mean over its observed values, as the model
    reads them (standardised: 0; else as given).

    Raises:
        ValueError: a channel no training sample observes (there is no mean to fill with).
    """
    channels = train.values.shape[-1]
    if standardised_mean is not None:
        return [0.0] * channels  # the standardised values' mean, by construction (a list: as JSON reads it back)
    values = train.values.to(torch.float64)
    observed, _ = _observed_within(train)
    count = observed.sum(dim=(0, 1))
    never = torch.nonzero(count == 0).flatten().tolist()
    if never:
        raise ValueError(
            f"unobserved_fill='mean': channel(s) {never} have no observed value in any training sample, "
            "so there is no mean to fill them with; drop them, or give unobserved_fill=<value>"
        )
    total = torch.where(observed, values, torch.zeros((), dtype=values.dtype, device=values.device)).sum(dim=(0, 1))
    return [float(x) for x in (total / count).tolist()]


def _fill_step(fill_gaps, train) -> float | None:
    """The step of ``fill_gaps`` (`check_fill_gaps`), ``"auto"`` resolved as ``train``'s median step."""
    fill_gaps = check_fill_gaps(fill_gaps)
    if fill_gaps != "auto":
        return fill_gaps
    lengths = _lengths_of(train)
    if lengths is None:
        lengths = torch.full((train.times.shape[0],), train.times.shape[1], dtype=torch.long)
    return median_step(train.times, lengths.to(train.times.device))
