"""Latent ODEs (Rubanova, Chen & Duvenaud 2019) with an ODE-RNN or ODE-RFWP encoder.

The generative model: z0 ~ N(0, I); z(t) solves dz/dt = g(z) from z(t0) = z0 (g an MLP, tanh); each
observed value x_j(t) ~ N(o(z(t))_j, σ_j²) independently, o linear. The approximate posterior
q(z0 | x) = N(μ, diag(e^{ℓ})) comes from an encoder run *backwards in time* over the observations (an
ODE-RNN, `ODERNN`, giving the Latent ODE-RNN, or an ODE-RFWP,
`ODERFWP`, giving paper 002's Latent ODE-RFWP, §3.3): its state after
reading the observations from the last to the first is mapped by Linear-tanh-Linear to (μ, ℓ).

**Times.** t0 is each sample's own first observation time (where the backward encoder ends). The
decoder walks each sample's query times in order, integrating over its own gaps in a normalised time
(`evolve_over_gaps`, the one "evolve between observations" of the
toolkit), so a sample's prediction never depends on the rest of its batch; a query before t0 integrates
backwards. The backward encoder reads each sample's valid rows reversed, at times −t.

**ELBO** (per sample, summed over the observed entries of the target, so masks remove missing values and
padding):

    log p(x | z) = Σ_{observed (t, j)} [ −½ log(2π σ_j²) − (x_j(t) − o(z(t))_j)² / (2 σ_j²) ]
    KL           = ½ Σ_i (e^{ℓ_i} + μ_i² − 1 − ℓ_i)          (q(z0) against N(0, I), closed form)
    plain ELBO   = mean over K samples z0^(k) of log p(x | z^(k)) − KL
    IWAE bound   = log (1/K) Σ_k exp(log p(x | z^(k)) + log N(z0^(k); 0, I) − log q(z0^(k)))

``iwae=False`` (default) gives the plain ELBO with the analytic KL; ``iwae=True`` the importance-weighted
bound of Burda et al., which Rubanova et al.'s code uses (it equals the plain ELBO's Monte-Carlo estimate
with the sampled KL for K = 1). Training minimises `LatentODE.loss`, −Σ_b ELBO_b / Σ_b n_b with n_b
the number of observed target entries of sample b: the negative ELBO per observed value.

**Initial posterior width and KL warm-up.** With PyTorch's default initialisation q(z0) starts with a
standard deviation of about 1 while the posterior means of different samples differ by a few hundredths,
so the sampled z0 is almost pure noise: the decoder learns to fit the average trajectory without reading
z0, the encoder's mean head then gets no useful gradient, and the means of all samples stay (or shrink to)
the same value although the encoder's state differs between samples (measured on Lotka-Volterra
interpolation: the spread of μ over test samples fell to 0.001 while the KL per value stayed at 0.2-0.4, so
this is not a KL → 0 collapse). ``initial_posterior_std`` (default 0.1) starts q(z0) narrow, so that from the
first step z0 carries the encoder's information. ``kl_weight`` β ∈ [0, 1] scales the prior term of the
training objective for a warm-up: plain log p(x | z) − β KL; IWAE
log (1/K) Σ_k exp(log p(x | z^(k)) + β (log N(z0^(k); 0, I) − log q(z0^(k)))). β = 1 is the bound itself;
`kl_warmup_weight` raises it linearly from 0, as Rubanova et al. anneal their KL coefficient.

The noise σ is fixed (``noise_std=0.1``, a number) or learned per channel (``noise_std="learned"``, as a
log-σ parameter starting at log 0.1).

**As a classifier** (registry names ``latent-ode-rnn``, ``latent-ode-rfwp``): logits = Linear(μ), the
posterior mean of z0. Rubanova et al. train classification jointly with the ELBO: ``penalty()`` gives the
negative ELBO per observed value of reconstructing the last training batch's observations, so the
trainer's ``penalty_weight`` adds it to the cross-entropy.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn

from ..input_checks import check_input_matches, check_input_type, check_model_input, check_num_outputs
from ..observations import Observations
from ..rules import LearningRule
from ..solvers import Method, SolverOptions, evolve_over_gaps, solver_options
from .ode_rnn import ODERNN
from .recurrent import _positive_int, ode_mlp
from .rfwp import ODERFWP

__all__ = ["LatentODE", "ENCODERS", "reverse_observations", "gaussian_kl", "kl_warmup_weight"]

ENCODERS = ("ode-rnn", "ode-rfwp")
_LOG_2PI = math.log(2 * math.pi)


def reverse_observations(observations: Observations) -> Observations:
    """Each sample's valid rows in reverse order at times −t (padding stays at the end): the input of a
    backward-in-time encoder."""
    T = observations.values.shape[1]
    steps = torch.arange(T, device=observations.values.device).unsqueeze(0)
    lengths = observations.lengths.unsqueeze(1)
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)  # (B, T)
    times = -observations.times.gather(1, index)
    values = observations.values.gather(1, index.unsqueeze(-1).expand_as(observations.values))
    return Observations(times, values, observations.lengths, observations.static)


def gaussian_kl(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mean, diag(e^logvar)) || N(0, I)) over the last dimension: ½ Σ (e^ℓ + μ² − 1 − ℓ)."""
    return 0.5 * (logvar.exp() + mean * mean - 1 - logvar).sum(-1)


