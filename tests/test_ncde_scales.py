"""The NCDE's and NRDE's control scales (`neuralde_seq.models.ncde.roughness_scales`,
``NeuralCDE(control_scales=...)``): a long rough control's summed quadratic variation drove the hidden state to norms in
the hundreds at initialisation (issue 33); the registry now divides each channel the field reads by a scale that keeps
that sum within `CONTROL_ROUGHNESS_BUDGET`, and leaves short, smooth series as they were."""

from __future__ import annotations

import pytest
import torch

from neuralde_seq import build_control, create_model, model_inputs
from neuralde_seq.models.linear_cde import _pieces
from neuralde_seq.models.ncde import CONTROL_ROUGHNESS_BUDGET, NeuralCDE, roughness_scales


def quadratic_variation(control) -> torch.Tensor:
    """(C,) Σ_k (ΔX^c_k)² per channel, averaged over the samples."""
    terms, _ = _pieces(control)
    return terms.double().square().sum(dim=1).mean(dim=0)


def noise(batch=4, length=2000, channels=6, seed=0):
    """(times, values): white noise (a rough path: quadratic variation ~2 per point and channel) on one grid."""
    gen = torch.Generator().manual_seed(seed)
    times = (torch.arange(length, dtype=torch.float64) / length).repeat(batch, 1)
    return times, torch.randn(batch, length, channels, generator=gen, dtype=torch.float64)


def test_roughness_scales_bring_a_rough_control_within_the_budget_and_leave_smooth_channels():
    times, values = noise(length=1000, channels=3)
    values[..., 0] = torch.sin(times * 6.0)  # smooth: quadratic variation ~0.02, far within its share
    control = build_control(times, values, interpolation="linear", time_channel=False)
    scales = torch.tensor(roughness_scales(control), dtype=torch.float64)
    assert scales[0] == 1.0 and bool((scales[1:] > 4).all())  # noise: ~2,000 per channel against a share of 100
    scaled = build_control(times, values / scales, interpolation="linear", time_channel=False)
    after = quadratic_variation(scaled)
    assert float(after.sum()) <= CONTROL_ROUGHNESS_BUDGET * (1 + 1e-9)
    # each rough channel is brought to its share exactly, not below it
    torch.testing.assert_close(after[1:], torch.full((2,), CONTROL_ROUGHNESS_BUDGET / 3, dtype=torch.float64))
    # the budget is an argument: half the budget, √2 larger scales on the rough channels
    half = torch.tensor(roughness_scales(control, budget=CONTROL_ROUGHNESS_BUDGET / 2), dtype=torch.float64)
    torch.testing.assert_close(half[1:], scales[1:] * 2**0.5)


def test_short_series_keep_their_control():
    times, values = noise(length=30)
    values = values * 0.5  # quadratic variation ~15 per channel, as short standardised real series (JapaneseVowels: 1)
    for name in ("ncde", "nrde"):
        inputs = model_inputs(name, times, values)
        assert roughness_scales(inputs) == (1.0,) * inputs.channels
        torch.manual_seed(0)
        registry = create_model(name, inputs, 3).double()
        torch.manual_seed(0)
        plain = create_model(name, inputs, 3, control_scales=1.0).double()
        torch.testing.assert_close(registry(inputs), plain(inputs), rtol=0, atol=0)


@pytest.mark.parametrize(
    "form, options",
    [("cde", dict(interpolation="hermite_cubic")), ("rde", dict(interpolation="logsignature", depth=1, step=2))],
)
def test_control_scales_divide_the_path_the_field_reads(form, options):
    """A model with scales s on X solves exactly as the same model without scales on X / s (depth-1 windows of X / s
    are X's windows / s), and its initial state still reads X's own first point."""
    times, values = noise(batch=3, length=40, channels=3)
    scales = torch.tensor([0.5, 2.0, 7.0], dtype=torch.float64)
    raw = build_control(times, values, time_channel=False, **options)
    divided = build_control(times, values / scales, time_channel=False, **options)
    torch.manual_seed(0)
    model = NeuralCDE(
        3, 2, hidden=8, width=16, form=form, initial_state="zeros", control_scales=scales.tolist()
    ).double()
    plain = NeuralCDE(3, 2, hidden=8, width=16, form=form, initial_state="zeros").double()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if k != "control_scales"})
    torch.testing.assert_close(model.hidden_states(raw, at_knots=True), plain.hidden_states(divided, at_knots=True))
    assert not torch.allclose(model.hidden_states(raw), plain.hidden_states(raw))
    if form == "cde":
        torch.manual_seed(0)
        reading = NeuralCDE(3, 2, hidden=8, width=16, control_scales=scales.tolist()).double()
        torch.manual_seed(0)
        unscaled = NeuralCDE(3, 2, hidden=8, width=16).double()
        torch.testing.assert_close(
            reading.hidden_states(raw, at_knots=True)[:, 0], unscaled.hidden_states(raw, at_knots=True)[:, 0]
        )


def test_registry_ncde_starts_with_order_one_logits_on_a_long_rough_series():
    times, values = noise()
    inputs = model_inputs("ncde", times, values)
    torch.manual_seed(0)
    model = create_model("ncde", inputs, 3).double()
    assert model.control_scales.tolist() == pytest.approx(roughness_scales(inputs))
    assert "control_scales" in model.state_dict()  # a reloaded model reads the path in the units it trained in
    with torch.no_grad():
        states = model.hidden_states(inputs)
        logits = model.readout(states)
    # unscaled (control_scales=1): |z| 200 and logits up to 25 on this series
    assert float(states.norm(dim=-1).max()) < 20.0
    assert float(logits.abs().max()) < 5.0


def test_log_ncde_gets_no_control_scales():
    times, values = noise(length=50, channels=2)
    inputs = model_inputs("log-ncde", times, values)
    assert create_model("log-ncde", inputs, 2).control_scales is None


@pytest.mark.parametrize(
    "bad, match",
    [
        ([1.0, 2.0], "3 of them"),
        ([1.0, -1.0, 1.0], "positive finite"),
        ([1.0, float("nan"), 1.0], "positive finite"),
        (0.0, "positive finite"),
        (True, "positive finite"),
        ("1", "positive finite"),
    ],
)
def test_bad_control_scales_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        NeuralCDE(3, 2, control_scales=bad)


def test_control_scales_are_refused_by_the_log_ode_form_and_bad_budgets():
    with pytest.raises(ValueError, match="form='cde' and 'rde' only"):
        NeuralCDE(2, 2, form="log-ode", control_depth=1, control_scales=1.0)
    times, values = noise(length=20, channels=2)
    control = model_inputs("ncde", times, values)
    with pytest.raises(TypeError, match="must be a neuralde_seq Control"):
        roughness_scales(values)
    for budget in (0.0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="budget must be a positive finite number"):
            roughness_scales(control, budget=budget)
