"""An explanation of one input of a checkpoint as ``attnlab-explain`` writes it, in this process: the
selection (layers, heads, probe, ablations) and the input checked against the model, then the pages
written into a folder (``attnlab.explain``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from attnlab.schema.commands import ExplainCommand
from attnlab.schema.errors import ConfigError


@dataclass
class Prepared:
    """An explanation checked and ready to write: the command, its loaded checkpoint, the example and
    what patching, probes and ablations read."""

    cmd: ExplainCommand
    loaded: Any
    datamodule: Any
    example: Any
    corrupted: dict | None
    metric: Any
    batches: list | None


def prepare_explanation(cmd: ExplainCommand) -> Prepared:
    """Load the checkpoint and prepare the input, checking every setting against them (a ConfigError
    naming the first bad one); nothing is written."""
    from attnlab.checkpoint import load_checkpoint, run_datamodule
    from attnlab.run.devices import check_device
    from attnlab.run.families import FAMILY_COMMANDS

    cmd.check()
    check_device("device", cmd.device)
    loaded = load_checkpoint(cmd.ckpt_path, cmd.device)
    check_selection(cmd, loaded.model)
    check_input_kind(cmd.input, loaded.model)
    if cmd.logit_lens:
        check_lens(loaded.model)
    family = FAMILY_COMMANDS[loaded.family]
    datamodule = run_datamodule(loaded) if family.needs_data(cmd) else None
    example = family.explain_example(loaded, cmd, datamodule)
    corrupted, metric = patching_inputs(cmd, loaded, example, family, datamodule)
    batches = validation_batches(cmd, datamodule)
    check_probe_and_ablation(cmd, loaded.model, batches)
    return Prepared(cmd, loaded, datamodule, example, corrupted, metric, batches)


def explain_checkpoint(prepared: Prepared, folder: Path) -> Path:
    """Write the explanation ``prepared`` into ``folder``; returns its index.html."""
    from attnlab.explain import explain_to_folder

    cmd, loaded, datamodule, example = prepared.cmd, prepared.loaded, prepared.datamodule, prepared.example
    corrupted, metric, batches = prepared.corrupted, prepared.metric, prepared.batches
    return explain_to_folder(
        loaded.model,
        example,
        folder,
        layers=cmd.layers,
        heads=cmd.heads,
        importance_batches=datamodule.val_dataloader() if cmd.head_importance else None,
        max_batches=cmd.importance_batches,
        title=f"attnlab explain: {loaded.path}",
        lens=cmd.logit_lens,
        corrupted=corrupted,
        metric=metric,
        data_batches=batches,
        probe=cmd.probe,
        probe_site=cmd.probe_site,
        ablate_targets=cmd.ablate,
        ablation=cmd.ablation,
        token_text=lambda i: loaded.tokenizer.decode([i], skip_special=False) if loaded.tokenizer else str(i),
    )


def check_selection(cmd: ExplainCommand, model: object) -> None:
    """``layers`` and ``heads`` must exist in the model (checked before anything is written)."""
    from attnlab.blocks import TransformerStack

    n_layers = min(len(stack.layers) for stack in model.modules() if isinstance(stack, TransformerStack))
    if not cmd.layers or any(not -n_layers <= i < n_layers for i in cmd.layers):
        raise ConfigError(
            "layers",
            cmd.layers,
            f"the model's stacks have {n_layers} layers: indices -{n_layers}..{n_layers - 1}",
        )
    n_heads = model.cfg.n_heads
    if cmd.heads is not None and (not cmd.heads or any(not -n_heads <= h < n_heads for h in cmd.heads)):
        raise ConfigError(
            "heads", cmd.heads, f"the model has {n_heads} heads: indices 0..{n_heads - 1}, or null for all"
        )


def names_an_image(text: str) -> bool:
    """Whether an input names an image: ``digits:<index>``, or one word ending in an image suffix."""
    from attnlab.data.checks import IMAGE_SUFFIXES
    from attnlab.run.families import DIGITS_PREFIX

    one_word = text.strip() != "" and not any(c.isspace() for c in text)
    return text.startswith(DIGITS_PREFIX) or (one_word and Path(text).suffix.lower() in IMAGE_SUFFIXES)


def check_input_kind(text: str, model: object) -> None:
    """A text model refuses an image and a ViT refuses text, in one line, before anything is written.

    A ViT's input is an image file (which need not have an image suffix) or ``digits:<index>``, so
    text is what names no existing file.
    """
    if model.input_kind == "tokens" and names_an_image(text):
        raise ConfigError(
            "input",
            text,
            f"names an image, but this {model.family} checkpoint reads text: give text to explain",
        )
    if model.input_kind == "images" and not names_an_image(text) and not Path(text).is_file():
        raise ConfigError(
            "input",
            text,
            "a ViT checkpoint explains an image: give an image file, or digits:<index> for an image of "
            "the run's test split",
        )


def check_lens(model: object) -> None:
    """``logit_lens=true`` needs a token head (checked before anything is written)."""
    from attnlab.explain.lens import lens_parts

    try:
        lens_parts(model, {})
    except ValueError as err:
        raise ConfigError("logit_lens", True, str(err).removeprefix("logit lens: ")) from None


def answer_index(loaded: Any, text: str, tokens: bool) -> int:
    """A patching answer: the id of the one token ``text`` encodes to, or a class (its index or name)."""
    if tokens:
        ids = loaded.tokenizer.encode(text)
        if len(ids) != 1:
            raise ConfigError(
                "answer", text, f"must be one token of the vocabulary; it encodes to {len(ids)}"
            )
        return ids[0]
    names = loaded.label_names or []
    if text.isdigit():
        return int(text)
    if text not in names:
        raise ConfigError("answer", text, "must be a class index or one of the run's class names")
    return names.index(text)


def patching_inputs(
    cmd: ExplainCommand, loaded: Any, example: Any, family: Any, datamodule: Any
) -> tuple[dict | None, Any]:
    """The corrupted batch and the logit-difference metric of ``corrupted=``, ``answer=``, ``wrong=``."""
    import torch

    from attnlab.explain import logit_difference

    if cmd.corrupted is None:
        return None, None
    check_input_kind(cmd.corrupted, loaded.model)
    corrupted = family.explain_example(loaded, replace(cmd, input=cmd.corrupted), datamodule).batch
    check_same_shape(cmd.corrupted, corrupted, example.batch)
    with torch.no_grad():
        tokens = loaded.model.logits(example.batch).dim() == 3
    answer, wrong = (answer_index(loaded, text, tokens) for text in (cmd.answer, cmd.wrong))
    position = example.focus if example.focus is not None else -1
    return corrupted, logit_difference(answer, wrong, position)


def check_same_shape(text: str, corrupted: dict, clean: dict) -> None:
    """Patching copies activations position by position: ``corrupted=`` must give a batch of the
    clean input's shape (as many tokens), else a ConfigError naming both lengths."""
    for key, value in corrupted.items():
        shape, wanted = getattr(value, "shape", None), getattr(clean.get(key), "shape", None)
        if shape is not None and wanted is not None and shape != wanted:
            raise ConfigError(
                "corrupted",
                text,
                f"its {key} have shape {tuple(shape)}, the input's {tuple(wanted)}: patching needs a "
                "corrupted input of the same length (as many tokens) as input",
            )


