"""attnlab-train task=distill end to end on tiny teachers of every family: the student takes the
teacher's model (under the command line's overrides), data and objective, its checkpoint holds only
its own weights and serves attnlab-eval, -sample and -explain like any other; a teacher that cannot
teach this student, and a bad alpha or temperature, are one line before the run directory exists.

The commands run in-process through Hydra, as the console scripts do (see test_compress.py, whose
tiny checkpoints and int8 copies these tests share).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import yaml
from test_compress import COMMON, RUNS, run_command
from train_cli import tiny_checkpoints

pytestmark = pytest.mark.slow  # end to end: tiny teachers (about 1 s each), then their students

STUDENT = ["task=distill", "model.n_layers=1", *COMMON]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``checkpoint(family)``: the last.ckpt of a tiny teacher of that family, trained on first use."""
    return tiny_checkpoints(tmp_path_factory, RUNS, COMMON)


@pytest.fixture(scope="module")
def int8(checkpoint) -> Path:
    """The tiny GPT teacher compressed by attnlab-compress (beside it)."""
    from attnlab.cli.compress import main

    with pytest.MonkeyPatch.context() as patch:
        assert run_command(main, [f"ckpt_path={checkpoint('gpt')}", "method=int8"], patch) == 0
    return checkpoint("gpt").with_name("int8-last.ckpt")


@pytest.fixture(autouse=True)
def config_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The teacher's model and data (and attnlab-eval's checkpoint's) go into Hydra's config store; taken
    out after each test, so that later tests in this process compose the schema's defaults (and name
    runs without this test's implied overrides)."""
    from hydra.core.config_store import ConfigStore

    from attnlab.cli.hydra.teacher_defaults import TEACHER_OPTION
    from attnlab.run.eval_data import CHECKPOINT_DATA
    from attnlab.training.names import IMPLIED_VARIABLE

    monkeypatch.setenv(IMPLIED_VARIABLE, "[]")  # restored after the test
    yield
    for group in ("data", "model"):
        for option in (TEACHER_OPTION, CHECKPOINT_DATA):
            ConfigStore.instance().repo.get(group, {}).pop(f"{option}.yaml", None)


def saved_config(run_dir: Path) -> dict:
    return yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("family", ["gpt", "bert", "seq2seq", "vit"])
def test_a_student_learns_from_a_teacher_of_each_family(checkpoint, tmp_path, monkeypatch, family) -> None:
    from attnlab.checkpoint import load_task_from_checkpoint
    from attnlab.cli.train import main
    from attnlab.tasks import TASK_CLASSES

    teacher, run_dir = checkpoint(family), tmp_path / "student"
    args = [*STUDENT, f"task.teacher={teacher}", "task.alpha=0.7", f"run_dir={run_dir}"]
    assert run_command(main, args, monkeypatch) == 0
    theirs, ours = saved_config(teacher.parent.parent), saved_config(run_dir)
    assert ours["model"] == {**theirs["model"], "n_layers": 1}  # the teacher's model, one layer
    assert ours["data"] == theirs["data"]
    assert ours["task"]["objective"] == theirs["task"]["name"]
    shared = set(ours["task"]) & set(theirs["task"]) - {"name"}  # the teacher's task settings: defaults
    assert {k: ours["task"][k] for k in shared} == {k: theirs["task"][k] for k in shared}
    assert ours["task"]["alpha"] == 0.7
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["hyper_parameters"]["task"]["name"] == theirs["task"]["name"]  # the objective's module
    student = load_task_from_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert type(student) is TASK_CLASSES[theirs["task"]["name"]]
    assert set(saved["state_dict"]) == set(student.state_dict())  # no teacher weights in it
    assert student.model.cfg.n_layers == 1


