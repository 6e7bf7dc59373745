"""Tests of the benchmark runner, the task registry, subsampling and AUROC.

Every expected value is computed here independently: AUROC by counting pairs, means and sample standard
deviations with the statistics module, subsampled data by indexing the original per sample, and the
aggregated table from the per-run JSON files.
"""

import json
import math
import statistics

import numpy as np
import pytest
import torch

from neuralde_seq.cli import main
from neuralde_seq.data import IrregularDataset, num_dropped, subsample
from neuralde_seq.data.protocols import TASKS, load_task
from neuralde_seq.models import create_model
from neuralde_seq.solvers import RK4
from neuralde_seq.training import auroc, evaluate, load_checkpoint
from neuralde_seq.training.config import ConfigError, apply_overrides, validate_config
from neuralde_seq.training.report import aggregate
from neuralde_seq.training.run import build_model_inputs, fit_and_evaluate


def _run_dir(row_dir, seed):
    """The one run folder of a seed: runs/<row>/seed<k>-<fingerprint>."""
    (found,) = row_dir.glob(f"seed{seed}-*")
    return found


# ------------------------------------------------------------------------------------------------ AUROC
def _pair_auroc(pos, neg):
    """P(score of a positive > score of a negative), ties counting one half: the AUROC by definition."""
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_auroc_binary_and_one_vs_rest_against_pair_counts():
    g = torch.Generator().manual_seed(0)
    labels = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1, 1, 0])
    scores = torch.round(torch.rand(10, generator=g) * 4) / 4  # coarse: ties occur
    pos, neg = scores[labels == 1].tolist(), scores[labels == 0].tolist()
    assert auroc(labels, scores) == pytest.approx(_pair_auroc(pos, neg), abs=1e-12)

    y = torch.tensor([0, 1, 2, 2, 1, 0, 2, 1, 0, 1, 2, 0])
    logits = torch.randn(12, 3, generator=g, dtype=torch.float64)
    probs = torch.softmax(logits, dim=1)
    per_class = [_pair_auroc(probs[y == k, k].tolist(), probs[y != k, k].tolist()) for k in range(3)]
    expected = sum(per_class) / 3  # one-vs-rest, macro average
    assert auroc(y, probs) == pytest.approx(expected, abs=1e-12)

    # evaluate() reports the same AUROC for a model's logits (softmax probabilities)
    class Fixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))

        def forward(self, idx):
            return logits[idx.long().flatten()] + self.w

    result = evaluate(Fixed(), torch.arange(12.0)[:, None], y, batch_size=5)
    assert result["auroc"] == pytest.approx(expected, abs=1e-12) and result["num_samples"] == 12
    # a class absent from the labels leaves the multi-class AUROC undefined
    assert evaluate(Fixed(), torch.arange(4.0)[:, None], torch.tensor([0, 1, 0, 1]), batch_size=5)["auroc"] is None


# ----------------------------------------------------------------------------------------- aggregation
def test_aggregate_mean_and_sample_std():
    values = [0.81, 0.9, 0.855, 0.7]
    out = aggregate(values)
    assert out["mean"] == pytest.approx(statistics.mean(values), abs=1e-15)
    assert out["std"] == pytest.approx(statistics.stdev(values), abs=1e-15)  # ddof = 1
    assert out["n"] == 4
    single = aggregate([0.5])
    assert single["mean"] == 0.5 and single["std"] is None
    with_missing = aggregate([0.5, None, 0.7])
    assert with_missing["n"] == 2 and with_missing["missing"] == 1
    assert with_missing["std"] == pytest.approx(statistics.stdev([0.5, 0.7]))


# ---------------------------------------------------------------------------------- config validation
def _config(**changes):
    cfg = {
        "name": "tiny",
        "task": "japanese-vowels",
        "task_options": {"drop_rate": 0.3},
        "seeds": [0, 1],
        "training": {"epochs": 2, "lr": 1e-2, "batch_size": 64},
        "models": [
            {
                "label": "GRU-dt",
                "model": "gru-dt",
                "options": {"hidden": 8},
                "paper": {"value": 50.0, "std": 2.0, "metric": "accuracy", "source": "made up"},
            },
            {
                "label": "CKCNN",
                "model": "ckcnn",
                "options": {"hidden": 8, "blocks": 1, "kernel_hidden": 8, "omega_0": 10.0, "horizon": 28.0},
                "training": {"lr": 5e-3},
            },
        ],
        "evaluate": [{"label": "drop 50%", "drop_rate": 0.5}, {"label": "half rate", "subsample": 2}],
    }
    cfg.update(changes)
    return cfg


