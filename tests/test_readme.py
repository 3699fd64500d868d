"""The README and the manuals in docs/ run as written on a fresh clone, checked without training anything.

Every command of their fenced blocks (each line of a ``bash`` block, each ``$ `` line of a console block)
names a console script of pyproject.toml, a Makefile target, a script of the repository or a program
of the environment; every ``key=value`` of the attnlab commands is accepted by that command's schema
and rules (each job of a ``-m`` sweep too), and where a page shows the ``error:`` line a command
ends with, it ends with exactly that line; every file a command reads ships in the repository or is
written by an earlier command (no placeholder to fill in). The pages are read in the order of
``PAGES`` (README.md first: its tour trains the runs the manuals read), then the other pages of docs/.
A block that cannot run here (GPUs, several nodes, SLURM) is marked ``<!-- readme-test: skip (why) -->``
on the line before it. tests/test_docs_names.py checks the names in the pages' prose and links.
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import json
import re
import runpy
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

import attnlab.checkpoint
from attnlab.cli.eval import check_eval_job
from attnlab.cli.hydra import teacher_defaults
from attnlab.data import check_source
from attnlab.run import eval_data
from attnlab.run.bad_input import one_line
from attnlab.run.configs import COMMANDS, register_schemas
from attnlab.run.presets import config_dir
from attnlab.schema.checks import validate
from attnlab.schema.run import RunConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
QUICK_START = README.split("\n## How it is built", 1)[0]
PAGES = [  # in the order a reader meets their commands: what a page reads, an earlier one wrote
    "README.md",
    "docs/training.md",
    "docs/scaling-out.md",
    "docs/fault-tolerance.md",
    "docs/data.md",
    "docs/comparing-runs.md",
    "docs/research-instruments.md",
    "docs/export-and-evaluation.md",
    "docs/speed.md",
    "docs/development.md",
]
PAGES += sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md") if str(p.relative_to(ROOT)) not in PAGES
)
HYDRA_COMMANDS = {f"attnlab-{name}": name for name in COMMANDS}  # attnlab-train -> train.yaml, ...
SKIP_MARK = "<!-- readme-test: skip"
READ_KEYS = ("ckpt_path", "task.teacher", "data.path", "model.init_from")  # values name a file to read


@dataclass
class Command:
    line: int  # in its page
    args: list[str]
    error: str | None = None  # the error line the page shows under it
    page: str = "README.md"

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {shlex.join(self.args)[:70]}"


def readme_commands(text: str, page: str = "README.md") -> list[Command]:
    """The commands of ``text``'s fenced blocks in order, as argument lists (comments dropped, ``\\``
    continuations joined), without the blocks marked to skip."""
    commands: list[Command] = []
    lines = text.splitlines()
    block, skipped, pending = None, False, ""
    for number, line in enumerate(lines, 1):
        if block is None:
            if line.startswith("```"):
                block, skipped = line[3:].strip(), lines[number - 2].startswith(SKIP_MARK)
            continue
        if line.startswith("```"):
            block = None
        elif skipped:
            continue
        elif block == "bash":
            pending += line.removesuffix("\\")
            if not line.endswith("\\") and (args := shlex.split(pending, comments=True)):
                commands.append(Command(number, args, page=page))
            pending = "" if not line.endswith("\\") else pending
        elif line.startswith("$ "):
            commands.append(Command(number, shlex.split(line[2:], comments=True), page=page))
        elif line.startswith("error: ") and commands and commands[-1].line == number - 1:
            commands[-1].error = line.removeprefix("error: ")
    return commands


COMMAND_LINES = [
    command for page in PAGES for command in readme_commands((ROOT / page).read_text(encoding="utf-8"), page)
]


def as_attnlab(args: list[str]) -> list[str]:
    """``make train ARGS="..."`` is ``attnlab-train ...`` (the Makefile's train target)."""
    if args[:2] == ["make", "train"]:
        extra = [a.removeprefix("ARGS=") for a in args[2:] if a.startswith("ARGS=")]
        return ["attnlab-train", *(shlex.split(extra[0]) if extra else [])]
    return args


def jobs(args: list[str]) -> list[list[str]]:
    """The overrides of each job: one for a plain run, the grid of comma-separated values after -m."""
    if "-m" not in args:
        return [args]
    overrides = [a for a in args if a != "-m"]
    choices = [[f"{a.split('=', 1)[0]}={v}" for v in a.split("=", 1)[1].split(",")] for a in overrides]
    return [list(job) for job in itertools.product(*choices)]


def value_of(args: list[str], key: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"{key}=")), None)


