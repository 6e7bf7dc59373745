"""Execute the comparison notebooks: the jupytext .py files are the source, the executed .ipynb the output.

    python notebooks/execute.py                              # every notebook, small budget, into docs/notebooks/
    python notebooks/execute.py notebooks/02_forms.py --budget full --figures /tmp/figures

Each notebook reads its budget from the environment variable NEURALDE_SEQ_BUDGET ("small" unless set), so
the full budget is one variable away both here (--budget full) and in an editor (change the default in the
first cell). A cell that raises stops the run with the notebook's name, the cell and the traceback, and the
exit status is 1: CI runs this script, so a broken notebook fails CI. The executed notebooks are what the
documentation site renders (docs/notebooks/ is generated, not committed, so the site never shows outputs
from older code).
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from pathlib import Path

from neuralde_seq.files import write_bytes_atomic

ROOT = Path(__file__).resolve().parent.parent


def notebook_sources(paths: list[str]) -> list[Path]:
    """The notebooks to run: the given .py files, or every numbered notebook in notebooks/."""
    if not paths:
        found = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
        if not found:
            raise SystemExit("no notebooks found: expected notebooks/NN_name.py files")
        return found
    sources = []
    for path in paths:
        source = Path(path)
        if source.suffix != ".py" or not source.is_file():
            raise SystemExit(f"notebook {path!r}: expected an existing jupytext .py file")
        sources.append(source.resolve())
    return sources


def save_figures(notebook, name: str, folder: Path) -> list[Path]:
    """Write every PNG the notebook displayed to folder/<name>_<k>.png, in order, for looking at."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                path = folder / f"{name}_{len(written) + 1}.png"
                write_bytes_atomic(path, base64.b64decode(png))
                written.append(path)
    return written


def execute(source: Path, out: Path, budget: str, timeout: int, figures: Path | None) -> float:
    """Run one notebook top to bottom in a fresh kernel started in the repository root; return seconds."""
    import jupytext
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = jupytext.read(source)
    # The kernel inherits this process's environment: the budget and one torch thread (the library's default).
    os.environ["NEURALDE_SEQ_BUDGET"] = budget
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as error:
        raise SystemExit(f"notebook {source.name}: a cell failed\n{error}") from None
    seconds = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    jupytext.write(notebook, out / f"{source.stem}.ipynb")
    if figures is not None:
        for path in save_figures(notebook, source.stem, figures):
            print(f"  figure {path}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="jupytext .py notebooks (default: notebooks/NN_*.py)")
    parser.add_argument(
        "--budget",
        choices=["small", "full"],
        default="small",
        help="small: minutes on a CPU (CI); full: the experiments at their real size (a GPU)",
    )
    parser.add_argument(
        "--out",
        default=str(ROOT / "docs" / "notebooks"),
        help="folder for the executed .ipynb files (default: docs/notebooks, which the site renders)",
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds one cell may run (default 600)")
    parser.add_argument("--figures", default=None, help="also write each displayed figure as PNG into this folder")
    args = parser.parse_args(argv)
    sources = notebook_sources(args.notebooks)
    figures = Path(args.figures) if args.figures else None
    total = 0.0
    for source in sources:
        print(f"executing {source.name} ({args.budget} budget)", flush=True)
        seconds = execute(source, Path(args.out), args.budget, args.timeout, figures)
        total += seconds
        print(f"  done in {seconds:.1f} s", flush=True)
    print(f"{len(sources)} notebooks executed in {total:.1f} s; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