@pytest.mark.parametrize(
    "change, message",
    [
        ({"epochz": 3}, "unknown key(s) 'epochz' in the config"),
        ({"task": "mnist"}, "task 'mnist' is not a known task; known tasks: japanese-vowels, speech-commands"),
        ({"training": {"epochs": 2, "batch_size": 8}}, "models[0].training.lr is required"),
        ({"training": {"epochs": 2, "lr": 0.1, "batch_size": 8, "select_on": "f1"}}, "select_on must be one of"),
        ({"training": {"epochs": 0, "lr": 0.1, "batch_size": 8}}, "models[0].training.epochs must be positive"),
        ({"task_options": {"drop_rate": 1.2}}, "task_options.drop_rate must lie in [0, 1)"),
        ({"task_options": {"intensity": True}}, "unknown key(s) 'intensity' in task_options (task japanese-vowels)"),
        ({"models": [{"model": "transformer"}]}, "models[0].model 'transformer' is not a known model; known models:"),
        ({"models": [{"model": "ncde", "optionz": {}}]}, "unknown key(s) 'optionz' in models[0]"),
        ({"models": [{"model": "ckcnn", "options": {"hiddn": 3}}]}, "'hiddn' in models[0].options (model ckcnn)"),
        (
            {"models": [{"model": "ckcnn", "solver": {"method": "rk4"}}]},
            "models[0].solver: model 'ckcnn' is not solved",
        ),
        ({"models": [{"model": "ncde", "solver": {"methd": "rk4"}}]}, "unknown key(s) 'methd' in models[0].solver"),
        ({"models": [{"model": "ncde"}, {"model": "ncde"}]}, "models[1].label 'ncde' is used by another row"),
        ({"models": [{"model": "ncde", "paper": {"std": 1.0}}]}, "models[0].paper.value is required"),
        ({"evaluate": [{"label": "x"}]}, "evaluate[0] needs drop_rate, subsample, time_warp and/or model"),
        ({"evaluate": [{"subsample": 0}]}, "evaluate[0].subsample must be positive"),
        ({"seeds": [0, 0]}, "seeds contains duplicates"),
    ],
)
def test_config_errors_name_the_bad_key(change, message):
    with pytest.raises(ConfigError) as info:
        validate_config(_config(**change))
    assert message in str(info.value)


def test_config_normalisation_merges_row_training_and_defaults():
    cfg = validate_config(_config(solver={"method": "rk4", "step_size": 0.5}))
    gru, ck = cfg["models"]
    assert gru["training"]["lr"] == 1e-2 and ck["training"]["lr"] == 5e-3
    assert gru["training"]["select_on"] == "accuracy"  # the task's metric by default
    assert gru["training"]["eval_batch_size"] is None and gru["training"]["weight_decay"] == 0.0
    assert gru["paper"]["scale"] == 100.0  # accuracy printed in %
    assert gru["solver"] is None and ck["solver"] is None  # neither model takes a solver


def test_overrides_are_parsed_as_yaml_and_reach_nested_keys():
    cfg = apply_overrides(
        _config(),
        [
            "training.epochs=5",
            "training.lr=1e-3",
            "task_options.drop_rate=0.5",
            "models.1.options.hidden=16",
            "seeds=[3, 4]",
            "training.patience=null",
            "solver.method=dopri5",
        ],
    )
    assert cfg["training"]["epochs"] == 5 and cfg["training"]["lr"] == 1e-3  # "1e-3" read as a number
    assert cfg["task_options"]["drop_rate"] == 0.5 and cfg["models"][1]["options"]["hidden"] == 16
    assert cfg["seeds"] == [3, 4] and cfg["training"]["patience"] is None
    assert cfg["solver"] == {"method": "dopri5"}
    assert _config()["training"]["epochs"] == 2  # the input is not modified
    with pytest.raises(ConfigError, match="models.7 is not an index of a list of 2"):
        apply_overrides(_config(), ["models.7.label=x"])
    with pytest.raises(ConfigError, match="form key.path=value"):
        apply_overrides(_config(), ["training.epochs"])