def test_the_commands_are_found_on_every_page():
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        runnable = [b for b in text.split("\n```bash\n")[:-1] if not b.rstrip().endswith("-->")]
        assert not runnable or any(c.page == page for c in COMMAND_LINES), page
    assert any(c.page == "README.md" for c in COMMAND_LINES)
    programs = {c.args[0] for c in COMMAND_LINES}
    assert {"make", "attnlab-train", "attnlab-report", "attnlab-sample", "attnlab-explain"} <= programs
    assert "torchrun" not in programs and "srun" not in programs  # skipped blocks: GPUs, SLURM
    assert sum(c.error is not None for c in COMMAND_LINES) >= 5  # the bad configs' lines
    assert "source .venv/bin/activate" in QUICK_START  # the console scripts live in .venv/bin


def test_the_parser_skips_marked_blocks_and_joins_lines():
    text = "```bash\na b=1 \\\n  c=2   # note\n```\n<!-- readme-test: skip (GPUs) -->\n```bash\nx\n```\n"
    text += "```console\n$ y k=v\nerror: k=v: bad\nok\n```\n"
    found = [(c.line, c.args, c.error) for c in readme_commands(text)]
    assert found == [(3, ["a", "b=1", "c=2"], None), (10, ["y", "k=v"], "k=v: bad")]


@pytest.mark.parametrize("command", COMMAND_LINES, ids=str)
def test_each_program_exists(command):
    program, *args = command.args
    if program == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M)
        assert args[0] in targets
    elif program.startswith("attnlab-"):
        scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
        assert program in scripts, f"{program} is not a console script of pyproject.toml"
    elif program == "python":
        assert (ROOT / args[0]).is_file(), args[0]
    elif "/" in program:  # a script of the repository, run from its root
        assert (ROOT / program).is_file(), program
    else:  # a program of the environment (tensorboard, wandb) or the system (ls)
        assert shutil.which(program) or Path(sys.executable).with_name(program).exists(), program


HYDRA_LINES = [c for c in COMMAND_LINES if as_attnlab(c.args)[0] in HYDRA_COMMANDS]


def trained_runs() -> dict[str, list[str]]:
    """{run_dir: the overrides of the README's command that trains it} (the first; resumes excluded)."""
    runs: dict[str, list[str]] = {}
    for command in HYDRA_LINES:
        program, *args = as_attnlab(command.args)
        if (
            program == "attnlab-train"
            and (run_dir := value_of(args, "run_dir"))
            and not value_of(args, "ckpt_path")
        ):
            runs.setdefault(run_dir, args)
    return runs


TRAINED = trained_runs()


@pytest.fixture(scope="module")
def composer():
    """``compose(command, overrides)`` inside one Hydra context for the whole module (cheaper)."""
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        yield compose


@pytest.fixture(scope="module")
def readme_folder(tmp_path_factory) -> Path:
    """A folder where the README's ``python`` commands have run (they write the example images)."""
    folder = tmp_path_factory.mktemp("readme")
    write_own_harness_task(folder / "my_tasks")
    for command in COMMAND_LINES:
        if command.args[0] == "python":  # the script run as ``python <script>`` runs it, in this process
            script, *args = command.args[1:]
            with pytest.MonkeyPatch.context() as patch:
                patch.chdir(folder)
                patch.setattr(sys, "argv", [str(ROOT / script), *args])
                runpy.run_path(str(ROOT / script), run_name="__main__")
    return folder


def write_own_harness_task(folder: Path) -> None:
    """The README's ``harness.include_path=my_tasks``: a folder holding the user's own task, ``my_task``
    (a multiple-choice task on a local JSON-lines file, as the README describes it)."""
    folder.mkdir()
    (folder / "my_task.jsonl").write_text('{"q": "1+1=", "choices": ["2", "3"], "a": 0}\n')
    task = {
        "task": "my_task",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(folder / "my_task.jsonl")}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "{{q}}",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "{{a}}",
        "metric_list": [{"metric": "acc"}],
    }
    (folder / "my_task.yaml").write_text(json.dumps(task))  # JSON is YAML


@pytest.fixture(scope="module")
def trained_config(composer):
    """``trained_config(path)``: the run config of the README's command whose run directory holds
    ``path``, composed and validated once."""

    @functools.cache
    def saved(path: str) -> RunConfig:
        run_dir = next(d for d in TRAINED if path.startswith(f"{d}/"))
        return validate(composer("train", overrides=TRAINED[run_dir]))

    return saved


