"""``attnlab-explain``: explain one input of a checkpoint into a folder of PNGs and an index.html.

attnlab-explain ckpt_path=outputs/.../checkpoints/last.ckpt input="To be, or not"
attnlab-explain ckpt_path=<bert mlm run> input="the <mask> sat" layers=[0,1,2] heads=[0]
attnlab-explain ckpt_path=<seq2seq run> input="march 3, 2021" out_dir=explained/
attnlab-explain ckpt_path=<vit run> input=digit.png head_importance=false
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import MISSING, DictConfig

from attnlab.config import ConfigError, typed
from attnlab.generate.common import model_device
from attnlab.sample import user_errors_as_one_line
from attnlab.training.cli import run_hydra

if TYPE_CHECKING:
    from torch import Tensor

    from attnlab.explain.pipeline import Example
    from attnlab.generate.checkpoint import Loaded


@dataclass
class ExplainCommand:
    """The keys of conf/explain.yaml."""

    ckpt_path: str = MISSING
    input: str = MISSING
    target: str | None = None
    layers: list[int] = field(default_factory=lambda: [0, -1])
    heads: list[int] | None = None
    head_importance: bool = True
    importance_batches: int = 8
    out_dir: str = "explain"
    device: str = "cpu"
    mask_token: str = "<mask>"
    max_new_tokens: int = 64


def main() -> None:
    """Console script ``attnlab-explain`` (also ``python -m attnlab.explain``)."""
    run_hydra(explain_job, "explain")


def explain_job(config: DictConfig) -> None:
    """The Hydra task: write the explanation and print where its page is."""
    from hydra.core.hydra_config import HydraConfig

    folder = Path(HydraConfig.get().runtime.output_dir)  # out_dir, or its job folder under -m
    with user_errors_as_one_line(), removed_if_unwritten(folder):
        cmd = typed(config, ExplainCommand)
        if cmd.importance_batches < 1:
            raise ConfigError("importance_batches", cmd.importance_batches, "must be at least 1")
        print(explain_checkpoint(cmd, folder))


@contextmanager
def removed_if_unwritten(folder: Path) -> Iterator[None]:
    """On an error before the page is written, take away what Hydra put into ``folder`` (and it, if empty)."""
    try:
        yield
    except BaseException:
        if not (folder / "index.html").exists():
            shutil.rmtree(folder / ".hydra", ignore_errors=True)
            (folder / "explain.log").unlink(missing_ok=True)
            with suppress(OSError):
                folder.rmdir()
        raise


def check_selection(cmd: ExplainCommand, model_cfg: object) -> None:
    """``layers`` and ``heads`` must exist in the model (checked before anything is written)."""
    n_layers = min(model_cfg.n_layers, model_cfg.n_decoder_layers or model_cfg.n_layers)
    if not cmd.layers or any(not -n_layers <= i < n_layers for i in cmd.layers):
        raise ConfigError(
            "layers",
            cmd.layers,
            f"the model's stacks have {n_layers} layers: indices -{n_layers}..{n_layers - 1}",
        )
    n_heads = model_cfg.n_heads
    if cmd.heads is not None and (not cmd.heads or any(not -n_heads <= h < n_heads for h in cmd.heads)):
        raise ConfigError(
            "heads", cmd.heads, f"the model has {n_heads} heads: indices 0..{n_heads - 1}, or null for all"
        )


def explain_checkpoint(cmd: ExplainCommand, folder: Path) -> Path:
    """Load the checkpoint, prepare the input, write everything into ``folder``; returns index.html."""
    from attnlab.explain.pipeline import explain_to_folder
    from attnlab.generate.checkpoint import load_checkpoint, run_datamodule

    loaded = load_checkpoint(cmd.ckpt_path, cmd.device)
    check_selection(cmd, loaded.model.cfg)
    datamodule = run_datamodule(loaded) if cmd.head_importance or loaded.family == "vit" else None
    example = build_example(loaded, cmd, datamodule)
    return explain_to_folder(
        loaded.model,
        example,
        folder,
        layers=cmd.layers,
        heads=cmd.heads,
        importance_batches=datamodule.val_dataloader() if cmd.head_importance else None,
        max_batches=cmd.importance_batches,
        title=f"attnlab explain: {loaded.path}",
    )


def top_line(probs: Tensor, name: Callable[[int], str]) -> str:
    """The five most likely outcomes with their probabilities, on one line."""
    top = probs.topk(min(5, probs.numel()))
    return ", ".join(f"{name(i)} {p:.3f}" for p, i in zip(top.values.tolist(), top.indices.tolist()))


def build_example(loaded: Loaded, cmd: ExplainCommand, datamodule: object) -> Example:
    """The input as a batch of one on the model's device, labelled, with a line saying what the model predicts."""
    if loaded.family == "vit":
        return image_example(loaded, cmd, datamodule)
    if loaded.family == "seq2seq":
        return seq2seq_example(loaded, cmd)
    return text_example(loaded, cmd)


