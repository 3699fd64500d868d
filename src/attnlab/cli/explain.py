"""``attnlab-explain``: explain one input of a checkpoint into a folder of PNGs and an index.html.

attnlab-explain ckpt_path=outputs/.../checkpoints/last.ckpt input="To be, or not"
attnlab-explain ckpt_path=<bert mlm run> input="the <mask> sat" layers=[0,1,2] heads=[0]
attnlab-explain ckpt_path=<seq2seq run> input="march 3, 2021" out_dir=explained/
attnlab-explain ckpt_path=<vit run> input=digits:0 head_importance=false
attnlab-explain ckpt_path=<vit run> input=my_digit.png
attnlab-explain ckpt_path=<gpt run> input="To be" logit_lens=true corrupted="To go" answer=e wrong=o
attnlab-explain ckpt_path=<gpt run> input="To be" probe=token ablate=[layers.1.attn_heads.0] ablation=mean
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnlab.cli.hydra.app import run_hydra
from attnlab.run.bad_input import check_writable, user_errors_as_one_line
from attnlab.schema.commands import ExplainCommand
from attnlab.schema.errors import ConfigError
from attnlab.schema.load import to_object


def main() -> None:
    """Console script ``attnlab-explain`` (also ``python -m attnlab.cli.explain``)."""
    run_hydra(explain_job, "explain")


def explain_job(config: DictConfig) -> None:
    """The Hydra task: write the explanation and print where its page is."""
    from hydra.core.hydra_config import HydraConfig

    from attnlab.cli.hydra.app import checked_by_validation

    folder = Path(HydraConfig.get().runtime.output_dir)  # out_dir, or its job folder under -m
    with user_errors_as_one_line(), removed_if_unwritten(folder):
        prepared = checked_by_validation(folder)
        if prepared is None:  # a multirun's job: checked here, in its own folder
            prepared = prepare_explanation(to_object(config))
        print(explain_checkpoint(prepared, folder))


def check_out_dir(config: DictConfig, run_dir: Path | None, overrides: list[str]) -> object:
    """Before Hydra makes the folder the explanation goes into (``out_dir``; a multirun's sweep folder):
    the folder is writable (Hydra's own error is a traceback), and for one run, everything the command
    checks of its input (``prepare_explanation``: the checkpoint, the selection, the input and the
    corrupted one), so that bad input leaves no folder. The job takes what this returns."""
    check_writable("out_dir", run_dir if run_dir is not None else config.hydra.sweep.dir)
    if run_dir is None:
        return config
    return prepare_explanation(to_object(config))


@contextmanager
def removed_if_unwritten(folder: Path) -> Iterator[None]:
    """On an error or a signal before the page is written, take away what this command wrote into
    ``folder`` (pictures of a half-written explanation included), what Hydra put there, and the folder
    if that leaves it empty; files that were there before stay."""
    page = folder / "index.html"
    before = {path: path.stat().st_mtime_ns for path in folder.iterdir()} if folder.is_dir() else {}
    try:
        yield
    except BaseException:
        if not page.exists() or before.get(page) == page.stat().st_mtime_ns:
            for path in folder.iterdir() if folder.is_dir() else []:
                if path in before:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            shutil.rmtree(folder / ".hydra", ignore_errors=True)
            (folder / "explain.log").unlink(missing_ok=True)
            with suppress(OSError):
                folder.rmdir()
        raise


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


if __name__ == "__main__":
    main()
