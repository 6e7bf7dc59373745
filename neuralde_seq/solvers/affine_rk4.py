"""Fixed-step Runge-Kutta solves of affine fast weight fields as one affine map per step.

A one-layer fast weight field whose rule is affine in the fast weights (Hebb, Oja, pre-Delta, each with or without
a forget gate: `LearningRule.affine_rate`) has the rate dM/ds = M A(s) + B(s), M = W (Wᵀ for Oja), with

    A(s) = −λ(s) I − δ(s) a(s) a(s)ᵀ,      B(s) = w(s) b(s) a(s)ᵀ

(`neuralde_seq.rules.RankOneRate`: a, b, δ = decay, w = write, λ = forget), where a, b, δ, w, λ are the slow
net's outputs at s: they depend on the control only, never on M. An explicit Runge-Kutta step of an affine
equation is an affine map of its starting state, M_{n+1} = M_n P_n + Q_n, so a fixed-step solve (`FixedStepSolve`:
the same grid, the same tableau) splits into

1. the slow net at every stage of every step and the step maps P_n (d_a × d_a), Q_n (d_b × d_a) of all steps, in
   batched tensor operations (`step_maps`), differentiated by autograd;
2. the composition M_{n+1} = M_n P_n + Q_n, the only sequential part: one batched matrix product per step, with
   its adjoint written by hand (G_n = ∂M_n + G_{n+1} P_{n+1}ᵀ, ∂P_n = M_{n−1}ᵀ G_n, ∂Q_n = G_n;
   `_AffineRecurrence`). Being associative, it also runs as a parallel prefix scan
   (``RK4(scan="parallel")``, and "auto" on a GPU: `neuralde_seq.solvers.linear_scan.parallel_scan` on the
   transposed states M_{n+1}ᵀ = P_nᵀ M_nᵀ + Q_nᵀ, every row of M a column of the scan's state), ⌈log₂ S⌉ rounds of
   batched products for the S steps of a segment instead of S products one after the other; its gradient is
   autograd's through the rounds (the adjoint recurrence G_n = ∂M_n + G_{n+1} P_{n+1}ᵀ run as the reverse scan,
   as deep), and the default segments are then longer (`neuralde_seq.solvers.linear_scan.parallel_segment_steps`).

The states are the Runge-Kutta states of the per-step loop to rounding (the same polynomial of the stage inputs,
evaluated in another order), so this is the same model; tests/test_affine_rk4.py checks values and gradients
against the per-step loop in float64. The per-step loop stays the reference and is what
``RK4(affine_steps=False)`` (any fixed-step method with ``affine_steps=False``) solves with.

**The step map.** With stages i = 0..S−1 of a tableau (c, a_ij, b_i) and the final combination as a stage S
(a_Sj = b_j), write each stage's rate as K_i = −λ_i Y_i + u_i a_iᵀ with u_i = w_i b_i − δ_i Y_i a_i and the stage
state Y_i = M + h Σ_{j<i} a_ij K_j. By induction Y_i = σ_i M + Σ_{l<i} φ_il u_l a_lᵀ with scalars

    σ_i = 1 − h Σ_{j<i} a_ij λ_j σ_j,        φ_il = h a_il − h Σ_{l<j<i} a_ij λ_j φ_jl

(σ = 1 and φ_il = h a_il without a forget gate). Then u solves the unit lower-triangular system
u_i + Σ_{l<i} N_il u_l = w_i b_i − δ_i σ_i M a_i with N_il = δ_i φ_il (a_l·a_i), and M_{n+1} = Y_S gives

    P = σ_S I − Σ_m δ_m σ_m a_m c_mᵀ,        Q = Σ_m w_m b_m c_mᵀ,        c_m = φ_Sm a_m − Σ_{l>m} N_lm c_l

(c = (I + Nᵀ)⁻¹ (φ_S ⊙ a), the UT transform of the stage keys). Everything but the two (d × S)(S × d) products
is a handful of S-term scalar and d-vector operations per step, batched over steps, samples and heads.

**Gradients.** With ``gradient=Checkpoint()`` (the default) the segments are `CheckpointedSegment` nodes as in
the per-step loop: the forward pass keeps each segment's first state, the backward pass recomputes the segment's
slow net, step maps and states and backpropagates through them; memory is O(segment) activations, not
O(T · d_model). Segments are the per-step loop's (``Checkpoint.every`` steps, default ⌈√N⌉ of N): longer ones
were measured slower on a CPU (benchmarks/cde_step.py, T = 1,000: 64 steps as fast as 32, 256 steps 1.4 times
slower, the whole sequence 2 times slower), as a segment's batched tensors then outgrow the caches.
"""

