"""Schemas of the commands that read a checkpoint: ``attnlab-sample``, ``attnlab-explain`` and
``attnlab-compress``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from attnlab.schema.choice import Choice
from attnlab.schema.errors import ConfigError, at_least_one, not_negative, positive


@dataclass
class SampleCommand:
    """The keys of ``attnlab-sample``: what a checkpoint predicts, by family.

    gpt: sampled continuations of ``prompt`` (or of each of ``prompts``, batched); seq2seq: greedy or
    beam-search outputs for ``prompt`` (the source text); bert: fill-mask at each ``<mask>`` of
    ``prompt`` (masked LM), or class probabilities (classifier); vit: class probabilities of ``image``
    (or of each of ``images``).
    """

    ckpt_path: str = MISSING
    prompt: str = ""  # gpt: empty starts from <bos> (or a newline); seq2seq needs a source text
    prompts: list[str] = field(default_factory=list)  # generated as one left-padded batch; overrides prompt
    image: str | None = None  # vit: an image file
    images: list[str] = field(default_factory=list)  # vit: several image files
    device: str = "cpu"
    # model.* keys, composed untyped (model/_checkpoint) and applied to the checkpoint's model by its
    # class (attnlab.run.eval_data.model_changes): only keys that hold no weights may change
    # (schema.eval.eval_may_change), e.g. model.attn_backend=flex.
    model: Any = field(default_factory=dict)
    # decoder-only sampling
    num_samples: int = 1
    max_new_tokens: int = 200
    temperature: float = 0.8  # 0: greedy
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0
    stop: list[str] = field(default_factory=list)  # strings that end a sample, each one token
    stop_at_eos: bool = True
    seed: int = 0
    use_cache: bool = True
    compile: bool = False  # static KV cache, compiled graphs (CUDA graphs on a GPU): faster long samples
    # past this many tokens each one is predicted from the last max_context (nanoGPT's crop); None: a
    # learned-position model slides at its max_seq_len, others run on past it (with a note)
    max_context: int | None = None
    # encoder-decoder
    num_beams: int = 1  # 1: greedy
    length_penalty: float = 1.0
    n_best: int = 1
    early_stopping: bool = True
    # encoders and ViT
    num_predictions: int = 5  # top tokens per mask, top classes per input
    mask_token: str = "<mask>"

    def check(self) -> None:
        """The counts and limits whatever the checkpoint's family (one that ignores a key still refuses
        a value no family could use: ``num_beams=0`` on a GPT checkpoint)."""
        for name in ("num_samples", "num_beams", "n_best", "num_predictions"):
            at_least_one(name, getattr(self, name))
        not_negative("max_new_tokens", self.max_new_tokens)
        not_negative("temperature", self.temperature)
        positive("top_k", self.top_k, allow_none=True)
        positive("repetition_penalty", self.repetition_penalty)


@dataclass
class ExplainCommand:
    """The keys of ``attnlab-explain``: why the model decided what it decided, for one input, as PNGs
    and an index.html in one folder (``out_dir``; under -m, one subfolder per job)."""

    ckpt_path: str = MISSING
    input: str = MISSING  # text (bert masked LM: with <mask>); a ViT: an image file, or digits:<index>
    #   (the index-th image of the run's digits test split)
    target: str | None = None  # seq2seq: the output to explain; None: the model's greedy output
    layers: list[int] = field(default_factory=lambda: [0, -1])  # of each stack (negative: from the end)
    heads: list[int] | None = None  # None: all
    head_importance: bool = True  # Michel et al. 2019 over the run's validation batches
    importance_batches: int = 8
    logit_lens: bool = False  # each layer's top tokens through the final norm and head (token heads only)
    corrupted: str | None = None  # activation patching from input into this input of the same length
    answer: str | None = None  # patching's metric: logit[answer] - logit[wrong] (a token, or a class)
    wrong: str | None = None
    probe: str | None = None  # linear probes per layer over validation batches: token or class
    probe_site: str = "resid_post"  # the kind of site probed (resid_pre, attn_out, ffn_out, ...)
    ablate: list[str] = field(default_factory=list)  # sites or heads (layers.1.attn_heads.3): the
    #   validation loss with each ablated, and all together
    ablation: str = "zero"  # zero, or mean (each site's mean over the validation batches)
    data_batches: int = 8  # validation batches that probes and ablations read
    out_dir: str = "outputs/explain/${now:%Y-%m-%d}/${now:%H-%M-%S}"
    device: str = "cpu"
    mask_token: str = "<mask>"
    max_new_tokens: int = 64  # seq2seq: length limit of the greedy output

    def check(self) -> None:
        at_least_one("importance_batches", self.importance_batches)
        if self.corrupted is not None and (self.answer is None or self.wrong is None):
            raise ConfigError("corrupted", self.corrupted, "patching needs answer= and wrong= (its metric)")
        if self.probe not in (None, "token", "class"):
            raise ConfigError(
                "probe", self.probe, "token (the current token) or class (the example's class), or null"
            )
        if self.ablation not in ("zero", "mean"):
            raise ConfigError("ablation", self.ablation, "zero or mean")
        at_least_one("data_batches", self.data_batches)


class CompressMethod(Choice):
    """How ``attnlab-compress`` makes a checkpoint smaller."""

    int8 = "int8"  # the Linear weights as int8 with one scale per output channel (torchao, weight-only)
    prune_heads = "prune_heads"  # the least important attention heads removed (Michel et al. 2019)


@dataclass
class CompressCommand:
    """The keys of ``attnlab-compress``: a smaller checkpoint of a trained one, that attnlab-eval,
    attnlab-sample and attnlab-explain read like any other."""

    ckpt_path: str = MISSING
    method: CompressMethod = CompressMethod.int8
    out: str | None = None  # the new file to write; None: ``<method>-<name>`` next to ckpt_path
    overwrite: bool = False  # replace ``out`` where it exists
    # method=prune_heads
    fraction: float = 0.25  # the share of all attention heads to remove, in [0, 1)
    importance_batches: int = 8  # validation batches of the run that head importance averages over
    finetune_steps: int = 0  # training steps on the run's training data after pruning (0: none)

    def check(self) -> None:
        if not 0.0 <= self.fraction < 1.0:
            raise ConfigError("fraction", self.fraction, "the share of heads to remove: a number in [0, 1)")
        at_least_one("importance_batches", self.importance_batches)
        not_negative("finetune_steps", self.finetune_steps)


class ExportFormat(Choice):
    """What ``attnlab-export`` writes."""

    hf = "hf"  # a Hugging Face directory: config.json, model.safetensors, the tokenizer


@dataclass
class ExportCommand:
    """The keys of ``attnlab-export``: a checkpoint as a directory that another library loads."""

    ckpt_path: str = MISSING
    format: ExportFormat = ExportFormat.hf
    out: str = MISSING  # the directory to create (it must not exist)
