"""Datasets by source, each module a loader and the benchmark task it registers (`register_task`): the embedded
JapaneseVowels data, Speech Commands (with its audio features, `audio`), PhysioNet 2019, the UEA & UCR archives,
local files (the ``files`` task), the warped adding problem and the simulated ICU stays (``icu-records``).

Importing this package registers every task, in this order (the order `TASKS` lists them in). A new dataset is a
new module here that defines its loader and registers its task, plus one import line below."""

# The registration order is the order `TASKS` lists the tasks in: not sorted.
# isort: off
from . import japanese_vowels, speech_commands, physionet, uea, local, warped_adding  # noqa: F401  (registration)
from . import icu_records  # noqa: F401  (registration, after warped adding)
# isort: on

from .icu_records import icu_records_splits
from .japanese_vowels import embedded_path, japanese_vowels_splits, load_japanese_vowels
from .local import local_files_splits
from .physionet import load_physionet_sepsis
from .speech_commands import load_speech_commands
from .uea import load_character_trajectories, load_eigenworms, load_uea
from .warped_adding import warped_adding_splits

__all__ = [
    "embedded_path",
    "japanese_vowels_splits",
    "load_japanese_vowels",
    "local_files_splits",
    "load_physionet_sepsis",
    "load_speech_commands",
    "load_character_trajectories",
    "load_eigenworms",
    "load_uea",
    "warped_adding_splits",
    "icu_records_splits",
]
