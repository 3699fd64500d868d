"""Run directories written by hand, file by file as training and attnlab-eval write them
(docs/run-directory.md), for the report's tests."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import yaml

BASE_CONFIG: dict[str, Any] = {
    "model": {"family": "gpt", "d_model": 32, "n_layers": 2, "pos": {"name": "learned"}},
    "data": {"kind": "text", "seq_len": 64, "batch_size": 8},
    "task": {"name": "causal_lm", "monitor": "val/loss", "monitor_mode": "min"},
    "optim": {"lr": 1e-3, "betas": [0.9, 0.99]},
    "trainer": {"max_steps": 30},
    "logger": {"names": ["csv"], "run_name": None},
    "seed": 1,
    "ckpt_path": None,
    "run_dir": None,
}


def config(**dotted: Any) -> dict[str, Any]:
    """BASE_CONFIG with ``model__pos__name="alibi"``-style changes (``__`` for the dots)."""
    out = copy.deepcopy(BASE_CONFIG)
    for key, value in dotted.items():
        *parents, leaf = key.split("__")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def val_losses(final: float, steps: tuple[int, ...] = (10, 20, 30)) -> dict[int, float]:
    """A falling validation curve ending at ``final``."""
    return {step: final + 0.5 * (steps[-1] - step) / steps[-1] for step in steps}


def write_run(
    path: Path,
    cfg: dict[str, Any],
    *,
    status: str = "completed",
    val: dict[int, float] | None = None,
    test: dict[str, float] | None = None,
    error: str | None = None,
    tokens_per_s: float = 1000.0,
    n_params: int = 12345,
    overrides: list[str] | None = None,
    summary_fields: dict[str, Any] | None = None,
) -> Path:
    """A run directory as training leaves it: config, overrides, metrics.jsonl (train lines every 5
    steps, ``val`` at its steps), summary.json with ``status`` (and ``summary_fields``), and
    test_metrics.json if ``test``."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    (path / ".hydra").mkdir(exist_ok=True)
    (path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides or []), encoding="utf-8")
    val = val if val is not None else val_losses(2.0)
    lines = []
    last = max(val, default=0)
    for step in range(5, last + 1, 5):
        lines.append({"step": step, "time_s": step * 0.1, "train/loss": 3.0 - step / 100, "lr": 1e-3})
        lines[-1]["train/tokens_per_s"] = tokens_per_s
        if step in val:
            lines.append({"step": step, "time_s": step * 0.1 + 0.05, "val/loss": val[step]})
            lines[-1]["val/ppl"] = math.exp(val[step])
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    summary: dict[str, Any] = {
        "status": status,
        "error": error,
        "n_params": n_params,
        "started": "2025-01-01T12:00:00",
    }
    if status != "running":
        monitor = min(val.items(), key=lambda item: item[1]) if val else None
        summary.update(
            wall_time_s=last * 0.1 + 1.0,
            tokens_per_s=tokens_per_s,
            final_step=last,
            best={"metric": "val/loss", "value": monitor[1], "step": monitor[0]} if monitor else None,
            ended="2025-01-01T12:01:00",
        )
    summary.update(summary_fields or {})
    (path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    if test is not None:
        (path / "test_metrics.json").write_text(
            json.dumps({"ckpt_path": str(path / "checkpoints" / "best-step000030.ckpt"), "metrics": test}),
            encoding="utf-8",
        )
    return path


def write_eval(
    run: Path,
    name: str,
    metrics: dict[str, float],
    *,
    overrides: dict[str, Any] | None = None,
    split: str = "val",
    ckpt: str = "best-step000030.ckpt",
) -> Path:
    """``<run>/eval/<name>/metrics.json`` as attnlab-eval writes it."""
    out = run / "eval" / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump({"ckpt_path": ckpt, "split": split}), encoding="utf-8")
    record = {
        "ckpt_path": str(run / "checkpoints" / ckpt),
        "split": split,
        "overrides": overrides or {},
        "metrics": metrics,
    }
    (out / "metrics.json").write_text(json.dumps(record), encoding="utf-8")
    return out
