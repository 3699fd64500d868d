"""The induction score, activation patching and ablation all name the induction head of a hand-built
two-layer attention-only model (a previous-token head in layer 0 and an induction head in layer 1,
Olsson et al. 2022), and none of them names the distractor heads beside them.

The weights are set by hand, not trained, so the circuit is known exactly and the test takes a second:
the residual stream has a token, a position and a previous-token subspace (one-hot each). Layer 0's
head 0 attends from each position to the one before and writes that token into the previous-token
subspace; layer 1's head 0 matches the current token against the previous-token subspace (finding the
token after the earlier occurrence) and copies that token into the token subspace, which the tied
output head reads. Head 1 of each layer attends uniformly and writes a small random vector elsewhere.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.explain import ablate, patch_heads
from attnlab.explain.induction import induction_scores, previous_token_scores
from attnlab.explain.sites import activation_sites
from attnlab.models import build_model
from attnlab.schema.data import IGNORE_INDEX
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import pos_config

VOCAB, SEQ, D, HEADS = 32, 24, 96, 2
HEAD_DIM = D // HEADS
TOK, POS, PREV, SPARE = 0, VOCAB, VOCAB + SEQ, 2 * VOCAB + SEQ  # where each subspace starts
SHARP = 5.0  # query scale: the attention on the matching key is close to one
COPY = 4.0  # how strongly the induction head writes the copied token


def induction_model() -> nn.Module:
    """The hand-built 2-layer attention-only decoder (RMSNorm, no biases, learned positions)."""
    cfg = GPTConfig(
        d_model=D,
        n_layers=2,
        n_heads=HEADS,
        dropout=0.0,
        max_seq_len=SEQ,
        pos=pos_config("learned"),
        d_ff=0,
        vocab_size=VOCAB,
        norm="rmsnorm",
        bias=False,
    )
    model = build_model(cfg).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (model.stack.final_norm, *(layer.self_attn.norm for layer in model.stack.layers)):
            norm.weight.fill_(1.0)
        model.embed.tokens.weight[:, TOK:POS] = torch.eye(VOCAB)
        model.embed.pos.weight[:, POS:PREV] = torch.eye(SEQ)
        previous_token_head(model.stack.layers[0].self_attn.fn, norm_scale=math.sqrt(D / 2))
        induction_head(model.stack.layers[1].self_attn.fn, norm_scale=math.sqrt(D / 3))
        for layer in model.stack.layers:
            distractor_head(layer.self_attn.fn, generator)
    return model


def q_k_v(attn: nn.Module, head: int) -> tuple[Tensor, Tensor, Tensor]:
    """Views of one head's query, key and value rows in the fused projection (q heads, k heads, v heads)."""
    w = attn.qkv_proj.weight
    rows = [slice(part * D + head * HEAD_DIM, part * D + (head + 1) * HEAD_DIM) for part in range(3)]
    return w[rows[0]], w[rows[1]], w[rows[2]]


def previous_token_head(attn: nn.Module, norm_scale: float) -> None:
    """Head 0: position p queries for key p - 1, and writes that key's token into the previous-token subspace."""
    q, k, v = q_k_v(attn, 0)
    q[:SEQ, POS:PREV] = SHARP * torch.eye(SEQ)
    k[1:SEQ, POS : PREV - 1] = torch.eye(SEQ - 1)  # key p answers query p + 1
    v[:VOCAB, TOK:POS] = torch.eye(VOCAB)
    attn.out_proj.weight[PREV:SPARE, :VOCAB] = torch.eye(VOCAB) / norm_scale


def induction_head(attn: nn.Module, norm_scale: float) -> None:
    """Head 0: the current token queries for the key whose previous token it is, and copies that key's token."""
    q, k, v = q_k_v(attn, 0)
    q[:VOCAB, TOK:POS] = SHARP * torch.eye(VOCAB)
    k[:VOCAB, PREV:SPARE] = torch.eye(VOCAB)
    v[:VOCAB, TOK:POS] = torch.eye(VOCAB)
    attn.out_proj.weight[TOK:POS, :VOCAB] = COPY * torch.eye(VOCAB) / norm_scale


