"""Bad input fails with a named, clear error, and good input at the edge of the limits is still handled.

- the finite range of values and times (neuralde_seq.observations.magnitude_limit), and the warning of a solve
  that ends non-finite from finite inputs (times in large units);
- the solver's step limit (SolverOptions.max_steps), fixed-step and adaptive;
- selecting samples of a Control or Observations like a tensor's batch;
- a model given an input of another dtype, on another device, or of another type;
- where observation validation lives (observations.py, which imports no other module of the package).
"""

import ast
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import neuralde_seq
from neuralde_seq import Control, Observations, SolverOptions, build_control, create_model, model_inputs, solve
from neuralde_seq.models import MODEL_NAMES, model_entry
from neuralde_seq.observations import magnitude_limit, validate_observations
from neuralde_seq.solvers import RK4, Adjoint, Auto, Backprop, Checkpoint, Dopri5, NonFiniteSolveWarning

F32, F64 = torch.float32, torch.float64
# CKCNN and CCNN check their input type in their own files (models/ckconv.py, models/ccnn.py), which do not
# yet run the shared dtype/device check; every other registry model is covered here.
SHARED_CHECK_MODELS = MODEL_NAMES


def _data(B=4, T=12, C=3, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed)
    times = torch.cumsum(0.5 + torch.rand(T, generator=g, dtype=F64), 0).to(dtype).expand(B, T).clone()
    values = torch.randn(B, T, C, generator=g, dtype=F64).to(dtype)
    return times, values


# ---------------------------------------------------------------------------------------------------
# the finite range


def test_limit_is_the_fourth_root_of_the_largest_number():
    for dtype in (F32, F64):
        limit = torch.tensor(magnitude_limit(dtype), dtype=dtype)
        # Fourth powers of inputs within the limit stay finite in the dtype; twice the limit's would not.
        assert torch.isfinite(limit**4) and torch.isinf((2 * limit) ** 4)
    assert magnitude_limit(F32) == 4.29e9
    assert magnitude_limit(F64) == 1.15e77


@pytest.mark.parametrize("dtype, big", [(F32, 3e38), (F32, -1e10), (F64, 1e300)])
def test_values_beyond_the_limit_are_refused(dtype, big):
    times, values = _data(dtype=dtype)
    values[1, 5, 2] = big
    message = (
        rf"values has an entry of magnitude {abs(big):.3g} \(sample 1, step 5, channel 2\), outside the finite "
        rf"range \|values\| <= {magnitude_limit(dtype):.3g} that the models handle in {dtype}.*standardise"
    )
    with pytest.raises(ValueError, match=message.replace("+", r"\+")):
        build_control(times, values)
    with pytest.raises(ValueError, match="values has an entry of magnitude"):
        Observations.from_tensors(times, values)


def test_times_beyond_the_limit_are_refused_with_their_magnitude_as_given():
    times, values = _data()
    # A float64 time of 1e39 would become inf in the float32 values' dtype: the message names the given size.
    big = times.double()
    big[2, 11] = 1e39
    big[1, 11] = 1e20
    with pytest.raises(
        ValueError,
        match=r"times has an entry of magnitude 1e\+39 \(sample 2, step 11\), outside the "
        r"finite range \|times\| <= 4.29e\+09 that the models handle in "
        r"torch.float32.*subtract a reference time",
    ):
        build_control(big, values)
    with pytest.raises(ValueError, match=r"times has an infinite entry"):
        build_control(times.masked_fill(times > 5, float("inf")), values)


def test_entries_beyond_the_limit_in_padding_or_missing_are_ignored():
    times, values = _data()
    values[0, 3, 1] = float("nan")  # missing
    values[2, 10:] = 1e30  # padding after sample 2's length
    times[2, 10:] = 1e30
    times[2, 11] = 2e30
    lengths = torch.tensor([12, 12, 10, 12])
    control = build_control(times, values, lengths)
    assert torch.isfinite(control.coeffs).all()


