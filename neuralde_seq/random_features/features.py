"""The feature map of random features, `RandomFeatures`: fitted on training observations (scales, the frozen
reservoir, its memory and thresholds; package docstring, "What `RandomFeatures.fit` does"), it turns any batch of
series into features, through the fused kernel (`neuralde_seq.ops.reservoir_features`) where it applies and
otherwise from every state (`RandomFeatures.states`, `RandomFeatures.pooled`). The features themselves are defined
in `neuralde_seq.random_features.feature_kinds`, the reservoirs in `neuralde_seq.random_features.reservoirs`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..controls import Control, ControlOptions, Linear, control_of, parse_control_options
from ..data.base.datasets import IrregularDataset
from ..input_checks import did_you_mean
from ..models import LinearCDE, check_control_overrides
from ..models.linear_cde import path_scales
from ..observations import Observations
from ..ops.reservoir_features import POOLED_FEATURES, fused_available, fused_features, fused_states
from ..training.input_spec import InputSpec, check_fill_gaps
from ..training.objectives import ModelArguments
from .feature_kinds import (
    FEATURES,
    LOGSIGNATURE_FEATURES,
    PATH_FEATURES,
    STATE_FEATURES,
    Pooling,
    _inside,
    level_thresholds,
    logsignature_feature,
)
from .reservoirs import (
    RESERVOIRS,
    build_reservoir,
    reservoir_state_width,
    reservoir_states,
    resolve_memory,
    resolve_timescales,
    set_memory,
)

__all__ = ["RandomFeatures", "DEFAULT_FEATURES", "DEFAULT_OSCILLATION_FEATURES", "DEFAULT_LOGSIGNATURE_FEATURES"]

DEFAULT_FEATURES = ("ppv", "mean")
DEFAULT_OSCILLATION_FEATURES = ("ppv", "mpv", "levels")
DEFAULT_LOGSIGNATURE_FEATURES = ("final", "windows")
_BIAS_SERIES = 16  # training series whose states give the "ppv" thresholds
_BIAS_POINTS = 1024  # states per unit they are drawn from, at most
# Series per forward pass are fewer than batch_size where their states (B·K·H numbers) would pass this: 1,024 units
# over 18,000 knots (EigenWorms) are 7e7 numbers per series.
_STATE_BUDGET = 2**25


def _check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device``: a GPU's free memory, the CPU's available memory (Linux's MemAvailable), or None
    where it cannot be read (then nothing is refused)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _bytes(count: int) -> str:
    """A number of bytes for people: in MiB below 1 GiB, else in GiB."""
    return f"{count / 2**20:.1f} MiB" if count < 2**30 else f"{count / 2**30:.1f} GiB"


def _series(times, values, lengths) -> IrregularDataset | Observations:
    """The series a method of `RandomFeatures` reads: an `IrregularDataset` or `Observations` given alone, checked
    when it was made (the estimators' X, read and checked once), or (times, values, lengths) tensors, checked here
    (`Observations.from_tensors`)."""
    if values is None:
        if not isinstance(times, (IrregularDataset, Observations)):
            raise TypeError(
                "give times, values (and lengths), or the series as one IrregularDataset or Observations, "
                f"got {type(times).__name__} alone"
            )
        return times
    return Observations.from_tensors(times, values, lengths)


class RandomFeatures:
    """A frozen, randomly initialised registry model (or the path's log-signatures) as a feature map of series
    (package docstring: what ``fit`` does, the features, the measurements).

    Arguments:
        reservoir: one of `RESERVOIRS`: a linear CDE (``slice-diag``, ``slice-block``, ``slice-dense``,
            ``slice-dplr``), a neural CDE (``ncde``, ``nrde``, ``log-ncde``), a CT-FWP (``{hebb,oja,delta,
            delta-post}-{ode,cde,rde}``; its state is the fast weights W, H·d² per knot), or ``"logsignature"``
            (default ``"slice-block"``, with damped oscillators: ``memory``).
        features: a non-empty sequence of `FEATURES`: "final", "mean", "times", "ppv", "mpv", "max", "values",
            "levels" for models;
            "final", "times", "windows", "values" for ``"logsignature"``; "auto" (default):
            `DEFAULT_OSCILLATION_FEATURES` ("ppv", "mpv", "levels") with ``memory="oscillation"``,
            `DEFAULT_LOGSIGNATURE_FEATURES`
            for ``"logsignature"``, else `DEFAULT_FEATURES` ("ppv", "mean").
        width: the model's size: ``hidden`` of linear CDEs and NCDEs, ``d_model`` of CT-FWPs (8 heads of d_model/8:
            H·d² = d_model²/8 numbers per state); None (default): ``model_options``' own, else 1,024 for linear CDEs
            (1,536 with ``memory="oscillation"``, 128 for ``structure="dense"``), 128 for NCDEs, 64 for CT-FWPs.
        num_times: n, the fractions 1/n, ..., 1 of each series read by "times", "values" and "windows" (default 4).
        num_biases: thresholds per unit of "ppv" and "mpv" (default 1).
        num_levels: thresholds per channel of "levels" (default 64).
        input_scale: multiplies the rescaled path (times and values) before the model reads it (default 1.0).
        fast_share: the share of oscillator pairs made fast and nearly memoryless (periods log-uniform in
            [2τ_min, 6τ_min] knots, 4-12 by default, radius at most 0.3 per knot), in [0, 1); "auto" (default): 1/3
            with ``memory="oscillation"`` (with the default width: 512 slow pairs, as many as in 1,024 units, and
            256 fast ones), else 0 (only 0 is allowed then).
        timescales: linear CDEs with a time channel: (τ_min, τ_max) memory range in knots (τ_max None: the longest
            training series), or None (keep the random A_0); "auto" (default): (2, None) for linear CDEs, None for
            the others.
        memory: what the time channel's A_0 makes of the units (package docstring, "Memory"): "decay" (low-pass
            units), "oscillation" (damped 2×2 oscillators: ``slice-block`` only, its block_size then 2), or "auto"
            (default): "oscillation" for ``slice-block`` with timescales, else "decay".
        model_options: constructor options replacing the registry defaults (e.g. ``{"init_scale": 1.0}``,
            ``{"solver": {"method": "exact"}}``); for ``"logsignature"``: ``depth`` and ``backend``.
        control_options: `build_control` options replacing the registry's (default ``parametrization="index"``);
            for ``"logsignature"`` on top of a linear path with a time channel. ``unobserved_fill="mean"`` is each
            channel's training mean (`InputSpec.fit`).
        fill_gaps: "auto" (default): before anything else, each series' gaps get unobserved points so that the
            reservoir, which steps once per knot, steps about the training data's median time step per knot
            (`neuralde_seq.data.fill_gaps`; a regular series with dropped points becomes its grid with NaN there,
            between its first and last observation);
            a positive number: that step, in the times' units; None: the observations' knots only. With 30 % of the
            points removed from aeon's series, the knots of the observations alone cost 2-11 points of accuracy
            (ItalyPowerDemand 84 against 93 %, PickupGestureWiimoteZ 65 against 76 %, docs/benchmarks.md).
        standardise: standardise each channel with the mean and standard deviation of its observed training values
            first (the input spec's channel statistics; the estimators do); default False: the values as given
            (standardised by the caller).
        seed: seed of the model's draw and of the thresholds (default 0).
        batch_size: series per forward pass (default 32); fewer where their states (B × knots × H numbers) would
            pass 2**25 (128 MiB in float32).

    Fitted attributes: ``model_`` (the frozen module; None for "logsignature"), ``input_spec_`` (the fitted
    `InputSpec` of the reservoir's input: channel statistics with ``standardise``, the step of ``fill_gaps`` as
    ``input_spec_.fill_step``, the `ControlOptions`, and the time unit ``time_scale_ / input_scale``; for
    ``"logsignature"`` a spec without a model, of a linear path), ``time_scale_`` (float: the time channel's path
    scale), ``value_scales_`` (C,: the value channels' path scales, which divide the values the spec gives),
    ``state_width_`` (H),
    ``num_features_``, ``feature_slices_`` (each feature's columns: a dict name -> slice), ``biases_``
    ((num_biases, H), "ppv" and "mpv" only), ``levels_`` ((C, num_levels), "levels" only), ``timescales_`` ((H,)
    the units' τ (for oscillators −1/log ρ_j, per unit of each pair), linear CDEs with memory only), ``periods_``
    ((H,) each oscillator's period in knots, ``memory="oscillation"`` only, else None).
    """

    # The constructor's arguments as checked and kept (scikit-learn's convention: their own names) ...
    reservoir: str
    features: tuple[str, ...]
    width: int | None
    num_times: int
    num_biases: int
    num_levels: int
    input_scale: float
    fast_share: float
    timescales: tuple | None
    memory: str
    model_options: dict[str, Any]
    control_options: dict[str, Any]
    fill_gaps: float | str | None
    standardise: bool
    seed: int
    batch_size: int
    _explicit_timescales: bool
    _explicit_memory: bool
    # ... and what fit sets (the class docstring)
    input_spec_: InputSpec
    model_: torch.nn.Module | None
    time_scale_: float
    value_scales_: torch.Tensor
    levels_: torch.Tensor | None
    timescales_: torch.Tensor | None
    periods_: torch.Tensor | None
    biases_: torch.Tensor | None
    spreads_: torch.Tensor | None
    temperature_: float
    feature_slices_: dict[str, slice]
    state_width_: int
    num_features_: int

    def __init__(
        self,
        reservoir: str = "slice-block",
        *,
        features: Sequence[str] | str = "auto",
        width: int | None = None,
        num_times: int = 4,
        num_biases: int = 1,
        num_levels: int = 64,
        input_scale: float = 1.0,
        fast_share="auto",
        timescales="auto",
        memory: str = "auto",
        model_options: dict | None = None,
        control_options: dict | None = None,
        fill_gaps="auto",
        standardise: bool = False,
        seed: int = 0,
        batch_size: int = 32,
    ):
        if reservoir not in RESERVOIRS:
            hint = did_you_mean(str(reservoir), RESERVOIRS)
            raise ValueError(
                f"reservoir must be one of {', '.join(RESERVOIRS)}, got {reservoir!r}" + (f"; {hint}" if hint else "")
            )
        auto_features = isinstance(features, str) and features == "auto"
        if auto_features:
            features = DEFAULT_LOGSIGNATURE_FEATURES if reservoir == "logsignature" else DEFAULT_FEATURES
        if isinstance(features, str) or not isinstance(features, Sequence) or len(features) == 0:
            raise ValueError(f"features must be a non-empty sequence of {FEATURES}, got {features!r}")
        allowed = (*(LOGSIGNATURE_FEATURES if reservoir == "logsignature" else STATE_FEATURES), *PATH_FEATURES)
        for feature in features:
            if feature not in allowed:
                raise ValueError(f"features of reservoir {reservoir!r} must be among {allowed}, got {feature!r}")
        if len(set(features)) != len(features):
            raise ValueError(f"features repeats an entry: {features!r}")
        if width is not None:
            _check_positive_int("width", width)
            if reservoir == "logsignature":
                raise ValueError("width does not apply to reservoir 'logsignature' (its size is set by the depth)")
        _check_positive_int("num_times", num_times)
        _check_positive_int("num_biases", num_biases)
        _check_positive_int("num_levels", num_levels)
        _check_positive_int("batch_size", batch_size)
        if (
            isinstance(input_scale, bool)
            or not isinstance(input_scale, numbers.Real)
            or not (math.isfinite(input_scale) and input_scale > 0)
        ):
            raise ValueError(f"input_scale must be a positive finite number, got {input_scale!r}")
        timescales, self._explicit_timescales = resolve_timescales(reservoir, timescales)
        for name, value in (("model_options", model_options), ("control_options", control_options)):
            if value is not None and not isinstance(value, dict):
                raise TypeError(f"{name} must be a dict or None, got {type(value).__name__}")
        memory, self._explicit_memory, fast_share = resolve_memory(
            reservoir, memory, timescales, fast_share, model_options
        )
        if control_options and "time_unit" in control_options:
            raise ValueError(
                "control_options: time_unit does not apply to a reservoir, whose time unit is the time "
                "channel's own scale on the training data (path_scales); input_scale scales the whole "
                "path"
            )
        if not isinstance(standardise, bool):
            raise ValueError(f"standardise must be True or False, got {standardise!r}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.fill_gaps = check_fill_gaps(fill_gaps)
        self.reservoir, self.features, self.width = reservoir, tuple(features), width
        self.num_times, self.num_biases, self.input_scale = int(num_times), int(num_biases), float(input_scale)
        self.num_levels = int(num_levels)
        self.fast_share = fast_share
        self.timescales = None if timescales is None else tuple(timescales)
        self.memory = memory
        if auto_features and memory == "oscillation":
            self.features = DEFAULT_OSCILLATION_FEATURES
        self.model_options, self.control_options = dict(model_options or {}), dict(control_options or {})
        self.seed, self.batch_size = int(seed), int(batch_size)
        self.standardise = standardise
        if reservoir == "logsignature":
            unknown = set(self.model_options) - {"depth", "backend"}
            if unknown:
                raise ValueError(
                    f"model_options of reservoir 'logsignature' are 'depth' and 'backend', got {sorted(unknown)}"
                )
            depth = self.model_options.get("depth", 3)
            _check_positive_int("model_options['depth']", depth)

    # -------------------------------------------------------------------------------------------- inputs
    def _control(self) -> ControlOptions:
        """The options of the reservoir's input, as given: the reservoir's registered ones (for ``"logsignature"`` a
        linear path with a time channel) with ``parametrization="index"`` and ``control_options`` on top."""
        given = {"parametrization": "index", **self.control_options}
        if self.reservoir == "logsignature":
            return parse_control_options(given, base=ControlOptions(interpolation=Linear()))
        return check_control_overrides(self.reservoir, given)

    def _rescaled(self, observations: Observations) -> Observations:
        """The observations the spec gives with each value channel divided by its path scale over ``input_scale``
        (the times are divided by the spec's time unit when a path is built)."""
        values = observations.values
        value_scales = (self.value_scales_ / self.input_scale).to(device=values.device)
        # in float64, then back
        values = (values.to(torch.float64) / value_scales).to(values.dtype)
        return Observations(observations.times, values, observations.lengths, observations.static)

    def _observations(self, times, values, lengths) -> Observations:
        """The rescaled observations of the series (`_series`) the fitted map reads."""
        return self._rescaled(self.input_spec_.observations(_series(times, values, lengths)))

    def _linear_path(self, observations: Observations, time_channel: bool = True, time_unit=None) -> Control:
        """The linear path of the observations (the one the path scales and the path features read), with the
        parametrisation and fill of unobserved channels of the reservoir's input."""
        control = self._control_options()
        options = ControlOptions(
            interpolation=Linear(),
            time_channel=time_channel,
            parametrization=control.parametrization,
            unobserved_fill=control.unobserved_fill,
            time_unit=time_unit,
        )
        return control_of(observations, options)

    def inputs(
        self,
        times: torch.Tensor | IrregularDataset | Observations,
        values: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
    ) -> Control:
        """The fitted map's input built from observations: the rescaled path as the reservoir reads it (a linear
        control with a time channel for ``"logsignature"``).

        Arguments:
            times: (B, T) observation times, strictly increasing within each sample's length; or the series as one
                `IrregularDataset` or `Observations` (``values`` and ``lengths`` then None).
            values: (B, T, C) observations (standardised, or raw with ``standardise``), NaN for missing.
            lengths: (B,) valid observations per sample; None (default): all T.

        Returns:
            A `Control` of batch size B.
        """
        self._check_fitted()
        return self._inputs(self._observations(times, values, lengths))

    def model_arguments(
        self,
        times: torch.Tensor | IrregularDataset | Observations,
        values: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
    ):
        """What a trainable copy of the map reads (`neuralde_seq.reservoir_tuning.ReservoirNetwork`): the input
        `inputs` gives and the "values" feature, which does not depend on the reservoir.

        Arguments:
            times: (B, T) times, or the series as one `IrregularDataset` or `Observations`, as `transform`.
            values: (B, T, C) or None, as `transform`.
            lengths: (B,) or None, as `transform`.

        Returns:
            ``ModelArguments(control, path_part)``: path_part the path features (`PATH_FEATURES`) in the order of
            ``features``, (B, width) float64, (B, 0) without them.
        """
        self._check_fitted()
        observations = self._observations(times, values, lengths)
        return ModelArguments(self._inputs(observations), self._path_features(observations))

    def _inputs(self, observations: Observations) -> Control:
        """The reservoir's input: the spec's control of the rescaled observations, in the spec's time unit."""
        control = self.input_spec_.inputs_of(observations)
        assert isinstance(control, Control)  # the spec is a control's (a reservoir reads no observations)
        return control

    def _control_options(self) -> ControlOptions:
        """The fitted spec's `ControlOptions` (a reservoir's input is a control)."""
        options = self.input_spec_.control
        assert options is not None
        return options

    def _check_fitted(self) -> None:
        if not hasattr(self, "num_features_"):
            raise RuntimeError("this RandomFeatures is not fitted yet: call fit(times, values, lengths) first")

    # -------------------------------------------------------------------------------------------- fit
    def fit(
        self,
        times: torch.Tensor | IrregularDataset | Observations,
        values: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
    ) -> RandomFeatures:
        """The input spec, the scales, the frozen model and the thresholds from training observations (package
        docstring).

        Arguments:
            times: (N, T) observation times, strictly increasing within each sample's length; or the training series
                as one `IrregularDataset` or `Observations` (``values`` and ``lengths`` then None), checked when it
                was made and not again.
            values: (N, T, C) observations, NaN for missing: standardised (e.g. `channel_statistics`), or raw with
                ``standardise``.
            lengths: (N,) valid observations per sample; None (default): all T.

        Returns:
            self, fitted; the model lives on ``values``' device in its dtype.

        Raises:
            ValueError: observations `Observations.from_tensors` or `build_control` refuses, or a model option the
                constructor refuses.
        """
        data = _series(times, values, lengths)
        # What the spec does: the channel statistics (standardise), the gap filling, the control's options. Its time
        # unit is the time channel's path scale over input_scale, found on the path of the filled series below.
        self.input_spec_ = InputSpec.fit(
            None if self.reservoir == "logsignature" else self.reservoir,
            data,
            control=self._control(),
            standardise=self.standardise,
            fill_gaps=self.fill_gaps,
        )
        observations = self.input_spec_.observations(data)
        scales = path_scales(self._linear_path(observations))  # of the filled series, in their own time units
        self.time_scale_ = float(scales[0])
        self.value_scales_ = torch.tensor(scales[1:], dtype=torch.float64)
        self.input_spec_ = dataclasses.replace(self.input_spec_, time_unit=self.time_scale_ / self.input_scale)
        observations = self._rescaled(observations)
        values = observations.values
        self.levels_ = None
        if "levels" in self.features:
            self.levels_ = level_thresholds(*self._points(observations), self.num_levels).to(
                device=values.device, dtype=values.dtype
            )
        control = self._inputs(observations)
        self.model_ = (
            None
            if self.reservoir == "logsignature"
            else build_reservoir(
                self.reservoir,
                control,
                values,
                width=self.width,
                memory=self.memory,
                model_options=self.model_options,
                seed=self.seed,
            )
        )
        self.timescales_ = self.periods_ = None
        # (timescales are those of a linear CDE reservoir: resolve_timescales refuses them for the others)
        if isinstance(self.model_, LinearCDE) and self.timescales is not None:
            # the time channel is the path's channel 0 (and the first level-1 term of log-signature windows)
            if self._control_options().time_channel:
                self.timescales_, self.periods_ = set_memory(
                    self.model_, control, self.timescales, self.memory, self.fast_share, self.seed
                )
            elif self._explicit_timescales or (self._explicit_memory and self.memory == "oscillation"):
                raise ValueError(
                    "timescales and memory set the memory along the time channel, which control_options "
                    "turn off (time_channel=False): pass timescales=None (and memory 'auto' or 'decay')"
                )
        self.biases_ = self.spreads_ = None
        self.temperature_ = 0.0  # the exact "ppv"; a fine-tuned map reads its smooth stand-in (reservoir_tuning)
        if any(STATE_FEATURES[f].thresholds for f in self.features if f in STATE_FEATURES):
            generator = torch.Generator().manual_seed(self.seed)
            chosen = torch.randperm(control.batch_size, generator=generator)[:_BIAS_SERIES]
            self.biases_, self.spreads_ = self._thresholds(control[chosen.sort().values], generator)
        sizes: list[int] = []
        with torch.no_grad():
            probe = self._batch_features(control[:1], observations[:1], sizes)
        self.feature_slices_ = {}
        for feature, size in zip(self.features, sizes):
            start = sum(s.stop - s.start for s in self.feature_slices_.values())
            self.feature_slices_[feature] = slice(start, start + size)
        # log-signature windows: their states are the windows' terms
        self.state_width_ = control.coeffs.shape[-1] if self.model_ is None else reservoir_state_width(self.model_)
        self.num_features_ = probe.shape[1]
        return self

    # -------------------------------------------------------------------------------------------- states
    def states(self, control: Control) -> torch.Tensor:
        """The reservoir's states at every knot of ``control`` (a batch of `inputs`).

        Arguments:
            control: the model's input, batch size B.

        Returns:
            (B, K, H) states at the knots 0..max(end_index), constant after each sample's end (a CT-FWP's fast
            weights flattened, H = heads·d²); for ``"logsignature"`` the path's points (B, K, 1 + C).
        """
        self._check_fitted()
        return self._states(control)

    def _states(self, control: Control) -> torch.Tensor:
        with torch.no_grad():
            if self.model_ is None:
                return control.coeffs[:, : int(control.end_index.max()) + 1, 0]
            fused = self._fused_model(control.coeffs.device)
            if fused is not None:  # the compiled loop of the fused features, states written out
                terms, h0 = fused.scan_inputs(control)
                return fused_states(terms, control.end_index, h0, fused.matrices(), fused.B.weight, fused.structure)
            return reservoir_states(self.model_, control)

    def _states_batch(self, knots: int, like: torch.Tensor) -> int:
        """Series per batch whose states are formed at once: at most ``batch_size``, and fewer where their states
        (B × knots × H numbers) would pass the budget; at least one.

        Raises:
            MemoryError: one series' states alone need more memory than ``like``'s device has free, said up front
                with the numbers (instead of the allocator failing, or the machine swapping, part way).
        """
        width = (
            self.state_width_
            if hasattr(self, "state_width_")
            else (reservoir_state_width(self.model_) if self.model_ is not None else like.shape[-1])
        )
        need = knots * width * like.element_size()
        free = _free_memory(like.device)
        if free is not None and need > free:
            raise MemoryError(
                f"random features: the states of one series of {knots:,} knots × {width:,} units need "
                f"{_bytes(need)} at once, and {like.device} has {_bytes(free)} free; "
                "use fewer units (width), a diagonal or 2×2-block linear-cde reservoir on the CPU (its "
                "fused kernel stores no states), or series with fewer points (e.g. averaged over "
                "windows)"
            )
        return max(1, min(self.batch_size, _STATE_BUDGET // (knots * width)))

    @staticmethod
    def states_of(model: torch.nn.Module, control: Control) -> torch.Tensor:
        """`reservoir_states` of another ``model`` of this map's kind (a fine-tuned copy of ``model_``), with
        gradients.

        Arguments:
            model: the reservoir model; control: its input, batch size B.

        Returns:
            (B, K, H) states at the knots.
        """
        return reservoir_states(model, control)

    def _thresholds(self, control: Control, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(num_biases, H) quantiles, uniform in [0.25, 0.75] per unit, of the units' states on ``control``, and (H,)
        each unit's spread there: its interquartile range (the smooth "ppv"'s unit of width, `positive_proportion`;
        the smallest positive one where a unit is constant)."""
        ends = control.end_index
        points = int((ends + 1).sum())  # the states at the series' knots, in order (series, knot)
        chosen = torch.randperm(points, generator=generator)[:_BIAS_POINTS] if points > _BIAS_POINTS else None
        fused = self._fused_model(control.coeffs.device)
        if fused is not None:  # the chosen states only, from the compiled loop
            index = torch.arange(points) if chosen is None else chosen
            offsets = torch.cumsum(ends.cpu() + 1, dim=0)
            series = torch.searchsorted(offsets, index, right=True)
            knots = index - (offsets[series] - (ends.cpu()[series] + 1))
            terms, h0 = fused.scan_inputs(control)
            by_unit = fused_states(
                terms, ends, h0, fused.matrices(), fused.B.weight, fused.structure, torch.stack([series, knots], dim=1)
            )  # (H, M)
        else:  # the states of batch_size series at a time (within the memory budget), the chosen ones kept
            kept, first = [], 0  # (their order does not matter: each unit's states are sorted below)
            batch = self._states_batch(int(ends.max()) + 1, control.coeffs)
            for start in range(0, control.batch_size, batch):
                part = control[start : start + batch]
                states = self._states(part)
                pooled = states[_inside(part.end_index, states.shape[1], torch.bool).squeeze(-1)]  # (M_part, H)
                if chosen is not None:
                    inside = chosen[(chosen >= first) & (chosen < first + pooled.shape[0])]
                    pooled = pooled[(inside - first).to(pooled.device)]
                kept.append(pooled)
                first += int((part.end_index + 1).sum())
            pooled = torch.cat(kept)
            by_unit = pooled.t().contiguous()
        if by_unit.device.type == "cpu":  # numpy sorts each unit's row 4-7x faster than torch
            ordered = torch.from_numpy(np.sort(by_unit.numpy(), axis=1))  # (H, M)
        else:
            ordered = by_unit.sort(dim=1).values
        quantiles = torch.rand(self.num_biases, ordered.shape[0], generator=generator, dtype=torch.float64) * 0.5 + 0.25
        last = ordered.shape[1] - 1
        position = quantiles.to(ordered.device) * last
        below = position.floor().long()
        above = (below + 1).clamp(max=last)
        weight = (position - below).to(ordered.dtype)
        low = torch.gather(ordered, 1, below.t()).t()  # (num_biases, H)
        high = torch.gather(ordered, 1, above.t()).t()
        spreads = ordered[:, round(0.75 * last)] - ordered[:, round(0.25 * last)]
        positive = spreads[spreads > 0]
        floor = positive.min() if positive.numel() else torch.ones((), dtype=spreads.dtype, device=spreads.device)
        return low + weight * (high - low), torch.where(spreads > 0, spreads, floor)

    # -------------------------------------------------------------------------------------------- features
    def transform(
        self,
        times: torch.Tensor | IrregularDataset | Observations,
        values: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Features of series.

        Arguments:
            times: (B, T) observation times, strictly increasing within each sample's length; or the series as one
                `IrregularDataset` or `Observations` (``values`` and ``lengths`` then None).
            values: (B, T, C) observations as at fit (standardised, or raw with ``standardise``), NaN for missing;
                dtype and device of fit.
            lengths: (B,) valid observations per sample; None (default): all T.

        Returns:
            (B, num_features_) float64 tensor on ``values``' device; a sample's row does not depend on the batch
            it is in.

        Raises:
            ValueError: the states overflowed (non-finite features): lower ``input_scale`` or the model's
                ``init_scale``.
        """
        self._check_fitted()
        observations = self._observations(times, values, lengths)
        values = observations.values
        rows = []
        with torch.no_grad():
            # each batch's input is built from its own series (a series' features do not depend on the others)
            knots = int(observations.lengths.max())  # at most (log-signature windows have fewer)
            if self._fused_model(values.device) is not None:  # no states stored: the batch holds the pieces' terms only
                batch = max(1, _STATE_BUDGET // (knots * (1 + values.shape[-1])))
            else:
                batch = self._states_batch(knots, values)
            for start in range(0, values.shape[0], batch):
                part = observations[start : start + batch]
                rows.append(self._batch_features(self._inputs(part), part))
        features = rows[0] if len(rows) == 1 else torch.cat(rows)
        if not bool(torch.isfinite(features).all()):
            raise ValueError(
                f"reservoir {self.reservoir!r} gave non-finite features (its states overflowed): lower "
                f"input_scale (now {self.input_scale}) or the model's init_scale"
            )
        return features

    def fit_transform(
        self,
        times: torch.Tensor | IrregularDataset | Observations,
        values: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`fit`, then `transform` of the same observations.

        Arguments:
            times: (N, T) times, or the series as one `IrregularDataset` or `Observations`, as `fit`.
            values: (N, T, C) or None, as `fit`.
            lengths: (N,) or None, as `fit`.

        Returns:
            (N, num_features_) float64 tensor.
        """
        data = _series(times, values, lengths)  # checked once, for both
        return self.fit(data).transform(data)

    def _fused_model(self, device: torch.device) -> LinearCDE | None:
        """The reservoir where the features come from the fused kernel (`neuralde_seq.ops.reservoir_features`): a
        linear CDE reservoir, diagonal or of 2×2 blocks, reading the path's increments, on a CPU, with features the
        kernel pools (and "values", which do not read the reservoir), exact "ppv" (not a fine-tuned map's smooth
        one), and numba installed; else None: every state is formed and pooled (`states`, `pooled`), the same
        numbers."""
        model = self.model_
        fused = (
            isinstance(model, LinearCDE)
            and device.type == "cpu"
            and model.control_depth == 1
            and (model.structure == "diagonal" or (model.structure == "block" and model.block_size == 2))
            and set(self.features) <= set(POOLED_FEATURES) | set(PATH_FEATURES)
            and self.temperature_ == 0.0
            and fused_available()
        )
        return model if fused and isinstance(model, LinearCDE) else None

    def _batch_features(self, control: Control, observations: Observations, sizes: list | None = None) -> torch.Tensor:
        """(B, F) features of one batch (its rescaled observations and the reservoir's input built from them), in the
        order of ``features``; ``sizes`` (if given) gets each one's width."""
        constant = self._path_features(observations, control)
        model = self._fused_model(control.coeffs.device)
        if model is None:
            return self.pooled(self._states(control), control.end_index, constant, sizes=sizes)
        with torch.no_grad():
            terms, h0 = model.scan_inputs(control)
            pooled = fused_features(
                terms,
                control.end_index,
                h0,
                model.matrices(),
                model.B.weight,
                self.biases_,
                model.structure,
                tuple(f for f in self.features if f not in PATH_FEATURES),
            )
        parts = [pooled[f] if f not in PATH_FEATURES else self._path_part(constant, f) for f in self.features]
        if sizes is not None:
            sizes.extend(part.shape[1] for part in parts)
        # one float64 array, each part converted as it is copied in (a cat of converted parts copies twice)
        out = torch.empty(
            parts[0].shape[0], sum(part.shape[1] for part in parts), dtype=torch.float64, device=parts[0].device
        )
        start = 0
        for part in parts:
            out[:, start : start + part.shape[1]] = part
            start += part.shape[1]
        return out

    def pooled(
        self,
        states: torch.Tensor,
        end_index: torch.Tensor,
        path_part: torch.Tensor | None = None,
        *,
        biases: torch.Tensor | None = None,
        temperature: float | None = None,
        sizes: list | None = None,
    ) -> torch.Tensor:
        """The features of a batch from its states, in the order of ``features`` (differentiable in the states and
        the thresholds: `neuralde_seq.reservoir_tuning` trains through it).

        Arguments:
            states: (B, K, H) `states` of the batch (for ``"logsignature"`` the path's points).
            end_index: (B,) each sample's final knot.
            path_part: (B, width) the path features (`PATH_FEATURES`, which do not depend on the reservoir) in the
                order of ``features``, `_path_features`; None or (B, 0) when ``features`` has none.
            biases: (num_biases, H) "ppv" thresholds replacing ``biases_`` (default None: ``biases_``).
            temperature: the "ppv" stand-in's temperature replacing ``temperature_`` (`positive_proportion`).
            sizes: a list that gets each feature's width, or None.

        Returns:
            (B, F) float64 features.
        """
        biases = self.biases_ if biases is None else biases
        temperature = self.temperature_ if temperature is None else temperature
        parts = []
        if self.model_ is not None:
            inside = _inside(end_index, states.shape[1], states.dtype)
            pooling = Pooling(end_index, inside, inside.sum(dim=1), self.num_times, biases, self.spreads_, temperature)
        else:  # log-signatures of the path's points
            depth = int(self.model_options.get("depth", 3))
            backend = self.model_options.get("backend", "torch" if depth <= 2 else "pysiglib")
        for feature in self.features:
            if feature in PATH_FEATURES:
                part = self._path_part(path_part, feature)
            elif self.model_ is None:
                part = logsignature_feature(states, end_index, feature, self.num_times, depth, backend)
            else:
                part = STATE_FEATURES[feature].pool(states, pooling)
            parts.append(part.to(torch.float64))
            if sizes is not None:
                sizes.append(part.shape[1])
        return torch.cat(parts, dim=1)

    def _points(self, observations: Observations) -> tuple[torch.Tensor, torch.Tensor]:
        """The series' rescaled values at the knots (missing ones linearly interpolated), (B, K, C), and each
        sample's end knot (B,)."""
        path = self._linear_path(observations, time_channel=False, time_unit=self.input_spec_.time_unit)
        return path.coeffs[:, : int(path.end_index.max()) + 1, 0], path.end_index

    def _points_in(self, control: Control, channels: int) -> torch.Tensor | None:
        """The value channels at the knots read off the reservoir's own input, where that input is the linear path
        of the same rescaled values with the time channel first and nothing after them (the linear CDE reservoirs'
        registry options; the path is then not built twice); else None."""
        if self.reservoir == "logsignature":
            return None
        options = self._control_options()
        plain = (
            isinstance(options.interpolation, Linear)
            and options.time_channel
            and not (options.intensity_channel or options.recency_channel)
            and control.channels == 1 + channels
        )
        return control.coeffs[:, : int(control.end_index.max()) + 1, 0, 1:] if plain else None

    def _path_features(self, observations: Observations, control: Control | None = None) -> torch.Tensor:
        """The path features (`PATH_FEATURES`) of the batch's rescaled observations in the order of ``features``,
        (B, width) float64; (B, 0) without them. ``control``: the batch's reservoir input, whose knots may give the
        values (`_points_in`)."""
        values = observations.values
        wanted = [f for f in self.features if f in PATH_FEATURES]
        if not wanted:
            return torch.zeros(values.shape[0], 0, dtype=torch.float64, device=values.device)
        points = None if control is None else self._points_in(control, values.shape[-1])
        if points is None or control is None:  # (points come from a control only)
            points, end = self._points(observations)
        else:
            end = control.end_index
        parts = [PATH_FEATURES[feature].compute(points, end, self.num_times, self.levels_) for feature in wanted]
        return torch.cat([part.to(torch.float64) for part in parts], dim=1)

    def _path_part(self, path_part: torch.Tensor | None, feature: str) -> torch.Tensor:
        """``feature``'s columns of `_path_features`' output."""
        if path_part is None:
            raise ValueError(f"feature {feature!r} is a path feature: give path_part (the map's _path_features)")
        channels = self.value_scales_.numel()

        def width(name: str) -> int:
            return PATH_FEATURES[name].width(channels, self.num_times, self.num_levels)

        start = sum(width(f) for f in self.features[: self.features.index(feature)] if f in PATH_FEATURES)
        return path_part[:, start : start + width(feature)]
