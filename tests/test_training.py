"""Tests of the trainer: divergence handling, checkpoints, and evaluation over every sample.

The models here are small real torch modules; the "control" is a plain (N, F) tensor, which the trainer
accepts since it only slices controls by sample index.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from neuralde_seq.solvers import Adjoint
from neuralde_seq.training import (
    TrainingDiverged,
    accuracy,
    auroc,
    evaluate,
    format_table,
    load_checkpoint,
    predict,
    train_classifier,
)


def _blobs(n, features=4, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    centres = torch.randn(classes, features, generator=g) * 3
    x = centres[labels] + torch.randn(n, features, generator=g)
    return x, labels.long()


class NaNAfter(torch.nn.Module):
    """A linear classifier whose training loss becomes NaN from its ``nan_at``-th training forward on."""

    def __init__(self, features, classes, nan_at):
        super().__init__()
        self.linear = torch.nn.Linear(features, classes)
        self.nan_at = nan_at
        self.train_calls = 0

    def forward(self, x):
        out = self.linear(x)
        if self.training:
            self.train_calls += 1
            if self.train_calls >= self.nan_at:
                out = out * float("nan")
        return out


class NaNGrad(torch.nn.Module):
    """Finite loss but an infinite gradient (sqrt at 0) from the ``nan_at``-th training forward on."""

    def __init__(self, features, classes, nan_at):
        super().__init__()
        self.linear = torch.nn.Linear(features, classes)
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.nan_at = nan_at
        self.train_calls = 0

    def forward(self, x):
        out = self.linear(x)
        if self.training:
            self.train_calls += 1
            if self.train_calls >= self.nan_at:
                out = out + torch.sqrt(self.scale * 0.0)  # value 0, gradient inf
        return out


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _equal_states(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "model_cls, reason", [(NaNAfter, "non-finite training loss"), (NaNGrad, "non-finite gradient")]
)
def test_divergence_restores_last_good_checkpoint(tmp_path, model_cls, reason):
    x, y = _blobs(50)
    xv, yv = _blobs(23, seed=1)
    batch_size = 16  # 4 steps per epoch; step 11 is the 3rd step of epoch 3
    kwargs = dict(epochs=6, lr=0.05, batch_size=batch_size, seed=3, progress=False)

    torch.manual_seed(0)
    model = model_cls(4, 3, nan_at=11)
    ckpt = tmp_path / "run.pt"
    with pytest.raises(TrainingDiverged, match=reason) as info:
        train_classifier(model, x, y, xv, yv, checkpoint_path=ckpt, **kwargs)
    err = info.value
    assert err.epoch == 3 and err.step == 11
    assert len(err.history["val_accuracy"]) == 2  # two complete epochs recorded
    assert str(ckpt) in str(err)

    # the file on disk is the last good checkpoint: finite, from a completed epoch, loadable
    saved = torch.load(ckpt, weights_only=True)
    assert saved["epoch"] == err.checkpoint_epoch == err.history["best_epoch"]
    assert saved["epoch"] in (1, 2)
    assert all(torch.isfinite(v).all() for v in saved["model_state"].values())
    # ... and the model was restored to exactly those weights (not left at step 10's weights)
    assert _equal_states(_state(model), saved["model_state"])

    # the same weights come out of an identical run that stops before the bad step
    torch.manual_seed(0)
    clean = model_cls(4, 3, nan_at=10**9)
    ref_ckpt = tmp_path / "ref.pt"
    history = train_classifier(clean, x, y, xv, yv, checkpoint_path=ref_ckpt, **{**kwargs, "epochs": 2})
    assert history["best_epoch"] == saved["epoch"]
    assert _equal_states(_state(clean), saved["model_state"])
    assert saved["metrics"]["val_accuracy"] == history["best_val_accuracy"]


def test_divergence_in_first_epoch_restores_initial_weights(tmp_path):
    x, y = _blobs(40)
    torch.manual_seed(0)
    model = NaNAfter(4, 3, nan_at=2)
    initial = _state(model)
    with pytest.raises(TrainingDiverged) as info:
        train_classifier(
            model, x, y, x, y, epochs=3, lr=0.1, batch_size=8, seed=0, checkpoint_path=tmp_path / "c.pt", progress=False
        )
    assert info.value.checkpoint_epoch == 0
    assert _equal_states(_state(model), initial)


class CountingLinear(torch.nn.Module):
    """Records every input row it sees in eval mode."""

    def __init__(self, features, classes):
        super().__init__()
        self.linear = torch.nn.Linear(features, classes)
        self.seen = []

    def forward(self, x):
        if not self.training:
            self.seen.append(x[:, 0].clone())
        return self.linear(x)


def test_evaluate_covers_every_sample_with_uneven_batches():
    torch.manual_seed(0)
    n = 23  # not divisible by the batch size 5
    x, y = _blobs(n, classes=3)
    x[:, 0] = torch.arange(n, dtype=x.dtype)  # sample ids
    model = CountingLinear(4, 3)
    result = evaluate(model, x, y, batch_size=5)
    seen = torch.cat(model.seen)
    assert seen.tolist() == list(range(n))
    logits = model.linear(x).detach()
    assert result["num_samples"] == n
    assert result["accuracy"] == pytest.approx((logits.argmax(1) == y).float().mean().item())
    assert result["loss"] == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-6)
    assert model.training  # mode restored
    torch.testing.assert_close(predict(model, x, batch_size=7), logits)


def test_training_learns_keeps_best_checkpoint_and_is_reproducible(tmp_path):
    x, y = _blobs(60)
    xv, yv = _blobs(31, seed=1)

    def run(path):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        hist = train_classifier(
            model, x, y, xv, yv, epochs=8, lr=0.05, batch_size=16, seed=5, checkpoint_path=path, progress=False
        )
        return model, hist

    model, hist = run(tmp_path / "a.pt")
    model2, hist2 = run(tmp_path / "b.pt")
    assert hist["train_loss"] == hist2["train_loss"]
    assert _equal_states(_state(model), _state(model2))
    assert len(hist["train_loss"]) == len(hist["val_accuracy"]) == len(hist["seconds_per_epoch"]) == 8
    assert hist["train_loss"][-1] < hist["train_loss"][0]
    # the model holds the best-validation epoch's weights, as the checkpoint does
    best = max(range(8), key=lambda e: (hist["val_accuracy"][e], -hist["val_loss"][e]))
    assert hist["best_epoch"] == best + 1
    ckpt = load_checkpoint(tmp_path / "a.pt")
    assert ckpt["epoch"] == best + 1
    assert _equal_states(_state(model), ckpt["model_state"])
    assert evaluate(model, xv, yv, batch_size=8)["accuracy"] == pytest.approx(hist["val_accuracy"][best])
    assert ckpt["config"]["lr"] == 0.05 and ckpt["optimizer_state"] is not None


def test_patience_stops_early(tmp_path):
    x, y = _blobs(30)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    # random labels on validation: no steady improvement
    yv = torch.randint(0, 3, (30,), generator=torch.Generator().manual_seed(1))
    hist = train_classifier(
        model,
        x,
        y,
        x,
        yv,
        epochs=50,
        lr=0.01,
        batch_size=10,
        seed=0,
        checkpoint_path=tmp_path / "p.pt",
        progress=False,
        patience=2,
    )
    assert hist["stopped_early"] and hist["epochs_run"] < 50
    assert hist["epochs_run"] - hist["best_epoch"] == 2


def test_bad_arguments_raise():
    x, y = _blobs(10)
    model = torch.nn.Linear(4, 3)
    with pytest.raises(ValueError, match="batch_size"):
        evaluate(model, x, y, batch_size=0)
    with pytest.raises(ValueError, match="labels has 9 entries"):
        evaluate(model, x, y[:9], batch_size=4)
    with pytest.raises(ValueError, match="epochs"):
        train_classifier(model, x, y, x, y, epochs=0, lr=0.1, batch_size=4, seed=0, checkpoint_path="unused.pt")


def test_metrics():
    logits = torch.tensor([[2.0, 0.1], [0.0, 1.0], [3.0, -1.0], [0.2, 0.1]])
    labels = torch.tensor([0, 1, 1, 1])
    assert accuracy(logits, labels) == 0.5
    assert accuracy(torch.tensor([0, 1, 1, 1]), labels) == 1.0
    # AUROC of the positive-class score: positives {1, -1, 0.1}, negatives {0.1} -> (1 + 0 + 0.5) / 3
    assert auroc(labels, logits[:, 1]) == pytest.approx(1.5 / 3)
    probs = torch.softmax(torch.randn(30, 3, generator=torch.Generator().manual_seed(0)), dim=1)
    perfect = F.one_hot(torch.arange(30) % 3, 3).double()
    assert auroc(torch.arange(30) % 3, perfect) == 1.0
    assert 0.0 <= auroc(torch.arange(30) % 3, probs) <= 1.0
    with pytest.raises(ValueError, match="both classes"):
        auroc(torch.zeros(4), torch.rand(4))


def test_format_table_aligns_columns():
    rows = [
        {"model": "hebb-cde", "acc": 0.91234, "params": 1234},
        {"model": "delta-cde", "acc": math.nan, "params": 99},
    ]
    text = format_table(
        rows, ["model", "acc", "params"], headers=["model", "test acc", "params"], formats={"acc": ".3f"}
    )
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1  # every line equally wide
    assert lines[2] == "| hebb-cde  |    0.912 |   1234 |"
    assert lines[3] == "| delta-cde |      nan |     99 |"
    assert lines[1].endswith(":|")  # numeric column right-aligned in markdown


def test_nonfinite_adjoint_gradient_names_the_adjoint(tmp_path):
    """delta-cde at length 1000 in float32 with the continuous adjoint: the gradient overflows (its backward
    re-integration of the contracting state blows up), and the message says that, not "lower the learning
    rate"; the same data with the default gradient method takes its step."""
    from neuralde_seq import SolverOptions, build_control, create_model

    g = torch.Generator().manual_seed(0)
    length = 1000
    times = torch.arange(length, dtype=torch.float32).repeat(4, 1)
    values = torch.cumsum(torch.randn(4, length, 2, generator=g), dim=1) / length**0.5
    control = build_control(times, values)
    labels = torch.tensor([0, 1, 0, 1])
    kwargs = dict(epochs=1, lr=1e-3, batch_size=4, seed=0, progress=False)
    torch.manual_seed(0)
    model = create_model("delta-cde", control, 2, d_model=8, n_heads=2, solver=SolverOptions(gradient=Adjoint()))
    with pytest.warns(RuntimeWarning, match="continuous adjoint"):
        with pytest.raises(TrainingDiverged, match="non-finite gradient") as info:
            train_classifier(model, control, labels, control, labels, checkpoint_path=tmp_path / "a.pt", **kwargs)
    assert "continuous adjoint" in str(info.value) and "gradient=Checkpoint()" in str(info.value)

    torch.manual_seed(0)
    model = create_model("delta-cde", control, 2, d_model=8, n_heads=2)
    history = train_classifier(model, control, labels, control, labels, checkpoint_path=tmp_path / "c.pt", **kwargs)
    assert history["steps"] == 1 and math.isfinite(history["train_loss"][0])


