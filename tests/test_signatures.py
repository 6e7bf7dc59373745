"""Tests of the log-signature backends (neuralde_seq.signatures) and of the log-signature control cache.

Expected values are computed here independently of the library: the depth-2 log-signature by the shoelace
form of the Lévy area, the depth-3 one by Chen's identity and the tensor logarithm in numpy, and the
Lyndon-bracket coordinates by expanding each bracket of the standard factorisation into words.

A missing optional backend (pysiglib, signatory: signatory compiles for about 3 minutes, so the README's
set-up leaves it out) skips its tests with the install command as the reason, and tests/conftest.py names it in
the session summary. CI installs both and sets NEURALDE_SEQ_REQUIRE_BACKENDS=1, under which a missing backend
fails its tests instead of skipping them.
"""

import importlib
import itertools
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from neuralde_seq import build_control
from neuralde_seq.controls import LogSignatureCacheError, cached_logsignature_control
from neuralde_seq.controls import logsignature as logsignature_module
from neuralde_seq.signatures import BASES, logsignature, logsignature_channels, logsignature_windows

F64 = torch.float64
LIBRARIES = ("pysiglib", "signatory")
BACKENDS = ("torch",) + LIBRARIES
TOL = dict(rtol=1e-10, atol=1e-10)


def _library(name):
    """The backend module; when it is not installed, the test skips with the command that installs it, or fails
    where NEURALDE_SEQ_REQUIRE_BACKENDS=1 (CI, which installs every backend)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("NEURALDE_SEQ_REQUIRE_BACKENDS") == "1":
            raise
        from neuralde_seq.signatures import INSTALL_COMMANDS

        pytest.skip(f"optional log-signature backend {name} is not installed: {INSTALL_COMMANDS[name]}")


# ---------------------------------------------------------------------------------------------------
# independent references


def _shoelace_depth2(points, basis="lyndon_brackets"):
    """Depth-2 log-signature of the polyline through ``points`` (list of lists).

    With the path moved to start at the origin, the segment from a to b contributes a^i b^j − a^j b^i to
    ∫ x^i dx^j − x^j dx^i (the shoelace formula), and the Lévy area is half the total.
    """
    C = len(points[0])
    shifted = [[p[c] - points[0][c] for c in range(C)] for p in points]
    area = [
        [0.5 * math.fsum(a[i] * b[j] - a[j] * b[i] for a, b in zip(shifted[:-1], shifted[1:])) for j in range(C)]
        for i in range(C)
    ]
    increment = shifted[-1]
    if basis == "expand":
        return increment + [area[i][j] for i in range(C) for j in range(C)]
    return increment + [area[i][j] for i in range(C) for j in range(i + 1, C)]


def _words(C, depth):
    """All words of length 1..depth, ordered by length then lexicographically."""
    return [w for n in range(1, depth + 1) for w in itertools.product(range(C), repeat=n)]


def _is_lyndon(word):
    return all(word < word[k:] for k in range(1, len(word)))


def _tensor_log_chen(points, depth):
    """Levels 1..depth of log(signature) of the polyline, as numpy arrays of shape (C,)*n.

    Chen's identity: the signature of a segment Δ is exp(Δ) = Σ Δ^{⊗n}/n!, and the signature of a
    concatenation is the truncated tensor product; then log(1 + x) = Σ (−1)^{k+1} x^{⊗k}/k.
    """
    points = np.asarray(points, dtype=np.float64)
    C = points.shape[1]

    def product(a, b):  # truncated tensor product; a[0] and b[0] are the scalar terms
        out = [np.zeros((C,) * n) if n else 0.0 for n in range(depth + 1)]
        for i in range(depth + 1):
            for j in range(depth + 1 - i):
                out[i + j] = out[i + j] + np.multiply.outer(a[i], b[j])
        return out

    signature = [1.0] + [np.zeros((C,) * n) for n in range(1, depth + 1)]
    for p, q in zip(points[:-1], points[1:]):
        delta = q - p
        segment = [1.0]
        for n in range(1, depth + 1):
            segment.append(np.multiply.outer(segment[-1], delta) / n)
        signature = product(signature, segment)
    x = [0.0] + signature[1:]
    power, log = x, [0.0] + [np.zeros((C,) * n) for n in range(1, depth + 1)]
    for k in range(1, depth + 1):
        log = [l + (-1) ** (k + 1) * p / k for l, p in zip(log, power)]
        power = product(power, x)
    return log[1:]


def _expand_reference(points, depth):
    levels = _tensor_log_chen(points, depth)
    return [levels[len(w) - 1][w] for w in _words(len(points[0]), depth)]


def _lyndon_words_reference(points, depth):
    levels = _tensor_log_chen(points, depth)
    return [levels[len(w) - 1][w] for w in _words(len(points[0]), depth) if _is_lyndon(w)]


def _bracket_polynomial(word):
    """The Lyndon bracket of ``word`` (standard factorisation: the right factor is the longest proper Lyndon
    suffix) expanded into a polynomial {word: coefficient}."""
    if len(word) == 1:
        return {word: 1}
    split = next(k for k in range(1, len(word)) if _is_lyndon(word[k:]))
    left, right = _bracket_polynomial(word[:split]), _bracket_polynomial(word[split:])
    out = {}
    for (u, a), (v, b) in itertools.product(left.items(), right.items()):
        out[u + v] = out.get(u + v, 0) + a * b
        out[v + u] = out.get(v + u, 0) - a * b
    return out


def _brackets_to_words_matrix(C, depth):
    """M with M[w, k] = coefficient of Lyndon word w in the expanded k-th Lyndon bracket, so that the
    Lyndon-words coordinates of a Lie element are M @ (its Lyndon-bracket coordinates)."""
    lyndon = [w for w in _words(C, depth) if _is_lyndon(w)]
    return torch.tensor([[_bracket_polynomial(k).get(w, 0) for k in lyndon] for w in lyndon], dtype=F64)


def _random_path(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


# ---------------------------------------------------------------------------------------------------
# depth 1 and 2: every backend, every basis, against the shoelace form


def test_reference_helpers_agree_with_each_other():
    """The two references (shoelace, Chen + tensor log) agree at depth 2; the square has area 1."""
    path = _random_path(7, 3, seed=1).tolist()
    for basis, chen in (("lyndon_brackets", _lyndon_words_reference), ("expand", _expand_reference)):
        np.testing.assert_allclose(_shoelace_depth2(path, basis), chen(path, 2), rtol=1e-12, atol=1e-12)
    square = [[0, 0], [1, 0], [1, 1], [0, 1], [0, 0]]
    assert _shoelace_depth2(square) == [0, 0, 1.0]
    # At depth 2 the two Lyndon bases coincide: M is the identity.
    torch.testing.assert_close(_brackets_to_words_matrix(3, 2), torch.eye(6, dtype=F64))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("basis", BASES)
def test_every_backend_matches_the_shoelace_form_at_depth_2(backend, basis):
    if backend != "torch":
        _library(backend)
    path = _random_path(3, 2, 6, 4, seed=2)  # batch dimensions (3, 2), 6 points, 4 channels
    got = logsignature(path, 2, backend=backend, basis=basis)
    assert got.shape == (3, 2, logsignature_channels(4, 2, basis))
    assert got.dtype == F64
    expected = torch.tensor([[_shoelace_depth2(p.tolist(), basis) for p in batch] for batch in path], dtype=F64)
    torch.testing.assert_close(got, expected, **TOL)
    # Depth 1 is the increment in every basis; a single point has a zero log-signature.
    torch.testing.assert_close(
        logsignature(path, 1, backend=backend, basis=basis), path[..., -1, :] - path[..., 0, :], **TOL
    )
    single = logsignature(path[:, :, :1], 2, backend=backend, basis=basis)
    assert single.shape == got.shape and torch.all(single == 0)
    # The unit square, counter-clockwise, sweeps area +1.
    square = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]], dtype=F64)
    want = [0.0, 0.0, 0.0, 1.0, -1.0, 0.0] if basis == "expand" else [0.0, 0.0, 1.0]
    torch.testing.assert_close(
        logsignature(square, 2, backend=backend, basis=basis), torch.tensor(want, dtype=F64), **TOL
    )


# ---------------------------------------------------------------------------------------------------
# depth 3: the two libraries, against each other and against Chen's identity


@pytest.mark.parametrize("basis", BASES)
def test_libraries_agree_at_depth_3(basis):
    _library("pysiglib"), _library("signatory")
    path = _random_path(4, 7, 3, seed=3)
    a = logsignature(path, 3, backend="pysiglib", basis=basis)
    b = logsignature(path, 3, backend="signatory", basis=basis)
    assert a.shape == b.shape == (4, logsignature_channels(3, 3, basis))
    assert logsignature_channels(3, 3, basis) == (3 + 9 + 27 if basis == "expand" else 3 + 3 + 8)
    torch.testing.assert_close(a, b, **TOL)  # both order words by length, then lexicographically


@pytest.mark.parametrize("backend", LIBRARIES)
def test_depth_3_against_chen_and_the_bracket_expansion(backend):
    """ "expand" and "lyndon_words" against the tensor logarithm computed here; "lyndon_brackets" converted
    to Lyndon-words coordinates by M (the brackets expanded into words) equals the library's "lyndon_words"."""
    _library(backend)
    path = _random_path(3, 6, 3, seed=4)
    expand = torch.tensor([_expand_reference(p.tolist(), 3) for p in path], dtype=F64)
    words = torch.tensor([_lyndon_words_reference(p.tolist(), 3) for p in path], dtype=F64)
    torch.testing.assert_close(logsignature(path, 3, backend=backend, basis="expand"), expand, **TOL)
    torch.testing.assert_close(logsignature(path, 3, backend=backend, basis="lyndon_words"), words, **TOL)
    brackets = logsignature(path, 3, backend=backend, basis="lyndon_brackets")
    M = _brackets_to_words_matrix(3, 3)
    assert not torch.equal(M, torch.eye(14, dtype=F64))  # the bases differ at depth 3 (words 012 and 021)
    torch.testing.assert_close(brackets @ M.T, words, **TOL)


