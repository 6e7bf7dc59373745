"""Resuming training from the last checkpoint, validation-metric selection, and max_steps.

The resume tests train a tiny CKCNN with dropout on a subset of the embedded JapaneseVowels data (CPU):
dropout draws from the global torch RNG and the batch order from the trainer's generator, so a resumed
run only matches the uninterrupted one if both random states, the optimizer state and the best-so-far
bookkeeping are restored exactly.
"""

import pytest
import torch

from neuralde_seq.data.protocols import load_task
from neuralde_seq.models import create_model
from neuralde_seq.training import Callback, ModelArguments, load_checkpoint, train_classifier
from neuralde_seq.training.run import build_model_inputs

EPOCHS = 5


@pytest.fixture(scope="module")
def data():
    train, val, _ = load_task("japanese-vowels", seed=0, drop_rate=0.3).splits
    train, val = train.subset(torch.arange(48)), val.subset(torch.arange(20))
    return {name: (build_model_inputs("ckcnn", ds), ds.labels) for name, ds in (("train", train), ("val", val))}


def _model(init_seed=0):
    torch.manual_seed(init_seed)
    return create_model("ckcnn", 12, 9, hidden=8, blocks=1, kernel_hidden=8, omega_0=10.0, horizon=28.0, dropout=0.3)


def _train(data, model, path, **kwargs):
    options = dict(epochs=EPOCHS, lr=1e-2, batch_size=16, seed=7, progress=False, checkpoint_path=path / "best.pt")
    options.update(kwargs)
    return train_classifier(model, *data["train"], *data["val"], **options)


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_same_run(model_a, hist_a, model_b, hist_b, path_a, path_b):
    state_a, state_b = _state(model_a), _state(model_b)
    assert state_a.keys() == state_b.keys()
    for k in state_a:
        assert torch.equal(state_a[k], state_b[k]), k  # bitwise
    for key in ("train_loss", "train_accuracy", "val_accuracy", "val_loss", "val_auroc"):
        assert hist_a[key] == hist_b[key], key
    for key in ("best_epoch", "best_val_accuracy", "best_val_loss", "epochs_run", "steps"):
        assert hist_a[key] == hist_b[key], key
    last_a = torch.load(path_a / "best.last.pt", weights_only=True)["model_state"]
    last_b = torch.load(path_b / "best.last.pt", weights_only=True)["model_state"]
    assert all(torch.equal(last_a[k], last_b[k]) for k in last_a)


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("reference")
    model = _model()
    # dropout is active in training, so the global RNG matters for the result
    model.train()
    x = data["train"][0][torch.arange(4)]
    assert not torch.equal(model(x), model(x))
    history = _train(data, model, path)
    assert history["best_epoch"] >= 1 and len(set(history["val_loss"])) == EPOCHS
    return model, history, path


def test_resume_after_shorter_run_equals_uninterrupted(data, reference, tmp_path):
    ref_model, ref_hist, ref_path = reference
    _train(data, _model(), tmp_path, epochs=2)
    # a different initialisation proves the weights come from the checkpoint
    model = _model(init_seed=123)
    torch.manual_seed(999)  # and a disturbed global RNG that the checkpoint's state must replace
    hist = _train(data, model, tmp_path, resume=True)
    assert hist["resumed_from_epoch"] == 2
    _assert_same_run(ref_model, ref_hist, model, hist, ref_path, tmp_path)


class Interrupt(Exception):
    pass


def test_resume_after_interruption_at_epoch_end(data, reference, tmp_path):
    ref_model, ref_hist, ref_path = reference

    class StopAfter3(Callback):
        def on_epoch_start(self, state):  # after epoch 3's checkpoints are written
            if state.epoch == 4:
                raise Interrupt

    with pytest.raises(Interrupt):
        _train(data, _model(), tmp_path, callbacks=[StopAfter3()])
    model = _model(init_seed=5)
    hist = _train(data, model, tmp_path, resume=True)
    assert hist["resumed_from_epoch"] == 3
    _assert_same_run(ref_model, ref_hist, model, hist, ref_path, tmp_path)


class KilledMidEpoch(torch.nn.Module):
    """Raises in the ``at``-th training forward: a run killed in the middle of an epoch."""

    def __init__(self, inner, at):
        super().__init__()
        self.inner, self.at, self.calls = inner, at, 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls == self.at:
                raise Interrupt
        return self.inner(x)


def test_resume_after_kill_mid_epoch_restarts_from_last_completed_epoch(data, reference, tmp_path):
    ref_model, ref_hist, ref_path = reference
    steps_per_epoch = 3  # 48 samples, batch 16
    killed = KilledMidEpoch(_model(), at=3 * steps_per_epoch + 2)  # second step of epoch 4
    with pytest.raises(Interrupt):
        # the wrapper adds no parameters, so its state dict is the inner model's under "inner."
        _train(data, killed, tmp_path)
    assert torch.load(tmp_path / "best.last.pt", weights_only=True)["epoch"] == 3
    model = KilledMidEpoch(_model(init_seed=9), at=-1)
    hist = _train(data, model, tmp_path, resume=True)
    assert hist["resumed_from_epoch"] == 3
    inner = model.inner
    for k, v in _state(ref_model).items():
        assert torch.equal(v, inner.state_dict()[k]), k
    for key in ("train_loss", "val_accuracy", "val_loss", "best_epoch", "steps"):
        assert hist[key] == ref_hist[key], key


