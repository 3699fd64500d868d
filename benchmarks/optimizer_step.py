"""Seconds per training step of nanoGPT's baby GPT (experiment=nanogpt_baby: 4 layers, d_model 128, a
batch of 12 x 64 characters) under AdamW and under Muon with Newton-Schulz in float32 and in bfloat16,
measured side by side in one process (``benchmarks.common.interleaved``: round-robin, the order
reversed every round) at one thread; experiments/muon quotes it (results/step_time.json).

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.optimizer_step [--repeats 30]

Prints one JSON object: each optimizer's median seconds per step (forward, backward, step) and the
ratio of each median to AdamW's.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnlab.models import build_model
from attnlab.schema.model import GPTConfig
from attnlab.schema.optim import AdamWConfig, MuonConfig
from attnlab.schema.pos import LearnedPos
from attnlab.tasks.optim import configure_optimizers
from benchmarks.common import interleaved

VOCAB, BATCH, SEQ = 65, 12, 64  # Tiny Shakespeare's characters, nanoGPT's baby batch and block


def baby_gpt() -> torch.nn.Module:
    """conf/experiment/nanogpt_baby.yaml's model (its other settings are GPTConfig's defaults)."""
    cfg = GPTConfig(vocab_size=VOCAB, max_seq_len=SEQ, bias=False, norm_bias=False, pos=LearnedPos())
    return build_model(cfg).train()


def training_step(optim_cfg: AdamWConfig | MuonConfig) -> Callable[[], None]:
    """One optimizer step of a fresh baby GPT (seed 0) on a fixed random batch."""
    torch.manual_seed(0)
    model = baby_gpt()
    optimizer = configure_optimizers(model, optim_cfg, max_steps=1000)["optimizer"]
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        logits = model.logits({"input_ids": tokens[:, :-1]})
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    steps = {
        "adamw": training_step(AdamWConfig()),
        "muon_float32": training_step(MuonConfig(ns_dtype="float32")),
        "muon_bfloat16": training_step(MuonConfig(ns_dtype="bfloat16")),
    }
    medians = {
        name: statistics.median(t) for name, t in interleaved(steps, repeats=args.repeats, warmup=3).items()
    }
    print(
        json.dumps(
            {
                "threads": torch.get_num_threads(),
                "repeats": args.repeats,
                "median_s_per_step": {name: round(s, 4) for name, s in medians.items()},
                "ratio_to_adamw": {name: round(s / medians["adamw"], 2) for name, s in medians.items()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
