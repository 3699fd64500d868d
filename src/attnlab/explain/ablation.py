"""Ablation: a metric with chosen heads or sites knocked out, against the metric of the intact model.

A target is a site's name (``layers.1.ffn_out``: the whole activation) or a head, a head site's name
and the head's index (``layers.1.attn_heads.3``: that head's slice of the heads' concatenated output).
Zero ablation replaces the target by zeros; mean ablation by its mean over the examples and positions
of reference batches, which keeps the activation's typical size and removes only what varies with the
input (the information it carries).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.blocks.attention import MultiHeadAttention
from attnlab.explain.sites import Edit, Site, activation_sites, hooked, recorded
from attnlab.models.common import eval_mode, model_device

BatchMetric = Callable[[dict[str, Tensor]], Tensor]  # a batch in, a scalar out (the model runs inside)
MODES = ("zero", "mean")


@dataclass
class Ablation:
    """``before``: the metric of the intact model; ``after``: with each target alone ablated, by target;
    ``together``: with every target ablated at once."""

    mode: str
    before: float
    after: dict[str, float]
    together: float


def resolve_target(model: nn.Module, target: str) -> tuple[str, slice]:
    """A target's site and the slice of its last dimension it covers (every feature, or one head's)."""
    sites = activation_sites(model)
    if target in sites:
        return target, slice(None)
    site, _, head = target.rpartition(".")
    if site in sites and site.endswith("attn_heads") and head.isdigit():
        attn = next(
            m
            for m in model.modules()
            if isinstance(m, MultiHeadAttention) and m.out_proj is sites[site].module
        )
        if int(head) < attn.n_heads:
            h = int(head)
            return site, slice(h * attn.head_dim, (h + 1) * attn.head_dim)
    raise ValueError(
        out_of_range(model, sites, target)
        or f"ablate: no site or head {target!r}: give a site ({', '.join(list(sites)[:3])}, ...) or a head "
        "site and a head index (layers.0.attn_heads.1)"
    )


def out_of_range(model: nn.Module, sites: dict[str, Site], target: str) -> str | None:
    """The error of a target that names a layer (``layers.9.attn_out``) or a head (``layers.0.attn_heads.7``)
    past the model's, with the range there is; None for a target that is wrong otherwise."""
    named = re.fullmatch(r"(.*layers)\.(\d+)\.([a-z_]+)(?:\.(\d+))?", target)
    layers = {}  # each stack's prefix (layers, encoder.layers, ...): its number of layers
    for name in sites:
        stack, index = re.match(r"(.*layers)\.(\d+)\.", name).groups()
        layers[stack] = max(layers.get(stack, 0), int(index) + 1)
    if named is None or named[1] not in layers:
        return None
    stack, index, kind, head = named.groups()
    n = layers[stack]
    if int(index) >= n:
        return f"ablate: layer {index} of {target!r}: the model has {n} layers there, {stack}.0 to {stack}.{n - 1}"
    site = f"{stack}.{index}.{kind}"
    if head is not None and site in sites and kind.endswith("attn_heads"):
        attn = next(
            m
            for m in model.modules()
            if isinstance(m, MultiHeadAttention) and m.out_proj is sites[site].module
        )
        return f"ablate: head {head} of {target!r}: {site} has {attn.n_heads} heads, {site}.0 to {site}.{attn.n_heads - 1}"
    return None


def site_means(model: nn.Module, batches: Iterable[dict[str, Tensor]], names: list[str]) -> dict[str, Tensor]:
    """Each named site's mean activation (its last dimension) over every example and position of ``batches``."""
    device = model_device(model)
    sums: dict[str, Tensor] = {}
    counts: dict[str, int] = {}
    with torch.no_grad(), eval_mode(model), recorded(model, names) as acts:
        for batch in batches:
            model.logits({k: v.to(device) if isinstance(v, Tensor) else v for k, v in batch.items()})
            for name in names:
                flat = acts[name].flatten(0, -2).double()
                sums[name] = sums.get(name, 0) + flat.sum(dim=0)
                counts[name] = counts.get(name, 0) + flat.shape[0]
    if not counts:
        raise ValueError("mean ablation needs at least one reference batch")
    return {name: (total / counts[name]).float() for name, total in sums.items()}


def _replace(part: slice, value: Tensor | None) -> Edit:
    """An edit that sets the ``part`` of the activation's last dimension to zero, or to ``value[part]``."""

    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        x[..., part] = 0.0 if value is None else value[part].to(x.dtype)
        return x

    return edit


def ablated(
    model: nn.Module,
    batch: dict[str, Tensor],
    metric: BatchMetric,
    targets: list[str],
    means: dict[str, Tensor] | None = None,
) -> float:
    """The metric of ``batch`` with every target zeroed (``means`` None) or set to its site's mean."""
    edits: dict[str, list[Edit]] = {}
    for target in targets:
        site, part = resolve_target(model, target)
        edits.setdefault(site, []).append(_replace(part, None if means is None else means[site]))

    def chain(steps: list[Edit]) -> Edit:
        def edit(x: Tensor) -> Tensor:
            for step in steps:
                x = step(x)
            return x

        return edit

    with torch.no_grad(), eval_mode(model), hooked(model, {s: chain(e) for s, e in edits.items()}):
        return float(metric(batch))


def ablate(
    model: nn.Module,
    batch: dict[str, Tensor],
    metric: BatchMetric,
    targets: list[str],
    mode: str = "zero",
    reference: Iterable[dict[str, Tensor]] | None = None,
) -> Ablation:
    """The metric before and after ablating each target alone and all of them together; ``mode``
    ``zero`` or ``mean`` (the means over ``reference`` batches, by default ``batch`` itself)."""
    if mode not in MODES:
        raise ValueError(f"ablation={mode!r}: one of {', '.join(MODES)}")
    if not targets:
        raise ValueError("ablate: name at least one site or head")
    sites = sorted({resolve_target(model, t)[0] for t in targets})
    means = site_means(model, reference or [batch], sites) if mode == "mean" else None
    with torch.no_grad(), eval_mode(model):
        before = float(metric(batch))
    after = {t: ablated(model, batch, metric, [t], means) for t in targets}
    return Ablation(mode, before, after, ablated(model, batch, metric, targets, means))