# ------------------------------------------------------------------------------ subsample and variants
def test_subsample_keeps_exactly_every_kth_time_point():
    rng = np.random.default_rng(0)
    series = [rng.normal(size=(2, n)) for n in (7, 1, 4, 9)]
    times = [np.cumsum(rng.uniform(0.5, 1.5, size=n)) for n in (7, 1, 4, 9)]
    ds = IrregularDataset.from_sequences(series, [0, 1, 0, 1], ["a", "b"], times=times, dtype=torch.float64)
    ds.values[0, 2, 1] = float("nan")
    for k in (1, 2, 3, 10):
        out = subsample(ds, k)
        for i, (s, t) in enumerate(zip(series, times)):
            keep = np.arange(0, s.shape[1], k)
            assert int(out.lengths[i]) == keep.size == math.ceil(s.shape[1] / k)
            expected = ds.values[i, torch.as_tensor(keep)]
            assert torch.equal(torch.isnan(out.values[i, : keep.size]), torch.isnan(expected))
            torch.testing.assert_close(out.values[i, : keep.size].nan_to_num(7.0), expected.nan_to_num(7.0))
            torch.testing.assert_close(out.times[i, : keep.size], torch.as_tensor(t[keep]))
            assert torch.isnan(out.values[i, keep.size :]).all()
        assert torch.equal(out.labels, ds.labels)
    with pytest.raises(ValueError, match="factor must be a positive integer"):
        subsample(ds, 0)


@pytest.fixture(scope="module")
def jv():
    return load_task("japanese-vowels", seed=0, drop_rate=0.3)


def test_test_variants_drop_and_subsample_as_specified(jv):
    test = jv.splits.test
    lengths = test.lengths.tolist()
    # the variant at the training-time options is the test set itself
    same = jv.test_variant()
    assert torch.equal(same.values.nan_to_num(99.0), test.values.nan_to_num(99.0))
    for rate in (0.0, 0.5, 0.7):
        variant = jv.test_variant(drop_rate=rate)
        observed = (~torch.isnan(variant.values)).any(dim=2).sum(dim=1).tolist()
        # JapaneseVowels has no missing values: the drop is the only source of NaN
        assert observed == [n - num_dropped(rate, n) for n in lengths]
        assert torch.equal(variant.labels, test.labels) and torch.equal(variant.lengths, test.lengths)
    half = jv.test_variant(subsample=2)
    assert half.lengths.tolist() == [math.ceil(n / 2) for n in lengths]
    # subsampling the standardised test set gives the same values: standardisation is per channel
    torch.testing.assert_close(half.values.nan_to_num(99.0), subsample(test, 2).values.nan_to_num(99.0))
    # variants are standardised with the *training* statistics, not their own
    mean = torch.tensor(jv.splits.train.meta["standardise"]["mean"])
    std = torch.tensor(jv.splits.train.meta["standardise"]["std"])
    raw_test = load_task("japanese-vowels", seed=0, drop_rate=0.5).splits.test  # other standardisation
    raw = raw_test.values.double() * torch.tensor(raw_test.meta["standardise"]["std"]) + torch.tensor(
        raw_test.meta["standardise"]["mean"]
    )
    torch.testing.assert_close(
        jv.test_variant(drop_rate=0.5).values.double().nan_to_num(99.0),
        ((raw - mean) / std).nan_to_num(99.0),
        rtol=1e-5,
        atol=1e-5,
    )


def test_task_registry_names_and_metrics():
    assert set(TASKS) == {
        "japanese-vowels",
        "speech-commands",
        "physionet-sepsis",
        "eigenworms",
        "character-trajectories",
        "uea",
        "uea-seeded-split",
        "files",
        "warped-adding",
        "icu-records",
    }
    assert TASKS["physionet-sepsis"].metric == "auroc" and TASKS["icu-records"].metric == "auroc"
    assert all(TASKS[t].metric == "accuracy" for t in TASKS if t not in ("physionet-sepsis", "icu-records"))
    with pytest.raises(ValueError, match="unknown option"):
        load_task("japanese-vowels", representation="mfcc")