def test_pysiglib_is_prepared_once_per_shape(monkeypatch):
    pysiglib = _library("pysiglib")
    calls = []
    original = pysiglib.prepare_log_sig
    monkeypatch.setattr(pysiglib, "prepare_log_sig", lambda *a, **k: (calls.append(a), original(*a, **k))[1])
    path = _random_path(2, 5, 6, seed=5)  # a shape no other test uses: 6 channels, depth 3, Lyndon words
    first = logsignature(path, 3, backend="pysiglib", basis="lyndon_words")
    second = logsignature(path, 3, backend="pysiglib", basis="lyndon_words")
    assert calls == [(6, 3, 1)]
    assert torch.equal(first, second)


# ---------------------------------------------------------------------------------------------------
# gradients


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck(backend):
    if backend != "torch":
        _library(backend)
    path = _random_path(2, 4, 3, seed=6).requires_grad_()
    depths = (1, 2) if backend == "torch" else (2, 3)
    for depth, basis in itertools.product(depths, BASES):
        assert torch.autograd.gradcheck(lambda p: logsignature(p, depth, backend=backend, basis=basis), (path,))
    lengths = torch.tensor([4, 3])
    assert torch.autograd.gradcheck(lambda p: logsignature_windows(p, lengths, 2, 2, backend=backend)[0], (path,))


