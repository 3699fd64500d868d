"""The tables of experiments/compression/README.md, from the run directories that run.sh wrote.

    python experiments/compression/tables.py experiments/compression/runs > experiments/compression/results/tables.md

(a) each task's 2-layer student distilled from its teacher against the same student trained from
scratch (test metrics of the best checkpoint, as attnlab-train reports them); (b) each teacher's
int8 checkpoint against its fp32 one: file size and attnlab-eval's test metrics.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TASKS = {
    "gpt": ("test/loss", "nats/char, lower is better"),
    "vit": ("test/acc", "accuracy, higher is better"),
}


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def wall(runs: Path, name: str) -> str:
    """Seconds of the whole command (run.sh's /usr/bin/time), else the run's own wall time."""
    timed = runs / f"{name}.time"
    if timed.is_file():
        return f"{float(timed.read_text().split()[-1]):.0f} s"
    return f"{read(runs / name / 'summary.json')['wall_time_s']:.0f} s (fit and test)"


def distillation(runs: Path) -> list[str]:
    lines = [
        "| task | run | layers | parameters | test loss | test accuracy | train tokens/s or images/s | wall |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task in TASKS:
        for role in ("teacher", "scratch", "distilled"):
            name = f"{task}_{role}"
            if not (runs / name / "test_metrics.json").is_file():
                continue
            metrics = read(runs / name / "test_metrics.json")["metrics"]
            summary = read(runs / name / "summary.json")
            layers = read_layers(runs / name)
            acc = metrics.get("test/acc")
            rate = summary.get("tokens_per_s")
            lines.append(
                f"| {task} | {role} | {layers} | {summary['n_params']:,} | {metrics['test/loss']:.4f} | "
                f"{'' if acc is None else f'{100 * acc:.2f}%'} | {'' if rate is None else f'{rate:.0f}'} | "
                f"{wall(runs, name)} |"
            )
    return lines


def read_layers(run_dir: Path) -> str:
    for line in (run_dir / "config.yaml").read_text(encoding="utf-8").splitlines():
        if line.startswith("  n_layers:"):
            return line.split(":")[1].strip()
    return "?"


def int8(runs: Path) -> list[str]:
    lines = [
        "| model | checkpoint | file MiB | test loss | test accuracy |",
        "|---|---|---|---|---|",
    ]
    for task in TASKS:
        for stem in ("last", "int8-last"):
            ckpt = runs / f"{task}_teacher" / "checkpoints" / f"{stem}.ckpt"
            evaluation = runs / "eval" / f"{task}_{stem}" / "metrics.json"
            if not (ckpt.is_file() and evaluation.is_file()):
                continue
            metrics = read(evaluation)["metrics"]
            acc = metrics.get("test/acc")
            lines.append(
                f"| {task} | {'fp32 (attnlab-train)' if stem == 'last' else 'int8 (attnlab-compress)'} | "
                f"{ckpt.stat().st_size / 2**20:.2f} | {metrics['test/loss']:.4f} | "
                f"{'' if acc is None else f'{100 * acc:.2f}%'} |"
            )
    return lines


def main() -> None:
    runs = Path(sys.argv[1] if len(sys.argv) > 1 else "experiments/compression/runs")
    print("## (a) distilled student vs the same student from scratch, same steps\n")
    print("\n".join(distillation(runs)))
    print("\n## (b) int8 vs fp32, test split (attnlab-eval)\n")
    print("\n".join(int8(runs)))


if __name__ == "__main__":
    main()
