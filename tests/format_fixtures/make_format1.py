"""Write the format-1 fixtures of tests/test_migration.py: files as neuralde_seq wrote them before files carried a
format version (the last such writer is commit 539f159). Kept to show how the fixtures were made; it runs against
that commit's package, not this one:

    git worktree add --detach /tmp/format1 539f159
    PYTHONPATH=/tmp/format1 python tests/format_fixtures/make_format1.py tests/format_fixtures/format1

It writes, under the folder given:
    config.json    the grid's config (small: japanese-vowels, one seed, three epochs)
    grid/          a finished grid (bench): a trained NCDE (an explicit solver), a GRU-Δt, a summary-features row
    interrupted/   the same grid stopped after the NCDE's second resume checkpoint: last.pt, no result
    cache/         a log-signature control cached by `cached_logsignature_control` (and inputs.pt, its inputs)
"""
import json
import shutil
import sys
from pathlib import Path

import torch

from neuralde_seq.controls import cached_logsignature_control
from neuralde_seq.training import checkpoints
from neuralde_seq.training.runner import run_benchmark

CONFIG = {
    "name": "format1", "task": "japanese-vowels", "task_options": {"drop_rate": 0.3}, "seeds": [0],
    "training": {"epochs": 3, "lr": 1e-2, "batch_size": 64},
    "models": [
        {"label": "NCDE", "model": "ncde", "options": {"hidden": 8, "width": 8},
         "solver": {"method": "rk4", "step_size": 0.5}},
        {"label": "GRU-dt", "model": "gru-dt", "options": {"hidden": 8}},
        {"label": "summary", "model": "summary-features"},
    ],
    "evaluate": [{"label": "drop 50%", "drop_rate": 0.5}],
}


class Interrupted(Exception):
    pass


def main(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1))
    run_benchmark(CONFIG, out_dir=out / "grid", progress=False)

    saves, save = [], checkpoints.ResumeCheckpoint.save

    def save_then_stop(self, snapshot):
        save(self, snapshot)
        saves.append(snapshot["epoch"])
        if len(saves) == 2:
            raise Interrupted
    checkpoints.ResumeCheckpoint.save = save_then_stop
    try:
        run_benchmark(CONFIG, out_dir=out / "interrupted", progress=False)
    except Interrupted:
        pass
    finally:
        checkpoints.ResumeCheckpoint.save = save
    assert saves, "the interrupted grid saved no resume checkpoint"

    generator = torch.Generator().manual_seed(0)
    times = torch.cumsum(torch.rand(3, 40, generator=generator, dtype=torch.float64) + 0.1, dim=1)
    values = torch.randn(3, 40, 2, generator=generator, dtype=torch.float64)
    torch.save({"times": times, "values": values}, out / "cache_inputs.pt")
    cached_logsignature_control(out / "cache", times, values, interpolation="logsignature", depth=2, step=5,
                                key_parts=("format1",))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
