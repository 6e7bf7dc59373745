"""MFCCs and WAV reading (neuralde_seq.data.sources.audio) against references written here from the formulas."""

import io
import math

import numpy as np
import pytest
import torch
from scipy.io import wavfile

from neuralde_seq.data.sources.audio import mel_filterbank, mel_spectrogram, mfcc, power_spectrogram, read_wav

SR, N_FFT, N_MELS, N_MFCC = 16000, 200, 64, 20


def reference_mfcc(x: np.ndarray, sr=SR, n_fft=N_FFT, n_mels=N_MELS, n_mfcc=N_MFCC):
    """float64 MFCC from the textbook formulas, with torchaudio's defaults spelled out.

    Explicit DFT sum per frame, periodic Hann window, centred frames with reflect padding, HTK triangles
    evaluated bin by bin, log(mel + 1e-6), explicit orthonormal DCT-II sum. Returns (frames, n_mfcc) and
    the (frames, n_mels) mel power.
    """
    hop = n_fft // 2
    padded = np.pad(x, n_fft // 2, mode="reflect")  # reflect without repeating the edge sample
    n_frames = 1 + len(x) // hop
    n = np.arange(n_fft)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / n_fft)  # periodic Hann: period n_fft, not n_fft - 1
    n_freqs = n_fft // 2 + 1
    k = np.arange(n_freqs)
    cos_table = np.cos(2 * np.pi * np.outer(k, n) / n_fft)
    sin_table = np.sin(2 * np.pi * np.outer(k, n) / n_fft)
    power = np.empty((n_frames, n_freqs))
    for t in range(n_frames):
        frame = padded[t * hop : t * hop + n_fft] * window
        re = (cos_table * frame).sum(axis=1)
        im = -(sin_table * frame).sum(axis=1)
        power[t] = re**2 + im**2

    def mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    def hz(m):
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)

    m_lo, m_hi = mel(0.0), mel(sr / 2)
    corners = [hz(m_lo + (m_hi - m_lo) * i / (n_mels + 1)) for i in range(n_mels + 2)]
    bin_freqs = [kk * (sr / 2) / (n_freqs - 1) for kk in range(n_freqs)]
    filters = np.zeros((n_freqs, n_mels))
    for m in range(n_mels):
        lo, mid, hi = corners[m], corners[m + 1], corners[m + 2]
        for kk, f in enumerate(bin_freqs):
            if lo < f <= mid:
                filters[kk, m] = (f - lo) / (mid - lo)
            elif mid < f < hi:
                filters[kk, m] = (hi - f) / (hi - mid)
    mel_power = power @ filters
    log_mel = np.log(mel_power + 1e-6)
    out = np.zeros((n_frames, n_mfcc))
    for c in range(n_mfcc):
        scale = math.sqrt(1.0 / n_mels) if c == 0 else math.sqrt(2.0 / n_mels)
        for m in range(n_mels):
            out[:, c] += scale * log_mel[:, m] * math.cos(math.pi * c * (m + 0.5) / n_mels)
    return out, mel_power


def test_mfcc_matches_formula_reference_and_shape():
    rng = np.random.default_rng(0)
    # speech-like: a random int16 clip / 2^15, plus a quiet stretch so small mel energies are exercised
    clip = rng.integers(-3000, 3000, size=16000).astype(np.int16)
    clip[5000:7000] //= 300
    x = clip.astype(np.float64) / 2**15
    ref, _ = reference_mfcc(x)
    got = mfcc(torch.tensor(x, dtype=torch.float64))
    assert got.shape == (161, 20)
    assert ref.shape == (161, 20)
    err = (got.numpy() - ref).__abs__().max() / np.abs(ref).max()
    assert err < 1e-8, err


