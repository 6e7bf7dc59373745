"""The chunked (WY / UT) exact path, neuralde_seq.solvers.chunked_delta and Exact(recurrence="chunked"),
against the per-window references, in float64.

- `chunked_affine_steps` against a loop of `RankOneUpdate.apply` (states after every step and final states, and
  the gradients of both with respect to every input), for every kind of step it takes: pre-Delta / Oja (decay),
  Hebb (no decay), each with and without a forget gate's scale; blocks of 1, of sizes that do not divide the
  length, and longer than the sequence.
- `solve_exact` with ``recurrence="chunked"`` against `solve_exact_reference` (a loop of ``rule.exact_step``
  differentiated by autograd) at 1,000 and 4,096 windows of unequal lengths, pre-Delta with and without a forget
  gate, three samples ending at different windows (a step after a sample's end has h = 0): states at every knot
  and final states, gradients with respect to the field's weights, the control's inputs and the initial state;
  several block sizes (one not dividing the length) and checkpoint segments (one not a multiple of the block).
- Oja and Hebb through the same path; what the forward pass keeps for the backward pass (segment starts only);
  no host synchronisation in the block loop; refused options.
"""

import fwp_reference as ref
import pytest
import torch

from neuralde_seq.controls import Control
from neuralde_seq.fields import FastWeightField
from neuralde_seq.rules import RankOneUpdate
from neuralde_seq.solvers import RK4, Exact, SolverOptions, parse_solver, solve
from neuralde_seq.solvers import exact_fast_weights as exact
from neuralde_seq.solvers.chunked_delta import chunked_affine_steps

DTYPE = torch.float64
HEADS, HEAD_DIM, CHANNELS = 2, 4, 3


# ------------------------------------------------------------------------------ the steps alone
def _random_steps(N, S, d_a, d_b, with_decay, with_scale, seed):
    """Inputs of S relaxing steps as the rules produce them: a on the simplex, δ = (1 − e^{−c‖a‖²h})/‖a‖² with
    h of 0 (identity steps) to 3, writes in [0, 1], forget scales e^{−λh}."""
    g = torch.Generator().manual_seed(seed)
    a = torch.softmax(2 * torch.randn(N, S, d_a, generator=g, dtype=DTYPE), -1)
    b = torch.randn(N, S, d_b, generator=g, dtype=DTYPE)
    h = 3 * torch.rand(N, S, generator=g, dtype=DTYPE) * (torch.rand(N, S, generator=g, dtype=DTYPE) > 0.1)
    norm_sq = (a * a).sum(-1)
    decay = -torch.expm1(-0.8 * norm_sq * h) / norm_sq if with_decay else None
    write = torch.rand(N, S, generator=g, dtype=DTYPE) * (h > 0)
    scale = torch.exp(-0.3 * torch.rand(N, S, generator=g, dtype=DTYPE) * h) if with_scale else None
    M0 = torch.randn(N, d_b, d_a, generator=g, dtype=DTYPE)
    return M0, a, b, decay, write, scale


def _rank_one_loop(M0, a, b, decay, write, scale):
    """States after every step by `RankOneUpdate.apply`, one step after the other: (N, S, d_b, d_a)."""
    M, states = M0, []
    for t in range(a.shape[1]):
        update = RankOneUpdate(
            a[:, t],
            b[:, t],
            None if decay is None else decay[:, t, None],
            write[:, t, None],
            scale=None if scale is None else scale[:, t, None],
        )
        M = update.apply(M)
        states.append(M)
    return torch.stack(states, dim=1)


@pytest.mark.parametrize("with_decay,with_scale", [(True, False), (True, True), (False, False), (False, True)])
@pytest.mark.parametrize("block_size", [1, 7, 16, 200])
def test_chunked_steps_match_the_step_loop(with_decay, with_scale, block_size):
    """States (after every step, and final) to 1e-13 and gradients w.r.t. every input to 1e-11 relative, for 50
    steps: blocks of 1, 7 and 16 (not dividing 50) and 200 (one block longer than the sequence)."""
    inputs = _random_steps(6, 50, 5, 3, with_decay, with_scale, seed=1)
    inputs = [None if t is None else t.requires_grad_() for t in inputs]
    expected = _rank_one_loop(*inputs)
    got = chunked_affine_steps(*inputs, block_size=block_size, keep_states=True)
    final = chunked_affine_steps(*inputs, block_size=block_size)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-13)
    torch.testing.assert_close(final, expected[:, -1], rtol=0, atol=1e-13)
    assert (expected[:, -1] - inputs[0]).abs().max() > 0.3  # the states moved
    weights = torch.randn(expected.shape, generator=torch.Generator().manual_seed(2), dtype=DTYPE)
    used = [t for t in inputs if t is not None]
    for out, ref_out, w in ((got, expected, weights), (final, expected[:, -1], weights[:, -1])):
        grads = torch.autograd.grad((out * w).sum(), used, retain_graph=True)
        expected_grads = torch.autograd.grad((ref_out * w).sum(), used, retain_graph=True)
        for g, e in zip(grads, expected_grads):
            torch.testing.assert_close(g, e, rtol=1e-11, atol=1e-11 * float(e.abs().max()))