from __future__ import annotations

import torch
from torch import nn

from ..fields import FastWeightField
from .fixed_step import FixedStepSolve
from .linear_scan import parallel_scan, parallel_segment_steps, uses_parallel_scan

__all__ = ["affine_field", "affine_steps_apply", "step_maps", "dense_step_maps", "AffineFixedStepSolve"]

# The step maps are products over the stages; batched matrix products with an inner dimension of 4 (rk4's stages)
# ran 7 times slower on a CPU than with 8 (MKL, float32, 128 matrices of 8 × 4 times 4 × 8): padded with zeros.
PADDED_STAGES = 8


def affine_field(dynamics) -> FastWeightField | None:
    """The single `FastWeightField` that ``dynamics`` integrates (itself, or its ``exact_field``: one-layer
    `neuralde_seq.models.FastWeightNetwork` dynamics) if its rule is affine in W (``has_affine_rate``), else None."""
    field = getattr(dynamics, "exact_field", dynamics)
    if isinstance(field, FastWeightField) and field.rule.has_affine_rate:
        return field
    return None


def affine_steps_apply(dynamics, method) -> bool:
    """Whether `neuralde_seq.solvers.solve` takes this path: a fixed-step method (`neuralde_seq.solvers.FixedStep`,
    after `neuralde_seq.solvers.Auto` resolved to its fallback) with ``affine_steps`` True (the default), and
    ``dynamics`` one fast weight field with an affine rule (`affine_field`). (The continuous adjoint is decided
    before.)

    Arguments:
        dynamics: what `solve` integrates.
        method: the method in force (a `neuralde_seq.solvers.Method` object).

    Returns:
        True when the fixed-step solve composes affine step maps (`AffineFixedStepSolve`).
    """
    return method.fixed_grid and method.affine_steps and affine_field(dynamics) is not None


class _AffineRateDynamics(nn.Module):
    """The field's `RankOneRate` inputs as the "control features" of `FixedStepSolve`: (a, b, decay, write,
    forget), N leading (None where the rule has no decay or the field no forget gate)."""

    def __init__(self, field: FastWeightField):
        super().__init__()
        self.field = field
        self.needs_value, self.needs_derivative = field.needs_value, field.needs_derivative
        self.needs_time = field.needs_time
        self.transposed = False

    def control_features(self, x, dx, s=None):
        k_raw, v_raw, beta, *forget = self.field.projections(x, dx, s)
        rate = self.field.rule.affine_rate(k_raw, v_raw, beta, *forget)
        self.transposed = rate.transposed  # a property of the rule, the same on every call
        return rate.a, rate.b, rate.decay, rate.write, rate.forget


def _scaled(coefficient, tensor):
    """coefficient · tensor, None for a zero coefficient."""
    if coefficient == 0.0:
        return None
    return tensor if coefficient == 1.0 else tensor * coefficient


def _accumulate(total, term):
    return term if total is None else (total if term is None else total + term)


