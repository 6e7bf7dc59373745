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
# # CT-FWPs against baselines on irregular data: 0, 30, 50 and 70 % of the observations dropped
#
# Two continuous-time fast weight programmers (CT-FWPs) with the Delta rule (docs/equations.md),
#
#     dW/ds = σ(β) (v − W k) kᵀ,   k = softmax(k_raw),  v = tanh(v_raw),
#
# against six baselines for irregularly sampled series, all on the same data with a growing fraction of the
# observations removed. The CDE form is solved by rk4, one step per observation interval; the RDE form with
# `Exact()` (the solver method): its inputs are constant over each log-signature window, so k, v and c = σ(β) are
# constant and one window of length h is one closed-form step (docs/equations.md, "Closed forms on constant
# inputs"),
#
#     W(t + h) = W(t) + (v − W k) kᵀ · (1 − e^{−c‖k‖²h}) / ‖k‖².
#
# | model | registry name | input | solved by |
# | --- | --- | --- | --- |
# | CT-FWP, neural CDE (paper Eq. 23-25) | `delta-cde` | Hermite cubic control | rk4 |
# | CT-FWP, log-signature neural RDE | `delta-rde` | log-signature windows (depth 2, 4 steps), start points | exact |
# | NCDE (Kidger et al. 2020) | `ncde` | Hermite cubic control | rk4 |
# | NRDE (Morrill et al. 2021) | `nrde` | log-signature windows (depth 1, 2 steps) | rk4 |
# | GRU-D | `gru-d` | observations | discrete |
# | ODE-RNN | `ode-rnn` | observations | rk4 between observations |
# | CKCNN (continuous kernel convolutions) | `ckcnn` | observations on the time grid | convolution |
# | CCNN (separable FlexConv) | `ccnn` | observations on the time grid | convolution |
#
# - `delta-cde` takes its keys and learning rates from X'(s) and its values from X(s), which moves inside every
#   observation interval: no closed form, so rk4.
# - `delta-rde` reads the depth-2 log-signature of each window of 4 observation intervals and the path's point at
#   the window's start (its level; `window_start_values`, the registry's default): one exact step per
#   window.
# - NCDE: dh = f_θ(h) dX(s); NRDE: the same field driven by log-signature windows. GRU-D decays its inputs
#   towards the training means and its state with the time since the last observation; ODE-RNN evolves its
#   state by an ODE between observations and updates it by a GRU at each; CKCNN and CCNN convolve the series
#   (missing points as zeros with a mask) with kernels that are networks of the relative time.
#
# **Data.** The embedded UEA JapaneseVowels utterances (12 cepstral channels, 7 to 29 time points, 9 speakers),
# with the drop of `neuralde-seq compare`: the library's `drop_observations` removes round(rate · L) of each
# utterance's L time points, all channels together, drawn without replacement (at least 2 kept), seeded with the
# run's seed for the training file and seed + 1 for the test file. Every channel is standardised with the mean
# and standard deviation of the training set at 0 % dropped, so that the four test sets of a seed differ only in
# the dropped points.
#
# **Two results.** (1) Each model is trained and tested at each drop rate: accuracy against drop rate.
# (2) Every trained model is also tested at the three other rates: how much does a model trained on dense
# data lose on sparse data, and what does training on sparse data gain on sparse and cost on dense test data?
#
# **Budget.** `"small"` (what CI runs, under a minute of CPU on 2 cores) trains one seed on a stratified subset
# of the utterances for a few epochs. `BUDGET = "full"` (first code cell, or `python notebooks/execute.py
# --budget full`; meant for a GPU) uses every utterance, 25 epochs and three seeds. Widths are the registry's at
# both budgets (CT-FWPs d_model 64, 8 heads; baselines hidden 32): the small budget is cut through the data, the
# epochs and the seeds, not the widths, because solved exactly the CT-FWPs are not where the time goes (the
# training seconds of every model are printed below). In both, CKCNN gets the kernel settings of `compare.yaml`
# for these short series (ω₀ = 10, horizon 28: the kernel network's input spans the longest utterance), and the
# ODE-solved models use `gradient="backprop"` (the same gradient as the default `"checkpoint"`, and faster
# at these 7-29 steps; README, "Gradients: which method").

