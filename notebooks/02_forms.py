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
# # Forms side by side: one learning rule as a neural ODE, a neural CDE and a log-signature neural RDE
#
# The same Delta rule, dW/ds = σ(β) (v − W k) kᵀ with k = softmax(k_raw), v = tanh(v_raw), can be driven by
# the input path X(s) in three ways (docs/equations.md#equations-in-one-convention). The forms differ only in
# what the slow net reads to produce keys k, learning rates β, queries q and values v:
#
# | form | registry name | key, β, query from | value from | input path |
# | --- | --- | --- | --- | --- |
# | direct neural ODE | `delta-ode` | x(s) | x(s) | Hermite cubic X through the observations |
# | neural CDE | `delta-cde` | x'(s) = dX/ds | x(s) | the same Hermite cubic X |
# | log-signature neural RDE | `delta-rde` | log-signature, start of window | the same | constant on 4-point windows |
#
# - **ODE**: the fast weights are programmed from *where the path is*: k(x), v(x). The field does not vanish
#   where the input stops changing.
# - **CDE** (Delta variant, paper Eq. 23-25): the key, learning rate and query see *how the path moves*, x',
#   while the value to store is the current input x. Hebb and Oja CDEs swap this (key x, value x').
# - **RDE**: the path is cut into windows of 4 time points; each window's depth-2 log-signature (its increment
#   and Lévy areas) and the path's point at the window's start are held constant over s ∈ [j, j + 1) and fed to
#   the ODE field as both key and value source. Fewer, richer steps: a window summarises 4 time points of the
#   path. (The start point is the registry's default, `window_start_values=True`; the papers' RDE reads the
#   log-signatures only, which section 4 measures.)
#
# Solvers: the ODE and CDE run classical RK4 (3/8 rule, 4 stages) with one step per interval of the time grid
# (dropped points stay on the grid: the path interpolates through them). Because the RDE's inputs are constant
# on each window, k, v and c = σ(β) are constant there too and the Delta rule has a closed form
# (docs/equations.md#closed-forms-on-constant-inputs):
#
#     W(j + 1) = W(j) + (v − W(j) k) kᵀ · (1 − e^{−c‖k‖²}) / ‖k‖²
#
# (Hebb's is W + c v kᵀ). So the RDE is solved both by RK4 (one step per window) and by
# `Exact()` (the solver method), which applies this update once per window. Why that is fast
# (docs/performance.md#solvers):
#
# - one rank-one update of W per window instead of four RK4 stages, each a rule evaluation with its own autograd
#   nodes; the keys, values and rates of a whole segment of windows come out of one batched pass of the slow net;
# - the update is exact for any window length: no step-size error and no stability limit on c‖k‖²h;
# - its backward pass is written by hand: W is kept only at the start of checkpointed segments, each segment is
#   recomputed, and the adjoint of the affine update runs as its own recurrence, so no graph over the steps is
#   stored (less memory as well as less time).
#
# All four are trained on the same irregular data: the embedded JapaneseVowels utterances (12 cepstral
# channels, 9 speakers) with 30 % of each utterance's time points dropped, the protocol of `neuralde-seq compare`
# (`neuralde_seq/configs/compare.yaml`), and the same model size (d_model 32, 4 heads, d_ff 64) and training
# settings. Reported: test accuracy, training seconds per epoch and the peak memory of one training step.
#
# `BUDGET = "full"` (first code cell, or `python notebooks/execute.py --budget full`) trains longer, over three
# seeds, and adds the Hebb rule in the same four set-ups.

# %%
import ctypes
import gc
import os
import statistics
import time

import matplotlib.pyplot as plt
import torch
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from neuralde_seq import RK4, Exact, SolverOptions, create_model, evaluate, model_inputs, predict, train_classifier
from neuralde_seq.data.protocols import load_task
from neuralde_seq.models import registered_control_options

