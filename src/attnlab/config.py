"""Typed schemas for the configuration, and their validation; importable without torch.

The model schema here is what the builders in ``attnlab.models`` consume. ``RunConfig`` composes it
with the data, task and optimisation schemas and the trainer, logger and checkpoint settings;
``validate`` turns the DictConfig that Hydra composed from ``conf/`` into a RunConfig and checks the
rules between fields, before anything heavy is imported or written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from difflib import get_close_matches
from typing import Any, TypeVar

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from attnlab.data.schema import DataConfig, check_compatible, validate_data_config
from attnlab.tasks.schema import OptimConfig, TaskConfig, validate_optim_config, validate_task_config

FAMILIES = ("gpt", "bert", "seq2seq", "vit")
POSITIONAL_ENCODINGS = ("none", "sinusoidal", "learned", "rope", "alibi", "relative")
# Mirrors of the names the torch modules accept (tests/train/test_config.py keeps them in step).
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu", "geglu_tanh")
NORMS = ("layernorm", "rmsnorm")
POOLINGS = ("cls", "mean", "max")
ACCELERATORS = ("cpu", "gpu", "cuda", "mps", "auto")
STRATEGIES = ("auto", "ddp", "fsdp")
PRECISIONS = ("32", "bf16-mixed", "16-mixed")
PROFILERS = ("simple", "advanced", "pytorch")
LOGGERS = ("wandb", "csv", "tensorboard")
WANDB_MODES = ("offline", "online", "disabled")
T = TypeVar("T")


@dataclass
class PosConfig:
    """Positional encoding: ``name`` plus the parameters of the kinds that have any."""

    name: str = "learned"
    rope_base: float = 10000.0
    num_buckets: int = 32
    max_distance: int = 128
    layout: str = "interleaved"


@dataclass
class ModelConfig:
    """One schema for every family; fields a family does not use are ignored by its builder."""

    family: str = "gpt"
    vocab_size: int = 0  # 0: taken from the data's tokenizer at build time
    d_model: int = 128
    n_layers: int = 4
    n_decoder_layers: int | None = None  # seq2seq; None: same as n_layers
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: n_heads (grouped-query when smaller)
    d_ff: int | None = None  # None: ffn_mult * d_model
    ffn_mult: float = 4.0
    activation: str = "gelu"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    norm_first: bool = True  # pre-norm; False is the original paper's post-norm
    norm_bias: bool = True
    final_norm: bool | None = None  # None: a final norm exactly when norm_first
    embed_norm: bool = False  # norm after the embeddings (BERT, BLOOM)
    bias: bool = True  # biases on attention and feed-forward projections
    dropout: float = 0.1
    attn_dropout: float = 0.0
    ffn_dropout: float = 0.0
    attn_scale: float | None = None  # None: 1/sqrt(head_dim)
    max_seq_len: int = 256
    tie_embeddings: bool = True
    embed_scale: bool = False  # multiply token embeddings by sqrt(d_model)
    share_embeddings: bool = True  # seq2seq: one table for source and target
    lm_head_bias: bool = False
    tied_output_scale: bool = False  # T5: hidden * d_model**-0.5 before a tied output projection
    type_vocab_size: int = 0  # >0 adds segment embeddings (BERT's token types)
    mlm_head: bool = True  # encoder: build the masked-LM head
    num_classes: int = 0  # >0 builds a classification head
    pooling: str = "cls"
    classifier_hidden: bool = False  # BERT's pooler (dense + tanh) before the classifier
    image_size: int = 32
    patch_size: int = 4
    channels: int = 3
    init_std: float = 0.02
    init_from: str | None = None  # a local Hugging Face checkpoint directory
    pos: PosConfig = field(default_factory=PosConfig)


@dataclass
class TrainerConfig:
    """Lightning Trainer settings; intervals count optimizer steps (not micro-batches)."""

    accelerator: str = "cpu"
    devices: Any = 1  # a count, -1 or "auto" for all, or a list of device ids
    num_nodes: int = 1
    strategy: str = "auto"  # auto | ddp | fsdp
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
    profiler: str | None = None  # simple | advanced | pytorch


@dataclass
class LoggerConfig:
    """Which loggers record the run; all write under the run directory."""

    names: list[str] = field(default_factory=lambda: ["wandb"])  # wandb, csv, tensorboard; [] for none
    project: str = "attnlab"
    group: str | None = None  # None: one group per multirun (its sweep directory)
    run_name: str | None = None  # None: the run directory's name
    mode: str | None = None  # wandb: offline | online | disabled; None: $WANDB_MODE, else offline
    tags: list[str] = field(default_factory=list)


@dataclass
class CheckpointConfig:
    every_n_steps: int = 100  # writes checkpoints/last.ckpt
    save_top_k: int = 1  # best checkpoints by task.monitor, kept at each validation


@dataclass
class SampleConfig:
    """Text sampled from a trained causal LM at the end of training (0 new tokens: none)."""

    prompt: str = "The "
    max_new_tokens: int = 250
    temperature: float = 0.8
    top_k: int | None = 40


@dataclass
class RunConfig:
    """Everything one ``attnlab-train`` run needs; ``conf/train.yaml`` is its default."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    seed: int = 1337
    ckpt_path: str | None = None  # a checkpoint to resume exactly, or "last" (newest last.ckpt of run_dir)
    run_dir: str | None = None  # write into this directory; None: outputs/<date>/<time>
    compile: bool = False  # torch.compile the model
    test_after_fit: bool = True  # evaluate the best checkpoint on the test split
    callbacks: list[Any] = field(default_factory=list)  # extra Lightning callbacks as {_target_: ...}


