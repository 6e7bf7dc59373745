"""The ``neuralde-seq`` command: ``compare`` (the default), ``bench`` and ``models``.

``neuralde-seq models [NAME ...]`` prints registry models with the input they read and every default
option (`neuralde_seq.models.model_defaults`). ``compare`` and ``bench`` run a benchmark config with `neuralde_seq.training.runner.run_benchmark`:

- ``neuralde-seq`` / ``neuralde-seq compare`` runs the packaged config ``neuralde_seq/configs/compare.yaml``:
  Hebb, Oja and Delta CT-FWP CDEs, NCDE and CKCNN on the embedded JapaneseVowels data with 30 % of each
  sample's time points dropped. Its options change the config (``--epochs`` every row's epochs,
  ``--drop-rate`` the task's, ...); what was run is written to ``results.json``.
- ``neuralde-seq bench CONFIG`` runs any config (tasks/configs/*.yaml; schema in docs/benchmarks.md).

Exit status: 0 when every run trained; 1 when a run diverged (its last good checkpoint is still
reported, marked DIVERGED); 2 on a usage, config or data error, reported in one line on stderr (no traceback).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from .training.config import ConfigError, load_config

COMPARE_CONFIG = Path(__file__).resolve().parent / "configs" / "compare.yaml"
_DTYPES = ("float32", "float64")


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors in one line (the usage itself is one ``--help`` away)."""

    def error(self, message: str):
        _fail(f"{message} (see {self.prog} --help)", prog=self.prog)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _fail(message: str, prog: str = "neuralde-seq"):
    """Print ``prog: error: message`` as one line on stderr and exit with status 2."""
    print(f"{prog}: error: {_one_line(message)}", file=sys.stderr)
    raise SystemExit(2)


def _parse_device(text: str) -> str:
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device (e.g. cpu, cuda, cuda:1)") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise argparse.ArgumentTypeError(f"{text!r}: no CUDA device is available on this machine")
        if device.index is not None and device.index >= count:
            raise argparse.ArgumentTypeError(f"{text!r}: this machine has {count} CUDA device(s)")
    return text


