"""Datasets, the ``.ts`` reader, transforms and the embedded JapaneseVowels data."""

from .datasets import DatasetSplits, IrregularDataset, embedded_path, from_ts, load_japanese_vowels, stratified_split
from .transforms import channel_statistics, drop_observations, num_dropped, standardise
from .ts_format import TsData, parse_ts, read_ts

__all__ = [
    "DatasetSplits",
    "IrregularDataset",
    "TsData",
    "channel_statistics",
    "drop_observations",
    "embedded_path",
    "from_ts",
    "load_japanese_vowels",
    "num_dropped",
    "parse_ts",
    "read_ts",
    "standardise",
    "stratified_split",
]
