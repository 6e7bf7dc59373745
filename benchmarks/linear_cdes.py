"""Seconds per 1,000 training steps at an EigenWorms-like shape: Log-NCDE, the structured linear NCDEs (parallel
and sequential scans), NCDE, NRDE and CT-FWPs on their exact path, as ratios measured in one run.

One training step = forward, cross-entropy loss (plus ``--penalty-weight`` × the model's ``penalty()`` where it
has one: the authors' Lip(2) regulariser of Log-NCDE and the linear NCDEs, λ = 1e-3 in their EigenWorms
configs), backward, ``torch.optim.Adam`` step, on one batch. The batch is EigenWorms-like: ``--batch`` (32)
samples, ``--length`` (17,984) points evenly spaced in [0, 1], 6 channels of a Gaussian random walk (plus the
time channel: 7 path channels), no missing values, 5 classes.

The rows (`ROWS`) read the public API only (``model_inputs`` with control overrides, ``create_model``) with the
settings of the authors' EigenWorms configs (Benjamin-Walker/log-neural-cdes,
``experiment_configs/repeats/<model>/EigenWorms.json``) where they have one:

- ``log-ncde``: log-signature windows of depth 2, step 12; hidden 128, field width 32, field depth 2, SiLU;
  Heun's method (``heun2``), one step per window, as the authors (diffrax ``Heun``, dt0 = 1 / windows); and
  ``log-ncde rk4``, the same on the library's default solver (rk4: twice the field evaluations);
- ``slice-block`` (hidden 128, blocks of 4), ``slice-dense`` (hidden 128), ``slice-dplr`` (hidden 128, rank 4):
  depth 2, step 12; ``slice-diag`` (hidden 128): depth 1, step 12 (their diagonal config is depth 1); all reading
  the mean of their states (``readout="mean"``, the authors' classifier). Each with ``scan="parallel"`` and
  ``scan="sequential"``, two rows with the same weights (the same seed) and the same control. Depth-2 DPLR steps
  are dense (as theirs: the brackets of low-rank matrices are not low-rank), so ``slice-dplr d1 sequential`` (depth
  1) adds the scan whose step costs O(H·d·r);
- ``ncde``: Hermite cubic control (every point a knot), hidden 128, field width 128, field depth 3, Heun, one
  step per knot (their dt0 = 1 / 17,984);
- ``nrde``: depth 2, step 4, no time channel (as their config), hidden 64, field width 64, field depth 3, Heun,
  one step per window;
- CT-FWPs in RDE form on ``Exact()``: ``delta-rde`` (pre-Delta) and ``delta-post-rde``,
  d_model 128, 16 heads, d_ff 64, on depth-1 windows of 4 steps without start values (paper 002's best EigenWorms
  setting, as tasks/configs/walker2024_uea_eigenworms.yaml; 4,496 windows) and, for pre-Delta, also of 12 steps
  (the windows Log-NCDE and the linear NCDEs read).

Every control is built once, outside the timed steps (as in training: once per split, sliced per batch).

Time: ``torch.set_num_threads(--threads)`` (default 1). Every row takes one untimed step, then ``--repeats``
timed steps, the rows alternating step by step (row 1, row 2, ..., row 1, ...), so that the ratios compare steps
taken side by side on a shared machine. The slow rows (NCDE, NRDE: the full-length solves, minutes per step on
a CPU) take ``--slow-repeats`` timed steps (default 1) and their untimed first step on the first 1,000 points
only. Reported: the median step's wall clock and process CPU time; "s / 1k steps" = median wall time × 1,000
(extrapolated from the steps measured, not 1,000 steps run); the ratio of every row to the reference row
(``slice-block parallel``, the authors' recommended model) and to ``log-ncde``; the authors' own seconds per
1,000 steps on EigenWorms (their GPU, ``results/memory_time_results.json``) beside ours. The line at the end
says whether the issue's "about 20x faster than Log-NCDE per 1,000 steps" holds on this machine.

Memory: "step MiB" is the process's peak resident memory during a timed step minus its resident memory just
before it (``/proc/self/clear_refs`` resets the peak, Linux; freed heap memory is returned first with
``malloc_trim``), the largest over the row's timed steps: the step's own working memory (activations, gradients,
scan temporaries), not the model's parameters and Adam state that persist between steps. Approximate (pages
the allocator keeps are not counted); "-" where the peak cannot be reset. Rows whose step memory, estimated from
their step matrices (`estimated_gib`), exceeds ``--memory-budget`` GiB (default 6) are skipped with a note saying
so: at full length the dense and DPLR parallel scans (matrices of (windows, batch, 128, 128) kept for every one of
the ⌈log2 windows⌉ rounds: about 44 GiB) and the dense and depth-2 DPLR sequential scans (about 12 GiB).

    python benchmarks/linear_cdes.py --json results/benchmarks/linear_cdes.json
    python benchmarks/linear_cdes.py --length 2000 --repeats 3          # a quick look
    python benchmarks/linear_cdes.py --rows "slice-block parallel" "slice-block sequential" log-ncde
    python benchmarks/linear_cdes.py --list                              # the rows and their settings
    python benchmarks/linear_cdes.py --profile "slice-block parallel"    # where one step's time goes

Rows whose registry name is not in ``neuralde_seq.MODEL_NAMES`` (e.g. ``log-ncde`` in versions before it) are
skipped with a note.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings

from machine import code_version, cpu_name, reset_peak_rss

from neuralde_seq.controls import LogSignature
from neuralde_seq.files import write_text_atomic
from neuralde_seq.solvers import RK4, Exact, Heun2, Method
from neuralde_seq.training.results import to_jsonable

NUM_CLASSES = 5
VALUE_CHANNELS = 6
REFERENCE_ROW = "slice-block parallel"
LOG_NCDE_ROW = "log-ncde"
CLAIMED_SPEEDUP = 20.0  # the issue's "about 20x faster than Log-NCDE per 1,000 steps"
SLOW_WARMUP_POINTS = 1000

_WINDOWS_12_DEPTH_2 = dict(interpolation=LogSignature(depth=2, step=12), time_channel=True)
_WINDOWS_12_DEPTH_1 = dict(interpolation=LogSignature(depth=1, step=12), time_channel=True)
# The linear NCDEs read the mean of their states, as the authors' classifier (readout="mean").
_BLOCK = dict(hidden=128, block_size=4, readout="mean")
_DIAG = dict(hidden=128, readout="mean")
_DENSE = dict(hidden=128, readout="mean")
_DPLR = dict(hidden=128, rank=4, readout="mean")
# paper 002's EigenWorms CT-FWP (tasks/configs/walker2024_uea_eigenworms.yaml): depth-1 windows of 4 steps
_FWP_WINDOWS = dict(depth=1, step=4, window_start_values=False)
_FWP_SIZES = dict(d_model=128, n_heads=16, d_ff=64)


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the table: a registry model, its control and options.

    Attributes:
        label: the row's name in the table (unique).
        model: the registry name given to ``model_inputs`` and ``create_model``.
        control: overrides of the registry's control options (``model_inputs`` keywords).
        options: ``create_model`` overrides.
        solver: the method object (``Exact()``, ``Heun2()``, ...), None for the models without a solver.
        slow: a full-length solve: ``--slow-repeats`` timed steps, the untimed one on a short prefix.
        theirs: the authors' seconds per 1,000 steps on EigenWorms (their GPU), where they timed this model.
    """

    label: str
    model: str
    control: dict
    options: dict
    solver: Method | None = None
    slow: bool = False
    theirs: float | None = None


