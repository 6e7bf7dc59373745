"""Observations: the raw irregular batch, for models that read discrete observations.

Models such as GRU-D, GRU-Δt, ODE-RNN or CKConv's irregular mode read each observation at its own time
instead of a continuous control path. :class:`Observations` carries the batch in the toolkit's data
convention (shared/DESIGN.md §2), checked once, sliceable per batch like a
:class:`~neuralde_seq.controls.Control`.
"""
from __future__ import annotations

import dataclasses

import torch

from .controls import validate_observations

__all__ = ["Observations"]


@dataclasses.dataclass
class Observations:
    """A batch of irregularly sampled sequences.

    Attributes:
        times: (B, T) observation times, strictly increasing within each sample's length.
        values: (B, T, C) observed values, NaN where missing (and in the padding after a sample's end).
        lengths: (B,) long, number of valid time points per sample.
        static: optional (B, S) static features.
    """

    times: torch.Tensor
    values: torch.Tensor
    lengths: torch.Tensor
    static: torch.Tensor | None = None

    @classmethod
    def from_tensors(cls, times, values, lengths=None, static=None) -> "Observations":
        """Validated observations (same checks as :func:`~neuralde_seq.controls.build_control`); padding
        after each sample's length is set to NaN so that no model can read it by mistake."""
        times, values, lengths, valid = validate_observations(times, values, lengths)
        values = values.masked_fill(~valid.unsqueeze(-1), float("nan"))
        if static is not None and (static.dim() != 2 or static.shape[0] != values.shape[0]):
            raise ValueError(f"static must have shape ({values.shape[0]}, S), got {tuple(static.shape)}")
        return cls(times, values, lengths, static)

    @property
    def batch_size(self) -> int:
        return self.values.shape[0]

    @property
    def channels(self) -> int:
        return self.values.shape[-1]

    @property
    def valid(self) -> torch.Tensor:
        """(B, T) bool, True within each sample's length."""
        return torch.arange(self.values.shape[1], device=self.values.device).unsqueeze(0) < self.lengths.unsqueeze(1)

    @property
    def mask(self) -> torch.Tensor:
        """(B, T, C) bool, True where a value was observed."""
        return ~torch.isnan(self.values) & self.valid.unsqueeze(-1)

    def __len__(self) -> int:
        return self.batch_size

    def __getitem__(self, index) -> "Observations":
        if isinstance(index, int):
            index = slice(index, index + 1)
        lengths = self.lengths[index]
        longest = int(lengths.max())
        return Observations(self.times[index][:, :longest], self.values[index][:, :longest], lengths,
                            None if self.static is None else self.static[index])

    def to(self, *args, **kwargs) -> "Observations":
        values = self.values.to(*args, **kwargs)
        return Observations(self.times.to(device=values.device, dtype=values.dtype), values,
                            self.lengths.to(values.device),
                            None if self.static is None else self.static.to(*args, **kwargs))