def test_values_inside_the_limit_give_finite_logits():
    """At 90 % of the float32 limit, the models that multiply their inputs most (log-signature windows fed to
    fast weights) still give finite logits: the limit is not too loose."""
    times, values = _data()
    values = values / values.abs().max() * 0.9 * magnitude_limit(F32)
    for name in ("delta-rde", "hebb-cde", "ncde", "gru-d"):
        torch.manual_seed(0)
        inputs = model_inputs(name, times, values)
        with torch.no_grad():
            logits = create_model(name, inputs, 3)(inputs)
        assert torch.isfinite(logits).all(), name


def test_realistic_raw_data_is_accepted():
    """Raw clinical values (~1e4) in float32 and unix times (1.7e9 s, hourly) in float64 pass validation; with
    parametrization='index' the solver's grid does not see the time units, and the logits are finite."""
    times, values = _data()
    clinical = values * 1e4
    torch.manual_seed(0)
    X = build_control(times, clinical)
    with torch.no_grad():
        assert torch.isfinite(create_model("ncde", X, 3)(X)).all()
    unix = 1.7e9 + 3600.0 * torch.arange(12, dtype=F64).expand(4, 12)
    X = build_control(unix, values.double(), parametrization="index")
    torch.manual_seed(0)
    model = create_model("delta-cde", X, 3, d_model=8, n_heads=2).double()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error")
        assert torch.isfinite(model(X)).all()


def test_tiny_time_gaps_that_overflow_the_cubics_are_refused():
    times, values = _data()
    tiny = times * 1e-14  # gaps of ~1e-14: Hermite coefficients grow like 1/gap^3 = 1e42 > float32's max
    with pytest.raises(
        ValueError,
        match=r"hermite_cubic control's coefficients overflow in torch.float32.*smallest "
        r"gap between knots is \S+e-1[45];.*parametrization='index'",
    ):
        build_control(tiny, values)
    # The same data indexed by observation number is fine.
    assert torch.isfinite(build_control(tiny, values, parametrization="index").coeffs).all()


def test_times_in_huge_units_warn_that_the_solve_is_non_finite():
    """times x 1e9 with parametrization='time': one rk4 step per gap of ~1e9 units of s is far outside the
    stability region of a field that changes on a scale of one unit; the logits are NaN, and the solve says
    why. The same data with parametrization='index' solves to finite logits without a warning."""
    times, values = _data()
    times = times / times.max() * 1e9  # times in [0, 1] scaled by 1e9: within the finite range
    torch.manual_seed(0)
    X = build_control(times, values)
    # one rk4 step per knot (the registry's oja-cde takes steps of 0.5 units of s, 1.8e9 of them here: refused)
    model = create_model("oja-cde", X, 3, d_model=8, n_heads=2, solver=SolverOptions(RK4()))
    with pytest.warns(
        NonFiniteSolveWarning,
        match=r"non-finite states .* over s from \S+e\+0[78] to 1e\+09 with rk4 "
        r"steps up to \S+e\+0[89] wide.*parametrization='index'",
    ) as caught:
        with torch.no_grad():
            logits = model(X)
    # at the user's line (this file), not inside the solver: Python's filter then says it once per run
    assert {w.filename for w in caught if w.category is NonFiniteSolveWarning} == {__file__}
    assert not torch.isfinite(logits).all()
    indexed = build_control(times, values, parametrization="index")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error")
        assert torch.isfinite(model(indexed)).all()


# ---------------------------------------------------------------------------------------------------
# the step limit


class CountingDecay(nn.Module):
    """dy/ds = −y ⊙ dX/ds (a CDE), counting its evaluations."""

    needs_value = False
    needs_derivative = True

    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels, dtype=F64))
        self.calls = 0

    def forward(self, y, x, dx):
        self.calls += 1
        return -y * dx * self.weight


def _hourly_control(T=10, C=2):
    times = 3600.0 * torch.arange(T, dtype=F64).expand(2, T)  # hourly timestamps, in seconds
    values = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1), dtype=F64)
    return build_control(times, values, time_channel=False)


