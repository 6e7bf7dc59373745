"""Log-signature controls: piecewise-constant windows for neural RDEs, and their disk cache.

``build_control(interpolation="logsignature")`` (in `neuralde_seq.controls`, with the window builder
`logsignature_control`, re-exported here) cuts each sample's path into windows of ``step`` observation
intervals and computes each window's log-signature (`neuralde_seq.signatures`); window j occupies
s ∈ [j, j + 1) of the `Control`, so batching never changes any sample's grid. A log-signature holds only
the path's movement over a window (increments, areas), never its level; ``window_start_values=True`` appends
the path's value at each window's start as further channels, constant over the window, so that a field
reading x sees the level too (docs/design.md#choices, "RDE form").
Windowed log-signatures of long series are costly, so `cached_logsignature_control` stores them on
disk, keyed by the data and every option.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os

import torch

from .._version import __version__
from ..cache import CorruptCacheError, cached_tensors
# logsignature_control is built in controls (build_control's interpolation="logsignature"), imported from there so that
# controls never imports this module; re-exported here, where it lived before.
from .builder import Control, build_control, logsignature_control, renamed_control_options
from ..signatures import backend_version

__all__ = ["logsignature_control", "cached_logsignature_control", "LogSignatureCacheError"]


# ---------------------------------------------------------------------------------------------------
# a disk cache of log-signature controls

_CACHE_FORMAT = "neuralde_seq.logsignature_control.v2"
_CONTROL_TENSORS = ("knots", "coeffs", "end_index", "initial_value")


class LogSignatureCacheError(CorruptCacheError):
    """A log-signature cache file that cannot be trusted: unreadable, truncated, altered, or written for
    other inputs. The library never overwrites such a file itself; delete it to recompute."""


def _fingerprint(tensor) -> dict | None:
    """dtype, shape and SHA-256 of a tensor's bytes (None for None)."""
    if tensor is None:
        return None
    tensor = torch.as_tensor(tensor).detach().cpu().contiguous()
    digest = hashlib.sha256(tensor.reshape(-1).view(torch.uint8).numpy()).hexdigest()
    return {"dtype": str(tensor.dtype), "shape": list(tensor.shape), "sha256": digest}


def cached_logsignature_control(cache_dir: str | os.PathLike, times: torch.Tensor, values: torch.Tensor,
                                lengths: torch.Tensor | None = None, *, key_parts: tuple[str, ...] = (),
                                **options) -> Control:
    """`build_control` with ``interpolation="logsignature"``, stored on disk and reloaded on the next call.

    Windowed log-signatures of long series (EigenWorms: 259 × 17,984 points) are costly and depend only on
    the data and the options, so they are computed once per dataset. The file is
    ``cache_dir/<key_parts joined by "-">-<hash>.pt``, kept by `neuralde_seq.cache.cached_tensors`
    (atomic writes, contents checksummed), where the hash is a SHA-256 over: the dtype, shape and bytes of ``times``, ``values`` and ``lengths``; every
    option of `build_control` with its defaults filled in (so spelling out a default gives the same
    key); ``key_parts``; the version of neuralde_seq and of the log-signature backend library; and the cache
    format. Changing any of them computes a new file; old files are left in place.

    Arguments:
        cache_dir: directory of the cache (created if missing).
        times: (B, T) observation times, as in `build_control`.
        values: (B, T, C) observations, NaN where missing, as in `build_control`.
        lengths: (B,) valid observations per sample, or None (all T), as in `build_control`.
        key_parts: readable names for the file, e.g. ``("EigenWorms", "train")``; they also enter the hash.
        **options: keyword arguments of `build_control`; ``interpolation`` defaults to (and must be)
            ``"logsignature"``.

    Returns:
        The `Control`, on ``values``' device. On a hit its tensors are bitwise equal to those computed
            on the miss. Cached controls carry no autograd graph, so inputs that require grad are refused.

    Raises:
        LogSignatureCacheError: the cache file exists but cannot be read, its contents do not match the
            checksum stored with them, or it was written for another key. The message names the file;
            delete it to recompute.
    """
    options = renamed_control_options(options)
    options.setdefault("interpolation", "logsignature")
    if options["interpolation"] != "logsignature":
        raise ValueError(f"cached_logsignature_control caches log-signature controls only, got "
                         f"interpolation={options['interpolation']!r}")
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in (times, values)):
        raise ValueError("times or values require grad, but a cached control carries no autograd graph: build the "
                         "control with build_control instead")
    if isinstance(key_parts, str):
        key_parts = (key_parts,)
    bound = inspect.signature(build_control).bind(times, values, lengths, **options)
    bound.apply_defaults()
    settings = {name: value for name, value in bound.arguments.items() if name not in ("times", "values", "lengths")}
    key = {
        "name": "-".join(str(part) for part in key_parts) or "logsignature",
        "format": _CACHE_FORMAT,
        "key_parts": [str(part) for part in key_parts],
        "inputs": {"times": _fingerprint(times), "values": _fingerprint(values), "lengths": _fingerprint(lengths)},
        # repr() of non-JSON option values (e.g. a float('nan') fill) keeps the key deterministic.
        "options": json.loads(json.dumps(settings, sort_keys=True, default=repr)),
        "versions": {"neuralde_seq": __version__, "torch": torch.__version__,
                     settings["logsig_backend"]: backend_version(settings["logsig_backend"])},
    }
    device = values.device if isinstance(values, torch.Tensor) else torch.device("cpu")
    built = []

    def build() -> dict:
        control = build_control(times, values, lengths, **options)
        built.append(control)
        return {**{field: getattr(control, field).detach().cpu() for field in _CONTROL_TENSORS},
                "piecewise_constant": control.piecewise_constant, "channels_info": list(control.channels_info)}

    try:
        stored = cached_tensors(cache_dir, key, build)
    except CorruptCacheError as error:
        raise LogSignatureCacheError(f"corrupt log-signature cache file ({error})") from error
    if built:
        return built[0]
    try:
        return Control(stored["knots"], stored["coeffs"], stored["end_index"], bool(stored["piecewise_constant"]),
                       tuple(stored["channels_info"]), stored["initial_value"]).to(device)
    except (KeyError, TypeError, ValueError) as error:
        raise LogSignatureCacheError(f"corrupt log-signature cache file in {cache_dir}: its contents do not form a "
                                     f"control ({error}); delete it to recompute the control") from error
