"""What a run prints (make train printed 240 lines, a 110-line config tree, Lightning's
info lines and a 33-line wandb summary): the run directory, the model summary, the progress, the
sample and where the results are; the config tree only with print_config=true (config.yaml has it);
no wandb lines but one naming its offline folder; attnlab-eval starts no wandb run unless asked.

The run whose console is read is a process (console output is the interpreter's: Lightning's and
wandb's loggers print to the streams they found at import); print_config and attnlab-eval run in this
process (``command_here``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from in_process import restored
from train_cli import TEXT, TINY, check, cli, command_here

pytestmark = pytest.mark.slow
ARGS = [*TINY, *TEXT, "model=gpt-tiny"]  # the default logger: wandb, offline


@pytest.fixture(scope="module")
def outputs(built_once: Callable[..., Path]) -> Path:
    """A wandb-logged run's console (a process), and what attnlab-eval printed on its checkpoint."""

    def quiet(cwd: Path) -> None:
        run = check(cli([*ARGS, "run_dir=run"], cwd))
        (cwd / "run.out").write_text(run.stdout)
        (cwd / "run.err").write_text(run.stderr)
        ckpt = cwd / "run" / "checkpoints" / "last.ckpt"
        with restored():
            evaluation = check(command_here([f"ckpt_path={ckpt}", "limit_batches=1"], cwd, command="eval"))
        (cwd / "eval.out").write_text(evaluation.stdout + evaluation.stderr)

    return built_once("quiet_output", quiet)


@pytest.mark.process_contract("console")
def test_a_run_prints_its_progress_and_results_without_the_config_lightning_or_wandb_chatter(
    outputs: Path,
) -> None:
    out = (outputs / "run.out").read_text()
    assert "run directory: " in out and "test/loss=" in out and "step 6/6 | loss " in out
    assert "model:" not in out and "family: gpt" not in out  # no config tree
    console = out + (outputs / "run.err").read_text()
    assert "GPU available" not in console and "Trainer.fit` stopped" not in console  # Lightning's INFO
    assert not [line for line in out.splitlines() if line.startswith("wandb:")]
    (folder,) = (outputs / "run" / "wandb").glob("offline-run-*")
    assert f"wandb            {folder} (offline; `wandb sync {folder}` uploads it)" in out.splitlines()
    assert len(out.splitlines()) < 60, out


def test_print_config_prints_the_config_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*ARGS, "run_dir=shown", "print_config=true", "logger=none"]
    with restored():
        out = check(command_here(args, tmp_path, monkeypatch, capsys)).stdout
    assert "family: gpt" in out and "max_steps: 6" in out


@pytest.mark.process_contract("console")  # on the checkpoint of the run above
def test_eval_starts_no_wandb_run_by_default(outputs: Path) -> None:
    (evaluation,) = (outputs / "run" / "eval").iterdir()
    assert (evaluation / "metrics.json").is_file() and not (evaluation / "wandb").exists()
    assert "wandb" not in (outputs / "eval.out").read_text()