def test_hourly_timestamps_with_a_small_step_are_refused_before_solving():
    X = _hourly_control()
    dynamics = CountingDecay(X.channels)
    with pytest.raises(
        ValueError,
        match=r"the rk4 solve would take 3,240,000 steps, more than max_steps=1,000,000: "
        r"the control's parameter s runs from 0 to 32400 \(a span of 32400\) with "
        r"step_size=0.01.*larger step_size.*parametrization='index'.*max_steps",
    ):
        solve(dynamics, X, torch.ones(2, X.channels, dtype=F64), SolverOptions(Auto(fallback=RK4(step_size=0.01))))
    assert dynamics.calls == 0


def test_max_steps_is_exact_at_the_boundary():
    X = build_control(torch.arange(5, dtype=F64).expand(2, 5), torch.randn(2, 5, 2, dtype=F64), time_channel=False)
    y0 = torch.ones(2, 2, dtype=F64)
    # 4 knot intervals of width 1 at step_size 0.01: 400 steps.
    with pytest.raises(ValueError, match="would take 400 steps, more than max_steps=399"):
        solve(CountingDecay(2), X, y0, SolverOptions(Auto(fallback=RK4(step_size=0.01, max_steps=399))))
    dynamics = CountingDecay(2)
    allowed = solve(dynamics, X, y0, SolverOptions(Auto(fallback=RK4(step_size=0.01, max_steps=400))))
    assert dynamics.calls == 400 * 4  # four rk4 stages per step: the grid is the one counted
    torch.testing.assert_close(
        allowed, solve(CountingDecay(2), X, y0, SolverOptions(Auto(fallback=RK4(step_size=0.01, max_steps=None))))
    )
    # One step per knot interval counts intervals.
    with pytest.raises(ValueError, match=r"would take 4 steps, more than max_steps=3.*one step per knot interval"):
        solve(CountingDecay(2), X, y0, SolverOptions(Auto(fallback=RK4(max_steps=3))))


def test_the_adjoint_of_a_fixed_step_solve_checks_the_same_grid():
    X = _hourly_control()
    with pytest.raises(ValueError, match="would take 3,240,000 steps"):
        solve(
            CountingDecay(X.channels),
            X,
            torch.ones(2, X.channels, dtype=F64),
            SolverOptions(Auto(fallback=RK4(step_size=0.01)), gradient=Adjoint()),
        )


@pytest.mark.parametrize("gradient", [Checkpoint(), Backprop()], ids=["checkpoint", "backprop"])
def test_adaptive_solves_stop_at_max_steps_counting_the_forward_pass_only(gradient):
    times = torch.linspace(0, 20, 8, dtype=F64).expand(2, 8)
    values = torch.randn(2, 8, 2, generator=torch.Generator().manual_seed(2), dtype=F64).cumsum(1) * 3
    X = build_control(times, values)
    y0 = torch.ones(2, X.channels, dtype=F64)
    probe = CountingDecay(X.channels)
    with torch.no_grad():
        solve(probe, X, y0, SolverOptions(Dopri5(max_steps=None)))
    evaluations = probe.calls  # of the forward solve: about 6 per step
    with pytest.raises(
        ValueError,
        match=r"the dopri5 solve took more than max_steps=2 steps .* rtol=1e-07, "
        r"atol=1e-09.*max_steps",
    ):
        solve(CountingDecay(X.channels), X, y0, SolverOptions(Dopri5(max_steps=2), gradient=gradient))
    # Just enough for the forward pass: the checkpointed backward pass recomputes every evaluation once more,
    # which must not count against the limit.
    dynamics = CountingDecay(X.channels)
    enough = math.ceil(evaluations / 6)
    out = solve(dynamics, X, y0, SolverOptions(Dopri5(max_steps=enough), gradient=gradient))
    out.sum().backward()
    assert dynamics.weight.grad is not None and torch.isfinite(dynamics.weight.grad).all()
    if isinstance(gradient, Checkpoint):
        assert dynamics.calls > evaluations  # the recomputation happened


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "many"])
def test_max_steps_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_steps must be a positive integer or None"):
        SolverOptions(Auto(fallback=RK4(max_steps=bad)))