def _parse_models(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("--models needs at least one name")
    return names


def _parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds):
        raise argparse.ArgumentTypeError(f"--seeds needs non-negative integers, got {text!r}")
    return seeds


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by compare and bench."""
    recorded = parser.add_mutually_exclusive_group()
    recorded.add_argument("--resume", action="store_true",
                          help="reuse finished runs and continue interrupted ones made with the same settings and data")
    recorded.add_argument("--fresh", action="store_true",
                          help="ignore recorded runs: make every run afresh, overwriting its folder (what happens "
                               "without --resume; say it to make a script's intent plain, or after a recorded file "
                               "was reported unreadable)")
    parser.add_argument("--device", type=_parse_device, default="cpu",
                        help="torch device, e.g. cpu or cuda (default: %(default)s)")
    parser.add_argument("--dtype", choices=_DTYPES, default="float32",
                        help="floating point type of data and models (default: %(default)s)")
    parser.add_argument("--threads", type=_positive_int, default=1,
                        help="CPU threads for torch per process (default: %(default)s: these small models run "
                             "fastest on one, and a busy machine does not slow them down by thread contention)")
    parser.add_argument("--nproc", type=_positive_int, default=1,
                        help="data-parallel processes (DistributedDataParallel: gloo on CPU, nccl on CUDA; "
                             "default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="neuralde-seq",
        description="Continuous-time sequence models on irregularly sampled time series. Without a subcommand, "
                    "runs `compare`.",
    )
    sub = parser.add_subparsers(dest="command")
    compare = sub.add_parser(
        "compare",
        help="the main job: Hebb/Oja/Delta CT-FWP CDEs, NCDE and CKCNN on JapaneseVowels with dropped observations",
        description="Train and test the rows of the packaged config neuralde_seq/configs/compare.yaml (Hebb, Oja "
                    "and Delta CT-FWP CDEs, NCDE, CKCNN; 25 epochs, CKCNN 30) on the embedded JapaneseVowels data "
                    "with 30% of each sample's time points dropped, and write results.json, results.md, "
                    "curves.png, summary.png and one folder per run (checkpoints, learning curve) under --out. "
                    "Options given here change the config for every row.",
    )
    compare.add_argument("--models", type=_parse_models, default=None,
                         help="comma-separated rows to run (default: all: hebb-cde, oja-cde, delta-cde, ncde, ckcnn); "
                              "any other registry model name, reference method (minirocket, 1nn-euclidean, "
                              "1nn-dtw) or random-features adds a row for it")
    compare.add_argument("--epochs", type=_positive_int, default=None,
                         help="training epochs of every row (default: the config's, 25; CKCNN 30)")
    compare.add_argument("--drop-rate", type=float, default=None,
                         help="fraction of each sample's time points dropped, in [0, 1) (default: 0.3)")
    compare.add_argument("--seed", type=int, default=None,
                         help="seed of the drop, the split, model initialisation and batch order (default: 0)")
    compare.add_argument("--lr", type=float, default=None, help="learning rate of every row (default: 3e-3)")
    compare.add_argument("--batch-size", type=_positive_int, default=None,
                         help="batch size of every row (default: 32)")
    compare.add_argument("--solver", default=None,
                         help="solver method of the fast weight rows: auto (default: the closed form where it "
                              "applies, else rk4), rk4, dopri5 or exact")
    compare.add_argument("--out", type=Path, default=Path("results/compare"), help="output folder (default: %(default)s)")
    _run_options(compare)
    bench = sub.add_parser(
        "bench",
        help="run a benchmark config (tasks/configs/*.yaml): models x seeds, ours vs paper",
        description="Train every model row of a YAML benchmark config with every seed (best-validation checkpoint), "
                    "evaluate on every test sample and write per-run JSON/CSV, an aggregated results.md/results.json "
                    "(mean ± std over seeds beside the paper's number) and curves.png/summary.png. Config schema: "
                    "docs/benchmarks.md.",
    )
    bench.add_argument("config", type=Path, help="YAML config file")
    bench.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config entry, e.g. --set training.epochs=1 --set task_options.drop_rate=0.5 "
                            "(values parsed as YAML; repeatable)")
    bench.add_argument("--models", type=_parse_models, default=None,
                       help="comma-separated row labels (that row alone) or model names (every row of that model; a name that is also a row label names that row) to run (default: every row)")
    bench.add_argument("--seeds", type=_parse_seeds, default=None, help="comma-separated seeds (default: the config's)")
    bench.add_argument("--out", type=Path, default=None, help="output folder (default: results/<config name>)")
    bench.add_argument("--max-steps", type=_positive_int, default=None,
                       help="smoke test: stop every run after N training steps (marked SMOKE RUN, not results)")
    _run_options(bench)
    models = sub.add_parser(
        "models", help="list the registry's models with their input and default options",
        description="Print each registry model (or those named): the input it reads (a control path with its "
                    "build_control options, or the raw observations) and every default option of its constructor, "
                    "as create_model, the estimators and benchmark rows without options use them.")
    models.add_argument("names", nargs="*", help="model names (default: all)")
    return parser


def print_models(names) -> int:
    """``neuralde-seq models``: each model's input and default options (exit 2 for an unknown name)."""
    from .models import MODEL_NAMES, control_options, model_defaults, model_entry

    unknown = [n for n in names if n not in MODEL_NAMES]
    if unknown:
        print(f"neuralde-seq models: unknown model(s) {', '.join(unknown)}; known: {', '.join(MODEL_NAMES)}",
              file=sys.stderr)
        return 2
    for name in names or MODEL_NAMES:
        entry = model_entry(name)
        reads = (f"control {control_options(name)}" if entry.inputs == "control" else "observations")
        options = ", ".join(f"{k}={v!r}" for k, v in model_defaults(name).items())
        auto = entry.takes_solver and model_defaults(name)["solver"].method == "auto"
        print(f"{name}\n  input: {reads}\n  defaults: {options}"
              + (f"  (method 'auto': {_auto_method(name)} on the input above)" if auto else ""))
    return 0


def _auto_method(name: str) -> str:
    """What the default solver method "auto" resolves to for the registry model ``name`` with its default
    options on its default input (a tiny one built here): "exact" or "rk4"."""
    import torch

    from .models import create_model, model_entry, model_inputs
    from .solvers import AUTO_FALLBACK

    if not hasattr(model_entry(name).constructor, "resolve_method"):  # only fast weight models have a closed form
        return AUTO_FALLBACK
    times = torch.arange(9.0).unsqueeze(0)
    inputs = model_inputs(name, times, torch.sin(times).unsqueeze(-1))
    return create_model(name, inputs, 2).resolve_method(inputs)


