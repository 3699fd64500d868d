"""The study's table and pictures from the seeds' results (``study.py`` writes ``seed<N>.json``).

    python experiments/induction_heads/summarize.py experiments/induction_heads/results

Writes ``summary.md`` (one row per seed, and the mean) and ``plots/``: the loss on the repeat and the
top induction score over training for every seed (``phase_change.png``), and each seed's induction
score, previous-token score and patching share per head (``heads_seed<N>.png``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def head(pair: list[int]) -> str:
    return f"L{pair[0]}H{pair[1]}"


def previous_token_head(r: dict) -> str:
    """Layer 0's head with the highest previous-token score, and the score."""
    scores = r["previous_token_scores"][0]
    h = max(range(len(scores)), key=scores.__getitem__)
    return f"L0H{h} ({scores[h]:.3f})"


def previous_token_heads(r: dict) -> str:
    """Every layer-0 head the study counts as a previous-token head (score 0.3 or more), with its score."""
    scores = r["previous_token_scores"]
    if r.get("previous_token_heads") is None:  # the learned-position runs predate the rule
        return "not recorded"
    return " ".join(f"{head(h)} ({scores[h[0]][h[1]]:.3f})" for h in r["previous_token_heads"]) or "none"


def steepest_drop(curve: list[dict], uniform: float) -> tuple[int, int, float, float]:
    """The evaluation interval where the loss on the repeat fell most, once it is below a uniform guess
    among the letters (the first steps' fall from the whole vocabulary to the letters is not the phase
    change): (from step, to step, from, to)."""
    start = next((i for i, point in enumerate(curve) if point["repeat_loss"] < uniform), len(curve) - 1)
    pairs = list(zip(curve[start:], curve[start + 1 :])) or [(curve[-1], curve[-1])]
    a, b = max(pairs, key=lambda ab: ab[0]["repeat_loss"] - ab[1]["repeat_loss"])
    return a["step"], b["step"], a["repeat_loss"], b["repeat_loss"]


def ablation_cell(a: dict) -> str:
    """Before -> with the induction heads / layer 0's previous-token heads / the control heads ablated."""

    def value(key: str) -> str:
        return "none" if a.get(key) is None else f"{a[key]:.3f}"

    return f"{a['before']:.3f} -> {value('induction_heads')} / {value('previous_token_heads')} / {value('control_heads')}"


def mean_rise(results: list[dict], mode: str, group: str) -> str:
    """The mean rise of the repeat loss when ``group``'s heads are ablated, over the seeds that have them."""
    rises = [
        r["ablation"][mode][group] - r["ablation"][mode]["before"]
        for r in results
        if r["ablation"][mode].get(group) is not None
    ]
    return f"{statistics.mean(rises):.3f} ({len(rises)} seeds)" if rises else "none"


