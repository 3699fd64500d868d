"""An attnlab model (and its tokenizer) as a Hugging Face directory: config.json, model.safetensors,
generation_config.json, and tokenizer.json with its settings as a ``PreTrainedTokenizerFast``.

``transformers`` itself writes the directory: the exported tensors are loaded into the architecture's
own class, built from the exported config, which checks every name and shape (a tensor left out, or
one it has no place for, is an error here rather than a warning when a user loads it), and its
``save_pretrained`` stores them as its ``from_pretrained`` expects (tied weights once). The directory
is written whole or not at all: ``<out>.tmp``, then a rename.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from torch import nn

from attnlab.models.hf.export import export_checkpoint

TMP_SUFFIX = ".tmp"
SPECIAL_KEYS = ("bos", "eos", "pad", "unk", "mask", "cls", "sep")  # roles -> <role>_token


def hf_model(hf_config: dict, tensors: dict) -> nn.Module:
    """The ``transformers`` model of ``hf_config`` holding ``tensors`` (on-disk names), checked."""
    import transformers

    rest = {k: v for k, v in hf_config.items() if k != "model_type"}
    config = transformers.AutoConfig.for_model(hf_config["model_type"], **rest)
    model = getattr(transformers, hf_config["architectures"][0])(config)
    keys = model.state_dict().keys()
    prefix = model.base_model_prefix + "."
    named = {name if name in keys else prefix + name: t for name, t in tensors.items()}
    missing, unexpected = model.load_state_dict(named, strict=False)
    shared = {p.data_ptr() for name, p in model.state_dict().items() if name in named}
    untied = [k for k in missing if model.state_dict()[k].data_ptr() not in shared]
    if untied or unexpected:
        raise ValueError(
            f"{hf_config['architectures'][0]}: exported weights do not fit (missing {untied}, unexpected {unexpected})"
        )
    return model.eval()


def special_token_ids(tokenizer: Any) -> dict[str, int | None]:
    """config.json's ``bos_token_id``, ``eos_token_id``, ``pad_token_id``: the tokenizer's, or None
    (an architecture's defaults, GPT-2's 50256, would lie outside a small vocabulary)."""
    ids = getattr(tokenizer, "special_ids", {}) if tokenizer is not None else {}
    return {f"{role}_token_id": ids.get(role) for role in ("bos", "eos", "pad")}


def hf_tokenizer(tokenizer: Any) -> Any:
    """attnlab's tokenizer as a ``PreTrainedTokenizerFast`` with its special roles named."""
    from transformers import PreTrainedTokenizerFast

    specials = {
        f"{role}_token": tokenizer.hf.id_to_token(i)
        for role, i in tokenizer.special_ids.items()
        if role in SPECIAL_KEYS
    }
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.hf, clean_up_tokenization_spaces=False, **specials
    )


def write_hf(model: nn.Module, out: str | Path, tokenizer: Any = None) -> str:
    """Write ``model`` (an attnlab ``FamilyModel``) and ``tokenizer`` (attnlab's, or None) to the new
    directory ``out``; returns its architecture class. A ConfigError, and nothing written, for a model
    no Hugging Face architecture expresses."""
    out = Path(out)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    hf_config, tensors = export_checkpoint(model.cfg, state)
    hf_config |= special_token_ids(tokenizer)
    hf = hf_model(hf_config, tensors)
    tmp = out.with_name(out.name + TMP_SUFFIX)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        hf.save_pretrained(tmp)
        if tokenizer is not None:
            hf_tokenizer(tokenizer).save_pretrained(tmp)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return hf_config["architectures"][0]
