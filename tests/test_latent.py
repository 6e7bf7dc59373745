"""Latent ODE-RNN / Latent ODE-RFWP: ELBO terms, masks, decoder times, batch independence, gradients.

References computed here in float64: the Gaussian log-likelihood entry by entry with math.log, the KL with
torch.distributions (an implementation independent of the model's closed form), the IWAE bound from
torch.distributions log-densities, and a linear latent field's solution expm((t − t0) A) z0.
"""

import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from neuralde_seq.models import create_model, model_inputs
from neuralde_seq.models.latent import LatentODE, kl_warmup_weight, reverse_observations
from neuralde_seq.observations import Observations
from neuralde_seq.solvers import RK4, Adjoint, Auto, Backprop, SolverOptions

DTYPE = torch.float64
NAN = float("nan")


def randomize_(module, seed, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def batch():
    """3 samples of 2 channels: missing entries, a dropped row, padding (lengths 5, 3, 4)."""
    times = torch.tensor([[0.0, 0.4, 1.1, 1.5, 2.6], [0.3, 0.9, 1.2, NAN, NAN], [0.1, 0.2, 1.4, 2.0, NAN]], dtype=DTYPE)
    values = torch.tensor(
        [
            [[1.0, NAN], [0.2, -0.5], [NAN, NAN], [0.5, 0.1], [NAN, -1.0]],
            [[NAN, 0.7], [0.3, 0.1], [-0.4, 0.6], [NAN, NAN], [NAN, NAN]],
            [[0.2, 0.2], [NAN, 0.9], [-1.2, NAN], [0.0, 0.4], [NAN, NAN]],
        ],
        dtype=DTYPE,
    )
    return Observations.from_tensors(times, values, torch.tensor([5, 3, 4]))


def model(encoder="ode-rnn", **options):
    torch.manual_seed(0)
    options = dict(
        dict(
            latent=3,
            hidden=4,
            width=5,
            heads=2,
            decoder_width=6,
            solver=SolverOptions(Auto(fallback=RK4(step_size=0.25)), gradient=Backprop()),
        ),
        **options,
    )
    return randomize_(LatentODE(2, None, encoder=encoder, **options).to(DTYPE), 1)


@pytest.mark.parametrize("encoder", ["ode-rnn", "ode-rfwp"])
@pytest.mark.parametrize("noise", [0.3, "learned"])
def test_elbo_terms_are_the_gaussian_likelihood_and_kl(encoder, noise):
    obs = batch()
    m = model(encoder, noise_std=noise)
    if noise == "learned":
        with torch.no_grad():
            m.log_noise_std.copy_(torch.tensor([-0.7, 0.2], dtype=DTYPE))
    torch.manual_seed(5)
    parts = {name: value.detach() for name, value in m.elbo(obs).items()}
    mean, logvar, t0 = m.encode(obs)
    torch.manual_seed(5)
    eps = torch.randn((1,) + mean.shape, dtype=DTYPE)[0]
    z0 = mean + eps * torch.exp(0.5 * logvar)
    prediction = m.decode(z0, t0, obs.times, obs.lengths)
    sigma = torch.exp(m.log_noise_std)
    total_elbo, total_count = 0.0, 0
    for b in range(3):
        log_lik, count = 0.0, 0
        for i in range(int(obs.lengths[b])):
            for j in range(2):
                x = float(obs.values[b, i, j])
                if math.isnan(x):
                    continue
                s, mu = float(sigma[j].detach()), float(prediction[b, i, j].detach())
                log_lik += -0.5 * math.log(2 * math.pi * s * s) - (x - mu) ** 2 / (2 * s * s)
                count += 1
        kl = float(kl_divergence(Normal(mean[b], torch.exp(0.5 * logvar[b])), Normal(0.0, 1.0)).sum().detach())
        assert int(parts["count"][b]) == count
        assert abs(float(parts["log_likelihood"][b]) - log_lik) < 1e-10
        assert abs(float(parts["kl"][b]) - kl) < 1e-12
        assert abs(float(parts["elbo"][b]) - (log_lik - kl)) < 1e-10
        total_elbo, total_count = total_elbo + log_lik - kl, total_count + count
    torch.manual_seed(5)
    assert abs(float(m.loss(obs)) - (-total_elbo / total_count)) < 1e-11  # per observed value
    # KL warm-up: the objective weights only the KL by β; the reported bound stays the ELBO
    beta, total_objective = 0.3, 0.0
    for b in range(3):
        kl = float(kl_divergence(Normal(mean[b], torch.exp(0.5 * logvar[b])), Normal(0.0, 1.0)).sum().detach())
        total_objective += float(parts["log_likelihood"][b]) - beta * kl
    torch.manual_seed(5)
    warm = m.elbo(obs, kl_weight=beta)
    assert torch.allclose(warm["elbo"], parts["elbo"], rtol=0, atol=1e-12)
    torch.manual_seed(5)
    assert abs(float(m.loss(obs, kl_weight=beta)) - (-total_objective / total_count)) < 1e-11
    for bad in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="kl_weight"):
            m.loss(obs, kl_weight=bad)


