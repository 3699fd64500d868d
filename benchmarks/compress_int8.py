"""int8 against float32 on one trained checkpoint, side by side in one process: file size, loss, and
accuracy of the scored predictions (next tokens, classes) and CPU inference speed (tokens/s, or images/s
for a ViT) of torchao's two int8 configurations (the measurement that chose weight-only for
``attnlab-compress method=int8``, see ``attnlab.compress.quantize``).

    attnlab-compress ckpt_path=<run>/checkpoints/last.ckpt method=int8
    python -m benchmarks.compress_int8 <run>/checkpoints/last.ckpt <run>/checkpoints/int8-last.ckpt

Speed is a ratio measured round-robin (``benchmarks.common.interleaved``): the forward pass over
validation batches of the run (tokens/s or images/s of ``model.logits``), and for a decoder, greedy
generation with the KV cache from a one-token prompt (batch 1: what attnlab-sample does).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import torch
from torch import nn

from attnlab.checkpoint import load_checkpoint, run_datamodule
from attnlab.compress.quantize import torchao_quantization
from benchmarks.common import interleaved, speedup, spread


def state_bytes(model: nn.Module) -> int:
    """Bytes of ``torch.save(model.state_dict())``: the weights alone, without the training state."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def dynamic_int8(model: nn.Module) -> nn.Module:
    """``model`` with torchao's int8 dynamic-activation, int8-weight configuration (in place)."""
    ao = torchao_quantization()
    ao.quantize_(model, ao.Int8DynamicActivationInt8WeightConfig(set_inductor_config=False))
    return model


def mean_loss(task: object, batches: list[dict]) -> float:
    with torch.no_grad():
        return sum(float(task.training_loss(b)) for b in batches) / len(batches)


def accuracy(task: object, batches: list[dict]) -> float:
    """Share of the predictions the task scores (next tokens, classes, ...) whose argmax is the label."""
    hits = total = 0
    with torch.no_grad():
        for batch in batches:
            logits, labels = task.scored_logits(batch)
            hits += int((logits.argmax(-1) == labels).sum())
            total += labels.numel()
    return hits / max(total, 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fp32", type=Path, help="a checkpoint of attnlab-train")
    parser.add_argument("int8", type=Path, help="the same, after attnlab-compress method=int8")
    parser.add_argument("--batches", type=int, default=4, help="validation batches for the loss and speed")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per timed call")
    parser.add_argument(
        "--without-dynamic",
        action="store_true",
        help="fp32 against attnlab-compress's int8 only (the dynamic configuration is ~20x slower on a CPU)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    fp32, int8 = load_checkpoint(args.fp32), load_checkpoint(args.int8)
    tasks = {"fp32": fp32.task, "int8 weight-only": int8.task}
    if not args.without_dynamic:
        dynamic = load_checkpoint(args.fp32)
        dynamic_int8(dynamic.model)
        tasks["int8 dynamic"] = dynamic.task
    batches = [b for _, b in zip(range(args.batches), run_datamodule(fp32).val_dataloader())]
    losses = {name: mean_loss(task, batches) for name, task in tasks.items()}
    accuracies = {name: accuracy(task, batches) for name, task in tasks.items()}

    print(f"checkpoint {args.fp32}: family {fp32.family}, torch threads {args.threads}")
    print("\n| file | MiB |\n|---|---|")
    print(
        f"| training checkpoint (fp32 weights + optimizer state) | {args.fp32.stat().st_size / 2**20:.2f} |"
    )
    print(f"| fp32 weights alone (state dict) | {state_bytes(fp32.model) / 2**20:.2f} |")
    print(f"| int8 checkpoint (attnlab-compress) | {args.int8.stat().st_size / 2**20:.2f} |")

    count = fp32.model.batch_shape(batches[0])
    unit = "images/s" if fp32.model.input_kind == "images" else "tokens/s"
    per_batch = count[0] * (count[1] if unit == "tokens/s" and len(count) > 1 else 1)
    models = {name: task.model for name, task in tasks.items()}

    def forward(model: nn.Module) -> None:
        with torch.no_grad():
            for batch in batches:
                model.logits(batch)

    times = interleaved(
        {n: (lambda m=m: forward(m)) for n, m in models.items()}, repeats=args.repeats, warmup=1
    )
    print(
        f"\n| model | val loss (first {len(batches)} batches) | val accuracy | forward {unit} (median) | speed vs fp32 (min/median/max) |"
    )
    print("|---|---|---|---|---|")
    for name in models:
        rate = per_batch * len(batches) / spread(times[name])[1]
        ratio = speedup(times, name, "fp32")
        print(
            f"| {name} | {losses[name]:.4f} | {100 * accuracies[name]:.2f}% | {rate:.0f} | "
            f"{ratio[0]:.2f} / {ratio[1]:.2f} / {ratio[2]:.2f} |"
        )

    if fp32.family == "gpt":
        from attnlab.generate import generate

        def decode(model: nn.Module) -> None:
            with torch.no_grad():
                generate(model, [[1]], max_new_tokens=args.new_tokens, temperature=0.0)

        times = interleaved(
            {n: (lambda m=m: decode(m)) for n, m in models.items()}, repeats=args.repeats, warmup=1
        )
        print(
            "\n| model | greedy generation with KV cache, batch 1: tokens/s (median) | speed vs fp32 (min/median/max) |"
        )
        print("|---|---|---|")
        for name in models:
            ratio = speedup(times, name, "fp32")
            rate = args.new_tokens / spread(times[name])[1]
            print(f"| {name} | {rate:.0f} | {ratio[0]:.2f} / {ratio[1]:.2f} / {ratio[2]:.2f} |")


if __name__ == "__main__":
    main()
