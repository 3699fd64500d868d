"""Training throughput of the three layouts side by side, in one process (see README.md).

usage: python experiments/packing/throughput.py [rounds]

The trainings of run.sh run one after another on a shared machine, so their tokens/s differ also by
the load of their minutes. Here one process builds the study's model once per arm and alternates
training steps (forward, backward, AdamW step) of the three arms round by round, each on its own
layout's batches, so the three see the same load; it prints the median seconds per step and the real
(not padding) tokens per second of each, and their ratio to the packed-with-mask arm.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from attnlab.data import build_datamodule
from attnlab.models import build_model
from attnlab.schema.data import data_config
from attnlab.schema.model import model_config
from attnlab.schema.task import CausalLMTask

ARMS = {
    "masked": dict(packing="documents"),
    "unmasked": dict(packing="documents", document_mask=False),
    "padded": dict(packing="padded"),
}
SEQ_LEN, BATCH = 256, 8


def arm_batches(settings: dict, n: int) -> list[dict[str, torch.Tensor]]:
    cfg = data_config(
        "text", seq_len=SEQ_LEN, batch_size=BATCH, val_fraction=0.1, test_fraction=0.0, **settings
    )
    dm = build_datamodule(cfg, needs=CausalLMTask.data_needs, seed=0, model_cfg=model_config("gpt"))
    dm.setup("fit")
    stream = dm.train_batches(seed=0, batch_size=BATCH, rank=0, world_size=1)
    return [stream[i * BATCH] for i in range(n)], dm.vocab_size


def main(rounds: int = 30) -> None:
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    real: dict[str, float] = {}
    setups = {}
    for arm, settings in ARMS.items():
        batches, vocab = arm_batches(settings, rounds)
        torch.manual_seed(0)  # gpt-tiny's sizes (conf/model/gpt-tiny.yaml)
        model = build_model(model_config("gpt", d_model=32, n_layers=2, n_heads=2, vocab_size=vocab)).train()
        setups[arm] = (model, torch.optim.AdamW(model.parameters(), lr=1e-3), batches)
        mask = [b.get("attention_mask") for b in batches]
        real[arm] = 1.0 if mask[0] is None else float(torch.stack(mask).float().mean())
    for step in range(rounds):
        for arm, (model, optimizer, batches) in setups.items():
            batch = batches[step]
            start = time.perf_counter()
            logits = model.logits(batch)
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step >= 3:  # the first steps warm up allocators and kernels
                times[arm].append(time.perf_counter() - start)
    base = statistics.median(times["masked"])
    results = {}
    for arm in ARMS:
        median = statistics.median(times[arm])
        results[arm] = {
            "s_per_step": round(median, 5),
            "real_share": round(real[arm], 4),
            "real_tokens_per_s": round(BATCH * SEQ_LEN * real[arm] / median, 1),
            "step_time_vs_masked": round(median / base, 3),
        }
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
