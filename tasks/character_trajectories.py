"""Benchmark script: UEA CharacterTrajectories: paper 000 Table 3 (other configs: romero2022_table4_character_trajectories_drop{30,50,70}.yaml).

A thin wrapper of `neuralde-seq bench` (neuralde_seq.training.runner.run_benchmark)::

    python tasks/character_trajectories.py [--config tasks/configs/romero2022_table3_character_trajectories.yaml]
        [--set training.epochs=1] [--models ROWS] [--seeds 0,1] [--out DIR] [--resume] [--max-steps N]

Outputs, config schema and recorded results: docs/benchmarks.md.
"""
import sys
from pathlib import Path

from neuralde_seq.cli import task_main

if __name__ == "__main__":
    sys.exit(task_main(Path(__file__).resolve().parent / "configs" / "romero2022_table3_character_trajectories.yaml", description=__doc__))
