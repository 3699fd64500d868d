"""``attnlab-eval`` under other conditions than training's: ``data.*`` overrides on top of the
checkpoint's data config (typed, checked against the model before anything starts), swept with -m,
and recorded in ``metrics.json``. The runs evaluated are trained in this process; the evaluations run
attnlab-eval's ``main`` in this process too, except the cases that check through the real command
line that a bad value exits with status 2 and one line (alone and in a sweep)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from train_cli import TEXT, TINY, command_here, run_command, train_in_process

pytestmark = pytest.mark.slow
# Learned positions for 64 tokens, trained on windows of 32.
GPT = [*TINY, *TEXT, "model=gpt-tiny", "model.max_seq_len=64", "sample.max_new_tokens=0", "logger=csv"]
EVAL = ["logger=csv", "trainer.enable_progress_bar=false", "split=val", "limit_batches=2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("eval_overrides") / "run"
    train_in_process(GPT, run_dir)
    return run_dir


def evaluations(run: Path) -> set[Path]:
    return set((run / "eval").glob("*")) if (run / "eval").exists() else set()


def evaluate(run: Path, *args: str, multirun: bool = False):
    """attnlab-eval of the run's last checkpoint with ``args``, in a subprocess; the evaluations it added."""
    before = evaluations(run)
    flags = ["-m"] if multirun else []
    ckpt = f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"
    result = command_here([*flags, ckpt, *EVAL, *args], run.parent, command="eval")
    return result, sorted(evaluations(run) - before)


@pytest.fixture
def evaluate_here(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """``evaluate_here(run, *args, multirun=False)``: as ``evaluate``, attnlab-eval's ``main`` run in
    this process (from the run's parent folder); its exit status, its standard error and the
    evaluations it added."""
    from attnlab.cli.eval import main

    def evaluate_in_process(run: Path, *args: str, multirun: bool = False) -> tuple[int, str, list[Path]]:
        before = evaluations(run)
        monkeypatch.chdir(run.parent)
        flags = ["-m"] if multirun else []
        ckpt = f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}"
        status = run_command(main, [*flags, ckpt, *EVAL, *args], monkeypatch, capsys)
        err = capsys.readouterr().err
        return status, err, sorted(evaluations(run) - before)

    return evaluate_in_process


def record(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def test_a_data_override_applies_on_top_of_the_checkpoint_data(run: Path, evaluate_here) -> None:
    """``data.seq_len=16`` measures windows of 16 with the run's corpus and tokenizer; metrics.json
    records the override, config.yaml the data evaluated; the run's own length records none."""
    status, err, own = evaluate_here(run, "data.seq_len=32")
    assert status == 0, err
    status, err, short = evaluate_here(run, "data.seq_len=16")
    assert status == 0, err
    (own,), (short,) = own, short
    assert record(own)["overrides"] == {}
    assert record(short)["overrides"] == {"data.seq_len": 16}
    assert record(short)["metrics"]["val/loss"] != pytest.approx(record(own)["metrics"]["val/loss"])
    trained = yaml.safe_load((run / "config.yaml").read_text())["data"]
    evaluated = yaml.safe_load((short / "config.yaml").read_text())["data"]
    assert evaluated == {**trained, "seq_len": 16, "tokenizer": evaluated["tokenizer"]}


def test_a_length_beyond_the_learned_positions_is_one_line_before_any_directory(run: Path) -> None:
    result, added = evaluate(run, "data.seq_len=128")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: data.seq_len=128: must be at most model.max_seq_len=64 with pos=learned"
    ]
    assert added == []


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.seq_lenx=16", "error: data.seq_lenx=16: not a known key; did you mean data.seq_len?"),
        (
            "data.tokenizer=gpt2",
            "error: data.tokenizer=gpt2: the tokenizer is the checkpoint's own and cannot be changed",
        ),
        *(  # eval runs in one process on one device: the trainer keys it would ignore are not its keys
            (
                f"trainer.{key}",
                f"error: trainer.{key}: not a known key; allowed keys: _target_, accelerator, devices, precision, "
                "enable_progress_bar",
            )
            for key in ("strategy=ddp", "num_nodes=2", "max_steps=5")
        ),
        (
            "trainer._target_=nonexistent.Trainer",
            "error: trainer._target_=nonexistent.Trainer: the import path of a Trainer subclass "
            "(package.module.Class); not importable (ModuleNotFoundError)",
        ),
        (
            "trainer.devices=2",
            "error: trainer.devices=2: attnlab-eval runs in one process on one device: 1, or [<id>] for a "
            "given GPU",
        ),
        (
            "trainer=ddp_sim",
            "error: trainer=ddp_sim: attnlab-eval runs in one process on one device: choose one of cpu, gpu",
        ),
        pytest.param(
            "trainer=gpu",
            "error: trainer.accelerator=gpu: this machine has no GPU; use trainer=cpu",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU"),
        ),
    ],
)
def test_a_bad_override_is_one_line_before_any_directory(
    run: Path, evaluate_here, override: str, message: str
) -> None:
    status, err, added = evaluate_here(run, override)
    assert status == 2
    assert err.strip().splitlines() == [message]
    assert added == []


