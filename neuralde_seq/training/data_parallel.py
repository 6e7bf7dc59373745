"""The collective operations of `fit` when it runs in several processes.

Process groups and launching are `neuralde_seq.training.distributed`; this module holds what the loop
does across processes: the module DistributedDataParallel wraps (`TrainingLoss`), the global batch
loss every rank's callbacks see, training statistics summed over ranks, one stop decision, evaluation
outputs gathered back in sample order. With one process each function is the plain computation.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.distributed as dist

from .callbacks import FitState
from .checkpoints import model_device
from .objectives import Objective, predict

__all__ = [
    "TrainingLoss",
    "global_loss",
    "sum_over_ranks",
    "broadcast_stop",
    "broadcast_generator",
    "gather_outputs",
    "evaluate_split",
]


class TrainingLoss(torch.nn.Module):
    """The loss of a batch as the forward of a module, the one DistributedDataParallel wraps: DDP
    synchronises gradients of what its forward computed only, and objectives call methods other than
    ``forward`` (the ELBO calls ``model.loss``); the penalty is computed here too, as it may read parameters
    the loss does not (a latent classifier's decoder).

    ``forward(inputs, targets, context)`` returns (the objective's loss, its outputs or None, the loss plus
    ``penalty_weight * model.penalty()``)."""

    def __init__(self, model: torch.nn.Module, objective: Objective, penalty_weight: float):
        super().__init__()
        self.model, self.objective, self.penalty_weight = model, objective, penalty_weight

    def forward(self, inputs, targets, context: dict):
        loss, outputs = self.objective.training_loss(self.model, inputs, targets, context)
        # with a penalty weight the model has a penalty() (fit refuses the weight otherwise)
        total = loss + self.penalty_weight * cast(Any, self.model).penalty() if self.penalty_weight > 0 else loss
        return loss, outputs, total


def collective_device(device: torch.device) -> torch.device:
    # nccl reduces CUDA tensors only; gloo is given CPU tensors whatever the model's device.
    return device if dist.get_backend() == "nccl" else torch.device("cpu")


def global_loss(total: torch.Tensor, weight: float, world: int) -> torch.Tensor:
    """The global batch's loss from every rank's weighted share, the same on every rank: callbacks see what
    one process would see, and take one decision (a rank stopping alone would leave the others waiting)."""
    local = total.detach() * weight if weight > 0 else torch.zeros_like(total.detach())  # weight 0: a stand-in
    reduced = local.to(collective_device(total.device))
    dist.all_reduce(reduced)
    return reduced.to(total.device) / world


def sum_over_ranks(sums: dict[str, list], world: int, device: torch.device) -> dict[str, list[float]]:
    """``{name: [sum, count]}`` added over the processes. A process whose shares were all empty since the
    last evaluation lacks the objective's statistics: the names are agreed on first (all_reduce needs one
    length everywhere), in rank 0's order."""
    names_by_rank: list = [None] * world
    dist.all_gather_object(names_by_rank, list(sums))
    names = list(names_by_rank[0]) + sorted(set().union(*map(set, names_by_rank)) - set(names_by_rank[0]))
    flat = torch.tensor(
        [float(x) for name in names for x in sums.get(name, (0.0, 0))],
        dtype=torch.float64,
        device=collective_device(device),
    )
    dist.all_reduce(flat)
    return {name: [float(flat[2 * i]), float(flat[2 * i + 1])] for i, name in enumerate(names)}


def broadcast_stop(state: FitState) -> None:
    # Rank 0 decides whether to stop: a rank-local reason (a TimeLimit) must not leave the others waiting.
    decision = [state.stop_reason]
    dist.broadcast_object_list(decision, src=0)
    state.stop_reason = decision[0]


def broadcast_generator(generator: torch.Generator) -> None:
    # Objectives may draw from the data-order generator, as many numbers as their share holds: rank 0's state
    # keeps one order of the next epoch on every rank.
    state = [generator.get_state()]
    dist.broadcast_object_list(state, src=0)
    generator.set_state(state[0])


def gather_outputs(local, index_local: torch.Tensor, objective: Objective, world: int):
    """Every rank's outputs joined back in sample order (an object gather on CPU: works with any backend).

    Arguments:
        local: this rank's outputs (first dimension: samples) for the samples ``index_local`` (1-D), or
            None for an empty share.
    """
    parts: list = [None] * world
    dist.all_gather_object(parts, None if local is None else (index_local.cpu(), local.detach().cpu()))
    parts = [part for part in parts if part is not None]
    order = torch.cat([part[0] for part in parts])
    joined = objective.collate([part[1] for part in parts])  # pads where shares differ in length (per step)
    return joined[torch.argsort(order)]  # row i holds sample order[i]: sorting by it puts sample k in row k


def evaluate_split(model, objective: Objective, data, batch_size: int, world: int, rank: int) -> dict:
    inputs, targets = data
    n = len(inputs)
    if world == 1:
        return objective.evaluate(model, inputs, targets, batch_size)
    if type(objective).evaluate is not Objective.evaluate:
        # An objective's own evaluation (the ELBO's, which samples) runs on rank 0 and every rank reports
        # its metrics: ranks must agree on them (checkpoint selection, early stopping).
        metrics = [objective.evaluate(model, inputs, targets, batch_size) if rank == 0 else None]
        dist.broadcast_object_list(metrics, src=0)
        broadcast = metrics[0]
        assert broadcast is not None  # rank 0's, on every rank
        return broadcast
    # Each rank scores its share; the outputs are gathered so that every rank computes the same metrics.
    index = torch.arange(n)[rank::world]
    local = predict(model, inputs, batch_size, objective, index=index) if index.numel() else None
    outputs = gather_outputs(local, index, objective, world)
    device = model_device(model)
    return {**objective.metrics(outputs.to(device), None if targets is None else targets.to(device)), "num_samples": n}
