"""Issue 24, estimators and options: inputs that were silently misread, or refused with an unhelpful error, now
give the right answer or a clear error naming the argument.

- labels mixing strings and numbers (the integer 1 came back as the string '1');
- predictions without the times an estimator was fitted with (they silently used 0, 1, 2, ...), and the reverse;
- ``build_control(unobserved_fill=nan)`` (it gave the output of 0.0) and flags given as strings;
- numeric `SolverOptions` given as bools or strings (True was a step of 1; a string met a comparison's TypeError);
- raw values of 1e12, which the estimators standardise themselves (they were refused with advice to standardise);
- ``create_model(..., solver="rk4")`` (it failed at the first forward pass);
- class indices out of the model's range (torch's IndexError at the first step, not a named error before it);
- `fit`'s rates given as bools or strings.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from neuralde_seq import build_control, create_model, model_inputs
from neuralde_seq.random_features import RandomFeatureClassifier, RandomFeatureRegressor
from neuralde_seq.sklearn import SequenceClassifier, SequenceRegressor
from neuralde_seq.solvers import RK4, Auto, Checkpoint, Dopri5, Exact, SolverOptions
from neuralde_seq.training.config import ConfigError, validate_config
from neuralde_seq.training.fit import fit
from neuralde_seq.training.objectives import Classification


def _series(n=12, steps=16, seed=0):
    """(n, steps) univariate series whose class is the sign of their mean, and strictly increasing times."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    X = rng.normal(size=(n, steps)) + np.where(labels == 1, 1.0, -1.0)[:, None]
    times = np.cumsum(rng.uniform(0.5, 2.0, size=(n, steps)), axis=1)
    return X, labels, times


def _small_estimators():
    return [
        SequenceClassifier("gru-dt", model_options={"hidden": 4}, epochs=1, batch_size=6, random_state=0),
        SequenceRegressor("gru-dt", model_options={"hidden": 4}, epochs=1, batch_size=6, random_state=0),
        RandomFeatureClassifier(width=16, random_state=0),
        RandomFeatureRegressor(width=16, random_state=0),
    ]


# ------------------------------------------------------------------------------------------------ labels
@pytest.mark.parametrize(
    "make",
    [
        lambda: SequenceClassifier("gru-dt", model_options={"hidden": 4}, epochs=1, random_state=0),
        lambda: RandomFeatureClassifier(width=16, random_state=0),
    ],
)
@pytest.mark.parametrize("labels", [["a", 1] * 6, np.array(["a", 1.5] * 6, dtype=object)])
def test_labels_mixing_strings_and_numbers_are_refused(make, labels):
    X, _, _ = _series()
    with pytest.raises(ValueError, match=r"y mixes label types: strings and numbers \((float|int), str\)"):
        make().fit(X, labels)


# ------------------------------------------------------------------------------------------------ times
_PREDICTIONS = ("predict", "predict_proba", "predict_log_proba", "decision_function", "random_features", "score")


def _predictions(estimator, X, y, times):
    """Every prediction method the estimator has, called with ``times``."""
    for name in _PREDICTIONS:
        method = getattr(estimator, name, None)
        if method is None:
            continue
        yield name, (lambda m=method, n=name: m(X, y, times=times) if n == "score" else m(X, times=times))


@pytest.mark.parametrize("index", range(4))
def test_an_estimator_fitted_with_times_refuses_predictions_without_them(index):
    X, y, times = _series()
    estimator = _small_estimators()[index].fit(X, y, times=times)
    assert estimator.fitted_with_times_ is True
    for _name, call in _predictions(estimator, X, y, None):
        with pytest.raises(ValueError, match=r"times is None, but this \w+ was fitted with times"):
            call()
    for _name, call in _predictions(estimator, X, y, times):
        call()  # with the times of fit: accepted
    # fitted without times: times at prediction are refused, None accepted
    estimator.fit(X, y)
    assert estimator.fitted_with_times_ is False
    for _name, call in _predictions(estimator, X, y, times):
        with pytest.raises(ValueError, match=r"times was given, but this \w+ was fitted without times"):
            call()
    for _name, call in _predictions(estimator, X, y, None):
        call()


