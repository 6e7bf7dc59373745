"""Copy-memory stress task (paper 000, Sec. 5 and App. C, E.4) for CKCNN.

Task (Hochreiter & Schmidhuber 1997, as Bai et al. 2018 and paper 000 App. C): a sequence of T + 20 digits:
10 symbols drawn uniformly from {1..8}, then T − 1 blanks (0), then 11 delimiters (9). The target is 0 at
the first T + 10 positions and the 10 symbols at the last 10. The input is one channel holding the digit
value (as in Bai et al.'s TCN code, which the paper matches in size: hidden 10, 2 blocks → 15,526
parameters here, paper: 15.52K); the output is a 10-way classification at every position, trained with
cross-entropy over all positions. "Solved" (paper Tab. 2) = 100 % accuracy; we report the accuracy on the
10 recall positions of every test sequence and over all positions, and stop when both reach ``--target``
(default 1.0: every one of the test set's outputs right).

Paper settings for T = 1000 (Tab. 8, App. E.4): Adam, lr 5e-4, batch 32, 2 blocks, hidden 10, kernel
network 32 hidden units, ω0 = 68.69, no dropout, at most 100 epochs. The paper does not state the number
of training sequences; we use Bai et al.'s 10,000 train / 1,000 test.

Usage::

    python benchmarks/copy_memory.py                      # T = 1000, paper settings
    python benchmarks/copy_memory.py --length 100 --omega-0 19.20 --epochs 50

Evaluates the test set every ``--eval-every`` optimiser steps and at each epoch's end; stops when the
test accuracy (recall positions and all positions) reaches ``--target``, after ``--epochs`` or after
``--max-minutes``.
Writes ``results.json`` and ``results.md`` under ``--out``.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neuralde_seq.models.ckconv import CKCNN  # noqa: E402
from neuralde_seq.observations import Observations  # noqa: E402
from neuralde_seq.training import format_table, write_json, write_table  # noqa: E402

N_SYMBOLS, N_CLASSES, MEMORY = 8, 10, 10


def copy_memory_data(n: int, blank: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (n, blank + 20) float digits and targets (n, blank + 20) long (see the module docstring)."""
    symbols = torch.randint(1, N_SYMBOLS + 1, (n, MEMORY), generator=generator)
    x = torch.cat([symbols, torch.zeros(n, blank - 1, dtype=torch.long),
                   torch.full((n, MEMORY + 1), 9, dtype=torch.long)], dim=1)
    y = torch.cat([torch.zeros(n, blank + MEMORY, dtype=torch.long), symbols], dim=1)
    return x, y


def as_observations(x: torch.Tensor) -> Observations:
    n, length = x.shape
    times = torch.arange(length, dtype=torch.float32).expand(n, length).contiguous()
    return Observations(times, x.float().unsqueeze(-1), torch.full((n,), length, dtype=torch.long))