# "small": seconds on a CPU (what CI runs); "full": the comparison at its real size. Change the default here,
# or set NEURALDE_SEQ_BUDGET (notebooks/execute.py --budget full).
BUDGET = os.environ.get("NEURALDE_SEQ_BUDGET", "small")

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# One CPU thread everywhere, as the library's training calls use: on a shared 2-core machine a second thread
# makes these small models several times slower (README, "Threads").
torch.set_num_threads(1)
RULES = ["delta"] if BUDGET == "small" else ["delta", "hebb"]
SEEDS = [0] if BUDGET == "small" else [0, 1, 2]
EPOCHS = 5 if BUDGET == "small" else 30
MODEL_SIZE = dict(d_model=32, n_heads=4, d_ff=64)  # compare.yaml's size: JapaneseVowels has 229 training samples
TRAINING = dict(lr=3e-3, batch_size=32, eval_batch_size=128)
MEMORY_REPEATS = 3 if BUDGET == "small" else 5  # training steps measured per set-up (median reported)
SETUPS = [
    (f"{rule}-{form}", solver)
    for rule in RULES
    for form, solver in (("ode", RK4()), ("cde", RK4()), ("rde", RK4()), ("rde", Exact()))
]
LABELS = [f"{name} ({solver.name})" for name, solver in SETUPS]
FORM_COLOURS = {"ode (rk4)": "tab:blue", "cde (rk4)": "tab:orange", "rde (rk4)": "tab:green", "rde (exact)": "tab:red"}
RULE_MARKERS = {"delta": "o", "hebb": "s"}
RULE_LINES = {"delta": "-", "hebb": ":"}
print(f"budget {BUDGET}: {len(SETUPS)} set-ups x {len(SEEDS)} seed(s), {EPOCHS} epochs, device {device}")

# %% [markdown]
# ## 1. Data and the models' inputs
#
# `load_task("japanese-vowels", drop_rate=0.3)` runs the compare protocol: the official train (270) / test (370)
# split, 30 % of each utterance's time points set to NaN (train and test), 15 % of the training set held out for
# validation, channels standardised with training statistics. Drop and split depend on the seed. Each model's
# input is built once per split with `model_inputs`; the ODE and CDE read the same control, and so do the two
# RDE solvers.


# %%
def build_inputs(seed):
    """Splits of one seed and every set-up's inputs (controls with equal options are built once)."""
    splits = load_task("japanese-vowels", seed=seed, drop_rate=0.3, val_fraction=0.15, progress=False).splits
    built = {}
    inputs = {}
    for name, _ in SETUPS:
        form = name.rsplit("-", 1)[1]
        source = "rde" if form == "rde" else "ode/cde"  # the ODE and CDE read the same Hermite control
        if source not in built:
            built[source] = {
                part: model_inputs(name, ds.times, ds.values, ds.lengths).to(device)
                for part, ds in zip(("train", "val", "test"), splits)
            }
        inputs[name] = built[source]
    return splits, inputs


start = time.perf_counter()
data = {seed: build_inputs(seed) for seed in SEEDS}
build_seconds = (time.perf_counter() - start) / len(SEEDS)
splits, inputs = data[SEEDS[0]]
train, val, test = splits
steps = {}
for name, solver in SETUPS:
    intervals = inputs[name]["train"].knots.numel() - 1
    evaluations = 1 if isinstance(solver, Exact) else 4  # rk4: four stages per step; exact: one closed-form update
    steps[(name, solver.name)] = (intervals, intervals * evaluations)
print(
    f"train / val / test: {len(train)} / {len(val)} / {len(test)} utterances, {train.values.shape[-1]} channels, "
    f"lengths {int(train.lengths.min())}-{int(train.lengths.max())} time points, "
    f"{float(torch.isnan(train.values[:, :, 0]).sum() - (train.values.shape[1] - train.lengths).sum()):.0f} "
    f"dropped points in train"
)
print(f"building the inputs of all splits took {build_seconds:.1f} s per seed")
for name in dict(SETUPS):
    print(f"  {name} reads build_control(times, values, lengths, {registered_control_options(name)})")
for (name, method_name), (intervals, evaluations) in steps.items():
    print(
        f"  {name:10s} {method_name:5s}: {intervals:2d} solver steps over the longest utterance, "
        f"{evaluations:3d} slow-net evaluations"
    )

# %% [markdown]
# ## 2. Training each form
#
# `train_classifier` (Adam, cross-entropy, the best validation epoch's weights kept) with the same settings for
# every set-up; then accuracy on all 370 test utterances. Seconds per epoch are `fit`'s training time per epoch
# (validation excluded), the median over epochs, on one CPU thread (the library's default).