def test_uea_task_through_the_fixture_archive(tmp_path):
    from fixtures_uea import write_uea_archive

    remotes, truth = write_uea_archive(tmp_path / "src", "BasicMotions", channels=2)
    data = load_task("uea", name="BasicMotions", remotes=remotes, cache_dir=tmp_path / "cache", progress=False)
    train, val, test = data.splits
    assert len(train) + len(val) + len(test) == len(truth["labels"])
    # standardised with the training split's statistics: observed training values have mean 0, std 1
    obs = train.values[~torch.isnan(train.values)].view(-1)
    v = train.values.double()
    for c in range(train.num_channels):
        x = v[..., c][~torch.isnan(v[..., c])]
        assert abs(x.mean().item()) < 1e-5 and abs(x.std(unbiased=False).item() - 1) < 1e-5
    assert obs.numel() > 0


# ------------------------------------------------------------------------------ training and evaluation
def test_fit_and_evaluate_scores_every_test_sample(jv, tmp_path):
    train, val, test = jv.splits
    small = type(jv.splits)(train.subset(torch.arange(40)), val, test.subset(torch.arange(37)))
    fit = fit_and_evaluate(
        "gru-dt",
        small,
        seed=0,
        options={"hidden": 8},
        checkpoint_path=tmp_path / "b.pt",
        training={"epochs": 2, "lr": 1e-2, "batch_size": 16, "eval_batch_size": 10},
        progress=False,
    )
    assert fit["metrics"]["test"]["num_samples"] == 37
    # recompute the test accuracy one sample at a time with the best checkpoint's weights
    model = create_model("gru-dt", 12, 9, hidden=8)
    load_checkpoint(tmp_path / "b.pt", model)
    model.eval()
    inputs = build_model_inputs("gru-dt", small.test)
    with torch.no_grad():
        preds = [int(model(inputs[torch.tensor([i])]).argmax()) for i in range(37)]
    expected = sum(p == int(y) for p, y in zip(preds, small.test.labels)) / 37
    assert fit["metrics"]["test"]["accuracy"] == pytest.approx(expected, abs=1e-12)


def test_fit_and_evaluate_selects_on_accuracy_for_training_settings_without_select_on(jv, tmp_path):
    # TrainingSettings' select_on None stands for the task's metric; fit_and_evaluate, which has no task, selects on
    # accuracy as it does for the other forms of ``training``: the same run as the mapping's
    from neuralde_seq.training.config import TrainingSettings

    train, val, test = jv.splits
    small = type(jv.splits)(train.subset(torch.arange(40)), val, test.subset(torch.arange(37)))
    settings = dict(epochs=2, lr=1e-2, batch_size=16, eval_batch_size=10)
    runs = [
        fit_and_evaluate(
            "gru-dt",
            small,
            seed=0,
            options={"hidden": 8},
            checkpoint_path=tmp_path / f"{k}.pt",
            training=training,
            progress=False,
        )
        for k, training in enumerate((settings, TrainingSettings(**settings)))
    ]
    assert TrainingSettings(**settings).select_on is None
    assert runs[1]["history"]["best_epoch"] == runs[0]["history"]["best_epoch"]
    assert runs[1]["metrics"] == runs[0]["metrics"]


