"""The mixers' whole models both ways: an all-dense DeepSeek-V3 (latent attention), DiffLlama
(differential attention) and a dense Qwen3-Next (three gated DeltaNet layers to one gated, QK-normed,
partial-RoPE attention layer), as tiny random ``transformers`` models built from config objects.

Every parameter is perturbed (norm gains, λ vectors, A_log, dt_bias and the convolution too); float32,
eager attention, right- and left-padded batches, logits compared at the real tokens:

- ``from_transformers`` and ``load_hf`` (the code of ``model.init_from``) give Hugging Face's logits;
- ``load_hf`` then export writes back every tensor of the checkpoint bit for bit, under its name, and
  a config that reads back to the same model; the ``1 + weight`` RMSNorms of Qwen3-Next are exact up to
  what Hugging Face computes with, ``1 + weight`` in float32 (``weight`` itself cannot be recovered from
  that sum below its last bit);
- what cannot map (mixture-of-experts layers, a scaled RoPE under latent attention, ...) is refused in
  one line naming the config key and value; models export can only nearly hold name the setting.

Export of models trained from scratch: ``tests/models/test_hf_export.py`` (perturbed) and
``tests/cli/test_export.py`` (trained by attnlab-train, loaded by ``AutoModelForCausalLM``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from attnlab.models.hf import check_hf_checkpoint, from_transformers, hf_model_config, load_hf
from attnlab.models.hf.export import choose_architecture, computed, export_checkpoint
from attnlab.models.hf.io import read_weights
from attnlab.schema.errors import ConfigError
from attnlab.schema.mixers import MixerSizes
from attnlab.schema.model import GPTConfig
from attnlab.schema.pos import RopePos

transformers = pytest.importorskip("transformers")

TOL = 1e-5
VOCAB, BATCH, LEN = 64, 3, 9


def reference(cls: type, config: object) -> nn.Module:
    """A Hugging Face model with eager attention and every parameter perturbed."""
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def deepseek_v3(q_lora_rank: int | None = 8, interleave: bool = True) -> nn.Module:
    config = transformers.DeepseekV3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        first_k_dense_replace=2,  # every layer dense
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=12,
        qk_nope_head_dim=6,
        qk_rope_head_dim=4,
        v_head_dim=5,
        rope_interleave=interleave,
        max_position_embeddings=32,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    )
    return reference(transformers.DeepseekV3ForCausalLM, config)


def diffllama() -> nn.Module:
    config = transformers.DiffLlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,  # λ_init differs per layer
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    )
    return reference(transformers.DiffLlamaForCausalLM, config)


QWEN3_NEXT = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,  # linear, linear, linear, full: its default layer_types
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    linear_num_value_heads=4,
    linear_num_key_heads=2,  # two value heads per key head
    linear_key_head_dim=8,
    linear_value_head_dim=6,
    max_position_embeddings=32,
    rope_parameters={"rope_type": "default", "rope_theta": 100.0, "partial_rotary_factor": 0.5},
)


def qwen3_next(dense_by: str = "num_experts") -> nn.Module:
    """Dense by ``num_experts=0``, or by ``mlp_only_layers`` listing every layer (experts configured)."""
    moe = (
        {"num_experts": 0}
        if dense_by == "num_experts"
        else {"num_experts": 4, "mlp_only_layers": [0, 1, 2, 3]}
    )
    return reference(transformers.Qwen3NextForCausalLM, transformers.Qwen3NextConfig(**QWEN3_NEXT, **moe))


CASES = {  # name -> (reference, what the mapping must choose)
    "deepseek_v3": (
        deepseek_v3,
        dict(mixer="latent", mixers=MixerSizes(12, 8, 6, 4, 5, rope_interleave=True), n_kv_heads=None),
    ),
    "deepseek_v3-plain-queries-halves": (
        lambda: deepseek_v3(None, False),
        dict(mixer="latent", mixers=MixerSizes(12, None, 6, 4, 5, rope_interleave=False)),
    ),
    "diffllama": (diffllama, dict(mixer="differential", n_kv_heads=2, layout=None)),
    "qwen3_next": (
        qwen3_next,
        dict(
            layout=["full+deltanet"] * 3 + ["full"],
            qk_norm=True,
            attn_gate="elementwise",
            mixers=MixerSizes(linear_heads=4, linear_k_heads=2, linear_k_dim=8, linear_v_dim=6),
        ),
    ),
    "qwen3_next-mlp_only_layers": (lambda: qwen3_next("mlp_only_layers"), dict(qk_norm=True)),
}


def batches() -> list[tuple[Tensor, Tensor]]:
    """Token ids with a right-padded and a left-padded mask (rows of 9, 6 and 3 real tokens)."""
    ids = torch.randint(0, VOCAB, (BATCH, LEN), generator=torch.Generator().manual_seed(1))
    right = (torch.arange(LEN) < torch.tensor([9, 6, 3])[:, None]).long()
    return [(ids, right), (ids, right.flip(1))]


def max_diff(hf: nn.Module, ours: nn.Module) -> float:
    """The largest logit difference at real tokens over both padded batches."""
    worst = 0.0
    for ids, mask in batches():
        with torch.no_grad():
            theirs, mine = hf(ids, attention_mask=mask).logits, ours(ids, attention_mask=mask)
        real = mask.bool()
        assert theirs[real].abs().max() > 0.5  # not vacuous
        worst = max(worst, (theirs - mine)[real].abs().max().item())
    return worst


@pytest.mark.parametrize("case", list(CASES))
def test_the_loaded_model_computes_transformers_logits(case: str) -> None:
    build, expected = CASES[case]
    hf = build()
    ours = from_transformers(hf)
    assert {k: getattr(ours.cfg, k) for k in expected} == expected
    assert max_diff(hf, ours) <= TOL


@pytest.mark.parametrize("case", list(CASES))
def test_load_hf_then_export_writes_back_every_tensor(case: str, tmp_path: Path) -> None:
    """model.init_from's path (check, then load from disk), then export: the same tensors and config."""
    hf = CASES[case][0]()
    hf.save_pretrained(tmp_path)
    cfg = check_hf_checkpoint(tmp_path)
    ours = load_hf(tmp_path)
    assert ours.cfg == cfg
    assert max_diff(hf, ours) <= TOL

    hf_config, tensors = export_checkpoint(ours.cfg, ours.state_dict())
    assert hf_config["architectures"] == [type(hf).__name__]
    assert computed(hf_model_config(hf_config)) == computed(ours.cfg)
    original = {k.removeprefix("model."): t for k, t in read_weights(tmp_path).items()}
    assert tensors.keys() == original.keys()
    plus_one = "next" in case  # Qwen3-Next's RMSNorms multiply by 1 + weight; its DeltaNet norm does not
    for name, t in tensors.items():
        if plus_one and name.endswith("norm.weight") and ".linear_attn.norm." not in name:
            assert torch.equal(1.0 + t, 1.0 + original[name]), name
        else:
            assert torch.equal(t, original[name]), name


