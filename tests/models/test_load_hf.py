"""``attnlab.load_hf``: local Hugging Face checkpoint directories in, attnlab models out, bad ones refused."""

from __future__ import annotations

import dataclasses
import json
import logging
import pkgutil
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from cases import CASES, TOL, diff, reference, transformers
from safetensors.torch import load_file, save_file

import attnlab
import attnlab.models.hf as attnlab_hf
import attnlab.models.hf.convert as hf_convert
from attnlab.models.hf import model_config_from_hf


def save(hf: torch.nn.Module, path: Path, fmt: str) -> Path:
    """``save_pretrained``, then rewritten as ``fmt``: safetensors, bin (transformers 4 style) or sharded."""
    hf.save_pretrained(path, max_shard_size="20KB" if fmt == "sharded" else "50GB")
    if fmt == "bin":
        torch.save(load_file(path / "model.safetensors"), path / "pytorch_model.bin")
        (path / "model.safetensors").unlink()
    return path


def edit_config(path: Path, drop: tuple[str, ...] = (), **changes: object) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    for key in drop:
        del config[key]
    (path / "config.json").write_text(json.dumps(config))


def edit_weights(path: Path, change: Callable[[dict], None]) -> None:
    tensors = load_file(path / "model.safetensors")
    change(tensors)
    save_file(tensors, path / "model.safetensors")


@pytest.fixture
def gpt2_dir(tmp_path: Path) -> Path:
    return save(CASES["GPT-2"][0](), tmp_path, "safetensors")


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("GPT-2", "safetensors"),
        ("BERT (masked LM)", "bin"),
        ("ViT", "sharded"),
        ("Marian", "safetensors"),
        ("T5 v1.1 (gated-gelu)", "sharded"),
        ("Llama (GQA)", "bin"),
        ("BLOOM", "safetensors"),
        ("Llama (RoPE linear)", "safetensors"),
        ("Llama (RoPE dynamic NTK)", "bin"),
        ("Llama (RoPE YaRN)", "safetensors"),
        ("Mistral (sliding window)", "bin"),
        ("Qwen3 (QK-norm, sliding window)", "sharded"),
    ],
)
@torch.no_grad()
def test_saved_checkpoint_loads_with_the_same_outputs(name: str, fmt: str, tmp_path: Path) -> None:
    build, compare = CASES[name]
    hf = build()
    model = attnlab.load_hf(save(hf, tmp_path, fmt))
    assert not model.training
    for output, (value, _) in compare(hf, model).diffs.items():
        assert value <= TOL, f"{name} from {fmt}: {output} differs by {value:.2e}"


def test_model_config_reads_only_config_json(gpt2_dir: Path) -> None:
    (gpt2_dir / "model.safetensors").unlink()
    cfg = model_config_from_hf(gpt2_dir, dropout=0.0)
    assert (
        cfg.family,
        cfg.pos.name,
        cfg.vocab_size,
        cfg.d_model,
        cfg.n_layers,
        cfg.n_heads,
        cfg.max_seq_len,
    ) == (
        "gpt",
        "learned",
        64,
        32,
        2,
        4,
        16,
    )
    assert cfg.dropout == 0.0


def test_overrides_replace_config_fields(gpt2_dir: Path) -> None:
    model = attnlab.load_hf(gpt2_dir, dropout=0.0, attn_dropout=0.0)
    assert (model.cfg.dropout, model.cfg.attn_dropout) == (0.0, 0.0)
    with pytest.raises(ValueError, match=r"unknown GPTConfig override\(s\) nope; fields are .*d_model"):
        attnlab.load_hf(gpt2_dir, nope=1)


@torch.no_grad()
def test_transformers4_t5_v1_1_loads_untied(tmp_path: Path) -> None:
    """transformers 4 saved T5 v1.1 with tie_word_embeddings=false and its own lm_head.weight."""
    hf = CASES["T5 v1.1 (gated-gelu)"][0]()
    save(hf, tmp_path, "safetensors")
    edit_config(
        tmp_path, drop=("scale_decoder_outputs",), tie_word_embeddings=False
    )  # as transformers 4 wrote it
    edit_weights(tmp_path, lambda t: t.__setitem__("lm_head.weight", t["shared.weight"].clone()))
    model = attnlab.load_hf(tmp_path)
    assert (model.cfg.tie_embeddings, model.cfg.tied_output_scale) == (False, False)
    assert model.lm_head.proj is not None
    assert CASES["T5 v1.1 (gated-gelu)"][1](hf, model).diffs["logits"][0] <= TOL  # same matrix, same logits


