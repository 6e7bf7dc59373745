"""Long-format pandas DataFrames (the layout of aeon, tsfresh and most databases) as datasets.

`from_long_dataframe` reads one of two layouts:

* **wide-long** (one row per sample and time point, one column per channel):

      id   time  heart_rate  temperature  label
      a    0.0   71.0        NaN          sick
      a    0.7   NaN         37.9         sick
      b    0.0   64.0        36.6         well

* **stacked** (tsfresh's ``column_kind`` / ``column_value`` layout: one row per sample, time point and
  channel), with ``kind_column="kind", value_column="value"``:

      id   time  kind         value
      a    0.0   heart_rate   71.0
      a    0.7   temperature  37.9

Samples are the distinct ids in order of first appearance in the frame (``meta["ids"]``); each sample's
rows are sorted by time. NaN values are missing observations; a time point listed in the frame stays in
the sample even when all its channels are missing; in the stacked layout a channel without a row at one
of the sample's times is missing there. Nothing is dropped or filled: a repeated (id, time) (stacked:
(id, time, kind)), a missing id, time or label, an infinite value, a non-numeric value or time column, and
a label that varies within one id raise an error naming the column (and the id or row).

The arrays are passed to `neuralde_seq.data.formats.arrays.from_arrays`, so the result equals
``from_arrays(sequences, labels, times=times)`` with the same per-sample arrays (labels mapped to
0..K-1 in sorted order, the originals in ``class_names``).

pandas is an optional dependency, imported when the function is called (``pip install pandas``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..base.datasets import IrregularDataset

__all__ = ["from_long_dataframe"]


def _import_pandas():
    try:
        import pandas
    except ImportError as err:
        raise ImportError(
            "from_long_dataframe needs pandas, an optional dependency of neuralde_seq: pip install pandas"
        ) from err
    return pandas


_DEFAULTS = {
    "id_column": ("id", "name the column that identifies each sample with id_column=..."),
    "time_column": (
        "time",
        "name the time column with time_column=..., or pass time_column=None to "
        "number each sample's rows 0, 1, ... in frame order",
    ),
}


def _column(frame, column, what: str):
    if column not in frame.columns:
        message = f"{what}={column!r} is not a column of frame; its columns: {list(frame.columns)}"
        default, advice = _DEFAULTS.get(what, (None, None))
        if column == default:  # the user may never have named it: say where the name comes from
            message += f" ({what} defaults to {default!r}: {advice})"
        if column in (frame.index.names or []):
            message += f"; {column!r} is the frame's index: pass frame.reset_index()"
        raise KeyError(message)
    return frame[column]


def _numeric(pd, series, what: str, column, allow_nan: bool) -> np.ndarray:
    """A column as float64, refusing non-numeric dtypes, infinities and (unless allowed) NaN."""
    dtype = series.dtype
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        raise TypeError(
            f"{what} {column!r} holds dates or durations ({dtype}); convert it to numbers "
            f"first, e.g. (frame[{column!r}] - frame[{column!r}].min()).dt.total_seconds()"
        )
    if not pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
        raise TypeError(f"{what} {column!r} must be numeric, got dtype {dtype}")
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.isinf(values) if allow_nan else ~np.isfinite(values)
    if bad.any():
        row = series.index[int(np.argmax(bad))]
        kind = "an infinite" if allow_nan else "a missing or infinite"
        raise ValueError(f"{what} {column!r} has {kind} entry ({values[bad][0]}) at row {row!r}")
    return values


def _check_dtype_range(frame, ids_series, values, column, what: str, dtype) -> None:
    """Refuse an entry beyond what ``dtype`` carries (1e308 overflows float32), naming the column, row and id."""
    if values is None:
        return
    from ...observations import magnitude_limit
    from .ts_format import out_of_range

    _check_float_dtype(dtype)
    with np.errstate(invalid="ignore"):
        too_big = np.abs(values) > magnitude_limit(dtype)  # False for NaN
    if too_big.any():
        position = int(np.argmax(too_big))
        value = float(values[position])
        sample_id = ids_series.iloc[position]
        sample_id = sample_id.item() if isinstance(sample_id, np.generic) else sample_id
        row = frame.index[position]
        row = row.item() if isinstance(row, np.generic) else row
        rescale = "the times" if what == "time_column" else "the column"
        raise ValueError(
            f"{what} {column!r} holds {value!r} at row {row!r} (id {sample_id!r}), which "
            f"{out_of_range(value, dtype, 'from_long_dataframe', rescale)}"
        )


def _check_float_dtype(dtype) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating point torch.dtype (e.g. torch.float32), got {dtype!r}")


def from_long_dataframe(
    frame,
    *,
    id_column: Hashable = "id",
    time_column: Hashable | None = "time",
    value_columns: Sequence[Hashable] | None = None,
    label_column: Hashable | None = None,
    labels: Mapping | Any | None = None,
    kind_column: Hashable | None = None,
    value_column: Hashable | None = None,
    class_names: Sequence | None = None,
    name: str = "",
    dtype: torch.dtype = torch.float32,
) -> IrregularDataset:
    """A long-format DataFrame (see the module docstring) as an `IrregularDataset`.

    Arguments:
        frame: a ``pandas.DataFrame`` with R rows.
        id_column: the column naming each row's sample (any hashable values, no missing ones).
        time_column: the column of observation times (numbers; R,), or None: each sample's rows in frame order
            are its time points 0, 1, ..., L_i - 1 (wide-long layout only).
        value_columns: the channel columns (C of them, numeric, NaN = missing), in channel order. Default:
            every column except the id, time and label columns. Not with ``kind_column``.
        label_column: the column holding each sample's label (constant within an id, no missing ones).
        labels: instead of ``label_column``, each sample's label looked up by id: a mapping or a
            ``pandas.Series`` indexed by id (tsfresh's ``y``), with exactly the frame's ids.
        kind_column: the stacked layout (give it with ``value_column``): the column holding each row's channel
            name. Channels are the distinct kinds, sorted (``meta["channels"]``); needs ``time_column``.
        value_column: the stacked layout (give it with ``kind_column``): the column holding each row's value.
        class_names: passed to `from_arrays`: None (labels are mapped to 0..K-1 in sorted order) or every
            class in index order.
        name: the dataset's name, passed to `from_arrays`.
        dtype: floating point dtype of the dataset's times and values, passed to `from_arrays`.

    Returns:
        The dataset of N samples (the distinct ids in order of first appearance): ``times`` (N, T),
            ``values`` (N, T, C) with NaN for missing values and padding, ``lengths`` (N,), ``labels`` (N,) (the
            ``from_arrays`` default when neither ``label_column`` nor ``labels`` is given). ``meta`` adds
            ``ids`` (the id of each sample), ``channels`` (the channel names) and ``layout``.

    Raises:
        ImportError: pandas is not installed.
        TypeError: ``frame`` is not a DataFrame; a non-numeric time or value column.
        KeyError: a named column is missing.
        ValueError: conflicting arguments, an empty frame, a missing id / time / label, an infinite value, a
            repeated (id, time) (stacked: (id, time, kind)), a label varying within an id, an id without any
            observed value, ``labels`` not covering exactly the frame's ids.
    """
    pd = _import_pandas()
    from .arrays import from_arrays

    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"frame must be a pandas.DataFrame, got {type(frame).__name__}")
    if len(frame) == 0:
        raise ValueError("frame has no rows")
    if frame.columns.has_duplicates:
        duplicated = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
        raise ValueError(f"frame has repeated column names {duplicated}; every column must be named once")
    stacked = kind_column is not None or value_column is not None
    if stacked and (kind_column is None or value_column is None):
        raise ValueError("the stacked layout needs both kind_column and value_column")
    if stacked and value_columns is not None:
        raise ValueError("value_columns is for the wide-long layout; with kind_column/value_column leave it None")
    if stacked and time_column is None:
        raise ValueError("the stacked layout (kind_column/value_column) needs time_column")
    if label_column is not None and labels is not None:
        raise ValueError("give label_column or labels, not both")

    # ---- ids (first appearance order), times
    ids_series = _column(frame, id_column, "id_column")
    if ids_series.isna().any():
        row = frame.index[int(np.argmax(ids_series.isna().to_numpy()))]
        raise ValueError(f"id_column {id_column!r} has a missing id at row {row!r}")
    codes, uniques = pd.factorize(ids_series, sort=False)
    ids = uniques.tolist()
    times_all = None
    if time_column is not None:
        times_all = _numeric(
            pd, _column(frame, time_column, "time_column"), "time_column", time_column, allow_nan=False
        )
    used = {id_column, time_column, label_column} - {None}

    # ---- channels
    if stacked:
        kinds_series = _column(frame, kind_column, "kind_column")
        if kinds_series.isna().any():
            row = frame.index[int(np.argmax(kinds_series.isna().to_numpy()))]
            raise ValueError(f"kind_column {kind_column!r} has a missing channel name at row {row!r}")
        stacked_values = _numeric(
            pd, _column(frame, value_column, "value_column"), "value_column", value_column, allow_nan=True
        )
        kind_codes, kinds = pd.factorize(kinds_series, sort=False)
        try:
            order = sorted(range(len(kinds)), key=lambda k: kinds[k])
        except TypeError:  # kinds of mixed types: order by their text
            order = sorted(range(len(kinds)), key=lambda k: str(kinds[k]))
        rank = np.empty(len(kinds), dtype=np.int64)
        rank[order] = np.arange(len(kinds))
        channel_of_row = rank[kind_codes]
        channels = [kinds[k] for k in order]
    else:
        if value_columns is None:
            channels = [c for c in frame.columns if c not in used]
        else:
            if isinstance(value_columns, (str, bytes)) or not isinstance(value_columns, Sequence):
                raise ValueError(f"value_columns must be a list of column names, got {value_columns!r}")
            channels = list(value_columns)
            repeated = sorted({str(c) for c in channels if channels.count(c) > 1})
            if repeated:
                raise ValueError(f"value_columns names {repeated} more than once")
            overlap = [c for c in channels if c in used]
            if overlap:
                raise ValueError(f"value_columns {overlap} are also the id, time or label column")
        if not channels:
            raise ValueError("frame has no value column (every column is the id, time or label column)")
        if value_columns is None:  # every other column was taken as a channel: say so when one is not numeric
            for c in channels:
                dtype_c = frame[c].dtype
                if not pd.api.types.is_numeric_dtype(dtype_c) or pd.api.types.is_bool_dtype(dtype_c):
                    named = ", ".join(
                        f"{role} {col!r}"
                        for role, col in (("id", id_column), ("time", time_column), ("label", label_column))
                        if col is not None
                    )
                    hint = f"; if {c!r} holds the labels, pass label_column={c!r}" if label_column is None else ""
                    raise TypeError(
                        f"column {c!r} holds {dtype_c} values, not numbers: it was taken as a channel "
                        f"because value_columns was not given (every column except {named} is a "
                        f"channel); name the channels with value_columns=[...], or drop {c!r}{hint}"
                    )
        wide = np.stack(
            [_numeric(pd, _column(frame, c, "value_columns"), "value_columns", c, allow_nan=True) for c in channels],
            axis=1,
        )

    # ---- values and times the dataset's dtype can carry (named here, where the column and row are known)
    _check_dtype_range(frame, ids_series, times_all, time_column, "time_column", dtype)
    if stacked:
        _check_dtype_range(frame, ids_series, stacked_values, value_column, "value_column", dtype)
    else:
        for j, c in enumerate(channels):
            _check_dtype_range(frame, ids_series, wide[:, j], c, "value column", dtype)

    # ---- labels per sample
    sample_labels = None
    if label_column is not None:
        label_series = _column(frame, label_column, "label_column")
        missing = label_series.isna().to_numpy()
        if missing.any():
            row = frame.index[int(np.argmax(missing))]
            raise ValueError(
                f"label_column {label_column!r} has a missing label at row {row!r} "
                f"(id {ids_series.iloc[int(np.argmax(missing))]!r})"
            )
        label_values = label_series.to_numpy(dtype=object)
        for position, value in enumerate(label_values):
            try:
                hash(value)
            except TypeError:
                raise ValueError(
                    f"label_column {label_column!r} holds an unhashable value {value!r} at row "
                    f"{frame.index[position]!r}; labels must be strings, ints or other hashable "
                    "values"
                ) from None
    elif labels is not None:
        if isinstance(labels, pd.Series):
            if labels.index.has_duplicates:
                raise ValueError("labels (a Series indexed by id) has repeated ids in its index")
            lookup = labels.to_dict()
        elif isinstance(labels, Mapping):
            lookup = dict(labels)
        else:
            raise TypeError(f"labels must be a mapping or a pandas.Series indexed by id, got {type(labels).__name__}")
        known = set(ids)
        absent = [i for i in ids if i not in lookup]
        extra = [k for k in lookup if k not in known]
        if absent or extra:
            raise ValueError(
                f"labels must give a label for exactly the frame's ids: ids without a label "
                f"{absent[:5]}{'...' if len(absent) > 5 else ''}, labels for ids not in the frame "
                f"{extra[:5]}{'...' if len(extra) > 5 else ''}"
            )
        sample_labels = [lookup[i] for i in ids]
        bad = [i for i, lab in zip(ids, sample_labels) if pd.api.types.is_scalar(lab) and pd.isna(lab)]
        if bad:
            raise ValueError(f"labels has a missing label for id {bad[0]!r}")

    # ---- one (L_i, C) array and (L_i,) times per sample
    by_sample = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[by_sample], np.arange(len(ids) + 1))
    sequences, times, collected = [], [], []
    for k, sample_id in enumerate(ids):
        rows = by_sample[bounds[k] : bounds[k + 1]]  # frame order
        if stacked:
            assert times_all is not None  # the stacked layout needs time_column (refused above without)
            t_rows = times_all[rows]
            grid, grid_index = np.unique(t_rows, return_inverse=True)
            cells = grid_index * len(channels) + channel_of_row[rows]
            if np.unique(cells).size != cells.size:
                first = int(np.flatnonzero(np.bincount(cells) > 1)[0])
                raise ValueError(
                    f"id {sample_id!r} has several rows for time {grid[first // len(channels)]} and "
                    f"kind {channels[first % len(channels)]!r} (repeated (id, time, kind))"
                )
            seq = np.full((grid.size, len(channels)), np.nan)
            seq[grid_index, channel_of_row[rows]] = stacked_values[rows]
        else:
            if times_all is None:
                grid = np.arange(rows.size, dtype=np.float64)
                seq = wide[rows]
            else:
                time_order = np.argsort(times_all[rows], kind="stable")
                grid, seq = times_all[rows][time_order], wide[rows][time_order]
                repeats = np.flatnonzero(np.diff(grid) == 0)
                if repeats.size:
                    raise ValueError(
                        f"id {sample_id!r} has several rows at time {grid[repeats[0]]} (repeated "
                        f"(id, time)); use the stacked layout (kind_column/value_column) for one row "
                        "per channel"
                    )
        if np.isnan(seq).all():
            raise ValueError(
                f"id {sample_id!r} has no observed value (all its {seq.size} values are NaN); a "
                "sequence needs at least one observation: leave that id out of the frame"
            )
        sequences.append(seq)
        times.append(grid)
        if label_column is not None:
            distinct = list(dict.fromkeys(label_values[rows].tolist()))
            if len(distinct) != 1:
                raise ValueError(f"label_column {label_column!r} varies within id {sample_id!r}: {distinct}")
            collected.append(distinct[0])
    if label_column is not None:
        sample_labels = collected
    if sample_labels is not None and class_names is None:
        try:
            sorted(set(sample_labels))
        except TypeError:  # from_arrays would blame its own argument `labels`, which the caller may not have named
            kinds = sorted({type(x).__name__ for x in sample_labels})
            named = f"label_column {label_column!r}" if label_column is not None else "labels"
            raise ValueError(
                f"{named} mixes label types that cannot be sorted ({', '.join(kinds)}), so the classes "
                "have no order: make the labels one type (e.g. frame[...].astype(str)), or give "
                "class_names to fix the order of the classes"
            ) from None

    dataset = from_arrays(sequences, sample_labels, times=times, class_names=class_names, name=name, dtype=dtype)
    return dataset.replace(
        meta={
            **dataset.meta,
            "ids": ids,
            "channels": [str(c) for c in channels],
            "layout": "stacked" if stacked else "wide-long",
        }
    )
