"""numpy (or nested list) input to the toolkit's padded tensors and `IrregularDataset`.

Three input forms are read, each sample being a sequence of time steps with NaN marking a missing value:

* a **list of arrays** (ragged): sample i is a (T_i, C) array-like, or (T_i,) for a univariate sequence;
* a **3-D array** (N, T, C): every sample has T time steps. A row of NaN at the end of a sample is a time
  step where nothing was observed, *not* padding: the sample's length is T unless ``lengths`` says otherwise;
* a **2-D array** (N, T): N univariate sequences of T steps (iterating its rows gives the (T,) samples of
  the list form), and likewise a nested list of numbers;
* and the **concatenated** form of `from_concatenated`: all samples' frames stacked, (sum T_i, C),
  with their ``lengths`` (N,).

Times: None gives each sample the observation index 0, 1, ..., T_i - 1; otherwise one (T_i,) array per
sample (a list, or a 2-D (N, T) array), finite and strictly increasing within the sample. Padding follows
the dataset convention (docs/design.md#data-conventions): values after a sample's end are NaN and its times
continue the grid with the spacing of its last step (1 for a one-point sample), so every row of the padded
``times`` is strictly increasing.

Nothing is dropped, filled or truncated silently: a sample with no observed value, an infinite value, a
complex number, channel counts that differ between samples, times that do not increase or do not match the
sample's length all raise ``ValueError`` (``TypeError`` for data that is not numeric) naming the argument and
the sample. The only entries left out are those after ``lengths[i]`` when ``lengths`` is given explicitly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ...observations import check_times_survive_cast
from ..base.datasets import IrregularDataset
from .ts_format import out_of_range

__all__ = ["pad_sequences", "from_concatenated", "from_arrays", "read_dataset"]


def _check_dtype(dtype) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating point torch.dtype (e.g. torch.float32), got {dtype!r}")
    return dtype


def _numeric(array_like, what: str) -> np.ndarray:
    """``array_like`` as a float64 array; complex data and non-numeric entries raise with ``what`` named."""
    if isinstance(array_like, torch.Tensor):
        array_like = array_like.detach().cpu().numpy()
    if isinstance(array_like, (str, bytes)):
        raise TypeError(f"{what} must hold numbers, got the string {array_like!r}")
    raw = np.asarray(array_like) if not isinstance(array_like, np.ndarray) else array_like
    if np.iscomplexobj(raw):
        raise ValueError(f"Complex data not supported: {what} holds complex numbers; give real values")
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as error:  # the same type, with the argument named
        raise type(error)(f"{what} must hold numbers (NaN where missing): {error}") from error


def _is_sparse(x) -> bool:
    try:
        from scipy import sparse
    except ImportError:  # pragma: no cover - scipy is a dependency
        return False
    return sparse.issparse(x)


def _split_samples(sequences, name: str) -> tuple[list[np.ndarray], tuple[int, ...] | None]:
    """The samples of ``sequences`` as float64 arrays (T_i, C), and the array's shape for the 2-D and 3-D
    array forms (None for a list of arrays)."""
    if _is_sparse(sequences):
        raise TypeError(
            f"{name} is a scipy sparse matrix: sparse input is not supported (a sequence model reads "
            f"every time step); convert it with {name}.toarray(), NaN marking missing values"
        )
    if isinstance(sequences, (str, bytes, dict)) or sequences is None:
        raise TypeError(
            f"{name} must be a list of (T_i, C) or (T_i,) arrays, or a 2-D (N, T) or 3-D (N, T, C) "
            f"array, got {type(sequences).__name__}"
        )
    if isinstance(sequences, torch.Tensor):
        sequences = sequences.detach().cpu().numpy()
    if not isinstance(sequences, (list, tuple)) and not (
        isinstance(sequences, np.ndarray) and sequences.dtype == object and sequences.ndim == 1
    ):
        # Arrays and array-likes (pandas DataFrames, objects with __array__): one numeric block.
        array = _numeric(sequences, name)
        if array.ndim == 3:
            return list(array), array.shape
        if array.ndim == 2:
            return [row[:, None] for row in array], array.shape
        if array.ndim == 1:
            raise ValueError(
                f"{name} is a 1-D array of {array.shape[0]} numbers, not a set of sequences. Reshape "
                f"your data: {name}.reshape(1, -1) for a single univariate sequence, or give a list of "
                "(T_i,) or (T_i, C) arrays, a 2-D (N, T) or a 3-D (N, T, C) array"
            )
        raise ValueError(
            f"{name} must be a 2-D (N, T) or 3-D (N, T, C) array (or a list of arrays), got an array "
            f"with {array.ndim} dimensions, shape {array.shape}"
        )
    samples = []
    for i, sample in enumerate(sequences):
        if _is_sparse(sample):
            raise TypeError(
                f"{name}[{i}] is a scipy sparse matrix: sparse input is not supported; convert it "
                "with .toarray(), NaN marking missing values"
            )
        array = _numeric(sample, f"{name}[{i}]")
        if array.ndim == 1:
            array = array[:, None]
        elif array.ndim != 2:
            raise ValueError(
                f"{name}[{i}] must be a (T_i, C) array, or (T_i,) for a univariate sequence, got shape "
                f"{array.shape}"
                + (" (a number: give a list of sequences, or a 2-D (N, T) array)" if array.ndim == 0 else "")
            )
        samples.append(array)
    return samples, None


def _sample_times(times, samples: list[np.ndarray], name: str, sequences_name: str) -> list[np.ndarray]:
    """One float64 (T_i,) array per sample: the index 0..T_i-1 when ``times`` is None, else ``times[i]``
    checked (shape, finite, strictly increasing)."""
    if times is None:
        return [np.arange(s.shape[0], dtype=np.float64) for s in samples]
    if isinstance(times, torch.Tensor):
        times = times.detach().cpu().numpy()
    if isinstance(times, (str, bytes, dict)):
        raise TypeError(
            f"{name} must be None, a list of (T_i,) arrays or a 2-D (N, T) array, got {type(times).__name__}"
        )
    if isinstance(times, np.ndarray) and times.dtype != object:
        if times.ndim != 2:
            raise ValueError(
                f"{name} must be a list of (T_i,) arrays or a 2-D (N, T) array, got an array of shape "
                f"{times.shape}"
                + (
                    f": for one sequence give lists of one, {sequences_name}=[x] and {name}=[t]"
                    if times.ndim == 1
                    else ""
                )
            )
    try:
        count = len(times)
    except TypeError:
        raise TypeError(
            f"{name} must be None, a list of (T_i,) arrays or a 2-D (N, T) array, got {type(times).__name__}"
        ) from None
    if count != len(samples):
        raise ValueError(f"{name} holds {count} time arrays but {sequences_name} holds {len(samples)} sequences")
    out = []
    for i, (sample, t) in enumerate(zip(samples, times)):
        t = _numeric(t, f"{name}[{i}]")
        if t.shape != (sample.shape[0],):
            raise ValueError(
                f"{name}[{i}] must have shape ({sample.shape[0]},), one time per time step of "
                f"{sequences_name}[{i}], got shape {t.shape}"
            )
        if not np.isfinite(t).all():
            j = int(np.flatnonzero(~np.isfinite(t))[0])
            raise ValueError(
                f"{name}[{i}] holds a non-finite time ({float(t[j])}) at step {j}; times must be finite "
                "(a missing observation is a NaN value, not a NaN time)"
            )
        steps = np.diff(t)
        if (steps <= 0).any():
            j = int(np.flatnonzero(steps <= 0)[0])
            raise ValueError(
                f"{name}[{i}] must be strictly increasing: {name}[{i}][{j}] = {float(t[j])!r} >= "
                f"{name}[{i}][{j + 1}] = {float(t[j + 1])!r}"
            )
        out.append(t)
    return out


def _apply_lengths(samples, sample_times, lengths, name: str, sequences_name: str):
    if lengths is None:
        return samples, sample_times
    if isinstance(lengths, torch.Tensor):
        lengths = lengths.detach().cpu().numpy()
    given = np.asarray(lengths)
    if given.ndim != 1 or given.shape[0] != len(samples):
        raise ValueError(f"{name} must have shape ({len(samples)},), one length per sequence, got shape {given.shape}")
    if given.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integers, got dtype {given.dtype}")
    cut_samples, cut_times = [], []
    for i, (sample, t, length) in enumerate(zip(samples, sample_times, given.tolist())):
        if not 1 <= length <= sample.shape[0]:
            raise ValueError(
                f"{name}[{i}] = {length} must lie in [1, {sample.shape[0]}] (the time steps of {sequences_name}[{i}])"
            )
        cut_samples.append(sample[:length])
        cut_times.append(t[:length])
    return cut_samples, cut_times


def _check_samples(samples: list[np.ndarray], name: str) -> int:
    """Channel counts, empty samples, infinite values and samples without an observation; returns C."""
    if len(samples) == 0:
        raise ValueError(f"{name} holds no sequence (N = 0)")
    channels = samples[0].shape[1]
    for i, sample in enumerate(samples):
        if sample.shape[1] != channels:
            raise ValueError(
                f"{name}[{i}] has {sample.shape[1]} channel(s) but {name}[0] has {channels}: every "
                "sequence must have the same channels (NaN where a channel is not observed)"
            )
    if channels == 0:
        raise ValueError(f"{name} has 0 channels: each time step needs at least one value")
    for i, sample in enumerate(samples):
        if sample.shape[0] == 0:
            raise ValueError(f"{name}[{i}] has no time step (length 0)")
        infinite = np.isinf(sample)
        if infinite.any():
            t, c = (int(k) for k in np.argwhere(infinite)[0])
            raise ValueError(
                f"{name}[{i}] holds an infinite value ({float(sample[t, c])}) at step {t}, channel {c}: "
                "values must be finite, with NaN marking a missing value"
            )
        if np.isnan(sample).all():
            raise ValueError(
                f"{name}[{i}] has no observed value: every entry of its {sample.shape[0]} time step(s) "
                "is NaN; drop that sample (a sequence needs at least one observation)"
            )
    return channels


def _pad(
    samples: list[np.ndarray],
    sample_times: list[np.ndarray],
    channels: int,
    dtype: torch.dtype,
    name: str,
    fix: str = "dtype=torch.float64",
    values_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(times, values, lengths): times (N, T) in ``dtype`` (the cast checked: `check_times_survive_cast`), values
    (N, T, C) as ``dtype`` holds them, stored in ``values_dtype`` (default ``dtype``; an entry ``dtype`` cannot hold
    is refused, naming it), lengths (N,)."""
    lengths = np.array([s.shape[0] for s in samples], dtype=np.int64)
    n, longest = len(samples), int(lengths.max())
    values = np.full((n, longest, channels), np.nan)
    times = np.empty((n, longest))
    for i, (sample, t) in enumerate(zip(samples, sample_times)):
        length = sample.shape[0]
        values[i, :length] = sample
        times[i, :length] = t
        step = t[-1] - t[-2] if length > 1 else 1.0
        times[i, length:] = t[-1] + step * np.arange(1, longest - length + 1)
    lengths_t = torch.as_tensor(lengths, dtype=torch.long)
    times_t = torch.as_tensor(times, dtype=dtype)
    # every row, the padding's grid too (it continues the last step, which may merge where the sample's did not)
    check_times_survive_cast(torch.as_tensor(times), times_t, torch.full_like(lengths_t, longest), name=name, fix=fix)
    held = torch.as_tensor(values, dtype=dtype)
    if values_dtype is not None and values_dtype != dtype:
        infinite = torch.isinf(held)  # finite as given (`_check_range`), beyond the dtype's range once cast
        if bool(infinite.any()):
            b, step, c = torch.nonzero(infinite)[0].tolist()
            largest = torch.finfo(dtype).max
            raise ValueError(
                f"{name}[{b}] has a value beyond the largest {dtype} number ({largest:.3g}) at step "
                f"{step}, channel {c}: use {fix}, or rescale that channel"
            )
        held = held.to(values_dtype)
    return times_t, held, lengths_t


