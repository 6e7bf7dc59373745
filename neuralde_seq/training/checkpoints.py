"""Checkpoint files and the random states a resumed run needs.

Checkpoints are dictionaries saved with ``torch.save``; they are written atomically (temporary file, then
rename), so the file on disk is always a complete checkpoint. `save_checkpoint` writes the simple
form (``model_state``, ``optimizer_state``, ``epoch``, ``metrics``, ``config``) that
`load_checkpoint` restores; `fit` adds its loop state to the resume
checkpoint it writes with `atomic_save`.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

__all__ = ["atomic_save", "save_checkpoint", "load_checkpoint", "default_last_checkpoint_path", "rng_states",
           "restore_rng_states", "model_device"]


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (or buffer); CPU for a model with neither."""
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def atomic_save(state: dict, path: str | os.PathLike) -> Path:
    """``torch.save(state)`` to ``<path>.tmp``, then rename over ``path``: a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    # DistributedDataParallel prefixes every key with "module."; checkpoints hold the plain model's keys.
    return getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model


def save_checkpoint(path: str | os.PathLike, *, model: torch.nn.Module, optimizer=None, epoch: int = 0,
                    metrics: dict | None = None, config: dict | None = None) -> Path:
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
    }
    return atomic_save(state, path)


def load_checkpoint(path: str | os.PathLike, model: torch.nn.Module | None = None, optimizer=None,
                    map_location=None) -> dict:
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
        ValueError: the checkpoint was written for a model of another shape (the message names the file and
            the mismatching parameters).
    """
    if map_location is None:
        map_location = model_device(model) if model is not None else "cpu"
    ckpt = torch.load(Path(path), map_location=map_location, weights_only=True)
    if model is not None:
        target = _unwrap(model)
        own = target.state_dict()
        saved = ckpt["model_state"]
        different = sorted(k for k in set(own) | set(saved)
                           if k not in own or k not in saved or own[k].shape != saved[k].shape)
        if different:
            details = ", ".join(f"{k}: {tuple(saved[k].shape) if k in saved else 'missing'} in the file, "
                                f"{tuple(own[k].shape) if k in own else 'missing'} in the model"
                                for k in different[:4])
            raise ValueError(f"checkpoint {path} was written for another model ({details}"
                             f"{', ...' if len(different) > 4 else ''}); delete it or use the model it was made for")
        target.load_state_dict(saved)
    if optimizer is not None and ckpt.get("optimizer_state") is not None:
        optimizer.load_state_dict(ckpt["optimizer_state"])
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
    states = {
        "generator": generator.get_state(),
        "torch": torch.get_rng_state(),
        # numpy's state tuple holds an ndarray, which torch.load(weights_only=True) refuses: store a tensor.
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
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
    np.random.set_state((np_state["name"], np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["cached_gaussian"]))
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
