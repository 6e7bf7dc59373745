"""What a benchmark ran on, for the header of its output: shared by the scripts in this folder (run by path,
so this folder is on sys.path)."""

from __future__ import annotations

import os
import platform
import subprocess


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def code_version() -> str:
    """Where neuralde_seq is imported from, and its git commit (with "-dirty" for uncommitted changes)."""
    import neuralde_seq

    where = os.path.dirname(os.path.abspath(neuralde_seq.__file__))
    try:
        commit = subprocess.run(
            ["git", "-C", where, "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"{where} {commit or '(no git)'}"


def reset_peak_rss() -> bool:
    """Reset the kernel's peak resident-memory counter (VmHWM) of this process (Linux ``/proc/self/clear_refs``).

    Returns:
        True if it was reset, False where the file cannot be written (not Linux, or not permitted).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
