"""Throughput, and model-FLOPs utilisation (MFU) where the device's peak is known, every few steps.

The task module counts the tokens, samples and FLOPs of a batch from its shapes and the model's size
(``TaskModule.batch_work``: PaLM's ``6 * N + 12 * L * T * d`` per token, ``N`` counted on the whole
model as built, so it stays right when a strategy shards it). Lightning does the rest:
``lightning_fabric.utilities.throughput.Throughput`` (the bookkeeping under Lightning's
``ThroughputMonitor``) turns the counts into rates over all devices and the MFU, and
``device_peak_flops`` the dense datasheet peak of a GPU in the run's precision (``DENSE_PEAKS`` for H100,
H200 and A100, then Lightning's table). A CPU has no such peak, so no MFU is logged there. Under
tensor parallel the processes of a group share each batch: each counts its share of the work, so the
MFU stays per GPU and the rates count each token once.

Not Lightning's ``ThroughputMonitor`` callback itself: it synchronises a CUDA device after every
batch (this callback only at the steps it logs), logs under its own names (``train/device/mfu``,
``train/items_per_sec``) through a private logger connector, so neither the progress bar nor
``metrics.jsonl``'s names (``train/tokens_per_s``, ``train/mfu``, which attnlab-report reads) stay,
and it reports nothing before 100 batches (its window).
"""

from __future__ import annotations

import time

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.throughput import Throughput, get_available_flops

from attnlab.tasks.step_log import log_step_value


def precision_dtype(precision: str | int | None) -> torch.dtype:
    """The dtype the matrix products run in under a Lightning ``precision`` setting."""
    text = str(precision)
    if "bf16" in text:
        return torch.bfloat16
    if text.startswith("16"):
        return torch.float16
    return torch.float32


# Dense peak FLOP/s of one GPU (no 2:4 sparsity) by matrix-product dtype, from NVIDIA's datasheets: the
# denominator of MFU. Lightning's table gives the sparse figure for some Hopper parts (H200, H100 NVL)
# and does not recognise "NVIDIA H200"; attnlab looks its GPUs up here first. Keys: (name parts, peaks).
DENSE_PEAKS: list[tuple[tuple[str, ...], dict[object, float]]] = [
    (("h200", "nvl"), {torch.bfloat16: 835e12, torch.float16: 835e12, "tf32": 418e12, torch.float32: 60e12}),
    (("h200",), {torch.bfloat16: 989e12, torch.float16: 989e12, "tf32": 494.7e12, torch.float32: 66.9e12}),
    (("h100", "nvl"), {torch.bfloat16: 835e12, torch.float16: 835e12, "tf32": 418e12, torch.float32: 60e12}),
    (
        ("h100", "pcie"),
        {torch.bfloat16: 756e12, torch.float16: 756e12, "tf32": 378e12, torch.float32: 51.2e12},
    ),
    (
        ("h100",),
        {torch.bfloat16: 989.4e12, torch.float16: 989.4e12, "tf32": 494.7e12, torch.float32: 66.9e12},
    ),
    (("a100",), {torch.bfloat16: 312e12, torch.float16: 312e12, "tf32": 156e12, torch.float32: 19.5e12}),
]


def dense_peak(device_name: str, dtype: torch.dtype, tf32: bool) -> float | None:
    """The dense peak FLOP/s of the GPU called ``device_name`` (as ``torch.cuda.get_device_name`` says)
    for products in ``dtype`` (float32 on TF32 tensor cores where ``tf32``), or None if not in
    ``DENSE_PEAKS``."""
    name = device_name.lower()
    for parts, peaks in DENSE_PEAKS:
        if all(part in name for part in parts):
            return peaks.get("tf32" if dtype == torch.float32 and tf32 else dtype)
    return None


def device_peak_flops(device: torch.device, dtype: torch.dtype) -> float | None:
    """The peak FLOP/s of one ``device`` for products in ``dtype``: ``dense_peak`` for the GPUs it
    knows, else Lightning's table (None on a CPU)."""
    if device.type == "cuda":
        tf32 = torch.get_float32_matmul_precision() != "highest"
        peak = dense_peak(torch.cuda.get_device_name(device), dtype, tf32)
        if peak is not None:
            return peak
    return get_available_flops(device, dtype)


