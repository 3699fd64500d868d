"""Schema of the ``data`` config group, its validation, and which family/task consumes which kind.

Torch-free, so ``attnlab-train`` validates a run before anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Which data kinds each (model family, task) pair can consume; the first kind is its offline default.
ACCEPTED_KINDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("gpt", "causal_lm"): ("text",),
    ("bert", "mlm"): ("text",),
    ("bert", "classification"): ("listops", "text_classification"),
    ("seq2seq", "seq2seq"): ("dates", "numbers", "reverse", "pairs"),
    ("vit", "classification"): ("digits", "images"),
}
DATA_KINDS = (
    "text",
    "listops",
    "text_classification",
    "pairs",
    "dates",
    "numbers",
    "reverse",
    "digits",
    "images",
)
GENERATED_KINDS = ("listops", "dates", "numbers", "reverse", "digits")  # need no path and no network
SPECIAL_TOKEN_COUNT = 7  # pad unk bos eos mask cls sep (attnlab.data.tokenizers.SPECIAL_TOKENS)


@dataclass
class DataConfig:
    """What to load and how to batch it; fields a kind does not use are ignored.

    Paths are used as given (relative ones against the working directory of the process): a
    config file may spell them with ``${oc.env:HOME}`` or ``${hydra:runtime.cwd}`` interpolations.
    Nothing is ever written under ``path``; Hugging Face and torchvision caches go to ``cache_dir``.
    """

    kind: str = "text"
    path: str | None = None  # local file or folder (text, pairs, text_classification, images)
    hf_name: str | None = None  # a Hugging Face datasets name (online, cached), e.g. "wikitext"
    hf_config: str | None = None  # e.g. "wikitext-2-raw-v1"
    hf_data_files: str | None = (
        None  # data_files for HF's generic builders: hf_name=text|csv|json|imagefolder
    )
    torchvision: str | None = None  # images: a torchvision.datasets class name, e.g. "CIFAR10" (vision extra)
    text_column: str = "text"
    label_column: str = "label"
    source_column: str = "source"
    target_column: str = "target"
    translation_column: str = "translation"  # pairs: a dict column {lang: text}, used when the langs are set
    source_lang: str | None = None
    target_lang: str | None = None
    image_column: str = "image"
    tokenizer: str = "char"  # char | bpe | path to a tokenizer.json (or a run directory holding one)
    bpe_vocab_size: int = 1024
    seq_len: int = 128  # block size for language models, max length for the others
    batch_size: int = 32
    num_workers: int = 0
    pin_memory: bool | None = None  # None: pinned exactly when the trainer runs on CUDA
    val_fraction: float = 0.05  # carved from the training data where the source has no such split
    test_fraction: float = 0.05
    num_train: int = 20000  # size of generated sets
    num_val: int = 1000
    num_test: int = 1000
    mlm_probability: float = 0.15
    listops_max_depth: int = 4
    listops_max_args: int = 5
    listops_op_prob: float = 0.25  # chance that an argument is itself an operation (LRA uses 0.25)
    reverse_max_len: int = 24
    image_size: int | None = None  # None: the model's image_size
    augment: bool = False  # random crop with padding (+ horizontal flip) on training images
    crop_padding: int = 4
    hflip: bool = True
    mean: list[float] = field(default_factory=list)  # empty: per-dataset defaults
    std: list[float] = field(default_factory=list)
    seed: int | None = None  # None: the run's seed
    cache_dir: str | None = None


def _sources(cfg: DataConfig) -> list[str]:
    return [k for k in ("path", "hf_name", "torchvision") if getattr(cfg, k)]


def validate_data_config(cfg: DataConfig) -> None:
    """Raise a one-line ValueError naming the first bad ``data.*`` value and what is allowed."""
    if cfg.kind not in DATA_KINDS:
        raise ValueError(f"data.kind={cfg.kind!r} is not a data kind; choose one of {', '.join(DATA_KINDS)}")
    for name in ("seq_len", "batch_size", "num_train", "num_val", "num_test"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"data.{name}={getattr(cfg, name)} must be at least 1")
    if cfg.num_workers < 0:
        raise ValueError(f"data.num_workers={cfg.num_workers} must be 0 or more")
    for name in ("val_fraction", "test_fraction"):
        if not 0.0 <= getattr(cfg, name) < 1.0:
            raise ValueError(f"data.{name}={getattr(cfg, name)} must be in [0, 1)")
    if cfg.val_fraction + cfg.test_fraction >= 1.0:
        raise ValueError(
            f"data.val_fraction + data.test_fraction = {cfg.val_fraction + cfg.test_fraction} leaves no training data"
        )
    if not 0.0 < cfg.mlm_probability < 1.0:
        raise ValueError(f"data.mlm_probability={cfg.mlm_probability} must be in (0, 1)")
    if cfg.tokenizer == "bpe" and cfg.bpe_vocab_size < 256 + SPECIAL_TOKEN_COUNT:
        raise ValueError(
            f"data.bpe_vocab_size={cfg.bpe_vocab_size} is below the 256 bytes + {SPECIAL_TOKEN_COUNT} special "
            f"tokens of a byte-level BPE; use at least {256 + SPECIAL_TOKEN_COUNT}"
        )
    if cfg.listops_max_depth < 1 or cfg.listops_max_args < 2:
        raise ValueError(
            f"data.listops_max_depth={cfg.listops_max_depth} / data.listops_max_args={cfg.listops_max_args}: "
            "need a depth of at least 1 and at least 2 arguments"
        )
    if not 0.0 <= cfg.listops_op_prob < 1.0:
        raise ValueError(f"data.listops_op_prob={cfg.listops_op_prob} must be in [0, 1)")
    if cfg.reverse_max_len < 1:
        raise ValueError(f"data.reverse_max_len={cfg.reverse_max_len} must be at least 1")
    if cfg.image_size is not None and cfg.image_size < 1:
        raise ValueError(f"data.image_size={cfg.image_size} must be positive (or null: the model's)")
    if cfg.crop_padding < 0:
        raise ValueError(f"data.crop_padding={cfg.crop_padding} must be 0 or more")
    if len(cfg.mean) != len(cfg.std) or len(cfg.mean) not in (0, 1, 3):
        raise ValueError(
            f"data.mean={list(cfg.mean)} / data.std={list(cfg.std)}: give both with 1 or 3 values, or leave both empty"
        )
    if any(s <= 0 for s in cfg.std):
        raise ValueError(f"data.std={list(cfg.std)} must be positive")
    if (cfg.source_lang is None) != (cfg.target_lang is None):
        raise ValueError(
            f"data.source_lang={cfg.source_lang!r} / data.target_lang={cfg.target_lang!r}: set both or neither"
        )
    _validate_source(cfg)


def _validate_source(cfg: DataConfig) -> None:
    sources = _sources(cfg)
    if len(sources) > 1:
        raise ValueError(f"data.{sources[0]} and data.{sources[1]} are both set; give one data source")
    if cfg.hf_data_files and not cfg.hf_name:
        raise ValueError(
            f"data.hf_data_files={cfg.hf_data_files!r} needs data.hf_name (e.g. text, csv, json or imagefolder)"
        )
    if cfg.torchvision and cfg.kind != "images":
        raise ValueError(
            f"data.torchvision={cfg.torchvision!r} only applies to data.kind=images, not {cfg.kind!r}"
        )
    if cfg.kind in GENERATED_KINDS and sources:
        raise ValueError(
            f"data.kind={cfg.kind!r} is generated by attnlab and reads no data.{sources[0]}; "
            "use data.kind=text, text_classification, pairs or images for your own data"
        )
    if cfg.kind in ("text_classification", "pairs") and not sources:
        raise ValueError(f"data.kind={cfg.kind!r} needs data.path (a local file or folder) or data.hf_name")
    if cfg.kind == "images" and not sources:
        raise ValueError(
            "data.kind='images' needs data.path (a folder of class folders), data.hf_name or data.torchvision"
        )


def compatible(family: str, task: str, kind: str) -> bool:
    """Whether a model of ``family`` trained on ``task`` can consume data of ``kind``."""
    return kind in ACCEPTED_KINDS.get((family, task), ())


def check_compatible(family: str, task: str, kind: str) -> None:
    """Raise a one-line ValueError unless (family, task) exists and accepts ``data.kind``."""
    tasks = [t for f, t in ACCEPTED_KINDS if f == family]
    if not tasks:
        families = sorted({f for f, _ in ACCEPTED_KINDS})
        raise ValueError(f"model.family={family!r} is not a family; choose one of {', '.join(families)}")
    if (family, task) not in ACCEPTED_KINDS:
        raise ValueError(
            f"task.name={task!r} cannot train model.family={family!r}; it trains {', '.join(tasks)}"
        )
    accepted = ACCEPTED_KINDS[(family, task)]
    if kind not in accepted:
        raise ValueError(
            f"data.kind={kind!r} cannot be consumed by model.family={family!r} with task.name={task!r}; "
            f"it accepts data.kind in: {', '.join(accepted)}"
        )


def default_kind(family: str, task: str) -> str:
    """The offline default data kind of (family, task)."""
    if (family, task) not in ACCEPTED_KINDS:
        check_compatible(family, task, "")  # raises the error that names what is wrong
    return ACCEPTED_KINDS[(family, task)][0]
