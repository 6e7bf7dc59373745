"""The ``neuralde-seq`` command: ``compare`` (the default), ``bench``, ``report``, ``models``, ``predict`` and
``migrate``.

``neuralde-seq models`` lists the registry's models, one line each (name, input, what it is);
``neuralde-seq models NAME ...`` prints each one's input, every default option
(`neuralde_seq.models.model_defaults`) and its solver's fields. ``compare`` and ``bench`` run a benchmark config
with `neuralde_seq.training.runner.run_benchmark`:

- ``neuralde-seq`` / ``neuralde-seq compare`` runs the packaged config ``neuralde_seq/configs/compare.yaml``:
  Hebb, Oja and Delta CT-FWP CDEs, NCDE and CKCNN on the embedded JapaneseVowels data with 30 % of each
  sample's time points dropped. Its options change the config (``--epochs`` every row's epochs,
  ``--drop-rate`` the task's, ...); ``--models`` runs only the rows named (instead of all seven), where a name
  may also be any other registry model, reference method or random-features, run as a row of its own with the
  config's settings. What was run is written to ``results.json``.
- ``neuralde-seq bench CONFIG`` runs any config (tasks/configs/*.yaml; schema in docs/benchmarks.md);
  ``--shard K/N`` only the K-th of N parts of its runs (a job array's task), ``--executor ray [--address ADDR]``
  every run as a Ray task.
- ``neuralde-seq report OUT`` writes the tables and plots of the grid in OUT from its run folders
  (`neuralde_seq.training.runner.report_grid`): after the shards of a grid are done.
- ``neuralde-seq predict RUN_OR_CHECKPOINT DATA --out predictions.csv`` scores a data file (``.ts`` / ARFF) with a
  run's trained model (`neuralde_seq.load_run`): one CSV line per sample, its predicted class and probabilities.
- ``neuralde-seq migrate PATH`` brings the results, checkpoints and caches an older neuralde_seq wrote under PATH
  to the current format version (`neuralde_seq.migration.migrate_path`); readers refuse older files, naming it.

Exit status: 0 when every run trained; 1 when a run diverged (its last good checkpoint is still
reported, marked DIVERGED); 2 on a usage, config or data error, runs without a result (``report``) or runs whose
Ray worker died more than ``--retries`` times, reported in one line on stderr (no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .input_checks import DTYPES
from .training.config import ConfigError, load_config

COMPARE_CONFIG = Path(__file__).resolve().parent / "configs" / "compare.yaml"


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors in one line (the usage itself is one ``--help`` away)."""

    def error(self, message: str):
        _fail(f"{message} (see {self.prog} --help)", prog=self.prog)


def _one_line(text: object) -> str:
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
        raise argparse.ArgumentTypeError("--models needs at least one name (comma-separated, e.g. ncde,ckcnn)")
    return names


def _check_row_names(models, rows) -> None:
    """``bench --models``: every name a row label or a row's model, else a ConfigError naming the closest."""
    from .input_checks import did_you_mean

    known = list(dict.fromkeys([r.label for r in rows] + [r.model for r in rows]))
    for name in models or ():
        if name not in known:
            hint = did_you_mean(name, known)
            raise ConfigError(
                f"--models: {name} match no row; {hint + ' ' if hint else ''}--models takes a row's "
                "label or model name; rows: " + ", ".join(f"{r.label} ({r.model})" for r in rows)
            )


def _parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds):
        raise argparse.ArgumentTypeError(f"--seeds needs non-negative integers, got {text!r}")
    return seeds