def step_maps(
    tableau,
    h: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    decay: torch.Tensor | None,
    write: torch.Tensor,
    forget: torch.Tensor | None,
):
    """The affine map M ↦ M P + Q of one explicit Runge-Kutta step of dM/ds = write·b aᵀ − decay·(M a) aᵀ −
    forget·M (module docstring), for X independent steps at once.

    Arguments:
        tableau: the method's tableau (`neuralde_seq.solvers.fixed_step.TABLEAUS`), S stages.
        h: (X, 1) step lengths (0: the identity map).
        a: (S, X, d_a) the rate's read/write direction at every stage.
        b: (S, X, d_b) the vector written at every stage.
        decay: (S, X, 1) or None (nothing decays: Hebb).
        write: (S, X, 1).
        forget: (S, X, 1) or None (no forget gate).

    Returns:
        (σ, L_T, R_T, C), the factors of P = σ I + L_Tᵀ C and Q = R_Tᵀ C (`dense_step_maps`): σ (X, 1), or None for 1
        (no forget gate); L_T (X, k, d_a), or None for 0 (Hebb); R_T (X, k, d_b); C (X, k, d_a); k = max(S,
        `PADDED_STAGES`), the rows past S zero.
    """
    stages, rows, d_a = a.shape
    # Per-stage views from one unbind each: indexing a stage instead would make the backward pass fill a zero
    # gradient of all stages for every index.
    stage_a, stage_b, stage_write = a.unbind(0), b.unbind(0), write.unbind(0)
    stage_decay = None if decay is None else decay.unbind(0)
    stage_forget = None if forget is None else forget.unbind(0)
    coefficients = [tuple(row) for row in tableau.a] + [tuple(tableau.b)]  # row S: the step's combination
    # σ_i and φ_il (None: zero), i = 0..S.
    sigma: list = [1.0]
    phi: list[list] = [[]]
    for i in range(1, stages + 1):
        row = coefficients[i]
        if stage_forget is None:
            sigma.append(1.0)
            phi.append([_scaled(row[l], h) for l in range(i)])
            continue
        decayed = None
        for j in range(i):
            decayed = _accumulate(decayed, _scaled(row[j], stage_forget[j] * sigma[j]))
        sigma.append(1.0 if decayed is None else 1.0 - h * decayed)
        phi_i = []
        for l in range(i):
            forgotten = None  # Σ_{l<j<i} a_ij λ_j φ_jl
            for j in range(l + 1, i):
                if phi[j][l] is not None:
                    forgotten = _accumulate(forgotten, _scaled(row[j], stage_forget[j] * phi[j][l]))
            phi_i.append(_scaled(row[l], h) if forgotten is None else h * (row[l] - forgotten))
        phi.append(phi_i)
    # N_il = δ_i φ_il (a_l·a_i), l < i < S.
    N: list[list[torch.Tensor | None]] = [[None] * stages for _ in range(stages)]
    if stage_decay is not None:
        for i in range(1, stages):
            for l in range(i):
                if phi[i][l] is not None:
                    N[i][l] = stage_decay[i] * phi[i][l] * (stage_a[l] * stage_a[i]).sum(-1, keepdim=True)
    # c_m = φ_Sm a_m − Σ_{l>m} N_lm c_l, back substitution.
    c: dict[int, torch.Tensor] = {}
    for m in reversed(range(stages)):
        total = None if phi[stages][m] is None else phi[stages][m] * stage_a[m]
        for l in range(m + 1, stages):  # every c_l is set by now
            N_lm = N[l][m]
            if N_lm is not None:
                total = -N_lm * c[l] if total is None else torch.addcmul(total, N_lm, c[l], value=-1.0)
        c[m] = torch.zeros_like(stage_a[m]) if total is None else total
    # P = σ_S I + L C and Q = R C with L = [−δ_m σ_m a_m]_m (d_a × S), R = [w_m b_m]_m (d_b × S) and C = [c_m]_m
    # (S × d_a), the stage dimension padded with zeros to at least PADDED_STAGES. L and R are stacked as their
    # transposes (on dim 1: contiguous rows, several times faster than stacking on dim −1).
    padding = max(stages, PADDED_STAGES) - stages
    pad = lambda vectors: vectors + [vectors[0].new_zeros(()).expand_as(vectors[0])] * padding
    C = torch.stack(pad([c[m] for m in range(stages)]), dim=1)  # (X, k, d_a)
    R_T = torch.stack(pad([w * v for w, v in zip(stage_write, stage_b)]), dim=1)  # (X, k, d_b)
    L_T = (
        None
        if stage_decay is None
        else torch.stack(
            pad(
                [
                    -(stage_decay[m] if isinstance(sigma[m], float) else stage_decay[m] * sigma[m]) * stage_a[m]
                    for m in range(stages)
                ]
            ),
            dim=1,
        )
    )
    return (None if isinstance(sigma[stages], float) else sigma[stages]), L_T, R_T, C


def dense_step_maps(sigma, L_T, R_T, C):
    """(P, Q), (X, d_a, d_a) and (X, d_b, d_a), from the factors `step_maps` returns (for tests and reading)."""
    d_a = C.shape[-1]
    eye = torch.eye(d_a, dtype=C.dtype, device=C.device)
    P = (eye if sigma is None else sigma.unsqueeze(-1) * eye).expand(C.shape[0], d_a, d_a)
    if L_T is not None:
        P = P + L_T.transpose(1, 2) @ C
    return P, R_T.transpose(1, 2) @ C


