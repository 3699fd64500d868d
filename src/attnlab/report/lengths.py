"""Length generalisation on synthetic tasks, from ``attnlab-eval eval.lengths=[...]`` evaluations:
per task, the exact match of each positional encoding (RoPE once per zero-shot scaling) at each
evaluation length, as the mean and std over seeds, written as ``lengths.md``, ``lengths.csv`` and a
heatmap and a line plot per task (``report.length_plots``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from attnlab.report.files import write_text_whole, write_whole
from attnlab.report.length_plots import encoding_order, length_heatmap, length_lines, spread_phrase
from attnlab.report.runs import find_run_dirs, read_run

LENGTHS_CSV = "lengths.csv"
LENGTHS_MD = "lengths.md"
SCORES = ("exact_match", "answer_loss")


def length_frame(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per scored setting of every run under ``paths``: task, encoding, seed, length, depth,
    the scores (the newest evaluation where a run was swept twice)."""
    rows = []
    for run_dir in find_run_dirs(paths):
        files = read_run(run_dir)
        for evaluation in files.evals if files is not None else []:
            digits = (files.config.get("data") or {}).get("passkey_digits")  # for passkey's chance
            rows += [
                {"run": str(run_dir), "passkey_digits": digits, **row}
                for row in evaluation.get("lengths", [])
            ]
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame.from_records(rows)
    frame["task"] = frame["data_kind"]
    if "passkey_digits" not in frame:
        frame["passkey_digits"] = None
    frame["encoding"] = [encoding_name(p, s) for p, s in zip(frame["pos"], frame["rope_scaling"])]
    frame["depth"] = frame["depth"].astype(object).where(frame["depth"].notna(), "-")
    keys = ["run", "length", "depth", "rope_scaling"]
    return frame.drop_duplicates(keys, keep="last").reset_index(drop=True)


def encoding_name(pos: str, scaling: str) -> str:
    """``rope`` as trained, ``rope+yarn`` stretched zero-shot; every other encoding by its name."""
    return pos if scaling in (None, "none") else f"{pos}+{scaling}"


def length_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean, std and seed count of each score per task, encoding, length and depth."""
    grouped = frame.groupby(["task", "encoding", "length", "depth"], sort=True)
    stats = grouped[list(SCORES)].agg(["mean", "std", "count"])
    stats.columns = [f"{score} {stat}" for score, stat in stats.columns]
    stats = stats.rename(columns={"exact_match count": "seeds"}).drop(columns="answer_loss count")
    return stats.reset_index()


def accuracy_table(summary: pd.DataFrame, task: str, score: str = "exact_match") -> pd.DataFrame:
    """Encodings (rows) by evaluation length (columns) of one task: ``score`` (exact match, or
    answer_loss) as ``mean ± std``, averaged over depths where the task has them."""
    rows = summary[summary["task"] == task]
    cells = rows.groupby(["encoding", "length"])[[f"{score} mean", f"{score} std"]].mean()
    digits = 3 if score == "exact_match" else 4
    table = pd.DataFrame(index=encoding_order(rows["encoding"]))
    for length in sorted(rows["length"].unique()):
        at = cells.xs(length, level="length")
        mean, std = at.T.to_numpy()
        column = [f"{m:.{digits}f} ± {0.0 if pd.isna(s) else s:.{digits}f}" for m, s in zip(mean, std)]
        table[f"{length}"] = pd.Series(column, index=at.index).reindex(table.index).fillna("")
    return table.rename_axis("encoding").reset_index()


def write_length_report(paths: Iterable[str | Path], out_dir: Path) -> list[Path]:
    """``lengths.csv`` (every setting's mean, std and seeds), ``lengths.md`` (a table per task) and
    the plots; [] where no evaluation swept lengths."""
    frame = length_frame(paths)
    if frame.empty:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = length_summary(frame)
    written = [out_dir / LENGTHS_CSV]
    write_whole(written[0], lambda tmp: summary.to_csv(tmp, index=False, float_format="%.4f"))
    spread = spread_phrase(summary["seeds"])
    spread = "one seed: the ± is 0 by construction" if spread == "one seed" else spread
    parts = [f"# Exact match of generated answers by evaluation length ({spread})\n"]
    for task in sorted(summary["task"].unique()):
        trained = sorted(frame.loc[frame["task"] == task, "trained_length"].unique())
        digits = frame.loc[frame["task"] == task, "passkey_digits"].dropna().unique()
        digits = int(digits[0]) if len(digits) == 1 else None
        parts.append(f"## {task} (trained at {', '.join(map(str, trained))})\n")
        parts.append(accuracy_table(summary, task).to_markdown(index=False) + "\n")
        parts.append(f"Answer-token loss, {task} (nats per answer token, {spread}):\n")
        parts.append(accuracy_table(summary, task, "answer_loss").to_markdown(index=False) + "\n")
        written.append(length_heatmap(summary, task, out_dir / "plots", digits))
        written.append(
            length_lines(summary, task, out_dir / "plots", trained[0] if len(trained) == 1 else None, digits)
        )
    write_text_whole(out_dir / LENGTHS_MD, "\n".join(parts))
    return [out_dir / LENGTHS_MD, *written]
