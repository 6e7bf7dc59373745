"""Benchmark script: Speech Commands v0.02 (MFCC): paper 002 Table 1 (other configs: romero2022_table3_speech_commands*.yaml, romero2022_table4_speech_commands_raw_drop*.yaml).

A thin wrapper of `neuralde-seq bench` (neuralde_seq.training.runner.run_benchmark)::

    python tasks/speech_commands.py [--config tasks/configs/irie2022_table1_speech_commands.yaml]
        [--set training.epochs=1] [--models ROWS] [--seeds 0,1] [--out DIR] [--resume] [--max-steps N]

Outputs, config schema and recorded results: docs/benchmarks.md.
"""
import sys
from pathlib import Path

from neuralde_seq.cli import task_main

if __name__ == "__main__":
    sys.exit(task_main(Path(__file__).resolve().parent / "configs" / "irie2022_table1_speech_commands.yaml", description=__doc__))
