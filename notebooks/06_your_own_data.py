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
# # Bring your own data: from numpy arrays and a .ts file to a cross-validated model
#
# The path a new user takes, following docs/your_own_data.md:
#
# 1. **numpy arrays**: one (T_i, C) array per sample, ragged lengths, NaN where a value is missing, and each
#    sample with its own observation times;
# 2. **a local .ts file**: the same data written in the UEA/sktime `.ts` format (with `@timeStamps true`) and read
#    back with `neuralde_seq.data.read_file(...).to_arrays()`, checked to equal the arrays;
# 3. **cross-validation** with scikit-learn: `SequenceClassifier` (`neuralde_seq.sklearn`) in `cross_validate`,
#    for the CT-FWP the page recommends (Delta rule, log-signature RDE form, exact solver) and two baselines;
# 4. **a small grid search** over the one option the page says to choose on validation data: the time channel.
#
# The data are made up here, so that the reader knows what a model has to find: a two-channel sensor (say the
# x and y position of a pen) going round a circle at one of three angular speeds,
#
#     x(t) = r (cos(ωt + φ), sin(ωt + φ)) + ε,   ω ∈ {0.5, 1, 2} rad per time unit,
#
# with a random radius r, phase φ and noise ε. Every recording has its own duration and its own number of
# readings at random times, drawn the same way for every class: the times alone say nothing about the class, and
# the angle turned *per reading* varies widely within a class and overlaps between classes (printed below). Only
# values and times together give ω. A model that reads the sequences by index only has the overlapping cue.
#
# `BUDGET = "full"` (first code cell, or `python notebooks/execute.py --budget full`) uses five times more
# recordings, five folds, more epochs at batch size 8, every model at its registry width, and adds CKCNN in its
# grid mode (which reads the readings by index).

# %%
import os
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import sklearn
import torch
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_validate

from neuralde_seq.data import read_file
from neuralde_seq.files import write_text_atomic
from neuralde_seq.sklearn import SequenceClassifier

# "small": seconds on a CPU (what CI runs); "full": more recordings, folds and epochs, registry-width models.
# Change the default here, or set NEURALDE_SEQ_BUDGET (notebooks/execute.py --budget full).
BUDGET = os.environ.get("NEURALDE_SEQ_BUDGET", "small")

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
SEED = 0
SPEEDS = {"slow": 0.5, "medium": 1.0, "fast": 2.0}  # angular speed ω of each class, rad per time unit
PER_CLASS = 20 if BUDGET == "small" else 100  # recordings per class
FOLDS = 3 if BUDGET == "small" else 5
EPOCHS = 30 if BUDGET == "small" else 100  # docs/your_own_data.md's recipe: 30 epochs, batch size 8;
BATCH_SIZE = 16 if BUDGET == "small" else 8  # 16 halves the steps, for CI's time limit
READINGS = (20, 40)  # readings per recording, drawn uniformly
DURATION = (5.0, 15.0)  # length of a recording in time units, drawn uniformly
MISSING = 0.2  # share of values missing, per channel
# At the small budget every model runs at half its registry width (CI's time limit); full: registry defaults.
HALF = BUDGET == "small"
RDE_WIDTH = {"d_model": 32, "n_heads": 4} if HALF else {}
BASELINE_WIDTH = {"hidden": 16} if HALF else {}
CKCNN_WIDTH = {"hidden": 16, "kernel_hidden": 16} if HALF else {}

# %% [markdown]
# ## 1. The user's arrays
#
# What a user typically holds: a list `X` of (T_i, 2) arrays, a list `times` of (T_i,) arrays (time units since
# the recording started, strictly increasing) and the labels `y`. A reading is logged when at least one of the
# two channels arrives, so a time step is never entirely missing.

# %%
rng = np.random.default_rng(SEED)


def recording(speed):
    """One recording: (T, 2) values with NaN where missing, and its (T,) observation times."""
    duration = rng.uniform(*DURATION)
    t = np.unique(np.round(rng.uniform(0.0, duration, rng.integers(READINGS[0], READINGS[1] + 1)), 3))
    angle = speed * t + rng.uniform(0.0, 2 * np.pi)
    values = rng.uniform(0.8, 1.2) * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    values += 0.15 * rng.normal(size=values.shape)
    missing = rng.random(values.shape) < MISSING
    both = np.flatnonzero(missing.all(axis=1))
    missing[both, rng.integers(0, 2, both.size)] = False  # keep one channel of a reading that lost both
    values[missing] = np.nan
    return values, t