# The authors' time per 1,000 training steps on EigenWorms, their GPU (results/memory_time_results.json of
# Benjamin-Walker/log-neural-cdes: "log_ncde", "bd_linear_ncde", "bd_linear_ncde_recurrent" = sequential, ...).
ROWS = (
    Row(
        "log-ncde",
        "log-ncde",
        _WINDOWS_12_DEPTH_2,
        dict(hidden=128, width=32, depth=2, activation="silu"),
        solver=Heun2(),
        theirs=2351.97,
    ),
    Row(
        "log-ncde rk4",
        "log-ncde",
        _WINDOWS_12_DEPTH_2,
        dict(hidden=128, width=32, depth=2, activation="silu"),
        solver=RK4(),
    ),
    Row("slice-block parallel", "slice-block", _WINDOWS_12_DEPTH_2, dict(_BLOCK, scan="parallel"), theirs=16.26),
    Row("slice-block sequential", "slice-block", _WINDOWS_12_DEPTH_2, dict(_BLOCK, scan="sequential"), theirs=40.62),
    Row("slice-diag parallel", "slice-diag", _WINDOWS_12_DEPTH_1, dict(_DIAG, scan="parallel"), theirs=14.23),
    Row("slice-diag sequential", "slice-diag", _WINDOWS_12_DEPTH_1, dict(_DIAG, scan="sequential"), theirs=36.41),
    Row("slice-dense parallel", "slice-dense", _WINDOWS_12_DEPTH_2, dict(_DENSE, scan="parallel"), theirs=92.57),
    Row("slice-dense sequential", "slice-dense", _WINDOWS_12_DEPTH_2, dict(_DENSE, scan="sequential"), theirs=77.74),
    Row("slice-dplr parallel", "slice-dplr", _WINDOWS_12_DEPTH_2, dict(_DPLR, scan="parallel")),
    Row("slice-dplr sequential", "slice-dplr", _WINDOWS_12_DEPTH_2, dict(_DPLR, scan="sequential")),
    Row("slice-dplr d1 sequential", "slice-dplr", _WINDOWS_12_DEPTH_1, dict(_DPLR, scan="sequential")),
    Row("ncde", "ncde", {}, dict(hidden=128, width=128, depth=3), solver=Heun2(), slow=True, theirs=30827.07),
    Row(
        "nrde",
        "nrde",
        dict(depth=2, step=4, time_channel=False),
        dict(hidden=64, width=64, depth=3),
        solver=Heun2(),
        slow=True,
        theirs=6830.97,
    ),
    Row("delta-rde exact s4", "delta-rde", _FWP_WINDOWS, _FWP_SIZES, solver=Exact()),
    Row("delta-rde exact s12", "delta-rde", dict(_FWP_WINDOWS, step=12), _FWP_SIZES, solver=Exact()),
    Row("delta-post-rde exact s4", "delta-post-rde", _FWP_WINDOWS, _FWP_SIZES, solver=Exact()),
)


