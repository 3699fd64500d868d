"""nanoGPT's checkpoint scored the way attnlab scores its own: mean cross-entropy over every
non-overlapping window of the whole val split (windows of block_size + 1 tokens starting at 0,
block_size, 2 * block_size, ...; each window's block_size predictions count once).

nanoGPT's own model code is imported at run time from its checkout, nothing of it is kept here
(``benchmarks.nanogpt.checkout.from_checkpoint``); experiments/nanogpt_baby/run.sh runs it so:

    NANOGPT_DIR=/path/to/nanoGPT python -m benchmarks.nanogpt.val_loss

reads ``$NANOGPT_DIR/out-shakespeare-char/ckpt.pt`` (``--out-dir`` names another of its output folders)
and ``$NANOGPT_DIR/data/shakespeare_char/val.bin`` (what its ``prepare.py`` and ``train.py`` wrote) and
prints the loss as JSON. Given ``--log``, the saved console output of that training, it adds what
nanoGPT printed: its own validation estimate at each evaluation (``estimate_loss``: 20 random batches
in the baby run) and the median time of an iteration, so that none of them is read off a console.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.nanogpt.checkout import ITERATION, VAL_LINE, from_checkpoint


@torch.no_grad()
def val_loss(model: torch.nn.Module, tokens: torch.Tensor, block: int, batch_size: int) -> tuple[float, int]:
    """Mean cross-entropy over the non-overlapping windows of ``tokens``, and the number of windows."""
    count = (len(tokens) - block - 1) // block + 1
    windows = torch.stack([tokens[i * block : i * block + block + 1] for i in range(count)])
    total = 0.0
    for start in range(0, count, batch_size):
        batch = windows[start : start + batch_size]
        inputs, targets = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
        logits, _ = model(inputs, targets)  # given targets, it returns the logits at every position
        total += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
    return total / (count * block), count


def console_figures(log: str) -> dict[str, object]:
    """nanoGPT's validation estimate at each evaluation step, and the median iteration time in ms (the
    first iteration, which warms up, left out; an iteration that includes an evaluation counts like
    any other, the median ignoring those few)."""
    estimates = {int(step): float(loss) for step, loss in VAL_LINE.findall(log)}
    times = [float(m.group(2)) for m in map(ITERATION.match, log.splitlines()) if m and m.group(1) != "0"]
    return {"estimate_loss": estimates, "median_iteration_ms": round(float(np.median(times)), 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--nanogpt-dir", type=Path, default=os.environ.get("NANOGPT_DIR"), help="default: $NANOGPT_DIR"
    )
    p.add_argument("--batch-size", type=int, default=12)
    p.add_argument("--out-dir", default="out-shakespeare-char", help="nanoGPT's out_dir, in the checkout")
    p.add_argument("--log", type=Path, help="the console output of that training run, saved")
    args = p.parse_args()
    if args.nanogpt_dir is None:
        p.error("give --nanogpt-dir or set NANOGPT_DIR (a nanoGPT checkout that has run the baby config)")
    ckpt = args.nanogpt_dir / args.out_dir / "ckpt.pt"
    data = args.nanogpt_dir / "data" / "shakespeare_char" / "val.bin"
    model, iteration = from_checkpoint(args.nanogpt_dir, ckpt)
    tokens = torch.from_numpy(np.fromfile(data, dtype=np.uint16).astype(np.int64))
    block = model.config.block_size
    loss, windows = val_loss(model, tokens, block, args.batch_size)
    record = {
        "ckpt": str(ckpt.relative_to(args.nanogpt_dir)),
        "iter": iteration,
        "val_loss": round(loss, 4),
        "windows": windows,
    }
    record["predictions"] = windows * block
    if args.log is not None:
        record.update(console_figures(args.log.read_text(encoding="utf-8")))
    print(json.dumps(record))


if __name__ == "__main__":
    main()
