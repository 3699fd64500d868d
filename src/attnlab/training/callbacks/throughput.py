"""Throughput and model-FLOPs utilisation (MFU), logged every few optimizer steps.

The task module counts tokens and FLOPs of a batch from its shapes (``TaskModule.batch_work``, after
PaLM's ``6 * N + 12 * L * T * d`` per token), so the callback never touches tensor values and adds no
device synchronisation but one per log. Image models report samples/s, text models tokens/s.
"""

from __future__ import annotations

import time

import pytorch_lightning as pl
import torch

_PEAK_FLOPS: dict[tuple[str, torch.dtype], float] = {}  # measured once per process


def precision_dtype(precision: str | int | None) -> torch.dtype:
    """The dtype the matrix products run in under a Lightning ``precision`` setting."""
    text = str(precision)
    if "bf16" in text:
        return torch.bfloat16
    if text.startswith("16"):
        return torch.float16
    return torch.float32


def measure_peak_flops(device: torch.device, dtype: torch.dtype = torch.float32) -> float:
    """Matrix-multiply FLOP/s of ``device`` in ``dtype``, measured once and cached for the process.

    A square matmul (1024 on CPU, 4096 on GPU) is timed after a warm-up; this is the attainable
    peak the MFU is relative to, not the vendor's datasheet figure.
    """
    key = (device.type, dtype)
    if key not in _PEAK_FLOPS:
        n, repeats = (4096, 10) if device.type == "cuda" else (1024, 3)
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        a @ b  # warm-up: kernel selection, thread pool start
        _synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        _synchronize(device)
        _PEAK_FLOPS[key] = 2.0 * n**3 * repeats / (time.perf_counter() - start)
    return _PEAK_FLOPS[key]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ThroughputLogger(pl.Callback):
    """Logs ``train/tokens_per_s`` (``train/samples_per_s`` for images) and ``train/mfu``.

    ``log_every_n_steps`` defaults to the trainer's, so every value reaches the logger;
    ``peak_flops`` (FLOP/s of one device) defaults to a quick matmul measurement at fit start.
    Rates are over all devices; the MFU is per device. Validation time is not counted.
    """

    def __init__(self, log_every_n_steps: int | None = None, peak_flops: float | None = None) -> None:
        super().__init__()
        self.log_every_n_steps = log_every_n_steps
        self.peak_flops = peak_flops
        self.unit = "tokens"  # or samples, for images
        self.total_count = 0.0  # tokens (samples) and seconds of every window logged in this fit
        self.total_time = 0.0
        self._reset()

    @property
    def mean_rate(self) -> float | None:
        """Tokens (samples) per second over the fit, validation excluded; None before the first log."""
        return self.total_count / self.total_time if self.total_time > 0 else None

    def _reset(self) -> None:
        self.tokens = self.samples = 0
        self.flops = 0.0
        self.start = time.perf_counter()
        self.last_step = -1

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.peak_flops is None:
            self.peak_flops = measure_peak_flops(pl_module.device, precision_dtype(trainer.precision))

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._reset()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._reset()  # a new window after validation, so its time is not counted as training

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: dict, batch_idx: int
    ) -> None:
        work = pl_module.batch_work(batch)
        self.tokens += work.tokens
        self.samples += work.samples
        self.flops += work.flops
        every = self.log_every_n_steps or trainer.log_every_n_steps or 1
        step = trainer.global_step
        if step == 0 or step == self.last_step or step % every:
            return  # before the first optimizer step, mid-accumulation, or not a logging step
        self.last_step = step
        _synchronize(pl_module.device)
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        world = trainer.world_size
        unit = "samples" if pl_module.model.input_kind == "images" else "tokens"
        count = self.samples if unit == "samples" else self.tokens
        self.unit = unit
        self.total_count += count * world
        self.total_time += elapsed
        pl_module.log(
            f"train/{unit}_per_s", count * world / elapsed, on_step=True, on_epoch=False, prog_bar=True
        )
        pl_module.log("train/mfu", self.flops / elapsed / self.peak_flops, on_step=True, on_epoch=False)
        self.tokens = self.samples = 0
        self.flops = 0.0
        self.start = time.perf_counter()