class _AffineRecurrence(torch.autograd.Function):
    """M_t = σ_t M_{t−1} + (M_{t−1} L_t + R_t) C_t for t = 1..n from M_0, all N matrices at once: the step maps of
    `step_maps` (P_t = σ_t I + L_t C_t, Q_t = R_t C_t) applied in factored form, two batched products per step
    (forming P_t and Q_t first was measured slower: two more batched products over all steps each way, and
    their n·N·d² entries). Returns every M_t (n, N, d_b, d_a) if ``keep``, else M_n (N, d_b, d_a).

    The backward pass is the adjoint recurrence, written by hand: with Z_t = M_{t−1} L_t + R_t and G_t the gradient
    on M_t, ∂Z_t = G_t C_tᵀ and G_{t−1} = σ_t G_t + ∂Z_t L_tᵀ (+ the gradient on M_{t−1} from outside), one step after
    the other; then for all steps at once ∂R_t = ∂Z_t, ∂L_t = M_{t−1}ᵀ ∂Z_t, ∂C_t = Z_tᵀ G_t, ∂σ_t = ⟨G_t, M_{t−1}⟩.
    """

    @staticmethod
    def forward(ctx, keep, M0, sigma, L_T, R_T, C):
        """M0 (N, d_b, d_a); sigma (n, N, 1, 1) or None (1); L_T = L_tᵀ (n, N, k, d_a) or None (L = 0: Hebb);
        R_T = R_tᵀ (n, N, k, d_b); C (n, N, k, d_a)."""
        steps = C.shape[0]
        states = M0.new_empty((steps,) + M0.shape)
        # Per-step views made once (unbind), not by indexing in the loop; R contiguous, so that each step's
        # product starts from a plain copy.
        R = R_T.transpose(-1, -2).contiguous()  # (n, N, d_b, k)
        Z = R if L_T is None else torch.empty_like(R)
        R_, Z_, C_, states_ = R.unbind(0), Z.unbind(0), C.unbind(0), states.unbind(0)
        L_ = None if L_T is None else L_T.transpose(-1, -2).unbind(0)
        sigma_ = None if sigma is None else sigma.unbind(0)
        M = M0
        for t in range(steps):
            if L_ is not None:
                torch.baddbmm(R_[t], M, L_[t], out=Z_[t])
            M = torch.baddbmm(M if sigma_ is None else M * sigma_[t], Z_[t], C_[t], out=states_[t])
        ctx.keep = keep
        ctx.save_for_backward(M0, sigma, L_T, C, states, Z)
        return states if keep else states[-1]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        M0, sigma, L_T, C, states, Z = ctx.saved_tensors
        steps = C.shape[0]
        G = torch.empty_like(states)  # G[t]: the gradient on M_t, the state after step t
        dZ = torch.empty_like(Z)
        G[-1] = grad[-1] if ctx.keep else grad
        C_T_, G_, dZ_ = C.transpose(-1, -2).unbind(0), G.unbind(0), dZ.unbind(0)
        L_T_ = None if L_T is None else L_T.unbind(0)
        sigma_ = None if sigma is None else sigma.unbind(0)
        grad_ = grad.unbind(0) if ctx.keep else None
        for t in range(steps - 1, -1, -1):
            torch.bmm(G_[t], C_T_[t], out=dZ_[t])
            previous = G_[t] if sigma_ is None else G_[t] * sigma_[t]
            if t == 0:
                break
            if grad_ is not None:
                previous = previous + grad_[t - 1]
            if L_T_ is None:
                G_[t - 1].copy_(previous)
            else:
                torch.baddbmm(previous, dZ_[t], L_T_[t], out=G_[t - 1])
        grad_M0 = previous if L_T is None else torch.baddbmm(previous, dZ_[0], L_T_[0])
        before = torch.cat([M0.unsqueeze(0), states[:-1]])  # M_{t−1}
        dZ_T = dZ.transpose(-1, -2)
        grad_sigma = None if sigma is None else (G * before).sum((-1, -2), keepdim=True)
        grad_L_T = None if L_T is None else torch.matmul(dZ_T, before)
        grad_C = torch.matmul(Z.transpose(-1, -2), G)
        return None, grad_M0, grad_sigma, grad_L_T, dZ_T, grad_C


