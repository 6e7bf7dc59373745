"""The benchmark scripts (benchmarks/*.py) imported as modules by the tests that check them."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@contextlib.contextmanager
def benchmark_script(name: str):
    """benchmarks/<name>.py as a module named ``<name>_benchmark``, with benchmarks/ on sys.path meanwhile (the
    scripts import their neighbours, e.g. `machine`); both are removed afterwards."""
    sys.path.insert(0, str(BENCHMARKS))
    module_name = f"{name}_benchmark"
    try:
        spec = importlib.util.spec_from_file_location(module_name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # a script's dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(module_name, None)
        sys.path.remove(str(BENCHMARKS))
