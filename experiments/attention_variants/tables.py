"""The tables of experiments/attention_variants/README.md, from the files the study's run.sh wrote:

    python experiments/attention_variants/tables.py experiments/attention_variants/results

reads ``sizes.csv``, ``shakespeare/significance.csv`` (val/loss), ``shakespeare/bpb/significance.csv``,
``shakespeare/flops/significance.csv`` (val/loss at the FLOPs every run reached) and each synthetic
task's ``length_significance.csv``, and writes ``tables.md``: the README's tables, row for row (the
README names it as their source, so a figure changed there no longer matches).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

BASELINE = "mha_rope"
LENGTHS_X = {16: "1x", 32: "2x", 48: "3x", 64: "4x"}


def name(label: str) -> str:
    return label.removeprefix("run_name=")


def p_text(p: float) -> str:
    if pd.isna(p):
        return ""
    return f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


def seeds_text(value: object) -> str:
    """The report's ``seeds needed`` as it wrote it: a count, ``> 1000``, or nothing."""
    if pd.isna(value):
        return ""
    try:
        return str(int(float(value)))
    except ValueError:
        return str(value)


def short(verdict: str) -> str:
    return verdict.split(" (")[0].replace("no detectable difference at 0.05", "none detected")


def sizes_table(results: Path) -> list[str]:
    sizes = pd.read_csv(results / "sizes.csv")
    by_task = {task: g.set_index("variant") for task, g in sizes.groupby("task")}
    text = by_task["shakespeare"]
    lines = [
        "| variant | parameters | vs mha_rope | FLOPs per token, Tiny Shakespeare (T 64) | vs mha_rope | "
        "FLOPs per token, recall (T 16) | vs mha_rope |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    recall = by_task.get("recall")
    for variant, row in text.iterrows():
        cells = [f"{int(row['params']):,}", f"{row['params ratio']:.3f}", f"{row['chinchilla']:,.0f}",
                 f"{row['flops ratio']:.3f}"]  # fmt: skip
        if recall is not None and variant in recall.index:
            r = recall.loc[variant]
            cells += [f"{r['chinchilla']:,.0f}", f"{r['flops ratio']:.3f}"]
        else:
            cells += ["", ""]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines


def significance_rows(path: Path, digits: int) -> list[str]:
    table = pd.read_csv(path)
    lines = [
        "| variant | seeds | mean | difference | 95% interval | p | p (Holm) | verdict | seeds needed |",
        "|---|---:|---:|---:|---|---:|---:|---|---:|",
    ]
    for _, r in table.iterrows():
        if r["verdict"] == "baseline":
            cells = [str(r["n"]), f"{r['mean']:.{digits}f}", "", "", "", "", "baseline", ""]
        else:
            interval = f"[{r['low']:+.{digits}f}, {r['high']:+.{digits}f}]"
            needed = seeds_text(r["seeds needed"])
            cells = [str(r["n"]), f"{r['mean']:.{digits}f}", f"{r['difference']:+.{digits}f}", interval,
                     p_text(r["p"]), p_text(r["p (Holm)"]), short(r["verdict"]), needed]  # fmt: skip
        lines.append(f"| {name(r['configuration'])} | " + " | ".join(cells) + " |")
    return lines


def lengths_rows(path: Path, score: str, digits: int) -> list[str]:
    table = pd.read_csv(path)
    table = table[table["score"] == score]
    lengths = sorted(table["length"].unique())
    head = " | ".join(f"{LENGTHS_X.get(n, n)} ({n})" for n in lengths)
    lines = [f"| variant | {head} |", "|---|" + "---|" * len(lengths)]
    for variant in dict.fromkeys(table["configuration"]):
        cells = []
        for n in lengths:
            r = table[(table["configuration"] == variant) & (table["length"] == n)].iloc[0]
            if r["verdict"] == "baseline":
                cells.append(f"{r['mean']:.{digits}f}")
            else:
                mark = {"better": " better", "worse": " worse"}.get(short(r["verdict"]), "")
                p = r["p (Holm)"]
                cells.append(
                    f"{r['mean']:.{digits}f} ({r['difference']:+.{digits}f}, p Holm {p_text(p)}){mark}"
                    if not (isinstance(p, float) and math.isnan(p))
                    else f"{r['mean']:.{digits}f}"
                )
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    r = args.results
    parts = ["# The README's tables (written by tables.py from the files named in each heading)"]
    parts += ["## Parameters and FLOPs (sizes.csv)", "\n".join(sizes_table(r))]
    for title, path, digits in (
        ("Tiny Shakespeare, val loss at step 100 (shakespeare/significance.csv)", "shakespeare/significance.csv", 4),
        ("Tiny Shakespeare, val bits per byte at step 100 (shakespeare/bpb/significance.csv)",
         "shakespeare/bpb/significance.csv", 4),
        ("Tiny Shakespeare, val loss at equal FLOPs (shakespeare/flops/significance.csv)",
         "shakespeare/flops/significance.csv", 4),
        ("Recall, val answer loss at 1x (recall/significance.csv)", "recall/significance.csv", 4),
        ("Passkey, val answer loss at 1x (passkey/significance.csv)", "passkey/significance.csv", 4),
    ):  # fmt: skip
        if (r / path).exists():
            parts += [f"## {title}", "\n".join(significance_rows(r / path, digits))]
    for task in ("recall", "passkey"):
        path = r / task / "length_significance.csv"
        if path.exists():
            parts += [f"## {task}: exact match by evaluation length, mean over seeds (difference from mha_rope, "
                      f"Holm-corrected p) ({task}/length_significance.csv)",
                      "\n".join(lengths_rows(path, "exact_match", 3))]  # fmt: skip
            parts += [f"## {task}: answer-token loss by evaluation length, mean over seeds (difference from "
                      f"mha_rope, Holm-corrected p) ({task}/length_significance.csv)",
                      "\n".join(lengths_rows(path, "answer_loss", 3))]  # fmt: skip
    (r / "tables.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    print(f"wrote {r / 'tables.md'}")


if __name__ == "__main__":
    main()
