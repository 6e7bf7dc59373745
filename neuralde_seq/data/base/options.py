"""The loaders' shared keywords as one object: `LoadOptions`, and `accepts_load_options`, which gives a loader both
spellings.

The downloading loaders (`load_uea`, `load_eigenworms`, `load_character_trajectories`, `load_speech_commands`,
`load_physionet_sepsis`) share eight keywords: where the cache is (``cache_dir``), what replaces the pinned files
(``remotes``), whether to download (``offline``), the split's and the drop's seeds (``split_seed``, ``drop_seed``),
the drop rate (``drop_rate``), the returned dtype (``dtype``) and progress bars (``progress``). They are written and
checked once, here, and a loader takes them either way::

    load_uea("BasicMotions", drop_rate=0.3, offline=True)
    load_uea("BasicMotions", options=LoadOptions(drop_rate=0.3, offline=True))   # the same data

Giving ``options`` together with any of its keywords is a ``TypeError`` naming both (which would win is not
guessed). The keyword form stays the loaders' signature, so a config's ``task_options`` (which names keywords)
and ``help()`` show every option.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..io.download import RemoteFile

__all__ = ["LoadOptions", "LOAD_OPTION_NAMES", "accepts_load_options"]


@dataclasses.dataclass(frozen=True)
class LoadOptions:
    """The keywords every downloading loader shares, checked on construction.

    Attributes:
        cache_dir: root of the data cache (a path), or None (default): ``$NEURALDE_SEQ_DATA`` or
            ``~/.cache/neuralde_seq``; each loader uses its own sub-directory.
        remotes: `RemoteFile` s replacing the loader's pinned files (e.g. ``file://`` fixtures), or None (default):
            the pinned files. Each loader says how many and of which kind it takes.
        offline: True: use only cached files, never download; False: download when needed; None (default): read
            ``$NEURALDE_SEQ_OFFLINE``.
        split_seed: the seed of the train / validation / test split (a non-negative integer; default 0, the CDE
            papers' split).
        drop_rate: the fraction of each sample's time points set missing, in [0, 1) (default 0: none).
        drop_seed: the seed of the dropped points (a non-negative integer; default 0).
        dtype: the floating dtype of the returned ``times``, ``values`` (and ``static``) (default float32).
        progress: show download and preprocessing progress (default True).

    Raises:
        ValueError: naming the field and the value, for a value of the wrong kind or out of range.
    """

    cache_dir: str | os.PathLike | None = None
    remotes: Sequence[RemoteFile] | None = None
    offline: bool | None = None
    split_seed: int = 0
    drop_rate: float = 0.0
    drop_seed: int = 0
    dtype: torch.dtype = torch.float32
    progress: bool = True

    def __post_init__(self) -> None:
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, os.PathLike)):
            raise ValueError(f"cache_dir must be a path (str or os.PathLike) or None, got {self.cache_dir!r}")
        if self.remotes is not None:
            if isinstance(self.remotes, (str, bytes, RemoteFile)) or not isinstance(self.remotes, Sequence):
                raise ValueError(
                    f"remotes must be a sequence of RemoteFile (e.g. [RemoteFile(...)]) or None, got {self.remotes!r}"
                )
            bad = [remote for remote in self.remotes if not isinstance(remote, RemoteFile)]
            if bad:
                raise ValueError(f"remotes must hold RemoteFile entries only, got {bad[0]!r}")
            object.__setattr__(self, "remotes", tuple(self.remotes))  # frozen: a list could change under it
        if self.offline is not None and not isinstance(self.offline, bool):
            raise ValueError(f"offline must be True, False or None, got {self.offline!r}")
        for name in ("split_seed", "drop_seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        rate = self.drop_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating)) or not 0 <= rate < 1:
            raise ValueError(f"drop_rate must be a number in [0, 1), got {rate!r}")
        if not isinstance(self.dtype, torch.dtype) or not self.dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating point torch.dtype, got {self.dtype!r}")
        if not isinstance(self.progress, bool):
            raise ValueError(f"progress must be True or False, got {self.progress!r}")

    def keywords(self) -> dict:
        """The options as the loaders' keyword arguments: ``{"cache_dir": ..., ..., "progress": ...}``."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


LOAD_OPTION_NAMES = tuple(field.name for field in dataclasses.fields(LoadOptions))


def accepts_load_options(loader: Callable) -> Callable:
    """Make ``loader`` (written with the eight `LoadOptions` keywords, with the same defaults, and a last keyword
    ``options: LoadOptions | None = None`` that it leaves to this wrapper) take either form.

    The keywords a caller gives build a `LoadOptions` (so they are checked alike in every loader); ``options=``
    gives one directly; the loader then receives every field as its keyword. Both at once raise ``TypeError``.

    Arguments:
        loader: a function with keyword parameters named as the fields of `LoadOptions`, whose defaults equal
            the fields' defaults (checked here, when the module defining it is imported).

    Returns:
        The loader taking either form (its signature, written in its source so the API reference shows it,
        has both).

    Raises:
        TypeError: ``loader`` lacks one of the keywords or ``options``, or a keyword's default differs from
            `LoadOptions`' (a loader whose keyword default disagreed would load other data with
            ``options=LoadOptions()``).
    """
    signature = inspect.signature(loader)
    if "options" not in signature.parameters or signature.parameters["options"].default is not None:
        raise TypeError(f"{loader.__qualname__} must declare the keyword options: LoadOptions | None = None")
    defaults = LoadOptions()
    for name in LOAD_OPTION_NAMES:
        parameter = signature.parameters.get(name)
        if parameter is None or parameter.kind not in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"{loader.__qualname__} has no keyword {name!r} of LoadOptions")
        if parameter.default != getattr(defaults, name):
            raise TypeError(
                f"{loader.__qualname__}: the default of {name} is {parameter.default!r}, LoadOptions' "
                f"{getattr(defaults, name)!r}; make them agree"
            )

    @functools.wraps(loader)
    def load(*args, options: LoadOptions | None = None, **keywords):
        shared = {name: keywords.pop(name) for name in LOAD_OPTION_NAMES if name in keywords}
        if options is None:
            options = LoadOptions(**shared)
        elif not isinstance(options, LoadOptions):
            raise TypeError(f"{loader.__name__}: options must be a LoadOptions, got {type(options).__name__}")
        elif shared:
            raise TypeError(
                f"{loader.__name__}: options= and the keyword(s) {', '.join(shared)} are both given; "
                f"set them in one place, e.g. options=dataclasses.replace(options, "
                f"{next(iter(shared))}=...)"
            )
        return loader(*args, **keywords, **options.keywords())

    return load
