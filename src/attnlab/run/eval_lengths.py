"""``attnlab-eval eval.lengths=[16,32,64] [eval.depths=[0,0.5,1]]``: one checkpoint of a synthetic
task scored at every length (and passkey depth) in one call, written to ``metrics.json``, the logger
and a printed table.

A RoPE checkpoint is scored as trained, then once per ``eval.rope_scalings`` (linear, NTK, YaRN)
applied zero-shot with ``rope_factor`` = length / trained length (at least 1) and the trained length
as ``rope_original_max_len``: each length is stretched back onto the positions the model saw, not
all by one fixed factor. Each setting reports the exact match of greedily generated answers, the
answer-token loss and the teacher-forced exact match (``attnlab.run.answers``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from attnlab.schema.errors import ConfigError
from attnlab.schema.eval import EvalConfig
from attnlab.schema.load import plain
from attnlab.schema.pos import LearnedPos, RopePos, RopeScalingKind
from attnlab.schema.run import RunConfig
from attnlab.schema.rundir import EVAL_METRICS_FILE
from attnlab.schema.synthetic_data import PasskeyData, SyntheticData
from attnlab.training.console import log_to_file
from attnlab.training.files import write_atomically

SYNTHETIC_KINDS = "copy, passkey, recall, addition"


@dataclass(frozen=True)
class Setting:
    """One scored setting: a length, a passkey depth (None: the data's own) and a RoPE scaling."""

    length: int
    depth: float | None
    rope_scaling: str
    rope_factor: float

    def key(self) -> str:
        depth = "" if self.depth is None else f"/depth{self.depth:g}"
        scaling = "" if self.rope_scaling == RopeScalingKind.none else f"/{self.rope_scaling}"
        return f"len{self.length}{depth}{scaling}"


def check_length_sweep(ev: EvalConfig) -> None:
    """Refuse, before any directory exists, a sweep the checkpoint cannot be scored on: data that is
    no synthetic task (a ViT's images), depths for a task without one, a length too short for the
    task or past a learned positional table."""
    sweep, data, model = ev.eval, ev.data, ev.model
    if not sweep.lengths or data is None or model is None:
        return
    if not isinstance(data, SyntheticData):
        raise ConfigError(
            "eval.lengths",
            sweep.lengths,
            f"scores a synthetic task ({SYNTHETIC_KINDS}); this {model.family} checkpoint reads data.kind={data.kind}",
        )
    if sweep.depths and not isinstance(data, PasskeyData):
        raise ConfigError("eval.depths", sweep.depths, f"only data.kind=passkey has a depth, not {data.kind}")
    for length in sweep.lengths:
        if length < data.min_seq_len:
            raise ConfigError(
                "eval.lengths", length, f"is too short for data.kind={data.kind}: at least {data.min_seq_len}"
            )
        if isinstance(model.pos, LearnedPos) and length > model.max_seq_len:
            raise ConfigError(
                "eval.lengths",
                length,
                f"is past the learned positional table (model.max_seq_len={model.max_seq_len}); "
                f"lengths up to {model.max_seq_len} (train with a larger model.max_seq_len to go further)",
            )
    check_lengths_fit(ev, max(sweep.lengths))


def check_lengths_fit(ev: EvalConfig, length: int) -> None:
    """The longest length's attention scores (one layer, one batch) fit in the device's free memory."""
    from attnlab.run.memory import attention_scores_bytes, check_fits

    batch = ev.batch_size or ev.data.batch_size
    device = "cuda" if str(ev.trainer.accelerator) in ("gpu", "cuda") else "cpu"
    needed = attention_scores_bytes(batch, ev.model.n_heads, length)
    what = f"one layer's attention scores at length {length} ({batch} x {ev.model.n_heads} heads x {length}^2 floats)"
    check_fits("eval.lengths", length, needed, what, device)


def sweep_settings(ev: EvalConfig, trained_len: int, rope: bool) -> list[Setting]:
    """Every (scaling, length, depth) to score, the plain model first."""
    scalings = [RopeScalingKind.none, *(ev.eval.rope_scalings if rope else [])]
    depths: list[float | None] = list(ev.eval.depths) or [None]
    return [
        Setting(
            length,
            depth,
            str(scaling),
            1.0 if scaling == RopeScalingKind.none else max(1.0, length / trained_len),
        )
        for scaling in scalings
        for length in ev.eval.lengths
        for depth in depths
    ]


def scaling_changes(setting: Setting, trained_len: int) -> dict[str, Any]:
    """The model keys a setting changes (none for the plain model)."""
    if setting.rope_scaling == RopeScalingKind.none:
        return {}
    return {
        "model.pos.rope_scaling": setting.rope_scaling,
        "model.pos.rope_factor": setting.rope_factor,
        "model.pos.rope_original_max_len": trained_len,
    }


def score_setting(ev: EvalConfig, run: RunConfig, evaluated: RunConfig, setting: Setting) -> dict[str, float]:
    """The answer scores of one setting on the first ``eval.examples`` examples of ``ev.split``."""
    from attnlab.checkpoint import load_task_from_checkpoint
    from attnlab.data import build_datamodule
    from attnlab.run.answers import AnswerTotals, add_batch

    task = load_task_from_checkpoint(ev.ckpt_path, model_changes=scaling_changes(setting, run.data.seq_len))
    data = replace(
        evaluated.data, seq_len=setting.length, batch_size=ev.batch_size or evaluated.data.batch_size
    )
    data = replace(data, **{f"num_{ev.split}": ev.eval.examples})
    if getattr(data, "train_min_len", None) is not None:  # a training range; this scores one length
        data = replace(data, train_min_len=None)
    if setting.depth is not None:
        data = replace(data, passkey_depth=setting.depth)
    datamodule = build_datamodule(
        data, needs=run.task.inner().data_needs, seed=run.seed, model_cfg=task.model.cfg
    )
    datamodule.setup(ev.split)
    tok = datamodule.tokenizer
    specials = {"pad": tok.pad_id or 0, "bos": tok.bos_id, "eos": tok.eos_id}
    loader = datamodule.test_dataloader() if ev.split == "test" else datamodule.val_dataloader()
    totals = AnswerTotals()
    for batch in loader:
        add_batch(totals, task.model, batch, specials)
    return totals.means()


def evaluate_lengths(ev: EvalConfig, run: RunConfig, evaluated: RunConfig, out_dir: Path) -> dict[str, float]:
    """Score every setting; write ``metrics.json`` (rows and flat metrics), log and print them."""
    rope = isinstance(run.model.pos, RopePos)
    rows = []
    for setting in sweep_settings(ev, run.data.seq_len, rope):
        rows.append({**asdict(setting), **score_setting(ev, run, evaluated, setting)})
    metrics = {
        f"{ev.split}/{name}/{Setting(**{k: row[k] for k in ('length', 'depth', 'rope_scaling', 'rope_factor')}).key()}": row[
            name
        ]
        for row in rows
        for name in ("exact_match", "answer_loss")
    }
    record = {
        "ckpt_path": str(Path(ev.ckpt_path).resolve()),
        "split": ev.split,
        "overrides": {},
        "metrics": metrics,
        "trained_length": run.data.seq_len,
        "data_kind": str(run.data.kind),
        "pos": str(run.model.pos.name),
        "seed": run.seed,
        "lengths": rows,
    }
    write_atomically(out_dir / EVAL_METRICS_FILE, json.dumps(record, indent=1) + "\n")  # whole or none
    log_metrics(ev, metrics, out_dir)
    table = length_table(rows)
    log_to_file(logging.INFO, "%s", table)
    print(table + f"\noutput: {out_dir}", flush=True)
    return metrics


def log_metrics(ev: EvalConfig, metrics: dict[str, float], out_dir: Path) -> None:
    """The flat metrics to the chosen loggers (none by default: metrics.json holds them)."""
    from attnlab.training.loggers import build_loggers, finish_wandb, new_wandb_id

    name = f"eval-{Path(ev.ckpt_path).resolve().parent.parent.name}"
    loggers = build_loggers(
        ev.logger, out_dir, name=name, group="eval", wandb_id=new_wandb_id(), config=plain(ev)
    )
    for logger in loggers:
        logger.log_metrics(metrics, step=0)
        logger.finalize("success")
    finish_wandb(failed=False)


def length_table(rows: list[dict[str, Any]]) -> str:
    """Exact match (and answer loss) per length and depth (rows) and RoPE scaling (columns)."""
    scalings = list(dict.fromkeys(row["rope_scaling"] for row in rows))
    places = list(dict.fromkeys((row["length"], row["depth"]) for row in rows))
    cell = {(r["length"], r["depth"], r["rope_scaling"]): r for r in rows}
    head = ["length", "depth", *(f"{s} exact / loss" for s in scalings)]
    lines = [head]
    for length, depth in places:
        scores = [cell[(length, depth, s)] for s in scalings]
        lines.append(
            [str(length), "-" if depth is None else f"{depth:g}"]
            + [f"{r['exact_match']:.3f} / {r['answer_loss']:.3f}" for r in scores]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(text.rjust(w) for text, w in zip(line, widths)) for line in lines)
