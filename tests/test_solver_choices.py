"""Solver choices as objects all the way down (issue 37): `SolverOptions` holds a method object and a gradient
object, each checking its own options under one name; every constructor taking ``solver=`` takes them; one parser
reads the edges' spellings (names, flat mappings, the stored ``{"type": ...}`` form) into equal solves; the
kernels read the method object's fields, never its name; `Exact` refuses with the reason and `Auto` resolves as
before."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch
from device_checks import build_registry_model, registry_batch, training_loss

import neuralde_seq
from neuralde_seq.controls import build_control
from neuralde_seq.fields import FastWeightField
from neuralde_seq.input_checks import UnknownOptionError
from neuralde_seq.models import MODEL_NAMES, FastWeightClassifier, create_model, model_entry, model_inputs
from neuralde_seq.solvers import (
    GRADIENTS,
    METHODS,
    RK4,
    Adjoint,
    Auto,
    Backprop,
    Checkpoint,
    Dopri5,
    Euler,
    Exact,
    Method,
    Midpoint,
    SolverOptions,
    parse_solver,
    resolve_method,
    solve,
)
from neuralde_seq.training.config import ConfigError, apply_overrides, parse_config

DTYPE = torch.float64
ROOT = Path(__file__).resolve().parents[1]

# What "auto" resolved to on each fast weight model's default input, by resolve_method before this change (the
# CLI's tiny input: times 0..8, one channel sin(t)).
BEFORE_AUTO = {
    "hebb-ode": "rk4",
    "hebb-cde": "rk4",
    "hebb-rde": "exact",
    "oja-ode": "rk4",
    "oja-cde": "rk4",
    "oja-rde": "exact",
    "delta-ode": "rk4",
    "delta-cde": "rk4",
    "delta-rde": "exact",
    "delta-post-ode": "rk4",
    "delta-post-cde": "rk4",
    "delta-post-rde": "exact",
}


def _inputs(name: str, points: int = 12, batch: int = 3):
    generator = torch.Generator().manual_seed(0)
    times = torch.linspace(0, points - 1, points, dtype=DTYPE).expand(batch, points)
    values = torch.randn(batch, points, 2, generator=generator, dtype=DTYPE).cumsum(1) * 0.3
    return model_inputs(name, times, values)


# ------------------------------------------------------------------------------ each object checks itself
@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: RK4(step_size=0), "RK4.step_size must be a positive number or None, got 0"),
        (lambda: RK4(step_size=True), "RK4.step_size must be a positive number or None, got True"),
        (lambda: Euler(step_size="small"), "Euler.step_size must be a positive number or None, got 'small'"),
        (lambda: RK4(max_steps=0), r"RK4.max_steps must be a positive integer or None \(no limit\), got 0"),
        (lambda: RK4(affine_steps=1), "RK4.affine_steps must be True or False, got 1"),
        (lambda: RK4(scan="fast"), "RK4.scan must be one of"),
        (
            lambda: Midpoint(scan="parallel", affine_steps=False),
            "Midpoint.scan='parallel' composes the affine step maps of Midpoint.affine_steps=True",
        ),
        (lambda: Dopri5(rtol=-1e-3), "Dopri5.rtol must be a positive number, got -0.001"),
        (lambda: Dopri5(atol="1e-9"), "Dopri5.atol must be a positive number, got '1e-9'"),
        (lambda: Dopri5(max_steps=2.5), "Dopri5.max_steps must be a positive integer"),
        (lambda: Exact(chunk_size=0), "Exact.chunk_size must be a positive integer or None, got 0"),
        (lambda: Exact(compile="yes"), "Exact.compile must be True or False, got 'yes'"),
        (lambda: Exact(recurrence="wy"), "Exact.recurrence must be 'auto', 'sequential' or 'chunked', got 'wy'"),
        (
            lambda: Exact(block_size=8, recurrence="sequential"),
            "Exact.block_size is the block length of Exact.recurrence='chunked'",
        ),
        (lambda: Checkpoint(every=0), "Checkpoint.every must be a positive integer or None, got 0"),
        (lambda: Adjoint(check_every=-1), r"Adjoint.check_every must be an integer >= 0 \(0: off\), got -1"),
        (lambda: Adjoint(check_every=None), "Adjoint.check_every must be an integer >= 0"),
        (lambda: Auto(exact=RK4()), r"Auto.exact must be Exact\(...\)"),
        (lambda: Auto(fallback=Exact()), "Auto.fallback must be a fixed-step or adaptive method"),
    ],
)
def test_each_choice_refuses_its_bad_options_naming_the_field(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_solver_options_hold_objects_only_and_name_the_parser_for_strings():
    for given, field in (
        ({"method": "rk4"}, "method"),
        ({"gradient": "adjoint"}, "gradient"),
        ({"method": {"type": "RK4"}}, "method"),
    ):
        with pytest.raises(TypeError, match=rf"SolverOptions\.{field} must be a .* object .*parse_solver"):
            SolverOptions(**given)
    with pytest.raises(TypeError, match="unexpected keyword argument 'step_size'"):
        SolverOptions(step_size=0.5)  # an option lives on its method: RK4(step_size=0.5)
    assert type(Exact(chunk_size=np.int64(8)).chunk_size) is int  # numpy integers normalised
    with pytest.raises(dataclasses.FrozenInstanceError):
        SolverOptions().method = RK4()  # replaced with dataclasses.replace, checked again


# ------------------------------------------------------------------------------ spellings solve the same
SPELLINGS = {
    "rk4": [
        "rk4",
        "RK4",
        {"method": "rk4"},
        RK4(),
        SolverOptions(RK4()),
        {"method": {"type": "RK4"}},
        SolverOptions(RK4()).to_dict(),
    ],
    "rk4, step 0.5": [
        {"method": "rk4", "step_size": 0.5},
        RK4(step_size=0.5),
        SolverOptions(RK4(0.5), Checkpoint()),
        {"method": {"type": "RK4", "step_size": 0.5}, "gradient": "checkpoint"},
    ],
    "dopri5": [
        {"method": "dopri5", "rtol": 1e-5, "atol": 1e-7},
        Dopri5(rtol=1e-5, atol=1e-7),
        SolverOptions(Dopri5(1e-5, 1e-7), gradient=Backprop()),
        {"method": "dopri5", "rtol": 1e-5, "atol": 1e-7, "gradient": {"type": "Backprop"}},
    ],
}


def test_string_dict_stored_and_object_spellings_give_equal_solves():
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


# ------------------------------------------------------------------------------ stored form
ROUND_TRIPS = [
    SolverOptions(),
    SolverOptions(RK4(step_size=0.5, max_steps=None), Adjoint(check_every=3)),
    SolverOptions(
        Auto(
            exact=Exact(chunk_size=8, recurrence="chunked", block_size=16, scan="parallel"), fallback=Dopri5(rtol=1e-5)
        ),
        Checkpoint(every=7),
    ),
    SolverOptions(Exact(compile=True), Backprop()),
    *[SolverOptions(cls()) for cls in METHODS.values()],
    *[SolverOptions(gradient=cls()) for cls in GRADIENTS.values()],
]


@pytest.mark.parametrize("options", ROUND_TRIPS, ids=repr)
def test_to_dict_and_from_dict_round_trip_through_json(options):
    stored = options.to_dict()
    assert stored["method"]["type"] == type(options.method).__name__
    assert stored["gradient"] == {"type": type(options.gradient).__name__, **dataclasses.asdict(options.gradient)}
    again = SolverOptions.from_dict(json.loads(json.dumps(stored)))
    assert again == options and repr(again) == repr(options)
    assert type(again.method) is type(options.method) and type(again.gradient) is type(options.gradient)
    assert again is not options and again.to_dict() == stored


def test_the_stored_form_nests_autos_parts_and_refuses_what_it_does_not_know():
    stored = SolverOptions(Auto(exact=Exact(chunk_size=4), fallback=RK4(step_size=0.25))).to_dict()
    assert stored["method"] == {
        "type": "Auto",
        "exact": {
            "type": "Exact",
            "chunk_size": 4,
            "compile": False,
            "recurrence": "auto",
            "block_size": None,
            "scan": "auto",
        },
        "fallback": {
            "type": "RK4",
            "step_size": 0.25,
            "affine_steps": True,
            "scan": "auto",
            "max_steps": 1_000_000,
            "compile": "auto",
        },
    }
    with pytest.raises(ValueError, match="method must be one of .*got 'RK5'"):
        SolverOptions.from_dict({"method": {"type": "RK5", "step_size": 0.5}})
    with pytest.raises(UnknownOptionError, match="did you mean 'step_size'"):
        SolverOptions.from_dict({"method": {"type": "RK4", "stepsize": 0.5}})
    with pytest.raises(ValueError, match="needs its 'type'"):
        SolverOptions.from_dict({"method": {"step_size": 0.5}})
    with pytest.raises(TypeError, match="from_dict takes the mapping"):
        SolverOptions.from_dict("rk4")


# ------------------------------------------------------------------------------ the flat spelling of the edges
def test_a_flat_mapping_puts_each_option_on_its_object():
    options = parse_solver(
        {
            "step_size": 0.25,
            "chunk_size": 8,
            "scan": "parallel",
            "max_steps": 50,
            "gradient": "adjoint",
            "check_every": 3,
        }
    )
    assert options == SolverOptions(
        Auto(exact=Exact(chunk_size=8, scan="parallel"), fallback=RK4(step_size=0.25, scan="parallel", max_steps=50)),
        Adjoint(check_every=3),
    )
    assert parse_solver({"method": "auto", "fallback": "dopri5", "rtol": 1e-5}).method == Auto(fallback=Dopri5(1e-5))
    assert parse_solver({"method": "exact", "recurrence": "chunked", "block_size": 8}).method == Exact(
        recurrence="chunked", block_size=8
    )
    assert parse_solver({"method": RK4(step_size=0.5), "max_steps": 9}).method == RK4(step_size=0.5, max_steps=9)
    assert parse_solver(Adjoint()) == SolverOptions(gradient=Adjoint()) and parse_solver(None) is None
    with pytest.raises(ValueError, match="step_size is an option of Euler, Midpoint, Heun2, Heun3, RK4, not of Dopri5"):
        parse_solver({"method": "dopri5", "step_size": 0.5})
    with pytest.raises(ValueError, match="every is an option of Checkpoint, not of RK4 or Adjoint"):
        parse_solver({"method": "rk4", "gradient": "adjoint", "every": 5})
    with pytest.raises(UnknownOptionError, match="did you mean 'step_size'"):
        parse_solver({"stepsize": 0.1})
    with pytest.raises(ValueError, match=r"RK4\.step_size must be a positive number"):
        parse_solver({"method": "rk4", "step_size": -1})


# ------------------------------------------------------------------------------ constructors take objects
def test_fast_weight_classifier_takes_a_method_object():
    """The reported bug: the model constructors took SolverOptions only (create_model parsed the rest)."""
    model = FastWeightClassifier(3, 2, solver=RK4(step_size=0.5))
    assert model.network.solver == SolverOptions(RK4(step_size=0.5))
    with pytest.raises(TypeError, match="solver must be SolverOptions, a method object .*parse_solver"):
        FastWeightClassifier(3, 2, solver="rk4")


def _solvers_of(model) -> list[SolverOptions]:
    return [m.solver for m in model.modules() if isinstance(getattr(m, "solver", None), SolverOptions)]


@pytest.mark.parametrize("name", [n for n in MODEL_NAMES if model_entry(n).takes_solver])
def test_every_constructor_taking_solver_takes_a_method_object(name):
    entry = model_entry(name)
    assert "solver" in inspect.signature(entry.constructor).parameters
    inputs = model_inputs(name, *registry_batch(length=16))
    options = dict(entry.defaults)  # and what the input determines, as create_model fills it in
    derived = entry.from_inputs(inputs, options) if entry.from_inputs is not None else {}
    options.update({k: v for k, v in derived.items() if options.get(k) is None})
    model = entry.constructor(inputs.channels, 2, **{**options, "solver": RK4(step_size=0.5)})
    solvers = _solvers_of(model)
    assert solvers and all(s == SolverOptions(RK4(step_size=0.5)) for s in solvers)
    gradient_only = entry.constructor(inputs.channels, 2, **{**options, "solver": Adjoint()})
    assert all(s == SolverOptions(gradient=Adjoint()) for s in _solvers_of(gradient_only))


# ------------------------------------------------------------------------------ every registry model from objects
OBJECTS_ONLY = SolverOptions(
    method=Auto(exact=Exact(chunk_size=2), fallback=RK4(step_size=0.5, max_steps=10_000)), gradient=Checkpoint(every=3)
)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_registry_model_runs_forward_and_backward_on_options_made_of_objects(name):
    """Options built from objects only (no string anywhere): every registry model that takes a solver solves with
    them (the method each solve used is one of the objects given, not a default), and every model trains a step."""
    times, values, lengths = registry_batch(length=16)
    takes_solver = model_entry(name).takes_solver
    overrides = dict(solver=dataclasses.replace(OBJECTS_ONLY)) if takes_solver else {}
    model, inputs = build_registry_model(name, times, values, lengths, **overrides)
    loss = training_loss(model, inputs, torch.arange(times.shape[0]) % 3)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert torch.isfinite(loss) and grads and all(bool(torch.isfinite(g).all()) for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    if takes_solver:
        used = [s.last_method for s in _solvers_of(model)]
        assert used and all(u is OBJECTS_ONLY.method.exact or u is OBJECTS_ONLY.method.fallback for u in used), used


# ------------------------------------------------------------------------------ no method read by its name
@dataclasses.dataclass(frozen=True)
class _RenamedRK4(RK4):
    """rk4 under another name: a kernel that looked a method up by its name would not find it."""

    name: ClassVar[str] = "renamed-rk4"


@dataclasses.dataclass(frozen=True)
class _RenamedExact(Exact):
    name: ClassVar[str] = "renamed-exact"


@pytest.mark.parametrize(
    "gradient", [Checkpoint(every=2), Backprop(), Adjoint(check_every=0)], ids=["checkpoint", "backprop", "adjoint"]
)
@pytest.mark.parametrize(
    "model_name, method, renamed",
    [
        ("delta-cde", RK4(step_size=0.5), _RenamedRK4(step_size=0.5)),
        ("ncde", RK4(step_size=0.5, affine_steps=False), _RenamedRK4(step_size=0.5, affine_steps=False)),
        ("delta-rde", Exact(chunk_size=2), _RenamedExact(chunk_size=2)),
    ],
    ids=["affine rk4", "rk4 loop", "exact"],
)
def test_the_kernels_read_the_objects_fields_not_the_methods_name(model_name, method, renamed, gradient):
    inputs = _inputs(model_name)
    outs = []
    for choice in (method, renamed):
        torch.manual_seed(0)
        model = create_model(model_name, inputs, 2, solver=SolverOptions(choice, gradient)).to(DTYPE)
        out = model(inputs)
        grads = torch.autograd.grad(out.square().sum(), list(model.parameters()), allow_unused=True)
        outs.append((out.detach(), [g for g in grads if g is not None]))
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=0, atol=0)
    for a, b in zip(outs[1][1], outs[0][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _method_names() -> set[str]:
    names = {cls.name for cls in (*METHODS.values(), *GRADIENTS.values())}
    return names | {cls.__name__ for cls in (*METHODS.values(), *GRADIENTS.values())}


def test_no_module_of_the_package_compares_with_or_looks_up_a_method_name():
    """Read from the source: no comparison (==, !=, in) with a string that names a method or gradient method
    ("rk4", "exact", "checkpoint", ...) in any module of the package, and no table lookup by a method's ``.name``
    or an options' ``.method`` in the solvers' room (its kernels; torchdiffeq's own tables are read by
    ``torchdiffeq_name``). The parser (`neuralde_seq.solvers.options`) reads names through METHODS and GRADIENTS."""
    names = _method_names() - {"auto"}  # "auto" is also the value of the scan options, not a method there
    found = []
    for path in sorted((ROOT / "neuralde_seq").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        kernel = path.parent.name == "solvers"
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                constants = [c for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in names]
                if constants:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: compares with {constants[0].value!r}")
            if (
                kernel
                and isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and isinstance(node.slice, ast.Attribute)
                and node.slice.attr in ("name", "method")
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: looks up [{ast.unparse(node.slice)}]")
    assert not found, "\n".join(found)


def test_the_name_check_finds_what_it_looks_for(tmp_path):
    """The check above is not vacuous: it flags the spellings the kernels had before (``options.method == "rk4"``,
    ``TABLEAUS[options.method]``)."""
    tree = ast.parse('if options.method == "rk4":\n    t = TABLEAUS[options.method]\n')
    compares = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare)
        and any(isinstance(c, ast.Constant) and c.value in _method_names() for c in ast.walk(n))
    ]
    lookups = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Subscript)
        and isinstance(n.ctx, ast.Load)
        and isinstance(n.slice, ast.Attribute)
        and n.slice.attr == "method"
    ]
    assert len(compares) == 1 and len(lookups) == 1


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
        solve(field, cubic, W0, SolverOptions(Exact()))
    # the same field on log-signature windows: the closed form applies, and Auto takes it
    logsig = build_control(
        times, torch.randn(2, 6, 2, generator=generator, dtype=DTYPE), interpolation="logsignature", depth=2, step=2
    )
    rde = FastWeightField(logsig.channels, 8, 2, "delta", form="rde").to(DTYPE)
    assert Exact().applies(rde, logsig)
    assert Auto().resolve(rde, logsig) == Exact() and Auto().resolve(field, cubic) == RK4()
    with pytest.raises(ValueError, match="num_layers > 1"):
        create_model("delta-rde", _inputs("delta-rde"), 2, num_layers=2, solver=Exact())


def test_auto_resolves_as_before_on_the_registry_models():
    """resolve_method before this change on each fast weight model's default input (BEFORE_AUTO), and rk4 for the
    other models' dynamics."""
    got = {}
    for name in BEFORE_AUTO:
        times = torch.arange(9.0).unsqueeze(0)
        inputs = model_inputs(name, times, torch.sin(times).unsqueeze(-1))
        resolved = create_model(name, inputs, 2).resolve_method(inputs)
        assert isinstance(resolved, Method)
        got[name] = resolved.name
    assert got == BEFORE_AUTO
    inputs = _inputs("ncde")
    ncde = create_model("ncde", inputs, 2)
    assert resolve_method(None, ncde.field, inputs) == RK4()