def _check_min_length(samples: list[np.ndarray], min_length: int, shape, name: str) -> None:
    """Every sample has at least ``min_length`` time steps; the message says how a 3-D array of the other axes
    order would read (``shape``: the array's, None for a list)."""
    short = [i for i, sample in enumerate(samples) if sample.shape[0] < min_length]
    if not short:
        return
    channels_first = shape is not None and len(shape) == 3 and shape[1] < shape[2]
    raise ValueError(
        f"{name}[{short[0]}] has {samples[short[0]].shape[0]} time step(s) (samples {short[:5]} are too "
        f"short): the models need at least {min_length} time steps per sequence"
        + (
            f"; a 3-D {name} is read as (N, T, C) and this one is {tuple(int(k) for k in shape)}: for an "
            f"(N, C, T) array from aeon or sktime give {name}.transpose(0, 2, 1)"
            if channels_first
            else ""
        )
    )


def _read(
    sequences,
    times,
    lengths,
    dtype,
    names=("sequences", "times", "lengths"),
    *,
    min_length: int = 1,
    fix: str = "dtype=torch.float64",
    values_dtype: torch.dtype | None = None,
):
    """(times, values, lengths) tensors (`_pad`) and the array shape of the 2-D/3-D forms (None for lists), every
    sample checked (module docstring) with at least ``min_length`` time steps; ``fix`` is how the caller asks for a
    wider dtype, in messages."""
    dtype = _check_dtype(dtype)
    name, times_name, lengths_name = names
    samples, shape = _split_samples(sequences, name)
    if len(samples) == 0:
        raise ValueError(f"{name} holds no sequence (N = 0)")
    sample_times = _sample_times(times, samples, times_name, name)
    samples, sample_times = _apply_lengths(samples, sample_times, lengths, lengths_name, name)
    channels = _check_samples(samples, name)
    _check_min_length(samples, min_length, shape, name)
    _check_range(samples, sample_times, dtype if values_dtype is None else values_dtype, dtype, name, times_name)
    return _pad(samples, sample_times, channels, dtype, name, fix, values_dtype), shape


