"""Time-dependent dynamics (`Dynamics.needs_time`) and CT-FWP slow nets whose weights are basis expansions in time
(paper 004; `FastWeightField(basis=...)`).

- Every solver path hands the dynamics the right s: dh/ds = s has the closed form (s² − s0²)/2, which rk4 and
  dopri5 integrate exactly; fixed-step (split into control_features and not), adaptive, continuous adjoint, and
  each sample frozen at its own end.
- A field with one constant basis function is the plain field with the same weights, exactly; with n pieces, on
  piece i it is the plain field with coefficient i.
- create_model takes basis_time_range from the training input, and beyond it the end weights hold (with a
  warning); the exact solver and half-given options are refused; gradients reach every coefficient; project_module
  compresses the model's slow net.
"""

import fwp_reference as ref
import pytest
import torch
from test_solvers import FieldDynamics, make_data
from torch import nn

from neuralde_seq.basis import BasisLinear, BasisRangeWarning, project_module
from neuralde_seq.controls import build_control
from neuralde_seq.fields import FastWeightField
from neuralde_seq.models import create_model, model_inputs
from neuralde_seq.solvers import RK4, Adjoint, Dopri5, Euler, Exact, SolverOptions, solve

DTYPE = torch.float64


class _TimeIntegral(nn.Module):
    """dh/ds = s (per sample), read through control_features when ``split``."""

    needs_value = True
    needs_derivative = False
    needs_time = True

    def __init__(self, split: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones((), dtype=DTYPE))  # gives the adjoint something to differentiate
        if split:
            self.control_features = lambda x, dx, s: (s,)
            self.rate_from_features = lambda h, s: self.weight * s.unsqueeze(-1).expand_as(h)

    def forward(self, h, x, dx, s):
        return self.weight * s.unsqueeze(-1).expand_as(h)


@pytest.mark.parametrize(
    "options",
    [
        SolverOptions(RK4()),
        SolverOptions(RK4(step_size=0.1)),
        SolverOptions(RK4(), gradient=Adjoint()),
        SolverOptions(Dopri5(rtol=1e-10, atol=1e-10)),
        SolverOptions(Euler(step_size=1e-3)),
    ],
    ids=["rk4", "rk4-substeps", "rk4-adjoint", "dopri5", "euler"],
)
@pytest.mark.parametrize("split", [True, False])
def test_every_solver_passes_s(options, split):
    """h(end) = (end² − s0²)/2 for dh/ds = s, each sample stopping at its own end (lengths 9, 6, 4)."""
    times, values, lengths = make_data(lengths=(9, 6, 4), seed=1)
    control = build_control(times, values, lengths, interpolation="hermite_cubic")
    h0 = torch.zeros(3, 2, dtype=DTYPE)
    got = solve(_TimeIntegral(split), control, h0, options)
    s0, end = control.knots[0], control.end
    expected = ((end**2 - s0**2) / 2).unsqueeze(-1).expand(3, 2)
    tolerance = 2e-3 if isinstance(options.method, Euler) else 1e-9
    assert torch.allclose(got, expected, rtol=0, atol=tolerance * float(expected.max()))


def _fields(basis, num_bases, time_range, rule="delta", form="ode", channels=3):
    torch.manual_seed(0)
    timed = FastWeightField(
        channels, 8, 2, rule, form=form, basis=basis, num_bases=num_bases, basis_time_range=time_range
    ).to(DTYPE)
    ref.randomize_(timed, torch.Generator().manual_seed(1), scale=0.6)
    plain = FastWeightField(channels, 8, 2, rule, form=form).to(DTYPE)
    plain.load_state_dict({k: v for k, v in timed.state_dict().items() if not k.startswith("slow.")}, strict=False)
    return timed, plain


def _set_plain_slow(plain, timed, piece):
    with torch.no_grad():
        plain.slow.weight.copy_(timed.slow.weight[piece])
        plain.slow.bias.copy_(timed.slow.bias[piece])


