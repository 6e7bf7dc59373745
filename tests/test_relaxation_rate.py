"""relaxation_rate(c, n, h) = (1 − e^{−c n h})/n and its gradients against a 50-digit mpmath reference.

With x = c·n·h, the exact derivatives are ∂/∂c = h e^{−x}, ∂/∂h = c e^{−x} and
∂/∂n = −(c h)² γ(2, x)/x², γ(2, x) = 1 − (1 + x) e^{−x} (mpmath's lower incomplete gamma; checked against
mpmath.diff below). The grid of x runs from 1e-12 to 50 and straddles the implementation's switch points
(1e-3 for the value, 2 for ∂/∂n). c and h have short mantissas and n is rounded to 46 (float64) or 18 (float32)
bits, so that every product c·h·n is exact in the working precision: the errors measured are those of
relaxation_rate itself, not of the input rounding (which a second test allows for separately).
"""

import functools
import math

import mpmath
import numpy as np
import pytest
import torch

from neuralde_seq.rules import relaxation_rate

DIGITS = 50  # mpmath working precision (set locally: mpmath.mp is global)
SWITCHES = (1e-3, 2.0)
CH = ((0.75, 1.25), (0.3125, 0.5), (1.0, 1.0), (0.9375, 3.0), (0.0625, 0.125))  # c·h exact in 6 bits
MANTISSA_BITS = {torch.float64: 46, torch.float32: 18}  # c·h has at most 6 bits
# Tolerances in units of the dtype's eps (2.2e-16, 1.2e-7). Measured worst cases on the exact grid: float64
# value 0.72, gradients 1.45 (∂/∂n at x = 2); float32 value 0.91, gradients 1.74. The three-term series with
# autograd gradients that this replaced: float64 value 1.9e5 and ∂/∂n 1.1e9 at x = 1e-3, ∂/∂c and ∂/∂h zero
# (relative error 1) for x > 37; float32 ∂/∂n 3.5e3 at x = 1e-3, ∂/∂c and ∂/∂h zero for x > 17.
VALUE_TOL, GRAD_TOL = 3.0, 4.0


def _x_grid():
    xs = set(np.logspace(-12, math.log10(50.0), 400).tolist())
    for s in SWITCHES:
        for k in range(1, 6):
            xs.update((s * (1 - 10.0**-k), s * (1 + 10.0**-k)))
        xs.update((s, float(np.nextafter(s, 0.0)), float(np.nextafter(s, 1.0))))
    return sorted(xs)


def _round_mantissa(v, bits):
    m, e = math.frexp(v)
    return math.ldexp(round(m * 2**bits) / 2**bits, e)


def reference(c, n, h):
    """(value, ∂/∂c, ∂/∂n, ∂/∂h) at the float inputs c, n, h, in 50-digit arithmetic."""
    with mpmath.workdps(DIGITS):
        c, n, h = mpmath.mpf(c), mpmath.mpf(n), mpmath.mpf(h)
        x = c * n * h
        decay = mpmath.exp(-x)
        value = -mpmath.expm1(-x) / n if n else c * h
        g = mpmath.gammainc(2, 0, x) / x**2 if x else mpmath.mpf(1) / 2
        return value, h * decay, -((c * h) ** 2) * g, c * decay


def _relative_errors(got, expected):
    return np.array([float(abs((mpmath.mpf(a) - b) / b)) for a, b in zip(got.detach().double().tolist(), expected)])


@functools.cache
def _exact_case(dtype):
    xs = _x_grid()
    rows = [(c, _round_mantissa(x / (c * h), MANTISSA_BITS[dtype]), h) for c, h in CH for x in xs]
    refs = [reference(*row) for row in rows]
    return rows, refs


def test_reference_derivatives():
    """The analytic derivatives used as the reference agree with mpmath.diff."""
    for c, n, h in ((0.7, 1e-9, 1.3), (0.3, 0.004, 0.5), (0.9, 2.5, 0.9), (0.2, 300.0, 0.7)):
        f = lambda c_, n_, h_: -mpmath.expm1(-c_ * n_ * h_) / n_  # noqa: E731
        _, dc, dn, dh = reference(c, n, h)
        for order, expected in (((1, 0, 0), dc), ((0, 1, 0), dn), ((0, 0, 1), dh)):
            with mpmath.workdps(DIGITS):
                numeric = mpmath.diff(f, (c, n, h), order)
            assert abs(numeric - expected) <= mpmath.mpf(10) ** -30 * abs(expected)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_relaxation_rate_against_mpmath(dtype):
    """Value and gradients (w.r.t. c, n and a tensor h) within a few eps of the exact ones, for x in [1e-12, 50]."""
    rows, refs = _exact_case(dtype)
    c, n, h = (torch.tensor(col, dtype=dtype, requires_grad=True) for col in zip(*rows))
    assert ((c * h * n).double() == torch.tensor([c_ * h_ * n_ for c_, n_, h_ in rows], dtype=torch.float64)).all()
    value = relaxation_rate(c, n, h)
    grads = torch.autograd.grad(value.sum(), (c, n, h))
    eps = torch.finfo(dtype).eps
    x = np.array([c_ * n_ * h_ for c_, n_, h_ in rows])
    for name, got, k, tol in (
        ("value", value, 0, VALUE_TOL),
        ("d/dc", grads[0], 1, GRAD_TOL),
        ("d/dn", grads[1], 2, GRAD_TOL),
        ("d/dh", grads[2], 3, GRAD_TOL),
    ):
        errors = _relative_errors(got, [r[k] for r in refs]) / eps
        worst = int(errors.argmax())
        assert errors[worst] <= tol, f"{name}: {errors[worst]:.3g} eps at x = {x[worst]:.6g}"
    # A number h gives the same values as a tensor h.
    torch.testing.assert_close(
        relaxation_rate(c[: len(rows) // len(CH)], n[: len(rows) // len(CH)], CH[0][1]),
        value[: len(rows) // len(CH)],
        rtol=0,
        atol=0,
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_relaxation_rate_generic_inputs(dtype):
    """Random c, h and n (x = c n h from 1e-12 to 50, not exact): the error allowed grows as (1 + x) eps, the
    conditioning of e^{−x} with respect to the rounding of the product."""
    g = torch.Generator().manual_seed(0)
    size = 600
    c64 = torch.rand(size, generator=g, dtype=torch.float64)
    h64 = 4 * torch.rand(size, generator=g, dtype=torch.float64)
    x64 = 10 ** (-12 + (12 + math.log10(50.0)) * torch.rand(size, generator=g, dtype=torch.float64))
    c, h, n = (t.to(dtype).requires_grad_() for t in (c64, h64, x64 / (c64 * h64)))
    value = relaxation_rate(c, n, h)
    grads = torch.autograd.grad(value.sum(), (c, n, h))
    refs = [reference(*row) for row in zip(c.tolist(), n.tolist(), h.tolist())]
    scale = torch.finfo(dtype).eps * (1 + x64.numpy())
    for name, got, k in (("value", value, 0), ("d/dc", grads[0], 1), ("d/dn", grads[1], 2), ("d/dh", grads[2], 3)):
        errors = _relative_errors(got, [r[k] for r in refs]) / scale
        worst = int(errors.argmax())
        assert errors[worst] <= GRAD_TOL, f"{name}: {errors[worst]:.3g} (1 + x) eps at x = {x64[worst].item():.6g}"
