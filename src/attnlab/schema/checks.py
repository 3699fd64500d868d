"""The rules between config groups (family x task x data kind, sequence and image sizes), and
``validate``: a composed config as a checked RunConfig, before anything heavy is imported or any
directory is written. The rules within a group are the ``check`` methods of its schema classes."""

from __future__ import annotations

from collections.abc import Mapping

from omegaconf import DictConfig

from attnlab.schema.data import Packing, SequenceData, TextData
from attnlab.schema.errors import ConfigError
from attnlab.schema.image_data import ImageData
from attnlab.schema.load import read_run_config, to_object
from attnlab.schema.model import MODELS, AttnBackend, GPTConfig, TokenModelConfig, ViTConfig
from attnlab.schema.optim import MuonConfig
from attnlab.schema.pos import LearnedPos, PosName
from attnlab.schema.run import Accelerator, RunConfig, Strategy, process_count
from attnlab.schema.task import CausalLMTask


def accepted_kinds() -> dict[tuple[str, str], tuple[str, ...]]:
    """Which data kinds each (model family, task) pair can consume, from each family's ``trains``;
    the first kind is the one its preset picks."""
    return {
        (family, task): kinds
        for family, schema in MODELS.schemas.items()
        for task, kinds in schema.trains.items()
    }


def validate(cfg: DictConfig) -> RunConfig:
    """The RunConfig of a config that Hydra composed; ConfigError (one line) at the first bad value."""
    run = to_object(cfg)
    check_run(run)
    return run


def validate_saved(values: Mapping) -> RunConfig:
    """The RunConfig of a config saved as plain data (``config.yaml``, a checkpoint's), checked."""
    run = read_run_config(values)
    check_run(run)
    return run


def check_run(run: RunConfig) -> None:
    """Each group's rules, then the rules between groups."""
    run.check()
    check_compatible(run.model.family, run.task.inner().name, run.data.kind)
    m, data = run.model, run.data
    if (
        isinstance(m, TokenModelConfig)
        and isinstance(m.pos, LearnedPos)
        and isinstance(data, SequenceData)
        and data.seq_len > m.max_seq_len
    ):
        raise ConfigError(
            "data.seq_len",
            data.seq_len,
            f"must be at most model.max_seq_len={m.max_seq_len} with pos=learned",
        )
    target = run.trainer.target_metric
    metrics = [f"val/{name}" for name in run.task.val_metrics()]
    if target is not None and target not in metrics:
        raise ConfigError(
            "trainer.target_metric",
            target,
            f"choose one of {', '.join(metrics)} (what task={run.task.name} logs at validation)",
        )
    sharded = run.trainer.strategy in (Strategy.fsdp, Strategy.fsdp2)
    if isinstance(run.optim, MuonConfig) and sharded:
        raise ConfigError(
            "optim.name",
            "muon",
            f"cannot run under trainer.strategy={run.trainer.strategy}: FSDP shards the weight matrices "
            "that Muon orthogonalises whole; use trainer=ddp",
        )
    if run.checkpoint.sharded and run.trainer.strategy != Strategy.fsdp2:
        raise ConfigError(
            "checkpoint.sharded",
            True,
            f"is for trainer.strategy=fsdp2 (each process writes its shards); under "
            f"trainer.strategy={run.trainer.strategy} checkpoints are one file",
        )
    if run.trainer.tensor_parallel_size > 1:
        check_tensor_parallel(run)
    if run.trainer.sequence_parallel:
        check_sequence_parallel(run)
    if run.trainer.async_tensor_parallel:
        check_async_tensor_parallel(run)
    if run.task.log_attention_every_n_epochs and (sharded or run.trainer.tensor_parallel_size > 1):
        raise ConfigError(
            "task.log_attention_every_n_epochs",
            run.task.log_attention_every_n_epochs,
            f"draws its maps from a forward on process 0 alone, which trainer.strategy={run.trainer.strategy} "
            f"cannot run (every forward gathers weights from all processes): set it to 0 and draw the maps "
            "from a checkpoint with attnlab-explain, or train with trainer=ddp",
        )
    if run.compile is True and run.trainer.strategy == Strategy.fsdp2:
        raise ConfigError(
            "compile",
            True,
            "compiles the whole model, across the units trainer.strategy=fsdp2 shards: use compile=block "
            "(each transformer layer compiled on its own, inside its unit)",
        )
    kernel = run.optim.fused_adamw
    if kernel.fused and "mixed" in run.trainer.precision and run.trainer.gradient_clip_val:
        raise ConfigError(
            kernel.key,
            True,
            f"cannot clip gradients under trainer.precision={run.trainer.precision} (the fused kernel "
            "unscales them itself): set it to null (chosen for you) or trainer.gradient_clip_val=null",
        )
    padded = isinstance(data, TextData) and data.packing == Packing.padded
    if padded and not isinstance(run.task, CausalLMTask):
        raise ConfigError(
            "data.packing",
            "padded",
            f"is a causal-LM baseline; task.name={run.task.name} packs with data.packing=documents or none",
        )
    if (
        isinstance(m, ViTConfig)
        and isinstance(data, ImageData)
        and data.image_size not in (None, m.image_size)
    ):
        raise ConfigError(
            "data.image_size", data.image_size, f"must equal model.image_size={m.image_size} (or null)"
        )


