"""Tests of the control's options as objects (neuralde_seq.controls: ControlOptions, the interpolation objects, the one
parser of their keyword spelling, and the registry of interpolations).

The interpolations themselves are checked against independent computations in tests/test_controls.py (by their
names); here the objects must build exactly those controls, the options must refuse bad values naming the field, a
new interpolation must plug in from a test alone, and the options must survive JSON.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from neuralde_seq import (
    ControlOptions,
    HermiteCubic,
    InputSpec,
    Linear,
    LogSignature,
    NaturalCubic,
    Rectilinear,
    build_control,
    create_model,
    model_inputs,
    registered_interpolation,
)
from neuralde_seq.controls import PolynomialInterpolation, interpolation_names, parse_control_options
from neuralde_seq.input_checks import UnknownOptionError
from neuralde_seq.models import registered_control_options

F64 = torch.float64
CONTROL_FIELDS = ("knots", "coeffs", "end_index", "initial_value", "channels_info", "piecewise_constant")


def _observations(batch=4, length=12, channels=2, seed=0):
    """A padded batch on one shared irregular grid, some values missing, one channel never observed by sample 1."""
    g = torch.Generator().manual_seed(seed)
    times = torch.cumsum(0.3 + torch.rand(length, generator=g, dtype=F64), 0).expand(batch, length).clone()
    values = torch.randn(batch, length, channels, generator=g, dtype=F64)
    values[torch.rand(batch, length, channels, generator=g) < 0.2] = float("nan")
    values[1, :, 1] = float("nan")
    return times, values, torch.tensor([length, length - 3, length, 5][:batch])


def _same(a, b) -> bool:
    """Two controls equal bitwise in every field (NaN nowhere: controls are finite)."""
    for field in CONTROL_FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if x is None or y is None or x.dtype != y.dtype or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


# ---------------------------------------------------------------------------------------------------
# every object against its string spelling

SPELLINGS = [  # (keywords with the name, the object)
    (dict(interpolation="natural_cubic"), NaturalCubic()),
    (dict(interpolation="hermite_cubic"), HermiteCubic()),
    (dict(), HermiteCubic()),  # the default
    (dict(interpolation="linear"), Linear()),
    (dict(interpolation="rectilinear"), Rectilinear()),
    (dict(interpolation="logsignature"), LogSignature()),
    (
        dict(interpolation="logsignature", depth=1, step=3, window_start_values=True),
        LogSignature(depth=1, step=3, window_start_values=True),
    ),
    (
        dict(interpolation="logsignature", step=2, logsig_backend="pysiglib", logsig_basis="lyndon_words"),
        LogSignature(step=2, backend="pysiglib", basis="lyndon_words"),
    ),
]


def test_the_built_in_interpolations_are_registered_under_their_names():
    assert interpolation_names()[:5] == ("natural_cubic", "hermite_cubic", "linear", "rectilinear", "logsignature")


@pytest.mark.parametrize(
    "keywords, interpolation",
    SPELLINGS,
    ids=[f"{k.get('interpolation', 'default')}-{i}" for i, (k, _) in enumerate(SPELLINGS)],
)
@pytest.mark.parametrize("parametrization", ["time", "index"])
def test_each_object_builds_the_control_of_its_string_spelling_bitwise(keywords, interpolation, parametrization):
    if interpolation == LogSignature(step=2, backend="pysiglib", basis="lyndon_words"):
        pytest.importorskip("pysiglib")
    times, values, lengths = _observations()
    common = dict(parametrization=parametrization, mask_channel=True, unobserved_fill=0.5)
    by_name = build_control(times, values, lengths, **keywords, **common)
    options = ControlOptions(interpolation=interpolation, **common)
    assert parse_control_options({**keywords, **common}) == options
    for control in (
        build_control(times, values, lengths, options),
        build_control(times, values, lengths, interpolation=interpolation, **common),
        build_control(times, values, lengths, **options.to_keywords()),
    ):
        assert _same(control, by_name)


def test_the_interpolations_options_change_the_control_as_their_keywords_do():
    """The mapping keyword -> field is not the identity for every option (logsig_backend is backend): each
    non-default field must change the control as its keyword does, or the spellings would agree by doing nothing."""
    times, values, lengths = _observations()
    default = build_control(times, values, lengths, interpolation=LogSignature(), unobserved_fill=0.0)
    for field, value, keyword in (
        ("depth", 1, "depth"),
        ("step", 3, "step"),
        ("window_start_values", True, "window_start_values"),
        ("basis", "expand", "logsig_basis"),
    ):
        changed = build_control(
            times, values, lengths, interpolation=LogSignature(**{field: value}), unobserved_fill=0.0
        )
        spelt = build_control(
            times, values, lengths, interpolation="logsignature", unobserved_fill=0.0, **{keyword: value}
        )
        assert not _same(changed, default) and _same(changed, spelt), field


# ---------------------------------------------------------------------------------------------------
# refusals, by field name


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("time_channel", "no", "time_channel must be True or False, got 'no'"),
        ("mask_channel", 1, "mask_channel must be True or False, got 1"),
        ("recency_channel", None, "recency_channel must be True or False, got None"),
        ("intensity_channel", "yes", "intensity_channel must be True, False or 'auto'.*got 'yes'"),
        ("count_unit", 0.0, "count_unit must be None or a positive finite number, got 0.0"),
        ("count_unit", True, "count_unit must be None or a positive finite number, got True"),
        ("count_unit", float("inf"), "count_unit must be None or a positive finite number, got inf"),
        ("missing", "drop", "missing must be one of .*'interpolate'.*got 'drop'"),
        ("unobserved_fill", float("nan"), "unobserved_fill must be None, a finite number.*got nan"),
        ("unobserved_fill", "median", "unobserved_fill must be None, a finite number.*'mean'.*got 'median'"),
        ("unobserved_fill", [], "unobserved_fill must be None.*got \\[\\]"),
        ("unobserved_fill", [1.0, float("inf")], "unobserved_fill must be None.*got \\[1.0, inf\\]"),
        ("parametrization", "seconds", "parametrization must be 'time' or 'index', got 'seconds'"),
        ("time_unit", 0.0, "time_unit must be a positive finite number, None or 'auto'.*got 0.0"),
        ("time_unit", "hours", "time_unit must be a positive finite number, None or 'auto'.*got 'hours'"),
        ("time_unit", True, "time_unit must be a positive finite number.*got True"),
    ],
)
def test_control_options_refuse_a_bad_value_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        ControlOptions(**{field: value})
    with pytest.raises(ValueError, match=message):  # the keyword spelling is read by the same checks
        parse_control_options({field: value})


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(depth=0), "depth must be a positive integer"),
        (dict(depth=3), "depth 3 is not available with backend='torch'"),
        (dict(step=0), "step must be a positive integer, got 0"),
        (dict(step=2.0), "step must be a positive integer, got 2.0"),
        (dict(backend="numpy"), "backend must be one of"),
        (dict(basis="words"), "basis must be one of"),
        (dict(window_start_values="yes"), "window_start_values must be True or False, got 'yes'"),
    ],
)
def test_log_signature_options_are_checked_when_the_object_is_made(change, message):
    with pytest.raises(ValueError, match=message):
        LogSignature(**change)


def test_options_that_do_not_go_together_are_refused_naming_both():
    with pytest.raises(ValueError, match="missing='zero' needs mask_channel=True"):
        ControlOptions(missing="zero")
    with pytest.raises(ValueError, match="interpolation='rectilinear' needs time_channel=True"):
        ControlOptions(interpolation=Rectilinear(), time_channel=False)
    with pytest.raises(TypeError, match="interpolation must be an Interpolation object.*the name 'linear' is read by"):
        ControlOptions(interpolation="linear")  # names are read at the edges only


def test_the_parser_names_an_unknown_option_and_an_option_of_another_interpolation():
    with pytest.raises(UnknownOptionError, match="unknown control option 'mask_chanel'; did you mean 'mask_channel'"):
        parse_control_options({"mask_chanel": True})
    with pytest.raises(ValueError, match="interpolation must be one of"):
        parse_control_options({"interpolation": "cubic"})
    with pytest.raises(
        ValueError,
        match=r"depth is an option of the log-signature interpolation \('logsignature'\), "
        r"not of a linear control",
    ):
        parse_control_options({"interpolation": "linear", "depth": 2})
    with pytest.raises(TypeError, match="control options must be a mapping"):
        parse_control_options(["linear"])


def test_keywords_refine_the_options_they_are_given_on_top_of():
    nrde = registered_control_options("nrde")  # depth-1 windows of 2 steps
    assert nrde.interpolation == LogSignature(depth=1, step=2)
    assert parse_control_options({"step": 4}, base=nrde).interpolation == LogSignature(depth=1, step=4)
    # the base's interpolation named: its options kept; another one named: that one's defaults
    assert parse_control_options({"interpolation": "logsignature", "step": 4}, base=nrde).interpolation == LogSignature(
        depth=1, step=4
    )
    assert parse_control_options({"interpolation": "linear"}, base=nrde) == dataclasses.replace(
        nrde, interpolation=Linear()
    )
    # an object is complete: none of the base interpolation's options survive in it
    assert parse_control_options({"interpolation": LogSignature(step=8)}, base=nrde).interpolation == LogSignature(
        step=8
    )
    # a registry model's options with the keywords on top: what model_inputs builds
    times, values, lengths = _observations()
    windows = LogSignature(depth=1, step=4)
    assert _same(
        model_inputs("nrde", times, values, lengths, step=4, unobserved_fill=0.0),
        build_control(times, values, lengths, interpolation=windows, unobserved_fill=0.0),
    )


def test_values_of_the_training_split_are_options_that_build_control_refuses_unresolved():
    options = ControlOptions(time_unit="auto", intensity_channel="auto", unobserved_fill="mean")
    assert options.unresolved == ("time_unit", "intensity_channel", "unobserved_fill")
    times, values, lengths = _observations()
    for field, word in (("time_unit", "auto"), ("intensity_channel", "auto"), ("unobserved_fill", "mean")):
        with pytest.raises(ValueError, match=f"{field}={word!r} is resolved .*training split"):
            build_control(times, values, lengths, **{field: word})
    # InputSpec.fit resolves every one of them, and a fitted spec holds none
    with pytest.warns(UserWarning, match="channel 1 in 1 of 4 training samples never observed"):
        spec = InputSpec.fit("ncde", _Data(times, values, lengths), control=options)
    assert spec.control.unresolved == () and spec.time_unit > 0 and isinstance(spec.control.unobserved_fill, tuple)
    with pytest.raises(ValueError, match="unobserved_fill='mean' is resolved"):
        dataclasses.replace(spec, control=dataclasses.replace(spec.control, unobserved_fill="mean"))


class _Data:
    def __init__(self, times, values, lengths):
        self.times, self.values, self.lengths = times, values, lengths


# ---------------------------------------------------------------------------------------------------
# a new interpolation, written and registered in this test alone


@dataclasses.dataclass(frozen=True)
class PiecewiseConstant(PolynomialInterpolation):
    """Each point's channels held until the next point ("previous"), or the next point's from the previous one on
    ("next")."""

    hold: str = "previous"

    def __post_init__(self):
        if self.hold not in ("previous", "next"):
            raise ValueError(f"hold must be 'previous' or 'next', got {self.hold!r}")

    def pieces(self, path, knots, lengths=None):
        points = torch.nan_to_num(path, nan=0.0)
        held = points[:, :-1] if self.hold == "previous" else points[:, 1:]
        zeros = torch.zeros_like(held)
        return torch.stack([held, zeros, zeros, zeros], dim=-2)


def test_a_new_interpolation_registered_in_a_test_is_built_by_name_and_read_by_a_model():
    times, values, lengths = _observations()
    values = torch.nan_to_num(values, nan=0.25)  # complete: the held values are the points themselves
    with registered_interpolation("piecewise_constant", PiecewiseConstant):
        for hold, offset in (("previous", 0), ("next", 1)):
            control = build_control(times, values, lengths, interpolation="piecewise_constant", hold=hold)
            assert _same(control, build_control(times, values, lengths, interpolation=PiecewiseConstant(hold)))
            # inside interval i of each sample, X is point i (or i + 1) and dX/ds = 0: computed here, not by the class
            for b, L in enumerate(lengths.tolist()):
                for i in range(L - 1):
                    s = 0.5 * (times[b, i] + times[b, i + 1])
                    expected = torch.cat([times[b, i + offset : i + offset + 1], values[b, i + offset]])
                    torch.testing.assert_close(control.evaluate(s)[b], expected, rtol=0, atol=0)
                    assert not control.derivative(s)[b].any()
        with pytest.raises(ValueError, match="hold must be 'previous' or 'next', got 'last'"):
            build_control(times, values, lengths, interpolation="piecewise_constant", hold="last")
        # a registry model reads it by name, as a config row's control: would give it, and its output follows the data
        inputs = model_inputs("delta-ode", times, values, lengths, interpolation="piecewise_constant")
        torch.manual_seed(0)
        model = create_model("delta-ode", inputs, 3, d_model=8, n_heads=2, d_ff=8).double()
        shifted = model_inputs("delta-ode", times, values + 1.0, lengths, interpolation="piecewise_constant")
        with torch.no_grad():
            logits, moved = model(inputs), model(shifted)
        assert logits.shape == (4, 3) and torch.isfinite(logits).all() and not torch.allclose(logits, moved)
        # and a spec saves it by its class name and reads it back
        spec = InputSpec.fit(
            "delta-ode", _Data(times, values, lengths), control={"interpolation": "piecewise_constant", "hold": "next"}
        )
        saved = json.loads(json.dumps(spec.to_dict()))
        assert saved["control"]["interpolation"] == {"type": "PiecewiseConstant", "hold": "next"}
        assert InputSpec.from_dict(saved) == spec
    with pytest.raises(ValueError, match="interpolation must be one of"):  # gone with the block
        build_control(times, values, lengths, interpolation="piecewise_constant")


# ---------------------------------------------------------------------------------------------------
# JSON round trips


@pytest.mark.parametrize(
    "options",
    [
        ControlOptions(),
        ControlOptions(interpolation=NaturalCubic(), mask_channel=True, missing="zero", unobserved_fill=(0.5, -1.0)),
        ControlOptions(
            interpolation=Linear(),
            intensity_channel=True,
            count_unit=3.0,
            recency_channel=True,
            parametrization="index",
            time_unit=3600.0,
        ),
        ControlOptions(interpolation=Rectilinear(), missing="forward_fill", unobserved_fill=2.0),
        ControlOptions(
            interpolation=LogSignature(depth=1, step=7, basis="expand", window_start_values=True),
            time_channel=False,
            time_unit="auto",
            intensity_channel="auto",
            unobserved_fill="mean",
        ),
    ],
)
def test_options_round_trip_through_json_field_by_field(options):
    saved = json.loads(json.dumps(options.to_dict()))
    assert saved["interpolation"]["type"] == type(options.interpolation).__name__
    assert ControlOptions.from_dict(saved) == options
    with pytest.raises(ValueError, match="need exactly the fields"):
        ControlOptions.from_dict({k: v for k, v in saved.items() if k != "missing"})
    with pytest.raises(UnknownOptionError, match="unknown field 'steps' of interpolation LogSignature"):
        ControlOptions.from_dict({**saved, "interpolation": {"type": "LogSignature", "steps": 4}})


# What `InputSpec.to_dict` wrote before ControlOptions (commit a88d6f3, issue 36's run folders), for
# `InputSpec.fit("delta-rde", _spec_data(), control={"step": 3, "parametrization": "index",
# "intensity_channel": "auto"}, time_unit="auto")`: the control as build_control keywords, the interpolation by name.
SPEC_WRITTEN_BEFORE = {
    "model": "delta-rde",
    "control": {
        "unobserved_fill": [-0.0017264886093499, 0.045443285293735355],
        "interpolation": "logsignature",
        "time_channel": True,
        "depth": 2,
        "step": 3,
        "window_start_values": True,
        "parametrization": "index",
        "intensity_channel": True,
        "count_unit": 11.0,
    },
    "time_unit": 11.612526099334369,
    "channel_mean": None,
    "channel_scale": None,
    "reads_static": False,
}


def _spec_data():
    g = torch.Generator().manual_seed(0)
    times = torch.cumsum(0.5 + torch.rand(6, 12, generator=g, dtype=F64), 1)
    values = torch.randn(6, 12, 2, generator=g, dtype=F64)
    values[1, :, 1] = float("nan")
    values[2, 3, 0] = float("nan")
    return _Data(times, values, torch.tensor([12, 10, 12, 7, 12, 9]))


def test_a_spec_saved_in_the_former_keyword_form_is_migrated_to_the_spec_fit_makes_today():
    from neuralde_seq.migration import migrate_checkpoint

    data = _spec_data()
    with pytest.warns(UserWarning, match="never observed"):
        fitted = InputSpec.fit(
            "delta-rde",
            data,
            control={"step": 3, "parametrization": "index", "intensity_channel": "auto"},
            time_unit="auto",
        )
    # the reader knows one form (every field; the interpolation as {"type": ...}): older files are migrated
    with pytest.raises(ValueError, match="an input spec needs exactly the fields"):
        InputSpec.from_dict(SPEC_WRITTEN_BEFORE)
    with_every_field = {**SPEC_WRITTEN_BEFORE, "fill_step": None, "static_mean": None, "static_scale": None}
    with pytest.raises(ValueError, match=r"input spec: control: .*the interpolation as \{'type': \.\.\.\}"):
        InputSpec.from_dict(with_every_field)
    checkpoint = {"model_state": {}, "config": {"model": "delta-rde", "input_spec": SPEC_WRITTEN_BEFORE}}
    old = InputSpec.from_dict(migrate_checkpoint(checkpoint)["config"]["input_spec"])
    assert old == fitted
    assert old.control.interpolation == LogSignature(depth=2, step=3, window_start_values=True)
    assert _same(old.transform(data), fitted.transform(data))
    # today's form: the interpolation by class and fields, every option by field
    saved = json.loads(json.dumps(fitted.to_dict()))
    assert saved["control"]["interpolation"] == {
        "type": "LogSignature",
        "depth": 2,
        "step": 3,
        "backend": "torch",
        "basis": "lyndon_brackets",
        "window_start_values": True,
    }
    assert InputSpec.from_dict(saved) == fitted
    with pytest.raises(ValueError, match="input spec: control: unobserved_fill='mean' is resolved"):
        InputSpec.from_dict({**saved, "control": {**saved["control"], "unobserved_fill": "mean"}})
    with pytest.raises(ValueError, match="input spec: control: time_unit must be null"):
        InputSpec.from_dict({**saved, "control": {**saved["control"], "time_unit": 2.0}})
