"""The coordinate check's instrument: each group's output size is measured where the model makes it,
and the standard parametrisation's logits grow with the width (the check's known answer for sp)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from attnlab.models.coordinates import activation_rms, width_slope

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments" / "mup"))
from coord_check import coordinate_check


def test_the_logits_size_is_the_models_own_logits_rms(tiny_model) -> None:
    model = tiny_model("gpt")
    batch = {"input_ids": torch.randint(0, 23, (2, 8)), "labels": torch.randint(0, 23, (2, 8))}
    sizes = activation_rms(model, batch)
    assert set(sizes) == {"embedding", "attention output", "feed-forward output", "residual stream", "logits"}
    with torch.no_grad():
        assert sizes["logits"] == pytest.approx(float(model.logits(batch).pow(2).mean().sqrt()), rel=1e-6)
    assert not model._forward_hooks and not any(m._forward_hooks for m in model.modules())  # removed


def test_a_size_that_doubles_with_the_width_has_slope_one() -> None:
    assert width_slope([32, 64, 128], [1.0, 2.0, 4.0]) == pytest.approx(1.0)
    assert width_slope([32, 64, 128], [3.0, 3.0, 3.0]) == pytest.approx(0.0, abs=1e-12)


def test_under_sp_the_logits_grow_with_the_width_after_a_few_steps() -> None:
    _, slopes = coordinate_check(steps=5, lr=3e-3, parametrization="sp", widths=[32, 64, 128])
    assert slopes[5]["logits"] > 0.3  # measured +0.59 over 32..256 (experiments/mup)
    assert abs(slopes[0]["embedding"]) < 0.1  # a lookup at a fixed init_std: the same size at any width


def test_under_mup_every_group_keeps_its_size_as_the_model_widens() -> None:
    _, slopes = coordinate_check(steps=5, lr=3e-3, parametrization="mup", widths=[32, 64, 128])
    assert all(abs(slope) <= 0.1 for slope in slopes[5].values()), slopes[5]
