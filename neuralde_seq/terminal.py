"""Progress that suits where the output goes: bars on a terminal, plain lines in a log.

A tqdm bar redraws itself with carriage returns; sent to a file or a pipe (a job's log, a notebook's stderr) every
redraw becomes text, thousands of lines for one download. `Progress` draws the bar only where ``stream`` is a
terminal (`is_terminal`) and otherwise writes one line when the work starts and one when it ends.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sized
from typing import Any

__all__ = ["is_terminal", "Progress"]


def is_terminal(stream) -> bool:
    """Whether ``stream`` (e.g. ``sys.stderr``) is an interactive terminal, where progress bars redraw in place;
    False for files, pipes, closed streams and objects without ``isatty``."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def _amount(n: float, unit: str, scale: bool) -> str:
    if not scale:
        return f"{int(n)}{unit if unit.startswith(' ') else ' ' + unit}"
    for prefix in ("", "Ki", "Mi", "Gi", "Ti"):
        if abs(n) < 1024 or prefix == "Ti":
            return f"{n:.1f} {prefix}{unit}" if prefix else f"{int(n)} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class Progress:
    """Progress over a piece of work: a tqdm bar on a terminal, else a line at its start and one at its end.

    Use as a context manager (``with Progress(desc=..., total=...) as bar: bar.update(n)``) or wrap an iterable
    (``for x in Progress(items, desc=...)``).

    Arguments:
        iterable: what to iterate over, or None.
        desc: what the work is, e.g. "reading Speech Commands".
        total: the expected amount, or None (unknown).
        unit: the amount's unit ("it", "B", " files", ...).
        unit_scale: show bytes in KiB/MiB/... (for ``unit="B"``).
        initial: the amount already done (a resumed download).
        enabled: False shows nothing.
        stream: where to write (default ``sys.stderr``).
    """

    def __init__(
        self,
        iterable: Iterable | None = None,
        *,
        desc: str,
        total: float | None = None,
        unit: str = "it",
        unit_scale: bool = False,
        initial: float = 0,
        enabled: bool = True,
        stream=None,
    ):
        self.iterable, self.desc, self.unit, self.unit_scale = iterable, desc, unit, unit_scale
        self.stream = sys.stderr if stream is None else stream
        self.enabled, self.n, self.start = enabled, initial, time.perf_counter()
        self.bar: Any = None  # a tqdm bar on a terminal
        if not enabled:
            return
        if total is None and iterable is not None and isinstance(iterable, Sized):
            total = len(iterable)
        if is_terminal(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit=unit,
                unit_scale=unit_scale,
                unit_divisor=1024,
                leave=False,
                file=self.stream,
                dynamic_ncols=True,
            )
        else:
            size = "" if total is None else f" ({_amount(total, unit, unit_scale)})"
            print(f"{desc}: started{size}", file=self.stream, flush=True)

    def update(self, n: float = 1) -> None:
        """Count ``n`` more units done."""
        self.n += n
        if self.bar is not None:
            self.bar.update(n)

    def __iter__(self) -> Iterator:
        try:
            if self.iterable is None:
                raise TypeError(f"Progress({self.desc!r}) was made without an iterable: count with update instead")
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def close(self) -> None:
        """End the display (idempotent): close the bar, or write the closing line."""
        if not self.enabled:
            return
        self.enabled = False
        if self.bar is not None:
            self.bar.close()
        else:
            seconds = time.perf_counter() - self.start
            print(
                f"{self.desc}: done, {_amount(self.n, self.unit, self.unit_scale)} in {seconds:.1f} s",
                file=self.stream,
                flush=True,
            )

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
