"""The README's quick start runs as written on a fresh clone (issue 13 item 3): every command of its
code blocks (everything before "## How it is built") names a console script of pyproject.toml or a
Makefile target, every ``key=value`` of the five Hydra commands is accepted by that command's schema
and rules (each job of a ``-m`` sweep too), and every file or folder it links to exists. A README that
drifts from the code fails here, without training anything."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest
import tomllib
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from attnlab.cli.app import COMMANDS, config_dir, register_schemas
from attnlab.schema.checks import validate

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
QUICK_START = README.split("\n## How it is built", 1)[0]
HYDRA_COMMANDS = {f"attnlab-{name}": name for name in COMMANDS}  # attnlab-train -> train.yaml, ...


def quick_start_commands() -> list[list[str]]:
    """The commands of the quick start's bash blocks, as argument lists (comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", QUICK_START, flags=re.S)
    lines = [line for block in blocks for line in block.splitlines()]
    return [shlex.split(line, comments=True) for line in lines if shlex.split(line, comments=True)]


COMMAND_LINES = quick_start_commands()


def jobs(args: list[str]) -> list[list[str]]:
    """The overrides of each job: one for a plain run, the grid of comma-separated values after -m."""
    if "-m" not in args:
        return [args]
    overrides = [a for a in args if a != "-m"]
    choices = [[f"{a.split('=', 1)[0]}={v}" for v in a.split("=", 1)[1].split(",")] for a in overrides]
    return [list(job) for job in itertools.product(*choices)]


def test_the_quick_start_has_the_commands_a_new_user_runs():
    programs = [args[0] for args in COMMAND_LINES]
    for needed in ("make", "attnlab-train", "attnlab-report", "attnlab-sample", "attnlab-explain"):
        assert needed in programs, needed
    assert "source .venv/bin/activate" in QUICK_START  # the console scripts live in .venv/bin


@pytest.mark.parametrize("args", COMMAND_LINES, ids=[" ".join(a)[:60] for a in COMMAND_LINES])
def test_each_command_exists(args):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    if args[0] == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M)
        assert args[1] in targets
    else:
        assert args[0] in scripts, f"{args[0]} is not a console script of pyproject.toml"


HYDRA_LINES = [args for args in COMMAND_LINES if args[0] in HYDRA_COMMANDS]


@pytest.mark.parametrize("args", HYDRA_LINES, ids=[" ".join(a)[:60] for a in HYDRA_LINES])
def test_each_override_is_accepted(args):
    """Composed like the command composes it, then checked by its schema (and attnlab-train's rules
    between groups, all that runs before the run directory) for every job."""
    name = HYDRA_COMMANDS[args[0]]
    if value_of(
        args, "task.teacher"
    ):  # its defaults come from the teacher's run, which an earlier command trains
        pytest.skip("task=distill composes on the teacher's run: tests/cli/test_train_distill.py runs it")
    register_schemas()
    for overrides in jobs(args[1:]):
        with initialize_config_dir(str(config_dir()), version_base="1.3"):
            cfg = compose(name, overrides=overrides)
        if name == "train":
            validate(cfg)
        else:
            command = OmegaConf.to_object(cfg)
            assert isinstance(command, COMMANDS[name])
            if hasattr(command, "check"):
                command.check()


def value_of(args: list[str], key: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"{key}=")), None)


def test_each_command_reads_what_an_earlier_command_wrote():
    """No placeholder to fill in: a checkpoint read is in the run directory of an earlier training,
    a report's folder is an earlier sweep's (or run's) directory."""
    written: list[str] = []
    for args in COMMAND_LINES:
        for key in ("ckpt_path", "task.teacher"):
            ckpt = value_of(args, key)
            if ckpt is not None:
                assert any(ckpt.startswith(f"{d}/checkpoints/") for d in written), ckpt
        if args[0] == "attnlab-report":
            assert all(path in written for path in args[1:] if not path.startswith("-")), args
        if args[0] == "attnlab-train":
            written += [d for d in (value_of(args, "run_dir"), value_of(args, "hydra.sweep.dir")) if d]


def test_the_files_the_quick_start_links_exist():
    links = re.findall(r"\]\(([^)#]+)\)", QUICK_START)
    assert links
    for link in links:
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link


def test_a_bad_override_in_the_readme_would_fail_here():
    """The check above is not vacuous: an override the schema does not know is refused."""
    register_schemas()
    with (
        initialize_config_dir(str(config_dir()), version_base="1.3"),
        pytest.raises(Exception, match="attn_windw"),
    ):
        validate(compose("train", overrides=["model.attn_windw=4"]))