def test_nonfinite_gradient_without_adjoint_gives_generic_advice(tmp_path):
    x, y = _blobs(20)
    with pytest.raises(TrainingDiverged, match="lower learning rate") as info:
        train_classifier(
            NaNGrad(4, 3, nan_at=1),
            x,
            y,
            x,
            y,
            checkpoint_path=tmp_path / "r.pt",
            epochs=1,
            lr=0.1,
            batch_size=8,
            seed=0,
            progress=False,
        )
    assert "adjoint" not in str(info.value)


class _ThreadsSeen(torch.nn.Module):
    """A linear classifier recording torch's thread count at every training forward."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.seen = set()

    def forward(self, x):
        if self.training:
            self.seen.add(torch.get_num_threads())
        return self.linear(x)


@pytest.mark.parametrize("threads, expected", [("default", 1), (2, 2), (None, 3)])
def test_training_threads_applied_while_training_and_restored(threads, expected):
    x, y = _blobs(20)
    model = _ThreadsSeen()
    kwargs = {} if threads == "default" else {"threads": threads}
    torch.set_num_threads(3)
    try:
        train_classifier(model, x, y, x, y, epochs=2, lr=0.01, batch_size=5, seed=0, progress=False, **kwargs)
        assert model.seen == {expected}  # default 1; None leaves torch's own setting
        assert torch.get_num_threads() == 3  # put back afterwards
        model.linear.weight.data.fill_(float("nan"))  # restored also when training raises (here: before any step)
        with pytest.raises(ValueError, match="before any training step"):
            train_classifier(model, x, y, x, y, epochs=1, lr=0.01, batch_size=5, seed=0, progress=False, **kwargs)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(1)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="threads must be a positive integer or None"):
            train_classifier(model, x, y, x, y, epochs=1, lr=0.01, batch_size=5, seed=0, progress=False, threads=bad)


class _ThreadsSeenWhileScoring(_ThreadsSeen):
    def forward(self, x):
        self.seen.add(torch.get_num_threads())
        return self.linear(x)


@pytest.mark.parametrize("threads, expected", [("default", 1), (2, 2), (None, 3)])
def test_scoring_threads_as_in_training(threads, expected):
    x, y = _blobs(20)
    kwargs = {} if threads == "default" else {"threads": threads}
    torch.set_num_threads(3)
    try:
        for score in (lambda m: evaluate(m, x, y, 8, **kwargs), lambda m: predict(m, x, 8, **kwargs)):
            model = _ThreadsSeenWhileScoring().eval()
            score(model)
            assert model.seen == {expected}
            assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(1)
