"""The `Control`: a batch of piecewise-cubic paths X(s) on shared knots, what the CDE, ODE and RDE models read.

`neuralde_seq.controls.build_control` builds one from observations; the solvers read it piece by piece
(`Control.evaluate_piece`, `Control.evaluate_points`), so that a stage's piece is known before the solve starts.
"""

from __future__ import annotations

import dataclasses

import torch

from ..observations import batch_selection

__all__ = ["Control"]


@dataclasses.dataclass
class Control:
    """A batch of piecewise-cubic paths on shared knots.

    On [knots[i], knots[i+1]) sample b's path is ``a + b f + c f² + d f³`` with f = s − knots[i], the four
    coefficients being ``coeffs[b, i, 0:4]``; the last piece, i = K − 1, extends past the last knot. After
    its final knot ``knots[end_index[b]]`` every path is constant (log-signature rates are zero there), so
    a sample's path is the same whether it is alone or padded in a batch.

    Attributes:
        knots: (K,) strictly increasing parameter values; a solver steps through each of them.
        coeffs: (B, K, 4, C) polynomial coefficients.
        end_index: (B,) long, index into ``knots`` of each sample's final knot.
        piecewise_constant: True for log-signature windows. Then the path's "value" and "derivative"
            are both the window's log-signature rate (the input of an RDE vector field), followed, for a
            control built with ``window_start_values=True``, by the observed path's value at the window's start.
        channels_info: names of the channels, for display.
        initial_value: (B, C_path) the observed path's point at the first knot, for log-signature windows
            (whose coefficients hold only the windows' increments and areas; models such as the NRDE start
            from it); None for interpolated controls, whose value at the first knot is ``evaluate``.
    """

    knots: torch.Tensor
    coeffs: torch.Tensor
    end_index: torch.Tensor
    piecewise_constant: bool = False
    channels_info: tuple[str, ...] = ()
    initial_value: torch.Tensor | None = None

    def __post_init__(self):
        if self.knots.dim() != 1 or self.knots.shape[0] < 2:
            raise ValueError(f"knots must have shape (K,) with K >= 2, got {tuple(self.knots.shape)}")
        if self.coeffs.dim() != 4 or self.coeffs.shape[1:3] != (self.knots.shape[0], 4):
            raise ValueError(
                f"coeffs must have shape (B, K={self.knots.shape[0]}, 4, C): one piece per knot "
                f"interval and one past the last knot; got {tuple(self.coeffs.shape)}"
            )
        if self.end_index.shape != (self.coeffs.shape[0],):
            raise ValueError(f"end_index must have shape ({self.coeffs.shape[0]},), got {tuple(self.end_index.shape)}")

    # ---- shape facts ---------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.coeffs.shape[0]

    @property
    def channels(self) -> int:
        """Number of input channels of the path."""
        return self.coeffs.shape[-1]

    @property
    def end(self) -> torch.Tensor:
        """(B,) each sample's final parameter value."""
        return self.knots[self.end_index]

    @property
    def start(self) -> torch.Tensor:
        return self.knots[0]

    def __len__(self) -> int:
        return self.batch_size

    def __getitem__(self, index) -> Control:
        """The controls of the samples selected by ``index``: an int (negative counts from the end), a slice, or
        a 1-D integer or bool selection (tensor, numpy array or list), checked by
        `batch_selection`. An int keeps the batch dimension: ``X[i]`` is a
        batch of one sample, which is what the models read."""
        index = batch_selection(index, self.batch_size, "Control")
        end_index = self.end_index[index]
        last = int(end_index.max())
        # Trim the knots to the last one any selected sample needs: a short batch then solves a short
        # interval, and every sample still sees exactly the same knots as alone.
        return Control(
            self.knots[: last + 1],
            self.coeffs[index][:, : last + 1],
            end_index,
            self.piecewise_constant,
            self.channels_info,
            None if self.initial_value is None else self.initial_value[index],
        )

    def to(self, *args, **kwargs) -> Control:
        """Move and cast like ``torch.Tensor.to``: ``coeffs`` and ``initial_value`` get ``.to(*args, **kwargs)``,
        the knots follow the coefficients' device and dtype, and the end indices keep their integer type.

        Returns:
            A new `Control`.
        """
        coeffs = self.coeffs.to(*args, **kwargs)
        return Control(
            self.knots.to(device=coeffs.device, dtype=coeffs.dtype),
            coeffs,
            self.end_index.to(coeffs.device),
            self.piecewise_constant,
            self.channels_info,
            None if self.initial_value is None else self.initial_value.to(*args, **kwargs),
        )

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """Tensors a gradient could flow into (for ``adjoint_params``).

        Returns:
            ``(coeffs,)``, or ``(coeffs, initial_value)`` for log-signature windows that have one.
        """
        return (self.coeffs,) if self.initial_value is None else (self.coeffs, self.initial_value)

    # ---- evaluation ----------------------------------------------------------------------------
    def _interval(self, s: torch.Tensor, side: str) -> torch.Tensor:
        # side="right": s in [k_i, k_{i+1}) belongs to piece i; "left": s in (k_i, k_{i+1}].
        index = torch.searchsorted(self.knots, s.detach().to(self.knots.dtype), right=(side == "right")) - 1
        return index.clamp(0, self.knots.shape[0] - 1)

    def piece_at(self, s, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
        """The piece holding ``s`` and the offset into it.

        Arguments:
            s: the parameter value: a scalar, or a (B,) tensor with one value per sample.
            side: which piece a knot belongs to: "right" (default, the piece starting there) or "left" (the
                piece ending there).

        Returns:
            ``(piece, f)``: the index of the piece holding ``s`` and the offset s − knots[piece], each scalar or
                (B,) as ``s``.

        Raises:
            ValueError: ``s`` is 1-D but not of shape (B,).
        """
        s = torch.as_tensor(s, dtype=self.knots.dtype, device=self.knots.device)
        if s.dim() == 1 and s.shape != (self.batch_size,):
            raise ValueError(f"s must be a scalar or have shape ({self.batch_size},), got {tuple(s.shape)}")
        piece = self._interval(s, side)
        return piece, s - self.knots[piece]

    def _coefficients(self, piece: torch.Tensor, f: torch.Tensor):
        f = f.to(self.coeffs.dtype)
        if piece.dim() == 0:
            coefficients = self.coeffs[:, piece]  # (B, 4, C)
        else:
            coefficients = self.coeffs[torch.arange(self.batch_size, device=piece.device), piece]
            f = f.unsqueeze(-1)
        return coefficients.unbind(-2), f

    def evaluate_piece(self, piece: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        """X on piece ``piece`` at offset ``f`` from its first knot.

        Solvers that know which piece a stage belongs to call this directly, so that rounding near a
        knot can never pick the neighbouring piece.

        Arguments:
            piece: the piece's index, a scalar or (B,) long tensor (one per sample).
            f: the offset from the piece's first knot, a scalar or (B,) as ``piece``.

        Returns:
            X of shape (B, C).
        """
        coefficients, f = self._coefficients(piece, f)
        return self._value(coefficients, f)

    def derivative_piece(self, piece: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        """dX/ds on piece ``piece`` at offset ``f`` (see `evaluate_piece`).

        Arguments:
            piece: the piece's index, a scalar or (B,) long tensor (one per sample).
            f: the offset from the piece's first knot, a scalar or (B,) as ``piece``.

        Returns:
            dX/ds of shape (B, C).
        """
        coefficients, f = self._coefficients(piece, f)
        return self._derivative(coefficients, f)

    def evaluate_points(
        self, pieces: torch.Tensor, f: torch.Tensor, value: bool = True, derivative: bool = True
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(X, dX/ds) of every sample at P points: what fixed-step solvers read for a block of stages at once.

        Arguments:
            pieces: (P,) long, the points' pieces.
            f: (P,) the points' offsets from their pieces' first knots.
            value: compute X (default True).
            derivative: compute dX/ds (default True).

        Returns:
            ``(X, dX/ds)``, each (B, P, C), or None where not asked for.
        """
        coefficients = self.coeffs[:, pieces].unbind(-2)  # (B, P, C) each
        f = f.to(self.coeffs.dtype).unsqueeze(-1)
        return (
            self._value(coefficients, f) if value else None,
            self._derivative(coefficients, f) if derivative else None,
        )

    def _value(self, coefficients, f):
        a, b, c, d = coefficients
        return a if self.piecewise_constant else a + f * (b + f * (c + f * d))

    def _derivative(self, coefficients, f):
        a, b, c, d = coefficients
        return a if self.piecewise_constant else b + f * (2 * c + f * 3 * d)

    def evaluate(self, s, side: str = "right") -> torch.Tensor:
        """X(s); for log-signature windows, the window's log-signature rate.

        Arguments:
            s: the parameter value: a scalar, or a (B,) tensor with one value per sample.
            side: which piece a knot belongs to: "right" (default, the piece starting there) or "left" (the
                piece ending there, e.g. for a derivative at a sample's final time).

        Returns:
            X(s) of shape (B, C).
        """
        return self.evaluate_piece(*self.piece_at(s, side))

    def derivative(self, s, side: str = "right") -> torch.Tensor:
        """dX/ds; for log-signature windows, the window's log-signature rate.

        Arguments:
            s: the parameter value: a scalar, or a (B,) tensor with one value per sample.
            side: which piece a knot belongs to: "right" (default, the piece starting there) or "left" (the
                piece ending there).

        Returns:
            dX/ds of shape (B, C).
        """
        return self.derivative_piece(*self.piece_at(s, side))

    def final_value(self) -> torch.Tensor:
        """Each sample's X at its own final knot.

        Returns:
            (B, C) values.
        """
        return self.evaluate(self.end, side="left")

    def final_derivative(self) -> torch.Tensor:
        """Each sample's dX/ds just before its own final knot.

        Returns:
            (B, C) derivatives.
        """
        return self.derivative(self.end, side="left")
