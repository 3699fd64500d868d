"""The data schema: one class per kind, validation messages, the family/task/kind table, the presets."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from attnlab.run.configs import register_schemas
from attnlab.run.presets import config_dir
from attnlab.schema.checks import accepted_kinds, check_compatible
from attnlab.schema.data import DATA, DataKind, SourcedData, data_config
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import to_object
from attnlab.schema.token_data import TokensData

CONF = Path(__file__).resolve().parents[2] / "conf" / "data"


def test_every_kind_has_a_class_and_is_accepted_by_some_family():
    accepted = {k for kinds in accepted_kinds().values() for k in kinds}
    assert accepted == {kind.value for kind in DataKind} == {kind.value for kind in DATA.schemas}
    for kind, schema in DATA.schemas.items():
        assert schema().kind == kind


def test_each_kind_holds_only_the_fields_it_reads():
    def keys(kind: str) -> set[str]:
        return {f.name for f in fields(DATA.schemas[DataKind(kind)])}

    assert not {"listops_max_depth", "image_size", "torchvision"} & keys("text")
    assert not {"path", "hf_name", "tokenizer", "mlm_probability"} & keys("listops")
    assert "torchvision" in keys("images") and "torchvision" not in keys("digits")
    assert "mlm_probability" in keys("text") and "mlm_probability" not in keys("pairs")


@pytest.mark.parametrize(
    ("family", "task", "kind", "message"),
    [
        (
            "vit",
            "classification",
            "text",
            "data.kind=text: cannot be consumed by model.family='vit' with task.name='classification'; "
            "it accepts data.kind in: digits, images",
        ),
        (
            "gpt",
            "causal_lm",
            "digits",
            "data.kind=digits: cannot be consumed by model.family='gpt' with task.name='causal_lm'; "
            "it accepts data.kind in: text, tokens, copy, passkey, recall, addition, repeated_segments",
        ),
        ("gpt", "mlm", "text", "task.name=mlm: cannot train model.family='gpt'; it trains causal_lm"),
    ],
)
def test_incompatible_family_task_kind_is_one_line(family, task, kind, message):
    with pytest.raises(ConfigError) as err:
        check_compatible(family, task, kind)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("kind", "settings", "message"),
    [
        ("text", {"batch_size": 0}, "data.batch_size=0: must be at least 1"),
        ("text", {"val_fraction": 0.6, "test_fraction": 0.5}, "leaves no training data"),
        (
            "text",
            {"tokenizer": "bpe", "bpe_vocab_size": 100},
            "data.bpe_vocab_size=100: is below the 256 bytes + 7 special",
        ),
        ("text", {"mlm_probability": 0.0}, "data.mlm_probability=0.0: must be in (0, 1)"),
        ("digits", {"mean": [0.5], "std": []}, "give both with 1 or 3 values"),
        ("text_classification", {}, "data.path=null: data.kind=text_classification needs data.path"),
        ("images", {}, "data.kind=images needs data.path (a folder of class folders), data.hf_name"),
        (
            "text",
            {"path": "a.txt", "hf_name": "wikitext"},
            "data.hf_name=wikitext: and data.path are both set",
        ),
        ("pairs", {"path": "p.tsv", "source_lang": "de"}, "data.source_lang=de: with data.target_lang=null"),
        ("text", {"hf_data_files": "a.txt"}, "data.hf_data_files=a.txt: needs data.hf_name"),
        (
            "text",
            {"path": ""},
            "data.path='': is empty: give one, or leave it unset (null)",
        ),  # not the default text
        ("images", {"hf_name": ""}, "data.hf_name='': is empty"),
        ("listops", {"listops_max_args": 1}, "data.listops_max_args=1: must be at least 2"),
    ],
)
def test_bad_values_name_the_key(kind, settings, message):
    with pytest.raises(ConfigError) as err:
        data_config(kind, **settings).check()
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def composed_data(preset: str, *overrides: str):
    register_schemas()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"data={preset}", *overrides])
    return to_object(cfg.data)


@pytest.mark.parametrize("preset", sorted(p.stem for p in CONF.glob("*.yaml")))
def test_each_preset_composes_to_its_kinds_class_and_is_valid(preset, monkeypatch):
    monkeypatch.setenv("TINYSHAKESPEARE", "input.txt")
    data = composed_data(preset)
    assert type(data) is DATA.schemas[data.kind]
    if isinstance(data, SourcedData) and data.needs and not data.sources():  # for the user's own files
        with pytest.raises(ConfigError, match=rf"data.kind={data.kind} needs data.path"):
            data.check()
        data = composed_data(preset, "data.path=some/path")
    if isinstance(data, TokensData) and not data.path:  # data=tokens: the folder the user prepared
        with pytest.raises(ConfigError, match=r"data.path=null: data.kind=tokens needs the folder"):
            data.check()
        data = composed_data(preset, "data.path=some/path")
    data.check()


def test_presets_cover_every_kind():
    kinds = {composed_data(p.stem).kind for p in CONF.glob("*.yaml")}
    assert kinds == set(DataKind)
