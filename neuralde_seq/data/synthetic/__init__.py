"""Synthetic data drawn here, no file needed: the stress tasks (`stress`: copy memory, the adding problem, warped
adding), trajectories of known dynamical systems (`trajectories`) and simulated ICU stays with a known ground
truth (`records`).

``neuralde_seq.data.synthetic`` was the stress tasks' module before it became this room; its names are all here
still."""

from .records import (
    RECORDS_CHANNELS,
    RECORDS_CLASSES,
    RECORDS_PARTS,
    RECORDS_SIGNAL_CHANNELS,
    RecordsSpec,
    SimulatedRecords,
    simulate_records,
)
from .stress import (
    ADDING_MARKERS,
    ADDING_TRIVIAL_MSE,
    WARPED_ADDING_CLASSES,
    SyntheticSequences,
    adding_problem,
    copy_memory,
    warped_adding,
)
from .trajectories import SemiMarkovTask, TrajectoryTask, semi_markov_task, trajectory_task

__all__ = [
    "ADDING_MARKERS",
    "ADDING_TRIVIAL_MSE",
    "WARPED_ADDING_CLASSES",
    "SyntheticSequences",
    "adding_problem",
    "copy_memory",
    "warped_adding",
    "SemiMarkovTask",
    "TrajectoryTask",
    "semi_markov_task",
    "trajectory_task",
    "RECORDS_CHANNELS",
    "RECORDS_CLASSES",
    "RECORDS_PARTS",
    "RECORDS_SIGNAL_CHANNELS",
    "RecordsSpec",
    "SimulatedRecords",
    "simulate_records",
]
