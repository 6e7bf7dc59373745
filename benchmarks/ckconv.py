"""CKConv: FFT vs direct causal convolution, forward + backward time and peak memory (issue 5).

One CKConv layer (``neuralde_seq.models.ckconv.CKConv``: kernel network, a kernel as long as the input,
causal convolution) is run with ``conv="fft"`` (``causal_conv_fft``: zero-padded rFFT to the next power of
two >= 2L − 1) and ``conv="direct"`` (``causal_conv_direct``: ``conv1d`` with a length-L kernel), same
weights, same input, at each ``--lengths`` L. Per length, in one run:

1. Agreement: outputs and gradients (w.r.t. the input, and w.r.t. all parameters as one vector) of the
   two paths are compared before anything is timed; for each, the largest difference relative to the
   largest magnitude must be below ``--tolerance`` (float32 default 1e-4; float64 1e-10), or the script
   stops with an error.
2. Time: forward + backward (loss = mean of y², gradients w.r.t. the input and all parameters), the two
   paths alternated, median over up to ``--repeats`` runs per path (fewer when one run takes longer than
   ``--max-seconds``; the agreement run is the warm-up).
3. Peak memory. CPU: each path in a fresh child process, peak resident set size during forward + backward
   minus the resident set size just before it (whole process, so the allocator's and the libraries'
   working memory count; see :func:`child_peak_memory`). CUDA: ``torch.cuda.max_memory_allocated``
   over forward + backward minus the memory allocated before it, in this process.

Ratios direct / FFT are printed per length. The thread count (``--threads``, default 1) is printed and
stored. Direct convolution costs O(B · C² · L²): at L = 16,000 one forward + backward of the default
shape takes about a minute on one CPU thread.

Usage (from the repository root)::

    python benchmarks/ckconv.py                                   # L = 1000 and 16000, batch 4, 8 channels
    python benchmarks/ckconv.py --device cuda --batch 32 --channels 30
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuralde_seq.models.ckconv import CKConv  # noqa: E402
from neuralde_seq.training import format_table, write_json  # noqa: E402

PATHS = ("fft", "direct")
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def build(conv: str, length: int, args, device) -> tuple[CKConv, torch.Tensor]:
    """The layer (seeded: the same weights for both paths) and a seeded input (batch, length, channels)."""
    torch.manual_seed(args.seed)
    layer = CKConv(args.channels, args.channels, kernel_hidden=args.kernel_hidden, omega_0=args.omega_0,
                   horizon=float(length - 1), conv=conv).to(device=device, dtype=DTYPES[args.dtype])
    generator = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch, length, args.channels, generator=generator, dtype=DTYPES[args.dtype]).to(device)
    return layer, x.requires_grad_(True)


def forward_backward(layer: CKConv, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One forward + backward; returns the output and the gradients (input first, then parameters)."""
    layer.zero_grad(set_to_none=True)
    x.grad = None
    y = layer(x)
    y.square().mean().backward()
    return y.detach(), [x.grad] + [p.grad for p in layer.parameters()]


def synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = max(a.abs().max().item(), b.abs().max().item(), 1e-30)
    return (a - b).abs().max().item() / scale


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not found in /proc/self/status")


def child_peak_memory(conv: str, length: int, args) -> int:
    """Run in a fresh child process: peak RSS during one forward + backward minus the RSS before it (bytes).

    A forward + backward on a short input first loads the code paths (libraries map their pages lazily).
    The peak is VmHWM after resetting it (``/proc/self/clear_refs``, Linux >= 4.0), or ``ru_maxrss`` where
    that is refused (then it includes the set-up's own peak, which is smaller than the runs measured).
    """
    layer, _ = build(conv, min(length, 64), args, torch.device("cpu"))
    warm = torch.randn(1, min(length, 64), args.channels, dtype=DTYPES[args.dtype], requires_grad=True)
    forward_backward(layer, warm)
    layer, x = build(conv, length, args, torch.device("cpu"))
    try:
        Path("/proc/self/clear_refs").write_text("5")
        read_peak = lambda: _status_bytes("VmHWM")  # noqa: E731
    except OSError:
        read_peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # noqa: E731 (kB on Linux)
    before = _status_bytes("VmRSS")
    forward_backward(layer, x)
    return max(read_peak() - before, 0)


