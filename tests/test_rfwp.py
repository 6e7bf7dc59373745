"""ODE-RFWP (paper 002 Eq. 26-27) and the discrete learning-rule steps.

- discrete_step of Hebb, Oja and Delta (pre and post) against their formulas written out here in float64;
- the RFWP step against a step computed here from the cell's weights (projection, LayerNorm, merge, slow
  net, softmax/tanh/σ, the rule, the query, FF block);
- zero time gaps: ODE-RFWP is exactly that step repeated over the observations;
- a linear ODE field: between observations u evolves by expm(Δt A);
- irregular times: a padded batch equals each sample alone; changing one sample's times leaves the other
  samples unchanged; the two orders expose the same recursion's states;
- continuous adjoint and direct backpropagation give the same gradients.
"""

import pytest
import torch

from neuralde_seq.models import create_model, model_inputs
from neuralde_seq.models.rfwp import ODERFWP, RFWPCell
from neuralde_seq.observations import Observations
from neuralde_seq.rules import Delta, Hebb, Oja
from neuralde_seq.solvers import RK4, Adjoint, Backprop, SolverOptions


def _output_norm(model: ODERFWP, h: torch.Tensor) -> torch.Tensor:
    """The read-out's LayerNorm written out: Hebb's rule (whose W grows with the observations) only."""
    if model.cell.rule.name != "hebb":
        assert isinstance(model.output_norm, torch.nn.Identity)
        return h
    norm = model.output_norm
    centred = h - h.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.square().mean(-1, keepdim=True) + norm.eps) * norm.weight + norm.bias


DTYPE = torch.float64
NAN = float("nan")


