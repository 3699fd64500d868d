"""Parameters and training FLOPs per token of each variant of experiments/attention_variants, as the
framework counts them when it builds the model (each run's ``summary.json``: ``n_params``,
``flops_per_token``'s Chinchilla and nanoGPT counts at the run's ``seq_len``), with their ratios to the
baseline's, per task (the vocabulary and the length differ between tasks):

    python experiments/attention_variants/sizes.py experiments/attention_variants/runs --out experiments/attention_variants/results

writes ``sizes.csv`` (task, variant, params, chinchilla, nanogpt, seq_len and the two ratios) and ``sizes.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import yaml


def sizes(runs: Path, baseline: str) -> pd.DataFrame:
    rows = []
    for task_dir in sorted(p for p in runs.iterdir() if p.is_dir()):
        seen: dict[str, dict] = {}
        for summary in sorted(
            task_dir.glob("*/summary.json"), key=lambda p: int(p.parent.name.split("_")[0])
        ):
            config = yaml.safe_load((summary.parent / "config.yaml").read_text(encoding="utf-8"))
            name = config.get("run_name")
            if name in seen:
                continue
            record = json.loads(summary.read_text(encoding="utf-8"))
            flops = record.get("flops_per_token") or {}
            seen[name] = {"task": task_dir.name, "variant": name, "params": record["n_params"],
                          "chinchilla": flops.get("chinchilla"), "nanogpt": flops.get("nanogpt"),
                          "seq_len": flops.get("seq_len")}  # fmt: skip
        if baseline not in seen:
            continue
        base = seen[baseline]
        for row in seen.values():
            row["params ratio"] = round(row["params"] / base["params"], 4)
            row["flops ratio"] = round(row["chinchilla"] / base["chinchilla"], 4)
            rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--baseline", default="mha_rope")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    table = sizes(args.runs, args.baseline)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "sizes.csv", index=False)
    parts = ["# Parameters and training FLOPs per token (Chinchilla's count), by task"]
    for task, group in table.groupby("task", sort=False):
        parts.append(f"## {task} (seq_len {int(group['seq_len'].iloc[0])})")
        parts.append(group.drop(columns=["task"]).to_markdown(index=False))
    (args.out / "sizes.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    print(f"wrote {args.out / 'sizes.csv'} and {args.out / 'sizes.md'}")


if __name__ == "__main__":
    main()
