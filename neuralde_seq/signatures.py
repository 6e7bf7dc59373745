"""Log-signatures of piecewise-linear paths, and their windowed form for neural RDEs.

One function, `logsignature`, with the library that computes it (``backend``) and the coordinates it
is written in (``basis``) as options (docs/equations.md#log-signatures):

- ``"torch"`` (default): depth 1 and 2; needs nothing beyond torch; any device; autograd.
- ``"pysiglib"``: any depth; ``pip install pysiglib==4.0.0`` (or the extra
  ``pip install "neuralde_seq[signatures]"``); autograd; CPU, and CUDA with the separate ``pysiglib-cuda``
  build. ``prepare_log_sig`` runs once per (channels, depth, basis, device), cached here.
- ``"signatory"``: any depth; ``pip install --no-build-isolation signatory==1.2.6.1.9.0`` *after* torch is
  installed (PyPI has only an sdist made for torch 1.9; it compiles against the installed torch in about
  3 minutes, which is why it cannot be a pip extra); autograd; CPU and CUDA (with a CUDA torch). One
  ``signatory.LogSignature`` module per (channels, depth, mode) is kept, so its Lyndon data are prepared once.

Bases (the ``basis`` option). Words are ordered first by length, then lexicographically in the channel
indices (0 < 1 < ...); every backend uses this order, so a basis gives the same vector in every backend:

- ``"lyndon_brackets"`` (default): coordinates in the Lyndon basis of the free Lie algebra, the brackets
  obtained from each Lyndon word by its standard factorisation (e.g. 001 -> [0, [0, 1]],
  021 -> [[0, 2], 1]). These are the canonical coordinates, the ones the log-ODE method uses.
  pysiglib ``method=2``, signatory ``mode="brackets"`` (iisignature ``"s"``).
- ``"lyndon_words"``: the coefficients of the tensor-algebra logarithm at the Lyndon words. These are
  coordinates in another basis of the Lie algebra (not a Hall basis: a triangular, unipotent linear change
  of the brackets' coordinates), cheaper to compute. pysiglib ``method=1``, signatory ``mode="words"``.
- ``"expand"``: all ``C + C² + ... + C^depth`` coefficients of the tensor-algebra logarithm (no scalar
  term), one per word. pysiglib ``method=0``, signatory ``mode="expand"``.

At depth 1 every basis is the increment; at depth 2 the two Lyndon bases coincide (the increment
followed by the Lévy areas ``A_ij``, i < j) and ``"expand"`` is the increment followed by the whole
antisymmetric area matrix, row by row. The pure-torch path computes depth 1 and 2 in every basis; a
(backend, basis, depth) outside the list above, or a backend that is not installed, raises an error that says
what to use or what to install. Backends are optional: this module imports and the torch path works
without them.

The pure-torch path: for a piecewise-linear path through points p_0, ..., p_n with increments
Δ_m = p_{m+1} − p_m:

    A_ij = ½ Σ_m [ (p_m^i − p_0^i) Δ_m^j − (p_m^j − p_0^j) Δ_m^i ]

(a straight segment sweeps no area of its own, so only the displacement before each segment counts).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

import torch

__all__ = [
    "BACKENDS",
    "BASES",
    "DEFAULT_BASIS",
    "logsignature_channels",
    "logsignature",
    "logsignature_windows",
    "check_logsignature_options",
    "backend_version",
]

BACKENDS = ("torch", "pysiglib", "signatory")
BASES = ("lyndon_brackets", "lyndon_words", "expand")
DEFAULT_BASIS = "lyndon_brackets"

# The pip command that installs each optional backend (named in the error when it is missing).
INSTALL_COMMANDS = {
    "pysiglib": 'pip install pysiglib==4.0.0   (or: pip install "neuralde_seq[signatures]")',
    "signatory": "pip install --no-build-isolation signatory==1.2.6.1.9.0   (after torch is installed)",
}
_MAX_DEPTH = {"torch": 2, "pysiglib": None, "signatory": None}  # None: any depth
_PYSIGLIB_BASIS_CODE = {"expand": 0, "lyndon_words": 1, "lyndon_brackets": 2}
_SIGNATORY_MODE = {"expand": "expand", "lyndon_words": "words", "lyndon_brackets": "brackets"}


def _mobius(n: int) -> int:
    result, k = 1, 2
    while k * k <= n:
        if n % k == 0:
            n //= k
            if n % k == 0:
                return 0
            result = -result
        k += 1
    return -result if n > 1 else result


def _lyndon_count(channels: int, length: int) -> int:
    """Number of Lyndon words of ``length`` letters over ``channels`` letters (Witt's formula)."""
    total = sum(_mobius(length // m) * channels**m for m in range(1, length + 1) if length % m == 0)
    return total // length


def logsignature_channels(channels: int, depth: int, basis: str = DEFAULT_BASIS) -> int:
    """Number of log-signature terms of a ``channels``-dimensional path at ``depth`` in ``basis``.

    Both Lyndon bases have one term per Lyndon word of length <= depth (Witt's formula:
    C + C(C−1)/2 at depth 2); ``"expand"`` has one per word, C + C² + ... + C^depth.

    Arguments:
        channels: C, the path's number of channels.
        depth: truncation depth, a positive integer.
        basis: "lyndon_brackets" (default), "lyndon_words" or "expand".

    Returns:
        The number of log-signature terms D.

    Raises:
        ValueError: channels or a depth that is not a positive integer, or an unknown basis.
    """
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"channels must be a positive integer, got {channels!r}")
    _check_depth(depth)
    _check_basis(basis)
    if basis == "expand":
        return sum(channels**k for k in range(1, depth + 1))
    return sum(_lyndon_count(channels, k) for k in range(1, depth + 1))


def _check_depth(depth) -> None:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive integer, got {depth!r}")


def _check_basis(basis) -> None:
    if basis not in BASES:
        raise ValueError(
            f"basis must be one of {BASES}, got {basis!r} (no backend here offers another basis, e.g. a Hall basis)"
        )


def check_logsignature_options(
    depth: int, backend: str = "torch", basis: str = DEFAULT_BASIS, *, installed: bool = True
) -> None:
    """Raise if (backend, basis, depth) is not a supported combination, or the backend is not installed.

    Arguments:
        depth: truncation depth, a positive integer (1 or 2 for ``backend="torch"``).
        backend: "torch" (default), "pysiglib" or "signatory".
        basis: "lyndon_brackets" (default), "lyndon_words" or "expand".
        installed: also check that the backend is installed (default True; False checks the settings alone, e.g.
            where they are written down before anything is computed).

    Raises:
        ValueError: an unknown backend or basis, a depth that is not a positive integer, or a depth the
            backend does not compute (the pure-torch path stops at depth 2).
        ImportError: the backend is not installed; the message names the pip command.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    _check_basis(basis)
    _check_depth(depth)
    limit = _MAX_DEPTH[backend]
    if limit is not None and depth > limit:
        raise ValueError(
            f"depth {depth} is not available with backend={backend!r} (basis={basis!r}): the pure-torch "
            f"log-signature computes depth 1 and 2 only; use backend='pysiglib' or 'signatory' for depth "
            f"{depth}"
        )
    if installed and backend != "torch":
        _import_backend(backend)


def _import_backend(backend: str):
    try:
        return importlib.import_module(backend)
    except ImportError as error:  # not installed, or built against another torch
        raise ImportError(
            f"log-signature backend {backend!r} is not available ({type(error).__name__}: {error}); "
            f"install it with: {INSTALL_COMMANDS[backend]}"
        ) from error


def backend_version(backend: str) -> str:
    """Version string of a backend library (torch's for the pure-torch path).

    Arguments:
        backend: "torch", "pysiglib" or "signatory".

    Returns:
        The library's ``__version__`` ("unknown" if it has none).

    Raises:
        ValueError: an unknown backend.
        ImportError: the backend is not installed; the message names the pip command.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "torch":
        return torch.__version__
    module = _import_backend(backend)
    return str(getattr(module, "__version__", "unknown"))


# ---------------------------------------------------------------------------------------------------
# backends; each takes (N, n_points >= 2, C) and returns (N, D)


def _torch_logsignature(path: torch.Tensor, depth: int, basis: str) -> torch.Tensor:
    increment = path[..., -1, :] - path[..., 0, :]
    if depth == 1:
        return increment
    displacement = path[..., :-1, :] - path[..., :1, :]  # p_m − p_0 before each segment
    step = path[..., 1:, :] - path[..., :-1, :]
    # area[i, j] = ½ Σ_m (disp_m^i step_m^j − disp_m^j step_m^i)
    outer = displacement.transpose(-1, -2) @ step  # (..., C, C): Σ_m disp^i step^j
    area = 0.5 * (outer - outer.transpose(-1, -2))
    if basis == "expand":  # level 2 of the tensor logarithm is the antisymmetric area matrix
        return torch.cat([increment, area.flatten(-2)], dim=-1)
    channels = path.shape[-1]
    rows, cols = torch.triu_indices(channels, channels, offset=1, device=path.device)
    return torch.cat([increment, area[..., rows, cols]], dim=-1)


_lock = threading.Lock()
_pysiglib_prepared: set[tuple[int, int, int, str]] = set()
_signatory_modules: dict[tuple[int, int, str], Any] = {}  # signatory.LogSignature modules


def _pysiglib_logsignature(path: torch.Tensor, depth: int, basis: str) -> torch.Tensor:
    pysiglib = _import_backend("pysiglib")
    basis_code = _PYSIGLIB_BASIS_CODE[basis]  # pysiglib's `method` argument
    channels = path.shape[-1]
    device = "cuda" if path.is_cuda else "cpu"
    key = (channels, depth, basis_code, device)
    if key not in _pysiglib_prepared:
        with _lock:  # prepare_log_sig is not thread safe; once per (channels, depth, basis_code, device)
            if key not in _pysiglib_prepared:
                pysiglib.prepare_log_sig(channels, depth, basis_code, device=device)
                _pysiglib_prepared.add(key)
    path = path.contiguous()
    if path._base is not None:  # pysiglib copies views itself, with a warning; copy here instead
        path = path.clone()
    # The torch API is the differentiable one (pysiglib.log_sig itself has no autograd).
    return pysiglib.torch_api.log_sig(path, depth, method=basis_code, n_jobs=torch.get_num_threads())


def _signatory_logsignature(path: torch.Tensor, depth: int, basis: str) -> torch.Tensor:
    signatory = _import_backend("signatory")
    mode = _SIGNATORY_MODE[basis]
    key = (path.shape[-1], depth, mode)
    module = _signatory_modules.get(key)
    if module is None:
        with _lock:  # a LogSignature module keeps the prepared Lyndon data of its channel count
            module = _signatory_modules.get(key)
            if module is None:
                module = signatory.LogSignature(depth, mode=mode)
                module.prepare(path.shape[-1])
                _signatory_modules[key] = module
    return module(path.contiguous())


_COMPUTE = {"torch": _torch_logsignature, "pysiglib": _pysiglib_logsignature, "signatory": _signatory_logsignature}


def logsignature(path: torch.Tensor, depth: int, *, backend: str = "torch", basis: str = DEFAULT_BASIS) -> torch.Tensor:
    """Log-signature of the piecewise-linear path through the given points.

    Arguments:
        path: points of shape (..., n_points, channels), n_points >= 1 (a single point has zero
            log-signature).
        depth: truncation depth, >= 1 (1 or 2 for ``backend="torch"``).
        backend: "torch" (default), "pysiglib" or "signatory" (see the module docstring for what each needs).
        basis: "lyndon_brackets" (default), "lyndon_words" or "expand" (see the module docstring).

    Returns:
        Tensor of shape (..., logsignature_channels(channels, depth, basis)), same dtype and device as
            ``path``, differentiable with respect to it. At depth 2 in a Lyndon basis: the increment followed
            by the Lévy areas A_ij for i < j in lexicographic order (the Lyndon words ij), whatever the backend.

    Raises:
        ValueError: an unsupported (backend, basis, depth) or a badly shaped path.
        ImportError: the backend is not installed (the message names the pip command).
    """
    check_logsignature_options(depth, backend, basis)
    if path.dim() < 2 or path.shape[-2] < 1:
        raise ValueError(f"path must have shape (..., n_points >= 1, channels), got {tuple(path.shape)}")
    if path.shape[-2] == 1:
        # A constant stretch adds nothing to a log-signature, and libraries want >= 2 points.
        path = torch.cat([path, path], dim=-2)
    if backend == "torch":
        return _torch_logsignature(path, depth, basis)
    *lead, n_points, channels = path.shape
    width = logsignature_channels(channels, depth, basis)
    flat = path.reshape(-1, n_points, channels)
    if flat.shape[0] == 0:
        return path.new_zeros(*lead, width)
    result = _COMPUTE[backend](flat, depth, basis)
    if result.shape != (flat.shape[0], width):  # a library changing its conventions must not go unnoticed
        raise RuntimeError(
            f"backend {backend!r} returned shape {tuple(result.shape)} for basis {basis!r} at depth "
            f"{depth}, expected {(flat.shape[0], width)}"
        )
    return result.reshape(*lead, width)


def logsignature_windows(
    points: torch.Tensor,
    lengths: torch.Tensor,
    depth: int,
    step: int,
    *,
    backend: str = "torch",
    basis: str = DEFAULT_BASIS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-signatures over consecutive windows of ``step`` intervals of each sample's own points.

    Window j of sample b covers points jS, ..., min((j+1)S, L_b − 1): windows share their end points, so the
    windows' increments add up to the whole path's increment. The final window may be shorter.

    Arguments:
        points: (B, T, C) observed points, without NaN within each sample's length.
        lengths: (B,) number of valid points per sample, each >= 2.
        depth: log-signature depth (1 or 2 for the torch backend).
        step: window size in intervals, >= 1.
        backend: "torch" (default), "pysiglib" or "signatory", as in `logsignature`; every window goes to
            the backend in one batch.
        basis: "lyndon_brackets" (default), "lyndon_words" or "expand", as in `logsignature`.

    Returns:
        (logsig, windows): logsig of shape (B, N_max, D) with D = logsignature_channels(C, depth, basis), zero
            after each sample's last window; windows (B,) long, the number of windows ceil((L_b − 1)/S).
    """
    check_logsignature_options(depth, backend, basis)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"step must be a positive integer, got {step!r}")
    batch, length, channels = points.shape
    windows = torch.div(lengths - 1 + step - 1, step, rounding_mode="floor")
    n_max = int(windows.max())
    # Pad each path by repeating its final point: a constant stretch adds nothing to a log-signature,
    # so every window (including a short final one) can be computed as a full window of step+1 points.
    padded_length = n_max * step + 1
    index = torch.arange(padded_length, device=points.device).clamp(max=length - 1)
    index = torch.minimum(index.unsqueeze(0), (lengths - 1).unsqueeze(1))  # (B, padded_length)
    padded = torch.gather(points, 1, index.unsqueeze(-1).expand(batch, padded_length, channels))
    starts = torch.arange(n_max, device=points.device) * step
    window_index = starts.unsqueeze(1) + torch.arange(step + 1, device=points.device)  # (N, S+1)
    window_points = padded[:, window_index]  # (B, N, S+1, C)
    logsig = logsignature(window_points, depth, backend=backend, basis=basis)
    valid = torch.arange(n_max, device=points.device).unsqueeze(0) < windows.unsqueeze(1)
    return logsig * valid.unsqueeze(-1).to(logsig.dtype), windows