# ---------------------------------------------------------------------------------------------------
# windows and controls


@pytest.mark.parametrize("backend", LIBRARIES)
@pytest.mark.parametrize("basis", BASES)
def test_windows_via_each_backend_equal_the_torch_windows_at_depth_2(backend, basis):
    _library(backend)
    lengths = torch.tensor([11, 8, 5, 2])
    points = _random_path(4, 11, 3, seed=7)
    for b, L in enumerate(lengths.tolist()):
        points[b, L:] = 1e6  # padding must not leak
    for step in (1, 3, 4):
        want, want_windows = logsignature_windows(points, lengths, 2, step, basis=basis)
        got, windows = logsignature_windows(points, lengths, 2, step, backend=backend, basis=basis)
        assert torch.equal(windows, want_windows)
        torch.testing.assert_close(got, want, **TOL)


def _observations(seed=8):
    g = torch.Generator().manual_seed(seed)
    times = torch.cumsum(0.2 + torch.rand(3, 10, generator=g, dtype=F64), 1)
    values = torch.randn(3, 10, 2, generator=g, dtype=F64)
    values[1, 4, 0] = float("nan")
    return times, values, torch.tensor([10, 7, 4])


@pytest.mark.parametrize("backend", LIBRARIES)
def test_build_control_passes_backend_and_basis_through(backend):
    _library(backend)
    times, values, lengths = _observations()
    reference = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=3)
    got = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=3, logsig_backend=backend)
    torch.testing.assert_close(got.coeffs, reference.coeffs, **TOL)
    assert torch.equal(got.end_index, reference.end_index)
    # The channel count follows the basis and the depth (path channels: time + 2 values = 3).
    for depth, basis, channels in (
        (2, "expand", 3 + 9),
        (3, "lyndon_words", 14),
        (3, "lyndon_brackets", 14),
        (3, "expand", 39),
    ):
        control = build_control(
            times,
            values,
            lengths,
            interpolation="logsignature",
            depth=depth,
            step=3,
            logsig_backend=backend,
            logsig_basis=basis,
        )
        assert control.channels == channels == logsignature_channels(3, depth, basis)
        assert len(control.channels_info) == channels


