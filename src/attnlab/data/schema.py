"""Schema of the ``data`` config group (torch-free, so validation runs before heavy imports)."""

from __future__ import annotations

from dataclasses import dataclass, field

DATA_KINDS = ("text", "listops", "text_classification", "pairs", "dates", "numbers", "reverse", "digits", "images")


@dataclass
class DataConfig:
    """What to load and how to batch it; fields a kind does not use are ignored."""

    kind: str = "text"
    path: str | None = None  # local file or folder (text, pairs, text_classification, images)
    hf_name: str | None = None  # a Hugging Face datasets name (online, cached), e.g. "wikitext"
    hf_config: str | None = None  # e.g. "wikitext-2-raw-v1"
    text_column: str = "text"
    label_column: str = "label"
    source_column: str = "source"
    target_column: str = "target"
    image_column: str = "image"
    tokenizer: str = "char"  # char | bpe | path to a tokenizer.json
    bpe_vocab_size: int = 1024
    seq_len: int = 128  # block size for language models, max length for the others
    batch_size: int = 32
    num_workers: int = 0
    pin_memory: bool = False
    val_fraction: float = 0.05
    test_fraction: float = 0.05
    num_train: int = 20000  # size of generated sets
    num_val: int = 1000
    num_test: int = 1000
    mlm_probability: float = 0.15
    listops_max_depth: int = 4
    listops_max_args: int = 5
    image_size: int | None = None  # None: the model's image_size
    augment: bool = False
    mean: list[float] = field(default_factory=list)  # empty: per-dataset defaults
    std: list[float] = field(default_factory=list)
    seed: int | None = None  # None: the run's seed
    cache_dir: str | None = None