def tensor_parallel_size(pl_module: pl.LightningModule) -> int:
    """How many processes share each batch's work (tensor parallel), 1 without a device mesh."""
    mesh = pl_module.device_mesh
    return mesh["tensor_parallel"].size() if mesh is not None else 1


class ThroughputLogger(pl.Callback):
    """Logs ``train/tokens_per_s`` (``train/samples_per_s`` for images) over all devices, and
    ``train/mfu`` (per device) when the peak FLOP/s of a device is known.

    ``log_every_n_steps`` defaults to the trainer's, so every value reaches the logger; ``peak_flops``
    (FLOP/s of one device) defaults to Lightning's table for the run's GPU and precision. Each value
    is the rate since the previous one; validation time is not counted.
    """

    def __init__(self, log_every_n_steps: int | None = None, peak_flops: float | None = None) -> None:
        super().__init__()
        self.log_every_n_steps = log_every_n_steps
        self.peak_flops = peak_flops
        self.unit = "tokens"  # or samples, for images
        self.total_count = 0.0  # tokens (samples) over all devices, and training seconds, until the last log
        self.total_time = 0.0
        self.throughput: Throughput | None = None

    @property
    def mean_rate(self) -> float | None:
        """Tokens (samples) per second over the fit, validation excluded; None before the first log."""
        return self.total_count / self.total_time if self.total_time > 0 else None

    @property
    def count_seen(self) -> int:
        """Tokens (samples, for images) this device trained on since the fit started."""
        return getattr(self, "samples" if self.unit == "samples" else "tokens", 0)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.peak_flops is None:
            dtype = precision_dtype(trainer.precision)
            self.peak_flops = device_peak_flops(trainer.strategy.root_device, dtype)
        self.sharing = tensor_parallel_size(pl_module)  # processes that do each batch's work together
        # A window of two updates: each rate is over the steps since the previous log.
        self.throughput = Throughput(
            available_flops=self.peak_flops, world_size=trainer.world_size, window_size=2
        )
        self.tokens = self.samples = self.batches = 0  # on this device since the fit started
        self.flops = 0.0
        self.flops_logged = 0.0  # FLOPs of this device until the last log
        self.seconds = 0.0  # of training before the current stretch (validation pauses the clock)
        self.start = time.perf_counter()
        self.last_step = -1
        self.throughput.update(time=0.0, batches=0, samples=0, lengths=0, flops=0)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.throughput is not None and not trainer.sanity_checking:
            self.seconds += time.perf_counter() - self.start

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.throughput is not None and not trainer.sanity_checking:
            self.start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: dict, batch_idx: int
    ) -> None:
        work, share = pl_module.batch_work(batch), self.sharing  # tensor parallel: a share of the batch
        self.tokens += work.tokens if share == 1 else work.tokens / share
        self.samples += work.samples if share == 1 else work.samples / share
        self.flops += work.flops / share
        self.batches += 1
        every = self.log_every_n_steps or trainer.log_every_n_steps or 1
        step = trainer.global_step
        if step == 0 or step == self.last_step or step % every:
            return  # before the first optimizer step, mid-accumulation, or not a logging step
        self.last_step = step
        self.log_rates(trainer, pl_module)

    def log_rates(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Update the rates with the work done since the last log, and log them."""
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # the steps queued so far are done
        elapsed = self.seconds + time.perf_counter() - self.start
        self.throughput.update(
            time=elapsed,
            batches=self.batches,
            samples=self.samples,
            lengths=self.tokens,
            flops=self.flops - self.flops_logged,
        )
        self.flops_logged = self.flops
        rates = self.throughput.compute()
        scope = "" if trainer.world_size > 1 else "device/"  # the sums over devices, or the one device's
        self.unit = "samples" if pl_module.model.input_kind == "images" else "tokens"
        rate = rates[f"{scope}{'samples' if self.unit == 'samples' else 'items'}_per_sec"]
        log_step_value(pl_module, f"train/{self.unit}_per_s", rate, prog_bar=True)
        if "device/mfu" in rates:
            log_step_value(pl_module, "train/mfu", rates["device/mfu"])
        count = self.samples if self.unit == "samples" else self.tokens
        self.total_count, self.total_time = count * trainer.world_size, elapsed
