"""``attnlab-sample``: predictions of a trained checkpoint from the command line.

    attnlab-sample ckpt_path=outputs/.../checkpoints/last.ckpt prompt="ROMEO:" num_samples=3 top_k=40
    attnlab-sample ckpt_path=... prompts='[To be, Friends]' temperature=0    # a batch, greedy
    attnlab-sample ckpt_path=<seq2seq run> prompt="march 3, 2021" num_beams=4 n_best=2
    attnlab-sample ckpt_path=<bert mlm run> prompt="'the <mask> sat'"      # fill-mask
    attnlab-sample ckpt_path=<vit run> image=digit.png

The family of the checkpoint decides what is done (see conf/sample.yaml); the tokenizer is the one
saved with the checkpoint. Hydra's override grammar wants text with commas, brackets or ``<>``
quoted inside the shell's quotes: ``prompt="'To be, or not'"``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from omegaconf import MISSING, DictConfig

from attnlab.config import ConfigError, typed
from attnlab.training.cli import USER_ERRORS, one_line, run_hydra

if TYPE_CHECKING:
    from attnlab.generate.checkpoint import Loaded


@dataclass
class SampleCommand:
    """The keys of conf/sample.yaml."""

    ckpt_path: str = MISSING
    prompt: str = "\n"
    prompts: list[str] = field(default_factory=list)
    image: str | None = None
    images: list[str] = field(default_factory=list)
    device: str = "cpu"
    num_samples: int = 1
    max_new_tokens: int = 200
    temperature: float = 0.8
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0
    stop: list[str] = field(default_factory=list)
    stop_at_eos: bool = True
    seed: int = 0
    use_cache: bool = True
    num_beams: int = 1
    length_penalty: float = 1.0
    n_best: int = 1
    early_stopping: bool = True
    num_predictions: int = 5
    mask_token: str = "<mask>"


def main() -> None:
    """Console script ``attnlab-sample`` (also ``python -m attnlab.sample``)."""
    run_hydra(sample_job, "sample")


def sample_job(config: DictConfig) -> None:
    """The Hydra task: print the checkpoint's predictions; bad input ends with one ``error:`` line."""
    with user_errors_as_one_line():
        cmd = typed(config, SampleCommand)
        from attnlab.generate.checkpoint import load_checkpoint

        loaded = load_checkpoint(cmd.ckpt_path, cmd.device)
        run = {"gpt": sample_decoder, "seq2seq": sample_seq2seq, "bert": sample_encoder, "vit": sample_images}
        print(run[loaded.family](loaded, cmd))


@contextmanager
def user_errors_as_one_line() -> Iterator[None]:
    """Bad input (config, checkpoint, image) exits with status 2 and one ``error:`` line, no traceback."""
    try:
        yield
    except USER_ERRORS as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        sys.exit(2)


def texts(cmd: SampleCommand) -> list[str]:
    return list(cmd.prompts) or [cmd.prompt]


def stop_ids(loaded: Loaded, cmd: SampleCommand) -> list[int]:
    """The ids of the stop strings (each must be one token), plus eos when asked."""
    tok, ids = loaded.tokenizer, []
    for text in cmd.stop:
        encoded = tok.encode(text)
        if len(encoded) != 1:
            raise ConfigError(
                "stop", cmd.stop, f"{text!r} is {len(encoded)} tokens; each stop string must be one token"
            )
        ids += encoded
    return [*ids, tok.eos_id] if cmd.stop_at_eos else ids


