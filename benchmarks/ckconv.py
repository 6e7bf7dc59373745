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

With ``--modes`` the script compares instead the three ways CKCNN reads a batch, by the time of one
training step (forward, cross-entropy, backward, Adam step) of the registry's ``ckcnn`` (hidden 32, 2
blocks) on the same batch: ``--batch`` (give 32) samples, each ``--full-length`` (1,429) integer time steps
with ``--drop`` (30 %) of its points removed, so T = 1,000 unevenly spaced integer times, 3 channels of a
Gaussian random walk, 4 classes:

- grid: ``mode="grid"`` (the default before issue 23: mask channels, the T points read as equally spaced,
  their times ignored; the reference for cost, not for the answer);
- lattice: irregular mode on the batch's common lattice (here the integer grid, N = 1,429 nodes), by FFT;
- pairwise: irregular mode summed over every pair of points (``irregular_conv="pairwise"``), O(T²). Its
  memory grows like batch · T² · kernel_hidden (about 4 GiB per layer at batch 32, T = 1,000), so
  ``--pairwise-batch`` runs it on the first samples only and scales its time by batch / pairwise batch
  (every part of its cost is per sample).

Before timing, the lattice and pairwise models (same weights) are compared on the pairwise batch in
float64 (float32 FFT round-off, amplified by the layer norms, reaches 1e-5 to 1e-3 of the gradients in
either mode, which would hide an error): logits and parameter gradients, largest difference relative to the
largest magnitude, must be below ``--tolerance`` (default 1e-10). Then one untimed step per row and
``--repeats`` timed steps, rows alternating, median (a row stops repeating once it has spent
``--max-seconds``). Ratios are to the grid row.

Usage (from the repository root)::

    python benchmarks/ckconv.py                                   # L = 1000 and 16000, batch 4, 8 channels
    python benchmarks/ckconv.py --device cuda --batch 32 --channels 30
    python benchmarks/ckconv.py --modes --batch 32 --pairwise-batch 4 --repeats 3   # grid / lattice / pairwise
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
MODE_ROWS = {
    "grid": {"mode": "grid"},
    "lattice": {"irregular_conv": "lattice"},
    "pairwise": {"irregular_conv": "pairwise"},
}
NUM_CLASSES = 4
DEFAULT_OUT = Path("results/benchmark_ckconv.json")


