"""Each default data module feeds its family's model as the data<->task contract says."""

from __future__ import annotations

import torch
import torch.nn.functional as F

UNTRAINED = {"init_std": 0.02, "max_seq_len": 64}  # the usual init: an untrained loss near log V


def test_causal_lm_batch_feeds_the_decoder(make_dm, tiny_model):
    dm = make_dm("text", seq_len=32, batch_size=4)
    model = tiny_model("gpt", vocab_size=dm.vocab_size, **UNTRAINED)
    batch = next(iter(dm.train_dataloader()))
    logits = model(batch["input_ids"])
    assert logits.shape == (4, 32, dm.vocab_size)
    loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    assert abs(loss.item() - torch.log(torch.tensor(float(dm.vocab_size))).item()) < 1.0  # untrained: ~log V


def test_mlm_and_listops_batches_feed_the_encoder(make_dm, tiny_model):
    for dm in (
        make_dm("text", task="mlm", seq_len=32, batch_size=4),
        make_dm("listops", num_train=16, num_val=4, num_test=4, seq_len=48, batch_size=4),
    ):
        model = tiny_model("bert", vocab_size=dm.vocab_size, num_classes=dm.num_classes, **UNTRAINED)
        batch = next(iter(dm.train_dataloader()))
        hidden = model(batch["input_ids"], batch["attention_mask"])
        if dm.num_classes:
            assert model.classify(hidden, batch["attention_mask"]).shape == (4, 10)
        else:
            logits = model.mlm_logits(hidden)
            predicted = batch["labels"] != -100
            assert F.cross_entropy(logits[predicted], batch["labels"][predicted]).isfinite()


def test_seq2seq_batch_feeds_the_encoder_decoder(make_dm, tiny_model):
    dm = make_dm("dates", num_train=32, num_val=8, num_test=8, seq_len=48, batch_size=4)
    model = tiny_model("seq2seq", vocab_size=dm.vocab_size, **UNTRAINED)
    batch = next(iter(dm.train_dataloader()))
    logits = model(batch["src_ids"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    assert logits.shape == (*batch["labels"].shape, dm.vocab_size)
    assert F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100).isfinite()


def test_image_batch_feeds_the_vit(make_dm, tiny_model):
    dm = make_dm("digits", model={"image_size": 8, "patch_size": 2, "channels": 1}, batch_size=4)
    model = tiny_model("vit", num_classes=dm.num_classes)  # 8x8 grey images in 2x2 patches
    batch = next(iter(dm.train_dataloader()))
    assert model(batch["pixel_values"]).shape == (4, 10)
