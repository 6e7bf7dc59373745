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
# # Learning rules side by side: Hebb, Oja, Delta (pre and post)
#
# A continuous-time fast weight programmer writes key/value pairs into fast weights W(s) with a learning rule
# (docs/equations.md):
#
# | rule | dW/ds |
# | --- | --- |
# | Hebb | σ(β) v kᵀ |
# | Oja | σ(β) v (k − Wᵀv)ᵀ |
# | Delta, pre | σ(β) (v − W k) kᵀ, v = tanh(v_raw) |
# | Delta, post | σ(β) tanh(v_raw − W k) kᵀ |
#
# with keys k = softmax(k_raw) on the simplex. This notebook drives the four rules with the same inputs and
# compares (1) each rule's closed-form step against a numerical solve, (2) how the size of W evolves while
# pairs are written, (3) how well the pairs can be read back, and (4) what happens when a key is written
# again with a new value. Everything uses `neuralde_seq.rules` directly: the same rule objects every model form
# uses.
#
# `BUDGET = "full"` (first code cell, or `python notebooks/execute.py --budget full`) repeats the recall experiment
# over more random draws and wider heads.

# %%
import math
import os

import matplotlib.pyplot as plt
import torch

from neuralde_seq.rules import make_rule

# "small": seconds on a CPU (what CI runs); "full": more draws and wider fast weights. Change the default here,
# or set NEURALDE_SEQ_BUDGET (notebooks/execute.py --budget full).
BUDGET = os.environ.get("NEURALDE_SEQ_BUDGET", "small")

torch.set_default_dtype(torch.float64)  # closed forms against solves: compare in float64
RULES = ["hebb", "oja", "delta", "delta-post"]
rules = {name: make_rule(name) for name in RULES}
D = 8 if BUDGET == "small" else 32  # key and value width of one head
DRAWS = 20 if BUDGET == "small" else 200  # random sets of pairs per point of the recall curve
g = torch.Generator().manual_seed(0)


def pair(generator, d=D, scale=6.0):
    """Raw key, value and learning-rate inputs of one write: sharp keys (scale) so that pairs are distinct."""
    return (
        scale * torch.randn(d, generator=generator),
        torch.randn(d, generator=generator),
        torch.randn(1, generator=generator) + 2.0,
    )


def target(rule_name, v_raw):
    """What W k should recall for a stored pair: tanh(v_raw), or v_raw itself for post-Delta (its fixed point)."""
    return v_raw if rule_name == "delta-post" else torch.tanh(v_raw)


# %% [markdown]
# ## 1. The closed form of one write against a numerical solve
#
# With inputs held constant over a step of length h, every rule has a closed-form W(t + h)
# (`rule.exact_step`). Classical RK4 on dW/ds = rate(W) with n substeps must converge to it at order 4.


# %%
def rk4(rule, W, k_raw, v_raw, beta, h, n):
    f = lambda W_: rule.rate(W_, k_raw, v_raw, beta)  # noqa: E731
    dt = h / n
    for _ in range(n):
        a = f(W)
        b = f(W + dt / 2 * a)
        c = f(W + dt / 2 * b)
        d = f(W + dt * c)
        W = W + dt / 6 * (a + 2 * b + 2 * c + d)
    return W


W0 = 0.3 * torch.randn(D, D, generator=g)
k_raw, v_raw, beta = pair(g)
h = 2.0
substeps = [1, 2, 4, 8, 16, 32, 64]
errors = {}
for name, rule in rules.items():
    exact = rule.exact_step(W0, k_raw, v_raw, beta, h)
    errors[name] = [float((rk4(rule, W0, k_raw, v_raw, beta, h, n) - exact).abs().max()) for n in substeps]

fig, ax = plt.subplots(figsize=(5, 3.5))
for name in RULES:
    ax.loglog(substeps, [max(e, 1e-17) for e in errors[name]], "o-", label=name)
ax.loglog(substeps, [errors["delta"][0] * n**-4.0 for n in substeps], "k--", label="slope -4")
ax.set_xlabel("RK4 substeps over one write (h = 2)")
ax.set_ylabel("max |W_rk4 − W_exact|")
ax.set_title("Closed form vs RK4")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()
orders = {}
for name in RULES:
    e = errors[name]
    if e[0] < 1e-12:  # Hebb's rate does not read W: RK4 is exact in one step
        print(f"{name:10s} exact at every substep count (error {max(e):.1e}: rounding)")
        continue
    orders[name] = math.log2(e[3] / e[4])
    print(f"{name:10s} error at 1 substep {e[0]:.2e}, at 64 substeps {e[-1]:.2e}, observed order {orders[name]:.2f}")

# %% [markdown]
# ## 2. The size of W while pairs are written
#
# Twelve pairs are written one after another, each for a time h = 4, from W = 0. Since the inputs are constant
# on each write, `exact_step` gives W at any time inside a write exactly (steps of h/20 here).

# %%
N_PAIRS = 12
HOLD = 4.0  # how long each pair is written: long enough for the Delta rules to settle
writes = [pair(g) for _ in range(N_PAIRS)]
fine = 20
norms = {name: [0.0] for name in RULES}
for name, rule in rules.items():
    W = torch.zeros(D, D)
    for k_raw, v_raw, beta in writes:
        for _ in range(fine):
            W = rule.exact_step(W, k_raw, v_raw, beta, HOLD / fine)
            norms[name].append(float(W.norm()))
