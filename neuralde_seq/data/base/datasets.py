"""The wing's dataset containers: irregularly sampled labelled datasets (`IrregularDataset`), their
train / validation / test parts (`DatasetSplits`), and stratified splits.

Conventions (docs/design.md#data-conventions): a dataset of N sequences padded to T steps holds

* ``times`` (N, T) float, strictly increasing in every row; after a sample's end the grid continues
  (with the spacing of the sample's last step, or 1 for a one-point sample), so every row stays
  strictly increasing;
* ``values`` (N, T, C) float, NaN = missing; every entry after a sample's end is NaN too;
* ``lengths`` (N,) long, the number of time steps of each sample (1 <= length <= T);
* ``labels`` (N,) long in ``[0, len(class_names))``, or None for an unlabelled dataset (inputs to predict on,
  e.g. from `from_arrays` without labels) or a regression dataset;
* ``targets`` (N,) or (N, K) float, finite, or None: real-valued regression targets (e.g. a ``.ts`` file with
  ``@targetLabel true``), in place of ``labels``: a dataset has labels, targets or neither, never both;
* ``static`` (N, S) float or None: per-sample features that do not vary in time (e.g. PhysioNet's age).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from ...observations import Observations, validate_observations

__all__ = [
    "DatasetSplits",
    "IrregularDataset",
    "stratified_split",
]


class DatasetSplits(NamedTuple):
    """The train / validation / test parts of a benchmark dataset (each an `IrregularDataset`).

    Attributes:
        train: the training part.
        val: the validation part.
        test: the test part.
    """

    train: IrregularDataset
    val: IrregularDataset
    test: IrregularDataset


@dataclass
class IrregularDataset:
    """A labelled set of irregularly sampled multichannel sequences (see the module docstring).

    Shapes are checked on construction; a bad argument raises ``ValueError`` naming it. ``labels`` may be
    None: a dataset of inputs without labels (to predict on); it cannot be split by `stratified_split`
    or trained on as a classification set.

    ``targets``: None, or the real-valued regression targets of a regression dataset, (N,) or (N, K)
    floating point and finite; such a dataset has ``labels`` None and, as a rule, no ``class_names``.
    `subset`, `replace` and `to` carry them (``to``'s dtype applies to them) and
    `to_arrays` returns them as y.

    Attributes:
        times: (N, T) float, strictly increasing in every row, padding included (after a sample's end the
            grid continues with the spacing of its last step).
        values: (N, T, C) float, NaN = missing; every entry after a sample's end is NaN too.
        lengths: (N,) long, the number of time steps of each sample (1 <= length <= T).
        labels: (N,) long class indices in ``[0, len(class_names))``, or None (unlabelled or regression).
        class_names: the K class names (stored as strings); index k of ``labels`` names class_names[k].
        name: the dataset's name (default "").
        meta: free-form metadata (provenance, transforms applied, ``classes`` as given, ...; default {}).
        static: (N, S) float per-sample features that do not vary in time, or None (default).
        targets: (N,) or (N, K) float finite regression targets, or None (default); never with ``labels``.
    """

    times: torch.Tensor
    values: torch.Tensor
    lengths: torch.Tensor
    labels: torch.Tensor | None
    class_names: list[str]
    name: str = ""
    meta: dict = field(default_factory=dict)
    static: torch.Tensor | None = None
    targets: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self._check_observations()
        self._check_fields()

    def _check_observations(self) -> None:
        """The observations (times, values, lengths) by the toolkit's one validation (`validate_observations`: shapes,
        dtypes, lengths, NaN times, finite range, order within each sample's length), and the padding convention.
        Run once, when a dataset is made from observations; a dataset derived from a checked one by a step that
        keeps them valid (`subset`, `replace` of other fields, `to` another device, `unobserved`) is not checked
        again."""
        t, v, n = self.times, self.values, self.lengths
        for arg, tensor in (("times", t), ("values", v), ("lengths", n)):
            if not isinstance(tensor, torch.Tensor):
                raise ValueError(f"{arg} must be a torch.Tensor, got {type(tensor).__name__}")
        if n.shape != (t.shape[0],) or n.dtype != torch.long:
            raise ValueError(f"lengths must be a long tensor of shape ({t.shape[0]},), got {n.dtype} {tuple(n.shape)}")
        if t.dim() == 2 and t.shape[0] == 0:
            raise ValueError("the dataset is empty (N = 0)")
        if t.dim() == 2 and not t.is_floating_point():
            raise ValueError("times and values must be floating point tensors")
        validate_observations(t, v, n, min_length=1)
        if not torch.isfinite(t).all():
            raise ValueError("times contain NaN or infinite entries (the padding's grid too must be finite)")
        if t.shape[1] > 1 and not (t[:, 1:] > t[:, :-1]).all():
            bad = int(torch.nonzero(~(t[:, 1:] > t[:, :-1]).all(dim=1))[0])
            raise ValueError(f"times must be strictly increasing in every row, padding included; sample {bad} is not")
        pad = torch.arange(t.shape[1], device=n.device)[None, :] >= n[:, None]
        if (~torch.isnan(v[pad])).any():
            raise ValueError("values after a sample's length must be NaN (padding)")

    def _check_fields(self) -> None:
        """Everything but the observations: labels, targets, static features (each against the samples' count)."""
        self.class_names = [str(c) for c in self.class_names]
        t, y = self.times, self.labels
        if y is not None and not isinstance(y, torch.Tensor):
            raise ValueError(f"labels must be a torch.Tensor, got {type(y).__name__}")
        if y is not None and (y.shape != (t.shape[0],) or y.dtype != torch.long):
            raise ValueError(f"labels must be a long tensor of shape ({t.shape[0]},), got {y.dtype} {tuple(y.shape)}")
        if y is not None and y.numel() and (int(y.min()) < 0 or int(y.max()) >= len(self.class_names)):
            raise ValueError(
                f"labels must lie in [0, {len(self.class_names)}) (one per class name), "
                f"got range [{int(y.min())}, {int(y.max())}]"
            )
        if self.targets is not None:
            self._check_targets()
        if self.static is not None:
            st = self.static
            if not isinstance(st, torch.Tensor) or st.dim() != 2 or st.shape[0] != t.shape[0]:
                raise ValueError(
                    f"static must be a tensor of shape (N={t.shape[0]}, S), got "
                    f"{tuple(st.shape) if isinstance(st, torch.Tensor) else type(st).__name__}"
                )
            if not st.is_floating_point():
                raise ValueError("static must be a floating point tensor")

    @classmethod
    def _derived(cls, **fields_) -> IrregularDataset:
        """A dataset whose observations come from a checked dataset by a step that keeps them valid (a selection of
        samples, a move to another device, points made unobserved): the other fields are checked, the observations
        not again (`_check_observations`)."""
        dataset = cls.__new__(cls)
        for spec in dataclasses.fields(cls):
            if spec.name in fields_:
                value = fields_[spec.name]
            elif spec.default is not dataclasses.MISSING:
                value = spec.default
            else:
                factory = spec.default_factory
                if not callable(factory):
                    raise TypeError(f"{cls.__name__}._derived: field {spec.name!r} has no default and was not given")
                value = factory()
            setattr(dataset, spec.name, value)
        dataset._check_fields()
        return dataset

    def _check_targets(self) -> None:
        """``targets``: a finite floating (N,) or (N, K) tensor, and no ``labels`` beside it."""
        tg, n = self.targets, self.times.shape[0]
        if not isinstance(tg, torch.Tensor):
            raise ValueError(f"targets must be a torch.Tensor or None, got {type(tg).__name__}")
        if tg.dim() not in (1, 2) or tg.shape[0] != n or (tg.dim() == 2 and tg.shape[1] == 0):
            raise ValueError(
                f"targets must have shape (N,) or (N, K) with N = {n} samples and K >= 1, got {tuple(tg.shape)}"
            )
        if not tg.is_floating_point():
            raise ValueError(
                f"targets must be a floating point tensor (real-valued regression targets), got "
                f"{tg.dtype}; class indices belong in labels"
            )
        finite = torch.isfinite(tg.reshape(n, -1)).all(dim=1)
        if not finite.all():
            bad = int(torch.nonzero(~finite)[0])
            raise ValueError(f"targets must be finite; sample {bad} has {tg[bad].tolist()}")
        if self.labels is not None:
            raise ValueError(
                "labels and targets are both given: a dataset holds class labels (classification) "
                "or regression targets, not both"
            )

    # ------------------------------------------------------------------ basic protocol
    def __len__(self) -> int:
        return self.times.shape[0]

    @property
    def num_channels(self) -> int:
        return self.values.shape[2]

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def observations(self) -> Observations:
        """The inputs without the labels: an `Observations` batch of every sample."""
        return Observations(self.times, self.values, self.lengths, self.static)

    @property
    def observed(self) -> torch.Tensor:
        """Boolean (N, T, C) mask of observed (non-NaN) values."""
        return ~torch.isnan(self.values)

    def subset(self, indices) -> IrregularDataset:
        """The samples at ``indices``, as a new dataset.

        The padded length T is kept. Tensors are copies, so editing the subset leaves this one intact.

        Arguments:
            indices: a sequence of ints or a 1-D integer tensor (negative indices count from the end), or an
                (N,) bool mask.

        Returns:
            A new `IrregularDataset` of the selected samples, in the order of ``indices``.

        Raises:
            ValueError: indices that are not 1-D integers, out of range, or a mask of the wrong shape.
        """
        idx = torch.as_tensor(indices)
        if idx.dtype == torch.bool:
            if idx.shape != (len(self),):
                raise ValueError(f"a boolean indices mask must have shape ({len(self)},), got {tuple(idx.shape)}")
            idx = torch.nonzero(idx).flatten()
        if idx.dim() != 1 or (idx.numel() and idx.is_floating_point()):
            raise ValueError("indices must be a 1-D sequence of integers")
        idx = idx.long()
        if idx.numel() and (int(idx.min()) < -len(self) or int(idx.max()) >= len(self)):
            raise ValueError(f"indices out of range for a dataset of {len(self)} samples")
        idx = idx.to(self.times.device)
        return IrregularDataset._derived(  # a selection of checked samples: not checked again
            times=self.times[idx].clone(),
            values=self.values[idx].clone(),
            lengths=self.lengths[idx].clone(),
            labels=None if self.labels is None else self.labels[idx].clone(),
            class_names=list(self.class_names),
            name=self.name,
            meta=dict(self.meta),
            static=None if self.static is None else self.static[idx].clone(),
            targets=None if self.targets is None else self.targets[idx].clone(),
        )

    def replace(self, **changes) -> IrregularDataset:
        """A copy with some fields replaced, checked as a new dataset is: the observations (times, values, lengths)
        only where one of them is replaced (by another tensor), the other fields always.

        Arguments:
            **changes: new values of fields (``times``, ``values``, ``lengths``, ``labels``, ``class_names``,
                ``name``, ``meta``, ``static``, ``targets``).

        Returns:
            A new `IrregularDataset`.
        """
        fields_: dict[str, Any] = dict(
            times=self.times,
            values=self.values,
            lengths=self.lengths,
            labels=self.labels,
            class_names=list(self.class_names),
            name=self.name,
            meta=dict(self.meta),
            static=self.static,
            targets=self.targets,
        )
        fields_.update(changes)
        if all(fields_[name] is getattr(self, name) for name in ("times", "values", "lengths")):
            return IrregularDataset._derived(**fields_)  # the checked observations, kept
        return IrregularDataset(**fields_)

    def unobserved(self, points: torch.Tensor) -> IrregularDataset:
        """A copy with the values at ``points`` made unobserved (NaN in every channel): the time grid, the lengths
        and the other fields are kept. Making points unobserved keeps checked observations valid, so they are not
        checked again (augmentation does this at every batch: `random_crop_and_drop`).

        Arguments:
            points: (N, T) bool, True at the time points to make unobserved.

        Returns:
            A new `IrregularDataset`.

        Raises:
            ValueError: ``points`` not an (N, T) bool tensor.
        """
        if not isinstance(points, torch.Tensor) or points.dtype != torch.bool or points.shape != self.times.shape:
            shape = tuple(points.shape) if isinstance(points, torch.Tensor) else type(points).__name__
            raise ValueError(f"points must be an (N, T) = {tuple(self.times.shape)} bool tensor, got {shape}")
        values = self.values.masked_fill(points.to(self.values.device).unsqueeze(-1), float("nan"))
        return IrregularDataset._derived(
            times=self.times,
            values=values,
            lengths=self.lengths,
            labels=self.labels,
            class_names=list(self.class_names),
            name=self.name,
            meta=dict(self.meta),
            static=self.static,
            targets=self.targets,
        )

    def to(self, device=None, dtype: torch.dtype | None = None) -> IrregularDataset:
        """Move to ``device`` and/or cast to ``dtype``.

        Arguments:
            device: the target device, or None (default: unchanged).
            dtype: a floating dtype for times, values, static and targets, or None (default: unchanged).

        Returns:
            A new `IrregularDataset`; its observations are checked again only where ``dtype`` changes theirs (a cast
            may merge times or overflow).
        """
        cast = dtype is not None and (self.times.dtype != dtype or self.values.dtype != dtype)
        build = IrregularDataset if cast else IrregularDataset._derived
        return build(
            class_names=list(self.class_names),
            name=self.name,
            meta=dict(self.meta),
            times=self.times.to(device=device, dtype=dtype),
            values=self.values.to(device=device, dtype=dtype),
            lengths=self.lengths.to(device=device),
            labels=None if self.labels is None else self.labels.to(device=device),
            static=None if self.static is None else self.static.to(device=device, dtype=dtype),
            targets=None if self.targets is None else self.targets.to(device=device, dtype=dtype),
        )

    def to_arrays(self) -> tuple[list, np.ndarray | None, list]:
        """The samples as numpy, the form `from_arrays` and the scikit-learn estimators read:
        ``(X, y, times)``.

        So ``from_arrays(X, y, times=times, class_names=dataset.class_names)`` rebuilds a classification
        dataset (up to padding length) and ``SequenceClassifier().fit(X, y, times=times)`` trains on it
        (``SequenceRegressor`` on a regression dataset).

        Returns:
            ``(X, y, times)``. X: N arrays (T_i, C), each sample up to its length, NaN where missing.
                y: (N,) array of the labels as `from_arrays` was given them (``meta["classes"]``), else of the
                class names; for a regression dataset the targets, float64 (N,) or (N, K); or None for an
                unlabelled dataset. times: N arrays (T_i,).
        """
        lengths = self.lengths.tolist()
        values, times = self.values.detach().cpu().numpy(), self.times.detach().cpu().numpy()
        X = [values[i, :n].copy() for i, n in enumerate(lengths)]
        sample_times = [times[i, :n].copy() for i, n in enumerate(lengths)]
        if self.targets is not None:
            return X, self.targets.detach().cpu().numpy().astype(np.float64), sample_times
        return X, self.given_labels(), sample_times

    def given_labels(self) -> np.ndarray | None:
        """(N,) the samples' labels as `from_arrays` was given them (``meta["classes"]``: ints stay ints, an int64
        array), else their class names (strings); None for an unlabelled dataset. What an estimator fitted on the
        dataset alone predicts, instead of the class indices ``labels``."""
        if self.labels is None:
            return None
        # from_arrays keeps the labels as given (ints stay ints) in meta["classes"]; files have class names
        classes = self.meta.get("classes")
        if classes is None or len(classes) != len(self.class_names):
            classes = self.class_names
        y = np.asarray(classes, dtype=object)[self.labels.cpu().numpy()]
        if all(isinstance(c, (int, np.integer)) for c in classes):
            y = y.astype(np.int64)
        return y

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_sequences(
        cls,
        series: Sequence[np.ndarray],
        labels: Sequence | None,
        class_names: Sequence[str],
        times: Sequence[np.ndarray] | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        name: str = "",
    ) -> IrregularDataset:
        """Pad a list of (C, L_i) arrays into a dataset.

        Arguments:
            series: N arrays of shape (C, L_i) (channels first), NaN where missing.
            labels: one per series, either class names (strings, looked up in ``class_names``) or integer
                indices; or None for a dataset without labels (give regression targets with `replace`).
            class_names: the K class names, in index order.
            times: one (L_i,) array per sample; None (default): the observation index 0..L_i-1.
            dtype: floating point dtype of times and values (default float32).
            name: the dataset's name.

        Returns:
            An `IrregularDataset` with ``times`` (N, T), ``values`` (N, T, C), ``lengths`` (N,), T = max L_i.

        Raises:
            ValueError: an empty list, mismatched counts of labels or times, differing channel counts, an
                empty series, or a label not in ``class_names``.
        """
        if len(series) == 0:
            raise ValueError("series is empty")
        if labels is not None and len(labels) != len(series):
            raise ValueError(f"labels has {len(labels)} entries for {len(series)} series")
        if times is not None and len(times) != len(series):
            raise ValueError(f"times has {len(times)} entries for {len(series)} series")
        class_names = [str(c) for c in class_names]
        channels = {np.asarray(s).shape[0] for s in series}
        if len(channels) != 1:
            raise ValueError(f"series have different numbers of channels: {sorted(channels)}")
        (c,) = channels
        lengths = np.array([np.asarray(s).shape[1] for s in series], dtype=np.int64)
        if lengths.min() < 1:
            raise ValueError("series contains an empty sequence (length 0)")
        n, t_max = len(series), int(lengths.max())
        vals = np.full((n, t_max, c), np.nan)
        tms = np.empty((n, t_max))
        for i, s in enumerate(series):
            s = np.asarray(s, dtype=np.float64)
            if s.ndim != 2:
                raise ValueError(f"series[{i}] must have shape (C, L), got {s.shape}")
            length = s.shape[1]
            vals[i, :length] = s.T
            ti = np.arange(length, dtype=np.float64) if times is None else np.asarray(times[i], dtype=np.float64)
            if ti.shape != (length,):
                raise ValueError(f"times[{i}] must have shape ({length},), got {ti.shape}")
            step = ti[-1] - ti[-2] if length > 1 else 1.0
            if not step > 0:
                step = 1.0  # the row fails the strictly-increasing check below anyway
            tms[i, :length] = ti
            tms[i, length:] = ti[-1] + step * np.arange(1, t_max - length + 1)
        label_idx = []
        for i, lab in enumerate(labels if labels is not None else []):
            if isinstance(lab, (int, np.integer)) and not isinstance(lab, bool):
                label_idx.append(int(lab))
            else:
                if str(lab) not in class_names:
                    raise ValueError(f"labels[{i}] = {lab!r} is not in class_names {class_names}")
                label_idx.append(class_names.index(str(lab)))
        return cls(
            times=torch.as_tensor(tms, dtype=dtype),
            values=torch.as_tensor(vals, dtype=dtype),
            lengths=torch.as_tensor(lengths, dtype=torch.long),
            labels=None if labels is None else torch.as_tensor(label_idx, dtype=torch.long),
            class_names=class_names,
            name=name,
        )


def stratified_split(
    dataset: IrregularDataset,
    fractions: Sequence[float],
    seed: int,
    *,
    return_indices: bool = False,
):
    """Split ``dataset`` into ``len(fractions)`` stratified parts (scikit-learn ``train_test_split``).

    ``fractions`` must be positive and sum to 1 (e.g. ``(0.85, 0.15)`` or ``(0.7, 0.15, 0.15)``).
    Parts are peeled off one after another, each stratified on the labels of what remains; every
    sample lands in exactly one part. Indices in each part are sorted.

    Classes too small to stratify: a step cannot be stratified when a class has fewer than 2 samples among
    those that remain, or when one of its two parts would hold fewer samples than there are classes. That
    step is then a plain random split (same sizes, same seed) and a ``UserWarning`` names the classes too
    small (or the part sizes against the number of classes), so a small class may be missing from a part.
    Steps that can be stratified are stratified exactly as before (the published splits do not change).

    Arguments:
        dataset: a labelled `IrregularDataset`.
        fractions: the parts' fractions, at least two, positive and summing to 1.
        seed: the random seed (part k is drawn with ``random_state=seed + k``).
        return_indices: also return each part's sorted sample indices (default False).

    Returns:
        A tuple of ``len(fractions)`` datasets, or of ``(dataset, indices)`` pairs with
            ``return_indices=True``.

    Raises:
        ValueError: a dataset without labels (unlabelled, or a regression dataset: ``targets``), or bad
            ``fractions``.
    """
    fractions = _check_fractions(fractions)
    if dataset.labels is None:
        what = (
            "holds regression targets (targets), which cannot be stratified; split it at random"
            if dataset.targets is not None
            else "is unlabelled (labels is None)"
        )
        raise ValueError(f"stratified_split needs labels, but the dataset {what}")
    return _split(dataset, fractions, seed, stratify=True, return_indices=return_indices)


def _check_fractions(fractions: Sequence[float]) -> list[float]:
    """``fractions`` as floats: at least two, positive, summing to 1 (else ``ValueError`` naming them)."""
    fractions = [float(f) for f in fractions]
    if len(fractions) < 2:
        raise ValueError(f"fractions needs at least two parts, got {fractions}")
    if any(not f > 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"fractions must be positive and sum to 1, got {fractions}")
    return fractions


def _split(
    dataset: IrregularDataset, fractions: Sequence[float], seed: int, *, stratify: bool, return_indices: bool = False
):
    """The parts of `stratified_split` (same arguments and return). ``stratify=False`` makes every step
    the plain random split that a step too small to stratify falls back on (same sizes, same seeds, no
    warning): the split of a dataset without labels, e.g. regression targets (``load_files``)."""
    from sklearn.model_selection import train_test_split

    fractions = _check_fractions(fractions)
    labels = None
    if stratify:
        assert dataset.labels is not None  # stratified_split refuses a dataset without labels
        labels = dataset.labels.cpu().numpy()
    remaining = np.arange(len(dataset))
    parts = []
    for k, frac in enumerate(fractions[:-1]):
        rel = frac / sum(fractions[k:])
        stratified = None
        if labels is not None:
            try:
                stratified = train_test_split(
                    remaining, train_size=rel, stratify=labels[remaining], random_state=seed + k, shuffle=True
                )
            except ValueError:
                pass  # too small to stratify: the plain split below
        if stratified is not None:
            take, rest = stratified
        else:
            # Raises again if the split is impossible for another reason (e.g. a part would be empty).
            take, rest = train_test_split(remaining, train_size=rel, random_state=seed + k, shuffle=True)
            if labels is not None:
                warnings.warn(
                    _not_stratified(dataset, labels[remaining], len(take), len(rest), k), UserWarning, stacklevel=3
                )
        parts.append(np.sort(take))
        remaining = rest
    parts.append(np.sort(remaining))
    out = []
    for idx in parts:
        sub = dataset.subset(torch.as_tensor(idx, dtype=torch.long))
        out.append((sub, idx) if return_indices else sub)
    return tuple(out)


def _not_stratified(dataset: IrregularDataset, labels: np.ndarray, n_take: int, n_rest: int, step: int) -> str:
    """The warning of a split step that could not be stratified: which classes are too small, or why."""
    classes, counts = np.unique(labels, return_counts=True)
    small = [
        f"{dataset.class_names[c]!r} ({n} sample{'s' if n != 1 else ''})"
        for c, n in zip(classes.tolist(), counts.tolist())
        if n < 2
    ]
    reasons = []
    if small:
        reasons.append(f"class(es) with fewer than 2 samples: {', '.join(small)}")
    if min(n_take, n_rest) < len(classes):
        reasons.append(f"a part of {min(n_take, n_rest)} samples cannot hold one of each of the {len(classes)} classes")
    return (
        f"stratified_split ({dataset.name or 'dataset'}, step {step + 1}): cannot stratify {len(labels)} samples "
        f"into parts of {n_take} and {n_rest} ({'; '.join(reasons) or 'too few samples per class'}); this step "
        "is a plain random split, so a class may be missing from a part"
    )