def randomize_(module, seed, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def softmax(x):
    e = torch.exp(x - x.max())
    return e / e.sum()


def sigmoid(x):
    return 1 / (1 + torch.exp(-x))


@pytest.mark.parametrize(
    "rule",
    [Hebb(), Oja(), Oja(softmax_after_subtract=True), Delta(), Delta(post=True)],
    ids=["hebb", "oja", "oja-code", "delta", "delta-post"],
)
def test_discrete_steps_are_their_formulas(rule):
    g = torch.Generator().manual_seed(0)
    W = torch.randn(3, 4, 5, generator=g, dtype=DTYPE)  # (batch, d_v, d_k)
    k_raw = torch.randn(3, 5, generator=g, dtype=DTYPE)
    v_raw = torch.randn(3, 4, generator=g, dtype=DTYPE)
    beta = torch.randn(3, 1, generator=g, dtype=DTYPE)
    new = rule.discrete_step(W, k_raw, v_raw, beta)
    for b in range(3):
        c, k, v, Wb = sigmoid(beta[b, 0]), softmax(k_raw[b]), torch.tanh(v_raw[b]), W[b]
        if isinstance(rule, Hebb):
            expected = Wb + c * torch.outer(v, k)
        elif isinstance(rule, Oja) and not rule.softmax_after_subtract:
            expected = Wb + c * torch.outer(v, k - Wb.T @ v)
        elif isinstance(rule, Oja):
            expected = Wb + c * torch.outer(v, softmax(k_raw[b] - Wb.T @ v))
        elif not rule.post:  # DeltaNet
            expected = Wb + c * torch.outer(v - Wb @ k, k)
        else:
            expected = Wb + c * torch.outer(torch.tanh(v_raw[b] - Wb @ k), k)
        assert torch.allclose(new[b], expected, atol=1e-14, rtol=0)
    # from W = None (zeros): the first write
    assert torch.allclose(
        rule.discrete_step(None, k_raw, v_raw, beta),
        rule.discrete_step(torch.zeros_like(W), k_raw, v_raw, beta),
        atol=1e-15,
        rtol=0,
    )


def ref_cell(cell, x, u, W):
    """The RFWP step from the cell's weights, one sample: (h, W_new), W (heads, d, d)."""
    heads, d = cell.heads, cell.head_dim
    a = x @ cell.input_proj.weight.T + cell.input_proj.bias
    a = (a - a.mean()) / torch.sqrt(
        a.var(unbiased=False) + cell.input_norm.eps
    ) * cell.input_norm.weight + cell.input_norm.bias
    m = torch.cat([a, u]) @ cell.merge.weight.T + cell.merge.bias
    s = (m @ cell.slow.weight.T + cell.slow.bias).view(heads, 2 * d + 1)
    q_all = (m if cell.query_from == "state" else a) @ cell.query.weight.T + cell.query.bias
    outs, new = [], []
    for i in range(heads):
        k_raw, v_raw, beta, q_raw = s[i, :d], s[i, d : 2 * d], s[i, 2 * d], q_all[i * d : (i + 1) * d]
        k, c = softmax(k_raw), sigmoid(beta)
        rule = cell.rule
        if isinstance(rule, Hebb):
            Wi = W[i] + c * torch.outer(torch.tanh(v_raw), k)
        elif isinstance(rule, Oja):
            v = torch.tanh(v_raw)
            Wi = W[i] + c * torch.outer(v, k - W[i].T @ v)
        else:
            Wi = W[i] + c * torch.outer(torch.tanh(v_raw) - W[i] @ k, k)
        new.append(Wi)
        outs.append(Wi @ softmax(q_raw))
    y = torch.cat(outs) @ cell.out_proj.weight.T + cell.out_proj.bias
    ff = cell.feed_forward
    n = (y - y.mean()) / torch.sqrt(y.var(unbiased=False) + ff.norm.eps) * ff.norm.weight + ff.norm.bias
    lin1, lin2 = ff.net[0], ff.net[3]
    h = y + torch.clamp(n @ lin1.weight.T + lin1.bias, min=0) @ lin2.weight.T + lin2.bias
    return h, torch.stack(new)


def hand_batch():
    """Sample 0: 5 rows, row 2 dropped (all NaN); sample 1: length 3, channel 0 missing at its first row."""
    times = torch.tensor([[0.0, 0.5, 1.7, 2.0, 3.1], [0.2, 1.0, 1.4, NAN, NAN]], dtype=DTYPE)
    values = torch.tensor(
        [
            [[1.0, NAN], [NAN, 2.0], [NAN, NAN], [0.5, NAN], [NAN, -1.0]],
            [[NAN, 3.0], [2.0, 1.0], [0.3, -0.2], [9.0, 9.0], [9.0, 9.0]],
        ],
        dtype=DTYPE,
    )
    return Observations.from_tensors(times, values, torch.tensor([5, 3]))


EVENTS = [[0, 1, 3, 4], [0, 1, 2]]


@pytest.mark.parametrize("rule", ["hebb", "oja", "delta"])
def test_zero_gaps_reduce_to_the_discrete_rfwp_step(rule):
    obs = hand_batch()
    zero_gaps = Observations(torch.zeros_like(obs.times), obs.values, obs.lengths)  # all at one time
    torch.manual_seed(0)
    model = randomize_(
        ODERFWP(
            2, 3, hidden=4, heads=2, rule=rule, width=5, depth=2, d_ff=6, solver=SolverOptions(gradient=Backprop())
        ).to(DTYPE),
        1,
    )
    logits = model(zero_gaps)
    for b, rows in enumerate(EVENTS):
        h, W = torch.zeros(4, dtype=DTYPE), torch.zeros(2, 2, 2, dtype=DTYPE)
        for i in rows:
            x = obs.values[b, i]
            m = ~torch.isnan(x)
            h, W = ref_cell(model.cell, torch.cat([torch.where(m, x, torch.zeros_like(x)), m.to(DTYPE)]), h, W)
        # the final LayerNorm (Hebb's rule only), then the linear read-out
        normed = _output_norm(model, h)
        expected = normed @ model.readout.weight.T + model.readout.bias
        assert torch.allclose(logits[b], expected, atol=1e-13, rtol=0)
    # with the real gaps the ODE moves u between observations
    assert (model(obs) - logits).abs().max() > 1e-3


def test_cell_with_query_from_input_and_batch_shapes():
    torch.manual_seed(0)
    cell = randomize_(RFWPCell(3, 6, heads=3, rule="delta", query_from="input").to(DTYPE), 2)
    g = torch.Generator().manual_seed(3)
    x, u = torch.randn(4, 3, generator=g, dtype=DTYPE), torch.randn(4, 6, generator=g, dtype=DTYPE)
    W = 0.3 * torch.randn(4, 3, 2, 2, generator=g, dtype=DTYPE)
    h, W_new = cell(x, u, W)
    for b in range(4):
        h_ref, W_ref = ref_cell(cell, x[b], u[b], W[b])
        assert torch.allclose(h[b], h_ref, atol=1e-13, rtol=0)
        assert torch.allclose(W_new[b], W_ref, atol=1e-14, rtol=0)
    with pytest.raises(ValueError, match="W must have shape"):
        cell(x, u, W[:, :2])
    with pytest.raises(ValueError, match="multiple of heads"):
        RFWPCell(3, 7, heads=2)


def test_linear_field_evolves_by_matrix_exponential_between_observations():
    obs = hand_batch()
    torch.manual_seed(0)
    model = randomize_(
        ODERFWP(
            2,
            3,
            hidden=4,
            heads=2,
            rule="delta",
            depth=0,
            d_ff=6,
            solver=SolverOptions(RK4(step_size=0.005), Backprop()),
        ).to(DTYPE),
        4,
        scale=0.6,
    )
    with torch.no_grad():
        model.f.bias.zero_()
    A = model.f.weight
    logits = model(obs)
    for b, rows in enumerate(EVENTS):
        h, W, previous = torch.zeros(4, dtype=DTYPE), torch.zeros(2, 2, 2, dtype=DTYPE), None
        for i in rows:
            t = obs.times[b, i]
            if previous is not None:
                h = torch.linalg.matrix_exp((t - previous) * A) @ h
            previous = t
            x = obs.values[b, i]
            m = ~torch.isnan(x)
            h, W = ref_cell(model.cell, torch.cat([torch.where(m, x, torch.zeros_like(x)), m.to(DTYPE)]), h, W)
        normed = _output_norm(model, h)
        assert torch.allclose(logits[b], normed @ model.readout.weight.T + model.readout.bias, atol=1e-9, rtol=0)


def random_batch(B, T, C, seed, lengths):
    g = torch.Generator().manual_seed(seed)
    gaps = 0.2 + torch.rand(B, T, generator=g, dtype=DTYPE)
    times = gaps.cumsum(1)
    values = torch.randn(B, T, C, generator=g, dtype=DTYPE)
    values[torch.rand(B, T, C, generator=g) < 0.3] = NAN
    return times, values, torch.as_tensor(lengths)


def test_irregular_times_each_sample_sees_only_its_own():
    B, T, C = 3, 7, 2
    times, values, lengths = random_batch(B, T, C, 5, [7, 4, 6])
    values[:, 0] = 0.1  # every sample observes its first row
    torch.manual_seed(0)
    model = randomize_(ODERFWP(C, 3, hidden=4, heads=2, width=6, solver=Backprop()).to(DTYPE), 6)
    batch = Observations.from_tensors(times, values, lengths)
    logits = model(batch)
    before, after = model.row_states(batch)
    for b in range(B):
        L = int(lengths[b])
        alone = Observations.from_tensors(times[b : b + 1, :L], values[b : b + 1, :L])
        assert torch.allclose(model(alone)[0], logits[b], atol=1e-13, rtol=0)
        before_b, after_b = model.row_states(alone)
        assert torch.allclose(before_b[0], before[b, :L], atol=1e-13, rtol=0)
        assert torch.allclose(after_b[0], after[b, :L], atol=1e-13, rtol=0)
    # new times for sample 1 change sample 1 only
    moved = times.clone()
    moved[1] = moved[1] * 1.7 + 0.4
    changed = model(Observations.from_tensors(moved, values, lengths))
    assert torch.equal(changed[[0, 2]], logits[[0, 2]])
    assert (changed[1] - logits[1]).abs().max() > 1e-4
    # order="update_evolve" exposes the state evolved to the next row: the same recursion's "before" states
    model.order = "update_evolve"
    ahead = model.hidden_sequence(batch)
    assert torch.equal(ahead[:, :-1], before[:, 1:])
    model.order = "evolve_update"
    assert torch.equal(model.hidden_sequence(batch), after)


def test_adjoint_and_direct_gradients_agree():
    B, T, C = 3, 5, 2
    times, values, lengths = random_batch(B, T, C, 7, [5, 3, 4])
    values[:, 0] = -0.2
    obs = Observations.from_tensors(times, values, lengths)
    labels = torch.tensor([0, 2, 1])
    grads = []
    for adjoint in (False, True):
        torch.manual_seed(0)
        model = randomize_(
            ODERFWP(
                C,
                3,
                hidden=4,
                heads=2,
                rule="oja",
                width=6,
                depth=2,
                solver=SolverOptions(RK4(step_size=0.05), gradient=Adjoint() if adjoint else Backprop()),
            ).to(DTYPE),
            8,
        )
        loss = torch.nn.functional.cross_entropy(model(obs), labels)
        grads.append(torch.autograd.grad(loss, list(model.parameters())))
    for direct, adjoint in zip(*grads):
        assert torch.allclose(direct, adjoint, atol=1e-9, rtol=0)  # measured 5e-11 (rk4, τ step 0.05; 4e-8 at 0.25)
    # the ODE's own parameters do receive gradient through the adjoint
    f_index = [i for i, (n, _) in enumerate(model.named_parameters()) if n.startswith("f.")]
    assert max(float(grads[1][i].abs().max()) for i in f_index) > 1e-6


def test_registry_names_and_argument_errors():
    times, values, lengths = random_batch(2, 4, 3, 9, [4, 3])
    values[:, 0] = 1.0
    for rule in ("hebb", "oja", "delta", "delta-post"):
        inputs = model_inputs(f"{rule}-ode-rfwp", times, values, lengths)
        model = create_model(f"{rule}-ode-rfwp", inputs, 4)
        assert model.cell.rule.name == rule
        assert model(inputs.to(torch.float32)).shape == (2, 4)
    with pytest.raises(ValueError, match="order"):
        ODERFWP(3, 2, order="sideways")
    with pytest.raises(ValueError, match="channels"):
        create_model("delta-ode-rfwp", 2, 4)(model_inputs("delta-ode-rfwp", times, values, lengths))