@pytest.mark.parametrize("form", ["ode", "cde"])
@pytest.mark.parametrize("basis", ["legendre", "piecewise_constant", "fourier"])
def test_one_constant_basis_function_is_the_plain_field(basis, form):
    """With n = 1 the timed field's solve (rk4, s passed) equals the plain field's with weight c_0, exactly."""
    times, values, lengths = make_data(lengths=(9, 6, 4), seed=2)
    control = build_control(times, values, lengths, interpolation="hermite_cubic")
    timed, plain = _fields(basis, 1, (float(times.min()), float(times.max())), form=form, channels=3)
    _set_plain_slow(plain, timed, 0)
    W0 = 0.1 * torch.randn(3, 2, 4, 4, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    options = SolverOptions(RK4(step_size=0.25))
    got = solve(timed, control, W0, options, at_knots=True)
    expected = solve(FieldDynamics(plain), control, W0, options, at_knots=True)
    assert torch.allclose(got, expected, rtol=1e-13, atol=1e-13)


def test_piecewise_constant_basis_reads_the_coefficient_of_its_piece():
    """On piece i of n = 4 pieces of [0, 8], the timed field's rate is the plain field's with coefficient i
    (1e-14)."""
    timed, plain = _fields("piecewise_constant", 4, (0.0, 8.0))
    g = torch.Generator().manual_seed(4)
    x = torch.randn(5, 3, generator=g, dtype=DTYPE)
    W = torch.randn(5, 2, 4, 4, generator=g, dtype=DTYPE)
    for piece in range(4):
        s = torch.full((5,), 2.0 * piece + 0.7, dtype=DTYPE)
        _set_plain_slow(plain, timed, piece)
        # equal up to the summation order of one matmul over all pieces
        assert torch.allclose(timed(W, x, None, s), plain(W, x, None), rtol=1e-14, atol=1e-14)
    # and the pieces differ (the comparison has power)
    s0, s1 = torch.full((5,), 0.5, dtype=DTYPE), torch.full((5,), 7.5, dtype=DTYPE)
    assert (timed(W, x, None, s0) - timed(W, x, None, s1)).abs().max() > 1e-2


def test_create_model_takes_the_time_range_from_the_input_and_gradients_reach_every_coefficient():
    times, values, lengths = make_data(lengths=(12, 9, 5), seed=5, offset=2.0)
    control = model_inputs("delta-cde", times.float(), values.float(), lengths)
    model = create_model("delta-cde", control, 3, basis="legendre", num_bases=4, d_model=16, n_heads=2)
    field = model.network.layers[0].field
    assert field.basis_time_range == (float(control.knots[0]), float(control.knots[11]))
    assert abs(field.basis_time_range[1] - float(times[0, 11])) < 1e-5
    assert isinstance(field.slow, BasisLinear) and field.slow.weight.shape[0] == 4
    logits = model(control)
    logits.square().sum().backward()
    grad = field.slow.weight.grad
    assert all(float(grad[i].abs().max()) > 0 for i in range(4))
    # project_module compresses the slow net to 2 functions: the model still runs, its slow weights are the L2
    # projection (a Legendre truncation: the first two coefficients).
    compressed = project_module(model, 2)
    small = compressed.network.layers[0].field.slow
    assert small.weight.shape[0] == 2
    assert torch.allclose(small.weight, field.slow.weight[:2], rtol=1e-6, atol=1e-7)
    assert compressed(control).shape == (3, 3)
    # without a basis no time range is derived
    plain = create_model("delta-cde", control, 3, d_model=16, n_heads=2)
    assert plain.network.layers[0].field.basis_time_range is None


def test_refusals():
    times, values, lengths = make_data(lengths=(6, 4), seed=6)
    control = build_control(times, values, lengths, interpolation="hermite_cubic")
    field, _ = _fields("legendre", 3, (float(times.min()), float(times.min()) + 2.0), channels=3)
    # beyond the range: the weights at its end hold, with a warning
    with pytest.warns(BasisRangeWarning, match="beyond the basis_time_range") as caught:
        beyond = solve(field, control, torch.zeros(2, 2, 4, 4, dtype=DTYPE), SolverOptions(RK4()))
    # said at the user's line (this file), not inside the solver: Python's once-per-location filter then shows it
    # once per run instead of once per step
    assert {w.filename for w in caught if w.category is BasisRangeWarning} == {__file__}
    start, end = field.basis_time_range
    s = torch.tensor([start - 1.0, start, end, end + 5.0], dtype=DTYPE)
    with pytest.warns(BasisRangeWarning):
        assert field.basis_position(s).tolist() == [0.0, 0.0, 1.0, 1.0]
    assert torch.isfinite(beyond).all()
    with pytest.raises(ValueError, match="pass s"):
        field(torch.zeros(2, 2, 4, 4, dtype=DTYPE), torch.zeros(2, 3, dtype=DTYPE), None)
    with pytest.raises(ValueError, match="basis_time_range"):
        FastWeightField(3, 8, 2, basis="legendre", num_bases=3)
    with pytest.raises(ValueError, match="is an option of a basis: give basis= too"):
        FastWeightField(3, 8, 2, num_bases=3)
    with pytest.raises(ValueError, match="t_end > t_start"):
        FastWeightField(3, 8, 2, basis="legendre", num_bases=3, basis_time_range=(1.0, 1.0))
    logsig = build_control(times, values, lengths, interpolation="logsignature", depth=2, step=1)
    with pytest.raises(ValueError, match="changes with s"):
        create_model("delta-rde", logsig, 2, basis="legendre", num_bases=2, solver=SolverOptions(Exact()))


def _tiny_config(**changes):
    cfg = {
        "name": "tiny-bases",
        "task": "japanese-vowels",
        "task_options": {"drop_rate": 0.3},
        "seeds": [0],
        "training": {"epochs": 1, "lr": 1e-2, "batch_size": 64, "eval_batch_size": 128},
        "models": [
            {
                "label": "delta-cde legendre",
                "model": "delta-cde",
                "options": {"d_model": 8, "n_heads": 2, "basis": "legendre", "num_bases": 3},
            }
        ],
        "evaluate": [
            {"label": "same bases", "model": {"num_bases": 3}},
            {"label": "one basis", "model": {"num_bases": 1}},
            {"label": "one basis, drop 50%", "drop_rate": 0.5, "model": {"num_bases": 1}},
        ],
    }
    cfg.update(changes)
    return cfg


def test_runner_model_change_variants(tmp_path):
    """An evaluate variant with ``model: {num_bases: n}`` evaluates the trained model projected onto n functions:
    onto its own basis it scores the test set as the model does; onto one function it is another model; a row
    whose model has no basis is refused before training, naming the variant."""
    import json

    from neuralde_seq import run_benchmark

    results = run_benchmark(_tiny_config(), out_dir=tmp_path, max_steps=2, progress=False)
    assert results["config"]["evaluate"][1]["model"] == {"num_bases": 1}
    (run,) = (tmp_path / "runs" / "delta-cde_legendre").glob("seed0-*/result.json")
    metrics = json.loads(run.read_text())["metrics"]
    assert metrics["same bases"]["num_samples"] == metrics["one basis"]["num_samples"] == 370
    assert metrics["same bases"]["loss"] == pytest.approx(metrics["test"]["loss"], rel=1e-5)
    assert abs(metrics["one basis"]["loss"] - metrics["test"]["loss"]) > 1e-4
    assert metrics["one basis, drop 50%"]["loss"] != metrics["one basis"]["loss"]
    plain = _tiny_config(models=[{"label": "plain", "model": "delta-cde", "options": {"d_model": 8, "n_heads": 2}}])
    with pytest.raises(ValueError, match="test variant 'same bases'.*no basis-expanded parts"):
        run_benchmark(plain, out_dir=tmp_path / "plain", max_steps=2, progress=False)


@pytest.mark.parametrize(
    "variant, message",
    [
        ({"model": {"num_bases": 0}}, r"evaluate\[0\].model.num_bases"),
        ({"model": {"bases": 2}}, r"unknown key\(s\) 'bases' in evaluate\[0\].model"),
        ({"model": {}}, r"evaluate\[0\].model needs num_bases and/or depth_steps"),
        ({"model": 3}, r"evaluate\[0\].model"),
    ],
)
def test_model_change_variants_are_checked(variant, message):
    from neuralde_seq.training.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=message):
        parse_config(_tiny_config(evaluate=[variant]))