def check_trains(family: str, task: str) -> None:
    """ConfigError unless a model of ``family`` can be trained on ``task``."""
    if (family, task) not in accepted_kinds():
        tasks = [t for f, t in accepted_kinds() if f == family]
        raise ConfigError(
            "task.name", task, f"cannot train model.family='{family}'; it trains {', '.join(tasks)}"
        )


def check_compatible(family: str, task: str, kind: str) -> None:
    """ConfigError unless a model of ``family`` trained on ``task`` exists and consumes data of ``kind``."""
    check_trains(family, task)
    accepted = accepted_kinds()[(family, task)]
    if kind not in accepted:
        raise ConfigError(
            "data.kind",
            kind,
            f"cannot be consumed by model.family='{family}' with task.name='{task}'; "
            f"it accepts data.kind in: {', '.join(accepted)}",
        )


def check_tensor_parallel(run: RunConfig) -> None:
    """What ``trainer.tensor_parallel_size`` > 1 needs: the fsdp2 strategy (Lightning's
    ``ModelParallelStrategy``), a number of processes it divides, whole query and key/value heads on
    each process, the fused attention path, and per-head score biases and float8 that the plan does
    not split (``attnlab.models.parallel``)."""
    t, m = run.trainer, run.model
    tp, key = t.tensor_parallel_size, "trainer.tensor_parallel_size"
    if t.strategy != Strategy.fsdp2:
        raise ConfigError(
            key, tp, f"splits layers under trainer.strategy=fsdp2 (trainer=tp or tp_sim), not {t.strategy}"
        )
    processes = process_count(t)
    if processes is not None and processes % tp:
        raise ConfigError(key, tp, f"must divide the number of processes, {processes} (devices x nodes)")
    for name, heads in (("n_heads", m.n_heads), ("n_kv_heads", m.n_kv_heads or m.n_heads)):
        if heads % tp:
            raise ConfigError(key, tp, f"must divide model.{name}={heads}: each process runs whole heads")
    if m.attn_backend != AttnBackend.sdpa:
        raise ConfigError(
            "model.attn_backend", str(m.attn_backend), f"tensor parallel ({key}={tp}) runs only sdpa"
        )
    if getattr(m, "pos", None) is not None and m.pos.name in (PosName.alibi, PosName.relative):
        raise ConfigError(
            "pos",
            str(m.pos.name),
            f"a per-head score bias that {key}={tp} does not split: use rope, learned, sinusoidal or none",
        )
    if m.kept_heads is not None:
        raise ConfigError("model.kept_heads", m.kept_heads, f"a pruned model: {key}={tp} splits whole models")
    for name, off in (("attn_sink", "none"), ("attn_gate", "none"), ("value_residual", None)):
        if getattr(m, name, off) != off:  # per-head parameters the plan does not split yet
            raise ConfigError(
                f"model.{name}", getattr(m, name), f"not split by {key}={tp} yet: set it to {off}"
            )
    if t.float8:
        raise ConfigError("trainer.float8", t.float8, f"not composed with {key}={tp}: set it to false")


def check_sequence_parallel(run: RunConfig) -> None:
    """What ``trainer.sequence_parallel`` needs: tensor parallel to split the sequence over, a
    decoder-only model (its windows all ``data.seq_len`` long: the other families' batches are padded
    to their longest row, a length the processes may not split evenly) and a ``data.seq_len`` that
    splits into equal parts, one a process (``models.parallel.sequence_plan``)."""
    tp, key = run.trainer.tensor_parallel_size, "trainer.sequence_parallel"
    if tp == 1:
        raise ConfigError(
            key,
            True,
            "splits the sequence over the tensor-parallel processes: set trainer.tensor_parallel_size > 1",
        )
    if not isinstance(run.model, GPTConfig):
        raise ConfigError(
            key,
            True,
            f"splits fixed-length windows of decoder-only models (model=gpt); model.family={run.model.family}'s "
            "batches are padded to their longest row: set it to false",
        )
    if isinstance(run.data, SequenceData) and run.data.seq_len % tp:
        raise ConfigError(
            "data.seq_len",
            run.data.seq_len,
            f"must be a multiple of trainer.tensor_parallel_size={tp} under {key}=true: each process "
            "takes an equal part of every sequence",
        )


def check_async_tensor_parallel(run: RunConfig) -> None:
    """What ``trainer.async_tensor_parallel`` needs: the all-gathers and reduce-scatters of sequence
    parallel (tensor parallel with ``trainer.sequence_parallel``), compiled layers in which inductor
    overlaps them with the matrix products (``compile=block``), and GPUs (CUDA's symmetric memory)."""
    t, key = run.trainer, "trainer.async_tensor_parallel"
    if t.tensor_parallel_size == 1:
        raise ConfigError(
            key, True, "overlaps tensor parallel's collectives: set trainer.tensor_parallel_size > 1"
        )
    if not t.sequence_parallel:
        raise ConfigError(
            key,
            True,
            "overlaps the all-gathers and reduce-scatters of trainer.sequence_parallel=true: set it",
        )
    if run.compile != "block":
        raise ConfigError(
            key,
            True,
            f"works inside compiled layers (inductor rewrites their collectives): set compile=block, not "
            f"compile={str(run.compile).lower()}",
        )
    if t.accelerator not in (Accelerator.gpu, Accelerator.cuda):
        raise ConfigError(
            key,
            True,
            f"runs on GPUs only (CUDA's symmetric memory), not trainer.accelerator={t.accelerator}: set it to "
            "false on this machine",
        )
