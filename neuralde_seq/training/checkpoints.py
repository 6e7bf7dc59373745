"""Checkpoint files and the random states a resumed run needs.

Checkpoints are dictionaries saved with ``torch.save``; they are written atomically through
`neuralde_seq.files.atomic_file` (a unique temporary file in the same folder, then ``os.replace``), so the file
on disk is always a complete checkpoint and no planted symlink redirects the write. `save_checkpoint` writes
the simple form (``model_state``, ``optimizer_state``, ``epoch``, ``metrics``, ``config``) that
`load_checkpoint` restores; `fit`'s resume checkpoint (`ResumeCheckpoint`) adds the loop state, the random
states and the callbacks' bookkeeping, and is compared with the run's settings before a run continues from it.

Checkpoints are read with ``torch.load(weights_only=True)`` (`read_checkpoint`): a file that is damaged, is not
a checkpoint, or holds objects a checkpoint never holds raises `CheckpointError`, naming the file and what to
do; weights of another shape raise it too, naming the parameters (`load_model_state`).
"""

from __future__ import annotations

import os
import pickle
import random
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..file_format import FORMAT_KEY, FORMAT_VERSION, check_format
from ..files import atomic_file
from .results import changed_settings

__all__ = [
    "atomic_save",
    "save_checkpoint",
    "load_checkpoint",
    "read_checkpoint",
    "load_model_state",
    "load_optimizer_state",
    "CheckpointError",
    "default_last_checkpoint_path",
    "rng_states",
    "restore_rng_states",
    "model_device",
    "ResumeCheckpoint",
    "ResumeMismatch",
    "RESUME_KEYS",
]


