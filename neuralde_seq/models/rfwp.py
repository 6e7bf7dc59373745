"""ODE-RFWP: a recurrent fast weight programmer whose recurrent state evolves by an ODE between observations.

Paper 002 §3.3 (Eq. 26-27) for data that only comes as discrete observations at irregular times:

    u_n       = ODESolve(f, h_{n−1}, t_{n−1}, t_n)          (26)
    h_n, W_n  = FWP([x_n, u_n], W_{n−1})                     (27)

The learning rule stays discrete; only the recurrent state vector is continuous (evolving a fast weight
matrix autonomously would need a matrix-to-matrix network, paper footnote 5).

**The RFWP step** (`RFWPCell`), following the structure of the paper's public code (appendix_mujoco,
``RecurrentHebbUpdateRule`` & co. and ``query_fast_weight``), per head with d = hidden / heads:

    a       = LayerNorm(Linear(x_n))                        (input projection, as every FWP here)
    m       = Linear([a, u_n])                              (merge of input and recurrent state)
    k, v, β = Linear(m) split per head                      (keys d, values d, learning rate 1)
    q       = Linear(m)   (query_from="state", default)  or  Linear(a)   (query_from="input", public code)
    W_n     = rule.discrete_step(W_{n−1}, k, v, β)          (Hebb / Oja / Delta, W + rate: `neuralde_seq.rules`)
    y       = W_n softmax(q)                                (per head, heads concatenated)
    h_n     = FeedForward(Linear(y))                        (output projection, Transformer FF block)

so the key, value, learning rate and query are all generated from [x_n, u_n] as Eq. 27 writes; the public
code generates the query from x_n alone, offered as ``query_from="input"``. The rules are the toolkit's
one implementation (paper activations: softmax keys and queries, tanh values, σ(β)); the public code's
Oja and post-Delta variants are the rule options ``Oja(softmax_after_subtract=True)`` and ``"delta-post"``.
W_0 = 0 and h_0 = 0. f is an MLP (`ode_mlp`, tanh) on h.

**Irregular times.** The walk over the observations and the ODE between them are ODE-RNN's
(`walk_observations`,
`evolve_over_gaps`): each sample is integrated over its own gaps in
a normalised time, so it only ever sees its own times; rows where every channel is missing are read
(query points) but change nothing. The input of the step is [x̃_n, m_n], values with zeros where missing
plus the observation mask, as ODE-RNN's.

**Order.** ``order="evolve_update"`` (Eq. 26-27): at an observation the state is first evolved to t_n,
then updated; the state the model exposes at row n is h_n at t_n, after reading x_n.
``order="update_evolve"`` (the public code's ``add_data_first``): the observation is read, then the state
is evolved to the next row's time; the state exposed at row n is the state at t_{n+1} that has read
x_0..x_n, i.e. a one-step-ahead state. Both compose the same recursion (the update at t_n always sees u_n
evolved from t_{n−1}); they differ in which state is returned: `ODERFWP.row_states` gives both
anyway, ``order`` picks what ``hidden_sequence`` returns. For the classifier (final state after the last
observation) they coincide.
"""

from __future__ import annotations

import torch
from torch import nn

from ..gates import check_t_max, chrono_bias
from ..observations import Observations
from ..rules import LearningRule, make_rule
from ..solvers import Method, SolverOptions, evolve_over_gaps, solver_options
from .fast_weights import FeedForward
from .recurrent import _ObservationModel, _positive_int, ode_mlp, state_after_last_observation, walk_observations

__all__ = ["RFWPCell", "ODERFWP", "ORDERS", "QUERY_SOURCES"]

ORDERS = ("evolve_update", "update_evolve")
QUERY_SOURCES = ("state", "input")


