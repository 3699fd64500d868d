"""Attention-head pruning (Michel et al. 2019, "Are Sixteen Heads Really Better than One?").

Heads are ranked by their importance (``attnlab.explain.head_importance``, normalised per attention
module as the paper does before comparing heads across layers) and the least important are removed
physically: a pruned model is the model that ``model.kept_heads`` describes, with smaller query,
key, value and output projections, into which the kept heads' weights are copied. Its outputs equal
the unpruned model's with the removed heads' outputs multiplied by zero.

Rules, each in one place:
- a head is removed with its key/value group: under grouped-query attention a group's key and value
  heads serve all its query heads, so whole groups are ranked (by the sum of their heads' scores) and
  removed, and ``round(fraction * heads)`` is rounded down to whole groups;
- every attention module keeps at least one head (group): removing them all would cut its layer's
  attention out, which is another architecture, not a pruned one;
- seq2seq: the encoder's self-attention and the decoder's self- and cross-attention are all
  candidates, ranked together (the paper prunes all three kinds);
- positional encodings with a parameter per head (ALiBi's slopes, T5's bucket biases) keep their
  whole table: each pruned module reads its kept heads' entries (``MultiHeadAttention.head_ids``).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

from attnlab.blocks.attention import MultiHeadAttention, attention_modules
from attnlab.models import build_model

PRUNING_KEY = "attnlab_pruning"  # a checkpoint entry of attnlab-compress: what pruning removed, and how


def total_heads(model: nn.Module) -> int:
    """The query heads of every attention module of ``model``, summed."""
    return sum(m.n_heads for m in attention_modules(model).values())


def heads_to_keep(model: nn.Module, scores: Tensor, fraction: float) -> list[list[int]]:
    """The heads each attention module keeps (indices among the model's ``n_heads``, increasing) when
    the least important ``round(fraction * total_heads(model))`` are removed, by whole key/value
    groups, at least one group kept per module.

    ``scores`` (modules, n_heads) holds each head's importance at its index (the rows of
    ``head_importance``; the entries of heads pruned before are ignored). Ties go to the earlier
    module and head, so the choice is deterministic.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction={fraction}: the share of heads to remove, in [0, 1)")
    modules = list(attention_modules(model).values())
    groups = []  # (score, module index, heads of the group)
    for i, attn in enumerate(modules):
        size = attn.n_heads // attn.n_kv_heads
        for g in range(0, attn.n_heads, size):
            heads = attn.head_ids[g : g + size]
            groups.append((float(sum(scores[i, h] for h in heads)), i, heads))
    target = round(fraction * total_heads(model))
    kept = [list(attn.head_ids) for attn in modules]
    removed = 0
    for _score, i, heads in sorted(groups, key=lambda group: (group[0], group[1], group[2][0])):
        if removed + len(heads) > target or len(kept[i]) == len(heads):
            continue  # over the target, or the module's last group
        kept[i] = [h for h in kept[i] if h not in heads]
        removed += len(heads)
    return kept


def prune_heads(model: nn.Module, kept: list[list[int]]) -> nn.Module:
    """A new model of ``model``'s config with ``model.kept_heads=kept``, holding ``model``'s weights
    (the kept heads' slices of the attention projections, every other weight as it is)."""
    cfg = replace(model.cfg, kept_heads=[list(heads) for heads in kept])
    cfg.check()  # whole groups, at least one head per module, one list per module
    state = model.state_dict()
    for (name, attn), heads in zip(attention_modules(model).items(), kept, strict=True):
        state.update(_kept_slices(attn, name, heads, state))
    pruned = build_model(cfg)
    pruned.load_state_dict(state)
    return pruned.to(next(model.parameters()).device).train(model.training)


def _kept_slices(attn: MultiHeadAttention, name: str, heads: list[int], state: dict) -> dict[str, Tensor]:
    """The state entries of one attention module cut to ``heads`` (indices among ``total_heads``)."""
    positions = [attn.head_ids.index(h) for h in heads]  # where the kept heads sit in this module
    size = attn.n_heads // attn.n_kv_heads
    kv_positions = sorted({p // size for p in positions})
    q_rows = _rows(positions, attn.head_dim)
    kv_rows = _rows(kv_positions, attn.head_dim)
    q_dim, kv_dim = attn.n_heads * attn.head_dim, attn.n_kv_heads * attn.head_dim
    if attn.cross:
        rows = {"q_proj": q_rows, "kv_proj": torch.cat([kv_rows, kv_dim + kv_rows])}
    else:
        rows = {"qkv_proj": torch.cat([q_rows, q_dim + kv_rows, q_dim + kv_dim + kv_rows])}
    cut = {}
    for proj, index in rows.items():
        for part in ("weight", "bias"):
            key = f"{name}.{proj}.{part}"
            if key in state:
                cut[key] = state[key].index_select(0, index)
    cut[f"{name}.out_proj.weight"] = state[f"{name}.out_proj.weight"].index_select(1, q_rows)
    return cut


def _rows(heads: list[int], head_dim: int) -> Tensor:
    """The rows (or columns) of a projection that hold ``heads``, each ``head_dim`` wide."""
    return torch.cat([torch.arange(h * head_dim, (h + 1) * head_dim) for h in heads])