def test_chunked_steps_make_no_host_synchronisation(monkeypatch):
    """Forward and backward of the chunked steps never read a tensor's value on the host (no .item(), no
    Python branching on tensor values): both raise here."""
    inputs = [None if t is None else t.requires_grad_() for t in _random_steps(4, 40, 4, 4, True, True, seed=3)]

    def refuse(*args, **kwargs):
        raise AssertionError("host synchronisation")

    monkeypatch.setattr(torch.Tensor, "item", refuse)
    monkeypatch.setattr(torch.Tensor, "__bool__", refuse)
    monkeypatch.setattr(torch.Tensor, "tolist", refuse)
    states = chunked_affine_steps(*inputs, block_size=16, keep_states=True)
    torch.autograd.grad(states.sum(), [t for t in inputs if t is not None])


# ------------------------------------------------------------------------------ the solver
def _control(windows, ends, seed):
    """A piecewise-constant control of ``windows`` windows of lengths in [0.25, 1.75], B = len(ends) samples
    ending after ``ends`` windows; rates of scale 1.5."""
    g = torch.Generator().manual_seed(seed)
    knots = torch.cat(
        [torch.zeros(1, dtype=DTYPE), torch.cumsum(0.25 + 1.5 * torch.rand(windows, generator=g, dtype=DTYPE), 0)]
    )
    coeffs = torch.zeros(len(ends), windows + 1, 4, CHANNELS, dtype=DTYPE)
    coeffs[:, :windows, 0] = 1.5 * torch.randn(len(ends), windows, CHANNELS, generator=g, dtype=DTYPE)
    return Control(knots, coeffs.requires_grad_(), torch.tensor(ends), piecewise_constant=True)


def _field(rule, forget_gate, seed=6):
    torch.manual_seed(0)
    field = FastWeightField(CHANNELS, HEADS * HEAD_DIM, HEADS, rule, form="rde", forget_gate=forget_gate).to(DTYPE)
    ref.randomize_(field, torch.Generator().manual_seed(seed), scale=0.7)
    if forget_gate:  # forgetting times of about 1.3 and 150 time units, one per head
        with torch.no_grad():
            field.slow.bias.view(HEADS, -1)[:, -1] = torch.tensor([1.0, -5.0], dtype=DTYPE)
    return field


def _used(field, control, W0):
    return [W0, control.coeffs] + [p for name, p in field.named_parameters() if not name.startswith("query")]


class _Case:
    """One field and control with the reference's states at every knot, final states, and the gradients of a
    fixed random functional of each w.r.t. the initial state, the control's coefficients and the field's
    weights (computed once, shared by the block sizes)."""

    def __init__(self, rule, forget_gate, windows):
        ends = [windows, windows - 123, windows // 2 + 7]
        self.control = _control(windows, ends, seed=windows)
        self.field = _field(rule, forget_gate)
        g = torch.Generator().manual_seed(8)
        self.W0 = (0.5 * torch.randn(len(ends), HEADS, HEAD_DIM, HEAD_DIM, generator=g, dtype=DTYPE)).requires_grad_()
        used = _used(self.field, self.control, self.W0)
        self.states = exact.solve_exact_reference(self.field, self.control, self.W0, at_knots=True)
        self.final = self.states[torch.arange(len(ends)), self.control.end_index]
        self.knot_weights = torch.randn(self.states.shape, generator=g, dtype=DTYPE)
        self.final_weights = torch.randn(self.final.shape, generator=g, dtype=DTYPE)
        self.knot_grads = torch.autograd.grad((self.states * self.knot_weights).sum(), used, retain_graph=True)
        self.final_grads = torch.autograd.grad((self.final * self.final_weights).sum(), used)
        self.states, self.final = self.states.detach(), self.final.detach()

    def check(self, options, at_knots):
        used = _used(self.field, self.control, self.W0)
        got = solve(self.field, self.control, self.W0, options, at_knots=at_knots)
        expected, weights = (self.states, self.knot_weights) if at_knots else (self.final, self.final_weights)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-11)
        grads = torch.autograd.grad((got * weights).sum(), used)
        for name, g, e in zip(
            ["W0", "control"] + [n for n, _ in self.field.named_parameters() if not n.startswith("query")],
            grads,
            self.knot_grads if at_knots else self.final_grads,
        ):
            # Every gradient checked is not trivially zero, but the final state's on W0, which the rule has
            # forgotten after thousands of windows.
            assert name == "W0" or float(e.abs().max()) > 1e-6, name
            torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-10 * float(e.abs().max()), msg=name)


_CASES = {}


def _case(rule, forget_gate, windows):
    key = (rule, forget_gate, windows)
    if key not in _CASES:
        _CASES.clear()  # one reference at a time in memory
        _CASES[key] = _Case(rule, forget_gate, windows)
    return _CASES[key]


