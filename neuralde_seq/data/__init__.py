"""Datasets and their loaders (downloads, cache, UEA, Speech Commands, PhysioNet), synthetic and trajectory
tasks, transforms and the embedded JapaneseVowels data.

The benchmark task registry (``TASKS``, ``load_task``: each task's loader, splits and standardisation)
is `neuralde_seq.data.protocols`; import it from there (it is not re-exported here)."""

from .arff import parse_arff, read_arff
from .arrays import from_arrays, from_concatenated, pad_sequences
from .datasets import DatasetSplits, IrregularDataset, embedded_path, from_ts, load_japanese_vowels, stratified_split
from .cache_integrity import ChecksumError
from ..cache import CorruptCacheError, cached_tensors
from .download import DataUnavailableError, RemoteFile, data_dir, fetch
from .extraction import extract_archive
from .local_files import load_files, read_file
from .dataframes import from_long_dataframe
from .physionet import load_physionet_sepsis
from .speech_commands import load_speech_commands
from .synthetic import ADDING_TRIVIAL_MSE, WARPED_ADDING_CLASSES, SyntheticSequences, adding_problem, copy_memory, \
    warped_adding
from .time_warps import WARP_KINDS, TimeWarp, time_warp, warp_times
from .trajectories import SemiMarkovTask, TrajectoryTask, semi_markov_task, trajectory_task
from .transforms import (channel_statistics, drop_observations, num_dropped, random_crop_and_drop, standardise,
                         subsample)
from .ts_format import TsData, parse_ts, read_ts
from .uea import load_character_trajectories, load_eigenworms, load_uea

__all__ = [
    "SemiMarkovTask",
    "TrajectoryTask",
    "semi_markov_task",
    "trajectory_task",
    "ADDING_TRIVIAL_MSE",
    "SyntheticSequences",
    "adding_problem",
    "copy_memory",
    "warped_adding",
    "WARPED_ADDING_CLASSES",
    "TimeWarp",
    "WARP_KINDS",
    "time_warp",
    "warp_times",
    "ChecksumError",
    "CorruptCacheError",
    "DataUnavailableError",
    "DatasetSplits",
    "IrregularDataset",
    "RemoteFile",
    "TsData",
    "cached_tensors",
    "channel_statistics",
    "data_dir",
    "drop_observations",
    "random_crop_and_drop",
    "embedded_path",
    "extract_archive",
    "fetch",
    "from_arrays",
    "from_concatenated",
    "from_ts",
    "from_long_dataframe",
    "load_files",
    "read_file",
    "load_character_trajectories",
    "load_eigenworms",
    "load_japanese_vowels",
    "load_physionet_sepsis",
    "load_speech_commands",
    "load_uea",
    "num_dropped",
    "pad_sequences",
    "parse_arff",
    "parse_ts",
    "read_arff",
    "read_ts",
    "standardise",
    "stratified_split",
    "subsample",
]
