# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Gradient methods side by side: continuous adjoint, checkpointed and plain backpropagation
#
# Every differential-equation model of the toolkit solves dW/ds = f_θ(W, X(s), X'(s)) with rk4 (one step per
# knot here: N knots, N steps W₀ → W₁ → … → W_N) and computes a loss L(W_N). `SolverOptions(gradient=...)`
# chooses how ∂L/∂θ is computed (docs/design.md, "Solving"):
#
# | gradient | what it computes | memory, N steps | work beyond backprop |
# | --- | --- | --- | --- |
# | `Backprop()` | autograd through every step: the exact gradient of the discrete solve | O(N) | none |
# | `Checkpoint()` (default) | the same gradient, one of √N segments recomputed at a time | O(√N) | one forward |
# | `Adjoint()` (the papers') | the continuous adjoint a(s) = ∂L/∂W(s), solved backwards | O(1) | an ODE solve |
#
# Checkpointing keeps only W at the start of each segment of ⌈√N⌉ steps in the forward pass; the backward pass
# recomputes one segment with a graph and backpropagates through it, so at most √N states and one segment's graph
# are alive at a time.
#
# The continuous adjoint integrates, from s = T down to the first knot,
#
#   dW/ds = f(W),   da/ds = −aᵀ ∂f/∂W,   dL/dθ = ∫ aᵀ ∂f/∂θ ds,
#
# so it never stores W(s): it *reconstructs* it by running the forward ODE backwards. For a rule that forgets,
# that reconstruction is unstable. Pre-Delta, dW/ds = σ(β) (v − W k) kᵀ, contracts W along k at the rate
# σ(β)‖k‖²; backwards in time the same directions expand, so rounding errors (and rk4's local errors) grow like
# e^{∫ σ(β)‖k‖² ds}, exponentially in the length. Even without that, the adjoint is the gradient of the
# continuous problem discretised on its own, not of the discrete solve the forward pass took.
#
# This notebook runs one forward + backward pass of a `delta-cde` classifier (rk4, one step per knot,
# cross-entropy on random labels, float64) at increasing lengths with each method, and measures (1) the relative
# error of its parameter gradient against plain backprop and (2) the peak memory and the time of the pass.
# `benchmarks/gradients.py` measures the same (in fresh processes, more repeats); this is the same experiment
# through the public API, small enough to run in a notebook.
#
# `BUDGET = "full"` (first code cell, or `python notebooks/execute.py --budget full`) runs lengths up to 20,000
# with a wider model and batch: meant for a GPU, where memory is read from `torch.cuda.max_memory_allocated`.

# %%
import ctypes
import gc
import math
import os
import time

import matplotlib.pyplot as plt
import torch
from matplotlib.ticker import FuncFormatter, LogLocator

from neuralde_seq import Adjoint, Backprop, Checkpoint, SolverOptions, create_model, model_inputs

# "small": seconds on a CPU (what CI runs); "full": lengths up to 20,000, a wider model and batch (for a GPU).
# Change the default here, or set NEURALDE_SEQ_BUDGET (notebooks/execute.py --budget full).
BUDGET = os.environ.get("NEURALDE_SEQ_BUDGET", "small")

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.set_default_dtype(torch.float64)  # backprop in float64 is the reference: compare gradients in float64
if device.type == "cpu":
    torch.set_num_threads(1)  # tiny per-step tensors: extra threads only add overhead (as benchmarks/ do)
METHODS = ["backprop", "checkpoint", "adjoint"]
GRADIENT_OF = {"backprop": Backprop(), "checkpoint": Checkpoint(), "adjoint": Adjoint(check_every=0)}
LENGTHS = [100, 200, 400, 800] if BUDGET == "small" else [500, 1000, 2000, 5000, 10000, 20000]
# The adjoint takes several times backprop's time per gradient: at the small budget it runs the first three lengths.
LENGTHS_OF = {"backprop": LENGTHS, "checkpoint": LENGTHS, "adjoint": LENGTHS[:3] if BUDGET == "small" else LENGTHS}
BATCH = 4 if BUDGET == "small" else 8
MODEL_SIZE = dict(d_model=16, n_heads=2) if BUDGET == "small" else dict(d_model=32, n_heads=4)
NUM_CLASSES = 4
WARMUP_LENGTH = 32  # one pass per method first, so that lazily initialised libraries are not counted
print(f"budget {BUDGET}, device {device}, lengths {LENGTHS}, batch {BATCH}, {MODEL_SIZE}")