# (The last decorator's parameter varies slowest: the reference of each case is computed once.)
@pytest.mark.parametrize(
    "block_size,segment,at_knots",
    [
        (None, None, False),  # the defaults: blocks of DEFAULT_BLOCK_SIZE in segments sized by default_chunked_segment
        (48, 200, True),  # a block not dividing the length, a segment not a multiple of the block
        (16, None, False),
    ],
)
@pytest.mark.parametrize("forget_gate", [False, True])
@pytest.mark.parametrize("windows", [1000, 4096])
def test_chunked_solve_matches_the_per_window_reference(windows, forget_gate, block_size, segment, at_knots):
    """Pre-Delta (with and without a forget gate) at 1,000 and 4,096 windows: states to 1e-11 and gradients to
    1e-9 relative against `solve_exact_reference`, samples ending at three different windows."""
    case = _case("delta", forget_gate, windows)
    options = SolverOptions(Exact(recurrence="chunked", block_size=block_size, chunk_size=segment))
    case.check(options, at_knots)
    if at_knots:  # a sample that ended early stays put
        short = int(case.control.end_index.argmin())
        end = int(case.control.end_index[short])
        assert (case.states[short, end:] - case.states[short, end]).abs().max() == 0


@pytest.mark.parametrize("rule", ["oja", "hebb"])
@pytest.mark.parametrize("forget_gate", [False, True])
def test_chunked_solve_of_the_other_affine_rules(rule, forget_gate):
    """Oja (the step on Wᵀ) and Hebb (no decay) take the same path: equal to the reference at 300 windows, at
    every knot, values and gradients."""
    case = _Case(rule, forget_gate, 300)
    case.check(SolverOptions(Exact(recurrence="chunked", block_size=32, chunk_size=100)), at_knots=True)


def test_chunked_solve_keeps_only_segment_starts():
    """What the forward pass saves for the backward pass: the fast weights at each segment's start, the control's
    rates, the window lengths and the field's parameters, exactly as the sequential path; nothing per step of
    size d² (autograd through the whole chunked form would keep the states at every block and the block
    matrices)."""
    control = _control(400, [400, 300], seed=3)
    field = _field("delta", True)
    W0 = torch.zeros(2, HEADS, HEAD_DIM, HEAD_DIM, dtype=DTYPE, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        solve(field, control, W0, SolverOptions(Exact(recurrence="chunked", block_size=32, chunk_size=64)))
    starts = 2 * (400 // 64 + 1) * HEADS * HEAD_DIM**2
    parameters = sum(p.numel() for p in field.parameters())
    assert sum(saved) == starts + 2 * 400 * CHANNELS + 2 * 400 + parameters


def test_refused_options():
    with pytest.raises(ValueError, match=r"Exact\.recurrence must be 'auto', 'sequential' or 'chunked'"):
        Exact(recurrence="parallel")
    with pytest.raises(ValueError, match=r"Exact\.block_size must be a positive integer"):
        Exact(recurrence="chunked", block_size=0)
    with pytest.raises(ValueError, match=r"Exact\.block_size is the block length"):
        Exact(recurrence="sequential", block_size=16)  # a block size, no blocks
    with pytest.raises(ValueError, match="recurrence is an option of Exact, not of RK4"):
        parse_solver({"method": "rk4", "recurrence": "chunked"})
    with pytest.raises(ValueError, match="block_size"):
        chunked_affine_steps(*_random_steps(2, 5, 3, 3, True, False, seed=0), block_size=0)
    control = _control(20, [20], seed=1)
    field = _field("delta-post", False)
    with pytest.raises(ValueError, match="post-Delta"):
        solve(
            field,
            control,
            torch.zeros(1, HEADS, HEAD_DIM, HEAD_DIM, dtype=DTYPE),
            SolverOptions(Exact(recurrence="chunked")),
        )
    # the exact path's options given through the flat spelling of "auto" reach its exact part only
    auto = parse_solver({"recurrence": "chunked", "block_size": 8}).method
    assert (auto.exact, auto.fallback) == (Exact(recurrence="chunked", block_size=8), RK4())


def test_auto_takes_the_sequential_steps_on_the_cpu_and_for_post_delta(monkeypatch):
    import neuralde_seq.solvers.exact_fast_weights as exact

    calls = []
    real = exact.chunked_affine_steps
    monkeypatch.setattr(exact, "chunked_affine_steps", lambda *a, **k: calls.append(1) or real(*a, **k))
    control = _control(50, [50, 31], seed=2)
    W0 = torch.zeros(2, HEADS, HEAD_DIM, HEAD_DIM, dtype=DTYPE)
    for name in ("delta", "delta-post"):
        field = _field(name, False)
        auto = solve(field, control, W0, SolverOptions(Exact()))  # recurrence="auto", the default
        sequential = solve(field, control, W0, SolverOptions(Exact(recurrence="sequential")))
        assert torch.equal(auto, sequential)
    assert not calls  # on the CPU "auto" never took the chunked form
    solve(_field("delta", False), control, W0, SolverOptions(Exact(recurrence="chunked")))
    assert calls  # (the counter sees the chunked form where it is taken)
