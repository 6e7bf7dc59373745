"""Distributed data parallel training: two gloo processes on CPU train exactly as one process does.

:func:`neuralde_seq.training.fit` splits every global batch into ``batch[rank::world]`` shares and weights
each share's loss so that DistributedDataParallel's averaged gradient is the gradient of the global batch's
mean loss. Here a real model of the package (a neural CDE on a built control, float64) is trained by
:func:`fit` in one process and in two (:func:`~neuralde_seq.training.distributed.launch`), on 11 samples in
batches of 5, 5 and 1: uneven shares (3 + 2) and a last batch smaller than the number of processes (one
share empty). Every step's gradient, the parameters, the metrics every rank reports and the checkpoints
must agree, and only rank 0 may write files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from neuralde_seq import build_control, create_model
from neuralde_seq.training import BestCheckpoint, Callback, Classification, fit
from neuralde_seq.training.distributed import DistributedError, backend_for, init_from_env, launch, world

N_TRAIN, N_VAL, BATCH, EPOCHS, SEED = 11, 7, 5, 2, 3  # batches of 5, 5, 1 per epoch: 6 optimizer steps
TOLERANCE = 1e-6


def _problem():
    """(model, train, val), identical in every process: fixed seeds, float64, a few missing values."""
    g = torch.Generator().manual_seed(0)
    n = N_TRAIN + N_VAL
    times = torch.linspace(0.0, 1.0, 8, dtype=torch.float64).repeat(n, 1)
    values = torch.randn(n, 8, 2, generator=g, dtype=torch.float64)
    labels = (values[:, :, 0].sum(1) > 0).long()
    values[0, 3, 1] = values[12, 4, 0] = float("nan")  # interpolated by the control
    control = build_control(times, values)
    torch.manual_seed(1)
    model = create_model("ncde", control, 2, hidden=4, width=8, depth=1).double()
    train, val = torch.arange(N_TRAIN), torch.arange(N_TRAIN, n)
    return model, (control[train], labels[train]), (control[val], labels[val])


class _Record(Callback):
    """Every step's gradients (as the optimizer sees them: after DDP's averaging), the torch seed of the
    process and the parameters after the last step (before BestCheckpoint, listed after it, restores the
    best ones)."""

    def __init__(self):
        self.gradients, self.seed, self.last_parameters = [], None, None

    def on_fit_start(self, state):
        self.seed = torch.initial_seed()

    def on_after_backward(self, state, gradients):
        self.gradients.append([g.detach().clone() for g in gradients])

    def on_fit_end(self, state):
        self.last_parameters = [p.detach().clone() for p in state.model.parameters()]


def _train(folder) -> dict:
    """One :func:`fit` of the problem, with a best checkpoint and a resume checkpoint in ``folder``."""
    folder = Path(folder)
    model, train, val = _problem()
    record = _Record()
    history = fit(
        model,
        Classification(2),
        train,
        val=val,
        epochs=EPOCHS,
        lr=0.05,
        batch_size=BATCH,
        seed=SEED,
        eval_every=2,
        eval_batch_size=3,
        resume_path=folder / "last.pt",
        progress=False,
        callbacks=[record, BestCheckpoint(folder / "best.pt", monitor="loss")],
    )
    return {
        "gradients": record.gradients,
        "last_parameters": record.last_parameters,
        "seed": record.seed,
        "best_parameters": [p.detach().clone() for p in model.parameters()],
        "history": history,
    }


def _train_in_group(folder: str) -> dict:
    """:func:`_train` in a process of a launch, recording the files this process writes (every file is written
    to a temporary file that os.replace then moves onto its name: neuralde_seq.files.atomic_file)."""
    written = []
    replace = os.replace

    def recording_replace(source, destination, *args, **kwargs):
        written.append(Path(destination).name)
        return replace(source, destination, *args, **kwargs)

    os.replace = recording_replace
    try:
        result = _train(folder)
    finally:
        os.replace = replace
    return {**result, "rank_and_world": world(), "written": written}


def _max_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    assert [t.shape for t in a] == [t.shape for t in b]
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def _same_numbers(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9
    return a == b


def test_two_gloo_processes_train_as_one_process(tmp_path):
    single = _train(tmp_path / "single")
    ranks = launch(_train_in_group, 2, (str(tmp_path / "ddp"),), timeout=60)

    steps = len(single["gradients"])
    assert steps == EPOCHS * 3
    # The gradients are far from zero: a test of their equality can fail.
    assert min(max(float(g.abs().max()) for g in step) for step in single["gradients"]) > 1e-3
    differences = {"gradient": 0.0, "parameter": 0.0}
    for rank, result in enumerate(ranks):
        assert result["rank_and_world"] == (rank, 2)
        assert result["seed"] == SEED + rank  # per-rank randomness; the data order is shared
        assert len(result["gradients"]) == steps
        for got, want in zip(result["gradients"], single["gradients"]):
            differences["gradient"] = max(differences["gradient"], _max_difference(got, want))
        differences["parameter"] = max(
            differences["parameter"],
            _max_difference(result["last_parameters"], single["last_parameters"]),
            _max_difference(result["best_parameters"], single["best_parameters"]),
        )
        # Every rank reports the single process's metrics: training statistics reduced over the ranks,
        # validation outputs gathered in sample order.
        history, expected = result["history"], single["history"]
        reported = [k for k in expected if k.startswith(("train_", "val_", "best_")) and not k.endswith("_seconds")]
        assert {"train_loss", "train_accuracy", "val_loss", "val_accuracy", "val_auroc"} <= set(reported)
        for key in reported + ["epoch", "step", "steps", "best_epoch", "stopped_by"]:
            got, want = history[key], expected[key]
            if isinstance(want, list):
                assert len(got) == len(want) and all(map(_same_numbers, got, want)), (rank, key, got, want)
            else:
                assert _same_numbers(got, want), (rank, key, got, want)
    print(f"max |2 processes - 1 process|: {differences}")
    assert differences["gradient"] < TOLERANCE and differences["parameter"] < TOLERANCE

    # Only rank 0 writes; its checkpoints hold the single process's weights.
    assert ranks[1]["written"] == []
    assert {"best.pt", "last.pt"} <= set(ranks[0]["written"])
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == ["best.pt", "last.pt"]
    for name in ("best.pt", "last.pt"):
        got = torch.load(tmp_path / "ddp" / name, weights_only=True)["model_state"]
        want = torch.load(tmp_path / "single" / name, weights_only=True)["model_state"]
        assert got.keys() == want.keys()
        assert _max_difference(list(got.values()), list(want.values())) < TOLERANCE


def _fail_on_rank_one():
    if world()[0] == 1:
        raise ValueError("rank one fails on purpose")
    dist.barrier()  # rank 0 waits for a peer that is gone


def test_a_failing_process_is_raised_with_its_rank_and_error():
    with pytest.raises(DistributedError, match=r"rank 1 .*ValueError: rank one fails on purpose") as info:
        launch(_fail_on_rank_one, 2, timeout=30)
    assert info.value.rank == 1 and "_fail_on_rank_one" in info.value.child_traceback


def test_backend_and_environment(monkeypatch):
    assert backend_for("cpu") == "gloo" and backend_for("cuda:1") == "nccl"
    # Outside a multi-process environment nothing is initialised: one process trains as before.
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_from_env("cpu") == torch.device("cpu") and not dist.is_initialized() and world() == (0, 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    for name in ("LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="MASTER_ADDR"):
        init_from_env("cpu")


def test_python_m_neuralde_seq_runs_the_command_line():
    # `torchrun -m neuralde_seq bench ...` needs the package to be runnable as a module.
    done = subprocess.run(
        [sys.executable, "-m", "neuralde_seq", "bench", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "neuralde-seq bench" in done.stdout
