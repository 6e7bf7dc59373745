"""Time warps of observation times (neuralde_seq.data.transforms.time_warps), their runner variants, and the
warped-adding task.

Every expected value is computed here from the definitions, in float64: the uniform map t0 + a (t − t0), the smooth
warp's sine series and the piecewise warp's integral of its slopes from the drawn parameters (numpy), the
synthetic task's labels from the generated value and mark channels. The model properties are the ones a wrong warp
would break: a neural CDE without a time channel reads only the path's image, so a warp of the times leaves its
output unchanged (exactly for a linear path, and for any control under uniform rescaling), while the time-warp gated
RNN's output changes, and under a uniform warp by a is given back by the gate scaled by 1/a.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from neuralde_seq.data import IrregularDataset, load_japanese_vowels
from neuralde_seq.data.protocols import TASKS, load_task, warped_adding_splits
from neuralde_seq.data.synthetic import WARPED_ADDING_CLASSES, warped_adding
from neuralde_seq.data.transforms.time_warps import TimeWarp, time_warp, warp_parameters, warp_times
from neuralde_seq.models import create_model, model_inputs
from neuralde_seq.training.config import ConfigError, validate_config
from neuralde_seq.training.runner import run_benchmark

DTYPE = torch.float64
RANDOM_KINDS = [
    {"kind": "smooth", "strength": 0.6, "seed": 3},
    {"kind": "piecewise", "pieces": 4, "seed": 5},
    {"kind": "smooth", "strength": 0.3, "modes": 5, "seed": 1, "factor": 2.5},
    {"kind": "piecewise", "pieces": 3, "max_slope": 3.0, "seed": 2, "factor": 0.5},
]


def _irregular(seed=0, lengths=(7, 1, 4, 12, 2), channels=2):
    """Samples on their own irregular times (offset starts), some values missing, padding to 12."""
    rng = np.random.default_rng(seed)
    series = [rng.normal(size=(channels, n)) for n in lengths]
    times = [rng.uniform(-3, 3) + np.cumsum(rng.uniform(0.2, 2.0, size=n)) for n in lengths]
    ds = IrregularDataset.from_sequences(
        series, [i % 2 for i in range(len(lengths))], ["a", "b"], times=times, dtype=DTYPE
    )
    ds.values[0, 2, 1] = float("nan")
    ds.values[3, 5, :] = float("nan")
    return ds, times


def _valid(ds, i):
    return ds.times[i, : int(ds.lengths[i])].numpy()


# ------------------------------------------------------------------------------------------------ the maps
@pytest.mark.parametrize("a", [0.25, 0.5, 3.0, 4.0, 1 / 3])
def test_uniform_warp_is_the_affine_map_and_a_then_one_over_a_is_the_identity(a):
    ds, times = _irregular()
    warped = time_warp(ds, {"kind": "uniform", "factor": a})
    for i, t in enumerate(times):
        np.testing.assert_allclose(_valid(warped, i), t[0] + a * (t - t[0]), rtol=1e-14, atol=1e-13)
    back = time_warp(warped, {"kind": "uniform", "factor": 1 / a})
    for i, t in enumerate(times):
        np.testing.assert_allclose(_valid(back, i), t, rtol=1e-14, atol=1e-13)
    # factor 1 gives the times back bit for bit
    assert torch.equal(time_warp(ds, {"kind": "uniform", "factor": 1}).times, ds.times)


@pytest.mark.parametrize(
    "spec",
    [dict(spec, per_sample=per_sample) for spec in RANDOM_KINDS for per_sample in (True, False)]
    + [{"kind": "uniform", "factor": 0.3}],
)
def test_every_warp_is_strictly_increasing_and_keeps_the_window(spec):
    per_sample = spec.get("per_sample", True)  # a uniform warp maps each sample's own window
    ds, times = _irregular(seed=4)
    warped = time_warp(ds, spec).times
    factor = spec.get("factor", 1.0)
    assert (warped[:, 1:] > warped[:, :-1]).all()  # padding included
    firsts = [t[0] for t in times]
    lasts = [t[-1] for t in times]
    if spec["kind"] == "uniform" or per_sample:
        for i, t in enumerate(times):
            assert warped[i, 0].item() == t[0]
            expected_end = t[-1] if factor == 1 else t[0] + factor * (t[-1] - t[0])
            assert warped[i, len(t) - 1].item() == pytest.approx(expected_end, rel=1e-14, abs=1e-13)
            if factor == 1:
                assert warped[i, len(t) - 1].item() == t[-1]  # exactly
    else:  # one map of the common window [min t0, max T]
        start, end = min(firsts), max(lasts)
        i_first, i_last = int(np.argmin(firsts)), int(np.argmax(lasts))
        assert warped[i_first, 0].item() == start
        assert warped[i_last, len(times[i_last]) - 1].item() == pytest.approx(start + factor * (end - start), rel=1e-14)
        # the same map for every sample: a time two samples share is warped to the same time
        shared = time_warp(
            ds.replace(
                times=ds.times[[3]].expand(5, -1).clone(),
                lengths=torch.full((5,), 12),
                values=ds.values[[3]].expand(5, -1, -1).clone(),
            ),
            spec,
        ).times
        assert (shared == shared[0]).all()


def test_smooth_warp_with_strength_zero_is_the_identity():
    ds, _ = _irregular(seed=2)
    for per_sample in (True, False):
        warped = time_warp(ds, {"kind": "smooth", "strength": 0.0, "seed": 9, "per_sample": per_sample})
        assert torch.equal(warped.times, ds.times)


def _smooth_tau(u, coefficients):
    k = np.arange(1, len(coefficients) + 1)
    return u + (coefficients[None, :] * np.sin(np.pi * k[None, :] * u[:, None]) / (np.pi * k[None, :])).sum(1)


def _piecewise_tau(u, slopes):
    """∫_0^u s(v) dv with s = slopes[p] on [p/P, (p+1)/P): the overlap of [0, u] with each piece times its slope."""
    pieces = len(slopes)
    edges = np.arange(pieces + 1) / pieces
    overlap = np.clip(u[:, None], edges[None, :-1], edges[None, 1:]) - edges[None, :-1]
    return (overlap * slopes[None, :]).sum(1)


@pytest.mark.parametrize("spec", RANDOM_KINDS)
def test_random_warps_follow_their_formula_from_the_drawn_parameters(spec):
    ds, times = _irregular(seed=6)
    warp = TimeWarp.from_dict(spec)
    warped = time_warp(ds, warp)
    parameters = warp_parameters(warp, len(times)).numpy()
    for i, t in enumerate(times):
        if len(t) == 1:
            assert warped.times[i, 0].item() == t[0]
            continue
        u = (t - t[0]) / (t[-1] - t[0])
        tau = _smooth_tau(u, parameters[i]) if warp.kind == "smooth" else _piecewise_tau(u, parameters[i])
        np.testing.assert_allclose(_valid(warped, i), t[0] + warp.factor * (t[-1] - t[0]) * tau, rtol=1e-12, atol=1e-12)
    if warp.kind == "smooth":
        np.testing.assert_allclose(np.abs(parameters).sum(1), warp.strength, rtol=1e-13)
        # the local speed stays within [1 − strength, 1 + strength] (mean value theorem on every gap)
        u = np.linspace(0, 1, 2001)
        for row in parameters:
            speed = np.diff(_smooth_tau(u, row)) / np.diff(u)
            assert speed.min() >= 1 - warp.strength - 1e-9 and speed.max() <= 1 + warp.strength + 1e-9
    else:
        bound = warp.max_slope**2
        assert (parameters >= 1 / bound).all() and (parameters <= bound).all()
        np.testing.assert_allclose(parameters.mean(1), 1.0, rtol=1e-13)


def test_piecewise_warp_is_continuous_with_the_drawn_slopes():
    # one sample on a fine grid of [0, 1]: gaps inside a piece are scaled by its slope, a gap across a break by
    # both slopes in proportion (continuity: no jump at the breaks)
    pieces = 5
    t = np.linspace(0.0, 1.0, 401)
    ds = IrregularDataset(
        times=torch.tensor(t)[None],
        values=torch.zeros(1, 401, 1, dtype=DTYPE),
        lengths=torch.tensor([401]),
        labels=torch.tensor([0]),
        class_names=["a"],
    )
    warp = {"kind": "piecewise", "pieces": pieces, "max_slope": 4.0, "seed": 11}
    warped = time_warp(ds, warp).times[0].numpy()
    slopes = warp_parameters(warp, 1)[0].numpy()
    assert slopes.max() / slopes.min() > 1.5  # the pieces really differ
    gaps, ratio = np.diff(t), np.diff(warped) / np.diff(t)
    piece_of_gap = np.floor(t[:-1] * pieces + 1e-9).astype(int)
    inside = np.floor(t[1:] * pieces - 1e-9).astype(int) == piece_of_gap
    np.testing.assert_allclose(ratio[inside], slopes[piece_of_gap[inside]], rtol=1e-9)
    # the break points: the warped times at p/P are the running sums of slopes/P
    breaks = np.arange(1, pieces) * (400 // pieces)
    np.testing.assert_allclose(warped[breaks], np.cumsum(slopes)[:-1] / pieces, rtol=1e-12)
    assert np.all(gaps > 0)


def test_seeds_reproduce_and_per_sample_draws_do_not_depend_on_the_batch():
    ds, _ = _irregular(seed=1)
    for spec in RANDOM_KINDS:
        first = time_warp(ds, spec).times
        assert torch.equal(first, time_warp(ds, spec).times)
        other = time_warp(ds, dict(spec, seed=spec["seed"] + 1)).times
        assert not torch.equal(first, other)
        # sample b gets draw b: the first three samples warped alone get the same times
        assert torch.equal(time_warp(ds.subset([0, 1, 2]), spec).times, first[:3])


def test_values_padding_and_input_are_untouched():
    ds, times = _irregular(seed=3)
    before = ds.times.clone(), ds.values.clone()
    for spec in RANDOM_KINDS + [{"kind": "uniform", "factor": 4}]:
        warped = time_warp(ds, spec)
        assert torch.equal(torch.isnan(warped.values), torch.isnan(ds.values))  # NaN stays NaN, padding too
        assert torch.equal(warped.values.nan_to_num(7.0), ds.values.nan_to_num(7.0))
        assert torch.equal(warped.lengths, ds.lengths) and torch.equal(warped.labels, ds.labels)
        assert warped.meta["transforms"][-1] == {"time_warp": TimeWarp.from_dict(spec).to_dict()}
        for i, t in enumerate(times):  # padding continues the warped grid with the warped last step
            n = len(t)
            row = warped.times[i].numpy()
            step = row[n - 1] - row[n - 2] if n > 1 else None
            if step is None:  # a one-point sample keeps its times
                np.testing.assert_array_equal(row, ds.times[i].numpy())
            else:
                np.testing.assert_allclose(row[n:], row[n - 1] + step * np.arange(1, 13 - n), rtol=1e-13)
    assert torch.equal(ds.times, before[0]) and torch.equal(ds.values.nan_to_num(7.0), before[1].nan_to_num(7.0))


def test_warp_refuses_gaps_below_the_dtype_resolution():
    t = torch.tensor([[0.0, 1.0, 2.0]], dtype=torch.float32) + 1e6
    with pytest.raises(ValueError, match="not strictly increasing in torch.float32"):
        warp_times(t, torch.tensor([3]), {"kind": "uniform", "factor": 1e-7})


# --------------------------------------------------------------------------------------- models under warps
def _jv_batch(count=6):
    _, test = load_japanese_vowels(dtype=DTYPE)
    return test.subset(list(range(0, 37 * count, 37)))  # lengths differ, one shared index grid


def _outputs(name, ds, seed=0, **control):
    control_input = model_inputs(name, ds.times, ds.values, ds.lengths, **control)
    torch.manual_seed(seed)
    model = create_model(name, control_input, 3, hidden=6).to(DTYPE)
    with torch.no_grad():
        return model(control_input), model, control_input


SHARED_WARPS = [
    {"kind": "uniform", "factor": 0.25},
    {"kind": "uniform", "factor": 4.0},
    {"kind": "smooth", "strength": 0.7, "seed": 0, "per_sample": False},
    {"kind": "piecewise", "pieces": 4, "max_slope": 2.0, "seed": 1, "per_sample": False},
]


@pytest.mark.parametrize("spec", SHARED_WARPS)
def test_cde_without_time_channel_ignores_warps_and_the_gated_rnn_does_not(spec):
    ds = _jv_batch()
    warped = time_warp(ds, spec)
    # Linear path: each rk4 step on a piece sees f(z)·ΔX whatever the piece's length, so any warp leaves the
    # solution unchanged. Hermite cubic: its derivative estimates read ratios of neighbouring gaps, which only a
    # uniform rescaling keeps.
    methods = ["linear"] + (["hermite_cubic"] if spec["kind"] == "uniform" else [])
    for method in methods:
        plain, _, _ = _outputs("ncde", ds, time_channel=False, interpolation=method)
        moved, _, _ = _outputs("ncde", warped, time_channel=False, interpolation=method)
        torch.testing.assert_close(moved, plain, rtol=1e-6, atol=1e-9)
        assert plain.abs().max() > 1e-3
    # with the time channel the CDE sees the warp
    plain, _, _ = _outputs("ncde", ds)
    moved, _, _ = _outputs("ncde", warped)
    assert (moved - plain).abs().max() > 1e-3
    gated, model, _ = _outputs("warp-gated-ode", ds, time_channel=False)
    gated_warped, _, warped_input = _outputs("warp-gated-ode", warped, time_channel=False)
    assert (gated_warped - gated).abs().max() > 1e-3
    if spec["kind"] == "uniform":  # the gate scaled by 1/a undoes a uniform warp by a (the chapter's Eq. 6.94)
        model.rate_scale = 1 / spec["factor"]
        with torch.no_grad():
            torch.testing.assert_close(model(warped_input), gated, rtol=1e-6, atol=1e-9)


# ---------------------------------------------------------------------------------------------- the runner
def _tiny_config(**changes):
    cfg = {
        "name": "tiny-warps",
        "task": "japanese-vowels",
        "task_options": {"drop_rate": 0.3},
        "seeds": [0],
        "training": {"epochs": 1, "lr": 1e-2, "batch_size": 64, "eval_batch_size": 128},
        "models": [
            {"label": "gated", "model": "warp-gated-ode", "options": {"hidden": 4}},
            {"label": "GRU-dt", "model": "gru-dt", "options": {"hidden": 4}},
        ],
        "evaluate": [
            {"label": "same", "time_warp": {"kind": "uniform", "factor": 1}},
            {"time_warp": {"kind": "uniform", "factor": 2}},
            {"label": "smooth", "time_warp": {"kind": "smooth", "strength": 0.5, "seed": 0, "per_sample": False}},
            {
                "label": "drop+piecewise",
                "drop_rate": 0.5,
                "time_warp": {"kind": "piecewise", "pieces": 3, "seed": 1, "per_sample": False},
            },
        ],
    }
    cfg.update(changes)
    return cfg


def test_runner_writes_time_warp_variants_and_factor_one_is_the_test_set(tmp_path):
    results = run_benchmark(_tiny_config(), out_dir=tmp_path, max_steps=2, progress=False)
    assert [v["label"] for v in results["config"]["evaluate"]] == ["same", "uniform x2", "smooth", "drop+piecewise"]
    assert results["config"]["evaluate"][2]["time_warp"] == {
        "kind": "smooth",
        "strength": 0.5,
        "modes": 3,
        "seed": 0,
        "per_sample": False,
        "factor": 1.0,
    }
    table = (tmp_path / "results.md").read_text()
    assert "test: uniform x2" in table and "test: drop+piecewise" in table and "Time warps" in table
    for label in ("gated", "GRU-dt"):
        (run,) = (tmp_path / "runs" / label).glob("seed0-*/result.json")
        metrics = json.loads(run.read_text())["metrics"]
        for variant in ("same", "uniform x2", "smooth", "drop+piecewise"):
            assert metrics[variant]["num_samples"] == 370
        assert metrics["same"] == metrics["test"]  # the identity warp is the test set, bit for bit
        if label == "gated":  # reads the times through its control: the warp changes its outputs
            assert metrics["uniform x2"]["loss"] != metrics["test"]["loss"]


def test_test_variant_warps_the_raw_times_and_standardises_as_the_test_set():
    data = load_task("japanese-vowels", seed=0, drop_rate=0.3)
    warp = {"kind": "smooth", "strength": 0.4, "seed": 2}
    variant = data.test_variant(time_warp=warp)
    expected = time_warp(data.splits.test.to(dtype=DTYPE), warp)
    torch.testing.assert_close(variant.times.double(), expected.times, rtol=1e-6, atol=1e-5)
    assert torch.equal(variant.values.nan_to_num(9.0), data.splits.test.values.nan_to_num(9.0))
    with pytest.raises(ValueError, match="time_warp.factor must be a positive"):
        data.test_variant(time_warp={"kind": "uniform", "factor": -1})


@pytest.mark.parametrize(
    "warp, message",
    [
        ({"kind": "shear", "factor": 2}, "evaluate[0].time_warp.kind must be one of uniform, smooth, piecewise"),
        ({"kind": "uniform", "factor": 0}, "evaluate[0].time_warp.factor must be a positive finite number"),
        ({"kind": "uniform", "factor": -2.0}, "evaluate[0].time_warp.factor must be a positive finite number"),
        ({"kind": "uniform"}, "evaluate[0].time_warp.factor is required"),
        ({"kind": "smooth", "strength": 0.5, "per_sample": False}, "evaluate[0].time_warp.seed is required"),
        ({"kind": "piecewise", "pieces": 3}, "evaluate[0].time_warp.seed is required"),
        ({"kind": "smooth", "strength": 1.0, "seed": 0}, "evaluate[0].time_warp.strength must be a number in [0, 1)"),
        ({"kind": "piecewise", "pieces": 0, "seed": 0}, "evaluate[0].time_warp.pieces must be a positive integer"),
        ({"kind": "uniform", "factor": 2, "seed": 0}, "evaluate[0].time_warp: key(s) 'seed' do not apply"),
        ("fast", "evaluate[0].time_warp must be a mapping"),
    ],
)
def test_time_warp_config_errors_name_the_key(warp, message):
    with pytest.raises(ConfigError) as info:
        validate_config(_tiny_config(evaluate=[{"time_warp": warp}]))
    assert message in str(info.value)


def test_per_sample_warps_are_refused_for_controls_parametrised_by_time():
    per_sample = {"kind": "smooth", "strength": 0.5, "seed": 0}
    with pytest.raises(
        ConfigError,
        match=r"evaluate\[0\].time_warp: a per-sample smooth warp .* models\[0\] "
        r"\(gated, model warp-gated-ode\) .*time_warp.per_sample: false",
    ):
        validate_config(_tiny_config(evaluate=[{"time_warp": per_sample}]))
    # observation models, and controls parametrised by observation index, take per-sample times
    rows = [
        {"label": "GRU-dt", "model": "gru-dt"},
        {"label": "gated", "model": "warp-gated-ode", "control": {"parametrization": "index"}},
    ]
    validate_config(_tiny_config(models=rows, evaluate=[{"time_warp": per_sample}]))


# ------------------------------------------------------------------------------------- the warped-adding task
def _runs(row):
    """(value, length) of each run of equal consecutive entries."""
    starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    return row[starts], np.diff(np.r_[starts, len(row)])


@pytest.mark.parametrize("strength", [0.0, 0.5])
def test_warped_adding_labels_and_events_follow_the_definition(strength):
    events, duration = 12, 4
    data = warped_adding(200, events, event_duration=duration, warp_strength=strength, seed=0)
    grid = events * duration
    assert data.times.shape == (200, grid)
    assert torch.equal(data.times, torch.arange(grid, dtype=torch.float32).expand(200, -1))
    values, marks = data.values[..., 0].numpy(), data.values[..., 1].numpy()
    for i in range(200):
        levels, lengths = _runs(values[i])
        assert len(levels) == events  # every event covers a grid point; neighbours differ
        low, high = math.floor(duration * (1 - strength)), math.ceil(duration * (1 + strength))
        assert lengths.min() >= low and lengths.max() <= high
        if strength == 0:
            assert (lengths == duration).all()
        marked = np.unique(values[i][marks[i] == 1])
        assert len(marked) == 2 and set(np.unique(marks[i])) == {0.0, 1.0}
        positions = [int(np.flatnonzero(levels == m)[0]) for m in marked]
        assert min(positions) < events // 2 <= max(positions)  # one mark in each half of the events
        assert int(data.targets[i]) == int(marked.sum() > 1)
    share = data.targets.double().mean().item()
    assert 0.35 < share < 0.65  # the threshold is the median of the sum


def test_warped_adding_is_reproducible_and_checks_its_arguments():
    a, b = warped_adding(20, seed=3), warped_adding(20, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a.values, warped_adding(20, seed=4).values)
    with pytest.raises(ValueError, match="event_duration · \\(1 − warp_strength\\) must be at least 1"):
        warped_adding(5, 8, event_duration=2, warp_strength=0.6)
    with pytest.raises(ValueError, match="warp_strength must be a number in \\[0, 1\\)"):
        warped_adding(5, warp_strength=1.0)


def test_warped_adding_task_splits_are_fixed_and_standardise_only_the_values():
    assert TASKS["warped-adding"].metric == "accuracy" and not TASKS["warped-adding"].data_depend_on_seed
    options = dict(num_train=60, num_val=20, num_test=30, num_events=8)
    data = load_task("warped-adding", seed=5, **options)
    again = load_task("warped-adding", seed=6, **options)
    for part, other in zip(data.splits, again.splits):  # the same data for every training seed
        assert torch.equal(part.values, other.values) and torch.equal(part.labels, other.labels)
    raw = warped_adding_splits(**options)
    train, val, test = data.splits
    assert (len(train), len(val), len(test)) == (60, 20, 30) and train.class_names == list(WARPED_ADDING_CLASSES)
    assert not torch.equal(raw.train.values[:20], raw.val.values)  # the three sets are different draws
    assert set(torch.unique(test.values[..., 1]).tolist()) == {0.0, 1.0}  # marks kept raw
    mean = raw.train.values[..., 0].double().mean()
    std = raw.train.values[..., 0].double().std(unbiased=False)
    torch.testing.assert_close(
        test.values[..., 0].double(), (raw.test.values[..., 0].double() - mean) / std, rtol=1e-5, atol=1e-5
    )
    assert (test.times[:, 1:] > test.times[:, :-1]).all()
