"""Reservoirs: which registry models serve as a frozen random reservoir, how one is built (`build_reservoir`: its
width, its draw under a fixed seed, frozen), the memory its time channel is given (`set_memory`: low-pass units or
damped oscillators, package docstring "Memory"), and its states at every knot (`reservoir_states`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from ..controls import Control
from ..input_checks import is_positive_finite
from ..models import MODEL_NAMES, FastWeightClassifier, LinearCDE, NeuralCDE, create_model, model_entry
from ..models.linear_cde import _pieces, _window_start
from ..solvers import solve

__all__ = [
    "RESERVOIRS",
    "MEMORIES",
    "reservoir_states",
    "reservoir_state_width",
    "build_reservoir",
    "resolve_timescales",
    "resolve_memory",
    "set_memory",
]

# The registry models whose per-knot state a reservoir reads, and the option that sets their width.
_WIDTH_OPTION: dict[Callable[..., torch.nn.Module], str] = {
    LinearCDE: "hidden",
    NeuralCDE: "hidden",
    FastWeightClassifier: "d_model",
}
# Reservoir widths by default (benchmarks/random_features.py): a reservoir wants more units than a trained model.
# Dense linear CDEs cost H² per unit step, CT-FWPs give d_model²/8 numbers per state.
_DEFAULT_WIDTHS: dict[object, int] = {"linear": 1024, "dense": 128, NeuralCDE: 128, FastWeightClassifier: 64}
# Oscillators: 1,024 units spread over all periods plus fast_share's third of fast ones (benchmarks: the fast pairs
# added to the slow ones, not taken from them, keep OSULeaf and ArrowHead).
_DEFAULT_OSCILLATION_WIDTH = 1536
RESERVOIRS = tuple(name for name in MODEL_NAMES if model_entry(name).constructor in _WIDTH_OPTION) + ("logsignature",)
MEMORIES = ("decay", "oscillation")
# Oscillators' decay times in periods: a Q factor of about 1.5-6, the few cycles of a band-pass kernel.
_OSCILLATION_DECAY_PERIODS = (0.5, 2.0)
# Gaps (in median steps) over which an oscillator's Euler step must not expand (`_non_expanding_radius`).
_OSCILLATION_GAP = 3
# Fast, nearly memoryless oscillators (``fast_share`` of the pairs): periods log-uniform in this range, in units of
# τ_min (4-12 knots by default), shrinking by this radius per knot (at most; `_non_expanding_radius` still applies).
# They respond to the path's local increments, as MiniRocket's zero-sum kernels (ACSF1's spikes).
_FAST_PERIODS = (2.0, 6.0)
_FAST_RADIUS = 0.3
# fast_share "auto" with memory="oscillation" (benchmarks/random_features.py), else 0.
_OSCILLATION_FAST_SHARE = 1.0 / 3.0


def _non_expanding_radius(omega: torch.Tensor) -> torch.Tensor:
    """The largest ρ at which the Euler step of a damped rotation, I + g(ρR(ω) − I), does not expand over a gap of
    g = `_OSCILLATION_GAP` median steps (3), else, for oscillators too fast for that (periods under 12 steps), of
    g = 2: an irregular series' gaps would otherwise make fast oscillators grow. With z = ρe^{iω},
    |1 + g(z − 1)| <= 1  <=>  g ρ² − 2(g − 1) ρ cos ω + g − 2 <= 0, whose larger root is the bound (ρ <= cos ω at
    g = 2).

    Arguments:
        omega: (n,) angles per median step, in (0, π].

    Returns:
        (n,) radii in [0, 1].
    """
    g = float(_OSCILLATION_GAP)
    cosine = torch.cos(omega)
    discriminant = (cosine * (g - 1)).square() - g * (g - 2)
    wide = (cosine * (g - 1) + discriminant.clamp(min=0).sqrt()) / g
    return torch.where((discriminant >= 0) & (cosine > 0), wide, cosine.clamp(min=0.0))


def reservoir_states(model: torch.nn.Module, control: Control) -> torch.Tensor:
    """The states of a reservoir model at every knot, differentiable in its parameters (`RandomFeatures` reads them
    under ``torch.no_grad()``; `neuralde_seq.reservoir_tuning` trains through them).

    Arguments:
        model: a `LinearCDE`, `NeuralCDE` or one-layer CT-FWP (`FastWeightClassifier`).
        control: its input, batch size B.

    Returns:
        (B, K, H) states at the knots 0..max(end_index), constant after each sample's end (a CT-FWP's fast weights
        flattened, H = heads·d²).
    """
    if isinstance(model, LinearCDE):
        return model.hidden_states(control)
    if isinstance(model, NeuralCDE):
        return model.hidden_states(control, at_knots=True)
    if not isinstance(model, FastWeightClassifier):
        raise TypeError(f"a reservoir is a LinearCDE, NeuralCDE or FastWeightClassifier, got {type(model).__name__}")
    network = model.network
    dynamics, layer = network.dynamics, network.first_layer
    start = control.knots[0]
    x0 = control.evaluate(start) if dynamics.needs_value else None
    dx0 = control.derivative(start) if dynamics.needs_derivative else None
    timed = start.to(control.coeffs.dtype).expand(control.batch_size) if dynamics.needs_time else None
    initial = layer.initial(x0, dx0, None, timed).unsqueeze(1)  # (B, L=1, heads, d, d)
    weights = solve(dynamics, control, initial, network.solver, at_knots=True)
    return weights.flatten(2)


def reservoir_state_width(model: torch.nn.Module) -> int:
    """H, the width of `reservoir_states`' states, read off the model (forming them for one series of 10^5 knots
    would take gigabytes)."""
    if isinstance(model, (LinearCDE, NeuralCDE)):
        return int(model.hidden)
    if not isinstance(model, FastWeightClassifier):
        raise TypeError(f"a reservoir is a LinearCDE, NeuralCDE or FastWeightClassifier, got {type(model).__name__}")
    return math.prod(model.network.first_layer.state_shape)


def _is_linear(reservoir: str) -> bool:
    """Whether ``reservoir`` is a linear CDE (which has a time channel whose memory can be set)."""
    return reservoir != "logsignature" and model_entry(reservoir).constructor is LinearCDE


def resolve_timescales(reservoir: str, timescales) -> tuple[tuple | None, bool]:
    """``timescales`` of `RandomFeatures` checked, "auto" resolved: (2, None) for linear CDEs, else None.

    Arguments:
        reservoir: one of `RESERVOIRS`.
        timescales: "auto", None or (τ_min, τ_max) (τ_max None: the longest training series).

    Returns:
        (the timescales or None, whether they were given rather than "auto").

    Raises:
        ValueError: timescales for a reservoir that is not a linear CDE, or not 0 < τ_min <= τ_max.
    """
    explicit = not (isinstance(timescales, str) and timescales == "auto")
    if not explicit:
        return ((2.0, None) if _is_linear(reservoir) else None), False
    if timescales is not None:
        if not _is_linear(reservoir):
            raise ValueError(f"timescales applies to the linear CDE reservoirs only, not {reservoir!r}: pass None")
        ok = (
            isinstance(timescales, (tuple, list))
            and len(timescales) == 2
            and all(t is None or is_positive_finite(t) for t in timescales)
            and timescales[0] is not None
        )
        if not ok or (timescales[1] is not None and timescales[1] < timescales[0]):
            raise ValueError(
                f"timescales must be 'auto', None or (tau_min, tau_max) with 0 < tau_min <= tau_max "
                f"(tau_max None: the longest training series), got {timescales!r}"
            )
    return timescales, True


def resolve_memory(
    reservoir: str, memory: str, timescales, fast_share, model_options: dict | None
) -> tuple[str, bool, float]:
    """``memory`` and ``fast_share`` of `RandomFeatures` checked, "auto" resolved: "oscillation" for
    ``slice-block`` with timescales (then a third of the pairs fast), else "decay" (no fast share).

    Arguments:
        reservoir: one of `RESERVOIRS`.
        memory: "auto", "decay" or "oscillation".
        timescales: as resolved by `resolve_timescales`.
        fast_share: "auto" or a number in [0, 1).
        model_options: the reservoir's constructor options, or None.

    Returns:
        (memory, whether it was given rather than "auto", fast_share).

    Raises:
        ValueError: an unknown memory, oscillations without timescales or on another reservoir than the 2×2-block
            linear CDE, a fast share outside [0, 1) or without oscillations.
    """
    explicit = not (isinstance(memory, str) and memory == "auto")
    if not explicit:
        memory = "oscillation" if (reservoir == "slice-block" and timescales is not None) else "decay"
    elif memory not in MEMORIES:
        raise ValueError(f"memory must be 'auto' or one of {MEMORIES}, got {memory!r}")
    if memory == "oscillation":
        if timescales is None:
            raise ValueError(
                "memory='oscillation' spreads the oscillators' periods over timescales: pass "
                "timescales 'auto' or (tau_min, tau_max), not None"
            )
        structure = (
            None
            if reservoir == "logsignature"
            else (model_options or {}).get("structure", model_entry(reservoir).defaults.get("structure"))
        )
        if not _is_linear(reservoir) or structure != "block":
            raise ValueError(
                f"memory='oscillation' pairs units into 2x2 blocks: it needs the block linear CDE "
                f"(reservoir 'slice-block'), not {reservoir!r}"
            )
        block_size = (model_options or {}).get("block_size", 2)
        if block_size != 2:
            raise ValueError(
                f"memory='oscillation' needs model_options['block_size'] 2 (each oscillator a 2x2 "
                f"block), got {block_size!r}"
            )
    oscillation = memory == "oscillation"
    if isinstance(fast_share, str) and fast_share == "auto":
        fast_share = _OSCILLATION_FAST_SHARE if oscillation else 0.0
    elif (
        isinstance(fast_share, bool) or not isinstance(fast_share, numbers.Real) or fast_share < 0 or not fast_share < 1
    ):
        raise ValueError(f"fast_share must be 'auto' or a number in [0, 1), got {fast_share!r}")
    elif fast_share != 0 and not oscillation:  # in (0, 1)
        raise ValueError(
            f"fast_share makes a share of the oscillators fast: it needs memory='oscillation', "
            f"not {memory!r} (pass fast_share 'auto' or 0)"
        )
    return memory, explicit, float(fast_share)


def build_reservoir(
    reservoir: str,
    control: Control,
    like: torch.Tensor,
    *,
    width: int | None,
    memory: str,
    model_options: dict,
    seed: int,
) -> torch.nn.Module:
    """The frozen random model of ``reservoir`` (package docstring, "Model"): drawn by ``create_model`` under
    ``torch.manual_seed(seed)`` (torch's global random state restored afterwards), every parameter with
    ``requires_grad=False``, in ``eval()`` mode.

    Arguments:
        reservoir: one of `RESERVOIRS` but "logsignature".
        control: the model's input (the rescaled training path), which sets its input channels.
        like: the model takes its device and dtype.
        width: the model's size (``hidden`` or ``d_model``), or None: ``model_options``' own, else the reservoir's
            default (1,024 units of a linear CDE, 1,536 with oscillators, 128 dense; 128 for NCDEs, 64 for CT-FWPs).
        memory: "decay" or "oscillation" (then 2×2 blocks).
        model_options: constructor options replacing the registry defaults.
        seed: the draw's seed.

    Raises:
        ValueError: a CT-FWP that is not one layer reading its fast weights from the input, or an option the
            constructor refuses.
    """
    entry = model_entry(reservoir)
    options = dict(model_options)
    if entry.constructor is NeuralCDE:
        # log-ncde's registry field starts at 1/1000 of PyTorch's scale (its authors', for training): a reservoir
        # with it barely moves
        options.setdefault("field_init_scale", 1.0)
    width_option = _WIDTH_OPTION[entry.constructor]
    if width is not None:
        options[width_option] = width
    elif width_option not in options:
        if entry.constructor is LinearCDE:
            dense = options.get("structure", entry.defaults.get("structure")) == "dense"
            options[width_option] = (
                _DEFAULT_OSCILLATION_WIDTH
                if memory == "oscillation"
                else _DEFAULT_WIDTHS["dense" if dense else "linear"]
            )
        else:
            options[width_option] = _DEFAULT_WIDTHS[entry.constructor]
    if entry.constructor is LinearCDE:
        if memory == "oscillation":
            options["block_size"] = 2
        path_channels = _window_start(control).shape[-1] if control.piecewise_constant else control.channels
        options.setdefault("channel_scales", (1.0,) * path_channels)  # the path is rescaled already
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = create_model(reservoir, control, 2, **options)
    if entry.constructor is FastWeightClassifier:
        network = model.network
        if len(network.layers) != 1 or network.layers[0].initial_state == "static":
            raise ValueError(
                "a CT-FWP reservoir reads one layer's fast weights from the input: num_layers=1 and "
                "initial_state 'zeros' or 'rank_one'"
            )
    model = model.to(device=like.device, dtype=like.dtype)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model.eval()


def set_memory(
    model: LinearCDE, control: Control, timescales: tuple, memory: str, fast_share: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Set the time channel's A_0 of a linear CDE reservoir, in units of the median time step Δt (package
    docstring, "Memory"): unit j forgets by exp(−1/τ_j) per step ("decay"), or pair j turns by ω_j and shrinks by
    ρ_j per step ("oscillation").

    Arguments:
        model: the frozen linear CDE (its ``A[0]`` is overwritten).
        control: its training input, whose time channel gives Δt and whose longest series the default τ_max.
        timescales: (τ_min, τ_max), τ_max None for the longest training series.
        memory: "decay" or "oscillation".
        fast_share: the share of oscillator pairs made fast and nearly memoryless.
        seed: the draw's seed (``seed + 1`` seeds the generator: the model's own draw used ``seed``).

    Returns:
        (the units' τ (H,) (for oscillators −1/log ρ_j, per unit of each pair), each oscillator's period (H,) in
        knots, or None for "decay").
    """
    terms, pieces = _pieces(control)
    active = torch.arange(pieces, device=terms.device).unsqueeze(0) < control.end_index.unsqueeze(1)
    steps = terms[..., 0][active].to(torch.float64)
    step = float(steps[steps > 0].median()) if bool((steps > 0).any()) else 1.0
    tau_min, tau_max = timescales
    tau_max = float(control.end_index.max()) if tau_max is None else tau_max
    tau_max = max(tau_max, tau_min)
    generator = torch.Generator().manual_seed(seed + 1)

    def log_uniform(count, low, high):
        return torch.exp(
            torch.empty(count, dtype=torch.float64).uniform_(math.log(low), math.log(high), generator=generator)
        )

    A = model.A
    if memory == "oscillation":
        pairs = model.hidden // 2
        period = log_uniform(pairs, 2 * tau_min, max(tau_max, 2 * tau_min))
        tau = (period * log_uniform(pairs, *_OSCILLATION_DECAY_PERIODS)).clamp(min=tau_min)
        omega = 2 * math.pi / period
        radius = torch.exp(-1.0 / tau)
        fast = round(fast_share * pairs)
        if fast:
            # drawn after the others: fast_share 0 keeps the draw of the slow oscillators
            period[:fast] = log_uniform(fast, _FAST_PERIODS[0] * tau_min, _FAST_PERIODS[1] * tau_min)
            omega = 2 * math.pi / period
            radius[:fast] = _FAST_RADIUS
        rho = torch.minimum(radius, _non_expanding_radius(omega))
        cosine, sine = rho * torch.cos(omega), rho * torch.sin(omega)
        block = (
            torch.stack([torch.stack([cosine - 1, -sine], dim=-1), torch.stack([sine, cosine - 1], dim=-1)], dim=-2)
            / step
        )  # (pairs, 2, 2)
        with torch.no_grad():
            A[0] = block.to(dtype=A.dtype, device=A.device)
        # τ is 0 where ρ = 0 (no memory)
        return (-1.0 / torch.log(rho)).repeat_interleave(2), period.repeat_interleave(2)
    tau = log_uniform(model.hidden, tau_min, tau_max)
    rates = (torch.exp(-1.0 / tau) - 1.0) / step
    rates = rates.to(dtype=A.dtype, device=A.device)
    with torch.no_grad():
        if model.structure in ("diagonal", "dplr"):
            A[0] = rates
            if model.structure == "dplr":
                model.U[0] = 0.0  # the time channel's step is then diagonal
        elif model.structure == "block":
            A[0] = torch.diag_embed(rates.view(A.shape[1], A.shape[2]))
        else:
            A[0] = torch.diag(rates)
    return tau, None
