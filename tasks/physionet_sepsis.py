"""Benchmark script: PhysioNet 2019 sepsis prediction (AUROC): paper 002 Table 1, OI column (other configs: irie2022_table1_physionet_no_oi.yaml, romero2022_table4_physionet.yaml).

A thin wrapper of `neuralde-seq bench` (neuralde_seq.training.runner.run_benchmark)::

    python tasks/physionet_sepsis.py [--config tasks/configs/irie2022_table1_physionet_oi.yaml]
        [--set training.epochs=1] [--models ROWS] [--seeds 0,1] [--out DIR] [--resume] [--max-steps N]

Outputs, config schema and recorded results: docs/benchmarks.md.
"""
import sys
from pathlib import Path

from neuralde_seq.cli import task_main

if __name__ == "__main__":
    sys.exit(task_main(Path(__file__).resolve().parent / "configs" / "irie2022_table1_physionet_oi.yaml", description=__doc__))