def distractor_head(attn: nn.Module, generator: torch.Generator) -> None:
    """Head 1: uniform attention (no query or key) writing a small random image of the tokens to spare dims."""
    _, _, v = q_k_v(attn, 1)
    v[:, TOK:POS] = 0.1 * torch.randn(HEAD_DIM, VOCAB, generator=generator)
    attn.out_proj.weight[SPARE:, HEAD_DIM : HEAD_DIM + D - SPARE] = torch.eye(D - SPARE)


def repeated_rows(count: int, seed: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Clean rows (distinct random tokens whose end repeats a segment of 5 to 10; labels on the repeat
    after its first token) and the same rows with the first occurrence replaced by unused tokens."""
    generator = torch.Generator().manual_seed(seed)
    clean, corrupt, labels = [], [], []
    for _ in range(count):
        n = int(torch.randint(5, 11, (1,), generator=generator))
        tokens = torch.randperm(VOCAB, generator=generator)
        prefix, segment, unused = (
            tokens[: SEQ + 1 - 2 * n],
            tokens[SEQ + 1 - 2 * n : SEQ + 1 - n],
            tokens[-n:],
        )
        row = torch.cat([prefix, segment, segment])
        label = row[1:].clone()
        label[: SEQ + 1 - n] = (
            IGNORE_INDEX  # the repeat starts at SEQ + 1 - n; nothing predicts its first token
        )
        clean.append(row[:-1])
        corrupt.append(torch.cat([prefix, unused, segment])[:-1])
        labels.append(label)
    labels_t = torch.stack(labels)
    return (
        {"input_ids": torch.stack(clean), "labels": labels_t},
        {"input_ids": torch.stack(corrupt), "labels": labels_t},
    )


def repeat_loss(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    logits = model.logits(batch)
    return F.cross_entropy(logits.transpose(1, 2), batch["labels"], ignore_index=IGNORE_INDEX)


def test_score_patching_and_ablation_all_name_the_induction_head() -> None:
    torch.manual_seed(0)
    model = induction_model()
    assert not any("ffn" in site for site in activation_sites(model))  # attention-only: no FFN site
    clean, corrupted = repeated_rows(64, seed=1)
    with torch.no_grad():
        scores = induction_scores(model, clean)
        previous = previous_token_scores(model, clean)
        assert float(repeat_loss(model, clean)) < 0.2  # the circuit copies the repeat
        assert float(repeat_loss(model, corrupted)) > 2.0  # and cannot without the earlier occurrence

    assert divmod(int(scores.argmax()), HEADS) == (1, 0)
    assert scores[1, 0] > 0.95 and scores.flatten()[[0, 1, 3]].max() < 0.3  # the other three heads
    assert divmod(int(previous.argmax()), HEADS) == (0, 0) and previous[0, 0] > 0.95

    labels = clean["labels"]
    result = patch_heads(
        model,
        clean,
        corrupted,
        lambda logits: -F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE_INDEX),
    )
    restored = result.restored()
    assert divmod(int(restored.argmax()), HEADS) == (1, 0)
    assert restored[1, 0] > 0.9  # patching the induction head alone restores the clean loss
    assert (
        restored.flatten()[[0, 1, 3]].max() < 0.2
    )  # the previous-token head alone points at corrupted tokens

    reference = [repeated_rows(64, seed=2)[0]]
    for mode in ("zero", "mean"):
        ablations = {
            head: ablate(model, clean, lambda b: repeat_loss(model, b), [head], mode, reference)
            for head in ("layers.1.attn_heads.0", "layers.1.attn_heads.1", "layers.0.attn_heads.0")
        }
        induction, control, previous_head = (a.together - a.before for a in ablations.values())
        assert induction > 2.0 and previous_head > 2.0, mode  # the circuit's two heads
        assert abs(control) < 0.05, mode  # the distractor beside the induction head
