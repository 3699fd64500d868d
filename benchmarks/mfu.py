"""Model FLOPs utilisation: training FLOPs per second over the machine's measured matmul throughput.

FLOPs per token follow PaLM's count as attnlab's ThroughputLogger does (``6 N + 12 L T d``, N the
parameters in matrix products). The peak is not a datasheet figure but a large fp32 matmul timed
here with the same thread count. On a GPU (when one is lent) the same for GPT-2 124M in bf16.
"""

from __future__ import annotations

import statistics
import time

import torch

from attnlab.models.flops import flops_per_token, matmul_params
from benchmarks import models
from benchmarks.common import Row, Settings, best
from benchmarks.models import GPTSize
from benchmarks.train_step import lm_loss, train_step

SECTION = "mfu"


def matmul_flops(n: int, device: str = "cpu", dtype: torch.dtype = torch.float32, repeats: int = 5) -> float:
    """FLOP/s of the best of ``repeats`` (n × n) @ (n × n) products."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)

    def product() -> None:
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()

    return 2 * n**3 / best(product, repeats)


def step_flops(model: torch.nn.Module, size: GPTSize) -> float:
    return (
        size.batch
        * size.seq_len
        * flops_per_token(matmul_params(model), size.n_layers, size.seq_len, size.d_model)
    )


def cpu_row(size: GPTSize, peak: float, repeats: int) -> Row:
    model = models.attnlab_like(models.gpt2_config(size), "GPT2LMHeadModel")
    ids, labels = models.gpt_batch(size)
    step = train_step(model, lm_loss(model, ids, labels))
    step()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    mfu = [100 * step_flops(model, size) / s / peak for s in seconds]
    achieved = step_flops(model, size) / statistics.median(seconds)
    detail = f"{achieved / 1e9:.1f} GFLOP/s achieved of {peak / 1e9:.1f} GFLOP/s measured matmul peak"
    return Row(
        SECTION,
        "MFU of the attnlab training step (%)",
        f"{size} ({size.name}), fused AdamW",
        statistics.median(mfu),
        min(mfu),
        max(mfu),
        "%",
        detail,
    )


def gpu_row(settings: Settings) -> Row:
    if not torch.cuda.is_available():
        settings.notes.append("GPU MFU (GPT-2 124M, bf16): not measured (no GPU lent to this task)")
        return Row(
            SECTION,
            "MFU on GPU, GPT-2 124M bf16 (%)",
            "not measured (no GPU lent to this task)",
            float("nan"),
            float("nan"),
            float("nan"),
            "%",
            "",
        )
    size = models.GPTSize("gpt2-small", 12, 12, 768, 1024, 8, vocab=50257)
    peak = matmul_flops(8192, "cuda", torch.bfloat16, repeats=10)
    model = models.attnlab_like(models.gpt2_config(size), "GPT2LMHeadModel").cuda()
    ids, labels = (t.cuda() for t in models.gpt_batch(size))

    def loss() -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return lm_loss(model, ids, labels)()

    step = train_step(model, loss)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    seconds = []
    for _ in range(10):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    mfu = [100 * step_flops(model, size) / s / peak for s in seconds]
    return Row(
        SECTION,
        "MFU on GPU, GPT-2 124M bf16 (%)",
        f"{size}, bf16 autocast, {torch.cuda.get_device_name(0)}",
        statistics.median(mfu),
        min(mfu),
        max(mfu),
        "%",
        f"peak {peak / 1e12:.0f} TFLOP/s bf16 matmul measured",
    )


def run(settings: Settings) -> list[Row]:
    n = settings.pick(full=2048, quick=2048, tiny=256)
    peak = max(matmul_flops(n) for _ in range(3))
    print(f"[mfu] fp32 matmul {n}³: {peak / 1e9:.1f} GFLOP/s", flush=True)
    rows = [
        Row(
            SECTION,
            "fp32 matmul throughput (GFLOP/s)",
            f"{n} × {n} @ {n} × {n}, best of 5 (×3)",
            peak / 1e9,
            peak / 1e9,
            peak / 1e9,
            "GFLOP/s",
            "the CPU peak the MFU is relative to",
        )
    ]
    plan = settings.pick(
        full=[(models.GPT_4L, 10), (models.GPT_6L, 4)],
        quick=[(models.GPT_4L, 5), (models.GPT_6L, 2)],
        tiny=[(models.GPT_TINY, 2)],
    )
    for size, repeats in plan:
        print(f"[mfu] {size.name}", flush=True)
        rows.append(cpu_row(size, peak, repeats))
    rows.append(gpu_row(settings))
    return rows