def test_mfcc_batches_and_float32_agree():
    rng = np.random.default_rng(1)
    x = torch.tensor(rng.normal(scale=0.1, size=(2, 3, 1600)))
    batched = mfcc(x)
    assert batched.shape == (2, 3, 17, 20)
    ref, _ = reference_mfcc(x[1, 2].numpy())
    assert np.abs(batched[1, 2].numpy() - ref).max() / np.abs(ref).max() < 1e-8
    single = mfcc(x.to(torch.float32))
    assert single.dtype == torch.float32
    assert torch.allclose(single.double(), batched, rtol=0, atol=1e-3 * batched.abs().max().item())


def test_pure_tone_lands_in_its_mel_band():
    # 2000 Hz = FFT bin 25 exactly (80 Hz per bin): a periodic-Hann frame of a sinusoid on bin k has
    # energy only at bins k-1, k, k+1, so only filters covering 1920..2080 Hz may see energy.
    t = np.arange(16000) / SR
    x = 0.5 * np.sin(2 * np.pi * 2000.0 * t)
    mel_power = mel_spectrogram(torch.tensor(x)).numpy()
    interior = mel_power[2:-2]  # edge frames see the reflect padding
    mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)  # noqa: E731
    hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)  # noqa: E731
    corners = [hz(mel(SR / 2) * i / (N_MELS + 1)) for i in range(N_MELS + 2)]
    # the filter with the largest triangle weight at 2000 Hz
    weights = [
        max(
            0.0,
            min(
                (2000 - corners[m]) / (corners[m + 1] - corners[m]),
                (corners[m + 2] - 2000) / (corners[m + 2] - corners[m + 1]),
            ),
        )
        for m in range(N_MELS)
    ]
    expected_band = int(np.argmax(weights))
    assert (interior.argmax(axis=1) == expected_band).all()
    touched = [m for m in range(N_MELS) if corners[m] < 2080 and corners[m + 2] > 1920]
    untouched = [m for m in range(N_MELS) if m not in touched]
    assert interior[:, untouched].max() < 1e-12 * interior.max()
    # Parseval: a unit-amplitude-A tone carries (A * sum(window) / 2)^2 in bin k, a quarter of that in k +- 1
    spec = power_spectrogram(torch.tensor(x), N_FFT).numpy()[2:-2]
    peak = (0.5 * 100.0 / 2) ** 2  # sum of periodic Hann of length 200 is 100
    np.testing.assert_allclose(spec[:, 25], peak, rtol=1e-10)
    np.testing.assert_allclose(spec[:, 24], peak / 4, rtol=1e-10)


def test_filterbank_matches_htk_triangles():
    fb = mel_filterbank(101, 64, 16000).numpy()
    mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)  # noqa: E731
    hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)  # noqa: E731
    corners = [hz(mel(8000.0) * i / 65) for i in range(66)]
    for m in (0, 10, 40, 63):
        for k in range(101):
            f = 80.0 * k
            want = max(
                0.0,
                min(
                    (f - corners[m]) / (corners[m + 1] - corners[m]),
                    (corners[m + 2] - f) / (corners[m + 2] - corners[m + 1]),
                ),
            )
            assert abs(fb[k, m] - want) < 1e-12
    # the first filters are narrower than one 80 Hz bin: some are all zero, as torchaudio warns
    assert (fb.max(axis=0) == 0).any()


def test_read_wav_returns_int16_samples(tmp_path):
    samples = np.array([0, 1, -1, 32767, -32768, 1234], dtype=np.int16)
    path = tmp_path / "a.wav"
    wavfile.write(path, 16000, samples)
    rate, got = read_wav(path)
    assert rate == 16000 and got.dtype == np.int16
    np.testing.assert_array_equal(got, samples)
    rate2, got2 = read_wav(path.read_bytes())
    np.testing.assert_array_equal(got2, samples)
    buf = io.BytesIO()
    wavfile.write(buf, 16000, samples.astype(np.float32))
    with pytest.raises(ValueError, match="16-bit PCM"):
        read_wav(buf.getvalue())


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="waveform"):
        mfcc(torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match="samples"):
        mfcc(torch.zeros(50))
    with pytest.raises(ValueError, match="n_mfcc"):
        mfcc(torch.zeros(400), n_mfcc=80)
