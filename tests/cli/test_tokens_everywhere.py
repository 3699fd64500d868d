"""Prepared token shards (``data=tokens``) read the same way by every command: a ``-m`` sweep's jobs read
the shards as a single run does; attnlab-eval scores a tokens run on its validation windows, at another
``data.seq_len`` too (``eval.lengths``, for synthetic tasks, is one line); attnlab-export's folder
loads in ``transformers`` with the prepared tokenizer, which encodes a document to the tokens of the
shards; the harness scores it; attnlab-sample continues a prompt. One prepared corpus and one run serve
all of them, each command in the test's own process. The same corpus serves the runs over two
processes: tensor parallel (both processes reading the same batch) is test_train_tp.py's GPT, each
data-parallel process reading its part of the windows test_train_ddp.py's (DDP; FSDP2 splits the
batch by the same sampler, ``AttnlabDataModule._ranks``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from test_train_fsdp2 import series
from test_train_tokens import prepared_corpus
from train_cli import check, command_here, job_dirs, run_command

from token_corpus import documents

pytestmark = pytest.mark.slow
STEPS = 4
ARGS = [
    "data=tokens",
    "data.seq_len=32",
    "model=gpt-tiny",
    "model.dropout=0.0",
    "logger=none",
    f"trainer.max_steps={STEPS}",
    f"trainer.val_every_n_steps={STEPS}",
    f"checkpoint.every_n_steps={STEPS}",
    "trainer.limit_val_batches=2",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "optim.lr=3e-3",  # large enough that 4 steps move the loss
    "optim.warmup_steps=2",
    "sample.max_new_tokens=0",
    "test_after_fit=false",
]


@pytest.fixture(scope="module")
def shards(built_once: Callable[..., Path]) -> Path:
    """One corpus prepared with attnlab-prepare (600 JSONL documents, a byte-level BPE of 320 ids)."""
    return built_once("tokens-everywhere-corpus", prepared_corpus) / "shards"


def trained(built_once: Callable[..., Path], name: str, shards: Path, *args: str) -> Path:
    """The run directory of ``attnlab-train ARGS args`` on ``shards``, trained in this process once per
    session."""
    run = [*ARGS, f"data.path={shards}", *args, "run_dir=run"]
    return built_once(f"tokens-everywhere-{name}", lambda cwd: check(command_here(run, cwd))) / "run"


@pytest.fixture(scope="module")
def single(built_once: Callable[..., Path], shards: Path) -> Path:
    """One process, 8 windows a step: the reference, and the run the other commands read."""
    return trained(built_once, "single", shards, "data.batch_size=8")


def test_a_sweep_reads_the_shards_as_a_single_run_does(shards: Path, single: Path, tmp_path: Path) -> None:
    """``-m optim.lr=3e-3,1e-3``: the job with the single run's settings logs its losses exactly."""
    sweep = ["-m", *ARGS, f"data.path={shards}", "data.batch_size=8", "optim.lr=3e-3,1e-3"]
    check(command_here(sweep, tmp_path))
    same, other = job_dirs(tmp_path)
    assert series(same, "train/loss") == series(single, "train/loss")
    assert sorted(series(other, "train/loss")) == list(range(1, STEPS + 1))
    assert series(other, "train/loss")[STEPS] != series(single, "train/loss")[STEPS]