# ------------------------------------------------------------------------------ one parser at the edges
def test_one_parser_reads_create_model_the_config_and_the_estimator():
    expected = parse_solver("dopri5")
    assert expected == SolverOptions(Dopri5()) == parse_solver({"method": "dopri5"})
    assert parse_solver(Dopri5()) == expected and parse_solver(expected) is expected
    inputs = _inputs("delta-cde")
    assert create_model("delta-cde", inputs, 2, solver="dopri5").network.solver == expected
    # the config: YAML's mapping, and the CLI's --solver (an override of models.i.solver.method)
    cfg = {
        "name": "tiny",
        "task": "japanese-vowels",
        "seeds": [0],
        "training": {"epochs": 1, "lr": 1e-2, "batch_size": 8},
        "models": [
            {"label": "d", "model": "delta-cde", "solver": {"method": "dopri5"}},
            {"label": "e", "model": "delta-cde"},
        ],
    }
    parsed = parse_config(apply_overrides(cfg, ["models.1.solver.method=dopri5"]))
    assert [row.solver for row in parsed.rows] == [expected, expected]
    with pytest.raises(ConfigError, match="method must be one of"):
        parse_config(apply_overrides(cfg, ["models.1.solver.method=dopri"]))
    with pytest.raises(ConfigError, match="step_size is an option of .*not of Dopri5"):
        parse_config(apply_overrides(cfg, ["models.0.solver.step_size=0.5"]))
    # the estimator: read before any work, the same options; an unknown field named
    from neuralde_seq.sklearn import SequenceClassifier

    settings = SequenceClassifier("delta-cde", model_options={"solver": "dopri5"})._checked_settings()
    assert settings["model_options"]["solver"] == expected
    with pytest.raises(UnknownOptionError, match="did you mean 'step_size'"):
        SequenceClassifier("delta-cde", model_options={"solver": {"stepsize": 0.1}})._checked_settings()
    with pytest.raises(TypeError, match="solver must be SolverOptions"):
        parse_solver(4)


def test_the_public_api_offers_the_objects():
    for name in (
        "SolverOptions",
        "parse_solver",
        "Auto",
        "RK4",
        "Dopri5",
        "Exact",
        "Checkpoint",
        "Adjoint",
        "Backprop",
    ):
        assert name in neuralde_seq.__all__ and getattr(neuralde_seq, name) is getattr(neuralde_seq.solvers, name)