class AffineFixedStepSolve(FixedStepSolve):
    """A `FixedStepSolve` of one affine fast weight field (`affine_steps_apply`) that composes each step's affine
    map instead of stepping stage by stage (module docstring). Same grid, segments, variable-length handling
    (a step after a sample's end has length 0: the identity map) and checkpointing (`CheckpointedSegment`
    recomputes `run`). ``parallel``: whether the composition runs as a parallel prefix scan (module docstring)."""

    def __init__(self, dynamics, control, method, dtype: torch.dtype):
        """``dynamics``: what `solve` integrates (`affine_field` must find its field); ``method``: the fixed-step
        method (`neuralde_seq.solvers.FixedStep`: its tableau, ``step_size``, ``max_steps`` and ``scan``)."""
        field = affine_field(dynamics)
        if field is None:
            raise ValueError(
                "AffineFixedStepSolve solves one fast weight field whose rule is affine in W (Hebb, Oja, "
                f"pre-Delta), got {type(dynamics).__name__}"
            )
        self.field = field
        super().__init__(_AffineRateDynamics(field), control, method, dtype)
        self.parallel = uses_parallel_scan(method.scan, control.coeffs.device)

    def segments(self, every: int | None) -> list[tuple[int, int]]:
        """As `FixedStepSolve.segments`; with the parallel scan and ``every`` None, segments as long as the
        scan's graph allows (`parallel_segment_steps`: each step's P (d × d) and Q (d × d) per matrix)."""
        if every is None and self.parallel:
            d = self.field.head_dim
            every = parallel_segment_steps(self.steps, self.control.batch_size * self.field.n_heads * 2 * d * d)
        return super().segments(every)

    def run(self, y: torch.Tensor, n0: int, n1: int, keep: bool) -> tuple[torch.Tensor, ...]:
        """Steps n0..n1−1 from state y (B, ...) (H·d_head² entries per sample); returns (y after them, the states
        after every step that ends on a knot if ``keep``), as `FixedStepSolve.run`."""
        batch, heads, d = self.control.batch_size, self.field.n_heads, self.field.head_dim
        steps, stages = n1 - n0, len(self.tableau.c)
        features = self.features(n0, n1)  # (steps, S, B, H, ·) each, or None
        transposed = self.dynamics.transposed
        # (S, X, ·) with X = steps·B·H, step-major: each stage a contiguous block.
        a, b, decay, write, forget = (
            None if f is None else f.transpose(0, 1).reshape(stages, -1, f.shape[-1]) for f in features
        )
        index = torch.arange(n0, n1, device=self.end_step.device)
        h = self.width[n0:n1, None].to(y.dtype) * (index[:, None] < self.end_step).to(y.dtype)  # (steps, B)
        h = h.unsqueeze(-1).expand(steps, batch, heads).reshape(-1, 1)
        assert a is not None and b is not None and write is not None  # an affine rate has them (decay, forget: maybe)
        sigma, L_T, R_T, C = step_maps(self.tableau, h, a, b, decay, write, forget)
        matrices = batch * heads
        W0 = y.reshape(matrices, d, d)

        def by_step(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(steps, matrices, *t.shape[1:])

        if self.parallel:
            # M_nᵀ = P_nᵀ M_{n−1}ᵀ + Q_nᵀ: the dense scan with the rows of M as the state's columns.
            P, Q = (by_step(t) for t in dense_step_maps(sigma, L_T, R_T, C))
            M0 = W0.transpose(-1, -2) if transposed else W0
            states = parallel_scan(
                P.transpose(-1, -2), Q.transpose(-1, -2), M0.transpose(-1, -2), "dense", columns=True
            ).transpose(-1, -2)  # (steps, N, d_b, d_a)
            if not keep:
                states = states[-1]
        elif not torch.is_grad_enabled() and not keep:
            # Without a graph (the forward pass of checkpointed segments, inference) and only the final state
            # wanted: P and Q formed for all steps at once, then one batched product per step instead of two.
            P, Q = (by_step(t) for t in dense_step_maps(sigma, L_T, R_T, C))
            M = W0.transpose(-1, -2) if transposed else W0
            for P_t, Q_t in zip(P.unbind(0), Q.unbind(0)):
                M = torch.baddbmm(Q_t, M, P_t)
            return ((M.transpose(-1, -2) if transposed else M).reshape(y.shape),)
        else:
            states = _AffineRecurrence.apply(
                keep,
                W0.transpose(-1, -2) if transposed else W0,
                None if sigma is None else sigma.reshape(steps, matrices, 1, 1),
                None if L_T is None else by_step(L_T),
                by_step(R_T),
                by_step(C),
            )
        if transposed:
            states = states.transpose(-1, -2)
        if not keep:
            return (states.reshape(y.shape),)
        kept = tuple(states[j].reshape(y.shape) for j, n in enumerate(range(n0, n1)) if n + 1 in self.knot_steps)
        return (states[-1].reshape(y.shape),) + kept