# ---------------------------------------------------------------------------------------------------
# selecting samples


def _both_kinds():
    times, values = _data(dtype=F64)
    lengths = torch.tensor([12, 7, 9, 5])
    return build_control(times, values, lengths), Observations.from_tensors(times, values, lengths)


def _same(a, b):
    if isinstance(a, Control):
        return torch.equal(a.coeffs, b.coeffs) and torch.equal(a.end_index, b.end_index)
    return (
        torch.equal(a.values.nan_to_num(7.0), b.values.nan_to_num(7.0))
        and torch.equal(a.times, b.times)
        and torch.equal(a.lengths, b.lengths)
    )


@pytest.mark.parametrize("kind", [0, 1], ids=["Control", "Observations"])
def test_indexing_like_a_tensor_batch(kind):
    inputs = _both_kinds()[kind]
    last = inputs[[3]]
    # An int keeps the batch dimension, whichever integer type it comes as.
    for index in (-1, 3, np.int64(3), np.int32(-1), torch.tensor(3), torch.tensor(-1)):
        selected = inputs[index]
        assert len(selected) == 1 and _same(selected, last)
    # Negative entries, numpy arrays, masks and slices select the same samples as the plain indices.
    pair = inputs[[0, 2]]
    for index in (
        torch.tensor([0, -2]),
        np.array([0, 2]),
        [True, False, True, False],
        torch.tensor([True, False, True, False]),
        np.array([True, False, True, False]),
        slice(0, 3, 2),
        slice(-4, -1, 2),
    ):
        assert _same(inputs[index], pair)
    assert _same(inputs[::-1], inputs[[3, 2, 1, 0]])
    assert len(inputs[[1, 1]]) == 2  # repeats are allowed, as for tensors


def test_an_int_selection_is_what_a_model_reads_for_that_sample():
    X, obs = _both_kinds()
    torch.manual_seed(0)
    cde = create_model("delta-cde", X, 3, d_model=8, n_heads=2).double()
    grud = create_model("gru-d", obs, 3).double()
    with torch.no_grad():
        torch.testing.assert_close(cde(X[-1]), cde(X)[-1:])
        torch.testing.assert_close(grud(obs[1]), grud(obs)[1:2])


@pytest.mark.parametrize("kind", [0, 1], ids=["Control", "Observations"])
def test_bad_selections(kind):
    inputs = _both_kinds()[kind]
    name = type(inputs).__name__
    for index, shown in ((4, 4), (-5, -5), (torch.tensor([0, 7]), 7), (np.array([-9]), -9), (np.int64(10), 10)):
        with pytest.raises(IndexError, match=rf"{name} index {shown} is out of range for the batch of 4 samples"):
            inputs[index]
    with pytest.raises(IndexError, match=rf"{name} bool mask has 3 entries but the batch has 4 samples"):
        inputs[torch.tensor([True, False, True])]
    with pytest.raises(IndexError, match="must be 1-D"):
        inputs[torch.zeros(2, 2, dtype=torch.long)]
    for empty in (
        [],
        slice(2, 2),
        torch.zeros(4, dtype=torch.bool),
        torch.tensor([], dtype=torch.long),
        np.array([], dtype=np.int64),
    ):
        with pytest.raises(ValueError, match=rf"{name}.* selects no sample of the batch of 4"):
            inputs[empty]
    for wrong in (1.0, np.float32(1.0), torch.tensor(1.0), torch.tensor([0.0, 1.0]), True, (0, 1), "0", None):
        with pytest.raises(TypeError, match=rf"{name} index must"):
            inputs[wrong]


# ---------------------------------------------------------------------------------------------------
# dtype, device and type of a model's input


def _inputs_for(name, dtype=F32):
    times, values = _data(dtype=dtype)
    return model_inputs(name, times, values)


