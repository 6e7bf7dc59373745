"""The learning rules and fast weight fields against docs/equations.md#equations-in-one-convention, recomputed by
hand from the weights.

Every rule (Hebb, Oja in both softmax orders, Delta pre and post) in every form (direct ODE, CDE, CDE with
x'-only fields, CDE with the Hebb key/value swap, log-signature RDE) is checked in float64 on random fast
weights and inputs against an independent implementation (tests/fwp_reference.py): LayerNorm by hand,
the slow map split per head in the documented order, the rules written out head by head.
"""

import fwp_reference as ref
import pytest
import torch

from neuralde_seq.fields import FastWeightField
from neuralde_seq.rules import Delta, Hebb, Oja, make_rule

# Tiny tensors: one thread avoids OpenMP hand-offs that cost milliseconds per call on a busy 2-core box.

DTYPE = torch.float64
C, D_MODEL, H = 4, 6, 2

# (rule, form, options) for every combination the design names.
CASES = []
for _rule in ref.RULES:
    for _form, _opts in (("ode", {}), ("cde", {}), ("cde", {"dx_only": True}), ("rde", {})):
        CASES.append((_rule, _form, _opts))
    if _rule == "hebb":
        CASES.append((_rule, "cde", {"hebb_swap": True}))


def _case_id(case):
    rule, form, opts = case
    return "-".join([rule, form] + sorted(opts))


def _make(rule, form, opts, seed=0, head_dim=None):
    torch.manual_seed(seed)
    field = FastWeightField(C, D_MODEL, H, ref.rule_object(rule), form=form, head_dim=head_dim, **opts).to(DTYPE)
    g = torch.Generator().manual_seed(seed + 100)
    ref.randomize_(field, g, scale=0.7)
    d = field.head_dim
    B = 3
    W = torch.randn(B, H, d, d, generator=g, dtype=DTYPE)
    x = 1.5 * torch.randn(B, C, generator=g, dtype=DTYPE)
    dx = 1.5 * torch.randn(B, C, generator=g, dtype=DTYPE)
    return field, W, x, dx