def _batch(length: int, batch: int, dtype, seed: int = 0):
    """(times (B, T), values (B, T, 6), labels (B,)): a unit-scale Gaussian random walk on [0, 1]."""
    import torch

    g = torch.Generator().manual_seed(seed)
    times = torch.linspace(0, 1, length, dtype=torch.float64).repeat(batch, 1).to(dtype)
    values = (
        torch.cumsum(torch.randn(batch, length, VALUE_CHANNELS, generator=g, dtype=torch.float64), 1) / length**0.5
    ).to(dtype)
    labels = torch.randint(0, NUM_CLASSES, (batch,), generator=g)
    return times, values, labels


def _step_matrix_entries(row: Row, pieces: int, batch: int, path_channels: int) -> int:
    """Entries of a linear NCDE's step matrices over the whole batch (0 for the other models): what its scan
    holds per round (parallel) or once (sequential)."""
    if not row.model.startswith("slice-"):
        return 0
    hidden = row.options["hidden"]
    # the parallel scan composes DPLR steps in their dense form, and depth-2 DPLR steps are dense anyway
    dense_dplr = (
        row.options.get("scan", "parallel") == "parallel"
        or getattr(row.control.get("interpolation"), "depth", None) == 2
    )
    if row.model == "slice-dplr":
        per_step = hidden * hidden if dense_dplr else hidden * (1 + 2 * path_channels * row.options["rank"])
    else:
        per_step = {
            "slice-diag": hidden,
            "slice-block": hidden * row.options.get("block_size", 1),
            "slice-dense": hidden * hidden,
        }[row.model]
    return pieces * batch * per_step


