"""The per-layer layout (``model.layout``): which mixer, which window and which positions each layer has.

Current models differ from layer to layer: SmolLM3 and Llama 4 drop RoPE on every fourth layer, Gemma 2
alternates sliding-window and full attention, Gemma 3 has five sliding layers to one full, Qwen3 names
each layer in ``layer_types``. A layout is a list of layer entries, one per layer, written compactly:

    layout: [sliding, full]                # one entry per layer (here n_layers=2)
    layout: "sliding full ..."             # a trailing ``...`` repeats the pattern up to n_layers (cut there)
    layout: "5*sliding full ..."           # ``N*entry`` is the entry N times: five sliding to one full
    layout: "3*pos nope ..."               # every fourth layer without its positional encoding (NoPE)
    layout: [sliding_attention, full_attention]   # Hugging Face's ``layer_types`` spellings are accepted

An entry joins tags with ``+`` (``sliding+nope``): a window tag (``full``, the default, or ``sliding``:
``model.attn_window`` keys), a positions tag (``pos``, the default: the model's ``model.pos``, or
``nope``: none in this layer) and a mixer tag (``attention``, ``latent``, ``differential`` or
``deltanet``: ``schema.mixers``; without one, ``model.mixer``). Without a layout every layer is the
same: ``model.mixer``, sliding where ``model.attn_window`` is set, full otherwise, with ``model.pos``.

    layout: "3*deltanet attention ..."     # Qwen3-Next: three gated DeltaNet layers to one attention
Torch-free: the config checks it up front, the blocks build from ``layer_kinds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnlab.schema.errors import ConfigError, show
from attnlab.schema.mixers import Mixer

WINDOW_TAGS = {"full": False, "sliding": True, "full_attention": False, "sliding_attention": True}
POSITION_TAGS = {"pos": True, "nope": False}
REPEAT = "..."


@dataclass(frozen=True)
class LayerKind:
    """One layer's mixer, whether it slides (over ``model.attn_window`` keys) and whether it applies
    the model's positional encoding."""

    mixer: str = Mixer.attention
    sliding: bool = False
    positions: bool = True

    @property
    def hf_type(self) -> str:
        """Hugging Face's ``layer_types`` entry of this layer (Qwen3-Next's for a DeltaNet layer)."""
        if self.mixer == Mixer.deltanet:
            return "linear_attention"
        return "sliding_attention" if self.sliding else "full_attention"


def _entry(text: str, default_sliding: bool, default_mixer: str = Mixer.attention) -> LayerKind:
    """One entry (``sliding+nope``) as a LayerKind; a ConfigError naming the tag otherwise."""
    mixer, sliding, positions = str(default_mixer), default_sliding, True
    for tag in text.split("+"):
        tag = tag.strip()
        if tag in WINDOW_TAGS:
            sliding = WINDOW_TAGS[tag]
        elif tag in POSITION_TAGS:
            positions = POSITION_TAGS[tag]
        elif tag in Mixer.__members__:
            mixer = tag
        else:
            allowed = ", ".join([*WINDOW_TAGS, *POSITION_TAGS, *Mixer.__members__])
            raise ConfigError("model.layout", text, f"unknown tag {tag!r}; tags are {allowed}")
    return LayerKind(mixer, sliding, positions)


def _entries(layout: Any) -> list[str]:
    """The layout's entries, ``N*entry`` expanded, as strings (a string splits at spaces and commas)."""
    items = layout.replace(",", " ").split() if isinstance(layout, str) else [str(x) for x in layout]
    out: list[str] = []
    for item in items:
        count, star, entry = item.partition("*")
        if not star:
            out.append(item)
            continue
        if not count.isdigit() or int(count) < 1:
            raise ConfigError("model.layout", item, "a repeated entry is N*entry with N a positive integer")
        out += [entry] * int(count)
    return out


def parse_layout(
    layout: Any, n_layers: int, window: int | None, mixer: str = Mixer.attention
) -> list[LayerKind]:
    """The kind of each of ``n_layers`` layers; ``layout=None`` makes every layer alike (sliding when
    ``window`` is set), an entry without a mixer tag has ``mixer`` (``model.mixer``). A ConfigError (one
    line) for a length, tag or combination that cannot work."""
    if layout is None:
        return [LayerKind(str(mixer), sliding=window is not None)] * n_layers
    entries = _entries(layout)
    repeat = bool(entries) and entries[-1] == REPEAT
    pattern = [_entry(e, False, mixer) for e in (entries[:-1] if repeat else entries)]
    if not pattern:
        raise ConfigError("model.layout", layout, "give at least one layer entry")
    if repeat:
        if len(pattern) > n_layers:
            raise ConfigError(
                "model.layout",
                show(layout),
                f"a pattern of {len(pattern)} entries is longer than n_layers={n_layers}",
            )
        kinds = [pattern[i % len(pattern)] for i in range(n_layers)]
    elif len(pattern) != n_layers:
        raise ConfigError(
            "model.layout",
            show(layout),
            f"has {len(pattern)} entries for n_layers={n_layers}; give one per layer or end a pattern with ...",
        )
    else:
        kinds = pattern
    if any(k.sliding for k in kinds) and window is None:
        raise ConfigError("model.layout", show(layout), "a sliding layer needs model.attn_window (its width)")
    if any(k.sliding and k.mixer == Mixer.deltanet for k in kinds):
        raise ConfigError(
            "model.layout", show(layout), "a deltanet layer has no window: drop sliding from it"
        )
    return kinds


def explicit(kinds: list[LayerKind]) -> list[str]:
    """The explicit layout (one entry per layer) that ``parse_layout`` reads back as ``kinds``."""
    out = []
    for k in kinds:
        tags = ["sliding" if k.sliding else "full"]
        if not k.positions:
            tags.append("nope")
        if k.mixer != Mixer.attention:
            tags.append(str(k.mixer))
        out.append("+".join(tags))
    return out
