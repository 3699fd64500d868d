"""The parity cases: tiny, randomly initialised Hugging Face models built from config objects (no
downloads), every parameter perturbed (biases and norm weights too, so a misplaced one shows), mapped
into attnlab with ``attnlab.models.hf`` and compared in float32 eval mode on random, padded batches.
``measure.py`` prints them as the table of ``results/parity.md``; ``tests/models/test_hf_parity.py``
holds each to ``TOL``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import transformers
from torch import Tensor, nn

from attnlab.models.hf import from_transformers
from attnlab.schema.model import ModelConfig

TOL = 1e-5
VOCAB, BATCH, LEN = 64, 3, 9
ORIGINAL, LONG = 16, 40  # a scaled RoPE's original context, and a sequence 2.5 times longer


class Result(NamedTuple):
    cfg: ModelConfig  # the attnlab config the checkpoint was mapped to
    diffs: dict[str, tuple[float, float]]  # output name -> (max abs difference, max abs reference value)


def reference(cls: type, config: object) -> nn.Module:
    """A Hugging Face model with eager attention and every parameter randomly perturbed."""
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # frozen ones (Marian's sinusoids) are computed, not learned
                p.add_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("final_logits_bias"):
                b.add_(0.1 * torch.randn_like(b))
    return model


def ids(length: int = LEN, vocab: int = VOCAB) -> Tensor:
    return torch.randint(0, vocab, (BATCH, length))


def right_padded(length: int = LEN) -> Tensor:
    """Attention mask (B, T) with rows of decreasing length: full, two thirds, one third."""
    lengths = torch.tensor([length, 2 * length // 3, length // 3])
    return (torch.arange(length) < lengths[:, None]).long()


def diff(ref: Tensor, ours: Tensor) -> tuple[float, float]:
    assert ref.shape == ours.shape, (
        f"shapes differ: reference {tuple(ref.shape)}, attnlab {tuple(ours.shape)}"
    )
    scale = ref.abs().max().item()
    assert scale > 0.1, "degenerate reference outputs would make the comparison vacuous"
    return (ref - ours).abs().max().item(), scale


# Comparisons: a reference model and its attnlab twin on the same random (padded) inputs


def decoder_lm(hf: nn.Module, ours: nn.Module) -> Result:
    """Causal-LM logits of a right-padded batch."""
    x, mask = ids(), right_padded()
    return Result(ours.cfg, {"logits": diff(hf(x, attention_mask=mask).logits, ours(x, attention_mask=mask))})


def masked_lm(hf: nn.Module, ours: nn.Module) -> Result:
    """Hidden states and MLM logits with token types and padding."""
    x, mask, types = ids(), right_padded(), torch.randint(0, 2, (BATCH, LEN))
    out = hf(x, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    hidden = ours(x, mask, types)
    return Result(
        ours.cfg,
        {
            "hidden states": diff(out.hidden_states[-1], hidden),
            "MLM logits": diff(out.logits, ours.mlm_logits(hidden)),
        },
    )


def text_classifier(hf: nn.Module, ours: nn.Module) -> Result:
    x, mask, types = ids(), right_padded(), torch.randint(0, 2, (BATCH, LEN))
    ref = hf(x, attention_mask=mask, token_type_ids=types).logits
    return Result(ours.cfg, {"class logits": diff(ref, ours.classify(ours(x, mask, types), mask))})


def image_classifier(hf: nn.Module, ours: nn.Module) -> Result:
    images = torch.randn(BATCH, 3, 16, 16)
    return Result(
        ours.cfg,
        {
            "hidden states": diff(hf.vit(images).last_hidden_state, ours.features(images)),
            "logits": diff(hf(images).logits, ours(images)),
        },
    )


def long_decoder_lm(hf: nn.Module, ours: nn.Module) -> Result:
    """Causal-LM logits of a right-padded batch longer than the RoPE's original context."""
    x, mask = ids(LONG), right_padded(LONG)
    return Result(ours.cfg, {"logits": diff(hf(x, attention_mask=mask).logits, ours(x, attention_mask=mask))})


def seq2seq(hf: nn.Module, ours: nn.Module) -> Result:
    """Teacher-forced logits with padded sources and padded targets."""
    src, src_mask, tgt, tgt_mask = ids(11), right_padded(11), ids(7), right_padded(7)
    ref = hf(
        input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt, decoder_attention_mask=tgt_mask
    ).logits
    return Result(ours.cfg, {"logits": diff(ref, ours(src, tgt, src_mask, tgt_mask))})


# Tiny reference models

BERT = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    max_position_embeddings=16,
    type_vocab_size=2,
    num_labels=3,
)


def gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0
    )
    return reference(transformers.GPT2LMHeadModel, config)


def llama() -> nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    return reference(transformers.LlamaForCausalLM, config)


def scaled_llama(rope_parameters: dict) -> Callable[[], nn.Module]:
    """Llama with a scaled RoPE (``rope_parameters`` of transformers 5) over an ORIGINAL-token context.

    Head size 16 and base 100 put YaRN's ramp across several frequencies (with base 10000 it would
    fall between the first two).
    """

    def build() -> nn.Module:
        yarn = rope_parameters["rope_type"] == "yarn"
        config = transformers.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4 * ORIGINAL if yarn else ORIGINAL,
            rope_parameters={"rope_theta": 100.0, **rope_parameters},
        )
        return reference(transformers.LlamaForCausalLM, config)

    return build


WINDOW = 4  # Mistral's and Qwen3's sliding window: shorter than the LEN-token test batches


def mistral() -> nn.Module:
    config = transformers.MistralConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        sliding_window=WINDOW,
    )
    return reference(transformers.MistralForCausalLM, config)


