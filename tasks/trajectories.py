"""Trajectories and semi-Markov tasks: ODE-RNN, ODE-RFWP, Latent ODE-RNN and Latent ODE-RFWP (paper 002 §3.3).

Settings (data: :mod:`neuralde_seq.data.synthetic.trajectories`):

- ``pendulum-interp``, ``lv-interp``: damped pendulum / Lotka-Volterra, 30 random times on [0, 10], noise
  σ = 0.05; the model reads a random half of each sample's points and predicts the other half.
- ``pendulum-extrap``, ``lv-extrap``: the model reads the points in [0, 5] and predicts those in (5, 10].
- ``semi-markov``: Van der Pol observed after state-dependent gaps τ(s) = 0.1 + 0.5 / (1 + y²), 30
  observations; from the observations up to t_K predict s_{K+1} (its time given) and τ_K, for every
  K ≥ 14 of each test sample.

Models: the sequence models (ODE-RNN, ODE-RFWP with the delta rule) predict a point from their state
evolved to its time before reading it (causal: an interpolated point is forecast from the points before
it), the gap from their state after reading x_K (an MLP head, like the latent models'); they are trained
on the MSE of every row's prediction against the noisy values (and of the gaps). The latent models
(Latent ODE-RNN / -RFWP) encode what the model reads backwards in time and decode at the query times; they are trained
on the negative ELBO per observed value (plain ELBO, 1 sample, learned noise) of the whole window (trajectory tasks) or,
on the semi-Markov task, of a window of the last 8 observations plus the next point (their decoder starts from z0
at the window's first time, so a whole 28-observation prefix would make a one-step forecast a long
open-loop extrapolation; the gap head reads the decoded state). Predictions use the posterior mean of z0.
The latent models start with q(z0) of standard deviation 0.1 (``--initial-posterior-std``; with PyTorch's
default, about 1, the sampled z0 is noise and the decoder may learn the average trajectory without
reading it: Latent ODE-RNN on Lotka-Volterra interpolation, seed 2, stayed at the last-value level) and
raise the KL weight linearly from 0 to 1 over their first 10 epochs (``--kl-warmup-epochs``).
Training: Adam, batch 32, 256 training and 128 test samples per seed, sequence models 6 epochs, latent
models 30 epochs (40 on the semi-Markov windows), all at lr 3e-3, gradient norm clipped at 1, rk4 with one
step per gap in the normalised time, backpropagation through the solver (``--adjoint`` for the continuous
adjoint; the tests check both give the same gradients). The loop is :func:`neuralde_seq.training.fit`
with the objectives :class:`TrajectoryObjective` / :class:`SemiMarkovObjective` and no validation; a run
that diverges is scored with its last good weights and flagged (``diverged`` in results.json).

Metrics, on the test set against the *clean* states: MSE at the hidden points (trajectories), MSE of the
next state and of the gap (semi-Markov); for latent models also the test ELBO per observed value. Every
number is mean ± std over ``--seeds``. The last-value predictor predicts the most recent value the model
could read (and the last observed gap). A model beats it "by a wide margin" when its mean MSE is at most
half the last-value predictor's (column ``ratio`` = model MSE / last-value MSE ≤ 0.5).

Usage::

    python tasks/trajectories.py --seeds 0,1,2 --out results/trajectories

writes ``results.json`` and ``results.md`` there. One thread (torch.set_num_threads(1)).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuralde_seq.data.synthetic.trajectories import semi_markov_task, trajectory_task  # noqa: E402
from neuralde_seq.models.latent import LatentODE, kl_warmup_weight  # noqa: E402
from neuralde_seq.models.ode_rnn import ODERNN  # noqa: E402
from neuralde_seq.models.rfwp import ODERFWP  # noqa: E402
from neuralde_seq.observations import Observations  # noqa: E402
from neuralde_seq.solvers import RK4, Adjoint, Backprop, SolverOptions  # noqa: E402
from neuralde_seq.training import Objective, TrainingDiverged, fit, format_table, write_json, write_table  # noqa: E402
from neuralde_seq.training.spec import TrainingSpec  # noqa: E402

SETTINGS = {
    "pendulum-interp": ("pendulum", "interpolation"),
    "pendulum-extrap": ("pendulum", "extrapolation"),
    "lv-interp": ("lotka-volterra", "interpolation"),
    "lv-extrap": ("lotka-volterra", "extrapolation"),
    "semi-markov": (None, None),
}
MODELS = ("ode-rnn", "ode-rfwp", "latent-ode-rnn", "latent-ode-rfwp")
FIRST_SCORED = 14  # semi-Markov: predictions after observations 0..K for K >= 14
LATENT_WINDOW = 8  # semi-Markov: the latent models read the last 8 observations


class SequencePredictor(nn.Module):
    """An ODE-RNN or ODE-RFWP backbone with a linear output of the observed channels and an MLP gap head."""

    def __init__(self, kind: str, channels: int, hidden: int, solver: SolverOptions):
        super().__init__()
        if kind == "ode-rnn":
            self.backbone = ODERNN(channels, 2, hidden, 64, 1, solver=solver)
            self.backbone.readout = None
        else:
            self.backbone = ODERFWP(
                channels, None, hidden, heads=4, rule="delta", width=64, depth=1, d_ff=2 * hidden, solver=solver
            )
        self.output = nn.Linear(hidden, channels)
        # τ(s) = 0.1 + 0.5 / (1 + y²) is not linear in the state: an MLP, as the latent models' gap head
        self.gap = nn.Sequential(nn.Linear(hidden, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, observations: Observations):
        """(predicted values at every row from the state before reading it (B, T, C), predicted gap after
        every row (B, T))."""
        before, after = self.backbone.row_states(observations)
        return self.output(before), F.softplus(self.gap(after)).squeeze(-1)


class LatentPredictor(nn.Module):
    """A Latent ODE with a gap head on the decoded state."""

    def __init__(
        self,
        kind: str,
        channels: int,
        hidden: int,
        latent: int,
        solver: SolverOptions,
        initial_posterior_std: float | None = 0.1,
    ):
        super().__init__()
        self.model = LatentODE(
            channels,
            None,
            latent=latent,
            encoder=kind.removeprefix("latent-"),
            hidden=hidden,
            heads=4,
            rule="delta",
            noise_std="learned",
            initial_posterior_std=initial_posterior_std,
            solver=solver,
        )
        self.gap = nn.Sequential(nn.Linear(channels, 32), nn.Tanh(), nn.Linear(32, 1))

    def gaps(self, states: torch.Tensor) -> torch.Tensor:
        return F.softplus(self.gap(states)).squeeze(-1)


def masked_mse(prediction, target, mask):
    """Mean of (prediction − target)² over the entries where ``mask`` (broadcast over channels) is True."""
    mask = mask.unsqueeze(-1).expand_as(target) if mask.dim() == target.dim() - 1 else mask
    diff = torch.where(mask, prediction - target, torch.zeros_like(target))
    return (diff**2).sum() / mask.sum().clamp(min=1)


def forward_fill(observations: Observations) -> torch.Tensor:
    """(B, T, C): at each row the most recent observed value up to and including it."""
    values = observations.values
    out, last = [], values[:, 0]
    for i in range(values.shape[1]):
        last = torch.where(torch.isnan(values[:, i]), last, values[:, i])
        out.append(last)
    return torch.stack(out, 1)


# ---------------------------------------------------------------------------------------------------
# trajectory tasks


def trajectory_loss(model, inputs: Observations, target: Observations, kl_weight: float = 1.0) -> torch.Tensor:
    """Training loss of a batch: the latent models' negative ELBO per observed value of ``target`` given
    ``inputs`` (KL weighted by ``kl_weight``); the sequence models' MSE of every row but the first against
    the noisy ``target`` values."""
    if isinstance(model, LatentPredictor):
        return model.model.loss(inputs, target, kl_weight=kl_weight)
    prediction, _ = model(inputs)
    target = target.values
    rows = torch.ones(target.shape[:2], dtype=torch.bool)
    rows[:, 0] = False  # the state before the first observation has seen nothing
    return masked_mse(prediction, target, rows)


@torch.no_grad()
def trajectory_eval(model, data):
    if isinstance(model, LatentPredictor):
        prediction = model.model.predict(data.inputs, data.inputs.times)
        parts = model.model.elbo(data.inputs, data.target)
        elbo = float(parts["elbo"].sum() / parts["count"].sum())
    else:
        prediction, _ = model(data.inputs)
        elbo = None
    return dict(mse=float(masked_mse(prediction, data.clean, data.query)), elbo=elbo)


def trajectory_last_value(data):
    # a hidden row's forward fill is the last observation before it (the first point is always observed)
    return dict(mse=float(masked_mse(forward_fill(data.inputs), data.clean, data.query)), elbo=None)


# ---------------------------------------------------------------------------------------------------
# semi-Markov task


def window(observations: Observations, first: int, last: int, hide_last: bool) -> Observations:
    """Rows first..last of equal-length observations (the last one's values hidden if ``hide_last``)."""
    values = observations.values[:, first : last + 1].clone()
    if hide_last:
        values[:, -1] = float("nan")
    times = observations.times[:, first : last + 1]
    return Observations(times, values, torch.full_like(observations.lengths, last + 1 - first))


def semi_markov_loss(
    model, obs: Observations, gaps: torch.Tensor, generator: torch.Generator, kl_weight: float = 1.0
) -> torch.Tensor:
    """Training loss of a batch of (B, T) observations ``obs`` with their (B, T) ``gaps``: latent models, the
    negative ELBO of a random window (its last observation K drawn from ``generator``) plus the gap MSE;
    sequence models, the MSE of every row's prediction but the first plus the gap MSE."""
    T = obs.values.shape[1]
    if isinstance(model, LatentPredictor):
        # a window of LATENT_WINDOW observations and the next point, the same K for the whole batch
        K = int(torch.randint(LATENT_WINDOW - 1, T - 1, (1,), generator=generator))
        first = K - LATENT_WINDOW + 1
        parts = model.model.elbo(window(obs, first, K + 1, True), window(obs, first, K + 1, False), kl_weight=kl_weight)
        elbo_loss = -parts["objective"].sum() / parts["count"].sum()
        gap_loss = F.mse_loss(model.gaps(parts["prediction"]), gaps[:, first : K + 2])
        return elbo_loss + gap_loss
    prediction, predicted_gaps = model(obs)
    rows = torch.ones(obs.values.shape[:2], dtype=torch.bool)
    rows[:, 0] = False
    return masked_mse(prediction, obs.values, rows) + F.mse_loss(predicted_gaps, gaps)


@torch.no_grad()
def semi_markov_eval(model, data):
    obs, T = data.inputs, data.inputs.values.shape[1]
    K = torch.arange(FIRST_SCORED, T - 1)
    if isinstance(model, LatentPredictor):
        states, gaps, elbo, count = [], [], 0.0, 0
        for k in K.tolist():
            first = k - LATENT_WINDOW + 1
            seen = window(obs, first, k + 1, True)
            prediction = model.model.predict(seen, seen.times)
            states.append(prediction[:, -1])
            gaps.append(model.gaps(prediction[:, -2]))
            parts = model.model.elbo(seen, window(obs, first, k + 1, False))
            elbo, count = elbo + float(parts["elbo"].sum()), count + int(parts["count"].sum())
        states, gaps, elbo = torch.stack(states, 1), torch.stack(gaps, 1), elbo / count
    else:
        prediction, predicted_gaps = model(obs)
        states, gaps, elbo = prediction[:, K + 1], predicted_gaps[:, K], None
    return dict(
        mse=float(F.mse_loss(states, data.clean[:, K + 1])), gap_mse=float(F.mse_loss(gaps, data.gaps[:, K])), elbo=elbo
    )


def semi_markov_last_value(data):
    obs = data.inputs
    K = torch.arange(FIRST_SCORED, obs.values.shape[1] - 1)
    previous_gap = obs.times[:, K] - obs.times[:, K - 1]
    return dict(
        mse=float(F.mse_loss(obs.values[:, K], data.clean[:, K + 1])),
        gap_mse=float(F.mse_loss(previous_gap, data.gaps[:, K])),
        elbo=None,
    )


# ---------------------------------------------------------------------------------------------------
# objectives for neuralde_seq.training.fit


class _TaskObjective(Objective):
    """Shared by the tasks' objectives: the KL warm-up of the latent models and the target check.

    Arguments:
        kl_warmup_epochs: the KL weight rises linearly from 0 to 1 over this many epochs of training steps
            (0: weight 1 throughout; the sequence models have no KL term).
    """

    def __init__(self, kl_warmup_epochs: int = 0):
        self.kl_warmup_epochs = kl_warmup_epochs

    def kl_weight(self, context: dict) -> float:
        # fit's context gives the steps taken so far and the steps of an epoch.
        return kl_warmup_weight(context["step"], self.kl_warmup_epochs * context["steps_per_epoch"])

    def check_targets(self, targets, num_samples: int, name: str = "targets"):
        if len(targets) != num_samples:
            raise ValueError(f"{name} holds {len(targets)} samples but the inputs {num_samples}")
        return targets


class TrajectoryObjective(_TaskObjective):
    """Trajectory tasks: inputs, the (N, T, C) Observations a model reads; targets, the (N, T, C)
    Observations of the noisy values at every point; loss :func:`trajectory_loss`."""

    def training_loss(self, model, inputs, targets, context):
        return trajectory_loss(model, inputs, targets, self.kl_weight(context)), None


class SemiMarkovObjective(_TaskObjective):
    """Semi-Markov task: inputs, the (N, T, 2) Observations; targets, the (N, T) gaps; loss
    :func:`semi_markov_loss`, the latent models' window drawn from fit's data-order generator."""

    def training_loss(self, model, inputs, targets, context):
        return semi_markov_loss(model, inputs, targets, context["generator"], self.kl_weight(context)), None


# ---------------------------------------------------------------------------------------------------


def make_data(setting, n, seed):
    system, mode = SETTINGS[setting]
    if setting == "semi-markov":
        return semi_markov_task(n, seed=seed)
    return trajectory_task(system, mode, n, seed=seed)


def to_float(data):
    """float32 copies of a task's tensors."""
    out = data[torch.arange(len(data))]
    for field in ("inputs", "target"):
        if hasattr(out, field):
            setattr(out, field, getattr(out, field).to(torch.float32))
    for field in ("clean", "gaps"):
        if hasattr(out, field):
            setattr(out, field, getattr(out, field).float())
    return out


def run(setting, kind, seed, args):
    """Train one model on one setting with one seed through :func:`neuralde_seq.training.fit` and score it.

    Arguments: ``setting`` (a key of :data:`SETTINGS`), ``kind`` (one of :data:`MODELS`), ``seed`` (model,
    data and batch order), ``args`` (the parsed command line). Returns the test metrics (``mse``,
    ``gap_mse`` on the semi-Markov task, ``elbo`` or None), ``train_seconds``, ``last_value`` (the
    baseline's metrics), ``diverged`` (fit's message, or None; the last good weights are scored) and
    ``parameters``.
    """
    torch.manual_seed(seed)
    train = to_float(make_data(setting, args.train_size, 1000 + seed))
    test = to_float(make_data(setting, args.test_size, 2000 + seed))
    solver = SolverOptions(RK4(step_size=args.step_size), gradient=Adjoint() if args.adjoint else Backprop())
    channels = train.clean.shape[-1]
    if kind.startswith("latent"):
        model = LatentPredictor(kind, channels, args.hidden, args.latent, solver, args.initial_posterior_std)
    else:
        model = SequencePredictor(kind, channels, args.hidden, solver)
    latent = kind.startswith("latent")
    if not latent:
        epochs = args.epochs
    else:
        epochs = args.semi_markov_latent_epochs if setting == "semi-markov" else args.latent_epochs
    warmup_epochs = args.kl_warmup_epochs if latent else 0
    if setting == "semi-markov":
        objective, targets = SemiMarkovObjective(warmup_epochs), train.gaps
    else:
        objective, targets = TrajectoryObjective(warmup_epochs), train.target
    spec = TrainingSpec(
        epochs=epochs, lr=args.latent_lr if latent else args.lr, batch_size=args.batch_size, seed=seed, grad_clip=1.0
    )
    diverged = None
    try:
        # No validation: the test set is scored once, after training.
        history = fit(model, objective, (train.inputs, targets), spec=spec, progress=False)
    except TrainingDiverged as error:  # scored with the restored last good weights, and reported
        history, diverged = error.history, str(error)
        tqdm.write(f"{setting} {kind} seed {seed}: {diverged}")
    train_seconds = sum(history["seconds_per_epoch"])
    model.eval()
    metrics = semi_markov_eval(model, test) if setting == "semi-markov" else trajectory_eval(model, test)
    baseline = semi_markov_last_value(test) if setting == "semi-markov" else trajectory_last_value(test)
    return dict(
        metrics,
        train_seconds=train_seconds,
        last_value=baseline,
        diverged=diverged,
        parameters=sum(p.numel() for p in model.parameters()),
    )


def summarise(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return float(np.mean(values)), float(np.std(values))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--train-size", type=int, default=256)
    parser.add_argument("--test-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=6, help="epochs of the sequence models")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--latent-epochs", type=int, default=30, help="epochs of the latent models")
    parser.add_argument(
        "--semi-markov-latent-epochs",
        type=int,
        default=40,
        help="epochs of the latent models on the semi-Markov task (8-observation windows: cheap steps)",
    )
    parser.add_argument("--latent-lr", type=float, default=3e-3, help="learning rate of the latent models")
    parser.add_argument(
        "--kl-warmup-epochs",
        type=int,
        default=10,
        help="latent models: KL weight raised linearly from 0 to 1 over these epochs (0: none)",
    )
    parser.add_argument(
        "--initial-posterior-std",
        type=float,
        default=0.1,
        help="latent models: initial standard deviation of q(z0) (LatentODE initial_posterior_std)",
    )
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--latent", type=int, default=8)
    parser.add_argument("--step-size", type=float, default=None, help="rk4 step in the normalised gap time")
    parser.add_argument(
        "--adjoint",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="continuous adjoint (default: backpropagation through rk4, faster here)",
    )
    parser.add_argument("--out", default="results/trajectories")
    args = parser.parse_args(argv)
    if args.kl_warmup_epochs < 0:
        parser.error(f"--kl-warmup-epochs must be >= 0, got {args.kl_warmup_epochs}")
    if not args.initial_posterior_std > 0:
        parser.error(f"--initial-posterior-std must be > 0, got {args.initial_posterior_std}")
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = args.settings.split(",")
    models = args.models.split(",")
    for name in settings:
        if name not in SETTINGS:
            parser.error(f"unknown setting {name!r}; known: {', '.join(SETTINGS)}")
    for name in models:
        if name not in MODELS:
            parser.error(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    start = time.perf_counter()
    results = {}
    jobs = [(s, m, seed) for s in settings for m in models for seed in seeds]
    for setting, kind, seed in tqdm(jobs, desc="runs"):
        results.setdefault(setting, {}).setdefault(kind, {})[seed] = run(setting, kind, seed, args)
    rows = []
    for setting in settings:
        runs = results[setting]
        baseline = [r["last_value"] for seed_runs in runs.values() for r in seed_runs.values()][: len(seeds)]
        base_mse, base_std = summarise([b["mse"] for b in baseline])
        base_gap, base_gap_std = summarise([b.get("gap_mse") for b in baseline])
        rows.append(
            dict(
                setting=setting,
                model="last value",
                mse=f"{base_mse:.4f} ± {base_std:.4f}",
                ratio=1.0,
                gap_mse=None if base_gap is None else f"{base_gap:.4f} ± {base_gap_std:.4f}",
                elbo=None,
            )
        )
        for kind in models:
            seed_runs = list(runs[kind].values())
            mse, mse_std = summarise([r["mse"] for r in seed_runs])
            gap, gap_std = summarise([r.get("gap_mse") for r in seed_runs])
            elbo, elbo_std = summarise([r["elbo"] for r in seed_runs])
            seconds, _ = summarise([r["train_seconds"] for r in seed_runs])
            rows.append(
                dict(
                    setting=setting,
                    model=kind,
                    mse=f"{mse:.4f} ± {mse_std:.4f}",
                    ratio=mse / base_mse,
                    gap_mse=None if gap is None else f"{gap:.4f} ± {gap_std:.4f}",
                    elbo=None if elbo is None else f"{elbo:.3f} ± {elbo_std:.3f}",
                    seconds=seconds,
                    parameters=seed_runs[0]["parameters"],
                )
            )
    table = format_table(
        rows,
        ["setting", "model", "mse", "ratio", "gap_mse", "elbo", "seconds", "parameters"],
        headers=[
            "setting",
            "model",
            "test MSE",
            "MSE / last value",
            "gap MSE",
            "test ELBO / value",
            "train s",
            "params",
        ],
        formats={"ratio": ".3f", "seconds": ".0f"},
    )
    total = time.perf_counter() - start
    command = "python tasks/trajectories.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    write_json(
        dict(
            config=vars(args),
            seeds=seeds,
            results=results,
            total_seconds=total,
            command=command,
            torch=torch.__version__,
            python=platform.python_version(),
        ),
        out / "results.json",
    )
    diverged = [
        f"{setting} {kind} seed {seed}"
        for setting, runs in results.items()
        for kind, seed_runs in runs.items()
        for seed, r in seed_runs.items()
        if r["diverged"]
    ]
    notes = (
        f"Command: `{command}` ({total / 60:.1f} min on one thread). Mean ± std over seeds {seeds}; MSE "
        "against the clean states; ratio = model MSE / last-value MSE."
        + (f" Diverged (scored with the last good weights): {', '.join(diverged)}." if diverged else "")
    )
    write_table(table, out / "results.md", title="Trajectories and semi-Markov tasks", notes=notes)
    print(table)
    print(notes)
    return results


if __name__ == "__main__":
    main()
