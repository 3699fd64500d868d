"""attnlab-train callbacks=harness: lm-evaluation-harness tasks scored every N steps during training,
their numbers in metrics.jsonl and the run's logger (csv) at those steps only, equal to scoring the run's
last checkpoint directly; the model goes back to training mode, and the random generators to their
state, after each scoring."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from train_cli import csv_series, train_in_process

pytest.importorskip("lm_eval")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
import test_harness

pytestmark = pytest.mark.slow  # trains a tiny run and scores the tasks twice

KEYS = ("harness/attnlab_tiny_choice/acc", "harness/attnlab_tiny_gen/exact_match")


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny tasks in words of the default corpus (a char model knows only its characters)."""
    monkeypatch.setattr(
        test_harness,
        "CHOICES",
        [
            {"question": "First Citizen", "choices": [":", " is"], "label": 0},
            {"question": "Before we", "choices": [" proceed", " stop"], "label": 0},
        ],
    )
    monkeypatch.setattr(test_harness, "PROMPTS", [{"prompt": "First ", "answer": "Citizen"}])
    folder = tmp_path / "tasks"
    folder.mkdir()
    test_harness.write_tasks(folder)
    return folder


def test_the_harness_callback_logs_its_scores_every_n_steps(tasks: Path, tmp_path: Path) -> None:
    from attnlab.checkpoint import load_checkpoint
    from attnlab.harness import evaluate, flat_metrics

    run_dir = tmp_path / "run"
    ckpt = train_in_process(
        [
            "model=gpt-tiny",
            "data.seq_len=16",
            "data.batch_size=4",
            "trainer.max_steps=4",
            "trainer.val_every_n_steps=4",
            "trainer.limit_val_batches=1",
            "trainer.enable_progress_bar=false",
            "test_after_fit=false",
            "sample.max_new_tokens=0",
            "logger=csv",
            "callbacks=harness",
            "callbacks.harness.tasks=[attnlab_tiny_choice,attnlab_tiny_gen]",
            f"callbacks.harness.include_path={tasks}",
            "callbacks.harness.every_n_steps=2",
        ],
        run_dir,
    )
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    scored = {line["step"]: {k: line[k] for k in KEYS} for line in lines if KEYS[0] in line}
    assert sorted(scored) == [2, 4]
    assert all(KEYS[1] in line for line in lines if KEYS[0] in line)
    assert {key: csv_series(run_dir, key) for key in KEYS} == {  # the training logger's, too
        key: {step: values[key] for step, values in scored.items()} for key in KEYS
    }

    loaded = load_checkpoint(ckpt)
    direct = flat_metrics(
        evaluate(loaded.model, loaded.tokenizer, [k.split("/")[1] for k in KEYS], str(tasks))
    )
    assert scored[4] == {k: direct[k] for k in KEYS}


def test_scoring_leaves_the_model_training_and_the_random_state_as_it_was(tmp_path: Path) -> None:
    import torch

    from attnlab.harness import evaluate, flat_metrics
    from attnlab.training.callbacks.harness import HarnessEvaluation

    test_harness.write_tasks(tmp_path)
    model, tokenizer = test_harness.tiny_model()
    module = torch.nn.Module()
    module.model, module.tokenizer = model.train(), tokenizer
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    metrics = HarnessEvaluation(["attnlab_tiny_choice"], str(tmp_path), every_n_steps=1).score(module)
    assert torch.equal(torch.rand(3), expected)  # the harness's seeding does not reach the run
    assert model.training
    assert metrics == flat_metrics(evaluate(model, tokenizer, ["attnlab_tiny_choice"], str(tmp_path)))
