"""Getting dataset files onto the disk, safely: the cache directory and verified downloads (`download`), checksums,
manifests and the entry lock (`cache_integrity`), and archive extraction (`extraction`). The order is one way:
``extraction`` and ``download`` import ``cache_integrity``, which imports neither."""

from .cache_integrity import ChecksumError
from .download import DataUnavailableError, RemoteFile, data_dir, fetch
from .extraction import extract_archive

__all__ = ["ChecksumError", "DataUnavailableError", "RemoteFile", "data_dir", "extract_archive", "fetch"]
