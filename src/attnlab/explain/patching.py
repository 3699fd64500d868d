"""Activation patching (Meng et al. 2022; Wang et al. 2022): which activations carry a decision.

Two inputs that differ where it matters, a clean one and a corrupted one, give two values of a metric
(by default the logit difference of a right and a wrong answer at the last position). The corrupted
run is repeated with one activation taken from the clean run: where that moves the metric back to
its clean value, the activation carries the difference. The activations are named sites
(``attnlab.explain.sites``): the residual stream per layer and position, and each head's output.
Patching every site restores the clean metric; patching none leaves the corrupted one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.blocks.attention import MultiHeadAttention
from attnlab.explain.sites import Edit, activation_sites, hooked, recorded, resid_sites
from attnlab.models.common import eval_mode

Metric = Callable[[Tensor], Tensor]  # the model's logits in, a scalar out
Index = tuple[slice | int, ...]  # which part of a site's (B, T, D) activation is patched


def logit_difference(answer: int, wrong: int, position: int = -1) -> Metric:
    """The batch's mean of ``logit[answer] - logit[wrong]``: at ``position`` for per-token logits
    (B, T, V), of the classes for class logits (B, C)."""

    def metric(logits: Tensor) -> Tensor:
        at = logits[:, position] if logits.dim() == 3 else logits
        return (at[:, answer] - at[:, wrong]).mean()

    return metric


@dataclass
class Patching:
    """``scores`` (sites, columns): the metric with one part of a site patched from the clean run, a
    row per site (``sites``), a column per position or head (``columns``; NaN past a row's length);
    ``clean`` and ``corrupted``: the metric of the two runs unpatched."""

    sites: list[str]
    scores: Tensor
    columns: str
    clean: float
    corrupted: float

    def restored(self) -> Tensor:
        """The fraction of the clean-corrupted difference that each patch restores (1: all of it)."""
        return (self.scores - self.corrupted) / (self.clean - self.corrupted)

    def strongest(self, k: int = 10) -> list[tuple[str, int, float]]:
        """The ``k`` patches that move the metric furthest from its corrupted value: (site, column, metric)."""
        moved = (self.scores - self.corrupted).abs().nan_to_num(-1.0).flatten()
        top = moved.topk(min(k, moved.numel())).indices.tolist()
        width = self.scores.shape[1]
        return [(self.sites[i // width], i % width, float(self.scores.flatten()[i])) for i in top]


def _copy(clean: Tensor, index: Index) -> Edit:
    """An edit that puts ``clean[index]`` into the activation."""

    def edit(x: Tensor) -> Tensor:
        x = x.clone()
        x[index] = clean[index]
        return x

    return edit


def patched_metric(
    model: nn.Module,
    corrupted: dict[str, Tensor],
    metric: Metric,
    clean_acts: dict[str, Tensor],
    patches: dict[str, Index],
) -> float:
    """The metric of the corrupted run with each named site's ``patches[name]`` part from ``clean_acts``."""
    edits = {name: _copy(clean_acts[name], index) for name, index in patches.items()}
    with torch.no_grad(), eval_mode(model), hooked(model, edits):
        return float(metric(model.logits(corrupted)))


def clean_run(
    model: nn.Module, clean: dict[str, Tensor], corrupted: dict[str, Tensor], metric: Metric
) -> tuple[dict[str, Tensor], float, float]:
    """Every site's clean activation, and the clean and corrupted metrics."""
    for key, value in corrupted.items():
        if isinstance(value, Tensor) and key in clean and clean[key].shape != value.shape:
            raise ValueError(
                f"patching: the corrupted batch's {key!r} must have the clean one's shape {tuple(clean[key].shape)}"
            )
    with torch.no_grad(), eval_mode(model), recorded(model, list(activation_sites(model))) as acts:
        clean_metric = float(metric(model.logits(clean)))
    return acts, clean_metric, patched_metric(model, corrupted, metric, acts, {})


def _grid(
    model: nn.Module,
    clean: dict[str, Tensor],
    corrupted: dict[str, Tensor],
    metric: Metric,
    sites: list[str],
    columns: str,
    indices: Callable[[str, Tensor], list[Index]],
) -> Patching:
    acts, clean_metric, corrupted_metric = clean_run(model, clean, corrupted, metric)
    rows = [
        [patched_metric(model, corrupted, metric, acts, {s: i}) for i in indices(s, acts[s])] for s in sites
    ]
    scores = torch.full((len(rows), max(map(len, rows))), float("nan"), dtype=torch.float64)
    for r, row in enumerate(rows):
        scores[r, : len(row)] = torch.tensor(row, dtype=torch.float64)
    return Patching(sites, scores, columns, clean_metric, corrupted_metric)


def patch_residual(
    model: nn.Module,
    clean: dict[str, Tensor],
    corrupted: dict[str, Tensor],
    metric: Metric,
    kind: str = "resid_pre",
) -> Patching:
    """The metric with the residual stream (``kind``: ``resid_pre`` or ``resid_post``) of one layer at
    one position from the clean run, for every layer (of every stack) and position."""

    def positions(_: str, act: Tensor) -> list[Index]:
        return [(slice(None), t) for t in range(act.shape[1])]

    return _grid(model, clean, corrupted, metric, resid_sites(model, kind), "position", positions)


def patch_heads(
    model: nn.Module, clean: dict[str, Tensor], corrupted: dict[str, Tensor], metric: Metric
) -> Patching:
    """The metric with one head's output (every position) from the clean run, for every attention
    module's heads (self- and cross-attention)."""
    sites = activation_sites(model)
    n_heads = {id(m.out_proj): m.n_heads for m in model.modules() if isinstance(m, MultiHeadAttention)}

    def heads(name: str, act: Tensor) -> list[Index]:
        n = n_heads[id(sites[name].module)]
        width = act.shape[-1] // n
        return [(slice(None), slice(None), slice(h * width, (h + 1) * width)) for h in range(n)]

    names = [n for n in sites if n.endswith("attn_heads")]
    return _grid(model, clean, corrupted, metric, names, "head", heads)