time = HOLD * torch.arange(N_PAIRS * fine + 1) / fine

fig, ax = plt.subplots(figsize=(6, 3.5))
for name in RULES:
    ax.plot(time, norms[name], label=name)
ax.set_xlabel("time s (one pair written every 4 units)")
ax.set_ylabel("‖W(s)‖_F")
ax.set_title("Fast weight norm during 12 writes")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()
for name in RULES:
    print(f"{name:10s} ‖W‖ after 4 writes {norms[name][4 * fine]:.2f}, after 12 writes {norms[name][-1]:.2f}")

# %% [markdown]
# ## 3. Reading the pairs back
#
# After writing N pairs (each for h = 4), each stored key is queried and the relative recall error
# ‖W k_i − target_i‖ / ‖target_i‖ is averaged over the pairs and over random draws. With D-wide heads, at most
# D keys can be kept apart exactly.


# %%
def recall_error(rule_name, n_pairs, generator, h=HOLD):
    rule = rules[rule_name]
    pairs = [pair(generator) for _ in range(n_pairs)]
    W = torch.zeros(D, D)
    for k_raw, v_raw, beta in pairs:
        W = rule.exact_step(W, k_raw, v_raw, beta, h)
    errs = []
    for k_raw, v_raw, _ in pairs:
        want = target(rule_name, v_raw)
        errs.append(float((W @ rule.activate_key(k_raw) - want).norm() / want.norm()))
    return sum(errs) / len(errs)


sizes = list(range(1, 2 * D + 1))
curves = {}
for name in RULES:
    curves[name] = []
    for n in sizes:
        draws = torch.Generator().manual_seed(100 + n)
        curves[name].append(sum(recall_error(name, n, draws) for _ in range(DRAWS)) / DRAWS)

fig, ax = plt.subplots(figsize=(6, 3.5))
for name in RULES:
    ax.plot(sizes, curves[name], "o-", label=name, markersize=3)
ax.axvline(D, color="grey", linestyle=":", label=f"D = {D}")
ax.set_xlabel("pairs written")
ax.set_ylabel("mean relative recall error")
ax.set_title(f"Recall after sequential writes (mean over {DRAWS} draws)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. Writing the same key again
#
# A key is written with value a, then the same key with value b. What does the memory return for that key
# over time: the new value, the old one, or a mix?

# %%
k_raw, a_raw, beta = pair(g)
b_raw = -a_raw  # the opposite value: the clearest overwrite
trace = {name: {"to_new": [], "to_old": []} for name in RULES}
for name, rule in rules.items():
    W = torch.zeros(D, D)
    k = rule.activate_key(k_raw)
    for v_raw in (a_raw, b_raw):
        for _ in range(fine):
            W = rule.exact_step(W, k_raw, v_raw, beta, HOLD / fine)
            read = W @ k
            trace[name]["to_new"].append(float((read - target(name, b_raw)).norm()))
            trace[name]["to_old"].append(float((read - target(name, a_raw)).norm()))
t_over = HOLD * torch.arange(1, 2 * fine + 1) / fine

fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
for name in RULES:
    axes[0].plot(t_over, trace[name]["to_old"], label=name)
    axes[1].plot(t_over, trace[name]["to_new"], label=name)
for ax, title in zip(axes, ("distance of W k to the first value a", "distance of W k to the second value b")):
    ax.axvline(HOLD, color="grey", linestyle=":")
    ax.set_xlabel("time s (a written on [0, 4], b on [4, 8])")
    ax.set_title(title, fontsize=10)
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## What the numbers say

# %%
at_d = {name: curves[name][sizes.index(D)] for name in RULES}
at_half = {name: curves[name][sizes.index(max(1, D // 2))] for name in RULES}
after = {name: (trace[name]["to_new"][-1], trace[name]["to_old"][-1]) for name in RULES}
print(
    f"1. Closed forms: RK4 converges to every rule's exact step (error at 64 substeps at most "
    f"{max(e[-1] for e in errors.values()):.1e}; observed orders "
    + ", ".join(f"{n} {o:.2f}" for n, o in orders.items())
    + "; Hebb exact in one step)."
)
print(
    "2. Norms after 12 writes: "
    + ", ".join(f"{n} {norms[n][-1]:.2f}" for n in RULES)
    + ". Hebb only adds, so its norm grows with every write; Oja and the Delta rules correct what is stored."
)
print(
    f"3. Recall error with {D // 2} pairs: "
    + ", ".join(f"{n} {at_half[n]:.2f}" for n in RULES)
    + f"; with {D} pairs: "
    + ", ".join(f"{n} {at_d[n]:.2f}" for n in RULES)
    + "."
)
best = min(RULES, key=lambda n: at_d[n])
print(f"   Lowest recall error at D = {D} pairs: {best}.")
print(
    "4. Same key written again (distance of W k to the new value b / to the old value a at the end): "
    + ", ".join(f"{n} {after[n][0]:.2f} / {after[n][1]:.2f}" for n in RULES)
    + "."
)
