"""What the commands do differently for each model family, in one registry (``FAMILY_COMMANDS``).

How a prompt is encoded, what ``attnlab-sample`` prints, which example ``attnlab-explain`` explains
and which model fields the task decides, registered for each family's config class like its model
class. Everything below the commands asks the model itself (``FamilyModel``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attnlab.checkpoint import Loaded, image_normalisation, run_datamodule, token_strings
from attnlab.data.image_loading import load_images
from attnlab.explain import Example
from attnlab.explain.labels import quoted_token
from attnlab.generate import (
    beam_search,
    class_probabilities,
    fill_mask,
    generate,
    greedy_decode,
    image_probabilities,
)
from attnlab.models.common import model_device
from attnlab.schema.builders import Builders
from attnlab.schema.commands import ExplainCommand, SampleCommand
from attnlab.schema.errors import ConfigError
from attnlab.schema.model import MODELS, BertConfig, GPTConfig, Seq2SeqConfig, ViTConfig
from attnlab.schema.task import MaskedLMTask, TaskConfig


def top_line(probs: Tensor, name: Callable[[int], str]) -> str:
    """The five most likely outcomes with their probabilities, on one line."""
    top = probs.topk(min(5, probs.numel()))
    return ", ".join(f"{name(i)} {p:.3f}" for p, i in zip(top.values.tolist(), top.indices.tolist()))


def headline(what: str, probs: Tensor, name: Callable[[int], str]) -> str:
    """The most likely outcome and its probability, for a picture's title: "predicted 7 (p=0.93)"."""
    p, i = probs.max(dim=-1)
    return f"{what} {name(int(i))} (p={float(p):.3g})"


def top_lines(probs: Tensor, loaded: Loaded, n: int) -> list[str]:
    """The ``n`` most likely classes, one indented line each."""
    top = probs.topk(min(n, probs.numel()))
    return [f"  {loaded.class_name(c)}: {p:.4f}" for p, c in zip(top.values.tolist(), top.indices.tolist())]


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
    return [*ids, tok.eos_id] if cmd.stop_at_eos and tok.eos_id is not None else ids


def next_prediction(loaded: Loaded, ids: list[int]) -> tuple[dict[str, Tensor], Tensor]:
    """The batch of one text and the model's output for it (its first row)."""
    batch = {"input_ids": torch.tensor([ids], device=model_device(loaded.model))}
    with torch.no_grad():
        return batch, loaded.model.logits(batch)[0].float()


def context_for(cfg: Any, longest: int, max_context: int | None) -> tuple[int | None, str]:
    """The context ``generate`` slides over for sequences of up to ``longest`` tokens, and a note when
    a sample goes past the length the model was trained on: a learned-position model slides at its
    table's size unless told otherwise; other encodings run on, said once."""
    trained = cfg.max_seq_len
    if longest <= trained and (max_context is None or longest <= max_context):
        return max_context, ""
    if max_context is not None:
        return max_context, f"note: each token past {max_context} is predicted from the last {max_context}"
    if cfg.pos.name == "learned":
        return trained, (
            f"note: past model.max_seq_len={trained} (the learned positional table) each token is "
            f"predicted from the last {trained} tokens, as nanoGPT's sample.py crops its context"
        )
    return None, (
        f"note: sampling up to {longest} tokens, past model.max_seq_len={trained}, the length the model was "
        f"trained on (pos={cfg.pos.name}); max_context={trained} slides the context instead"
    )


class FamilyCommands:
    """A family's behaviour in the commands; the defaults suit a family that reads text."""

    def model_updates(self, task: TaskConfig) -> dict[str, Any]:
        """Model fields that the task decides (which heads to build)."""
        return {}

    def encode(self, loaded: Loaded, text: str, mask_token: str = "<mask>") -> list[int]:
        """Token ids of ``text`` laid out as the run's data laid out its inputs."""
        return loaded.tokenizer.encode(text)

    def sample(self, loaded: Loaded, cmd: SampleCommand) -> str:
        """What ``attnlab-sample`` prints for the command's prompts (or images)."""
        raise NotImplementedError

    def needs_data(self, cmd: ExplainCommand) -> bool:
        """Whether the explanation needs the run's data module (validation batches, image statistics)."""
        return cmd.head_importance or cmd.probe is not None or bool(cmd.ablate)

    def explain_example(self, loaded: Loaded, cmd: ExplainCommand, datamodule: Any) -> Example:
        """The input as a batch of one, labelled, with a line saying what the model predicts."""
        raise NotImplementedError