def evaluate(ckpt: Path, out: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:
    """attnlab-eval of ``ckpt`` into ``out``: its exit status, metrics.json (or {}) and stderr."""
    from attnlab.cli.eval import main

    with pytest.MonkeyPatch.context() as patch:
        code = run_command(main, [f"ckpt_path={ckpt}", f"hydra.run.dir={out}", *args], patch, capsys)
    record = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").exists() else {}
    return code, record, capsys.readouterr().err


def test_eval_scores_the_validation_windows_and_at_another_length(
    single: Path, shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run validated on its first 16 fixed windows (2 batches of 8): attnlab-eval of those windows
    logs its number; ``data.seq_len=64`` scores the first 8 windows of 64 tokens of the validation shard;
    ``eval.lengths`` (a sweep of synthetic tasks) is one line."""
    from attnlab.checkpoint import load_checkpoint
    from attnlab.data.shards import token_folder

    ckpt = single / "checkpoints" / "last.ckpt"
    code, record, err = evaluate(ckpt, tmp_path / "val", capsys, "split=val", "data.val_windows=16")
    assert code == 0, err
    assert record["metrics"]["val/loss"] == pytest.approx(series(single, "val/loss")[STEPS], abs=1e-6)
    assert record["metrics"]["val/bpb"] == pytest.approx(series(single, "val/bpb")[STEPS], abs=1e-6)
    code, longer, err = evaluate(
        ckpt, tmp_path / "64", capsys, "split=val", "data.seq_len=64", "data.val_windows=8"
    )
    assert code == 0, err
    assert longer["overrides"] == {"data.seq_len": 64, "data.val_windows": 8}
    val = np.asarray(token_folder(shards).open("val")[0]).astype(np.int64)  # one validation shard
    windows = torch.from_numpy(np.stack([val[i * 64 : i * 64 + 65] for i in range(8)]))
    with torch.no_grad():
        logits = load_checkpoint(ckpt).model.eval()(windows[:, :-1])
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()).item()
    assert longer["metrics"]["val/loss"] == pytest.approx(expected, abs=1e-5)
    code, _, err = evaluate(ckpt, tmp_path / "lengths", capsys, "eval.lengths=[16,64]")
    assert (code, err.strip()) == (
        2,
        "error: eval.lengths=[16,64]: scores a synthetic task (copy, passkey, recall, addition); this gpt "
        "checkpoint reads data.kind=tokens",
    )
    assert not (tmp_path / "lengths").exists()


def test_export_loads_in_transformers_with_the_prepared_tokenizer(
    single: Path, shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The exported tokenizer is the manifest's tokenizer.json: it encodes the corpus's first document to
    the tokens the first training shard holds after its end-of-text token."""
    transformers = pytest.importorskip("transformers")
    from attnlab.checkpoint import load_checkpoint
    from attnlab.cli.export import main
    from attnlab.data.shards import token_folder

    ckpt, out = single / "checkpoints" / "last.ckpt", tmp_path / "hf"
    with pytest.MonkeyPatch.context() as patch:
        code = run_command(main, [f"ckpt_path={ckpt}", "format=hf", f"out={out}"], patch, capsys)
    assert code == 0, capsys.readouterr().err
    ours = load_checkpoint(ckpt).model.eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.randint(0, ours.cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (theirs(ids).logits - ours(ids)).abs().max().item() < 1e-5

    manifest = json.loads((shards / "manifest.json").read_text())
    first = documents(600)[0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    train = np.asarray(token_folder(shards).open("train")[0])
    assert train[0] == manifest["eot_id"]
    expected = train[1 : 1 + len(tokenizer(first)["input_ids"]) + 1].tolist()
    assert tokenizer(first)["input_ids"] + [manifest["eot_id"]] == expected
    assert tokenizer.decode(expected[:-1]) == first


def test_the_harness_scores_a_tokens_run(
    single: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``harness.tasks=[...]`` on tiny local tasks in the corpus's words: metrics.json holds the harness
    library's numbers for the checkpoint's model and its prepared tokenizer."""
    pytest.importorskip("lm_eval")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
    import test_harness

    from attnlab.checkpoint import load_checkpoint
    from attnlab.harness import evaluate as harness

    monkeypatch.setattr(
        test_harness, "CHOICES", [{"question": "the café", "choices": [" of", " naïve"], "label": 0}]
    )
    monkeypatch.setattr(test_harness, "PROMPTS", [{"prompt": "it was", "answer": " the"}])
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    test_harness.write_tasks(tasks)
    names = ["attnlab_tiny_choice", "attnlab_tiny_gen"]
    code, record, err = evaluate(
        single / "checkpoints" / "last.ckpt",
        tmp_path / "eval",
        capsys,
        f"harness.tasks=[{','.join(names)}]",
        f"harness.include_path={tasks}",
        "trainer.enable_progress_bar=false",
    )
    assert code == 0, err
    loaded = load_checkpoint(single / "checkpoints" / "last.ckpt")
    direct = harness(loaded.model, loaded.tokenizer, names, str(tasks))
    assert record["metrics"] == {
        "harness/attnlab_tiny_choice/acc": direct["results"]["attnlab_tiny_choice"]["acc,none"],
        "harness/attnlab_tiny_gen/exact_match": direct["results"]["attnlab_tiny_gen"]["exact_match,none"],
    }


def test_sample_continues_a_prompt_in_the_corpus_words(
    single: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnlab.cli.sample import main

    args = [f"ckpt_path={single / 'checkpoints' / 'last.ckpt'}", "prompts=[the of]", "max_new_tokens=8"]
    assert run_command(main, [*args, "seed=1", "num_samples=2"], monkeypatch, capsys) == 0
    out = capsys.readouterr().out
    assert out.startswith("--- prompt 0, sample 0 ---\nthe of") and out.count("--- prompt") == 2
    assert run_command(main, [*args, "seed=1", "num_samples=2"], monkeypatch, capsys) == 0
    assert capsys.readouterr().out == out  # the seed fixes the samples
