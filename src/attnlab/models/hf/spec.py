"""Weight tables: where each attnlab module finds its tensors in a Hugging Face checkpoint.

A table maps an attnlab module name (or, for ``Raw``, a parameter name) to a spec. A plain string
means "stored with our layout under this name"; the classes below say how to read anything else
(transposed, fused, tied, per-head interleaved, a bare tensor). Each spec reads (``read``: checkpoint
to attnlab) and writes (``write``: attnlab to checkpoint names), each the other's inverse, so one
table serves both ``load_hf`` and ``attnlab-export``. The helpers at the end build the
pieces every architecture repeats: one entry per layer, an attention sublayer, a feed-forward one,
token embeddings with their LM head.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.schema.model import TokenModelConfig


class Checkpoint:
    """A checkpoint's tensors by name, without the base-model prefix; remembers which were read."""

    def __init__(self, tensors: Mapping[str, Tensor], prefix: str = "") -> None:
        legacy = {".gamma": ".weight", ".beta": ".bias"}  # names of old TF-converted checkpoints
        self.tensors = {}
        for name, t in tensors.items():
            name = name.removeprefix(prefix)
            for old, new in legacy.items():
                name = name[: -len(old)] + new if name.endswith(old) else name
            self.tensors[name] = t
        self.used: set[str] = set()

    def tensor(self, name: str) -> Tensor | None:
        self.used.add(name)
        return self.tensors.get(name)

    def module(self, name: str) -> dict[str, Tensor]:
        """The ``weight`` and ``bias`` stored under ``name`` (those present)."""
        found = {s: self.tensor(f"{name}.{s}") for s in ("weight", "bias")}
        return {s: t for s, t in found.items() if t is not None}

    def unused(self, ignore: tuple[str, ...]) -> list[str]:
        """Tensors nothing read, bar those matching one of the ``ignore`` regexes."""
        return sorted(
            k for k in self.tensors if k not in self.used and not any(re.search(p, k) for p in ignore)
        )


@dataclass(frozen=True)
class Same:
    """A module stored with our layout (a plain string in a table means this)."""

    name: str

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        return ckpt.module(self.name)

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        """The checkpoint's tensors of one attnlab module (``{"weight": ..., "bias": ...}``)."""
        return {f"{self.name}.{s}": t for s, t in ours.items()}


@dataclass(frozen=True)
class Transposed(Same):
    """GPT-2's Conv1D stores its weight as (in, out); ``nn.Linear`` wants (out, in)."""

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        return {s: t.t() if s == "weight" else t for s, t in ckpt.module(self.name).items()}

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        return super().write({s: t.t() if s == "weight" else t for s, t in ours.items()})


@dataclass(frozen=True)
class PerHeadQKV(Same):
    """BLOOM's fused rows are laid out (head, q/k/v, head_dim); ours are (q/k/v, head, head_dim)."""

    n_heads: int = 1

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        out = ckpt.module(self.name)
        if any(t.shape[0] % (3 * self.n_heads) for t in out.values()):
            return out  # cannot be split into heads: the shape check reports it
        return {
            s: t.unflatten(0, (self.n_heads, 3, -1)).transpose(0, 1).flatten(0, 2) for s, t in out.items()
        }

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        per_head = {
            s: t.unflatten(0, (3, self.n_heads, -1)).transpose(0, 1).flatten(0, 2) for s, t in ours.items()
        }
        return super().write(per_head)


@dataclass(frozen=True)
class Raw(Same):
    """One bare tensor by its full name; ``squeeze`` drops a leading dimension of size 1."""

    squeeze: bool = False

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        t = ckpt.tensor(self.name)
        if t is None:
            return {}
        return {"": t[0] if self.squeeze and t.dim() > 1 and t.shape[0] == 1 else t}

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        return {self.name: ours[""][None] if self.squeeze else ours[""]}