def sample_decoder(loaded: Loaded, cmd: SampleCommand) -> str:
    from attnlab.generate import generate
    from attnlab.generate.checkpoint import encode_text

    prompts = [encode_text(loaded, text) for text in texts(cmd)]
    outputs = generate(
        loaded.model,
        prompts,
        max_new_tokens=cmd.max_new_tokens,
        temperature=cmd.temperature,
        top_k=cmd.top_k,
        top_p=cmd.top_p,
        repetition_penalty=cmd.repetition_penalty,
        stop_tokens=stop_ids(loaded, cmd),
        num_samples=cmd.num_samples,
        seed=cmd.seed,
        use_cache=cmd.use_cache,
        pad_id=loaded.tokenizer.pad_id,
    )
    blocks = []
    for i, new in enumerate(outputs):
        prompt = prompts[i // cmd.num_samples]
        header = f"--- prompt {i // cmd.num_samples}, sample {i % cmd.num_samples} ---"
        blocks.append(header + "\n" + loaded.tokenizer.decode(prompt + new))
    return "\n".join(blocks)


def sample_seq2seq(loaded: Loaded, cmd: SampleCommand) -> str:
    from attnlab.generate import beam_search
    from attnlab.generate.checkpoint import encode_text

    tok = loaded.tokenizer
    sources = [encode_text(loaded, text) for text in texts(cmd)]
    results = beam_search(
        loaded.model,
        sources,
        bos_id=tok.bos_id,
        eos_id=tok.eos_id,
        num_beams=cmd.num_beams,
        max_new_tokens=cmd.max_new_tokens,
        length_penalty=cmd.length_penalty,
        early_stopping=cmd.early_stopping,
        n_best=cmd.n_best,
        pad_id=tok.pad_id,
        use_cache=cmd.use_cache,
    )
    lines = []
    for text, hyps in zip(texts(cmd), results):
        lines.append(f"{text}")
        lines += [f"  -> {tok.decode(h.tokens)}    (score {h.score:.4f})" for h in hyps]
    return "\n".join(lines)


def sample_encoder(loaded: Loaded, cmd: SampleCommand) -> str:
    import torch

    from attnlab.generate import class_probabilities, fill_mask
    from attnlab.generate.checkpoint import encode_text

    tok, lines = loaded.tokenizer, []
    for text in texts(cmd):
        ids = torch.tensor([encode_text(loaded, text, cmd.mask_token)])
        lines.append(text)
        if loaded.model.cls_head is not None:
            probs = class_probabilities(loaded.model, ids)[0]
            top = probs.topk(min(cmd.num_predictions, probs.numel()))
            lines += [
                f"  {loaded.class_name(c)}: {p:.4f}"
                for p, c in zip(top.values.tolist(), top.indices.tolist())
            ]
            continue
        if cmd.mask_token not in text:
            raise ConfigError(
                "prompt", text, f"a masked-LM checkpoint fills {cmd.mask_token!r}: put it in the prompt"
            )
        for fill in fill_mask(loaded.model, ids, mask_id=tok.mask_id, top_k=cmd.num_predictions):
            guesses = "  ".join(
                f"{tok.decode([t], skip_special=False)!r} {p:.3f}" for t, p in zip(fill.token_ids, fill.probs)
            )
            lines.append(f"  position {fill.position}: {guesses}")
    return "\n".join(lines)


def sample_images(loaded: Loaded, cmd: SampleCommand) -> str:

    from attnlab.generate import image_probabilities, load_images
    from attnlab.generate.checkpoint import image_normalisation, run_datamodule

    paths = list(cmd.images) or ([cmd.image] if cmd.image else [])
    if not paths:
        raise ConfigError(
            "image", None, "a ViT checkpoint classifies images: give image=<file> or images=[...]"
        )
    mean, std = image_normalisation(run_datamodule(loaded))
    cfg = loaded.model.cfg
    images = load_images(paths, image_size=cfg.image_size, channels=cfg.channels, mean=mean, std=std)
    probs = image_probabilities(loaded.model, images)
    lines = []
    for path, row in zip(paths, probs):
        top = row.topk(min(cmd.num_predictions, row.numel()))
        lines.append(path)
        lines += [
            f"  {loaded.class_name(c)}: {p:.4f}" for p, c in zip(top.values.tolist(), top.indices.tolist())
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
