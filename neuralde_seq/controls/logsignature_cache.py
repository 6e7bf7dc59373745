"""The disk cache of log-signature controls (`cached_logsignature_control`).

Windowed log-signatures of long series (`neuralde_seq.controls.logsignature`) are costly and depend only on the data
and the options, so `cached_logsignature_control` stores them on disk, keyed by the data and every option.
"""

from __future__ import annotations

import hashlib
import json
import os

import torch

from .._version import __version__
from ..cache import CorruptCacheError, cached_tensors
from ..signatures import backend_version
from .builder import build_control
from .control import Control
from .interpolation import interpolation_name
from .logsignature import LogSignature
from .options import ControlOptions, parse_control_options

__all__ = ["cached_logsignature_control", "LogSignatureCacheError"]


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


def cached_logsignature_control(
    cache_dir: str | os.PathLike,
    times: torch.Tensor,
    values: torch.Tensor,
    lengths: torch.Tensor | None = None,
    options: ControlOptions | None = None,
    *,
    key_parts: tuple[str, ...] = (),
    **keywords,
) -> Control:
    """`build_control` of log-signature windows, stored on disk and reloaded on the next call.

    Windowed log-signatures of long series (EigenWorms: 259 × 17,984 points) are costly and depend only on
    the data and the options, so they are computed once per dataset. The file is
    ``cache_dir/<key_parts joined by "-">-<hash>.pt``, kept by `neuralde_seq.cache.cached_tensors`
    (atomic writes, contents checksummed), where the hash is a SHA-256 over: the dtype, shape and bytes of ``times``,
    ``values`` and ``lengths``; every field of the options (`ControlOptions.to_dict`, so spelling out a default gives
    the same key); ``key_parts``; the version of neuralde_seq and of the log-signature backend library; and the cache
    format. Changing any of them computes a new file; old files are left in place.

    Arguments:
        cache_dir: directory of the cache (created if missing).
        times: (B, T) observation times, as in `build_control`.
        values: (B, T, C) observations, NaN where missing, as in `build_control`.
        lengths: (B,) valid observations per sample, or None (all T), as in `build_control`.
        options: the `ControlOptions`, whose interpolation must be a `LogSignature` (default
            ``ControlOptions(interpolation=LogSignature())``).
        key_parts: readable names for the file, e.g. ``("EigenWorms", "train")``; they also enter the hash.
        **keywords: options as `build_control` keywords, on top of ``options``.

    Returns:
        The `Control`, on ``values``' device. On a hit its tensors are bitwise equal to those computed
            on the miss. Cached controls carry no autograd graph, so inputs that require grad are refused.

    Raises:
        ValueError: options of another interpolation, or inputs that require grad.
        LogSignatureCacheError: the cache file exists but cannot be read, its contents do not match the
            checksum stored with them, or it was written for another key. The message names the file;
            delete it to recompute.
    """
    options = parse_control_options(
        keywords, base=ControlOptions(interpolation=LogSignature()) if options is None else options
    )
    if not isinstance(options.interpolation, LogSignature):
        raise ValueError(
            f"cached_logsignature_control caches log-signature controls only, got "
            f"interpolation={interpolation_name(options.interpolation)!r}"
        )
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in (times, values)):
        raise ValueError(
            "times or values require grad, but a cached control carries no autograd graph: build the "
            "control with build_control instead"
        )
    if isinstance(key_parts, str):
        key_parts = (key_parts,)
    backend = options.interpolation.backend
    key = {
        "name": "-".join(str(part) for part in key_parts) or "logsignature",
        "format": _CACHE_FORMAT,
        "key_parts": [str(part) for part in key_parts],
        "inputs": {"times": _fingerprint(times), "values": _fingerprint(values), "lengths": _fingerprint(lengths)},
        # repr() of non-JSON option values keeps the key deterministic.
        "options": json.loads(json.dumps(options.to_dict(), sort_keys=True, default=repr)),
        "versions": {"neuralde_seq": __version__, "torch": torch.__version__, backend: backend_version(backend)},
    }
    device = values.device if isinstance(values, torch.Tensor) else torch.device("cpu")
    built = []

    def build() -> dict:
        control = build_control(times, values, lengths, options)
        built.append(control)
        return {
            **{field: getattr(control, field).detach().cpu() for field in _CONTROL_TENSORS},
            "piecewise_constant": control.piecewise_constant,
            "channels_info": list(control.channels_info),
        }

    try:
        stored = cached_tensors(cache_dir, key, build)
    except CorruptCacheError as error:
        raise LogSignatureCacheError(f"corrupt log-signature cache file ({error})") from error
    if built:
        return built[0]
    try:
        return Control(
            stored["knots"],
            stored["coeffs"],
            stored["end_index"],
            bool(stored["piecewise_constant"]),
            tuple(stored["channels_info"]),
            stored["initial_value"],
        ).to(device)
    except (KeyError, TypeError, ValueError) as error:
        raise LogSignatureCacheError(
            f"corrupt log-signature cache file in {cache_dir}: its contents do not form a "
            f"control ({error}); delete it to recompute the control"
        ) from error
