"""Predicting with a trained run: `neuralde_seq.load_run` and ``neuralde-seq predict``.

One small benchmark on local .ts files is trained through the CLI (module fixture): channel 0 is about 1000 with a
class-dependent shift of 60, so a model scores well only on the data standardised as the task protocol did, and
channel 1 is small. Its rows cover an observation model (gru-d), a control model whose training control fixes
options (ncde: control_scales), ODE-RNN (time_unit, from the training span), an ensemble of two and two
closed-form rows (1-NN, random features). ``drop_rate`` is 0, so the test file is scored as it is.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import neuralde_seq
from neuralde_seq.cli import main
from neuralde_seq.data.formats.local_files import read_file
from neuralde_seq.data.protocols import load_task, local_files_splits
from neuralde_seq.training.checkpoints import CheckpointError
from neuralde_seq.training.input_spec import InputSpec

CLASSES = "abc"
TRAINED_ROWS = ("gru-d", "ncde", "ode-rnn", "ensemble")


def _series(rng, label: str, channels: int = 2) -> np.ndarray:
    """One (L, C) case of class ``label``: channel 0 about 1000 + 60 (k - 1), channel 1 about 0.01 (k - 1)."""
    k = CLASSES.index(label)
    t = np.arange(int(rng.integers(8, 16)))
    x = np.stack(
        [
            1000 + 60 * (k - 1) + 20 * np.sin(t * (0.4 + 0.3 * k)) + 10 * rng.normal(size=len(t)),
            0.01 * (k - 1) + 0.02 * rng.normal(size=len(t)),
        ]
        + [rng.normal(size=len(t))] * (channels - 2),
        1,
    )
    holes = rng.random(x.shape) < 0.15
    holes[[0, -1], 0] = False  # observed at both ends: no step is trailing padding
    x[holes] = np.nan
    return np.round(x, 3)


def write_ts(path: Path, cases, labels) -> Path:
    lines = [
        "@problemName Toy",
        "@timeStamps false",
        "@missing true",
        f"@dimensions {cases[0].shape[1]}",
        "@equalLength false",
        f"@classLabel true {' '.join(CLASSES)}",
        "@data",
    ]
    for x, label in zip(cases, labels):
        dims = [",".join("?" if np.isnan(v) else repr(float(v)) for v in x[:, c]) for c in range(x.shape[1])]
        lines.append(":".join(dims) + f":{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The files, the config's task options and the output folder of one bench run through the CLI."""
    root = tmp_path_factory.mktemp("predict")
    rng = np.random.default_rng(0)
    train_labels = [c for c in CLASSES for _ in range(12)]
    test_labels = list(rng.permutation([c for c in CLASSES for _ in range(7)]))
    train_cases = [_series(rng, c) for c in train_labels]
    test_cases = [_series(rng, c) for c in test_labels]
    train_path = write_ts(root / "Toy_TRAIN.ts", train_cases, train_labels)
    test_path = write_ts(root / "Toy_TEST.ts", test_cases, test_labels)
    options = {"train": str(train_path), "test": str(test_path), "validation_fraction": 0.25, "drop_rate": 0.0}
    config = {
        "name": "toy",
        "task": "files",
        "task_options": options,
        "seeds": [0],
        "training": {"epochs": 3, "lr": 0.03, "batch_size": 8},
        "models": [
            {"label": "gru-d", "model": "gru-d", "options": {"hidden": 8}},
            {"label": "ncde", "model": "ncde", "options": {"hidden": 8, "width": 16, "depth": 1}},
            {"label": "ode-rnn", "model": "ode-rnn", "options": {"hidden": 8, "width": 16}},
            {"label": "ensemble", "model": "gru-dt", "options": {"hidden": 8}, "training": {"ensemble": 2}},
            {"label": "1nn", "model": "1nn-euclidean"},
            {"label": "rf", "model": "random-features"},
        ],
    }
    config_path = root / "toy.json"
    config_path.write_text(json.dumps(config))  # JSON is YAML
    out = root / "out"
    assert main(["bench", str(config_path), "--out", str(out), "--no-progress"]) == 0
    return {
        "root": root,
        "out": out,
        "options": options,
        "train": train_path,
        "test": test_path,
        "test_cases": test_cases,
        "test_labels": test_labels,
    }


def run_folder(trained, row: str) -> Path:
    (folder,) = (trained["out"] / "runs" / row).glob("seed0-*")
    return folder


