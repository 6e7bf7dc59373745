import os
import sys

import torch

# The tests use tiny tensors, for which thread hand-offs cost far more than they save on a shared 2-core
# machine; one thread also makes results independent of the machine's core count.
torch.set_num_threads(1)

# Shared test helpers (fwp_reference.py) are imported as top-level modules.
sys.path.insert(0, os.path.dirname(__file__))
