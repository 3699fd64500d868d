"""Head pruning (attnlab.compress.prune) on tiny models of every family and positional encoding: a
pruned model computes exactly what the unpruned one computes with the removed heads' outputs
multiplied by zero, its config rebuilds it, the KV cache gives the full pass's logits, and the rules
(whole key/value groups, a head kept in every module) hold."""

from __future__ import annotations

import io

import pytest
import torch

from attnlab.blocks import attention_modules
from attnlab.compress.prune import heads_to_keep, prune_heads, total_heads
from attnlab.explain import head_gates, head_importance
from attnlab.models import build_model
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import plain, read_model_config

FAMILIES = ("gpt", "bert", "seq2seq", "vit")
POSITIONS = ("none", "sinusoidal", "learned", "rope", "alibi", "relative")
IDS = torch.tensor([[3, 7, 9, 4, 12, 5], [8, 2, 6, 11, 1, 4]])


def batch(family: str) -> dict[str, torch.Tensor]:
    mask = torch.ones_like(IDS, dtype=torch.bool)
    mask[1, -2:] = False  # padding, so masks meet the pruned heads too
    return {
        "gpt": {"input_ids": IDS, "labels": IDS},
        "bert": {"input_ids": IDS, "attention_mask": mask, "labels": IDS},
        "seq2seq": {"src_ids": IDS, "src_mask": mask, "tgt_in": IDS[:, :4], "labels": IDS[:, 1:5]},
        "vit": {
            "pixel_values": torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0)),
            "labels": torch.tensor([0, 2]),
        },
    }[family]


def random_scores(model: torch.nn.Module, seed: int = 1) -> torch.Tensor:
    modules = attention_modules(model)
    heads = max(m.total_heads for m in modules.values())
    return torch.rand(len(modules), heads, generator=torch.Generator().manual_seed(seed))


def masked_logits(model: torch.nn.Module, kept: list[list[int]], data: dict) -> torch.Tensor:
    """The unpruned model's logits with every head outside ``kept`` multiplied by zero."""
    scales = {}
    for (name, attn), heads in zip(attention_modules(model).items(), kept):
        scales[name] = torch.tensor([float(h in heads) for h in attn.head_ids])
    with torch.no_grad(), head_gates(model, scales):
        return model.logits(data)


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_pruned_model_equals_the_unpruned_one_with_those_heads_masked(tiny_model, family, pos) -> None:
    model = tiny_model(family, pos)
    kept = heads_to_keep(model, random_scores(model), 0.5)
    pruned = prune_heads(model, kept)
    assert total_heads(pruned) == total_heads(model) // 2
    assert [m.n_heads for m in attention_modules(pruned).values()] == [len(k) for k in kept]
    with torch.no_grad():
        logits = pruned.logits(batch(family))
    torch.testing.assert_close(logits, masked_logits(model, kept, batch(family)), rtol=0, atol=1e-5)


def test_grouped_query_heads_are_pruned_by_whole_groups(tiny_model) -> None:
    model = tiny_model("gpt", "alibi", n_kv_heads=2)  # groups {0, 1} and {2, 3}
    scores = torch.tensor([[0.9, 0.1, 0.8, 0.7], [0.1, 0.2, 0.9, 0.9]])
    kept = heads_to_keep(model, scores, 0.25)  # 2 of 8 heads: the weakest group, layer 1's {0, 1}
    assert kept == [[0, 1, 2, 3], [2, 3]]
    pruned = prune_heads(model, kept)
    assert [(m.n_heads, m.n_kv_heads) for m in attention_modules(pruned).values()] == [(4, 2), (2, 1)]
    with torch.no_grad():
        logits = pruned.logits(batch("gpt"))
    torch.testing.assert_close(logits, masked_logits(model, kept, batch("gpt")), rtol=0, atol=1e-5)
    # 3 of 8 heads is not whole groups: rounded down to one group
    assert total_heads(prune_heads(model, heads_to_keep(model, scores, 0.375))) == 6


def test_the_least_important_heads_go_and_every_module_keeps_one(tiny_model) -> None:
    model = tiny_model("gpt")
    scores = torch.tensor([[0.5, 0.1, 0.4, 0.3], [0.2, 0.6, 0.05, 0.7]])
    assert heads_to_keep(model, scores, 0.25) == [[0, 2, 3], [0, 1, 3]]  # 0.05 and 0.1 go
    assert heads_to_keep(model, scores, 0.0) == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert heads_to_keep(model, scores, 0.99) == [[0], [3]]  # 8 heads asked, 6 removable
    with pytest.raises(ValueError, match=r"fraction=1.0: the share of heads to remove, in \[0, 1\)"):
        heads_to_keep(model, scores, 1.0)