@pytest.fixture
def readme_runs(trained_config, monkeypatch, readme_folder):
    """A checkpoint under a run directory of the README reads as the run config of the README's command
    that trains it (composed and validated, not trained), for the commands that compose onto it
    (attnlab-eval's ``data.*``, attnlab-sample's ``model.*``, distillation's teacher). What they store in
    Hydra's config store is gone after the test."""
    store = ConfigStore.instance()
    for group in ("data", "model"):
        monkeypatch.setitem(store.repo, group, dict(store.repo[group]))
    monkeypatch.setattr(eval_data, "saved_run", trained_config)
    monkeypatch.setattr(teacher_defaults, "teacher_run", trained_config)
    # no weights behind them, so no tokenizer either: the harness's task texts are not checked here
    monkeypatch.setattr(attnlab.checkpoint, "checkpoint_tokenizer", lambda ckpt_path: None)
    monkeypatch.chdir(readme_folder)


def check(name: str, overrides: list[str], composer) -> None:
    """What the command checks before it trains or loads weights: the composed config against its
    schema and rules (attnlab-train's between the groups, a teacher's; attnlab-eval's against the
    checkpoint's run), as the command composes it."""
    if name == "train":
        overrides = teacher_defaults.with_teacher_defaults(overrides)
        cfg = composer(name, overrides=overrides)
        teacher_defaults.check_teacher_run(cfg)
        run = validate(cfg)
        check_source(run.data, run.model)  # the heads of its files: the example images' sizes
        return
    if name == "eval":
        check_eval_job(composer(name, overrides=overrides), Path("eval"), overrides)
        return
    command = OmegaConf.to_object(composer(name, overrides=overrides))
    assert isinstance(command, COMMANDS[name])
    if hasattr(command, "check"):
        command.check()
    if name == "sample":
        eval_data.model_changes(command.ckpt_path, overrides)


@pytest.mark.parametrize("command", HYDRA_LINES, ids=str)
def test_each_override_is_accepted_or_fails_as_shown(command, composer, readme_runs):
    """Composed as the command composes it and checked, for every job; a command the README shows
    failing ends with the README's line."""
    program, *args = as_attnlab(command.args)
    name = HYDRA_COMMANDS[program]
    for overrides in jobs(args):
        if command.error is None:
            check(name, overrides, composer)
            continue
        with pytest.raises(Exception) as failure:  # any error the command turns into one line
            check(name, overrides, composer)
        assert one_line(failure.value, overrides) == command.error


def reads_and_writes(args: list[str]) -> tuple[list[str], list[str]]:
    """The paths a command reads and those it writes, as the README's commands name them."""
    program, *rest = args
    reads = [v for key in READ_KEYS if (v := value_of(rest, key)) and v not in ("last", "auto")]
    writes = [v for key in ("run_dir", "hydra.sweep.dir") if (v := value_of(rest, key))]
    if value_of(rest, "ckpt_path") == "last":  # resumes in place: the run directory exists
        reads.append(value_of(rest, "run_dir"))
    positional = [a for a in rest if "=" not in a and not a.startswith("-")]
    if program == "attnlab-report":
        outs = [rest[i + 1] for i, a in enumerate(rest) if a == "--out"]
        reads += [a for a in positional if a not in outs]
        writes += outs
    elif program == "python":  # python <script> <folder it writes>
        writes += positional[1:]
    elif program in ("ls", "tensorboard") or rest[:1] == ["leet"]:
        reads += [a for a in positional if a != "leet"]
        reads += [rest[i + 1] for i, a in enumerate(rest) if a == "--logdir"]
    return reads, writes


def test_each_command_reads_what_an_earlier_command_wrote():
    """No placeholder to fill in: a checkpoint, folder or image set a command reads is in the repository
    or under a run directory (or folder) that an earlier command of the README wrote."""
    written: list[str] = []
    for command in COMMAND_LINES:
        reads, writes = reads_and_writes(as_attnlab(command.args))
        for path in reads:
            earlier = any(path == w or path.startswith(f"{w}/") or fnmatch.fnmatch(w, path) for w in written)
            assert earlier or (ROOT / path).exists(), f"{command}: {path}"
        written += writes


def test_the_read_check_is_not_vacuous():
    reads, writes = reads_and_writes(
        ["attnlab-train", "task.teacher=a/checkpoints/last.ckpt", "ckpt_path=last", "run_dir=b"]
    )
    assert (reads, writes) == (["a/checkpoints/last.ckpt", "b"], ["b"])
    assert reads_and_writes(["attnlab-report", "runs/x", "--out", "cmp"]) == (["runs/x"], ["cmp"])


def test_a_bad_override_in_the_readme_would_fail_here(composer):
    """The check above is not vacuous: an override the schema does not know is refused."""
    with pytest.raises(Exception, match="attn_windw"):
        check("train", ["model.attn_windw=4"], composer)
