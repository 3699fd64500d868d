"""``--help`` of every command lists only what that command lets a user choose: conf/'s presets for
attnlab-train (not the schema nodes of Hydra's config store, ``model/gpt_schema``), no groups for the
commands that take their model and data from a checkpoint, and attnlab-eval's own short list. Run in
the test process (Hydra prints the help and exits): no subprocess, no torch import needed."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from attnlab.run.configs import register_schemas
from attnlab.run.presets import config_dir, presets


def help_text(command: str, monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path) -> tuple[str, str]:
    """The (groups, config) sections of ``attnlab-<command> --help``, run where nothing may be written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [f"attnlab-{command}", "--help"])
    main = importlib.import_module(f"attnlab.cli.{command}").main
    with pytest.raises(SystemExit) as exit_:
        main()
    GlobalHydra.instance().clear()
    assert exit_.value.code in (0, None)
    assert list(tmp_path.iterdir()) == []  # help writes no run directory
    groups, config = capsys.readouterr().out.split("== Configuration groups ==")[1].split("== Config ==")
    return groups, config


def named_groups(groups: str) -> dict[str, list[str]]:
    """``group: a, b`` lines of the groups section, as {group: [options]}."""
    lines = [line for line in groups.splitlines()[3:] if ": " in line and not line.startswith((" ", "("))]
    return {name: options.split(", ") for name, options in (line.split(": ", 1) for line in lines)}


def test_train_help_lists_every_group_of_conf_with_its_presets(monkeypatch, capsys, tmp_path) -> None:
    groups, config = help_text("train", monkeypatch, capsys, tmp_path)
    assert "_schema" not in groups
    listed = named_groups(groups)
    folders = sorted(
        p.name for p in config_dir().iterdir() if p.is_dir() and p.name not in ("hydra", "__pycache__")
    )
    assert sorted(listed) == folders
    assert listed["model"] == presets("model") and "gpt-tiny" in listed["model"]
    assert listed["pos"] == ["alibi", "learned", "none", "relative", "rope", "sinusoidal"]
    assert "\nmodel:  # model=<preset>\n  family: gpt" in config  # the composed default config follows


def test_a_checkpoint_command_lists_no_groups(monkeypatch, capsys, tmp_path) -> None:
    groups, config = help_text("sample", monkeypatch, capsys, tmp_path)
    assert named_groups(groups) == {}
    assert "the checkpoint's" in groups
    assert "ckpt_path: ???" in config


@pytest.mark.parametrize("command", ["train", "sample", "explain", "compress", "export"])
def test_the_commands_use_attnlabs_help(command) -> None:
    """Composing is cheaper than printing the help (Hydra lists every group twice for it), so the other
    checkpoint commands are checked by their help config: the same template as sample's."""
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose(command, return_hydra_config=True)
    assert cfg.hydra.runtime.choices["hydra/help"] == "attnlab"
    template = OmegaConf.to_container(cfg.hydra.help)["template"]  # unresolved
    assert "${attnlab.help_groups:${hydra.job.name}}" in template and "$APP_CONFIG_GROUPS" not in template


def test_eval_help_lists_only_what_eval_can_choose(monkeypatch, capsys, tmp_path) -> None:
    """The model is the checkpoint's, eval runs in one process, and the store's schemas are no choices."""
    groups, config = help_text("eval", monkeypatch, capsys, tmp_path)
    listed = named_groups(groups)
    assert list(listed) == ["data", "logger", "trainer"]
    assert listed["data"] == presets("data") and listed["trainer"][-1].startswith("gpu")
    assert "_schema" not in groups and "_checkpoint" not in groups
    assert "strategy" not in config and "max_steps" not in config


def test_help_describes_each_key_by_its_schema_field(monkeypatch, capsys, tmp_path) -> None:
    """litgpt-like: a key's line carries the comment of its field in the schema's dataclasses."""
    _, config = help_text("train", monkeypatch, capsys, tmp_path)
    lines = config.splitlines()
    assert "  n_kv_heads: null  # None: n_heads (grouped-query when smaller)" in lines
    assert "  on_extend: keep  # a resume past the checkpoint's schedule: keep | stretch" in lines
    assert any(line.startswith("dry_run: false  # validate everything a run would") for line in lines)
    assert any(line.startswith("  pos:  # The positional encoding, chosen with pos=<name>") for line in lines)