# %%
import math
import os
import statistics
import time

import matplotlib.pyplot as plt
import torch

from neuralde_seq import (
    Backprop,
    Classification,
    Exact,
    SolverOptions,
    create_model,
    fit,
    model_defaults,
    model_inputs,
    predict,
)
from neuralde_seq.data import drop_observations, load_japanese_vowels, standardise, stratified_split

# "small": well under a minute of CPU (what CI runs); "full": every utterance, 25 epochs, three seeds.
# Change the default here, or set NEURALDE_SEQ_BUDGET (notebooks/execute.py --budget full).
BUDGET = os.environ.get("NEURALDE_SEQ_BUDGET", "small")

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DROP_RATES = [0.0, 0.3, 0.5, 0.7]
SEEDS = [0] if BUDGET == "small" else [0, 1, 2]
TRAIN_FILE_FRACTION = 0.3 if BUDGET == "small" else 1.0  # of the 270 training utterances
TEST_FILE_FRACTION = 0.2 if BUDGET == "small" else 1.0  # of the 370 test utterances
EPOCHS = 4 if BUDGET == "small" else 25
LR = 3e-3  # as neuralde_seq/configs/compare.yaml
BATCH_SIZE = 8 if BUDGET == "small" else 32
EXACT = SolverOptions(Exact())
BACKPROP = SolverOptions(gradient=Backprop())

# Registry name -> constructor overrides, control overrides, solver. Widths: the registry's.
MODELS = {
    "delta-cde": dict(solver=BACKPROP),
    "delta-rde": dict(solver=EXACT),
    "ncde": dict(solver=BACKPROP),
    "nrde": dict(solver=BACKPROP),
    "gru-d": dict(),
    "ode-rnn": dict(solver=BACKPROP),
    "ckcnn": dict(options=dict(omega_0=10.0, horizon=28.0)),
    "ccnn": dict(),
}
CT_FWPS = ["delta-cde", "delta-rde"]
BASELINES = [name for name in MODELS if name not in CT_FWPS]
for name in MODELS:
    width_keys = ("d_model", "n_heads") if name in CT_FWPS else ("hidden",)
    print(f"{name:10s} " + ", ".join(f"{key} {model_defaults(name)[key]}" for key in width_keys))
print(
    f"budget {BUDGET}: {len(MODELS)} models x {len(DROP_RATES)} drop rates x {len(SEEDS)} seed(s), "
    f"{EPOCHS} epochs of batches of {BATCH_SIZE}, lr {LR}, device {device}"
)

# %% [markdown]
# ## The data at each drop rate
#
# For each seed: one stratified subset of the utterances of each file (the whole files at the full budget), the
# same utterances at every drop rate; then the library's seeded drop at each rate. Each model's input is built
# once per data set (`model_inputs`: the control its registry entry names, or the raw observations); the test
# sets' inputs serve every model trained at any rate.


# %%
def data_at_rates(seed):
    """{rate: (train, test)} for one seed: the same utterances at every rate, only the dropped points differ."""
    train_file, test_file = load_japanese_vowels(dtype=torch.float64)
    if TRAIN_FILE_FRACTION < 1.0:
        train_file = stratified_split(train_file, (TRAIN_FILE_FRACTION, 1 - TRAIN_FILE_FRACTION), seed=seed)[0]
        test_file = stratified_split(test_file, (TEST_FILE_FRACTION, 1 - TEST_FILE_FRACTION), seed=seed)[0]
    dropped = {
        rate: (drop_observations(train_file, rate, seed=seed), drop_observations(test_file, rate, seed=seed + 1))
        for rate in DROP_RATES
    }
    reference = dropped[0.0][0]  # every rate standardised with the statistics of the undropped training set
    return {
        rate: tuple(ds.to(dtype=torch.float32) for ds in standardise(reference, *pair)[1:])
        for rate, pair in dropped.items()
    }