class CheckpointError(ValueError):
    """A checkpoint file cannot be used: unreadable, not a checkpoint, or made for a model of another shape.

    Arguments:
        message: what is wrong with the file and what to do (it names the file).
        path: the checkpoint file; attribute ``path``.
    """

    def __init__(self, message: str, path: str | os.PathLike):
        super().__init__(message)
        self.path = Path(path)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (or buffer); CPU for a model with neither."""
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def atomic_save(state: dict, path: str | os.PathLike) -> Path:
    """``torch.save(state)`` to a unique temporary file beside ``path``, then ``os.replace`` it onto ``path``
    (`neuralde_seq.files.atomic_file`): a reader never sees half a file, two writers never collide, and a
    symlink at ``path`` is replaced, not written through.

    Arguments:
        state: what to save (tensors, numbers, strings, and dicts, lists and tuples of them).
        path: the checkpoint file (its folder is created if needed).

    Returns:
        The `Path` written.
    """
    path = Path(path)
    with atomic_file(path, "wb") as handle:
        torch.save(state, handle)
    return path


_WHAT_TO_DO = "delete it to start that run afresh, or run without resuming (no --resume; resume=False)"


def _load_problem(error: Exception) -> str:
    """What is wrong with a file that ``torch.load(weights_only=True)`` refused, in our words: torch's own
    message advises loading with the unsafe unpickler, which a damaged or foreign file must never get."""
    text = str(error)
    if isinstance(error, EOFError) or not text and isinstance(error, pickle.UnpicklingError):
        return "it is empty or cut short"
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if found:
        return (
            f"it refers to {found.group(1)}, which a checkpoint never holds (loading it could run code); "
            "it was not made by this library or was tampered with"
        )
    if "zip archive" in text or "central directory" in text:
        return "it is cut short or damaged (not a complete torch file)"
    if isinstance(error, pickle.UnpicklingError):
        return "it is not a checkpoint (its bytes are not a torch file this library writes)"
    return f"it is damaged or not a checkpoint ({type(error).__name__})"


def read_checkpoint(path: str | os.PathLike, map_location=None, required: Iterable[str] = ("model_state",)) -> dict:
    """Read a checkpoint file safely (``torch.load(weights_only=True)``: no code in the file can run).

    Arguments:
        path: the checkpoint file.
        map_location: where tensors are loaded (``torch.load``'s ``map_location``; default None: where they
            were saved).
        required: keys the checkpoint dict must hold (default: ``model_state``).

    Returns:
        The checkpoint dict.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: the file is empty, cut short, not a torch file, refers to objects a checkpoint never
            holds, or is not a dict with the ``required`` keys; the message names the file and what to do.
    """
    path = Path(path)
    try:
        with warnings.catch_warnings():
            # A foreign pickle also gets torch's advice about pickle protocols: the error below says it all.
            warnings.filterwarnings("ignore", message=".*pickle protocol", category=UserWarning)
            checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except OSError:
        raise  # missing, unreadable, a folder: the OS's message names the file
    except Exception as error:  # noqa: BLE001 - whatever a damaged or crafted file makes torch raise
        raise CheckpointError(
            f"checkpoint {path} cannot be read: {_load_problem(error)}; {_WHAT_TO_DO}", path
        ) from None
    missing = [key for key in required if not isinstance(checkpoint, dict) or key not in checkpoint]
    if missing:
        found = (
            f"a dict without {', '.join(map(repr, missing))}"
            if isinstance(checkpoint, dict)
            else f"a {type(checkpoint).__name__}, not a dict"
        )
        raise CheckpointError(
            f"checkpoint {path} is not a checkpoint of this kind (it holds {found}); {_WHAT_TO_DO}", path
        )
    check_format(checkpoint, path, "checkpoint")
    return checkpoint


def load_model_state(model: torch.nn.Module, state: Mapping, path: str | os.PathLike) -> None:
    """Load the weights ``state`` (read from the checkpoint ``path``) into ``model``, checking every shape first.

    Arguments:
        model: the model (unwrapped from DistributedDataParallel).
        state: its ``state_dict`` as saved.
        path: the file ``state`` came from (named in the error).

    Raises:
        CheckpointError: ``state`` is not a mapping of tensors, or its parameters' names or shapes differ from
            the model's; the message lists them (file vs model) and what to do.
    """
    target = _unwrap(model)
    own = target.state_dict()
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(
            f"checkpoint {path} holds no model weights (its model_state is not a dict of tensors); {_WHAT_TO_DO}", path
        )
    different = sorted(
        k for k in set(own) | set(state) if k not in own or k not in state or own[k].shape != state[k].shape
    )
    if different:
        details = ", ".join(
            f"{k}: {tuple(state[k].shape) if k in state else 'missing'} in the file, "
            f"{tuple(own[k].shape) if k in own else 'missing'} in the model"
            for k in different[:4]
        )
        raise CheckpointError(
            f"checkpoint {path} was written for another model ({details}"
            f"{f', and {len(different) - 4} more' if len(different) > 4 else ''}); use the model it was made for, "
            f"or {_WHAT_TO_DO}",
            path,
        )
    target.load_state_dict(state)


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: Mapping, path: str | os.PathLike) -> None:
    """Load the optimizer ``state`` (read from the checkpoint ``path``) into ``optimizer``, checking its parameter
    groups first.

    Arguments:
        optimizer: the run's optimizer.
        state: its ``state_dict`` as saved.
        path: the file ``state`` came from (named in the error).

    Raises:
        CheckpointError: the file's optimizer has another number of parameter groups or other group sizes (e.g. a
            linear CDE run saved before `fit` gave its matrices learning-rate groups, `parameter_groups`).
    """
    saved = (
        [len(group.get("params", ())) for group in state.get("param_groups", ())]
        if isinstance(state, Mapping)
        else None
    )
    own = [len(group["params"]) for group in optimizer.param_groups]
    if saved != own:
        raise CheckpointError(
            f"checkpoint {path} holds an optimizer with parameter groups of {saved} parameters, this run's has "
            f"{own} (a run saved before its model's learning-rate groups, `parameter_groups`); {_WHAT_TO_DO}",
            path,
        )
    optimizer.load_state_dict(dict(state))  # a Mapping here (its groups were read above)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    # DistributedDataParallel prefixes every key with "module."; checkpoints hold the plain model's keys.
    return getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model


def save_checkpoint(
    path: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer=None,
    epoch: int = 0,
    metrics: dict | None = None,
    config: dict | None = None,
) -> Path:
    """Save ``model`` (and ``optimizer``) with the epoch, metrics and config, atomically.

    Arguments:
        path: the checkpoint file (its directory is created if needed).
        model: the model whose ``state_dict`` is saved (unwrapped from DistributedDataParallel).
        optimizer: an optimizer whose state is saved too, or None (default).
        epoch: the epoch the weights belong to (default 0: before training).
        metrics: the evaluation metrics to store, or None.
        config: the run's settings to store, or None.

    Returns:
        The `Path` written.
    """
    state = {
        "model_state": {k: v.detach().clone() for k, v in _unwrap(model).state_dict().items()},
        "optimizer_state": optimizer.state_dict() if optimizer is not None else None,
        "epoch": int(epoch),
        "metrics": dict(metrics or {}),
        "config": dict(config or {}),
        FORMAT_KEY: FORMAT_VERSION,
    }
    return atomic_save(state, path)


def load_checkpoint(
    path: str | os.PathLike, model: torch.nn.Module | None = None, optimizer=None, map_location=None
) -> dict:
    """Load a checkpoint; if given, restore ``model`` (and ``optimizer``) from it.

    Arguments:
        path: the checkpoint file (as `save_checkpoint` writes it).
        model: a model to load the weights into, or None (default) to only read the file.
        optimizer: an optimizer to restore too, or None (default).
        map_location: where tensors are loaded (``torch.load``'s ``map_location``); None (default): the
            model's device (CPU without a model).

    Returns:
        The checkpoint dict: ``model_state``, ``optimizer_state``, ``epoch``, ``metrics``, ``config``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: (a ValueError) the file cannot be read or is no checkpoint (`read_checkpoint`), or it
            was written for a model of another shape (the message names the file and the mismatching
            parameters, `load_model_state`).
    """
    if map_location is None:
        map_location = model_device(model) if model is not None else "cpu"
    ckpt = read_checkpoint(path, map_location=map_location)
    if model is not None:
        load_model_state(model, ckpt["model_state"], path)
    if optimizer is not None and ckpt.get("optimizer_state") is not None:
        load_optimizer_state(optimizer, ckpt["optimizer_state"], path)
    return ckpt


def default_last_checkpoint_path(checkpoint_path: str | os.PathLike) -> Path:
    """Where the resume checkpoint goes beside a best checkpoint: ``run.pt`` -> ``run.last.pt``.

    Arguments:
        checkpoint_path: the best checkpoint's file.

    Returns:
        The resume checkpoint's `Path`, in the same directory.
    """
    path = Path(checkpoint_path)
    return path.with_name(f"{path.stem}.last{path.suffix}")


def rng_states(generator: torch.Generator) -> dict:
    """Every random state a training run draws from: the data-order generator and the global RNGs."""
    np_state = np.random.get_state()
    assert isinstance(np_state, tuple)  # the legacy form, get_state's default
    states = {
        "generator": generator.get_state(),
        "torch": torch.get_rng_state(),
        # numpy's state tuple holds an ndarray, which torch.load(weights_only=True) refuses: store a tensor.
        "numpy": {
            "name": np_state[0],
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(generator: torch.Generator, states: dict) -> None:
    """Undo `rng_states`: the generator and the global RNGs continue where they were saved."""
    generator.set_state(states["generator"])
    torch.set_rng_state(states["torch"])
    np_state = states["numpy"]
    np.random.set_state(
        (
            np_state["name"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class ResumeMismatch(ValueError):
    """A resume checkpoint was written by a run with other settings; its message lists the differences."""


# What `fit`'s resume checkpoint holds (`ResumeCheckpoint.snapshot`); a file without them is not one.
RESUME_KEYS = ("model_state", "optimizer_state", "epoch", "step", "history", "loop", "rng", "config", "callbacks")


def callback_keys(callbacks: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    """(key, callback) pairs: the class name and its occurrence, so a resumed call with callbacks in another
    order (or without some) gives each saved state to the callback it belongs to."""
    seen: dict[str, int] = {}
    for callback in callbacks:
        name = type(callback).__name__
        seen[name] = seen.get(name, 0) + 1
        yield f"{name}#{seen[name]}", callback


class ResumeCheckpoint:
    """`fit`'s resume checkpoint: what it holds, writing it, and continuing a run from it.

    The file holds (`RESUME_KEYS`) the weights, the optimizer's state, ``epoch`` (the last evaluated one, 0 before
    training), ``step``, the history, the loop's position (``loop``: ``position`` in the epoch's order,
    ``order_state`` the generator's state the epoch's order was drawn from, ``finished``, ``current_epoch``), every
    random state (`rng_states`), the run's settings (``config``) and the callbacks' bookkeeping, keyed by
    `callback_keys`.

    Arguments:
        path: the file, or None (nothing written or read).
        is_main: whether this process writes it (rank 0 of a distributed run, or the only process).
    """

    def __init__(self, path: str | os.PathLike | None, is_main: bool = True):
        self.path = None if path is None else Path(path)
        self.is_main = is_main

    def exists(self) -> bool:
        return self.path is not None and self.path.exists()

    @staticmethod
    def snapshot(state, loop: dict, generator: torch.Generator, callbacks) -> dict:
        """The resume checkpoint's contents now.

        Arguments:
            state: the run's `FitState` (model, optimizer, history, step, epoch in progress, config).
            loop: the loop's position (``position``, ``order_state``, ``finished``).
            generator: the data-order generator.
            callbacks: the run's callbacks.
        """
        history = state.history
        return {
            "model_state": {k: v.detach().clone() for k, v in state.model.state_dict().items()},
            "optimizer_state": state.optimizer.state_dict(),
            # "epoch": the last evaluated epoch (0 before training); the loop holds the one in progress.
            "epoch": history["epoch"][-1] if history["epoch"] else 0,
            "step": state.step,
            "history": history,
            "loop": {**loop, "current_epoch": state.epoch},
            "rng": rng_states(generator),
            "config": state.config,
            "callbacks": {key: c.state_dict() for key, c in callback_keys(callbacks)},
            FORMAT_KEY: FORMAT_VERSION,
        }

    def save(self, snapshot: dict) -> None:
        """Write ``snapshot`` (by the main process only; atomically)."""
        if self.path is not None and self.is_main:
            atomic_save(snapshot, self.path)

    def restore(self, state, loop: dict, generator: torch.Generator, callbacks) -> None:
        """Continue the run from the file: weights, optimizer, history, loop position, callbacks' bookkeeping and
        random states as they were saved; a run cut short by a smaller ``epochs``, or stopped by its wall-time
        limit (``TimeLimit``), continues.

        Arguments:
            state: the run's `FitState`; its ``config`` must equal the saved one except for ``epochs``.
            loop: the loop's position, updated in place.
            generator: the data-order generator, set to its saved state.
            callbacks: the run's callbacks, each given its saved bookkeeping.

        Raises:
            ResumeMismatch: the file was written with other settings (the message lists them).
            CheckpointError: the file cannot be read, is no resume checkpoint, or holds weights of other shapes.
        """
        # weights_only: no code in the file can run; a damaged, foreign or crafted file is a CheckpointError
        # naming it and what to do.
        assert self.path is not None  # a run resumes from a checkpoint that exists()
        saved = read_checkpoint(self.path, map_location="cpu", required=RESUME_KEYS)
        config, history = state.config, state.history
        differing = sorted(
            k for k in set(saved["config"]) | set(config) if k != "epochs" and saved["config"].get(k) != config.get(k)
        )
        if differing:
            raise ResumeMismatch(
                f"cannot resume from {self.path}: it was written with other settings ("
                + "; ".join(
                    changed_settings(
                        {k: saved["config"].get(k) for k in differing},
                        {k: config.get(k) for k in differing},
                        then="there",
                    )
                )
                + "). Use the same settings, or delete the checkpoint to start afresh."
            )
        load_model_state(state.model, saved["model_state"], self.path)  # shapes checked: names the parameters
        load_optimizer_state(state.optimizer, saved["optimizer_state"], self.path)
        history.update(saved["history"])
        loop.update(saved["loop"])
        state.epoch, state.step = loop.pop("current_epoch"), saved["step"]
        for key, callback in callback_keys(callbacks):
            if key in saved["callbacks"]:
                callback.load_state_dict(saved["callbacks"][key])
        restore_rng_states(generator, saved["rng"])
        history["resumed_from_epoch"] = history["epoch"][-1] if history["epoch"] else 0
        if loop["finished"] and (
            history.get("stopped_by") == "time"
            or (saved["config"]["epochs"] < state.epochs and history.get("stopped_by") == "epochs")
        ):
            loop["finished"] = False
            history.pop("stopped_by")
