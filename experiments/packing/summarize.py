"""The packing study's table and plot from its three run directories (see run.sh).

usage: python experiments/packing/summarize.py <runs> <results>

<runs> holds one folder per seed (seed0/, seed1/, ...), each with the three arms' run directories.
For each arm and seed: the validation loss scored the same way for all (``eval/alone``: each validation
document alone, in pieces of seq_len), the arm's own validation loss (its own layout, from
``metrics.jsonl``), the training throughput attnlab logs (positions per second, padding included),
the share of those positions that hold a real token, and so the real tokens per second.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ARMS = {
    "masked": "packed, document mask",
    "unmasked": "packed, no mask",
    "padded": "one document per row, padded",
}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def real_fraction(run: Path) -> float:
    """The share of training positions that are real tokens: 1 for packed windows, the padded rows' share."""
    config = (run / ".hydra" / "config.yaml").read_text()
    if "packing: padded" not in config:
        return 1.0
    from attnlab.data import build_datamodule
    from attnlab.schema.data import data_config
    from attnlab.schema.model import model_config
    from attnlab.schema.task import CausalLMTask

    cfg = data_config("text", packing="padded", seq_len=256, val_fraction=0.1, test_fraction=0.0)
    dm = build_datamodule(cfg, needs=CausalLMTask.data_needs, seed=0, model_cfg=model_config("gpt"))
    dm.setup("fit")
    return dm.datasets["train"].real_fraction


def arm_results(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    metrics = read_jsonl(run / "metrics.jsonl")
    own_val = [m["val/loss"] for m in metrics if "val/loss" in m][-1]
    alone = json.loads(next((run / "eval" / "alone").rglob("metrics.json")).read_text())["metrics"][
        "val/loss"
    ]
    fraction = real_fraction(run)
    train_s = max(m["time_s"] for m in metrics if "train/loss" in m)
    return {
        "val_loss_alone": alone,
        "val_loss_own_layout": own_val,
        "positions_per_s": summary["tokens_per_s"],
        "real_fraction": fraction,
        "real_tokens_per_s": summary["tokens_per_s"] * fraction,
        "steps": summary["final_step"],
        "train_s": train_s,
        "wall_time_s": summary["wall_time_s"],
        "curve": [(m["step"], m["train/loss"]) for m in metrics if "train/loss" in m],
    }


def table(results: dict[str, dict[str, dict]]) -> str:
    """One row per arm and seed, then each arm's mean over the seeds."""
    rows = [
        "| arm | seed | val loss, each document alone | val loss, own layout | real tokens/s | positions/s "
        "| real share | steps | wall time (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in ARMS:
        for seed, by_arm in results.items():
            r = by_arm[arm]
            rows.append(
                f"| {ARMS[arm]} | {seed} | {r['val_loss_alone']:.4f} | {r['val_loss_own_layout']:.4f} | "
                f"{r['real_tokens_per_s']:.0f} | {r['positions_per_s']:.0f} | {r['real_fraction']:.3f} | "
                f"{r['steps']} | {r['wall_time_s']:.0f} |"
            )
        alone = [by_arm[arm]["val_loss_alone"] for by_arm in results.values()]
        own = [by_arm[arm]["val_loss_own_layout"] for by_arm in results.values()]
        rows.append(f"| **{ARMS[arm]}** | mean | **{mean(alone):.4f}** | {mean(own):.4f} | | | | | |")
    return "\n".join(rows) + "\n"


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def plot(results: dict[str, dict[str, dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curves, bars) = plt.subplots(1, 2, figsize=(10, 4))
    first = next(iter(results.values()))
    # masked and unmasked train on the same packed windows and differ by little: a wide solid line
    # under a dashed one keeps both visible, and the largest gap between them is written in the legend
    styles = [{"linestyle": "-", "linewidth": 3.0}, {"linestyle": "--", "linewidth": 1.5}, {"linestyle": ":"}]
    for (arm, r), style in zip(first.items(), styles, strict=False):
        steps, losses = zip(*r["curve"])
        curves.plot(steps, losses, label=ARMS[arm], **style)
    arms = list(first.values())
    gap = max(abs(a[1] - b[1]) for a, b in zip(arms[0]["curve"], arms[1]["curve"], strict=False))
    curves.plot([], [], " ", label=f"mask vs no mask: at most {gap:.3f} apart")
    curves.set(xlabel="step", ylabel="training loss (own layout)", title=f"training, {next(iter(results))}")
    curves.legend()
    losses = {arm: [by_arm[arm]["val_loss_alone"] for by_arm in results.values()] for arm in ARMS}
    names = [ARMS[a].replace(", ", "\n") for a in ARMS]
    bars.bar(names, [mean(v) for v in losses.values()], color=["C0", "C1", "C2"], alpha=0.6)
    for i, values in enumerate(losses.values()):
        bars.plot([i] * len(values), values, "ko", markersize=4)
    every = [v for values in losses.values() for v in values]
    bars.set_ylim(min(every) - 0.02, max(every) + 0.02)
    bars.set(ylabel="val loss (nats/char), each document alone", title="validation documents (mean, seeds)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main(runs: Path, out: Path) -> None:
    seeds = sorted(runs.glob("seed*"), key=lambda p: int(p.name[4:]))
    results = {seed.name: {arm: arm_results(seed / arm) for arm in ARMS} for seed in seeds}
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table(results))
    plain = {
        s: {a: {k: v for k, v in r.items() if k != "curve"} for a, r in by.items()}
        for s, by in results.items()
    }
    (out / "results.json").write_text(json.dumps(plain, indent=1))
    plot(results, out / "val_loss.png")
    print(table(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
