"""The README's answer-loss and probe tables, written from the saved ``lengths.csv`` files (so that
they are copied, not typed): the answer-token loss of chosen task x encoding rows at 1x, 2x and 16x
(``results/lengths.csv``), and the 1,500-step probe's exact match and answer loss at 16 and 32
(``results/longer/lengths.csv``; addition as the range over its encodings).

usage: python experiments/length_generalisation/tables.py     # writes results/readme_tables.md
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"
LOSS_ROWS = [
    ("copy", "learned"), ("copy", "rope"), ("copy", "rope+linear"), ("copy", "none"), ("copy", "alibi"),
    ("passkey", "none"), ("passkey", "alibi"), ("passkey", "relative"), ("passkey", "learned"),
    ("passkey", "rope"), ("passkey", "rope+yarn"), ("passkey", "sinusoidal"),
    ("recall", "none"), ("recall", "alibi"), ("recall", "sinusoidal"),
    ("addition", "none"), ("addition", "learned"), ("addition", "rope"), ("addition", "alibi"),
]  # fmt: skip
LOSS_LENGTHS = [16, 32, 256]
PROBE_COPY = ["learned", "rope", "rope+linear", "sinusoidal", "relative", "alibi", "none"]


def read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise SystemExit(f"{path}: no such file (run the study, or attnlab-report, first)")
    return pd.read_csv(path).set_index(["task", "encoding", "length"])


def main() -> None:
    main_run, probe = read(RESULTS / "lengths.csv"), read(RESULTS / "longer" / "lengths.csv")
    lines = [
        "# The README's tables, from lengths.csv",
        "",
        "Answer-token loss (nats per answer token, mean over seeds):",
        "",
        "| task, encoding | " + " | ".join(str(n) for n in LOSS_LENGTHS) + " |",
        "|---|" + "---|" * len(LOSS_LENGTHS),
    ]
    for task, encoding in LOSS_ROWS:
        cells = [f"{main_run.loc[(task, encoding, n), 'answer_loss mean']:.4f}" for n in LOSS_LENGTHS]
        lines.append(f"| {task}, {encoding} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "The probe (1,500 steps, one seed):",
        "",
        "| task, encoding | exact at 16 | exact at 32 | answer loss at 16 | answer loss at 32 |",
        "|---|---|---|---|---|",
    ]
    for encoding in PROBE_COPY:
        row = [probe.loc[("copy", encoding, n)] for n in (16, 32)]
        lines.append(
            f"| copy, {encoding} | {row[0]['exact_match mean']:.3f} | {row[1]['exact_match mean']:.3f} | "
            f"{row[0]['answer_loss mean']:.4f} | {row[1]['answer_loss mean']:.4f} |"
        )
    addition = probe.loc["addition"].reset_index()
    cells = []
    for n in (16, 32):
        exact = addition[addition["length"] == n]["exact_match mean"]
        cells.append(f"{exact.max():.3f}")
    for n in (16, 32):
        loss = addition[addition["length"] == n].set_index("encoding")["answer_loss mean"]
        cells.append(f"{loss.min():.4f} ({loss.idxmin()}) - {loss.max():.4f} ({loss.idxmax()})")
    lines.append("| addition, every encoding | " + " | ".join(cells) + " |")
    (RESULTS / "readme_tables.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
