"""An attnlab model (and its tokenizer) as a Hugging Face directory: config.json, model.safetensors,
generation_config.json, tokenizer.json with its settings as a ``PreTrainedTokenizerFast``, and for an
image model preprocessor_config.json (the run's resize and normalisation as a ``ViTImageProcessor``).

The weights are saved under the names ``transformers`` saves them (tied ones once), and the directory
is then loaded by the architecture's own class, which must find every weight with its shape and none
left over: a misfit is an error here, not a warning when a user loads it. The directory is written
whole or not at all: into a temporary folder of its own beside ``out`` (``<out>.<random>.tmp``, made
by this process: never a leftover or a link), then a rename.
"""

from __future__ import annotations

import errno
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.models.hf.export import export_checkpoint
from attnlab.schema.errors import ConfigError

TMP_SUFFIX = ".tmp"
SPECIAL_KEYS = ("bos", "eos", "pad", "unk", "mask", "cls", "sep")  # roles -> <role>_token


def write_model(hf_config: dict, tensors: dict[str, Tensor], directory: Path) -> None:
    """config.json, model.safetensors (the on-disk names, with the base-model prefix where the
    architecture's class puts it) and, for a generator, generation_config.json."""
    import transformers
    from safetensors.torch import save_file

    rest = {k: v for k, v in hf_config.items() if k != "model_type"}
    config = transformers.AutoConfig.for_model(hf_config["model_type"], **rest)
    with torch.device("meta"):  # its names only
        model = getattr(transformers, hf_config["architectures"][0])(config)
    on_disk = on_disk_names(model)
    prefix = model.base_model_prefix + "."
    named = {name if name in on_disk else prefix + name: t.contiguous() for name, t in tensors.items()}
    directory.mkdir()
    config.save_pretrained(directory)
    save_file(named, directory / "model.safetensors", metadata={"format": "pt"})
    if model.can_generate():
        transformers.GenerationConfig.from_model_config(config).save_pretrained(directory)


def on_disk_names(model: nn.Module) -> set[str]:
    """The names under which ``model``'s weights are saved (transformers 5 renames some in memory)."""
    state = model.state_dict()
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:
        return set(state)
    return set(revert_weight_conversion(model, state))


def load_checked(directory: Path, **options: Any) -> nn.Module:
    """The model of ``directory`` as ``transformers`` loads it (``options`` for ``from_pretrained``),
    in eval mode; ValueError if a weight is missing, left over or of another shape (``from_pretrained``
    would only warn)."""
    import json

    import transformers

    cls = json.loads((directory / "config.json").read_text())["architectures"][0]
    with no_progress_bars():  # transformers' "Loading weights" bar, on stderr of an export that succeeds
        model, info = getattr(transformers, cls).from_pretrained(
            directory, output_loading_info=True, **options
        )
    wrong = {k: v for k, v in info.items() if k != "error_msgs" and v}
    if wrong:
        raise ValueError(f"{cls}: the exported weights do not fit ({wrong})")
    return model.eval()


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' progress bars off, then as they were. transformers turns the Hugging Face Hub's bars
    off and on with its own, so the hub's are put back as they were too."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as transformers_logging

    was_on, hub_was_off = transformers_logging.is_progress_bar_enabled(), are_progress_bars_disabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            transformers_logging.enable_progress_bar()
        if hub_was_off:
            disable_progress_bars()
        else:
            enable_progress_bars()


def special_token_ids(tokenizer: Any, hf_config: dict) -> dict[str, int | None]:
    """config.json's ``bos_token_id``, ``eos_token_id``, ``pad_token_id`` (and an encoder-decoder's
    ``decoder_start_token_id``, attnlab's ``<bos>``): the tokenizer's; else what the export set, else
    None (an architecture's defaults, GPT-2's 50256, would lie outside a small vocabulary)."""
    ids = getattr(tokenizer, "special_ids", {}) if tokenizer is not None else {}
    keys = {f"{role}_token_id": role for role in ("bos", "eos", "pad")} | {"decoder_start_token_id": "bos"}
    if not hf_config.get("is_encoder_decoder") and "decoder_start_token_id" not in hf_config:
        del keys["decoder_start_token_id"]
    return {key: ids[role] if role in ids else hf_config.get(key) for key, role in keys.items()}


