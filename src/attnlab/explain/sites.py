"""Named activation sites: the places in a model where an activation can be read or replaced.

A site is a name (``layers.3.resid_post``) and the module whose input or output it is. Names are
computed from the model's structure, so every family has them without any change to the blocks:

- ``layers.{i}.resid_pre``: the residual stream entering layer ``i`` (the layer's input);
- ``layers.{i}.resid_post``: the residual stream leaving it (the layer's output);
- ``layers.{i}.attn_out``, ``layers.{i}.cross_attn_out``, ``layers.{i}.ffn_out``: each sublayer's
  output before its dropout and residual addition;
- ``layers.{i}.attn_heads``, ``layers.{i}.cross_attn_heads``: the heads' outputs concatenated,
  (B, T, heads * head_dim), the input of the attention's output projection (one head per slice).

A model with one stack (gpt, bert, vit) names its sites as above; a seq2seq model prefixes them with
its stack, ``encoder.`` or ``decoder.``. Hooks exist only inside ``hooked`` (and ``recorded``), so a
model with nothing attached runs exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from torch import Tensor, nn

from attnlab.blocks.layers import TransformerLayer, TransformerStack

Edit = Callable[[Tensor], Tensor | None]  # an activation in, a replacement (or None: unchanged) out


@dataclass(frozen=True)
class Site:
    """``module``'s input (``reads_input``) or output, under ``name``."""

    name: str
    module: nn.Module
    reads_input: bool = False


def stacks(model: nn.Module) -> dict[str, TransformerStack]:
    """The model's transformer stacks by site prefix: ``""`` for a model with one, else its name and a dot."""
    found = {name: m for name, m in model.named_modules() if isinstance(m, TransformerStack)}
    if len(found) == 1:
        return {"": next(iter(found.values()))}
    return {f"{name}.": stack for name, stack in found.items()}


def layer_sites(prefix: str, i: int, layer: TransformerLayer) -> list[Site]:
    """The sites of one layer, in the order its forward pass reaches them."""
    at = f"{prefix}layers.{i}."
    sites = [
        Site(at + "resid_pre", layer, reads_input=True),
        Site(at + "attn_heads", layer.self_attn.fn.out_proj, reads_input=True),
        Site(at + "attn_out", layer.self_attn.fn),
    ]
    if layer.cross_attn is not None:
        sites.append(Site(at + "cross_attn_heads", layer.cross_attn.fn.out_proj, reads_input=True))
        sites.append(Site(at + "cross_attn_out", layer.cross_attn.fn))
    if layer.ffn is not None:  # none in an attention-only layer (model.d_ff=0)
        sites.append(Site(at + "ffn_out", layer.ffn.fn))
    sites.append(Site(at + "resid_post", layer))
    return sites


def activation_sites(model: nn.Module) -> dict[str, Site]:
    """Every named site of ``model``, in the order a forward pass reaches them (encoder before decoder)."""
    sites = [
        site
        for prefix, stack in stacks(model).items()
        for i, layer in enumerate(stack.layers)
        for site in layer_sites(prefix, i, layer)
    ]
    if not sites:
        raise ValueError(f"{type(model).__name__} has no transformer layers to name sites in")
    return {site.name: site for site in sites}


def resid_sites(model: nn.Module, kind: str = "resid_pre") -> list[str]:
    """The names of one kind of site (``resid_pre``, ``resid_post``, ``attn_heads``, ...), layer by layer."""
    return [name for name in activation_sites(model) if name.endswith("." + kind)]


def _hook(site: Site, edit: Edit) -> object:
    """A hook that hands the site's activation to ``edit`` and puts its replacement in its place."""
    if site.reads_input:

        def pre(_: nn.Module, args: tuple, kwargs: dict) -> tuple | None:
            new = edit(args[0])
            return None if new is None else ((new, *args[1:]), kwargs)

        return site.module.register_forward_pre_hook(pre, with_kwargs=True)

    def post(_: nn.Module, __: object, output: Tensor) -> Tensor | None:
        return edit(output)

    return site.module.register_forward_hook(post)


@contextmanager
def hooked(model: nn.Module, edits: dict[str, Edit]) -> Iterator[None]:
    """Within the block, each site named in ``edits`` passes its activation through its edit (which may
    read it, or return a replacement); the hooks are removed on leaving."""
    sites = activation_sites(model)
    unknown = [name for name in edits if name not in sites]
    if unknown:
        raise ValueError(
            f"no site {unknown[0]!r} in {type(model).__name__}: its sites are {', '.join(sites)}"
        )
    handles = [_hook(sites[name], edit) for name, edit in edits.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def recorded(model: nn.Module, names: list[str]) -> Iterator[dict[str, Tensor]]:
    """Within the block, a forward pass fills the yielded ``{name: activation}`` (detached) for ``names``."""
    acts: dict[str, Tensor] = {}

    def keep(name: str) -> Edit:
        return lambda x: acts.__setitem__(name, x.detach())

    with hooked(model, {name: keep(name) for name in names}):
        yield acts
