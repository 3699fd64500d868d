"""Export to Hugging Face: tiny attnlab models with every parameter perturbed are exported (the config
and tensors of ``attnlab.models.hf.export``, written and loaded back by the architecture's own
``transformers`` class, ``attnlab.export.hf``), compared on padded batches in float32, and read back by
the same tables (``convert_checkpoint``) to the very same weights; models no architecture holds are
refused in one line naming the setting and the nearest architecture. ``tests/cli/test_export.py``
does the same through ``attnlab-export`` from trained checkpoints.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from attnlab.export.hf import load_checked, write_model
from attnlab.models import build_model
from attnlab.models.hf import convert_checkpoint
from attnlab.models.hf.export import choose_architecture, computed, export_checkpoint
from attnlab.models.hf.io import read_config, read_weights
from attnlab.schema.errors import ConfigError
from attnlab.schema.mixers import MixerSizes
from attnlab.schema.model import BertConfig, GPTConfig, ModelConfig, Seq2SeqConfig, ViTConfig
from attnlab.schema.pos import AlibiPos, RelativePos, RopePos, SinusoidalPos

pytest.importorskip("transformers")

TOL = 1e-5
VOCAB, BATCH, LEN = 50, 3, 12
GPT2 = GPTConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)
LLAMA = replace(
    GPT2,
    n_kv_heads=2,
    activation="swiglu",
    norm="rmsnorm",
    bias=False,
    tie_embeddings=False,
    pos=RopePos(rope_base=500.0, rope_scaling="yarn", rope_factor=2.0, rope_original_max_len=8),
)
BERT = BertConfig(
    vocab_size=VOCAB,
    d_model=32,
    n_layers=2,
    n_heads=4,
    max_seq_len=16,
    norm_first=False,
    embed_norm=True,
    type_vocab_size=2,
    classifier_hidden=True,
)
MARIAN = Seq2SeqConfig(
    vocab_size=VOCAB,
    d_model=32,
    n_layers=2,
    n_decoder_layers=2,
    n_heads=4,
    activation="silu",
    norm_first=False,
    max_seq_len=16,
    lm_head_bias=True,
    pos=SinusoidalPos(layout="concat"),
)
T5 = Seq2SeqConfig(
    vocab_size=VOCAB,
    d_model=32,
    n_layers=2,
    n_decoder_layers=2,
    n_heads=4,
    norm="rmsnorm",
    bias=False,
    attn_scale=1.0,
    embed_scale=False,
    tied_output_scale=True,
    max_seq_len=16,
    pos=RelativePos(num_buckets=8, max_distance=16),
)
CASES = {  # name -> (config, Hugging Face class)
    "gpt2": (GPT2, "GPT2LMHeadModel"),
    "gpt2-untied-gelu_tanh": (replace(GPT2, tie_embeddings=False, activation="gelu_tanh"), "GPT2LMHeadModel"),
    "llama-yarn-gqa": (LLAMA, "LlamaForCausalLM"),
    "llama-linear-tied": (
        replace(LLAMA, tie_embeddings=True, pos=RopePos(rope_scaling="linear", rope_factor=4.0)),
        "LlamaForCausalLM",
    ),
    "llama-ntk": (replace(LLAMA, pos=RopePos(rope_scaling="ntk", rope_factor=2.0)), "LlamaForCausalLM"),
    "mistral": (replace(LLAMA, attn_window=4), "MistralForCausalLM"),
    "qwen3": (replace(LLAMA, qk_norm=True), "Qwen3ForCausalLM"),
    "qwen3-mixed-windows": (
        replace(LLAMA, qk_norm=True, n_layers=4, attn_window=4, layout="full sliding ..."),
        "Qwen3ForCausalLM",
    ),
    "smollm3-nope": (
        replace(LLAMA, n_layers=4, attn_window=4, layout="3*full sliding+nope ...", pos=RopePos()),
        "SmolLM3ForCausalLM",
    ),
    "gemma2": (
        replace(
            LLAMA,
            n_layers=4,
            activation="geglu_tanh",
            tie_embeddings=True,
            post_norms=True,
            embed_scale=True,
            attn_scale=0.25,
            attn_softcap=2.0,
            logit_softcap=3.0,
            attn_backend="explicit",
            attn_window=4,
            layout="sliding full ...",
            pos=RopePos(rope_base=100.0),
        ),
        "Gemma2ForCausalLM",
    ),
    "phi3-partial-rope": (replace(LLAMA, pos=RopePos(rope_base=100.0, rope_fraction=0.5)), "Phi3ForCausalLM"),
    "deepseek_v3": (
        replace(
            LLAMA,
            mixer="latent",
            n_kv_heads=None,
            pos=RopePos(rope_base=500.0),
            mixers=MixerSizes(8, 12, 6, 4, 5, rope_interleave=True),  # kv, q latents; nope, rope, v widths
        ),
        "DeepseekV3ForCausalLM",
    ),
    "deepseek_v3-plain-queries": (
        replace(LLAMA, mixer="latent", n_kv_heads=None, pos=RopePos()),
        "DeepseekV3ForCausalLM",
    ),
    "diffllama-yarn": (replace(LLAMA, mixer="differential", n_layers=3), "DiffLlamaForCausalLM"),
    "qwen3_next": (
        replace(
            LLAMA,
            n_layers=4,
            qk_norm=True,
            attn_gate="elementwise",
            layout="3*deltanet attention ...",
            mixers=MixerSizes(linear_k_heads=2, linear_v_dim=6),
            pos=RopePos(rope_base=100.0, rope_fraction=0.25),
        ),
        "Qwen3NextForCausalLM",
    ),
    "bloom": (replace(GPT2, pos=AlibiPos(), embed_norm=True, activation="gelu_tanh"), "BloomForCausalLM"),
    "bert-mlm": (BERT, "BertForMaskedLM"),
    "bert-mlm-no-segments": (replace(BERT, type_vocab_size=0), "BertForMaskedLM"),
    "bert-classifier": (replace(BERT, mlm_head=False, num_classes=3), "BertForSequenceClassification"),
    "marian": (MARIAN, "MarianMTModel"),
    "t5-v1.0": (T5, "T5ForConditionalGeneration"),
    "t5-v1.1": (
        replace(T5, activation="geglu_tanh", tie_embeddings=False, tied_output_scale=False),
        "T5ForConditionalGeneration",
    ),
    "vit": (
        ViTConfig(d_model=32, n_layers=2, n_heads=4, image_size=8, patch_size=2, channels=3, num_classes=5),
        "ViTForImageClassification",
    ),
}


def perturbed(cfg: ModelConfig) -> nn.Module:
    """The attnlab model of ``cfg`` with every parameter moved off its initial value, in eval mode."""
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def padded() -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and a right-padding mask: rows of 12, 8 and 4 real tokens."""
    ids = torch.randint(0, VOCAB, (BATCH, LEN))
    return ids, (torch.arange(LEN) < torch.tensor([12, 8, 4])[:, None]).long()


