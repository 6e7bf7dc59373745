"""The GPU suite in one command (issue 27): the CUDA tests, then the time of one training step of every headline
model, written as it goes to ``results.json`` and ``results.md`` under ``--out``.

    PYTHONPATH=. python benchmarks/gpu_suite.py --out results/gpu            # CUDA, float32, stops within 480 s
    python benchmarks/gpu_suite.py --smoke --device cpu --out /tmp/gpu_smoke  # tiny sizes, the same code (CI)

1. Tests: ``pytest -m cuda -q tests/test_cuda.py`` in a subprocess, its output in ``pytest.log``; the counts of its
   summary line (passed, failed, skipped, xfailed, ...) go to the JSON. Without CUDA they skip. ``--no-pytest``
   leaves them out.
2. Timings: one training step = forward, cross-entropy loss, backward, ``torch.optim.Adam`` step, on one batch of
   a Gaussian random walk over times evenly spaced in [0, 1] (the models' controls built once, outside the step,
   as in training). Two shapes: "T1000" (batch 32, 1,000 points, 3 channels, 4 classes; the registry's defaults,
   as benchmarks/cde_step.py) and "eigenworms" (batch 32, 17,984 points, 6 channels, 5 classes; the authors'
   EigenWorms settings where docs/performance.md uses them: Log-NCDE and the linear NCDEs on windows of 12 steps,
   hidden 128, Heun for Log-NCDE and NCDE; the CT-FWP's depth-1 windows of 4 steps, d_model 128, 16 heads, d_ff 64).
   Every row: ``--warmup`` untimed steps, then ``--repeats`` timed steps (``torch.cuda.synchronize()`` before and
   after each), the median reported; the ratio to CKCNN's median at the same shape; the peak of
   ``torch.cuda.max_memory_allocated`` over the timed steps (reset before them; None on the CPU). Variants beside
   the defaults: the exact path against rk4 (delta-rde), the exact path's sequential steps against its chunked
   WY / UT blocks (``Exact(recurrence="chunked")``) and rk4's composed affine step maps against its per-step loop
   (``RK4(affine_steps=False)``), parallel against sequential scans (the linear NCDEs),
   checkpointed against backpropagated gradients (delta-cde, ncde), and the per-step loops' compiled steps (the
   default on CUDA, ``compile="auto"``) against the eager loop (``compile=False``: ncde, log-ncde, gru-ode,
   delta-post-cde, delta-cde's per-step loop; issue 38). After them, every registry model (`MODEL_NAMES`) not yet
   timed at a shape gets a row with its registry defaults there, so that every model is measured at both shapes.
   Where a published time is the target to beat (`ANCHORS`: the authors' own code on their GPU), the row carries it
   and its ratio.
3. Time limit: the run stops itself within ``--time-limit-s`` (default 480 s, counted from the script's start).
   Before each row it checks the time left against a conservative estimate of the row (its time at the other
   shape scaled by the number of steps, else the slowest step seen so far) and skips it with the reason recorded
   where it does not fit; after the warm-up it runs only as many timed steps as fit; an alarm at the limit stops
   whatever runs then (recorded as the row's error) and the rest is skipped. The rows come in order of
   importance, so the most important are measured first.
4. Robustness: an error in one row (out of memory, a failure of the model) is recorded in that row (its text) and
   the suite goes on. The files are rewritten after every row, so a killed run leaves what it measured (rows not
   reached are "pending").

5. Random features (issue 35): after the rows, the random-feature transform (`RandomFeatures` with its defaults,
   fitted on the same series) on ``--device`` against aeon's MiniRocket transform on one CPU thread (numba compiled
   by an untimed warm-up), both over ``RANDOM_FEATURE_SHAPE`` (256 series of 1,000 points, 1 channel), in points per
   second (series x points / seconds of the transform, median of ``--repeats``), with their ratio; without aeon
   only the first. On the CPU the transform is the fused kernel; on a GPU every state by the parallel scan.

``--smoke`` runs the same code at tiny sizes (batch 4, 24 and 32 points, one warm-up and one timed step).
``--rows`` keeps the rows whose label contains one of the given strings; ``--headline-only`` leaves out the rows
that only cover the other registry models.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports: the time limit counts them too

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run by path from a checkout, without installing the package
    sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import code_version, cpu_name  # noqa: E402

from neuralde_seq.controls import LogSignature  # noqa: E402
from neuralde_seq.files import write_text_atomic  # noqa: E402

REFERENCE = "ckcnn"
# Seconds kept back at the end for writing the files.
WRITE_MARGIN_S = 3.0


@dataclasses.dataclass(frozen=True)
class Shape:
    """A batch shape: ``batch`` samples of ``length`` points with ``channels`` value channels, ``classes``
    classes."""

    name: str
    batch: int
    length: int
    channels: int
    classes: int


SHAPES = {"T1000": Shape("T1000", 32, 1000, 3, 4), "eigenworms": Shape("eigenworms", 32, 17984, 6, 5)}
SMOKE_SHAPES = {"T1000": Shape("T1000", 4, 24, 3, 4), "eigenworms": Shape("eigenworms", 4, 32, 6, 5)}
# Published seconds per training step to beat (issue 38), by (model, shape): (seconds, where they come from).
ANCHORS = {
    ("log-ncde", "eigenworms"): (
        2.352,
        "Log-NCDE, the authors' JAX code on EigenWorms: 2,352 s per 1,000 steps "
        "(Walker et al. 2024, memory_time_results)",
    ),
    ("ncde", "eigenworms"): (30.827, "NCDE on EigenWorms, the same file: 30,827 s per 1,000 steps"),
    ("slice-block", "eigenworms"): (
        0.0163,
        "block-diagonal SLiCE on EigenWorms: 16.3 s per 1,000 steps (Walker et al. 2025)",
    ),
    ("slice-block", "T1000"): (
        0.068,
        "block-diagonal SLiCE, average over the UEA sets: 68 s per 1,000 steps (Walker et al. 2025)",
    ),
}
# The random-feature transform against MiniRocket's (issue 35): series, points, channels, classes.
RANDOM_FEATURE_SHAPE = Shape("random-features", 256, 1000, 1, 4)
SMOKE_RANDOM_FEATURE_SHAPE = Shape("random-features", 8, 64, 1, 4)


@dataclasses.dataclass(frozen=True)
class Row:
    """One measurement: a registry model at a shape, with its control and model options.

    Attributes:
        model: the registry name.
        shape: a key of `SHAPES`.
        variant: what the row varies ("default", "rk4", "scan=parallel", "gradient=backprop", ...).
        control: ``model_inputs`` overrides of the registry's control options.
        options: ``create_model`` overrides.
        solver: the `SolverOptions` or method object of the row (`neuralde_seq.solvers`), or None for the model's
            default.
    """

    model: str
    shape: str
    variant: str = "default"
    control: dict = dataclasses.field(default_factory=dict)
    options: dict = dataclasses.field(default_factory=dict)
    solver: object = None

    @property
    def label(self) -> str:
        return f"{self.model} {self.variant} @{self.shape}"


# The authors' EigenWorms settings (docs/performance.md, benchmarks/linear_cdes.py).
_W12_D2 = dict(interpolation=LogSignature(depth=2, step=12), time_channel=True)
_W12_D1 = dict(interpolation=LogSignature(depth=1, step=12), time_channel=True)
_LOG_NCDE_EW = dict(hidden=128, width=32, depth=2, activation="silu")
_FWP_EW_WINDOWS = dict(depth=1, step=4, window_start_values=False)
_FWP_EW = dict(d_model=128, n_heads=16, d_ff=64)


def planned_rows(coverage: bool = True) -> list[Row]:
    """Every row, most important first: CKCNN and the CT-FWPs at 1,000 points (the issue's cost target), the
    EigenWorms rows that the field's GPU numbers are quoted at, then the other headline models and the variants,
    then (``coverage``) every registry model not yet timed at a shape, with its defaults (`coverage_rows`)."""
    rows = _headline_rows()
    return rows + coverage_rows(rows) if coverage else rows


def coverage_rows(rows: list[Row]) -> list[Row]:
    """A row with the registry's defaults for every model of `MODEL_NAMES` that ``rows`` do not time at a shape,
    in the registry's order, the 1,000-point shape first."""
    from neuralde_seq.models import MODEL_NAMES

    timed = {(row.model, row.shape) for row in rows}
    return [Row(name, shape) for shape in SHAPES for name in MODEL_NAMES if (name, shape) not in timed]


def _headline_rows() -> list[Row]:
    from neuralde_seq.solvers import RK4, Auto, Backprop, Exact, Heun2, SolverOptions

    T, E = "T1000", "eigenworms"
    chunked = Auto(exact=Exact(recurrence="chunked"))
    chunked_rows = [
        Row("delta-rde", E, "exact chunked", _FWP_EW_WINDOWS, _FWP_EW, chunked),
        Row("delta-rde", T, "exact chunked", solver=chunked),
    ]
    # The fast weight recurrences one step after the other against the parallel prefix scan (the ``scan`` of RK4
    # and Exact; "auto", the default rows, takes the parallel scan on a GPU and the sequential loop on a CPU).
    scanned = lambda scan, **exact: Auto(exact=Exact(scan=scan, **exact), fallback=RK4(scan=scan))  # noqa: E731
    scans = [
        row
        for scan in ("sequential", "parallel")
        for row in (
            Row("delta-cde", T, f"scan={scan}", solver=scanned(scan)),
            Row("hebb-cde", T, f"scan={scan}", solver=scanned(scan)),
            Row("delta-rde", T, f"exact scan={scan}", solver=Exact(scan=scan)),
            Row("delta-rde", T, f"exact chunked scan={scan}", solver=scanned(scan, recurrence="chunked")),
            Row("delta-rde", E, f"exact scan={scan}", _FWP_EW_WINDOWS, _FWP_EW, Exact(scan=scan)),
            Row(
                "delta-rde",
                E,
                f"exact chunked scan={scan}",
                _FWP_EW_WINDOWS,
                _FWP_EW,
                scanned(scan, recurrence="chunked"),
            ),
            Row("delta-cde", E, f"scan={scan}", solver=scanned(scan)),
        )
    ]
    per_step = [
        Row("delta-cde", T, "rk4 per-step", solver=RK4(affine_steps=False)),
        Row("delta-cde", T, "rk4 per-step compile=off", solver=RK4(affine_steps=False, compile=False)),
    ]
    # The per-step loops of neural fields: their compiled steps (the default on CUDA) against the eager loop
    # (issue 38).
    ncde_ew = dict(hidden=128, width=128, depth=3)
    eager_t1000 = [
        Row("ncde", T, "compile=off", solver=RK4(compile=False)),
        Row("log-ncde", T, "compile=off", solver=RK4(compile=False)),
        Row("gru-ode", T),
        Row("gru-ode", T, "compile=off", solver=RK4(compile=False)),
        Row("delta-post-cde", T),
        Row("delta-post-cde", T, "compile=off", solver=RK4(compile=False)),
    ]
    return [
        Row("ckcnn", T),
        Row("delta-cde", T),
        Row("hebb-cde", T),
        Row("delta-rde", T, "exact"),
        Row("ckcnn", E),
        Row("delta-rde", E, "exact", _FWP_EW_WINDOWS, _FWP_EW),
        *chunked_rows,
        *scans,
        Row("log-ncde", E, "heun2", _W12_D2, _LOG_NCDE_EW, Heun2()),
        Row("log-ncde", E, "heun2 compile=off", _W12_D2, _LOG_NCDE_EW, Heun2(compile=False)),
        Row(
            "slice-block", E, "scan=parallel", _W12_D2, dict(hidden=128, block_size=4, readout="mean", scan="parallel")
        ),
        Row(
            "slice-block",
            E,
            "scan=sequential",
            _W12_D2,
            dict(hidden=128, block_size=4, readout="mean", scan="sequential"),
        ),
        Row("slice-diag", E, "scan=parallel", _W12_D1, dict(hidden=128, readout="mean", scan="parallel")),
        Row("slice-diag", E, "scan=sequential", _W12_D1, dict(hidden=128, readout="mean", scan="sequential")),
        Row("delta-rde", T, "rk4", solver=RK4()),
        *per_step,
        Row("ncde", T),
        Row("log-ncde", T),
        *eager_t1000,
        Row("slice-block", T, "scan=parallel", options=dict(scan="parallel")),
        Row("slice-block", T, "scan=sequential", options=dict(scan="sequential")),
        Row("slice-diag", T, "scan=parallel", options=dict(scan="parallel")),
        Row("slice-diag", T, "scan=sequential", options=dict(scan="sequential")),
        Row("gru-d", T),
        Row("delta-cde", T, "rk4 gradient=backprop", solver=SolverOptions(RK4(), gradient=Backprop())),
        Row("ncde", T, "gradient=backprop", solver=Backprop()),
        Row("gru-d", E),
        Row("delta-rde", E, "rk4", _FWP_EW_WINDOWS, _FWP_EW, RK4()),
        Row("delta-cde", E),
        Row("hebb-cde", E),
        Row("ncde", E, "heun2", options=ncde_ew, solver=Heun2()),
        Row("ncde", E, "heun2 compile=off", options=ncde_ew, solver=Heun2(compile=False)),
    ]


class TimeLimitReached(Exception):
    """The alarm at the time limit went off."""


def _on_alarm(signum, frame):
    raise TimeLimitReached("stopped at the time limit")


def _pieces(inputs) -> int | None:
    """Knot intervals (or windows) of a control; points of raw observations."""
    end_index = getattr(inputs, "end_index", None)
    if end_index is not None:
        return int(end_index.max())
    times = getattr(inputs, "times", None)
    return None if times is None else int(times.shape[1])


def _batch(shape: Shape, dtype, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    times = torch.linspace(0, 1, shape.length, dtype=torch.float64).repeat(shape.batch, 1)
    values = torch.cumsum(torch.randn(shape.batch, shape.length, shape.channels, generator=g, dtype=torch.float64), 1)
    values = values / shape.length**0.5
    labels = torch.randint(0, shape.classes, (shape.batch,), generator=g)
    return times.to(dtype), values.to(dtype), labels


class Suite:
    """The rows, their results and the output files."""

    def __init__(self, args, rows: list[Row]):
        import torch

        self.args, self.rows = args, rows
        self.device = torch.device(args.device)
        self.dtype = getattr(torch, args.dtype)
        self.shapes = SMOKE_SHAPES if args.smoke else SHAPES
        self.deadline = STARTED + args.time_limit_s
        self.results = [
            dict(
                label=row.label,
                model=row.model,
                shape=row.shape,
                variant=row.variant,
                status="pending",
                seconds=None,
                ratio_to_ckcnn=None,
                peak_mib=None,
                anchor_s=ANCHORS.get((row.model, row.shape), (None,))[0],
                ratio_to_anchor=None,
            )
            for row in rows
        ]
        cuda = self.device.type == "cuda"
        self.document = dict(
            settings=dict(
                device=str(self.device),
                device_name=torch.cuda.get_device_name(self.device) if cuda else cpu_name(),
                torch=torch.__version__,
                cuda=torch.version.cuda,
                python=platform.python_version(),
                code=code_version(),
                dtype=args.dtype,
                smoke=args.smoke,
                time_limit_s=args.time_limit_s,
                warmup=args.warmup,
                repeats=args.repeats,
                shapes={k: dataclasses.asdict(v) for k, v in self.shapes.items()},
                started=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(STARTED)),
                anchors={
                    f"{model} @{shape}": dict(seconds=seconds, source=source)
                    for (model, shape), (seconds, source) in ANCHORS.items()
                },
            ),
            pytest=dict(status="pending"),
            rows=self.results,
            random_features=dict(status="pending"),
            finished=False,
            elapsed_s=None,
        )

    # ------------------------------------------------------------------ output
    def left(self) -> float:
        return self.deadline - time.time()

    def write(self) -> None:
        self.document["elapsed_s"] = round(time.time() - STARTED, 2)
        for name, text in (
            ("results.json", json.dumps(self.document, indent=1, default=str)),
            ("results.md", self.markdown()),
        ):
            # the library's safe write: a fresh temporary file (O_EXCL, so a link planted at any name is never
            # followed), then renamed over the target (a killed run never leaves half a file)
            write_text_atomic(os.path.join(self.args.out, name), text)

    def markdown(self) -> str:
        s = self.document["settings"]
        p = self.document["pytest"]
        fmt = lambda v, spec: "-" if v is None else format(v, spec)
        lines = [
            f"# GPU suite: {s['device_name']} ({s['device']}), torch {s['torch']}, {s['dtype']}",
            "",
            f"Code: {s['code']}; started {s['started']}, {self.document['elapsed_s']} s so far"
            f"{' (finished)' if self.document['finished'] else ''}; smoke: {s['smoke']}; median of "
            f"{s['repeats']} timed steps after {s['warmup']} warm-up; time limit {s['time_limit_s']} s.",
            "",
            f"CUDA tests (`{p.get('command', 'pytest -m cuda')}`): {p.get('status')}"
            + (f", {p.get('counts')}" if p.get("counts") else "")
            + (f" ({p['reason']})" if p.get("reason") else ""),
            "",
            "| model | shape | variant | s / step | / CKCNN | anchor s / step | / anchor | peak MiB | pieces | "
            "status |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in self.results:
            note = r["status"]
            if r.get("reason"):
                note += f": {r['reason']}"
            if r.get("error"):
                note += f": {r['error'].splitlines()[-1][:160] if r['error'].strip() else ''}"
            lines.append(
                f"| {r['model']} | {r['shape']} | {r['variant']} | {fmt(r['seconds'], '.4g')} | "
                f"{fmt(r['ratio_to_ckcnn'], '.3g')} | {fmt(r['anchor_s'], '.4g')} | "
                f"{fmt(r['ratio_to_anchor'], '.3g')} | {fmt(r['peak_mib'], '.1f')} | "
                f"{fmt(r.get('pieces'), ',')} | {note.replace('|', '/')} |"
            )
        lines += [
            "",
            "Anchors (published seconds per training step, the authors' code on their GPU): "
            + "; ".join(f"{key}: {a['seconds']:g} s ({a['source']})" for key, a in s["anchors"].items())
            + ".",
        ]
        f = self.document["random_features"]
        lines += [
            "",
            "Random features (issue 35): the transform of "
            f"{f.get('series', '-')} series x {f.get('points', '-')} points, points per second "
            f"(median of {s['repeats']}): random features on {s['device']} {fmt(f.get('points_per_s'), ',.0f')}"
            f", MiniRocket on one CPU thread {fmt(f.get('minirocket_points_per_s'), ',.0f')}, ratio "
            f"{fmt(f.get('ratio_to_minirocket'), '.3g')} ({f.get('status')}"
            + (f": {f['reason']}" if f.get("reason") else "")
            + ").",
        ]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ random features
    def measure_random_features(self) -> None:
        """The random-feature transform's throughput on the device against MiniRocket's on one CPU thread."""
        import importlib.util

        import torch

        from neuralde_seq.random_features import RandomFeatures
        from neuralde_seq.training.threads import torch_threads

        shape = SMOKE_RANDOM_FEATURE_SHAPE if self.args.smoke else RANDOM_FEATURE_SHAPE
        result = self.document["random_features"]
        result.update(series=shape.batch, points=shape.length)
        times, values, _ = _batch(shape, self.dtype)
        times, values = times.to(self.device), values.to(self.device)
        features = RandomFeatures(seed=0).fit(times, values)
        cuda = self.device.type == "cuda"

        def timed(run) -> float:
            if cuda:
                torch.cuda.synchronize(self.device)
            begin = time.perf_counter()
            run()
            if cuda:
                torch.cuda.synchronize(self.device)
            return time.perf_counter() - begin

        transform = lambda: features.transform(times, values)
        timed(transform)  # warm-up: the kernel's compilation or load, CUDA's first launches
        seconds = statistics.median(timed(transform) for _ in range(self.args.repeats))
        result.update(
            seconds=seconds, points_per_s=shape.batch * shape.length / seconds, features=features.num_features_
        )
        if importlib.util.find_spec("aeon") is None:
            result.update(status="measured", reason="aeon not installed: no MiniRocket to compare with")
            return
        from aeon.transformations.collection.convolution_based import MiniRocket

        series = values.detach().cpu().double().numpy().transpose(0, 2, 1)  # (N, C, T), aeon's layout
        with torch_threads(1):
            MiniRocket(random_state=0, n_jobs=1).fit_transform(series[:4])  # numba's compilation, untimed
            rocket = MiniRocket(random_state=0, n_jobs=1).fit(series)
            rocket_seconds = statistics.median(
                timed(lambda: rocket.transform(series)) for _ in range(self.args.repeats)
            )
        result.update(
            minirocket_seconds=rocket_seconds,
            minirocket_points_per_s=shape.batch * shape.length / rocket_seconds,
            ratio_to_minirocket=rocket_seconds / seconds,
            status="measured",
        )

    # ------------------------------------------------------------------ tests
    def run_tests(self) -> None:
        record = self.document["pytest"]
        if self.args.no_pytest:
            record.update(status="skipped", reason="--no-pytest")
            return
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "cuda",
            "-q",
            "-p",
            "no:cacheprovider",
            os.path.join(REPO, "tests", "test_cuda.py"),
        ]
        record["command"] = "python -m pytest -m cuda -q tests/test_cuda.py"
        limit = min(self.args.pytest_timeout_s, self.left() - WRITE_MARGIN_S)
        if limit < 1:
            record.update(status="skipped", reason=f"time limit: {self.left():.0f} s left")
            return
        log = os.path.join(self.args.out, "pytest.log")
        start = time.time()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        print(f"[gpu_suite] {record['command']} (at most {limit:.0f} s)", flush=True)
        try:
            done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=limit)
            output, record["returncode"] = done.stdout + done.stderr, done.returncode
            record["status"] = "passed" if done.returncode in (0, 5) else "failed"  # 5: nothing collected
        except subprocess.TimeoutExpired as e:
            output = (e.stdout or "") + (e.stderr or "") if isinstance(e.stdout, str) else ""
            record.update(status="timeout", reason=f"killed after {limit:.0f} s")
        record["seconds"] = round(time.time() - start, 2)
        write_text_atomic(log, output)  # a new file: a link planted at the name is replaced, never followed
        record["log"] = "pytest.log"
        record["counts"] = pytest_counts(output)
        print(f"[gpu_suite] tests: {record['status']} {record['counts']} in {record['seconds']} s", flush=True)

    # ------------------------------------------------------------------ timings
    def estimate(self, index: int) -> float:
        """Conservative seconds for row ``index``: set-up plus its warm-up and timed steps, each step estimated
        from the same model and variant at the other shape (its timed step scaled by the ratio of the points, plus
        what its first step took beyond that: compilation, which does not grow with the points), else by the
        slowest step measured so far."""
        row = self.rows[index]
        steps = self.args.warmup + self.args.repeats
        length = self.shapes[row.shape].length
        for other, result in zip(self.rows, self.results):
            if (
                (other.model, other.variant.split(" ")[0]) == (row.model, row.variant.split(" ")[0])
                and other.shape != row.shape
                and result.get("first_step_s")
            ):
                scale = length / self.shapes[other.shape].length
                step = result["seconds"] or result["first_step_s"]
                once = result["first_step_s"] - step if result["first_step_s"] > step else 0.0
                return 2 * (result["setup_s"] + once + steps * step * scale)
        measured = [r["first_step_s"] for r in self.results if r.get("first_step_s")]
        return 2 * steps * max(measured) if measured else 0.0

    def measure(self, index: int) -> None:
        import torch

        from neuralde_seq import SolverOptions, create_model, model_inputs
        from neuralde_seq.solvers import FixedStep

        row, result = self.rows[index], self.results[index]
        shape = self.shapes[row.shape]
        cuda = self.device.type == "cuda"
        start = time.time()
        times, values, labels = _batch(shape, self.dtype)
        inputs = model_inputs(row.model, times, values, **row.control)
        options = dict(row.options)
        if row.solver is not None:
            options["solver"] = row.solver
        torch.manual_seed(0)
        model = create_model(row.model, inputs, shape.classes, **options).to(device=self.device, dtype=self.dtype)
        inputs, labels = inputs.to(self.device), labels.to(self.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        result.update(pieces=_pieces(inputs), parameters=sum(p.numel() for p in model.parameters()))

        def step() -> float:
            if cuda:
                torch.cuda.synchronize(self.device)
            begin = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            loss.backward()
            optimizer.step()
            if cuda:
                torch.cuda.synchronize(self.device)
            return time.perf_counter() - begin

        result["setup_s"] = round(time.time() - start, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. a grid model's notice about irregular times: not measured here
            first = [step() for _ in range(max(self.args.warmup, 1))]
            result["first_step_s"] = first[0]
            solver = next(
                (m.solver for m in model.modules() if isinstance(getattr(m, "solver", None), SolverOptions)), None
            )
            if solver is not None:
                method = solver.last_method or solver.method
                # the fixed-step loop's steps compiled or eager (where the loop runs: not the composed affine steps)
                compiled = f" compile={method.compile}" if isinstance(method, FixedStep) else ""
                result["solver"] = f"{method.name}{compiled}, gradient={solver.gradient.name}"
            fits = int((self.left() - WRITE_MARGIN_S) / max(max(first), 1e-6))
            repeats = min(self.args.repeats, fits)
            if repeats < 1:
                result.update(
                    status="skipped", reason=f"time limit: one step took {max(first):.3g} s, {self.left():.0f} s left"
                )
                return
            if repeats < self.args.repeats:
                result["reason"] = f"time limit: {repeats} of {self.args.repeats} timed steps"
            if cuda:
                torch.cuda.reset_peak_memory_stats(self.device)
            result["steps"] = [step() for _ in range(repeats)]
        result["seconds"] = statistics.median(result["steps"])
        result["peak_mib"] = torch.cuda.max_memory_allocated(self.device) / 2**20 if cuda else None
        result["status"] = "measured"

    def add_ratios(self) -> None:
        reference = {
            r["shape"]: r["seconds"]
            for r in self.results
            if r["model"] == REFERENCE and r["variant"] == "default" and r["seconds"]
        }
        for r in self.results:
            base = reference.get(r["shape"])
            r["ratio_to_ckcnn"] = r["seconds"] / base if base and r["seconds"] is not None else None
            anchor = r["anchor_s"]
            r["ratio_to_anchor"] = r["seconds"] / anchor if anchor and r["seconds"] is not None else None

    def run_rows(self) -> None:
        import torch

        for index, (row, result) in enumerate(zip(self.rows, self.results)):
            estimate, left = self.estimate(index), self.left() - WRITE_MARGIN_S
            if estimate > left or left <= 0:
                result.update(
                    status="skipped", reason=f"time limit: estimated {estimate:.0f} s, {max(left, 0):.0f} s left"
                )
                print(f"[gpu_suite] {row.label}: skipped ({result['reason']})", flush=True)
                continue
            print(f"[gpu_suite] {row.label} ...", flush=True)
            try:
                self.measure(index)
            except TimeLimitReached as e:
                result.update(status="error", error=str(e))
                self._skip_rest(index + 1, "time limit: the alarm stopped the run")
                break
            except Exception as e:  # noqa: BLE001 — one row's failure (out of memory, a bug) must not stop the suite
                result.update(
                    status="error",
                    error="".join(traceback.format_exception_only(type(e), e)).strip()
                    + "\n"
                    + "".join(traceback.format_tb(e.__traceback__)[-3:]),
                )
            finally:
                gc.collect()
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                self.add_ratios()
                self.write()
            seconds = result.get("seconds")
            print(
                f"[gpu_suite] {row.label}: {result['status']}"
                + (f" {seconds:.4g} s/step" if seconds is not None else "")
                + (f", {result['ratio_to_ckcnn']:.3g}x CKCNN" if result.get("ratio_to_ckcnn") else "")
                + (f", peak {result['peak_mib']:.0f} MiB" if result.get("peak_mib") else "")
                + (f" ({result['error'].splitlines()[0][:200]})" if result.get("error") else ""),
                flush=True,
            )

    def _skip_rest(self, start: int, reason: str) -> None:
        for result in self.results[start:]:
            if result["status"] == "pending":
                result.update(status="skipped", reason=reason)


def pytest_counts(output: str) -> dict:
    """The counts of pytest's summary line ("3 passed, 2 skipped, 1 xfailed in 4.2s"): {"passed": 3, ...}."""
    lines = [
        line
        for line in output.splitlines()
        if re.search(
            r"\d+ (passed|failed|skipped|error|deselected|"
            r"xfailed|xpassed|no tests ran)",
            line,
        )
    ]
    if not lines:
        return {}
    counts = {}
    for number, word in re.findall(
        r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)", lines[-1]
    ):
        word = {"error": "errors", "warning": "warnings"}.get(word, word)
        counts[word] = counts.get(word, 0) + int(number)
    return counts


def _device(text: str) -> str:
    """--device: a torch device string (cpu, cuda, cuda:1, ...)."""
    import torch

    try:
        torch.device(text)
    except (RuntimeError, ValueError) as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device (e.g. cpu, cuda, cuda:1): {error}") from None
    return text


def _positive_seconds(text: str) -> float:
    """--time-limit-s: a finite positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite positive number of seconds, got {text!r}")
    return value


def _out_folder(text: str) -> str:
    """--out: a folder that exists or can be made (not a file, nor under one)."""
    parent = os.path.abspath(text)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be a folder: {parent} is a file")
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", required=True, type=_out_folder, help="folder for results.json, results.md and pytest.log"
    )
    parser.add_argument("--device", default="cuda", type=_device, help="torch device (default cuda)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument(
        "--time-limit-s",
        type=_positive_seconds,
        default=480.0,
        help="stop within this many seconds from the start (default 480)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: the same code in seconds on a CPU")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps per row (default 2; smoke 1)")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per row (default 3; smoke 1)")
    parser.add_argument(
        "--pytest-timeout-s", type=float, default=150.0, help="at most this long for the CUDA tests (default 150)"
    )
    parser.add_argument("--no-pytest", action="store_true", help="leave the CUDA tests out")
    parser.add_argument("--rows", nargs="+", help="keep the rows whose label contains one of these strings")
    parser.add_argument(
        "--headline-only",
        action="store_true",
        help="leave out the rows that only cover the other registry models at their defaults "
        "(CI's smoke run: the registry's own tests build and train every model)",
    )
    args = parser.parse_args(argv)
    args.warmup = (1 if args.smoke else 2) if args.warmup is None else args.warmup
    args.repeats = (1 if args.smoke else 3) if args.repeats is None else args.repeats
    if args.warmup < 1 or args.repeats < 1:
        parser.error("--warmup and --repeats must be positive")

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (use --device cpu)")
    planned = planned_rows(coverage=not args.headline_only)
    rows = [row for row in planned if not args.rows or any(s in row.label for s in args.rows)]
    if not rows:  # a typo selects nothing: an error, not an empty run that exits 0
        parser.error(
            f"--rows {' '.join(args.rows)} selects no row; the rows: " + "; ".join(row.label for row in planned)
        )
    suite = Suite(args, rows)
    suite.write()
    use_alarm = hasattr(signal, "setitimer")
    if use_alarm:  # the hard stop: whatever runs at the limit is interrupted and recorded
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, max(suite.left() - WRITE_MARGIN_S, 0.01))
    try:
        try:
            suite.run_tests()
        except TimeLimitReached:
            suite.document["pytest"].update(status="timeout", reason="stopped at the time limit")
        suite.write()
        suite.run_rows()
        try:
            suite.measure_random_features()
        except TimeLimitReached:
            raise
        except Exception as e:  # noqa: BLE001 — recorded, as a row's error is
            suite.document["random_features"].update(status="error", error=str(e)[:500])
        suite.write()
    except TimeLimitReached:
        pass
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
    suite._skip_rest(0, "time limit: the alarm stopped the run")
    suite.document["finished"] = True
    suite.add_ratios()
    suite.write()
    measured = sum(r["status"] == "measured" for r in suite.results)
    print(
        f"[gpu_suite] {measured} of {len(rows)} rows measured in {time.time() - STARTED:.0f} s; "
        f"{os.path.join(args.out, 'results.md')}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