def random_walk_batch(length, seed=0):
    """A control over `length` knots (3 channels of a Gaussian random walk, Hermite cubic with a time channel,
    knot i at s = i so that rk4 takes one step of 1 per knot, the papers' setting) and random labels."""
    g = torch.Generator().manual_seed(seed)
    times = torch.linspace(0, 1, length).repeat(BATCH, 1)
    values = torch.cumsum(torch.randn(BATCH, length, 3, generator=g), 1) / math.sqrt(length)
    control = model_inputs("delta-cde", times, values, parametrization="index").to(device)
    labels = torch.randint(0, NUM_CLASSES, (BATCH,), generator=g).to(device)
    return control, labels


def fresh_model(control, gradient, seed=0):
    """The same initial weights for every method (seeded), differing only in how gradients are computed
    (``gradient``: a name of METHODS). Adjoint(check_every=0): no reconstruction check (an extra solve), so that the
    adjoint's time is its gradient's alone."""
    torch.manual_seed(seed)
    return create_model(
        "delta-cde", control, NUM_CLASSES, solver=SolverOptions(gradient=GRADIENT_OF[gradient]), **MODEL_SIZE
    ).to(device)


def resident_bytes(field):
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, from Linux's /proc."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def with_peak_memory(run):
    """(run(), peak bytes in use during it above those in use before). GPU: the caching allocator's counters.
    CPU: the process's peak resident set size (tensors, the autograd graph, temporaries, allocator slack),
    after handing freed heap pages back to the system and resetting the peak through /proc/self/clear_refs."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        result = run()
        torch.cuda.synchronize()
        return result, torch.cuda.max_memory_allocated() - before
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set size
    before = resident_bytes("VmRSS")
    result = run()
    return result, resident_bytes("VmHWM") - before


def gradient_pass(model, control, labels):
    """One forward + backward pass; returns every parameter's gradient as one vector, and the seconds it took."""
    start = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(control), labels)
    loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return torch.cat([p.grad.flatten() for p in model.parameters()]), seconds


# %% [markdown]
# ## The measurement
#
# For each length N and method: a fresh model (same initial weights), one forward + backward pass, recording the
# parameter gradient g, the peak memory of the pass and its wall time. The gradient error is
# ‖g − g_backprop‖ / ‖g_backprop‖ over all parameters. The adjoint runs without the library's reconstruction
# check (`Adjoint(check_every=0)`; by default the first solve, then every 100th, integrates W(T) back to the start and
# warns with `AdjointReconstructionWarning` when W(0) is not recovered: the check exists for the instability
# measured here), so that its time is that of its gradient alone. At the small budget the adjoint, the slowest
# method by far, runs the first three lengths only. Gradients are deterministic; memory and time vary a
# little from run to run (allocator state, a shared machine).

# %%
warmup_control, warmup_labels = random_walk_batch(WARMUP_LENGTH)
for method in METHODS:
    gradient_pass(fresh_model(warmup_control, method), warmup_control, warmup_labels)

gradients, peak_mib, seconds = ({m: {} for m in METHODS} for _ in range(3))
for length in LENGTHS:
    control, labels = random_walk_batch(length)
    for method in (m for m in METHODS if length in LENGTHS_OF[m]):
        model = fresh_model(control, method)
        (grad, took), peak = with_peak_memory(lambda: gradient_pass(model, control, labels))
        gradients[method][length] = grad
        peak_mib[method][length] = peak / 2**20
        seconds[method][length] = took


def relative_error(method, length):
    reference = gradients["backprop"][length]
    return float((gradients[method][length] - reference).norm() / reference.norm())


errors = {m: {n: relative_error(m, n) for n in LENGTHS_OF[m]} for m in METHODS}
print(f"{'N':>6} {'method':<11} {'grad error':>11} {'peak MiB':>9} {'seconds':>8}")
for length in LENGTHS:
    for method in (m for m in METHODS if length in LENGTHS_OF[m]):
        print(
            f"{length:>6} {method:<11} {errors[method][length]:>11.2e} {peak_mib[method][length]:>9.2f} "
            f"{seconds[method][length]:>8.2f}"
        )

# %% [markdown]
# ## 1. Gradient error against length
#
# Backprop in float64 is the exact gradient of the discrete solve. Checkpointing runs the same steps in the same
# order, so it should agree to rounding (or bit for bit); the adjoint's error should grow with N, by the argument
# above exponentially, which on log-log axes bends upwards. An error of 1 (100 %) means the gradient carries no
# information about the true one.

