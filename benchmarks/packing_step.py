"""Training step time of three batch layouts side by side, in one process: packed documents with the
document mask, packed without it, one document per padded row (experiments/packing's study).

usage: python -m benchmarks.packing_step [rounds]

The study's trainings (experiments/packing/run.sh) run one after another on a shared machine, so their
tokens/s differ also by the load of their minutes. Here one process builds the study's model once per
arm and times training steps (forward, backward, AdamW step) of the three arms in turns
(``benchmarks.common.interleaved``), each on its own layout's batches, so the three see the same
load; it prints the median seconds per step and the real (not padding) tokens per second of each,
and their ratio to the packed-with-mask arm.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable

import torch

from attnlab.data import build_datamodule
from attnlab.models import build_model
from attnlab.schema.data import IGNORE_INDEX, data_config
from attnlab.schema.model import model_config
from attnlab.schema.task import CausalLMTask
from benchmarks.common import interleaved

ARMS = {
    "masked": dict(packing="documents"),
    "unmasked": dict(packing="documents", document_mask=False),
    "padded": dict(packing="padded"),
}
SEQ_LEN, BATCH = 256, 8
WARMUP = 3  # the first steps warm up allocators and kernels


def arm_batches(settings: dict, n: int) -> tuple[list[dict[str, torch.Tensor]], int]:
    """The first ``n`` training batches of the default corpus in the arm's layout, and the vocabulary size."""
    cfg = data_config(
        "text", seq_len=SEQ_LEN, batch_size=BATCH, val_fraction=0.1, test_fraction=0.0, **settings
    )
    dm = build_datamodule(cfg, needs=CausalLMTask.data_needs, seed=0, model_cfg=model_config("gpt"))
    dm.setup("fit")
    stream = dm.train_batches(seed=0, batch_size=BATCH, rank=0, world_size=1)
    return [stream[i * BATCH] for i in range(n)], dm.vocab_size


def arm_step(settings: dict, rounds: int) -> tuple[Callable[[], None], float]:
    """A function that trains gpt-tiny one step on the arm's next batch (``rounds`` of them), and the share of real
    (not padding) tokens in the arm's batches."""
    batches, vocab = arm_batches(settings, rounds)
    torch.manual_seed(0)  # gpt-tiny's sizes (conf/model/gpt-tiny.yaml)
    model = build_model(model_config("gpt", d_model=32, n_layers=2, n_heads=2, vocab_size=vocab)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    masks = [b.get("attention_mask") for b in batches]
    real = 1.0 if masks[0] is None else float(torch.stack(masks).float().mean())
    upcoming = iter(batches)

    def step() -> None:
        batch = next(upcoming)
        logits = model.logits(batch)
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE_INDEX
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step, real


def measure(rounds: int) -> dict[str, dict[str, float]]:
    """Per arm: median seconds per step over ``rounds`` steps in turns (the first ``WARMUP`` untimed), the real-token share, real
    tokens/s, and the step time relative to the packed-with-mask arm."""
    torch.set_num_threads(1)
    steps, real = {}, {}
    for arm, settings in ARMS.items():
        steps[arm], real[arm] = arm_step(settings, rounds)
    times = interleaved(steps, repeats=rounds - WARMUP, warmup=WARMUP)
    medians = {arm: statistics.median(t) for arm, t in times.items()}
    return {
        arm: {
            "s_per_step": round(medians[arm], 5),
            "real_share": round(real[arm], 4),
            "real_tokens_per_s": round(BATCH * SEQ_LEN * real[arm] / medians[arm], 1),
            "step_time_vs_masked": round(medians[arm] / medians["masked"], 3),
        }
        for arm in ARMS
    }


def main(rounds: int = 30) -> None:
    print(json.dumps(measure(rounds), indent=1))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
