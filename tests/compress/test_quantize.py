"""int8 weights (attnlab.compress.quantize) on tiny models of every family: every Linear weight becomes
int8 with per-output-channel scales, the logits stay close to float32's, and the saved state dict is
plain data that loads back into a fresh model's quantized layout with the same outputs."""

from __future__ import annotations

import io
import logging

import pytest
import torch
from torch import nn

from attnlab.compress import allow_quantized_tensors, quantize_int8, quantized_layout

FAMILIES = ("gpt", "bert", "seq2seq", "vit")
IDS = torch.tensor([[3, 7, 9, 4, 12, 5], [8, 2, 6, 11, 1, 4]])


def batch(family: str) -> dict[str, torch.Tensor]:
    mask = torch.ones_like(IDS, dtype=torch.bool)
    return {
        "gpt": {"input_ids": IDS},
        "bert": {"input_ids": IDS, "attention_mask": mask},
        "seq2seq": {"src_ids": IDS, "src_mask": mask, "tgt_in": IDS[:, :4]},
        "vit": {"pixel_values": torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))},
    }[family]


def int8_weights(model: nn.Module) -> list[torch.Tensor]:
    """The int8 values of every Linear weight (torchao's Int8Tensor keeps them as ``qdata``)."""
    return [m.weight.qdata for m in model.modules() if isinstance(m, nn.Linear)]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_linear_weight_is_int8_and_the_logits_stay_close(tiny_model, family: str) -> None:
    model = tiny_model(family)
    n_linear = sum(isinstance(m, nn.Linear) for m in model.modules())
    with torch.no_grad():
        reference = model.logits(batch(family))
        quantized = quantize_int8(model).logits(batch(family))
    weights = int8_weights(model)
    assert len(weights) == n_linear > 0
    assert all(w.dtype == torch.int8 for w in weights)
    error = (quantized - reference).abs().max()
    # quantized, and close: each weight within half a step of 1/127 of its row's largest (the wide
    # init of these tiny models makes 2-3% of the largest logit the most it accumulates)
    assert 0 < error < 0.05 * reference.abs().max()


@pytest.mark.parametrize("family", FAMILIES)
def test_the_state_dict_loads_weights_only_into_a_fresh_quantized_layout(tiny_model, family: str) -> None:
    model = quantize_int8(tiny_model(family))
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)  # plain data: no pickled module or function
    fresh = quantized_layout(tiny_model(family, init_std=0.05), "int8")  # other weights
    fresh.load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(fresh.logits(batch(family)), model.logits(batch(family)), rtol=0, atol=0)


def test_gradient_x_input_runs_through_int8_layers(tiny_model) -> None:
    """attnlab-explain's attributions need gradients at the inputs: weight-only int8 keeps them, and
    they stay close to float32's."""
    from attnlab.explain import token_attribution

    model = tiny_model("gpt")
    reference = token_attribution(model, {"input_ids": IDS})
    scores = token_attribution(quantize_int8(model), {"input_ids": IDS})
    assert scores.abs().min() > 0
    assert (scores - reference).abs().max() < 0.05 * reference.abs().max()


def test_an_unknown_method_is_named(tiny_model) -> None:
    with pytest.raises(
        ValueError, match=r"quantization method 'int4' is unknown to this attnlab \(known: int8\)"
    ):
        quantized_layout(tiny_model("gpt"), "int4")


def test_a_file_that_is_not_a_checkpoint_is_left_to_torch_load(tmp_path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a zip archive")
    allow_quantized_tensors(text)  # no error of its own
    allow_quantized_tensors(tmp_path / "missing.ckpt")


@pytest.mark.slow
@pytest.mark.process_contract("console")
def test_importing_torchao_prints_nothing(tmp_path) -> None:
    """torchao's import logs its CUDA-only extensions that fail to load and a pytree deprecation:
    the quiet import drops exactly those, in a fresh interpreter (torchao imports once per process)."""
    import sys

    import processes

    code = (
        "import logging; logging.basicConfig(level=logging.WARNING)\n"
        "from attnlab.compress.quantize import torchao_quantization\n"
        "torchao_quantization()\n"
        "logging.getLogger('torchao').warning('torchao logs after the import')\n"
    )
    result = processes.run([sys.executable, "-c", code], tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == ["WARNING:torchao:torchao logs after the import"]
    assert logging.getLogger("torchao").filters == []