# %%
results = {}
for seed in SEEDS:
    (train, val, test), inputs = data[seed]
    for (name, solver), label in zip(SETUPS, LABELS):
        torch.manual_seed(seed)
        model = create_model(
            name, inputs[name]["train"], num_classes=train.num_classes, solver=solver, **MODEL_SIZE
        ).to(device)
        history = train_classifier(
            model,
            inputs[name]["train"],
            train.labels,
            inputs[name]["val"],
            val.labels,
            epochs=EPOCHS,
            seed=seed,
            progress=False,
            **TRAINING,
        )
        test_metrics = evaluate(model, inputs[name]["test"], test.labels, TRAINING["eval_batch_size"])
        results[(label, seed)] = dict(
            model=model,
            history=history,
            test_accuracy=test_metrics["accuracy"],
            seconds_per_epoch=statistics.median(history["seconds_per_epoch"]),
        )
        print(
            f"seed {seed} {label:20s} test accuracy {test_metrics['accuracy']:.3f}, "
            f"{results[(label, seed)]['seconds_per_epoch']:.3f} s/epoch, best epoch {history['best_epoch']}"
        )


def over_seeds(label, key):
    values = [results[(label, seed)][key] for seed in SEEDS]
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


accuracy = {label: over_seeds(label, "test_accuracy") for label in LABELS}
seconds = {label: over_seeds(label, "seconds_per_epoch") for label in LABELS}

# %%
fig, axes = plt.subplots(1, 2, figsize=(11.5, 3.6))
for label in LABELS:
    rule, form = label.split("-", 1)
    epochs = results[(label, SEEDS[0])]["history"]["epoch"]
    for ax, key in zip(axes, ("train_loss", "val_accuracy")):
        curve = [statistics.mean(values) for values in zip(*(results[(label, s)]["history"][key] for s in SEEDS))]
        # the exact RDE solver wide and translucent: the RK4 curve it lies on stays visible inside it
        exact = "exact" in form
        ax.plot(
            epochs,
            curve,
            marker=RULE_MARKERS[rule],
            markersize=3,
            color=FORM_COLOURS[form],
            label=label,
            linestyle=RULE_LINES[rule],
            linewidth=5 if exact else 1.5,
            alpha=0.45 if exact else 1.0,
        )