def _int_at_least(low: int, what: str):
    """An argparse type: an integer of at least ``low`` (``what`` names it in the error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "a non-negative integer")


def _parse_shard(text: str) -> tuple[int, int]:
    from .training.grid import parse_shard

    try:
        return parse_shard(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).replace("shard must be", "expected")) from None


def _run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by compare and bench."""
    recorded = parser.add_mutually_exclusive_group()
    recorded.add_argument(
        "--resume",
        action="store_true",
        help="reuse finished runs and continue interrupted ones made with the same settings and data",
    )
    recorded.add_argument(
        "--fresh",
        action="store_true",
        help="ignore recorded runs: make every run afresh, overwriting its folder (what happens "
        "without --resume; say it to make a script's intent plain, or after a recorded file "
        "was reported unreadable)",
    )
    parser.add_argument(
        "--device", type=_parse_device, default="cpu", help="torch device, e.g. cpu or cuda (default: %(default)s)"
    )
    parser.add_argument(
        "--dtype",
        choices=tuple(DTYPES),
        default="float32",
        help="floating point type of data and models (default: %(default)s)",
    )
    parser.add_argument(
        "--threads",
        type=_positive_int,
        default=1,
        help="CPU threads for torch per process (default: %(default)s: these small models run "
        "fastest on one, and a busy machine does not slow them down by thread contention)",
    )
    parser.add_argument(
        "--nproc",
        type=_positive_int,
        default=1,
        help="data-parallel processes (DistributedDataParallel: gloo on CPU, nccl on CUDA; default: %(default)s)",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="print only the results table: no progress (bars on a terminal, otherwise one line per "
        "epoch and per run, on stderr)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="neuralde-seq",
        description="Continuous-time sequence models on irregularly sampled time series. Without a subcommand, "
        "runs `compare`.",
    )
    sub = parser.add_subparsers(dest="command")
    compare = sub.add_parser(
        "compare",
        help="the main job: Hebb/Oja/Delta CT-FWP CDEs, NCDE and CKCNN beside MiniRocket and 1-NN on JapaneseVowels "
        "with dropped observations",
        description="Train and test the rows of the packaged config neuralde_seq/configs/compare.yaml (Hebb, Oja "
        "and Delta CT-FWP CDEs, NCDE, CKCNN; 25 epochs, CKCNN 30; and the references MiniRocket and 1-NN) on "
        "the embedded JapaneseVowels data "
        "with 30% of each sample's time points dropped, and write results.json, results.md, "
        "curves.png, summary.png and one folder per run (checkpoints, learning curve) under --out. "
        "Options given here change the config for every row.",
    )
    compare.add_argument(
        "--models",
        type=_parse_models,
        default=None,
        help="comma-separated rows to run instead of all seven (default: hebb-cde, oja-cde, "
        "delta-cde, ncde, ckcnn, minirocket, 1nn-euclidean); a name may also be any other registry model "
        "(neuralde-seq models), a reference method (minirocket, 1nn-euclidean, 1nn-dtw) or "
        "random-features, run as a row of its own with the config's settings",
    )
    compare.add_argument(
        "--epochs",
        type=_positive_int,
        default=None,
        help="training epochs of every row (default: the config's, 25; CKCNN 30)",
    )
    compare.add_argument(
        "--drop-rate",
        type=float,
        default=None,
        help="fraction of each sample's time points dropped, in [0, 1) (default: 0.3)",
    )
    compare.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the drop, the split, model initialisation and batch order (default: 0)",
    )
    compare.add_argument("--lr", type=float, default=None, help="learning rate of every row (default: 3e-3)")
    compare.add_argument("--batch-size", type=_positive_int, default=None, help="batch size of every row (default: 32)")
    compare.add_argument(
        "--solver",
        default=None,
        help="solver method of the fast weight rows: auto (default: the closed form where it "
        "applies, else rk4), rk4, dopri5 or exact (any SolverOptions method name)",
    )
    compare.add_argument(
        "--out", type=Path, default=Path("results/compare"), help="output folder (default: %(default)s)"
    )
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
    bench.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config entry, e.g. --set training.epochs=1 --set task_options.drop_rate=0.5 "
        "(values parsed as YAML; repeatable)",
    )
    bench.add_argument(
        "--models",
        type=_parse_models,
        default=None,
        help="comma-separated row labels (that row alone) or model names (every row of that model; a "
        "name that is also a row label names that row): only these rows run (default: every row)",
    )
    bench.add_argument("--seeds", type=_parse_seeds, default=None, help="comma-separated seeds (default: the config's)")
    bench.add_argument("--out", type=Path, default=None, help="output folder (default: results/<config name>)")
    bench.add_argument(
        "--max-steps",
        type=_positive_int,
        default=None,
        help="smoke test: stop every run after N training steps (marked SMOKE RUN, not results)",
    )
    bench.add_argument(
        "--shard",
        type=_parse_shard,
        default=None,
        metavar="K/N",
        help="run only the K-th of N disjoint parts of the grid's runs, K counted from 1 (a job array's "
        'task: --shard "$SLURM_ARRAY_TASK_ID/N" with --array=1-N); the shards share --out and '
        "write no tables: `neuralde-seq report OUT` does once they are done",
    )
    bench.add_argument(
        "--executor",
        choices=("serial", "ray"),
        default="serial",
        help="serial (default): the runs one after the other here; ray: each run a Ray task, the "
        'tables written here (pip install "neuralde-seq[ray]")',
    )
    bench.add_argument(
        "--address",
        default=None,
        help="with --executor ray: the Ray cluster to join (auto, or host:port; default: a local instance)",
    )
    bench.add_argument(
        "--retries",
        type=_non_negative_int,
        default=2,
        help="with --executor ray: times a run whose worker died is submitted again, continuing from "
        "its last checkpoint (default: %(default)s)",
    )
    _run_options(bench)
    report = sub.add_parser(
        "report",
        help="the tables and plots of a grid from its run folders (after bench --shard)",
        description="Read the grid recorded in OUT (grid.json, written by bench) and the result.json of each of its "
        "runs (the folders of its settings only), and write results.json, results.md, curves.png and "
        "summary.png as a whole bench run does. Runs without a result are named and the report is "
        "refused, unless --partial.",
    )
    report.add_argument("out", type=Path, help="the grid's output folder (bench's --out)")
    report.add_argument(
        "--partial",
        action="store_true",
        help="write the tables of the runs there are when some have no result, marked INCOMPLETE and naming them",
    )
    models = sub.add_parser(
        "models",
        help="list the registry's models: name, input, what each is; with names, their defaults",
        description="Without names: one line per registry model, with the input it reads (a control path built by "
        "build_control, or the raw observations) and what it is. With names: each model's description, "
        "its input with the build_control options, every default option of its constructor and every "
        "field of its default solver (with the method 'auto' resolves to), as create_model, the "
        "estimators and benchmark rows without options use them.",
    )
    models.add_argument("names", nargs="*", help="model names (default: all)")
    predict = sub.add_parser(
        "predict",
        help="score a data file with a run's trained model: one CSV line per sample",
        description="Load the model a bench/compare run trained (its run folder runs/<row>/seed<k>-<fingerprint>/ or "
        "a checkpoint, best.pt; an ensemble's members come with it) and score the series of DATA, a .ts "
        "or .arff file as the files task reads them (raw: the run's standardisation is applied as it "
        "was in the run; its drop_rate and subsample are not). Writes CSV: index, predicted label and "
        "one probability column per class.",
    )
    predict.add_argument("run", type=Path, metavar="RUN_OR_CHECKPOINT", help="a run folder or a checkpoint file")
    predict.add_argument("data", type=Path, metavar="DATA", help="the data file (.ts or .arff; labels optional)")
    predict.add_argument("--out", type=Path, required=True, help="the CSV file to write")
    predict.add_argument(
        "--device", type=_parse_device, default="cpu", help="torch device, e.g. cpu or cuda (default: %(default)s)"
    )
    migrate = sub.add_parser(
        "migrate",
        help="bring results, checkpoints and caches an older neuralde_seq wrote to the current format",
        description="Rewrite every result.json, results.json, grid.json, checkpoint and tensor cache under PATH (a "
        "file or a folder, searched recursively) that an older neuralde_seq wrote in the current format "
        "version, in place; run folders whose fingerprint changes are renamed, so that bench --resume "
        "finds them. Files already current are left alone.",
    )
    migrate.add_argument("path", type=Path, metavar="PATH", help="a file or folder (e.g. a bench --out folder)")
    migrate.add_argument("--dry-run", action="store_true", help="only say what would change")
    return parser


