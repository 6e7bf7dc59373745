"""Training inputs augmented afresh at every batch, and ensembles of classifiers trained with other seeds.

`AugmentedInputs` stands where `fit` expects the training inputs (anything sliceable by a tensor of sample
indices): each slice takes those samples of the raw dataset, augments them with
`neuralde_seq.data.random_crop_and_drop` (random crop, random drops; torch's global generator, which `fit` seeds
and checkpoints, so a resumed run draws the same augmentations) and builds the model's inputs from them. The
control of a batch is therefore built at every step (for a spline or log-signature control, a cost of the
order of one forward pass), while validation and test inputs are built once from the unaugmented series.

`EnsembleClassifier` averages the class probabilities of several trained classifiers: the log of the mean
softmax, so that `evaluate`'s accuracy, loss and AUROC read it as they read one model's logits.
`EnsembleRegressor` averages the outputs of several trained regressors. Their members' seeds: `member_seed`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from ..data.base.datasets import IrregularDataset
from ..data.transforms.sampling import check_augmentation, random_crop_and_drop

__all__ = ["AugmentedInputs", "EnsembleClassifier", "EnsembleRegressor", "ENSEMBLE_SEED_STEP", "member_seed"]

# Seeds of an ensemble's members: seed + ENSEMBLE_SEED_STEP * member, far from the rows' seeds 0, 1, 2, ...
ENSEMBLE_SEED_STEP = 1000


def member_seed(seed: int, member: int) -> int:
    """The seed of member ``member`` (0, 1, ...) of an ensemble run with ``seed``: member 0 has ``seed`` itself."""
    return int(seed) + ENSEMBLE_SEED_STEP * int(member)


class AugmentedInputs:
    """Training inputs augmented per batch: ``inputs[index]`` builds the inputs of freshly augmented samples.

    Arguments:
        dataset: the raw training `IrregularDataset` (N samples, on the model's device and dtype).
        build: dataset -> the model's inputs for every sample of that dataset (e.g. a `Control`).
        drop_rate: probability of dropping each observed point of a batch's sample, in [0, 1).
        crop: the smallest fraction of a sample's observed points its random crop keeps, in (0, 1].

    Raises:
        ValueError: ``drop_rate`` or ``crop`` out of range, or both leaving the data unchanged (0 and 1: build
            the inputs once instead).
    """

    def __init__(
        self,
        dataset: IrregularDataset,
        build: Callable[[IrregularDataset], object],
        *,
        drop_rate: float = 0.0,
        crop: float = 1.0,
    ):
        self.drop_rate, self.crop = check_augmentation(drop_rate, crop)
        if self.drop_rate == 0.0 and self.crop == 1.0:
            raise ValueError("drop_rate=0 and crop=1 augment nothing; build the training inputs once instead")
        self.dataset = dataset
        self.build = build

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: torch.Tensor):
        batch = self.dataset.subset(index)
        return self.build(random_crop_and_drop(batch, self.drop_rate, self.crop))

    def __repr__(self) -> str:
        return f"AugmentedInputs({len(self)} samples, drop_rate={self.drop_rate}, crop={self.crop})"


class _Ensemble(nn.Module):
    """Several trained models read as one; subclasses combine their outputs.

    Arguments:
        members: models returning outputs of one shape for the same inputs.
    """

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        if len(members) == 0:
            raise ValueError("members must hold at least one model")
        self.members = nn.ModuleList(members)


class EnsembleClassifier(_Ensemble):
    """The mean of the class probabilities of several classifiers, as log-probabilities (B, K).

    Arguments:
        members: classifiers returning (B, K) logits for the same inputs.
    """

    def forward(self, *args, **kwargs) -> torch.Tensor:
        """(B, K) log of the members' mean softmax.

        Arguments:
            *args: the members' inputs (e.g. a `Control` of B samples), passed to each member.
            **kwargs: the members' keyword inputs, passed to each member.
        """
        log_probs = torch.stack([torch.log_softmax(m(*args, **kwargs), dim=-1) for m in self.members])
        return torch.logsumexp(log_probs, dim=0) - math.log(len(self.members))


class EnsembleRegressor(_Ensemble):
    """The mean of the outputs of several regressors (B, k).

    Arguments:
        members: regressors returning (B, k) outputs for the same inputs.
    """

    def forward(self, *args, **kwargs) -> torch.Tensor:
        """(B, k) mean of the members' outputs.

        Arguments:
            *args: the members' inputs (e.g. a `Control` of B samples), passed to each member.
            **kwargs: the members' keyword inputs, passed to each member.
        """
        return torch.stack([m(*args, **kwargs) for m in self.members]).mean(dim=0)
