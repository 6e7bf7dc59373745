"""A model the benchmark runner trained, loaded from its run folder to score new data: `load_run`.

``neuralde-seq bench`` (and ``compare``) write one folder per run, ``runs/<row>/seed<k>-<fingerprint>/``, whose
``best.pt`` holds the best-validation weights and the run's settings (`neuralde_seq.training.run.fit_and_evaluate`):
the model's registry name and options, its solver, the `InputSpec` that turns the *raw* series into the model's input
(the task protocol's standardisation included: `InputSpec.reading_raw`), and what the model was built from
(``trained_model``: its input channels, the options its training input fixed, the class names, dtype and evaluation
batch size). `load_run` rebuilds the model from that file alone, and `TrainedClassifier.predict` /
`TrainedClassifier.predict_proba` score new data exactly as the run scored its test split.

Data are given as the task's loader gives them, before the protocol's standardisation: the forms the scikit-learn
estimators take (a list of (T_i, C) arrays, a 3-D (N, T, C) or 2-D (N, T) array, NaN where missing, with optional
``times``), an `IrregularDataset`, or the path of a ``.ts`` / ARFF file (what ``task: files`` reads; labels are not
needed). The values are read in the precision the run's task read them (float64 for ``files``), standardised in
float64 and cast to the run's dtype, as the protocol did (`neuralde_seq.data.protocols`).

What the protocol did to the data as an experimental condition is not part of the model, and predictions see the
data as given: ``drop_rate`` (points removed at random from every split) and ``subsample`` (every k-th time point
kept, to train at a lower sampling rate). To score data as such a run's test split was scored, apply them first
(`neuralde_seq.data.drop_observations`, `neuralde_seq.data.subsample`).

Only trained models have checkpoints: a reference row (MiniRocket, 1-NN, ...) or a random-features row is fitted
by the runner in closed form and scored, but not stored (its folder holds ``result.json`` alone); `load_run` says
so, naming the estimator to fit instead. Checkpoints written before checkpoints held ``trained_model`` (and the
protocol's standardisation in their spec) are refused likewise, with what to do: run them afresh.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import torch

from .data.base.datasets import IrregularDataset
from .files import atomic_file
from .input_checks import floating_dtype
from .training.augmentation import EnsembleClassifier
from .training.checkpoints import CheckpointError, load_model_state, read_checkpoint
from .training.input_spec import InputSpec, warn_unobserved
from .training.threads import DEFAULT_THREADS
from .training.trainer import predict as _predict

__all__ = ["TrainedClassifier", "load_run", "write_predictions", "CHECKPOINT_NAME"]

CHECKPOINT_NAME = "best.pt"
"""The best-validation checkpoint in a run folder (`load_run` of a folder reads it)."""

_AFRESH = (
    "make the run afresh (neuralde-seq bench CONFIG --fresh, or delete its folder and run the config again "
    "with --resume)"
)


class TrainedClassifier:
    """A classifier the runner trained, as `load_run` rebuilt it: `predict` and `predict_proba` on raw data.

    Arguments:
        model: the trained model (its weights loaded).
        input_spec: the run's spec, reading raw data.
        classes: the K class names, in the order of the model's outputs.
        channels: the number of channels C of the raw data.
        dtype: the run's torch dtype.
        device: where the model is.
        batch_size: samples per forward pass.
        checkpoints: the checkpoint files read.
        config: the settings the first checkpoint records.
        read_dtype: the dtype the run's task read raw values in (float64 for ``files``).

    Attributes:
        model: the trained ``torch.nn.Module`` in eval mode (an `EnsembleClassifier` for an ensemble run), on
            ``device``.
        input_spec: the run's `InputSpec`, reading raw data.
        classes_: (K,) the class names as the run saw them (its training split's ``class_names``), in the order
            of `predict_proba`'s columns.
        n_features_in_: the number of channels C the model reads per time step.
        dtype: the run's torch dtype.
        device: the torch device the model and its inputs are on.
        batch_size: samples per forward pass (the run's evaluation batch size, so that scores are the run's).
        checkpoints: the checkpoint files read (one per ensemble member).
        config: the settings recorded in the (first) checkpoint: model, options, solver, training settings and,
            for a runner's run, its row, task and seed.
        threads: torch's CPU threads while scoring (default 1).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        input_spec: InputSpec,
        classes,
        *,
        channels: int,
        dtype: torch.dtype,
        device: torch.device,
        batch_size: int,
        checkpoints,
        config: dict,
        read_dtype: torch.dtype,
    ):
        self.model = model.eval()
        self.input_spec = input_spec
        self.classes_ = np.asarray(list(classes), dtype=object)
        self.n_features_in_ = int(channels)
        self.dtype = dtype
        self.device = torch.device(device)
        self.batch_size = int(batch_size)
        self.checkpoints = [Path(p) for p in checkpoints]
        self.config = config
        self.threads = DEFAULT_THREADS
        self._read_dtype = read_dtype

    def __repr__(self) -> str:
        members = f", {len(self.checkpoints)} ensemble members" if len(self.checkpoints) > 1 else ""
        return (
            f"TrainedClassifier({self.input_spec.model!r}, {len(self.classes_)} classes, "
            f"{self.n_features_in_} channels{members}, from {self.checkpoints[0]})"
        )

    def read_data(self, X, times=None) -> IrregularDataset:
        """``X`` (and ``times``) as the dataset the model's input is built from: times in the run's dtype, values as
        the run's task read them (in float64, for the standardisation), static features where ``X`` has them.

        Arguments:
            X: N raw sequences: a list of (T_i, C) or (T_i,) arrays, a 3-D (N, T, C) or 2-D (N, T) array (NaN where
                missing), an unstandardised `IrregularDataset`, or the path of a ``.ts`` / ``.arff`` file.
            times: None (each sample's observation index 0, 1, ..., or the file's / dataset's own times) or one
                (T_i,) array per sample (a list or a 2-D (N, T) array), for the array forms only.

        Raises:
            ValueError: channels other than the model's (naming both counts), ``times`` beside a file or dataset, a
                dataset the task protocol has standardised already, or what the readers refuse.
            FileNotFoundError: a file path that does not exist.
        """
        from .estimator_inputs import read_sequences
        from .observations import check_times_survive_cast

        if isinstance(X, (str, os.PathLike)):
            from .data.formats.local_files import read_file

            if times is not None:
                raise ValueError(f"times: the data file {X} carries its own times; give times=None")
            data, what = read_file(X, dtype=self._read_dtype, labels_required=False), f"the data file {X}"
        elif isinstance(X, IrregularDataset):
            if times is not None:
                raise ValueError("times: an IrregularDataset carries its own times; give times=None")
            if "standardise" in X.meta:
                raise ValueError(
                    "X is a dataset the task protocol has standardised already (meta['standardise']): "
                    "give the raw data, which the run's input spec standardises itself"
                )
            data, what = X, "X"
        else:
            data, what = read_sequences(X, times, self._read_dtype, "X"), "X"
        if data.num_channels != self.n_features_in_:
            raise ValueError(
                f"{what} has {data.num_channels} channel(s) per time step, but the run's model was trained "
                f"on {self.n_features_in_} (n_features_in_)"
            )
        cast = data.times.to(self.dtype)
        check_times_survive_cast(data.times.to(torch.float64), cast, data.lengths)
        values = data.values if data.values.dtype == torch.float64 else data.values.to(torch.float64)
        return data.replace(times=cast, values=values).to(device=self.device)

    def decision_function(self, X, times=None) -> np.ndarray:
        """The model's logits (for an ensemble: the log of its members' mean probabilities), (N, K) float64.

        Arguments:
            X: N raw sequences, in the forms of `read_data`.
            times: as in `read_data`.
        """
        data = self.read_data(X, times)
        static = (self.config.get("model_options") or {}).get("static_channels")
        if static is not None and data.static is None:
            raise ValueError(
                f"model {self.input_spec.model!r} reads {static} static feature(s) per sample: give X as "
                "an IrregularDataset with static (N, S)"
            )
        fill = None if self.input_spec.control is None else self.input_spec.control.unobserved_fill
        if fill is not None:
            warn_unobserved(data, "samples", fill)
        inputs = self.input_spec.transform(data)
        with torch.no_grad():
            logits = _predict(self.model, inputs, self.batch_size, threads=self.threads)
        return logits.detach().cpu().to(torch.float64).numpy()

    def predict_proba(self, X, times=None) -> np.ndarray:
        """Class probabilities, (N, K) float64: the softmax of the model's logits, columns in ``classes_`` order.

        Arguments:
            X: N raw sequences, in the forms of `read_data`.
            times: as in `read_data`.
        """
        return _probabilities(self.decision_function(X, times))

    def predict(self, X, times=None) -> np.ndarray:
        """The most probable class of each sequence (N,), a name of ``classes_`` (the argmax of the logits, as the
        run's accuracy counts it).

        Arguments:
            X: N raw sequences, in the forms of `read_data`.
            times: as in `read_data`.
        """
        return self._labels(self.decision_function(X, times))

    def _labels(self, logits: np.ndarray) -> np.ndarray:
        return self.classes_[np.argmax(logits, axis=1)]


