"""Training-step time against torch's CPU thread count: the evidence for the library's default of 1 thread.

One training step = forward, cross-entropy loss, backward, Adam step, for registry models with their default
options (``--models``, default delta-cde, delta-rde with the exact solver, ncde, ckcnn, gru-d) on a batch of
``--batch`` (32) series of T time points (``--lengths``, default 200 1000), 3 channels of a Gaussian random
walk, 4 classes; inputs built once outside the timed step, as in training.

For each (model, T) the thread counts of ``--threads`` (default: 1, 2 and torch's own default for this
machine, which is the number of cores it sees) take turns step by step (1, 2, default, 1, 2, ...) after one
untimed step each, so that the ratios compare steps taken side by side on a shared machine. Printed: the
median wall time per step for each thread count and its ratio to 1 thread (> 1: slower than one thread).
The machine's load average is printed too: other processes holding the cores is the case where extra threads
hurt most.

    python benchmarks/threads.py --json results/benchmarks/threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

from machine import code_version, cpu_name

from neuralde_seq.files import write_text_atomic

NUM_CLASSES = 4


def _batch(length: int, batch: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    times = torch.linspace(0, 1, length).repeat(batch, 1)
    values = torch.cumsum(torch.randn(batch, length, 3, generator=g), 1) / length**0.5
    labels = torch.randint(0, NUM_CLASSES, (batch,), generator=g)
    return times, values, labels


def _step_function(name: str, times, values, labels):
    import torch
    import torch.nn.functional as F

    from neuralde_seq import Exact, SolverOptions, create_model, model_inputs

    model_name, solver = (name[: -len("-exact")], SolverOptions(Exact())) if name.endswith("-exact") else (name, None)
    inputs = model_inputs(model_name, times, values)
    torch.manual_seed(0)
    model = create_model(model_name, inputs, NUM_CLASSES, solver=solver)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()

    return step


def main(argv=None) -> int:
    import torch

    default_threads = torch.get_num_threads()
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=["delta-cde", "delta-rde-exact", "ncde", "ckcnn", "gru-d"],
        help="registry names; NAME-exact: NAME with SolverOptions(method='exact')",
    )
    parser.add_argument("--lengths", nargs="+", type=int, default=[200, 1000])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", nargs="+", type=int, default=sorted({1, 2, default_threads}))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if 1 not in args.threads:
        parser.error("--threads must include 1 (the ratios are to one thread)")

    from neuralde_seq.training.results import format_table

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(
        f"{cpu_name()}, {os.cpu_count()} cores seen, torch {torch.__version__} (default {default_threads} "
        f"threads), load average {load}; code {code_version()}"
    )
    rows = []
    for length in args.lengths:
        times, values, labels = _batch(length, args.batch)
        for name in args.models:
            step = _step_function(name, times, values, labels)
            seconds = {k: [] for k in args.threads}
            for k in args.threads:  # untimed warm-up at every thread count
                torch.set_num_threads(k)
                step()
            for _ in range(args.repeats):
                for k in args.threads:
                    torch.set_num_threads(k)
                    start = time.perf_counter()
                    step()
                    seconds[k].append(time.perf_counter() - start)
            median = {k: statistics.median(v) for k, v in seconds.items()}
            row = {
                "model": name,
                "T": length,
                **{f"{k} thr (s)": f"{median[k]:.3f}" for k in args.threads},
                **{f"{k} / 1": f"{median[k] / median[1]:.2f}" for k in args.threads if k != 1},
            }
            rows.append({"model": name, "T": length, "median_seconds": median, "row": row})
            print(f"{name} T={length}: " + ", ".join(f"{k} thr {median[k]:.3f} s" for k in args.threads), flush=True)
    columns = list(rows[0]["row"])
    print()
    print(format_table([r["row"] for r in rows], columns))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        payload = {
            "cpu": cpu_name(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "load_average": load,
            "python": platform.python_version(),
            "code": code_version(),
            "batch": args.batch,
            "repeats": args.repeats,
            "results": [{k: v for k, v in r.items() if k != "row"} for r in rows],
        }
        write_text_atomic(args.json, json.dumps(payload, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
