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


def table(results: list[dict]) -> str:
    """summary.md: a row per seed, then the mean over seeds of the numeric columns."""
    lines = [
        "| seed | phase change step | top score >= 0.3 at step | repeat loss, final | first occurrence loss | "
        "top head (induction score) | top head (patching share) | same | induction heads | "
        "zero: before -> ablated (control) | mean: before -> ablated (control) | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        top, patched = r["top_head_by_induction_score"], r["top_head_by_patching"]
        score = r["induction_scores"][top[0]][top[1]]
        share = r["patching_restored"][patched[0]][patched[1]]
        abl = {m: r["ablation"][m] for m in ("zero", "mean")}
        cells = [
            str(r["seed"]),
            str(r["phase_change_step"]),
            str(r["induction_step"]),
            f"{r['final_repeat_loss']:.3f}",
            f"{r['final_first_occurrence_loss']:.3f}",
            f"{head(top)} ({score:.3f})",
            f"{head(patched)} ({share:.3f})",
            "yes" if r["same_top_head"] else "no",
            " ".join(head(h) for h in r["induction_heads"]),
            *(
                f"{a['before']:.3f} -> {a['induction_heads']:.3f} ({a['control_heads']:.3f})"
                for a in abl.values()
            ),
            f"{r['wall_s']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    mean = {
        key: statistics.mean(r[key] for r in results)
        for key in ("phase_change_step", "final_repeat_loss", "final_first_occurrence_loss", "wall_s")
        if all(r[key] is not None for r in results)
    }
    gain = {
        m: statistics.mean(r["ablation"][m]["induction_heads"] - r["ablation"][m]["before"] for r in results)
        for m in ("zero", "mean")
    }
    control = {
        m: statistics.mean(r["ablation"][m]["control_heads"] - r["ablation"][m]["before"] for r in results)
        for m in ("zero", "mean")
    }
    lines += [
        "",
        f"Mean over {len(results)} seeds: phase change step {mean.get('phase_change_step', float('nan')):.0f}, "
        f"final repeat loss {mean['final_repeat_loss']:.3f}, first occurrence loss "
        f"{mean['final_first_occurrence_loss']:.3f}; ablating the induction heads raises the repeat loss by "
        f"{gain['zero']:.3f} (zero) and {gain['mean']:.3f} (mean), the control heads by {control['zero']:.3f} "
        f"(zero) and {control['mean']:.3f} (mean); total wall time {sum(r['wall_s'] for r in results):.0f} s "
        f"at {results[0]['threads']} thread(s).",
    ]
    return "\n".join(lines) + "\n"


def phase_change_figure(results: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.2), layout="constrained")
    ax = fig.subplots()
    twin = ax.twinx()
    for r, colour in zip(results, ("tab:blue", "tab:green", "tab:red", "tab:purple")):
        steps = [p["step"] for p in r["curve"]]
        ax.plot(
            steps,
            [p["repeat_loss"] for p in r["curve"]],
            color=colour,
            label=f"seed {r['seed']}: loss on the repeat",
        )
        twin.plot(
            steps,
            [p["top_induction_score"] for p in r["curve"]],
            color=colour,
            linestyle=":",
            label=f"seed {r['seed']}: top induction score",
        )
        if r["phase_change_step"] is not None:
            ax.axvline(r["phase_change_step"], color=colour, alpha=0.3)
    ax.axhline(results[0]["uniform_loss"], color="grey", linestyle="--", label="ln 26 (a uniform guess)")
    ax.set_xlabel("training step")
    ax.set_ylabel("loss on the repeat (nats, solid)")
    twin.set_ylabel("top induction score (dotted)")
    twin.set_ylim(0, 1)
    ax.set_ylim(bottom=0)
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=7, loc="center right")
    ax.set_title(
        "the phase change: loss on the repeat and the induction score (vertical: phase change step)",
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
    fig = Figure(figsize=(11, 2.8), layout="constrained")
    for ax, (title, values) in zip(fig.subplots(1, 3), panels.items()):
        values = np.array(values)
        image = ax.imshow(values, cmap="viridis", vmin=min(0.0, values.min()), vmax=max(1.0, values.max()))
        for (i, j), v in np.ndenumerate(values):
            ax.text(
                j, i, f"{v:.2f}", ha="center", va="center", fontsize=8, color="white" if v < 0.6 else "black"
            )
        ax.set_xticks(range(values.shape[1]), [f"head {h}" for h in range(values.shape[1])], fontsize=8)
        ax.set_yticks(range(values.shape[0]), [f"layer {i}" for i in range(values.shape[0])], fontsize=8)
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
    (args.results / "summary.md").write_text(table(results), encoding="utf-8")
    phase_change_figure(results, args.results / "plots" / "phase_change.png")
    for r in results:
        heads_figure(r, args.results / "plots" / f"heads_seed{r['seed']}.png")
    print((args.results / "summary.md").read_text())


if __name__ == "__main__":
    main()
