"""Layer-by-layer compilation and float8 projections (``attnlab.models.speedups``): the same losses and
gradients as the plain model, the same parameter names, and only the layers' projections converted."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.models.speedups import (
    checkpoint_layers,
    compile_layers,
    convert_to_float8,
    float8_eligible,
    transformer_layers,
)

SIZE = dict(vocab_size=64, d_model=32, n_heads=2, n_layers=2, max_seq_len=32, tie_embeddings=False)


def model_loss(model: torch.nn.Module, seed: int = 0) -> torch.Tensor:
    """A next-token loss of ``model``: a decoder's on its input, a sequence-to-sequence model's on a
    target given a source."""
    if not hasattr(model, "src_embed"):
        return lm_loss(model, seed)
    ids = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(seed))
    logits = model(ids.flip(1), ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


def lm_loss(model: torch.nn.Module, seed: int = 0) -> torch.Tensor:
    ids = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(seed))
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


def test_compiled_layers_give_the_plain_models_loss_and_gradients(tiny_model) -> None:
    plain = tiny_model("gpt", "rope", **SIZE).train()
    compiled = compile_layers(copy.deepcopy(plain))
    assert list(compiled.state_dict()) == list(plain.state_dict())  # checkpoints keep their names
    losses = [lm_loss(m) for m in (plain, compiled)]
    torch.testing.assert_close(losses[1], losses[0], atol=1e-5, rtol=0)
    for loss in losses:
        loss.backward()
    for (name, p), q in zip(plain.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("family", ["gpt", "bert", "seq2seq", "vit"])
def test_every_family_has_layers_to_compile(tiny_model, family: str) -> None:
    model = tiny_model(family)
    expected = model.cfg.n_layers * (2 if family == "seq2seq" else 1)
    assert len(transformer_layers(model)) == expected


def test_float8_converts_the_layers_projections_and_keeps_the_head(tiny_model) -> None:
    from torchao.float8.float8_linear import Float8Linear

    model = tiny_model("gpt", "rope", **SIZE, d_ff=48)  # 48 = 3 x 16: eligible; d_model 32 too
    names = convert_to_float8(model, emulate=True)
    assert names == sorted(float8_eligible(model)) and names
    assert all(n.startswith("stack.layers.") for n in names)
    converted = {n for n, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert converted == set(names)
    assert not isinstance(model.lm_head.proj, Float8Linear)  # the output head stays in high precision


def test_float8_converts_the_heads_dense_layers_and_keeps_the_readouts(tiny_model) -> None:
    """The heads' dense layers are hidden matrices (``blocks.roles``): converted like the layers'."""
    from torchao.float8.float8_linear import Float8Linear

    model = tiny_model("bert", **SIZE, d_ff=48, num_classes=3, classifier_hidden=True)
    names = convert_to_float8(model, emulate=True)
    assert {"mlm_head.dense", "cls_head.pre.0"} <= set(names)
    assert not isinstance(model.cls_head.classifier, Float8Linear)
    assert not isinstance(model.mlm_head.decoder.proj, Float8Linear)
    logits = model.logits({"input_ids": torch.randint(0, 64, (2, 16))})
    assert logits.shape == (2, 3) and logits.isfinite().all()


def test_float8_skips_projections_whose_sizes_float8_cannot_multiply(tiny_model) -> None:
    model = tiny_model("gpt", "rope", **{**SIZE, "d_model": 24, "n_heads": 2}, d_ff=32)
    assert float8_eligible(model) == []  # d_model 24 is no multiple of 16: every projection touches it
    with pytest.raises(ValueError, match="no projection that float8 training can convert"):
        convert_to_float8(model, emulate=True)


def test_float8_without_emulation_needs_a_float8_gpu(tiny_model) -> None:
    if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9):
        pytest.skip("this machine has a float8 GPU")
    with pytest.raises(ValueError, match="float8 training needs"):
        convert_to_float8(tiny_model("gpt", "rope", **SIZE), emulate=False)


def corpus_batch(ids: torch.Tensor, step: int) -> torch.Tensor:
    """8 windows of 33 characters of the embedded corpus, at offsets fixed by ``step``."""
    starts = torch.randint(0, len(ids) - 33, (8,), generator=torch.Generator().manual_seed(step))
    return torch.stack([ids[s : s + 33] for s in starts.tolist()])


@pytest.mark.slow
def test_emulated_float8_trains_to_the_loss_of_full_precision(tiny_model) -> None:
    """200 AdamW steps on characters of the embedded corpus: float8's loss within 2% of fp32's, as the
    mean of the last 20 steps (the same batches for both)."""
    from attnlab.data.text import default_corpus

    text = default_corpus()
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(c) for c in text[:200_000]])
    final = {}
    for name in ("fp32", "float8"):
        model = tiny_model("gpt", "rope", **{**SIZE, "vocab_size": 16 * math.ceil(len(vocab) / 16)}).train()
        if name == "float8":
            convert_to_float8(model, emulate=True)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        last = []
        for step in range(200):
            batch = corpus_batch(ids, step)
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            last = [*last, float(loss)][-20:]
        final[name] = sum(last) / len(last)
    assert final["fp32"] < 0.75 * math.log(len(vocab))  # it learned: the uniform loss is ln(vocab)
    assert abs(final["float8"] - final["fp32"]) <= 0.02 * final["fp32"], final


def saved_bytes(model: torch.nn.Module) -> int:
    """Bytes of the tensors autograd keeps for the backward pass of one LM loss (each storage once)."""
    storages: dict[int, int] = {}

    def keep(t: torch.Tensor) -> torch.Tensor:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        lm_loss(model).backward()
    return sum(storages.values())


def test_checkpointed_layers_give_the_same_losses_and_gradients_and_keep_less(tiny_model) -> None:
    """Activation checkpointing recomputes each layer in the backward pass, dropout masks included
    (random state restored): the same loss and gradients, bit for bit, less kept for the backward."""
    size = {**SIZE, "n_layers": 4, "dropout": 0.1}
    plain = tiny_model("gpt", "rope", **size).train()
    checkpointed = checkpoint_layers(copy.deepcopy(plain))
    assert list(checkpointed.state_dict()) == list(plain.state_dict())
    losses = []
    for model in (plain, checkpointed):
        torch.manual_seed(3)  # the same dropout masks
        losses.append(lm_loss(model))
        losses[-1].backward()
    torch.testing.assert_close(losses[1], losses[0], atol=1e-6, rtol=0)
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=0, msg=name)
    kept, kept_plain = saved_bytes(checkpointed), saved_bytes(plain)
    assert kept < 0.6 * kept_plain, (kept, kept_plain)


@pytest.mark.parametrize("family", ["gpt", "seq2seq"])
def test_selective_checkpointing_gives_the_same_losses_and_keeps_between_none_and_full(
    tiny_model, family: str
) -> None:
    """Selective checkpointing keeps each layer's matrix products and attention outputs and recomputes
    the elementwise ops between them (dropout masks repeated): the losses of no checkpointing within
    1e-6 over three optimizer steps, and, unlike full checkpointing, no matrix product computed twice."""
    size = {**SIZE, "n_layers": 4, "dropout": 0.1}
    plain = tiny_model(family, "rope" if family == "gpt" else "sinusoidal", **size).train()
    models = {
        "none": plain,
        "selective": checkpoint_layers(copy.deepcopy(plain), selective=True),
        "full": checkpoint_layers(copy.deepcopy(plain)),
    }
    losses: dict[str, list[float]] = {}
    for name, model in models.items():
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses[name] = []
        for step in range(3):
            torch.manual_seed(step)  # the same dropout masks in every model
            loss = model_loss(model, step)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses[name].append(float(loss))
    assert losses["selective"] == pytest.approx(losses["none"], abs=1e-6, rel=0)
    assert losses["none"][2] != losses["none"][0]  # the steps moved the weights
    flops = {name: step_flops(model) for name, model in models.items()}
    assert flops["selective"] == flops["none"] < flops["full"], flops  # no matrix product run twice


def step_flops(model: torch.nn.Module) -> int:
    """FLOPs of the matrix products and attention of one forward and backward pass (torch's count)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model_loss(model).backward()
    return counter.get_total_flops()