_WIDTH = 80  # the terminal width `neuralde-seq models` fits


def _wrapped(label: str, items: Sequence[str], indent: str = "  ") -> str:
    """``label`` then ``items`` joined by ", " and wrapped at 80 columns, continuation lines indented further."""
    import textwrap

    keep = "\x00"  # an item's own spaces ("step_size=None (one step per knot interval)") never break a line
    text = textwrap.fill(
        ", ".join(item.replace(" ", keep) for item in items),
        _WIDTH,
        initial_indent=f"{indent}{label}",
        subsequent_indent=indent * 2,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return text.replace(keep, " ")


def _solver_items(name: str, solver) -> list[str]:
    """Every option of the model's default `SolverOptions` as ``option=value``: the method with what `Auto` becomes
    on the model's default input, its options (those of `Auto`'s parts as ``exact.chunk_size``, ...), the gradient
    method and its options, and what None means where it means something."""
    import dataclasses

    from .solvers import Choice
    from .solvers.chunked_delta import DEFAULT_BLOCK_SIZE

    meaning = {
        "step_size": "one step per knot interval",
        "every": "√N steps per segment",
        "chunk_size": "sized to batch and heads",
        "block_size": str(DEFAULT_BLOCK_SIZE),
        "max_steps": "no limit",
    }

    def described(prefix: str, choice) -> list[str]:
        items = []
        for field in dataclasses.fields(choice):
            value = getattr(choice, field.name)
            if isinstance(value, Choice):  # Auto's exact and fallback
                items += [f"{prefix}{field.name}={value.name!r}", *described(f"{prefix}{field.name}.", value)]
                continue
            text = f"{prefix}{field.name}={value!r}"
            if value is None and field.name in meaning:
                text += f" ({meaning[field.name]})"
            items.append(text)
        return items

    method = solver.method
    items = [
        f"method={method.name!r}"
        + (f" (on the input above: {_auto_method(name, solver)!r})" if method.chooses_per_solve else "")
    ]
    return items + described("", method) + [f"gradient={solver.gradient.name!r}", *described("", solver.gradient)]


def print_models(names) -> int:
    """``neuralde-seq models``: one line per model (name, input, what it is); with names, each model's description,
    input, options and solver, wrapped at 80 columns. An unknown name: exit 2, naming the closest."""
    from .models import MODEL_NAMES, control_options, model_defaults, model_entry
    from .solvers import SolverOptions

    for name in names:
        try:
            model_entry(name)
        except ValueError as err:
            print(f"neuralde-seq models: error: {_one_line(err)}", file=sys.stderr)
            return 2
    if not names:
        width = max(len(n) for n in MODEL_NAMES)
        print(f"{'model':{width}}  {'input':12}  what it is")
        for name in MODEL_NAMES:
            entry = model_entry(name)
            line = f"{name:{width}}  {entry.inputs:12}  {entry.description}".rstrip()
            print(line if len(line) <= _WIDTH else line[: _WIDTH - 1] + "…")
        print(
            "\ninput: control = a path built from the observations (build_control);\n"
            "       observations = the observed points themselves.\n"
            "neuralde-seq models NAME: a model's input, default options and solver."
        )
        return 0
    for i, name in enumerate(names):
        entry = model_entry(name)
        defaults = model_defaults(name)
        solver = defaults.pop("solver", None)
        print(("\n" if i else "") + f"{name}: {entry.description or '(no description)'}")
        if entry.inputs == "control":
            print(
                _wrapped(
                    "input: control path, build_control(", [f"{k}={v!r}" for k, v in control_options(name).items()]
                )
                + ")"
            )
        else:
            print("  input: observations (times, values with NaN for missing, lengths)")
        print(_wrapped("options: ", [f"{k}={v!r}" for k, v in defaults.items()]))
        if isinstance(solver, SolverOptions):
            print(_wrapped("solver: ", _solver_items(name, solver)))
        elif entry.takes_solver is False:
            print("  solver: none (create_model takes no solver= for it)")
    return 0


def _auto_method(name: str, solver) -> str:
    """What the default solver method `Auto` resolves to for the registry model ``name`` with its default
    options on its default input (a tiny one built here): "exact" or its fallback's name ("rk4")."""
    import torch

    from .models import create_model, model_entry, model_inputs

    if not hasattr(model_entry(name).constructor, "resolve_method"):  # only fast weight models have a closed form
        return solver.method.fallback.name
    times = torch.arange(9.0).unsqueeze(0)
    inputs = model_inputs(name, times, torch.sin(times).unsqueeze(-1))
    return create_model(name, inputs, 2).resolve_method(inputs).name


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
    requested closed-form method (`neuralde_seq.reference.REFERENCE_METHODS`: MiniRocket, 1-NN, random features).
    ``--models`` then runs the requested rows only (`neuralde_seq.training.runner.run_benchmark`'s ``models``).

    Raises:
        ConfigError: a requested name that is no row, registry model or closed-form method (the message names
            the closest and what --models accepts).
    """
    from .input_checks import did_you_mean
    from .models import FAST_WEIGHT_MODEL_NAMES, MODEL_NAMES
    from .reference import REFERENCE_METHODS

    config = load_config(COMPARE_CONFIG)
    labels = {row["label"] for row in config["models"]}
    rows = [row["label"] for row in config["models"]]
    for name in models or ():
        if name not in labels and name not in MODEL_NAMES and name not in REFERENCE_METHODS:
            hint = did_you_mean(name, [*rows, *MODEL_NAMES, *REFERENCE_METHODS])
            raise ConfigError(
                f"--models: {name} match no row; {hint + ' ' if hint else ''}--models takes the rows "
                f"{', '.join(rows)}, any other registry model name (neuralde-seq models lists them), "
                f"a reference method or random-features ({', '.join(REFERENCE_METHODS)})"
            )
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


def _run(config, out: Path, args: argparse.Namespace, overrides: list[str], models, seeds=None, max_steps=None) -> dict:
    kwargs = dict(
        config=config,
        out_dir=out,
        overrides=overrides,
        models=models,
        seeds=seeds,
        max_steps=max_steps,
        resume=args.resume and not args.fresh,
        progress=not args.no_progress,
        device=args.device,
        dtype=args.dtype,
        threads=args.threads,
    )
    if args.command == "bench":
        kwargs.update(shard=args.shard, executor=args.executor, address=args.address, retries=args.retries)
    # One process, --nproc N local processes, or the processes torchrun started.
    from .training.distributed import run_benchmark_distributed

    return run_benchmark_distributed(args.nproc, **kwargs)


def _error_text(err: BaseException) -> str:
    """An OSError as "what: file" (its own str() repeats the errno), any other error as its message."""
    if isinstance(err, OSError) and err.strerror and err.filename is not None:
        return f"{err.strerror}: {err.filename}"
    return str(err)


def run_predict(args: argparse.Namespace) -> int:
    """``neuralde-seq predict``: the run's model on the data file, predictions written to ``--out``, one summary line
    on stderr (with the accuracy on the file's labels where it has them). Exit 2 with one line on bad input."""
    from .trained_run import load_run, write_predictions

    try:
        model = load_run(args.run, device=args.device)
        data = model.read_data(args.data)
        predicted = write_predictions(args.out, model, data)
    except (ValueError, OSError) as err:
        print(f"neuralde-seq predict: error: {_one_line(_error_text(err))}", file=sys.stderr)
        return 2
    summary = f"wrote {len(predicted)} predictions of {model.input_spec.model} to {args.out}"
    if data.labels is not None:
        truth = [data.class_names[k] for k in data.labels.tolist()]
        correct = sum(str(p) == t for p, t in zip(predicted, truth))
        summary += f"; accuracy on the file's labels {correct / len(truth):.4f} ({correct}/{len(truth)})"
    print(summary, file=sys.stderr)
    return 0


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
    if args.command == "predict":
        return run_predict(args)
    if args.command == "report":
        return _report(args.out, args.partial)
    if args.command == "migrate":
        return _migrate(args.path, args.dry_run)
    if args.command == "bench":
        if args.address is not None and args.executor != "ray":
            parser.error("--address is the Ray cluster of --executor ray")
        if args.executor == "ray" and args.shard is not None:
            parser.error("--shard and --executor ray are two ways to spread a grid: give one")
        if args.executor == "ray" and args.nproc > 1:
            parser.error(
                "--executor ray makes each run a Ray task of its own; --nproc splits one run over processes: give one"
            )
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
        parsed = parse_config(raw)
        name = parsed.name
        _check_row_names(args.models, parsed.rows)
        if out is None:
            out = Path("results") / name
        results = _run(config, out, args, overrides, args.models, seeds, max_steps)
    except ConfigError as err:
        text = str(err)
        _fail(text if source in text else f"{source}: {text}")
    except (ValueError, OSError, ModuleNotFoundError) as err:  # bad data, settings or files; Ray not installed
        print(f"neuralde-seq: error: {_one_line(_error_text(err))}", file=sys.stderr)
        return 2
    except RuntimeError as err:
        from .training.ray_executor import RunsFailed

        if not isinstance(err, RunsFailed):
            raise
        print(f"neuralde-seq: error: {_one_line(err)}", file=sys.stderr)
        return 2
    return _diverged_status(results, out)


def _diverged_status(results: dict, out: Path) -> int:
    """1 (after naming them) when runs diverged, else 0."""
    if results.get("diverged"):
        runs = ", ".join(
            f"{d['label']} seed {d['seed']}" if isinstance(d, dict) else str(d) for d in results["diverged"]
        )
        where = "their result.json" if results.get("rows") is None else out / "results.md"
        print(
            f"neuralde-seq: training diverged in {runs}; their last good checkpoints are reported, marked DIVERGED "
            f"(see {where}).",
            file=sys.stderr,
        )
        return 1
    return 0


def _report(out: Path, partial: bool) -> int:
    """``neuralde-seq report OUT``: `report_grid`; 2 (one line) when runs have no result or the folder holds no
    grid."""
    from .training.runner import report_grid

    try:
        results = report_grid(out, partial=partial)
    except (ValueError, OSError) as err:
        print(f"neuralde-seq report: error: {_one_line(_error_text(err))}", file=sys.stderr)
        return 2
    return _diverged_status(results, out)


def _migrate(path: Path, dry_run: bool) -> int:
    """``neuralde-seq migrate PATH``: `migrate_path`, a line per file changed or left alone; 2 (one line) when PATH
    does not exist or a run folder cannot be renamed."""
    from .migration import migrate_path

    try:
        changed = migrate_path(path, dry_run=dry_run, say=print)
    except (ValueError, OSError) as err:
        print(f"neuralde-seq migrate: error: {_one_line(_error_text(err))}", file=sys.stderr)
        return 2
    if not changed:
        print(f"{path}: every file is already in the current format")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