y = rng.permutation(np.repeat(list(SPEEDS), PER_CLASS))
X, times = map(list, zip(*(recording(SPEEDS[label]) for label in y)))

lengths = np.array([len(t) for t in times])
spans = np.array([t[-1] - t[0] for t in times])
turns_per_reading = {
    c: [SPEEDS[c] * s / (n - 1) / (2 * np.pi) for s, n, lab in zip(spans, lengths, y) if lab == c] for c in SPEEDS
}
print(
    f"{len(X)} recordings ({PER_CLASS} per class), {lengths.min()}-{lengths.max()} readings each, "
    f"spans {spans.min():.1f}-{spans.max():.1f} time units, "
    f"{np.mean(np.concatenate([np.isnan(x).ravel() for x in X])):.0%} of values missing"
)
print(
    "turns of the circle per reading, min-max within each class: "
    + ", ".join(f"{c} {min(v):.3f}-{max(v):.3f}" for c, v in turns_per_reading.items())
)

fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), sharey=True)
for ax, label in zip(axes, SPEEDS):
    for k, i in enumerate(np.flatnonzero(y == label)[:2]):
        observed = ~np.isnan(X[i][:, 0])
        ax.plot(
            times[i][observed],
            X[i][observed, 0],
            "o-",
            markersize=3,
            linewidth=0.8,
            color=f"C{k}",
            label=f"#{i}: {lengths[i]} readings",
        )
    ax.set_title(f"{label} (ω = {SPEEDS[label]})", fontsize=10)
    ax.set_xlabel("time since the recording started")
    ax.legend(fontsize=7, loc="upper center", ncol=2)
axes[0].set_ylim(-1.7, 2.0)
axes[0].set_ylabel("channel 1 (x position), observed")
fig.suptitle("Two example recordings per class (channel 1; missing readings left out)", fontsize=11)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 2. The same data as a local .ts file
#
# The library reads `.ts` and ARFF files (`read_file` for one file, `load_files` for a TRAIN/TEST pair or a folder)
# but does not write them, so the file is written here by hand, as a user exporting their data would. With
# `@timeStamps true` each channel of a case is a list of `(time,value)` tuples, channels are separated by `:`,
# the label comes last, and `?` marks a missing value:
#
#     (0.12,0.93),(0.57,?),...:(0.12,0.31),(0.57,0.66),...:fast
#
# The file is read back in float64 (the reader's default is float32) so that the check can ask for exact equality.
# One thing to know: the reader treats time steps after a series' last observed value as padding and cuts them
# (`meta["trailing_missing_cut"]` counts them), so a final reading with every channel missing would not come back.
# Our readings always keep a channel, so the count must be 0.


# %%
def write_ts(path, X, times, y, name):
    """A labelled, timestamped, multichannel .ts file: exact float reprs, '?' for NaN."""
    value = lambda v: "?" if np.isnan(v) else repr(float(v))  # noqa: E731
    header = [
        f"@problemName {name}",
        "@timeStamps true",
        "@missing true",
        "@univariate false",
        f"@dimensions {X[0].shape[1]}",
        "@equalLength false",
        "@classLabel true " + " ".join(sorted(set(y))),
        "@data",
    ]
    cases = [
        ":".join(",".join(f"({float(s)!r},{value(v)})" for s, v in zip(t, x[:, c])) for c in range(x.shape[1]))
        + f":{label}"
        for x, t, label in zip(X, times, y)
    ]
    write_text_atomic(path, "\n".join(header + cases) + "\n")


with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "Circles.ts"
    write_ts(path, X, times, y, "Circles")
    text = path.read_text()
    dataset = read_file(path, dtype=torch.float64)
X_file, y_file, times_file = dataset.to_arrays()