def kl_warmup_weight(step: int, warmup_steps: int) -> float:
    """The KL weight β of optimiser step ``step`` (0-based) under a linear warm-up over ``warmup_steps``
    steps: β = min(1, step / warmup_steps), so the first step uses β = 0 and every step from
    ``warmup_steps`` on the full ELBO; ``warmup_steps = 0`` means no warm-up (β = 1 throughout)."""
    for name, value in (("step", step), ("warmup_steps", warmup_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return 1.0 if warmup_steps == 0 else min(1.0, step / warmup_steps)


def _check_kl_weight(kl_weight) -> float:
    if isinstance(kl_weight, bool) or not isinstance(kl_weight, (int, float)) or not 0 <= kl_weight <= 1:
        raise ValueError(f"kl_weight must be a number in [0, 1], got {kl_weight!r}")
    return float(kl_weight)


class LatentODE(nn.Module):
    """Latent ODE with a backward ODE-RNN or ODE-RFWP encoder (module docstring).

    Arguments:
        in_channels: channels C of the observations (and of the reconstruction).
        num_classes: classes of the classifier head on μ, or None for a pure generative model.
        latent: width of z.
        encoder: "ode-rnn" (Latent ODE-RNN) or "ode-rfwp" (Latent ODE-RFWP).
        hidden: width of the encoder's state (default 32).
        width: width of the hidden layers of the encoder's ODE MLP (default 64); also the hidden width of the
            posterior head that maps the encoder's state to q(z0).
        depth: number of tanh hidden layers of the encoder's ODE MLP (default 1; 0: a linear field).
        heads: number of fast weight heads of the ODE-RFWP encoder (default 4; ignored by "ode-rnn").
        rule: learning rule of the ODE-RFWP encoder, "hebb", "oja", "delta" (default), "delta-post" or a
            `LearningRule` (ignored by "ode-rnn").
        decoder_width: width of the hidden layers of the latent ODE's MLP g (default 64).
        decoder_depth: number of tanh hidden layers of g (default 1).
        noise_std: fixed observation noise σ (a positive number) or "learned" (per channel).
        samples: number K of posterior samples in `elbo`.
        iwae: use the importance-weighted bound instead of the plain ELBO.
        initial_posterior_std: if a positive number s, the log-variance half of the posterior head's last
            bias starts at 2 log s, so q(z0) starts with a standard deviation of about s (default 0.1: with
            PyTorch's initialisation, about 1, the sampled z0 drowns the differences between samples' posterior
            means and training can collapse onto the average trajectory; see the module docstring); None keeps
            PyTorch's initialisation.
        solver: `SolverOptions` or a method object, of the encoder's and decoder's ODEs (default `Auto`: rk4,
            one step per gap in the normalised time, checkpointed gradients).
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int | None = None,
        latent: int = 16,
        encoder: str = "ode-rnn",
        hidden: int = 32,
        width: int = 64,
        depth: int = 1,
        *,
        heads: int = 4,
        rule: str | LearningRule = "delta",
        decoder_width: int = 64,
        decoder_depth: int = 1,
        noise_std: float | str = 0.1,
        samples: int = 1,
        iwae: bool = False,
        initial_posterior_std: float | None = 0.1,
        solver: SolverOptions | Method | None = None,
    ):
        super().__init__()
        _positive_int("in_channels", in_channels)
        _positive_int("latent", latent)
        _positive_int("samples", samples)
        if num_classes is not None:
            check_num_outputs(num_classes)
        if encoder not in ENCODERS:
            raise ValueError(f"encoder must be one of {ENCODERS}, got {encoder!r}")
        self.solver = solver_options(solver)
        self.encoder: ODERNN | ODERFWP
        if encoder == "ode-rnn":
            self.encoder = ODERNN(in_channels, 2, hidden, width, depth, solver=self.solver)
            self.encoder.readout = None  # only its state is used
        else:
            self.encoder = ODERFWP(in_channels, None, hidden, heads, rule, width, depth, solver=self.solver)
        self.to_posterior = nn.Sequential(nn.Linear(hidden, width), nn.Tanh(), nn.Linear(width, 2 * latent))
        if initial_posterior_std is not None:
            if (
                isinstance(initial_posterior_std, bool)
                or not isinstance(initial_posterior_std, (int, float))
                or not initial_posterior_std > 0
            ):
                raise ValueError(
                    f"initial_posterior_std must be a positive number or None, got {initial_posterior_std!r}"
                )
            with torch.no_grad():
                cast(nn.Linear, self.to_posterior[-1]).bias[latent:] = 2 * math.log(initial_posterior_std)
        self.dynamics = ode_mlp(latent, decoder_width, decoder_depth)
        self.output = nn.Linear(latent, in_channels)
        if noise_std == "learned":
            self.log_noise_std = nn.Parameter(torch.full((in_channels,), math.log(0.1)))
        elif isinstance(noise_std, (int, float)) and not isinstance(noise_std, bool) and noise_std > 0:
            self.register_buffer("log_noise_std", torch.full((in_channels,), math.log(noise_std)))
        else:
            raise ValueError(f"noise_std must be a positive number or 'learned', got {noise_std!r}")
        self.classifier = None if num_classes is None else nn.Linear(latent, num_classes)
        self.in_channels, self.latent, self.samples, self.iwae = in_channels, latent, samples, bool(iwae)
        self.encoder_name = encoder
        self._last_inputs: Observations | None = None

    # -- encoder ------------------------------------------------------------------------------------

    def encode(self, observations: Observations) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q(z0 | observations), by the encoder run backwards in time.

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B; every sample needs
                an observed value.

        Returns:
            ``(mean, logvar, t0)``: mean (B, latent), logvar (B, latent), and t0 (B,) each sample's first
                observation time, where z0 sits.

        Raises:
            ValueError: wrong channels, or a sample without any observed value.
        """
        check_input_type(self, observations, Observations)
        if observations.channels != self.in_channels:
            raise ValueError(
                f"observations have {observations.channels} channels but the model expects {self.in_channels}"
            )
        check_input_matches(self, observations)
        event = observations.mask.any(-1)
        if not bool(event.any(1).all()):
            raise ValueError("every sample needs at least one observed value to be encoded")
        h = self.encoder.final_hidden(reverse_observations(observations))
        mean, logvar = self.to_posterior(h).chunk(2, dim=-1)
        first = event.to(torch.int8).argmax(1)
        t0 = observations.times.gather(1, first.unsqueeze(1)).squeeze(1).to(mean.dtype)
        return mean, logvar, t0

    # -- decoder ------------------------------------------------------------------------------------

    def decode(
        self, z0: torch.Tensor, t0: torch.Tensor, times: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mean o(z(t)) of the observations at each sample's own query times.

        Arguments:
            z0: (N, latent) the latent state at t0.
            t0: (N,) its time.
            times: (N, Q) query times, non-decreasing within each sample's length.
            lengths: (N,) number of valid query times (default Q); z stops moving after them.

        Returns:
            (N, Q, C) predicted means (entries after a sample's length repeat its last valid one).
        """
        N, Q = times.shape
        if z0.shape != (N, self.latent) or t0.shape != (N,):
            raise ValueError(
                f"z0 must be ({N}, {self.latent}) and t0 ({N},) for times of shape {tuple(times.shape)}, "
                f"got {tuple(z0.shape)} and {tuple(t0.shape)}"
            )
        valid = (
            torch.ones_like(times, dtype=torch.bool)
            if lengths is None
            else (torch.arange(Q, device=times.device).unsqueeze(0) < lengths.to(times.device).unsqueeze(1))
        )
        times = torch.where(valid, times.to(z0.dtype), torch.zeros((), dtype=z0.dtype, device=z0.device))
        if bool(((times[:, 1:] < times[:, :-1]) & valid[:, 1:]).any()):
            raise ValueError("query times must be non-decreasing within each sample's length")
        z, previous, outputs = z0, t0.to(z0.dtype), []
        for j in range(Q):
            gap = torch.where(valid[:, j], times[:, j] - previous, torch.zeros_like(previous))
            z = evolve_over_gaps(self.dynamics, z, gap, self.solver)
            previous = torch.where(valid[:, j], times[:, j], previous)
            outputs.append(self.output(z))
        return torch.stack(outputs, 1)

    def predict(
        self, observations: Observations, times: torch.Tensor, lengths: torch.Tensor | None = None, sample: bool = False
    ) -> torch.Tensor:
        """Predicted observations at arbitrary query times (interpolation, extrapolation).

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B; every sample needs
                an observed value.
            times: (B, Q) query times, non-decreasing within each sample's query length.
            lengths: (B,) number of valid query times per sample; None (default): all Q.
            sample: decode one sample of z0 instead of the posterior mean (default False).

        Returns:
            (B, Q, C) predicted means, NaN after each sample's query length.
        """
        mean, logvar, t0 = self.encode(observations)
        z0 = mean + torch.randn_like(mean) * (0.5 * logvar).exp() if sample else mean
        out = self.decode(z0, t0, times, lengths)
        if lengths is not None:
            valid = torch.arange(times.shape[1], device=out.device).unsqueeze(0) < lengths.to(out.device).unsqueeze(1)
            out = out.masked_fill(~valid.unsqueeze(-1), float("nan"))
        return out

    # -- ELBO ---------------------------------------------------------------------------------------

    def log_likelihood(self, prediction: torch.Tensor, target: Observations) -> torch.Tensor:
        """Σ over the target's observed entries of log N(x; prediction, σ²) (NaN and padding excluded).

        Arguments:
            prediction: (..., B, Q, C) predicted means.
            target: `Observations` of values (B, Q, C).

        Returns:
            The log-likelihoods, shape prediction.shape[:-2], i.e. (..., B).
        """
        mask = target.mask
        x = torch.where(mask, target.values, torch.zeros_like(target.values))
        log_std = self.log_noise_std.to(prediction.dtype)
        density = -0.5 * _LOG_2PI - log_std - 0.5 * ((x - prediction) / log_std.exp()) ** 2
        return torch.where(mask, density, torch.zeros_like(density)).sum((-1, -2))

    def elbo(
        self,
        observations: Observations,
        target: Observations | None = None,
        samples: int | None = None,
        iwae: bool | None = None,
        kl_weight: float = 1.0,
    ) -> dict[str, torch.Tensor]:
        """The evidence lower bound of ``target`` given the encoder's view ``observations``.

        Arguments:
            observations: what the encoder reads.
            target: the points to reconstruct (default: ``observations`` themselves), same batch size; for
                interpolation the full window, for extrapolation the points to predict.
            samples: number K of posterior samples; None (default): the model's ``samples``.
            iwae: True for the importance-weighted bound, False for the plain ELBO; None (default): the
                model's ``iwae`` (module docstring).
            kl_weight: β ∈ [0, 1] of the ``objective`` (KL warm-up, module docstring).

        Returns:
            dict of (B,) tensors: ``elbo`` (the bound, β = 1), ``objective`` (the same with the prior term
                weighted by ``kl_weight``), ``log_likelihood`` (mean over the K samples), ``kl``, ``count``
                (observed target entries), and ``prediction`` (B, Q, C), the mean over samples of the decoded means.
        """
        kl_weight = _check_kl_weight(kl_weight)
        target = observations if target is None else target
        check_model_input(self, target, Observations)
        if target.batch_size != observations.batch_size:
            raise ValueError(f"target has {target.batch_size} samples but observations have {observations.batch_size}")
        K = self.samples if samples is None else _positive_int("samples", samples)
        iwae = self.iwae if iwae is None else bool(iwae)
        mean, logvar, t0 = self.encode(observations)
        B = mean.shape[0]
        std = (0.5 * logvar).exp()
        eps = torch.randn((K,) + mean.shape, dtype=mean.dtype, device=mean.device)
        z0 = mean + eps * std  # (K, B, latent)
        prediction = self.decode(
            z0.reshape(K * B, -1), t0.repeat(K), target.times.repeat(K, 1), target.lengths.repeat(K)
        ).view(K, B, *target.values.shape[1:])
        log_lik = self.log_likelihood(prediction, target)  # (K, B)
        kl = gaussian_kl(mean, logvar)
        if iwae:
            log_prior = (-0.5 * _LOG_2PI - 0.5 * z0 * z0).sum(-1)
            log_posterior = (-0.5 * _LOG_2PI - 0.5 * logvar - 0.5 * eps * eps).sum(-1)
            log_ratio = log_prior - log_posterior
            bound = torch.logsumexp(log_lik + log_ratio, dim=0) - math.log(K)
            objective = (
                bound if kl_weight == 1 else torch.logsumexp(log_lik + kl_weight * log_ratio, dim=0) - math.log(K)
            )
        else:
            bound = log_lik.mean(0) - kl
            objective = bound if kl_weight == 1 else log_lik.mean(0) - kl_weight * kl
        return dict(
            elbo=bound,
            objective=objective,
            log_likelihood=log_lik.mean(0),
            kl=kl,
            count=target.mask.sum((1, 2)),
            prediction=prediction.mean(0),
        )

    def loss(self, observations: Observations, target: Observations | None = None, **options) -> torch.Tensor:
        """−Σ_b ELBO_b / Σ_b n_b: the negative ELBO per observed target value; with ``kl_weight`` β < 1 (an
        option of `elbo`) the warm-up objective in place of the ELBO.

        Arguments:
            observations: what the encoder reads (as `elbo`).
            target: the points to reconstruct (default None: ``observations`` themselves).
            **options: ``samples``, ``iwae`` and ``kl_weight``, as `elbo`.

        Returns:
            A scalar tensor to minimise.
        """
        parts = self.elbo(observations, target, **options)
        return -parts["objective"].sum() / parts["count"].sum().clamp(min=1).to(parts["objective"].dtype)

    # -- classifier ---------------------------------------------------------------------------------

    def forward(self, observations: Observations) -> torch.Tensor:
        """Logits from the posterior mean of z0 (in training mode the batch is kept for `penalty`).

        Arguments:
            observations: `Observations` with ``channels == in_channels``, batch size B; every sample needs
                an observed value.

        Returns:
            (B, num_classes) logits.

        Raises:
            ValueError: the model was built without ``num_classes``.
        """
        if self.classifier is None:
            raise ValueError("this LatentODE was built without num_classes: use elbo, loss or predict")
        mean, _, _ = self.encode(observations)
        self._last_inputs = observations if self.training else None
        return self.classifier(mean)

    def penalty(self) -> torch.Tensor:
        """Negative ELBO per observed value of reconstructing the last training batch given to forward.

        Returns:
            A scalar tensor (`loss` of that batch).

        Raises:
            RuntimeError: no forward pass in training mode yet.
        """
        if self._last_inputs is None:
            raise RuntimeError("penalty() needs a forward pass in training mode first")
        return self.loss(self._last_inputs)