def table(results: list[dict]) -> str:
    """summary.md: a row per seed, then the mean over seeds of the numeric columns."""
    lines = [
        "| seed | phase change step | steepest drop (steps: loss) | top score >= 0.3 at step | "
        "repeat loss, final | previous-token heads, layer 0 (score >= 0.3) | induction heads (score >= 0.3) | "
        "top head (induction score) | top heads (patching share) | same | previous-token head, layer 0 | "
        "zero ablation: before -> induction / previous-token / control heads | "
        "mean ablation: before -> induction / previous-token / control heads | control heads | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        top = r["top_head_by_induction_score"]
        score = r["induction_scores"][top[0]][top[1]]
        shares = " ".join(
            f"{head(h)} ({r['patching_restored'][h[0]][h[1]]:.3f})" for h in r["top_heads_by_patching"]
        )
        first, last, before, after = steepest_drop(r["curve"], r["uniform_loss"])
        cells = [
            str(r["seed"]),
            str(r["phase_change_step"]),
            f"{first}-{last}: {before:.3f} -> {after:.3f}",
            str(r["induction_step"]),
            f"{r['final_repeat_loss']:.3f}",
            previous_token_heads(r),
            " ".join(head(h) for h in r["induction_heads"]),
            f"{head(top)} ({score:.3f})",
            shares,
            "yes" if r["same_heads"] else "no",
            previous_token_head(r),
            ablation_cell(r["ablation"]["zero"]),
            ablation_cell(r["ablation"]["mean"]),
            " ".join(head(h) for h in r["control_heads"]) or "none",
            f"{r['wall_s']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    mean = {
        key: statistics.mean(r[key] for r in results)
        for key in ("phase_change_step", "final_repeat_loss", "wall_s")
        if all(r[key] is not None for r in results)
    }
    rise = {
        (group, m): mean_rise(results, m, group)
        for group in ("induction_heads", "previous_token_heads", "control_heads")
        for m in ("zero", "mean")
    }
    lines += [
        "",
        f"Mean over {len(results)} seeds: phase change step {mean.get('phase_change_step', float('nan')):.0f}, "
        f"final repeat loss {mean['final_repeat_loss']:.3f}; ablating raises the repeat loss by (zero, mean): "
        + "; ".join(
            f"{g.replace('_', ' ')} {rise[g, 'zero']} and {rise[g, 'mean']}" for g, _ in list(rise)[::2]
        )
        + "; patching names the induction heads in "
        f"{sum(r['same_heads'] for r in results)} of {len(results)} seeds; total wall time "
        f"{sum(r['wall_s'] for r in results):.0f} s, CPU time {sum(r['cpu_s'] for r in results):.0f} s, "
        f"at {results[0]['threads']} thread(s).",
    ]
    return "\n".join(lines) + "\n"


def controls_table(results: list[dict]) -> str:
    """Each seed's chosen head sets against random size-matched sets of their layer: the loss on the
    repeat with the chosen set ablated, the control sets' mean and range, the chosen set's rank among
    them and the permutation p-value (zero and mean ablation)."""
    lines = [
        "| seed | set | heads | controls drawn | sets | zero: chosen -> controls mean [min, max] | rank, p | "
        "mean: chosen -> controls mean [min, max] | rank, p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for name, c in r["random_controls"].items():
            cells = [str(r["seed"]), name.replace("_", " "), " ".join(head(h) for h in c["heads"]), c["kind"]]
            cells.append(str(len(c["sets"])))
            for mode in ("zero", "mean"):
                m = c[mode]
                spread = (
                    f"{statistics.mean(m['controls']):.3f} [{min(m['controls']):.3f}, {max(m['controls']):.3f}]"
                    if m["controls"]
                    else "none"
                )
                cells += [f"{m['chosen']:.3f} -> {spread}", f"{m['rank']}, {m['p']:.3f}"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def partners_table(results: list[dict]) -> str:
    """Each seed's induction heads with their top K-composition partner in layer 0 (without rotation and
    averaged over the query-key distances), and whether it is a previous-token head."""
    lines = [
        "| seed | previous-token heads | induction head: top K partner (offset 0; mean over offsets) | "
        "partners that are previous-token heads |",
        "|---|---|---|---|",
    ]
    for r in results:
        partners = r["k_composition"]["partners"]
        plain, rotated = partners["offset_0"], partners["mean_over_offsets"]
        pairs = " ".join(
            f"{h}: L0H{plain[h]['layer_0_head']}; L0H{rotated[h]['layer_0_head']}" for h in plain
        )
        hits = sum(p["is_previous_token_head"] for p in plain.values())
        hits_rotated = sum(p["is_previous_token_head"] for p in rotated.values())
        cells = [
            str(r["seed"]),
            previous_token_heads(r),
            pairs,
            f"{hits} of {len(plain)}; {hits_rotated} of {len(rotated)}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def phase_change_figure(results: list[dict], path: Path) -> None:
    """Each seed's loss on the repeat (solid, left axis) and top induction score (dotted, right axis)
    over training, a vertical dashed line at each seed's phase change step, the legend below the axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    twin = ax.twinx()
    from matplotlib import colormaps

    many = len(results) > 4  # then one legend entry per seed (its colour), the line styles in the title
    for r, colour in zip(results, colormaps["tab10"].colors * 2):
        steps = [p["step"] for p in r["curve"]]
        name = f"seed {r['seed']}"
        ax.plot(
            steps,
            [p["repeat_loss"] for p in r["curve"]],
            color=colour,
            label=name if many else f"{name}: loss",
        )
        twin.plot(
            steps,
            [p["top_induction_score"] for p in r["curve"]],
            color=colour,
            linestyle=":",
            label=None if many else f"{name}: top induction score",
        )
        if r["phase_change_step"] is not None:
            ax.axvline(
                r["phase_change_step"],
                color=colour,
                linestyle="--",
                linewidth=1,
                label=None if many else f"{name}: phase change, step {r['phase_change_step']}",
            )
    uniform = results[0]["uniform_loss"]
    ax.axhline(uniform, color="grey", linestyle="-.", linewidth=1, label="ln 26: a uniform guess")
    ax.axhline(
        uniform / 2, color="grey", linestyle=(0, (1, 3)), linewidth=1, label="ln 26 / 2: the threshold"
    )
    ax.set_xlabel("training step")
    ax.set_ylabel("loss on the repeat (nats, solid)")
    twin.set_ylabel("top induction score (dotted)")
    twin.set_ylim(0, 1)
    ax.set_ylim(0, uniform * 1.05)
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    fig.legend(handles=handles, fontsize=7, loc="outside lower center", ncol=6 if many else 3)
    ax.set_title(
        "the phase change: loss on the repeat (solid) falls as the top induction score (dotted) rises\n"
        "(dashed: the step the loss first falls below ln 26 / 2)",
        fontsize=9,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def heads_figure(r: dict, path: Path) -> None:
    import numpy as np
    from matplotlib.figure import Figure

    panels = {
        "induction score": r["induction_scores"],
        "previous-token score": r["previous_token_scores"],
        "patching: share of the loss restored": r["patching_restored"],
    }
    if "k_composition" in r:
        panels["K-composition, offset 0 (row: layer-1 head, column: layer-0 head)"] = r["k_composition"][
            "offset_0"
        ]
    wide = len(r["induction_scores"][0]) > 4
    fig = Figure(figsize=(14, 7) if wide else (11, 2.8), layout="constrained")
    axes = fig.subplots(2, 2).flatten() if wide else fig.subplots(1, len(panels))
    for ax, (title, values) in zip(axes, panels.items()):
        values = np.array(values)
        image = ax.imshow(values, cmap="viridis", vmin=min(0.0, values.min()), vmax=max(1.0, values.max()))
        for (i, j), v in np.ndenumerate(values):
            ax.text(
                j, i, f"{v:.2f}", ha="center", va="center", fontsize=8, color="white" if v < 0.6 else "black"
            )
        by_layer = values.shape[0] == 2  # rows are layers; else the K-composition's layer-1 heads
        columns = [f"head {h}" if by_layer else f"L0H{h}" for h in range(values.shape[1])]
        ax.set_xticks(range(values.shape[1]), columns, fontsize=8)
        rows = [f"layer {i}" if by_layer else f"L1H{i}" for i in range(values.shape[0])]
        ax.set_yticks(range(values.shape[0]), rows, fontsize=8)
        ax.set_title(title, fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(f"seed {r['seed']}: every head after training", fontsize=10)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    results = [json.loads(p.read_text()) for p in sorted(args.results.glob("seed*.json"))]
    if not results:
        raise SystemExit(f"error: no seed*.json in {args.results}: run study.py first")
    text = table(results)
    if all("random_controls" in r for r in results):
        text += (
            "\nRandom size-matched controls (loss on the repeat with the set ablated):\n\n"
            + controls_table(results)
        )
        text += "\nK-composition partners of the induction heads:\n\n" + partners_table(results)
    (args.results / "summary.md").write_text(text, encoding="utf-8")
    phase_change_figure(results, args.results / "plots" / "phase_change.png")
    for r in results:
        heads_figure(r, args.results / "plots" / f"heads_seed{r['seed']}.png")
    print((args.results / "summary.md").read_text())


if __name__ == "__main__":
    main()
