"""The Lightning Trainer of a run, instantiated from its trainer settings (``trainer._target_``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.utils import instantiate
from lightning_fabric.plugins import CheckpointIO
from pytorch_lightning.accelerators import Accelerator, CUDAAccelerator
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import Logger
from pytorch_lightning.profilers import AdvancedProfiler, PyTorchProfiler, SimpleProfiler
from pytorch_lightning.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy, Strategy

from attnlab.blocks.layers import TransformerLayer
from attnlab.schema.load import plain
from attnlab.schema.run import CheckpointConfig, RunConfig, TrainerConfig
from attnlab.schema.rundir import is_sharded_checkpoint
from attnlab.tasks.lightning_shims import quiet_profiler
from attnlab.training import sharded
from attnlab.training.callbacks import AtomicCheckpointIO, console_is_terminal
from attnlab.training.checkpoint_io import BackgroundCheckpointIO
from attnlab.training.console import quiet_lightning
from attnlab.training.slurm import slurm_plugins

PROFILERS = {"simple": SimpleProfiler, "advanced": AdvancedProfiler, "pytorch": PyTorchProfiler}


CPU_TIMEOUT_S = 120  # gloo: a tiny run's collectives take milliseconds; a dead peer shows within minutes
GPU_TIMEOUT_S = 1800  # NCCL: PyTorch's own default


def collective_timeout(cfg: TrainerConfig) -> timedelta:
    """How long a collective waits for the other processes before it fails (``trainer.timeout``, or
    by the backend its accelerator uses: gloo on the CPU, NCCL on GPUs)."""
    if cfg.timeout is not None:
        return timedelta(seconds=cfg.timeout)
    import torch

    on_cpu = cfg.accelerator == "cpu" or (cfg.accelerator == "auto" and not torch.cuda.is_available())
    return timedelta(seconds=CPU_TIMEOUT_S if on_cpu else GPU_TIMEOUT_S)


def checkpoint_io(cfg: CheckpointConfig) -> CheckpointIO:
    """Whole-or-nothing checkpoint files, written on a background thread unless ``checkpoint.async_save=false``."""
    return BackgroundCheckpointIO() if cfg.async_save else AtomicCheckpointIO()


class FullyShardedStrategy(ModelParallelStrategy):
    """Lightning's ``ModelParallelStrategy`` over a mesh of ``tensor_parallel_size`` processes that split
    each layer (tensor parallel) by world size / ``tensor_parallel_size`` data-parallel groups (FSDP2);
    the task's ``configure_model`` applies the plan (``attnlab.models.parallel``). Lightning's default
    would make the data-parallel size the number of nodes and the tensor-parallel size the processes of
    a node: the world size is known only here. ``sequence_parallel`` and ``async_tensor_parallel`` are
    read by the task's ``configure_model`` (``models.parallel.tensor_parallel``'s options)."""

    def __init__(
        self,
        tensor_parallel_size: int = 1,
        sequence_parallel: bool = False,
        async_tensor_parallel: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.tensor_parallel = tensor_parallel_size
        self.sequence_parallel = sequence_parallel
        self.async_tensor_parallel = async_tensor_parallel

    def setup_environment(self) -> None:
        self._data_parallel_size = self.num_nodes * self.num_processes // self.tensor_parallel
        self._tensor_parallel_size = self.tensor_parallel
        super().setup_environment()

    def save_checkpoint(self, checkpoint: dict, filepath: Any, storage_options: Any = None) -> None:
        """One file through the checkpoint IO (``checkpoint.sharded=false``), or each process's shards,
        published as a whole by rank 0 once all are written (``training.sharded``)."""
        if not self._save_distributed_checkpoint:
            return super().save_checkpoint(checkpoint, filepath, storage_options)
        target = Path(self.broadcast(filepath))
        staging = sharded.staging_dir(target)
        if self.is_global_zero:
            sharded.remove(staging)  # a kill mid-write left it
        self.barrier()
        try:
            super().save_checkpoint(checkpoint, staging)
        except BaseException as err:  # DCP's CheckpointException (every rank gets every rank's failure)
            if self.is_global_zero:
                sharded.remove(staging)  # nothing half-written left; every rank has stopped writing
            sharded.raise_disk_full(err, target, checkpoint)
            raise
        self.barrier()
        if self.is_global_zero:
            sharded.publish(staging, target)
        self.barrier()

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """Lightning's load, after every pickled part of a sharded checkpoint is checked in this process
        (``sharded_files.check_sharded``): Lightning reads it through the reader and planner that
        ``torch.distributed.checkpoint`` builds itself, which unpickle without restriction."""
        if is_sharded_checkpoint(checkpoint_path):
            from attnlab.training.sharded_files import check_sharded

            check_sharded(Path(checkpoint_path))
        return super().load_checkpoint(checkpoint_path, weights_only=weights_only)

    def remove_checkpoint(self, filepath: Any) -> None:
        if self.is_global_zero and self._save_distributed_checkpoint:
            sharded.remove(Path(filepath))
        elif not self._save_distributed_checkpoint:
            super().remove_checkpoint(filepath)


def strategy(cfg: TrainerConfig, io: CheckpointIO | None = None, shards: bool = False) -> str | Strategy:
    """DDP without unused-parameter search (attnlab builds only the heads a task uses); FSDP with one
    unit per TransformerLayer, its full state dict gathered on rank 0 for ``io`` to write; FSDP2
    likewise (``FullyShardedStrategy``): its full state dict and optimizer state gathered on rank 0
    (on the CPU) into one file that ``io`` writes, which resumes on any number of processes and which
    every command reads; with ``shards`` (``checkpoint.sharded``), each process's shards in a directory
    instead. All bound their collectives by ``collective_timeout``: a process whose peer died fails
    instead of hanging."""
    io = io or AtomicCheckpointIO()
    if cfg.strategy == "ddp":
        return DDPStrategy(find_unused_parameters=False, checkpoint_io=io, timeout=collective_timeout(cfg))
    if cfg.strategy == "fsdp":
        return FSDPStrategy(
            auto_wrap_policy={TransformerLayer},
            state_dict_type="full",
            checkpoint_io=io,
            timeout=collective_timeout(cfg),
        )
    if cfg.strategy == "fsdp2":
        fsdp2 = FullyShardedStrategy(
            cfg.tensor_parallel_size,
            cfg.sequence_parallel,
            cfg.async_tensor_parallel,
            save_distributed_checkpoint=shards,
            timeout=collective_timeout(cfg),
        )
        fsdp2.checkpoint_io = io
        return fsdp2
    return str(cfg.strategy)


# TrainerConfig fields that are not arguments of Lightning's Trainer: lightning_settings translates them.
ATTNLAB_SETTINGS = (
    "strategy",
    "timeout",
    "val_every_n_steps",
    "profiler",
    "on_nonfinite",
    "max_nonfinite_skips",
    "float32_matmul_precision",
    "activation_checkpointing",
    "float8",
    "compute_budget",  # turned into max_steps before the run (run/budget.py)
    "tensor_parallel_size",
    "sequence_parallel",
    "async_tensor_parallel",
    "target_metric",  # read by the StopAtTarget callback (training/callbacks/target.py)
    "target_value",
    "target_mode",
)


def lightning_settings(
    t: TrainerConfig, run_dir: Path, io: CheckpointIO | None = None, shards: bool = False
) -> dict[str, Any]:
    """The Trainer arguments that attnlab's own trainer settings stand for: validation every
    ``val_every_n_steps`` optimizer steps, a strategy whose checkpoints are written whole or not at
    all, a profiler writing into the run directory, a run bounded by steps, data modules that shard
    over ranks themselves (exact resume), a progress bar only on a terminal (elsewhere the
    ``ProgressLines`` callback prints plain lines, not a bar squeezed to 80 columns); under SLURM,
    Lightning's SLURM environment without its requeue handler (``training.slurm``). ``io`` writes the
    checkpoints (``checkpoint_io``; whole files, synchronously, if None)."""
    io = io or AtomicCheckpointIO()
    return {
        "strategy": strategy(t, io, shards),
        "plugins": [
            *([io] if t.strategy not in ("ddp", "fsdp", "fsdp2") else []),
            *slurm_plugins(),
        ],
        "val_check_interval": t.val_every_n_steps * t.accumulate_grad_batches,
        "check_val_every_n_epoch": None,
        "profiler": PROFILERS[t.profiler](dirpath=run_dir, filename="profile")
        if t.profiler
        else quiet_profiler(),
        "max_epochs": -1,
        "enable_checkpointing": not t.fast_dev_run,
        "use_distributed_sampler": False,
        "default_root_dir": run_dir,
        "enable_progress_bar": t.enable_progress_bar and console_is_terminal(),
        # attnlab's own ModelSummary comes with the progress display (build_callbacks); without it
        # Lightning would add its default one, which prints "Total FLOPs: 0" for attnlab's tasks.
        "enable_model_summary": False,
    }


def build_trainer(
    run: RunConfig, run_dir: Path, loggers: list[Logger], callbacks: list[Callback]
) -> pl.Trainer:
    """The Trainer of ``run.trainer._target_`` (Lightning's by default): its fields as the Trainer's
    arguments, with attnlab's own settings translated (``lightning_settings``)."""
    quiet_lightning()
    arguments = {k: v for k, v in plain(run.trainer).items() if k not in ATTNLAB_SETTINGS}
    trainer = instantiate(
        arguments,
        **lightning_settings(run.trainer, run_dir, checkpoint_io(run.checkpoint), sharded_checkpoints(run)),
        logger=loggers or False,
        callbacks=callbacks,
        _recursive_=False,
        _convert_="all",
    )
    set_matmul_precision(run.trainer, trainer.accelerator)
    return trainer


def sharded_checkpoints(run: RunConfig) -> bool:
    """Whether each process writes its own shards: ``checkpoint.sharded``, and always under tensor
    parallel, whose split projections only a sharded checkpoint resumes into."""
    return run.checkpoint.sharded or run.trainer.tensor_parallel_size > 1


def set_matmul_precision(cfg: TrainerConfig, accelerator: Accelerator) -> None:
    """``trainer.float32_matmul_precision`` for torch's float32 matmuls on CUDA (``high``: TF32 tensor
    cores, as nanoGPT); set before fit, it also silences Lightning's advice to set it. The CPU ignores it."""
    if isinstance(accelerator, CUDAAccelerator):
        import torch

        torch.set_float32_matmul_precision(str(cfg.float32_matmul_precision))