def test_whole_run_writes_outputs_and_table_matches_runs(tmp_path):
    import yaml

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(_config()))
    out = tmp_path / "out"
    argv = [
        "bench",
        str(path),
        "--out",
        str(out),
        "--set",
        "training.epochs=1",
        "--seeds",
        "0,1",
        "--no-progress",
        "--max-steps",
        "3",
    ]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    table = (out / "results.md").read_text()
    assert results["std_ddof"] == 1
    for row, slug in zip(results["rows"], ("GRU-dt", "CKCNN")):
        runs = [json.loads(_run_dir(out / "runs" / slug, s).joinpath("result.json").read_text()) for s in (0, 1)]
        for run in runs:
            assert run["metrics"]["test"]["num_samples"] == 370  # the whole official test set
            assert run["history"]["steps"] == 3 and run["environment"]["torch"] == torch.__version__
            lines = _run_dir(out / "runs" / slug, run["seed"]).joinpath("curves.csv").read_text().splitlines()
            assert lines[0].startswith("epoch,train_loss") and len(lines) == 1 + run["history"]["epochs_run"]
            assert float(lines[1].split(",")[4]) == run["history"]["val_accuracy"][0]
        accs = [r["metrics"]["test"]["accuracy"] for r in runs]
        mean, std = statistics.mean(accs), statistics.stdev(accs)
        assert row["metrics"]["test"]["accuracy"]["mean"] == pytest.approx(mean, abs=1e-15)
        assert row["metrics"]["test"]["accuracy"]["std"] == pytest.approx(std, abs=1e-15)
        line = next(ln for ln in table.splitlines() if ln.startswith(f"| {slug} "))
        assert f"{100 * mean:.2f} ± {100 * std:.2f}" in line
        half = [r["metrics"]["half rate"]["accuracy"] for r in runs]
        assert f"{100 * statistics.mean(half):.2f} ± {100 * statistics.stdev(half):.2f}" in line
        if slug == "GRU-dt":  # paper 50.0 ± 2.0: the difference of the means is shown
            assert "50.00 ± 2.00" in line and f"{100 * mean - 50.0:+.2f}" in line
    for png in ("curves.png", "summary.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000

    # --resume skips finished runs: their result files are reused, not rewritten
    stamp = _run_dir(out / "runs" / "CKCNN", 1).joinpath("result.json").stat().st_mtime_ns
    assert main(argv + ["--resume"]) == 0
    assert _run_dir(out / "runs" / "CKCNN", 1).joinpath("result.json").stat().st_mtime_ns == stamp
    assert json.loads((out / "results.json").read_text())["rows"] == results["rows"]


def test_cli_reports_config_errors(tmp_path, capsys):
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_config(models=[{"model": "gru-dt", "options": {"hidden": 8}}])))
    with pytest.raises(SystemExit):
        main(["bench", str(path), "--set", "training.batchsize=3", "--no-progress"])
    assert "unknown key(s) 'batchsize' in training" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ control cache
def _count_build_control(monkeypatch):
    """The interpolation of every control the input spec builds (each still built for real: `control_of`, where
    `InputSpec.transform` builds a control)."""
    import neuralde_seq.training.input_spec as input_spec
    from neuralde_seq.controls.interpolation import interpolation_name

    calls = []
    real = input_spec.control_of

    def counting(observations, options):
        calls.append(interpolation_name(options.interpolation))
        return real(observations, options)

    monkeypatch.setattr(input_spec, "control_of", counting)
    return calls


def _same_control(a, b):
    return (
        all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("knots", "coeffs", "end_index"))
        and a.channels_info == b.channels_info
    )


def test_control_cache_builds_once_per_split_and_options(jv, monkeypatch):
    from neuralde_seq.training.run import ControlCache

    val, test = jv.splits.val, jv.splits.test
    uncached = {
        "val": build_model_inputs("ncde", val),
        "test": build_model_inputs("ncde", test),
        "val natural": build_model_inputs("ncde", val, {"interpolation": "natural_cubic"}),
    }
    calls = _count_build_control(monkeypatch)
    cache = ControlCache()
    first = build_model_inputs("ncde", val, cache=cache)
    assert len(calls) == 1 and (cache.hits, cache.misses) == (0, 1)
    # another model with the same registered interpolation, and the defaults spelled out: the same control
    again = build_model_inputs("hebb-cde", val, cache=cache)
    spelled = build_model_inputs(
        "ncde", val, {"interpolation": "hermite_cubic", "time_channel": True, "missing": "interpolate"}, cache=cache
    )
    assert again is first and spelled is first and len(calls) == 1 and cache.hits == 2
    assert _same_control(first, uncached["val"])
    # other options, another split, or another dataset object with equal contents: built anew
    natural = build_model_inputs("ncde", val, {"interpolation": "natural_cubic"}, cache=cache)
    other_split = build_model_inputs("ncde", test, cache=cache)
    copy = build_model_inputs("ncde", val.subset(torch.arange(len(val))), cache=cache)
    assert len(calls) == 4 and (cache.hits, cache.misses) == (2, 4) and len(cache) == 4
    assert _same_control(natural, uncached["val natural"]) and not _same_control(natural, first)
    assert _same_control(other_split, uncached["test"]) and _same_control(copy, first)
    # models reading raw observations are not cached
    build_model_inputs("gru-dt", val, cache=cache)
    assert len(cache) == 4 and cache.misses == 4
    cache.clear()
    assert len(cache) == 0 and build_model_inputs("ncde", val, cache=cache) is not first and len(calls) == 5


