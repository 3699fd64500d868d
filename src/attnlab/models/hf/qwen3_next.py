"""Qwen3-Next (``Qwen3NextForCausalLM``) with a dense MLP in every layer: gated DeltaNet layers and
gated full-attention layers, as ``layer_types`` lays them out.

- ``linear_attention`` layers are attnlab's gated DeltaNet (``model.layout`` entries ``deltanet``), sized
  by ``linear_num_value_heads``, ``linear_num_key_heads``, ``linear_key_head_dim``,
  ``linear_value_head_dim`` and ``linear_conv_kernel_dim`` (``model.mixers``). Hugging Face groups the
  rows of ``in_proj_qkvz`` and ``in_proj_ba`` by key head; ours are one projection laid out q, k, v, z,
  b, a (``DeltaInProj`` permutes them, exactly, both ways).
- ``full_attention`` layers are softmax attention with QK-norm (``model.qk_norm``), an elementwise
  sigmoid gate on the output (``model.attn_gate=elementwise``: each head's gate rows follow its query
  rows in ``q_proj``) and partial RoPE (``partial_rotary_factor``, 0.25 by default:
  ``model.pos.rope_fraction``).
- Every RMSNorm but DeltaNet's gated one multiplies by ``1 + weight`` (``PlusOne``).

Refused in one line, naming the key: a mixture-of-experts layer (``num_experts`` above 0 with a layer
that neither ``mlp_only_layers`` lists nor ``decoder_sparse_step`` skips), a ``layer_types`` entry
other than those two, a ``head_dim`` other than ``hidden_size / heads``, ``attention_bias``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from attnlab.blocks.mixers.delta import hf_projection_order
from attnlab.models.hf.config_keys import require
from attnlab.models.hf.convert import Architecture, register
from attnlab.models.hf.llama import llama_config, llama_export
from attnlab.models.hf.spec import Checkpoint, Part, PlusOne, Raw, Table, ffn, layers, tokens_and_head
from attnlab.schema.layout import LayerKind, explicit
from attnlab.schema.mixers import Mixer, MixerSizes
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import RopePos

# Qwen3NextConfig's defaults for the keys read here, where config.json has none
DEFAULTS = {
    "head_dim": 256,
    "partial_rotary_factor": 0.25,
    "num_experts": 512,
    "decoder_sparse_step": 1,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
}
HF_MIXERS = {"linear_attention": Mixer.deltanet, "full_attention": Mixer.attention}


def moe_layers(c: dict) -> list[int]:
    """The layers Qwen3NextDecoderLayer gives a sparse mixture-of-experts block."""
    skip, step = set(c.get("mlp_only_layers") or ()), c["decoder_sparse_step"]
    if c["num_experts"] <= 0:
        return []
    return [i for i in range(c["num_hidden_layers"]) if i not in skip and (i + 1) % step == 0]


def layer_kinds(c: dict) -> list[LayerKind]:
    """Each layer's kind from ``layer_types`` (by default three linear layers to one full)."""
    n = c["num_hidden_layers"]
    types = c.get("layer_types") or [
        "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)
    ]
    if len(types) != n:
        raise ValueError(f"layer_types has {len(types)} entries for num_hidden_layers={n}")
    wrong = sorted({t for t in types if t not in HF_MIXERS})
    if wrong:
        raise ValueError(
            f"layer_types entry {wrong[0]!r} is not supported (attnlab maps {', '.join(HF_MIXERS)})"
        )
    return [LayerKind(mixer=HF_MIXERS[t]) for t in types]


def qwen3_next_config(c: dict, cls: str) -> GPTConfig:
    c = {**DEFAULTS, **c}
    require(c, attention_bias=False)
    moe = moe_layers(c)
    if moe:
        raise ValueError(
            f"num_experts={c['num_experts']} makes layers {moe} mixture-of-experts, which attnlab does not "
            "build (a dense model needs num_experts=0, or mlp_only_layers listing every layer)"
        )
    kinds = layer_kinds(c)
    sizes = MixerSizes(
        linear_heads=c["linear_num_value_heads"],
        linear_k_heads=c["linear_num_key_heads"],
        linear_k_dim=c["linear_key_head_dim"],
        linear_v_dim=c["linear_value_head_dim"],
        conv_kernel=c["linear_conv_kernel_dim"],
    )
    layout = None if set(kinds) == {LayerKind()} else explicit(kinds)
    base = llama_config(c, cls, partial_rope=True)
    return replace(base, qk_norm=True, attn_gate="elementwise", layout=layout, mixers=sizes)


