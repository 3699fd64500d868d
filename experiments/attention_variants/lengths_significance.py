"""The significance of the 1x-4x scores of experiments/attention_variants: attnlab-report's decision
(``attnlab.report.significance``: paired bootstrap interval, paired t-test, Holm, verdict, seeds needed)
applied to each evaluation length of a synthetic task, every variant against the baseline.

    python experiments/attention_variants/lengths_significance.py results/recall/runs.csv --baseline mha_rope --out results/recall

reads the ``evaluation`` rows of attnlab-report's ``runs.csv`` (one per checkpoint and attnlab-eval call:
``val/exact_match/len<L>`` and ``val/answer_loss/len<L>``, the run's ``run_name`` and ``seed``), and writes
``length_significance.csv`` (one row per score, length and variant; Holm's correction over the
variants of each score and length, as attnlab-report corrects over the rows of its table) and
``lengths.md``: the mean ± sd of each score by variant and length.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.report.decisions import needed_text
from attnlab.report.significance import LEVEL, compare, holm, verdict

SCORE = re.compile(r"^val/(exact_match|answer_loss)/len(\d+)$")
LOWER_IS_BETTER = {"exact_match": False, "answer_loss": True}


def scores(runs_csv: Path) -> tuple[pd.DataFrame, list[tuple[str, int, str]]]:
    rows = pd.read_csv(runs_csv)
    evals = rows[rows["row"] == "evaluation"].copy()
    columns = [(m.group(1), int(m.group(2)), c) for c in evals.columns if (m := SCORE.match(c))]
    return evals, sorted(columns, key=lambda x: (x[0] != "exact_match", x[1]))


def significance(evals: pd.DataFrame, columns, baseline: str, level: float) -> pd.DataFrame:
    variants = list(dict.fromkeys(evals["run_name"]))
    if baseline not in variants:
        raise SystemExit(f"--baseline={baseline}: no such run_name; the variants: {', '.join(variants)}")
    others = [v for v in variants if v != baseline]
    out = []
    for score, length, column in columns:
        by_seed = {
            v: {int(s): float(x) for s, x in zip(g["seed"], g[column]) if not math.isnan(x)}
            for v, g in evals.groupby("run_name")
        }
        rng = np.random.default_rng(0)
        results = [compare(by_seed[baseline], by_seed[v], level, rng) for v in others]
        adjusted = holm([r.p_value for r in results])
        base = by_seed[baseline]
        out.append(
            {
                "score": score,
                "length": length,
                "configuration": baseline,
                "n": len(base),
                "mean": np.mean(list(base.values())),
                "verdict": "baseline",
            }
        )
        for v, r, p in zip(others, results, adjusted):
            out.append({
                "score": score, "length": length, "configuration": v, "n": r.n_other,
                "mean": np.mean(list(by_seed[v].values())), "difference": r.difference,
                "low": r.low, "high": r.high, "test": "paired t" if r.paired else "Welch t", "p": r.p_value,
                "p (Holm)": p, "verdict": verdict(r, p, level, LOWER_IS_BETTER[score], score),
                "seeds needed": needed_text(r.seeds_needed) if not p < level else "",
            })  # fmt: skip
    return pd.DataFrame(out)


def means_table(evals: pd.DataFrame, columns, score: str) -> str:
    lengths = [(length, c) for s, length, c in columns if s == score]
    header = "| variant | " + " | ".join(f"{length}" for length, _ in lengths) + " |"
    lines = [header, "|---|" + "---:|" * len(lengths)]
    for v, g in sorted(
        evals.groupby("run_name", sort=False), key=lambda x: list(evals["run_name"]).index(x[0])
    ):
        cells = [f"{g[c].mean():.3f} ± {g[c].std(ddof=1):.3f}" for _, c in lengths]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_csv", type=Path)
    parser.add_argument("--baseline", default="mha_rope")
    parser.add_argument("--level", type=float, default=LEVEL)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    evals, columns = scores(args.runs_csv)
    if not columns:
        raise SystemExit(
            f"{args.runs_csv}: no evaluation rows with val/exact_match/len<L> (run attnlab-eval first)"
        )
    table = significance(evals, columns, args.baseline, args.level)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "length_significance.csv", index=False)
    parts = [f"# Scores by evaluation length (mean ± sd over {evals['seed'].nunique()} seeds)"]
    for score, title in (("exact_match", "Exact match of the generated answer"),
                         ("answer_loss", "Answer-token loss (nats per answer token)")):  # fmt: skip
        parts += [f"## {title}", means_table(evals, columns, score)]
    (args.out / "lengths.md").write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    print(f"wrote {args.out / 'length_significance.csv'} and {args.out / 'lengths.md'}")


if __name__ == "__main__":
    main()
