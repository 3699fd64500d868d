"""Figures of attention maps, token scores, image overlays and head importance (matplotlib, no pyplot).

Figures are built with ``matplotlib.figure.Figure`` and drawn by the Agg canvas, so nothing here
touches pyplot's global state or needs a display; ``save_figure`` writes a PNG and
``figure_to_array`` gives the RGB pixels that loggers take.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

MAX_TICKS = 48  # label at most this many tokens on an axis; longer inputs get every k-th label


def display_token(token: str) -> str:
    """A token as it should read on an axis: whitespace made visible."""
    return token.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "␣") or "∅"


def _ticks(ax: Axes, labels: Sequence[str] | None, axis: str, n: int) -> None:
    """Token labels on one axis (every k-th when there are many); numbers stay when there are none."""
    if labels is None:
        return
    step = max(1, math.ceil(n / MAX_TICKS))
    positions = list(range(0, n, step))
    shown = [display_token(labels[i]) for i in positions]
    if axis == "x":
        ax.set_xticks(positions, shown, rotation=90, fontsize=7)
    else:
        ax.set_yticks(positions, shown, fontsize=7)


def attention_figure(
    weights: Tensor,
    *,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str = "",
    head_names: Sequence[str] | None = None,
) -> Figure:
    """Heat maps of (H, Tq, Tk) attention weights, one panel per head (or one map of (Tq, Tk))."""
    maps = weights.detach().float().cpu()
    maps = maps.unsqueeze(0) if maps.dim() == 2 else maps
    n = maps.shape[0]
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    side = 2.2 + 0.06 * min(maps.shape[-1], 96)
    fig = Figure(figsize=(side * cols + 0.8, side * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= n:
            ax.set_axis_off()
            continue
        image = ax.imshow(maps[i].numpy(), cmap="viridis", vmin=0.0, aspect="auto", interpolation="nearest")
        ax.set_title(head_names[i] if head_names else (f"head {i}" if n > 1 else ""), fontsize=9)
        # only the outer panels carry labels: the panels share their axes, and there is less to lay out
        if i + cols >= n:
            _ticks(ax, key_labels, "x", maps.shape[-1])
        else:
            ax.set_xticks([])
        if i % cols == 0:
            _ticks(ax, query_labels, "y", maps.shape[-2])
        else:
            ax.set_yticks([])
    fig.colorbar(image, ax=axes, shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def token_scores_figure(tokens: Sequence[str], scores: dict[str, Tensor], *, title: str = "") -> Figure:
    """One heat strip per named score vector (T,) over the tokens; signed scores get a diverging map."""
    fig = Figure(figsize=(max(4.0, 0.22 * len(tokens) + 2), 0.9 * len(scores) + 1.4), layout="constrained")
    axes = fig.subplots(len(scores), 1, squeeze=False)[:, 0]
    for ax, (name, values) in zip(axes, scores.items()):
        v = values.detach().float().cpu().numpy().reshape(1, -1)
        signed = bool((v < 0).any())
        bound = float(np.abs(v).max()) or 1.0
        image = ax.imshow(
            v,
            cmap="RdBu_r" if signed else "viridis",
            vmin=-bound if signed else 0.0,
            vmax=bound,
            aspect="auto",
        )
        ax.set_yticks([0], [name], fontsize=8)
        _ticks(ax, list(tokens), "x", len(tokens))
        fig.colorbar(image, ax=ax, pad=0.01)
    if title:
        fig.suptitle(title)
    return fig


def image_overlay_figure(image: Tensor, patch_scores: dict[str, Tensor], *, title: str = "") -> Figure:
    """The image (C, H, W) in [0, 1], and per score map (n, n) over patches the map laid over it."""
    picture = image.detach().float().cpu()
    picture = (picture - picture.min()) / (picture.max() - picture.min()).clamp(min=1e-8)
    pixels = picture[0].numpy() if picture.shape[0] == 1 else picture.permute(1, 2, 0).numpy()
    cmap = "gray" if picture.shape[0] == 1 else None
    fig = Figure(figsize=(3.0 * (1 + len(patch_scores)), 3.4), layout="constrained")
    axes = fig.subplots(1, 1 + len(patch_scores), squeeze=False)[0]
    axes[0].imshow(pixels, cmap=cmap)
    axes[0].set_title("input", fontsize=9)
    extent = (-0.5, pixels.shape[1] - 0.5, pixels.shape[0] - 0.5, -0.5)
    for ax, (name, scores) in zip(axes[1:], patch_scores.items()):
        ax.imshow(pixels, cmap=cmap)
        ax.imshow(
            scores.detach().float().cpu().numpy(),
            cmap="jet",
            alpha=0.5,
            extent=extent,
            interpolation="bilinear",
        )
        ax.set_title(name, fontsize=9)
    for ax in axes:
        ax.set_axis_off()
    if title:
        fig.suptitle(title)
    return fig


def head_importance_figure(
    scores: Tensor, labels: Sequence[str], *, title: str = "head importance"
) -> Figure:
    """A (modules × heads) heat map with the values written in the cells."""
    values = scores.detach().float().cpu().numpy()
    fig = Figure(
        figsize=(1.2 + 0.7 * values.shape[1] + 1.5, 0.8 + 0.4 * values.shape[0]), layout="constrained"
    )
    ax = fig.subplots()
    image = ax.imshow(values, cmap="magma", aspect="auto", vmin=0.0)
    ax.set_xticks(range(values.shape[1]), [str(h) for h in range(values.shape[1])])
    ax.set_yticks(range(values.shape[0]), list(labels), fontsize=8)
    ax.set_xlabel("head")
    bright = values.max() * 0.6 if values.size else 0.0
    for (r, c), v in np.ndenumerate(values):
        ax.text(
            c, r, f"{v:.2f}", ha="center", va="center", fontsize=7, color="black" if v > bright else "white"
        )
    fig.colorbar(image, ax=ax)
    ax.set_title(title)
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