def qwen3(window: bool) -> Callable[[], nn.Module]:
    """Qwen3 with full attention, or with every layer windowed (``max_window_layers=0``)."""

    def build() -> nn.Module:
        config = transformers.Qwen3Config(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            max_position_embeddings=32,
            use_sliding_window=window,
            sliding_window=WINDOW,
            max_window_layers=0,
        )
        return reference(transformers.Qwen3ForCausalLM, config)

    return build


def qwen3_mixed() -> nn.Module:
    """Qwen3 whose ``layer_types`` mix sliding and full layers (full, sliding, full, sliding)."""
    config = transformers.Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=32,
        use_sliding_window=True,
        sliding_window=WINDOW,
        layer_types=["full_attention", "sliding_attention"] * 2,
    )
    return reference(transformers.Qwen3ForCausalLM, config)


def smollm3() -> nn.Module:
    """SmolLM3 with its default NoPE every fourth layer, and sliding windows on the NoPE layers."""
    config = transformers.SmolLM3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        use_sliding_window=True,
        sliding_window=WINDOW,
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return reference(transformers.SmolLM3ForCausalLM, config)


def gemma2() -> nn.Module:
    """Gemma 2: soft-capped scores and logits (caps small enough to bend them), alternating windows,
    sandwich norms, its own query scale."""
    config = transformers.Gemma2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=32,
        query_pre_attn_scalar=12,
        sliding_window=WINDOW,
        attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0,
    )
    return reference(transformers.Gemma2ForCausalLM, config)


def phi3_partial() -> nn.Module:
    """Phi-3 (Llama's block, fused projections) rotating half of each head: ``partial_rotary_factor=0.5``."""
    config = transformers.Phi3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0, "partial_rotary_factor": 0.5},
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return reference(transformers.Phi3ForCausalLM, config)


def bloom() -> nn.Module:
    config = transformers.BloomConfig(
        vocab_size=VOCAB, hidden_size=48, n_layer=2, n_head=6
    )  # 6: not a power of 2
    return reference(transformers.BloomForCausalLM, config)


def bert_mlm() -> nn.Module:
    return reference(transformers.BertForMaskedLM, transformers.BertConfig(**BERT))


def bert_classifier() -> nn.Module:
    return reference(transformers.BertForSequenceClassification, transformers.BertConfig(**BERT))


def vit() -> nn.Module:
    config = transformers.ViTConfig(
        image_size=16,
        patch_size=4,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        num_labels=5,
    )
    return reference(transformers.ViTForImageClassification, config)


def marian() -> nn.Module:
    config = transformers.MarianConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=48,
        decoder_ffn_dim=48,
        max_position_embeddings=32,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    return reference(transformers.MarianMTModel, config)


def t5(feed_forward_proj: str) -> Callable[[], nn.Module]:
    """T5 v1.0 (``relu``: tied, outputs scaled) or v1.1 (``gated-gelu``: outputs not scaled)."""

    def build() -> nn.Module:
        v1_0 = feed_forward_proj == "relu"
        # 8 buckets with offsets up to 10 reach T5's logarithmic buckets, not only the exact ones.
        # v1.1 with T5's own init (embeddings of std 1) has unscaled logits up to 17, where float32 rounding
        # alone is ~1e-5 (with norms run in float64 the two agree to 1e-14): a smaller init keeps them near 2.
        config = transformers.T5Config(
            vocab_size=VOCAB,
            d_model=32,
            d_kv=8,
            d_ff=48,
            num_layers=2,
            num_decoder_layers=3,
            num_heads=4,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=16,
            feed_forward_proj=feed_forward_proj,
            tie_word_embeddings=v1_0,
            initializer_factor=1.0 if v1_0 else 0.25,
        )
        return reference(transformers.T5ForConditionalGeneration, config)

    return build


CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[nn.Module, nn.Module], Result]]] = {
    "GPT-2": (gpt2, decoder_lm),
    "BERT (masked LM)": (bert_mlm, masked_lm),
    "BERT (classifier)": (bert_classifier, text_classifier),
    "ViT": (vit, image_classifier),
    "Marian": (marian, seq2seq),
    "T5 v1.0 (ReLU)": (t5("relu"), seq2seq),
    "T5 v1.1 (gated-gelu)": (t5("gated-gelu"), seq2seq),
    "Llama (GQA)": (llama, decoder_lm),
    "BLOOM": (bloom, decoder_lm),
    "Mistral (sliding window)": (mistral, decoder_lm),
    "Qwen3 (QK-norm, GQA)": (qwen3(window=False), decoder_lm),
    "Qwen3 (QK-norm, sliding window)": (qwen3(window=True), decoder_lm),
    "Qwen3 (mixed sliding/full layer_types)": (qwen3_mixed, decoder_lm),
    "SmolLM3 (NoPE every fourth layer)": (smollm3, decoder_lm),
    "Gemma 2 (soft-capping, alternating windows)": (gemma2, decoder_lm),
    "Phi-3 (partial RoPE 0.5)": (phi3_partial, decoder_lm),
    "Llama (RoPE linear)": (scaled_llama({"rope_type": "linear", "factor": 2.0}), long_decoder_lm),
    "Llama (RoPE dynamic NTK)": (scaled_llama({"rope_type": "dynamic", "factor": 3.0}), long_decoder_lm),
    "Llama (RoPE YaRN)": (
        scaled_llama({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL}),
        long_decoder_lm,
    ),
}


@torch.no_grad()
def run(name: str) -> Result:
    """Build the reference of case ``name``, map it into attnlab and compare."""
    build, compare = CASES[name]
    hf = build()
    return compare(hf, from_transformers(hf))
