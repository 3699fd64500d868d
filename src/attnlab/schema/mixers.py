"""Which token mixer a layer has, and the sizes of the mixers besides softmax attention (torch-free).

``model.mixer`` is every layer's mixer (a ``model.layout`` entry may name another per layer) (``attention``: softmax attention with its options; ``latent``:
DeepSeek's multi-head latent attention; ``differential``: the Diff Transformer's difference of two
softmax maps; ``deltanet``: Qwen3-Next's gated DeltaNet, a linear recurrence). ``model.mixers`` holds
the sizes the non-softmax mixers need, each defaulting to something derived from the model's heads
(``attnlab.blocks.mixers`` builds them; ``docs/mixers.md`` shows each with its origin).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnlab.schema.choice import Choice
from attnlab.schema.errors import ConfigError, positive


class Mixer(Choice):
    """What mixes a layer's tokens."""

    attention = "attention"  # softmax attention (SelfAttention)
    latent = "latent"  # multi-head latent attention (DeepSeek-V2/V3)
    differential = "differential"  # differential attention (Diff Transformer, DiffLlama)
    deltanet = "deltanet"  # gated DeltaNet (Qwen3-Next's linear layers)


@dataclass
class MixerSizes:
    """The sizes of the latent and linear mixers; None derives one from the model (``head_dim`` is
    ``d_model // n_heads``).

    Latent attention (``mixer=latent``): ``kv_lora_rank`` the key/value latent per token (None:
    2 head_dim), ``q_lora_rank`` the query latent (None: queries projected directly),
    ``qk_nope_head_dim`` / ``qk_rope_head_dim`` each head's position-free and rotary key parts (None:
    head_dim and head_dim / 2), ``v_head_dim`` (None: head_dim), ``absorb`` attention in the latent space,
    ``rope_interleave`` the rotary dimensions read as interleaved pairs (DeepSeek-V3's checkpoints).
    Gated DeltaNet (``mixer=deltanet``): ``linear_heads`` value heads (None: n_heads), ``linear_k_heads``
    query/key heads (None: linear_heads), ``linear_k_dim`` / ``linear_v_dim`` their widths (None:
    head_dim), ``conv_kernel`` the short convolution, ``chunk`` the training chunk.
    """

    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    absorb: bool = False
    rope_interleave: bool = False
    linear_heads: int | None = None
    linear_k_heads: int | None = None
    linear_k_dim: int | None = None
    linear_v_dim: int | None = None
    conv_kernel: int = 4
    chunk: int = 64

    def check(self, n_heads: int, n_kv_heads: int | None, head_dim: int, mixers: set[str]) -> None:
        """Sizes positive; what each mixer in ``mixers`` needs of the heads (one line each)."""
        for name in (
            "kv_lora_rank",
            "q_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
            "linear_heads",
            "linear_k_heads",
            "linear_k_dim",
            "linear_v_dim",
        ):
            positive(f"model.mixers.{name}", getattr(self, name), allow_none=True)
        positive("model.mixers.conv_kernel", self.conv_kernel)
        positive("model.mixers.chunk", self.chunk)
        if Mixer.latent in mixers and self.rope_dim(head_dim) % 2:
            raise ConfigError(
                "model.mixers.qk_rope_head_dim", self.rope_dim(head_dim), "RoPE needs an even width"
            )
        kv = n_kv_heads or n_heads
        if Mixer.differential in mixers and (n_heads % 2 or kv % 2):
            raise ConfigError(
                "model.n_heads",
                n_heads,
                f"differential attention pairs heads: n_heads and n_kv_heads ({kv}) even",
            )
        heads = self.linear_heads or n_heads
        if Mixer.deltanet in mixers and heads % (self.linear_k_heads or heads):
            raise ConfigError(
                "model.mixers.linear_k_heads", self.linear_k_heads, f"must divide linear_heads={heads}"
            )

    def rope_dim(self, head_dim: int) -> int:
        """The rotary key width of latent attention."""
        return self.qk_rope_head_dim or max(2, head_dim // 2 // 2 * 2)

    def resolved(self, n_heads: int, head_dim: int, mixers: set[str]) -> dict[str, Any]:
        """The sizes the mixers in ``mixers`` are built with, each None resolved (what the blocks build
        and Hugging Face export writes); ``absorb`` and ``chunk`` are left out: they change how a mixer
        computes, not what."""
        out: dict[str, Any] = {}
        if Mixer.latent in mixers:
            out |= {
                "kv_lora_rank": self.kv_lora_rank or 2 * head_dim,
                "q_lora_rank": self.q_lora_rank,
                "qk_nope_head_dim": self.qk_nope_head_dim or head_dim,
                "qk_rope_head_dim": self.rope_dim(head_dim),
                "v_head_dim": self.v_head_dim or head_dim,
                "rope_interleave": self.rope_interleave,
            }
        if Mixer.deltanet in mixers:
            heads = self.linear_heads or n_heads
            out |= {
                "linear_heads": heads,
                "linear_k_heads": self.linear_k_heads or heads,
                "linear_k_dim": self.linear_k_dim or head_dim,
                "linear_v_dim": self.linear_v_dim or head_dim,
                "conv_kernel": self.conv_kernel,
            }
        return out


def check_model_mixers(cfg: Any, mixers: list[str]) -> None:
    """What the model config ``cfg`` (a ``schema.model.ModelConfig``) asks of its layers' ``mixers``:
    the sizes, then the combinations that cannot work, each refused in one line."""
    used = set(mixers)
    cfg.mixers.check(cfg.n_heads, cfg.n_kv_heads, cfg.d_model // cfg.n_heads, used)
    if Mixer.latent in used and cfg.pos.name in ("alibi", "relative"):  # biases its scores never get
        raise ConfigError(
            "model.pos",
            cfg.pos.name,
            "latent attention adds no score bias: use pos=rope (its decoupled key), learned, sinusoidal or none",
        )
    if Mixer.deltanet in used and not cfg.causal_stack:
        raise ConfigError(
            "model.mixer", "deltanet", f"gated DeltaNet is causal by nature; {cfg.family} attends both ways"
        )
    if used != {Mixer.attention} and not cfg.holds_mixers:
        raise ConfigError(
            "model.mixer", cfg.mixer, f"{cfg.family} keeps softmax attention (no mixer plan yet)"
        )
    if cfg.value_residual is not None and mixers[0] != Mixer.attention:
        raise ConfigError(
            "model.value_residual", cfg.value_residual, "the first layer must be attention (its values)"
        )
    if used != {Mixer.attention} and cfg.kept_heads is not None:
        raise ConfigError("model.kept_heads", "set", "head pruning applies to softmax attention layers only")