def _args(field, x, dx):
    """Pass None for an input the field says it does not need: it must then not read it."""
    return (x if field.needs_value else None), (dx if field.needs_derivative else None)


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
@pytest.mark.parametrize("head_dim", [None, 4])
def test_rate_matches_design_formula(case, head_dim):
    rule, form, opts = case
    field, W, x, dx = _make(rule, form, opts, seed=len(_case_id(case)), head_dim=head_dim)
    sources = ref.expected_sources(rule, form, **opts)
    assert (field.key_source, field.value_source) == sources
    assert field.needs_value == ("x" in sources)
    assert field.needs_derivative == ("dx" in sources)
    # A value from x' has no bias (W_v x', Eq. 24); a value from x when the key comes from x' has one.
    if sources[0] == sources[1]:
        assert field.value_proj is None
    else:
        assert (field.value_proj.bias is None) == (sources[1] == "dx")

    expected = ref.field_rate(field, rule, sources, W, x, dx)
    got = field(W, *_args(field, x, dx))
    assert got.shape == W.shape and got.dtype == DTYPE
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    # The rate must really depend on W for every rule but Hebb (guards against a test that passes
    # because W is ignored on both sides).
    bump = 0.3 * torch.randn(W.shape, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    moved = field(W + bump, *_args(field, x, dx))
    if rule == "hebb":
        torch.testing.assert_close(moved, got, rtol=0, atol=0)
    else:
        assert (moved - got).abs().max() > 1e-3

    # The rank-one initial write is the rule at W = 0.
    init = field.initial_write(*_args(field, x, dx))
    torch.testing.assert_close(init, ref.field_rate(field, rule, sources, None, x, dx), rtol=0, atol=1e-12)
    torch.testing.assert_close(init, field(torch.zeros_like(W), *_args(field, x, dx)), rtol=0, atol=1e-14)

    # Queries from the key source, and the readout y = W q per head, concatenated.
    q = field.query(*_args(field, x, dx))
    q_ref = ref.query(field, x, dx, sources)
    torch.testing.assert_close(q, q_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(q.sum(-1), torch.ones_like(q[..., 0]), rtol=0, atol=1e-12)
    torch.testing.assert_close(field.read(W, q), ref.read(W, q_ref), rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_sources_by_perturbation(case):
    """Perturb x and x' separately: exactly the outputs fed by the perturbed input change."""
    rule, form, opts = case
    field, W, x, dx = _make(rule, form, opts, seed=7)
    key_src, val_src = ref.expected_sources(rule, form, **opts)
    delta = torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    base = field.projections(x, dx)
    base_q = field.query(x, dx)
    for which, (x2, dx2) in (("x", (x + delta, dx)), ("dx", (x, dx + delta))):
        k2, v2, b2 = field.projections(x2, dx2)
        q2 = field.query(x2, dx2)
        for name, old, new, src in (
            ("key", base[0], k2, key_src),
            ("beta", base[2], b2, key_src),
            ("value", base[1], v2, val_src),
            ("query", base_q, q2, key_src),
        ):
            changed = bool((old - new).abs().max() > 1e-8)
            assert changed == (src == which), f"{name} should come from {src}, perturbed {which}"
        rate_changed = bool((field(W, x2, dx2) - field(W, x, dx)).abs().max() > 1e-8)
        assert rate_changed == (which in (key_src, val_src))


@pytest.mark.parametrize("rule", ["hebb", "oja", "oja-after"])
def test_flat_control_writes_nothing_in_cde_hebb_oja(rule):
    """Hebb/Oja CDE: values are W_v x' with no bias, so x' = 0 gives dW/ds = 0 for any W (Eq. 24)."""
    field, W, x, dx = _make(rule, "cde", {}, seed=11)
    out = field(W, x, torch.zeros_like(dx))
    assert out.abs().max() == 0.0


def test_rules_on_extra_batch_dims_and_by_name():
    g = torch.Generator().manual_seed(5)
    shape = (2, 3, 2)
    d = 4
    W = torch.randn(*shape, d, d, generator=g, dtype=DTYPE)
    k_raw = torch.randn(*shape, d, generator=g, dtype=DTYPE)
    v_raw = torch.randn(*shape, d, generator=g, dtype=DTYPE)
    beta = torch.randn(*shape, 1, generator=g, dtype=DTYPE)
    for name, rule in (
        ("hebb", Hebb()),
        ("oja", Oja()),
        ("oja-after", Oja(True)),
        ("delta", Delta()),
        ("delta-post", Delta(post=True)),
    ):
        got = rule.rate(W, k_raw, v_raw, beta)
        flat = lambda t: t.reshape(-1, 1, *t.shape[len(shape) :])  # noqa: E731
        expected = ref.rule_rate(
            name,
            flat(W)[:, 0].unsqueeze(1),
            flat(k_raw)[:, 0].unsqueeze(1),
            flat(v_raw)[:, 0].unsqueeze(1),
            flat(beta)[:, 0, 0].unsqueeze(1),
        )
        torch.testing.assert_close(got.reshape(-1, d, d), expected[:, 0], rtol=0, atol=1e-13)
        if name in ("hebb", "oja", "delta", "delta-post"):
            assert type(make_rule(name)) is type(rule) and make_rule(name).name == name
    assert make_rule("delta-post").post and not make_rule("delta").post
    assert not make_rule("oja").softmax_after_subtract  # the paper's order is the default


def test_oja_orders_differ_and_agree_at_zero():
    """The two Oja variants are different rules (for W != 0) that agree on empty fast weights."""
    g = torch.Generator().manual_seed(9)
    W = torch.randn(2, 2, 3, 3, generator=g, dtype=DTYPE)
    k_raw, v_raw = torch.randn(2, 2, 3, generator=g, dtype=DTYPE), torch.randn(2, 2, 3, generator=g, dtype=DTYPE)
    beta = torch.randn(2, 2, 1, generator=g, dtype=DTYPE)
    a, b = Oja(False), Oja(True)
    assert (a.rate(W, k_raw, v_raw, beta) - b.rate(W, k_raw, v_raw, beta)).abs().max() > 1e-3
    torch.testing.assert_close(a.rate(None, k_raw, v_raw, beta), b.rate(None, k_raw, v_raw, beta), rtol=0, atol=0)
    torch.testing.assert_close(
        a.rate(torch.zeros_like(W), k_raw, v_raw, beta), a.rate(None, k_raw, v_raw, beta), rtol=0, atol=1e-15
    )


def test_invalid_field_options():
    with pytest.raises(ValueError):
        FastWeightField(C, D_MODEL, H, "oja", form="cde", hebb_swap=True)
    with pytest.raises(ValueError):
        FastWeightField(C, D_MODEL, H, "hebb", form="ode", dx_only=True)
    with pytest.raises(ValueError):
        FastWeightField(C, D_MODEL, H, "hebb", form="cde", dx_only=True, hebb_swap=True)
    with pytest.raises(ValueError):
        FastWeightField(C, 7, H, "delta")
    with pytest.raises(ValueError):
        make_rule("anti-hebb")
