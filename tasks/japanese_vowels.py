"""Benchmark script: the embedded JapaneseVowels data: Delta-CDE, NCDE and CKCNN over 3 seeds, 30 % of the observations dropped.

A thin wrapper of `neuralde-seq bench` (neuralde_seq.training.runner.run_benchmark)::

    python tasks/japanese_vowels.py [--config tasks/configs/japanese_vowels.yaml]
        [--set training.epochs=1] [--models ROWS] [--seeds 0,1] [--out DIR] [--resume] [--max-steps N]

Outputs, config schema and recorded results: docs/benchmarks.md.
"""
import sys
from pathlib import Path

from neuralde_seq.cli import task_main

if __name__ == "__main__":
    sys.exit(task_main(Path(__file__).resolve().parent / "configs" / "japanese_vowels.yaml", description=__doc__))
