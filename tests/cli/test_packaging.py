"""attnlab installed from a wheel (not an editable checkout) trains from any directory: the Hydra configs
and ``py.typed`` travel inside the package. One process contract (``packaging``): the wheel built,
installed into a fresh virtual environment, and its console script run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from train_cli import cli_env

import processes

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str | Path], **kwargs) -> subprocess.CompletedProcess:
    """Run a command without this checkout's ``PYTHONPATH``, failing the test with its output if it fails."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    kwargs.setdefault("env", env)
    kwargs.setdefault("timeout", 300)
    done = processes.run(args, **kwargs)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the attnlab wheel built from this checkout.

    The dependencies (torch & co.) come from the test environment through one ``.pth`` line naming its
    site-packages: Python does not process the ``.pth`` files inside a directory named that way, so the
    editable attnlab of the test environment does not leak in. The wheel goes in first: pip would take the
    editable attnlab seen through that line for "already installed".
    """
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # a copy, so the build leaves no build/ or egg-info in the checkout
    for part in ("src", "conf"):
        shutil.copytree(
            ROOT / part, source / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp, source])
    (wheel,) = tmp.glob("attnlab-*.whl")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel])
    (Path(purelib) / "shared-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.mark.process_contract("packaging")
def test_the_installed_wheel_ships_the_configs_and_trains_from_an_empty_directory(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    venv = installed(tmp_path_factory)
    where = run(
        [venv / "bin" / "python", "-c", "import attnlab.cli.hydra.app as a; print(a.config_dir())"],
        cwd=venv,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.strip()
    conf = Path(where)
    assert conf.is_relative_to(venv), f"attnlab.conf imported from {conf}, not the fresh install"
    assert (conf / "train.yaml").is_file() and (conf / "model" / "gpt-tiny.yaml").is_file()
    assert (conf.parent / "py.typed").is_file()

    env = cli_env(tmp_path)
    env.pop("PYTHONPATH", None)  # nothing from this checkout's src/
    args = ["model=gpt-tiny", "trainer.max_steps=3", "logger=csv", "sample.max_new_tokens=8"]
    run([venv / "bin" / "attnlab-train", *args], cwd=tmp_path, env=env, timeout=600)
    (run_dir,) = (tmp_path / "outputs").glob("*/*")
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert "model:\n  family: gpt\n" in (run_dir / "config.yaml").read_text()