def test_iwae_bound_from_densities():
    obs = batch()
    m = model("ode-rfwp", samples=4, iwae=True)
    torch.manual_seed(7)
    parts = m.elbo(obs)
    mean, logvar, t0 = m.encode(obs)
    torch.manual_seed(7)
    eps = torch.randn((4,) + mean.shape, dtype=DTYPE)
    std = torch.exp(0.5 * logvar)
    for b in range(3):
        weights, log_liks = [], []
        for k in range(4):
            z0 = mean[b] + eps[k, b] * std[b]
            pred = m.decode(z0[None], t0[b : b + 1], obs.times[b : b + 1], obs.lengths[b : b + 1])
            mask = obs.mask[b]
            log_lik = (
                Normal(pred[0], torch.exp(m.log_noise_std))
                .log_prob(torch.where(mask, obs.values[b], torch.zeros_like(obs.values[b])))[mask]
                .sum()
            )
            log_w = log_lik + Normal(0.0, 1.0).log_prob(z0).sum() - Normal(mean[b], std[b]).log_prob(z0).sum()
            weights.append(log_w)
            log_liks.append(log_lik)
        expected = torch.logsumexp(torch.stack(weights), 0) - math.log(4)
        assert abs(float(parts["elbo"][b] - expected)) < 1e-10
        assert abs(float(parts["objective"][b] - expected)) < 1e-10  # β = 1: the bound itself
        # KL warm-up β = 0.25: the log prior / posterior ratio of every importance weight scaled by β
        torch.manual_seed(7)
        warm = m.elbo(obs, kl_weight=0.25)
        log_lik = torch.stack(log_liks)
        expected_warm = torch.logsumexp(log_lik + 0.25 * (torch.stack(weights) - log_lik), 0) - math.log(4)
        assert abs(float(warm["objective"][b] - expected_warm)) < 1e-10
        assert abs(float(warm["elbo"][b] - expected)) < 1e-10