print(text[: text.index("@data") + 6] + text.split("\n")[8][:90] + " ...")
checks = {
    "number of samples": len(X_file) == len(X),
    "values with their NaN places": all(np.array_equal(a, b, equal_nan=True) for a, b in zip(X_file, X)),
    "times": all(np.array_equal(a, b) for a, b in zip(times_file, times)),
    "labels": bool(np.all(y_file == y)),
}
assert dataset.meta["trailing_missing_cut"] == 0, "the reader cut trailing all-missing readings"
print(
    f"\n{path.name}: {len(text) / 1024:.0f} KiB, read back as {len(X_file)} samples of "
    f"{dataset.num_channels} channels, classes {dataset.class_names}"
)
for what, ok in checks.items():
    print(f"  {what:31s} {'equal' if ok else 'DIFFERENT'}")
assert all(checks.values()), "the .ts round trip changed the data"

# %% [markdown]
# ## 3. Cross-validation with scikit-learn
#
# From here on the models read what came back from the file. `SequenceClassifier` takes the per-sample times as a
# keyword (`fit(X, y, times=...)`); inside scikit-learn's cross-validation they travel with metadata routing, which
# splits them with X and y (docs/your_own_data.md, "numpy arrays and the estimators"). `cross_validate` is
# `cross_val_score` plus the accuracy on the training folds, which tells a model that is still learning from one
# that memorises. Each fit standardises the channels with its own training folds' statistics; the folds are
# stratified and shuffled once (seed 0), the same for every model.
#
# | model | reads | what the times do |
# | --- | --- | --- |
# | CT-FWP `delta-rde`, exact solver | per 4-reading window: log-signature of (time, x, y), start point | path channel |
# | GRU-D | the readings, a mask, the gap since each channel was last seen | decay hidden state and last value |
# | CKCNN (irregular mode, default) | each reading at its time t_i, continuous kernel at t_i − t_j | kernel positions |
#
# The CT-FWP is the page's recipe for a first try: the Delta rule dW/ds = σ(β)(v − W k)kᵀ driven by the
# log-signature of each window (its increments and areas, time among the channels) and the path's point where the
# window starts (its level), each window's step solved in closed form (`solver: {"method": "exact"}`).

# %%
sklearn.set_config(enable_metadata_routing=True)
folds = StratifiedKFold(n_splits=FOLDS, shuffle=True, random_state=SEED)


def classifier(model, model_options=None, control_options=None):
    """A SequenceClassifier with this notebook's training settings, asking for the times in fit and score."""
    estimator = SequenceClassifier(
        model,
        model_options=model_options,
        control_options=control_options,
        epochs=EPOCHS,
        batch_size=BATCH_SIZE,
        random_state=SEED,
        device=str(device),
    )
    return estimator.set_fit_request(times=True).set_score_request(times=True)


RDE_OPTIONS = {"solver": {"method": "exact"}, **RDE_WIDTH}
models = {
    "CT-FWP delta-rde": classifier("delta-rde", RDE_OPTIONS),
    "GRU-D": classifier("gru-d", BASELINE_WIDTH),
    "CKCNN": classifier("ckcnn", CKCNN_WIDTH),
}
if BUDGET == "full":  # grid mode, which reads the points by index and ignores their times
    models["CKCNN (grid)"] = classifier("ckcnn", {**CKCNN_WIDTH, "mode": "grid"})

scores, train_scores, seconds = {}, {}, {}
for name, estimator in models.items():
    start = time.perf_counter()
    cv = cross_validate(estimator, X_file, y_file, cv=folds, params={"times": times_file}, return_train_score=True)
    seconds[name] = time.perf_counter() - start
    scores[name], train_scores[name] = cv["test_score"], cv["train_score"]
    print(
        f"{name:17s} held-out folds {np.round(scores[name], 2)} mean {scores[name].mean():.3f} "
        f"± {scores[name].std():.3f} | training folds mean {train_scores[name].mean():.3f} "
        f"| {seconds[name]:.0f} s for {FOLDS} fits (shared CPU)"
    )

# Does CKCNN see the times? Predict the same samples with their times and with 0, 1, 2, ...
probe = classifier("ckcnn", CKCNN_WIDTH).set_params(epochs=1).fit(X_file[:12], y_file[:12], times=times_file[:12])
index_times = [np.arange(len(t), dtype=float) for t in times_file[:12]]
ckcnn_reads_times = not np.array_equal(
    probe.predict_proba(X_file[:12], times=times_file[:12]), probe.predict_proba(X_file[:12], times=index_times)
)
print(
    f"CKCNN gives other probabilities with the real times than with indices (it reads the times): {ckcnn_reads_times}"
)

