"""Controls: continuous paths X(s) built from irregularly sampled observations.

A batch of observations is ``times`` (B, T), ``values`` (B, T, C) with NaN marking a missing value, and
``lengths`` (B,) (each sample's valid prefix; anything after it is padding and is ignored). From it
`build_control` builds a `Control`: a batch of piecewise-cubic paths on one shared grid of
*knots* in a parameter s, each sample ending at its own final knot and constant after it.

Parametrisation (the ``parametrization`` option):

- ``"time"``: s is the observation time itself. Every sample must be observed on the same time grid
  (values may be NaN, lengths may differ), as in the benchmarks of the papers (Speech Commands,
  PhysioNet, UEA with dropped points). Rows of ``times`` that disagree raise an error.
- ``"index"``: s is the observation index 0, 1, ..., L_b − 1 of each sample, so samples may have
  different times; real time enters only through the time channel (``time_channel=True``).

The units of s matter: the fields of the CT-FWPs (ode and cde forms) and of GRU-ODE change on a scale of about
one unit of s, and a fixed-step solve takes one step per knot interval unless ``step_size`` is given. With
``"time"`` and times in large units (seconds between hourly observations, or times × 1e9) those steps are far
outside rk4's stability region: measured at initialisation, Oja and Delta give non-finite logits from gaps of
3 to 100 (float32) or 10 to 1e5 (float64), GRU-ODE from 10 to 100; NCDE, Hebb and post-Delta did not. Rescale
the times so that gaps are about 1, or use ``"index"`` (every gap 1 whatever the time units).

Log-signature controls (``interpolation="logsignature"``) are always indexed by window: window j of every
sample occupies s ∈ [j, j + 1) and the control there is the window's log-signature (the rate of the
driving path per unit s), so batching never changes the grid of any sample. A log-signature describes only
how the path moves over its window, so a model reading nothing else cannot tell a path from the path shifted
by a constant; ``window_start_values=True`` appends the path's value at each window's start (constant over
the window) in its value and mask channels as further channels.

Missing values (the ``missing`` option) are never silently zero-filled: ``"interpolate"`` interpolates
through them (constant before the first and after the last observation), ``"forward_fill"`` carries the
last observation forward (the first observation backward), and ``"zero"`` writes zeros only together
with a mask channel. A channel with no observation at all in a sample raises an error unless
``unobserved_fill`` names the value to use.

`build_control` checks the options (`check_control_options`), turns the observations into the control's channels
at their points (`observed_channels`: time, values, masks, counts; missing values and the time unit handled there),
and hands them to the interpolation's builder, one per name in `INTERPOLATION_BUILDERS`: `natural_cubic_control`,
`hermite_cubic_control`, `linear_control`, `rectilinear_control`, `logsignature_window_control`.

Observations are checked by `validate_observations` (shapes, lengths, NaN
times, increasing times, and the finite range of values and times in their dtype). Log-signature windows are built
here (`logsignature_control`); their disk cache is `neuralde_seq.controls.logsignature_cache`.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Callable, Mapping, NamedTuple, Sequence

import torch

from ..input_checks import unknown_name_message
from ..user_warnings import warn_user
from ..observations import _first, batch_selection, observation_span, validate_observations
from ..signatures import DEFAULT_BASIS, check_logsignature_options, logsignature_channels, logsignature_windows
from .splines import fill_missing_linear, polynomial_pieces

__all__ = ["Control", "build_control", "resolve_time_unit", "time_unit_value", "RenamedOptionWarning",
           "renamed_control_options", "INTERPOLATIONS",
           "MISSING_POLICIES"]

MISSING_POLICIES = ("interpolate", "forward_fill", "zero")


@dataclasses.dataclass
class Control:
    """A batch of piecewise-cubic paths on shared knots.

    On [knots[i], knots[i+1]) sample b's path is ``a + b f + c f² + d f³`` with f = s − knots[i], the four
    coefficients being ``coeffs[b, i, 0:4]``; the last piece, i = K − 1, extends past the last knot. After
    its final knot ``knots[end_index[b]]`` every path is constant (log-signature rates are zero there), so
    a sample's path is the same whether it is alone or padded in a batch.

    Attributes:
        knots: (K,) strictly increasing parameter values; a solver steps through each of them.
        coeffs: (B, K, 4, C) polynomial coefficients.
        end_index: (B,) long, index into ``knots`` of each sample's final knot.
        piecewise_constant: True for log-signature windows. Then the path's "value" and "derivative"
            are both the window's log-signature rate (the input of an RDE vector field), followed, for a
            control built with ``window_start_values=True``, by the observed path's value at the window's start.
        channels_info: names of the channels, for display.
        initial_value: (B, C_path) the observed path's point at the first knot, for log-signature windows
            (whose coefficients hold only the windows' increments and areas; models such as the NRDE start
            from it); None for interpolated controls, whose value at the first knot is ``evaluate``.
    """

    knots: torch.Tensor
    coeffs: torch.Tensor
    end_index: torch.Tensor
    piecewise_constant: bool = False
    channels_info: tuple[str, ...] = ()
    initial_value: torch.Tensor | None = None

    def __post_init__(self):
        if self.knots.dim() != 1 or self.knots.shape[0] < 2:
            raise ValueError(f"knots must have shape (K,) with K >= 2, got {tuple(self.knots.shape)}")
        if self.coeffs.dim() != 4 or self.coeffs.shape[1:3] != (self.knots.shape[0], 4):
            raise ValueError(f"coeffs must have shape (B, K={self.knots.shape[0]}, 4, C): one piece per knot "
                             f"interval and one past the last knot; got {tuple(self.coeffs.shape)}")
        if self.end_index.shape != (self.coeffs.shape[0],):
            raise ValueError(f"end_index must have shape ({self.coeffs.shape[0]},), got {tuple(self.end_index.shape)}")

    # ---- shape facts ---------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.coeffs.shape[0]

    @property
    def channels(self) -> int:
        """Number of input channels of the path."""
        return self.coeffs.shape[-1]

    @property
    def end(self) -> torch.Tensor:
        """(B,) each sample's final parameter value."""
        return self.knots[self.end_index]

    @property
    def start(self) -> torch.Tensor:
        return self.knots[0]

    def __len__(self) -> int:
        return self.batch_size

    def __getitem__(self, index) -> "Control":
        """The controls of the samples selected by ``index``: an int (negative counts from the end), a slice, or
        a 1-D integer or bool selection (tensor, numpy array or list), checked by
        `batch_selection`. An int keeps the batch dimension: ``X[i]`` is a
        batch of one sample, which is what the models read."""
        index = batch_selection(index, self.batch_size, "Control")
        end_index = self.end_index[index]
        last = int(end_index.max())
        # Trim the knots to the last one any selected sample needs: a short batch then solves a short
        # interval, and every sample still sees exactly the same knots as alone.
        return Control(self.knots[: last + 1], self.coeffs[index][:, : last + 1], end_index,
                       self.piecewise_constant, self.channels_info,
                       None if self.initial_value is None else self.initial_value[index])

    def to(self, *args, **kwargs) -> "Control":
        """Move and cast like ``torch.Tensor.to``: ``coeffs`` and ``initial_value`` get ``.to(*args, **kwargs)``,
        the knots follow the coefficients' device and dtype, and the end indices keep their integer type.

        Returns:
            A new `Control`.
        """
        coeffs = self.coeffs.to(*args, **kwargs)
        return Control(self.knots.to(device=coeffs.device, dtype=coeffs.dtype), coeffs,
                       self.end_index.to(coeffs.device), self.piecewise_constant, self.channels_info,
                       None if self.initial_value is None else self.initial_value.to(*args, **kwargs))

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """Tensors a gradient could flow into (for ``adjoint_params``).

        Returns:
            ``(coeffs,)``, or ``(coeffs, initial_value)`` for log-signature windows that have one.
        """
        return (self.coeffs,) if self.initial_value is None else (self.coeffs, self.initial_value)

    # ---- evaluation ----------------------------------------------------------------------------
    def _interval(self, s: torch.Tensor, side: str) -> torch.Tensor:
        # side="right": s in [k_i, k_{i+1}) belongs to piece i; "left": s in (k_i, k_{i+1}].
        index = torch.searchsorted(self.knots, s.detach().to(self.knots.dtype), right=(side == "right")) - 1
        return index.clamp(0, self.knots.shape[0] - 1)

    def piece_at(self, s, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
        """The piece holding ``s`` and the offset into it.

        Arguments:
            s: the parameter value: a scalar, or a (B,) tensor with one value per sample.
            side: which piece a knot belongs to: "right" (default, the piece starting there) or "left" (the
                piece ending there).

        Returns:
            ``(piece, f)``: the index of the piece holding ``s`` and the offset s − knots[piece], each scalar or
                (B,) as ``s``.

        Raises:
            ValueError: ``s`` is 1-D but not of shape (B,).
        """
        s = torch.as_tensor(s, dtype=self.knots.dtype, device=self.knots.device)
        if s.dim() == 1 and s.shape != (self.batch_size,):
            raise ValueError(f"s must be a scalar or have shape ({self.batch_size},), got {tuple(s.shape)}")
        piece = self._interval(s, side)
        return piece, s - self.knots[piece]

    def _coefficients(self, piece: torch.Tensor, f: torch.Tensor):
        f = f.to(self.coeffs.dtype)
        if piece.dim() == 0:
            coefficients = self.coeffs[:, piece]  # (B, 4, C)
        else:
            coefficients = self.coeffs[torch.arange(self.batch_size, device=piece.device), piece]
            f = f.unsqueeze(-1)
        return coefficients.unbind(-2), f

    def evaluate_piece(self, piece: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        """X on piece ``piece`` at offset ``f`` from its first knot.

        Solvers that know which piece a stage belongs to call this directly, so that rounding near a
        knot can never pick the neighbouring piece.

        Arguments:
            piece: the piece's index, a scalar or (B,) long tensor (one per sample).
            f: the offset from the piece's first knot, a scalar or (B,) as ``piece``.

        Returns:
            X of shape (B, C).
        """
        coefficients, f = self._coefficients(piece, f)
        return self._value(coefficients, f)

    def derivative_piece(self, piece: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        """dX/ds on piece ``piece`` at offset ``f`` (see `evaluate_piece`).

        Arguments:
            piece: the piece's index, a scalar or (B,) long tensor (one per sample).
            f: the offset from the piece's first knot, a scalar or (B,) as ``piece``.

        Returns:
            dX/ds of shape (B, C).
        """
        coefficients, f = self._coefficients(piece, f)
        return self._derivative(coefficients, f)

    def evaluate_points(self, pieces: torch.Tensor, f: torch.Tensor, value: bool = True,
                        derivative: bool = True) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(X, dX/ds) of every sample at P points: what fixed-step solvers read for a block of stages at once.

        Arguments:
            pieces: (P,) long, the points' pieces.
            f: (P,) the points' offsets from their pieces' first knots.
            value: compute X (default True).
            derivative: compute dX/ds (default True).

        Returns:
            ``(X, dX/ds)``, each (B, P, C), or None where not asked for.
        """
        coefficients = self.coeffs[:, pieces].unbind(-2)  # (B, P, C) each
        f = f.to(self.coeffs.dtype).unsqueeze(-1)
        return (self._value(coefficients, f) if value else None,
                self._derivative(coefficients, f) if derivative else None)

    def _value(self, coefficients, f):
        a, b, c, d = coefficients
        return a if self.piecewise_constant else a + f * (b + f * (c + f * d))

    def _derivative(self, coefficients, f):
        a, b, c, d = coefficients
        return a if self.piecewise_constant else b + f * (2 * c + f * 3 * d)

    def evaluate(self, s, side: str = "right") -> torch.Tensor:
        """X(s); for log-signature windows, the window's log-signature rate.

        Arguments:
            s: the parameter value: a scalar, or a (B,) tensor with one value per sample.
            side: which piece a knot belongs to: "right" (default, the piece starting there) or "left" (the
                piece ending there, e.g. for a derivative at a sample's final time).

        Returns:
            X(s) of shape (B, C).
        """
        return self.evaluate_piece(*self.piece_at(s, side))

    def derivative(self, s, side: str = "right") -> torch.Tensor:
        """dX/ds; for log-signature windows, the window's log-signature rate.

        Arguments:
            s: the parameter value: a scalar, or a (B,) tensor with one value per sample.
            side: which piece a knot belongs to: "right" (default, the piece starting there) or "left" (the
                piece ending there).

        Returns:
            dX/ds of shape (B, C).
        """
        return self.derivative_piece(*self.piece_at(s, side))

    def final_value(self) -> torch.Tensor:
        """Each sample's X at its own final knot.

        Returns:
            (B, C) values.
        """
        return self.evaluate(self.end, side="left")

    def final_derivative(self) -> torch.Tensor:
        """Each sample's dX/ds just before its own final knot.

        Returns:
            (B, C) derivatives.
        """
        return self.derivative(self.end, side="left")


# ---------------------------------------------------------------------------------------------------
# building controls

def _fill_forward(x: torch.Tensor) -> torch.Tensor:
    """Forward fill NaNs along dim -2, then fill leading NaNs with the first observation."""
    observed = ~torch.isnan(x)
    length = x.shape[-2]
    position = torch.arange(length, device=x.device).view(1, length, 1).expand_as(x)
    last_seen = torch.where(observed, position, torch.zeros_like(position)).cummax(dim=-2).values
    first_seen = torch.where(observed, position, torch.full_like(position, length)).min(dim=-2, keepdim=True).values
    source = torch.where(observed.cumsum(-2) > 0, last_seen, first_seen.clamp(max=length - 1).expand_as(x))
    return torch.gather(x, -2, source)


def resolve_time_unit(options: dict, times: torch.Tensor, lengths: torch.Tensor) -> dict:
    """``options`` (build_control keyword arguments) with ``time_unit="auto"`` replaced by the span of the
    given (training) observations (`time_unit_value`); unchanged otherwise. The runner and the estimators resolve
    it in their `neuralde_seq.training.input_spec.InputSpec`.

    Returns:
        A new dict of the options, ``time_unit`` resolved.

    Raises:
        ValueError: ``time_unit="auto"`` but the training samples span no time.
    """
    if options.get("time_unit") != "auto":
        return dict(options)
    return {**options, "time_unit": time_unit_value("auto", times, lengths)}


def time_unit_value(time_unit, times: torch.Tensor, lengths: torch.Tensor | None,
                            argument: str = "time_unit") -> float | None:
    """A ``time_unit`` setting as the number (or None) it stands for on the training times.

    Arguments:
        time_unit: None (times as given), a finite positive number, or ``"auto"``: the longest span of the training
            samples, ``observation_span(times, lengths)``.
        times: (N, T) training observation times.
        lengths: (N,) their valid steps per sample (None: all T).
        argument: the argument's name in messages.

    Returns:
        None or a positive float.

    Raises:
        ValueError: any other value, or ``"auto"`` on training samples that span no time.
    """
    if time_unit is None:
        return None
    if isinstance(time_unit, str):
        if time_unit != "auto":
            raise ValueError(f"{argument} must be None, a positive number or 'auto', got {time_unit!r}")
        if lengths is None:
            lengths = torch.full((times.shape[0],), times.shape[1], dtype=torch.long, device=times.device)
        span = observation_span(times, lengths)
        if not span > 0:
            raise ValueError(f"{argument}='auto': the training samples span no time (every sample has one "
                             "observation time); give a number")
        return float(span)
    if isinstance(time_unit, bool) or not isinstance(time_unit, numbers.Real) or not (
            math.isfinite(float(time_unit)) and float(time_unit) > 0):
        raise ValueError(f"{argument} must be None, a positive number or 'auto', got {time_unit!r}")
    return float(time_unit)


class RenamedOptionWarning(FutureWarning):
    """An option given by its former name (it is still read): the message gives the new spelling."""


def renamed_interpolation(interpolation: str | None, method: str | None) -> str:
    """`build_control`'s ``interpolation`` (None: not given, "hermite_cubic"), or its former name ``method`` when that
    is given (with a `RenamedOptionWarning`).

    Raises:
        ValueError: both given (even with the same value: one of them is a leftover).
    """
    if method is None:
        return "hermite_cubic" if interpolation is None else interpolation
    if interpolation is not None:
        raise ValueError(f"interpolation={interpolation!r} and method={method!r} (its former name) are both given: "
                         "give interpolation only")
    warn_user(f"the control option method={method!r} is now interpolation={method!r} (method names the solver's "
              "method): write interpolation", RenamedOptionWarning)
    return method


def renamed_control_options(options: Mapping) -> dict:
    """`build_control` keyword arguments (a config row's ``control``, an estimator's ``control_options``) with the
    former name ``method`` read as ``interpolation`` (with a `RenamedOptionWarning`).

    Raises:
        ValueError: both names given.
    """
    options = dict(options)
    if "method" in options:
        if "interpolation" in options:
            raise ValueError(f"control options give both interpolation={options['interpolation']!r} and "
                             f"method={options['method']!r} (its former name): give interpolation only")
        options["interpolation"] = renamed_interpolation(None, options.pop("method"))
    return options


def build_control(times: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor | None = None, *,
                  interpolation: str | None = None, time_channel: bool = True, mask_channel: bool = False,
                  intensity_channel: bool = False, recency_channel: bool = False, count_unit: float | None = None,
                  missing: str = "interpolate",
                  unobserved_fill: float | Sequence[float] | None = None, parametrization: str = "time",
                  time_unit: float | None = None, depth: int = 2, step: int = 4, logsig_backend: str = "torch",
                  logsig_basis: str = DEFAULT_BASIS, window_start_values: bool = False,
                  method: str | None = None) -> Control:
    """Build a control path from irregularly sampled observations.

    Arguments:
        times: (B, T) observation times, strictly increasing within each sample's length.
        values: (B, T, C) observations; NaN marks a missing value.
        lengths: (B,) number of valid observations per sample (default: all T). Entries after a
            sample's length are padding and are ignored.
        interpolation: one of `INTERPOLATIONS`: "natural_cubic", "hermite_cubic" (Hermite cubic with
            backward differences: causal and smooth), "linear", "rectilinear" (time moves first, then the
            values, between observations; needs the time channel) or "logsignature" (piecewise-constant
            log-signature windows, for neural RDEs); None (default): "hermite_cubic".
        time_channel: prepend the observation time as channel 0.
        mask_channel: append C channels that are 1 where a value was observed and 0 where missing.
        intensity_channel: append C channels with the cumulative count of observations per channel
            (the "observational intensity" of PhysioNet's OI setting): at point i of a sample, how many of its
            points 0..i observe the channel.
        recency_channel: append C channels with the time since each channel's last observation (in the time
            unit): 0 at a point that observes the channel; before the channel's first observation, and throughout
            a channel the sample never observes, the time since the sample's first point. With the counts, what
            GRU-D's decays read: how stale each value is.
        count_unit: the intensity channels' counts are divided by this (a positive number; None, the default: raw
            counts). A count grows with the series' length, as the time does: on series of thousands of points raw
            counts drive a CDE's state as raw times do (the estimators' ``intensity_channel="auto"`` sets it to the
            median count of a channel in a training series).
        missing: one of `MISSING_POLICIES` (see the module docstring).
        unobserved_fill: the value of a channel with no observation at all in a sample: a finite number for every
            channel, or a sequence of C finite numbers, one per channel (e.g. the training means); None (default)
            raises an error instead (NaN or an infinity is refused).
        parametrization: "time" or "index" (see the module docstring). Ignored for log-signatures.
        time_unit: times are divided by this (a positive number) before anything else: the time channel then
            reads time in these units, and with ``parametrization="time"`` so does the solver's parameter s, in
            which ``SolverOptions.step_size`` is measured. E.g. hourly data stamped in seconds: 3600; a
            dataset whose series span 0-1,343 steps: 1343, for a time channel in [0, 1] (compute it on the
            training split and use the same unit for every split). None (default): times as given. The
            runner (``control: {time_unit: auto}``) and the scikit-learn estimators (``control_options``) accept
            "auto": the training split's `observation_span`
            (`resolve_time_unit`); here give the number.
        depth: log-signature depth (1 or 2 with the torch backend, any with the others; default 2). Used only
            with ``interpolation="logsignature"``.
        step: log-signature window size, in observation intervals (default 4). Used only with
            ``interpolation="logsignature"``.
        logsig_backend: library computing the log-signatures: "torch" (default, depth <= 2, no extra
            dependency), "pysiglib" or "signatory" (optional dependencies; see
            `neuralde_seq.signatures`).
        logsig_basis: coordinates of the log-signatures: "lyndon_brackets" (default), "lyndon_words" or
            "expand" (see `neuralde_seq.signatures`; at depth <= 2 the Lyndon bases coincide).
        window_start_values: log-signatures only: after each window's log-signature, also give the path's
            value at the window's start (the point j·step of window j: its values and masks, missing values
            interpolated as for the log-signature; not the time and count channels, whose level is the position in
            the series, unbounded with its length), constant over the window. An RDE field
            (``form="rde"``) then reads the path's level throughout, not only its movement: without it, its
            output is the same for the values and the values plus any constant. Default False.

        method: the former name of ``interpolation`` (``method`` is the solver's method everywhere else): still
            read, with a `FutureWarning` giving the new spelling.

    Returns:
        A `Control` with ``channels = C + time_channel + C·(mask_channel + intensity_channel + recency_channel)``
            (for log-signatures, ``logsignature_channels(that number, depth, logsig_basis)``, the number of
            log-signature terms of that path in that basis, plus C + C·mask_channel with
            ``window_start_values``).

    Raises:
        ValueError: an unknown interpolation, missing policy or parametrization; a flag (``time_channel``,
            ``mask_channel``, ``intensity_channel``, ``recency_channel``) that is not a bool; ``unobserved_fill`` that
            is not None, a finite number or C finite numbers; ``window_start_values`` without
            ``interpolation="logsignature"`` (an interpolated control already gives the level); observations that
            `validate_observations` refuses; an all-NaN channel without ``unobserved_fill``; coefficients that
            overflow.
    """
    interpolation = renamed_interpolation(interpolation, method)
    check_control_options(interpolation, time_channel=time_channel, mask_channel=mask_channel,
                          intensity_channel=intensity_channel, recency_channel=recency_channel, missing=missing,
                          unobserved_fill=unobserved_fill, count_unit=count_unit,
                          parametrization=parametrization, window_start_values=window_start_values,
                          time_unit=time_unit)
    builder = INTERPOLATION_BUILDERS[interpolation]
    observed = observed_channels(times, values, lengths, time_channel=time_channel, mask_channel=mask_channel,
                                 intensity_channel=intensity_channel, recency_channel=recency_channel,
                                 count_unit=count_unit, missing=missing,
                                 unobserved_fill=unobserved_fill, time_unit=time_unit,
                                 by_index=builder.windows or parametrization == "index")
    given = {"depth": depth, "step": step, "logsig_backend": logsig_backend, "logsig_basis": logsig_basis,
             "window_start_values": window_start_values}
    return builder.build(observed, **{name: given[name] for name in builder.options})


# ---------------------------------------------------------------------------------------------------
# the steps every interpolation shares: options, observations, channels

@dataclasses.dataclass
class ObservedChannels:
    """A control's channels at the observation points, before interpolation: what every builder of
    `INTERPOLATION_BUILDERS` starts from (made by `observed_channels`).

    Attributes:
        path: (B, T, C') the channels (time, values, masks, counts, as named) at the T points of the longest sample;
            NaN only in value channels with ``missing="interpolate"``. Points past a sample's length are padding.
        knots: (T,) strictly increasing parameter values s of the points (the shared time grid, or 0, 1, ..., T − 1).
        lengths: (B,) long, valid points per sample.
        names: (C',) channel names: "time" first when there is a time channel, then "x<c>", "mask<c>", "count<c>",
            "recency<c>".
    """

    path: torch.Tensor
    knots: torch.Tensor
    lengths: torch.Tensor
    names: tuple[str, ...]


def check_control_options(interpolation, *, time_channel, mask_channel, intensity_channel, missing, unobserved_fill,
                          parametrization, window_start_values, time_unit, recency_channel=False,
                          count_unit=None) -> None:
    """Refuse `build_control` options that are bad on their own or together, before any work (arguments as there).

    Raises:
        ValueError: as `build_control` lists, naming the option.
    """
    if interpolation not in INTERPOLATIONS:
        raise ValueError(unknown_name_message("interpolation", interpolation, INTERPOLATIONS,
                                             listing="interpolation must be one of"))
    for flag, given in (("time_channel", time_channel), ("mask_channel", mask_channel),
                        ("intensity_channel", intensity_channel), ("recency_channel", recency_channel)):
        # a string such as "no" would otherwise read as True
        if not isinstance(given, bool) and type(given).__name__ != "bool_":
            raise ValueError(f"{flag} must be True or False, got {given!r}")
    if unobserved_fill is not None and not _finite_number(unobserved_fill) and not (
            isinstance(unobserved_fill, Sequence) and not isinstance(unobserved_fill, str) and len(unobserved_fill) > 0
            and all(_finite_number(v) for v in unobserved_fill)):
        # NaN would mark the filled channel missing again (the result was that of unobserved_fill=0.0)
        raise ValueError(f"unobserved_fill must be None, a finite number or a sequence of finite numbers, one per "
                         f"channel (the value of a channel a sample never observes), got {unobserved_fill!r}")
    if count_unit is not None and not (_finite_number(count_unit) and count_unit > 0):
        raise ValueError(f"count_unit must be None or a positive finite number, got {count_unit!r}")
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing must be one of {MISSING_POLICIES}, got {missing!r}")
    if parametrization not in ("time", "index"):
        raise ValueError(f"parametrization must be 'time' or 'index', got {parametrization!r}")
    if missing == "zero" and not mask_channel:
        raise ValueError("missing='zero' needs mask_channel=True, so that a zero is distinguishable from a "
                         "missing value")
    builder = INTERPOLATION_BUILDERS[interpolation]
    if builder.needs_time_channel and not time_channel:
        raise ValueError(f"interpolation={interpolation!r} needs time_channel=True ({builder.needs_time_channel})")
    if window_start_values and "window_start_values" not in builder.options:
        raise ValueError("window_start_values=True is an option of log-signature controls "
                         f"(interpolation='logsignature'); a {interpolation!r} control already gives the path's value "
                         "at every point")
    if time_unit == "auto":
        raise ValueError("time_unit='auto' is resolved from the training split by the runner and the estimators; "
                         "for build_control give the number, e.g. neuralde_seq.observations.observation_span("
                         "train_times, train_lengths), and use it for every split")
    if time_unit is not None and (isinstance(time_unit, bool) or not isinstance(time_unit, (int, float)) or not (
            time_unit > 0 and math.isfinite(time_unit))):
        raise ValueError(f"time_unit must be a positive finite number or None, got {time_unit!r}")


def _finite_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def observed_channels(times, values, lengths, *, time_channel: bool, mask_channel: bool, intensity_channel: bool,
                      missing: str, unobserved_fill: float | Sequence[float] | None, time_unit: float | None,
                      by_index: bool, recency_channel: bool = False, count_unit: float | None = None
                      ) -> ObservedChannels:
    """The observations validated and turned into a control's channels at their points (options checked by
    `check_control_options`; arguments as `build_control`).

    Arguments:
        times: (B, T) observation times.
        values: (B, T, C) observations, NaN where missing.
        lengths: (B,) valid observations per sample, or None (all T).
        by_index: knots at the observation indices 0, 1, ... (``parametrization="index"``, log-signature windows);
            else at the shared time grid, which every sample must be observed on.

    Returns:
        `ObservedChannels` with C' = C + time_channel + C·(mask_channel + intensity_channel + recency_channel),
        trimmed to the longest sample.

    Raises:
        ValueError: observations `validate_observations` refuses; a channel with no observation in a sample
            without ``unobserved_fill``; ``unobserved_fill`` with other than C values; samples on different time grids
            when not ``by_index``.
    """
    if time_unit is not None and isinstance(times, torch.Tensor):
        times = times.double() / time_unit  # in float64: large raw times keep their resolution
    times, values, lengths, valid = validate_observations(times, values, lengths)
    # Columns after the longest sample are padding of every sample: they must not become knots.
    longest = int(lengths.max())
    times, values, valid = times[:, :longest], values[:, :longest], valid[:, :longest]
    observed = ~torch.isnan(values) & valid.unsqueeze(-1)
    values = _fill_unobserved(values, observed, valid, unobserved_fill)
    knots = (torch.arange(longest, dtype=values.dtype, device=values.device) if by_index
             else _shared_time_grid(times, lengths, valid))
    path, names = _channels(times, values, observed, valid, time_channel=time_channel, mask_channel=mask_channel,
                            intensity_channel=intensity_channel, recency_channel=recency_channel, missing=missing,
                            count_unit=count_unit)
    return ObservedChannels(path, knots, lengths, names)


def _fill_unobserved(values, observed, valid, unobserved_fill):
    """``values`` with every channel a sample never observes set to ``unobserved_fill`` (within its length), or an
    error naming the first such channel when it is None."""
    empty = ~observed.any(dim=1)  # (B, C)
    if not empty.any():
        return values
    if unobserved_fill is None:
        b, c = torch.nonzero(empty)[0].tolist()
        every = empty.all(0)
        where = (f"channel {c} has no observation in any sample" if every[c]
                 else f"sample {b} has no observation in channel {c}")
        raise ValueError(f"all-NaN channel: {where}; pass unobserved_fill=<value> to fill such channels")
    fill = torch.as_tensor(unobserved_fill, dtype=values.dtype, device=values.device)
    if fill.dim() == 1 and fill.shape[0] != values.shape[-1]:
        raise ValueError(f"unobserved_fill has {fill.shape[0]} values, one per channel, but the observations have "
                         f"{values.shape[-1]} channels")
    return torch.where(empty.unsqueeze(1) & valid.unsqueeze(-1), fill.expand_as(values), values)


def _shared_time_grid(times, lengths, valid):
    """(T,) the one time grid of every sample (``parametrization="time"``): the longest sample's times."""
    reference = times[int(torch.argmax(lengths))]
    agree = (times == reference.unsqueeze(0)) | ~valid
    if not agree.all():
        b = _first(~agree.all(1), 1)[0]
        raise ValueError(f"parametrization='time' needs every sample observed on one time grid, but sample {b} "
                         "has different times; use parametrization='index' (time then enters as a channel) or "
                         "put the samples on a common grid with NaN for missing values")
    return reference


def _channels(times, values, observed, valid, *, time_channel, mask_channel, intensity_channel, missing,
              recency_channel=False, count_unit=None):
    """(B, T, C') the control's channels at the points, and their names (`ObservedChannels`)."""
    channel_parts, names = [], []
    if time_channel:
        channel_parts.append(times.unsqueeze(-1))
        names.append("time")
    filled = values.masked_fill(~valid.unsqueeze(-1), float("nan"))
    if missing == "zero":
        filled = torch.where(observed, filled, torch.zeros_like(filled))
    elif missing == "forward_fill":
        filled = _fill_forward(filled)
    channel_parts.append(filled)
    names += [f"x{c}" for c in range(values.shape[-1])]
    if mask_channel:
        channel_parts.append(observed.to(values.dtype))
        names += [f"mask{c}" for c in range(values.shape[-1])]
    if intensity_channel:
        counts = observed.to(values.dtype).cumsum(dim=1)
        channel_parts.append(counts if count_unit is None else counts / count_unit)
        names += [f"count{c}" for c in range(values.shape[-1])]
    if recency_channel:
        channel_parts.append(_time_since_observed(times, observed))
        names += [f"recency{c}" for c in range(values.shape[-1])]
    return torch.cat(channel_parts, dim=-1), tuple(names)


def _time_since_observed(times: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
    """(B, T, C) the time at each point since the channel's last observation at or before it; the time since the
    sample's first point where the channel has none yet. Padding points (past a sample's length) are never observed,
    so they only carry the values on, which no builder reads."""
    position = torch.arange(times.shape[1], device=times.device).view(1, -1, 1).expand_as(observed)
    last = torch.where(observed, position, torch.zeros_like(position)).cummax(dim=1).values  # 0 before the first
    last_time = torch.gather(times.unsqueeze(-1).expand(*observed.shape), 1, last)
    return (times.unsqueeze(-1) - last_time).to(times.dtype)


# ---------------------------------------------------------------------------------------------------
# one builder per interpolation

def natural_cubic_control(observed: ObservedChannels) -> Control:
    """The natural cubic spline through each sample's points (``build_control(interpolation="natural_cubic")``).

    Arguments:
        observed: the channels at the points (`observed_channels`), (B, T, C').

    Returns:
        A `Control` with knots (T,), coeffs (B, T, 4, C').
    """
    path, knots, lengths = observed.path, observed.knots, observed.lengths
    coeffs = _zero_pieces(path, knots.shape[0])
    # One solve for every sample: each sample's spline is built on its own valid prefix (a natural
    # cubic spline is global along the sequence, so padding must never enter it).
    coeffs[:, : knots.shape[0] - 1] = polynomial_pieces(path, knots, "natural_cubic", lengths)
    return _spline_control(coeffs, knots, lengths - 1, observed.names, "natural_cubic")


def hermite_cubic_control(observed: ObservedChannels) -> Control:
    """Hermite cubic pieces with backward differences through each sample's points: causal and smooth
    (``build_control(interpolation="hermite_cubic")``).

    Arguments:
        observed: the channels at the points (`observed_channels`), (B, T, C').

    Returns:
        A `Control` with knots (T,), coeffs (B, T, 4, C').
    """
    coeffs = _pieces_by_length(observed, "hermite_cubic", observed.knots.shape[0])
    return _spline_control(coeffs, observed.knots, observed.lengths - 1, observed.names, "hermite_cubic")


def linear_control(observed: ObservedChannels) -> Control:
    """Straight lines between each sample's points (``build_control(interpolation="linear")``).

    Arguments:
        observed: the channels at the points (`observed_channels`), (B, T, C').

    Returns:
        A `Control` with knots (T,), coeffs (B, T, 4, C').
    """
    coeffs = _pieces_by_length(observed, "linear", observed.knots.shape[0])
    return _spline_control(coeffs, observed.knots, observed.lengths - 1, observed.names, "linear")


def rectilinear_control(observed: ObservedChannels) -> Control:
    """Time first, then the values, between each sample's points (``build_control(interpolation="rectilinear")``): each
    observation interval [s_i, s_{i+1}] is split at its midpoint, the time channel (channel 0) moves on the first
    half and the values jump along the second.

    Arguments:
        observed: the channels at the points (`observed_channels`), (B, T, C'), channel 0 the time.

    Returns:
        A `Control` with knots (2T − 1,), the points and the midpoints, coeffs (B, 2T − 1, 4, C').
    """
    knots = observed.knots
    mid = 0.5 * (knots[1:] + knots[:-1])
    fine_knots = torch.cat([torch.stack([knots[:-1], mid], dim=1).flatten(), knots[-1:]])
    coeffs = _pieces_by_length(observed, "rectilinear", fine_knots.shape[0])
    return _spline_control(coeffs, fine_knots, 2 * (observed.lengths - 1), observed.names, "rectilinear")


def logsignature_window_control(observed: ObservedChannels, *, depth: int, step: int, logsig_backend: str,
                                logsig_basis: str, window_start_values: bool) -> Control:
    """Log-signature windows of the points (``build_control(interpolation="logsignature")``; `logsignature_control`).

    Arguments:
        observed: the channels at the points (`observed_channels`, knots the indices), (B, T, C').
        depth, step, logsig_backend, logsig_basis, window_start_values: as `build_control`.

    Returns:
        A piecewise-constant `Control` (see `logsignature_control`).
    """
    # logsignature_control read from the module when called (tests replace it to see that a cache computes nothing)
    return logsignature_control(observed.path, observed.lengths, depth, step, observed.names, logsig_backend,
                                logsig_basis, window_start_values)


class Interpolation(NamedTuple):
    """What `build_control` knows of one interpolation (one entry of `INTERPOLATION_BUILDERS`)."""

    build: Callable[..., Control]  # build(observed_channels, **{option: build_control's value for each of options})
    options: tuple[str, ...] = ()  # the build_control keywords it reads beyond the channels
    windows: bool = False  # its knots are window indices 0, 1, ..., whatever the parametrization
    needs_time_channel: str = ""  # why it refuses time_channel=False ("": it does not)


INTERPOLATION_BUILDERS = {
    "natural_cubic": Interpolation(natural_cubic_control),
    "hermite_cubic": Interpolation(hermite_cubic_control),
    "linear": Interpolation(linear_control),
    "rectilinear": Interpolation(rectilinear_control, needs_time_channel="time moves first, then the values"),
    "logsignature": Interpolation(logsignature_window_control, windows=True, options=(
        "depth", "step", "logsig_backend", "logsig_basis", "window_start_values")),
}
INTERPOLATIONS = tuple(INTERPOLATION_BUILDERS)  # ("natural_cubic", "hermite_cubic", "linear", "rectilinear", "logsignature")


def _zero_pieces(path: torch.Tensor, num_knots: int) -> torch.Tensor:
    """(B, K, 4, C') zero coefficients: one piece per knot interval, plus the constant piece past the last knot."""
    return torch.zeros(path.shape[0], num_knots, 4, path.shape[-1], dtype=path.dtype, device=path.device)


def _pieces_by_length(observed: ObservedChannels, method: str, num_knots: int) -> torch.Tensor:
    """(B, K, 4, C') `polynomial_pieces` of a local interpolation, built for the samples of one length together on
    their own valid prefix, so that padding can never change a sample's path; zero after each sample's pieces."""
    path, knots, lengths = observed.path, observed.knots, observed.lengths
    coeffs = _zero_pieces(path, num_knots)
    for sample_length in torch.unique(lengths).tolist():
        members = torch.nonzero(lengths == sample_length).flatten()
        pieces = polynomial_pieces(path[members, :sample_length], knots[:sample_length], method)
        coeffs[members, : pieces.shape[1]] = pieces
    return coeffs


def _spline_control(coeffs: torch.Tensor, knots: torch.Tensor, end_index: torch.Tensor, names: tuple[str, ...],
                    method: str) -> Control:
    """The `Control` of interpolated pieces ``coeffs`` (B, K, 4, C') on ``knots`` (K,), each sample held at its
    value at its final knot ``knots[end_index[b]]`` from there on (modifies ``coeffs``)."""
    final = _value_at_end(coeffs, knots, end_index)
    after_end = torch.arange(coeffs.shape[1], device=coeffs.device).unsqueeze(0) >= end_index.unsqueeze(1)
    coeffs[after_end] = 0.0
    coeffs[:, :, 0] = torch.where(after_end.unsqueeze(-1), final.unsqueeze(1), coeffs[:, :, 0])
    _check_finite(coeffs, knots, method)
    return Control(knots, coeffs, end_index, False, names)


def _check_finite(coeffs: torch.Tensor, knots: torch.Tensor, method: str) -> None:
    """Refuse a path whose coefficients overflowed although its points are within the finite range."""
    if bool(torch.isfinite(coeffs).all()):
        return
    if method == "logsignature":
        why = "a window's log-signature holds products of its increments"
    else:
        # A cubic's coefficients grow like (change of value) / gap³, so tiny gaps overflow first.
        gaps = knots[1:] - knots[:-1]
        why = (f"its slopes and curvatures scale like (change of value) / gap^3, and the smallest gap between "
               f"knots is {float(gaps.min()):.3g}")
    raise ValueError(f"the {method} control's coefficients overflow in {coeffs.dtype}: {why}; standardise the "
                     "values, rescale the times (units where observation gaps are about 1) or use "
                     "parametrization='index', or compute in float64")


def _value_at_end(coeffs, knots, end_index):
    last = (end_index - 1).clamp(min=0)
    piece = coeffs[torch.arange(coeffs.shape[0], device=coeffs.device), last]  # (B, 4, C)
    f = (knots[end_index] - knots[last]).unsqueeze(-1)
    a, b, c, d = piece.unbind(-2)
    return a + f * (b + f * (c + f * d))


# ---------------------------------------------------------------------------------------------------
# log-signature windows (interpolation="logsignature"; their disk cache is neuralde_seq.controls.logsignature_cache)

def logsignature_control(path: torch.Tensor, lengths: torch.Tensor, depth: int, step: int, names: tuple[str, ...],
                         backend: str, basis: str, window_start_values: bool = False) -> Control:
    """The log-signature windows of ``path`` as a piecewise-constant `Control` (what
    ``build_control(interpolation="logsignature")`` returns).

    Arguments:
        path: (B, T, C) points of the path (NaN where missing: interpolated linearly on the index first).
        lengths: (B,) long, valid points per sample.
        depth: log-signature depth.
        step: window size in observation intervals.
        names: (C,) channel names of the path (their number fixes the log-signature width).
        backend: the library computing the log-signatures, as ``logsig_backend`` of `build_control`.
        basis: the log-signature coordinates, as ``logsig_basis`` of `build_control`.
        window_start_values: append, after the D log-signature channels, the path's point at each window's start
            (point j·step of the sample, after the interpolation through missing values) in its value and mask
            channels, named ``start_<name>`` (default False). Not in the time and count channels: their level
            is the position in the series, which grows with its length (1,000s of steps on long series, which
            swamps the other inputs of the slow net); their increments are in the log-signature.

    Returns:
        A piecewise-constant `Control` with K = N_max + 1 knots 0, 1, ..., N_max (N_max the most windows of any
        sample), ``coeffs`` (B, K, 4, D) or, with ``window_start_values``, (B, K, 4, D + C): on window j the
        constant coefficient is [logsig_j] or [logsig_j, path(j·step)], zero after each sample's last window;
        ``initial_value`` (B, C) the path's first point.

    Raises:
        ValueError: ``window_start_values`` is not a bool, or the options `check_logsignature_options` refuses.
    """
    check_logsignature_options(depth, backend, basis)
    if not isinstance(window_start_values, bool):
        raise ValueError(f"window_start_values must be True or False, got {window_start_values!r}")
    valid = torch.arange(path.shape[1], device=path.device).unsqueeze(0) < lengths.unsqueeze(1)
    if torch.isnan(path).any():
        # Log-signatures need complete points: interpolate linearly through missing values first, within each
        # sample's own points (its padding marked missing, so that it never enters the line).
        knots = torch.arange(path.shape[1], dtype=path.dtype, device=path.device)
        path = fill_missing_linear(path.masked_fill(~valid.unsqueeze(-1), float("nan")), knots)
    path = path.masked_fill(~valid.unsqueeze(-1), 0.0)
    initial_value = path[:, 0].clone()
    logsig, windows = logsignature_windows(path, lengths, depth, step, backend=backend, basis=basis)
    batch, n_windows, width = logsig.shape
    assert width == logsignature_channels(len(names), depth, basis)
    channel_names = tuple(f"logsig{i}" for i in range(width))
    if window_start_values:
        # not the time and count channels (build_control's "time", "count<c>"): positions, unbounded
        levels = [c for c, name in enumerate(names)
                  if name != "time" and not name.startswith(("count", "recency"))]
        logsig = torch.cat([logsig, _window_starts(path[..., levels], windows, step)], dim=-1)
        channel_names += tuple(f"start_{names[c]}" for c in levels)
    coeffs = torch.zeros(batch, n_windows + 1, 4, logsig.shape[-1], dtype=path.dtype, device=path.device)
    coeffs[:, :n_windows, 0] = logsig  # and 0 past each sample's end (the solver freezes it there)
    knots = torch.arange(n_windows + 1, dtype=path.dtype, device=path.device)
    _check_finite(coeffs, knots, "logsignature")
    return Control(knots, coeffs, windows, True, channel_names, initial_value)


def _window_starts(path: torch.Tensor, windows: torch.Tensor, step: int) -> torch.Tensor:
    """The path's point at the start of each log-signature window (`logsignature_windows`' windows: window j
    starts at point j·step).

    Arguments:
        path: (B, T, C) complete points (no NaN within each sample's length).
        windows: (B,) long, each sample's number of windows.
        step: window size in observation intervals.

    Returns:
        (B, N_max, C) with N_max = max(windows): row j is path[b, j·step], zero after each sample's last window.
    """
    n_windows = int(windows.max())
    starts = torch.arange(n_windows, device=path.device) * step  # (N,): j·step < L_b − 1 on every real window
    valid = torch.arange(n_windows, device=path.device).unsqueeze(0) < windows.unsqueeze(1)  # (B, N)
    index = torch.where(valid, starts.unsqueeze(0), torch.zeros_like(starts).unsqueeze(0))
    points = torch.gather(path, 1, index.unsqueeze(-1).expand(-1, -1, path.shape[-1]))
    return points.masked_fill(~valid.unsqueeze(-1), 0.0)
