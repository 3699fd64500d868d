"""The pictures of length generalisation (``report.lengths``): per task, a heatmap of exact match
(encoding × evaluation length, mean ± std over seeds written in each cell; one seed: the score
alone) and a line plot (exact match against length on a log2 axis, one line per encoding with a
± std band; markers and dashes keep lines apart where they lie on top of each other). Both show the
task's chance level at each length (``chance_levels``): a line on the line plot, a second row of the
heatmap's length labels."""

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


LETTERS, DIGITS, RECALL_KEYS = 26, 10, 26 * 26  # attnlab.data.synthetic's alphabets


def chance_levels(task: str, length: int, passkey_digits: int | None = None) -> dict[str, float]:
    """The exact match, at evaluation length ``length``, of answers that do not read what the task
    asks, by the rules of ``attnlab.data.synthetic``'s generators (the report imports no torch, so
    they are restated here; ``tests/report/test_lengths.py`` scores them on generated examples):

    - ``input-blind``: the best fixed answer. Copy: one string of length // 2 letters, 26^-(length //
      2). Passkey: one key, 10^-digits. Recall: one digit, 1/10. Addition: the most frequent sum of
      two n-digit numbers (10^n - 1, n = (length - 2) // 3), 10^-n.
    - ``random pair`` (recall only): the digit of a pair drawn at random from the prompt, ignoring
      which key is asked: 1/k + (k - 1)/(10 k) with k = (length - 3) // 3 pairs.

    {} for a task without a rule here (``passkey`` without its digits, ``repeated_segments``)."""
    if task == "copy":
        return {"input-blind": float(LETTERS) ** -(length // 2)}
    if task == "passkey":
        return {} if passkey_digits is None else {"input-blind": float(DIGITS) ** -passkey_digits}
    if task == "recall":
        pairs = min((length - 3) // 3, RECALL_KEYS)
        return {"input-blind": 1 / DIGITS, "random pair": 1 / pairs + (pairs - 1) / (DIGITS * pairs)}
    if task == "addition":
        return {"input-blind": float(DIGITS) ** -((length - 2) // 3)}
    return {}


def chance_text(value: float) -> str:
    return "≈0" if value < 5e-4 else f"{value:.3f}"


def spread_phrase(seeds: pd.Series) -> str:
    """How cells with these seed counts are aggregated: ``one seed`` (the score itself), else ``mean ±
    std over n seeds``, or over ``low-high`` seeds where the encodings ran different numbers of seeds."""
    low, high = (int(seeds.min()), int(seeds.max())) if len(seeds) else (1, 1)
    if high <= 1:
        return "one seed"
    return f"mean ± std over {high if low == high else f'{low}-{high}'} seeds"


def seeds_phrase(summary: pd.DataFrame, task: str) -> str:
    """How one task's cells are aggregated (``spread_phrase`` of its rows' seed counts)."""
    rows = summary[summary["task"] == task]
    return spread_phrase(rows["seeds"] if "seeds" in rows else pd.Series([], dtype=int))


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


def length_heatmap(
    summary: pd.DataFrame, task: str, out_dir: Path, passkey_digits: int | None = None
) -> Path:
    """``lengths_<task>_heatmap.png``: the heatmap of ``draw_heatmap``."""
    fig, ax = new_figure()
    draw_heatmap(ax, summary, task, passkey_digits)
    return save(fig, out_dir / f"lengths_{slug(task)}_heatmap.png")


def draw_heatmap(ax: Axes, summary: pd.DataFrame, task: str, passkey_digits: int | None = None) -> None:
    """Exact match of each encoding (rows) at each length (columns), ``mean ± std`` in each cell (one
    seed: the score alone); under each length its chance levels (``chance_levels``)."""
    encodings, lengths, mean, std = task_grid(summary, task)
    spread = seeds_phrase(summary, task)
    ax.grid(False)
    image = ax.imshow(mean, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    for (i, j), value in np.ndenumerate(mean):
        colour = "black" if value > 0.6 else "white"
        text = f"{value:.2f}" if spread == "one seed" else f"{value:.2f}\n±{std[i, j]:.2f}"
        ax.text(j, i, text, ha="center", va="center", fontsize="x-small", color=colour)
    labels = []
    for n in lengths:
        chance = chance_levels(task, n, passkey_digits)
        labels.append("\n".join([str(n), *(f"{name} {chance_text(v)}" for name, v in chance.items())]))
    ax.set_xticks(range(len(lengths)), labels)
    ax.set_yticks(range(len(encodings)), encodings)
    ax.set_xlabel("evaluation length (characters; below it, the chance levels)")
    ax.set_ylabel("positional encoding")
    ax.set_title(f"{task}: exact match of generated answers ({spread})")
    ax.figure.colorbar(image, ax=ax, label="exact match (fraction)")


NUDGE = 0.04  # of a doubling: how far apart neighbouring lines are drawn sideways


def length_lines(
    summary: pd.DataFrame,
    task: str,
    out_dir: Path,
    trained: int | None = None,
    passkey_digits: int | None = None,
) -> Path:
    """``lengths_<task>_lines.png``: the line plot of ``draw_lines``."""
    fig, ax = new_figure()
    draw_lines(ax, summary, task, trained, passkey_digits)
    return save(fig, out_dir / f"lengths_{slug(task)}_lines.png")


CHANCE_STYLES = {"input-blind": "--", "random pair": "-."}


def draw_lines(
    ax: Axes,
    summary: pd.DataFrame,
    task: str,
    trained: int | None = None,
    passkey_digits: int | None = None,
) -> None:
    """Exact match against length (log2 axis), one line per encoding, a ± std band around each (one
    seed: no band), and a black line per chance level (``chance_levels``). Encodings often score the
    same (all 1 at the training length, all 0 far past it): each line is nudged sideways by a few
    percent of a doubling and drawn with smaller markers than the one before, so that lines on top of
    each other all stay visible."""
    encodings, lengths, mean, std = task_grid(summary, task)
    spread = seeds_phrase(summary, task)
    for i, encoding in enumerate(encodings):
        x = np.asarray(lengths, float) * 2 ** (NUDGE * (i - (len(encodings) - 1) / 2))
        size = max(3.0, 9.0 - 0.6 * i)
        (line,) = ax.plot(x, mean[i], label=encoding, markersize=size, **series_style(i))
        if spread != "one seed":
            ax.fill_between(x, mean[i] - std[i], mean[i] + std[i], color=line.get_color(), alpha=0.15)
    levels = [chance_levels(task, n, passkey_digits) for n in lengths]
    for name, style in CHANCE_STYLES.items():
        if all(name in level for level in levels):
            values = [level[name] for level in levels]
            shown = ", ".join(dict.fromkeys(chance_text(v) for v in values))
            ax.plot(
                lengths, values, color="black", linestyle=style, linewidth=1, label=f"chance, {name}: {shown}"
            )
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.set_ylim(-0.05, 1.05)
    if trained is not None:
        ax.axvline(trained, color="grey", linestyle=":", label="training length")
    ax.set_xlabel("evaluation length (characters, log2 scale)")
    ax.set_ylabel("exact match (fraction)")
    ax.set_title(f"{task}: exact match by evaluation length ({spread})")
    legend(ax, "positional encoding")