# %% [markdown]
# ## 4. Choosing the time channel with GridSearchCV
#
# docs/your_own_data.md: what the log-signature model's time channel should be depends on the data, and it is
# cheap to choose on validation data. The choices: the times divided by the longest span in the training folds (the
# estimators' default, `time_unit: "auto"`, so the channel runs over [0, 1]) and no time channel; the full budget
# adds the raw times (`time_unit: 1.0`). The search uses the same folds as above, so its first row must reproduce the
# CT-FWP's scores of section 3 exactly (a check that fits are deterministic). `refit=False`: only the scores are wanted
# here. The best option's score is chosen on these folds, so it is an optimistic estimate; for an honest one, nest the
# search in `cross_validate`.

# %%
TIME_OPTIONS = [None, {"time_channel": False}] + ([{"time_unit": 1.0}] if BUDGET == "full" else [])
OPTION_NAMES = ["times / longest span (default)", "no time channel", "raw times"][: len(TIME_OPTIONS)]
search = GridSearchCV(
    classifier("delta-rde", RDE_OPTIONS),
    {"control_options": TIME_OPTIONS},
    cv=folds,
    refit=False,
    return_train_score=True,
)
start = time.perf_counter()
search.fit(X_file, y_file, times=times_file)
search_seconds = time.perf_counter() - start

results = search.cv_results_
option_scores, option_train_scores = {}, {}
for k, option in enumerate(results["params"]):
    name = OPTION_NAMES[TIME_OPTIONS.index(option["control_options"])]
    option_scores[name] = np.array([results[f"split{f}_test_score"][k] for f in range(FOLDS)])
    option_train_scores[name] = np.array([results[f"split{f}_train_score"][k] for f in range(FOLDS)])
    print(
        f"{name:21s} held-out folds {np.round(option_scores[name], 2)} mean {option_scores[name].mean():.3f} "
        f"± {option_scores[name].std():.3f} | training folds mean {option_train_scores[name].mean():.3f}"
    )
best_option = OPTION_NAMES[TIME_OPTIONS.index(search.best_params_["control_options"])]
reproduced = np.array_equal(option_scores["times / longest span (default)"], scores["CT-FWP delta-rde"])
print(
    f"best: {best_option}; search took {search_seconds:.0f} s; "
    f"its default row reproduces section 3 exactly: {reproduced}"
)

# %% [markdown]
# ## 5. The accuracies side by side
#
# Bars: mean accuracy on the held-out folds; dots: the single folds (the same test samples for every model);
# black dashes: mean accuracy on the training folds; grey dashed line: chance. The light bars are the CT-FWP with
# the other time options of the grid search.

# %%
variants = {f"delta-rde, {n}": n for n in option_scores if n != "times / longest span (default)"}
bars = {**scores, **{label: option_scores[n] for label, n in variants.items()}}
bar_train = {**train_scores, **{label: option_train_scores[n] for label, n in variants.items()}}
colours = ["C0", "C1", "C2", "C4"][: len(scores)] + ["#9ecae1"] * len(variants)
n_samples = len(X_file)
test_per_fold = n_samples // FOLDS
chance = 1 / len(SPEEDS)

fig, ax = plt.subplots(figsize=(8, 4.2))
positions = np.arange(len(bars))
ax.bar(positions, [s.mean() for s in bars.values()], color=colours, alpha=0.85)
for x, s in zip(positions, bars.values()):
    ax.text(x, 0.03, f"{s.mean():.2f}", ha="center", fontsize=9)
jitter = np.linspace(-0.15, 0.15, FOLDS)
for x, name in zip(positions, bars):
    ax.plot(x + jitter, bars[name], "ko", markersize=4, label="held-out fold" if x == 0 else None)
    ax.plot(
        [x - 0.35, x + 0.35],
        [bar_train[name].mean()] * 2,
        "k--",
        linewidth=1.5,
        label="training folds (mean)" if x == 0 else None,
    )
