"""The README's tables of the study, from the evaluation rows ``attnlab-report`` wrote to
``results/runs.csv``: the validation loss of each encoding at each length (mean ± std over the seeds),
each seed's difference from its own loss at the trained length (averaged), and the RoPE checkpoints
stretched by each scaling. Written to ``results/tables.md``:

    python experiments/pos_extrapolation/tables.py [results/runs.csv] > experiments/pos_extrapolation/results/tables.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
TRAINED = 64
LENGTHS = (64, 128, 256, 512, 1024)
ENCODINGS = ("none", "sinusoidal", "learned", "rope", "alibi", "relative")
SCALINGS = ("linear", "ntk", "yarn")
METRIC = "val/loss"


def evaluations(runs_csv: Path) -> pd.DataFrame:
    """One row per evaluation: the run (job), its encoding and seed, the length, the RoPE scaling
    ("none" where the evaluation left RoPE as trained) and the loss."""
    rows = pd.read_csv(runs_csv)
    rows = rows[rows["row"] == "evaluation"]
    scaling = rows.get("eval model.pos.rope_scaling", pd.Series(index=rows.index, dtype=object))
    return pd.DataFrame(
        {
            "job": rows["job"],
            "pos": rows["model.pos.name"],
            "seed": rows["seed"],
            "length": rows["eval data.seq_len"].astype(int),
            "scaling": scaling.fillna("none").replace({"null": "none"}),
            "loss": rows[METRIC].astype(float),
        }
    )


def cell(values: pd.Series) -> str:
    return f"{values.mean():.3f} ± {values.std():.3f}" if len(values) > 1 else f"{values.mean():.3f}"


def difference(values: pd.Series) -> str:
    mean = values.mean()
    sign = "+" if mean >= 0 else "−"
    return f"{sign}{abs(mean):.3f} ± {values.std():.3f}"


def length_table(evals: pd.DataFrame) -> list[str]:
    plain = evals[evals["scaling"] == "none"]
    lines = [
        "| pos | seeds | " + " | ".join(str(n) for n in LENGTHS) + " | 512 minus 64 | 1024 minus 64 |",
        "|---" * (len(LENGTHS) + 4) + "|",
    ]
    for pos in ENCODINGS:
        runs = plain[plain["pos"] == pos].pivot_table(index="job", columns="length", values="loss")
        cells = [cell(runs[n].dropna()) if n in runs else "" for n in LENGTHS]
        diffs = [difference((runs[n] - runs[TRAINED]).dropna()) for n in (512, 1024)]
        lines.append(f"| {pos} | {len(runs)} | " + " | ".join(cells + diffs) + " |")
    return lines


def scaling_table(evals: pd.DataFrame) -> list[str]:
    rope = evals[evals["pos"] == "rope"]
    lines = [
        "| RoPE scaling | " + " | ".join(str(n) for n in LENGTHS) + " |",
        "|---" * (len(LENGTHS) + 1) + "|",
    ]
    for scaling in ("none", *SCALINGS):
        chosen = rope[rope["scaling"] == scaling]
        cells = []
        for n in LENGTHS:
            at = chosen[chosen["length"] == n]["loss"]
            if n == TRAINED and scaling != "none":  # factor 1: plain RoPE, scored once
                at = rope[(rope["scaling"] == "none") & (rope["length"] == n)]["loss"]
            cells.append(cell(at) if len(at) else "")
        lines.append(f"| {scaling} | " + " | ".join(cells) + " |")
    return lines


def seed_table(evals: pd.DataFrame) -> list[str]:
    plain = evals[evals["scaling"] == "none"]
    lines = [
        "| pos | seed | " + " | ".join(str(n) for n in LENGTHS) + " |",
        "|---" * (len(LENGTHS) + 2) + "|",
    ]
    for (pos, seed), runs in plain.groupby(["pos", "seed"]):
        by_length = runs.set_index("length")["loss"]
        lines.append(
            f"| {pos} | {seed} | "
            + " | ".join(f"{by_length.get(n, float('nan')):.4f}" for n in LENGTHS)
            + " |"
        )
    return lines


def main(runs_csv: Path) -> None:
    evals = evaluations(runs_csv)
    print("# pos_extrapolation: the README's tables (experiments/pos_extrapolation/tables.py)\n")
    print(f"Validation loss ({METRIC}, nats per character), mean ± std over the seeds; differences: each")
    print(f"seed's loss at the length minus its own at {TRAINED}, then mean ± std.\n")
    print("\n".join(length_table(evals)))
    print(
        f"\nRoPE stretched to each length L by factor L / {TRAINED} (at {TRAINED}: factor 1, plain RoPE):\n"
    )
    print("\n".join(scaling_table(evals)))
    print("\nEach run (no scaling):\n")
    print("\n".join(seed_table(evals)))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "results" / "runs.csv")