@dataclass
class EvalConfig:
    """What ``attnlab-eval`` needs; ``conf/eval.yaml`` is its default."""

    ckpt_path: str = MISSING  # a checkpoint written by attnlab-train
    split: str = "test"  # test | val
    batch_size: int | None = None  # None: the run's data.batch_size
    limit_batches: Any = None  # None: the run's trainer.limit_<split>_batches (as its end-of-training test)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


class ConfigError(ValueError):
    """A bad configuration value: ``str()`` is one line, ``key=value: what is allowed``."""

    def __init__(self, key: str, value: object, allowed: str) -> None:
        super().__init__(f"{key}={_show(value)}: {allowed}")
        self.key = key


def _show(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_show(v) for v in value) + "]"
    return "null" if value is None else str(value)


def validate(cfg: DictConfig | Mapping) -> RunConfig:
    """The typed RunConfig of a composed config; ConfigError (one line) at the first bad value."""
    run = typed(cfg, RunConfig)
    check_model(run.model)
    check_run(run)
    return run


def typed(cfg: DictConfig | Mapping, schema: type[T]) -> T:
    """``cfg`` merged into the dataclass ``schema``: wrong types, unknown keys and missing values become
    ConfigError. A ``hydra`` node (Hydra's own settings) is left out."""
    if isinstance(cfg, DictConfig):  # plain values: a typed node that "+key=" opened must not hide the key
        cfg = OmegaConf.to_container(cfg, resolve=False)
    cfg = {k: v for k, v in cfg.items() if k != "hydra"}
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), cfg))
    except OmegaConfBaseException as err:
        value = "?"
        if err.full_key:
            value = OmegaConf.select(
                OmegaConf.create(cfg), err.full_key, default="?", throw_on_resolution_failure=False
            )
        raise config_error(err, value, schema) from None


def config_error(err: OmegaConfBaseException, value: object, schema: type | None) -> ConfigError:
    """One line from OmegaConf's multi-line message about ``value``: the key, the value, what is allowed."""
    key = err.full_key or "config"
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
    if isinstance(err, MissingMandatoryValue):
        return ConfigError(key, "???", "a value is required")
    if isinstance(err, ConfigKeyError | ConfigAttributeError):
        *path, name = key.split(".")
        parent = OmegaConf.structured(schema) if schema is not None else OmegaConf.create()
        node = OmegaConf.select(parent, ".".join(path)) if path else parent
        known = list(node) if isinstance(node, DictConfig) else []
        close = get_close_matches(name, known, n=1)
        if close:
            return ConfigError(key, value, f"not a known key; did you mean {'.'.join([*path, close[0]])}?")
        return ConfigError(
            key, value, f"not a known key; allowed keys: {', '.join(known)}" if known else "not a known key"
        )
    return ConfigError(key, value, str(err).splitlines()[0])


