"""The plots of results.md (PNG): ratios against their targets, attention by length, decoding speeds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchmarks.common import Row


def ratios(rows: list[Row], plt: Any) -> Any:
    """Every ratio row's median with its spread over the rounds, and its target in red."""
    shown = [r for r in rows if r.unit == "×" and not math.isnan(r.median)]
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(shown) + 1.2))
    labels = [f"{r.measure}\n{r.config[:60]}" for r in shown]
    y = range(len(shown))
    ax.barh(y, [r.median for r in shown], color="tab:blue", alpha=0.7)
    ax.errorbar(
        [r.median for r in shown],
        y,
        xerr=[[r.median - r.low for r in shown], [r.high - r.median for r in shown]],
        fmt="none",
        c="k",
    )
    for i, r in enumerate(shown):
        if r.target is not None:
            ax.plot([r.target, r.target], [i - 0.4, i + 0.4], c="tab:red", lw=2)
    ax.axvline(1.0, c="gray", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yticks(list(y), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("ratio (median, min–max over rounds; red: target)")
    return fig


def attention_scaling(rows: list[Row], plt: Any) -> Any:
    """Time and memory of SDPA and explicit attention by sequence length."""
    scaling = [r for r in rows if "seq_len" in r.extra]
    if not scaling:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    t = [r.extra["seq_len"] for r in scaling]
    for path, style in (("sdpa", "o-"), ("explicit", "s--")):
        left.plot(t, [r.extra["ms"][path] for r in scaling], style, label=path)
        right.plot(t, [r.extra["mib"][path] for r in scaling], style, label=path)
    for ax, what in ((left, "time per fwd+bwd (ms)"), (right, "peak memory above imports (MiB)")):
        ax.set_xscale("log", base=2)
        if any(y > 0 for line in ax.get_lines() for y in line.get_ydata()):  # memory may be unmeasured (NaN)
            ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_ylabel(what)
        ax.legend()
    fig.suptitle("causal self-attention, SDPA vs explicit (weights returned)")
    return fig


def generation(rows: list[Row], plt: Any) -> Any:
    """Decoding tokens/s of each decoder at each size and batch."""
    decoding = [r for r in rows if "speeds" in r.extra]
    if not decoding:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    names = sorted({k for r in decoding for k in r.extra["speeds"]})
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        ax.bar(
            [i + j * width for i in range(len(decoding))],
            [r.extra["speeds"].get(name, 0.0) for r in decoding],
            width,
            label=name,
        )
    ax.set_xticks(
        [i + 0.4 - width / 2 for i in range(len(decoding))],
        [f"{r.extra['size']} B{r.extra['batch']}" for r in decoding],
    )
    ax.set_ylabel("new tokens/s (greedy)")
    ax.set_yscale("log")
    ax.legend()
    return fig


def plot(rows: list[Row], out_dir: Path) -> list[Path]:
    """The PNG files under ``out_dir/plots`` of the figures that ``rows`` have data for."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out_dir / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for draw in (ratios, attention_scaling, generation):
        fig = draw(rows, plt)
        if fig is None:
            continue
        fig.tight_layout()
        paths.append(folder / f"{draw.__name__}.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths
