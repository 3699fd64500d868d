"""Whether this machine has the accelerators a trainer config asks for, checked before any directory
exists (Lightning would find out only after the run directory is written, naming no key).

Torch is imported only when a GPU (or Apple's MPS) is asked for, so a CPU config validates torch-free.
"""

from __future__ import annotations

from typing import Any

from attnlab.schema.errors import ConfigError
from attnlab.schema.model import FLEX_CPU_BACKWARD
from attnlab.schema.run import Accelerator, Strategy

# What a run may use instead on a machine without GPUs (attnlab-eval runs in one process: trainer=cpu).
ON_THE_CPU = "on the CPU use trainer=cpu (one process), or trainer=ddp_sim (DDP over 2 CPU processes)"


def check_devices(trainer: Any, on_the_cpu: str = ON_THE_CPU) -> None:
    """ConfigError when ``trainer.accelerator`` names a kind of device this machine lacks (saying
    ``on_the_cpu``), or ``trainer.devices`` more of them (or other ids) than it has. ``trainer`` is a
    TrainerConfig or attnlab-eval's; ``accelerator=auto`` is Lightning's to choose."""
    accelerator = Accelerator(trainer.accelerator)
    if accelerator in (Accelerator.gpu, Accelerator.cuda):
        import torch

        count, kind = torch.cuda.device_count(), "GPU"
    elif accelerator == Accelerator.mps:
        import torch

        count, kind = int(torch.backends.mps.is_available()), "MPS device"
    else:
        return
    if count == 0:
        raise ConfigError(
            "trainer.accelerator", str(accelerator), f"this machine has no {kind}; {on_the_cpu}"
        )
    devices = trainer.devices
    if isinstance(devices, int) and devices > count:
        raise ConfigError("trainer.devices", devices, f"this machine has {count} {kind}(s)")
    if isinstance(devices, list) and any(d >= count for d in devices):
        raise ConfigError(
            "trainer.devices", list(devices), f"this machine has {count} {kind}(s): ids 0 to {count - 1}"
        )


def check_device(key: str, device: str) -> None:
    """ConfigError naming ``key`` unless ``device`` (a command's ``device=``) is a device torch knows
    and this machine has: ``cpu``, ``cuda`` or ``cuda:<index>`` with a GPU there, ``mps`` on a Mac."""
    import torch

    try:
        kind = torch.device(device)
    except (RuntimeError, TypeError):
        kind = None
    if kind is None or kind.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(key, device, "not a device: cpu, cuda, cuda:<index> or mps")
    if kind.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            raise ConfigError(key, device, f"this machine has no GPU (CUDA): use {key}=cpu")
        if kind.index is not None and kind.index >= count:
            raise ConfigError(key, device, f"this machine has {count} GPU(s): cuda:0 to cuda:{count - 1}")
    if kind.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(key, device, f"this machine has no MPS device: use {key}=cpu")


def trains_on_cpu(trainer: Any) -> bool:
    """Whether a run of ``trainer`` trains on the CPU: ``accelerator=cpu``, or ``auto`` on a machine without a GPU."""
    accelerator = Accelerator(trainer.accelerator)
    if accelerator == Accelerator.auto:
        import torch

        return not torch.cuda.is_available()
    return accelerator == Accelerator.cpu


def check_attention_backend(run: Any) -> None:
    """ConfigError for training with ``model.attn_backend=flex`` on the CPU (``trainer.accelerator=cpu``,
    or ``auto`` on a machine without a GPU): FlexAttention has no backward there in torch 2.13."""
    if run.model.attn_backend == "flex" and trains_on_cpu(run.trainer):
        raise ConfigError("model.attn_backend", "flex", FLEX_CPU_BACKWARD)


def check_strategy(trainer: Any) -> None:
    """ConfigError for ``trainer.strategy=fsdp`` on the CPU: Lightning's FSDP strategy gives FSDP no
    device there, and FSDP then fails at fit ("needs a non-CPU accelerator device")."""
    if Strategy(trainer.strategy) == Strategy.fsdp and trains_on_cpu(trainer):
        raise ConfigError(
            "trainer.strategy", "fsdp", f"shards over GPUs (trainer.accelerator=gpu); {ON_THE_CPU}"
        )


def check_float8(trainer: Any) -> None:
    """ConfigError for ``trainer.float8=true`` without a GPU that computes in float8 (compute capability
    8.9+): on the CPU (or an older GPU) only ``trainer.float8=emulated`` runs, float8's rounding
    computed in higher precision. Torch is imported only when float8 is asked for."""
    if trainer.float8 is not True:
        return
    if trains_on_cpu(trainer):
        raise ConfigError(
            "trainer.float8",
            True,
            "float8 matrix products need a GPU of compute capability 8.9+ (H100, L4, ...); on the CPU "
            "use trainer.float8=emulated (float8 rounding in higher precision, slower) or false",
        )
    from attnlab.models.speedups import check_float8_device

    try:
        check_float8_device()
    except ValueError as err:
        raise ConfigError("trainer.float8", True, f"{err}; trainer.float8=emulated runs anywhere") from None
