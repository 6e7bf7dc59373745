"""Basis-function expansions (paper 004): the bases against their formulas, exact projections between nested
spaces, the L2-best property, least-squares fits to point clouds, and the expanded layers against plain ones."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from neuralde_seq.basis import (
    BasisConv1d,
    BasisLinear,
    Fourier,
    Legendre,
    PiecewiseConstant,
    PiecewiseLinear,
    expand,
    fit_to_points,
    gram_matrix,
    make_basis,
    project,
    project_module,
    projection_matrix,
)

D = torch.float64


def _composite_gauss(cells: int, points: int = 12):
    """Our own quadrature for checks: Gauss-Legendre (numpy) on ``cells`` equal cells of [0, 1]."""
    nodes, weights = np.polynomial.legendre.leggauss(points)
    left = np.arange(cells)[:, None] / cells
    u = (left + (nodes[None, :] + 1) / (2 * cells)).ravel()
    w = np.broadcast_to(weights[None, :] / (2 * cells), (cells, points)).ravel()
    return torch.from_numpy(u), torch.from_numpy(w.copy())


# ---- the bases against their formulas ----------------------------------------------------------------------


def test_legendre_matches_numpy_legendre_polynomials_and_is_orthonormal():
    basis = Legendre(9)
    u = torch.linspace(0, 1, 101, dtype=D)
    phi = basis(u)
    for k in range(9):
        coefficients = np.zeros(k + 1)
        coefficients[k] = 1.0
        expected = math.sqrt(2 * k + 1) * np.polynomial.legendre.legval(2 * u.numpy() - 1, coefficients)
        np.testing.assert_allclose(phi[:, k].numpy(), expected, rtol=0, atol=1e-12)
    points, weights = _composite_gauss(1, points=20)  # degree 16 integrands: 20 points are exact
    values = basis(points)
    gram = torch.einsum("q,qi,qj->ij", weights, values, values)
    torch.testing.assert_close(gram, torch.eye(9, dtype=D), rtol=0, atol=1e-13)


def test_fourier_is_orthonormal_by_the_trapezoidal_rule():
    # The trapezoidal rule on N equispaced points of a period is exact for trigonometric polynomials of degree < N.
    basis = Fourier(7)
    u = torch.arange(64, dtype=D) / 64
    values = basis(u)
    torch.testing.assert_close(values.T @ values / 64, torch.eye(7, dtype=D), rtol=0, atol=1e-14)
    # order: 1, cos 2πu, sin 2πu, cos 4πu, sin 4πu, ...
    torch.testing.assert_close(values[:, 3], math.sqrt(2) * torch.cos(4 * math.pi * u), rtol=0, atol=1e-14)
    torch.testing.assert_close(values[:, 4], math.sqrt(2) * torch.sin(4 * math.pi * u), rtol=0, atol=1e-14)


def test_piecewise_constant_pieces_and_breakpoint_sides():
    n = 49
    basis = PiecewiseConstant(n)
    k = torch.arange(n + 1, dtype=D)
    u = k / n  # 1/49 * 49 is 0.9999999999999999: the breakpoint must still be recognised
    right, left = basis(u).argmax(-1), basis(u, side="left").argmax(-1)
    assert right.tolist() == list(range(n)) + [n - 1]  # u = 1 belongs to the last piece
    assert left.tolist() == [0] + list(range(n))  # u = 0 to the first
    inside = (k[:-1] + 0.5) / n
    assert basis(inside).argmax(-1).tolist() == list(range(n))
    assert torch.equal(basis(inside), basis(inside, side="left"))
    assert torch.equal(basis(u).sum(-1), torch.ones(n + 1, dtype=D))


def test_piecewise_linear_hats_interpolate_at_nodes_and_reproduce_linear_functions():
    basis = PiecewiseLinear(6)
    nodes = torch.arange(6, dtype=D) / 5
    torch.testing.assert_close(basis(nodes), torch.eye(6, dtype=D), rtol=0, atol=1e-15)
    u = torch.rand(200, dtype=D)
    f = lambda t: 3.0 - 2.0 * t  # noqa: E731
    torch.testing.assert_close(basis(u) @ f(nodes), f(u), rtol=0, atol=1e-14)
    torch.testing.assert_close(basis(u).sum(-1), torch.ones(200, dtype=D), rtol=0, atol=1e-15)


def test_gram_matrices_of_the_piecewise_bases_match_their_closed_forms():
    torch.testing.assert_close(
        gram_matrix(PiecewiseConstant(5), PiecewiseConstant(5)), torch.eye(5, dtype=D) / 5, rtol=0, atol=1e-16
    )
    n = 5
    h = 1 / (n - 1)
    expected = torch.diag(torch.full((n,), 2 * h / 3, dtype=D)) + torch.diag(torch.full((n - 1,), h / 6, dtype=D), 1)
    expected = expected + torch.diag(torch.full((n - 1,), h / 6, dtype=D), -1)
    expected[0, 0] = expected[-1, -1] = h / 3
    torch.testing.assert_close(gram_matrix(PiecewiseLinear(n), PiecewiseLinear(n)), expected, rtol=0, atol=1e-15)
    # ∫ hat_j · indicator of [i/3, (i+1)/3) with hats on a grid of step 1/4: mixed breakpoints.
    mixed = gram_matrix(PiecewiseLinear(5), PiecewiseConstant(3))
    points, weights = _composite_gauss(12, points=2)  # cells of 1/12 contain no breakpoint of either basis
    independent = torch.einsum("q,qi,qj->ij", weights, PiecewiseLinear(5)(points), PiecewiseConstant(3)(points))
    torch.testing.assert_close(mixed, independent, rtol=0, atol=1e-15)


def test_bases_follow_the_dtype_and_shape_of_u():
    for basis in (PiecewiseConstant(3), PiecewiseLinear(3), Legendre(3), Fourier(3)):
        u = torch.rand(2, 5, dtype=torch.float32)
        phi = basis(u)
        assert phi.shape == (2, 5, 3) and phi.dtype == torch.float32
        assert basis(torch.tensor(0.5)).shape == (3,)


# ---- projection --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, richer",
    [
        (Legendre(4), Legendre(9)),  # a polynomial of degree 3 among those of degree 8
        (PiecewiseConstant(3), PiecewiseConstant(6)),  # every piece split in two
        (PiecewiseLinear(4), PiecewiseLinear(10)),  # nodes 1/3 apart within nodes 1/9 apart
        (Legendre(2), PiecewiseLinear(5)),  # a line is piecewise linear
        (Legendre(1), Fourier(5)),  # constants
        (Fourier(3), Fourier(7)),
    ],
)
def test_projection_onto_a_richer_space_and_back_is_exact(source, richer):
    torch.manual_seed(0)
    coefficients = torch.randn(source.num_bases, 3, 2, dtype=D)
    there = project(coefficients, source, richer)
    assert there.shape == (richer.num_bases, 3, 2)
    u = torch.rand(300, dtype=D)
    # The same function, read in the richer basis, at random points.
    assert (expand(there, richer, u) - expand(coefficients, source, u)).abs().max() < 1e-10
    back = project(there, richer, source)
    assert (back - coefficients).abs().max() < 1e-10


def test_projection_onto_fewer_legendre_polynomials_truncates_and_pieces_average():
    torch.manual_seed(0)
    c = torch.randn(8, 4, dtype=D)
    torch.testing.assert_close(project(c, Legendre(8), Legendre(3)), c[:3], rtol=0, atol=1e-13)
    torch.testing.assert_close(
        project(c, PiecewiseConstant(8), PiecewiseConstant(4)), (c[0::2] + c[1::2]) / 2, rtol=0, atol=1e-14
    )


@pytest.mark.parametrize("target", [PiecewiseConstant(3), PiecewiseLinear(4), Legendre(4), Fourier(5)])
@pytest.mark.parametrize("source", [Legendre(8), PiecewiseLinear(7), Fourier(9)])
def test_projection_residual_is_orthogonal_to_the_target_space(source, target):
    torch.manual_seed(1)
    c = torch.randn(source.num_bases, 2, dtype=D)
    projected = project(c, source, target)
    points, weights = _composite_gauss(60 * 12, points=10)  # cells of 1/720 align with every breakpoint here
    residual = expand(c, source, points) - expand(projected, target, points)  # (Q, 2)
    inner = torch.einsum("q,qj,qk->jk", weights, target(points), residual)
    assert inner.abs().max() < 1e-12
    # and so it is the best: any other function of the target space is farther away
    other = projected + 1e-3 * torch.randn_like(projected)
    error = lambda coefficients: (
        weights[:, None]
        * (
            expand(c, source, points)  # noqa: E731
            - expand(coefficients, target, points)
        )
        ** 2
    ).sum()
    assert error(projected) < error(other)


def test_project_keeps_dtype_device_and_gradient():
    c = torch.randn(4, 3, dtype=torch.float32, requires_grad=True)
    out = project(c, PiecewiseLinear(4), Legendre(2))
    assert out.dtype == torch.float32 and out.shape == (2, 3)
    out.sum().backward()
    matrix = projection_matrix(PiecewiseLinear(4), Legendre(2))
    torch.testing.assert_close(c.grad, matrix.sum(0, keepdim=True).T.expand(4, 3).float(), rtol=1e-6, atol=1e-7)


# ---- point clouds ------------------------------------------------------------------------------------------


def test_fit_to_points_recovers_a_function_of_the_space_and_keeps_undetermined_pieces():
    torch.manual_seed(0)
    basis = PiecewiseLinear(4)
    truth = torch.randn(4, 2, dtype=D)
    u = torch.rand(40, dtype=D)
    fitted = fit_to_points(u, expand(truth, basis, u), basis)
    torch.testing.assert_close(fitted, truth, rtol=0, atol=1e-8)
    pieces = PiecewiseConstant(4)
    previous = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=D)
    points = torch.tensor([0.1, 0.2, 0.6], dtype=D)  # nothing in pieces 1 and 3
    fitted = fit_to_points(points, torch.tensor([[10.0], [20.0], [7.0]], dtype=D), pieces, previous)
    torch.testing.assert_close(fitted.flatten(), torch.tensor([15.0, 2.0, 7.0, 4.0], dtype=D), rtol=1e-8, atol=0)


# ---- layers ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["piecewise_constant", "legendre", "fourier"])
def test_basis_linear_with_one_constant_function_is_a_plain_linear_layer(name):
    torch.manual_seed(0)
    layer = BasisLinear(5, 3, name, num_bases=1)
    plain = nn.Linear(5, 3)
    with torch.no_grad():
        plain.weight.copy_(layer.weight[0])
        plain.bias.copy_(layer.bias[0])
    x = torch.randn(7, 5)
    expected = plain(x)
    for u in (0.0, 0.3, 1.0):
        assert torch.equal(layer(x, u), expected)
        assert torch.equal(layer(x, torch.tensor(u)), expected)
    assert torch.equal(layer(x, torch.rand(7)), expected)  # one depth per sample


@pytest.mark.parametrize("basis", [PiecewiseConstant(3), PiecewiseLinear(4), Legendre(3), Fourier(5)])
def test_basis_linear_is_the_expansion_of_its_weights(basis):
    torch.manual_seed(0)
    layer = BasisLinear(4, 3, basis).double()
    x = torch.randn(6, 4, dtype=D)
    u = torch.tensor([0.0, 0.2, 1 / 3, 0.5, 0.9, 1.0], dtype=D)
    phi = basis(u)
    expected = torch.stack(
        [sum(phi[b, i] * (layer.weight[i] @ x[b] + layer.bias[i]) for i in range(basis.num_bases)) for b in range(6)]
    )
    torch.testing.assert_close(layer(x, u), expected, rtol=0, atol=1e-13)
    for b in range(6):  # the scalar path gives each sample's row
        torch.testing.assert_close(layer(x[b : b + 1], u[b]), expected[b : b + 1], rtol=0, atol=1e-13)
    y = layer(x[:, None, :].expand(6, 2, 4), u)  # middle dimensions share their sample's depth
    torch.testing.assert_close(y, expected[:, None, :].expand(6, 2, 3), rtol=0, atol=1e-13)


def test_basis_conv1d_is_a_plain_convolution_at_each_depth():
    torch.manual_seed(0)
    one = BasisConv1d(3, 4, 5, "legendre", num_bases=1)
    plain = nn.Conv1d(3, 4, 5, padding="same")
    with torch.no_grad():
        plain.weight.copy_(one.weight[0])
        plain.bias.copy_(one.bias[0])
    x = torch.randn(2, 3, 11)
    assert torch.equal(one(x, 0.7), plain(x))
    layer = BasisConv1d(3, 4, 3, PiecewiseLinear(3)).double()
    x = x.double()
    u = 0.25  # halfway between the first two nodes
    weight, bias = (layer.weight[0] + layer.weight[1]) / 2, (layer.bias[0] + layer.bias[1]) / 2
    torch.testing.assert_close(layer(x, u), torch.nn.functional.conv1d(x, weight, bias, padding=1), rtol=0, atol=1e-14)


def test_project_module_refines_without_change_and_compresses_exactly_within_the_space():
    torch.manual_seed(0)
    layer = BasisLinear(4, 3, Legendre(3)).double()
    x, u = torch.randn(9, 4, dtype=D), torch.rand(9, dtype=D)
    refined = project_module(layer, 6)
    assert refined.basis == Legendre(6) and refined.weight.shape == (6, 3, 4) and layer.weight.shape == (3, 3, 4)
    torch.testing.assert_close(refined(x, u), layer(x, u), rtol=0, atol=1e-12)
    onto_hats = project_module(layer, PiecewiseLinear(9))  # quadratic in u: not representable by hats
    assert (onto_hats(x, u) - layer(x, u)).abs().max() > 1e-6
    back = project_module(refined, Legendre(3))
    torch.testing.assert_close(back.weight, layer.weight, rtol=0, atol=1e-12)
    assert isinstance(back.weight, nn.Parameter) and back.weight.requires_grad


def test_gradients_reach_every_coefficient():
    torch.manual_seed(0)
    for basis in (PiecewiseConstant(4), PiecewiseLinear(4), Legendre(4), Fourier(5)):
        layer = BasisLinear(3, 2, basis)
        u = torch.linspace(0, 1, 8)
        layer(torch.randn(8, 3), u).square().sum().backward()
        assert (layer.weight.grad.flatten(1).abs().sum(1) > 0).all(), basis
        assert (layer.bias.grad.abs().sum(1) > 0).all(), basis
        conv = BasisConv1d(3, 2, 3, basis)
        sum(conv(torch.randn(2, 3, 6), v).square().sum() for v in u.tolist()).backward()
        assert (conv.weight.grad.flatten(1).abs().sum(1) > 0).all(), basis


# ---- bad arguments -----------------------------------------------------------------------------------------


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="basis must be one of"):
        make_basis("chebyshev", 3)
    with pytest.raises(ValueError, match="num_bases is required"):
        make_basis("legendre")
    with pytest.raises(ValueError, match="contradicts"):
        make_basis(Legendre(3), 4)
    with pytest.raises(TypeError, match="basis must be"):
        make_basis(3, 3)
    with pytest.raises(ValueError, match="num_bases must be an integer >= 1"):
        Legendre(0)
    with pytest.raises(ValueError, match=">= 2"):
        PiecewiseLinear(1)
    with pytest.raises(ValueError, match="odd"):
        Fourier(4)
    with pytest.raises(ValueError, match=r"u must lie in \[0, 1\]"):
        Legendre(3)(torch.tensor([0.5, 1.1]))
    with pytest.raises(ValueError, match=r"u must lie in \[0, 1\]"):
        Legendre(3)(torch.tensor(float("nan")))
    with pytest.raises(TypeError, match="floating point"):
        Legendre(3)(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="side"):
        PiecewiseConstant(3)(torch.tensor(0.5), side="middle")
    with pytest.raises(ValueError, match="along dim 0"):
        project(torch.randn(4, 2), Legendre(3), Legendre(5))
    with pytest.raises(TypeError, match="target must be a Basis"):
        project(torch.randn(3, 2), Legendre(3), "legendre")
    layer = BasisLinear(4, 3, "legendre", num_bases=2)
    with pytest.raises(ValueError, match=r"x must be a tensor \(\.\.\., 4\)"):
        layer(torch.randn(5, 3), 0.5)
    with pytest.raises(ValueError, match="one depth per sample"):
        layer(torch.randn(5, 4), torch.rand(4))
    with pytest.raises(ValueError, match="u must lie"):
        layer(torch.randn(5, 4), 1.5)
    with pytest.raises(ValueError, match="scalar"):
        BasisConv1d(2, 2, 3, "legendre", num_bases=2)(torch.randn(3, 2, 5), torch.rand(3))
    with pytest.raises(ValueError, match="odd kernel_size"):
        BasisConv1d(2, 2, 4, "legendre", num_bases=2)
    with pytest.raises(ValueError, match="no basis-expanded parts"):
        project_module(nn.Linear(2, 2), 3)
    with pytest.raises(TypeError, match="target must be a Basis or a number"):
        project_module(layer, "legendre")
    with pytest.raises(ValueError, match="ridge"):
        fit_to_points(torch.rand(3), torch.rand(3), Legendre(2), ridge=0.0)