def image_example(loaded: Loaded, cmd: ExplainCommand, datamodule: object) -> Example:
    """The image file, normalised as the run normalised its images, and the predicted classes."""
    from attnlab.explain.pipeline import Example
    from attnlab.generate import image_probabilities, load_images
    from attnlab.generate.checkpoint import image_normalisation

    cfg = loaded.model.cfg
    image = load_images([cmd.input], image_size=cfg.image_size, channels=cfg.channels)[0]
    mean, std = image_normalisation(datamodule)
    pixels = ((image - mean) / std).unsqueeze(0).to(model_device(loaded.model))
    probs = image_probabilities(loaded.model, pixels)[0]
    return Example(
        {"pixel_values": pixels}, image=image, description=f"classes: {top_line(probs, loaded.class_name)}"
    )


def text_example(loaded: Loaded, cmd: ExplainCommand) -> Example:
    """gpt: the next-token prediction; bert: the masked position's prediction, or the classes."""
    import torch

    from attnlab.explain.inputs import run_model
    from attnlab.explain.pipeline import Example
    from attnlab.generate.checkpoint import encode_text, token_strings

    model, tok = loaded.model, loaded.tokenizer
    ids = encode_text(loaded, cmd.input, cmd.mask_token)
    focus = None
    if loaded.family == "bert" and model.cls_head is None:
        if tok.mask_id not in ids:
            raise ConfigError(
                "input", cmd.input, f"a masked-LM checkpoint explains a {cmd.mask_token!r}: put one in"
            )
        focus = ids.index(tok.mask_id)
    batch = {"input_ids": torch.tensor([ids], device=model_device(model))}
    with torch.no_grad():
        out = run_model(model, batch)[0].float()
    token = lambda i: repr(tok.decode([i]))  # noqa: E731
    if loaded.family == "gpt":
        description = f"next token: {top_line(out[-1].softmax(-1), token)}"
    elif focus is not None:
        description = f"position {focus}: {top_line(out[focus].softmax(-1), token)}"
    else:
        description = f"classes: {top_line(out.softmax(-1), loaded.class_name)}"
    return Example(batch, tokens=token_strings(tok, ids), focus=focus, description=description)


def seq2seq_example(loaded: Loaded, cmd: ExplainCommand) -> Example:
    """Source ids, and the target to explain: ``cmd.target`` or the greedy output, teacher-forced."""
    import torch

    from attnlab.explain.pipeline import Example
    from attnlab.generate import greedy_decode
    from attnlab.generate.checkpoint import encode_text, token_strings

    tok = loaded.tokenizer
    src = encode_text(loaded, cmd.input)
    if not src:
        raise ConfigError("input", cmd.input, "the source encodes to no tokens")
    if cmd.target is not None:
        target = tok.encode(cmd.target)
    else:
        target = greedy_decode(
            loaded.model,
            [src],
            bos_id=tok.bos_id,
            eos_id=tok.eos_id,
            max_new_tokens=cmd.max_new_tokens,
            pad_id=tok.pad_id,
        )[0]
    tgt_in = [tok.bos_id, *target]
    device = model_device(loaded.model)
    batch = {
        "src_ids": torch.tensor([src], device=device),
        "tgt_in": torch.tensor([tgt_in], device=device),
        "labels": torch.tensor([[*target, tok.eos_id]], device=device),
    }
    which = "given target" if cmd.target is not None else "greedy output"
    return Example(
        batch,
        tokens=token_strings(tok, src),
        target_tokens=token_strings(tok, tgt_in),
        description=f"{which}: {tok.decode(target)!r}",
    )
