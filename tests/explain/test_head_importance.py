"""Head importance (Michel et al. 2019)."""

from __future__ import annotations

import pytest
import torch

from attnlab.explain import head_importance
from attnlab.explain.inputs import attention_modules, batch_loss


def lm_batches(n: int = 2) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 23, (n, 3, 9), generator=g)
    return [{"input_ids": x[:, :-1], "labels": x[:, 1:]} for x in ids]


def test_a_head_that_cannot_reach_the_loss_scores_zero(make_model) -> None:
    model = make_model("gpt")
    attn = model.stack.layers[1].self_attn.fn
    with torch.no_grad():
        attn.out_proj.weight[:, 2 * attn.head_dim : 3 * attn.head_dim] = 0  # head 2 of layer 1 masked out
    result = head_importance(model, lm_batches())
    assert result.names == ["stack.layers.0.self_attn.fn", "stack.layers.1.self_attn.fn"]
    assert result.scores[1, 2] == 0
    assert (result.scores[1, [0, 1, 3]] > 0).all() and (result.scores[0] > 0).all()
    torch.testing.assert_close(result.scores.norm(dim=1), torch.ones(2))


def test_unnormalised_importance_is_the_loss_sensitivity_to_the_gate(make_model) -> None:
    model = make_model("gpt").double()
    batch = lm_batches(1)[0]
    scores = head_importance(model, [batch], normalize=False).scores
    attn = attention_modules(model)["stack.layers.0.self_attn.fn"]
    eps = 1e-4
    losses = []
    for sign in (1, -1):
        attn.head_gate = torch.ones(4, dtype=torch.float64)
        attn.head_gate[1] += sign * eps
        losses.append(float(batch_loss(model, batch)))
    attn.head_gate = None
    assert abs(losses[0] - losses[1]) / (2 * eps) == pytest.approx(float(scores[0, 1]), rel=1e-4)


def test_gates_are_removed_and_parameters_get_no_gradients(make_model) -> None:
    model = make_model("seq2seq")
    src = torch.tensor([[3, 4, 5, 6]])
    batch = {"src_ids": src, "tgt_in": torch.tensor([[1, 7, 8]]), "labels": torch.tensor([[7, 8, 2]])}
    result = head_importance(model, [batch, batch, batch], max_batches=2)
    assert result.scores.shape == (6, 4)  # encoder self x2, decoder self x2, decoder cross x2
    assert "decoder layer 0 cross" in result.labels
    assert all(m.head_gate is None for m in attention_modules(model).values())
    assert all(p.grad is None for p in model.parameters())
    assert result.table().splitlines()[1].startswith("encoder layer 0 self")


def test_no_batches_is_a_clear_error(make_model) -> None:
    with pytest.raises(ValueError, match="got no batches"):
        head_importance(make_model("gpt"), [])