@torch.no_grad()
def test_encoder_without_classifier_gets_a_fresh_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=16,
    )
    hf = reference(transformers.BertModel, config)
    hf.save_pretrained(tmp_path)
    x = torch.randint(0, 64, (2, 7))
    with caplog.at_level(logging.WARNING):
        model = attnlab.load_hf(tmp_path, num_classes=3)
    assert "cls_head.classifier.weight" in caplog.text
    assert diff(hf(x).last_hidden_state, model(x))[0] <= TOL
    assert torch.equal(model.cls_head.pre[0].weight, hf.pooler.dense.weight)  # BERT's pooler is kept
    assert model.classify(model(x)).shape == (2, 3)
    assert attnlab.load_hf(tmp_path).cls_head is None  # without num_classes the pooler is left out


@torch.no_grad()
def test_vit_backbone_gives_features(tmp_path: Path) -> None:
    config = transformers.ViTConfig(
        image_size=16,
        patch_size=4,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
    )
    hf = reference(transformers.ViTModel, config)
    hf.save_pretrained(tmp_path)
    images = torch.randn(2, 3, 16, 16)
    model = attnlab.load_hf(tmp_path)
    assert diff(hf(images).last_hidden_state, model.features(images))[0] <= TOL


def test_missing_directory_config_or_weights(tmp_path: Path, gpt2_dir: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=f"directory {re.escape(str(tmp_path / 'absent'))} does not exist"
    ):
        attnlab.load_hf(tmp_path / "absent")
    (gpt2_dir / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"no weights in .*: expected one of model\.safetensors, "):
        attnlab.load_hf(gpt2_dir)
    (gpt2_dir / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"config\.json not found"):
        attnlab.load_hf(gpt2_dir)