def qwen3_next_export(cfg: GPTConfig) -> dict:
    """The config.json of ``cfg`` as a dense Qwen3-Next: ``layer_types`` from each layer's mixer (a
    window or NoPE layer is written as plain full attention, and export names the difference)."""
    sizes = cfg.mixers.resolved(cfg.n_heads, cfg.d_model // cfg.n_heads, {Mixer.deltanet})
    out = llama_export(cfg, "qwen3_next", "Qwen3NextForCausalLM")
    del out["mlp_bias"]
    rope = out["rope_parameters"]
    fraction = cfg.pos.rope_fraction if isinstance(cfg.pos, RopePos) else 1.0
    return {
        **out,
        "attention_bias": False,  # what it can hold (a model with biases reads back without, named)
        "rope_parameters": {**rope, "partial_rotary_factor": fraction},  # its default is 0.25, not 1
        "layer_types": [
            "linear_attention" if k.mixer == Mixer.deltanet else "full_attention" for k in cfg.layer_kinds()
        ],
        "num_experts": 0,
        "mlp_only_layers": [],
        "decoder_sparse_step": 1,
        "linear_num_value_heads": sizes["linear_heads"],
        "linear_num_key_heads": sizes["linear_k_heads"],
        "linear_key_head_dim": sizes["linear_k_dim"],
        "linear_value_head_dim": sizes["linear_v_dim"],
        "linear_conv_kernel_dim": sizes["conv_kernel"],
    }


@dataclass(frozen=True)
class GatedQKV:
    """Our fused ``qkv_proj`` from Qwen3-Next's ``q_proj`` (per head: query rows, then gate rows),
    ``k_proj`` and ``v_proj``; the gate rows are the gate projection's (``Part(q_proj, 1, 2, heads)``)."""

    names: tuple[str, str, str]  # q_proj, k_proj, v_proj
    n_heads: int
    n_kv_heads: int

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        q = Part(self.names[0], 0, 2, self.n_heads).read(ckpt)
        k, v = ckpt.module(self.names[1]), ckpt.module(self.names[2])
        return {s: torch.cat([q[s], k[s], v[s]]) for s in ("weight", "bias") if s in q and s in k and s in v}

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        out = {}
        for s, t in ours.items():
            kv = t.shape[0] // (self.n_heads + 2 * self.n_kv_heads) * self.n_kv_heads
            q, k, v = t.split((t.shape[0] - 2 * kv, kv, kv))
            out |= Part(self.names[0], 0, 2, self.n_heads).write({s: q})
            out |= {f"{self.names[1]}.{s}": k, f"{self.names[2]}.{s}": v}
        return out


@dataclass(frozen=True)
class DeltaInProj:
    """Our gated DeltaNet's ``in_proj`` (all q, k, v, z, then all b, a) from Hugging Face's
    ``in_proj_qkvz`` and ``in_proj_ba``, whose rows are grouped by key head (``hf_projection_order``)."""

    names: tuple[str, str]  # in_proj_qkvz, in_proj_ba
    order: tuple[Tensor, Tensor]  # row indices taking each to our layout

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        qkvz, ba = ckpt.module(self.names[0]).get("weight"), ckpt.module(self.names[1]).get("weight")
        if qkvz is None or ba is None:
            return {}
        if (qkvz.shape[0], ba.shape[0]) != tuple(len(o) for o in self.order):
            return {"weight": torch.cat([qkvz, ba])}  # cannot be reordered: the shape check reports it
        return {"weight": torch.cat([qkvz[self.order[0]], ba[self.order[1]]])}

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        qkvz, ba = ours["weight"].split([len(o) for o in self.order])
        return {
            f"{name}.weight": rows[torch.argsort(order)]
            for name, rows, order in zip(self.names, (qkvz, ba), self.order, strict=True)
        }


@dataclass(frozen=True)
class ConvWeight(Raw):
    """The depthwise convolution's kernel: Hugging Face's ``Conv1d`` weight (C, 1, K), ours (C, K)."""

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        t = ckpt.tensor(self.name)
        return {} if t is None else {"": t.squeeze(1) if t.dim() == 3 else t}

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        return {self.name: ours[""].unsqueeze(1)}


def qwen3_next_weights(cfg: GPTConfig) -> Table:
    sizes = cfg.mixers.resolved(cfg.n_heads, cfg.d_model // cfg.n_heads, {Mixer.deltanet})
    ratio = sizes["linear_heads"] // sizes["linear_k_heads"]
    order = hf_projection_order(sizes["linear_k_heads"], sizes["linear_k_dim"], sizes["linear_v_dim"], ratio)
    kinds = cfg.layer_kinds()

    def deltanet(p: str) -> Table:
        return {
            "self_attn.fn.in_proj": DeltaInProj((p + "in_proj_qkvz", p + "in_proj_ba"), order),
            "self_attn.fn.conv_weight": ConvWeight(p + "conv1d.weight"),
            "self_attn.fn.A_log": Raw(p + "A_log"),
            "self_attn.fn.dt_bias": Raw(p + "dt_bias"),
            "self_attn.fn.norm": p + "norm",
            "self_attn.fn.out_proj": p + "out_proj",
        }

    def attention(p: str) -> Table:
        heads = (cfg.n_heads, cfg.n_kv_heads or cfg.n_heads)
        return {
            "self_attn.fn.qkv_proj": GatedQKV((p + "q_proj", p + "k_proj", p + "v_proj"), *heads),
            "self_attn.fn.gate.proj": Part(p + "q_proj", 1, 2, cfg.n_heads),
            "self_attn.fn.out_proj": p + "o_proj",
            "self_attn.fn.q_norm": PlusOne(p + "q_norm"),
            "self_attn.fn.k_norm": PlusOne(p + "k_norm"),
        }

    def layer(i: int) -> Table:
        p = f"layers.{i}."
        mixer = (
            deltanet(p + "linear_attn.") if kinds[i].mixer == Mixer.deltanet else attention(p + "self_attn.")
        )
        return {
            **mixer,
            "self_attn.norm": PlusOne(p + "input_layernorm"),
            **ffn(
                p + "mlp.up_proj",
                p + "mlp.down_proj",
                PlusOne(p + "post_attention_layernorm"),
                p + "mlp.gate_proj",
            ),
        }

    return {
        **tokens_and_head(cfg, "embed.tokens", "embed_tokens"),
        **layers("stack.layers", cfg.n_layers, layer),
        "stack.final_norm": PlusOne("norm"),
    }


register(
    Architecture(
        model_type="qwen3_next",
        classes=("Qwen3NextForCausalLM",),
        prefix="model.",
        config=qwen3_next_config,
        weights=qwen3_next_weights,
        ignore=(r"rotary_emb\.(original_)?inv_freq$",),
        export=qwen3_next_export,
        family="gpt",
    )
)
