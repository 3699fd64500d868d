"""The loss of a count-based bigram model on the transfer study's held-out windows: the floor a
model reaches by learning which character follows which, through its embedding and readout alone.
A transfer run whose loss stays above it has not yet needed its hidden matrices, whose rate is what
μP's transfer rule is about.

usage: python experiments/mup/bigram.py [--data /work/shared/data/tinyshakespeare.txt]
       > experiments/mup/results/bigram.json

The counts are taken over the first 90% of the text (lr_transfer.py's training split), add-one
smoothed, and scored on the very windows lr_transfer.py holds out (64 windows of 64 characters of the
last 10%, generator seed 0), as on every bigram of the last 10%; a unigram model and a uniform guess
for scale. Nats per character.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from lr_transfer import HELD_OUT_WINDOWS, character_ids, windows


def cross_entropy(log_p: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor) -> float:
    return float(-log_p[inputs.flatten(), labels.flatten()].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/tinyshakespeare.txt"))
    args = parser.parse_args()
    ids, vocab = character_ids(args.data)
    split = int(0.9 * len(ids))  # as lr_transfer.py
    train, rest = ids[:split], ids[split:]
    counts = torch.ones(vocab, vocab)  # add-one
    counts.index_put_((train[:-1], train[1:]), torch.ones(len(train) - 1), accumulate=True)
    log_p = (counts / counts.sum(1, keepdim=True)).log()
    unigram = torch.bincount(train, minlength=vocab).float() + 1
    log_unigram = (unigram / unigram.sum()).log().expand(vocab, vocab)
    held_out = windows(rest, HELD_OUT_WINDOWS, torch.Generator().manual_seed(0))
    print(
        json.dumps(
            {
                "vocab": vocab,
                "bigram_held_out_windows": cross_entropy(log_p, held_out["input_ids"], held_out["labels"]),
                "bigram_last_tenth": cross_entropy(log_p, rest[:-1], rest[1:]),
                "unigram_held_out_windows": cross_entropy(
                    log_unigram, held_out["input_ids"], held_out["labels"]
                ),
                "uniform": math.log(vocab),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