@pytest.mark.parametrize("name", SHARED_CHECK_MODELS)
def test_a_model_refuses_an_input_of_another_dtype(name):
    inputs = _inputs_for(name)
    torch.manual_seed(0)
    model = create_model(name, inputs, 3)
    kind = type(inputs).__name__
    verb = "are" if kind == "Observations" else "is"
    with pytest.raises(
        TypeError,
        match=rf"{type(model).__name__} has torch.float32 parameters but the {kind} {verb} "
        rf"torch.float64: convert one of them, model.to\(torch.float64\) or "
        rf"X.to\(torch.float32\)",
    ):
        model(inputs.to(F64))
    # Either conversion the message names works.
    with torch.no_grad():
        assert torch.isfinite(model(inputs)).all()
        assert torch.isfinite(model.double()(inputs.to(F64))).all()


@pytest.mark.parametrize("name", ["delta-cde", "ncde", "gru-d", "latent-ode-rnn"])
def test_a_model_refuses_an_input_on_another_device(name):
    inputs = _inputs_for(name)
    model = create_model(name, inputs, 3).to("meta")  # a second device without a GPU
    with pytest.raises(
        TypeError,
        match=rf"{type(model).__name__}'s parameters are on meta but the "
        rf"{type(inputs).__name__} (is|are) on cpu: move one of them, "
        rf"model.to\('cpu'\) or X.to\('meta'\)",
    ):
        model(inputs)


@pytest.mark.parametrize("name", SHARED_CHECK_MODELS)
def test_a_model_given_the_wrong_kind_of_input_names_what_it_reads(name):
    times, values = _data()
    inputs = _inputs_for(name)
    model = create_model(name, inputs, 3)
    model_name = type(model).__name__
    if model_entry(name).inputs == "control":
        wrong, expected, how = Observations.from_tensors(times, values), "Control", r"neuralde_seq.build_control"
    else:
        wrong, expected, how = build_control(times, values), "Observations", r"Observations.from_tensors"
    for given in (wrong, values, (times, values)):
        with pytest.raises(
            TypeError,
            match=rf"{model_name} reads {expected}, got {type(given).__name__}.*{how}.*"
            rf"neuralde_seq.model_inputs",
        ):
            model(given)
    # The registry refuses to size a model by the other kind of input.
    with pytest.raises(TypeError, match=rf"model {name!r} reads {expected}, got a {type(wrong).__name__}"):
        create_model(name, wrong, 3)


def test_latent_elbo_checks_its_target():
    inputs = _inputs_for("latent-ode-rnn")
    model = create_model("latent-ode-rnn", inputs, 3)
    with pytest.raises(TypeError, match="LatentODE reads Observations, got Control"):
        model.elbo(inputs, build_control(inputs.times, inputs.values))


class Linear(nn.Module):
    needs_value = True
    needs_derivative = False

    def __init__(self, channels):
        super().__init__()
        self.map = nn.Linear(channels, channels)

    def forward(self, y, x, dx):
        return self.map(x) - y


def test_solve_checks_dynamics_control_and_state_agree():
    X = build_control(*_data())
    dynamics = Linear(X.channels)
    y0 = torch.zeros(4, X.channels)
    with pytest.raises(
        TypeError,
        match=r"the dynamics module has torch.float32 parameters but the control is "
        r"torch.float64",
    ):
        solve(dynamics, X.to(F64), y0.double())
    with pytest.raises(
        TypeError,
        match=r"the dynamics module has torch.float32 parameters but the initial state is "
        r"torch.float64",
    ):
        solve(dynamics, X, y0.double())
    with pytest.raises(TypeError, match=r"the dynamics module's parameters are on meta but the control is on cpu"):
        solve(dynamics.to("meta"), X, y0)


# ---------------------------------------------------------------------------------------------------
# where validation lives


def test_observations_module_owns_validation_and_imports_no_other_module_of_the_package():
    import neuralde_seq.controls.builder as controls
    import neuralde_seq.observations as observations

    source = Path(observations.__file__).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("neuralde_seq"), ast.unparse(node)
        elif isinstance(node, ast.Import):
            assert not any(alias.name.startswith("neuralde_seq") for alias in node.names), ast.unparse(node)
    assert controls.validate_observations is observations.validate_observations is validate_observations
    assert neuralde_seq.Observations is observations.Observations


