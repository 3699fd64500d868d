"""The files of a run directory: the contract between the writer (training) and its readers (the commands).

    <run_dir>/config.yaml              the validated, resolved config of the run
    <run_dir>/checkpoints/last.ckpt    the latest state (best-step*.ckpt: the best by task.monitor)
    <run_dir>/tokenizer.json           the tokenizer of a text run
    <run_dir>/labels.json              the class names, where the labels were strings
    <run_dir>/test_metrics.json        the best checkpoint's metrics on the test split

``attnlab-eval`` writes ``metrics.json`` into its own output directory.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"
LAST = "last.ckpt"
TOKENIZER_FILE = "tokenizer.json"
LABELS_FILE = "labels.json"
TEST_METRICS_FILE = "test_metrics.json"
EVAL_METRICS_FILE = "metrics.json"


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / CHECKPOINT_DIR


def run_dir_of(ckpt_path: str | Path) -> Path:
    """The run directory of a checkpoint that lies in its ``checkpoints/`` folder."""
    return Path(ckpt_path).resolve().parent.parent