def read_dataset(
    sequences,
    times=None,
    *,
    dtype: torch.dtype,
    values_dtype: torch.dtype | None = None,
    min_length: int = 1,
    names=("sequences", "times", "lengths"),
    fix: str = "dtype=torch.float64",
    name: str = "",
) -> IrregularDataset:
    """Unlabelled sequences read once into an `IrregularDataset`, which checks their observations once
    (`validate_observations`): how the scikit-learn estimators read X (`neuralde_seq.estimator_inputs`).

    Arguments:
        sequences: N samples in the forms of `pad_sequences`.
        times: None (observation indices) or one (T_i,) array per sample (a list or a 2-D (N, T) array).
        dtype: the dtype of the times (the cast checked) and the precision the values are rounded to.
        values_dtype: the dtype the values are stored in (default ``dtype``); a wider one (float64) keeps raw values
            that lie beyond the models' finite range in ``dtype`` until they are standardised.
        min_length: the fewest time steps a sample may have (default 1).
        names: the names of the sequences, the times and the lengths, in messages.
        fix: how the caller asks for a wider dtype, in messages (e.g. ``"dtype='float64'"``).
        name: the dataset's name.

    Returns:
        The `IrregularDataset`: times (N, T) in ``dtype``, values (N, T, C) in ``values_dtype``, lengths (N,).

    Raises:
        ValueError: what `pad_sequences` refuses, a sample shorter than ``min_length``, a value ``dtype`` cannot
            hold, times the cast to ``dtype`` merges, or what the dataset's check refuses.
        TypeError: as `pad_sequences`.
    """
    (t, values, lengths), _ = _read(
        sequences, times, None, dtype, names, min_length=min_length, fix=fix, values_dtype=values_dtype
    )
    return IrregularDataset(t, values, lengths, None, [], name=name)