def test_unsupported_combinations_raise_clear_errors():
    path = _random_path(5, 3)
    with pytest.raises(ValueError, match="depth 3 .*backend='pysiglib' or 'signatory'"):
        logsignature(path, 3)
    with pytest.raises(ValueError, match="basis must be one of"):
        logsignature(path, 2, basis="hall")
    with pytest.raises(ValueError, match="backend must be one of"):
        logsignature(path, 2, backend="iisignature")
    with pytest.raises(ValueError, match="depth must be a positive integer"):
        logsignature(path, 0, backend="signatory")
    times, values, lengths = _observations()
    with pytest.raises(ValueError, match="depth 3"):
        build_control(times, values, lengths, interpolation="logsignature", depth=3)
    with pytest.raises(ValueError, match="basis"):
        build_control(times, values, lengths, interpolation="logsignature", logsig_basis="words")


@pytest.mark.parametrize(
    "backend, command",
    [
        ("pysiglib", "pip install pysiglib==4.0.0"),
        ("signatory", "pip install --no-build-isolation signatory==1.2.6.1.9.0"),
    ],
)
def test_a_missing_backend_names_its_pip_command(backend, command, monkeypatch):
    monkeypatch.setitem(sys.modules, backend, None)  # makes `import backend` fail
    with pytest.raises(ImportError, match=command.replace(".", r"\.")):
        logsignature(_random_path(4, 2), 2, backend=backend)
    times, values, lengths = _observations()
    with pytest.raises(ImportError, match=command.replace(".", r"\.")):
        build_control(times, values, lengths, interpolation="logsignature", logsig_backend=backend)


