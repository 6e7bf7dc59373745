"""The exact solver's two scans side by side: sequential (one affine step after the other, hand-written adjoint)
against chunked (the WY / UT form of `neuralde_seq.solvers.chunked_delta`, autograd per recomputed segment).

For each number of windows, one pre-Delta field in "rde" form (d_model = heads × head_dim) on a synthetic
piecewise-constant control (log-signature-like windows of length 1, 7 channels) is solved by
``Exact(recurrence=...)``: the forward solve alone (no gradients) and a training step's solve
(forward and backward of a fixed functional of the final states, gradients on the field's weights and the
control). The scans are timed in one process, interleaved (sequential, chunked per block size, sequential, ...)
so that all see the same machine; medians of ``--repeats`` runs after one warm-up. The states of the two scans are
checked equal first (float64 not required: the relative difference is printed).

    python benchmarks/chunked_delta.py                                  # CPU, 1 thread, 1,000 and 4,096 windows
    python benchmarks/chunked_delta.py --windows 1000 --blocks 16,32,64 --forget-gate
    python benchmarks/chunked_delta.py --device cuda --threads 0        # a GPU (threads 0: torch's default)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from machine import code_version, cpu_name


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(windows, batch, heads, head_dim, blocks, forget_gate, repeats, device, dtype):
    import torch

    from neuralde_seq.controls import Control
    from neuralde_seq.fields import FastWeightField
    from neuralde_seq.solvers import Exact, SolverOptions, solve

    channels = 7
    g = torch.Generator().manual_seed(0)
    coeffs = torch.zeros(batch, windows + 1, 4, channels, dtype=dtype)
    coeffs[:, :windows, 0] = torch.randn(batch, windows, channels, generator=g, dtype=dtype)
    control = Control(
        torch.arange(windows + 1, dtype=dtype).to(device),
        coeffs.to(device).requires_grad_(),
        torch.full((batch,), windows, device=device),
        piecewise_constant=True,
    )
    torch.manual_seed(0)
    field = FastWeightField(channels, heads * head_dim, heads, "delta", form="rde", forget_gate=forget_gate)
    field = field.to(device=device, dtype=dtype)
    W0 = torch.zeros(batch, heads, head_dim, head_dim, device=device, dtype=dtype)
    weights = torch.randn(W0.shape, generator=g, dtype=dtype).to(device)
    params = [control.coeffs] + [p for name, p in field.named_parameters() if not name.startswith("query")]
    scans = {"sequential": SolverOptions(Exact())}
    for block in blocks:
        scans[f"chunked C={block}"] = SolverOptions(Exact(recurrence="chunked", block_size=block))

    def forward(options):
        with torch.no_grad():
            out = solve(field, control, W0, options)
        _sync(device)
        return out

    def training(options):
        out = solve(field, control, W0, options)
        torch.autograd.grad((out * weights).sum(), params)
        _sync(device)

    reference = forward(scans["sequential"])
    difference = {
        name: float((forward(o) - reference).abs().max() / reference.abs().max()) for name, o in scans.items()
    }
    times = {name: {"forward": [], "training": []} for name in scans}
    for _ in range(repeats + 1):  # the first round warms up
        for name, options in scans.items():
            for kind, function in (("forward", forward), ("training", training)):
                start = time.perf_counter()
                function(options)
                times[name][kind].append(time.perf_counter() - start)
    return {
        name: {kind: statistics.median(t[1:]) for kind, t in kinds.items()} | {"difference": difference[name]}
        for name, kinds in times.items()
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", default="1000,4096", help="comma-separated numbers of windows")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=8)
    parser.add_argument("--blocks", default="16,64", help="comma-separated block sizes of the chunked scan")
    parser.add_argument("--forget-gate", action="store_true", help="fields with a forget gate")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per scan after one warm-up (median)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{cpu_name()}, {torch.get_num_threads()} thread(s)"
    )
    print(f"# exact solver scans: {where}; torch {torch.__version__}; {code_version()}")
    print(
        f"# pre-Delta rde, batch {args.batch}, {args.heads} heads of width {args.head_dim}, "
        f"{'with' if args.forget_gate else 'no'} forget gate, {args.dtype}; median of {args.repeats} (s)"
    )
    print(f"{'windows':>8} {'scan':>14} {'forward':>9} {'training':>9} {'vs seq (train)':>15} {'rel. diff':>10}")
    for windows in (int(w) for w in args.windows.split(",")):
        result = measure(
            windows,
            args.batch,
            args.heads,
            args.head_dim,
            [int(b) for b in args.blocks.split(",")],
            args.forget_gate,
            args.repeats,
            device,
            getattr(torch, args.dtype),
        )
        base = result["sequential"]["training"]
        for name, r in result.items():
            print(
                f"{windows:>8} {name:>14} {r['forward']:>9.3f} {r['training']:>9.3f} {r['training'] / base:>14.2f}x "
                f"{r['difference']:>10.1e}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
