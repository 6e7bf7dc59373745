"""Time of one CDE training step against CKCNN's on the same batch.

One training step = forward, cross-entropy loss, backward, ``torch.optim.Adam`` step, for each CT-FWP in
neural CDE form given (default ``hebb-cde`` and ``delta-cde``, d_model 32, 4 heads, the library's default
``SolverOptions()``: rk4, one step per knot, the default gradient method) and for ``ckcnn`` (registry
defaults: hidden 32, 2 blocks), on the same batch of observations: ``--batch`` (32) samples, T time points
(``--lengths``, default 100 500 1000 1500) evenly spaced in [0, 1], 3 channels of a Gaussian random walk, no
missing values, 4 classes. The CDE models read the registry's control (Hermite cubic with a time channel),
built once per length outside the timed step, as in training (build the control once per split, slice per
batch); CKCNN reads the raw observations.

Time: ``torch.set_num_threads(--threads)`` (default 1); every model takes one untimed step, then
``--repeats`` timed steps, the models alternating step by step (hebb-cde, delta-cde, ckcnn, hebb-cde, ...), so
that the ratios compare steps taken side by side on a shared machine. The median is reported, with wall clock
and process CPU time. The goal printed at the end is CDE step / CKCNN step <= 2 at T = 1000.

The script reads only the public API (``create_model``, ``model_inputs``), so it also runs on older versions of
the library, e.g. the one before checkpointed gradients became the default (continuous adjoint)::

    python benchmarks/cde_step.py --json results/benchmarks/cde_step.json
    mkdir -p /tmp/old && git archive 02fd00e | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python benchmarks/cde_step.py --label old --json results/benchmarks/cde_step_old.json
    python benchmarks/cde_step.py --profile delta-cde --lengths 1000       # where the time of one step goes

``--profile MODEL`` times nothing: it runs one warm-up step and then profiles one step of MODEL at the first
length, with cProfile (Python time grouped by where it is spent) and torch.profiler (operators by self CPU time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings

from machine import code_version, cpu_name

from neuralde_seq.files import write_text_atomic

NUM_CLASSES = 4


def _batch(length: int, batch: int, dtype, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    times = torch.linspace(0, 1, length, dtype=torch.float64).repeat(batch, 1).to(dtype)
    values = (torch.cumsum(torch.randn(batch, length, 3, generator=g, dtype=torch.float64), 1) / length**0.5).to(dtype)
    labels = torch.randint(0, NUM_CLASSES, (batch,), generator=g)
    return times, values, labels


def _trainer(name: str, times, values, labels, args):
    """(model, one training step as a function) for ``name`` on this batch."""
    import torch

    from neuralde_seq import create_model, model_inputs

    inputs = model_inputs(name, times, values)
    sizes = {} if name == "ckcnn" else dict(d_model=args.d_model, n_heads=args.heads)
    torch.manual_seed(0)
    model = create_model(name, inputs, NUM_CLASSES, **sizes).to(times.dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return model, step


def _gradient_method(model) -> str:
    """The method and gradient method of the model's solver (for the record; older versions spelled them as strings,
    or had only ``adjoint``)."""
    for module in model.modules():
        solver = getattr(module, "solver", None)
        if solver is not None and hasattr(solver, "method"):
            if hasattr(solver.method, "name"):  # the method and gradient objects (neuralde_seq.solvers)
                return f"{solver.method.name}, gradient={solver.gradient.name}"
            if hasattr(solver, "gradient_method"):
                return f"{solver.method}, gradient={solver.gradient_method}"
            return f"{solver.method}, adjoint={getattr(solver, 'adjoint', None)}"
    return "-"


def measure(args) -> dict:
    import torch

    dtype = getattr(torch, args.dtype)
    names = [*args.models, *([] if args.no_ckcnn else ["ckcnn"])]
    results = []
    try:
        from tqdm import tqdm
    except ImportError:  # older environments

        def tqdm(iterable, **_):
            return iterable

    total = len(args.lengths) * len(names) * (args.repeats + 1)
    bar = tqdm(total=total, desc="cde_step", disable=args.no_progress, file=sys.stderr)
    for length in args.lengths:
        times, values, labels = _batch(length, args.batch, dtype)
        trainers = {name: _trainer(name, times, values, labels, args) for name in names}
        entry = {
            name: dict(
                wall=[], cpu=[], solver=_gradient_method(model), parameters=sum(p.numel() for p in model.parameters())
            )
            for name, (model, _) in trainers.items()
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, (_, step) in trainers.items():  # untimed first step
                entry[name]["first_loss"] = step()
                bar.update()
            for _ in range(args.repeats):
                for name, (_, step) in trainers.items():
                    wall, cpu = time.perf_counter(), time.process_time()
                    step()
                    entry[name]["wall"].append(time.perf_counter() - wall)
                    entry[name]["cpu"].append(time.process_time() - cpu)
                    bar.update()
        for name, e in entry.items():
            e["wall_median"], e["cpu_median"] = statistics.median(e["wall"]), statistics.median(e["cpu"])
            results.append(dict(model=name, length=length, **e))
    bar.close()
    return results


def profile(args) -> None:
    import cProfile
    import pstats

    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    dtype = getattr(torch, args.dtype)
    length = args.lengths[0]
    times, values, labels = _batch(length, args.batch, dtype)
    model, step = _trainer(args.profile, times, values, labels, args)
    step()
    start, cpu = time.perf_counter(), time.process_time()
    step()
    plain, plain_cpu = time.perf_counter() - start, time.process_time() - cpu
    profiler = cProfile.Profile()
    profiler.enable()
    step()
    profiler.disable()
    stats = pstats.Stats(profiler)
    groups: dict[str, float] = {}
    for (filename, _line, function), (_, _calls, tottime, _, _) in stats.stats.items():
        if "neuralde_seq" in filename:
            key = f"{filename.split('neuralde_seq')[-1].lstrip('/')}:{function}"
        elif "torch/utils/checkpoint" in filename:
            key = "torch.utils.checkpoint (Python hooks, recomputation bookkeeping)"
        elif function == "<method 'run_backward' of 'torch._C._EngineBase' objects>":
            key = "autograd engine (C++ backward: kernels and node overhead)"
        elif filename == "~":
            key = f"builtin {function}"
        else:
            key = "other Python (torch, torchdiffeq, stdlib)"
        groups[key] = groups.get(key, 0.0) + tottime
    total = sum(groups.values())
    print(
        f"# {args.profile}, T={length}, batch {args.batch}, {args.dtype}, {torch.get_num_threads()} thread(s), "
        f"solver {_gradient_method(model)}; one step unprofiled: {plain:.3f} s wall, {plain_cpu:.3f} s CPU"
    )
    print(f"\ncProfile, own time (tottime) grouped, {total:.3f} s under cProfile:")
    for key, seconds in sorted(groups.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {seconds:8.3f} s {100 * seconds / total:5.1f} %  {key}")
    print("\ncProfile, top functions by cumulative time:")
    stats.sort_stats("cumulative").print_stats(20)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    print("torch.profiler, operators by self CPU time:")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["hebb-cde", "delta-cde"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[100, 500, 1000, 1500])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--no-ckcnn", action="store_true", help="time the CDE models only")
    parser.add_argument("--label", default="current", help="name of this version of the code, for the JSON")
    parser.add_argument("--json", default="", help="write the results here")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--profile", metavar="MODEL", help="profile one training step of MODEL instead")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    if args.profile:
        profile(args)
        return 0
    started = time.time()
    results = measure(args)
    print(
        f"# {args.label}: neuralde_seq from {code_version()}, torch {torch.__version__}, "
        f"python {platform.python_version()}, {cpu_name()}, {args.threads} thread(s), {args.dtype}, "
        f"batch {args.batch}, d_model {args.d_model}, {args.heads} heads, median of {args.repeats} steps "
        f"(models alternating), load average {os.getloadavg()[0]:.1f}, {time.time() - started:.0f} s in all\n"
    )
    header = f"{'model':<11} {'T':>5} {'wall s':>8} {'cpu s':>8} {'wall/ckcnn':>10} {'cpu/ckcnn':>9}  solver"
    print(header)
    print("-" * len(header))
    by_key = {(r["model"], r["length"]): r for r in results}
    for r in results:
        ck = by_key.get(("ckcnn", r["length"]))
        ratio = (
            f"{r['wall_median'] / ck['wall_median']:>10.2f} {r['cpu_median'] / ck['cpu_median']:>9.2f}"
            if ck
            else f"{'-':>10} {'-':>9}"
        )
        r["ratio_wall"] = r["wall_median"] / ck["wall_median"] if ck else None
        r["ratio_cpu"] = r["cpu_median"] / ck["cpu_median"] if ck else None
        print(
            f"{r['model']:<11} {r['length']:>5} {r['wall_median']:>8.3f} {r['cpu_median']:>8.3f} {ratio}  {r['solver']}"
        )
    if not args.no_ckcnn and 1000 in args.lengths:
        print(
            "\ngoal: CDE step / CKCNN step <= 2 at T = 1000: "
            + ", ".join(
                f"{name} {by_key[(name, 1000)]['ratio_wall']:.2f} (cpu {by_key[(name, 1000)]['ratio_cpu']:.2f})"
                for name in args.models
            )
        )
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        payload = dict(
            label=args.label,
            settings=dict(vars(args), torch=torch.__version__, cpu=cpu_name(), code=code_version()),
            results=results,
        )
        write_text_atomic(args.json, json.dumps(payload, indent=1))
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