def test_kl_warmup_weight_is_linear_from_zero_to_one():
    # β_k = min(1, k / W) by hand for W = 4
    assert [kl_warmup_weight(k, 4) for k in range(7)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert [kl_warmup_weight(k, 3) for k in (0, 1, 2, 3)] == [0.0, 1 / 3, 2 / 3, 1.0]
    assert kl_warmup_weight(0, 0) == 1.0 and kl_warmup_weight(5, 0) == 1.0  # no warm-up
    for step, warmup in ((-1, 4), (0, -2), (1.5, 4), (0, 2.0), (True, 4)):
        with pytest.raises(ValueError, match="step|warmup_steps"):
            kl_warmup_weight(step, warmup)


def test_masks_exclude_missing_and_padded_points():
    obs = batch()
    m = model("ode-rnn")
    target = batch()
    # change only entries that are missing or padding in the target: the likelihood must not move
    noise = torch.randn(target.values.shape, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    torch.manual_seed(1)
    a = m.elbo(obs, target)
    # the same values but arbitrary numbers (not NaN) in the padding, and one more entry hidden by NaN
    padded = torch.where(obs.valid.unsqueeze(-1), target.values, noise)
    fewer = padded.clone()
    fewer[0, 0, 0] = NAN
    torch.manual_seed(1)
    b = m.elbo(obs, Observations(target.times, padded, target.lengths))
    assert torch.equal(a["log_likelihood"], b["log_likelihood"])
    assert a["count"].tolist() == [6, 5, 6]  # observed entries within each length, counted by hand
    torch.manual_seed(1)
    c = m.elbo(obs, Observations(target.times, fewer, target.lengths))
    assert c["count"].tolist() == [5, 5, 6]
    s0 = torch.exp(m.log_noise_std[0])
    dropped = -0.5 * math.log(2 * math.pi * s0**2) - (1.0 - a["prediction"][0, 0, 0]) ** 2 / (2 * s0**2)
    assert abs(float(a["log_likelihood"][0] - c["log_likelihood"][0] - dropped)) < 1e-10
    assert torch.equal(a["log_likelihood"][1:], c["log_likelihood"][1:])
    # the padded query times (NaN) do not disturb the valid ones: predictions equal each sample alone
    for s in range(3):
        L = int(obs.lengths[s])
        alone = Observations.from_tensors(obs.times[s : s + 1, :L], obs.values[s : s + 1, :L])
        pred_alone = m.predict(alone, obs.times[s : s + 1, :L])
        pred = m.predict(obs, obs.times, obs.lengths)
        assert torch.allclose(pred_alone[0], pred[s, :L], atol=1e-13, rtol=0)
        assert torch.isnan(pred[s, L:]).all()


def test_linear_decoder_is_a_matrix_exponential_at_each_samples_times():
    m = model("ode-rnn", decoder_depth=0, solver=SolverOptions(RK4(step_size=0.002), gradient=Backprop()))
    with torch.no_grad():
        m.dynamics.bias.zero_()
    A = m.dynamics.weight
    g = torch.Generator().manual_seed(2)
    z0 = torch.randn(2, 3, generator=g, dtype=DTYPE)
    t0 = torch.tensor([0.5, 1.0], dtype=DTYPE)
    times = torch.tensor([[0.2, 0.5, 1.3, 2.0], [1.0, 1.1, 2.5, NAN]], dtype=DTYPE)  # a query before t0
    out = m.decode(z0, t0, times, torch.tensor([4, 3]))
    for b in range(2):
        for j in range(4 - b):
            z = torch.linalg.matrix_exp((times[b, j] - t0[b]) * A) @ z0[b]
            assert torch.allclose(out[b, j], m.output(z), atol=1e-9, rtol=0)
    with pytest.raises(ValueError, match="non-decreasing"):
        m.decode(z0, t0, times.flip(1).nan_to_num(3.0), None)


def test_reverse_observations_and_backward_encoder():
    obs = batch()
    rev = reverse_observations(obs)
    assert torch.equal(rev.times[1, :3], -obs.times[1, [2, 1, 0]])
    assert torch.equal(rev.values[2, :4].nan_to_num(99), obs.values[2, [3, 2, 1, 0]].nan_to_num(99))
    m = model("ode-rfwp")
    mean, logvar, t0 = m.encode(obs)
    assert t0.tolist() == [0.0, 0.3, 0.1]
    h = m.encoder.final_hidden(rev)
    assert torch.equal(torch.cat([mean, logvar], -1), m.to_posterior(h))
    # backwards: the encoder's last update reads the first observation, so changing the first observation
    # of sample 0 changes its posterior, and a batch's samples stay independent
    changed = obs.values.clone()
    changed[0, 0, 0] = 3.0
    mean2, _, _ = m.encode(Observations(obs.times, changed, obs.lengths))
    assert (mean2[0] - mean[0]).abs().max() > 1e-4
    assert torch.equal(mean2[1:], mean[1:])


def test_adjoint_and_direct_gradients_of_the_elbo_agree():
    obs = batch()
    grads = []
    for adjoint in (False, True):
        m = model(
            "ode-rfwp",
            noise_std="learned",
            solver=SolverOptions(RK4(step_size=0.05), gradient=Adjoint() if adjoint else Backprop()),
        )
        torch.manual_seed(3)
        loss = m.loss(obs)
        grads.append(torch.autograd.grad(loss, list(m.parameters())))
    for direct, adjoint in zip(*grads):
        assert torch.allclose(direct, adjoint, atol=1e-8, rtol=0)  # measured 2.2e-9 (rk4, τ step 0.05)
    assert max(float(g.abs().max()) for g in grads[1]) > 1e-3


def test_registry_classifiers_and_penalty():
    obs = batch()
    for name, encoder in (("latent-ode-rnn", "ode-rnn"), ("latent-ode-rfwp", "ode-rfwp")):
        inputs = model_inputs(name, obs.times, obs.values, obs.lengths)
        clf = create_model(name, inputs, 3, latent=3, hidden=4).to(DTYPE)
        assert clf.encoder_name == encoder
        logits = clf(inputs)
        mean, _, _ = clf.encode(inputs)
        assert torch.allclose(logits, clf.classifier(mean), atol=1e-15)
        torch.manual_seed(4)
        penalty = clf.penalty()
        torch.manual_seed(4)
        assert torch.equal(penalty, clf.loss(inputs))
        clf.eval()
        clf(inputs)
        with pytest.raises(RuntimeError, match="training mode"):
            clf.penalty()
    with pytest.raises(ValueError, match="noise_std"):
        LatentODE(2, noise_std=0)
    with pytest.raises(ValueError, match="encoder"):
        LatentODE(2, encoder="gru")


def test_initial_posterior_std_sets_the_log_variance_bias_only():
    obs = batch()
    options = dict(latent=3, hidden=4, width=5, heads=2, decoder_width=6, solver=RK4(step_size=0.25))
    torch.manual_seed(3)
    default = LatentODE(2, None, initial_posterior_std=None, **options).to(DTYPE)  # PyTorch's initialisation
    torch.manual_seed(3)
    narrow = LatentODE(2, None, **options).to(DTYPE)  # the default: 0.1
    mean, logvar, _ = default.encode(obs)
    narrow_mean, narrow_logvar, _ = narrow.encode(obs)
    default_bias = default.to_posterior[-1].bias[3:].detach()
    # same weights, so only the log-variance moves, by (2 log 0.1 − the default bias) for every sample
    assert torch.equal(narrow_mean, mean)
    assert torch.allclose(narrow_logvar - logvar, (2 * math.log(0.1) - default_bias).expand_as(logvar), atol=1e-12)
    for bad in (0.0, -1.0, "0.1", True):
        with pytest.raises(ValueError, match="initial_posterior_std"):
            LatentODE(2, None, initial_posterior_std=bad, **options)
