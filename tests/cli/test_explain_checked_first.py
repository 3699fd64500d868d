"""attnlab-explain checks its input against the checkpoint before Hydra makes ``out_dir``: a corrupted
input of another length than ``input`` (patching copies activations position by position) is one line
naming ``corrupted`` and both shapes, exit 2, and no folder, not even the parents ``out_dir`` names.
The checkpoint is loaded once: the job writes what the check prepared. In this process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from test_command_signal_phases import COMMON, RUNS
from train_cli import command_here, shared_tiny_checkpoints

pytestmark = pytest.mark.slow  # one tiny training run (shared), then attnlab-explain in this process


@pytest.fixture(scope="module")
def checkpoint(built_once: Callable[..., Path]) -> Path:
    return shared_tiny_checkpoints(built_once, "command_signal_phases", RUNS, COMMON)("gpt")


def explain_args(checkpoint: Path, out_dir: Path, corrupted: str) -> list[str]:
    return [
        f"ckpt_path={checkpoint}",
        "input=To be",
        f"corrupted={corrupted}",
        "answer=e",
        "wrong=o",
        "head_importance=false",
        f"out_dir={out_dir}",
    ]


def test_a_corrupted_input_of_another_length_is_one_line_before_any_folder(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "explained" / "to-be"
    args = explain_args(checkpoint, out_dir, "To go on")
    result = command_here(args, tmp_path, monkeypatch, capsys, "explain")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: corrupted=To go on: its input_ids have shape (1, 8), the input's (1, 5): patching needs a "
        "corrupted input of the same length (as many tokens) as input"
    ]
    assert sorted(tmp_path.iterdir()) == []


def test_the_checkpoint_is_loaded_once_and_the_explanation_written(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import attnlab.checkpoint

    loads: list[str] = []
    original = attnlab.checkpoint.load_checkpoint

    def counted(path: str, *args: object, **kwargs: object) -> object:
        loads.append(str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(attnlab.checkpoint, "load_checkpoint", counted)
    out_dir = tmp_path / "explained"
    result = command_here(
        explain_args(checkpoint, out_dir, "To bo"), tmp_path, monkeypatch, capsys, "explain"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(str(out_dir / "index.html"))
    assert (out_dir / "patching_resid.png").is_file()
    assert loads == [str(checkpoint)]
