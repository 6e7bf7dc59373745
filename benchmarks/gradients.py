"""Gradients at length: continuous adjoint vs plain backprop vs checkpointed backprop, per model and length.

For each model (default ``delta-cde`` and ``ncde``; also ``oja-cde``, ``gru-ode``, any registered model that
reads a control and takes a solver), each length T (default 500, 1000, 4000 knots) and each gradient method of
:class:`neuralde_seq.SolverOptions` (`Adjoint()`, `Backprop()`, `Checkpoint()`; ``--methods adjoint backprop
checkpoint``), one training
loss's forward + backward pass (cross-entropy on random labels, gradients of every parameter) is measured:

- **gradient error**: ‖g_method − g_backprop‖ / ‖g_backprop‖ over all parameter gradients concatenated,
  computed in ``--dtype`` (default float64). "backprop" is the reference: the exact gradient of the discrete
  rk4 solve;
- **peak memory** of the forward + backward pass, each (method, T) in ``--memory-repeats`` (3) fresh processes,
  median reported (``--device cpu``:
  peak resident set size during the pass minus the resident set size just before it, i.e. ``VmHWM`` after
  resetting it through ``/proc/self/clear_refs``, after a warm-up pass at T = 32 and ``malloc_trim``; the whole
  process's memory, so tensors autograd keeps, tensors the checkpoint recomputes in the backward pass,
  temporaries, the autograd graph's nodes and allocator slack all count; ``ru_maxrss`` before/after where
  ``clear_refs`` is not writable.
  ``--device cuda``: ``torch.cuda.max_memory_allocated`` minus the memory allocated before the pass);
- **time**: median (and min) of ``--repeats`` forward + backward passes, wall clock and process CPU time, with
  ``torch.set_num_threads(--threads)`` (default 1). All methods of one (model, T) run in the same process, in
  alternation (adjoint, backprop, checkpoint, adjoint, ...), after one untimed pass each, so that the ratios
  between methods compare passes taken side by side on a shared machine.

Inputs: batch ``--batch`` (8), Hermite cubic control with a time channel (the registry's default control for
these models) on the index grid (``parametrization="index"``: knot i at s = i, so rk4 takes one step of 1 per
knot, the papers' setting), times uniform in [0, 1], 3 value channels of a Gaussian random walk (increments of
standard deviation 1/√T), every sample T knots long. Model sizes: ``d_model`` 32 and 4 heads for the fast
weight models, the registry defaults for the others (NCDE hidden 32, width 64, depth 2; GRU-ODE hidden 32).

The continuous adjoint's reconstruction check (``Adjoint.check_every``, every 100th solve, the first
included) runs in the memory process's pass (untimed; its warning is recorded in the JSON) and in the timing
process's untimed first pass only.

At the end the script prints, for the checkpointed gradient, the memory ratio peak(T_max) / peak(T_min)
(target <= 3 for 500 → 4000) and the time ratio checkpoint / backprop at each T (target <= 2.5).

    python benchmarks/gradients.py                                  # delta-cde and ncde, T = 500 1000 4000
    python benchmarks/gradients.py --models delta-cde ncde oja-cde gru-ode --json results/benchmarks/gradients.json
    python benchmarks/gradients.py --lengths 200 400 --repeats 3 --device cuda
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

from machine import code_version, cpu_name, reset_peak_rss

from neuralde_seq.files import write_text_atomic

METHODS = ("adjoint", "backprop", "checkpoint")
FAST_WEIGHT_SIZE = dict(d_model=32, n_heads=4)
WARMUP_LENGTH = 32
NUM_CLASSES = 4


# ---------------------------------------------------------------------------------------------------
# one configuration (runs in a child process)


def _setup(name: str, length: int, batch: int, dtype: str, device: str, threads: int, seed: int = 0):
    """(inputs, labels, model factory) for ``name`` at length ``length``; every model starts from the same weights."""
    import torch

    from neuralde_seq import create_model, model_inputs, parse_solver
    from neuralde_seq.models import model_entry

    torch.set_num_threads(threads)
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(seed)
    times = torch.linspace(0, 1, length, dtype=torch.float64).repeat(batch, 1)
    values = torch.cumsum(torch.randn(batch, length, 3, generator=g, dtype=torch.float64), 1) / math.sqrt(length)
    inputs = model_inputs(name, times.to(dt), values.to(dt), parametrization="index").to(device)
    labels = torch.randint(0, NUM_CLASSES, (batch,), generator=g).to(device)
    sizes = FAST_WEIGHT_SIZE if model_entry(name).constructor.__name__ == "FastWeightClassifier" else {}

    def model(gradient: str):
        torch.manual_seed(seed)
        # the gradient method's name comes from the command line (--methods): read by the one parser of the edges
        return create_model(
            name, inputs, NUM_CLASSES, solver=parse_solver({"method": "rk4", "gradient": gradient}), **sizes
        ).to(device=device, dtype=dt)

    return inputs, labels, model


def _pass(model, inputs, labels):
    """One forward + backward pass; returns the loss."""
    import torch

    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(inputs), labels)
    loss.backward()
    return float(loss.detach())


def _gradient(model):
    import torch

    return torch.cat(
        [
            p.grad.detach().flatten() if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype, device=p.device)
            for p in model.parameters()
        ]
    )


def _rss_kib() -> dict:
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                key, value = line.split(":")
                values[key] = int(value.split()[0])
    return values


def _trim():
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def memory_worker(name, length, method, batch, dtype, device, threads) -> dict:
    """Peak memory of one forward + backward pass in this (fresh) process."""
    import resource

    import torch

    from neuralde_seq.solvers import AdjointReconstructionWarning

    # Warm-up at a short length (its own model): code pages, lazily initialised libraries and kernels are in
    # memory before the measurement.
    warm_inputs, warm_labels, warm_model = _setup(name, WARMUP_LENGTH, batch, dtype, device, threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _pass(warm_model(method), warm_inputs, warm_labels)
    del warm_inputs, warm_labels, warm_model
    inputs, labels, make = _setup(name, length, batch, dtype, device, threads)
    model = make(method)
    result = dict(model=name, length=length, method=method, batch=batch, dtype=dtype, device=device)
    cuda = inputs.knots.is_cuda if hasattr(inputs, "knots") else device.startswith("cuda")
    _trim()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        resettable = reset_peak_rss()
        before_rss = _rss_kib()["VmRSS"]
        before_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AdjointReconstructionWarning)
        loss = _pass(model, inputs, labels)
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        result["memory_method"] = "torch.cuda.max_memory_allocated - memory_allocated before the pass"
    elif resettable:
        peak = (_rss_kib()["VmHWM"] - before_rss) * 1024
        result["memory_method"] = "peak RSS (VmHWM, reset via /proc/self/clear_refs) - RSS before the pass"
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_maxrss) * 1024
        result["memory_method"] = "ru_maxrss after - ru_maxrss before the pass (lower bound)"
    result.update(
        peak_bytes=int(peak),
        loss=loss,
        warnings=[str(w.message) for w in caught if issubclass(w.category, AdjointReconstructionWarning)],
    )
    return result


def time_worker(name, length, methods, batch, dtype, device, threads, repeats) -> dict:
    """Times of every method, passes alternating between methods; gradient errors against backprop."""
    import torch

    inputs, labels, make = _setup(name, length, batch, dtype, device, threads)
    models = {method: make(method) for method in methods}
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    result = dict(
        model=name,
        length=length,
        batch=batch,
        dtype=dtype,
        device=device,
        threads=threads,
        repeats=repeats,
        parameters=sum(p.numel() for p in models[methods[0]].parameters()),
        methods={},
    )
    gradients = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method, model in models.items():  # untimed first pass (adjoint check, allocator warm-up)
            loss = _pass(model, inputs, labels)
            gradients[method] = _gradient(model)
            result["methods"][method] = dict(loss=loss, wall=[], cpu=[])
        for _ in range(repeats):
            for method, model in models.items():
                sync()
                wall, cpu = time.perf_counter(), time.process_time()
                _pass(model, inputs, labels)
                sync()
                result["methods"][method]["wall"].append(time.perf_counter() - wall)
                result["methods"][method]["cpu"].append(time.process_time() - cpu)
    reference = gradients.get("backprop")
    for method, entry in result["methods"].items():
        g = gradients[method]
        entry["grad_norm"] = float(g.norm())
        entry["finite"] = bool(torch.isfinite(g).all())
        entry["grad_error"] = float((g - reference).norm() / reference.norm()) if reference is not None else None
        for key in ("wall", "cpu"):
            entry[f"{key}_median"] = statistics.median(entry[key])
            entry[f"{key}_min"] = min(entry[key])
    return result


# ---------------------------------------------------------------------------------------------------
# the driver


def _run_child(args: list[str], timeout: float) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        command = [sys.executable, os.path.abspath(__file__), *args, "--result", path]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def _mib(value: float) -> str:
    return f"{value / 2**20:.1f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["delta-cde", "ncde"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[500, 1000, 4000])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per method (median reported)")
    parser.add_argument(
        "--memory-repeats",
        type=int,
        default=3,
        help="fresh processes per (method, T) measuring peak memory (median reported)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default="results/benchmarks/gradients.json", help="'' to skip")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per child process")
    parser.add_argument("--memory-worker", nargs=3, metavar=("MODEL", "T", "METHOD"), help=argparse.SUPPRESS)
    parser.add_argument("--time-worker", nargs=2, metavar=("MODEL", "T"), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    common = (args.batch, args.dtype, args.device, args.threads)

    if args.memory_worker or args.time_worker:
        if args.memory_worker:
            name, length, method = args.memory_worker
            result = memory_worker(name, int(length), method, *common)
        else:
            name, length = args.time_worker
            result = time_worker(name, int(length), tuple(args.methods), *common, args.repeats)
        write_text_atomic(args.result, json.dumps(result))
        return 0

    import torch
    from tqdm import tqdm

    if "backprop" not in args.methods:
        parser.error("--methods must include backprop (the reference of the gradient error)")
    jobs = [
        (name, length, kind)
        for name in args.models
        for length in args.lengths
        for kind in ("time", *(f"memory:{m}" for _ in range(args.memory_repeats) for m in args.methods))
    ]
    flags = [
        "--batch",
        str(args.batch),
        "--dtype",
        args.dtype,
        "--device",
        args.device,
        "--threads",
        str(args.threads),
        "--repeats",
        str(args.repeats),
        "--methods",
        *args.methods,
    ]
    results = {}
    started = time.time()
    for name, length, kind in tqdm(jobs, desc="gradients", disable=args.no_progress, file=sys.stderr):
        if kind == "time":
            out = _run_child(["--time-worker", name, str(length), *flags], args.timeout)
            for method, entry in out.pop("methods").items():
                results.setdefault((name, length, method), {}).update(entry, **out)
        else:
            method = kind.split(":")[1]
            out = _run_child(["--memory-worker", name, str(length), method, *flags], args.timeout)
            entry = results.setdefault((name, length, method), {})
            entry.setdefault("peak_bytes_all", []).append(out["peak_bytes"])
            entry.update(
                peak_bytes=statistics.median(entry["peak_bytes_all"]),
                memory_method=out["memory_method"],
                memory_loss=out["loss"],
                warnings=out["warnings"],
            )

    memory_method = next(iter(results.values()))["memory_method"]
    print(
        f"# torch {torch.__version__}, python {platform.python_version()}, {cpu_name()}, device {args.device}, "
        f"{args.threads} thread(s), {args.dtype}, batch {args.batch}, rk4 one step per knot, "
        f"{args.repeats} timed passes per method (alternating), load average {os.getloadavg()[0]:.1f}, "
        f"{time.time() - started:.0f} s in all"
    )
    print(f"# memory: {memory_method}, median of {args.memory_repeats} fresh processes per (method, T)")
    print(f"# code: {code_version()}")
    print(f"# grad error: |g - g_backprop| / |g_backprop| over all parameter gradients ({args.dtype})\n")
    header = (
        f"{'model':<10} {'T':>5} {'method':<10} {'grad error':>11} {'peak MiB':>9} {'wall s':>8} "
        f"{'cpu s':>8} {'wall/bp':>8} {'cpu/bp':>7}  loss"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for (name, length, method), r in results.items():
        bp = results[(name, length, "backprop")]
        error = r.get("grad_error")
        error_text = "nan" if error is None or not math.isfinite(error) else f"{error:.2e}"
        print(
            f"{name:<10} {length:>5} {method:<10} {error_text:>11} {_mib(r['peak_bytes']):>9} "
            f"{r['wall_median']:>8.3f} {r['cpu_median']:>8.3f} {r['wall_median'] / bp['wall_median']:>8.2f} "
            f"{r['cpu_median'] / bp['cpu_median']:>7.2f}  {r['loss']:.6g}"
            + ("  (adjoint check warned)" if r.get("warnings") else "")
        )
        rows.append(
            dict(
                model=name, length=length, method=method, **{k: v for k, v in r.items() if k not in ("model", "length")}
            )
        )
    summary = []
    if "checkpoint" in args.methods:
        print("\ncheckpoint (targets: memory(T_max)/memory(T_min) <= 3 for 500 -> 4000, time / backprop <= 2.5):")
        low, high = min(args.lengths), max(args.lengths)
        for name in args.models:
            lo, hi = results[(name, low, "checkpoint")], results[(name, high, "checkpoint")]
            ratio = hi["peak_bytes"] / lo["peak_bytes"] if lo["peak_bytes"] > 0 else float("nan")
            bp_ratio = (
                results[(name, high, "backprop")]["peak_bytes"] / results[(name, low, "backprop")]["peak_bytes"]
                if results[(name, low, "backprop")]["peak_bytes"] > 0
                else float("nan")
            )
            times = {
                length: (
                    results[(name, length, "checkpoint")]["wall_median"]
                    / results[(name, length, "backprop")]["wall_median"],
                    results[(name, length, "checkpoint")]["cpu_median"]
                    / results[(name, length, "backprop")]["cpu_median"],
                )
                for length in args.lengths
            }
            print(
                f"  {name}: memory T={high} / T={low}: checkpoint {ratio:.2f} (backprop {bp_ratio:.2f}); "
                "time checkpoint / backprop (wall, cpu): "
                + ", ".join(f"T={length} {w:.2f}, {c:.2f}" for length, (w, c) in times.items())
            )
            summary.append(
                dict(
                    model=name,
                    memory_ratio=ratio,
                    memory_ratio_backprop=bp_ratio,
                    low=low,
                    high=high,
                    time_ratio_wall={str(k): v[0] for k, v in times.items()},
                    time_ratio_cpu={str(k): v[1] for k, v in times.items()},
                )
            )
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        payload = dict(
            settings=dict(
                vars(args),
                torch=torch.__version__,
                python=platform.python_version(),
                cpu=cpu_name(),
                memory_method=memory_method,
                code=code_version(),
            ),
            rows=rows,
            checkpoint_summary=summary,
        )
        write_text_atomic(args.json, json.dumps(payload, indent=1))
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
