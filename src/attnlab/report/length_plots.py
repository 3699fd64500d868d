"""The pictures of length generalisation (``report.lengths``): per task, a heatmap of exact match
(encoding × evaluation length, mean ± std over seeds written in each cell) and a line plot (exact
match against length on a log2 axis, one line per encoding with a ± std band; markers and dashes
keep lines apart where they lie on top of each other)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from attnlab.report.plots import legend, new_figure, save, series_style, slug


def encoding_order(encodings: Iterable[str]) -> list[str]:
    """Encodings alphabetically, each RoPE scaling right after plain RoPE."""
    return sorted(set(encodings), key=lambda e: (e.split("+")[0], "+" in e, e))


def task_grid(summary: pd.DataFrame, task: str) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
    """Encodings, lengths, and the mean and std of exact match (encodings × lengths) of one task,
    averaged over depths where the task has them."""
    rows = summary[summary["task"] == task]
    cells = rows.groupby(["encoding", "length"])[["exact_match mean", "exact_match std"]].mean()
    encodings, lengths = encoding_order(rows["encoding"]), sorted(rows["length"].unique())
    index = pd.MultiIndex.from_product([encodings, lengths])
    mean = cells["exact_match mean"].reindex(index).to_numpy(float).reshape(len(encodings), len(lengths))
    std = cells["exact_match std"].reindex(index).fillna(0).to_numpy(float).reshape(mean.shape)
    return encodings, [int(n) for n in lengths], mean, std


def length_heatmap(summary: pd.DataFrame, task: str, out_dir: Path) -> Path:
    """``lengths_<task>_heatmap.png``: the heatmap of ``draw_heatmap``."""
    fig, ax = new_figure()
    draw_heatmap(ax, summary, task)
    return save(fig, out_dir / f"lengths_{slug(task)}_heatmap.png")


def draw_heatmap(ax: Axes, summary: pd.DataFrame, task: str) -> None:
    """Exact match of each encoding (rows) at each length (columns), ``mean ± std`` in each cell."""
    encodings, lengths, mean, std = task_grid(summary, task)
    ax.grid(False)
    image = ax.imshow(mean, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    for (i, j), value in np.ndenumerate(mean):
        colour = "black" if value > 0.6 else "white"
        ax.text(
            j, i, f"{value:.2f}\n±{std[i, j]:.2f}", ha="center", va="center", fontsize="x-small", color=colour
        )
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set_yticks(range(len(encodings)), encodings)
    ax.set_xlabel("evaluation length (characters)")
    ax.set_ylabel("positional encoding")
    ax.set_title(f"{task}: exact match of generated answers (mean ± std over seeds)")
    ax.figure.colorbar(image, ax=ax, label="exact match (fraction)")


NUDGE = 0.04  # of a doubling: how far apart neighbouring lines are drawn sideways


def length_lines(summary: pd.DataFrame, task: str, out_dir: Path, trained: int | None = None) -> Path:
    """``lengths_<task>_lines.png``: the line plot of ``draw_lines``."""
    fig, ax = new_figure()
    draw_lines(ax, summary, task, trained)
    return save(fig, out_dir / f"lengths_{slug(task)}_lines.png")


def draw_lines(ax: Axes, summary: pd.DataFrame, task: str, trained: int | None = None) -> None:
    """Exact match against length (log2 axis), one line per encoding, a ± std band around each.
    Encodings often score the same (all 1 at the training length, all 0 far past it): each line is
    nudged sideways by a few percent of a doubling and drawn with smaller markers than the one
    before, so that lines on top of each other all stay visible."""
    encodings, lengths, mean, std = task_grid(summary, task)
    for i, encoding in enumerate(encodings):
        x = np.asarray(lengths, float) * 2 ** (NUDGE * (i - (len(encodings) - 1) / 2))
        size = max(3.0, 9.0 - 0.6 * i)
        (line,) = ax.plot(x, mean[i], label=encoding, markersize=size, **series_style(i))
        ax.fill_between(x, mean[i] - std[i], mean[i] + std[i], color=line.get_color(), alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.set_ylim(-0.05, 1.05)
    if trained is not None:
        ax.axvline(trained, color="grey", linestyle=":", label="training length")
    ax.set_xlabel("evaluation length (characters, log2 scale)")
    ax.set_ylabel("exact match (fraction)")
    ax.set_title(f"{task}: exact match by evaluation length (mean ± std over seeds)")
    legend(ax, "positional encoding")
