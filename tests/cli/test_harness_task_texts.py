"""A harness task whose text holds characters the model's tokenizer lacks (a character model knows its
corpus's characters only): one line naming the setting, the task, the document (its index and first
characters) and the characters, exit 2, before any folder exists, for ``attnlab-eval harness.tasks=``
and ``attnlab-train callbacks=harness`` alike. It ended in exit 1 after a dozen lm-eval log lines, in a
folder made for the run, with the tokenizer's words alone. In this process."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_command_signal_phases import COMMON, RUNS
from train_cli import command_here, shared_tiny_checkpoints

pytest.importorskip("lm_eval")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
import test_harness

pytestmark = pytest.mark.slow  # one tiny training run (shared), then the commands in this process

FOREIGN = "Café ☕ time"  # é and ☕ are not in the default corpus


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny tasks, the choice task's second document with characters the corpus lacks."""
    monkeypatch.setattr(
        test_harness,
        "CHOICES",
        [
            {"question": "First Citizen", "choices": [":", " is"], "label": 0},
            {"question": FOREIGN, "choices": [":", " is"], "label": 0},
        ],
    )
    monkeypatch.setattr(test_harness, "PROMPTS", [{"prompt": "First ", "answer": "Citizen"}])
    folder = tmp_path / "tasks"
    folder.mkdir()
    test_harness.write_tasks(folder)
    return folder


def refusal(key: str, tasks: str) -> str:
    return (
        f"error: {key}={tasks}: task attnlab_tiny_choice, document 1 ({FOREIGN!r}): the text has 2 "
        "character(s) the tokenizer cannot encode: 'é', '☕' (its "
    )


def test_eval_names_the_task_document_and_characters_before_its_folder(
    built_once: Callable[..., Path],
    tasks: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    checkpoint = shared_tiny_checkpoints(built_once, "command_signal_phases", RUNS, COMMON)("gpt")
    out = tmp_path / "ev"
    args = [
        f"ckpt_path={checkpoint}",
        "harness.tasks=[attnlab_tiny_gen,attnlab_tiny_choice]",
        f"harness.include_path={tasks}",
        f"hydra.run.dir={out}",
    ]
    result = command_here(args, tmp_path, monkeypatch, capsys, "eval")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        refusal("harness.tasks", "[attnlab_tiny_gen,attnlab_tiny_choice]")
    ), result.stderr
    assert lines[0].endswith("come from the training data, and it has no unknown token)")
    assert not out.exists()


def test_train_with_the_harness_callback_names_them_before_the_run_directory(
    tasks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        *RUNS["gpt"],
        *COMMON,
        "callbacks=harness",
        "callbacks.harness.tasks=[attnlab_tiny_choice]",
        f"callbacks.harness.include_path={tasks}",
        "callbacks.harness.every_n_steps=1",
        "run_dir=run",
    ]
    result = command_here(args, tmp_path, monkeypatch, capsys, "train")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        refusal("callbacks.harness.tasks", "[attnlab_tiny_choice]")
    ), result.stderr
    assert not (tmp_path / "run").exists()


def test_a_multirun_with_the_harness_callback_names_them_before_the_sweep_directory(
    tasks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A multirun's jobs build their data when they start, in the sweep's folder: the texts are
    checked against each job's tokenizer before that folder exists, as a single run's are: the texts
    every job shares, and those of one job whose corpus (so its character vocabulary) lacks them."""
    from attnlab.data.text import default_corpus

    harness = ["callbacks=harness", "callbacks.harness.tasks=[attnlab_tiny_choice]"]
    harness.append(f"callbacks.harness.include_path={tasks}")
    common = [*RUNS["gpt"], *COMMON, *harness, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    every_job = command_here(["-m", "seed=1,2", *common], tmp_path, monkeypatch, capsys, "train")

    (tmp_path / "with.txt").write_text(default_corpus()[:20_000] + f"\n{FOREIGN}\n")
    (tmp_path / "without.txt").write_text(default_corpus()[:20_000])
    swept = ["-m", "data.path=with.txt", "data.path=with.txt,without.txt", *common]
    one_job = command_here(swept, tmp_path, monkeypatch, capsys, "train")

    line = refusal("callbacks.harness.tasks", "[attnlab_tiny_choice]").removeprefix("error: ")
    for result, job in ((every_job, ""), (one_job, "job 1 (data.path=without.txt): ")):
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines()[0].startswith(f"error: {job}{line}"), result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
    assert not (tmp_path / "sweep").exists()


def test_a_request_the_tokenizer_cannot_encode_is_named_at_scoring_too(tasks: Path) -> None:
    """The scoring's own check (the harness LM refuses before its first forward): for a run whose texts
    change after its start, or a caller of ``attnlab.harness.evaluate``."""

    from attnlab.data.tokenizers import char_tokenizer
    from attnlab.harness import TaskRefused, evaluate
    from attnlab.models import build_model
    from attnlab.schema.model import GPTConfig

    tokenizer = char_tokenizer(["First Citizen: is\n"])  # all of document 0, not é or ☕ of document 1
    cfg = GPTConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2, max_seq_len=32)
    model = build_model(cfg).eval()
    forwards = []
    model.register_forward_hook(lambda *args: forwards.append(1))
    with pytest.raises(TaskRefused) as refused:
        evaluate(model, tokenizer, ["attnlab_tiny_choice"], str(tasks))
    assert str(refused.value).startswith(f"task attnlab_tiny_choice, document 1 ({FOREIGN!r}): the text has ")
    assert forwards == []  # refused before the first document was scored