def compare_overrides(args: argparse.Namespace, config: dict) -> list[str]:
    """The ``key.path=value`` overrides of compare.yaml that ``compare``'s options stand for."""
    from .models import FAST_WEIGHT_MODEL_NAMES, MODEL_NAMES

    overrides = []
    if args.drop_rate is not None:
        overrides.append(f"task_options.drop_rate={args.drop_rate!r}")
    if args.seed is not None:
        overrides.append(f"seeds=[{int(args.seed)}]")
    for i, row in enumerate(config["models"]):
        if row["model"] not in MODEL_NAMES:  # a closed-form row (reference, random features): nothing to train
            continue
        # Every row: a row's own training settings (CKCNN's 30 epochs) would otherwise win over the top level.
        for option, key in (("epochs", "epochs"), ("lr", "lr"), ("batch_size", "batch_size")):
            value = getattr(args, option)
            if value is not None:
                overrides.append(f"models.{i}.training.{key}={value!r}")
        if args.solver is not None and row["model"] in FAST_WEIGHT_MODEL_NAMES:
            overrides.append(f"models.{i}.solver.method={args.solver}")
    return overrides


def compare_config(models) -> dict:
    """compare.yaml, with a row added for every requested registry model that it does not hold (fast weight
    models with the config's small fast weight options, the others with their registry defaults) and for every
    requested closed-form method (`neuralde_seq.reference.REFERENCE_METHODS`: MiniRocket, 1-NN, random features)."""
    from .models import FAST_WEIGHT_MODEL_NAMES, MODEL_NAMES
    from .reference import REFERENCE_METHODS

    config = load_config(COMPARE_CONFIG)
    labels = {row["label"] for row in config["models"]}
    fast_weight_options = next(row["options"] for row in config["models"] if row["model"] in FAST_WEIGHT_MODEL_NAMES)
    for name in models or ():
        if name not in labels and name in MODEL_NAMES:
            row = {"label": name, "model": name}
            if name in FAST_WEIGHT_MODEL_NAMES:
                row["options"] = dict(fast_weight_options)
            config["models"].append(row)
        elif name not in labels and name in REFERENCE_METHODS:
            config["models"].append({"label": name, "model": name})
    return config


def _run(config, out: Path, args: argparse.Namespace, overrides: list[str], models, seeds=None,
         max_steps=None) -> dict:
    kwargs = dict(config=config, out_dir=out, overrides=overrides, models=models, seeds=seeds, max_steps=max_steps,
                  resume=args.resume and not args.fresh, progress=not args.no_progress, device=args.device,
                  dtype=args.dtype, threads=args.threads)
    # One process, --nproc N local processes, or the processes torchrun started.
    from .training.distributed import run_benchmark_distributed

    return run_benchmark_distributed(args.nproc, **kwargs)


def _error_text(err: BaseException) -> str:
    """An OSError as "what: file" (its own str() repeats the errno), any other error as its message."""
    if isinstance(err, OSError) and err.strerror and err.filename is not None:
        return f"{err.strerror}: {err.filename}"
    return str(err)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["compare", *argv]
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "models":
        return print_models(args.names)
    from .training.config import apply_overrides, parse_config

    source = COMPARE_CONFIG.name if args.command == "compare" else str(args.config)
    try:
        if args.command == "compare":
            if args.drop_rate is not None and not 0.0 <= args.drop_rate < 1.0:
                parser.error(f"--drop-rate must lie in [0, 1), got {args.drop_rate}")
            out, seeds, max_steps = args.out, None, None
            config = compare_config(args.models)
            overrides = compare_overrides(args, config)
        else:
            config = args.config
            overrides, seeds, max_steps = args.overrides, args.seeds, args.max_steps
            out = args.out
        # Parsed here first: every config error is reported before anything runs, and the default output
        # folder comes from the checked name (one folder name: results/<name> never leads elsewhere).
        raw = apply_overrides(load_config(config), overrides)
        if seeds is not None:
            raw["seeds"] = [int(s) for s in seeds]
        name = parse_config(raw).name
        if out is None:
            out = Path("results") / name
        results = _run(config, out, args, overrides, args.models, seeds, max_steps)
    except ConfigError as err:
        text = str(err)
        _fail(text if source in text else f"{source}: {text}")
    except (ValueError, OSError) as err:  # bad data, settings or files: the message says what to change
        print(f"neuralde-seq: error: {_one_line(_error_text(err))}", file=sys.stderr)
        return 2
    if results.get("diverged"):
        runs = ", ".join(f"{d['label']} seed {d['seed']}" if isinstance(d, dict) else str(d)
                         for d in results["diverged"])
        print(f"neuralde-seq: training diverged in {runs}; their last good checkpoints are reported, marked DIVERGED "
              f"(see {out / 'results.md'}).", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