def test_package_and_torch_path_work_without_the_backends():
    script = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('pysiglib', 'signatory'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import torch, neuralde_seq\n"
        "from neuralde_seq import build_control, logsignature\n"
        "square = torch.tensor([[0., 0.], [1., 0.], [1., 1.], [0., 1.], [0., 0.]])\n"
        "assert logsignature(square, 2).tolist() == [0.0, 0.0, 1.0]\n"
        "control = build_control(torch.arange(6.).expand(2, 6), torch.randn(2, 6, 2), interpolation='logsignature')\n"
        "assert control.channels == 6\n"
        "assert 'pysiglib' not in sys.modules and 'signatory' not in sys.modules\n"
        "try:\n"
        "    logsignature(square, 3, backend='signatory')\n"
        "except ImportError as error:\n"
        "    assert 'pip install --no-build-isolation' in str(error)\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
        "print('ok')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# ---------------------------------------------------------------------------------------------------
# the cache


def _cache_files(directory):
    return sorted(name for name in os.listdir(directory) if name.endswith(".pt"))


def test_cache_returns_identical_tensors_on_a_hit(tmp_path, monkeypatch):
    times, values, lengths = _observations()
    options = dict(depth=2, step=3, mask_channel=True)
    first = cached_logsignature_control(tmp_path, times, values, lengths, key_parts=("toy", "train"), **options)
    files = _cache_files(tmp_path)
    assert len(files) == 1 and files[0].startswith("toy-train-")
    fresh = build_control(times, values, lengths, interpolation="logsignature", **options)
    for field in ("knots", "coeffs", "end_index"):
        assert torch.equal(getattr(first, field), getattr(fresh, field))

    # A hit reads the file and computes nothing.
    def no_computing(*args, **kwargs):
        raise AssertionError("the cache recomputed a control on a hit")

    monkeypatch.setattr(logsignature_module, "logsignature_control", no_computing)  # what LogSignature.build calls
    hit = cached_logsignature_control(
        tmp_path,
        times,
        values,
        lengths,
        key_parts=("toy", "train"),
        interpolation="logsignature",
        logsig_backend="torch",
        **options,
    )  # defaults spelled out
    for field in ("knots", "coeffs", "end_index"):
        a, b = getattr(hit, field), getattr(fresh, field)
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert hit.piecewise_constant and hit.channels_info == fresh.channels_info
    assert _cache_files(tmp_path) == files
    monkeypatch.undo()

    # Other data, options or key parts are other files.
    changed = values.clone()
    changed[0, 0, 0] += 1e-12
    cached_logsignature_control(tmp_path, times, changed, lengths, key_parts=("toy", "train"), **options)
    cached_logsignature_control(tmp_path, times, values, lengths, key_parts=("toy", "train"), **dict(options, step=2))
    cached_logsignature_control(tmp_path, times, values, lengths, key_parts=("toy", "test"), **options)
    assert len(_cache_files(tmp_path)) == 4
    with pytest.raises(ValueError, match="log-signature controls only, got interpolation=.linear."):
        cached_logsignature_control(tmp_path, times, values, lengths, interpolation="linear")
    with pytest.raises(ValueError, match="require grad"):
        cached_logsignature_control(tmp_path, times, values.clone().requires_grad_(), lengths)


def _corrupt_by_truncation(path):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])


def _corrupt_by_garbage(path):
    with open(path, "wb") as f:
        f.write(b"not a torch file" * 10)


def _corrupt_the_numbers(path):
    payload = torch.load(path, weights_only=True)
    payload["data"]["coeffs"][0, 0, 0, 0] += 1.0  # a readable file whose numbers changed
    torch.save(payload, path)


@pytest.mark.parametrize("corrupt", [_corrupt_by_truncation, _corrupt_by_garbage, _corrupt_the_numbers])
def test_cache_refuses_a_corrupt_file(tmp_path, corrupt):
    times, values, lengths = _observations()
    cached_logsignature_control(tmp_path, times, values, lengths, key_parts=("toy",), step=3)
    (name,) = _cache_files(tmp_path)
    corrupt(os.path.join(tmp_path, name))
    with pytest.raises(LogSignatureCacheError, match=f"corrupt log-signature cache file .*{name}.*delete the file"):
        cached_logsignature_control(tmp_path, times, values, lengths, key_parts=("toy",), step=3)


def test_cache_with_a_library_backend(tmp_path):
    _library("pysiglib")
    times, values, lengths = _observations()
    options = dict(depth=3, step=3, logsig_backend="pysiglib", logsig_basis="lyndon_words")
    first = cached_logsignature_control(tmp_path, times, values, lengths, **options)
    hit = cached_logsignature_control(tmp_path, times, values, lengths, **options)
    assert first.channels == 14 and torch.equal(first.coeffs, hit.coeffs)
    assert len(_cache_files(tmp_path)) == 1


def test_channel_count_and_backend_names_are_checked():
    from neuralde_seq.signatures import backend_version

    for channels in (0, -2, 2.0, True):
        with pytest.raises(ValueError, match="channels"):
            logsignature_channels(channels, 2)
    with pytest.raises(ValueError, match="backend"):
        backend_version("os")  # an importable module that is no backend
    assert backend_version("torch") == torch.__version__
