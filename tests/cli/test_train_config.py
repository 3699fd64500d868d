"""Composition of the Hydra groups and the typed validation, in-process (no training)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig

from attnlab.run.bad_input import one_line
from attnlab.run.configs import register_schemas
from attnlab.run.presets import config_dir
from attnlab.run.pretrained import explicit_model_keys, resolve_init_from
from attnlab.schema.checks import validate
from attnlab.schema.errors import ConfigError
from attnlab.schema.model import Activation
from attnlab.schema.run import RunConfig
from attnlab.training.rundir import resolve_ckpt_path


def composed(*overrides: str) -> DictConfig:
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def run_config(*overrides: str) -> RunConfig:
    return validate(composed(*overrides))


def test_every_activation_of_the_schema_has_a_module() -> None:
    from attnlab.blocks.ffn import ACTIVATIONS, GATED

    assert set(ACTIVATIONS) | set(GATED) == set(Activation)
    assert not set(ACTIVATIONS) & set(GATED)


@pytest.mark.parametrize(
    ("model", "task", "kind"),
    [
        ("gpt", "causal_lm", "text"),
        ("bert", "classification", "listops"),
        ("seq2seq", "seq2seq", "dates"),
        ("vit", "classification", "digits"),
        ("gpt-tiny", "causal_lm", "text"),
        ("transformer-base", "seq2seq", "dates"),
        ("bert-base", "classification", "listops"),
        ("vit-b16", "classification", "digits"),
    ],
)
def test_a_family_alone_picks_its_task_and_offline_data(model: str, task: str, kind: str) -> None:
    run = run_config(f"model={model}")
    assert (run.task.name, run.data.kind) == (task, kind)


def test_the_named_presets_have_the_published_sizes() -> None:
    base = run_config("model=transformer-base").model
    assert (base.n_layers, base.n_decoder_layers, base.d_model, base.n_heads, base.d_ff) == (
        6,
        6,
        512,
        8,
        2048,
    )
    assert (base.pos.name, base.norm_first, base.activation) == ("sinusoidal", False, "relu")
    gpt2 = run_config("model=gpt2-small").model
    assert (gpt2.n_layers, gpt2.n_heads, gpt2.d_model, gpt2.max_seq_len) == (12, 12, 768, 1024)
    bert = run_config("model=bert-base").model
    assert (bert.n_layers, bert.d_model, bert.d_ff, bert.norm_first, bert.type_vocab_size) == (
        12,
        768,
        3072,
        False,
        2,
    )
    vit = run_config("model=vit-b16").model
    assert (vit.image_size, vit.patch_size, vit.channels, vit.d_model, vit.n_layers) == (224, 16, 3, 768, 12)


def test_command_line_data_and_task_win_over_the_family_defaults() -> None:
    run = run_config("model=bert", "task=mlm", "data=text")
    assert (run.task.name, run.data.kind) == ("mlm", "text")
    assert run_config("model=seq2seq", "data=numbers").data.kind == "numbers"


def test_text_stays_the_gpt_default_beside_token_shards() -> None:
    """data=tokens is chosen, never the default: a gpt run without data= reads the small text corpus."""
    for model in ("gpt", "gpt-tiny", "gpt2-small"):
        assert run_config(f"model={model}").data.kind == "text", model


def test_experiments_combine_with_the_command_line() -> None:
    run = run_config("experiment=vit_digits")
    assert (run.model.family, run.data.kind, run.trainer.max_steps) == ("vit", "digits", 1000)
    run = run_config("experiment=bert_listops", "model.n_layers=2", "trainer.max_steps=7", "pos=rope")
    assert (run.model.family, run.model.n_layers, run.trainer.max_steps, run.model.pos.name) == (
        "bert",
        2,
        7,
        "rope",
    )
    run = run_config("experiment=seq2seq_dates", "data=reverse")
    assert (run.model.family, run.data.kind) == ("seq2seq", "reverse")


@pytest.mark.parametrize("model", ["gpt", "bert", "seq2seq", "vit", "transformer-base"])
def test_pos_switches_the_encoding_of_any_family(model: str) -> None:
    assert run_config(f"model={model}", "pos=rope").model.pos.name == "rope"
    relative = run_config(f"model={model}", "pos=relative").model.pos
    assert (relative.name, relative.num_buckets, relative.max_distance) == ("relative", 32, 128)


@pytest.mark.parametrize("pos", ["none", "sinusoidal", "learned", "alibi"])
def test_every_positional_encoding_is_a_pos_choice(pos: str) -> None:
    assert run_config("model=gpt-tiny", f"pos={pos}").model.pos.name == pos


def test_values_are_typed_and_checked() -> None:
    run = run_config("trainer.precision=bf16-mixed", "model.n_kv_heads=2", "trainer.limit_val_batches=3")
    assert (run.trainer.precision, run.model.n_kv_heads, run.trainer.limit_val_batches) == (
        "bf16-mixed",
        2,
        3,
    )
    assert run_config().trainer.precision == "32"  # the YAML's integer 32, as the string Lightning takes
    with pytest.raises(ConfigError, match=r"^trainer.limit_val_batches=1.5: a fraction in \[0.0, 1.0\]"):
        run_config("trainer.limit_val_batches=1.5")
    with pytest.raises(ConfigError, match=r"^model.n_decoder_layers=0: must be positive$"):
        run_config("model=seq2seq", "model.n_decoder_layers=0")
    with pytest.raises(ConfigError, match=r"^model.pos.name=rope: rope needs an even head size"):
        run_config("model.d_model=12", "model.n_heads=4", "pos=rope")


def hydra_error(*overrides: str) -> str:
    """The one line that attnlab-train prints for overrides that Hydra or OmegaConf refuses."""
    with pytest.raises(HydraException) as info:
        composed(*overrides)
    return one_line(info.value, list(overrides))


def test_rope_scaling_is_a_rope_setting_checked_in_one_line() -> None:
    pos = run_config("pos=rope", "model.pos.rope_scaling=yarn", "model.pos.rope_factor=8").model.pos
    assert (pos.rope_scaling, pos.rope_factor, pos.rope_original_max_len) == ("yarn", 8.0, None)
    assert hydra_error("pos=alibi", "model.pos.rope_scaling=ntk") == (
        "model.pos.rope_scaling=ntk: not a key of model.pos.name=alibi; "
        "it is a key of model.pos.name=rope (choose it with pos=rope)"
    )
    assert hydra_error("pos=rope", "model.pos.rope_scaling=llama3") == (
        "model.pos.rope_scaling=llama3: choose one of none, linear, ntk, yarn"
    )
    with pytest.raises(
        ConfigError, match=r"^model.pos.rope_factor=0.5: must be at least 1 \(1: no stretch\)$"
    ):
        run_config("pos=rope", "model.pos.rope_scaling=linear", "model.pos.rope_factor=0.5")
    with pytest.raises(
        ConfigError, match=r"^model.pos.rope_beta_fast=0.5: must be at least model.pos.rope_beta_slow=1.0$"
    ):
        run_config(
            "pos=rope",
            "model.pos.rope_scaling=yarn",
            "model.pos.rope_factor=2",
            "model.pos.rope_beta_fast=0.5",
        )


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("false", False), ("auto", "auto")])
def test_embed_scale_is_true_false_or_auto_from_the_command_line(value: str, expected: object) -> None:
    assert run_config(f"model.embed_scale={value}").model.embed_scale == expected


def test_embed_scale_defaults_to_auto_except_for_seq2seq() -> None:
    assert run_config("model=gpt").model.embed_scale == "auto"
    assert run_config("model=seq2seq").model.embed_scale is True
    with pytest.raises(ConfigError, match=r"^model.embed_scale=maybe: choose true, false or auto$"):
        run_config("model.embed_scale=maybe")


def test_a_hydra_error_becomes_one_line() -> None:
    with pytest.raises(HydraException) as info:
        composed("model.d_model=abc")
    assert (
        one_line(info.value, ["model.d_model=abc"])
        == "model.d_model=abc: Value 'abc' of type 'str' could not be converted to Integer"
    )


def test_explicit_model_keys() -> None:
    keys = explicit_model_keys(
        ["model=bert", "model.n_layers=2", "+model.pos.rope_base=5", "pos=rope", "seed=1"]
    )
    assert keys == {"family", "n_layers", "pos.rope_base", "pos.name"}


def test_ckpt_path_last_is_the_newest_last_checkpoint(tmp_path: Path) -> None:
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    for i, name in enumerate(["last-v1.ckpt", "last.ckpt", "best-step000010.ckpt"]):
        (ckpts / name).write_bytes(b"x")
        os.utime(ckpts / name, (1000 + i, 1000 + i))
    os.utime(ckpts / "last-v1.ckpt", (5000, 5000))
    assert resolve_ckpt_path("last", tmp_path) == str((ckpts / "last-v1.ckpt").resolve())
    with pytest.raises(ConfigError, match=r"^ckpt_path=last: no checkpoints/last\.ckpt in"):
        resolve_ckpt_path("last", tmp_path / "elsewhere")


def test_ckpt_path_auto_resumes_the_last_checkpoint_if_there_is_one(tmp_path: Path) -> None:
    """``auto``: a fresh run directory starts fresh; once a last checkpoint exists, it is resumed."""
    assert resolve_ckpt_path("auto", tmp_path) is None
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best-step000010.ckpt").write_bytes(b"x")
    assert resolve_ckpt_path("auto", tmp_path) is None
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert resolve_ckpt_path("auto", tmp_path) == str((tmp_path / "checkpoints" / "last.ckpt").resolve())


def test_the_slurm_launcher_composes() -> None:
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose(
            "train", ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"], return_hydra_config=True
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.partition, launcher.tasks_per_node, launcher.nodes) == ("gpu", 1, 1)
    assert launcher.max_num_timeout == 3  # submitit requeues a job that reaches its time limit


GPT2_CONFIG = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": 90,
    "n_embd": 32,
    "n_layer": 2,
    "n_head": 2,
    "n_positions": 64,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
}


def test_init_from_takes_family_and_sizes_from_the_checkpoint(tmp_path: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    settings = {k: v for k, v in GPT2_CONFIG.items() if k != "model_type"}
    GPT2LMHeadModel(GPT2Config(**settings)).save_pretrained(tmp_path)  # config.json and its weights
    overrides = [f"model.init_from={tmp_path}", "data.seq_len=64", "model.dropout=0.0"]
    run = resolve_init_from(run_config(*overrides), explicit_model_keys(overrides))
    m = run.model
    assert (m.family, m.d_model, m.n_layers, m.n_heads, m.vocab_size, m.max_seq_len) == (
        "gpt",
        32,
        2,
        2,
        90,
        64,
    )
    assert (m.activation, m.dropout, m.init_from) == ("gelu_tanh", 0.0, str(tmp_path))
    with pytest.raises(ConfigError, match=r"^model.n_layers=4: contradicts the checkpoint model.init_from="):
        resolve_init_from(run_config(*overrides, "model.n_layers=4"), {"n_layers"})
    with pytest.raises(ConfigError, match=r"^data.seq_len=128: must be at most model.max_seq_len=64"):
        resolve_init_from(run_config(f"model.init_from={tmp_path}"), set())
    with pytest.raises(ConfigError, match=r"^model.init_from=.*nowhere: Hugging Face checkpoint directory"):
        resolve_init_from(run_config(f"model.init_from={tmp_path / 'nowhere'}"), set())


def test_attention_maps_are_logged_only_when_asked(tmp_path: Path) -> None:
    from attnlab.training.callbacks import AttentionMapLogger, build_callbacks

    def loggers_of(*overrides: str) -> list:
        callbacks = build_callbacks(run_config(*overrides), tmp_path, {}, "id")
        return [c for c in callbacks if isinstance(c, AttentionMapLogger)]

    assert loggers_of() == []
    (logger,) = loggers_of("task.log_attention_every_n_epochs=2")
    assert logger.every_n_epochs == 2
    assert logger.save_dir == tmp_path / "attention"
