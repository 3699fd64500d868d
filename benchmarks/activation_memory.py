"""What activation checkpointing saves: the peak memory of one training step (forward and backward) of a
GPT with ``trainer.activation_checkpointing`` none, selective and full, on the CPU.

    python -m benchmarks.activation_memory [--layers 6] [--width 256] [--batch 8] [--length 256]

Measured with torch's profiler (``profile_memory``; its memory timeline: every tensor created and
freed during the step, the parameters and what existed before the step left out): the peak of the
bytes the step itself holds, and the time of a step without the profiler (median of 5), each against
no checkpointing. Full checkpointing keeps only each layer's input and recomputes the layer in the
backward pass; selective keeps the matrix products' and attention's outputs and recomputes the
elementwise ops between them (``attnlab.models.speedups.checkpoint_layers``).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from attnlab.models import build_model
from attnlab.models.speedups import checkpoint_layers
from attnlab.schema.model import GPTConfig

PRE_EXISTING = 1  # the timeline's action index of tensors that existed before the step


def step(model: torch.nn.Module, tokens: torch.Tensor) -> None:
    logits = model(tokens[:, :-1])
    F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    model.zero_grad(set_to_none=True)


def step_peak_bytes(model: torch.nn.Module, tokens: torch.Tensor) -> int:
    """The most bytes held at once by tensors the step created (the profiler's memory timeline)."""
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        step(model, tokens)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "timeline.raw.json.gz")
        prof.export_memory_timeline(str(path), device="cpu")
        with gzip.open(path) as f:
            events = json.load(f)
    held = peak = 0
    created = sorted((e for e in events if e[1] != PRE_EXISTING), key=lambda e: e[0])
    for _, _, size, _ in created:
        held += size
        peak = max(peak, held)
    return peak


def step_seconds(model: torch.nn.Module, tokens: torch.Tensor, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(model, tokens)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    args = parser.parse_args()
    torch.manual_seed(0)
    cfg = GPTConfig(
        d_model=args.width,
        n_layers=args.layers,
        n_heads=4,
        vocab_size=96,
        max_seq_len=args.length,
        dropout=0.0,
    )
    plain = build_model(cfg).train()
    models = {
        "none": plain,
        "selective": checkpoint_layers(copy.deepcopy(plain), selective=True),
        "full": checkpoint_layers(copy.deepcopy(plain)),
    }
    tokens = torch.randint(0, 96, (args.batch, args.length + 1))
    rows = {}
    for name, model in models.items():
        step(model, tokens)  # warm-up
        rows[name] = (step_peak_bytes(model, tokens), step_seconds(model, tokens))
    print(
        f"GPT {args.layers} layers, d {args.width}, batch {args.batch} x {args.length}, float32, "
        f"{torch.get_num_threads()} thread(s), torch {torch.__version__}\n"
    )
    print("| activation_checkpointing | step's peak memory | vs none | step time | vs none |")
    print("|---|---|---|---|---|")
    base_bytes, base_time = rows["none"]
    for name, (peak, seconds) in rows.items():
        print(
            f"| {name} | {peak / 2**20:.1f} MiB | {peak / base_bytes:.2f} | {seconds * 1e3:.0f} ms | "
            f"{seconds / base_time:.2f} |"
        )


if __name__ == "__main__":
    main()
