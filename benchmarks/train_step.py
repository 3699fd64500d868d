"""Training step (forward + backward + AdamW): attnlab vs Hugging Face GPT-2, BERT and ViT.

Every contender gets the same weights, batch and optimizer (``torch.optim.AdamW(fused=True)``,
the default of Hugging Face's Trainer with torch >= 2.8); the loss is computed outside the model
the same way for all. Peak memory is measured separately, one fresh process per contender.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks import models
from benchmarks.common import Row, Settings, interleaved, machine_short, peak_memory_mib, ratio_row, speedup
from benchmarks.models import EncoderSize, GPTSize
from benchmarks.nanogpt.checkout import own_gpt
from benchmarks.nanogpt.handwritten import GPT, with_gpt2_weights

SECTION = "train step"
TARGETS = {"gpt-4L": 1.35, "gpt-6L": 1.1}  # attnlab ÷ HF GPT-2, tokens/s
Loss = Callable[[], Tensor]


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)


def train_step(model: nn.Module, loss: Loss) -> Callable[[], None]:
    """One optimizer step of ``model`` on ``loss``."""
    opt = adamw(model)

    def step() -> None:
        loss().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def lm_loss(forward: Callable[[Tensor], Tensor], ids: Tensor, labels: Tensor) -> Loss:
    return lambda: F.cross_entropy(forward(ids).flatten(0, 1), labels.flatten(), ignore_index=-100)


# -- contenders: the reference, its attnlab twin and (GPT) the nanoGPT-style model ---------------


def kind(size: GPTSize | EncoderSize) -> str:
    return "gpt" if isinstance(size, GPTSize) else size.name.split("-")[0]


NANOGPT_OWN = "nanoGPT model.py"  # nanoGPT's own model, where NANOGPT_DIR names a checkout
EXACT_TWIN = "attnlab, exact GELU"  # the twin with nanoGPT's activation, timed against its model.py


def loss_of(model: nn.Module, impl: str, size: GPTSize | EncoderSize) -> Loss:
    """The training loss of one contender on its workload's fixed batch, computed outside the model
    (nanoGPT's own model computes it inside, with the same cross-entropy, as its train.py calls it)."""
    if kind(size) == "gpt":
        ids, labels = models.gpt_batch(size)
        if impl == NANOGPT_OWN:
            return lambda: model(ids, labels)[1]
        return lm_loss((lambda x: model(input_ids=x).logits) if impl == "HF" else model, ids, labels)
    if kind(size) == "bert":
        ids, mask, labels = models.mlm_batch(size)
        types = torch.zeros_like(ids)
        if impl == "HF":
            return lm_loss(
                lambda x: model(input_ids=x, attention_mask=mask, token_type_ids=types).logits, ids, labels
            )
        return lm_loss(
            lambda x: model.mlm_logits(model(x, attention_mask=mask, token_type_ids=types)), ids, labels
        )
    images, labels = models.image_batch(size)
    if impl == "HF":
        return lambda: F.cross_entropy(model(pixel_values=images).logits, labels)
    return lambda: F.cross_entropy(model(images), labels)


REFERENCES = {"gpt": models.hf_gpt2, "bert": models.hf_bert, "vit": models.hf_vit}
ARCHITECTURES = {"gpt": "GPT2LMHeadModel", "bert": "BertForMaskedLM", "vit": "ViTForImageClassification"}
HF_CONFIGS = {"gpt": models.gpt2_config, "bert": models.bert_config, "vit": models.vit_config}


def contenders(size: GPTSize | EncoderSize) -> dict[str, tuple[nn.Module, Loss]]:
    """{name: (model, loss)} with the same weights; checks that their losses agree before any timing."""
    hf = REFERENCES[kind(size)](size)
    found = {"attnlab": models.twin(hf), "HF": hf}
    if kind(size) == "gpt":
        found["nanoGPT"] = with_gpt2_weights(size, hf)
        own = own_gpt(size, hf)
        if own is not None:
            found[NANOGPT_OWN] = own
            found[EXACT_TWIN] = models.with_activation(found["attnlab"], "gelu")
    losses = {name: (model, loss_of(model, name, size)) for name, model in found.items()}
    with torch.no_grad():
        reference = losses["HF"][1]()
        for name, (_, loss) in losses.items():
            if name not in (NANOGPT_OWN, EXACT_TWIN):
                models.check_same(loss(), reference, f"{size.name}: {name} vs HF loss")
        if NANOGPT_OWN in losses:  # the exact GELU: the same arithmetic as each other, not as HF's
            exact = losses[EXACT_TWIN][1]()
            models.check_same(losses[NANOGPT_OWN][1](), exact, f"{size.name}: nanoGPT's model.py vs attnlab")
    return losses


# -- peak memory: one contender alone in a fresh process (benchmarks.memprobe) ---------------------


def memory_step(workload: str, impl: str) -> Callable[[], None]:
    """The training step of one contender built alone (randomly initialised: memory does not depend on values)."""
    size = SIZES[workload]
    if impl == "HF":
        model = REFERENCES[kind(size)](size)
    elif impl == "nanoGPT":
        model = GPT(size.vocab, size.seq_len, size.n_layers, size.n_heads, size.d_model)
    elif impl == NANOGPT_OWN:
        model = own_gpt(size)
    else:
        model = models.attnlab_like(HF_CONFIGS[kind(size)](size), ARCHITECTURES[kind(size)])
        model = models.with_activation(model, "gelu") if impl == EXACT_TWIN else model
    return train_step(model, loss_of(model, impl, size))


SIZES: dict[str, GPTSize | EncoderSize] = {
    s.name: s
    for s in (
        models.GPT_4L,
        models.GPT_6L,
        models.GPT_TINY,
        models.BERT_SMALL,
        models.BERT_TINY,
        models.VIT_SMALL,
        models.VIT_TINY,
    )
}


def _tokens(size: GPTSize | EncoderSize) -> int:
    if isinstance(size, GPTSize):
        return size.batch * size.seq_len
    if size.name.startswith("vit"):
        return size.batch * ((size.seq_len // size.vocab) ** 2 + 1)
    return size.batch * size.seq_len


REFERENCE_NAMES = {"gpt": "HF GPT-2", "bert": "HF BERT", "vit": "HF ViT"}


def measure(size: GPTSize | EncoderSize, settings: Settings, warmup: int, repeats: int) -> list[Row]:
    steps = {name: train_step(model, loss) for name, (model, loss) in contenders(size).items()}
    times = interleaved(steps, repeats=repeats, warmup=warmup)
    tokens = _tokens(size)
    memory = {name: peak_memory_mib(settings, "train", workload=size.name, impl=name) for name in steps}
    speed = {name: tokens / sorted(t)[len(t) // 2] for name, t in times.items()}
    absolute = ", ".join(f"{n} {speed[n]:,.0f} tok/s" for n in steps)
    peaks = ", ".join(f"{n} {memory[n]:.0f} MiB" for n in steps)
    reference = REFERENCE_NAMES[kind(size)]
    config = f"{size} ({size.name})"
    rows = [
        ratio_row(
            SECTION,
            f"tokens/s, attnlab ÷ {reference}",
            config,
            speedup(times, "attnlab", "HF"),
            f"{absolute}; {repeats} rounds",
            TARGETS.get(size.name),
        ),
    ]
    if "nanoGPT" in steps:
        rows.append(
            ratio_row(
                SECTION,
                "tokens/s, attnlab ÷ nanoGPT-style GPT",
                config,
                speedup(times, "attnlab", "nanoGPT"),
                "minimal hand-written GPT, same weights",
            )
        )
        rows.append(
            ratio_row(
                SECTION,
                f"tokens/s, {reference} ÷ nanoGPT-style GPT",
                config,
                speedup(times, "HF", "nanoGPT"),
                "the room a framework has",
            )
        )
    if NANOGPT_OWN in steps:
        rows.append(
            ratio_row(
                SECTION,
                "tokens/s, attnlab ÷ nanoGPT's own model.py",
                config,
                speedup(times, EXACT_TWIN, NANOGPT_OWN),
                "karpathy/nanoGPT's GPT from NANOGPT_DIR against the attnlab twin with its exact GELU, "
                "same weights; its own loss",
                1.0,
            )
        )
    ours = memory["attnlab"]
    rows.append(
        Row(
            SECTION,
            f"peak memory (MiB), attnlab (vs {reference})",
            config,
            ours,
            ours,
            ours,
            "MiB",
            f"{peaks}: peak RSS above the imports, one fresh process each, 3 steps",
        )
    )
    return rows


def run(settings: Settings) -> list[Row]:
    plan = settings.pick(
        full=[
            (models.GPT_4L, 5, 30),
            (models.GPT_6L, 2, 8),
            (models.BERT_SMALL, 3, 15),
            (models.VIT_SMALL, 3, 15),
        ],
        quick=[
            (models.GPT_4L, 3, 10),
            (models.GPT_6L, 1, 3),
            (models.BERT_SMALL, 2, 5),
            (models.VIT_SMALL, 2, 5),
        ],
        tiny=[(models.GPT_TINY, 1, 3), (models.BERT_TINY, 1, 3), (models.VIT_TINY, 1, 3)],
    )
    rows = []
    for size, warmup, repeats in plan:
        print(f"[train step] {size.name} on {machine_short()}", flush=True)
        rows += measure(size, settings, warmup, repeats)
    return rows
