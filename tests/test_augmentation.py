"""Training-time augmentation (random crops and drops) and ensembles over seeds."""

import math

import pytest
import torch

from neuralde_seq.data import IrregularDataset, random_crop_and_drop
from neuralde_seq.models import create_model
from neuralde_seq.training import AugmentedInputs, EnsembleClassifier, EnsembleRegressor, load_checkpoint
from neuralde_seq.training.augmentation import ENSEMBLE_SEED_STEP
from neuralde_seq.training.config import ConfigError, parse_config
from neuralde_seq.training.run import build_model_inputs, fit_and_evaluate


def _dataset(n=64, t=200, c=2, seed=0, missing=0.2):
    g = torch.Generator().manual_seed(seed)
    times = torch.cumsum(torch.rand(t, generator=g, dtype=torch.float64) + 0.1, dim=0).repeat(n, 1)
    values = torch.randn(n, t, c, generator=g, dtype=torch.float64)
    values[torch.rand(n, t, generator=g) < missing] = float("nan")  # whole points missing
    values[:, :, 0][torch.rand(n, t, generator=g) < 0.1] = float("nan")  # and single channels
    lengths = torch.randint(t // 2, t + 1, (n,), generator=g)
    values[torch.arange(t)[None, :] >= lengths[:, None]] = float("nan")
    labels = torch.randint(0, 3, (n,), generator=g)
    return IrregularDataset(times, values, lengths, labels, ["a", "b", "c"])


def _points(ds):
    return (~torch.isnan(ds.values)).any(dim=2)


@pytest.mark.parametrize("crop", [1.0, 0.6, 0.2])
def test_crop_keeps_one_contiguous_window_of_observed_points(crop):
    ds = _dataset()
    torch.manual_seed(0)
    out = random_crop_and_drop(ds, drop_rate=0.0, crop=crop)
    before, after = _points(ds), _points(out)
    assert torch.equal(out.times, ds.times) and torch.equal(out.lengths, ds.lengths)
    assert torch.equal(out.labels, ds.labels)
    assert not (after & ~before).any()  # nothing observed that was not
    # kept values are the original values, untouched
    kept = after[..., None] & ~torch.isnan(ds.values)
    assert torch.equal(out.values[kept], ds.values[kept])
    for i in range(len(ds)):
        observed = torch.nonzero(before[i]).flatten()
        ranks = torch.nonzero(after[i][observed]).flatten()
        n = observed.numel()
        assert ranks.numel() >= max(2, math.ceil(crop * n))
        assert torch.equal(ranks, torch.arange(int(ranks[0]), int(ranks[0]) + ranks.numel()))  # contiguous
        if crop == 1.0:
            assert ranks.numel() == n


def test_drop_rate_is_the_fraction_dropped_and_two_points_stay():
    ds = _dataset(n=200, t=300)
    torch.manual_seed(1)
    out = random_crop_and_drop(ds, drop_rate=0.3, crop=1.0)
    before, after = _points(ds), _points(out)
    total, dropped = int(before.sum()), int((before & ~after).sum())
    # binomial(total, 0.3): 5 standard deviations
    assert abs(dropped - 0.3 * total) < 5 * math.sqrt(total * 0.3 * 0.7)
    # a heavy drop on short samples still leaves 2 observed points each
    short = _dataset(n=50, t=6, missing=0.0)
    torch.manual_seed(2)
    thin = random_crop_and_drop(short, drop_rate=0.95, crop=0.3)
    assert (_points(thin).sum(dim=1) >= 2).all()


def test_same_generator_state_same_augmentation_and_identity_settings():
    ds = _dataset()
    a = random_crop_and_drop(ds, 0.2, 0.5, generator=torch.Generator().manual_seed(5))
    b = random_crop_and_drop(ds, 0.2, 0.5, generator=torch.Generator().manual_seed(5))
    c = random_crop_and_drop(ds, 0.2, 0.5, generator=torch.Generator().manual_seed(6))
    assert torch.equal(torch.isnan(a.values), torch.isnan(b.values))
    assert not torch.equal(torch.isnan(a.values), torch.isnan(c.values))
    same = random_crop_and_drop(ds, 0.0, 1.0)
    assert torch.equal(torch.isnan(same.values), torch.isnan(ds.values))


@pytest.mark.parametrize(
    "drop_rate, crop, match",
    [
        (1.0, 1.0, "drop_rate"),
        (-0.1, 1.0, "drop_rate"),
        (0.1, 0.0, "crop"),
        (0.1, 1.5, "crop"),
        ("x", 1.0, "drop_rate"),
        (0.1, float("nan"), "crop"),
    ],
)
def test_bad_augmentation_settings_name_the_argument(drop_rate, crop, match):
    with pytest.raises(ValueError, match=match):
        random_crop_and_drop(_dataset(n=2), drop_rate, crop)


def test_augmented_inputs_are_fresh_per_batch_and_follow_the_global_generator():
    ds = _dataset(n=16, t=80)
    inputs = AugmentedInputs(ds, lambda d: build_model_inputs("ncde", d), drop_rate=0.3, crop=0.5)
    assert len(inputs) == 16
    index = torch.tensor([3, 1, 7])
    torch.manual_seed(0)
    first, second = inputs[index], inputs[index]
    torch.manual_seed(0)
    again = inputs[index]
    assert first.coeffs.shape[0] == 3
    assert not torch.equal(first.coeffs, second.coeffs)  # other crops and drops at the next batch
    assert torch.equal(first.coeffs, again.coeffs)  # the generator's state decides them (resume is exact)
    # the inputs are those of the augmented samples, built as the unaugmented ones are
    torch.manual_seed(0)
    expected = build_model_inputs("ncde", random_crop_and_drop(ds.subset(index), 0.3, 0.5))
    assert torch.equal(first.coeffs, expected.coeffs)
    with pytest.raises(ValueError, match="augment nothing"):
        AugmentedInputs(ds, lambda d: d, drop_rate=0.0, crop=1.0)


def test_ensemble_is_the_log_of_the_mean_probability():
    torch.manual_seed(0)
    members = [torch.nn.Linear(5, 4).double() for _ in range(3)]
    x = torch.randn(7, 5, dtype=torch.float64)
    out = EnsembleClassifier(members)(x)
    probs = torch.stack([torch.softmax(m(x), dim=-1) for m in members]).mean(dim=0)
    torch.testing.assert_close(out, probs.log(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(EnsembleClassifier(members[:1])(x), torch.log_softmax(members[0](x), -1))
    with pytest.raises(ValueError, match="members"):
        EnsembleClassifier([])


def test_regressor_ensemble_is_the_mean_of_the_outputs():
    torch.manual_seed(0)
    members = [torch.nn.Linear(5, 2).double() for _ in range(3)]
    x = torch.randn(7, 5, dtype=torch.float64)
    expected = (members[0](x) + members[1](x) + members[2](x)) / 3
    torch.testing.assert_close(EnsembleRegressor(members)(x), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="members"):
        EnsembleRegressor([])


@pytest.fixture(scope="module")
def jv():
    from neuralde_seq.data.protocols import load_task

    return load_task("japanese-vowels", seed=0, drop_rate=0.3)


def test_runner_ensemble_scores_the_mean_of_its_members_checkpoints(jv, tmp_path):
    train, val, test = jv.splits
    small = type(jv.splits)(train.subset(torch.arange(40)), val, test.subset(torch.arange(60)))
    fit = fit_and_evaluate(
        "gru-dt",
        small,
        seed=3,
        options={"hidden": 8},
        checkpoint_path=tmp_path / "b.pt",
        training={
            "epochs": 2,
            "lr": 1e-2,
            "batch_size": 16,
            "ensemble": 2,
            "augment_drop_rate": 0.2,
            "augment_crop": 0.8,
        },
        progress=False,
    )
    assert len(fit["history"]["ensemble_members"]) == 2
    members = []
    for path in (tmp_path / "b.pt", tmp_path / "b.member1.pt"):
        model = create_model("gru-dt", 12, 9, hidden=8)
        load_checkpoint(path, model)
        members.append(model.eval())
    assert fit["params"] == 2 * sum(p.numel() for p in members[0].parameters())
    # the members differ (seeds 3 and 3 + ENSEMBLE_SEED_STEP), and the scored test accuracy is their mean's
    assert ENSEMBLE_SEED_STEP > 0
    assert any(not torch.equal(a, b) for a, b in zip(members[0].parameters(), members[1].parameters()))
    inputs = build_model_inputs("gru-dt", small.test)
    with torch.no_grad():
        probs = sum(torch.softmax(m(inputs), dim=-1) for m in members) / 2
    expected = float((probs.argmax(dim=-1) == small.test.labels).double().mean())
    assert fit["metrics"]["test"]["accuracy"] == pytest.approx(expected, abs=1e-12)


def _config(training):
    return {
        "name": "t",
        "task": "japanese-vowels",
        "seeds": [0],
        "training": {"epochs": 1, "lr": 1e-3, "batch_size": 8, **training},
        "models": [{"label": "a", "model": "gru-dt"}],
    }


@pytest.mark.parametrize(
    "training, match",
    [
        ({"ensemble": 0}, "ensemble"),
        ({"ensemble": 1.5}, "ensemble"),
        ({"augment_crop": 0.0}, "augment_crop"),
        ({"augment_drop_rate": 1.0}, "augment_drop_rate"),
    ],
)
def test_config_refuses_bad_ensemble_and_augmentation(training, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(_config(training))


def test_rows_record_their_augmentation_and_ensemble_settings_defaults_included():
    plain = parse_config(_config({})).rows[0].to_dict()["training"]
    assert (plain["ensemble"], plain["augment_drop_rate"], plain["augment_crop"]) == (1, 0.0, 1.0)
    given = parse_config(_config({"ensemble": 3, "augment_crop": 0.7})).rows[0].to_dict()["training"]
    assert (given["ensemble"], given["augment_drop_rate"], given["augment_crop"]) == (3, 0.0, 0.7)


def test_reference_ensemble_averages_members_fitted_with_their_seeds():
    from neuralde_seq.reference import SeedEnsemble, as_arrays, fit_reference

    ds = _dataset(n=30, t=60, missing=0.1)
    options = {"width": 64}
    ensemble = fit_reference("random-features", ds, seed=4, options={**options, "ensemble": 3}).estimator
    assert isinstance(ensemble, SeedEnsemble) and ensemble.get_params()["ensemble"] == 3
    X, times = as_arrays(ds)
    alone = [
        fit_reference("random-features", ds, seed=4 + ENSEMBLE_SEED_STEP * j, options=options)[0] for j in range(3)
    ]
    expected = sum(m.decision_function(X, times=times) for m in alone) / 3
    assert abs(ensemble.decision_function(X, times=times) - expected).max() < 1e-9
    assert (ensemble.predict(X, times=times) == expected.argmax(axis=1)).all()
    with pytest.raises(ValueError, match="ensemble"):
        fit_reference("random-features", ds, seed=0, options={**options, "ensemble": 0})
