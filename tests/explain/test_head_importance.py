"""Head importance (Michel et al. 2019)."""

from __future__ import annotations

import pytest
import torch

from attnlab.blocks.attention import attention_modules
from attnlab.explain import example_losses, head_gates, head_importance


def lm_batches(n: int = 2) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 23, (n, 3, 9), generator=g)
    return [{"input_ids": x[:, :-1], "labels": x[:, 1:]} for x in ids]


def test_a_head_that_cannot_reach_the_loss_scores_zero(tiny_model) -> None:
    model = tiny_model("gpt")
    attn = model.stack.layers[1].self_attn.fn
    with torch.no_grad():
        attn.out_proj.weight[:, 2 * attn.head_dim : 3 * attn.head_dim] = 0  # head 2 of layer 1 masked out
    result = head_importance(model, lm_batches())
    assert result.names == ["stack.layers.0.self_attn.fn", "stack.layers.1.self_attn.fn"]
    assert result.scores[1, 2] == 0
    assert (result.scores[1, [0, 1, 3]] > 0).all() and (result.scores[0] > 0).all()
    torch.testing.assert_close(result.scores.norm(dim=1), torch.ones(2))


def scaled_head(attn, head: int, factor: float):
    """Scaling a head's columns of ``out_proj`` scales the head's output: the gate, without the hooks."""
    columns = slice(head * attn.head_dim, (head + 1) * attn.head_dim)
    original = attn.out_proj.weight[:, columns].clone()

    class Scaled:
        def __enter__(self) -> None:
            with torch.no_grad():
                attn.out_proj.weight[:, columns] = original * factor

        def __exit__(self, *exc: object) -> None:
            with torch.no_grad():
                attn.out_proj.weight[:, columns] = original

    return Scaled()


def test_unnormalised_importance_is_the_mean_loss_sensitivity_to_the_gate(tiny_model) -> None:
    """Finite differences of each example's own loss: the score is the mean of their absolute values."""
    model = tiny_model("gpt").double()
    batch = lm_batches(1)[0]
    scores = head_importance(model, [batch], normalize=False).scores
    attn = attention_modules(model)["stack.layers.0.self_attn.fn"]
    eps = 1e-4
    losses = []
    for sign in (1, -1):
        with scaled_head(attn, 1, 1 + sign * eps), torch.no_grad():
            losses.append(example_losses(model, batch))
    per_example = ((losses[0] - losses[1]) / (2 * eps)).abs()
    assert per_example.shape == (3,)
    assert float(per_example.mean()) == pytest.approx(float(scores[0, 1]), rel=1e-4)


def test_one_backward_pass_equals_one_example_at_a_time(tiny_model) -> None:
    """Brute force: each example alone, its loss backpropagated to the parameters; the gradient of a
    head's gate is sum(W_h * dL/dW_h) over that head's columns W_h of ``out_proj``."""
    model = tiny_model("seq2seq").double()
    batch = {
        "src_ids": torch.tensor([[3, 4, 5, 6], [7, 8, 9, 10], [11, 3, 12, 4]]),
        "src_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]]).bool(),
        "tgt_in": torch.tensor([[1, 7, 8], [1, 9, 13], [1, 5, 5]]),
        "labels": torch.tensor([[7, 8, 2], [9, -100, -100], [5, 5, 2]]),
    }
    scores = head_importance(model, [batch], normalize=False).scores
    modules = attention_modules(model)
    brute = torch.zeros(len(modules), 4, dtype=torch.float64)
    signed = torch.zeros_like(brute)
    for b in range(3):
        model.zero_grad()
        example_losses(model, {k: v[b : b + 1] for k, v in batch.items()}).sum().backward()
        for row, attn in enumerate(modules.values()):
            w, g = attn.out_proj.weight, attn.out_proj.weight.grad
            per_head = (w * g).view(w.shape[0], 4, attn.head_dim).sum(dim=(0, 2))
            brute[row] += per_head.abs() / 3
            signed[row] += per_head / 3
    torch.testing.assert_close(scores, brute.float(), rtol=1e-5, atol=1e-7)
    assert (scores > 0).all()
    # the examples disagree in sign for some heads, so |E_x g| (the batch mean's absolute value)
    # would differ from E_x |g|: this comparison can tell the two apart
    assert (signed.abs() < brute * 0.9).any()


def test_a_zero_scale_masks_a_head_as_dropping_its_columns(tiny_model) -> None:
    """Gating head 0 with 0 equals dropping its columns of the output projection."""
    model = tiny_model("gpt")
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    name = "stack.layers.1.self_attn.fn"
    with torch.no_grad():
        ungated = model(ids)
        with head_gates(model):
            torch.testing.assert_close(model(ids), ungated)
        with head_gates(model, {name: torch.tensor([0.0, 1.0, 1.0, 1.0])}):
            gated = model(ids)
        with scaled_head(attention_modules(model)[name], 0, 0.0):
            torch.testing.assert_close(gated, model(ids))
    assert not torch.allclose(gated, ungated)


def test_gates_are_removed_and_parameters_get_no_gradients(tiny_model) -> None:
    model = tiny_model("seq2seq")
    src = torch.tensor([[3, 4, 5, 6]])
    batch = {"src_ids": src, "tgt_in": torch.tensor([[1, 7, 8]]), "labels": torch.tensor([[7, 8, 2]])}
    result = head_importance(model, [batch, batch, batch], max_batches=2)
    assert result.scores.shape == (6, 4)  # encoder self x2, decoder self x2, decoder cross x2
    assert "decoder layer 0 cross" in result.labels
    assert all(not m.out_proj._forward_pre_hooks for m in attention_modules(model).values())
    assert all(p.grad is None for p in model.parameters())
    assert result.table().splitlines()[1].startswith("encoder layer 0 self")


def test_no_batches_is_a_clear_error(tiny_model) -> None:
    with pytest.raises(ValueError, match="got no batches"):
        head_importance(tiny_model("gpt"), [])
