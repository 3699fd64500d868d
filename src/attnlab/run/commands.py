"""Each command's work as a typed function: what its Hydra job does, in this process, given a typed
config (``attnlab.run.configs`` composes them) and the directory to write."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab.run.configs import compose
from attnlab.schema.commands import CompressCommand, ExplainCommand, ExportCommand, SampleCommand
from attnlab.schema.run import RunConfig
from attnlab.schema.rundir import TEST_METRICS_FILE, checkpoint_dir

if TYPE_CHECKING:
    from attnlab.report import Report


@dataclass(frozen=True)
class RunResult:
    """What a training run reached, as its run directory records it."""

    run_dir: Path
    best: float  # the best value of task.monitor (NaN where the run never validated)
    test_metrics: dict[str, float] = field(default_factory=dict)  # test_metrics.json's, where it tested
    checkpoint: Path | None = None  # checkpoints/last.ckpt, where one was written


def train(run: RunConfig, run_dir: Path) -> RunResult:
    """Train the validated ``run`` (``run_config``) into ``run_dir``: checked against this machine and
    the directory (its checkpoint to resume from, its data against the model), fitted, tested and
    sampled as ``attnlab-train`` does, with its ``summary.json``; ConfigError before anything is
    written where a check fails."""
    from attnlab.run.fit import run_summary
    from attnlab.run.fit import train as fit
    from attnlab.run.prepared import check_machine, prepare_run

    check_machine(run)
    prepared = prepare_run(run, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_summary(run_dir) as summary:  # summary.json, as attnlab-train writes it
        best = fit(prepared, run_dir, summary=summary)
    test_file = run_dir / TEST_METRICS_FILE
    metrics = json.loads(test_file.read_text(encoding="utf-8"))["metrics"] if test_file.is_file() else {}
    last = checkpoint_dir(run_dir) / "last.ckpt"
    return RunResult(run_dir, best, metrics, last if last.exists() else None)


def evaluate(ckpt_path: str | Path, out_dir: Path, overrides: Sequence[str] = ()) -> dict[str, float]:
    """Evaluate the checkpoint as ``attnlab-eval ckpt_path=<ckpt_path> <overrides>`` does (a split,
    harness tasks or synthetic lengths), writing into ``out_dir``; its metrics."""
    from attnlab.run.evaluation import evaluation, typed_eval_config

    args = [f"ckpt_path={ckpt_path}", *overrides]
    ev, run, evaluated = typed_eval_config(compose("eval", args), args)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics, _ = evaluation(ev, run, evaluated, out_dir)
    return metrics


def sample(cmd: SampleCommand, model_changes: dict[str, Any] | None = None) -> str:
    """The checkpoint's predictions for ``cmd``'s prompt or image, as ``attnlab-sample`` prints them;
    ``model_changes`` (dotted ``model.*`` keys that hold no weights) change the model first."""
    from attnlab.run.sampling import sample_checkpoint

    return sample_checkpoint(cmd, model_changes)


def explain(cmd: ExplainCommand, out_dir: Path) -> Path:
    """Write ``cmd``'s explanation of its checkpoint into ``out_dir``; the page to open."""
    from attnlab.run.explaining import explain_checkpoint, prepare_explanation

    prepared = prepare_explanation(cmd)  # bad input: a ConfigError before out_dir exists
    out_dir.mkdir(parents=True, exist_ok=True)
    return Path(explain_checkpoint(prepared, out_dir))


def compress(cmd: CompressCommand) -> Path:
    """Write ``cmd.ckpt_path`` compressed by ``cmd.method`` (to ``cmd.out``, or beside it); the file."""
    from attnlab.run.compressing import compress_checkpoint, output_path

    out = output_path(cmd)
    compress_checkpoint(cmd, out)
    return out


def export(cmd: ExportCommand) -> Path:
    """Write the checkpoint's model and tokenizer as a Hugging Face folder ``cmd.out``; the folder."""
    from attnlab.run.exporting import check_paths, export_checkpoint

    out = check_paths(cmd)
    export_checkpoint(Path(cmd.ckpt_path), out)
    return out


def report(paths: Sequence[str | Path], out_dir: Path, metric: str | None = None) -> Report:
    """The report of the run directories at or under ``paths`` (their best ``metric``, default each
    run's ``task.monitor``), written into ``out_dir`` with the length tables of any length sweep."""
    from attnlab.report import read_sweep, write_report  # pandas: only the report needs it
    from attnlab.report.lengths import write_length_report

    written = write_report(read_sweep(paths, metric=metric), out_dir)
    write_length_report(paths, out_dir)
    return written
