"""What the commands read of their command line before Hydra composes it: only the pieces that
``attnlab.cli.hydra.command_line`` gathers. attnlab-eval's and attnlab-sample's ``data.*`` and ``model.*``
compose untyped onto ``data/_checkpoint`` and ``model/_checkpoint``, with no checkpoint read and
nothing stored in Hydra's config store first, and are typed afterwards by the checkpoint's classes."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

import attnlab.cli
import attnlab.run
from attnlab.cli.hydra.command_line import before_composing
from attnlab.run.configs import register_schemas
from attnlab.run.eval_data import CHECKPOINT_DATA, parse, with_overrides
from attnlab.run.presets import config_dir
from attnlab.schema.data import TextData
from attnlab.schema.errors import ConfigError
from attnlab.schema.model import GPTConfig

# (module, function) of attnlab.cli and attnlab.run that name sys.argv: the reads before Hydra composes, the one
# rewrite (the teacher's defaults), the error messages' default and attnlab-report's argparse.
ARGV_USERS = {
    ("command_line", "read_before_train"),
    ("command_line", "read_before_eval"),
    ("command_line", "read_before_sample"),
    ("teacher_defaults", "use_teacher_defaults"),
    ("bad_input", "override_value"),
    ("report", "report_command"),
}


def argv_users() -> set[tuple[str, str]]:
    """The (module, function) pairs of attnlab.cli and attnlab.run whose code names ``sys.argv``."""
    found = set()
    packages = (Path(attnlab.cli.__file__).parent, Path(attnlab.run.__file__).parent)
    for path in sorted(path for package in packages for path in package.rglob("*.py")):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr == "argv"
                    and getattr(node.value, "id", "") == "sys"
                ):
                    found.add((path.stem, function.name))
    return found


def test_only_the_gathered_pieces_read_the_command_line_before_hydra() -> None:
    assert argv_users() == ARGV_USERS


@pytest.fixture
def eval_composer():
    """``compose(overrides)`` of attnlab-eval's config, as Hydra composes it before validation."""
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        yield lambda overrides: compose("eval", overrides=overrides)


def test_eval_composes_data_and_model_keys_untyped_without_reading_the_checkpoint(eval_composer) -> None:
    config = eval_composer(["ckpt_path=nowhere.ckpt", "data.seq_len=16", "model.pos.rope_base=20000"])
    assert OmegaConf.to_container(config.data) == {"seq_len": 16}
    assert OmegaConf.to_container(config.model) == {"pos": {"rope_base": 20000}}
    stored = ConfigStore.instance().repo["data"][f"{CHECKPOINT_DATA}.yaml"].node
    assert OmegaConf.to_container(stored) == {}  # the option holds no checkpoint's config


def test_a_data_preset_replaces_the_untyped_node_with_its_typed_schema(eval_composer) -> None:
    config = eval_composer(["ckpt_path=nowhere.ckpt", "data=shakespeare", "data.seq_len=16"])
    assert OmegaConf.get_type(config.data) is TextData and config.data.seq_len == 16


def test_the_overrides_are_typed_by_the_checkpoints_class_afterwards() -> None:
    """``data.seq_len=16`` on the checkpoint's class; a key that class lacks, or a model key that the
    weights depend on, is one line naming it."""
    saved = TextData(seq_len=64)
    typed = with_overrides("data", saved, parse(["data.seq_len=16"]))
    assert typed == TextData(seq_len=16)
    with pytest.raises(ConfigError, match=r"^data.seq_lenx=16: not a known key; did you mean data.seq_len\?"):
        with_overrides("data", saved, parse(["data.seq_lenx=16"]))
    with pytest.raises(ConfigError, match="the trained weights depend on it"):
        with_overrides("model", GPTConfig(), parse(["model.n_heads=2"]))


def test_eval_refuses_a_multi_process_trainer_before_composing(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["attnlab-eval", "ckpt_path=x.ckpt", "trainer=ddp_sim"])
    with pytest.raises(SystemExit) as exit_:
        before_composing("eval")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: trainer=ddp_sim: attnlab-eval runs in one process on one device: choose one of cpu, gpu"
    ]


def test_train_refuses_a_callback_given_as_a_value_before_composing(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["attnlab-train", "callbacks=[{_target_: a.B}]"])
    with pytest.raises(SystemExit) as exit_:
        before_composing("train")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("error: callbacks=[{_target_: a.B}]: choose options of")


@pytest.mark.parametrize("command", ["eval", "sample"])
def test_a_model_preset_is_refused_before_composing(command, monkeypatch, capsys) -> None:
    """Composed, gpt's defaults list would choose a task these commands lack (Hydra's own message)."""
    monkeypatch.setattr(sys, "argv", [f"attnlab-{command}", "ckpt_path=x.ckpt", "model=gpt"])
    with pytest.raises(SystemExit) as exit_:
        before_composing(command)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: model=gpt: the model is the checkpoint's own\n"


def test_the_commands_that_read_a_checkpoint_leave_their_command_line_to_hydra(monkeypatch) -> None:
    typed = ["attnlab-sample", "ckpt_path=x.ckpt", "model.attn_backend=flex", "data.seq_len=8"]
    monkeypatch.setattr(sys, "argv", list(typed))
    before_composing("sample")
    before_composing("eval")
    assert sys.argv == typed