@dataclass(frozen=True)
class Fused:
    """Separate projections stacked into one of ours (q, k, v -> qkv_proj; k, v -> kv_proj).

    ``parts`` are the projections' relative sizes (heads: grouped-query q, k, v are ``(n_heads,
    n_kv_heads, n_kv_heads)``); written, our rows are split by them. Empty: equal parts."""

    names: tuple[str, ...]
    parts: tuple[int, ...] = ()

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        parts = [ckpt.module(n) for n in self.names]
        return {s: torch.cat([p[s] for p in parts]) for s in ("weight", "bias") if all(s in p for p in parts)}

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        parts = self.parts or (1,) * len(self.names)
        out = {}
        for s, t in ours.items():
            sizes = [t.shape[0] // sum(parts) * p for p in parts]
            out |= {f"{n}.{s}": piece for n, piece in zip(self.names, t.split(sizes), strict=True)}
        return out


@dataclass(frozen=True)
class Tied:
    """A matrix stored under any of several tied names (checkpoints keep one); the rest are duplicates."""

    names: tuple[str, ...]

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        found = [ckpt.module(n) for n in self.names]  # reads all, so the duplicates count as used
        return next(({"weight": f["weight"]} for f in found if "weight" in f), {})

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        """Under the first name only, as ``save_pretrained`` stores tied weights."""
        return {f"{self.names[0]}.weight": ours["weight"]}


@dataclass(frozen=True)
class Part(Same):
    """Part ``index`` of ``count`` row blocks of one checkpoint matrix (Phi-3's ``gate_up_proj``: gate
    rows, then up rows), in each of ``groups`` equal groups of rows (Qwen3-Next's ``q_proj``: per head,
    its query rows then its gate rows, ``groups`` = heads). Written as a piece that ``join_parts``
    stacks with its siblings, group by group."""

    index: int = 0
    count: int = 1
    groups: int = 1

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        out = ckpt.module(self.name)
        if any(t.shape[0] % (self.count * self.groups) for t in out.values()):
            return out  # cannot be split: the shape check reports it
        return {
            s: t.unflatten(0, (self.groups, self.count, -1))[:, self.index].flatten(0, 1)
            for s, t in out.items()
        }

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        return {f"{self.name}.{s}{PIECE}{self.index}@{self.groups}": t for s, t in ours.items()}


@dataclass(frozen=True)
class PlusOne(Same):
    """An RMSNorm that stores ``weight`` and multiplies by ``1 + weight`` (Gemma, Qwen3-Next); ours
    multiplies by ours."""

    def read(self, ckpt: Checkpoint) -> dict[str, Tensor]:
        return {s: t + 1.0 for s, t in ckpt.module(self.name).items()}

    def write(self, ours: dict[str, Tensor]) -> dict[str, Tensor]:
        return super().write({s: t - 1.0 for s, t in ours.items()})


PIECE = "#part"  # marks a written piece of a checkpoint tensor (``Part``): ``#part{index}@{groups}``


def join_parts(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """Checkpoint tensors with the pieces ``Part`` wrote stacked, in order, into their matrix: within
    each of the pieces' ``groups`` row groups, piece after piece."""
    pieces: dict[str, dict[int, Tensor]] = {}
    groups: dict[str, int] = {}
    out = {}
    for name, t in tensors.items():
        base, marked, where = name.partition(PIECE)
        if marked:
            index, _, count = where.partition("@")
            pieces.setdefault(base, {})[int(index)] = t
            groups[base] = int(count)
        else:
            out[name] = t
    for base, p in pieces.items():
        grouped = [p[i].unflatten(0, (groups[base], -1)) for i in sorted(p)]
        out[base] = torch.cat(grouped, dim=1).flatten(0, 1)
    return out


Spec = str | Same | Fused | Tied
Table = dict[str, Spec]  # attnlab module (or, for Raw, parameter) name -> where it comes from


def as_spec(spec: Spec) -> Same | Fused | Tied:
    """A table entry as a spec object: a plain string is ``Same``."""
    return Same(spec) if isinstance(spec, str) else spec


# Table helpers: the pieces every architecture's table repeats


def layers(ours: str, n: int, layer: Callable[[int], Table]) -> Table:
    """The table of ``n`` layers, layer ``i`` under ``{ours}.{i}.``."""
    return {f"{ours}.{i}.{k}": v for i in range(n) for k, v in layer(i).items()}


def attention(
    sub: str,
    prefix: str,
    q: str,
    k: str,
    v: str,
    o: str,
    norm: str | None = None,
    heads: tuple[int, int] = (1, 1),
) -> Table:
    """A self- (``sub="self_attn"``) or cross-attention sublayer from separate q, k, v, o projections;
    ``heads`` is (query heads, key/value heads) where they differ (grouped-query attention)."""
    q, k, v, o = (prefix + n for n in (q, k, v, o))
    qkv = Fused((q, k, v), (heads[0], heads[1], heads[1]))
    proj = {"qkv_proj": qkv} if sub == "self_attn" else {"q_proj": q, "kv_proj": Fused((k, v))}
    table: Table = {f"{sub}.fn.{n}": s for n, s in {**proj, "out_proj": o}.items()}
    return {**table, f"{sub}.norm": norm} if norm else table


def ffn(fc_in: Spec, fc_out: Spec, norm: Spec, fc_gate: Spec | None = None) -> Table:
    """A feed-forward sublayer: input, output and (for gated activations) gate projections, its norm."""
    table: Table = {"ffn.fn.fc_in": fc_in, "ffn.fn.fc_out": fc_out, "ffn.norm": norm}
    return {**table, "ffn.fn.fc_gate": fc_gate} if fc_gate else table


def tokens_and_head(cfg: TokenModelConfig, ours: str, theirs: str, head: str = "lm_head") -> Table:
    """Token embeddings and the LM head: one tied matrix, or two."""
    if cfg.tie_embeddings:
        return {ours: Tied((theirs, head))}
    return {ours: theirs, "lm_head.proj": head}