def read_predictions(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    assert [int(r[0]) for r in body] == list(range(len(body)))
    return header, [r[1] for r in body], np.array([[float(v) for v in r[2:]] for r in body])


@pytest.mark.parametrize("row", TRAINED_ROWS)
def test_predict_on_the_test_file_reproduces_the_reported_test_accuracy(trained, row, tmp_path, capsys):
    folder = run_folder(trained, row)
    out = tmp_path / "predictions.csv"
    assert main(["predict", str(folder), str(trained["test"]), "--out", str(out)]) == 0
    header, predicted, probabilities = read_predictions(out)
    assert header == ["index", "label", *CLASSES]
    assert len(predicted) == len(trained["test_labels"])
    accuracy = sum(p == t for p, t in zip(predicted, trained["test_labels"])) / len(predicted)
    reported = json.loads((folder / "result.json").read_text())["metrics"]["test"]
    assert accuracy == reported["accuracy"]  # exactly: the same inputs, weights and batches
    summary = json.loads((trained["out"] / "results.json").read_text())
    (entry,) = [r for r in summary["rows"] if r["label"] == row]
    assert accuracy == entry["metrics"]["test"]["accuracy"]["mean"]
    # the mean cross-entropy of the probabilities is the reported test loss (to float32's precision)
    truth = [CLASSES.index(t) for t in trained["test_labels"]]
    loss = -np.mean(np.log(probabilities[np.arange(len(truth)), truth]))
    assert loss == pytest.approx(reported["loss"], rel=1e-5)
    # load_run gives the CSV's probabilities exactly, and its labels
    model = neuralde_seq.load_run(folder)
    np.testing.assert_array_equal(model.predict_proba(trained["test"]), probabilities)
    assert list(model.predict(trained["test"])) == predicted
    assert list(model.classes_) == list(CLASSES)
    assert f"accuracy on the file's labels {accuracy:.4f}" in capsys.readouterr().err


def test_load_run_reads_the_estimators_inputs_and_checkpoints_alike(trained):
    folder = run_folder(trained, "ncde")
    model = neuralde_seq.load_run(folder)
    from_file = model.predict_proba(trained["test"])
    # the arrays the file holds, as the estimators take them (a list of (T_i, C) arrays, NaN where missing)
    np.testing.assert_array_equal(model.predict_proba(trained["test_cases"]), from_file)
    np.testing.assert_array_equal(
        model.predict_proba(
            trained["test_cases"], times=[np.arange(len(x), dtype=float) for x in trained["test_cases"]]
        ),
        from_file,
    )
    raw = read_file(trained["test"], dtype=torch.float64)  # an unstandardised IrregularDataset
    np.testing.assert_array_equal(model.predict_proba(raw), from_file)
    np.testing.assert_array_equal(neuralde_seq.load_run(folder / "best.pt").predict_proba(raw), from_file)
    # an unlabelled file is data to predict on too
    unlabelled = trained["test"].with_name("unlabelled.ts")
    unlabelled.write_text(
        trained["test"]
        .read_text()
        .replace("@classLabel true a b c", "@classLabel false")
        .replace(":a\n", "\n")
        .replace(":b\n", "\n")
        .replace(":c\n", "\n")
    )
    np.testing.assert_array_equal(model.predict_proba(unlabelled), from_file)


def test_the_checkpoint_spec_standardises_raw_data_as_the_protocol_did(trained):
    spec = neuralde_seq.load_run(run_folder(trained, "gru-d")).input_spec
    standardised = load_task("files", **trained["options"]).splits  # what the run's model was fed (float32)
    raw = local_files_splits(**{**trained["options"], "dtype": torch.float64})  # the files as read, not standardised
    recorded = standardised.train.meta["standardise"]
    assert spec.channel_mean == tuple(recorded["mean"]) and spec.channel_scale == tuple(recorded["std"])
    assert abs(spec.channel_mean[0] - 1000) < 20 and spec.channel_scale[0] > 40  # the raw channel's own statistics
    for part in ("train", "val", "test"):
        data = getattr(raw, part)
        mine = spec.values_of(data.replace(times=data.times.float()))
        fed = getattr(standardised, part).values
        assert mine.dtype == fed.dtype == torch.float32
        assert torch.equal(torch.isnan(mine), torch.isnan(fed))
        assert torch.equal(mine.nan_to_num(), fed.nan_to_num())  # bit for bit


def test_reading_raw_leaves_the_protocols_raw_channels_and_standardises_static_features():
    from neuralde_seq.data import IrregularDataset
    from neuralde_seq.data.protocols import _standardise_splits

    rng = np.random.default_rng(1)

    def dataset(n):
        values = torch.tensor(np.stack([500 + 30 * rng.normal(size=(n, 6)), rng.integers(0, 5, (n, 6))], -1))
        static = torch.tensor(np.stack([70 + 9 * rng.normal(size=n), rng.integers(0, 2, n)], -1))
        return IrregularDataset(
            torch.arange(6.0, dtype=torch.float64).expand(n, 6),
            values,
            torch.full((n,), 6),
            torch.tensor(rng.integers(0, 2, n)),
            ["x", "y"],
            static=static,
            meta={"raw_channels": [1], "raw_static": [1]},
        )

    raw_train, raw_test = dataset(20), dataset(7)
    std_train, std_test = _standardise_splits(raw_train, raw_test)
    fitted = InputSpec.fit("gru-d", std_train)
    spec = fitted.reading_raw(std_train)
    assert spec.channel_mean[1] == 0 and spec.channel_scale[1] == 1  # the count channel left as it is
    assert spec.static_mean[1] == 0 and spec.static_scale[1] == 1
    assert abs(spec.channel_mean[0] - 500) < 30 and abs(spec.static_mean[0] - 70) < 9
    mine, fed = spec.transform(raw_test), fitted.transform(std_test)
    assert torch.equal(mine.values, fed.values) and torch.equal(mine.static, fed.static)
    assert torch.equal(mine.values[..., 1], raw_test.values[..., 1])  # bit for bit as given
    assert InputSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    with pytest.raises(ValueError, match="standardises the values itself"):
        InputSpec.fit("gru-d", std_train, standardise=True).reading_raw(std_train)


def test_a_spec_without_static_statistics_or_filling_writes_them_as_null_and_reads_them_back(trained):
    spec = neuralde_seq.load_run(run_folder(trained, "gru-d")).input_spec
    written = spec.to_dict()
    assert set(written) == {
        "model",
        "control",
        "time_unit",
        "channel_mean",
        "channel_scale",
        "reads_static",
        "fill_step",
        "static_mean",
        "static_scale",
    }
    assert written["fill_step"] is written["static_mean"] is written["static_scale"] is None
    assert InputSpec.from_dict(written) == spec
    with pytest.raises(ValueError, match="static_mean and static_scale must both be null or both be given"):
        InputSpec.from_dict({**written, "static_mean": [0.0]})
    with pytest.raises(ValueError, match="static_scale must be positive .* got -1.0 for static feature 0"):
        InputSpec.from_dict({**written, "static_mean": [0.0], "static_scale": [-1.0]})


def test_an_ensembles_checkpoint_brings_its_members_and_a_members_checkpoint_loads_alone(trained):
    folder = run_folder(trained, "ensemble")
    ensemble = neuralde_seq.load_run(folder)
    assert [p.name for p in ensemble.checkpoints] == ["best.pt", "best.member1.pt"]
    member1 = neuralde_seq.load_run(folder / "best.member1.pt")
    assert [p.name for p in member1.checkpoints] == ["best.member1.pt"]
    first = neuralde_seq.load_run(folder)  # member 0 (best.pt) alone: the ensemble's first member
    first.model = ensemble.model.members[0]
    mean = (first.predict_proba(trained["test"]) + member1.predict_proba(trained["test"])) / 2
    np.testing.assert_allclose(ensemble.predict_proba(trained["test"]), mean, rtol=1e-5)
    (folder / "best.member1.pt").rename(folder / "moved.pt")
    try:
        with pytest.raises(FileNotFoundError, match="best.member1.pt does not exist.*ensemble of 2"):
            neuralde_seq.load_run(folder)
    finally:
        (folder / "moved.pt").rename(folder / "best.member1.pt")


@pytest.mark.parametrize(
    "row, method, estimator",
    [
        ("1nn", "reference method '1nn-euclidean'", "neuralde_seq.reference.NearestNeighbourClassifier"),
        ("rf", "random features method 'random-features'", "neuralde_seq.random_features.RandomFeatureClassifier"),
    ],
)
def test_a_closed_form_rows_folder_is_refused_naming_what_to_fit(trained, row, method, estimator, capsys):
    folder = run_folder(trained, row)
    with pytest.raises(ValueError, match=rf"{method}.*stores no fitted estimator.*Fit {estimator}"):
        neuralde_seq.load_run(folder)
    assert main(["predict", str(folder), str(trained["test"]), "--out", str(folder / "p.csv")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "stores no fitted estimator" in err
    assert not (folder / "p.csv").exists()


def test_bad_paths_and_data_exit_2_with_one_line_naming_the_problem(trained, tmp_path, capsys):
    folder = run_folder(trained, "gru-d")
    out = tmp_path / "p.csv"
    wide = write_ts(tmp_path / "wide.ts", [_series(np.random.default_rng(2), c, channels=3) for c in "abc"], "abc")
    cases = [
        (["predict", str(tmp_path / "missing"), str(trained["test"]), "--out", str(out)], "missing does not exist"),
        (["predict", str(folder), str(tmp_path / "none.ts"), "--out", str(out)], "none.ts does not exist"),
        (
            ["predict", str(trained["out"]), str(trained["test"]), "--out", str(out)],
            "is a benchmark's output folder: give one run's folder, e.g. runs/",
        ),
        (
            ["predict", str(folder.parent), str(trained["test"]), "--out", str(out)],
            f"is a row's folder, holding the run folder\\(s\\) {folder.name}: give one of them",
        ),
        (
            ["predict", str(folder), str(wide), "--out", str(out)],
            "wide.ts has 3 channel\\(s\\) per time step, but the run's model was trained on 2",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
        assert err.startswith("neuralde-seq predict: error: ") and re.search(message, err), err
    assert not out.exists()
    model = neuralde_seq.load_run(folder)
    with pytest.raises(ValueError, match=r"X has 3 channel\(s\) per time step, but the run's model was trained on 2"):
        model.predict([np.zeros((5, 3))])
    with pytest.raises(ValueError, match="already"):
        model.predict(load_task("files", **trained["options"]).splits.test)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        neuralde_seq.load_run(tmp_path / "missing")


def test_a_checkpoint_without_the_runs_settings_is_refused_with_what_to_do(trained, tmp_path):
    checkpoint = torch.load(run_folder(trained, "gru-d") / "best.pt", weights_only=True)
    del checkpoint["config"]["trained_model"]  # as checkpoints were written before they recorded it
    torch.save(checkpoint, tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match="does not record what load_run rebuilds a model from.*afresh"):
        neuralde_seq.load_run(tmp_path)


def test_the_run_scores_nothing_like_this_without_the_protocols_standardisation(trained):
    """What a checkpoint's spec held before (no statistics: the protocol had standardised the splits) scores the raw
    test file at chance; with them, as the run did (the first test)."""
    folder = run_folder(trained, "gru-d")
    model = neuralde_seq.load_run(folder)
    reported = json.loads((folder / "result.json").read_text())["metrics"]["test"]["accuracy"]
    model.input_spec = dataclasses.replace(model.input_spec, channel_mean=None, channel_scale=None)
    accuracy = np.mean(model.predict(trained["test"]) == np.array(trained["test_labels"], dtype=object))
    assert reported > 0.6 and accuracy < reported - 0.3 and not math.isnan(accuracy)


def test_a_model_built_from_its_channels_and_input_options_is_the_model_built_from_its_input():
    """What load_run rebuilds a model from (the input's channel count and `input_options`, recorded by the runner)
    gives every registry model the initial weights, buffers and outputs that its training input gives it."""
    from neuralde_seq.models import MODEL_NAMES, create_model, input_options, model_inputs

    times = torch.linspace(0, 6, 12).expand(3, 12).contiguous()
    values = torch.randn(3, 12, 2, generator=torch.Generator().manual_seed(0))
    values[0, 3, 1] = float("nan")
    derived = {}
    for name in MODEL_NAMES:
        inputs = model_inputs(name, times, values)
        derived[name] = input_options(name, inputs)
        torch.manual_seed(1)
        from_input = create_model(name, inputs, 3).eval()
        torch.manual_seed(1)
        from_channels = create_model(name, inputs.channels, 3, **derived[name]).eval()
        state, rebuilt = from_input.state_dict(), from_channels.state_dict()
        assert state.keys() == rebuilt.keys(), name
        for key in state:
            torch.testing.assert_close(rebuilt[key], state[key], rtol=0, atol=0, equal_nan=True, msg=f"{name} {key}")
        with torch.no_grad():
            assert torch.equal(from_channels(inputs), from_input(inputs)), name
    # the options that matter are there: without them ODE-RNN's time scale and the NCDE's control scales are others
    assert derived["ode-rnn"]["time_unit"] == pytest.approx(6.0) and len(derived["ncde"]["control_scales"]) == 3
