"""One nearest neighbour on the grid, in Euclidean distance (numpy) or dynamic time warping (aeon):
`NearestNeighbourClassifier`.
"""

from __future__ import annotations

import warnings

import numpy as np

from .base import _require
from .grid import _GridClassifier

__all__ = ["NearestNeighbourClassifier"]


class NearestNeighbourClassifier(_GridClassifier):
    """One-nearest-neighbour classifier on irregular series (``1nn-euclidean`` and ``1nn-dtw`` in the registry).

    The series go on a grid (`to_grid`; the package docstring), and every sample gets the class of the training
    sample closest to it:

    - ``distance="euclidean"``: the sum over channels and grid points of squared differences (its square root,
      the Euclidean distance, orders neighbours the same way), computed here with numpy in float64;
    - ``distance="dtw"``: aeon's ``dtw_pairwise_distance``: dynamic time warping with squared pointwise
      differences summed over the channels at each pair of time points (dependent multichannel DTW), within a
      Sakoe-Chiba band of ``window`` (a fraction of the length; None: no band). Needs aeon.

    Ties: among training samples at exactly the same smallest distance, the one that comes first in the
    training data is taken (``numpy.argmin``).

    Arguments:
        distance: ``"euclidean"`` (default) or ``"dtw"``.
        window: for DTW, the Sakoe-Chiba band as a fraction of the series length in [0, 1], or None (default:
            full warping); must be None for the Euclidean distance.
        n_jobs: aeon's threads for the DTW distances (default 1).
        grid_length: the number of grid points L, or None (default): the longest training series in median time
            steps (`_longest_in_steps`).
        span: ``"sample"`` (default) or ``"common"``, as `to_grid`.

    Attributes (after ``fit``): ``classes_``, ``grid_length_``, ``span_``, ``channel_mean_``, ``n_channels_``,
    ``train_grid_`` (N_train, C, L) and ``train_codes_`` (N_train,) class indices.
    """

    _DISTANCES = ("euclidean", "dtw")
    _CHUNK = 2**24  # float64 entries of one block of pairwise differences (128 MB)

    def __init__(
        self,
        distance: str = "euclidean",
        window: float | None = None,
        n_jobs: int = 1,
        grid_length: int | None = None,
        span: str = "sample",
    ):
        self.distance = distance
        self.window = window
        self.n_jobs = n_jobs
        self.grid_length = grid_length
        self.span = span

    def _check_distance(self) -> None:
        if self.distance not in self._DISTANCES:
            raise ValueError(f"distance must be one of {', '.join(self._DISTANCES)}, got {self.distance!r}")
        if self.window is not None:
            if self.distance != "dtw":
                raise ValueError(
                    f"window applies to the dtw distance only; got window={self.window!r} with "
                    f"distance={self.distance!r}"
                )
            if isinstance(self.window, bool) or not isinstance(self.window, (int, float)) or not 0 <= self.window <= 1:
                raise ValueError(f"window must be a fraction in [0, 1] or None, got {self.window!r}")
        if self.distance == "dtw":
            _require("aeon", "the 1nn-dtw reference method")

    def _fit(self, X, y, times) -> None:
        """Store the training series on their grid."""
        self._check_distance()
        self.train_grid_, self.train_codes_ = self._fit_grid(X, y, times)

    def distances(self, X, times=None) -> np.ndarray:
        """The distance of every sample of X to every training sample, as used to pick the neighbour.

        Arguments:
            X: the samples, as for `predict`.
            times: None or one (T_i,) array per sample.

        Returns:
            (N, N_train) float64: squared Euclidean distances, or aeon's DTW distances.
        """
        return self._distances(self._grid(X, times))

    def _distances(self, grid: np.ndarray) -> np.ndarray:
        train = self.train_grid_
        if self.distance == "dtw":
            from aeon.distances import dtw_pairwise_distance

            with warnings.catch_warnings():  # aeon's compiled DTW warns of an internal uint64 index cast
                warnings.filterwarnings("ignore", message="unsafe cast from uint64 to int64")
                return np.asarray(
                    dtw_pairwise_distance(grid, train, window=self.window, n_jobs=self.n_jobs), dtype=np.float64
                )
        flat_train = train.reshape(train.shape[0], -1)
        flat = grid.reshape(grid.shape[0], -1)
        out = np.empty((flat.shape[0], flat_train.shape[0]), dtype=np.float64)
        # Differences, not |a|^2 + |b|^2 - 2ab: no cancellation, so equal series are at distance exactly 0.
        rows = max(1, self._CHUNK // max(1, flat_train.size))
        for start in range(0, flat.shape[0], rows):
            block = flat[start : start + rows, None, :] - flat_train[None, :, :]
            out[start : start + rows] = np.einsum("ijk,ijk->ij", block, block)
        return out

    def _predict_codes(self, grid: np.ndarray) -> np.ndarray:
        return self.train_codes_[np.argmin(self._distances(grid), axis=1)]

    def predict_proba(self, X, times=None) -> np.ndarray:
        """(N, K) class probabilities: 1 for the nearest neighbour's class, 0 elsewhere.

        Arguments:
            X: the samples, as for `predict`.
            times: None or one (T_i,) array per sample.
        """
        codes = self._predict_codes(self._grid(X, times))
        return np.eye(len(self.classes_))[codes]
