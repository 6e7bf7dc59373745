"""A disk cache for computed tensors: compute once per key, reload bit for bit, refuse what cannot be trusted.

Used for preprocessed datasets (`neuralde_seq.data`) and log-signature controls
(`neuralde_seq.controls.cached_logsignature_control`). Files are written atomically (temporary file,
then rename) with a SHA-256 of their contents, so a reader sees a complete file or none, and a truncated,
altered or foreign file raises `CorruptCacheError` naming it instead of being used or overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import torch

from ._version import __version__
from .file_format import FORMAT_KEY, FORMAT_VERSION, check_format
from .files import atomic_file

__all__ = ["CorruptCacheError", "cached_tensors", "cache_key_json"]


class CorruptCacheError(RuntimeError):
    """A cached archive or preprocessed file is unreadable or fails its check; delete the named file."""


_ALLOWED_SCALARS = (bool, int, float, str, type(None))


def _check_cacheable(value, where: str) -> None:
    if isinstance(value, torch.Tensor) or isinstance(value, _ALLOWED_SCALARS):
        return
    if isinstance(value, dict):
        for name, item in value.items():
            if not isinstance(name, str):
                raise ValueError(f"{where} has a non-string key {name!r}")
            _check_cacheable(item, f"{where}[{name!r}]")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_cacheable(item, f"{where}[{index}]")
        return
    raise ValueError(
        f"{where} is a {type(value).__name__}; a tensor cache holds tensors, numbers, strings, None "
        "and lists/tuples/dicts of them"
    )


def _content_digest(value, digest) -> None:
    """Feed a canonical description of ``value`` (tensor bytes included) into ``digest``."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        digest.update(f"D{len(value)}".encode())
        for name in sorted(value):
            digest.update(json.dumps(name).encode())
            _content_digest(value[name], digest)
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__[0]}{len(value)}".encode())
        for item in value:
            _content_digest(item, digest)
    else:
        digest.update(f"S{type(value).__name__}:{value!r};".encode())


def _payload_checksum(data: dict, key_json: str) -> str:
    digest = hashlib.sha256(key_json.encode())
    _content_digest(data, digest)
    return digest.hexdigest()


def cache_key_json(key: dict) -> str:
    """The canonical JSON of a cache ``key`` (with the format version and the package version) that names its file
    and is stored in it.

    Raises:
        TypeError, ValueError: ``key`` is not JSON-serialisable.
    """
    return json.dumps({FORMAT_KEY: FORMAT_VERSION, "neuralde_seq": __version__, "key": key}, sort_keys=True)


def cache_file_name(key: dict, key_json: str) -> str:
    """``<name>-<hash>.pt``: the file a cache ``key`` (whose `cache_key_json` is ``key_json``) is kept in."""
    digest = hashlib.sha256(key_json.encode()).hexdigest()
    prefix = re.sub(r"[^A-Za-z0-9._-]+", "_", str(key.get("name", "tensors")))[:100] or "tensors"
    return f"{prefix}-{digest[:32]}.pt"


def payload_checksum(data: dict, key_json: str) -> str:
    """The checksum a cache file stores beside ``data``: a SHA-256 of its key and its contents (tensor bytes
    included)."""
    return _payload_checksum(data, key_json)


def cached_tensors(directory: str | os.PathLike, key: dict, build: Callable[[], dict]) -> dict:
    """Compute ``build()`` once per ``key`` and keep the result on disk.

    The file is ``directory/<name>-<hash>.pt``: the hash is a SHA-256 over ``key`` (as canonical JSON), the
    cache format and the package version, and ``<name>`` is ``key["name"]`` when present (for people
    browsing the cache). On a miss, ``build()`` runs and its dict is saved with `torch.save` to a
    temporary file renamed into place, together with a checksum of its contents (tensor bytes included).
    Nothing is written when ``build()`` raises, and ``directory`` is only created on a successful build.

    Arguments:
        directory: where the cache files live.
        key: a JSON-serialisable dict naming everything the result depends on (source files and their
            checksums, options, parser versions).
        build: computes the dict to cache: tensors, numbers, strings, None, and lists/tuples/dicts of them.

    Returns:
        The dict (on a hit, loaded on the CPU; its tensors equal the ones first built, bit for bit).

    Raises:
        CorruptCacheError: the file exists but cannot be read, was written for another key, or its contents
            do not match their checksum. The message names the file to delete.
    """
    if not isinstance(key, dict):
        raise ValueError(f"key must be a dict, got {type(key).__name__}")
    if not callable(build):
        raise ValueError("build must be a callable returning a dict")
    try:
        key_json = cache_key_json(key)
    except (TypeError, ValueError) as error:
        raise ValueError(f"key must be JSON-serialisable: {error}") from None
    path = Path(directory) / cache_file_name(key, key_json)
    if path.exists():
        return _load_tensor_cache(path, key_json)

    data = build()
    if not isinstance(data, dict):
        raise ValueError(f"build() must return a dict, got {type(data).__name__}")
    _check_cacheable(data, "build()")
    payload = {FORMAT_KEY: FORMAT_VERSION, "key": key_json, "data": data, "checksum": _payload_checksum(data, key_json)}
    with atomic_file(path) as handle:  # readers never see a half-written file
        torch.save(payload, handle)
    return data


def _load_tensor_cache(path: Path, key_json: str) -> dict:
    def corrupt(reason: str) -> CorruptCacheError:
        return CorruptCacheError(
            f"cached tensor file {path} {reason}; refusing to use it: delete the file to compute it again."
        )

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated zip, foreign pickle, disk error, ...
        first_line = (str(error).strip().splitlines() or [""])[0][:160]
        raise corrupt(f"cannot be read ({type(error).__name__}: {first_line})") from error
    if not isinstance(payload, dict) or "key" not in payload:
        raise corrupt("is not a tensor cache file")
    check_format(payload, path, "cached tensor file")
    if payload.get("key") != key_json:
        raise corrupt("was written for another key than its name says")
    data = payload.get("data")
    if not isinstance(data, dict):
        raise corrupt("holds no data")
    if _payload_checksum(data, key_json) != payload.get("checksum"):
        raise corrupt("has contents that do not match the checksum stored with them")
    return data