def test_a_student_is_named_by_what_was_typed(checkpoint, monkeypatch) -> None:
    """Not by the teacher's defaults that task=distill adds (model=_teacher, pos=..., task.objective=...),
    which filled the 120 characters of a name before what tells two students apart."""
    from attnlab.cli.hydra.teacher_defaults import use_teacher_defaults
    from attnlab.training.names import folder_name, run_name

    teacher = checkpoint("vit")
    typed = ["task=distill", f"task.teacher={teacher}", "model.n_layers=2", "logger=none"]
    monkeypatch.setattr(sys, "argv", ["attnlab-train", *typed])
    use_teacher_defaults()
    assert len(sys.argv[1:]) > len(typed)  # the teacher's defaults, added to the command line
    run = (
        teacher.parent.parent.name
    )  # the teacher's path by its last three parts: <run>/checkpoints/last.ckpt
    typed_label = f"task=distill,task.teacher={run}/checkpoints/last.ckpt,model.n_layers=2"
    assert run_name(None, sys.argv[1:], "12-00-00") == typed_label.replace("/", "-")
    folder = f"12-00-00_task-distill+task.teacher-{run}-checkpoints-last.ckpt+model.n_layers-2"
    assert folder_name("12-00-00", None, sys.argv[1:], multirun=False) == folder


def test_the_students_checkpoint_serves_eval_sample_and_explain(
    checkpoint, tmp_path, monkeypatch, capsys
) -> None:
    from attnlab.cli.eval import main as evaluate
    from attnlab.cli.explain import main as explain
    from attnlab.cli.sample import main as sample
    from attnlab.cli.train import main as train

    run_dir = tmp_path / "student"
    args = [*STUDENT, f"task.teacher={checkpoint('gpt')}", f"run_dir={run_dir}"]
    assert run_command(train, args, monkeypatch) == 0
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    args = [
        f"ckpt_path={ckpt}",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "split=val",
        "limit_batches=2",
    ]
    assert run_command(evaluate, args, monkeypatch) == 0
    assert list((run_dir / "eval").glob("*/metrics.json"))
    capsys.readouterr()
    assert run_command(sample, [f"ckpt_path={ckpt}", "prompt=To be", "max_new_tokens=5"], monkeypatch) == 0
    assert "To be" in capsys.readouterr().out
    args = [f"ckpt_path={ckpt}", "input=To be", f"out_dir={tmp_path / 'out'}", "importance_batches=1"]
    assert run_command(explain, args, monkeypatch) == 0
    assert (tmp_path / "out" / "index.html").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["task.teacher={tmp}/no.ckpt"], "task.teacher={tmp}/no.ckpt: no such checkpoint file"),
        (["task.teacher={tmp}/notes.ckpt"], "task.teacher={tmp}/notes.ckpt: not a readable checkpoint"),
        (
            ["task.teacher={tmp}/weights.ckpt"],
            "task.teacher={tmp}/weights.ckpt: not a Lightning checkpoint written by attnlab-train",
        ),
        (["task.teacher={int8}"], "task.teacher={int8}: is a checkpoint of attnlab-compress method=int8"),
        (
            ["task.teacher={vit}", "model=gpt-tiny"],
            "task.teacher={vit}: is a model.family=vit checkpoint; the student is model.family=gpt",
        ),
        (
            ["task.teacher={bert}", "task.objective=mlm"],
            "task.objective=mlm: the teacher {bert} was trained on task classification",
        ),
        (
            ["task.teacher={gpt}", "data.path={tmp}/other.txt"],
            "task.teacher={gpt}: its vocabulary has",
        ),
        (["task.teacher={gpt}", "task.alpha=1.5"], "task.alpha=1.5: must be in [0, 1]"),
        (["task.teacher={gpt}", "task.temperature=0"], "task.temperature=0.0: must be > 0"),
        (["model=gpt-tiny"], "task.teacher=null: name the teacher"),
        (
            ["task.teacher={gpt}", "ckpt_path={int8}"],
            "ckpt_path={int8}: is a checkpoint of attnlab-compress method=int8, for inference only",
        ),
    ],
)
def test_a_teacher_that_cannot_teach_is_one_line_and_writes_nothing(
    checkpoint, int8, tmp_path, monkeypatch, capsys, args, message
) -> None:
    from attnlab.cli.train import main

    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    torch.save({"weight": torch.zeros(2)}, tmp_path / "weights.ckpt")
    (tmp_path / "other.txt").write_text("abc abd abe. " * 400)  # 6 characters: another vocabulary
    names = {"tmp": tmp_path, "int8": int8, **{f: checkpoint(f) for f in ("gpt", "bert", "vit")}}
    run_dir = tmp_path / "student"
    args = [*STUDENT, *(a.format(**names) for a in args), f"run_dir={run_dir}"]
    capsys.readouterr()
    assert run_command(main, args, monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {message.format(**names)}"), err
    assert not run_dir.exists()
