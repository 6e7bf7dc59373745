"""Independent reference implementations of the CT-FWP equations, for tests (docs/design.md,
sections #equations-in-one-convention and #closed-forms-on-constant-inputs).

Everything here is written from the design document with explicit loops over batch and heads, reading
only the modules' weights (never calling their forward methods), so that a test comparing a library
result to these functions checks the library against the documented equations.
"""

from __future__ import annotations

import torch
from torch import nn

RULES = ("hebb", "oja", "oja-after", "delta", "delta-post")


def rule_object(rule: str):
    """The library rule (name or object) for a reference rule name ("oja-after": the public code's Oja)."""
    from neuralde_seq.rules import Oja

    return Oja(softmax_after_subtract=True) if rule == "oja-after" else rule


def expected_sources(rule: str, form: str, dx_only: bool = False, hebb_swap: bool = False) -> tuple[str, str]:
    """(key source, value source) from the forms table of docs/equations.md#equations-in-one-convention."""
    if form in ("ode", "rde"):
        return "x", "x"
    if dx_only:
        return "dx", "dx"
    if hebb_swap:
        return "dx", "x"
    if rule.startswith("delta"):
        return "dx", "x"
    return "x", "dx"  # Hebb, Oja


def softmax(z: torch.Tensor) -> torch.Tensor:
    e = torch.exp(z - z.max())
    return e / e.sum()


def sigmoid(z: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + torch.exp(-z))


