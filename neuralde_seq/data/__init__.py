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

The names below are the wing's public API. The modules that moved into rooms keep their old paths for code outside
the package: ``import neuralde_seq.data.uea`` still works and warns (``DeprecationWarning``) with the new path.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

from .formats.arff import parse_arff, read_arff
from .formats.arrays import from_arrays, from_concatenated, pad_sequences
from .base.datasets import DatasetSplits, IrregularDataset, stratified_split
from .base.options import LoadOptions
from .formats.ts_format import TsData, from_ts, parse_ts, read_ts
from .sources.japanese_vowels import embedded_path, load_japanese_vowels
from .io.cache_integrity import ChecksumError
from ..cache import CorruptCacheError, cached_tensors
from .io.download import DataUnavailableError, RemoteFile, data_dir, fetch
from .io.extraction import extract_archive
from .formats.local_files import load_files, read_file
from .formats.dataframes import from_long_dataframe
from .sources.physionet import load_physionet_sepsis
from .sources.speech_commands import load_speech_commands
from .synthetic.stress import ADDING_TRIVIAL_MSE, WARPED_ADDING_CLASSES, SyntheticSequences, adding_problem, \
    copy_memory, warped_adding
from .transforms.time_warps import WARP_KINDS, TimeWarp, time_warp, warp_times
from .synthetic.records import RecordsSpec, SimulatedRecords, simulate_records
from .synthetic.trajectories import SemiMarkovTask, TrajectoryTask, semi_markov_task, trajectory_task
from .transforms.long_series import concatenated
from .transforms.sampling import (drop_observations, fill_gaps, median_step, num_dropped, random_crop_and_drop,
                                  subsample)
from .transforms.standardisation import channel_statistics, standardise
from .sources.uea import load_character_trajectories, load_eigenworms, load_uea

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

# ---------------------------------------------------------------------------------------------------
# The old module paths of the flat data/ (before the rooms): old name -> the modules that now hold its names, the
# first being "where it went". Importing an old path gives a module that looks names up there, and warns.
# ``transforms`` and ``synthetic`` are not here: they became rooms under the same names, which export the old names.
MOVED_MODULES = {
    "arff": ("formats.arff",),
    "arrays": ("formats.arrays",),
    "audio": ("sources.audio",),
    "cache_integrity": ("io.cache_integrity",),
    "dataframes": ("formats.dataframes",),
    "datasets": ("base.datasets", "formats.ts_format", "sources.japanese_vowels"),
    "download": ("io.download",),
    "extraction": ("io.extraction",),
    "local_files": ("formats.local_files",),
    "physionet": ("sources.physionet",),
    "speech_commands": ("sources.speech_commands",),
    "text_files": ("formats.text_files",),
    "time_warps": ("transforms.time_warps",),
    "trajectories": ("synthetic.trajectories",),
    "ts_format": ("formats.ts_format",),
    "uea": ("sources.uea",),
}


def _new_paths(old: str) -> list[str]:
    return [f"{__name__}.{target}" for target in MOVED_MODULES[old]]


def _moved_module(old: str) -> types.ModuleType:
    """A stand-in for the old module ``neuralde_seq.data.<old>``: its attributes are looked up, in order, in the
    modules that hold them now (so ``from neuralde_seq.data.uea import load_uea`` keeps working)."""
    new = _new_paths(old)
    warnings.warn(f"{__name__}.{old} moved to {new[0]}; import it from there (the old path will be removed)",
                  DeprecationWarning, stacklevel=3)
    module = types.ModuleType(f"{__name__}.{old}", f"Moved to {', '.join(new)} (deprecated alias).")

    def __getattr__(name: str):
        for path in new:
            target = importlib.import_module(path)
            if name == "__all__":
                return [n for p in new for n in getattr(importlib.import_module(p), "__all__", [])]
            if hasattr(target, name):
                return getattr(target, name)
        raise AttributeError(f"module {__name__}.{old} (moved to {new[0]}) has no attribute {name!r}")

    def __dir__():
        return sorted({n for p in new for n in dir(importlib.import_module(p))})

    module.__getattr__ = __getattr__
    module.__dir__ = __dir__
    return module


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``neuralde_seq.data.<old>`` for the names of `MOVED_MODULES` (only where no real module is: it sits
    last on ``sys.meta_path``) and loads the stand-in of `_moved_module`."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, old = fullname.rpartition(".")
        if package != __name__ or old not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return _moved_module(spec.name.rpartition(".")[2])

    def exec_module(self, module):
        pass  # the stand-in is complete when created


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())


def __getattr__(name: str):
    # ``neuralde_seq.data.uea`` as an attribute, without an import statement (the flat package imported them all)
    if name in MOVED_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