def peak_memory(conv: str, length: int, args, device: torch.device) -> int:
    if device.type == "cuda":
        layer, x = build(conv, length, args, device)
        synchronise(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        forward_backward(layer, x)
        synchronise(device)
        return torch.cuda.max_memory_allocated(device) - before
    command = [sys.executable, __file__, "--child-memory", conv, "--lengths", str(length), "--batch", str(args.batch),
               "--channels", str(args.channels), "--kernel-hidden", str(args.kernel_hidden), "--omega-0",
               str(args.omega_0), "--seed", str(args.seed), "--dtype", args.dtype, "--threads", str(args.threads)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(json.loads(result.stdout.strip().splitlines()[-1])["peak_bytes"])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 16000])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--channels", type=int, default=8, help="input = output channels")
    parser.add_argument("--kernel-hidden", type=int, default=32)
    parser.add_argument("--omega-0", type=float, default=30.0)
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    parser.add_argument("--tolerance", type=float, default=None, help="default: 1e-4 (float32), 1e-10 (float64)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-seconds", type=float, default=10.0, help="stop repeating a path after this long")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("results/benchmark_ckconv.json"))
    parser.add_argument("--child-memory", choices=PATHS, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("batch", "channels", "kernel_hidden", "repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.lengths) < 2:
        parser.error("--lengths must be at least 2")
    torch.set_num_threads(args.threads)
    if args.child_memory is not None:
        print(json.dumps({"peak_bytes": child_peak_memory(args.child_memory, args.lengths[0], args)}))
        return {}
    device = torch.device(args.device)
    tolerance = args.tolerance if args.tolerance is not None else (1e-4 if args.dtype == "float32" else 1e-10)
    env = {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
           "machine": platform.machine(), "device": str(device),
           "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()}
    print(f"CKConv FFT vs direct: batch {args.batch}, {args.channels} -> {args.channels} channels, kernel network "
          f"width {args.kernel_hidden}, {args.dtype}, device {device}, {torch.get_num_threads()} thread(s), "
          f"torch {torch.__version__}")

    rows = []
    for length in args.lengths:
        layers = {conv: build(conv, length, args, device) for conv in PATHS}
        # 1. Agreement (also the warm-up run of each path).
        results = {}
        for conv in PATHS:
            synchronise(device)
            t0 = time.perf_counter()
            results[conv] = forward_backward(*layers[conv])
            synchronise(device)
            results[conv] = (*results[conv], time.perf_counter() - t0)
        output_diff = relative_difference(results["fft"][0], results["direct"][0])
        # The input's gradient, and the parameters' gradients as one vector (per tensor would divide by ~0
        # where a gradient vanishes identically: the first kernel layer's weight_v, a 1-column weight-normed
        # matrix whose direction cannot change).
        input_grads = [results[conv][1][0] for conv in PATHS]
        param_grads = [torch.cat([g.flatten() for g in results[conv][1][1:]]) for conv in PATHS]
        grad_diff = max(relative_difference(*input_grads), relative_difference(*param_grads))
        print(f"L = {length}: FFT vs direct, largest difference relative to the largest magnitude: output "
              f"{output_diff:.2e}, gradients {grad_diff:.2e} (tolerance {tolerance:g})")
        if not max(output_diff, grad_diff) <= tolerance:
            raise SystemExit(f"FFT and direct paths disagree at L = {length}: output {output_diff:.3e}, "
                             f"gradients {grad_diff:.3e} > {tolerance:g}")
        # 2. Time, the two paths alternated.
        times = {conv: [] for conv in PATHS}
        spent = {conv: results[conv][2] for conv in PATHS}
        for _ in range(args.repeats):
            for conv in PATHS:
                if times[conv] and spent[conv] > args.max_seconds:
                    continue
                synchronise(device)
                t0 = time.perf_counter()
                forward_backward(*layers[conv])
                synchronise(device)
                elapsed = time.perf_counter() - t0
                times[conv].append(elapsed)
                spent[conv] += elapsed
        del layers, results
        # 3. Peak memory.
        memory = {conv: peak_memory(conv, length, args, device) for conv in PATHS}
        row = {"length": length}
        for conv in PATHS:
            row[f"{conv}_seconds"] = statistics.median(times[conv])
            row[f"{conv}_runs"] = len(times[conv])
            row[f"{conv}_peak_mib"] = memory[conv] / 2 ** 20
        row["time_ratio"] = row["direct_seconds"] / row["fft_seconds"]
        row["memory_ratio"] = row["direct_peak_mib"] / row["fft_peak_mib"] if row["fft_peak_mib"] > 0 else None
        row.update(output_rel_diff=output_diff, grad_rel_diff=grad_diff)
        rows.append(row)
        print(f"L = {length}: FFT {row['fft_seconds']:.4g} s ({row['fft_runs']} runs), direct "
              f"{row['direct_seconds']:.4g} s ({row['direct_runs']} runs): direct / FFT = {row['time_ratio']:.3g}; "
              f"peak memory FFT {row['fft_peak_mib']:.1f} MiB, direct {row['direct_peak_mib']:.1f} MiB")

    table = format_table(
        rows, ["length", "fft_seconds", "direct_seconds", "time_ratio", "fft_peak_mib", "direct_peak_mib",
               "memory_ratio", "grad_rel_diff"],
        headers=["L", "FFT s", "direct s", "direct / FFT time", "FFT peak MiB", "direct peak MiB",
                 "direct / FFT memory", "max rel. diff (grads)"],
        formats={"fft_seconds": ".4g", "direct_seconds": ".4g", "time_ratio": ".3g", "fft_peak_mib": ".1f",
                 "direct_peak_mib": ".1f", "memory_ratio": ".3g", "grad_rel_diff": ".1e"})
    print(table)
    command = " ".join(["python", "benchmarks/ckconv.py", *(sys.argv[1:] if argv is None else argv)])
    results = {"command": command, "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                                                if k != "child_memory"},
               "tolerance": tolerance, "environment": env, "rows": rows, "table": table}
    write_json(results, args.out)
    return results


if __name__ == "__main__":
    main()
