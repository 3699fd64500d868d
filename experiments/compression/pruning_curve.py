"""The pruning curve (Michel et al. 2019, Fig. 2) of one checkpoint: its test metric after
``attnlab-compress method=prune_heads`` at each fraction of heads, without and with fine-tuning.

    python experiments/compression/pruning_curve.py <ckpt> <out.csv> --finetune-steps 50

Each point is a checkpoint that attnlab-compress writes (its job run in this process, so the run's
data is read once per point, not once per process), reloaded as attnlab-eval would load it, and
scored on the run's whole test split: the mean cross-entropy per token (or example), and for a
classifier the accuracy. Rows: fraction, finetune_steps, heads, loss, accuracy, seconds.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import torch

from attnlab.checkpoint import load_checkpoint, run_datamodule
from attnlab.compress import total_heads
from attnlab.run import compress
from attnlab.schema.commands import CompressCommand, CompressMethod

FRACTIONS = (0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75)


@torch.no_grad()
def test_metrics(ckpt: Path) -> dict[str, float]:
    """Mean loss over the test split's tokens (or examples) and, for class logits, the accuracy."""
    loaded = load_checkpoint(ckpt)
    loss_sum = count = correct = 0.0
    classes = False
    for batch in run_datamodule(loaded).test_dataloader():
        logits, labels = loaded.model.logits(batch), batch["labels"]
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, -2), labels.flatten(), ignore_index=-100, reduction="sum"
        )
        n = int((labels != -100).sum())
        loss_sum, count = loss_sum + float(loss), count + n
        classes = logits.dim() == 2  # (B, C): one prediction per example
        if classes:
            correct += float((logits.argmax(-1) == labels).sum())
    accuracy = correct / count if classes else float("nan")
    return {"heads": total_heads(loaded.model), "loss": loss_sum / count, "accuracy": accuracy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ckpt", type=Path)
    parser.add_argument("out", type=Path, help="the CSV to write")
    parser.add_argument(
        "--finetune-steps", type=int, default=0, help="also each fraction fine-tuned (0: not)"
    )
    parser.add_argument("--importance-batches", type=int, default=8)
    parser.add_argument("--fractions", type=float, nargs="+", default=FRACTIONS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = args.ckpt.parent / "pruned"
    folder.mkdir(exist_ok=True)
    rows = []
    for steps in sorted({0, args.finetune_steps}):
        for fraction in args.fractions:  # fraction 0 fine-tuned: the control (what more steps alone give)
            start = time.perf_counter()
            out = folder / f"prune-{fraction}-ft{steps}.ckpt"
            cmd = CompressCommand(
                ckpt_path=str(args.ckpt),
                method=CompressMethod.prune_heads,
                out=str(out),
                fraction=fraction,
                importance_batches=args.importance_batches,
                finetune_steps=steps,
            )
            print(f"compressed: {compress(cmd)}", flush=True)
            metrics = test_metrics(out)
            rows.append({"fraction": fraction, "finetune_steps": steps, **metrics})
            rows[-1]["seconds"] = round(time.perf_counter() - start, 1)
            print(rows[-1], flush=True)
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
