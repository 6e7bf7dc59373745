"""Interpolation through missing values: torchcde vs neuralde_seq.controls.splines, at a PhysioNet-like shape.

Two fills are timed: the natural cubic spline coefficients, and the linear fill the Hermite cubic, linear,
rectilinear (and log-signature) controls go through (``torchcde.linear_interpolation_coeffs`` against
``neuralde_seq.controls.splines.fill_missing_linear``).

``torchcde.natural_cubic_coeffs`` goes through missing values with a Python loop over every (sample,
channel); ``neuralde_seq.controls.splines.natural_cubic_coefficients`` solves all of them at once. Both are timed
in this one run, on the same synthetic data:

- shape: ``--samples`` samples (default 2,000) x ``--length`` hourly time points (72) x ``--channels``
  channels (34), the first 72 hours of PhysioNet 2019 (about 40,000 samples of this shape in all);
- missing values: each channel has its own missing rate, drawn uniformly from ``--missing`` (default
  0.78 to 0.98, about 88 % missing overall, like PhysioNet's vital signs and laboratory values);
- ``--dtype`` float64 (default) or float32; one torch thread.

torchcde takes about a second per ten samples here, so by default it runs on the first
``--reference-samples`` samples (200) only and its time for all ``--samples`` is extrapolated linearly
(its cost is a fixed amount per (sample, channel)); ``--reference-samples 2000`` measures it on all of
them (about 5 minutes). Ours is timed on the same subset (for a measured ratio) and on all samples (median
of ``--repeats`` runs). The max abs difference compares ours with torchcde on the subset, ours computed
both alone on the subset and within the full batch. A second row times both on the same data without
missing values (torchcde's vectorised path), to show nothing is lost there.

Usage (from the repository root)::

    python benchmarks/controls.py
    python benchmarks/controls.py --samples 2000 --reference-samples 2000
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

from machine import cpu_name


def _data(samples, length, channels, missing, dtype, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, length, channels, generator=g, dtype=torch.float64)
    low, high = missing
    rate = low + (high - low) * torch.rand(channels, generator=g, dtype=torch.float64)
    drop = torch.rand(samples, length, channels, generator=g, dtype=torch.float64) < rate
    complete = x.to(dtype)
    return complete.masked_fill(drop, float("nan")), complete


def _seconds(function, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--length", type=int, default=72)
    parser.add_argument("--channels", type=int, default=34)
    parser.add_argument(
        "--missing",
        type=float,
        nargs=2,
        default=(0.78, 0.98),
        metavar=("LOW", "HIGH"),
        help="range of the per-channel missing rates (default 0.78 0.98)",
    )
    parser.add_argument(
        "--reference-samples",
        type=int,
        default=200,
        help="samples torchcde runs on through missing values; its time is extrapolated to --samples (default 200)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs of ours per timing, median (default 5)")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    args = parser.parse_args(argv)
    if not 1 <= args.reference_samples <= args.samples:
        parser.error("--reference-samples must lie in [1, --samples]")

    import torch
    import torchcde

    from neuralde_seq.controls.splines import fill_missing_linear, natural_cubic_coefficients

    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    x, complete = _data(args.samples, args.length, args.channels, args.missing, dtype)
    t = torch.arange(args.length, dtype=dtype)
    subset = x[: args.reference_samples]
    missing = torch.isnan(x).double().mean().item()
    print(
        f"# torch {torch.__version__}, torchcde {torchcde.__version__}, 1 thread, {cpu_name()}, "
        f"python {platform.python_version()}, {args.dtype}"
    )
    print(
        f"# data: {args.samples} samples x {args.length} time points x {args.channels} channels, "
        f"{100 * missing:.1f} % missing (per-channel rates {args.missing[0]:g} to {args.missing[1]:g})"
    )

    rows = []
    # Through missing values: torchcde on the subset (one run), ours on the subset and on all samples.
    natural_cubic_coefficients(subset, t)  # warm-up
    ref_seconds, reference = _seconds(lambda: torchcde.natural_cubic_coeffs(subset, t), 1)
    sub_seconds, ours_subset = _seconds(lambda: natural_cubic_coefficients(subset, t), args.repeats)
    all_seconds, ours_all = _seconds(lambda: natural_cubic_coefficients(x, t), args.repeats)
    difference = max(
        (ours_subset - reference).abs().max().item(),
        (ours_all[: args.reference_samples] - reference).abs().max().item(),
    )
    scale = args.samples / args.reference_samples
    measured = args.reference_samples == args.samples
    rows.append(("missing values", args.reference_samples, ref_seconds, sub_seconds, difference))
    if not measured:
        rows.append(("missing values", args.samples, ref_seconds * scale, all_seconds, None))

    # Without missing values: both vectorised, all samples.
    ref_complete, reference_complete = _seconds(lambda: torchcde.natural_cubic_coeffs(complete, t), args.repeats)
    ours_complete_seconds, ours_complete = _seconds(lambda: natural_cubic_coefficients(complete, t), args.repeats)
    rows.append(
        (
            "no missing values",
            args.samples,
            ref_complete,
            ours_complete_seconds,
            (ours_complete - reference_complete).abs().max().item(),
        )
    )

    # The linear fill (Hermite cubic, linear, rectilinear and log-signature controls): torchcde's loop on the subset.
    fill_reference_seconds, fill_reference = _seconds(lambda: torchcde.linear_interpolation_coeffs(subset, t=t), 1)
    fill_seconds, fill_ours = _seconds(lambda: fill_missing_linear(subset, t), args.repeats)
    rows.append(
        (
            "missing values, linear fill",
            args.reference_samples,
            fill_reference_seconds,
            fill_seconds,
            (fill_ours - fill_reference).abs().max().item(),
        )
    )

    header = "| data | samples | torchcde s | ours s | torchcde / ours | max abs diff |\n|---|---:|---:|---:|---:|---:|"
    lines = []
    for name, samples, ref, mine, diff in rows:
        extrapolated = name == "missing values" and samples != args.reference_samples  # natural cubic only
        ref_text = f"{ref:.4g}" + (" (extrapolated)" if extrapolated else "")
        lines.append(
            f"| {name} | {samples} | {ref_text} | {mine:.4g} | {ref / mine:.3g}x | "
            f"{'-' if diff is None else f'{diff:.1e}'} |"
        )
    print()
    print(header)
    print("\n".join(lines))
    print(
        f"\ntorchcde through missing values: {1e3 * ref_seconds / args.reference_samples:.1f} ms per sample "
        f"(measured on {args.reference_samples} samples"
        + ("" if measured else f", extrapolated linearly x{scale:g} to {args.samples}")
        + "); "
        f"ours: {1e3 * all_seconds / args.samples:.3f} ms per sample on all {args.samples} (median of "
        f"{args.repeats}). At 40,000 samples: torchcde about "
        f"{40000 * ref_seconds / args.reference_samples / 60:.0f} min, ours about "
        f"{40000 * all_seconds / args.samples:.0f} s."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