data = {seed: data_at_rates(seed) for seed in SEEDS}
train, test = data[SEEDS[0]][0.0]
N_TEST = len(test)
print(f"utterances: train {len(train)}, test {N_TEST}; {train.num_classes} classes, {train.num_channels} channels")
for rate, pair in data[SEEDS[0]].items():
    kept = [float(ds.observed.any(-1).sum() / ds.lengths.sum()) for ds in pair]
    print(f"drop {rate:.0%}: time points kept {kept[0]:.1%} (train), {kept[1]:.1%} (test)")

# Built on the CPU (interpolating through missing values is a loop of small steps), then moved to the device.
start = time.perf_counter()
inputs = {
    (name, seed, rate, split): model_inputs(
        name, ds.times, ds.values, ds.lengths, **MODELS[name].get("control", {})
    ).to(device)
    for name in MODELS
    for seed in SEEDS
    for rate in DROP_RATES
    for split, ds in zip(("train", "test"), data[seed][rate])
}
labels = {
    (seed, rate, split): ds.labels.to(device)
    for seed in SEEDS
    for rate in DROP_RATES
    for split, ds in zip(("train", "test"), data[seed][rate])
}
print(f"{len(inputs)} model inputs built in {time.perf_counter() - start:.1f} s")

# %% [markdown]
# ## Training: every model at every drop rate
#
# Each (model, drop rate, seed) is trained by `neuralde_seq.fit` (Adam, cross-entropy, the same epochs, learning
# rate and batch size for every model; no validation split: the weights after the last epoch are scored), then
# scored on its own test set and on the test sets of the other three rates.

# %%
accuracy = {}  # (model, seed, train rate, test rate) -> test accuracy
final_train_acc = {}  # (model, seed, train rate) -> training accuracy over the last epoch
train_seconds = {name: 0.0 for name in MODELS}
parameters = {}
start = time.perf_counter()
for seed in SEEDS:
    for train_rate in DROP_RATES:
        for name, row in MODELS.items():
            train_inputs = inputs[name, seed, train_rate, "train"]
            torch.manual_seed(seed)
            model = create_model(
                name, train_inputs, num_classes=train.num_classes, solver=row.get("solver"), **row.get("options", {})
            ).to(device)
            if hasattr(model, "set_empirical_mean"):  # GRU-D decays missing inputs towards the training means
                model.set_empirical_mean(train_inputs)
            t0 = time.perf_counter()
            history = fit(
                model,
                Classification(),
                (train_inputs, labels[seed, train_rate, "train"]),
                epochs=EPOCHS,
                lr=LR,
                batch_size=BATCH_SIZE,
                seed=seed,
                progress=False,
            )
            train_seconds[name] += time.perf_counter() - t0
            final_train_acc[name, seed, train_rate] = history["train_accuracy"][-1]
            parameters[name] = sum(p.numel() for p in model.parameters())
            for test_rate in DROP_RATES:
                logits = predict(model, inputs[name, seed, test_rate, "test"], batch_size=256)
                correct = logits.argmax(1) == labels[seed, test_rate, "test"]
                accuracy[name, seed, train_rate, test_rate] = float(correct.float().mean())
print(f"{len(accuracy) // len(DROP_RATES)} runs in {time.perf_counter() - start:.0f} s")
for name in sorted(MODELS, key=train_seconds.get):  # cheapest first
    print(f"{name:10s} {parameters[name]:6d} parameters, {train_seconds[name]:5.1f} s of training in all")