def _probabilities(logits: np.ndarray) -> np.ndarray:
    """(N, K) softmax of (N, K) float64 logits."""
    return torch.softmax(torch.from_numpy(logits), dim=1).numpy()


def write_predictions(path: str | os.PathLike, model: TrainedClassifier, X, times=None) -> np.ndarray:
    """``model``'s predictions for ``X`` as CSV (``neuralde-seq predict``), written atomically: a header
    ``index,label,<class>...``, then one line per sample: its index (0-based, in the data's order), its predicted
    class (`TrainedClassifier.predict`) and its probability of each class (`TrainedClassifier.predict_proba`, each
    written as the ``repr`` of its float64, so that the file holds them exactly).

    Arguments:
        path: the CSV file (its folder is created if needed).
        model: the `TrainedClassifier`.
        X: N raw sequences, in the forms of `TrainedClassifier.read_data`.
        times: as in `TrainedClassifier.read_data`.

    Returns:
        (N,) the predicted classes.
    """
    logits = model.decision_function(X, times)
    predicted = model._labels(logits)
    with atomic_file(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["index", "label", *(str(c) for c in model.classes_)])
        for i, (label, row) in enumerate(zip(predicted, _probabilities(logits))):
            writer.writerow([i, label, *(repr(float(p)) for p in row)])
    return predicted