def test_missing_shard(tmp_path: Path) -> None:
    save(CASES["GPT-2"][0](), tmp_path, "sharded")
    shard = sorted(tmp_path.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(
        FileNotFoundError, match=f"{re.escape(shard.name)} not found \\(listed in .*index.json\\)"
    ):
        attnlab.load_hf(tmp_path)


@pytest.mark.parametrize(
    ("model_type", "architecture"),
    [("roberta", "RobertaForMaskedLM"), ("gpt2", "GPT2ForSequenceClassification")],
)
def test_unsupported_architecture(gpt2_dir: Path, model_type: str, architecture: str) -> None:
    edit_config(gpt2_dir, model_type=model_type, architectures=[architecture])
    message = f"unsupported architecture '{architecture}' \\(model_type '{model_type}'\\); attnlab loads GPT2LMHeadModel"
    with pytest.raises(ValueError, match=message):
        attnlab.load_hf(gpt2_dir)
    with pytest.raises(ValueError, match=message):
        model_config_from_hf(gpt2_dir)


def test_unsupported_option_or_missing_key(gpt2_dir: Path) -> None:
    edit_config(gpt2_dir, scale_attn_by_inverse_layer_idx=True)
    with pytest.raises(
        ValueError, match="GPT2LMHeadModel: scale_attn_by_inverse_layer_idx=True is not supported"
    ):
        attnlab.load_hf(gpt2_dir)
    edit_config(gpt2_dir, drop=("n_embd",), scale_attn_by_inverse_layer_idx=False)
    with pytest.raises(ValueError, match=r"config\.json lacks 'n_embd', which GPT2LMHeadModel needs"):
        attnlab.load_hf(gpt2_dir)


def test_shape_mismatch_names_parameter_and_shapes(gpt2_dir: Path) -> None:
    edit_config(gpt2_dir, vocab_size=65)  # the weights say 64
    message = (
        "shape mismatch for embed.tokens.weight (checkpoint wte.weight): checkpoint has (64, 32), the model "
    )
    with pytest.raises(ValueError, match=re.escape(message) + r"built from config\.json has \(65, 32\)"):
        attnlab.load_hf(gpt2_dir)


def test_missing_and_unexpected_tensors(gpt2_dir: Path) -> None:
    edit_weights(gpt2_dir, lambda t: t.pop("transformer.h.1.ln_2.bias"))
    with pytest.raises(ValueError, match=r"missing in the checkpoint: stack\.layers\.1\.ffn\.norm\.bias$"):
        attnlab.load_hf(gpt2_dir)
    edit_weights(
        gpt2_dir,
        lambda t: t.update({"transformer.h.1.ln_2.bias": torch.zeros(32), "extra.weight": torch.ones(2)}),
    )
    with pytest.raises(ValueError, match=r"unexpected tensors in the checkpoint .*: extra\.weight$"):
        attnlab.load_hf(gpt2_dir)


def test_unreadable_files(gpt2_dir: Path) -> None:
    (gpt2_dir / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match=r"model\.safetensors: cannot read weights"):
        attnlab.load_hf(gpt2_dir)
    (gpt2_dir / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json is not valid JSON"):
        attnlab.load_hf(gpt2_dir)


def test_heads_left_out_by_overrides(tmp_path: Path) -> None:
    save(CASES["BERT (masked LM)"][0](), tmp_path, "safetensors")
    model = attnlab.load_hf(tmp_path, mlm_head=False, num_classes=2)
    assert model.mlm_head is None and model.cls_head is not None


def test_malformed_index_or_config_names_the_file(tmp_path: Path) -> None:
    save(CASES["GPT-2"][0](), tmp_path, "sharded")
    index = tmp_path / "model.safetensors.index.json"
    for text, error in (("{broken", "JSONDecodeError"), ('{"metadata": {}}', "KeyError: 'weight_map'")):
        index.write_text(text)
        with pytest.raises(ValueError, match=rf"index\.json is not a weight index, .*\({error}"):
            attnlab.load_hf(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"config\.json must hold a JSON object, not a list$"):
        model_config_from_hf(tmp_path)


def test_every_architecture_module_is_listed() -> None:
    """A module missing from ARCHITECTURE_MODULES would never be imported, so never registered."""
    machinery = {"config_keys", "convert", "export", "io", "layouts", "spec"}
    modules = {m.name for m in pkgutil.iter_modules(attnlab_hf.__path__)}
    assert modules - machinery == set(attnlab_hf.ARCHITECTURE_MODULES)


@torch.no_grad()
def test_a_registered_architecture_loads(gpt2_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding an architecture is one register() call: lookup, loading and the error message follow."""
    monkeypatch.setattr(hf_convert, "ARCHITECTURES", dict(hf_convert.ARCHITECTURES))
    gpt2 = attnlab.load_hf(gpt2_dir)
    copy = dataclasses.replace(attnlab_hf.ARCHITECTURES["gpt2"], model_type="gpt2-copy", classes=("CopyLM",))
    attnlab_hf.register(copy)
    edit_config(gpt2_dir, model_type="gpt2-copy", architectures=["CopyLM"])
    model = attnlab.load_hf(gpt2_dir)
    assert model.cfg == gpt2.cfg
    ours, theirs = model.state_dict(), gpt2.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(t, theirs[k]) for k, t in ours.items())
    with pytest.raises(ValueError, match="model_type 'gpt2-copy' is registered twice"):
        attnlab_hf.register(copy)
    edit_config(gpt2_dir, model_type="gpt3", architectures=["GPT3"])
    with pytest.raises(
        ValueError,
        match=r"attnlab loads GPT2LMHeadModel, .*, BloomModel, MistralForCausalLM, Qwen3ForCausalLM, SmolLM3ForCausalLM, "
        r"Gemma2ForCausalLM, Phi3ForCausalLM, DeepseekV3ForCausalLM, DiffLlamaForCausalLM, Qwen3NextForCausalLM, "
        r"CopyLM$",
    ):
        attnlab.load_hf(gpt2_dir)


@pytest.mark.parametrize("spelling", ["type", "rope_type"])
@torch.no_grad()
def test_transformers4_rope_scaling_spelling_loads(spelling: str, tmp_path: Path) -> None:
    """transformers 4 wrote ``rope_scaling`` (its oldest files with ``type``) and a top-level ``rope_theta``."""
    build, compare = CASES["Llama (RoPE dynamic NTK)"]
    hf = build()
    path = save(hf, tmp_path, "safetensors")
    edit_config(
        path, drop=("rope_parameters",), rope_theta=100.0, rope_scaling={spelling: "dynamic", "factor": 3.0}
    )
    model = attnlab.load_hf(path)
    assert (model.cfg.pos.rope_scaling, model.cfg.pos.rope_factor, model.cfg.pos.rope_base) == (
        "ntk",
        3.0,
        100.0,
    )
    for output, (value, _) in compare(hf, model).diffs.items():
        assert value <= TOL, f"{output} differs by {value:.2e}"


@torch.no_grad()
def test_yarn_without_factor_takes_it_from_the_lengths(tmp_path: Path) -> None:
    """DeepSeek-V3's spelling: no factor, max_position_embeddings / original_max_position_embeddings."""
    build, compare = CASES["Llama (RoPE YaRN)"]
    hf = build()
    path = save(hf, tmp_path, "safetensors")
    rope = json.loads((path / "config.json").read_text())["rope_parameters"]
    edit_config(path, rope_parameters={k: v for k, v in rope.items() if k != "factor"})
    model = attnlab.load_hf(path)
    assert (model.cfg.pos.rope_scaling, model.cfg.pos.rope_factor) == ("yarn", 4.0)
    for output, (value, _) in compare(hf, model).diffs.items():
        assert value <= TOL, f"{output} differs by {value:.2e}"


@pytest.mark.parametrize(
    ("rope", "message"),
    [
        (
            {"rope_type": "llama3", "factor": 8.0},
            r"rope_type='llama3' is not supported \(attnlab reproduces default, ",
        ),
        ({"rope_type": "longrope", "factor": 8.0}, r"rope_type='longrope' is not supported"),
        (
            {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5},
            r"partial_rotary_factor=0.5 is not",
        ),
        (
            {"rope_type": "yarn"},
            r"config\.json lacks 'rope_parameters\.factor', which LlamaForCausalLM needs",
        ),
    ],
)
def test_unsupported_rope_scaling_is_one_line(rope: dict, message: str, tmp_path: Path) -> None:
    path = save(CASES["Llama (GQA)"][0](), tmp_path, "safetensors")
    edit_config(path, rope_parameters={"rope_theta": 10000.0, **rope})
    with pytest.raises(ValueError, match=message) as err:
        attnlab.load_hf(path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(head_dim=16), r"Qwen3ForCausalLM: head_dim=16 is not supported \(attnlab needs 8\)"),
        (
            dict(layer_types=["full_attention", "sliding_attention", "full_attention"]),
            r"Qwen3ForCausalLM: layer_types or no_rope_layers do not have num_hidden_layers=2 entries",
        ),
    ],
    ids=["head_dim", "layer-types-length"],
)
def test_qwen3_options_attnlab_cannot_reproduce_are_one_line(
    changes: dict, message: str, tmp_path: Path
) -> None:
    path = save(CASES["Qwen3 (QK-norm, sliding window)"][0](), tmp_path, "safetensors")
    edit_config(path, **changes)
    with pytest.raises(ValueError, match=message) as err:
        attnlab.load_hf(path)
    assert "\n" not in str(err.value)


def test_full_attention_qwen3_has_no_window(tmp_path: Path) -> None:
    """``use_sliding_window=false`` (Qwen3's default) ignores ``sliding_window``."""
    path = save(CASES["Qwen3 (QK-norm, GQA)"][0](), tmp_path, "safetensors")
    cfg = model_config_from_hf(path)
    assert (cfg.qk_norm, cfg.attn_window) == (True, None)


# -- what model.init_from refuses before a run exists -------------------------------------------------


def init_from_error(path: Path) -> str:
    """The one line of attnlab-train's check of ``model.init_from=<path>`` (before its run directory)."""
    from attnlab.run.pretrained import resolve_init_from
    from attnlab.schema.errors import ConfigError
    from attnlab.schema.run import RunConfig

    run = RunConfig()
    with pytest.raises(ConfigError) as err:
        resolve_init_from(dataclasses.replace(run, model=dataclasses.replace(run.model, init_from=str(path))))
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(
    "asks", [{"auto_map": {"AutoModel": "modeling_evil.EvilModel"}}, {"trust_remote_code": True}]
)
def test_a_config_asking_for_remote_code_is_refused(gpt2_dir: Path, asks: dict) -> None:
    edit_config(gpt2_dir, **asks)
    (key,) = asks
    message = (
        f"{gpt2_dir / 'config.json'} asks for code shipped with the checkpoint ({key}): attnlab runs none"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        attnlab.load_hf(gpt2_dir)
    assert init_from_error(gpt2_dir).startswith(f"model.init_from={gpt2_dir}: {message}")


class RunsCode:
    """Unpickled, it would create ``marker``: what a poisoned weight file does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_a_pickled_bin_is_refused_in_one_line_without_torchs_advice(gpt2_dir: Path) -> None:
    (gpt2_dir / "model.safetensors").unlink()
    torch.save({"wte.weight": RunsCode(gpt2_dir / "ran")}, gpt2_dir / "pytorch_model.bin")
    line = init_from_error(gpt2_dir)
    assert line == (
        f"model.init_from={gpt2_dir}: {gpt2_dir / 'pytorch_model.bin'}: holds pickled objects beyond tensors "
        "and plain data, which could run code, so it is not loaded"
    )
    with pytest.raises(ValueError, match="could run code"):
        attnlab.load_hf(gpt2_dir)
    assert not (gpt2_dir / "ran").exists()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda d: (d / "model.safetensors").write_bytes(
                b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}"
            ),
            "model.safetensors: cannot read weights (",
        ),
        (lambda d: (d / "model.safetensors").write_bytes(b""), "model.safetensors: cannot read weights ("),
        (
            lambda d: edit_config(d, vocab_size=65),
            "shape mismatch for embed.tokens.weight (checkpoint wte.weight)",
        ),
    ],
)
def test_damaged_weights_are_one_line_naming_init_from(
    gpt2_dir: Path, damage: Callable, message: str
) -> None:
    """Found from the files' headers before the run: they were found after its directory existed."""
    damage(gpt2_dir)
    line = init_from_error(gpt2_dir)
    assert line.startswith(f"model.init_from={gpt2_dir}: ") and message in line


def test_a_linked_weight_file_is_read_where_it_leads_and_named_where_it_fails(
    gpt2_dir: Path, tmp_path: Path
) -> None:
    """A Hugging Face cache links its snapshot's files to blobs: a link to weights reads; a link to
    anything else, or to nothing, is one line naming the setting."""
    blob = tmp_path / "blob"
    (gpt2_dir / "model.safetensors").rename(blob)
    (gpt2_dir / "model.safetensors").symlink_to(blob)
    assert model_config_from_hf(gpt2_dir) == attnlab_hf.check_hf_checkpoint(gpt2_dir)
    blob.write_text("not weights")
    assert "model.safetensors: cannot read weights" in init_from_error(gpt2_dir)
    blob.unlink()
    assert init_from_error(gpt2_dir).startswith(f"model.init_from={gpt2_dir}: no weights in {gpt2_dir}")


def test_an_index_naming_a_shard_elsewhere_is_refused(tmp_path: Path) -> None:
    save(CASES["GPT-2"][0](), tmp_path, "sharded")
    index = tmp_path / "model.safetensors.index.json"
    weights = json.loads(index.read_text())
    weights["weight_map"] = {name: "../secret.safetensors" for name in weights["weight_map"]}
    index.write_text(json.dumps(weights))
    assert init_from_error(tmp_path).endswith(f"{index} lists '../secret.safetensors', not a file beside it")