def hf_dict(build: object, **changes: object) -> dict:
    """The config.json of a case's reference with ``changes`` (None removes a key)."""
    hf = build()
    config = {**hf.config.to_dict(), "architectures": [type(hf).__name__]}
    config |= changes
    return {k: v for k, v in config.items() if v is not None}


@pytest.mark.parametrize(
    ("build", "changes", "message"),
    [
        (
            deepseek_v3,
            dict(first_k_dense_replace=1),
            "first_k_dense_replace=1 makes layer 1 mixture-of-experts, which attnlab does not build "
            "(a dense model needs first_k_dense_replace=2)",
        ),
        (
            deepseek_v3,
            dict(first_k_dense_replace=None, num_hidden_layers=4),  # its default, 3
            "first_k_dense_replace=3 makes layer 3 mixture-of-experts, which attnlab does not build "
            "(a dense model needs first_k_dense_replace=4)",
        ),
        (
            deepseek_v3,
            dict(
                rope_parameters={
                    "rope_type": "yarn",
                    "rope_theta": 500.0,
                    "factor": 4.0,
                    "original_max_position_embeddings": 8,
                }
            ),
            "rope_parameters.rope_type='yarn' is not supported for DeepSeek-V3 (its latent attention "
            "rotates with an unscaled RoPE in attnlab: rope_type 'default')",
        ),
        (
            deepseek_v3,
            dict(num_key_value_heads=2),
            "num_key_value_heads=2 is not supported (attnlab needs 4)",
        ),
        (
            deepseek_v3,
            dict(attention_bias=True),
            "attention_bias=True is not supported (attnlab needs False)",
        ),
        (diffllama, dict(attention_bias=True), "attention_bias=True is not supported (attnlab needs False)"),
        (
            qwen3_next,
            dict(num_experts=4),
            "num_experts=4 makes layers [0, 1, 2, 3] mixture-of-experts, which attnlab does not build "
            "(a dense model needs num_experts=0, or mlp_only_layers listing every layer)",
        ),
        (
            qwen3_next,
            dict(num_experts=4, mlp_only_layers=[0, 1], decoder_sparse_step=2),
            "num_experts=4 makes layers [3] mixture-of-experts, which attnlab does not build "
            "(a dense model needs num_experts=0, or mlp_only_layers listing every layer)",
        ),
        (qwen3_next, dict(head_dim=16), "head_dim=16 is not supported (attnlab needs 8)"),
        (
            qwen3_next,
            dict(layer_types=["linear_attention", "sliding_attention"] * 2),
            "layer_types entry 'sliding_attention' is not supported (attnlab maps linear_attention, "
            "full_attention)",
        ),
    ],
)
def test_what_cannot_map_is_refused_in_one_line(build: object, changes: dict, message: str) -> None:
    config = hf_dict(build, **changes)
    cls = config["architectures"][0]
    with pytest.raises(ValueError) as err:
        hf_model_config(config)
    assert str(err.value) == f"checkpoint: {cls}: {message}"


