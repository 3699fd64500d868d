"""Run directories: where they are, and the files each one holds, read back as plain Python values.

A run directory (see ``docs/run-directory.md``) is the unit every attnlab tool reads:

    config.yaml            the resolved, validated config of the run
    .hydra/overrides.yaml  the job's command-line overrides (Hydra runs)
    summary.json           status, error line, parameters, wall time, throughput, best monitored value
    metrics.jsonl          one JSON object per logged step or evaluation: {"step", "time_s", "<metric>": ...}
    test_metrics.json      the test metrics of the best checkpoint at the end of training
    eval/**/metrics.json   evaluations made later from the run's checkpoints by attnlab-eval

Nothing here imports torch, Lightning or Hydra: a report is made from these files alone, offline.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from attnlab.schema.rundir import (
    CONFIG_FILE,
    EVAL_DIR,
    EVAL_METRICS_FILE,
    HYDRA_CONFIG_FILE,
    METRICS_FILE,
    OVERRIDES_FILE,
    SUMMARY_FILE,
    TEST_METRICS_FILE,
)

log = logging.getLogger("attnlab.report")
YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser is ~10x faster


class ReportError(Exception):
    """Bad input to the report; the message is one line that names the path and what is wrong."""


@dataclass
class RunFiles:
    """What one run directory holds (empty values for files it does not have)."""

    path: Path
    config: dict[str, Any]
    overrides: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    test_metrics: dict[str, float] = field(default_factory=dict)
    evals: list[dict[str, Any]] = field(default_factory=list)


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """The run directories (folders holding ``config.yaml`` or ``summary.json``) at or under ``paths``,
    each once, in natural order (job 2 before job 10). A path may be a glob. The folders inside a run
    (``eval/``, ``checkpoints/``) are not searched: an evaluation's own config.yaml is not a run."""
    found: dict[Path, None] = {}
    for path in paths:
        for root in _expand(str(path)):
            for run_dir in _walk(root):
                found[run_dir.resolve()] = None
    return sorted(found, key=natural_key)


def _expand(path: str) -> list[Path]:
    """The paths ``path`` names: itself, a run or sweep directory (a file given by name is refused:
    the report would be written beside it), or what it matches as a glob."""
    if Path(path).is_file():
        raise ReportError(f"{path}: a file: give a run or sweep directory, or a glob of them")
    if Path(path).exists():
        return [Path(path)]
    matches = sorted(glob.glob(path, recursive=True))
    if not matches:
        raise ReportError(f"{path}: no such file or directory")
    return [Path(m) for m in matches]


def _walk(root: Path) -> Iterable[Path]:
    if root.is_file():
        root = root.parent  # e.g. a glob over */config.yaml
    for dirpath, dirnames, filenames in os.walk(root):
        if CONFIG_FILE in filenames or SUMMARY_FILE in filenames:
            dirnames.clear()
            yield Path(dirpath)
        else:
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]


def natural_key(path: Path) -> list[tuple[int, int | str]]:
    """Sort key that orders numbered parts by number: ``sweep/2`` before ``sweep/10``."""
    parts = re.split(r"(\d+)", path.as_posix())
    return [(0, int(p)) if p.isdigit() else (1, p) for p in parts]


def read_run(path: Path) -> RunFiles | None:
    """The files of the run directory ``path``; None for a folder that is not a training run (an
    attnlab-eval output of the old layout, whose config has no ``model``). ReportError for a file
    that cannot be read; a garbled line of ``metrics.jsonl`` is skipped with a warning."""
    summary = read_json(path / SUMMARY_FILE) if (path / SUMMARY_FILE).is_file() else {}
    config = read_config(path)
    if "model" not in config and not summary:
        log.warning("%s: skipped: not a training run (its %s has no model section)", path, CONFIG_FILE)
        return None
    test = read_json(path / TEST_METRICS_FILE) if (path / TEST_METRICS_FILE).is_file() else {}
    return RunFiles(
        path=path,
        config=config,
        overrides=read_overrides(path / OVERRIDES_FILE),
        summary=summary,
        metrics=read_metrics(path / METRICS_FILE),
        test_metrics=dict(test.get("metrics") or {}),
        evals=read_evals(path / EVAL_DIR),
    )


def read_config(path: Path) -> dict[str, Any]:
    """``config.yaml``; for a job that failed before writing it, Hydra's composed ``.hydra/config.yaml``."""
    for name in (CONFIG_FILE, HYDRA_CONFIG_FILE):
        if (path / name).is_file():
            config = read_yaml(path / name)
            if not isinstance(config, dict):
                raise ReportError(
                    f"{path / name}: not a config (a YAML mapping); found {type(config).__name__}"
                )
            return config
    return {}


def read_overrides(path: Path) -> list[str]:
    if not path.is_file():
        return []
    overrides = read_yaml(path)
    return [str(o) for o in overrides] if isinstance(overrides, list) else []


def read_yaml(path: Path) -> Any:
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=YamlLoader)
    except OSError as err:
        raise ReportError(f"{path}: cannot be read ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not a text file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ReportError(f"{where}: not valid YAML ({getattr(err, 'problem', None) or err})") from None


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; ReportError naming the file if it is not one."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ReportError(f"{path}: cannot be read ({err.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise ReportError(f"{path}: not a JSON object; found {type(value).__name__}")
    return value


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl``. A line that is not a JSON object with a step (a run killed in
    the middle of writing it, a hand edit) is skipped with a warning naming ``file:line``."""
    if not path.is_file():
        return []
    records = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                log.warning("%s:%d: skipped: not a JSON object with an integer step", path, number)
                continue
            records.append(record)
    return records


def read_evals(eval_dir: Path) -> list[dict[str, Any]]:
    """The ``metrics.json`` of every evaluation under ``<run>/eval``, each with its folder (``name``)
    relative to ``eval/``, in natural order; one that is not JSON (empty, cut short) is skipped with a
    warning naming it."""
    if not eval_dir.is_dir():
        return []
    evals = []
    for path in sorted(eval_dir.rglob(EVAL_METRICS_FILE), key=natural_key):
        try:
            record = read_json(path)
        except ReportError as err:  # an evaluation killed while writing: the rest still reads
            log.warning("%s; skipped: a half-written evaluation? (run its attnlab-eval again)", err)
            continue
        metrics = record.get("metrics")
        if not isinstance(metrics, dict):
            raise ReportError(f"{path}: has no 'metrics' object: not written by attnlab-eval")
        evals.append(
            {
                "name": path.parent.relative_to(eval_dir).as_posix(),
                "ckpt_path": record.get("ckpt_path"),
                "split": record.get("split"),
                "overrides": dict(record.get("overrides") or {}),
                "metrics": metrics,
                "lengths": length_rows(record),
            }
        )
    return evals


def length_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of an ``eval.lengths`` sweep (one per length, depth and RoPE scaling), each with the
    task, positional encoding and seed of the run it scored; [] for any other evaluation."""
    run = {key: record.get(key) for key in ("data_kind", "pos", "seed", "trained_length")}
    return [{**run, **row} for row in record.get("lengths") or []]