slower_baselines = [n for n in BASELINES if train_seconds[n] > max(train_seconds[f] for f in CT_FWPS)]
print(
    f"{len(slower_baselines)} of {len(BASELINES)} baselines took longer to train than the slower CT-FWP"
    + (f": {', '.join(slower_baselines)}" if slower_baselines else "")
)

# %% [markdown]
# ## 1. Accuracy against drop rate
#
# Each model trained and tested at the same rate. The error bars are the noise of the measurement: at the
# small budget (one seed) a 95 % binomial interval of the accuracy on the test utterances, ± 1.96 √(p(1 − p)/n);
# with several seeds, the standard deviation across seeds.


# %%
def mean_accuracy(name, train_rate, test_rate):
    return statistics.mean(accuracy[name, seed, train_rate, test_rate] for seed in SEEDS)


def noise(name, train_rate, test_rate):
    """Half-width of what a difference must exceed: seed spread, or the binomial interval with one seed."""
    if len(SEEDS) > 1:
        return statistics.stdev(accuracy[name, seed, train_rate, test_rate] for seed in SEEDS)
    p = mean_accuracy(name, train_rate, test_rate)
    return 1.96 * math.sqrt(p * (1 - p) / N_TEST)


matched = {name: [mean_accuracy(name, rate, rate) for rate in DROP_RATES] for name in MODELS}
matched_noise = {name: [noise(name, rate, rate) for rate in DROP_RATES] for name in MODELS}

fig, ax = plt.subplots(figsize=(7.5, 4.2))
percent = [100 * rate for rate in DROP_RATES]
for i, name in enumerate(MODELS):
    style = (
        dict(linestyle="-", linewidth=2.2, marker="o")
        if name in CT_FWPS
        else dict(linestyle="--", linewidth=1.2, marker="s", markersize=4)
    )
    offset = (i - (len(MODELS) - 1) / 2) * 0.5  # spread the error bars sideways so they stay readable
    ax.errorbar(
        [x + offset for x in percent],
        [100 * a for a in matched[name]],
        yerr=[100 * e for e in matched_noise[name]],
        capsize=2,
        label=name,
        **style,
    )
ax.set_xticks(percent, [f"{rate:.0%}" for rate in DROP_RATES])
ax.set_xlabel("observations dropped (train and test at the same rate)")
ax.set_ylabel("test accuracy (%)")
bars = "95 % binomial interval" if len(SEEDS) == 1 else f"± std over {len(SEEDS)} seeds"
ax.set_title(
    f"JapaneseVowels ({BUDGET} budget): {N_TEST} test utterances, {len(SEEDS)} seed(s); bars: {bars}", fontsize=10
)
ax.axhline(100 / train.num_classes, color="grey", linestyle=":", linewidth=1)
ax.text(percent[-1], 100 / train.num_classes + 1, "chance", color="grey", fontsize=8, ha="right")
ax.legend(fontsize=8, ncol=2, title="solid: CT-FWPs", title_fontsize=8)
plt.tight_layout()
plt.show()
print("test accuracy (%), trained and tested at the same rate:")
print(f"{'model':10s}" + "".join(f"{rate:>9.0%}" for rate in DROP_RATES))
for name in MODELS:
    cells = zip(matched[name], matched_noise[name])
    print(f"{name:10s}" + "".join(f"{100 * a:6.1f}±{100 * e:<3.0f}" for a, e in cells))

# %% [markdown]
# ## 2. Trained at one rate, tested at another
#
# Every model of section 1 scored on all four test sets (scoring costs little, so every training rate is shown,
# not only 0 % and 50 %): rows are the drop rate it was trained at, columns the rate it is tested at; the
# diagonal is section 1. Read along a row for robustness to sparser (or denser) test data than the model was
# trained on, down a column for what the training rate does on that test set.