LATENT = GPTConfig(
    vocab_size=VOCAB,
    d_model=32,
    n_layers=2,
    n_heads=4,
    d_ff=48,
    activation="swiglu",
    norm="rmsnorm",
    bias=False,
    max_seq_len=16,
    mixer="latent",
    pos=RopePos(rope_base=500.0),
)
NEXT = replace(
    LATENT,
    mixer="attention",
    n_layers=4,
    n_kv_heads=2,
    qk_norm=True,
    attn_gate="elementwise",
    layout="3*deltanet attention ...",
    mixers=MixerSizes(linear_k_heads=2),
)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (
            replace(LATENT, pos=RopePos(rope_scaling="yarn", rope_factor=2.0)),
            "model.pos.rope_scaling=yarn: no Hugging Face architecture holds this model; the nearest, "
            "DeepseekV3ForCausalLM, needs model.pos.rope_scaling=none",
        ),
        (
            replace(LATENT, bias=True),
            "model.bias=true: no Hugging Face architecture holds this model; the nearest, "
            "DeepseekV3ForCausalLM, needs model.bias=false",
        ),
        (
            replace(LATENT, layout="latent attention"),
            "model.layout=[full+latent,full]: no Hugging Face architecture holds this model; the nearest, "
            "DeepseekV3ForCausalLM, needs model.layout=[full+latent,full+latent]",
        ),
        (  # DiffLlama (without biases) and Llama (without the mixer) are one setting away: the first is named
            replace(LATENT, mixer="differential", bias=True),
            "model.layout=[full+differential,full+differential]: no Hugging Face architecture holds this "
            "model; the nearest, LlamaForCausalLM, needs model.layout=[full,full]",
        ),
        (
            replace(NEXT, attn_window=4, layout="3*deltanet sliding ..."),
            "model.attn_window=4: no Hugging Face architecture holds this model; the nearest, "
            "Qwen3NextForCausalLM, needs model.attn_window=null",
        ),
        (
            replace(NEXT, attn_gate="none"),
            "model.attn_gate=none: no Hugging Face architecture holds this model; the nearest, "
            "Qwen3NextForCausalLM, needs model.attn_gate=elementwise",
        ),
    ],
)
def test_a_mixer_model_no_architecture_holds_names_the_nearest(cfg: GPTConfig, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        choose_architecture(cfg)
    assert str(err.value) == message


def test_a_gated_qk_normed_llama_exports_as_qwen3_next() -> None:
    """Every layer full attention with Qwen3-Next's gate and QK-norm: Qwen3-Next holds it whole."""
    cfg = replace(NEXT, layout=None, mixers=MixerSizes())
    arch, hf_config = choose_architecture(cfg)
    assert (arch.model_type, hf_config["layer_types"]) == ("qwen3_next", ["full_attention"] * 4)


def test_init_from_takes_the_mixers_and_their_sizes_from_the_checkpoint(tmp_path: Path) -> None:
    """``model.init_from=<dir>`` (before a run exists): the layout and mixer sizes are the checkpoint's,
    and a size the run sets against it is refused in one line."""
    from attnlab.run.pretrained import resolve_init_from
    from attnlab.schema.run import RunConfig

    qwen3_next().save_pretrained(tmp_path)
    run = RunConfig()
    run = replace(run, model=replace(run.model, init_from=str(tmp_path)))
    model = resolve_init_from(run, explicit={"family"}).model
    assert (model.layout, model.mixers) == (
        CASES["qwen3_next"][1]["layout"],
        CASES["qwen3_next"][1]["mixers"],
    )
    clash = replace(run, model=replace(run.model, mixers=MixerSizes(linear_k_heads=4)))
    with pytest.raises(ConfigError) as err:
        resolve_init_from(clash, explicit={"family", "mixers.linear_k_heads"})
    assert str(err.value) == (
        f"model.mixers.linear_k_heads=4: contradicts the checkpoint model.init_from={tmp_path}, which has "
        "mixers.linear_k_heads=2; leave it out to take the checkpoint's"
    )