def test_finished_run_is_not_trained_further_and_settings_must_match(data, tmp_path):
    model = _model()
    hist = _train(data, model, tmp_path, epochs=2, patience=1)
    before = _state(model)
    again = _model(init_seed=3)
    hist2 = _train(data, again, tmp_path, epochs=2, patience=1, resume=True)
    assert all(torch.equal(before[k], v) for k, v in _state(again).items())
    assert hist2["epochs_run"] == hist["epochs_run"]
    with pytest.raises(ValueError, match="lr: 0.01 there, 0.02 now"):
        _train(data, _model(), tmp_path, epochs=2, patience=1, lr=2e-2, resume=True)


# ------------------------------------------------------------------------------ selection and max_steps
def _binary_blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    x = torch.randn(n, 3, generator=g) + 0.7 * y[:, None]
    return x, y.long()


@pytest.mark.parametrize("select_on", ["auroc", "loss", "accuracy"])
def test_best_checkpoint_follows_selected_metric(tmp_path, select_on):
    x, y = _binary_blobs(64, 0)
    xv, yv = _binary_blobs(41, 1)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    hist = train_classifier(
        model,
        x,
        y,
        xv,
        yv,
        epochs=8,
        lr=0.05,
        batch_size=16,
        seed=1,
        progress=False,
        checkpoint_path=tmp_path / "b.pt",
        select_on=select_on,
    )
    epochs = range(8)
    if select_on == "auroc":
        best = max(epochs, key=lambda e: (hist["val_auroc"][e], -hist["val_loss"][e]))
    elif select_on == "loss":
        best = min(epochs, key=lambda e: hist["val_loss"][e])
    else:
        best = max(epochs, key=lambda e: (hist["val_accuracy"][e], -hist["val_loss"][e]))
    assert hist["best_epoch"] == best + 1
    assert load_checkpoint(tmp_path / "b.pt")["epoch"] == best + 1
    # the AUROC in the history is that of the validation scores (checked against a pair count)
    logits = model(xv).detach()
    score = logits[:, 1] - logits[:, 0]
    pos, neg = score[yv == 1], score[yv == 0]
    pairs = (pos[:, None] > neg[None, :]).double().sum() + 0.5 * (pos[:, None] == neg[None, :]).double().sum()
    assert hist["best_val_auroc"] == pytest.approx((pairs / (pos.numel() * neg.numel())).item(), abs=1e-12)


class CountingLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.train_calls = 0

    def forward(self, x):
        if self.training:
            self.train_calls += 1
        return self.linear(x)


def test_max_steps_stops_after_exactly_that_many_optimizer_steps(tmp_path):
    x, y = _binary_blobs(50, 0)
    model = CountingLinear()
    hist = train_classifier(
        model,
        x,
        y,
        x,
        y,
        epochs=10,
        lr=0.01,
        batch_size=8,
        seed=0,
        progress=False,
        checkpoint_path=tmp_path / "m.pt",
        max_steps=9,
    )  # 7 steps per epoch
    assert model.train_calls == 9 and hist["steps"] == 9
    assert hist["stopped_at_max_steps"] and hist["epochs_run"] == 2
    assert len(hist["val_accuracy"]) == 2


def test_model_arguments_pass_several_inputs(tmp_path):
    class TwoInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(3, 2)
            self.b = torch.nn.Linear(1, 2)

        def forward(self, x, s):
            return self.a(x) + self.b(s)

    x, y = _binary_blobs(20, 0)
    s = torch.arange(20.0)[:, None]
    model = TwoInputs()
    inputs = ModelArguments(x, s)
    assert len(inputs[torch.tensor([3, 5])]) == 2
    from neuralde_seq.training import predict

    torch.testing.assert_close(predict(model, inputs, batch_size=7), model(x, s))
    with pytest.raises(ValueError, match="different numbers of samples"):
        ModelArguments(x, s[:5])


def test_an_optimizer_saved_with_other_parameter_groups_is_a_named_checkpoint_error(tmp_path):
    # a linear CDE run saved before fit gave its matrices their own learning-rate groups: one group then, two now
    from neuralde_seq.training.checkpoints import CheckpointError, load_checkpoint, save_checkpoint

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    one_group = torch.optim.Adam(model.parameters(), lr=1e-3)
    path = save_checkpoint(tmp_path / "old.pt", model=model, optimizer=one_group)
    two_groups = torch.optim.Adam(
        [{"params": model[0].parameters()}, {"params": model[1].parameters(), "lr": 5e-4}], lr=1e-3
    )
    with pytest.raises(
        CheckpointError,
        match=r"old\.pt holds an optimizer with parameter groups of \[4\] parameters, "
        r"this run's has \[2, 2\]",
    ):
        load_checkpoint(path, model, two_groups)
    load_checkpoint(path, model, torch.optim.Adam(model.parameters(), lr=1e-3))  # the same groups load