# %%
fig, axes = plt.subplots(2, 4, figsize=(12, 6.4), sharex=True, sharey=True, layout="constrained")
labels = [f"{rate:.0%}" for rate in DROP_RATES]
for ax, name in zip(axes.flat, MODELS):
    grid = [[100 * mean_accuracy(name, tr, te) for te in DROP_RATES] for tr in DROP_RATES]
    image = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis")
    for r, row in enumerate(grid):
        for c, value in enumerate(row):
            ax.text(
                c,
                r,
                f"{value:.0f}",
                ha="center",
                va="center",
                fontsize=9,
                color="white" if value < 60 else "black",
                fontweight="bold" if r == c else "normal",
            )
    ax.set_title(name + (" (CT-FWP)" if name in CT_FWPS else ""), fontsize=10)
    ax.set_xticks(range(len(DROP_RATES)), labels)
    ax.set_yticks(range(len(DROP_RATES)), labels)
for ax in axes[1]:
    ax.set_xlabel("dropped at test")
for ax in axes[:, 0]:
    ax.set_ylabel("dropped in training")
fig.colorbar(image, ax=axes, shrink=0.8, label="test accuracy (%)")
fig.suptitle(
    f"Test accuracy (%) by training and test drop rate ({BUDGET} budget: {N_TEST} test utterances, "
    f"{len(SEEDS)} seed(s); diagonal bold)",
    fontsize=11,
)
plt.show()

# %% [markdown]
# ## What the numbers say

# %%
lowest, mid, highest = DROP_RATES[0], DROP_RATES[2], DROP_RATES[-1]
typical_noise = statistics.mean(e for errors in matched_noise.values() for e in errors)
what_noise = (
    "the 95 % binomial interval of one seed" if len(SEEDS) == 1 else f"the standard deviation over {len(SEEDS)} seeds"
)


def difference(name_a, cell_a, name_b, cell_b):
    """Accuracy of a minus b, and whether it exceeds the two noise half-widths together; cells: (train, test)."""
    diff = mean_accuracy(name_a, *cell_a) - mean_accuracy(name_b, *cell_b)
    return diff, abs(diff) > noise(name_a, *cell_a) + noise(name_b, *cell_b)


def verdict(diff, resolved):
    return f"{100 * diff:+.1f}" + ("" if resolved else " (noise)")


print(
    f"Budget {BUDGET}: {len(SEEDS)} seed(s), {len(train)} training and {N_TEST} test utterances, {EPOCHS} epochs. "
    f"Noise of one accuracy ({what_noise} on {N_TEST} test utterances): about ±{100 * typical_noise:.0f} points; "
    "a difference counts only beyond the noise of both accuracies added."
)

print("1. Trained and tested at the same rate:")
verdicts = []  # (difference, resolved) of every comparison printed below
for k, rate in enumerate(DROP_RATES):
    ranked = sorted(MODELS, key=lambda n: matched[n][k], reverse=True)
    best_fwp = max(CT_FWPS, key=lambda n: matched[n][k])
    best_base = max(BASELINES, key=lambda n: matched[n][k])
    lead, lead_resolved = difference(ranked[0], (rate, rate), ranked[1], (rate, rate))
    fwp_gap, fwp_resolved = difference(best_fwp, (rate, rate), best_base, (rate, rate))
    verdicts += [(lead, lead_resolved), (fwp_gap, fwp_resolved)]
    print(
        f"   {rate:.0%}: most accurate {ranked[0]} {100 * matched[ranked[0]][k]:.1f} %, ahead of {ranked[1]} by "
        f"{verdict(lead, lead_resolved)}; best CT-FWP {best_fwp} {100 * matched[best_fwp][k]:.1f} % "
        f"(rank {ranked.index(best_fwp) + 1} of {len(MODELS)}), against the best baseline {best_base}: "
        f"{verdict(fwp_gap, fwp_resolved)} points."
    )
