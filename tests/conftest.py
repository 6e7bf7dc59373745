import os
import sys

import torch

# The tests use tiny tensors, for which thread hand-offs cost far more than they save on a shared 2-core
# machine; one thread also makes results independent of the machine's core count.
torch.set_num_threads(1)

# Shared test helpers (fwp_reference.py) are imported as top-level modules.
sys.path.insert(0, os.path.dirname(__file__))


def pytest_terminal_summary(terminalreporter):
    """Name the optional packages whose tests were skipped because they are not installed, with the command that
    installs each: the README's set-up leaves signatory out (it compiles for about 3 minutes), so a plain
    ``python -m pytest -q`` says so instead of hiding it in a skip count."""
    import importlib.util

    from neuralde_seq.signatures import INSTALL_COMMANDS

    missing = [name for name in INSTALL_COMMANDS if importlib.util.find_spec(name) is None]
    if missing and terminalreporter.stats.get("skipped"):
        terminalreporter.write_sep("-", "optional packages not installed (their tests skipped)")
        for name in missing:
            terminalreporter.write_line(f"{name}: {INSTALL_COMMANDS[name]}")