def layer_norm(z: torch.Tensor, ln: nn.LayerNorm) -> torch.Tensor:
    """LayerNorm over the last dimension by hand: biased variance, eps inside the square root."""
    mu = z.mean(-1, keepdim=True)
    var = ((z - mu) ** 2).mean(-1, keepdim=True)
    return (z - mu) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def linear(z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    out = torch.einsum("oi,bi->bo", weight, z)
    return out if bias is None else out + bias


def key_features(field, source: torch.Tensor) -> torch.Tensor:
    """LN(input_proj(source)), (B, d_model)."""
    return layer_norm(linear(source, field.input_proj.weight, field.input_proj.bias), field.input_norm)


def projections(field, x, dx, sources):
    """(k_raw, v_raw, beta) of shapes (B, H, d), (B, H, d), (B, H), computed head by head.

    The slow map's output is laid out per head as [key (d), value (d), beta (1)] when the value has the
    key's source and [key (d), beta (1)] otherwise; a value from the other source is value_proj of the raw
    input, with a bias for x and none for x'.
    """
    key_src, val_src = sources
    pick = {"x": x, "dx": dx}
    H, d = field.n_heads, field.head_dim
    z = key_features(field, pick[key_src])
    S = linear(z, field.slow.weight, field.slow.bias)
    shared = key_src == val_src
    per_head = 2 * d + 1 if shared else d + 1
    assert S.shape[-1] == H * per_head
    ks, vs, bs = [], [], []
    for h in range(H):
        block = S[:, h * per_head : (h + 1) * per_head]
        ks.append(block[:, :d])
        if shared:
            vs.append(block[:, d : 2 * d])
            bs.append(block[:, 2 * d])
        else:
            bs.append(block[:, d])
            weight = field.value_proj.weight[h * d : (h + 1) * d]
            bias = None
            if val_src == "x":
                bias = field.value_proj.bias[h * d : (h + 1) * d]
            vs.append(linear(pick[val_src], weight, bias))
    return torch.stack(ks, 1), torch.stack(vs, 1), torch.stack(bs, 1)


def rule_rate(rule: str, W, k_raw, v_raw, beta):
    """dW/ds (docs/equations.md#equations-in-one-convention) with explicit loops: W (B, H, d, d) or None (= 0)."""
    B, H, d = k_raw.shape
    out = torch.zeros(B, H, d, d, dtype=k_raw.dtype)
    for b in range(B):
        for h in range(H):
            Wbh = torch.zeros(d, d, dtype=k_raw.dtype) if W is None else W[b, h]
            kr, vr, c = k_raw[b, h], v_raw[b, h], sigmoid(beta[b, h])
            k = softmax(kr)
            v = torch.tanh(vr)
            if rule == "hebb":
                rate = c * torch.outer(v, k)
            elif rule == "oja":
                rate = c * torch.outer(v, k - Wbh.T @ v)
            elif rule == "oja-after":
                rate = c * torch.outer(v, softmax(kr - Wbh.T @ v))
            elif rule == "delta":
                rate = c * torch.outer(v - Wbh @ k, k)
            elif rule == "delta-post":
                rate = c * torch.outer(torch.tanh(vr - Wbh @ k), k)
            else:
                raise AssertionError(rule)
            out[b, h] = rate
    return out


def field_rate(field, rule: str, sources, W, x, dx):
    return rule_rate(rule, W, *projections(field, x, dx, sources))


def query(field, x, dx, sources):
    """(B, H, d) queries: per head softmax(query_proj LN(input_proj(key source)))."""
    pick = {"x": x, "dx": dx}
    H, d = field.n_heads, field.head_dim
    z = key_features(field, pick[sources[0]])
    qs = []
    for h in range(H):
        raw = linear(z, field.query_proj.weight[h * d : (h + 1) * d], field.query_proj.bias[h * d : (h + 1) * d])
        qs.append(torch.stack([softmax(r) for r in raw]))
    return torch.stack(qs, 1)


def read(W, q):
    """y = W q per head, heads concatenated: (B, H·d)."""
    B, H = W.shape[:2]
    return torch.stack([torch.cat([W[b, h] @ q[b, h] for h in range(H)]) for b in range(B)])


def feed_forward(ff, z):
    """x + Linear(ReLU(Linear(LN(x)))) by hand from the FeedForward's weights."""
    first, second = ff.net[0], ff.net[3]
    hidden = torch.relu(linear(layer_norm(z, ff.norm), first.weight, first.bias))
    return z + linear(hidden, second.weight, second.bias)


def layer_readout(layer, rule, sources, W, x, dx):
    y = read(W, query(layer.field, x, dx, sources))
    return feed_forward(layer.feed_forward, linear(y, layer.out_proj.weight, layer.out_proj.bias))


def randomize_(module: nn.Module, generator: torch.Generator, scale: float = 0.5) -> None:
    """Overwrite every parameter (LayerNorm weights included) with seeded random values."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=generator, dtype=p.dtype))


# ------------------------------------------- closed forms: docs/equations.md#closed-forms-on-constant-inputs
def closed_form_step(rule: str, W, k_raw, v_raw, beta, h: float):
    """W(t+h) for an input constant over [t, t+h] (docs/equations.md#closed-forms-on-constant-inputs), per
    batch and head."""
    B, H, d = k_raw.shape
    out = torch.empty_like(W)
    for b in range(B):
        for hd in range(H):
            Wbh = W[b, hd]
            k = softmax(k_raw[b, hd])
            v = torch.tanh(v_raw[b, hd])
            c = sigmoid(beta[b, hd])
            if rule == "hebb":
                new = Wbh + c * h * torch.outer(v, k)
            elif rule == "delta":
                n = k @ k
                new = Wbh + torch.outer(v - Wbh @ k, k) * (1 - torch.exp(-c * n * h)) / n
            elif rule == "delta-post":
                n = k @ k
                e0 = v_raw[b, hd] - Wbh @ k
                eh = torch.asinh(torch.sinh(e0) * torch.exp(-c * n * h))
                new = Wbh + torch.outer(e0 - eh, k) / n
            elif rule == "oja":
                n = v @ v
                new = Wbh + torch.outer(v, k - Wbh.T @ v) * (1 - torch.exp(-c * n * h)) / n
            else:
                raise AssertionError(rule)
            out[b, hd] = new
    return out
