"""WAV reading and MFCCs in plain torch (torchaudio does not import next to torch 2.13;
docs/design.md#environment-constraints).

`mfcc` reproduces ``torchaudio.transforms.MFCC(sample_rate, n_mfcc, log_mels=True,
melkwargs=dict(n_fft=..., n_mels=...))`` — the Speech Commands features of the NCDE paper (Kidger et al.
2020), used again by CKConv (paper 000) and the CT-FWP paper (002). Every setting torchaudio leaves at
its default is the same here (checked against torchaudio's ``Spectrogram``, ``MelScale``,
``melscale_fbanks`` and ``create_dct``):

* power spectrogram ``|STFT|^2`` with a *periodic* Hann window of length ``win_length = n_fft``,
  hop ``n_fft // 2``, ``center=True`` with reflect padding of ``n_fft // 2`` on both sides, one-sided,
  no normalisation: ``1 + L // hop`` frames for L samples (161 for 16000 samples and n_fft 200);
* triangular mel filters on the HTK scale ``mel = 2595 log10(1 + f / 700)``, ``n_mels + 2`` points
  equally spaced in mel from ``f_min = 0`` to ``f_max = sample_rate / 2``, the FFT bins at
  ``k * (sample_rate // 2) / (n_fft // 2)`` Hz, no area normalisation (so some narrow low filters can
  be all zero, which torchaudio only warns about: their log-mel is ``log(1e-6)``);
* ``log(mel + 1e-6)``;
* DCT-II with orthonormal scaling, first ``n_mfcc`` coefficients.

Unlike torchaudio, whose output is (..., n_mfcc, frames), `mfcc` returns time first,
(..., frames, n_mfcc), the toolkit's (T, C) convention (the NCDE code transposes to the same layout).
Everything is computed in the input's dtype on its device; the filters are built in float64 and cast.
"""

from __future__ import annotations

import io
import math
import os

import numpy as np
import torch

__all__ = [
    "read_wav",
    "hz_to_mel",
    "mel_to_hz",
    "mel_filterbank",
    "dct_matrix",
    "power_spectrogram",
    "mel_spectrogram",
    "mfcc",
]


def read_wav(source: str | os.PathLike | bytes | io.IOBase) -> tuple[int, np.ndarray]:
    """Read a 16-bit PCM WAV file with ``scipy.io.wavfile``.

    Args:
        source: a path, the file's bytes, or a binary file object.

    Returns:
        ``(sample_rate, samples)``: samples is an int16 array of shape (L,) for a mono file or (L, channels)
            otherwise, the raw integers (divide by 2^15 for [-1, 1)).

    Raises ``ValueError`` for a file that is not 16-bit PCM (e.g. float or 8-bit WAV).
    """
    from scipy.io import wavfile

    if isinstance(source, (bytes, bytearray)):
        source = io.BytesIO(source)
    sample_rate, samples = wavfile.read(source)
    if samples.dtype != np.int16:
        raise ValueError(f"expected a 16-bit PCM WAV file, got samples of dtype {samples.dtype}")
    return int(sample_rate), samples


def hz_to_mel(freq):
    """HTK mel scale: ``2595 log10(1 + f / 700)`` (float, numpy array or tensor)."""
    if isinstance(freq, torch.Tensor):
        return 2595.0 * torch.log10(1.0 + freq / 700.0)
    return 2595.0 * np.log10(1.0 + np.asarray(freq, dtype=np.float64) / 700.0)


def mel_to_hz(mel):
    """Inverse of `hz_to_mel`: ``700 (10^(m / 2595) - 1)``."""
    if isinstance(mel, torch.Tensor):
        return 700.0 * (torch.pow(10.0, mel / 2595.0) - 1.0)
    return 700.0 * (10.0 ** (np.asarray(mel, dtype=np.float64) / 2595.0) - 1.0)


