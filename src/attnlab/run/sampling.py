"""A checkpoint's predictions as ``attnlab-sample`` prints them, in this process: the device and the
kind of input checked, the memory the samples need bounded, then the family's own sampling
(``attnlab.run.families``)."""

from __future__ import annotations

from typing import Any

from attnlab.schema.commands import SampleCommand
from attnlab.schema.errors import ConfigError


def sample_checkpoint(cmd: SampleCommand, model_changes: dict[str, Any] | None = None) -> str:
    """The checkpoint's predictions for ``cmd``'s prompt or image; ``model_changes`` (dotted ``model.*``
    keys that hold no weights) change the model first."""
    from attnlab.checkpoint import load_checkpoint  # torch: only once the command line is valid
    from attnlab.run.devices import check_device
    from attnlab.run.families import FAMILY_COMMANDS

    check_device("device", cmd.device)
    loaded = load_checkpoint(cmd.ckpt_path, cmd.device, model_changes=model_changes or {})
    refuse_other_inputs(cmd, loaded.model.input_kind, loaded.family)
    if loaded.model.input_kind == "tokens":
        check_sampling_fits(cmd, loaded.model.cfg)
    return FAMILY_COMMANDS[loaded.family].sample(loaded, cmd)


def check_sampling_fits(cmd: SampleCommand, cfg: Any) -> None:
    """``num_samples`` sequences of ``max_new_tokens`` tokens fit in the device's free memory: their ids,
    their KV cache (as long as the context a model slides at: ``max_context``, a learned table's
    length, else the whole sequence) and one step's logits (``run.memory.sampling_bytes``)."""
    from attnlab.run.memory import check_fits, sampling_bytes
    from attnlab.schema.pos import LearnedPos

    prompts = list(cmd.prompts) or [cmd.prompt]
    samples = cmd.num_samples * len(prompts)
    total = max(len(p) for p in prompts) + 1 + cmd.max_new_tokens  # at most a token a character
    cache = total if cmd.use_cache else 0
    if cmd.max_context is not None:
        cache = min(cache, cmd.max_context)
    elif isinstance(getattr(cfg, "pos", None), LearnedPos):
        cache = min(cache, cfg.max_seq_len)
    heads = cfg.n_heads
    kv_dim = (getattr(cfg, "n_kv_heads", None) or heads) * (cfg.d_model // heads)
    layers = cfg.n_layers + (getattr(cfg, "n_decoder_layers", None) or 0)
    needed = sampling_bytes(samples, total, cache, layers, kv_dim, cfg.vocab_size or 0)
    what = f"{samples} sample(s) of up to {total} tokens (their ids, KV cache and logits)"
    key, value = (
        ("num_samples", cmd.num_samples) if cmd.num_samples > 1 else ("max_new_tokens", cmd.max_new_tokens)
    )
    check_fits(key, value, needed, what, cmd.device)


def refuse_other_inputs(cmd: SampleCommand, input_kind: str, family: str) -> None:
    """The model would ignore inputs of the other kind (``image=`` for a model that reads text,
    ``prompt=`` for a ViT): refuse them rather than print an answer to another question."""
    if input_kind == "tokens":
        ignored = {"image": cmd.image, "images": list(cmd.images)}
        reads = "text: give prompt=... (or prompts=[...])"
    else:
        ignored = {"prompt": cmd.prompt, "prompts": list(cmd.prompts)}
        reads = "images: give image=<file> (or images=[...])"
    key = next((k for k, v in ignored.items() if v), None)
    if key is not None:
        raise ConfigError(key, ignored[key], f"a {family} checkpoint reads {reads}")