def _check_range(
    samples, sample_times, dtype: torch.dtype, times_dtype: torch.dtype, name: str, times_name: str
) -> None:
    """Refuse values that overflow ``dtype`` and times that overflow ``times_dtype``, naming the argument, the sample
    and the value, before the cast (after it, 1e308 in float32 is just ``inf``). Only overflow: the models' narrower
    range (`magnitude_limit`) is the dataset's check, and callers such as the estimators standardise in between."""
    limit, times_limit = float(torch.finfo(dtype).max), float(torch.finfo(times_dtype).max)
    for i, (sample, t) in enumerate(zip(samples, sample_times)):
        with np.errstate(invalid="ignore"):
            too_big = np.abs(sample) > limit  # False for NaN (missing)
        if too_big.any():
            step, channel = (int(k) for k in np.argwhere(too_big)[0])
            value = float(sample[step, channel])
            raise ValueError(
                f"{name}[{i}] holds {value!r} at step {step}, channel {channel}, which "
                f"{out_of_range(value, dtype, None)}"
            )
        if (np.abs(t) > times_limit).any():
            step = int(np.flatnonzero(np.abs(t) > times_limit)[0])
            value = float(t[step])
            raise ValueError(
                f"{times_name}[{i}] holds {value!r} at step {step}, which "
                f"{out_of_range(value, times_dtype, None, 'the times')}; or subtract a reference "
                "time (e.g. each sample's first time)"
            )