def load_run(path: str | os.PathLike, *, device: str | torch.device = "cpu") -> TrainedClassifier:
    """The classifier a benchmark run trained, from its run folder or one of its checkpoints (module docstring).

    Arguments:
        path: a run folder (``<out>/runs/<row>/seed<k>-<fingerprint>/``: its ``best.pt``), or a checkpoint file the
            runner wrote (``best.pt``, ``last.pt``). An ensemble run's ``best.pt`` (or ``last.pt``) brings its
            members' (``best.member<j>.pt``) with it: the model is the ensemble the run evaluated; a member's own
            checkpoint gives that member alone.
        device: where the model and its inputs go (default "cpu").

    Returns:
        A `TrainedClassifier`.

    Raises:
        FileNotFoundError: ``path`` (or an ensemble member's checkpoint) does not exist; a folder without a
            checkpoint or result.
        ValueError: a reference or random-features row's folder (the runner stores no fitted estimator: the message
            names it), a benchmark's output folder rather than one run's, a checkpoint without the settings
            ``load_run`` needs (written by `neuralde_seq.fit` directly or before they were recorded);
            `CheckpointError` (a ValueError) for a file that is not a checkpoint or weights of other shapes.
    """
    device = torch.device(device)
    checkpoint_path = _checkpoint_of(Path(path))
    first = read_checkpoint(checkpoint_path, map_location="cpu")
    recorded = first.get("config")
    config = recorded if isinstance(recorded, dict) else {}
    info = config.get("trained_model")
    if not isinstance(info, dict) or "input_spec" not in config:
        raise CheckpointError(
            f"checkpoint {checkpoint_path} does not record what load_run rebuilds a model from (the "
            "run's input spec and trained_model settings): it was written by fit directly, or "
            f"before runs recorded them; {_AFRESH}",
            checkpoint_path,
        )
    paths = [checkpoint_path]
    if info["member"] == 0 and info["ensemble"] > 1:  # the run's model is the ensemble of its members
        paths += [
            checkpoint_path.with_name(f"{checkpoint_path.stem}.member{j}{checkpoint_path.suffix}")
            for j in range(1, info["ensemble"])
        ]
    spec = InputSpec.from_dict(config["input_spec"])
    dtype = floating_dtype(info["dtype"])
    members = []
    for member_path in paths:
        if not member_path.exists():
            raise FileNotFoundError(
                f"{member_path} does not exist: {checkpoint_path} is member 1 of an ensemble of "
                f"{info['ensemble']}, whose other members' checkpoints lie beside it"
            )
        checkpoint = first if member_path == checkpoint_path else read_checkpoint(member_path, map_location="cpu")
        members.append(_rebuilt_model(checkpoint, member_path, config, dtype, device))
    model = members[0] if len(members) == 1 else EnsembleClassifier(members)
    return TrainedClassifier(
        model,
        spec,
        info["class_names"],
        channels=info["data_channels"],
        dtype=dtype,
        device=device,
        batch_size=info["eval_batch_size"],
        checkpoints=paths,
        config=config,
        read_dtype=_read_dtype(config, dtype),
    )