def outputs(ours: nn.Module, hf: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Both models' logits on one padded batch, at the real positions (or per row, for classes)."""
    if ours.family == "vit":
        images = torch.randn(BATCH, ours.cfg.channels, ours.cfg.image_size, ours.cfg.image_size)
        return hf(images).logits, ours(images)
    ids, mask = padded()
    if ours.family == "seq2seq":
        tgt, tgt_mask = ids[:, :7], mask[:, :7]
        theirs = hf(
            input_ids=ids, attention_mask=mask, decoder_input_ids=tgt, decoder_attention_mask=tgt_mask
        ).logits
        return theirs[tgt_mask.bool()], ours(ids, tgt, mask, tgt_mask)[tgt_mask.bool()]
    theirs = hf(ids, attention_mask=mask).logits
    if ours.family == "gpt":
        return theirs[mask.bool()], ours(ids, attention_mask=mask)[mask.bool()]
    hidden = ours(ids, mask)
    if ours.cfg.num_classes:
        return theirs, ours.classify(hidden, mask)
    return theirs[mask.bool()], ours.mlm_logits(hidden)[mask.bool()]


@pytest.mark.parametrize("case", list(CASES))
def test_exported_model_computes_attnlabs_logits_and_reads_back_identically(
    case: str, tmp_path: Path
) -> None:
    cfg, cls = CASES[case]
    ours = perturbed(cfg)
    hf_config, tensors = export_checkpoint(cfg, ours.state_dict())
    assert hf_config["architectures"] == [cls]
    write_model(hf_config, tensors, tmp_path / case)
    hf = load_checked(tmp_path / case, attn_implementation="eager")  # not the SDPA kernel attnlab calls
    assert type(hf).__name__ == cls
    with torch.no_grad():
        theirs, mine = outputs(ours, hf)
    assert mine.abs().max() > 0.1  # not vacuous
    assert (theirs - mine).abs().max().item() < TOL

    back_cfg, back = convert_checkpoint(
        read_config(tmp_path / case), read_weights(tmp_path / case)
    )  # on disk
    assert computed(back_cfg) == computed(cfg)
    state = ours.state_dict()
    extra = {"embed.segments.weight"} if cfg.family == "bert" and not cfg.type_vocab_size else set()
    assert all(torch.equal(back[k], state[k]) for k in back if k not in extra)
    tied = {k for k in state if k not in back}  # the output projection of a tied model: the token table
    assert all(
        any(state[k].data_ptr() == v.data_ptr() for v in state.values() if v is not state[k]) for k in tied
    )
    assert all(not back[k].any() for k in extra)  # BERT's segment row of zeros adds nothing


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (
            replace(GPT2, pos=AlibiPos()),
            "model.pos.name=alibi: no Hugging Face architecture holds this model; the nearest, "
            "GPT2LMHeadModel, needs model.pos.name=learned",
        ),
        (
            replace(BERT, attn_window=4),
            "model.attn_window=4: no Hugging Face architecture holds this model; the nearest, "
            "BertForMaskedLM, needs model.attn_window=null",
        ),
        (
            replace(T5, pos=AlibiPos()),
            "model.pos.name=alibi: no Hugging Face architecture holds this model; the nearest, "
            "T5ForConditionalGeneration, needs model.pos.name=relative",
        ),
        (
            replace(GPT2, kept_heads=[[0, 1], [2]]),
            "model.kept_heads=[[0,1],[2]]: no Hugging Face architecture holds this model; the nearest, "
            "GPT2LMHeadModel, needs model.kept_heads=null",
        ),
        (
            replace(LLAMA, activation="gelu"),
            "model.activation=gelu: no Hugging Face architecture holds this model; the nearest, "
            "LlamaForCausalLM, needs model.activation=swiglu",
        ),
        (
            replace(GPT2, parametrization="mup"),  # μP's output multiplier: no HF config holds it
            "model.parametrization=mup: no Hugging Face architecture holds this model; the nearest, "
            "GPT2LMHeadModel, needs model.parametrization=sp",
        ),
        (
            # Qwen3-Next's gate without its QK-norm: Llama and Qwen3-Next are one setting away, the first is named
            replace(LLAMA, attn_gate="elementwise"),
            "model.attn_gate=elementwise: no Hugging Face architecture holds this model; the nearest, "
            "LlamaForCausalLM, needs model.attn_gate=none",
        ),
        (
            replace(LLAMA, attn_sink="learned"),  # gpt-oss's sinks: its whole model is not mapped
            "model.attn_sink=learned: no Hugging Face architecture holds this model; the nearest, "
            "LlamaForCausalLM, needs model.attn_sink=none",
        ),
        (
            replace(LLAMA, value_residual=0.5),
            "model.value_residual=0.5: no Hugging Face architecture holds this model; the nearest, "
            "LlamaForCausalLM, needs model.value_residual=null",
        ),
        (
            replace(GPT2, d_ff=0),
            "model.d_ff=0: attention-only layers: no Hugging Face architecture has a layer without a "
            "feed-forward",
        ),
        (
            replace(BERT, norm_first=True),
            "model.norm_first=true: no Hugging Face architecture holds this model; the nearest, "
            "BertForMaskedLM, needs model.norm_first=false",
        ),
    ],
)
def test_a_model_no_architecture_holds_is_refused_naming_the_setting(cfg: ModelConfig, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        choose_architecture(cfg)
    assert str(err.value) == message


def test_training_only_settings_do_not_stop_an_export() -> None:
    cfg = replace(GPT2, dropout=0.1, attn_dropout=0.1, init_std=0.05, d_ff=None, ffn_mult=4.0)
    arch, hf_config = choose_architecture(cfg)
    assert (arch.model_type, hf_config["n_inner"], hf_config["resid_pdrop"]) == ("gpt2", 128, 0.1)


SPELLED = (
    "a <pad> b <bos><eos> <s></s> <unk> [CLS] <|endoftext|>\nend <mask>\n"  # specials' spellings as text
)


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_the_exported_tokenizer_encodes_special_spellings_as_text_as_attnlab_does(
    kind: str, tmp_path: Path
) -> None:
    """attnlab never turns text into a special id ("<pad>" in a corpus is five characters): the
    tokenizer ``transformers`` loads from the export gives the same ids, for any text."""
    from transformers import AutoTokenizer

    from attnlab.data.tokenizers import char_tokenizer, train_bpe
    from attnlab.export.hf import hf_tokenizer

    roles = ("pad", "unk", "bos", "eos", "mask")
    corpus = SPELLED * 3 + "The quick brown fox jumps over the lazy dog.\n"
    ours = char_tokenizer([corpus], roles) if kind == "char" else train_bpe([corpus] * 5, 300, roles)
    hf_tokenizer(ours, perturbed(GPT2)).save_pretrained(tmp_path)
    theirs = AutoTokenizer.from_pretrained(tmp_path)

    ids = ours.encode(corpus)
    assert not set(ids) & set(ours.special_ids.values())  # the spellings stayed text
    assert theirs(corpus)["input_ids"] == ids
    assert theirs(SPELLED.splitlines(keepends=True))["input_ids"] == ours.encode_batch(
        SPELLED.splitlines(keepends=True)
    )
    assert theirs.pad_token_id == ours.pad_id and theirs.eos_token_id == ours.eos_id
    assert theirs.decode(ids) == corpus


def test_a_char_vocabulary_that_cannot_spell_a_special_keeps_specials_matched(tmp_path: Path) -> None:
    """Tiny Shakespeare has no "<": no text attnlab encodes holds "<eos>", and the exported tokenizer
    still encodes the spelling as the special (lm-eval's Hugging Face backend encodes "<eos>" as a
    stop sequence)."""
    from transformers import AutoTokenizer

    from attnlab.data.tokenizers import char_tokenizer
    from attnlab.export.hf import hf_tokenizer

    ours = char_tokenizer(["First Citizen:\nBefore we proceed\n"], ("pad", "eos"))
    hf_tokenizer(ours, perturbed(GPT2)).save_pretrained(tmp_path)
    theirs = AutoTokenizer.from_pretrained(tmp_path)
    assert theirs.encode("<eos>") == [ours.eos_id]
    assert theirs("Before we\n")["input_ids"] == ours.encode("Before we\n")