def estimated_gib(row: Row, pieces: int, batch: int, path_channels: int, itemsize: int) -> float:
    """A rough estimate of a linear NCDE's step memory from its step matrices: one copy per round of the parallel
    scan (⌈log2 pieces⌉ rounds, each kept for the backward pass) plus four (the matrices, their gradient,
    temporaries); 0 for the other models. (The measured step memory was 0.75-0.9x this estimate for the dense scans
    at 167 windows, 1.4-1.9x for the block-diagonal ones at 167-1,499 windows, whose states and offsets are not
    small next to their matrices.)

    Arguments:
        row: the row.
        pieces: the control's pieces (windows or knot intervals).
        batch: the batch size.
        path_channels: d, the channels of the path under the control.
        itemsize: bytes per entry.

    Returns:
        GiB.
    """
    copies = 4 + (math.ceil(math.log2(max(pieces, 2))) if row.options.get("scan") == "parallel" else 0)
    return copies * _step_matrix_entries(row, pieces, batch, path_channels) * itemsize / 2**30


def build_trainer(row: Row, inputs, labels, penalty_weight: float, dtype, device=None):
    """(model, one training step as a function returning the loss) for ``row`` on this input.

    Arguments:
        row: the row.
        inputs: the control built for the row (``model_inputs``), on the CPU; the model is created from it (its
            input-dependent options) and the step reads it moved to ``device``.
        labels: (B,) class labels.
        penalty_weight: weight of the model's ``penalty()`` in the loss (where it has one).
        dtype: the torch dtype of the model's parameters.
        device: where the model and the step run (default: the CPU).

    Returns:
        (model, step): ``step(control)`` runs one training step on ``control`` (default: ``inputs`` on
            ``device``; another control must be on ``device`` already) and returns its loss (with the penalty)
            as a float.
    """
    import torch

    from neuralde_seq import create_model

    solver = dict(solver=row.solver) if row.solver else {}
    torch.manual_seed(0)  # rows of one model differ only in their scan: the same weights
    model = create_model(row.model, inputs, NUM_CLASSES, **row.options, **solver).to(device=device, dtype=dtype)
    inputs, labels = inputs.to(device), labels.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    penalised = penalty_weight > 0 and callable(getattr(model, "penalty", None))

    def step(control=inputs) -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(control), labels)
        if penalised:
            loss = loss + penalty_weight * model.penalty()
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return model, step


class StepMemory:
    """Peak memory of a step above the memory in use before it (module docstring): resident memory on the CPU,
    where Linux lets its peak be reset (``available`` is False elsewhere), allocated memory on a CUDA device.

    Arguments:
        device: the device the steps run on (default: the CPU).
    """

    def __init__(self, device=None):
        import torch

        self.device = torch.device("cpu") if device is None else torch.device(device)
        if self.device.type == "cuda":
            self.available, self._libc = True, None
            return
        try:
            self._libc = ctypes.CDLL("libc.so.6")
        except OSError:
            self._libc = None
        self.available = self._reset_peak()

    @staticmethod
    def _status_bytes(field: str) -> int:
        with open("/proc/self/status") as f:
            line = next(line for line in f if line.startswith(field + ":"))
        return int(line.split()[1]) * 1024

    @staticmethod
    def _reset_peak() -> bool:
        return reset_peak_rss()

    def before(self) -> int | None:
        """Call just before the step: returns the resident bytes, or None without a resettable peak."""
        if not self.available:
            return None
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return torch.cuda.memory_allocated(self.device)
        if self._libc is not None:
            self._libc.malloc_trim(0)
        self._reset_peak()
        return self._status_bytes("VmRSS")

    def after(self, before: int | None) -> int | None:
        """Call just after the step: the peak above ``before`` in bytes (None without a resettable peak)."""
        if before is None:
            return None
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
            return max(torch.cuda.max_memory_allocated(self.device) - before, 0)
        return max(self._status_bytes("VmHWM") - before, 0)


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:  # older environments

        def tqdm(iterable=None, **_):
            class _Bar:
                def update(self, *_):
                    pass

                def close(self):
                    pass

            return _Bar()

    return tqdm