# ------------------------------------------------------------------------------------------------ build_control
@pytest.mark.parametrize("fill", [float("nan"), float("inf"), -float("inf"), "0", True])
def test_unobserved_fill_must_be_a_finite_number(fill):
    times = torch.arange(6.0).expand(2, 6)
    values = torch.randn(2, 6, 2)
    values[1, :, 1] = float("nan")  # sample 1 never observes channel 1
    message = r"unobserved_fill must be None, a finite number or a sequence of finite numbers.*got " + re.escape(
        repr(fill)
    )
    with pytest.raises(ValueError, match=message):
        build_control(times, values, unobserved_fill=fill, interpolation="linear")
    # a finite fill is what the never-observed channel reads at every knot (channel 0 is the time)
    control = build_control(times, values, unobserved_fill=2.5, interpolation="linear")
    torch.testing.assert_close(control.coeffs[1, :6, 0, 2], torch.full((6,), 2.5))
    torch.testing.assert_close(control.coeffs[0, :6, 0, 2], values[0, :, 1])


@pytest.mark.parametrize("flag", ["time_channel", "mask_channel", "intensity_channel"])
def test_control_flags_must_be_bools(flag):
    times = torch.arange(6.0).expand(2, 6)
    allowed = "True, False or 'auto'.*" if flag == "intensity_channel" else "True or False, "  # 'auto': InputSpec.fit
    with pytest.raises(ValueError, match=f"{flag} must be {allowed}got 'no'"):
        build_control(times, torch.randn(2, 6, 2), **{flag: "no"})


# ------------------------------------------------------------------------------------------------ SolverOptions
@pytest.mark.parametrize(
    "method, field, value, kind",
    [
        (RK4, "step_size", True, "a positive number"),
        (RK4, "step_size", "0.1", "a positive number"),
        (RK4, "step_size", "small", "a positive number"),
        (Dopri5, "rtol", True, "a positive number"),
        (Dopri5, "rtol", "1e-3", "a positive number"),
        (Dopri5, "atol", "tiny", "a positive number"),
        (Exact, "chunk_size", True, "a positive integer"),
        (Exact, "compile", "yes", "True or False"),
    ],
)
def test_numeric_solver_options_refuse_bools_and_strings(method, field, value, kind):
    with pytest.raises(ValueError, match=rf"^{method.__name__}\.{field} must be {kind}.*got {value!r}"):
        method(**{field: value})


def test_solver_integers_given_as_numpy_integers_are_kept_as_ints():
    options = SolverOptions(Auto(fallback=RK4(max_steps=np.int64(50))), gradient=Checkpoint(every=np.int32(4)))
    assert type(options.method.fallback.max_steps) is int and options.method.fallback.max_steps == 50
    assert type(options.gradient.every) is int and options.gradient.every == 4


def test_a_config_solver_option_that_is_a_word_names_its_key():
    config = {
        "name": "tiny",
        "task": "japanese-vowels",
        "seeds": [0],
        "training": {"epochs": 1, "lr": 1e-2, "batch_size": 8},
        "solver": {"method": "rk4", "step_size": "small"},
        "models": [{"model": "ncde", "options": {"hidden": 4}}],
    }
    with pytest.raises(ConfigError, match=r"solver: RK4\.step_size must be a positive number or None, got 'small'"):
        validate_config(config)


# ------------------------------------------------------------------------------------------------ magnitudes
@pytest.mark.parametrize(
    "make",
    [
        lambda: SequenceClassifier(
            "gru-dt", model_options={"hidden": 8}, epochs=3, lr=0.02, batch_size=6, random_state=0
        ),
        lambda: RandomFeatureClassifier(width=32, random_state=0),
    ],
)
def test_raw_values_of_1e12_are_standardised_by_the_estimator(make):
    """Standardisation makes the estimator invariant to the scale of X: X·1e12 gives X's answers."""
    X, y, times = _series(seed=1)
    small = make().fit(X, y, times=times)
    large = make().fit(X * 1e12, y, times=times)
    np.testing.assert_allclose(large.channel_mean_, small.channel_mean_ * 1e12, rtol=1e-6)
    np.testing.assert_allclose(large.channel_scale_, small.channel_scale_ * 1e12, rtol=1e-6)
    if hasattr(small, "predict_proba"):
        np.testing.assert_allclose(
            large.predict_proba(X * 1e12, times=times), small.predict_proba(X, times=times), atol=1e-4
        )
    else:
        np.testing.assert_allclose(
            large.decision_function(X * 1e12, times=times), small.decision_function(X, times=times), atol=1e-3
        )
    # a value that lies beyond the finite range once standardised (far outside the training data) is named
    far = X.copy()
    far[3, 5] = 1e22
    with pytest.raises(
        ValueError,
        match=r"X\[3\] has the value 1e\+22 at step 5, channel 0: .* standard deviations "
        r"from the channel's training mean \(channel_mean_\[0\]",
    ):
        small.predict(far, times=times)
    # beyond float32's largest number: use float64
    huge = X.copy()
    huge[2, 4] = 1e39
    with pytest.raises(
        ValueError,
        match=r"X\[2\] has a value beyond the largest torch.float32 number .* step 4, "
        r"channel 0: use dtype='float64'",
    ):
        make().fit(huge, y, times=times)


