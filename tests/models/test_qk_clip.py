"""QK-clip (``optim.qk_clip``): after each step every head's largest attention logit on the step's batch is
at most the threshold, on a run whose logits grow past it; at an infinite threshold the run is plain
Muon's (or AdamW's), bit for bit; a QK-norm, which would undo the scaling, is refused in one line."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.blocks.qk_clip import check_clippable, clip_qk, recording
from attnlab.models import build_model
from attnlab.schema.model import GPTConfig
from attnlab.schema.optim import AdamWConfig, MuonConfig
from attnlab.schema.pos import RopePos
from attnlab.tasks.optim import OPTIMIZER_BUILDERS

VOCAB, T = 40, 16
CFG = GPTConfig(
    vocab_size=VOCAB,
    d_model=32,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    max_seq_len=32,
    pos=RopePos(rope_fraction=0.5),
    attn_window=6,
    layout="sliding full",
)


def batches(steps: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, VOCAB, (4, T + 1), generator=g) for _ in range(steps)]


def loss_of(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


def train(optim: object, threshold: float | None, steps: int = 20) -> tuple[list[float], list[float]]:
    """Losses, and the largest logit measured after each step's clip on that step's batch."""
    torch.manual_seed(0)
    model = build_model(CFG).train()
    opt = OPTIMIZER_BUILDERS.of(optim)(model, optim, False)
    losses, after = [], []
    for ids in batches(steps):
        loss = loss_of(model, ids)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if threshold is not None:
            clip_qk(model, threshold, lambda ids=ids: model(ids[:, :-1]))
        with torch.no_grad(), recording(model) as found:
            model(ids[:, :-1])
        after.append(max(v.max().item() for v in found.values()))
    return losses, after


MUON = MuonConfig(lr=0.3, weight_decay=0.0, warmup_steps=0)  # large steps: the logits grow fast


@pytest.mark.parametrize("optim", [MUON, AdamWConfig(lr=0.05, weight_decay=0.0)], ids=["muon", "adamw"])
def test_every_heads_largest_logit_stays_under_the_threshold(optim: object) -> None:
    _, unclipped = train(optim, None)
    assert max(unclipped) > 30  # the run is built to exceed the threshold
    _, clipped = train(optim, 30.0)
    assert max(clipped) <= 30.0 * (1 + 1e-5)


def test_an_infinite_threshold_is_plain_muon_bit_for_bit() -> None:
    assert train(MUON, float("inf"))[0] == train(MUON, None)[0]


def test_grouped_heads_scale_each_by_its_own_factor() -> None:
    """Under grouped-query attention, clipping one head of a group leaves its sibling's logits as they were."""
    torch.manual_seed(0)
    model = build_model(replace(CFG, layout=None, attn_window=None)).eval()
    ids = batches(1)[0][:, :-1]
    with torch.no_grad(), recording(model) as before:
        model(ids)
    name = "stack.layers.0.self_attn.fn"
    threshold = before[name].sort().values[1].item()  # two heads over it, two not
    clip_qk(model, threshold, lambda: model(ids))
    with torch.no_grad(), recording(model) as after:
        model(ids)
    over = before[name] > threshold
    torch.testing.assert_close(after[name][over], torch.full_like(after[name][over], threshold))
    torch.testing.assert_close(after[name][~over], before[name][~over])


def test_qk_norm_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^optim.qk_clip: model.qk_norm normalises queries and keys"):
        check_clippable(build_model(replace(CFG, qk_norm=True)))
