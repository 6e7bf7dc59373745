"""Training-step time and peak memory of fast weight RDE models: torchdiffeq reference vs the exact solver.

For every rule (Hebb, Oja, pre-Delta, post-Delta) and two shapes, one training step (forward, cross-entropy
loss, backward) of a one-layer ``FastWeightClassifier`` in "rde" form on a synthetic piecewise-constant
(log-signature window) control:

- EigenWorms-like: batch 32, 4,500 windows, 7 channels, d_model 128, 16 heads;
- Speech-like: batch 256, 161 windows, 21 channels, d_model 80, 4 heads;

with the reference ``SolverOptions(RK4())`` (one rk4 step per window, the paper's steps; checkpointed gradients)
and with ``SolverOptions(Exact())``. Also the adjoint reference's peak memory at 500 and 4,000
windows (post-Delta, EigenWorms width). Each configuration runs in a fresh subprocess, so that its peak
resident memory (``ru_maxrss``, whole process: Python, torch, data and model included) is its own; torch
uses one thread. The reference takes about a minute per step at the EigenWorms shape, so one step is timed
per configuration, and the first speed-up column compares it with the exact path's first step (one-time costs
of a fresh process included). The exact path then runs ``--steps`` − 1 more steps in the same process; the
second speed-up column compares the reference's step with their median (steady-state training). Ratios printed
at the end are from this one run.

    python benchmarks/solvers.py                      # everything (about 10 minutes on one core)
    python benchmarks/solvers.py --shapes speech --rules delta-post
    python benchmarks/solvers.py --worker eigenworms delta exact   # one configuration, JSON out

``--defaults MODEL[,MODEL...]`` measures instead what a user gets from the registry: one training step (forward,
cross-entropy, backward, Adam step) of ``create_model(MODEL, inputs, classes)`` with no solver options (the
default method ``Auto()``) against the same model forced onto rk4 (``solver=RK4()``), on a batch of
``--batch`` series of ``--points`` irregularly sampled points (3 channels, a random walk) read through the
registry's control; both models in one process, one thread, steps interleaved (auto, rk4, auto, ...) so that
both see the same machine; the method each takes (``resolve_method``), the median step times and their ratio
are printed:

    python benchmarks/solvers.py --defaults delta-rde --points 1000 --batch 32
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

from neuralde_seq.files import write_text_atomic

SHAPES = {
    "eigenworms": dict(batch=32, windows=4500, channels=7, d_model=128, heads=16, classes=5),
    "speech": dict(batch=256, windows=161, channels=21, d_model=80, heads=4, classes=10),
}
RULES = ("hebb", "oja", "delta", "delta-post")
PATHS = ("reference", "exact")


def worker(shape: str, rule: str, path: str, windows: int | None, dtype: str, steps: int = 1) -> dict:
    import torch

    from neuralde_seq.controls import Control
    from neuralde_seq.models import FastWeightClassifier
    from neuralde_seq.solvers import RK4, Exact, SolverOptions

    torch.set_num_threads(1)
    cfg = dict(SHAPES[shape])
    if windows is not None:
        cfg["windows"] = windows
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(0)
    B, N, C = cfg["batch"], cfg["windows"], cfg["channels"]
    # Log-signature-like rates: increments of a scaled random walk per window; zero past the last window.
    coeffs = torch.zeros(B, N + 1, 4, C, dtype=dt)
    coeffs[:, :N, 0] = (0.3 * torch.randn(B, N, C, generator=g)).to(dt)
    control = Control(
        torch.arange(N + 1, dtype=dt), coeffs, torch.full((B,), N, dtype=torch.long), piecewise_constant=True
    )
    labels = torch.randint(0, cfg["classes"], (B,), generator=g)
    solver = SolverOptions(RK4()) if path == "reference" else SolverOptions(Exact())
    torch.manual_seed(0)
    model = FastWeightClassifier(
        C, cfg["classes"], rule=rule, form="rde", d_model=cfg["d_model"], n_heads=cfg["heads"], solver=solver
    ).to(dt)
    later = []  # training-step times after the first (the exact path only: the reference takes a minute)
    for step in range(1 if path == "reference" else steps):
        model.zero_grad()
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(control), labels)
        forward = time.perf_counter() - start
        loss.backward()
        if step == 0:
            total, first_forward = time.perf_counter() - start, forward
            grad_norm = float(sum(p.grad.pow(2).sum() for p in model.parameters() if p.grad is not None) ** 0.5)
            first_loss = float(loss.detach())
        else:
            later.append(time.perf_counter() - start)
    return dict(
        shape=shape,
        rule=rule,
        path=path,
        windows=N,
        seconds=total,
        forward_seconds=first_forward,
        later_median_seconds=statistics.median(later) if later else None,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        loss=first_loss,
        grad_norm=grad_norm,
    )


def compare_defaults(name: str, points: int, batch: int, steps: int, dtype: str) -> dict:
    """Median training-step seconds of the registry model ``name`` with the default solver (auto) and forced
    rk4, interleaved in this process on one thread (module docstring), and the method each solve took."""
    import torch

    from neuralde_seq.models import create_model, model_inputs
    from neuralde_seq.solvers import RK4

    torch.set_num_threads(1)
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(0)
    times = torch.cumsum(0.5 + torch.rand(batch, points, generator=g, dtype=torch.float64), dim=1).to(dt)
    values = torch.randn(batch, points, 3, generator=g, dtype=torch.float64).cumsum(1).div(points**0.5).to(dt)
    labels = torch.randint(0, 4, (batch,), generator=g)
    # every series has its own times: the control runs over observation index, as the estimators build it
    inputs = model_inputs(name, times, values, parametrization="index")
    models, optimisers, seconds, methods = {}, {}, {}, {}
    for label, solver in (("auto", None), ("rk4", RK4())):
        torch.manual_seed(0)
        models[label] = create_model(name, inputs, 4, solver=solver).to(dt)
        optimisers[label] = torch.optim.Adam(models[label].parameters(), lr=1e-3)
        resolve = getattr(models[label], "resolve_method", None)
        methods[label] = resolve(inputs).name if resolve else None
        seconds[label] = []
    losses = {}
    for step in range(steps + 1):  # step 0 warms up (first-call allocations), not timed
        for label, model in models.items():
            start = time.perf_counter()
            optimisers[label].zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            loss.backward()
            optimisers[label].step()
            if step:
                seconds[label].append(time.perf_counter() - start)
            else:
                losses[label] = float(loss.detach())
    median = {label: statistics.median(values) for label, values in seconds.items()}
    return dict(
        model=name,
        points=points,
        batch=batch,
        windows_or_knots=int(inputs.knots.shape[0]) - 1 if hasattr(inputs, "knots") else None,
        dtype=dtype,
        steps=steps,
        methods=methods,
        median_seconds=median,
        all_seconds=seconds,
        first_losses=losses,
        rk4_over_auto=median["rk4"] / median["auto"],
    )


def run_one(shape, rule, path, windows=None, dtype="float32", steps=1, timeout=1800) -> dict:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        shape,
        rule,
        path,
        "--dtype",
        dtype,
        "--steps",
        str(steps),
    ]
    if windows is not None:
        command += ["--windows", str(windows)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", nargs=3, metavar=("SHAPE", "RULE", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--windows", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--shapes", default="eigenworms,speech", help="comma-separated: eigenworms, speech")
    parser.add_argument("--rules", default=",".join(RULES), help="comma-separated rules (default: all)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--no-adjoint-memory", action="store_true", help="skip the T=500 vs T=4,000 measurement")
    parser.add_argument(
        "--steps",
        type=int,
        default=4,
        help="training steps of the exact path per configuration: the first is the timed one (as the "
        "reference's single step); the median of the others is printed too (default 4)",
    )
    parser.add_argument("--json", default=None, help="also write all measurements to this file")
    parser.add_argument(
        "--defaults",
        default=None,
        metavar="MODELS",
        help="comma-separated registry models: time a training step with the default solver (auto) "
        "against forced rk4 instead (module docstring)",
    )
    parser.add_argument("--points", type=int, default=1000, help="--defaults: points per series (default 1000)")
    parser.add_argument("--batch", type=int, default=32, help="--defaults: batch size (default 32)")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.windows, args.dtype, args.steps)))
        return 0
    if args.defaults:
        print(
            f"# torch threads 1, {platform.processor() or platform.machine()}, python {platform.python_version()}, "
            f"{args.dtype}; training step (forward, loss, backward, Adam) of the registry model with no options, "
            f"default solver vs forced rk4, {args.steps} timed steps each, interleaved",
            flush=True,
        )
        results = []
        print(
            f"{'model':<16}{'points':>7}{'batch':>6}{'windows':>8}{'auto takes':>12}{'auto s':>9}{'rk4 s':>9}"
            f"{'rk4 / auto':>12}"
        )
        for name in (n for n in args.defaults.split(",") if n):
            r = compare_defaults(name, args.points, args.batch, args.steps, args.dtype)
            results.append(r)
            print(
                f"{name:<16}{args.points:>7}{args.batch:>6}{r['windows_or_knots'] or '-':>8}"
                f"{r['methods']['auto'] or 'rk4':>12}{r['median_seconds']['auto']:>9.3f}"
                f"{r['median_seconds']['rk4']:>9.3f}{r['rk4_over_auto']:>11.1f}x",
                flush=True,
            )
        if args.json:
            payload = results
            write_text_atomic(args.json, json.dumps(payload, indent=1))
        return 0

    shapes = [s for s in args.shapes.split(",") if s]
    rules = [r for r in args.rules.split(",") if r]
    for s in shapes:
        if s not in SHAPES:
            parser.error(f"unknown shape {s!r}; known: {', '.join(SHAPES)}")
    for r in rules:
        if r not in RULES:
            parser.error(f"unknown rule {r!r}; known: {', '.join(RULES)}")
    print(
        f"# torch threads 1, {platform.processor() or platform.machine()}, python {platform.python_version()}, "
        f"{args.dtype}; one training step (forward + backward) per configuration, each in a fresh process",
        flush=True,
    )
    results = []
    header = (
        f"{'shape':<11}{'rule':<11}{'ref s':>9}{'exact s':>9}{'speed-up':>10}{'later s':>9}{'speed-up':>10}"
        f"{'ref MB':>9}{'exact MB':>10}{'mem ratio':>11}{'|loss diff|':>13}{'ref |grad|':>12}{'exact |grad|':>14}"
    )
    rows = []
    for shape in shapes:
        for rule in rules:
            measured = {path: run_one(shape, rule, path, dtype=args.dtype, steps=args.steps) for path in PATHS}
            results += measured.values()
            ref, exact = measured["reference"], measured["exact"]
            later = exact["later_median_seconds"]
            later_columns = f"{later:>9.3f}{ref['seconds'] / later:>9.1f}x" if later else f"{'-':>9}{'-':>10}"
            row = (
                f"{shape:<11}{rule:<11}{ref['seconds']:>9.2f}{exact['seconds']:>9.3f}"
                f"{ref['seconds'] / exact['seconds']:>9.1f}x{later_columns}"
                f"{ref['peak_rss_mb']:>9.0f}{exact['peak_rss_mb']:>10.0f}"
                f"{exact['peak_rss_mb'] / ref['peak_rss_mb']:>11.2f}{abs(ref['loss'] - exact['loss']):>13.2e}"
                f"{ref['grad_norm']:>12.4g}{exact['grad_norm']:>14.4g}"
            )
            rows.append(row)
            print(header if len(rows) == 1 else "", row, sep="\n" if len(rows) == 1 else "", flush=True)
    print("\n" + header)
    print("\n".join(rows))
    if not args.no_adjoint_memory:
        short = run_one("eigenworms", "delta-post", "reference", windows=500, dtype=args.dtype)
        long = run_one("eigenworms", "delta-post", "reference", windows=4000, dtype=args.dtype)
        results += [short, long]
        print(
            f"\nadjoint reference (delta-post, eigenworms width): peak RSS {short['peak_rss_mb']:.0f} MB at T=500, "
            f"{long['peak_rss_mb']:.0f} MB at T=4000: ratio {long['peak_rss_mb'] / short['peak_rss_mb']:.2f} "
            f"(step {short['seconds']:.1f} s vs {long['seconds']:.1f} s)"
        )
    if args.json:
        payload = results
        write_text_atomic(args.json, json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
