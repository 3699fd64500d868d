"""The loss is compiled where the model is (``attnlab.tasks.losses.cross_entropy``): the same value, and
a compiled model is recognised as such."""

from __future__ import annotations

import torch

from attnlab.tasks.losses import cross_entropy, is_compiled


def test_the_compiled_loss_equals_the_plain_one_with_ignored_labels_and_smoothing() -> None:
    logits = torch.randn(2, 5, 11, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(1))
    labels[0, :2] = -100  # padding: not counted
    for smoothing in (0.0, 0.1):
        plain = cross_entropy(logits, labels, smoothing)
        torch.testing.assert_close(
            cross_entropy(logits, labels, smoothing, compiled=True), plain, atol=1e-6, rtol=0
        )


def test_a_model_compiled_in_place_is_recognised(tiny_model) -> None:
    model = tiny_model("gpt", "rope")
    assert not is_compiled(model)
    model.compile()
    assert is_compiled(model)