def _positive(key: str, value: float | None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ConfigError(key, value, "must be positive")


def _choice(key: str, value: object, allowed: Iterable[object]) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(key, value, f"choose one of {', '.join(_show(a) for a in allowed)}")


def _fraction(key: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ConfigError(key, value, "must be in [0, 1)")


def check_model(m: ModelConfig) -> None:
    """Sizes, names and divisibility rules of a ModelConfig (what the builders would reject later)."""
    _choice("model.family", m.family, FAMILIES)
    for name in ("d_model", "n_layers", "n_heads", "ffn_mult", "max_seq_len", "norm_eps", "init_std"):
        _positive(f"model.{name}", getattr(m, name))
    for name in ("n_decoder_layers", "n_kv_heads", "d_ff", "attn_scale"):
        _positive(f"model.{name}", getattr(m, name), allow_none=True)
    for name in ("vocab_size", "num_classes", "type_vocab_size"):
        if getattr(m, name) < 0:
            raise ConfigError(f"model.{name}", getattr(m, name), "must be 0 or more")
    if m.d_model % m.n_heads:
        raise ConfigError("model.d_model", m.d_model, f"must be divisible by model.n_heads={m.n_heads}")
    if m.n_kv_heads is not None and m.n_heads % m.n_kv_heads:
        raise ConfigError("model.n_kv_heads", m.n_kv_heads, f"must divide model.n_heads={m.n_heads}")
    for name in ("dropout", "attn_dropout", "ffn_dropout"):
        _fraction(f"model.{name}", getattr(m, name))
    _choice("model.activation", m.activation, ACTIVATIONS)
    _choice("model.norm", m.norm, NORMS)
    _choice("model.pooling", m.pooling, POOLINGS)
    check_pos(m)
    if m.family == "vit":
        for name in ("image_size", "patch_size", "channels"):
            _positive(f"model.{name}", getattr(m, name))
        if m.image_size % m.patch_size:
            raise ConfigError(
                "model.image_size",
                m.image_size,
                f"must be divisible into patches of model.patch_size={m.patch_size}",
            )


def check_pos(m: ModelConfig) -> None:
    p = m.pos
    _choice("model.pos.name", p.name, POSITIONAL_ENCODINGS)
    _choice("model.pos.layout", p.layout, ("interleaved", "concat"))
    if p.name == "rope" and (m.d_model // m.n_heads) % 2:
        raise ConfigError(
            "model.pos.name",
            p.name,
            f"rope needs an even head size, d_model/n_heads={m.d_model // m.n_heads}",
        )
    if p.name == "sinusoidal" and m.d_model % 2:
        raise ConfigError(
            "model.pos.name", p.name, f"sinusoidal needs an even model.d_model, got {m.d_model}"
        )
    if p.name == "relative":
        _positive("model.pos.num_buckets", p.num_buckets)
        _positive("model.pos.max_distance", p.max_distance)
    _positive("model.pos.rope_base", p.rope_base)


def check_run(run: RunConfig) -> None:
    """Rules between groups: family, task and data agree; sequences fit the model; trainer settings."""
    try:
        validate_task_config(run.task, run.model.family)
        validate_optim_config(run.optim)
        validate_data_config(run.data)
        check_compatible(run.model.family, run.task.name, run.data.kind)
    except ConfigError:
        raise
    except ValueError as err:  # the data and task schemas' own one-line messages
        raise ConfigError(*_split_message(str(err))) from None
    m, data = run.model, run.data
    if m.pos.name == "learned" and m.family != "vit" and data.seq_len > m.max_seq_len:
        raise ConfigError(
            "data.seq_len",
            data.seq_len,
            f"must be at most model.max_seq_len={m.max_seq_len} with pos=learned",
        )
    if m.family == "vit" and data.image_size is not None and data.image_size != m.image_size:
        raise ConfigError(
            "data.image_size", data.image_size, f"must equal model.image_size={m.image_size} (or null)"
        )
    check_trainer(run.trainer)
    check_logger(run.logger)
    _positive("checkpoint.every_n_steps", run.checkpoint.every_n_steps)
    if run.checkpoint.save_top_k < -1:
        raise ConfigError("checkpoint.save_top_k", run.checkpoint.save_top_k, "must be -1 (all), 0 or more")
    if run.seed < 0:
        raise ConfigError("seed", run.seed, "must be 0 or more")
    if run.sample.max_new_tokens < 0 or run.sample.temperature < 0:
        raise ConfigError("sample", asdict(run.sample), "max_new_tokens and temperature must be 0 or more")
    for i, callback in enumerate(run.callbacks):
        if not isinstance(callback, Mapping) or "_target_" not in callback:
            raise ConfigError(f"callbacks[{i}]", callback, "must be a mapping with a _target_ class path")


def _split_message(message: str) -> tuple[str, str, str]:
    """``key=value rest`` of another schema's message as ConfigError's (key, value, allowed)."""
    head, _, rest = message.partition(" ")
    key, sep, value = head.partition("=")
    if not sep:
        return "config", "?", message
    return key, value.rstrip(":;,").strip("'\""), rest.lstrip(":; ") or "not allowed"


def check_trainer(t: TrainerConfig) -> None:
    _choice("trainer.accelerator", t.accelerator, ACCELERATORS)
    _choice("trainer.strategy", t.strategy, STRATEGIES)
    _choice("trainer.precision", t.precision, PRECISIONS)
    devices = t.devices
    ok = (
        devices in ("auto", -1)
        or (isinstance(devices, int) and devices > 0)
        or (isinstance(devices, list) and devices and all(isinstance(d, int) and d >= 0 for d in devices))
    )
    if not ok:
        raise ConfigError(
            "trainer.devices", devices, "a positive count, -1 or auto (all), or a list of device ids"
        )
    for name in (
        "num_nodes",
        "max_steps",
        "val_every_n_steps",
        "accumulate_grad_batches",
        "log_every_n_steps",
    ):
        _positive(f"trainer.{name}", getattr(t, name))
    for name in ("limit_val_batches", "limit_test_batches", "overfit_batches"):
        value = getattr(t, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or value < 0
            or (isinstance(value, float) and value > 1)
        ):
            raise ConfigError(
                f"trainer.{name}", value, "a fraction in [0.0, 1.0] or a count of batches (integer)"
            )
    if t.gradient_clip_val is not None and t.gradient_clip_val < 0:
        raise ConfigError(
            "trainer.gradient_clip_val", t.gradient_clip_val, "must be 0 or more, or null (no clipping)"
        )
    for name in ("num_sanity_val_steps", "fast_dev_run"):
        if getattr(t, name) < 0:
            raise ConfigError(f"trainer.{name}", getattr(t, name), "must be 0 or more")
    if t.profiler is not None:
        _choice("trainer.profiler", t.profiler, PROFILERS)


def check_logger(lg: LoggerConfig) -> None:
    for name in lg.names:
        _choice("logger.names", name, LOGGERS)
    if lg.mode is not None:
        _choice("logger.mode", lg.mode, WANDB_MODES)


# Fields a run may set freely on top of a pretrained checkpoint (model.init_from): regularisation and heads.
FREE_MODEL_FIELDS = (
    "dropout",
    "attn_dropout",
    "ffn_dropout",
    "num_classes",
    "mlm_head",
    "pooling",
    "classifier_hidden",
    "init_from",
    "init_std",
)


def resolve_init_from(run: RunConfig, explicit: Iterable[str] = ()) -> RunConfig:
    """With ``model.init_from``: the model config of that Hugging Face checkpoint (family and sizes),
    plus the free fields the run set. ``explicit`` names the model fields the user chose (``family``
    for ``model=<preset>``); one that contradicts the checkpoint is a ConfigError.
    """
    path = run.model.init_from
    if not path:
        return run
    from attnlab.models.hf import model_config_from_hf  # needs torch: only when init_from is used

    try:
        pretrained = model_config_from_hf(path)
    except (OSError, ValueError) as err:
        raise ConfigError("model.init_from", path, str(err).splitlines()[0]) from None
    ours, theirs = _flat(asdict(run.model)), _flat(asdict(pretrained))
    for key in explicit:
        if key.split(".")[0] not in FREE_MODEL_FIELDS and key in theirs and ours[key] != theirs[key]:
            raise ConfigError(
                f"model.{key}",
                ours[key],
                f"contradicts the checkpoint model.init_from={path}, which has "
                f"{key}={_show(theirs[key])}; leave it out to take the checkpoint's",
            )
    free = {k: getattr(run.model, k) for k in FREE_MODEL_FIELDS if k in explicit or k == "init_from"}
    run = replace(run, model=replace(pretrained, **free))
    check_model(run.model)
    check_run(run)
    return run


def _flat(d: Mapping, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
