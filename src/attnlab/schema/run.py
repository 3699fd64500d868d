"""Schemas of a training run: trainer, loggers, checkpoints, the run as a whole (``attnlab-eval``'s in
``schema.eval``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from attnlab.schema.choice import Choice, missing
from attnlab.schema.data import DataConfig, TextData
from attnlab.schema.errors import ConfigError, not_negative, positive
from attnlab.schema.model import GPTConfig, ModelConfig
from attnlab.schema.optim import AdamWConfig, OptimConfig
from attnlab.schema.task import CausalLMTask, MonitorMode, TaskConfig

PRECISIONS = ("32", "bf16-mixed", "16-mixed")  # not identifiers, so a string with one check
# a run's directory unless run_dir is given: its time, then its label (training/names.py)
RUN_DIR = "outputs/${now:%Y-%m-%d}/${attnlab.with_label:${now:%H-%M-%S}}"


class Accelerator(Choice):
    cpu = "cpu"
    gpu = "gpu"
    cuda = "cuda"
    mps = "mps"
    auto = "auto"


class RunDirExists(Choice):
    """What a new run does with a ``run_dir`` that holds the files of another run (``training.rundir``)."""

    refuse = "refuse"  # one line: continue that run (ckpt_path=last) or name another folder
    overwrite = "overwrite"  # the new run writes its files over the other run's


class MatmulPrecision(Choice):
    """``torch.set_float32_matmul_precision`` on CUDA: ``high`` lets float32 matmuls use TF32 tensor cores."""

    highest = "highest"
    high = "high"
    medium = "medium"


class Strategy(Choice):
    auto = "auto"
    ddp = "ddp"
    fsdp = "fsdp"  # FSDP1 (flat parameters), Lightning's FSDPStrategy
    fsdp2 = "fsdp2"  # fully_shard per transformer layer, Lightning's ModelParallelStrategy


class ActivationCheckpointing(Choice):
    """What each transformer layer keeps for the backward pass (``models.speedups.checkpoint_layers``)."""

    none = "none"  # all its activations
    full = "full"  # only its input: its forward runs again in the backward pass
    selective = "selective"  # its matrix products' and attention's outputs: elementwise ops run again


# trainer.float8 and compile take a boolean or one word (OmegaConf types no union of bool and enum)
FLOAT8_MODES = (False, True, "emulated")  # emulated: float8 rounding computed in higher precision
COMPILE_MODES = (False, True, "block")  # true: the whole model; block: each transformer layer


class Profiler(Choice):
    simple = "simple"
    advanced = "advanced"
    pytorch = "pytorch"


class OnNonFinite(Choice):
    """What a training step whose loss or gradient is not finite does (``attnlab.tasks.nonfinite``)."""

    stop = "stop"  # end the run before the optimizer step, with one line naming the step and the value
    skip = "skip"  # drop the step's gradients, count it (train/skipped_steps), go on


class WandbMode(Choice):
    offline = "offline"
    online = "online"
    disabled = "disabled"


@dataclass
class TrainerConfig:
    """Lightning Trainer settings; intervals count optimizer steps (not micro-batches).

    ``hydra.utils.instantiate`` builds the Trainer from ``_target_`` and the fields that are its
    arguments; ``strategy``, ``timeout``, ``val_every_n_steps`` and ``profiler`` are attnlab's own,
    translated into Trainer arguments by ``attnlab.training.trainer.lightning_settings``;
    ``on_nonfinite`` and ``max_nonfinite_skips`` go to the task module (its check of every step);
    ``float32_matmul_precision`` is set in torch when the Trainer runs on CUDA;
    ``activation_checkpointing`` and ``float8`` change the model before the Trainer gets it.

    ``timeout`` (seconds) bounds every collective of the DDP/FSDP strategies: a process whose peer died
    (a killed node) fails after it instead of waiting forever. None: 120 s on the CPU (gloo: the
    collectives of small runs take milliseconds, so a dead peer is noticed quickly) and 1800 s on GPUs
    (NCCL: PyTorch's own default, room for slow first steps, compilation and large checkpoints).
    """

    _target_: str = "pytorch_lightning.Trainer"
    accelerator: Accelerator = Accelerator.cpu
    devices: Any = 1  # a count, -1 or "auto" for all, or a list of device ids
    num_nodes: int = 1
    strategy: Strategy = Strategy.auto
    # trainer.strategy=fsdp2: processes that split each layer's projections (tensor parallel); the
    # world size over it is the data-parallel size
    tensor_parallel_size: int = 1
    # tensor parallel: the residual stream (norms, residual adds, dropout) split along the sequence
    # between the layers' projections instead of whole on each process (torchtitan's plan)
    sequence_parallel: bool = False
    # tensor parallel on GPUs: torch's async TP, the compiled layers' collectives overlapped with their
    # matrix products (needs sequence_parallel and compile=block)
    async_tensor_parallel: bool = False
    timeout: int | None = None  # seconds a collective may wait for the other processes (None: see above)
    precision: str = "32"  # 32 | bf16-mixed | 16-mixed
    max_steps: int = 300
    val_every_n_steps: int = 100
    limit_val_batches: Any = 1.0  # a fraction (float), or a count of batches (int)
    limit_test_batches: Any = 1.0
    num_sanity_val_steps: int = 0
    gradient_clip_val: float | None = 1.0
    accumulate_grad_batches: int = 1
    log_every_n_steps: int = 10
    enable_progress_bar: bool = True
    deterministic: bool = False
    fast_dev_run: int = 0  # >0: run this many batches of each stage, write nothing (debug=fdr)
    overfit_batches: Any = 0  # >0: train and validate on this many batches (int) or this fraction (float)
    profiler: Profiler | None = None
    on_nonfinite: OnNonFinite = OnNonFinite.stop
    max_nonfinite_skips: int = 10  # on_nonfinite=skip: the run stops at this many skipped steps in a row
    float32_matmul_precision: MatmulPrecision = MatmulPrecision.high  # applied on CUDA only (TF32 matmuls)
    activation_checkpointing: ActivationCheckpointing = ActivationCheckpointing.none
    # float8 matrix products in the layers' projections (torchao): true needs a GPU of compute
    # capability 8.9+; emulated rounds as float8 does, computed in higher precision (any device, slower)
    float8: Any = False
    # Training FLOPs (Chinchilla's count, models/flops.py) the run may spend: max_steps is derived from
    # it, the model's FLOPs per token and the tokens of a step, so runs of different sizes on one budget
    # spend the same compute (experiment=scaling); null: max_steps as given
    compute_budget: float | None = None
    # Time to a target: the run stops at the first validation where target_metric (a val/ metric of
    # the task) is at or below target_value (target_mode=min; at or above for max), and summary.json
    # records the steps, tokens, FLOPs and wall time it took (null: no target, the run goes on)
    target_metric: str | None = None
    target_value: float | None = None
    target_mode: MonitorMode | None = None  # null: min for loss, ppl and bpb; max for the others

    def check(self) -> None:
        if self.float8 not in FLOAT8_MODES:
            raise ConfigError("trainer.float8", self.float8, "true, false, or emulated")
        if self.precision not in PRECISIONS:
            raise ConfigError("trainer.precision", self.precision, f"choose one of {', '.join(PRECISIONS)}")
        if not devices_ok(self.devices):
            raise ConfigError(
                "trainer.devices", self.devices, "a positive count, -1 or auto (all), or a list of device ids"
            )
        for name in (
            "num_nodes",
            "tensor_parallel_size",
            "max_steps",
            "val_every_n_steps",
            "accumulate_grad_batches",
            "log_every_n_steps",
            "max_nonfinite_skips",
        ):
            positive(f"trainer.{name}", getattr(self, name))
        for name in ("limit_val_batches", "limit_test_batches", "overfit_batches"):
            if not batches_ok(getattr(self, name)):
                raise ConfigError(
                    f"trainer.{name}",
                    getattr(self, name),
                    "a fraction in [0.0, 1.0] or a count of batches (integer)",
                )
        if self.gradient_clip_val is not None and self.gradient_clip_val < 0:
            raise ConfigError(
                "trainer.gradient_clip_val",
                self.gradient_clip_val,
                "must be 0 or more, or null (no clipping)",
            )
        if self.limit_val_batches == 0 and not self.fast_dev_run:
            raise ConfigError(
                "trainer.limit_val_batches",
                self.limit_val_batches,
                "a run validates (task.monitor picks the best checkpoint and the test's): give a count "
                "of batches or a fraction above 0",
            )
        not_negative("trainer.num_sanity_val_steps", self.num_sanity_val_steps)
        not_negative("trainer.fast_dev_run", self.fast_dev_run)
        positive("trainer.timeout", self.timeout, allow_none=True)
        positive("trainer.compute_budget", self.compute_budget, allow_none=True)
        if (self.target_metric is None) != (self.target_value is None):
            given, other = (
                ("target_metric", "target_value")
                if self.target_value is None
                else ("target_value", "target_metric")
            )
            raise ConfigError(
                f"trainer.{other}",
                None,
                f"give it with trainer.{given}={getattr(self, given)} (a target is both)",
            )

    def target_direction(self) -> str:
        """``min`` (stop at or below the target) or ``max`` (at or above): ``target_mode``, else by the
        metric's name, as attnlab-report reads it (losses, perplexity and bits per byte fall)."""
        if self.target_mode is not None:
            return str(self.target_mode)
        return "min" if str(self.target_metric).rsplit("/", 1)[-1] in ("loss", "ppl", "bpb") else "max"


def process_count(trainer: TrainerConfig) -> int | None:
    """How many processes a run of ``trainer`` trains in (devices x nodes), or None where the machine
    decides (``devices=auto`` or -1)."""
    devices = trainer.devices
    if isinstance(devices, list):
        return len(devices) * trainer.num_nodes
    if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0:
        return devices * trainer.num_nodes
    return None


def devices_ok(devices: Any) -> bool:
    if devices in ("auto", -1) or (
        isinstance(devices, int) and not isinstance(devices, bool) and devices > 0
    ):
        return True
    return isinstance(devices, list) and bool(devices) and all(isinstance(d, int) and d >= 0 for d in devices)


def batches_ok(value: Any) -> bool:
    """A fraction in [0, 1] (a float) or a count of batches (an int)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return False
    return not (isinstance(value, float) and value > 1)


@dataclass
class WandbLoggerConfig:
    """Weights & Biases, offline unless ``mode=online`` (or ``$WANDB_MODE``): no account is needed."""

    _target_: str = "pytorch_lightning.loggers.WandbLogger"
    project: str = "attnlab"
    group: str | None = None  # None: one group per multirun (its sweep directory)
    name: str | None = None  # None: the run directory's name
    mode: WandbMode | None = None  # None: $WANDB_MODE, else offline


@dataclass
class CSVLoggerConfig:
    """Lightning's CSV logger: ``<run_dir>/<name>/metrics.csv``."""

    _target_: str = "pytorch_lightning.loggers.CSVLogger"
    name: str = "csv"


@dataclass
class TensorBoardLoggerConfig:
    """TensorBoard event files in ``<run_dir>/<name>/``."""

    _target_: str = "pytorch_lightning.loggers.TensorBoardLogger"
    name: str = "tensorboard"
    default_hp_metric: bool = False


@dataclass
class LoggerConfig:
    """The loggers that record the run, each instantiated from its ``_target_`` (null: not used); all
    write under the run directory (``attnlab.training.loggers.build_loggers`` adds where and the run's
    names). The ``logger`` group's options (wandb, csv, tensorboard, many, none) switch them."""

    wandb: WandbLoggerConfig | None = field(default_factory=WandbLoggerConfig)
    csv: CSVLoggerConfig | None = None
    tensorboard: TensorBoardLoggerConfig | None = None
    # The run's tags, for the loggers that take tags (wandb): outside a logger's config, so that an
    # experiment tags its runs whichever loggers are chosen.
    tags: list[str] = field(default_factory=list)


@dataclass
class CheckpointConfig:
    every_n_steps: int = 100  # writes checkpoints/last.ckpt
    save_top_k: int = 1  # best checkpoints by task.monitor, kept at each validation
    async_save: bool = True  # written by a background thread from a CPU copy (training goes on meanwhile)
    # trainer.strategy=fsdp2 only: each process writes its shards (a directory, torch.distributed.checkpoint)
    # instead of rank 0 gathering the whole state into one file
    sharded: bool = False

    def check(self) -> None:
        positive("checkpoint.every_n_steps", self.every_n_steps)
        if self.save_top_k < -1:
            raise ConfigError("checkpoint.save_top_k", self.save_top_k, "must be -1 (all), 0 or more")


@dataclass
class SampleConfig:
    """Text sampled from a trained causal LM at the end of training (0 new tokens: none)."""

    prompt: str = "The "
    max_new_tokens: int = 250
    temperature: float = 0.8
    top_k: int | None = 40

    def check(self) -> None:
        not_negative("sample.max_new_tokens", self.max_new_tokens)
        not_negative("sample.temperature", self.temperature)
        positive("sample.top_k", self.top_k, allow_none=True)


@dataclass
class RunConfig:
    """Everything one ``attnlab-train`` run needs. Hydra composes it from ``conf/train.yaml``; in Python,
    ``RunConfig()`` is what ``attnlab-train`` runs with no overrides."""

    model: ModelConfig = MISSING  # model=<preset>
    data: DataConfig = MISSING  # data=<preset>; each model preset picks its family's offline default
    task: TaskConfig = MISSING  # task=<name>; likewise
    optim: OptimConfig = MISSING  # optim=<name>
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    seed: int = 1337
    # a checkpoint to resume exactly, "last" (newest last.ckpt of run_dir), or "auto" (it if there
    # is one, else start fresh)
    ckpt_path: str | None = None
    run_dir: str = RUN_DIR  # the directory the run writes into; give an existing run's to resume in place
    # a run_dir holding another run (not continued with ckpt_path): refuse, or overwrite its files
    run_dir_exists: RunDirExists = RunDirExists.refuse
    # the run's name in wandb and TensorBoard; None: the overrides that distinguish it (its sweep's)
    run_name: str | None = None
    # torch.compile: true (the whole model), block (each transformer layer on its own), false; no gain
    # on a small CPU
    compile: Any = False
    print_config: bool = False  # print the resolved config as a tree at the start (config.yaml holds it)
    dry_run: bool = False  # validate everything a run would (data and checkpoints included), print the config, train nothing
    test_after_fit: bool = True  # evaluate the best checkpoint on the test split at the end
    # Lightning callbacks beside attnlab's own, by name: each {_target_: package.Class, its arguments}
    # (null: left out). The callbacks group adds some (callbacks=early_stopping); +callbacks.<name>={...}
    # adds any.
    callbacks: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        defaults = {"model": GPTConfig, "data": TextData, "task": CausalLMTask, "optim": AdamWConfig}
        for name, schema in defaults.items():
            if missing(getattr(self, name)):
                setattr(self, name, schema())

    def check(self) -> None:
        """Each group's own rules (the rules between groups are in ``attnlab.schema.checks``)."""
        for group in (
            self.model,
            self.data,
            self.task,
            self.optim,
            self.trainer,
            self.checkpoint,
            self.sample,
        ):
            group.check()
        not_negative("seed", self.seed)
        if self.compile not in COMPILE_MODES:
            raise ConfigError("compile", self.compile, "true (the whole model), block (each layer), or false")
        for name, callback in self.callbacks.items():
            if callback is not None and (not isinstance(callback, Mapping) or "_target_" not in callback):
                raise ConfigError(
                    f"callbacks.{name}", callback, "must be a mapping with a _target_ class path, or null"
                )