def build(conv: str, length: int, args, device) -> tuple[CKConv, torch.Tensor]:
    """The layer (seeded: the same weights for both paths) and a seeded input (batch, length, channels)."""
    torch.manual_seed(args.seed)
    layer = CKConv(
        args.channels,
        args.channels,
        kernel_hidden=args.kernel_hidden,
        omega_0=args.omega_0,
        horizon=float(length - 1),
        conv=conv,
    ).to(device=device, dtype=DTYPES[args.dtype])
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
    command = [
        sys.executable,
        __file__,
        "--child-memory",
        conv,
        "--lengths",
        str(length),
        "--batch",
        str(args.batch),
        "--channels",
        str(args.channels),
        "--kernel-hidden",
        str(args.kernel_hidden),
        "--omega-0",
        str(args.omega_0),
        "--seed",
        str(args.seed),
        "--dtype",
        args.dtype,
        "--threads",
        str(args.threads),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(json.loads(result.stdout.strip().splitlines()[-1])["peak_bytes"])


def dropped_batch(batch: int, full_length: int, drop: float, dtype, seed: int):
    """Observations of ``batch`` samples: each a Gaussian random walk (3 channels) on the integer times
    0..full_length − 1 with round(drop · full_length) of its points removed (the same count in every sample, so
    no padding); the times of the kept points are their integer indices. Returns (observations, labels)."""
    from neuralde_seq.observations import Observations

    g = torch.Generator().manual_seed(seed)
    kept = full_length - round(drop * full_length)
    keep = torch.rand(batch, full_length, generator=g).argsort(1)[:, :kept].sort(1).values
    walk = torch.randn(batch, full_length, 3, generator=g, dtype=torch.float64).cumsum(1) / full_length**0.5
    values = walk.gather(1, keep.unsqueeze(-1).expand(-1, -1, 3))
    labels = torch.randint(0, NUM_CLASSES, (batch,), generator=g)
    return Observations.from_tensors(keep.to(dtype), values.to(dtype)), labels


def _mode_trainer(row: str, observations, labels, args, device):
    """(model, one training step) of the registry's ckcnn read as ``row`` (`MODE_ROWS`)."""
    from neuralde_seq import create_model

    torch.manual_seed(args.seed)
    model = create_model("ckcnn", observations, NUM_CLASSES, **MODE_ROWS[row]).to(
        device=device, dtype=DTYPES[args.dtype]
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(observations), labels)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return model, step


def compare_modes(args, device: torch.device, env: dict) -> dict:
    """The ``--modes`` comparison (module docstring): one training step, grid vs lattice vs pairwise."""
    import warnings

    from neuralde_seq import create_model
    from neuralde_seq.models.ckconv import CKCNN, TimesIgnoredWarning

    observations, labels = dropped_batch(args.batch, args.full_length, args.drop, DTYPES[args.dtype], args.seed)
    observations, labels = observations.to(device), labels.to(device)
    pairwise_batch = min(args.pairwise_batch or args.batch, args.batch)
    batches = {row: (observations, labels) for row in MODE_ROWS}
    batches["pairwise"] = (observations[:pairwise_batch], labels[:pairwise_batch])
    trainers = {row: _mode_trainer(row, *batches[row], args, device) for row in MODE_ROWS}
    points = observations.values.shape[1]
    # Which form the default CKCNN (irregular_conv="auto") picks for this batch.
    _, lattice = CKCNN(3, NUM_CLASSES).blocks[0].conv1.plan_irregular(observations.times, observations.valid)
    print(
        f"CKCNN training step, grid vs lattice vs pairwise: batch {args.batch}, T = {points} points (integer "
        f"times 0..{args.full_length - 1}, {args.drop:.0%} dropped), 3 channels, registry ckcnn (hidden 32, 2 "
        f"blocks), {args.dtype}, device {device}, {torch.get_num_threads()} thread(s), torch {torch.__version__}"
    )
    print(
        "the default CKCNN (irregular_conv='auto') reads this batch "
        + (f"on a lattice of {lattice.size} nodes, spacing {lattice.spacing:g}" if lattice is not None else "pairwise")
    )
    # 1. Agreement of the two irregular forms: float64 copies, same weights, on the pairwise batch.
    check, check_labels = batches["pairwise"][0].to(torch.float64), batches["pairwise"][1]
    outputs, grads = {}, {}
    for row in ("lattice", "pairwise"):
        torch.manual_seed(args.seed)
        model = create_model("ckcnn", check, NUM_CLASSES, **MODE_ROWS[row]).to(device=device, dtype=torch.float64)
        logits = model(check)
        torch.nn.functional.cross_entropy(logits, check_labels).backward()
        outputs[row] = logits.detach()
        grads[row] = torch.cat([p.grad.flatten() for p in model.parameters()])
    output_diff = relative_difference(outputs["lattice"], outputs["pairwise"])
    grad_diff = relative_difference(grads["lattice"], grads["pairwise"])
    tolerance = args.tolerance if args.tolerance is not None else 1e-10
    print(
        f"lattice vs pairwise on {pairwise_batch} samples, largest difference relative to the largest magnitude: "
        f"logits {output_diff:.2e}, parameter gradients {grad_diff:.2e} (tolerance {tolerance:g})"
    )
    if not max(output_diff, grad_diff) <= tolerance:
        raise SystemExit(
            f"lattice and pairwise forms disagree: logits {output_diff:.3e}, gradients {grad_diff:.3e} > {tolerance:g}"
        )
    # 2. Time, rows alternating.
    wall = {row: [] for row in MODE_ROWS}
    cpu = {row: [] for row in MODE_ROWS}
    spent = dict.fromkeys(MODE_ROWS, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TimesIgnoredWarning)  # grid mode: that it ignores the times is the point
        for row, (_, step) in trainers.items():  # untimed first step
            t0 = time.perf_counter()
            step()
            spent[row] += time.perf_counter() - t0
        for _ in range(args.repeats):
            for row, (_, step) in trainers.items():
                if wall[row] and spent[row] > args.max_seconds:
                    continue
                synchronise(device)
                t0, c0 = time.perf_counter(), time.process_time()
                step()
                synchronise(device)
                wall[row].append(time.perf_counter() - t0)
                cpu[row].append(time.process_time() - c0)
                spent[row] += wall[row][-1]
    rows = []
    for row in MODE_ROWS:
        measured = batches[row][0].batch_size
        scale = args.batch / measured
        rows.append(
            {
                "row": row,
                "measured_batch": measured,
                "runs": len(wall[row]),
                "wall_seconds": statistics.median(wall[row]),
                "cpu_seconds": statistics.median(cpu[row]),
                "wall_seconds_full_batch": statistics.median(wall[row]) * scale,
                "cpu_seconds_full_batch": statistics.median(cpu[row]) * scale,
            }
        )
    grid_wall, grid_cpu = rows[0]["wall_seconds_full_batch"], rows[0]["cpu_seconds_full_batch"]
    for row in rows:
        row["wall_ratio"] = row["wall_seconds_full_batch"] / grid_wall
        row["cpu_ratio"] = row["cpu_seconds_full_batch"] / grid_cpu
    table = format_table(
        rows,
        [
            "row",
            "measured_batch",
            "runs",
            "wall_seconds",
            "wall_seconds_full_batch",
            "cpu_seconds_full_batch",
            "wall_ratio",
            "cpu_ratio",
        ],
        headers=[
            "form",
            "batch timed",
            "runs",
            "wall s",
            f"wall s, batch {args.batch}",
            f"CPU s, batch {args.batch}",
            "wall / grid",
            "CPU / grid",
        ],
        formats={
            "wall_seconds": ".3f",
            "wall_seconds_full_batch": ".3f",
            "cpu_seconds_full_batch": ".3f",
            "wall_ratio": ".2f",
            "cpu_ratio": ".2f",
        },
    )
    print(table)
    lattice_row, pairwise_row = rows[1], rows[2]
    print(
        f"lattice / grid = {lattice_row['wall_ratio']:.2f} wall, {lattice_row['cpu_ratio']:.2f} CPU (target <= 2); "
        f"pairwise / lattice = {pairwise_row['cpu_seconds_full_batch'] / lattice_row['cpu_seconds_full_batch']:.0f}"
        f" CPU"
    )
    command = " ".join(["python", "benchmarks/ckconv.py", *(sys.argv[1:] if args.argv is None else args.argv)])
    results = {
        "command": command,
        "settings": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k not in ("child_memory", "argv")
        },
        "environment": env,
        "points": points,
        "lattice": None if lattice is None else {"size": lattice.size, "spacing": lattice.spacing},
        "agreement": {"logits": output_diff, "gradients": grad_diff, "tolerance": tolerance},
        "rows": rows,
        "table": table,
    }
    write_json(results, Path("results/benchmark_ckconv_modes.json") if args.out == DEFAULT_OUT else args.out)
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 16000])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--channels", type=int, default=8, help="input = output channels")
    parser.add_argument("--kernel-hidden", type=int, default=32)
    parser.add_argument("--omega-0", type=float, default=30.0)
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="default: 1e-4 (float32), 1e-10 (float64); --modes: 1e-10 (checked in float64)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-seconds", type=float, default=10.0, help="stop repeating a path after this long")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"default {DEFAULT_OUT}; with --modes results/benchmark_ckconv_modes.json",
    )
    parser.add_argument("--child-memory", choices=PATHS, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--modes",
        action="store_true",
        help="compare one CKCNN training step in grid mode, on the lattice and pairwise instead",
    )
    parser.add_argument("--full-length", type=int, default=1429, help="--modes: integer time steps per sample")
    parser.add_argument("--drop", type=float, default=0.3, help="--modes: fraction of each sample's points removed")
    parser.add_argument(
        "--pairwise-batch",
        type=int,
        default=None,
        help="--modes: time the pairwise form on this many samples (default: --batch)",
    )
    args = parser.parse_args(argv)
    args.argv = argv
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
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
    }
    if args.modes:
        if not 0.0 <= args.drop < 1.0:
            parser.error("--drop must lie in [0, 1)")
        if args.full_length - round(args.drop * args.full_length) < 2:
            parser.error("--full-length after --drop must leave at least 2 points per sample")
        if args.pairwise_batch is not None and args.pairwise_batch < 1:
            parser.error("--pairwise-batch must be at least 1")
        return compare_modes(args, device, env)
    print(
        f"CKConv FFT vs direct: batch {args.batch}, {args.channels} -> {args.channels} channels, kernel network "
        f"width {args.kernel_hidden}, {args.dtype}, device {device}, {torch.get_num_threads()} thread(s), "
        f"torch {torch.__version__}"
    )

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
        print(
            f"L = {length}: FFT vs direct, largest difference relative to the largest magnitude: output "
            f"{output_diff:.2e}, gradients {grad_diff:.2e} (tolerance {tolerance:g})"
        )
        if not max(output_diff, grad_diff) <= tolerance:
            raise SystemExit(
                f"FFT and direct paths disagree at L = {length}: output {output_diff:.3e}, "
                f"gradients {grad_diff:.3e} > {tolerance:g}"
            )
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
            row[f"{conv}_peak_mib"] = memory[conv] / 2**20
        row["time_ratio"] = row["direct_seconds"] / row["fft_seconds"]
        row["memory_ratio"] = row["direct_peak_mib"] / row["fft_peak_mib"] if row["fft_peak_mib"] > 0 else None
        row.update(output_rel_diff=output_diff, grad_rel_diff=grad_diff)
        rows.append(row)
        print(
            f"L = {length}: FFT {row['fft_seconds']:.4g} s ({row['fft_runs']} runs), direct "
            f"{row['direct_seconds']:.4g} s ({row['direct_runs']} runs): direct / FFT = {row['time_ratio']:.3g}; "
            f"peak memory FFT {row['fft_peak_mib']:.1f} MiB, direct {row['direct_peak_mib']:.1f} MiB"
        )

    table = format_table(
        rows,
        [
            "length",
            "fft_seconds",
            "direct_seconds",
            "time_ratio",
            "fft_peak_mib",
            "direct_peak_mib",
            "memory_ratio",
            "grad_rel_diff",
        ],
        headers=[
            "L",
            "FFT s",
            "direct s",
            "direct / FFT time",
            "FFT peak MiB",
            "direct peak MiB",
            "direct / FFT memory",
            "max rel. diff (grads)",
        ],
        formats={
            "fft_seconds": ".4g",
            "direct_seconds": ".4g",
            "time_ratio": ".3g",
            "fft_peak_mib": ".1f",
            "direct_peak_mib": ".1f",
            "memory_ratio": ".3g",
            "grad_rel_diff": ".1e",
        },
    )
    print(table)
    command = " ".join(["python", "benchmarks/ckconv.py", *(sys.argv[1:] if argv is None else argv)])
    results = {
        "command": command,
        "settings": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k not in ("child_memory", "argv")
        },
        "tolerance": tolerance,
        "environment": env,
        "rows": rows,
        "table": table,
    }
    write_json(results, args.out)
    return results


if __name__ == "__main__":
    main()
