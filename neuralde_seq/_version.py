"""The library's version, in a module of its own: the cache keys read it, and a module inside the package must
not import the package's ``__init__`` (which imports everything)."""

__version__ = "0.1.0"