def test_seq2seq_prunes_self_and_cross_attention(tiny_model) -> None:
    model = tiny_model("seq2seq")
    names = list(attention_modules(model))
    assert names[2:4] == ["decoder.layers.0.self_attn.fn", "decoder.layers.0.cross_attn.fn"]
    scores = torch.ones(len(names), 4)
    scores[3, 1] = 0.0  # the first decoder layer's cross-attention
    scores[0, 2] = 0.0  # the first encoder layer's self-attention
    kept = heads_to_keep(model, scores, 2 / 24)
    assert kept[0] == [0, 1, 3] and kept[3] == [0, 2, 3]
    assert all(heads == [0, 1, 2, 3] for i, heads in enumerate(kept) if i not in (0, 3))


def test_the_config_rebuilds_the_pruned_model_from_its_state_dict(tiny_model) -> None:
    model = tiny_model("seq2seq", "relative")
    pruned = prune_heads(model, heads_to_keep(model, random_scores(model), 0.375))
    saved = plain(pruned.cfg)  # what a checkpoint holds: plain data
    buffer = io.BytesIO()
    torch.save({"model": saved, "state": pruned.state_dict()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    rebuilt = build_model(read_model_config(loaded["model"])).eval()
    rebuilt.load_state_dict(loaded["state"])
    assert rebuilt.cfg.kept_heads == pruned.cfg.kept_heads
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.logits(batch("seq2seq")), pruned.logits(batch("seq2seq")))


def test_pruning_twice_keeps_the_original_head_indices(tiny_model) -> None:
    model = tiny_model("gpt", "alibi")
    once = prune_heads(model, [[0, 2, 3], [1, 3]])
    kept = heads_to_keep(once, torch.tensor([[0.9, 0, 0.1, 0.8], [0, 0.5, 0, 0.6]]), 0.2)  # 1 of 5
    assert kept == [[0, 3], [1, 3]]
    twice = prune_heads(once, kept)
    with torch.no_grad():
        logits = twice.logits(batch("gpt"))
    torch.testing.assert_close(logits, masked_logits(model, kept, batch("gpt")), rtol=0, atol=1e-5)


@pytest.mark.parametrize("pos", ["alibi", "rope", "relative", "learned"])
def test_the_kv_cache_of_a_pruned_decoder_gives_the_full_pass(tiny_model, pos) -> None:
    model = tiny_model("gpt", pos, n_kv_heads=2)
    pruned = prune_heads(model, [[2, 3], [0, 1]])
    cache = pruned.new_cache()
    with torch.no_grad():
        full = pruned(IDS)
        steps = [pruned(IDS[:, :3], cache=cache)]
        steps += [pruned(IDS[:, t : t + 1], cache=cache) for t in range(3, IDS.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


def test_the_kv_cache_of_a_pruned_seq2seq_gives_the_full_pass(tiny_model) -> None:
    model = tiny_model("seq2seq", "relative")
    pruned = prune_heads(model, heads_to_keep(model, random_scores(model), 0.5))
    src, tgt = IDS, IDS[:, :4]
    cache = pruned.new_cache()
    with torch.no_grad():
        memory = pruned.encode(src)
        full = pruned.decode(tgt, memory)
        steps = [pruned.decode(tgt[:, t : t + 1], memory, cache=cache) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


def test_head_importance_of_a_pruned_model_scores_its_heads_at_their_indices(tiny_model) -> None:
    model = tiny_model("gpt")
    pruned = prune_heads(model, [[1, 3], [0, 1, 2]])
    result = head_importance(pruned, [batch("gpt")])
    assert result.scores.shape == (2, 4)
    assert result.scores.isnan().tolist() == [[True, False, True, False], [False, False, False, True]]
    assert (result.scores.nan_to_num() > 0).sum() == 5


@pytest.mark.parametrize(
    ("kept", "message"),
    [
        ([[0, 1, 2, 3]], r"model.kept_heads=\[\[0,1,2,3\]\]: needs one list per attention module: 2 lists"),
        ([[0, 1], []], r"model.kept_heads\[1\]=\[\]: keep at least one head in every attention module"),
        ([[0, 1], [3, 1]], r"model.kept_heads\[1\]=\[3,1\]: distinct increasing head indices in 0..3"),
        ([[0, 1], [4]], r"model.kept_heads\[1\]=\[4\]: distinct increasing head indices in 0..3"),
        ([[0, 1], [1, 2]], r"model.kept_heads\[1\]=\[1,2\]: keep whole key/value groups: with n_heads=4"),
    ],
)
def test_kept_heads_that_build_no_pruned_model_are_refused(tiny_model, kept, message) -> None:
    model = tiny_model("gpt", n_kv_heads=2)
    with pytest.raises(ConfigError, match=message):
        prune_heads(model, kept)