def _check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def mel_filterbank(
    n_freqs: int,
    n_mels: int,
    sample_rate: int,
    f_min: float = 0.0,
    f_max: float | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    device=None,
) -> torch.Tensor:
    """Triangular HTK mel filters without area normalisation (torchaudio's ``melscale_fbanks`` defaults).

    Args:
        n_freqs: number of one-sided FFT bins, ``n_fft // 2 + 1``; bin k sits at
            ``k * (sample_rate // 2) / (n_freqs - 1)`` Hz.
        n_mels: number of filters.
        sample_rate: in Hz.
        f_min: lower band edge in Hz (default 0).
        f_max: upper band edge in Hz; None (default): ``sample_rate // 2``.

    Returns:
        (n_freqs, n_mels) weights: filter m rises linearly from 0 at corner ``f[m]`` to 1 at ``f[m+1]`` and
            falls back to 0 at ``f[m+2]``, the ``n_mels + 2`` corners being equally spaced in mel.
    """
    n_freqs = _check_positive_int("n_freqs", n_freqs)
    n_mels = _check_positive_int("n_mels", n_mels)
    sample_rate = _check_positive_int("sample_rate", sample_rate)
    f_max = float(sample_rate // 2) if f_max is None else float(f_max)
    if not 0.0 <= f_min <= f_max:
        raise ValueError(f"need 0 <= f_min <= f_max, got f_min={f_min}, f_max={f_max}")
    bins = torch.linspace(0.0, float(sample_rate // 2), n_freqs, dtype=torch.float64)
    corners = mel_to_hz(
        torch.linspace(hz_to_mel(f_min).item(), hz_to_mel(f_max).item(), n_mels + 2, dtype=torch.float64)
    )
    widths = corners[1:] - corners[:-1]  # (n_mels + 1,)
    to_corner = corners[None, :] - bins[:, None]  # (n_freqs, n_mels + 2)
    rising = -to_corner[:, :-2] / widths[:-1]
    falling = to_corner[:, 2:] / widths[1:]
    weights = torch.clamp(torch.minimum(rising, falling), min=0.0)
    return weights.to(dtype=dtype, device=device)


def dct_matrix(n_mfcc: int, n_mels: int, *, dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """Orthonormal DCT-II as a (n_mels, n_mfcc) matrix: ``coefficients = log_mel @ dct_matrix``.

    Entry (n, k) is ``sqrt(2 / n_mels) cos(pi k (n + 1/2) / n_mels)``, with column 0 scaled by ``1/sqrt(2)``.
    """
    n_mfcc = _check_positive_int("n_mfcc", n_mfcc)
    n_mels = _check_positive_int("n_mels", n_mels)
    if n_mfcc > n_mels:
        raise ValueError(f"n_mfcc ({n_mfcc}) cannot exceed n_mels ({n_mels})")
    n = torch.arange(n_mels, dtype=torch.float64)[:, None]
    k = torch.arange(n_mfcc, dtype=torch.float64)[None, :]
    basis = torch.cos(math.pi / n_mels * (n + 0.5) * k) * math.sqrt(2.0 / n_mels)
    basis[:, 0] /= math.sqrt(2.0)
    return basis.to(dtype=dtype, device=device)


def _check_waveform(waveform: torch.Tensor, n_fft: int) -> None:
    if not isinstance(waveform, torch.Tensor) or not waveform.is_floating_point():
        raise ValueError("waveform must be a floating point tensor of shape (..., L)")
    if waveform.dim() < 1:
        raise ValueError("waveform must have shape (..., L), got a scalar")
    if waveform.shape[-1] <= n_fft // 2:
        # reflect padding needs more samples than the pad width
        raise ValueError(
            f"waveform has {waveform.shape[-1]} samples; at least n_fft // 2 + 1 = {n_fft // 2 + 1} are needed"
        )


def power_spectrogram(waveform: torch.Tensor, n_fft: int) -> torch.Tensor:
    """``|STFT|^2`` with a periodic Hann window of length n_fft, hop n_fft // 2, centred with reflect padding.

    Args:
        waveform: (..., L) floating point samples.
        n_fft: FFT size (also the window length).

    Returns:
        (..., 1 + L // (n_fft // 2), n_fft // 2 + 1): frames first, then one-sided frequency bins.
    """
    n_fft = _check_positive_int("n_fft", n_fft)
    if n_fft < 2:
        raise ValueError(f"n_fft must be at least 2, got {n_fft}")
    _check_waveform(waveform, n_fft)
    batch_shape, length = waveform.shape[:-1], waveform.shape[-1]
    window = torch.hann_window(n_fft, periodic=True, dtype=waveform.dtype, device=waveform.device)
    spectrum = torch.stft(
        waveform.reshape(-1, length),
        n_fft=n_fft,
        hop_length=n_fft // 2,
        win_length=n_fft,
        window=window,
        center=True,
        pad_mode="reflect",
        normalized=False,
        onesided=True,
        return_complex=True,
    )  # (B, freqs, frames)
    power = spectrum.real.square() + spectrum.imag.square()
    return power.transpose(-1, -2).reshape(*batch_shape, power.shape[-1], power.shape[-2])


def mel_spectrogram(
    waveform: torch.Tensor, *, sample_rate: int = 16000, n_fft: int = 200, n_mels: int = 64
) -> torch.Tensor:
    """Mel power spectrogram (before the log): `power_spectrogram` times `mel_filterbank`.

    Args:
        waveform: (..., L) floating point samples.

    Returns:
        (..., 1 + L // (n_fft // 2), n_mels).
    """
    power = power_spectrogram(waveform, n_fft)
    filters = mel_filterbank(n_fft // 2 + 1, n_mels, sample_rate, dtype=waveform.dtype, device=waveform.device)
    return power @ filters


def mfcc(
    waveform: torch.Tensor,
    *,
    sample_rate: int = 16000,
    n_mfcc: int = 20,
    n_fft: int = 200,
    n_mels: int = 64,
    log_offset: float = 1e-6,
) -> torch.Tensor:
    """MFCCs of log-mel spectra, as torchaudio's ``MFCC(log_mels=True)`` (see the module docstring).

    The defaults are the Speech Commands protocol (docs/design.md#dataset-protocols): 20 coefficients, n_fft 200,
    64 mels, 16 kHz, giving 161 x 20 for a 16000-sample clip.

    Args:
        waveform: (..., L) floating point samples (Speech Commands: int16 / 2^15).

    Returns:
        (..., 1 + L // (n_fft // 2), n_mfcc), in the waveform's dtype and on its device.
    """
    mel = mel_spectrogram(waveform, sample_rate=sample_rate, n_fft=n_fft, n_mels=n_mels)
    basis = dct_matrix(n_mfcc, n_mels, dtype=waveform.dtype, device=waveform.device)
    return torch.log(mel + log_offset) @ basis
