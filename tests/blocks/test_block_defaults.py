"""One default per setting, in the schema: every default a block's constructor (or builder, or settings
dataclass) has is either the schema's value of that setting, or belongs to no setting at all."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

from torch import nn

import attnlab.blocks
from attnlab.schema.mixers import MixerSizes
from attnlab.schema.model import GPTConfig, ModelConfig
from attnlab.schema.pos import RelativePos, RopePos, SinusoidalPos

# (block, argument) -> the schema's default of the setting it takes
SETTINGS = {
    ("MultiHeadAttention", "n_kv_heads"): ModelConfig.n_kv_heads,
    ("MultiHeadAttention", "dropout"): ModelConfig.attn_dropout,
    ("MultiHeadAttention", "scale"): ModelConfig.attn_scale,
    ("MultiHeadAttention", "qk_norm"): ModelConfig.qk_norm,
    ("MultiHeadAttention", "norm_eps"): ModelConfig.norm_eps,
    ("MultiHeadAttention", "backend"): ModelConfig.attn_backend,
    ("SelfAttention", "n_kv_heads"): ModelConfig.n_kv_heads,
    ("SelfAttention", "bias"): ModelConfig.bias,
    ("SelfAttention", "window"): ModelConfig.attn_window,
    ("CrossAttention", "n_kv_heads"): ModelConfig.n_kv_heads,
    ("CrossAttention", "bias"): ModelConfig.bias,
    ("FeedForward", "activation"): ModelConfig.activation,
    ("FeedForward", "bias"): ModelConfig.bias,
    ("FeedForward", "dropout"): ModelConfig.ffn_dropout,
    ("RMSNorm", "eps"): ModelConfig.norm_eps,
    ("build_norm", "eps"): ModelConfig.norm_eps,
    ("build_norm", "bias"): ModelConfig.norm_bias,
    ("SinusoidalPositionalEncoding", "layout"): SinusoidalPos.layout,
    ("RotaryPositionalEncoding", "base"): RopePos.rope_base,
    ("RelativePositionBias", "num_buckets"): RelativePos.num_buckets,
    ("RelativePositionBias", "max_distance"): RelativePos.max_distance,
    ("RopeScaling", "kind"): RopePos.rope_scaling,
    ("LatentAttention", "q_lora_rank"): MixerSizes.q_lora_rank,
    ("LatentAttention", "bias"): ModelConfig.bias,
    ("LatentAttention", "rope_base"): RopePos.rope_base,
    ("LatentAttention", "window"): ModelConfig.attn_window,
    ("LatentAttention", "scale"): ModelConfig.attn_scale,
    ("LatentAttention", "absorb"): MixerSizes.absorb,
    ("LatentAttention", "backend"): ModelConfig.attn_backend,
    ("DifferentialAttention", "n_kv_heads"): ModelConfig.n_kv_heads,
    ("DifferentialAttention", "norm_eps"): ModelConfig.norm_eps,
    ("GatedDeltaNet", "n_k_heads"): MixerSizes.linear_k_heads,
    ("GatedDeltaNet", "conv_kernel"): MixerSizes.conv_kernel,
    ("GatedDeltaNet", "chunk"): MixerSizes.chunk,
    ("GatedDeltaNet", "norm_eps"): ModelConfig.norm_eps,
    ("GatedRMSNorm", "eps"): ModelConfig.norm_eps,
    ("RopeScaling", "factor"): RopePos.rope_factor,
    ("RopeScaling", "beta_fast"): RopePos.rope_beta_fast,
    ("RopeScaling", "beta_slow"): RopePos.rope_beta_slow,
    ("RopeScaling", "attention_factor"): RopePos.rope_attn_factor,
    ("RopeScaling", "mscale"): RopePos.rope_mscale,
    ("RopeScaling", "mscale_all_dim"): RopePos.rope_mscale_all_dim,
    ("RopeScaling", "truncate"): RopePos.rope_truncate,
    ("RotaryPositionalEncoding", "fraction"): RopePos.rope_fraction,
    ("AttentionHooks", "softcap"): ModelConfig.attn_softcap,
    ("AttentionHooks", "sink"): ModelConfig.attn_sink,
    ("AttentionHooks", "sink_init"): ModelConfig.attn_sink_init,
    ("AttentionHooks", "gate"): ModelConfig.attn_gate,
    ("AttentionHooks", "gate_offset"): ModelConfig.attn_gate_offset,
    ("AttentionHooks", "value_residual"): ModelConfig.value_residual,
    ("AttentionHooks", "value_learned"): ModelConfig.value_residual_learned,
    ("Sinks", "init"): ModelConfig.attn_sink_init,
    ("OutputGate", "offset"): ModelConfig.attn_gate_offset,
}
# Defaults that are no setting of the schema: how a block is wired, or state
NOT_SETTINGS = {
    ("MultiHeadAttention", "head_ids"),  # a pruned module's heads (model.kept_heads, per module)
    ("SelfAttention", "pos"),  # the stack's positional encoding (None: none), built before it
    ("CrossAttention", "d_context"),  # cross-attention's context width (None: d_model)
    ("SinusoidalPositionalEncoding", "base"),  # the paper's 10000: no setting chooses another
    ("RotaryPositionalEncoding", "scaling"),  # None: no scaling (RopeScaling's defaults)
    ("RopeScaling", "original_max_len"),  # the schema's None means the model's max_seq_len
    ("RelativePositionBias", "bidirectional"),  # from the stack's causality, not a setting
    ("LMHead", "tied_to"),  # the token table it shares (model.tie_embeddings), built before it
    ("LMHead", "scale"),  # T5's d_model**-0.5 where model.tied_output_scale, else 1
    ("TransformerLayer", "cross_attention"),
    ("TransformerLayer", "self_heads"),
    ("TransformerLayer", "cross_heads"),
    ("TransformerStack", "kept_heads"),
    ("TransformerLayer", "kind"),  # the layer's entry of model.layout, read by the stack
    ("TransformerLayer", "index"),  # the layer's place in its stack
    ("SelfAttention", "hooks"),  # None: no hooks (AttentionHooks.of(model config) has the settings)
    ("SelfAttention", "shares_values"),  # the first layer of a model.value_residual stack
    ("DifferentialAttention", "layer"),  # the layer's number (sets λ_init), not a setting
    ("LatentAttention", "rope"),  # whether the layer rotates (its positions), derived from model.pos
    ("LatentAttention", "rope_interleave"),  # DeepSeek checkpoints' rotary layout (HF's rope_interleave)
    *(("RecurrentCache", name) for name in ("conv", "state", "seen", "dropped")),
    *(("LatentCache", name) for name in ("k", "v", "positions", "dropped", "reserve", "_buffers", "_start")),
    *(
        ("AttentionView", name)  # one forward pass's inputs, not settings
        for name in ("causal", "padding", "documents", "cache", "memory", "memory_padding", "first_values")
    ),
    ("KeyRule", "causal"),
    ("KeyRule", "window"),
    *(
        ("AttentionCache", name)
        for name in ("k", "v", "positions", "dropped", "reserve", "_buffers", "_start")
    ),
}


def block_defaults() -> dict[tuple[str, str], object]:
    """(block, argument) -> default, over every module of attnlab.blocks: ``nn.Module`` constructors,
    dataclass fields and ``build_*`` functions."""
    found: dict[tuple[str, str], object] = {}
    for info in pkgutil.walk_packages(attnlab.blocks.__path__, "attnlab.blocks."):  # mixers/ too
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
                defaults = {f.name: f.default for f in dataclasses.fields(obj)}
            elif inspect.isclass(obj) and issubclass(obj, nn.Module):
                defaults = {p.name: p.default for p in inspect.signature(obj.__init__).parameters.values()}
            elif inspect.isfunction(obj) and name.startswith("build"):
                defaults = {p.name: p.default for p in inspect.signature(obj).parameters.values()}
            else:
                continue
            for arg, default in defaults.items():
                if default is not inspect.Parameter.empty and default is not dataclasses.MISSING:
                    found[(name, arg)] = default
    return found


def test_every_block_default_is_the_schemas_or_no_setting() -> None:
    found = block_defaults()
    assert ("MultiHeadAttention", "norm_eps") in found  # the scan reads the blocks
    unknown = set(found) - set(SETTINGS) - NOT_SETTINGS
    assert not unknown, (
        f"a default outside the schema: {sorted(unknown)}; take it from the schema or require it"
    )
    differ = {
        key: (found[key], SETTINGS[key]) for key in SETTINGS if key in found and found[key] != SETTINGS[key]
    }
    assert not differ, f"block default != schema default: {differ}"


def test_layers_take_every_setting_from_the_model_config() -> None:
    """Layers and stacks read the model config itself: each block gets the config's value of each
    setting, whatever the value (no copy of the settings to fall out of step with the schema)."""
    from attnlab.blocks.layers import TransformerStack

    custom = dict(
        n_kv_heads=2,
        d_ff=24,
        activation="swiglu",
        norm="rmsnorm",
        norm_eps=1e-3,
        norm_first=False,
        bias=False,
        dropout=0.3,
        attn_dropout=0.2,
        ffn_dropout=0.1,
        attn_scale=0.5,
        attn_window=3,
        qk_norm=True,
    )
    for cfg in (GPTConfig(d_model=16, n_heads=4), GPTConfig(d_model=16, n_heads=4, **custom)):
        stack = TransformerStack(cfg, 2, None, cross_attention=True, final_norm=True)
        layer = stack.layers[1]
        attn, cross, ffn = layer.self_attn.fn, layer.cross_attn.fn, layer.ffn.fn
        for a in (attn, cross):
            assert (a.n_kv_heads, a.dropout, a.path) == (
                cfg.n_kv_heads or cfg.n_heads,
                cfg.attn_dropout,
                "sdpa",
            )
            assert a.scale == (cfg.attn_scale or (cfg.d_model // cfg.n_heads) ** -0.5)
            assert (a.q_norm is not None, a.out_proj.bias is not None) == (cfg.qk_norm, cfg.bias)
            assert a.q_norm is None or a.q_norm.eps == cfg.norm_eps
        assert (attn.window, cross.window) == (cfg.attn_window, None)
        assert (ffn.fc_in.out_features, ffn.gated, ffn.dropout.p) == (
            cfg.d_ff or 64,
            cfg.d_ff is not None,
            cfg.ffn_dropout,
        )
        for residual in (layer.self_attn, layer.cross_attn, layer.ffn):
            assert (residual.norm_first, residual.dropout.p) == (cfg.norm_first, cfg.dropout)
        for norm in (layer.self_attn.norm, stack.final_norm):
            assert norm.eps == cfg.norm_eps and type(norm).__name__ == (
                "RMSNorm" if cfg.norm == "rmsnorm" else "LayerNorm"
            )


def test_the_ignored_label_is_written_once() -> None:
    """The label no loss scores is ``schema.data.IGNORE_INDEX``; nothing else spells -100."""
    import re
    from pathlib import Path

    src = Path(attnlab.blocks.__file__).resolve().parents[1]
    literal = re.compile(r"(?<![\w.\-])-100\b")  # not the 0-100 of a BLEU scale
    found = [
        (str(path.relative_to(src)), line)
        for path in sorted(src.rglob("*.py"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if literal.search(line)
    ]
    assert found == [("schema/data.py", "IGNORE_INDEX = -100")]