ax.axhline(chance, color="grey", linestyle=":", label=f"chance ({chance:.2f})")
ax.set_xticks(positions, [n.replace(", ", ",\n").replace(" (", "\n(") for n in bars], fontsize=8)
ax.set_xlabel("light bars: the CT-FWP with another time option (grid search, section 4)", fontsize=8)
ax.set_ylim(0, 1.2)  # room for the legend above accuracy 1
ax.set_yticks(np.linspace(0, 1, 6))
ax.set_ylabel(f"accuracy (held-out fold: ~{test_per_fold} samples)")
ax.set_title(
    f"{FOLDS}-fold cross-validation on {n_samples} recordings of three rotation speeds ({EPOCHS} epochs)", fontsize=10
)
ax.legend(fontsize=8, loc="upper right", ncol=3)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## What the numbers say


# %%
def mean_std(s):
    return f"{s.mean():.2f} ± {s.std():.2f}"


ranked = sorted(scores, key=lambda n: scores[n].mean(), reverse=True)
best, second = ranked[0], ranked[1]
margin = scores[best].mean() - scores[second].mean()
spread = max(scores[best].std(), scores[second].std())
# The pooled accuracy of N held-out predictions made at chance level has this binomial standard error.
chance_se = np.sqrt(chance * (1 - chance) / n_samples)
above_chance = [n for n in bars if bars[n].mean() > chance + 2 * chance_se]
near_chance = [n for n in bars if n not in above_chance]
with_time, without_time = option_scores["times / longest span (default)"], option_scores["no time channel"]
time_gain = with_time.mean() - without_time.mean()
time_spread = max(with_time.std(), without_time.std())


def diagnosis(name):
    """Still learning (training folds not fitted), or fitted with the gap to the held-out folds."""
    train, test = bar_train[name].mean(), bars[name].mean()
    if train < 0.9:
        return f"{name} fits only {train:.2f} of its training folds: still learning at {EPOCHS} epochs"
    return f"{name} fits {train:.2f} of its training folds, a gap of {(train - test) * 100:.0f} points to held-out"


print(
    f"1. Data: {n_samples} recordings ({PER_CLASS} per class) went through a .ts file and came back identical "
    f"({', '.join(checks)}). {FOLDS} folds of ~{test_per_fold} held-out samples: one sample is "
    f"{100 / test_per_fold:.0f} points of a fold's accuracy. Every model at {'half its' if HALF else 'its'} registry "
    f"width, {EPOCHS} epochs, batch size {BATCH_SIZE}, one training seed and one fold split."
)
print(
    "2. Cross-validated accuracy (mean ± std over folds): "
    + "; ".join(f"{n} {mean_std(s)}" for n, s in bars.items())
    + "."
)
verdict = (
    "ahead by more than the fold spread"
    if margin > spread
    else "within the fold spread: at this size the order of the two is not settled"
)
print(
    f"3. Most accurate of the section-3 models: {best}, {margin * 100:.0f} points above {second} ({verdict}, "
    f"largest fold std {spread * 100:.0f} points)."
)
print(
    f"4. Above chance ({chance:.2f}) by more than 2 binomial standard errors ({2 * chance_se:.2f}) over the "
    f"{n_samples} predictions: "
    + (" | ".join(above_chance) or "none")
    + ("; not: " + " | ".join(near_chance) if near_chance else "")
    + "."
)
time_verdict = (
    f"the times carry the class: without the time channel it lost {time_gain * 100:.0f} points, more than "
    f"the fold spread ({time_spread * 100:.0f})"
    if time_gain > time_spread
    else f"dropping the time channel changed the accuracy by {-time_gain * 100:+.0f} points, within the "
    f"fold spread ({time_spread * 100:.0f}): no effect shown at this size"
)
print(f"5. CT-FWP time channel: {time_verdict}. The grid search picks '{best_option}' (chosen on the same folds).")
print("6. Training against held-out accuracy: " + "; ".join(diagnosis(n) for n in scores) + ".")
print(
    "7. CKCNN "
    + (
        "reads the times: its outputs with the real times differ from those with indices (its default "
        "irregular mode; mode='grid' reads the points by index)."
        if ckcnn_reads_times
        else "gave identical outputs with the real times and with indices: it did not read the times here."
    )
)
