"""Reading series from files and Python objects: the ``.ts`` and ARFF text formats (over the one encoding policy and
number grammar of `text_files`), local files by extension (`local_files`), numpy arrays (`arrays`) and long pandas
DataFrames (`dataframes`), each into an `IrregularDataset`."""

from .arff import parse_arff, read_arff
from .arrays import from_arrays, from_concatenated, pad_sequences
from .dataframes import from_long_dataframe
from .local_files import find_split_files, load_files, read_file
from .ts_format import TsData, from_ts, parse_ts, read_ts

__all__ = [
    "parse_arff",
    "read_arff",
    "from_arrays",
    "from_concatenated",
    "pad_sequences",
    "from_long_dataframe",
    "find_split_files",
    "load_files",
    "read_file",
    "TsData",
    "from_ts",
    "parse_ts",
    "read_ts",
]