def _calls_of_validation(monkeypatch) -> list:
    """The calls of validate_observations made through the dataset module (its one caller there)."""
    import neuralde_seq.data.base.datasets as datasets

    calls = []

    def spy(*args, **kwargs):
        calls.append(args)
        return validate_observations(*args, **kwargs)

    monkeypatch.setattr(datasets, "validate_observations", spy)
    return calls


def test_a_dataset_checks_its_observations_when_made_and_derived_datasets_keep_them_unchecked(monkeypatch):
    """A dataset is checked once, when it is made from observations; a step that keeps them valid (a selection, a
    replaced label, a move, points made unobserved) does not check them again, but still checks what it changes;
    a cast (which may merge times) and new observations are checked."""
    from neuralde_seq.data import IrregularDataset

    times, values = _data(B=4, T=6, C=2, dtype=F64)
    calls = _calls_of_validation(monkeypatch)
    data = IrregularDataset(times, values, torch.full((4,), 6), torch.tensor([0, 1, 0, 1]), ["a", "b"])
    assert len(calls) == 1
    points = torch.zeros(4, 6, dtype=torch.bool)
    points[1, 2] = points[3, 0] = True
    derived = [
        data.subset([2, 0]),
        data.replace(labels=torch.tensor([1, 1, 0, 0])),
        data.to(device="cpu"),
        data.to(dtype=F64),
        data.unobserved(points),
    ]
    assert len(calls) == 1
    dropped = derived[-1]
    assert torch.isnan(dropped.values[1, 2]).all() and torch.isnan(dropped.values[3, 0]).all()
    assert torch.equal(dropped.values[~points], data.values[~points]) and dropped.times is data.times
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\)"):
        data.replace(labels=torch.tensor([0, 1, 2, 0]))  # what changes is checked
    with pytest.raises(ValueError, match=r"points must be an \(N, T\) = \(4, 6\) bool tensor"):
        data.unobserved(torch.zeros(4, 6))
    data.replace(times=times + 1.0)
    assert len(calls) == 2  # new observations
    close = data.replace(times=torch.cumsum(torch.full((4, 6), 1e-9, dtype=F64), 1) + 1e3)
    with pytest.raises(ValueError, match="strictly increasing"):
        close.to(dtype=F32)  # distinct in float64, equal in float32: a cast is checked


def test_rescaled_times_must_stay_increasing_in_their_dtype():
    from neuralde_seq.observations import check_rescaled_times

    times = torch.tensor([[0.0, 1.0, 1.0, 3.0], [0.0, 1.0, 2.0, 2.0]])
    check_rescaled_times(times, torch.tensor([2, 3]), 0.5)  # the equal pairs lie past each sample's length
    with pytest.raises(
        ValueError,
        match=r"times divided by time_unit=0.5 stop increasing in torch.float32: sample 1 "
        r"has 2.0 at step 2 and 2.0 at step 3; give a larger time_unit",
    ):
        check_rescaled_times(times, torch.tensor([2, 4]), 0.5)


def test_static_features_for_a_control_model_are_refused_not_dropped():
    times = torch.linspace(0, 1, 6).repeat(3, 1)
    values = torch.randn(3, 6, 2)
    static = torch.randn(3, 4)
    with pytest.raises(ValueError, match="static"):
        model_inputs("delta-cde", times, values, static=static)
    observations = model_inputs("gru-d", times, values, static=static)
    assert torch.equal(observations.static, static)


HEADLESS_MODELS = {name for name in MODEL_NAMES if name.endswith("-rfwp") or name.startswith("latent-")}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_checks_its_output_count(name):
    inputs = _inputs_for(name)
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(ValueError, match="num_classes"):
            create_model(name, inputs, bad)
    if name in HEADLESS_MODELS:  # encoders and generative models run without an output head
        create_model(name, inputs, None)
    else:
        with pytest.raises(ValueError, match="num_classes"):
            create_model(name, inputs, None)
