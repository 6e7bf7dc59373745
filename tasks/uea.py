"""Benchmark script: any UEA/UCR archive dataset by name (task uea, task option name): give the config with --config.

A thin wrapper of `neuralde-seq bench` (neuralde_seq.training.runner.run_benchmark)::

    python tasks/uea.py --config CONFIG
        [--set training.epochs=1] [--models ROWS] [--seeds 0,1] [--out DIR] [--resume] [--max-steps N]

Outputs, config schema and recorded results: docs/benchmarks.md.
"""
import sys

from neuralde_seq.cli import task_main

if __name__ == "__main__":
    sys.exit(task_main(None, description=__doc__))
