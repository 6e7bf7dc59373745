"""Learning rules: how a fast weight matrix changes, written once for every form.

Convention (docs/equations.md#equations-in-one-convention): per head the fast weight is ``W`` of shape
(d_v, d_k) and is read as ``y = W q``. A rule maps the current fast weights and the slow net's outputs at
one instant to the rate of change ``dW/ds``:

    Hebb         c · v kᵀ
    Oja          c · v (k − Wᵀv)ᵀ
    Delta, pre   c · (v − W k) kᵀ            with v = tanh(v_raw)
    Delta, post  c · tanh(v_raw − W k) kᵀ

where ``k = softmax(k_raw)``, ``v = tanh(v_raw)`` and ``c = σ(β)``. The same rule object is used by the
direct neural ODE, neural CDE and log-signature RDE fields (`neuralde_seq.fields`), so each rule
exists exactly once. A discrete recurrent FWP step is ``W + rate(...)``.

Each has the form dM/ds = c · e(M) · aᵀ with M = W (Wᵀ for Oja): a rule class declares its parts (activations,
the direction a, the written vector e, whether it acts on Wᵀ) and `LearningRule` assembles `rate` from them once.
Closed forms are optional capabilities (``LearningRule.capabilities``) that the solvers ask for, never a rule's
name. Rules are built by name from a registry (`register_rule`, `registered_rule`, `make_rule`), which the model
registry reads for its ``{rule}-{form}`` names.

All tensors carry arbitrary leading batch dimensions ``(...)``; heads are one of them.

Exact steps (docs/equations.md#closed-forms-on-constant-inputs). When k, v and β stay constant for a time h
(a log-signature window, a piece of a rectilinear control), every rule has a closed-form solution,
`LearningRule.exact_step`. Hebb, Oja and pre-Delta are affine in W and are described by
`LearningRule.affine_step` (a `RankOneUpdate`), which `neuralde_seq.solvers.exact_fast_weights`
applies over whole sequences; post-Delta's step is nonlinear and is applied step by step
(`LearningRule.exact_step_inputs`, `Delta.exact_step_from_inputs`). The formulas are written with ``expm1`` and an
overflow-free ``asinh(sinh(·)·r)`` (`relaxation_rate`, `relax_error`).

The rooms, lowest first:

- `relaxation`: the closed-form pieces, overflow-free (`relaxation_rate`, `relax_error`);
- `rank_one`: the rank-one affine maps of W, `RankOneUpdate` (an exact step) and `RankOneRate` (a rate);
- `base`: `LearningRule` and the capabilities (`CAPABILITIES`);
- `hebb`, `oja`, `delta`: the built-in rules, one module each;
- `registry`: `RuleEntry`, `register_rule`, `make_rule`, ... and the built-in rules' registration.
"""

# In the order of definition, rooms lowest first: the API page (docs/api/rules.md) lists the names in this order.
from .base import AFFINE_RATE, AFFINE_STEP, AFFINE_STEP_FORGET, CAPABILITIES, STEPWISE_STEP, LearningRule
from .delta import Delta
from .hebb import Hebb
from .oja import Oja
from .rank_one import RankOneRate, RankOneUpdate
from .registry import RuleEntry, make_rule, register_rule, registered_rule, rule_names, rule_title, unregister_rule
from .relaxation import relax_error, relaxation_rate

__all__ = [
    "LearningRule",
    "Hebb",
    "Oja",
    "Delta",
    "make_rule",
    "RULE_NAMES",
    "register_rule",
    "unregister_rule",
    "registered_rule",
    "rule_names",
    "rule_title",
    "RuleEntry",
    "CAPABILITIES",
    "AFFINE_RATE",
    "AFFINE_STEP",
    "AFFINE_STEP_FORGET",
    "STEPWISE_STEP",
    "RankOneUpdate",
    "RankOneRate",
    "relaxation_rate",
    "relax_error",
]


def __getattr__(name):
    # RULE_NAMES follows the registry (a rule registered later is in it); read as rules.RULE_NAMES or imported.
    if name == "RULE_NAMES":
        return rule_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
