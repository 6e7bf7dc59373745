"""Solver choices as objects (issue 26 step 1): each method and gradient method checks its own options, every
spelling of the same options solves the same, `Exact` refuses with the reason, `Auto` resolves as before, one
parser reads the edges' spellings, and a run recorded before still reads as the same settings."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralde_seq.controls import build_control
from neuralde_seq.fields import FastWeightField
from neuralde_seq.input_checks import UnknownOptionError
from neuralde_seq.models import create_model, model_defaults, model_inputs
from neuralde_seq.solver_choices import Adjoint, Auto, Backprop, Checkpoint, Dopri5, Euler, Exact, Midpoint, RK4
from neuralde_seq.solvers import SolverOptions, parse_solver, resolve_method, solve
from neuralde_seq.training.config import ConfigError, apply_overrides, parse_config
from neuralde_seq.training.run_folders import _changed_keys

DTYPE = torch.float64

# Written by the code before this change (git HEAD 157c4ea): repr(SolverOptions()) and the registry default of
# oja-cde, as a recorded run holds them.
HEAD_DEFAULT_REPR = ("SolverOptions(method='auto', step_size=None, rtol=1e-07, atol=1e-09, gradient=None, adjoint=None, "
                     "checkpoint_every=None, adjoint_check=100, chunk_size=None, compile=False, max_steps=1000000, "
                     "exact_scan='auto', exact_block_size=None, affine_steps=True, scan='auto')")
HEAD_OJA_CDE_REPR = HEAD_DEFAULT_REPR.replace("method='auto', step_size=None", "method='rk4', step_size=0.5")
# What "auto" resolved to on each fast weight model's default input, by HEAD's resolve_method (the CLI's tiny
# input: times 0..8, one channel sin(t)).
HEAD_AUTO = {"hebb-ode": "rk4", "hebb-cde": "rk4", "hebb-rde": "exact", "oja-ode": "rk4", "oja-cde": "rk4",
             "oja-rde": "exact", "delta-ode": "rk4", "delta-cde": "rk4", "delta-rde": "exact", "delta-post-ode": "rk4",
             "delta-post-cde": "rk4", "delta-post-rde": "exact"}


def _inputs(name: str, points: int = 12, batch: int = 3):
    generator = torch.Generator().manual_seed(0)
    times = torch.linspace(0, points - 1, points, dtype=DTYPE).expand(batch, points)
    values = torch.randn(batch, points, 2, generator=generator, dtype=DTYPE).cumsum(1) * 0.3
    return model_inputs(name, times, values)


# ------------------------------------------------------------------------------ each object checks itself
@pytest.mark.parametrize("make, message", [
    (lambda: RK4(step_size=0), "RK4.step_size must be a positive number or None, got 0"),
    (lambda: RK4(step_size=True), "RK4.step_size must be a positive number or None, got True"),
    (lambda: Euler(step_size="small"), "Euler.step_size must be a positive number or None, got 'small'"),
    (lambda: RK4(max_steps=0), r"RK4.max_steps must be a positive integer or None \(no limit\), got 0"),
    (lambda: RK4(affine_steps=1), "RK4.affine_steps must be True or False, got 1"),
    (lambda: RK4(scan="fast"), "RK4.scan must be one of"),
    (lambda: Midpoint(scan="parallel", affine_steps=False),
     "Midpoint.scan='parallel' composes the affine step maps of Midpoint.affine_steps=True"),
    (lambda: Dopri5(rtol=-1e-3), "Dopri5.rtol must be a positive number, got -0.001"),
    (lambda: Dopri5(atol="1e-9"), "Dopri5.atol must be a positive number, got '1e-9'"),
    (lambda: Dopri5(max_steps=2.5), "Dopri5.max_steps must be a positive integer"),
    (lambda: Exact(chunk_size=0), "Exact.chunk_size must be a positive integer or None, got 0"),
    (lambda: Exact(compile="yes"), "Exact.compile must be True or False, got 'yes'"),
    (lambda: Exact(recurrence="wy"), "Exact.recurrence must be 'auto', 'sequential' or 'chunked', got 'wy'"),
    (lambda: Exact(block_size=8, recurrence="sequential"),
     "Exact.block_size is the block length of Exact.recurrence='chunked'"),
    (lambda: Checkpoint(every=0), "Checkpoint.every must be a positive integer or None, got 0"),
    (lambda: Adjoint(check_every=-1), r"Adjoint.check_every must be an integer >= 0 \(0: off\), got -1"),
    (lambda: Adjoint(check_every=None), "Adjoint.check_every must be an integer >= 0"),
    (lambda: Auto(exact=RK4()), r"Auto.exact must be Exact\(...\)"),
    (lambda: Auto(exact=Exact(scan="parallel")), "exact.scan='parallel' and fallback.scan='auto' differ"),
    (lambda: SolverOptions(method=RK4(step_size=0.1), step_size=0.2), r"step_size=0.2 is given twice.*RK4"),
    (lambda: SolverOptions(gradient=Checkpoint(every=4), checkpoint_every=5), "checkpoint_every=5 is given twice"),
    (lambda: SolverOptions(gradient=Backprop(), adjoint=True), "contradicts"),
    (lambda: SolverOptions(method=Dopri5(), scan="parallel"), "scan is an option of the fixed-step methods"),
])
def test_each_choice_refuses_its_bad_options_naming_the_field(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_flat_spelling_names_the_solver_options_fields():
    """The same checks, reached through SolverOptions' own fields, name those fields (not the objects')."""
    for fields, name in [({"checkpoint_every": 0}, "checkpoint_every must"), ({"adjoint_check": -1}, "adjoint_check must"),
                         ({"exact_scan": "sequential", "exact_block_size": 8}, "exact_block_size is the block length"),
                         ({"step_size": "small"}, "step_size must"), ({"method": "rk4", "rtol": 0}, "rtol must")]:
        with pytest.raises(ValueError, match=name) as info:
            SolverOptions(**fields)
        assert "Checkpoint." not in str(info.value) and "Exact." not in str(info.value)


def test_objects_normalise_and_round_trip_through_solver_options():
    assert type(Exact(chunk_size=np.int64(8)).chunk_size) is int
    options = SolverOptions(method=Auto(exact=Exact(chunk_size=8, recurrence="chunked", block_size=16),
                                        fallback=RK4(step_size=0.25)), gradient=Adjoint(check_every=3))
    assert options == SolverOptions(chunk_size=8, exact_scan="chunked", exact_block_size=16, step_size=0.25,
                                    gradient="adjoint", adjoint_check=3)
    assert options.method_choice == Auto(exact=Exact(chunk_size=8, recurrence="chunked", block_size=16),
                                         fallback=RK4(step_size=0.25))
    assert options.gradient_choice == Adjoint(check_every=3)
    assert SolverOptions(adjoint=False).gradient_choice == Backprop()
    # a field set after construction is what the objects read
    options.step_size = 0.5
    assert options.method_choice.fallback.step_size == 0.5


# ------------------------------------------------------------------------------ spellings solve the same
SPELLINGS = {
    "rk4": ["rk4", {"method": "rk4"}, RK4(), SolverOptions(method="rk4"), SolverOptions(method=RK4())],
    "rk4, step 0.5": [{"method": "rk4", "step_size": 0.5}, RK4(step_size=0.5), SolverOptions("rk4", step_size=0.5),
                      SolverOptions(method=RK4(0.5), gradient=Checkpoint())],
    "dopri5": [{"method": "dopri5", "rtol": 1e-5, "atol": 1e-7}, Dopri5(rtol=1e-5, atol=1e-7),
               SolverOptions(method=Dopri5(1e-5, 1e-7), gradient=Backprop())],
}


def test_string_dict_and_object_spellings_give_equal_solves():
    """float64, outputs and gradients equal to 0 across the spellings of one setting; the settings themselves
    differ (so a spelling whose options were dropped would be caught)."""
    inputs = _inputs("delta-cde")
    results = {}
    for setting, spellings in SPELLINGS.items():
        outs = []
        for spelling in spellings:
            torch.manual_seed(0)
            model = create_model("delta-cde", inputs, 2, solver=spelling, d_model=8, n_heads=2).to(DTYPE)
            out = model(inputs)
            grad = torch.autograd.grad(out.square().sum(), list(model.parameters()))
            outs.append((out.detach(), torch.cat([g.flatten() for g in grad])))
        for out, grad in outs[1:]:
            torch.testing.assert_close(out, outs[0][0], rtol=0, atol=0)
            torch.testing.assert_close(grad, outs[0][1], rtol=0, atol=0)
        results[setting] = outs[0][0]
    assert (results["rk4"] - results["rk4, step 0.5"]).abs().max() > 1e-9
    assert (results["rk4"] - results["dopri5"]).abs().max() > 1e-9


# ------------------------------------------------------------------------------ what a method applies to
def test_exact_refuses_a_field_without_a_closed_form_with_the_reason():
    inputs = _inputs("ncde")
    ncde = create_model("ncde", inputs, 2).to(DTYPE)
    reason = Exact().refusal(ncde.field, inputs)
    assert reason is not None and "needs a FastWeightField" in reason
    # a field reading x of a cubic control: refused for the control, with the fix
    generator = torch.Generator().manual_seed(1)
    times = torch.linspace(0, 5, 6, dtype=DTYPE).expand(2, 6)
    cubic = build_control(times, torch.randn(2, 6, 2, generator=generator, dtype=DTYPE), interpolation="natural_cubic")
    field = FastWeightField(cubic.channels, 8, 2, "delta", form="cde").to(DTYPE)
    reason = Exact().refusal(field, cubic)
    assert "not piecewise constant" in reason and not Exact().applies(field, cubic)
    assert Exact().refusal(field) is None  # the field alone has a closed form
    W0 = torch.zeros(2, 2, 4, 4, dtype=DTYPE)
    with pytest.raises(ValueError, match="not piecewise constant"):
        solve(field, cubic, W0, SolverOptions(method=Exact()))
    # the same field on log-signature windows: the closed form applies, and Auto takes it
    logsig = build_control(times, torch.randn(2, 6, 2, generator=generator, dtype=DTYPE), interpolation="logsignature",
                           depth=2, step=2)
    rde = FastWeightField(logsig.channels, 8, 2, "delta", form="rde").to(DTYPE)
    assert Exact().applies(rde, logsig)
    assert Auto().resolve(rde, logsig) == Exact() and Auto().resolve(field, cubic) == RK4()
    with pytest.raises(ValueError, match="num_layers > 1"):
        create_model("delta-rde", _inputs("delta-rde"), 2, num_layers=2, solver=Exact())


def test_auto_resolves_as_before_on_the_registry_models():
    """HEAD's resolve_method on each fast weight model's default input (HEAD_AUTO), and rk4 for the other models'
    dynamics."""
    got = {}
    for name in HEAD_AUTO:
        times = torch.arange(9.0).unsqueeze(0)
        inputs = model_inputs(name, times, torch.sin(times).unsqueeze(-1))
        got[name] = create_model(name, inputs, 2).resolve_method(inputs)
    assert got == HEAD_AUTO
    inputs = _inputs("ncde")
    ncde = create_model("ncde", inputs, 2)
    dynamics = ncde.field
    assert resolve_method(None, dynamics, inputs) == "rk4"


# ------------------------------------------------------------------------------ one parser at the edges
def test_one_parser_reads_create_model_the_config_and_the_estimator():
    expected = parse_solver("dopri5")
    assert expected == SolverOptions(method="dopri5") == parse_solver({"method": "dopri5"})
    assert parse_solver(Dopri5()) == expected and parse_solver(None) is None and parse_solver(expected) is expected
    inputs = _inputs("delta-cde")
    assert create_model("delta-cde", inputs, 2, solver="dopri5").network.solver == expected
    # the config: YAML's mapping, and the CLI's --solver (an override of models.i.solver.method)
    cfg = {"name": "tiny", "task": "japanese-vowels", "seeds": [0], "training": {"epochs": 1, "lr": 1e-2, "batch_size": 8},
           "models": [{"label": "d", "model": "delta-cde", "solver": {"method": "dopri5"}},
                      {"label": "e", "model": "delta-cde"}]}
    parsed = parse_config(apply_overrides(cfg, ["models.1.solver.method=dopri5"]))
    assert [row.solver for row in parsed.rows] == [expected, expected]
    with pytest.raises(ConfigError, match="method must be one of"):
        parse_config(apply_overrides(cfg, ["models.1.solver.method=dopri"]))
    # the estimator: read before any work, the same options; an unknown field named
    from neuralde_seq.sklearn import SequenceClassifier

    settings = SequenceClassifier("delta-cde", model_options={"solver": "dopri5"})._checked_settings()
    assert settings["model_options"]["solver"] == expected
    with pytest.raises(UnknownOptionError, match="did you mean 'step_size'"):
        SequenceClassifier("delta-cde", model_options={"solver": {"stepsize": 0.1}})._checked_settings()
    with pytest.raises(TypeError, match="solver must be SolverOptions"):
        parse_solver(4)


# ------------------------------------------------------------------------------ recorded runs
def test_a_run_recorded_before_reads_as_the_same_settings():
    now = {"solver": repr(model_defaults("delta-rde")["solver"])}
    assert now["solver"] == HEAD_DEFAULT_REPR
    assert _changed_keys({"solver": HEAD_DEFAULT_REPR}, now) == []
    assert _changed_keys({"solver": HEAD_OJA_CDE_REPR}, {"solver": repr(model_defaults("oja-cde")["solver"])}) == []
    assert _changed_keys({"solver": HEAD_OJA_CDE_REPR}, now) == ["solver"]
    # the new spelling of the defaults is the same settings too
    assert repr(SolverOptions(method=Auto(), gradient=None)) == HEAD_DEFAULT_REPR
    assert repr(SolverOptions(method=RK4(step_size=0.5))) == HEAD_OJA_CDE_REPR