# %%
ZERO_FLOOR = 1e-17  # where an error of exactly 0 (bitwise equal gradients) is drawn on the log axis
finite_errors = [e for m in METHODS for e in errors[m].values() if math.isfinite(e) and e > 0]
ceiling = 10 * max(finite_errors, default=1.0)  # where a non-finite (NaN or inf) gradient is drawn

fig, ax = plt.subplots(figsize=(6.5, 4))
for method, marker in (("adjoint", "o"), ("checkpoint", "s")):
    lengths = LENGTHS_OF[method]
    shown = [
        min(max(errors[method][n], ZERO_FLOOR), ceiling) if math.isfinite(errors[method][n]) else ceiling
        for n in lengths
    ]
    zeros = sum(errors[method][n] == 0 for n in lengths)
    ax.loglog(
        lengths,
        shown,
        marker + "-",
        label=f'gradient="{method}"' + (f" (exactly 0 drawn at {ZERO_FLOOR:g})" if zeros else ""),
    )
    for n, e, y in zip(lengths, (errors[method][n] for n in lengths), shown):
        if not math.isfinite(e):
            ax.annotate("NaN/inf", (n, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
ax.axhline(1.0, color="grey", linestyle=":", label="error 1 (100 %)")
ax.axhline(torch.finfo(torch.float64).eps, color="grey", linestyle="--", label="float64 machine epsilon")
ax.set_xlabel("sequence length N (rk4 steps, one per knot)")
ax.set_xticks(LENGTHS, [str(n) for n in LENGTHS])
ax.set_xticks([], minor=True)
ax.set_ylabel("‖g − g_backprop‖ / ‖g_backprop‖")
ax.set_title("Parameter-gradient error against plain backprop (float64)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()


# How fast the adjoint's error grows: a straight line through log10(error) against N (exponential growth), over
# the lengths where it is finite and above rounding.
def least_squares_slope(xs, ys):
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


growth_lengths = [n for n, e in errors["adjoint"].items() if math.isfinite(e) and e > 1e-13]
if len(growth_lengths) >= 2:
    decades_per_step = least_squares_slope(growth_lengths, [math.log10(errors["adjoint"][n]) for n in growth_lengths])
    print(
        f"adjoint error: ×10 every {1 / decades_per_step:.0f} steps (fit of log10 error against N over "
        f"N = {growth_lengths[0]}..{growth_lengths[-1]})"
        if decades_per_step > 0
        else f"adjoint error does not grow with N here (slope {decades_per_step:.2e} decades per step)"
    )
else:
    decades_per_step = float("nan")
    print("adjoint error: fewer than two finite lengths above rounding, no growth rate fitted")

# %% [markdown]
# ## 2. Memory and time of one gradient against length
#
# Peak memory of one forward + backward pass (see `with_peak_memory`: peak resident set size on a CPU, peak
# allocated memory on a GPU), against N on log-log axes. The slope of a straight-line fit of log(memory) against
# log(N) says how memory grows: 1 for O(N), ½ for O(√N), 0 for constant. At these lengths fixed costs, allocator
# slack and smaller terms of other orders move the fitted slopes off the asymptotic ones, so the conclusion names
# the nearest of 0, ½ and 1. Times are single passes on a shared machine: noisy.


# %%
def loglog_slope(values):
    """Least-squares slope of log(value) against log(N) over the lengths in `values` ({N: value})."""
    return least_squares_slope([math.log(n) for n in values], [math.log(v) for v in values.values()])


memory_slopes = {m: loglog_slope(peak_mib[m]) for m in METHODS}
time_slopes = {m: loglog_slope(seconds[m]) for m in METHODS}
memory_unit = "peak allocated GPU memory" if device.type == "cuda" else "peak resident memory"

fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for method, marker in zip(METHODS, "^so"):
    lengths = LENGTHS_OF[method]
    axes[0].loglog(
        lengths,
        [peak_mib[method][n] for n in lengths],
        marker + "-",
        label=f'"{method}": slope {memory_slopes[method]:.2f}',
    )
    axes[1].loglog(
        lengths,
        [seconds[method][n] for n in lengths],
        marker + "-",
        label=f'"{method}": slope {time_slopes[method]:.2f}',
    )
# Guides through each method's first point: the growth law it should follow.
for method, slope, style, what in (
    ("backprop", 1.0, "k--", "O(N)"),
    ("checkpoint", 0.5, "k-.", "O(√N)"),
    ("adjoint", 0.0, "k:", "O(1)"),
):
    first = LENGTHS_OF[method][0]
    axes[0].loglog(
        LENGTHS,
        [peak_mib[method][first] * (n / first) ** slope for n in LENGTHS],
        style,
        linewidth=0.8,
        label=f"{what} guide",
    )
axes[0].set_ylabel(f"{memory_unit} of one pass (MiB)")
axes[0].set_title("Memory of forward + backward")
axes[1].set_ylabel("wall seconds of one pass")
axes[1].set_title(f"Time of forward + backward ({device.type}, one pass each)")
for ax in axes:
    ax.set_xlabel("sequence length N (rk4 steps)")
    ax.set_xticks(LENGTHS, [str(n) for n in LENGTHS])
    ax.set_xticks([], minor=True)
    ax.yaxis.set_minor_locator(LogLocator(subs=(2, 5)))  # ticks at 1, 2, 5, 10, 20, ... as plain numbers
    for axis_ticks in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis_ticks(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.legend(fontsize=8)
plt.tight_layout()
plt.show()
for method in METHODS:
    last = LENGTHS_OF[method][-1]
    print(
        f"{method:<11} memory slope {memory_slopes[method]:.2f}, time slope {time_slopes[method]:.2f}, "
        f"at N = {last}: {peak_mib[method][last]:.2f} MiB, {seconds[method][last]:.2f} s"
    )

# %% [markdown]
# ## What the numbers say

# %%
GROWTH = {0.0: "constant", 0.5: "like √N", 1.0: "linear in N"}


def growth_law(slope):
    """The nearest of the three growth laws to a fitted log-log slope."""
    return GROWTH[min(GROWTH, key=lambda law: abs(law - slope))]


def span(method):
    return f"N = {LENGTHS_OF[method][0]}..{LENGTHS_OF[method][-1]}"


longest, adjoint_longest = LENGTHS[-1], LENGTHS_OF["adjoint"][-1]
common = adjoint_longest  # the longest length every method ran (the adjoint's lengths are a prefix of LENGTHS)
adjoint_errors = errors["adjoint"]
checkpoint_error = errors["checkpoint"][longest]
first_useless = next((n for n in adjoint_errors if not adjoint_errors[n] < 1.0), None)
adjoint_grew = all(
    adjoint_errors[b] > adjoint_errors[a] or not math.isfinite(adjoint_errors[b])
    for a, b in zip(LENGTHS_OF["adjoint"], LENGTHS_OF["adjoint"][1:])
)
print(
    f"1. Gradient error against float64 backprop: checkpoint {checkpoint_error:.1e} at N = {longest} "
    + (
        "(bitwise equal)"
        if checkpoint_error == 0
        else "(rounding level)"
        if checkpoint_error < 1e-12
        else "(ABOVE rounding level)"
    )
    + f"; adjoint {adjoint_errors[adjoint_longest]:.1e} at N = {adjoint_longest}."
)
print(
    f"   The adjoint's error over {span('adjoint')}: "
    + " → ".join(f"{e:.1e}" for e in adjoint_errors.values())
    + (" (growing at every length" if adjoint_grew else " (not growing at every length")
    + (f", ×10 every {1 / decades_per_step:.0f} steps)." if decades_per_step > 0 else ").")
)
print(
    "   "
    + (
        f"From N = {first_useless} on it is at least 100 %: the adjoint's gradient is useless there."
        if first_useless
        else f"It stays below 100 % up to N = {adjoint_longest}."
    )
)
print(
    "2. Fitted memory slopes (log peak memory against log N): "
    + ", ".join(f"{m} {memory_slopes[m]:.2f} over {span(m)} ({growth_law(memory_slopes[m])})" for m in METHODS)
    + "."
)
print(
    f"   At N = {common}: "
    + ", ".join(f"{m} {peak_mib[m][common]:.1f} MiB" for m in METHODS)
    + f"; at N = {longest} checkpoint needs {peak_mib['backprop'][longest] / peak_mib['checkpoint'][longest]:.0f}x "
    "less memory than backprop."
)
print(
    f"3. Time of one gradient at N = {common} relative to backprop (single passes, noisy): "
    + ", ".join(f"{m} {seconds[m][common] / seconds['backprop'][common]:.1f}x" for m in METHODS)
    + f"; fastest: {min(METHODS, key=lambda m: seconds[m][common])}."
)
if BUDGET == "small":
    print(
        f"   Small budget: one seed and one pass per point, N up to {longest} (the adjoint up to {adjoint_longest}); "
        "the memory slopes still include fixed costs. The full budget runs N up to 20,000."
    )
