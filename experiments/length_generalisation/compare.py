"""The comparisons the README states, each with the report's significance (attnlab.report.significance:
the mean per-seed difference, its 95% bootstrap interval over the seed pairs, the paired t-test's
p-value and the seeds per side that 80% power would need), from the per-seed evaluations in a
results folder's ``runs.csv`` (the runs themselves are not kept, so ``attnlab-report --baseline``
cannot be rerun on them). Every pair shares its seeds and its validation examples, so each is paired.

usage: python experiments/length_generalisation/compare.py [results folder] [--pairs range]

Writes ``comparisons.md`` into the folder (default: results/): one row per comparison, named ``task,
length: other - baseline`` (a metric other than exact match is named after it), and, for recall, each
encoding's exact match against the random-pair baseline (one-sample t-test over the seeds). The pairs
are the main run's (``fixed``, the default) or those of copy trained on a range of lengths (``range``:
every encoding against NoPE, Kazemnejad et al.'s best, and each RoPE scaling against plain RoPE).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from attnlab.report.significance import compare, holm, one_sample_p

HERE = Path(__file__).resolve().parent
# (task, length, baseline, other): an arm is an encoding, ``rope+<scaling>`` for a zero-shot scaling,
# or ``<encoding>@<length>`` for the same encoding at another length.
PAIRS = [
    ("copy", 32, "rope", "rope+linear"),
    ("passkey", 32, "rope", "rope+yarn"),
    ("passkey", 32, "rope", "rope+linear"),
    ("passkey", 32, "none", "relative"),
    ("passkey", 64, "none", "relative"),
    ("passkey", 128, "none", "relative"),
    ("passkey", 32, "rope", "relative"),
    ("passkey", 32, "learned", "relative"),
    ("passkey", 32, "none@16", "none"),
    ("passkey", 64, "none@16", "none"),
    ("passkey", 32, "alibi@16", "alibi"),
    ("passkey", 32, "relative@16", "relative"),
]
ENCODINGS = ["sinusoidal", "learned", "rope", "alibi", "relative"]
RANGE_PAIRS = [
    *[("copy", n, "none", e, m) for m in ("exact_match", "answer_loss") for n in (16, 32) for e in ENCODINGS],
    *[("copy", 32, "rope", f"rope+{s}", m) for m in ("exact_match", "answer_loss") for s in ("linear", "ntk", "yarn")],
]  # fmt: skip
RECALL_BASELINE = {16: 0.325, 32: 0.2, 64: 0.145, 128: 0.122, 256: 0.111}  # 1/n + 0.1 (n-1)/n, n pairs


def per_seed(
    frame: pd.DataFrame, task: str, length: int, arm: str, metric: str = "exact_match"
) -> dict[int, float]:
    """``metric`` (exact match or answer loss) by seed of one arm of ``task`` at ``length``."""
    arm, _, at = arm.partition("@")
    length = int(at) if at else length
    encoding, _, scaling = arm.partition("+")
    column = f"val/{metric}/len{length}" + (f"/{scaling}" if scaling else "")
    rows = frame[(frame["data.kind"] == task) & (frame["model.pos.name"] == encoding)]
    values = {int(s): float(v) for s, v in zip(rows["seed"], rows[column]) if not pd.isna(v)}
    if not values:
        raise SystemExit(f"no evaluation of {task} {arm} at {length} ({column}) in runs.csv")
    return values


def fmt(x: float) -> str:
    return "nan" if np.isnan(x) else f"{x:.3f}"


def main(results: Path, pairs: str = "fixed") -> None:
    frame = pd.read_csv(results / "runs.csv")
    frame = frame[frame["row"] == "evaluation"]
    chosen = [(*pair, "exact_match") for pair in PAIRS] if pairs == "fixed" else RANGE_PAIRS
    lines = [
        "# Comparisons, paired by seed (report significance: paired t-test, bootstrap)",
        "",
        "p (Holm): Holm's step-down adjustment over this table's p-values (the comparisons with a p), so",
        "that those below 0.05 hold the table's family-wise error at 0.05.",
        "",
        "| comparison | baseline | other | difference | 95% interval | p | p (Holm) | seeds needed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for task, length, baseline, other, metric in chosen:
        if task not in set(frame["data.kind"]):
            continue
        b, o = per_seed(frame, task, length, baseline, metric), per_seed(frame, task, length, other, metric)
        c = compare(b, o)
        mean_b, mean_o = np.mean(list(b.values())), np.mean(list(o.values()))
        named = "" if metric == "exact_match" else f" ({metric.replace('_', ' ')})"
        rows.append((f"{task}, {length}: {other} - {baseline}{named}", mean_b, mean_o, c))
    adjusted = holm([c.p_value for *_, c in rows])
    for (name, mean_b, mean_o, c), p_holm in zip(rows, adjusted):
        lines.append(
            f"| {name} | {fmt(mean_b)} | {fmt(mean_o)} | {c.difference:+.3f} "
            f"| [{c.low:+.3f}, {c.high:+.3f}] | {c.p_value:.3g} | {p_holm:.3g} | {c.seeds_needed} |"
        )
    if "recall" in set(frame["data.kind"]):
        lines += [
            "",
            "Recall's exact match against the random-pair baseline (one-sample t-test over the seeds, two-sided):",
            "",
            "| encoding | " + " | ".join(f"{n}: mean - baseline, p" for n in RECALL_BASELINE) + " |",
            "|---|" + "---|" * len(RECALL_BASELINE),
        ]
        for encoding in sorted(set(frame[frame["data.kind"] == "recall"]["model.pos.name"])):
            cells = []
            for length, chance in RECALL_BASELINE.items():
                values = np.array(list(per_seed(frame, "recall", length, encoding).values()))
                cells.append(f"{values.mean() - chance:+.3f}, {one_sample_p(values, chance):.2g}")
            lines.append(f"| {encoding} | " + " | ".join(cells) + " |")
    (results / "comparisons.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="?", default=HERE / "results", help="holds runs.csv")
    parser.add_argument("--pairs", choices=["fixed", "range"], default="fixed", help="which comparisons")
    args = parser.parse_args()
    main(args.results, args.pairs)