def test_a_sweep_of_lengths_evaluates_each(run: Path, evaluate_here) -> None:
    status, err, added = evaluate_here(run, "data.seq_len=16,48", multirun=True)
    assert status == 0, err
    (sweep,) = added
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [record(j)["overrides"] for j in jobs] == [{"data.seq_len": 16}, {"data.seq_len": 48}]
    assert [j.name for j in jobs] == ["0_data.seq_len-16", "1_data.seq_len-48"]  # named as training's jobs


def test_a_bad_length_in_a_sweep_stops_it_before_the_first_job(run: Path) -> None:
    result, added = evaluate(run, "data.seq_len=16,128", multirun=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: job 1 (data.seq_len=128): data.seq_len=128: must be at most model.max_seq_len=64 with pos=learned"
    ]
    assert added == []


def test_a_bad_choice_in_a_sweep_is_one_line_naming_it_and_writes_nothing(run: Path) -> None:
    """Composed with each job's own value, not shown as the sweep (``split=ChoiceSweep(...)``), and
    refused before the sweep's folder and its multirun.yaml are written."""
    before = set(run.parent.rglob("multirun.yaml"))  # of the sweeps of other tests
    result, added = evaluate(run, "split=val,bogus", multirun=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: job 1 (split=bogus): split=bogus: choose one of test, val"
    ]
    assert added == [] and set(run.parent.rglob("multirun.yaml")) == before


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "model.n_heads=2",
            "error: model.n_heads=2: the trained weights depend on it; evaluation may change only model.pos.rope_*, "
            "model.attn_backend and model.attn_window",
        ),
        ("model=gpt", "error: model=gpt: the model is the checkpoint's own"),
        (
            "model.pos.rope_base=5",
            "error: model.pos.rope_base=5: not a key of model.pos.name=learned; it is a key of "
            "model.pos.name=rope (choose it with pos=rope)",
        ),
    ],
)
def test_a_model_override_that_the_weights_depend_on_is_one_line(
    run: Path, evaluate_here, override: str, message: str
) -> None:
    """Only the checkpoint's model keys that hold no weights may change, typed by its own classes."""
    status, err, added = evaluate_here(run, override)
    assert status == 2
    assert err.strip().splitlines() == [message]
    assert added == []


def test_rope_settings_change_the_model_evaluated(tmp_path: Path, evaluate_here) -> None:
    """RoPE's settings hold no weights: the checkpoint's model is rebuilt with them (its base; YaRN
    scaling past the trained length), the loss moves, and metrics.json and config.yaml record them."""
    train_in_process([*GPT, "pos=rope"], tmp_path / "run")
    results = [
        evaluate_here(tmp_path / "run", *args)
        for args in [
            (),
            ("model.pos.rope_base=5",),
            ("model.pos.rope_scaling=yarn", "model.pos.rope_factor=4"),
        ]
    ]
    for status, err, _ in results:
        assert status == 0, err
    own, based, yarn = (record(out) for _, _, (out,) in results)
    assert own["overrides"] == {}
    assert based["overrides"] == {"model.pos.rope_base": 5.0}
    assert yarn["overrides"] == {"model.pos.rope_scaling": "yarn", "model.pos.rope_factor": 4.0}
    assert based["metrics"]["val/loss"] != own["metrics"]["val/loss"]
    assert yarn["metrics"]["val/loss"] != own["metrics"]["val/loss"]
    (based_dir,) = results[1][2]
    pos = yaml.safe_load((based_dir / "config.yaml").read_text())["model"]["pos"]
    assert (pos["name"], pos["rope_base"]) == ("rope", 5.0)


def test_two_evaluations_in_one_folder_get_a_folder_each(run: Path, evaluate_here) -> None:
    """Two evaluations started in the same second with the same overrides are named alike: the second
    gets ``<name>_2`` (here both name their folder with hydra.run.dir), and neither overwrites the other."""
    folder = run / "eval" / "same"
    for _ in range(2):
        status, err, _ = evaluate_here(run, f"hydra.run.dir={folder}")
        assert status == 0, err
    assert record(folder)["ckpt_path"] == record(folder.with_name("same_2"))["ckpt_path"]
