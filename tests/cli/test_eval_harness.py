"""attnlab-eval harness.tasks=[...]: a trained decoder scored by lm-evaluation-harness on tasks given
as local YAML files, its numbers in metrics.json and in the logger (wandb, offline) equal to the
harness library's on the same model; a checkpoint that is not a decoder, and a task name no task
defines, are one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from train_cli import cli, command_here, run_command, tiny_checkpoints, wandb_history

pytest.importorskip("lm_eval")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
import test_harness

pytestmark = pytest.mark.slow  # trains two tiny runs (seconds each)

RUNS = {
    "gpt": ["model=gpt-tiny", "data.seq_len=16", "data.batch_size=4"],
    "bert": ["model=bert-tiny", "data.num_train=32", "data.num_val=8", "data.num_test=8", "data.seq_len=32"],
    "seq2seq": ["model=seq2seq-tiny", "data.num_train=32", "data.num_val=8", "data.num_test=8"],
}
COMMON = ["trainer.max_steps=2", "logger=none", "trainer.enable_progress_bar=false", "test_after_fit=false"]
COMMON += ["sample.max_new_tokens=0", "trainer.val_every_n_steps=2", "trainer.limit_val_batches=1"]
TASKS = "harness.tasks=[attnlab_tiny_choice,attnlab_tiny_gen]"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory):
    return tiny_checkpoints(tmp_path_factory, RUNS, COMMON)


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny tasks in words of the default corpus (a char model knows only its characters)."""
    monkeypatch.setattr(
        test_harness, "CHOICES", [{"question": "First Citizen", "choices": [":", " is"], "label": 0}]
    )
    monkeypatch.setattr(test_harness, "PROMPTS", [{"prompt": "First ", "answer": "Citizen"}])
    test_harness.write_tasks(tmp_path)
    return tmp_path


def test_eval_scores_harness_tasks_into_metrics_json(checkpoint, tasks: Path, tmp_path: Path) -> None:
    from attnlab.checkpoint import load_checkpoint
    from attnlab.cli.eval import main
    from attnlab.harness import evaluate

    out = tmp_path / "eval"
    args = [f"ckpt_path={checkpoint('gpt')}", TASKS, f"harness.include_path={tasks}", f"hydra.run.dir={out}"]
    with pytest.MonkeyPatch.context() as patch:
        assert run_command(main, [*args, "trainer.enable_progress_bar=false"], patch) == 0
    record = json.loads((out / "metrics.json").read_text())
    loaded = load_checkpoint(checkpoint("gpt"))
    direct = evaluate(loaded.model, loaded.tokenizer, ["attnlab_tiny_choice", "attnlab_tiny_gen"], str(tasks))
    assert record["metrics"] == {
        "harness/attnlab_tiny_choice/acc": direct["results"]["attnlab_tiny_choice"]["acc,none"],
        "harness/attnlab_tiny_gen/exact_match": direct["results"]["attnlab_tiny_gen"]["exact_match,none"],
    }


def test_a_checkpoint_that_is_not_a_decoder_is_one_line(
    checkpoint, tasks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnlab.cli.eval import main

    args = [
        f"ckpt_path={checkpoint('bert')}",
        TASKS,
        f"harness.include_path={tasks}",
        f"hydra.run.dir={tmp_path / 'e'}",
    ]
    with pytest.MonkeyPatch.context() as patch:
        code = run_command(main, args, patch, capsys)
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, err) == (
        2,
        [
            "error: harness.tasks=[attnlab_tiny_choice,attnlab_tiny_gen]: lm-evaluation-harness scores "
            "decoder-only and encoder-decoder checkpoints; this one is bert"
        ],
    )
    assert not (tmp_path / "e").exists()  # refused before the evaluation's folder


def test_a_perplexity_task_on_an_encoder_decoder_is_one_line(
    checkpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An encoder-decoder's checkpoint is scored by the harness, but a task of whole texts
    (loglikelihood_rolling) has no source: refused before scoring, exit 2, no folder."""
    from attnlab.cli.eval import main

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "texts.jsonl").write_text(json.dumps({"text": "First Citizen"}) + "\n")
    task = {
        "task": "attnlab_tiny_ppl",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": str(tasks / "texts.jsonl")},
        "test_split": "train",
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{text}}",
        "metric_list": [{"metric": "word_perplexity"}],
    }
    (tasks / "ppl.yaml").write_text(json.dumps(task))
    out = tmp_path / "e"
    args = [
        f"ckpt_path={checkpoint('seq2seq')}",
        "harness.tasks=[attnlab_tiny_ppl]",
        f"harness.include_path={tasks}",
        f"hydra.run.dir={out}",
    ]
    with pytest.MonkeyPatch.context() as patch:
        code = run_command(main, args, patch, capsys)
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "examples/s" not in line]
    assert code == 2, (out / "eval.log").read_text() if (out / "eval.log").exists() else err
    assert (code, err) == (
        2,
        [
            "error: harness.tasks=[attnlab_tiny_ppl]: task attnlab_tiny_ppl asks for loglikelihood_rolling: an "
            "encoder-decoder scores a target given a source; a text scored whole (loglikelihood_rolling: "
            "perplexity tasks such as wikitext) has no source: score it with a decoder-only model"
        ],
    )
    assert not out.exists()


@pytest.mark.process_contract("interpreter")
def test_harness_scores_reach_the_logger(checkpoint, tasks: Path, tmp_path: Path) -> None:
    """logger=wandb (offline): the run's history holds metrics.json's numbers, read back from its file
    (a process of its own: wandb's service writes the offline log out when the process ends)."""
    out = tmp_path / "eval"
    args = [f"ckpt_path={checkpoint('gpt')}", TASKS, f"harness.include_path={tasks}", f"hydra.run.dir={out}"]
    result = cli([*args, "logger=wandb", "trainer.enable_progress_bar=false"], tmp_path, command="eval")
    assert result.returncode == 0, result.stderr
    record = json.loads((out / "metrics.json").read_text())
    assert len(record["metrics"]) == 2
    assert {key: wandb_history(out, key) for key in record["metrics"]} == {
        key: {0: value} for key, value in record["metrics"].items()
    }


def test_a_task_name_no_task_defines_is_one_line_before_any_folder(
    checkpoint, tasks: Path, tmp_path: Path
) -> None:
    """Refused before the evaluation's folder and the model: exit 2, one line naming the name, the
    tasks the include_path folder holds and how to give a task of one's own."""
    out = tmp_path / "e"
    args = [
        f"ckpt_path={checkpoint('gpt')}",
        "harness.tasks=[attnlab_tiny_choice,no_such_task]",
        f"harness.include_path={tasks}",
        f"hydra.run.dir={out}",
    ]
    result = command_here(args, tmp_path, command="eval")
    assert (result.returncode, result.stderr.strip().splitlines()) == (
        2,
        [
            "error: harness.tasks=[attnlab_tiny_choice,no_such_task]: no such task: no_such_task; "
            f"harness.include_path={tasks} holds attnlab_tiny_choice, attnlab_tiny_gen; or one of the "
            "harness's own tasks (lm-eval ls tasks lists them); a task of your own is a YAML file in the "
            "folder harness.include_path names, or the path of that file"
        ],
    )
    assert not out.exists()
    assert not (checkpoint("gpt").parent.parent / "eval").exists()  # nor one in the run's directory