def measure(args, rows) -> tuple[list[dict], list[str]]:
    """Time the rows on one batch, alternating step by step.

    Arguments:
        args: the parsed command line (module docstring).
        rows: the `Row` s to time.

    Returns:
        (results, notes): one dict per row measured (settings, losses, times, memory), and the lines saying
            which rows were skipped and why.
    """
    import torch

    from neuralde_seq import MODEL_NAMES, model_inputs

    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    times, values, labels = _batch(args.length, args.batch, dtype)
    short = min(args.length, SLOW_WARMUP_POINTS)
    notes, trainers, controls = [], {}, {}
    for row in rows:
        if row.model not in MODEL_NAMES:
            notes.append(f"{row.label}: skipped, {row.model!r} is not a registered model in this version")
            continue
        key = (row.model, json.dumps(to_jsonable(row.control), sort_keys=True))
        if key not in controls:  # e.g. the parallel and sequential rows share their control
            controls[key] = model_inputs(row.model, times, values, **row.control)
        inputs = controls[key]
        pieces = int(inputs.end_index.max())
        path_channels = inputs.initial_value.shape[-1] if inputs.initial_value is not None else inputs.channels
        gib = estimated_gib(row, pieces, args.batch, path_channels, times.element_size())
        if gib > args.memory_budget:
            notes.append(
                f"{row.label}: skipped, its step memory is estimated at {gib:.0f} GiB at {pieces} windows "
                f"(--memory-budget {args.memory_budget:g}); time it at a smaller --length"
            )
            continue
        model, step = build_trainer(row, inputs, labels, args.penalty_weight, dtype, device)
        warmup_points = short if row.slow else args.length
        warmup = (
            None
            if warmup_points == args.length
            else model_inputs(row.model, times[:, :short], values[:, :short], **row.control).to(device)
        )
        entry = dict(
            label=row.label,
            model=row.model,
            control=to_jsonable(row.control),
            options=row.options,
            solver=None if row.solver is None else row.solver.name,
            theirs=row.theirs,
            pieces=pieces,
            channels=int(inputs.channels),
            estimated_gib=gib,
            parameters=sum(p.numel() for p in model.parameters()),
            warmup_points=warmup_points,
            losses=[],
            wall=[],
            cpu=[],
            memory=[],
        )
        trainers[row.label] = (row, step, warmup, entry)
    repeats = {label: args.slow_repeats if row.slow else args.repeats for label, (row, *_) in trainers.items()}
    memory = StepMemory(device)
    synchronise = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    bar = _tqdm()(
        total=sum(r + 1 for r in repeats.values()), desc="linear_cdes", disable=args.no_progress, file=sys.stderr
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step, warmup, entry in (value[1:] for value in trainers.values()):  # untimed first step
            entry["losses"].append(step() if warmup is None else step(warmup))
            bar.update()
        for round_ in range(max(repeats.values(), default=0)):
            for label, (_row, step, _, entry) in trainers.items():
                if round_ >= repeats[label]:
                    continue
                before = memory.before()
                synchronise()
                wall, cpu = time.perf_counter(), time.process_time()
                entry["losses"].append(step())
                synchronise()
                entry["wall"].append(time.perf_counter() - wall)
                entry["cpu"].append(time.process_time() - cpu)
                entry["memory"].append(memory.after(before))
                bar.update()
    bar.close()
    results = []
    for *_, entry in trainers.values():
        entry["wall_median"] = statistics.median(entry["wall"]) if entry["wall"] else None
        entry["cpu_median"] = statistics.median(entry["cpu"]) if entry["cpu"] else None
        peaks = [m for m in entry["memory"] if m is not None]
        entry["step_mib"] = max(peaks) / 2**20 if peaks else None
        entry["per_1k_steps"] = 1000 * entry["wall_median"] if entry["wall_median"] is not None else None
        entry["per_1k_steps_cpu"] = 1000 * entry["cpu_median"] if entry["cpu_median"] is not None else None
        results.append(entry)
    return results, notes


def add_ratios(results: list[dict]) -> None:
    """Add each row's ratios of wall and of CPU time to the reference row and to Log-NCDE, and the same ratios of
    the authors' times (None where a time is missing).

    Arguments:
        results: the rows from `measure`, changed in place.
    """
    by_label = {r["label"]: r for r in results}
    for r in results:
        for key, other in (("to_reference", REFERENCE_ROW), ("to_log_ncde", LOG_NCDE_ROW)):
            o = by_label.get(other)
            for clock in ("wall", "cpu"):
                ok = o is not None and o[f"{clock}_median"] and r[f"{clock}_median"] is not None
                r[f"{key}_{clock}"] = r[f"{clock}_median"] / o[f"{clock}_median"] if ok else None
            their_ok = o is not None and o["theirs"] and r["theirs"]
            r["theirs_" + key] = r["theirs"] / o["theirs"] if their_ok else None


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def claim(results: list[dict]) -> str:
    """The line on the issue's claim: the authors' block-diagonal linear NCDE about 20x faster than Log-NCDE per
    1,000 steps, against this run's rows.

    Arguments:
        results: the rows from `measure`.

    Returns:
        One line.
    """
    by_label = {r["label"]: r for r in results}
    reference, log_ncde = by_label.get(REFERENCE_ROW), by_label.get(LOG_NCDE_ROW)
    head = f"claim 'about {CLAIMED_SPEEDUP:.0f}x faster than Log-NCDE per 1,000 steps'"
    if not (reference and log_ncde and reference["wall_median"] and log_ncde["wall_median"]):
        return f"{head}: not checked ({REFERENCE_ROW} or {LOG_NCDE_ROW} not measured)"
    wall = log_ncde["wall_median"] / reference["wall_median"]
    cpu = log_ncde["cpu_median"] / reference["cpu_median"]
    verdict = "reproduced" if min(wall, cpu) >= CLAIMED_SPEEDUP else "not reproduced"
    line = (
        f"{head} (the authors' GPU, average of six UEA datasets; on EigenWorms their times give "
        f"{log_ncde['theirs'] / reference['theirs']:.0f}x): {LOG_NCDE_ROW} / {REFERENCE_ROW} = {wall:.2f} (wall), "
        f"{cpu:.2f} (CPU): {verdict} on this machine at this shape"
    )
    sequential = by_label.get(REFERENCE_ROW.replace("parallel", "sequential"))
    if sequential and sequential["wall_median"]:
        line += (
            f"; {LOG_NCDE_ROW} / {sequential['label']} = {log_ncde['wall_median'] / sequential['wall_median']:.1f}"
            f" (wall), {log_ncde['cpu_median'] / sequential['cpu_median']:.1f} (CPU)"
        )
    return line


def report(results: list[dict], notes: list[str], args, started: float) -> str:
    """The readable table and the claim's verdict.

    Arguments:
        results: the rows from `measure` with `add_ratios` applied.
        notes: lines about skipped rows.
        args: the parsed command line.
        started: ``time.time()`` at the start of the run.

    Returns:
        The text printed.
    """
    import torch

    lines = [
        f"# neuralde_seq from {code_version()}, torch {torch.__version__}, python {platform.python_version()}, "
        f"{cpu_name() if args.device == 'cpu' else args.device}, {args.threads} thread(s), {args.dtype}, "
        f"batch {args.batch}, T = {args.length} points ({VALUE_CHANNELS} channels + time), {NUM_CLASSES} "
        f"classes, penalty weight {args.penalty_weight:g}, median of {args.repeats} timed steps "
        f"({args.slow_repeats} for the slow rows) after one untimed step, rows alternating, load average "
        f"{os.getloadavg()[0]:.1f}, {time.time() - started:.0f} s in all",
        "# s / 1k = median time per step x 1,000 (extrapolated from the steps measured, n of them); / ref and "
        f"/ log = ratio to '{REFERENCE_ROW}' and to '{LOG_NCDE_ROW}', of wall and of CPU time; theirs = the "
        "authors' s / 1k steps on EigenWorms (their GPU) with the same ratios; step MiB = the step's peak memory "
        "above the memory in use before it",
        "",
    ]
    header = (
        f"{'row':<24} {'pieces':>6} {'params':>7} {'wall s':>8} {'cpu s':>8} {'s / 1k':>7} {'/ ref':>6} "
        f"{'cpu':>6} {'/ log':>6} {'cpu':>6} {'step MiB':>8} {'n':>2} {'theirs':>7} {'/ ref':>6} {'/ log':>6}"
    )
    lines += [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r['label']:<24} {r['pieces']:>6} {r['parameters']:>7} {_fmt(r['wall_median'], '8.3f'):>8} "
            f"{_fmt(r['cpu_median'], '8.3f'):>8} {_fmt(r['per_1k_steps'], '7.0f'):>7} "
            f"{_fmt(r['to_reference_wall'], '6.2f'):>6} {_fmt(r['to_reference_cpu'], '6.2f'):>6} "
            f"{_fmt(r['to_log_ncde_wall'], '6.3f'):>6} {_fmt(r['to_log_ncde_cpu'], '6.3f'):>6} "
            f"{_fmt(r['step_mib'], '8.0f'):>8} {len(r['wall']):>2} {_fmt(r['theirs'], '7.0f'):>7} "
            f"{_fmt(r['theirs_to_reference'], '6.2f'):>6} {_fmt(r['theirs_to_log_ncde'], '6.3f'):>6}"
        )
    lines += [""] + [f"note: {n}" for n in notes] + [claim(results)]
    return "\n".join(lines)


