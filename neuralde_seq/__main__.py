"""``python -m neuralde_seq``: the ``neuralde-seq`` command (so that ``torchrun -m neuralde_seq ...`` works)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