axes[0].set_ylabel("training loss (cross-entropy)")
axes[1].set_ylabel(f"validation accuracy ({len(val)} utterances)")
for ax in axes:
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
axes[1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
fig.suptitle(
    "Learning curves" + (f", mean over {len(SEEDS)} seeds" if len(SEEDS) > 1 else f", seed {SEEDS[0]}"), fontsize=11
)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3. Same weights, two RDE solvers
#
# The RDE's RK4 and exact solvers integrate the same equation. RK4 with one step per window approximates the
# relaxation factor 1 − e^{−x}, x = c‖k‖², by its Taylor polynomial of degree 4; since keys are on the simplex
# and c = σ(β) < 1, x ≤ 1 and the error in e^{−x} is below x⁵/5! ≤ 1/120. (Hebb's rate does not depend on W:
# there RK4 is exact up to rounding.) The trained exact-solver weights are loaded into an RK4 model and both
# score the test set.

# %%
agreement = {}
for rule in RULES:
    exact_model = results[(f"{rule}-rde (exact)", SEEDS[0])]["model"]
    test_control = data[SEEDS[0]][1][f"{rule}-rde"]["test"]
    rk4_model = create_model(
        f"{rule}-rde", test_control, num_classes=train.num_classes, solver=SolverOptions(RK4()), **MODEL_SIZE
    ).to(device)
    rk4_model.load_state_dict(exact_model.state_dict())
    with torch.no_grad():
        logits_exact = predict(exact_model, test_control, TRAINING["eval_batch_size"])
        logits_rk4 = predict(rk4_model, test_control, TRAINING["eval_batch_size"])
    agreement[rule] = dict(
        max_logit_difference=float((logits_exact - logits_rk4).abs().max()),
        logit_scale=float(logits_exact.abs().max()),
        same_prediction=float((logits_exact.argmax(1) == logits_rk4.argmax(1)).float().mean()),
    )
    print(
        f"{rule}-rde, seed {SEEDS[0]}: max |logit(exact) − logit(rk4)| = "
        f"{agreement[rule]['max_logit_difference']:.1e} (largest |logit| {agreement[rule]['logit_scale']:.1f}); "
        f"same predicted class on "
        f"{100 * agreement[rule]['same_prediction']:.1f} % of the test set"
    )

# %% [markdown]
# ## 4. What log-signatures alone leave out
#
# A log-signature holds a window's increment X(end) − X(start) and its Lévy areas, all relative to where the
# window starts: from log-signatures alone the level X(s) never enters (the papers' RDE input; the initial fast
# weights are then written from the first window's log-signature too). The registry's RDE therefore also reads
# each window's start point. Two measurements: the same Delta RDE (exact solver) trained on log-signatures only
# (`window_start_values=False`), and, without training anything, how much of the speaker is in the level and how
# much in the movement: a nearest-class-mean classifier on each utterance's mean observed value (level), against
# one on its total increment, last minus first observed value (movement), fitted on the training split and scored
# on the test split.


# %%
def level_and_movement(dataset):
    observed = ~torch.isnan(dataset.values).all(-1)  # dropped time points and padding are NaN in every channel
    values = torch.nan_to_num(dataset.values)
    level = (values * observed[..., None]).sum(1) / observed.sum(1, keepdim=True)
    position = torch.arange(dataset.values.shape[1])
    first = torch.where(observed, position, dataset.values.shape[1]).min(1).values
    last = torch.where(observed, position, -1).max(1).values
    rows = torch.arange(len(dataset))
    return level, values[rows, last] - values[rows, first]


def nearest_class_mean_accuracy(train_features, train_labels, test_features, test_labels):
    centroids = torch.stack([train_features[train_labels == c].mean(0) for c in range(int(train_labels.max()) + 1)])
    return float((torch.cdist(test_features, centroids).argmin(1) == test_labels).float().mean())


(train, val, test), inputs = data[SEEDS[0]]
train_level, train_movement = level_and_movement(train)
test_level, test_movement = level_and_movement(test)
centroid_accuracy = {
    "level": nearest_class_mean_accuracy(train_level, train.labels, test_level, test.labels),
    "movement": nearest_class_mean_accuracy(train_movement, train.labels, test_movement, test.labels),
}
print(
    f"nearest class mean, seed {SEEDS[0]}: on the mean level {100 * centroid_accuracy['level']:.1f} %, "
    f"on the total increment {100 * centroid_accuracy['movement']:.1f} % test accuracy "
    f"(chance {100 / train.num_classes:.1f} %)"
)

# The papers' RDE input: the log-signatures without the windows' start points, same model, solver and training.
log_signatures_only = {}
for rule in RULES:
    name = f"{rule}-rde"
    for seed in SEEDS:
        (train, val, test), _ = data[seed]
        blind = {
            part: model_inputs(name, ds.times, ds.values, ds.lengths, window_start_values=False).to(device)
            for part, ds in zip(("train", "val", "test"), data[seed][0])
        }
        torch.manual_seed(seed)
        model = create_model(
            name, blind["train"], num_classes=train.num_classes, solver=SolverOptions(Exact()), **MODEL_SIZE
        ).to(device)
        train_classifier(
            model,
            blind["train"],
            train.labels,
            blind["val"],
            val.labels,
            epochs=EPOCHS,
            seed=seed,
            progress=False,
            **TRAINING,
        )
        log_signatures_only[(rule, seed)] = evaluate(model, blind["test"], test.labels, TRAINING["eval_batch_size"])[
            "accuracy"
        ]
    print(
        f"{name} (exact), log-signatures only: test accuracy "
        + ", ".join(f"{100 * log_signatures_only[(rule, seed)]:.1f} %" for seed in SEEDS)
        + f" (seed{'s' if len(SEEDS) > 1 else ''} {', '.join(map(str, SEEDS))})"
    )
(train, val, test), inputs = data[SEEDS[0]]

# %% [markdown]
# ## 5. Memory of one training step
#
# One forward + backward pass on a batch of 32 training utterances with the trained weights, after one untimed
# warm-up pass. As in `benchmarks/gradients.py`: on a GPU the peak of `torch.cuda.max_memory_allocated` above
# what was allocated before the pass; on a CPU the process's peak resident set size (VmHWM, reset through
# `/proc/self/clear_refs` after `malloc_trim`) above its size before the pass, which counts tensors, autograd's
# saved activations, temporaries and allocator slack (Python's `tracemalloc` does not see torch's allocations).
# ODE, CDE and RDE-RK4 use the default checkpointed gradients (√N stored states plus one segment's graph); the
# exact solver keeps only its checkpoints and recomputes each segment in a hand-written backward.


# %%
def resident_bytes(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def training_step(model, control, labels):
    model.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(control), labels).backward()


def peak_step_bytes(model, control, labels):
    """Peak memory of one forward + backward pass above the memory in use before it."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        training_step(model, control, labels)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap pages back, so that reusing them counts again
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM to the current resident size
    before = resident_bytes("VmRSS")
    training_step(model, control, labels)
    return resident_bytes("VmHWM") - before


batch = torch.arange(TRAINING["batch_size"])
memory = {}
for (name, _solver), label in zip(SETUPS, LABELS):
    model = results[(label, SEEDS[0])]["model"]
    control, labels = inputs[name]["train"][batch], train.labels[batch].to(device)
    training_step(model, control, labels)  # warm-up: lazily created buffers exist before the measurement
    gc.collect()  # once per set-up, not per step: it takes a large part of a second in a notebook kernel
    samples = [peak_step_bytes(model, control, labels) / 2**20 for _ in range(MEMORY_REPEATS)]
    memory[label] = (statistics.median(samples), min(samples), max(samples))
    print(
        f"{label:20s} peak MiB per step: median {memory[label][0]:.2f} "
        f"(min {memory[label][1]:.2f}, max {memory[label][2]:.2f} over {MEMORY_REPEATS} steps)"
    )

# %% [markdown]
# ## 6. Accuracy, speed and memory together

# %%
memory_unit = "GPU MiB allocated" if device.type == "cuda" else "MiB, peak RSS rise"


def accuracy_error(label):
    """The error bar of a test accuracy: std over seeds, or with one seed the binomial standard error."""
    mean, std = accuracy[label]
    return std if len(SEEDS) > 1 else (mean * (1 - mean) / len(test)) ** 0.5


fig, (ax_speed, ax_memory) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1.3, 1]})
for label in LABELS:
    rule, form = label.split("-", 1)
    (acc, _), (sec, sec_std) = accuracy[label], seconds[label]
    ax_speed.errorbar(
        sec,
        100 * acc,
        xerr=sec_std or None,
        yerr=100 * accuracy_error(label),
        fmt=RULE_MARKERS[rule],
        color=FORM_COLOURS[form],
        markersize=8,
        capsize=3,
        label=label,
    )
ax_speed.legend(fontsize=8, loc="best")
ax_speed.set_xscale("log")
ax_speed.margins(x=0.3, y=0.15)
low, high = ax_speed.get_xlim()
ax_speed.set_xticks([tick for tick in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20) if low <= tick <= high])
ax_speed.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
ax_speed.xaxis.set_minor_formatter(NullFormatter())
ax_speed.set_xlabel("training seconds per epoch (log scale" + (", 1 CPU thread)" if device.type == "cpu" else ")"))
ax_speed.set_ylabel(f"test accuracy % ({len(test)} utterances)")
bars = f"mean ± std over {len(SEEDS)} seeds" if len(SEEDS) > 1 else "one seed, bars: binomial standard error"
ax_speed.set_title(f"Accuracy vs time per epoch after {EPOCHS} epochs\n({bars})", fontsize=10)

positions = range(len(LABELS))
ax_memory.bar(
    positions,
    [memory[label][0] for label in LABELS],
    color=[FORM_COLOURS[label.split("-", 1)[1]] for label in LABELS],
    yerr=[
        [memory[label][0] - memory[label][1] for label in LABELS],
        [memory[label][2] - memory[label][0] for label in LABELS],
    ],
    capsize=3,
)
ax_memory.set_xticks(list(positions), LABELS, rotation=30, ha="right", fontsize=8)
ax_memory.set_ylabel(memory_unit)
ax_memory.set_title(
    f"Peak memory of one training step, batch {TRAINING['batch_size']}\n"
    f"(median of {MEMORY_REPEATS} steps, bars min-max)",
    fontsize=10,
)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## What the numbers say

# %%
ranked = sorted(LABELS, key=lambda label: accuracy[label][0], reverse=True)
best, runner_up = ranked[0], ranked[1]
margin = accuracy[best][0] - accuracy[runner_up][0]
noise = max(accuracy_error(best), accuracy_error(runner_up))
noise_text = (
    f"the larger std over {len(SEEDS)} seeds, {100 * noise:.1f} points"
    if len(SEEDS) > 1
    else f"the binomial standard error of one run on {len(test)} test utterances, {100 * noise:.1f} points"
)
print(
    f"1. Test accuracy after {EPOCHS} epochs: "
    + ", ".join(f"{label} {100 * accuracy[label][0]:.1f} %" for label in LABELS)
    + "."
)
print(
    f"   Most accurate: {best}, {100 * margin:.1f} points ahead of {runner_up}; "
    + ("more than twice " if margin > 2 * noise else "within twice ")
    + noise_text
    + "."
)
for rule in RULES:
    cde, rde = accuracy[f"{rule}-cde (rk4)"][0], accuracy[f"{rule}-rde (exact)"][0]
    print(
        f"   {rule}: the RDE (exact) is {100 * abs(cde - rde):.1f} points {'behind' if rde < cde else 'ahead of'} "
        f"the CDE; it takes "
        f"{steps[(f'{rule}-rde', 'exact')][0]} steps over the longest utterance where the CDE takes "
        f"{steps[(f'{rule}-cde', 'rk4')][0]}."
    )
level, movement = centroid_accuracy["level"], centroid_accuracy["movement"]
for rule in RULES:
    with_start = accuracy[f"{rule}-rde (exact)"][0]
    blind = statistics.mean(log_signatures_only[(rule, seed)] for seed in SEEDS)
    gap = with_start - blind
    print(
        f"   {rule}-rde (exact) on log-signatures only, the papers' input: {100 * blind:.1f} %, "
        f"{100 * abs(gap):.1f} points {'below' if gap > 0 else 'above'} the registry's input with the windows' "
        f"start points ({100 * with_start:.1f} %)"
        + (f", beyond {noise_text}." if abs(gap) > 2 * noise else f", within twice {noise_text}.")
    )
print(
    f"   Without training, a nearest class mean scores {100 * level:.1f} % on each utterance's mean level and "
    f"{100 * movement:.1f} % on its total increment: "
    + (
        "on this data the level carries more of the speaker than the movement, and log-signatures alone never see it."
        if level > movement
        else "the level carries no more of the speaker than the movement."
    )
)
fastest = min(LABELS, key=lambda label: seconds[label][0])
print(
    "2. Seconds per training epoch: "
    + ", ".join(f"{label} {seconds[label][0]:.3f}" for label in LABELS)
    + f". Fastest: {fastest}."
)
for rule in RULES:
    rk4, exact = seconds[f"{rule}-rde (rk4)"][0], seconds[f"{rule}-rde (exact)"][0]
    cde = seconds[f"{rule}-cde (rk4)"][0]
    print(
        f"   {rule}-rde: exact solver {rk4 / exact:.1f}x faster per epoch than rk4 on the same windows, "
        f"{cde / exact:.1f}x faster than the CDE; same-weight logits differ by at most "
        f"{agreement[rule]['max_logit_difference']:.1e}, {100 * agreement[rule]['same_prediction']:.1f} % "
        f"identical test predictions."
    )
smallest = min(LABELS, key=lambda label: memory[label][0])
largest = max(LABELS, key=lambda label: memory[label][0])
print(
    f"3. Peak memory of one training step ({memory_unit}): "
    + ", ".join(f"{label} {memory[label][0]:.1f}" for label in LABELS)
    + f". Smallest: {smallest}, {memory[largest][0] / memory[smallest][0]:.1f}x below {largest}; its min-max range "
    + (
        "lies below every other set-up's."
        if memory[smallest][2] < min(memory[label][1] for label in LABELS if label != smallest)
        else "overlaps another set-up's, so the difference is within the measurement's noise."
    )
)
print(
    f"4. Per seed, building the inputs (Hermite and log-signature controls of all splits) took "
    f"{build_seconds:.1f} s, training all set-ups {sum(seconds[label][0] for label in LABELS) * EPOCHS:.1f} s "
    f"(median epoch x {EPOCHS})."
)
still_improving = [
    label for label in LABELS if any(results[(label, seed)]["history"]["best_epoch"] == EPOCHS for seed in SEEDS)
]
if still_improving:
    print(
        f"5. Best validation epoch = the last one ({EPOCHS}) for "
        + ", ".join(still_improving)
        + ": still improving, so the accuracies above say how fast each set-up learns, not where it ends"
        + (" (BUDGET = 'full' trains longer)." if BUDGET == "small" else ".")
    )