def profile(args, row: Row) -> None:
    """One untimed step of ``row``, then one step under torch.profiler: operators by self CPU time (by self CUDA
    time on a CUDA device).

    Arguments:
        args: the parsed command line.
        row: the row to profile.
    """
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from neuralde_seq import model_inputs

    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    times, values, labels = _batch(args.length, args.batch, dtype)
    inputs = model_inputs(row.model, times, values, **row.control)
    _, step = build_trainer(row, inputs, labels, args.penalty_weight, dtype, device)
    step()
    start, cpu = time.perf_counter(), time.process_time()
    step()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    cuda = device.type == "cuda"
    with torch_profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        step()
    print(
        f"# {row.label}, T = {args.length} ({int(inputs.end_index.max())} pieces), batch {args.batch}, "
        f"{args.dtype}, {args.device}, {torch.get_num_threads()} thread(s); one step unprofiled: {wall:.3f} s wall, "
        f"{cpu:.3f} s CPU\ntorch.profiler, operators by self {'CUDA' if cuda else 'CPU'} time:"
    )
    sort_by = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort_by, row_limit=20))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    labels = [row.label for row in ROWS]
    parser.add_argument(
        "--rows",
        nargs="+",
        default=labels,
        metavar="ROW",
        help="rows to time, by label (default all; --list shows them)",
    )
    parser.add_argument("--length", type=int, default=17984, help="points per series (EigenWorms: 17,984)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2, help="timed steps per row")
    parser.add_argument("--slow-repeats", type=int, default=1, help="timed steps of the slow rows (NCDE, NRDE)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument(
        "--device",
        default="cpu",
        help="where the models run, e.g. cuda (controls are built on the CPU and moved there)",
    )
    parser.add_argument(
        "--penalty-weight",
        type=float,
        default=1e-3,
        help="weight of the model's penalty() in the loss, where it has one (authors: 1e-3)",
    )
    parser.add_argument(
        "--memory-budget",
        type=float,
        default=6.0,
        help="skip rows whose step matrices alone would take more GiB than this",
    )
    parser.add_argument("--json", default="", help="write the results here")
    parser.add_argument("--list", action="store_true", help="print the rows and their settings, time nothing")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--profile", metavar="ROW", help="profile one training step of ROW instead")
    args = parser.parse_args(argv)
    unknown = [label for label in args.rows + ([args.profile] if args.profile else []) if label not in labels]
    if unknown:
        parser.error(f"unknown rows {unknown}; rows: {labels}")
    for name in ("length", "batch", "repeats", "slow_repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.length < 13:
        parser.error(f"--length must be at least 13 (one window of 12 steps), got {args.length}")
    rows = [row for row in ROWS if row.label in args.rows]
    if args.list:
        for row in rows:
            print(
                f"{row.label:<24} model {row.model}, control {row.control or '(registry)'}, options {row.options}"
                f"{f', solver {row.solver.name}' if row.solver else ''}{', slow' if row.slow else ''}"
            )
        return 0

    import torch

    torch.set_num_threads(args.threads)
    if args.profile:
        profile(args, next(row for row in ROWS if row.label == args.profile))
        return 0
    started = time.time()
    results, notes = measure(args, rows)
    add_ratios(results)
    print(report(results, notes, args, started))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        payload = dict(
            settings=dict(vars(args), torch=torch.__version__, cpu=cpu_name(), code=code_version()),
            results=results,
            notes=notes,
        )
        write_text_atomic(args.json, json.dumps(payload, indent=1))
        print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