@torch.no_grad()
def evaluate(model: CKCNN, inputs: Observations, targets: torch.Tensor, batch_size: int) -> dict:
    model.eval()
    correct_recall = correct_all = loss_sum = 0.0
    n = len(inputs)
    for start in range(0, n, batch_size):
        idx = torch.arange(start, min(start + batch_size, n))
        logits = model(inputs[idx], return_sequence=True)
        y = targets[idx]
        loss_sum += F.cross_entropy(logits.reshape(-1, N_CLASSES), y.reshape(-1), reduction="sum").item()
        pred = logits.argmax(-1)
        correct_all += (pred == y).sum().item()
        correct_recall += (pred[:, -MEMORY:] == y[:, -MEMORY:]).sum().item()
    model.train()
    return {"recall_acc": correct_recall / (n * MEMORY), "all_acc": correct_all / targets.numel(),
            "recall_errors": int(n * MEMORY - correct_recall), "all_errors": int(targets.numel() - correct_all),
            "loss": loss_sum / targets.numel()}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=1000, help="T: blanks + 1 (sequence length T + 20)")
    parser.add_argument("--n-train", type=int, default=10000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--hidden", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--kernel-hidden", type=int, default=32)
    parser.add_argument("--omega-0", type=float, default=68.69)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--kernel-l2", type=float, default=0.0, help="weight of the kernel L2 penalty")
    parser.add_argument("--conv", choices=("auto", "fft", "direct"), default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=200, help="optimiser steps between test evaluations")
    parser.add_argument("--target", type=float, default=1.0,
                        help="stop when the test accuracy on the recall positions and on all positions reach this")
    parser.add_argument("--max-minutes", type=float, default=None, help="stop training after this wall time")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results/ckconv_copy_memory"))
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.length < 1:
        parser.error("--length must be at least 1")

    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(args.seed)
    x_train, y_train = copy_memory_data(args.n_train, args.length, gen)
    x_test, y_test = copy_memory_data(args.n_test, args.length, gen)
    train_inputs, test_inputs = as_observations(x_train), as_observations(x_test)
    seq_len = x_train.shape[1]

    torch.manual_seed(args.seed)
    model = CKCNN(1, N_CLASSES, hidden=args.hidden, blocks=args.blocks, kernel_hidden=args.kernel_hidden,
                  omega_0=args.omega_0, dropout=args.dropout, mode="grid", mask_channel=False,
                  horizon=float(seq_len - 1), conv=args.conv)
    params = sum(p.numel() for p in model.parameters())
    optimiser = torch.optim.Adam(model.parameters(), lr=args.lr)
    order_gen = torch.Generator().manual_seed(args.seed + 1)
    print(f"copy memory: T={args.length} (sequence length {seq_len}), {args.n_train} train / {args.n_test} test, "
          f"CKCNN {params} parameters, ω0={args.omega_0}, lr={args.lr}, batch {args.batch_size}")

    history, step, solved = [], 0, None
    t_start = time.perf_counter()
    train_seconds = 0.0
    stop = False
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(args.n_train, generator=order_gen)
        bar = tqdm(range(0, args.n_train, args.batch_size), desc=f"epoch {epoch}", disable=args.no_progress,
                   leave=False)
        epoch_loss, epoch_batches = 0.0, 0
        for start in bar:
            t0 = time.perf_counter()
            idx = perm[start:start + args.batch_size]
            logits = model(train_inputs[idx], return_sequence=True)
            loss = F.cross_entropy(logits.reshape(-1, N_CLASSES), y_train[idx].reshape(-1))
            total = loss + args.kernel_l2 * model.kernel_l2() if args.kernel_l2 else loss
            optimiser.zero_grad(set_to_none=True)
            total.backward()
            optimiser.step()
            train_seconds += time.perf_counter() - t0
            step += 1
            epoch_loss += loss.item()
            epoch_batches += 1
            bar.set_postfix(loss=f"{loss.item():.4f}")
            end_of_epoch = start + args.batch_size >= args.n_train
            if step % args.eval_every == 0 or end_of_epoch:
                metrics = evaluate(model, test_inputs, y_test, 4 * args.batch_size)
                record = {"epoch": epoch, "step": step, "train_loss": epoch_loss / epoch_batches,
                          "train_seconds": train_seconds, "wall_seconds": time.perf_counter() - t_start,
                          **{f"test_{k}": v for k, v in metrics.items()}}
                history.append(record)
                tqdm.write(f"epoch {epoch} step {step}: train loss {record['train_loss']:.5f}, test loss "
                           f"{metrics['loss']:.5f}, recall acc {metrics['recall_acc']:.4f}, all acc "
                           f"{metrics['all_acc']:.6f}, errors {metrics['recall_errors']}/{metrics['all_errors']} "
                           f"(recall/all) ({train_seconds / 60:.1f} min training)")
                if solved is None and min(metrics["recall_acc"], metrics["all_acc"]) >= args.target:
                    solved = record
                    stop = True
            if args.max_minutes is not None and (time.perf_counter() - t_start) > 60 * args.max_minutes:
                stop = True
            if stop:
                break
        bar.close()
        if stop:
            break

    final = history[-1] if history else None
    if final is None or final["step"] != step:
        metrics = evaluate(model, test_inputs, y_test, 4 * args.batch_size)
        final = {"epoch": epoch, "step": step, "train_loss": None, "train_seconds": train_seconds,
                 "wall_seconds": time.perf_counter() - t_start, **{f"test_{k}": v for k, v in metrics.items()}}
        history.append(final)
    best = max(history, key=lambda r: r["test_recall_acc"])
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    results = {
        "task": "copy memory", "sequence_length": seq_len, "config": config, "params": params,
        "solved": solved is not None, "solved_at": solved, "final": final, "best": best,
        "history": history, "command": " ".join(["python", "benchmarks/copy_memory.py", *(argv or sys.argv[1:])]),
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "threads": torch.get_num_threads(), "machine": platform.machine()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(results, args.out / "results.json")
    rows = [{"T": args.length, "params": params, "omega_0": args.omega_0, "epochs": final["epoch"],
             "steps": final["step"], "minutes": final["train_seconds"] / 60,
             "recall_acc": final["test_recall_acc"], "all_acc": final["test_all_acc"],
             "errors": f"{final['test_recall_errors']} / {final['test_all_errors']}",
             "solved": "yes" if solved else "no"}]
    table = format_table(rows, list(rows[0]),
                         headers=["T", "params", "ω0", "epochs", "steps", "train min", "test recall acc",
                                  "test acc (all)", "errors (recall / all)", "100 %"],
                         formats={"minutes": ".1f", "recall_acc": ".4f", "all_acc": ".6f", "omega_0": "g"})
    write_table(table, args.out / "results.md", title="CKCNN copy memory",
                notes=f"{args.n_train} train / {args.n_test} test sequences of length {seq_len}; Adam lr {args.lr}, "
                      f"batch {args.batch_size}, seed {args.seed}, {torch.get_num_threads()} thread(s). "
                      "Recall acc = accuracy on the 10 recall positions of each test sequence; errors = wrong "
                      f"outputs among the {args.n_test * MEMORY} recall and {args.n_test * seq_len} outputs in all.")
    print(table)
    return results


if __name__ == "__main__":
    main()