changes = {name: difference(name, (highest, highest), name, (lowest, lowest)) for name in MODELS}
print(
    f"   {lowest:.0%} -> {highest:.0%} dropped (each trained at its test rate), accuracy change in points: "
    + ", ".join(f"{n} {verdict(*changes[n])}" for n in MODELS)
    + "."
)
verdicts += list(changes.values())
resolved_drops = [n for n in MODELS if changes[n][1] and changes[n][0] < 0]
print(f"   Resolved losses from dropping {highest:.0%}: {', '.join(resolved_drops) or 'none'}.")
gaps = [
    statistics.mean(matched[n][k] for n in CT_FWPS) - statistics.mean(matched[n][k] for n in BASELINES)
    for k in range(len(DROP_RATES))
]
print(
    "   Mean of the CT-FWPs minus mean of the baselines: "
    + ", ".join(f"{rate:.0%} {100 * gap:+.1f}" for rate, gap in zip(DROP_RATES, gaps))
    + " points."
)

print("2. Trained at one rate, tested at another (points; every pair is in the heatmaps):")
columns = {
    f"trained {lowest:.0%}: test {highest:.0%} vs {lowest:.0%}": lambda n: difference(
        n, (lowest, highest), n, (lowest, lowest)
    ),
    f"test {lowest:.0%}: trained {mid:.0%} vs {lowest:.0%}": lambda n: difference(
        n, (mid, lowest), n, (lowest, lowest)
    ),
    f"test {highest:.0%}: trained {highest:.0%} vs {lowest:.0%}": lambda n: difference(
        n, (highest, highest), n, (lowest, highest)
    ),
}
print(f"   {'model':10s}" + "".join(f"{title:>32s}" for title in columns))
cross = {title: {n: column(n) for n in MODELS} for title, column in columns.items()}
for name in MODELS:
    print(f"   {name:10s}" + "".join(f"{verdict(*cross[title][name]):>32s}" for title in columns))
verdicts += [cell for column in cross.values() for cell in column.values()]
dense_to_sparse, sparse_to_dense, sparse_training = (cross[title] for title in columns)
print(
    f"   Trained at {lowest:.0%} and tested at {highest:.0%}, a resolved loss for "
    f"{sum(d < 0 and r for d, r in dense_to_sparse.values())} of {len(MODELS)} models; on the {lowest:.0%} test "
    f"set, training at {mid:.0%} instead of {lowest:.0%} is a resolved loss for "
    f"{sum(d < 0 and r for d, r in sparse_to_dense.values())}; "
    f"on the {highest:.0%} test set, training at {highest:.0%} instead of {lowest:.0%} is a resolved gain for "
    f"{sum(d > 0 and r for d, r in sparse_training.values())} and a resolved loss for "
    f"{sum(d < 0 and r for d, r in sparse_training.values())}."
)

fit_level = {name: statistics.mean(final_train_acc[name, s, r] for s in SEEDS for r in DROP_RATES) for name in MODELS}
underfit = [name for name in MODELS if fit_level[name] < 0.9]
print(
    "3. Training accuracy over the last epoch, mean over runs: "
    + ", ".join(f"{n} {100 * fit_level[n]:.0f} %" for n in MODELS)
    + "; "
    + (
        f"below 90 % (still fitting the training set): {', '.join(underfit)}."
        if underfit
        else "every model fits its training set to 90 % or more."
    )
)
resolved_count = sum(resolved for _, resolved in verdicts)
print(f"4. What this budget supports: {resolved_count} of the {len(verdicts)} differences above exceed the noise.")
if BUDGET == "small":
    print(
        f"   {len(underfit)} of {len(MODELS)} models are still fitting their training sets after {EPOCHS} epochs on "
        f"{len(train)} utterances, so this budget compares how fast the models learn as much as how they handle "
        "missing points: read it as a run of the pipeline, not as a ranking. BUDGET = 'full' trains every model "
        "longer on all the utterances, over three seeds."
    )
