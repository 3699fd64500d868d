"""Figures of attention maps, token scores, image patches, head importance, activation patching, the
logit lens and linear probes (matplotlib, no pyplot).

Every heat map is meant to be read without the text around it: it has a colour bar with its value
range, a perceptually uniform colormap (viridis) starting at zero for non-negative maps and a
diverging one (RdBu_r) centred at zero for signed maps, cells drawn blocky (``nearest``), axes that
say what they hold ("query", "key", "patch row"), and the prediction in the title when the caller
gives it. Figures are built with ``matplotlib.figure.Figure`` and drawn by the Agg canvas, so nothing
here touches pyplot's global state or needs a display; ``save_figure`` writes a PNG and
``figure_to_array`` gives the RGB pixels that loggers take.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from torch import Tensor

from attnlab.explain.labels import display_token

SEQUENTIAL = "viridis"  # non-negative maps: perceptually uniform, dark at zero
DIVERGING = "RdBu_r"  # signed maps: blue below zero, white at zero, red above
MAX_TICKS = 48  # label at most this many positions on an axis; longer inputs get every k-th label


def colour_scale(values: np.ndarray, signed: bool) -> dict[str, Any]:
    """``imshow``'s colormap and norm: from 0 to the maximum for a non-negative map, and symmetric
    around 0 (``vmin = -vmax``, white at zero) for a signed one, so the colour of zero never moves.
    NaN (a pruned head's importance) is left out."""
    bound = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.0
    bound = bound if bound > 0 else 1.0
    if signed:
        return {"cmap": DIVERGING, "norm": Normalize(vmin=-bound, vmax=bound)}
    return {"cmap": SEQUENTIAL, "norm": Normalize(vmin=0.0, vmax=bound)}


def _ticks(ax: Axes, labels: Sequence[str] | None, axis: str, n: int) -> None:
    """Labels at the integer positions of one axis (every k-th when there are many); without labels,
    the positions' indices, so a cell never sits between two ticks."""
    step = max(1, math.ceil(n / MAX_TICKS))
    positions = list(range(0, n, step))
    shown = [display_token(labels[i]) if labels is not None else str(i) for i in positions]
    if axis == "x":
        upright = all(len(label) == 1 for label in shown)  # single characters read best unturned
        ax.set_xticks(positions, shown, rotation=0 if upright else 90, fontsize=7)
    else:
        ax.set_yticks(positions, shown, fontsize=7)


def attention_figure(
    weights: Tensor,
    *,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str = "",
    head_names: Sequence[str] | None = None,
    query_axis: str = "query",
    key_axis: str = "key",
    value_label: str = "attention weight",
) -> Figure:
    """Heat maps of (H, Tq, Tk) attention weights, one panel per head (or one map of (Tq, Tk)).

    Rows are queries, columns keys. All panels share one colour scale, from 0 to the largest weight
    shown, so the one colour bar reads for each of them.
    """
    maps = weights.detach().float().cpu()
    maps = maps.unsqueeze(0) if maps.dim() == 2 else maps
    n = maps.shape[0]
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    side = 2.4 + 0.06 * min(maps.shape[-1], 96)
    fig = Figure(figsize=(side * cols + 1.2, side * rows + 0.9), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    scale = colour_scale(maps.numpy(), signed=False)
    for i, ax in enumerate(axes.flat):
        if i >= n:
            ax.set_axis_off()
            continue
        image = ax.imshow(maps[i].numpy(), aspect="auto", interpolation="nearest", **scale)
        ax.set_title(head_names[i] if head_names else (f"head {i}" if n > 1 else ""), fontsize=9)
        # only the outer panels carry labels: the panels share their axes, and there is less to lay out
        if i + cols >= n:
            _ticks(ax, key_labels, "x", maps.shape[-1])
            ax.set_xlabel(key_axis, fontsize=8)
        else:
            ax.set_xticks([])
        if i % cols == 0:
            _ticks(ax, query_labels, "y", maps.shape[-2])
            ax.set_ylabel(query_axis, fontsize=8)
        else:
            ax.set_yticks([])
    fig.colorbar(image, ax=axes, shrink=0.8, label=value_label)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def token_scores_figure(
    tokens: Sequence[str],
    scores: dict[str, Tensor],
    *,
    signed: Collection[str] = (),
    bar_labels: Mapping[str, str] | None = None,
    title: str = "",
) -> Figure:
    """One heat strip per named score vector (T,) over the tokens, each with its colour bar (labelled
    by ``bar_labels[name]``, when given); the maps named in ``signed`` (e.g. gradient × input) are
    diverging and centred at zero."""
    bar_labels = bar_labels or {}
    fig = Figure(figsize=(max(5.0, 0.22 * len(tokens) + 2.5), 1.6 * len(scores) + 1.2), layout="constrained")
    axes = fig.subplots(len(scores), 1, squeeze=False)[:, 0]
    for ax, (name, values) in zip(axes, scores.items()):
        v = values.detach().float().cpu().numpy().reshape(1, -1)
        image = ax.imshow(v, aspect="auto", interpolation="nearest", **colour_scale(v, name in signed))
        ax.set_yticks([0], [name], fontsize=8)
        _ticks(ax, list(tokens), "x", len(tokens))
        fig.colorbar(image, ax=ax, pad=0.01).set_label(bar_labels.get(name, ""), fontsize=7)
    axes[-1].set_xlabel("input token", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def _grey_or_rgb(image: Tensor) -> tuple[np.ndarray, str | None]:
    """Pixels (C, H, W) rescaled to [0, 1] for ``imshow``, and the colormap (grey for one channel)."""
    picture = image.detach().float().cpu()
    picture = (picture - picture.min()) / (picture.max() - picture.min()).clamp(min=1e-8)
    if picture.shape[0] == 1:
        return picture[0].numpy(), "gray"
    return picture.permute(1, 2, 0).numpy(), None


def _patch_axes(ax: Axes, pixels: int, side: int) -> None:
    """Grid lines between the ``side`` x ``side`` patches of a ``pixels``-wide image, and each patch's
    row and column as integer ticks (the coordinates of the image's pixels)."""
    size = pixels / side
    edges = [k * size - 0.5 for k in range(1, side)]
    for edge in edges:
        ax.axhline(edge, color="0.6", linewidth=0.8)
        ax.axvline(edge, color="0.6", linewidth=0.8)
    centres = [(k + 0.5) * size - 0.5 for k in range(side)]
    labels = [str(k) for k in range(side)]
    ax.set_xticks(centres, labels, fontsize=7)
    ax.set_yticks(centres, labels, fontsize=7)
    ax.tick_params(length=0)
    ax.set_xlabel("patch column", fontsize=8)
    ax.set_ylabel("patch row", fontsize=8)


def image_patches_figure(
    image: Tensor,
    patch_scores: dict[str, Tensor],
    *,
    signed: Collection[str] = (),
    bar_labels: Mapping[str, str] | None = None,
    title: str = "",
) -> Figure:
    """The input image (C, H, W) and beside it each score map (n, n) over its patches.

    A score map is drawn at patch resolution (one flat cell per patch, no smoothing) on the image's
    coordinates, with the patch grid on every panel and a colour bar per map (labelled by
    ``bar_labels[name]``, when given); the maps named in ``signed`` are diverging and centred at zero.
    """
    bar_labels = bar_labels or {}
    pixels, cmap = _grey_or_rgb(image)
    height, width = pixels.shape[:2]
    extent = (-0.5, width - 0.5, height - 0.5, -0.5)  # a patch covers its pixels on every panel
    fig = Figure(figsize=(3.4 * (1 + len(patch_scores)) + 0.6, 3.9), layout="constrained")
    axes = fig.subplots(1, 1 + len(patch_scores), squeeze=False)[0]
    axes[0].imshow(pixels, cmap=cmap, interpolation="nearest")
    axes[0].set_title("input", fontsize=9)
    side = 1
    for ax, (name, scores) in zip(axes[1:], patch_scores.items()):
        values = scores.detach().float().cpu().numpy()
        side = values.shape[0]
        scale = colour_scale(values, name in signed)
        heat = ax.imshow(values, extent=extent, interpolation="nearest", **scale)
        fig.colorbar(heat, ax=ax, shrink=0.85).set_label(bar_labels.get(name, ""), fontsize=8)
        ax.set_title(name, fontsize=9)
    for ax in axes:
        _patch_axes(ax, width, side)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def head_importance_figure(
    scores: Tensor, labels: Sequence[str], *, title: str = "head importance", value_label: str = ""
) -> Figure:
    """A (modules × heads) heat map with the values written in the cells and a colour bar; a head
    that pruning removed (NaN) is a blank cell marked "pruned"."""
    values = scores.detach().float().cpu().numpy()
    fig = Figure(
        figsize=(2.4 + 0.7 * values.shape[1] + 1.5, 1.4 + 0.4 * values.shape[0]), layout="constrained"
    )
    ax = fig.subplots()
    image = ax.imshow(values, aspect="auto", interpolation="nearest", **colour_scale(values, signed=False))
    ax.set_xticks(range(values.shape[1]), [str(h) for h in range(values.shape[1])])
    ax.set_yticks(range(values.shape[0]), list(labels), fontsize=8)
    ax.set_xlabel("head")
    ax.set_ylabel("attention module")
    bright = np.nanmax(values) * 0.6 if np.isfinite(values).any() else 0.0
    for (r, c), v in np.ndenumerate(values):
        text, colour = ("pruned", "grey") if np.isnan(v) else (f"{v:.2f}", "black" if v > bright else "white")
        ax.text(c, r, text, ha="center", va="center", fontsize=7, color=colour)
    fig.colorbar(image, ax=ax, label=value_label)
    ax.set_title(title, fontsize=10)
    return fig


def patching_figure(
    scores: Tensor,
    sites: Sequence[str],
    column_labels: Sequence[str],
    *,
    column_axis: str = "position",
    title: str = "activation patching",
    value_label: str = "share restored",
) -> Figure:
    """A (sites × positions or heads) heat map of a patching result, signed (RdBu_r, white at zero),
    its values written in the cells where they fit; NaN (past a row's length) is a blank cell."""
    values = scores.detach().float().cpu().numpy()
    rows, cols = values.shape
    fig = Figure(figsize=(3.2 + 0.55 * min(cols, 48) + 1.5, 2.4 + 0.4 * rows), layout="constrained")
    ax = fig.subplots()
    scale = colour_scale(values, signed=True)
    image = ax.imshow(values, aspect="auto", interpolation="nearest", **scale)
    _ticks(ax, list(column_labels), "x", cols)
    ax.set_yticks(range(rows), list(sites), fontsize=8)
    ax.set_xlabel(column_axis)
    ax.set_ylabel("patched site")
    if cols <= 24:
        for (r, c), v in np.ndenumerate(values):
            if not np.isnan(v):
                colour = "white" if abs(v) > 0.6 * scale["norm"].vmax else "black"
                ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7, color=colour)
    fig.colorbar(image, ax=ax, label=value_label)
    ax.set_title(title, fontsize=10)
    return fig


def lens_figure(
    probs: Tensor,
    tokens: Sequence[Sequence[str]],
    layers: Sequence[str],
    positions: Sequence[str],
    *,
    title: str = "logit lens: top token per layer and position",
) -> Figure:
    """A (layers × positions) table of each layer's most likely token, the cell coloured by its
    probability (viridis, 0 to 1) with a colour bar."""
    values = probs.detach().float().cpu().numpy()
    rows, cols = values.shape
    fig = Figure(figsize=(3.0 + 0.75 * min(cols, 40) + 1.5, 2.4 + 0.4 * rows), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(values, aspect="auto", interpolation="nearest", cmap=SEQUENTIAL, vmin=0.0, vmax=1.0)
    _ticks(ax, list(positions), "x", cols)
    ax.set_yticks(range(rows), list(layers), fontsize=8)
    ax.set_xlabel("position (input token)")
    ax.set_ylabel("layer's residual stream")
    for (r, c), v in np.ndenumerate(values):
        colour = "black" if v > 0.6 else "white"
        ax.text(c, r, display_token(tokens[r][c])[:8], ha="center", va="center", fontsize=7, color=colour)
    fig.colorbar(image, ax=ax, label="top token's probability")
    ax.set_title(title, fontsize=10)
    return fig


def probe_figure(
    sites: Sequence[str],
    accuracy: Sequence[float],
    control: Sequence[float],
    chance: float,
    *,
    title: str = "linear probes",
) -> Figure:
    """Held-out accuracy per layer of the probe and of its shuffled-label control, with the chance
    line, on a 0-1 axis (each point's value written beside it)."""
    fig = Figure(figsize=(max(5.0, 1.0 + 0.7 * len(sites)), 3.8), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(sites))
    ax.plot(x, accuracy, "o-", color="tab:blue", label="probe")
    ax.plot(x, control, "s--", color="tab:orange", label="control (shuffled labels)")
    ax.axhline(chance, color="grey", linestyle=":", label=f"chance ({chance:.2f})")
    for xi, a, c in zip(x, accuracy, control):
        ax.annotate(f"{a:.2f}", (xi, a), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
        ax.annotate(f"{c:.2f}", (xi, c), textcoords="offset points", xytext=(0, -12), ha="center", fontsize=8)
    ax.set_xticks(
        x,
        list(sites),
        rotation=30 if len(sites) > 4 else 0,
        ha="right" if len(sites) > 4 else "center",
        fontsize=8,
    )
    ax.set_ylim(-0.05, 1.1)
    ax.set_xlabel("site (layer)")
    ax.set_ylabel("held-out accuracy")
    ax.legend(fontsize=8, loc="center right")
    ax.set_title(title, fontsize=10)
    return fig


def save_figure(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=dpi)
    return path


def figure_to_array(fig: Figure, dpi: int = 100) -> np.ndarray:
    """The figure's pixels (H, W, 3) as uint8, for image loggers."""
    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
