"""The AdamW-vs-Muon table from the study's run directories: AdamW's final val loss (mean over its
seeds) is the target; for every run, the steps it needs to reach that target; per optimizer, the
mean over seeds, the final val loss, and the training time per step (from the runs' throughput).

    .venv/bin/python experiments/muon/steps_to_loss.py experiments/muon/runs --out experiments/muon/results

Reads ``<runs>/{adamw,muon}-seed<N>/`` (metrics.jsonl, summary.json); writes ``steps_to_loss.md``,
``steps_to_loss.json`` and ``plots/val_loss_adamw_vs_muon.png`` into ``--out``. ``--adamw PREFIX``
reads the AdamW runs from ``<runs>/<PREFIX>-seed<N>/`` instead (``adamw-lr4e-3``: a rate of a sweep).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from attnlab.report.runs import read_run

OPTIMIZERS = ("adamw", "muon")
TOKENS_PER_STEP = 12 * 64  # the recipe's batch of 12 windows of 64 characters


def val_curve(run_dir: Path) -> list[tuple[int, float]]:
    """(step, val loss) of every validation of a run, in step order."""
    metrics = read_run(run_dir).metrics
    return sorted((m["step"], m["val/loss"]) for m in metrics if "val/loss" in m)


def steps_to(curve: list[tuple[int, float]], target: float) -> tuple[int | None, float | None]:
    """The first validation step at or below ``target``, and the step where the straight line between
    it and the validation before it crosses ``target`` (None, None: never reached)."""
    previous = None
    for step, loss in curve:
        if loss <= target:
            if previous is None or previous[1] == loss:
                return step, float(step)
            (step0, loss0) = previous
            return step, step0 + (step - step0) * (loss0 - target) / (loss0 - loss)
        previous = (step, loss)
    return None, None


def seconds_per_step(run_dir: Path) -> float:
    """Training time per optimizer step, from the run's measured training throughput."""
    return TOKENS_PER_STEP / read_run(run_dir).summary["tokens_per_s"]


def seed_of(run_name: str) -> int:
    """The seed in a run's folder name: ``<optim>-seed<N>``."""
    return int(run_name.rpartition("seed")[2])


def finished(run_dir: Path) -> bool:
    """Whether a run completed (a running or failed run has a summary.json too)."""
    return read_run(run_dir).summary.get("status") == "completed"


def study(runs: Path, adamw_prefix: str = "adamw") -> dict:
    """Every run's curve and steps to AdamW's mean final val loss, and the per-optimizer means; the
    AdamW runs are ``<runs>/<adamw_prefix>-seed<N>/``."""
    prefixes = {"adamw": adamw_prefix, "muon": "muon"}
    found = {o: [s.parent for s in runs.glob(f"{prefixes[o]}-seed*/summary.json")] for o in OPTIMIZERS}
    dirs = {
        o: sorted((d for d in found[o] if finished(d)), key=lambda d: seed_of(d.name)) for o in OPTIMIZERS
    }
    if missing := [prefixes[o] for o in OPTIMIZERS if not dirs[o]]:
        raise SystemExit(
            f"error: runs={runs}: no finished {' or '.join(missing)}-seed<N>/ run (summary.json)"
        )
    curves = {o: {d.name: val_curve(d) for d in found} for o, found in dirs.items()}
    target = statistics.mean(curve[-1][1] for curve in curves["adamw"].values())
    rows = {}
    for optim, found in dirs.items():
        for run_dir in found:
            curve = curves[optim][run_dir.name]
            first, crossing = steps_to(curve, target)
            rows[run_dir.name] = {
                "optim": optim,
                "final_step": curve[-1][0],
                "final_val_loss": curve[-1][1],
                "first_val_step_at_target": first,
                "steps_to_target": crossing,
                "s_per_step": seconds_per_step(run_dir),
                "wall_time_s": read_run(run_dir).summary["wall_time_s"],
            }
    return {"target": target, "runs": rows, "means": means(rows), "curves": curves}


def means(rows: dict[str, dict]) -> dict[str, dict]:
    """Per optimizer: seeds, mean final val loss, mean steps to the target (over the seeds that
    reached it), how many reached it, mean seconds per step."""
    out = {}
    for optim in OPTIMIZERS:
        mine = [r for r in rows.values() if r["optim"] == optim]
        if not mine:
            continue
        reached = [r["steps_to_target"] for r in mine if r["steps_to_target"] is not None]
        out[optim] = {
            "seeds": len(mine),
            "final_val_loss": statistics.mean(r["final_val_loss"] for r in mine),
            "final_val_loss_sd": statistics.stdev(r["final_val_loss"] for r in mine)
            if len(mine) > 1
            else 0.0,
            "reached": len(reached),
            "steps_to_target": statistics.mean(reached) if reached else None,
            "s_per_step": statistics.mean(r["s_per_step"] for r in mine),
        }
    return out


def markdown(result: dict) -> str:
    """The table of each run and the means, as report text."""
    lines = [
        f"Target: AdamW's final val loss, mean over its seeds: **{result['target']:.4f}**.",
        "",
        "| run | final step | final val loss | first validation at target | steps to target (interpolated) "
        "| s/step (training) | wall time (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in result["runs"].items():
        first = r["first_val_step_at_target"] if r["first_val_step_at_target"] is not None else "not reached"
        crossing = f"{r['steps_to_target']:.0f}" if r["steps_to_target"] is not None else "not reached"
        lines.append(
            f"| {name} | {r['final_step']} | {r['final_val_loss']:.4f} | {first} | {crossing} | {r['s_per_step']:.3f} "
            f"| {r['wall_time_s']:.0f} |"
        )
    lines += [
        "",
        "| optimizer | seeds | final val loss (mean ± sd) | reached target | steps to target (mean) |",
        "|---|---:|---:|---:|---:|",
    ]
    for optim, m in result["means"].items():
        steps = f"{m['steps_to_target']:.0f}" if m["steps_to_target"] is not None else "not reached"
        lines.append(
            f"| {optim} | {m['seeds']} | {m['final_val_loss']:.4f} ± {m['final_val_loss_sd']:.4f} "
            f"| {m['reached']}/{m['seeds']} | {steps} |"
        )
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """Val loss against steps: one thin line per run, AdamW's target as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {"adamw": "tab:blue", "muon": "tab:orange"}
    for optim, curves in result["curves"].items():
        for i, curve in enumerate(curves.values()):
            steps, losses = zip(*curve)
            ax.plot(steps, losses, color=colours[optim], alpha=0.8, label=optim if i == 0 else None)
    ax.axhline(
        result["target"], color="grey", linestyle="--", label=f"AdamW final (mean) {result['target']:.3f}"
    )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("val loss (first 10% of the val split)")
    ax.set_title("baby nanoGPT on Tiny Shakespeare: AdamW vs Muon, one line per seed")
    ax.set_ylim(top=min(3.0, ax.get_ylim()[1]))
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--adamw", default="adamw", help="the AdamW runs' folder prefix (before -seed<N>)")
    args = parser.parse_args()
    result = study(args.runs, args.adamw)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "steps_to_loss.md").write_text(markdown(result), encoding="utf-8")
    saved = {k: v for k, v in result.items() if k != "curves"}
    (args.out / "steps_to_loss.json").write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
    plot(result, args.out / "plots" / "val_loss_adamw_vs_muon.png")
    print(markdown(result))


if __name__ == "__main__":
    main()