def pad_sequences(
    sequences, times=None, *, lengths=None, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad ragged sequences with missing values into the toolkit's ``(times, values, lengths)`` tensors.

    Arguments:
        sequences: N samples, in one of the forms of the module docstring: a list of (T_i, C) array-likes
            (or (T_i,) for univariate sequences), a 3-D (N, T, C) array or a 2-D (N, T) array (N univariate
            sequences); NaN marks a missing value. A 3-D array's samples all have T time steps (trailing
            all-NaN rows are unobserved steps, not padding) unless ``lengths`` is given.
        times: None (each sample's observation index 0, 1, ..., T_i - 1), or one (T_i,) array per sample (a
            list, or a 2-D (N, T) array), finite and strictly increasing within each sample.
        lengths: None, or (N,) integers: sample i is its first ``lengths[i]`` time steps (1 <= lengths[i] <=
            T_i); what follows is padding and is ignored (also in ``times``).
        dtype: floating point dtype of the returned ``times`` and ``values``.

    Returns:
        ``(times, values, lengths)``: times (N, T_max) strictly increasing in every row (the padding
            continues each sample's grid with the spacing of its last step, 1 for a one-point sample), values
            (N, T_max, C) with NaN for missing values and after each sample's end, lengths (N,) long.

    Raises:
        ValueError: naming the argument and sample, for a wrong number of dimensions, no sample, a sample with
            no time step or with no observed value (all NaN), an infinite value, complex data, channel counts
            that differ between samples, times that do not match a sample's length, are not finite or not
            strictly increasing (also after the cast to ``dtype``), and ``lengths`` of the wrong shape or out of
            range.
        TypeError: for sparse matrices and entries that are not numbers.
    """
    padded, _ = _read(sequences, times, lengths, dtype)
    return padded


def from_concatenated(
    frames, lengths, times=None, *, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad sequences given as all samples' frames stacked one after another, as `pad_sequences` does.

    Arguments:
        frames: (sum T_i, C) array-like (or (sum T_i,) for univariate sequences): the frames of sample 0, then
            those of sample 1, ...; NaN marks a missing value.
        lengths: (N,) positive integers T_i summing to the number of frames.
        times: None (observation index per sample) or a (sum T_i,) array of the frames' times, strictly
            increasing within each sample.
        dtype: floating point dtype of the returned ``times`` and ``values``.

    Returns:
        ``(times, values, lengths)`` as `pad_sequences`.

    Raises:
        ValueError: when the lengths are not positive integers or do not sum to the number of frames, when
            ``times`` does not hold one time per frame, and for everything `pad_sequences` refuses with a
            ValueError.
        TypeError: as `pad_sequences` (sparse matrices, entries that are not numbers).
    """
    array = _numeric(frames, "frames")
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2:
        raise ValueError(
            f"frames must be a (sum T_i, C) array, or (sum T_i,) for univariate sequences, got shape {array.shape}"
        )
    if isinstance(lengths, torch.Tensor):
        lengths = lengths.detach().cpu().numpy()
    sizes = np.asarray(lengths)
    if sizes.ndim != 1 or sizes.shape[0] == 0:
        raise ValueError(f"lengths must be a non-empty 1-D array of sequence lengths, got shape {sizes.shape}")
    if sizes.dtype.kind not in "iu":
        raise ValueError(f"lengths must hold integers, got dtype {sizes.dtype}")
    if (sizes < 1).any():
        i = int(np.flatnonzero(sizes < 1)[0])
        raise ValueError(f"lengths[{i}] = {int(sizes[i])}: every sequence needs at least one frame")
    if int(sizes.sum()) != array.shape[0]:
        raise ValueError(f"lengths sum to {int(sizes.sum())} but frames holds {array.shape[0]} frames")
    bounds = np.cumsum(sizes)[:-1]
    samples = np.split(array, bounds)
    sample_times = None
    if times is not None:
        t = _numeric(times, "times")
        if t.shape != (array.shape[0],):
            raise ValueError(f"times must have shape ({array.shape[0]},), one time per frame, got {t.shape}")
        sample_times = np.split(t, bounds)
    return pad_sequences(samples, sample_times, dtype=dtype)


def _missing(label) -> bool:
    return label is None or (isinstance(label, float) and math.isnan(label))


def encode_labels(labels, num_samples: int, class_names: Sequence | None = None) -> tuple[np.ndarray, list]:
    """Class indices of ``labels`` and the classes they index.

    Arguments:
        labels: N hashable labels (strings, ints, ...), a list or a 1-D array.
        num_samples: N, the number of sequences the labels belong to.
        class_names: None (the classes are the distinct labels in sorted order) or every class, in the order
            that gives their indices (labels must all be among them; classes without a sample are allowed).

    Returns:
        ``(indices, classes)``: (N,) int64 indices in [0, K) and the K classes as given (numpy scalars turned
            into Python ones), so that ``classes[indices[i]] == labels[i]``.
    """
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    if isinstance(labels, (str, bytes)):
        raise ValueError(f"labels must be a sequence of N labels, got the string {labels!r}")
    if isinstance(labels, np.ndarray):
        if labels.ndim != 1:
            raise ValueError(f"labels must be 1-D (one label per sequence), got shape {labels.shape}")
        items = labels.tolist()
    else:
        try:
            items = list(labels)
        except TypeError:
            raise ValueError(f"labels must be a sequence of labels, got {type(labels).__name__}") from None
    items = [x.item() if isinstance(x, np.generic) else x for x in items]
    if len(items) != num_samples:
        raise ValueError(f"labels has {len(items)} entries but there are {num_samples} sequences")
    for i, label in enumerate(items):
        if _missing(label):
            raise ValueError(
                f"labels[{i}] is missing ({label!r}); every sequence needs a label (or give labels=None "
                "for a dataset to predict on)"
            )
        try:
            hash(label)
        except TypeError:
            raise ValueError(
                f"labels[{i}] = {label!r} is not hashable; labels must be strings, ints or other hashable values"
            ) from None
    if class_names is None:
        distinct = set(items)
        try:
            classes = sorted(distinct)
        except TypeError:
            kinds = sorted({type(x).__name__ for x in distinct})
            raise ValueError(
                f"labels mix types that cannot be sorted ({', '.join(kinds)}); give class_names to "
                "fix the order of the classes"
            ) from None
    else:
        if isinstance(class_names, (str, bytes)):
            raise ValueError(f"class_names must be a sequence of classes, got the string {class_names!r}")
        classes = [c.item() if isinstance(c, np.generic) else c for c in class_names]
        seen: dict[Any, int] = {}
        for k, c in enumerate(classes):
            if c in seen:
                raise ValueError(f"class_names lists {c!r} twice (positions {seen[c]} and {k})")
            seen[c] = k
        unknown = [(i, x) for i, x in enumerate(items) if x not in seen]
        if unknown:
            shown = ", ".join(f"labels[{i}] = {x!r}" for i, x in unknown[:5])
            raise ValueError(f"{len(unknown)} label(s) are not in class_names {classes}: {shown}")
    index = {c: k for k, c in enumerate(classes)}
    return np.array([index[x] for x in items], dtype=np.int64), classes


def from_arrays(
    sequences,
    labels=None,
    *,
    times=None,
    lengths=None,
    class_names: Sequence | None = None,
    name: str = "",
    dtype: torch.dtype = torch.float32,
) -> IrregularDataset:
    """An `IrregularDataset` from numpy sequences and labels.

    Arguments:
        sequences: N samples as `pad_sequences` reads them: a list of (T_i, C) (or (T_i,)) array-likes,
            a 3-D (N, T, C) or 2-D (N, T) array; NaN marks a missing value.
        labels: None (a dataset to predict on: its ``labels`` is None), or N hashable labels (strings, ints,
            ...), a list or 1-D array. They become indices 0..K-1 in sorted order of the distinct labels (or in
            the order of ``class_names``).
        times: None (observation index) or one (T_i,) array per sample (a list or a 2-D (N, T) array).
        lengths: None, or (N,) integers: use the first ``lengths[i]`` time steps of sample i (see
            `pad_sequences`).
        class_names: None, or every class in index order (labels must be among them). With ``labels=None`` it
            is kept as the dataset's class names (e.g. the classes of a training set).
        name: the dataset's name.
        dtype: floating point dtype of ``times`` and ``values``.

    Returns:
        The dataset: ``times`` (N, T), ``values`` (N, T, C), ``lengths`` (N,), ``labels`` (N,) long or None,
            ``class_names`` the classes as strings, and ``meta["classes"]`` the classes as given (ints stay
            ints), so that a prediction k maps back to ``meta["classes"][k]``.

    Raises:
        ValueError: as `pad_sequences`, and for labels whose count differs from the sequences', missing
            (None or NaN) or unhashable labels, labels outside ``class_names``, unsortable label types and
            classes whose string forms coincide.
        TypeError: as `pad_sequences` (sparse matrices, entries that are not numbers).
    """
    times_t, values, lengths_t = pad_sequences(sequences, times, lengths=lengths, dtype=dtype)
    if labels is None:
        classes = [] if class_names is None else [c.item() if isinstance(c, np.generic) else c for c in class_names]
        return IrregularDataset(times_t, values, lengths_t, None, classes, name=name, meta={"classes": classes})
    codes, classes = encode_labels(labels, values.shape[0], class_names)
    names = [str(c) for c in classes]
    if len(set(names)) != len(names):
        raise ValueError(
            f"the classes {classes} give the same name twice as strings; use labels whose string forms differ"
        )
    return IrregularDataset(
        times_t,
        values,
        lengths_t,
        torch.as_tensor(codes, dtype=torch.long),
        names,
        name=name,
        meta={"classes": classes},
    )