def text_spells_specials(tokenizer: Any) -> bool:
    """Whether text may hold a special token's spelling that attnlab encodes as text ("<pad>" in a
    corpus is five characters to attnlab, the pad id to a Hugging Face tokenizer that matches its
    specials): a byte-level BPE or a tokenizer file can encode any text, a char vocabulary only where
    it has every character of a spelling (Tiny Shakespeare has no "<"), a word vocabulary never (its
    specials are words of its vocabulary). Where none can occur the specials stay matched, so that
    ``tokenizer.encode("<eos>")`` (lm-eval's stop sequence) still works on a vocabulary without "<"."""
    if tokenizer.split == "space":
        return False
    if tokenizer.split != "char":
        return True
    spellings = (tokenizer.hf.id_to_token(i) for i in tokenizer.special_ids.values())
    return any(all(c in tokenizer.vocab for c in spelling) for spelling in spellings)


def hf_tokenizer(tokenizer: Any, model: nn.Module) -> Any:
    """attnlab's tokenizer as a ``PreTrainedTokenizerFast`` with its special roles named. A classifier
    reads ``<cls>`` first, which attnlab's data puts there: the exported tokenizer adds it, so that
    ``tokenizer(text)`` is what the classifier was trained on. Special spellings in text stay text
    where attnlab's tokenizer can encode them (``split_special_tokens``, see ``text_spells_specials``)."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    hf = Tokenizer.from_str(tokenizer.hf.to_str())
    if getattr(model.cfg, "num_classes", 0) and tokenizer.cls_id is not None:
        cls = tokenizer.hf.id_to_token(tokenizer.cls_id)
        hf.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A", special_tokens=[(cls, tokenizer.cls_id)]
        )
    specials = {
        f"{role}_token": tokenizer.hf.id_to_token(i)
        for role, i in tokenizer.special_ids.items()
        if role in SPECIAL_KEYS
    }
    max_len = getattr(model.cfg, "max_seq_len", None)
    return PreTrainedTokenizerFast(
        tokenizer_object=hf,
        clean_up_tokenization_spaces=False,
        model_max_length=max_len,
        split_special_tokens=text_spells_specials(tokenizer),
        **specials,
    )


def image_processor(cfg: Any, mean: Tensor, std: Tensor) -> Any:
    """A ``ViTImageProcessor`` that prepares an image as attnlab's data modules do: pixels scaled to
    [0, 1], a bilinear resize to ``cfg.image_size``, ``(x - mean) / std`` with the run's statistics
    (one value repeated per channel), RGB for a 3-channel model. A grey model takes grey images
    (attnlab turns colour into grey first; the processor does not). The numbers agree exactly for
    images already at the model's size; a resize is PIL's, not torch's, and differs by about 1e-2."""
    from transformers import ViTImageProcessor

    channels = cfg.channels
    return ViTImageProcessor(
        do_resize=True,
        size={"height": cfg.image_size, "width": cfg.image_size},
        resample=2,  # PIL's BILINEAR
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        image_mean=mean.flatten().expand(channels).tolist(),
        image_std=std.flatten().expand(channels).tolist(),
        do_convert_rgb=channels == 3,
    )


def write_hf(
    model: nn.Module,
    out: str | Path,
    tokenizer: Any = None,
    normalisation: tuple[Tensor, Tensor] | None = None,
) -> str:
    """Write ``model`` (an attnlab ``FamilyModel``), ``tokenizer`` (attnlab's, or None) and, for an image
    model, the image processor of ``normalisation`` (the run's mean and std) to the new directory
    ``out``; returns its architecture class. A ConfigError, and nothing written, for a model no Hugging
    Face architecture expresses."""
    out = Path(out)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    hf_config, tensors = export_checkpoint(model.cfg, state)
    hf_config |= special_token_ids(tokenizer, hf_config)
    tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.", suffix=TMP_SUFFIX, dir=out.parent))
    try:
        write_model(hf_config, tensors, tmp / "model")
        load_checked(tmp / "model")
        if tokenizer is not None:
            hf_tokenizer(tokenizer, model).save_pretrained(tmp / "model")
        if normalisation is not None:
            image_processor(model.cfg, *normalisation).save_pretrained(tmp / "model")
        publish(tmp / "model", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return hf_config["architectures"][0]


def publish(written: Path, out: Path) -> None:
    """Rename the directory ``written`` to ``out`` in one step; ConfigError naming ``out`` where another
    process made it meanwhile (two exports to one folder at once: the first to finish wins)."""
    try:
        written.rename(out)
    except OSError as err:
        if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
            raise
        raise ConfigError(
            "out", str(out), "was written meanwhile by another process: name a new folder"
        ) from None