class DecoderCommands(FamilyCommands):
    """gpt: sampled continuations; the next token explained."""

    def encode(self, loaded: Loaded, text: str, mask_token: str = "<mask>") -> list[int]:
        return loaded.tokenizer.encode(text) or loaded.tokenizer.start_ids()  # <bos>, else a newline

    def sample(self, loaded: Loaded, cmd: SampleCommand) -> str:
        prompts = [self.encode(loaded, text) for text in texts(cmd)]
        longest = max(len(p) for p in prompts) + cmd.max_new_tokens
        max_context, note = context_for(loaded.model.cfg, longest, cmd.max_context)
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
            pad_id=loaded.tokenizer.pad_id or 0,  # a char model has no <pad>: padding is masked anyway
            compile=cmd.compile,
            max_context=max_context,
        )
        blocks = [note] if note else []
        for i, new in enumerate(outputs):
            prompt = prompts[i // cmd.num_samples]
            header = f"--- prompt {i // cmd.num_samples}, sample {i % cmd.num_samples} ---"
            blocks.append(header + "\n" + loaded.tokenizer.decode(prompt + new))
        return "\n".join(blocks)

    def explain_example(self, loaded: Loaded, cmd: ExplainCommand, datamodule: Any) -> Example:
        tok = loaded.tokenizer
        ids = self.encode(loaded, cmd.input)
        batch, out = next_prediction(loaded, ids)
        token = lambda i: repr(tok.decode([i]))  # noqa: E731
        probs = out[-1].softmax(-1)
        return Example(
            batch,
            tokens=token_strings(tok, ids),
            prediction=headline("predicted next token", probs, lambda i: quoted_token(tok.decode([i]))),
            description=f"next token: {top_line(probs, token)}",
        )


class EncoderCommands(FamilyCommands):
    """bert: fill-mask for a masked-LM checkpoint, class probabilities for a classifier."""

    def model_updates(self, task: TaskConfig) -> dict[str, Any]:
        return {"mlm_head": isinstance(task, MaskedLMTask)}  # the masked-LM head only where it is trained

    def encode(self, loaded: Loaded, text: str, mask_token: str = "<mask>") -> list[int]:
        """A classifier's input starts with cls; in a masked-LM input ``mask_token`` becomes the mask id."""
        tok = loaded.tokenizer
        if loaded.model.cls_head is not None:
            return [tok.cls_id, *tok.encode(text)]
        pieces = text.split(mask_token)
        ids = tok.encode(pieces[0])
        for piece in pieces[1:]:
            ids += [tok.mask_id, *tok.encode(piece)]
        return ids

    def sample(self, loaded: Loaded, cmd: SampleCommand) -> str:
        tok, lines = loaded.tokenizer, []
        for text in texts(cmd):
            ids = torch.tensor([self.encode(loaded, text, cmd.mask_token)])
            lines.append(text)
            if loaded.model.cls_head is not None:
                lines += top_lines(class_probabilities(loaded.model, ids)[0], loaded, cmd.num_predictions)
                continue
            if cmd.mask_token not in text:
                raise ConfigError(
                    "prompt", text, f"a masked-LM checkpoint fills {cmd.mask_token!r}: put it in the prompt"
                )
            for fill in fill_mask(loaded.model, ids, mask_id=tok.mask_id, top_k=cmd.num_predictions):
                guesses = "  ".join(
                    f"{tok.decode([t], skip_special=False)!r} {p:.3f}"
                    for t, p in zip(fill.token_ids, fill.probs)
                )
                lines.append(f"  position {fill.position}: {guesses}")
        return "\n".join(lines)

    def explain_example(self, loaded: Loaded, cmd: ExplainCommand, datamodule: Any) -> Example:
        """A masked-LM checkpoint explains its prediction at the mask; a classifier its classes."""
        tok = loaded.tokenizer
        ids = self.encode(loaded, cmd.input, cmd.mask_token)
        focus = None
        if loaded.model.cls_head is None:
            if tok.mask_id not in ids:
                raise ConfigError(
                    "input", cmd.input, f"a masked-LM checkpoint explains a {cmd.mask_token!r}: put one in"
                )
            focus = ids.index(tok.mask_id)
        batch, out = next_prediction(loaded, ids)
        if focus is not None:
            token = lambda i: repr(tok.decode([i]))  # noqa: E731
            probs = out[focus].softmax(-1)
            quoted = lambda i: quoted_token(tok.decode([i]))  # noqa: E731
            prediction = headline(f"{cmd.mask_token} at position {focus}: predicted", probs, quoted)
            description = f"position {focus}: {top_line(probs, token)}"
        else:
            prediction = headline("predicted", out.softmax(-1), loaded.class_name)
            description = f"classes: {top_line(out.softmax(-1), loaded.class_name)}"
        return Example(
            batch, tokens=token_strings(tok, ids), focus=focus, prediction=prediction, description=description
        )


class Seq2SeqCommands(FamilyCommands):
    """seq2seq: greedy or beam-search outputs; the output (given or greedy) explained, teacher-forced."""

    def sample(self, loaded: Loaded, cmd: SampleCommand) -> str:
        tok = loaded.tokenizer
        if not any(texts(cmd)):
            raise ConfigError("prompt", repr(""), "a seq2seq checkpoint needs a source text: prompt='<text>'")
        sources = [self.encode(loaded, text) for text in texts(cmd)]
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

    def explain_example(self, loaded: Loaded, cmd: ExplainCommand, datamodule: Any) -> Example:
        tok = loaded.tokenizer
        src = self.encode(loaded, cmd.input)
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
        p = sequence_probability(loaded, batch)
        return Example(
            batch,
            tokens=token_strings(tok, src),
            target_tokens=token_strings(tok, tgt_in),
            output_tokens=token_strings(tok, [*target, tok.eos_id]),
            prediction=f"{which} {tok.decode(target)!r} (p={p:.3g} for the whole output)",
            description=f"{which}: {tok.decode(target)!r}",
        )


def sequence_probability(loaded: Loaded, batch: dict[str, Tensor]) -> float:
    """The model's probability of the batch's whole target (its ``labels``, eos included), teacher-forced."""
    with torch.no_grad():
        logp = loaded.model.logits(batch)[0].float().log_softmax(-1)
    return float(logp.gather(-1, batch["labels"][0].unsqueeze(-1)).sum().exp())


DIGITS_PREFIX = "digits:"


def read_image(text: str, loaded: Loaded, datamodule: Any) -> tuple[Tensor, int | None]:
    """The image (C, H, W) in [0, 1] at the model's size that ``text`` names, and its class if known.

    ``digits:<index>`` is the index-th image of the test split of the run's own digits data (as the
    run split it: same fractions and seed); anything else is an image file.
    """
    if not text.startswith(DIGITS_PREFIX):
        cfg = loaded.model.cfg
        return load_images([text], image_size=cfg.image_size, channels=cfg.channels)[0], None
    if datamodule.cfg.kind != "digits":
        raise ConfigError(
            "input",
            text,
            f"this run's data is data.kind={datamodule.cfg.kind}, not digits: give an image file",
        )
    test = datamodule.datasets["test"]
    index = text.removeprefix(DIGITS_PREFIX)
    if not index.isdigit() or int(index) >= len(test):
        raise ConfigError(
            "input",
            text,
            f"the run's digits test split has {len(test)} images: digits:0 .. digits:{len(test) - 1}",
        )
    return test.raw(int(index)), test.source.labels[int(index)]


class ImageCommands(FamilyCommands):
    """vit: class probabilities of image files, normalised as the run normalised its images."""

    def sample(self, loaded: Loaded, cmd: SampleCommand) -> str:
        paths = list(cmd.images) or ([cmd.image] if cmd.image else [])
        if not paths:
            raise ConfigError(
                "image", None, "a ViT checkpoint classifies images: give image=<file> or images=[...]"
            )
        datamodule = run_datamodule(loaded)
        mean, std = image_normalisation(datamodule)
        images = (torch.stack([read_image(path, loaded, datamodule)[0] for path in paths]) - mean) / std
        lines = []
        for path, row in zip(paths, image_probabilities(loaded.model, images)):
            lines += [path, *top_lines(row, loaded, cmd.num_predictions)]
        return "\n".join(lines)

    def needs_data(self, cmd: ExplainCommand) -> bool:
        return True  # the image normalisation of the run

    def explain_example(self, loaded: Loaded, cmd: ExplainCommand, datamodule: Any) -> Example:
        """An image file, or ``digits:<index>`` (an image of the run's test split, its class known)."""
        image, label = read_image(cmd.input, loaded, datamodule)
        mean, std = image_normalisation(datamodule)
        pixels = ((image - mean) / std).unsqueeze(0).to(model_device(loaded.model))
        probs = image_probabilities(loaded.model, pixels)[0]
        prediction = headline("predicted", probs, loaded.class_name)
        if label is not None:
            prediction += f", true {loaded.class_name(label)}"
        description = f"classes: {top_line(probs, loaded.class_name)}"
        return Example({"pixel_values": pixels}, image=image, prediction=prediction, description=description)


# Each family's command behaviour, registered for its config class (a subclass of a family's config
# behaves like it): FAMILY_COMMANDS.of(cfg), or FAMILY_COMMANDS[<model.family>].
FAMILY_COMMANDS: Builders[FamilyCommands] = Builders(MODELS, "command behaviour")
FAMILY_COMMANDS.builds(GPTConfig)(DecoderCommands())
FAMILY_COMMANDS.builds(BertConfig)(EncoderCommands())
FAMILY_COMMANDS.builds(Seq2SeqConfig)(Seq2SeqCommands())
FAMILY_COMMANDS.builds(ViTConfig)(ImageCommands())
