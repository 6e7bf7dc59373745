"""Observations: the raw irregular batch, its validation, and selecting samples of a batch.

Models such as GRU-D, GRU-Δt, ODE-RNN or CKConv's irregular mode read each observation at its own time
instead of a continuous control path. `Observations` carries the batch in the toolkit's data
convention (docs/design.md#data-conventions), checked once by `validate_observations` (which
`build_control` runs too), sliceable per batch like a
`Control` (`batch_selection` is the indexing both share).

**Finite range.** Every observed value and every time must satisfy ``|x| <= magnitude_limit(dtype)``, the fourth
root of the dtype's largest number, rounded down: 4.29e9 in float32, 1.15e77 in float64. The models multiply their
inputs up to four times (log-signature areas are products of two increments, and the fast weight rules multiply
those again in outer products), so inputs within the limit do not overflow in the dtype; measured with the
registry's models at their defaults, the first non-finite logits appear at |value| = 1e11 (float32) and 1e80
(float64), in the log-signature models (1e18 and 1e152 for the other fast weight models). Standardised data, raw
clinical values (of order 1e4) and unix times (1.7e9 s) are inside the limit; but float32 resolves unix times only
to 128 s, so subtract a reference time first (or compute in float64).

This module imports nothing else of the package, so that any module may import it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

__all__ = [
    "Observations",
    "validate_observations",
    "magnitude_limit",
    "batch_selection",
    "observation_span",
    "check_min_length",
    "check_times_survive_cast",
    "check_rescaled_times",
]


def magnitude_limit(dtype: torch.dtype) -> float:
    """The largest |value| and |time| accepted in ``dtype`` (module docstring).

    Arguments:
        dtype: a floating point torch dtype.

    Returns:
        ``finfo(dtype).max ** 0.25`` rounded down to three significant digits (4.29e9 in float32, 1.15e77 in
            float64), so that its fourth power is finite.
    """
    exact = torch.finfo(dtype).max ** 0.25
    scale = 10.0 ** (math.floor(math.log10(exact)) - 2)
    return math.floor(exact / scale) * scale


def _first(mask: torch.Tensor, n: int = 5) -> list[int]:
    """Indices of the first ``n`` True entries of a 1-D mask (for error messages)."""
    return torch.nonzero(mask).flatten()[:n].tolist()


def _check_magnitude(name: str, x: torch.Tensor, valid: torch.Tensor, dtype: torch.dtype, advice: str) -> None:
    """Raise if an entry of ``x`` within the valid steps exceeds the finite range of ``dtype`` (NaN passes:
    it marks a missing value)."""
    limit = magnitude_limit(dtype)
    too_big = x.detach().abs() > limit  # False for NaN
    too_big &= valid.view(*valid.shape, *([1] * (x.dim() - 2)))
    if bool(too_big.any()):
        # The largest entry and where it is.
        size = torch.where(too_big, x.detach().abs(), torch.zeros((), dtype=x.dtype, device=x.device)).flatten()
        where = list(np.unravel_index(int(torch.argmax(size)), tuple(x.shape)))
        largest = float(size.max())
        entry = "an infinite entry" if largest == float("inf") else f"an entry of magnitude {largest:.3g}"
        position = f"sample {where[0]}, step {where[1]}" + (f", channel {where[2]}" if len(where) > 2 else "")
        raise ValueError(
            f"{name} has {entry} ({position}), outside the finite range "
            f"|{name}| <= {limit:.3g} that the models handle in {dtype} (neuralde_seq.observations."
            f"magnitude_limit): {advice}"
        )


def observation_span(times: torch.Tensor, lengths: torch.Tensor) -> float:
    """The longest time any sample spans: max over b of ``times[b, lengths[b] - 1] - times[b, 0]``.

    The unit ``time_unit="auto"`` resolves to (from the training split, for every split): the time channel then
    runs over [0, 1] at most.

    Arguments:
        times: (B, T) observation times.
        lengths: (B,) valid steps per sample (each >= 1).

    Returns:
        The largest span ``times[b, lengths[b] - 1] - times[b, 0]`` over the samples, as a Python float.
    """
    lengths = torch.as_tensor(lengths, device=times.device).long()
    last = times.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    return float((last - times[:, 0]).max())


def check_min_length(lengths: torch.Tensor, min_length: int) -> None:
    """Every sample has at least ``min_length`` time points (and none is empty).

    Arguments:
        lengths: (B,) long, valid time points per sample.
        min_length: the fewest time points a sample may have (2 for a control path).

    Raises:
        ValueError: an empty sample, or one shorter than ``min_length``, naming the first few.
    """
    if (lengths == 0).any():
        raise ValueError(f"empty sequence: lengths is 0 for samples {_first(lengths == 0)}")
    if (lengths < min_length).any():
        raise ValueError(
            f"sequence too short: a control needs at least {min_length} observations, lengths < "
            f"{min_length} for samples {_first(lengths < min_length)}"
        )


def check_times_survive_cast(
    exact: torch.Tensor, cast: torch.Tensor, lengths: torch.Tensor, *, name: str = "X", fix: str = "dtype='float64'"
) -> None:
    """Times strictly increasing as given must stay so once cast to a narrower dtype: name the first pair that the
    cast makes equal (or reverses), and what to do, rather than calling the user's times unordered.

    Arguments:
        exact: (B, T) the times as given (e.g. float64), strictly increasing within each sample's length.
        cast: (B, T) the same times in the narrower dtype.
        lengths: (B,) valid time points per sample.
        name: what the samples are called in the message (``X`` gives ``X[3]``).
        fix: how the caller asks for the wider dtype, for the message.

    Raises:
        ValueError: two distinct times of a sample that are equal (or reversed) once cast, naming the sample, the
            steps, both times and the dtype's resolution there.
    """
    steps = torch.arange(exact.shape[1] - 1, device=exact.device)
    inside = steps[None, :] < (lengths.to(exact.device)[:, None] - 1)
    merged = inside & (exact[:, 1:] > exact[:, :-1]) & ~(cast[:, 1:] > cast[:, :-1])
    if bool(merged.any()):
        b, i = torch.nonzero(merged)[0].tolist()
        first = float(exact[b, i])
        raise ValueError(
            f"times of {name}[{b}] at steps {i} and {i + 1} ({first!r} and {float(exact[b, i + 1])!r}) "
            f"are distinct but become equal in {cast.dtype} (its resolution near {first:.4g} is "
            f"{float(torch.finfo(cast.dtype).eps) * abs(first):.2g}): use {fix}, or give the times in "
            "coarser units (e.g. rounded to the resolution of the measurements, or less a reference "
            "time such as each sample's first)"
        )


def check_rescaled_times(times: torch.Tensor, lengths: torch.Tensor, unit: float) -> None:
    """Times divided by a time unit (already checked as given: `validate_observations`) must stay within the finite
    range of their dtype and strictly increasing there: a unit below 1 enlarges them, and the division can bring
    two neighbours closer than the dtype resolves.

    Arguments:
        times: (B, T) the times divided by ``unit``, in the dtype the model reads.
        lengths: (B,) valid time points per sample.
        unit: the time unit they were divided by (for the message).

    Raises:
        ValueError: a time beyond `magnitude_limit` of the dtype, or two that are no longer increasing, naming the
            sample, the steps and the unit.
    """
    valid = torch.arange(times.shape[1], device=times.device).unsqueeze(0) < lengths.to(times.device).unsqueeze(1)
    _check_magnitude(
        "times",
        times,
        valid,
        times.dtype,
        f"these are the times divided by time_unit={unit:.6g}: give a larger time_unit, or subtract a "
        "reference time (e.g. each sample's first time)",
    )
    increasing = (times[:, 1:] > times[:, :-1]) | ~valid[:, 1:]
    if not increasing.all():
        b, i = torch.nonzero(~increasing)[0].tolist()
        raise ValueError(
            f"times divided by time_unit={unit:.6g} stop increasing in {times.dtype}: sample {b} has "
            f"{times[b, i].item()!r} at step {i} and {times[b, i + 1].item()!r} at step {i + 1}; give a "
            "larger time_unit, or compute in float64"
        )


def validate_observations(times, values, lengths, *, min_length: int = 2):
    """Check a batch of observations (docs/design.md#data-conventions).

    Arguments:
        times: (B, T) tensor, strictly increasing within each sample's length.
        values: (B, T, C) floating point tensor, NaN where missing.
        lengths: (B,) integer tensor (or sequence) of valid steps per sample, each in [min_length, T]; None: all T.
        min_length: the fewest time points a sample may have: 2 for a control path (the default), 1 for a
            labelled dataset (`IrregularDataset`), whose models decide what they need.

    Returns:
        (times, values, lengths, valid): times (B, T) cast to the values' dtype, values unchanged, lengths (B,)
            long, valid the (B, T) bool mask of the steps within each sample's length.

    Raises:
        TypeError: times or values that are not tensors, values not floating point, or floating-point lengths;
            the message names the argument.
        ValueError: naming the argument and the problem: badly shaped or empty tensors, lengths out of
            [min_length, T], NaN times within a sample's length, times not strictly increasing (also after the
            cast to the values' dtype), and values outside the finite range of their dtype or times outside that
            of the narrower of the two dtypes (`magnitude_limit`).
    """
    if not isinstance(values, torch.Tensor) or not isinstance(times, torch.Tensor):
        raise TypeError(
            f"times and values must be torch tensors, got {type(times).__name__} and {type(values).__name__}"
        )
    if values.dim() != 3:
        raise ValueError(f"values must have shape (batch, length, channels), got {tuple(values.shape)}")
    if times.dim() != 2:
        raise ValueError(f"times must have shape (batch, length), got {tuple(times.shape)}")
    if times.shape != values.shape[:2]:
        raise ValueError(
            f"times has shape {tuple(times.shape)} but values has shape {tuple(values.shape)}: "
            "their (batch, length) must agree"
        )
    batch, length, channels = values.shape
    if batch == 0:
        raise ValueError("empty batch: values has no samples")
    if length == 0:
        raise ValueError("empty sequence: values has length 0")
    if channels == 0:
        raise ValueError("values has no channels")
    if not values.is_floating_point():
        raise TypeError(f"values must be a floating point tensor, got {values.dtype}")
    if lengths is None:
        lengths = torch.full((batch,), length, dtype=torch.long, device=values.device)
    else:
        lengths = torch.as_tensor(lengths, device=values.device)
        if lengths.shape != (batch,):
            raise ValueError(f"lengths must have shape ({batch},), got {tuple(lengths.shape)}")
        if lengths.is_floating_point():
            raise TypeError("lengths must be an integer tensor")
        lengths = lengths.long()
    check_min_length(lengths, min_length)
    if (lengths > length).any():
        raise ValueError(f"lengths exceed the sequence length {length} for samples {_first(lengths > length)}")
    valid = torch.arange(length, device=values.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
    given_times = times
    times = times.to(values.dtype)
    if torch.isnan(times[valid]).any():
        bad = torch.isnan(times) & valid
        raise ValueError(f"times contains NaN within the valid length of samples {_first(bad.any(1))}")
    # Magnitudes of the times as given (a float64 time may overflow in the values' dtype only after the cast).
    _check_magnitude(
        "values",
        values,
        valid,
        values.dtype,
        "standardise each channel (subtract its mean and divide by its standard deviation over the "
        "training data), or compute in float64",
    )
    # ... judged in the narrower of the two dtypes: a dataset that holds its values in float64 for their
    # standardisation (the estimators') and its times in float32 gives the models float32 times
    narrower = (
        min((values.dtype, given_times.dtype), key=lambda dtype: torch.finfo(dtype).max)
        if given_times.is_floating_point()
        else values.dtype
    )
    _check_magnitude(
        "times",
        given_times.double(),
        valid,
        narrower,
        "subtract a reference time (e.g. each sample's first time) and rescale to units where "
        "observation gaps are about 1, or compute in float64; build_control(parametrization='index') "
        "then keeps the solver's grid independent of the time units",
    )
    pair_valid = valid[:, 1:]
    increasing = (times[:, 1:] > times[:, :-1]) | ~pair_valid
    if not increasing.all():
        b, i = torch.nonzero(~increasing)[0].tolist()
        hint = ""
        if given_times.dtype != times.dtype and bool(given_times[b, i + 1] > given_times[b, i]):
            hint = (
                f" (they increase as given in {given_times.dtype}, but not after the cast to the values' dtype "
                f"{times.dtype}: subtract a reference time first, or give values in {given_times.dtype})"
            )
        raise ValueError(
            f"times must be strictly increasing within each sample: sample {b} has "
            f"times[{i}]={times[b, i].item()} >= times[{i + 1}]={times[b, i + 1].item()}{hint}"
        )
    return times, values, lengths, valid


def batch_selection(index, batch_size: int, owner: str) -> slice | torch.Tensor:
    """Check ``index`` as a selection of samples of a batch and normalise it for tensor indexing.

    Arguments:
        index: an int (negative counts from the end; numpy integers and 0-d integer tensors too), a slice, or a
            1-D integer or bool selection (tensor, numpy array or list; a bool mask has one entry per sample).
        batch_size: B, the number of samples.
        owner: the indexed type's name, for messages.

    Returns:
        A slice with a positive step, or a 1-D long tensor of sample indices in [0, B). An int i gives the
            slice i:i+1, so the selection keeps the batch dimension (a batch of one sample).

    Raises:
        TypeError: for floats, bools, tuples and other types.
        IndexError: for an index outside [−B, B) or a mask of the wrong length.
        ValueError: for a selection of no sample.
    """
    if isinstance(index, slice):
        selected = range(batch_size)[index]
        if len(selected) == 0:
            parts = (index.start, index.stop) + (() if index.step is None else (index.step,))
            shown = ":".join("" if part is None else str(part) for part in parts)
            raise ValueError(f"{owner}[{shown}] selects no sample of the batch of {batch_size}")
        if selected.step > 0:
            return slice(selected.start, selected.stop, selected.step)
        return torch.tensor(list(selected), dtype=torch.long)  # torch tensors cannot take negative steps
    kinds = "an int, a slice, or a 1-D integer or bool selection"
    if isinstance(index, (bool, tuple)):
        what = "a tuple (it is indexed along its batch only)" if isinstance(index, tuple) else f"the bool {index}"
        raise TypeError(f"{owner} index must be {kinds}, got {what}")
    if not isinstance(index, (int, torch.Tensor)):
        if isinstance(index, list) and not index:
            raise ValueError(f"{owner}[[]] selects no sample of the batch of {batch_size}")
        try:
            index = torch.as_tensor(index)  # numpy scalars and arrays, lists
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(f"{owner} index must be {kinds}, got {type(index).__name__}") from error
    if isinstance(index, torch.Tensor) and index.dim() == 0:
        if index.dtype == torch.bool or index.is_floating_point() or index.is_complex():
            raise TypeError(f"{owner} index must be {kinds}, got {index.item()!r} ({index.dtype})")
        index = int(index)
    if isinstance(index, int):
        if not -batch_size <= index < batch_size:
            raise IndexError(f"{owner} index {index} is out of range for the batch of {batch_size} samples")
        index %= batch_size
        return slice(index, index + 1)
    if index.dim() != 1:
        raise IndexError(f"{owner} index must be 1-D (one entry per selected sample), got shape {tuple(index.shape)}")
    if index.numel() == 0:
        raise ValueError(f"{owner} index selects no sample of the batch of {batch_size}")
    if index.dtype == torch.bool:
        if index.shape[0] != batch_size:
            raise IndexError(f"{owner} bool mask has {index.shape[0]} entries but the batch has {batch_size} samples")
        index = torch.nonzero(index).flatten()
    elif index.is_floating_point() or index.is_complex():
        raise TypeError(f"{owner} index must hold integers or bools, got a {index.dtype} selection")
    if index.numel() == 0:  # a mask that selects nothing
        raise ValueError(f"{owner} index selects no sample of the batch of {batch_size}")
    index = index.long()
    outside = (index < -batch_size) | (index >= batch_size)
    if bool(outside.any()):
        bad = int(index[outside][0])
        raise IndexError(f"{owner} index {bad} is out of range for the batch of {batch_size} samples")
    return torch.where(index < 0, index + batch_size, index)


@dataclasses.dataclass
class Observations:
    """A batch of irregularly sampled sequences.

    Attributes:
        times: (B, T) observation times, strictly increasing within each sample's length.
        values: (B, T, C) observed values, NaN where missing (and in the padding after a sample's end).
        lengths: (B,) long, number of valid time points per sample.
        static: optional (B, S) static features.
    """

    times: torch.Tensor
    values: torch.Tensor
    lengths: torch.Tensor
    static: torch.Tensor | None = None

    @classmethod
    def from_tensors(cls, times, values, lengths=None, static=None) -> Observations:
        """Validated observations (`validate_observations`, the checks of
        `build_control`); padding after each sample's length is set to NaN so that
        no model can read it by mistake.

        Arguments:
            times: (B, T) observation times, strictly increasing within each sample's length.
            values: (B, T, C) floating point values, NaN where missing.
            lengths: (B,) integer number of valid time points per sample, or None (default: all T).
            static: (B, S) static features, or None (default).

        Returns:
            The `Observations`, times cast to the values' dtype and lengths long.

        Raises:
            TypeError: as `validate_observations`.
            ValueError: as `validate_observations`, or ``static`` not of shape (B, S).
        """
        times, values, lengths, valid = validate_observations(times, values, lengths)
        values = values.masked_fill(~valid.unsqueeze(-1), float("nan"))
        if static is not None and (static.dim() != 2 or static.shape[0] != values.shape[0]):
            raise ValueError(f"static must have shape ({values.shape[0]}, S), got {tuple(static.shape)}")
        return cls(times, values, lengths, static)

    @property
    def batch_size(self) -> int:
        return self.values.shape[0]

    @property
    def channels(self) -> int:
        return self.values.shape[-1]

    @property
    def valid(self) -> torch.Tensor:
        """(B, T) bool, True within each sample's length."""
        return torch.arange(self.values.shape[1], device=self.values.device).unsqueeze(0) < self.lengths.unsqueeze(1)

    @property
    def mask(self) -> torch.Tensor:
        """(B, T, C) bool, True where a value was observed."""
        return ~torch.isnan(self.values) & self.valid.unsqueeze(-1)

    def __len__(self) -> int:
        return self.batch_size

    def __getitem__(self, index) -> Observations:
        """The samples selected by ``index`` (see `batch_selection`: an int, slice, or 1-D integer or bool
        selection), trimmed to the longest selected sample. An int keeps the batch dimension: ``obs[i]`` is a
        batch of one sample, as models expect."""
        index = batch_selection(index, self.batch_size, "Observations")
        lengths = self.lengths[index]
        longest = int(lengths.max())
        return Observations(
            self.times[index][:, :longest],
            self.values[index][:, :longest],
            lengths,
            None if self.static is None else self.static[index],
        )

    def to(self, *args, **kwargs) -> Observations:
        """Move and/or cast, as ``torch.Tensor.to``: ``values`` and ``static`` get ``.to(*args, **kwargs)``,
        ``times`` follows the values' device and dtype, ``lengths`` their device.

        Returns:
            A new `Observations`.
        """
        values = self.values.to(*args, **kwargs)
        return Observations(
            self.times.to(device=values.device, dtype=values.dtype),
            values,
            self.lengths.to(values.device),
            None if self.static is None else self.static.to(*args, **kwargs),
        )
