"""Datasets: the data wing of the package, in rooms (docs/design.md#data-wing).

* `neuralde_seq.data.base`: the containers every room uses (`IrregularDataset`, `DatasetSplits`), the loaders' shared
  options (`LoadOptions`) and the task registry (`Task`, `TASKS`, `register_task`);
* `neuralde_seq.data.io`: the cache directory, verified downloads, cache integrity and archive extraction;
* `neuralde_seq.data.formats`: ``.ts`` and ARFF files, local files, numpy arrays and pandas DataFrames;
* `neuralde_seq.data.transforms`: dropping, subsampling, cropping, standardisation, time warps, long series;
* `neuralde_seq.data.synthetic`: copy memory, the adding problem, warped adding, trajectories of dynamical systems,
  simulated ICU stays with a known ground truth (`simulate_records`);
* `neuralde_seq.data.sources`: each dataset's loader, registering its benchmark task (the embedded JapaneseVowels
  data, Speech Commands, PhysioNet 2019, the UEA & UCR archives, local files, warped adding, ICU records);
* `neuralde_seq.data.protocols`: the protocol that runs a task (``load_task``: splits, standardisation, test-set
  variants); import it from there (it is not re-exported here).

The names below are the wing's public API.
"""

from ..cache import CorruptCacheError, cached_tensors
from .base.datasets import DatasetSplits, IrregularDataset, stratified_split
from .base.options import LoadOptions
from .formats.arff import parse_arff, read_arff
from .formats.arrays import from_arrays, from_concatenated, pad_sequences
from .formats.dataframes import from_long_dataframe
from .formats.local_files import load_files, read_file
from .formats.ts_format import TsData, from_ts, parse_ts, read_ts
from .io.cache_integrity import ChecksumError
from .io.download import DataUnavailableError, RemoteFile, data_dir, fetch
from .io.extraction import extract_archive
from .sources.japanese_vowels import embedded_path, load_japanese_vowels
from .sources.physionet import load_physionet_sepsis
from .sources.speech_commands import load_speech_commands
from .sources.uea import load_character_trajectories, load_eigenworms, load_uea
from .synthetic.records import RecordsSpec, SimulatedRecords, simulate_records
from .synthetic.stress import (
    ADDING_TRIVIAL_MSE,
    WARPED_ADDING_CLASSES,
    SyntheticSequences,
    adding_problem,
    copy_memory,
    warped_adding,
)
from .synthetic.trajectories import SemiMarkovTask, TrajectoryTask, semi_markov_task, trajectory_task
from .transforms.long_series import concatenated
from .transforms.sampling import drop_observations, fill_gaps, median_step, num_dropped, random_crop_and_drop, subsample
from .transforms.standardisation import channel_statistics, standardise
from .transforms.time_warps import WARP_KINDS, TimeWarp, time_warp, warp_times

__all__ = [
    "RecordsSpec",
    "SimulatedRecords",
    "simulate_records",
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
    "LoadOptions",
    "RemoteFile",
    "TsData",
    "cached_tensors",
    "channel_statistics",
    "data_dir",
    "drop_observations",
    "concatenated",
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
    "fill_gaps",
    "median_step",
]
