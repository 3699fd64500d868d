"""Bits per byte (``val/bpb``, ``test/bpb``): a causal LM's loss in bits per UTF-8 byte of the text its
scored tokens cover, comparable across tokenizers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from attnlab.data import build_datamodule
from attnlab.data.module import AttnlabDataModule
from attnlab.schema.data import data_config
from attnlab.schema.model import model_config
from attnlab.schema.optim import AdamWConfig
from attnlab.schema.task import CausalLMTask, task_config
from attnlab.tasks import build_task

ASCII = "".join(f"line {i}: the cat sat on mat number {i % 7}.\n" for i in range(200))
MULTIBYTE = "".join(f"line {i}: café — déjà vu, 日本 {i % 7}.\n" for i in range(200))


def text_module(tmp_path: Path, text: str, tokenizer: str) -> AttnlabDataModule:
    file = tmp_path / "corpus.txt"
    file.write_text(text, encoding="utf-8")
    cfg = data_config(
        "text", path=str(file), tokenizer=tokenizer, bpe_vocab_size=300, seq_len=16, batch_size=4
    )
    dm = build_datamodule(cfg, needs=CausalLMTask.data_needs, seed=0, model_cfg=model_config("gpt"))
    dm.setup("validate")
    return dm


def validate(tiny_model, dm: AttnlabDataModule) -> tuple[dict[str, float], pl.LightningModule]:
    """val/* of an untrained tiny GPT (a loss far from zero) on the module's validation split."""
    model = tiny_model("gpt", vocab_size=dm.vocab_size, n_heads=2, d_ff=32, init_std=0.02, max_seq_len=16)
    task = build_task(task_config("causal_lm"), AdamWConfig(), model, tokenizer=dm.tokenizer, max_steps=1)
    trainer = pl.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    (result,) = trainer.validate(task, dm.val_dataloader(), verbose=False)
    return result, task


def scored_labels(dm: AttnlabDataModule) -> torch.Tensor:
    """The labels validation scores, in order: windows of a contiguous stretch of the split's tokens."""
    labels = torch.cat([b["labels"].flatten() for b in dm.val_dataloader()])
    return labels[labels != -100]


def test_char_bpb_is_the_loss_in_bits_times_tokens_per_byte_on_ascii(tmp_path, tiny_model):
    dm = text_module(tmp_path, ASCII, "char")
    result, _ = validate(tiny_model, dm)
    labels = scored_labels(dm)
    tokens, n_bytes = len(labels), len(dm.tokenizer.decode(labels.tolist()).encode("utf-8"))
    assert tokens == n_bytes  # ASCII: a character is a byte
    assert result["val/bpb"] == pytest.approx(result["val/loss"] / math.log(2) * tokens / n_bytes, rel=1e-6)


def test_bpe_bpb_is_the_nats_of_the_scored_tokens_over_their_decoded_bytes(tmp_path, tiny_model):
    """Computed directly: the summed cross-entropy of every scored token, in bits, over the UTF-8
    bytes of the scored tokens decoded (multi-byte text, tokens of several bytes each)."""
    dm = text_module(tmp_path, MULTIBYTE, "bpe")
    result, task = validate(tiny_model, dm)
    with torch.no_grad():
        nats = sum(
            F.cross_entropy(task.model(b["input_ids"]).flatten(0, 1), b["labels"].flatten(), reduction="sum")
            for b in dm.val_dataloader()
        )
    labels = scored_labels(dm)
    n_bytes = len(dm.tokenizer.decode(labels.tolist()).encode("utf-8"))
    assert n_bytes > 2 * len(labels)  # BPE merges: well over one byte per token
    assert result["val/bpb"] == pytest.approx(float(nats) / math.log(2) / n_bytes, rel=1e-5)
    assert result["val/bpb"] < result["val/loss"] / math.log(2)  # fewer bits per byte than per token
