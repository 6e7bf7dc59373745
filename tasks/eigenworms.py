"""Benchmark script: UEA EigenWorms: paper 002 Table 2.

A thin wrapper of `neuralde-seq bench` (neuralde_seq.training.runner.run_benchmark)::

    python tasks/eigenworms.py [--config tasks/configs/irie2022_table2_eigenworms.yaml]
        [--set training.epochs=1] [--models ROWS] [--seeds 0,1] [--out DIR] [--resume] [--max-steps N]

Outputs, config schema and recorded results: docs/benchmarks.md.
"""
import sys
from pathlib import Path

from neuralde_seq.cli import task_main

if __name__ == "__main__":
    sys.exit(task_main(Path(__file__).resolve().parent / "configs" / "irie2022_table2_eigenworms.yaml", description=__doc__))