def _checkpoint_of(path: Path) -> Path:
    """The checkpoint ``path`` names: itself (a file), or a run folder's ``best.pt``.

    Raises:
        FileNotFoundError: nothing at ``path``, or a folder that is no run's.
        ValueError: a reference or random-features row's folder, or a benchmark's output folder.
    """
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist: give a run folder (<out>/runs/<row>/seed<k>-<fingerprint>) or its best.pt"
        )
    if not path.is_dir():
        return path
    if (path / CHECKPOINT_NAME).is_file():
        return path / CHECKPOINT_NAME
    result_path = path / "result.json"
    if result_path.is_file():
        _refuse_closed_form(result_path)
        raise FileNotFoundError(
            f"{path} holds result.json but no {CHECKPOINT_NAME}: the run stopped before its first "
            f"checkpoint, or the file was removed; {_AFRESH}"
        )
    if (path / "runs").is_dir():
        found = sorted(str(p.parent.relative_to(path)) for p in (path / "runs").glob(f"*/*/{CHECKPOINT_NAME}"))
        raise ValueError(
            f"{path} is a benchmark's output folder: give one run's folder, e.g. "
            + (
                ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
                if found
                else "runs/<row>/seed<k>-<fingerprint>"
            )
        )
    runs = sorted(p.parent.name for p in path.glob(f"seed*/{CHECKPOINT_NAME}"))
    if runs:  # a row's folder: name its runs
        raise ValueError(
            f"{path} is a row's folder, holding the run folder(s) {', '.join(runs[:3])}"
            f"{', ...' if len(runs) > 3 else ''}: give one of them (e.g. {path / runs[0]})"
        )
    raise FileNotFoundError(
        f"{path} holds neither {CHECKPOINT_NAME} nor result.json: it is not a run folder "
        "(<out>/runs/<row>/seed<k>-<fingerprint>)"
    )


def _refuse_closed_form(result_path: Path) -> None:
    """Raise ValueError for the folder of a reference or random-features row (nothing stored to load)."""
    try:
        result = json.loads(result_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # not readable: the caller's message (no checkpoint) stands
    reference = result.get("reference") if isinstance(result, dict) else None
    if not reference:
        return
    from .reference import reference_method

    method = reference.get("method", result.get("model"))
    try:
        entry = reference_method(method)
        kind = entry.kind
        estimator = (
            entry.estimator
            if isinstance(entry.estimator, str)
            else f"{entry.estimator.__module__}:{entry.estimator.__name__}"
        )
        estimator = estimator.replace(":", ".")
    except ValueError:
        kind, estimator = "reference", "its estimator"
    raise ValueError(
        f"{result_path.parent}: row {result.get('label', method)!r} is the {kind} method {method!r}, "
        "fitted in closed form by the runner, which records its scores (result.json) but stores no "
        f"fitted estimator, so there is no model to load. Fit {estimator} on your data instead, with "
        "the options recorded in result.json's model_options"
    )


def _rebuilt_model(
    checkpoint: dict, path: Path, config: dict, dtype: torch.dtype, device: torch.device
) -> torch.nn.Module:
    """The model a checkpoint's weights belong to, built from its recorded settings and loaded with them."""
    from .models import create_model
    from .solvers import parse_solver

    recorded = checkpoint.get("config")
    own = recorded if isinstance(recorded, dict) else {}
    info = own.get("trained_model") or {}
    for key in ("model", "model_options", "input_spec", "solver"):
        if own.get(key) != config.get(key):
            raise CheckpointError(
                f"checkpoint {path} was written by another run than its ensemble's first member ({key} differs)", path
            )
    solver = parse_solver(config.get("solver"), argument=f"checkpoint {path}: the recorded solver")
    with torch.random.fork_rng(devices=[]):  # the run's seed, and the caller's random state left as it was
        torch.manual_seed(int(own.get("seed", 0)))
        model = create_model(
            config["model"],
            info["in_channels"],
            len(info["class_names"]),
            solver=solver,
            **config["model_options"],
            **info["input_options"],
        )
    model = model.to(device=device, dtype=dtype)
    load_model_state(model, checkpoint["model_state"], path)
    return model.eval()


def _read_dtype(config: dict, dtype: torch.dtype) -> torch.dtype:
    """The precision the run's task read the raw values in (``files``: float64; most tasks: the run's dtype)."""
    from .data.protocols import TASKS

    name = config.get("task")
    task = TASKS.get(name) if isinstance(name, str) else None
    return (task.load_dtype if task is not None and task.load_dtype is not None else None) or dtype