def validation_batches(cmd: ExplainCommand, datamodule: Any) -> list | None:
    """The first ``data_batches`` validation batches, for probes and ablations (None: neither asked)."""
    from itertools import islice

    if cmd.probe is None and not cmd.ablate:
        return None
    return list(islice(datamodule.val_dataloader(), cmd.data_batches))


def check_probe_and_ablation(cmd: ExplainCommand, model: Any, batches: list | None) -> None:
    """The probed property exists in this family's batches, and every ablated target in the model
    (checked before anything is written)."""
    from attnlab.explain.ablation import resolve_target
    from attnlab.explain.probes import site_labels
    from attnlab.explain.sites import resid_sites

    if cmd.probe is not None:
        sites = resid_sites(model, cmd.probe_site)
        if not sites:
            raise ConfigError(
                "probe_site", cmd.probe_site, "a kind of site: resid_pre, resid_post, attn_out, ffn_out"
            )
        try:
            for site in sites:
                site_labels(model, batches[0], site, cmd.probe)
        except ValueError as err:
            raise ConfigError("probe", cmd.probe, str(err).split(": ", 1)[1]) from None
    for target in cmd.ablate:
        try:
            resolve_target(model, target)
        except ValueError as err:
            raise ConfigError("ablate", target, str(err).split(": ", 2)[2]) from None
