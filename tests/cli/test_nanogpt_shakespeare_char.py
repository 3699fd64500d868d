"""experiment=nanogpt_shakespeare_char is nanoGPT's config/train_shakespeare_char.py: every setting of
nanoGPT's recipe (written out below, from nanoGPT's config file and train.py's defaults) against the
composed preset, nanoGPT's dropout placement in the built model, its learning-rate schedule, and one
tiny CPU run of the preset through attnlab-train's own ``train``."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from attnlab.cli.train import train
from attnlab.models import build_model
from attnlab.run.configs import register_schemas
from attnlab.run.presets import config_dir
from attnlab.schema.checks import validate
from attnlab.schema.load import to_object
from attnlab.schema.run import RunConfig
from attnlab.tasks.optim import build_schedule

# nanoGPT's config/train_shakespeare_char.py, with train.py's defaults where the config keeps them.
NANOGPT = {
    "n_layer": 6,
    "n_head": 6,
    "n_embd": 384,
    "block_size": 256,
    "batch_size": 64,
    "dropout": 0.2,
    "bias": False,  # train.py's default
    "learning_rate": 1e-3,
    "max_iters": 5000,
    "lr_decay_iters": 5000,
    "min_lr": 1e-4,
    "warmup_iters": 100,
    "beta1": 0.9,  # train.py's default
    "beta2": 0.99,
    "weight_decay": 1e-1,  # train.py's default, on every tensor of 2+ dimensions
    "grad_clip": 1.0,  # train.py's default
    "eval_interval": 250,
    "eval_iters": 200,
    "compile": True,  # train.py's default
    "seed": 1337,  # train.py: torch.manual_seed(1337 + seed_offset)
}
VOCAB = 65  # the characters of Tiny Shakespeare (nanoGPT's meta.pkl)
PRESET = "experiment=nanogpt_shakespeare_char"


@functools.cache
def composed(*overrides: str) -> DictConfig:
    """The preset with ``overrides``, composed as attnlab-train does (once per set of overrides)."""
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("train", overrides=[PRESET, *overrides])


def run_config(*overrides: str) -> RunConfig:
    return to_object(composed(*overrides))


def nanogpt_lr(it: int) -> float:
    """nanoGPT's get_lr (train.py): linear warm-up, then cosine down to min_lr at lr_decay_iters."""
    lr, warmup, decay_iters, min_lr = (
        NANOGPT[k] for k in ("learning_rate", "warmup_iters", "lr_decay_iters", "min_lr")
    )
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    ratio = (it - warmup) / (decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def test_the_preset_holds_each_setting_of_nanogpts_config() -> None:
    run = run_config()
    model, data, optim, trainer = run.model, run.data, run.optim, run.trainer
    assert (model.family, model.pos.name) == ("gpt", "learned")
    assert (model.n_layers, model.n_heads, model.d_model) == (
        NANOGPT["n_layer"],
        NANOGPT["n_head"],
        NANOGPT["n_embd"],
    )
    assert (data.seq_len, model.max_seq_len, data.batch_size) == (
        NANOGPT["block_size"],
        NANOGPT["block_size"],
        NANOGPT["batch_size"],
    )
    assert (model.bias, model.norm_bias, model.tie_embeddings) == (NANOGPT["bias"], NANOGPT["bias"], True)
    assert (model.dropout, model.attn_dropout, model.ffn_dropout) == (
        NANOGPT["dropout"],
        NANOGPT["dropout"],
        0,
    )
    assert (optim.name, optim.lr, optim.betas) == (
        "adamw",
        NANOGPT["learning_rate"],
        [NANOGPT["beta1"], NANOGPT["beta2"]],
    )
    assert (optim.weight_decay, optim.decay) == (NANOGPT["weight_decay"], "matrices_and_embeddings")
    assert (optim.schedule, optim.warmup_steps) == ("cosine", NANOGPT["warmup_iters"])
    assert optim.lr * optim.min_lr_ratio == pytest.approx(NANOGPT["min_lr"])
    assert (trainer.max_steps, optim.max_steps or trainer.max_steps) == (
        NANOGPT["max_iters"],
        NANOGPT["lr_decay_iters"],
    )
    assert (trainer.gradient_clip_val, trainer.val_every_n_steps, trainer.limit_val_batches) == (
        NANOGPT["grad_clip"],
        NANOGPT["eval_interval"],
        NANOGPT["eval_iters"],
    )
    assert (run.compile, run.seed) == (NANOGPT["compile"], NANOGPT["seed"])
    assert (data.kind, data.tokenizer, data.val_fraction, data.test_fraction) == ("text", "char", 0.1, 0.0)
    assert run.test_after_fit is False
    gpu = run_config("trainer=gpu").trainer
    assert gpu.precision == "bf16-mixed"  # nanoGPT's dtype on a GPU that has bfloat16


def test_dropout_sits_where_nanogpt_puts_it_and_the_size_is_nanogpts() -> None:
    """nanoGPT: dropout after wte + wpe, on the attention probabilities, after the attention's c_proj
    (resid_dropout) and after the MLP's c_proj; none between the MLP's two linears."""
    cfg = run_config().model
    cfg.vocab_size = VOCAB
    model = build_model(cfg)
    assert model.embed.dropout.p == NANOGPT["dropout"]
    for layer in model.stack.layers:
        assert layer.self_attn.fn.dropout == NANOGPT["dropout"]  # SDPA's dropout_p on the probabilities
        assert layer.self_attn.dropout.p == NANOGPT["dropout"]  # after the output projection
        assert layer.ffn.dropout.p == NANOGPT["dropout"]  # after the MLP's output projection
        assert layer.ffn.fn.dropout.p == 0.0
    d, layers, block = NANOGPT["n_embd"], NANOGPT["n_layer"], NANOGPT["block_size"]
    nanogpt_params = (VOCAB + block) * d + layers * (12 * d * d + 2 * d) + d  # wte, wpe, blocks, ln_f
    assert sum(p.numel() for p in model.parameters()) == nanogpt_params  # 10,745,088; nanoGPT prints 10.65M


def test_the_learning_rate_follows_nanogpts_get_lr() -> None:
    """Equal from the end of warm-up on; during warm-up nanoGPT divides by warmup_iters + 1, attnlab by
    warmup_iters, so attnlab's rate is 1% higher there (101/100, the first 100 of 5,000 steps)."""
    run = run_config()
    schedule = build_schedule(run.optim, run.trainer.max_steps, run.model.d_model)
    warmup = NANOGPT["warmup_iters"]
    for step in range(run.trainer.max_steps + 1):
        ours, theirs = run.optim.lr * schedule(step), nanogpt_lr(step)
        expected = theirs * (warmup + 1) / warmup if step < warmup else theirs
        assert ours == pytest.approx(expected, rel=1e-9, abs=1e-15), step


def test_a_tiny_cpu_run_of_the_preset_trains_and_validates(tmp_path: Path) -> None:
    """The preset with a tiny model and budget trains on the CPU, dropout in the attention included
    (CPU SDPA takes dropout_p > 0), and records its best validation loss."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 200)
    run = validate(
        composed(
            f"data.path={corpus}",
            "compile=false",
            "model.n_layers=1",
            "model.n_heads=2",
            "model.d_model=16",
            "data.seq_len=16",
            "data.batch_size=4",
            "trainer.max_steps=2",
            "trainer.val_every_n_steps=2",
            "trainer.limit_val_batches=1",
            "checkpoint.every_n_steps=2",
            "trainer.enable_progress_bar=false",
            "sample.max_new_tokens=0",
            "logger=none",
        )
    )
    assert (run.model.dropout, run.model.attn_dropout) == (0.2, 0.2)
    best = train(run, tmp_path / "run")
    assert 0 < best < math.log(VOCAB)  # two steps down from a uniform guess over the characters
    saved = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert saved["step"] == 2
