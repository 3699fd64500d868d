"""The attention hooks' choices (``model.attn_sink``, ``model.attn_gate``) and the checks of the layout
and the hooks against the backend and the positions (``attnlab.blocks.hooks`` builds them). Torch-free."""

from __future__ import annotations

from typing import Any

from attnlab.schema.choice import Choice
from attnlab.schema.errors import ConfigError, positive, show
from attnlab.schema.layout import parse_layout
from attnlab.schema.pos import LearnedPos, SinusoidalPos

ADDED_POSITIONS = (LearnedPos, SinusoidalPos)  # added to the embeddings once, not in each layer


class AttnSink(Choice):
    """A logit that joins every head's softmax denominator without a value: queries may attend to nothing."""

    none = "none"
    learned = "learned"  # one trained logit per head (gpt-oss)
    off_by_one = "off_by_one"  # a fixed logit 0: softmax1, exp(s) / (1 + sum exp(s)) (Miller 2023)


class AttnGate(Choice):
    """A sigmoid gate from the layer input on the attention output, per head or per dimension."""

    none = "none"
    headwise = "headwise"  # one gate per head
    elementwise = "elementwise"  # one gate per output dimension (Qwen3-Next)


def check_layout_and_hooks(cfg: Any) -> None:
    """``cfg`` (a ModelConfig): its layout (``schema.layout``), a ``nope`` layer only where the positions
    are applied in attention, the hooks' values, and the backend against the hooks."""
    if cfg.layout is not None and cfg.attention_modules() != cfg.n_layers:
        raise ConfigError(
            "model.layout",
            show(cfg.layout),
            f"a layout describes one stack; {cfg.family} has two: set it to null",
        )
    kinds = parse_layout(cfg.layout, cfg.n_layers, cfg.attn_window)
    if any(not k.positions for k in kinds) and isinstance(cfg.pos, ADDED_POSITIONS):
        raise ConfigError(
            "model.layout",
            show(cfg.layout),
            f"nope drops a layer's positions, but pos={cfg.pos.name} is added once to the embeddings; "
            "use rope, alibi or relative",
        )
    if cfg.attn_softcap is not None:
        positive("model.attn_softcap", cfg.attn_softcap)
    if cfg.value_residual is not None and not 0.0 <= cfg.value_residual <= 1.0:
        raise ConfigError("model.value_residual", cfg.value_residual, "a mix weight in [0, 1] (or null)")
    unsupported = hook_refusal(cfg)
    if unsupported:
        raise ConfigError("model.attn_backend", cfg.attn_backend, unsupported)


def hook_refusal(cfg: Any) -> str:
    """Why ``cfg.attn_backend`` cannot compute a hook ``cfg`` asks for ("" when it can): the fused
    SDPA kernels take an additive mask, and soft-capping is a function of the scores."""
    capped = cfg.attn_softcap is not None and cfg.attn_softcap != float("inf")
    if capped and cfg.attn_backend == "sdpa":
        return "SDPA cannot apply model.attn_softcap (tanh of the scores): use attn_backend=explicit or flex"
    return ""