def test_runner_reuses_controls_across_seeds_and_rows(tmp_path, monkeypatch):
    from fixtures_uea import write_uea_archive

    from neuralde_seq.training.runner import run_benchmark

    remotes, _ = write_uea_archive(tmp_path / "src", "BasicMotions", channels=2)
    small = {"hidden": 4, "width": 8, "depth": 1}
    config = {
        "name": "cache",
        "task": "uea",
        "task_options": {"name": "BasicMotions"},
        "seeds": [0, 1],
        "training": {"epochs": 1, "lr": 1e-2, "batch_size": 16},
        "solver": {"method": "euler", "step_size": 1.0},
        "models": [  # two rows read the same natural cubic control, one row a linear one
            {"label": "A", "model": "ncde", "options": small, "control": {"interpolation": "natural_cubic"}},
            {
                "label": "B",
                "model": "ncde",
                "options": {**small, "hidden": 5},
                "control": {"interpolation": "natural_cubic", "time_channel": True},
            },
            {"label": "C", "model": "ncde", "options": small, "control": {"interpolation": "linear"}},
        ],
    }
    calls = _count_build_control(monkeypatch)
    results = {}
    for cached in (True, False):
        calls.clear()
        results[cached] = run_benchmark(
            config,
            out_dir=tmp_path / f"out{cached}",
            max_steps=2,
            progress=False,
            task_overrides={"remotes": remotes, "cache_dir": tmp_path / "cache"},
            cache_controls=cached,
        )
        interpolations = sorted(calls)
        splits = 3  # train, val, test; the task's data do not depend on the seed
        if cached:  # once per split and control, for both seeds and both natural cubic rows
            assert interpolations == sorted(["natural_cubic"] * splits + ["linear"] * splits)
        else:  # once per split, row and seed
            assert interpolations == sorted(["natural_cubic"] * 2 * 2 * splits + ["linear"] * 2 * splits)
    # reused controls give exactly the results of controls built for every run
    for with_cache, without in zip(results[True]["rows"], results[False]["rows"]):
        assert with_cache["metrics"] == without["metrics"] and with_cache["seeds"] == [0, 1]


def test_a_recorded_solver_that_differs_is_another_model():
    from neuralde_seq.solvers import SolverOptions
    from neuralde_seq.training.run_folders import _changed_keys

    today = {"d_model": 64, "solver": repr(SolverOptions())}
    assert _changed_keys(dict(today), today) == []
    # a recorded solver that differs in an option is another model, as is any other changed default
    assert _changed_keys({"d_model": 64, "solver": repr(SolverOptions(RK4()))}, today) == ["solver"]
    assert _changed_keys({"d_model": 32, "solver": today["solver"]}, today) == ["d_model"]


def test_a_row_label_selects_that_row_alone():
    from neuralde_seq.training.config import parse_config
    from neuralde_seq.training.grid import _select_rows

    config = parse_config(
        {
            "name": "t",
            "task": "japanese-vowels",
            "seeds": [0],
            "training": {"epochs": 1, "lr": 1e-3, "batch_size": 8},
            "models": [
                {"label": "gru-dt", "model": "gru-dt"},
                {"label": "gru-dt-wide", "model": "gru-dt", "options": {"hidden": 64}},
                {"label": "small", "model": "gru-d", "options": {"hidden": 8}},
            ],
        }
    )
    labels = lambda names: [r.label for r in _select_rows(config.rows, names)]  # noqa: E731
    assert labels(["gru-dt"]) == ["gru-dt"]  # the row so labelled, not every gru-dt row
    assert labels(["gru-d"]) == ["small"]  # no row is labelled gru-d: every row of that model
    assert labels(["gru-dt-wide", "small"]) == ["gru-dt-wide", "small"]
    with pytest.raises(ConfigError, match="match no row"):
        _select_rows(config.rows, ["ncde"])
