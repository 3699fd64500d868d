"""The rules of a run's config: sizes, names and the rules between groups (torch-free).

``validate`` turns the DictConfig that Hydra composed from ``conf/`` into a RunConfig and checks it,
before anything heavy is imported or any directory is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict

from omegaconf import DictConfig

from attnlab.schema.data import check_compatible, validate_data_config
from attnlab.schema.errors import ConfigError, show
from attnlab.schema.model import ACTIVATIONS, FAMILIES, NORMS, POOLINGS, POSITIONAL_ENCODINGS, ModelConfig
from attnlab.schema.run import (
    ACCELERATORS,
    LOGGERS,
    PRECISIONS,
    PROFILERS,
    STRATEGIES,
    WANDB_MODES,
    LoggerConfig,
    RunConfig,
    TrainerConfig,
)
from attnlab.schema.task import validate_optim_config, validate_task_config
from attnlab.schema.typed import typed


def validate(cfg: DictConfig | Mapping) -> RunConfig:
    """The typed RunConfig of a composed config; ConfigError (one line) at the first bad value."""
    run = typed(cfg, RunConfig)
    check_model(run.model)
    check_run(run)
    return run


def _positive(key: str, value: float | None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ConfigError(key, value, "must be positive")


def _choice(key: str, value: object, allowed: Iterable[object]) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(key, value, f"choose one of {', '.join(show(a) for a in allowed)}")


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
        for name in ("image_size", "patch_size"):
            _positive(f"model.{name}", getattr(m, name))
        if m.channels not in (0, 1, 3):
            raise ConfigError("model.channels", m.channels, "choose 1 (grey), 3 (RGB) or 0 (from the data)")
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
