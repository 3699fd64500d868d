"""The costs of Hydra's composition that ``attnlab.cli.composition_costs`` removes: the configs
composed with and without them are the same, an interpolated default is still resolved, and a config
file edited on disk is parsed again, and Hydra's copies of its config repository share the config store."""

from __future__ import annotations

import copy
from pathlib import Path

import forked
import pytest
from hydra import compose, initialize_config_dir
from hydra._internal import defaults_list
from hydra._internal.core_plugins import file_config_source, importlib_resources_config_source
from hydra._internal.core_plugins.structured_config_source import StructuredConfigSource
from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.core.singleton import Singleton
from omegaconf import OmegaConf

from attnlab.cli import composition_costs
from attnlab.cli.app import config_dir, register_schemas
from attnlab.cli.bad_input import SCHEMA_NODE
from attnlab.cli.composition_costs import (
    HYDRA_INTERPOLATION_MAP,
    OmegaConfParsingEachFileOnce,
    interpolation_map_only_when_needed,
    parse_each_config_file_once,
    share_the_config_store,
)

COMMANDS = [
    ("train", []),
    ("train", ["model=gpt-tiny", "pos=rope", "data.seq_len=32"]),
    ("train", ["model=seq2seq", "data=reverse", "optim=muon"]),
    ("train", ["experiment=pos_sweep"]),
    ("train", ["model=vit", "trainer=ddp", "logger=csv"]),
    ("eval", ["ckpt_path=last.ckpt"]),
    ("sample", ["ckpt_path=last.ckpt", "prompt=To"]),
]


def composed(command: str, overrides: list[str]) -> str:
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return OmegaConf.to_yaml(compose(command, overrides=overrides, return_hydra_config=True))


def with_hydras_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hydra's composition as Hydra ships it, for this test (another may have applied ours before)."""
    monkeypatch.setattr(defaults_list, "_create_interpolation_map", HYDRA_INTERPOLATION_MAP)
    monkeypatch.setattr(file_config_source, "OmegaConf", OmegaConf)
    monkeypatch.setattr(importlib_resources_config_source, "OmegaConf", OmegaConf)


def test_every_command_composes_the_same_config_without_the_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    share_the_config_store()
    register_schemas()
    with monkeypatch.context() as hydras:
        with_hydras_own(hydras)
        expected = [composed(command, overrides) for command, overrides in COMMANDS]
    parse_each_config_file_once()
    interpolation_map_only_when_needed()
    assert [composed(command, overrides) for command, overrides in COMMANDS] == expected
    assert [composed(command, overrides) for command, overrides in COMMANDS] == expected  # files parsed


def test_an_interpolated_default_is_still_resolved(tmp_path: Path) -> None:
    """``- second: ${first}``: the choice of one group names the option of another."""
    for group, option, value in [
        ("first", "one", 1),
        ("first", "two", 2),
        ("second", "one", 11),
        ("second", "two", 22),
    ]:
        (tmp_path / group).mkdir(exist_ok=True)
        (tmp_path / group / f"{option}.yaml").write_text(f"{group}_value: {value}\n")
    (tmp_path / "config.yaml").write_text("defaults:\n  - first: one\n  - second: ${first}\n  - _self_\n")
    parse_each_config_file_once()
    interpolation_map_only_when_needed()
    with initialize_config_dir(str(tmp_path), version_base="1.3"):
        assert OmegaConf.to_container(compose("config")) == {
            "first": {"first_value": 1},
            "second": {"second_value": 11},
        }
        assert OmegaConf.to_container(compose("config", ["first=two"])) == {
            "first": {"first_value": 2},
            "second": {"second_value": 22},
        }


def test_a_config_file_is_parsed_once_and_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("lr: 0.001\nlayers: [1, 2]\n")

    def load() -> object:
        with open(path, encoding="utf-8") as file:
            return OmegaConfParsingEachFileOnce.load(file)

    first = load()
    first.layers.append(3)  # a caller's change reaches no later load
    parsed = len(composition_costs.PARSED)
    assert OmegaConf.to_container(load()) == {"lr": 0.001, "layers": [1, 2]}
    assert len(composition_costs.PARSED) == parsed  # the second load parsed nothing
    path.write_text("lr: 0.01\n")
    assert OmegaConf.to_container(load()) == {"lr": 0.01}


def files_parsed_by_a_composition_before_hydra_scanned_its_plugins() -> int:
    """In a child of the fork server: how many files a command's composition parsed through
    ``PARSED``, Hydra's plugins not yet scanned, as in a new process (the scan executes the config
    sources' modules again)."""
    Singleton._instances.pop(Plugins, None)
    composition_costs.PARSED.clear()
    parse_each_config_file_once()
    register_schemas()
    composed("train", ["model=gpt-tiny"])
    return len(composition_costs.PARSED)


def test_a_commands_composition_parses_its_files_through_the_cache() -> None:
    with forked.fork_server().Pool(1) as pool:
        assert pool.apply(files_parsed_by_a_composition_before_hydra_scanned_its_plugins) > 10


def test_hydras_copies_of_its_config_repository_share_the_config_store() -> None:
    """Each composition copies Hydra's config repository (``CachingConfigRepository``): the config store
    its structured source holds is shared, not copied (``share_the_config_store``), and what is loaded
    from it is still a copy of the stored node, so a composition that changes it changes no schema."""
    share_the_config_store()
    register_schemas()
    store = ConfigStore.instance()
    source = copy.deepcopy(StructuredConfigSource(provider="schema", path="structured://"))
    assert source.store is store
    name = SCHEMA_NODE.format("train")
    stored = OmegaConf.to_yaml(store.load(f"{name}.yaml").node)
    loaded = source.load_config(name).config
    loaded.seed = 12345
    assert OmegaConf.to_yaml(store.load(f"{name}.yaml").node) == stored
    assert "seed: 12345" not in stored