# ------------------------------------------------------------------------------------------------ create_model
def test_create_model_takes_a_method_name_as_its_solver():
    times = torch.arange(8.0).expand(3, 8)
    inputs = model_inputs("ncde", times, torch.randn(3, 8, 2))
    torch.manual_seed(0)
    named = create_model("ncde", inputs, 2, solver="rk4")
    torch.manual_seed(0)
    explicit = create_model("ncde", inputs, 2, solver=SolverOptions(RK4()))
    assert named.solver == SolverOptions(RK4())
    assert torch.equal(named(inputs), explicit(inputs))
    assert named.solver.last_method == RK4()
    with pytest.raises(TypeError, match="solver must be SolverOptions, a mapping of its options, a method name"):
        create_model("ncde", inputs, 2, solver=4)


# ------------------------------------------------------------------------------------------------ fit
def _gru_data(n=8):
    torch.manual_seed(0)
    inputs = model_inputs("gru-dt", torch.arange(10.0).expand(n, 10), torch.randn(n, 10, 2))
    return inputs, create_model("gru-dt", inputs, 3, hidden=4)


def test_a_class_index_out_of_range_is_named_before_the_first_loss():
    """The bad label in the first batch: the range check runs before the loss indexes with it."""
    inputs, model = _gru_data()
    targets = torch.tensor([0, 1, 2, 0, 1, 7, 0, 1])
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with pytest.raises(ValueError, match="train targets holds the class index 7, out of range for 3 classes"):
        fit(model, Classification(), (inputs, targets), epochs=1, lr=0.1, batch_size=8, progress=False)
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())  # no step taken


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("lr", True, "lr must be a positive finite number"),
        ("weight_decay", "0", "weight_decay must be a finite number >= 0"),
        ("penalty_weight", True, "penalty_weight must be a finite number >= 0"),
        ("grad_clip", True, "grad_clip must be a positive number or None"),
    ],
)
def test_fit_rates_refuse_bools_and_strings(setting, value, message):
    inputs, model = _gru_data()
    settings = {"epochs": 1, "lr": 0.1, "batch_size": 4, setting: value}
    with pytest.raises(ValueError, match=message):
        fit(model, Classification(), (inputs, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])), progress=False, **settings)


def test_times_that_float32_merges_are_named_with_the_cast_as_the_cause():
    """Distinct float64 times closer than float32's resolution (a new user's 1,500 uniform draws in [0, 30]):
    before, 'times must be strictly increasing' blamed the user's (increasing) times."""
    import numpy as np

    from neuralde_seq.sklearn import RandomFeatureClassifier, SequenceClassifier

    X = [np.random.default_rng(i).normal(size=(1500, 2)) for i in range(6)]
    times = [np.linspace(0.0, 30.0, 1500) for _ in range(6)]
    times[3][801] = times[3][800] + 2e-9  # distinct in float64, equal in float32
    y = [0, 1] * 3
    for estimator in (RandomFeatureClassifier(width=32), SequenceClassifier("gru-dt", epochs=1)):
        with pytest.raises(
            ValueError,
            match=r"X\[3\] at steps 800 and 801 .* become equal in torch.float32.*"
            r"dtype='float64'",
        ):
            estimator.fit(X, y, times=times)
    # in float64 the same times are accepted
    RandomFeatureClassifier(width=32, dtype="float64").fit(X, y, times=times)
