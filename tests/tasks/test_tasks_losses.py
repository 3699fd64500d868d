"""Each task's training loss against a cross-entropy computed by hand, and its val/test metrics."""

from __future__ import annotations

import re

import pytest
import sacrebleu
import torch

from attnlab.data.tokenizers import SPECIAL_TOKENS, char_tokenizer
from attnlab.models import count_parameters
from attnlab.schema.optim import AdamWConfig
from attnlab.schema.task import task_config
from attnlab.tasks import build_task

# Two heads, a narrow feed-forward and the usual init: losses near log(vocab) at the start.
SIZES = dict(n_heads=2, d_ff=32, init_std=0.02)

VOCAB = 16


def nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean of -log softmax(logits)[label] over labels that are not -100, written out."""
    logp = logits.double().log_softmax(-1).reshape(-1, logits.shape[-1])
    labels = labels.reshape(-1)
    keep = labels != -100
    return -logp[keep].gather(1, labels[keep, None]).mean()


def task_for(model, name: str, **task_kw):
    return build_task(task_config(name, **task_kw), AdamWConfig(schedule="constant"), model, max_steps=10)


def lm_batch(b: int = 3, t: int = 7) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (b, t + 1), generator=g)
    labels = ids[:, 1:].clone()
    labels[0, :3] = -100  # a prompt the loss must skip
    return {"input_ids": ids[:, :-1], "labels": labels}


def test_causal_lm_loss_is_next_token_cross_entropy(tiny_model):
    model = tiny_model("gpt", **SIZES)
    batch = lm_batch()
    loss = task_for(model, "causal_lm").training_step(batch, 0)
    expected = nll(model(batch["input_ids"]), batch["labels"])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def mlm_batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(7, VOCAB, (2, 6), generator=g)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    labels = torch.full_like(ids, -100)
    labels[0, 1], labels[0, 4], labels[1, 2] = 3, 9, 12
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_mlm_loss_counts_only_the_predicted_positions(tiny_model):
    model = tiny_model("bert", **SIZES)
    batch = mlm_batch()
    loss = task_for(model, "mlm").training_step(batch, 0)
    logits = model.mlm_logits(model(batch["input_ids"], batch["attention_mask"]))
    assert loss.item() == pytest.approx(nll(logits, batch["labels"]).item(), rel=1e-5)
    every_position = torch.where(batch["labels"] == -100, batch["input_ids"], batch["labels"])
    assert loss.item() != pytest.approx(nll(logits, every_position).item(), rel=1e-3)


def test_mlm_accuracy_is_over_masked_tokens(tiny_model):
    model = tiny_model("bert", **SIZES)
    task = task_for(model, "mlm").eval()
    batch = mlm_batch()
    with torch.no_grad():
        task.validation_step(batch, 0)
        predicted = model.mlm_logits(model(batch["input_ids"], batch["attention_mask"])).argmax(-1)
    keep = batch["labels"] != -100
    expected = (predicted[keep] == batch["labels"][keep]).float().mean()
    assert task.metrics["val"]["acc"].compute().item() == pytest.approx(expected.item())


def s2s_batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    src = torch.randint(7, VOCAB, (2, 5), generator=g)
    tgt = torch.randint(7, VOCAB, (2, 4), generator=g)
    src_mask = torch.ones(2, 5, dtype=torch.bool)
    src_mask[1, 3:] = False
    tgt_in = torch.cat([torch.full((2, 1), 2), tgt], 1)  # bos + target
    labels = torch.cat([tgt, torch.full((2, 1), 3)], 1)  # target + eos
    labels[1, 3:] = -100
    tgt_mask = labels != -100
    return {"src_ids": src, "src_mask": src_mask, "tgt_in": tgt_in, "tgt_mask": tgt_mask, "labels": labels}


def test_seq2seq_loss_is_teacher_forced_cross_entropy(tiny_model):
    model = tiny_model("seq2seq", **SIZES)
    batch = s2s_batch()
    loss = task_for(model, "seq2seq", label_smoothing=0.0).training_step(batch, 0)
    logits = model(batch["src_ids"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    assert loss.item() == pytest.approx(nll(logits, batch["labels"]).item(), rel=1e-5)


def test_label_smoothing_follows_torchs_formula(tiny_model):
    model = tiny_model(
        "seq2seq", **{**SIZES, "init_std": 0.5}
    )  # peaked predictions, so smoothing changes the loss
    batch, eps = s2s_batch(), 0.1
    plain = task_for(model, "seq2seq", label_smoothing=0.0).training_step(batch, 0)
    smoothed = task_for(model, "seq2seq", label_smoothing=eps).training_step(batch, 0)
    logits = model(batch["src_ids"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"]).double()
    keep = batch["labels"] != -100
    logp = logits.log_softmax(-1)[keep]
    target_nll = -logp.gather(1, batch["labels"][keep][:, None]).squeeze(1)
    uniform = -logp.mean(-1)  # cross-entropy against the uniform distribution
    expected = ((1 - eps) * target_nll + eps * uniform).mean()
    assert smoothed.item() == pytest.approx(expected.item(), rel=1e-5)
    assert smoothed.item() != pytest.approx(plain.item(), rel=1e-3)


def test_text_classification_loss(tiny_model):
    model = tiny_model("bert", num_classes=3, pooling="mean", **SIZES)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    batch = {
        "input_ids": torch.tensor([[7, 8, 9, 10], [11, 12, 0, 0]]),
        "attention_mask": mask,
        "labels": torch.tensor([2, 0]),
    }
    loss = task_for(model, "classification").training_step(batch, 0)
    logits = model.classify(model(batch["input_ids"], mask), mask)
    assert loss.item() == pytest.approx(nll(logits, batch["labels"]).item(), rel=1e-5)


def test_image_classification_loss_and_metrics(tiny_model):
    model = tiny_model("vit", num_classes=3, **SIZES)
    batch = {
        "pixel_values": torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(4)),
        "labels": torch.tensor([0, 1, 2, 1]),
    }
    task = task_for(model, "classification")
    loss = task.training_step(batch, 0)
    logits = model(batch["pixel_values"])
    assert loss.item() == pytest.approx(nll(logits, batch["labels"]).item(), rel=1e-5)
    with torch.no_grad():
        task.eval().test_step(batch, 0)
    hits = (logits.argmax(-1) == batch["labels"]).float().mean()
    assert task.metrics["test"]["acc"].compute().item() == pytest.approx(hits.item())
    assert 0.0 <= task.metrics["test"]["f1"].compute().item() <= 1.0


def test_validation_loss_is_averaged_over_tokens_not_batches(tiny_model):
    model = tiny_model("gpt", **SIZES)
    task = task_for(model, "causal_lm").eval()
    first, second = lm_batch(3, 7), lm_batch(1, 4)
    second["labels"][0, :-1] = -100  # one token only: a batch mean would overweight it
    with torch.no_grad():
        task.validation_step(first, 0)
        task.validation_step(second, 1)
        logits = [model(b["input_ids"]) for b in (first, second)]
    counts = [(b["labels"] != -100).sum() for b in (first, second)]
    total = sum(nll(lg, b["labels"]) * n for lg, b, n in zip(logits, (first, second), counts)) / sum(counts)
    assert task.metrics["val"]["loss"].compute().item() == pytest.approx(total.item(), rel=1e-5)


def test_seq2seq_decoded_metrics_match_sacrebleu(tiny_model):
    tokenizer = char_tokenizer(["abcdefghi"], roles=SPECIAL_TOKENS)
    eos, pad = tokenizer.eos_id, -100
    a, b, c, d, e = (tokenizer.encode(ch)[0] for ch in "abcde")
    model = tiny_model("seq2seq", vocab_size=tokenizer.vocab_size, **SIZES)
    task = build_task(task_config("seq2seq"), AdamWConfig(), model, tokenizer=tokenizer, max_steps=10)
    generated = [[a, b, c], [a, b, d, e, a], [c, c]]  # greedy_decode's output: each cut before its eos
    labels = torch.tensor([[a, b, c, eos, pad], [a, b, c, d, eos], [c, c, d, eos, pad]])
    task.score_decoded(generated, labels, task.metrics["test"])
    metrics = task.metrics["test"]
    assert metrics["exact_match"].compute().item() == pytest.approx(1 / 3)
    hyps, refs = ["abc", "abdea", "cc"], ["abc", "abcd", "ccd"]
    assert metrics["bleu"].compute().item() == pytest.approx(
        sacrebleu.corpus_bleu(hyps, [refs]).score, rel=1e-6
    )
    assert metrics["chrf"].compute().item() == pytest.approx(
        sacrebleu.corpus_chrf(hyps, [refs]).score, rel=1e-6
    )


def test_seq2seq_metrics_of_two_shards_add_up_to_the_whole_corpus(tiny_model):
    """What processes do at compute time (torchmetrics sums each state), done by hand: the n-gram
    statistics and counts of two uneven shards add up to the corpus's, while averaging the shards'
    scores would not (chrF is not a mean over sentences)."""
    tokenizer = char_tokenizer(["abcdefghi"], roles=SPECIAL_TOKENS)
    eos, pad = tokenizer.eos_id, -100
    a, b, c, d, e = (tokenizer.encode(ch)[0] for ch in "abcde")
    model = tiny_model("seq2seq", vocab_size=tokenizer.vocab_size, **SIZES)
    task = build_task(task_config("seq2seq"), AdamWConfig(), model, tokenizer=tokenizer, max_steps=10)
    generated = [[a, b, c], [a, b, d, e, a], [c, c]]
    labels = torch.tensor([[a, b, c, eos, pad], [a, b, c, d, eos], [c, c, d, eos, pad]])
    task.score_decoded(generated[:1], labels[:1], task.metrics["val"])  # rank 0's shard
    task.score_decoded(generated[1:], labels[1:], task.metrics["test"])  # rank 1's
    for name in ("exact_match", "bleu", "chrf"):
        task.metrics["val"][name].merge_state(task.metrics["test"][name])
    merged = task.metrics["val"]
    hyps, refs = ["abc", "abdea", "cc"], ["abc", "abcd", "ccd"]
    chrf = sacrebleu.corpus_chrf(hyps, [refs]).score
    assert merged["exact_match"].compute().item() == pytest.approx(1 / 3)
    assert merged["bleu"].compute().item() == pytest.approx(
        sacrebleu.corpus_bleu(hyps, [refs]).score, rel=1e-6
    )
    assert merged["chrf"].compute().item() == pytest.approx(chrf, rel=1e-6)
    shard_chrf = [
        sacrebleu.corpus_chrf(h, [r]).score for h, r in ((hyps[:1], refs[:1]), (hyps[1:], refs[1:]))
    ]
    assert sum(shard_chrf) / 2 != pytest.approx(chrf, rel=1e-2)


def test_seq2seq_validation_decodes_only_with_a_tokenizer(tiny_model):
    tokenizer = char_tokenizer(["abcdefghi"], roles=SPECIAL_TOKENS)
    model = tiny_model("seq2seq", vocab_size=tokenizer.vocab_size, **SIZES)
    without = task_for(model, "seq2seq")
    assert set(without.metrics["val"]) == {"loss", "acc"}
    task = build_task(task_config("seq2seq"), AdamWConfig(), model, tokenizer=tokenizer, max_steps=10).eval()
    with torch.no_grad():
        task.validation_step(s2s_batch(), 0)
    assert all(task.metrics["val"][name].update_called for name in ("exact_match", "bleu", "chrf"))


def test_batch_work_uses_the_palm_flops_estimate(tiny_model):
    model = tiny_model("gpt", **SIZES)
    task = task_for(model, "causal_lm")
    batch = lm_batch(3, 7)
    n_params = count_parameters(model) - model.embed.pos.weight.numel()  # positions are a lookup
    work = task.batch_work(batch)
    assert (work.tokens, work.samples) == (21, 3)
    assert work.flops == 21 * (6 * n_params + 12 * 2 * 7 * 16)


@pytest.mark.parametrize(
    ("name", "family", "model_kw", "extra", "message"),
    [
        (
            "translation",
            "gpt",
            {},
            {},
            "task.name=translation: choose one of causal_lm, mlm, seq2seq, classification",
        ),
        ("mlm", "gpt", {}, {}, "task.name=mlm: cannot train model.family='gpt'; it trains causal_lm"),
        (
            "classification",
            "seq2seq",
            {},
            {},
            "task.name=classification: cannot train model.family='seq2seq'; it trains seq2seq",
        ),
        (
            "classification",
            "vit",
            {"num_classes": 3},
            {"num_classes": 5},
            "model.num_classes=3 does not match the data's 5 classes",
        ),
        (
            "classification",
            "bert",
            {"num_classes": 1},
            {},
            "model.num_classes=1: classification needs at least 2",
        ),
        (
            "mlm",
            "bert",
            {"mlm_head": False},
            {},
            "model.mlm_head=false: task.name='mlm' needs the encoder's masked-LM head",
        ),
    ],
)
def test_build_task_rejects_bad_combinations(tiny_model, name, family, model_kw, extra, message):
    model = tiny_model(family, **model_kw, **SIZES)
    with pytest.raises(ValueError, match=re.escape(message)):
        build_task(task_config(name), AdamWConfig(), model, max_steps=10, **extra)