class RFWPCell(nn.Module):
    """One discrete step of a recurrent fast weight programmer, (x_n, u_n, W_{n−1}) ↦ (h_n, W_n) (module
    docstring).

    Arguments:
        input_size: channels of x_n.
        hidden: width of u_n and h_n (heads × head width).
        heads: number of heads; W has shape (heads, d, d) with d = hidden / heads.
        rule: "hebb", "oja", "delta", "delta-post" or a `LearningRule`.
        d_ff: inner width of the feed-forward block (default 4·hidden).
        query_from: "state" (query from [x_n, u_n], Eq. 27) or "input" (from x_n alone, public code).
        chrono_t_max: None (default): PyTorch's initialisation; a number > 2: chrono initialisation of the
            learning-rate gate, b_β = −log u, u ~ U(1, chrono_t_max − 1) (`neuralde_seq.models.chrono_bias`), so
            that σ(β) writes over 2 to chrono_t_max steps.
    """

    def __init__(
        self,
        input_size: int,
        hidden: int,
        heads: int = 4,
        rule: str | LearningRule = "delta",
        *,
        d_ff: int | None = None,
        query_from: str = "state",
        chrono_t_max: float | None = None,
    ):
        super().__init__()
        _positive_int("input_size", input_size)
        _positive_int("hidden", hidden)
        _positive_int("heads", heads)
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
        if query_from not in QUERY_SOURCES:
            raise ValueError(f"query_from must be one of {QUERY_SOURCES}, got {query_from!r}")
        d_ff = 4 * hidden if d_ff is None else _positive_int("d_ff", d_ff)
        self.rule = make_rule(rule)
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.query_from = query_from
        self.input_proj = nn.Linear(input_size, hidden)
        self.input_norm = nn.LayerNorm(hidden)
        self.merge = nn.Linear(2 * hidden, hidden)
        self.slow = nn.Linear(hidden, heads * (2 * self.head_dim + 1))  # keys, values, learning rates
        self.query = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)
        self.feed_forward = FeedForward(hidden, d_ff)
        if chrono_t_max is not None:  # drawn last: every other parameter is initialised as without it
            check_t_max("chrono_t_max", chrono_t_max)
            beta_bias = self.slow.bias.view(heads, -1)[:, -1]
            with torch.no_grad():
                beta_bias.copy_(-chrono_bias(heads, chrono_t_max, dtype=beta_bias.dtype, device=beta_bias.device))
        self.chrono_t_max = chrono_t_max

    def initial_weights(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        """W_0 = 0.

        Arguments:
            batch: B, the batch size.
            like: a tensor whose dtype and device the weights take.

        Returns:
            (B, heads, d, d) zeros.
        """
        return like.new_zeros(batch, self.heads, self.head_dim, self.head_dim)

    def generate(self, x: torch.Tensor, u: torch.Tensor):
        """The slow net's outputs (pre-activations) per head.

        Arguments:
            x: (B, input_size) the observation.
            u: (B, hidden) the recurrent state.

        Returns:
            ``(k_raw, v_raw, beta, q_raw)``: (B, heads, d), (B, heads, d), (B, heads, 1), (B, heads, d).
        """
        a = self.input_norm(self.input_proj(x))
        m = self.merge(torch.cat([a, u], dim=-1))
        k, v, beta = (
            self.slow(m).view(-1, self.heads, 2 * self.head_dim + 1).split((self.head_dim, self.head_dim, 1), dim=-1)
        )
        q = self.query(m if self.query_from == "state" else a).view(-1, self.heads, self.head_dim)
        return k, v, beta, q

    def forward(self, x: torch.Tensor, u: torch.Tensor, W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: the fast weight update from (x_n, u_n), then the read-out h_n.

        Arguments:
            x: (B, input_size) the observation.
            u: (B, hidden) the recurrent state.
            W: (B, heads, d, d) the fast weights.

        Returns:
            (h, W_new): (B, hidden) and (B, heads, d, d).
        """
        if x.dim() != 2 or u.shape != (x.shape[0], self.hidden):
            raise ValueError(
                f"x must be (B, input_size) and u (B, {self.hidden}), got {tuple(x.shape)}, {tuple(u.shape)}"
            )
        if W.shape != (x.shape[0], self.heads, self.head_dim, self.head_dim):
            raise ValueError(
                f"W must have shape ({x.shape[0]}, {self.heads}, {self.head_dim}, {self.head_dim}), "
                f"got {tuple(W.shape)}"
            )
        k, v, beta, q = self.generate(x, u)
        W = self.rule.discrete_step(W, k, v, beta)
        y = (W @ self.rule.activate_key(q).unsqueeze(-1)).squeeze(-1)  # (B, heads, d)
        h = self.feed_forward(self.out_proj(y.reshape(x.shape[0], self.hidden)))
        return h, W


class ODERFWP(_ObservationModel):
    """ODE-RFWP (paper 002 Eq. 26-27): an ODE on the recurrent state between observations, a discrete fast
    weight update at each.

    Arguments:
        in_channels: channels C of the observations.
        num_classes: number of classes of the readout, or None for an encoder / sequence model without one.
        hidden: width of the recurrent state u, h.
        heads: number of fast weight heads (hidden must be a multiple).
        rule: learning rule, "hebb", "oja", "delta", "delta-post" or a LearningRule.
        width: width of the hidden layers of the ODE's MLP f (default 64; as ODE-RNN's).
        depth: number of tanh hidden layers of f (default 1; ``depth=0``: a linear field, as ODE-RNN's).
        d_ff: inner width of the feed-forward block (default 4·hidden).
        order: "evolve_update" (default, Eq. 26-27) or "update_evolve" (module docstring).
        query_from: "state" (default) or "input".
        solver: `SolverOptions` or a method object (default `Auto`: rk4, one step per gap in the normalised time,
            checkpointed gradients); a fixed-step method's ``step_size`` is the step in τ ∈ [0, 1].
        chrono_t_max: None (default) or a number > 2: chrono initialisation of the learning-rate gate (`RFWPCell`).
        output_norm: a LayerNorm on the final h before the linear read-out: True, False (the paper's plain linear
            read-out), or None (default): True for Hebb's rule, whose fast weights grow with the number of
            observations (logits over 100 at initialisation on 2,000 of them), False for the bounded rules.

    ``forward(observations)`` gives logits (B, num_classes) from h after each sample's last observation;
    `row_states` and `hidden_sequence` give the states at every row.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int | None = None,
        hidden: int = 32,
        heads: int = 4,
        rule: str | LearningRule = "delta",
        width: int = 64,
        depth: int = 1,
        *,
        d_ff: int | None = None,
        order: str = "evolve_update",
        query_from: str = "state",
        solver: SolverOptions | Method | None = None,
        chrono_t_max: float | None = None,
        output_norm: bool | None = None,
    ):
        super().__init__(in_channels, 2 if num_classes is None else num_classes, hidden)
        if num_classes is None:
            self.readout = None
        if output_norm is not None and not isinstance(output_norm, bool):
            raise TypeError(f"output_norm must be True, False or None, got {output_norm!r}")
        if output_norm is None:  # h_n reads W_n, which under Hebb's rule grows like the number of observations
            output_norm = not make_rule(rule).bounded
        # (without a read-out, as an encoder, there is nothing to normalise for)
        self.output_norm = nn.LayerNorm(hidden) if output_norm and num_classes is not None else nn.Identity()
        _positive_int("width", width)
        _positive_int("depth", depth, minimum=0)
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
        self.order = order
        self.cell = RFWPCell(
            2 * in_channels, hidden, heads, rule, d_ff=d_ff, query_from=query_from, chrono_t_max=chrono_t_max
        )
        self.f = ode_mlp(hidden, width, depth)
        self.solver = solver_options(solver)

    def evolve(self, h: torch.Tensor, gap: torch.Tensor) -> torch.Tensor:
        """h after each sample's gap under dh/dt = f(h) (`evolve_over_gaps`).

        Arguments:
            h: (B, hidden) states at the start of each sample's gap.
            gap: (B,) each sample's gap Δt >= 0.

        Returns:
            (B, hidden) states after the gaps.
        """
        return evolve_over_gaps(self.f, h, gap, self.solver)

    def _walk(self, observations: Observations):
        self._check(observations)
        values = observations.values
        h = values.new_zeros(observations.batch_size, self.hidden)
        state = (h, self.cell.initial_weights(observations.batch_size, values))

        def evolve(state, gap):
            return (self.evolve(state[0], gap), state[1])

        def update(x, m, state):
            return self.cell(torch.cat([x, m.to(values.dtype)], dim=-1), state[0], state[1])

        return walk_observations(observations, state, evolve, update)

    def row_states(self, observations: Observations) -> tuple[torch.Tensor, torch.Tensor]:
        """The recurrent state at every row: u evolved to the row's time before reading it, and h after
        reading it (equal at rows without an observation).

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T rows.

        Returns:
            ``(before, after)``, each (B, T, hidden).
        """
        before, after = zip(*[(b[0], a[0]) for b, a in self._walk(observations)])
        return torch.stack(before, 1), torch.stack(after, 1)

    def hidden_sequence(self, observations: Observations) -> torch.Tensor:
        """The hidden state at every row.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T rows.

        Returns:
            (B, T, hidden): for ``order="evolve_update"`` h_n at row n after reading it; for
                ``"update_evolve"`` the state at the next row's time after reading rows ≤ n (the last row's is its
                own, there being no next time).
        """
        before, after = self.row_states(observations)
        if self.order == "evolve_update":
            return after
        return torch.cat([before[:, 1:], after[:, -1:]], dim=1)

    def final_hidden(self, observations: Observations) -> torch.Tensor:
        """h just after each sample's own last observation.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T rows.

        Returns:
            (B, hidden).
        """
        return state_after_last_observation(observations, self._walk(observations))[0]

    def forward(self, observations: Observations) -> torch.Tensor:
        """Logits from h after each sample's last observation.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B, T rows.

        Returns:
            (B, num_classes) logits.

        Raises:
            ValueError: the model was built without ``num_classes``.
        """
        if self.readout is None:
            raise ValueError("this ODERFWP was built without num_classes: use final_hidden or row_states")
        return self.readout(self.output_norm(self.final_hidden(observations)))
